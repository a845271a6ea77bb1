"""D4RL-style flat arrays (.hdf5 with h5py, .npz with numpy) <-> stores: episodes split as D4RL marks them,
every value exact both ways, D4RL's quirks (timeouts on the last step, next_observations at episode ends,
a trailing partial episode) round-trip, bad files get clear errors, and the commands work as a user runs them.

Files are built here in the real layout with h5py / numpy; the store side is read with plain numpy (the
episode table and the step files), not through the exporter's own reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from memmap_replay import (BufferFullError, InvalidDataError, NotAFolderError, OptionError, ReplayBuffer,  # noqa: E402
                           SchemaError, StoreNotFoundError, UnsupportedFormatError)
from memmap_replay.cli import main  # noqa: E402
from memmap_replay.interop import TargetExistsError, export_d4rl, import_d4rl  # noqa: E402

# episode ends: (last row, terminal, timeout); rows after the last end form a partial episode
ENDS = [(9, True, False), (20, False, True), (30, True, True), (31, True, False), (40, False, True)]
N = 57


def d4rl_arrays(seed: int = 0, n: int = N, ends=ENDS, next_observations: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {"observations": rng.standard_normal((n, 3)).astype(np.float32),
            "actions": rng.standard_normal((n, 2)).astype(np.float32),
            "rewards": rng.standard_normal(n).astype(np.float32),
            "terminals": np.zeros(n, bool), "timeouts": np.zeros(n, bool),
            "infos/qpos": rng.standard_normal((n, 4)),
            "infos/goal/xy": rng.integers(-5, 5, (n, 2)).astype(np.int16)}
    for row, terminal, timeout in ends:
        data["terminals"][row], data["timeouts"][row] = terminal, timeout
    if next_observations:  # the true next state: the next row inside an episode, a fresh one at its end
        nexts = np.concatenate([data["observations"][1:], rng.standard_normal((1, 3)).astype(np.float32)])
        for row, _, _ in ends:
            nexts[row] = rng.standard_normal(3)
        data["next_observations"] = nexts
    return data


METADATA = {"metadata/algorithm": "SAC", "metadata/seed": np.int64(7),
            "metadata/scores": np.array([1.5, np.nan, np.inf], np.float32),
            "metadata/policy/fc0/weight": np.ones((64, 32), np.float32)}  # too large for the card: left out


def write_file(path: Path, data: dict, metadata: dict | None = None, compressed: bool = False) -> Path:
    everything = {**data, **(metadata or {})}
    if path.suffix == ".npz":
        (np.savez_compressed if compressed else np.savez)(path, **everything)
    else:
        with h5py.File(path, "w") as file:
            for key, value in everything.items():
                file.create_dataset(key, data=value)
    return path


def read_file(path: Path) -> dict:
    if path.suffix == ".npz":
        with np.load(path) as data:
            return {key: data[key] for key in data.files}
    out = {}
    with h5py.File(path, "r") as file:
        file.visititems(lambda key, item: out.__setitem__(key, item[()]) if isinstance(item, h5py.Dataset) else None)
    return out


def store_contents(folder: Path) -> list[dict]:
    """Every live episode of a store, read with plain numpy: steps, final row, end code, meta values."""
    meta = json.loads((folder / "meta.json").read_text())
    state, slots_n = meta["state"], meta["capacity"]["max_episodes"]
    table = {name: np.load(folder / "episodes" / f"{name}.npy") for name in ("start", "length", "end", "final")}
    steps = {name: np.load(folder / "steps" / f"{name}.npy") for name in meta["schema"]["fields"]}
    metas = {name: np.load(folder / "meta" / f"{name}.npy") for name in meta["schema"]["meta_fields"]}
    episodes = []
    for episode in range(state["first_episode"], state["next_episode"]):
        slot = episode % slots_n
        start, length = int(table["start"][slot]), int(table["length"][slot])
        episodes.append({"steps": {name: array[start:start + length] for name, array in steps.items()},
                         "final": ({name: array[start + length] for name, array in steps.items()}
                                   if table["final"][slot] else None),
                         "end": int(table["end"][slot]), "meta": {name: array[slot] for name, array in metas.items()}})
    return episodes


def assert_same(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes(), what


def bounds(n: int = N, ends=ENDS) -> list[tuple[int, int, int]]:
    """(start, stop, end code) of each episode D4RL's flags make."""
    out, start = [], 0
    for row, terminal, timeout in ends:
        out.append((start, row + 1, 1 if terminal else 2))
        start = row + 1
    if start < n:
        out.append((start, n, 0))
    return out


# ---- import: splitting and values ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix,compressed", [(".hdf5", False), (".npz", False), (".npz", True)])
def test_import_splits_at_flags_and_copies_every_value(tmp_path, suffix, compressed):
    data = d4rl_arrays()
    source = write_file(tmp_path / f"data{suffix}", data, METADATA, compressed)
    report = import_d4rl(source, tmp_path / "store")
    episodes = store_contents(tmp_path / "store")
    assert (report.episodes, report.steps) == (len(bounds()), N)
    assert [(e["end"]) for e in episodes] == [code for _, _, code in bounds()]
    for episode, (start, stop, _) in zip(episodes, bounds()):
        assert_same(episode["steps"]["observation"], data["observations"][start:stop])
        assert_same(episode["steps"]["action"], data["actions"][start:stop])
        assert_same(episode["steps"]["reward"], data["rewards"][start:stop])
        assert_same(episode["steps"]["info__qpos"], data["infos/qpos"][start:stop])
        assert_same(episode["steps"]["info__goal__xy"], data["infos/goal/xy"][start:stop])
        assert episode["final"] is None
    # the step both terminal and timeout: terminated, and the meta field says it was truncated too
    assert [bool(e["meta"]["also_truncated"]) for e in episodes] == [False, False, True, False, False, False]
    assert any("partial episode" in note for note in report.notes)
    card = json.loads((tmp_path / "store" / "card.json").read_text())
    record = card["provenance"][-1]
    assert record["kind"] == "d4rl" and record["source"] == str(source) and record["steps"] == N
    metadata = card["extra"]["d4rl"]["metadata"]
    assert metadata["algorithm"] == {"text": "SAC"}
    assert metadata["scores"] == {"dtype": "float32", "shape": [3], "data": [1.5, "nan", "inf"]}
    assert "policy/fc0/weight" not in metadata and "metadata/policy/fc0/weight" in " ".join(record["notes"])


@pytest.mark.parametrize("suffix", [".hdf5", ".npz"])
def test_file_store_file_round_trip_is_exact(tmp_path, suffix):
    data = d4rl_arrays()
    data["terminals"] = data["terminals"].astype(np.float32)  # some D4RL files keep flags as 0.0/1.0 floats
    source = write_file(tmp_path / f"data{suffix}", data, METADATA)
    import_d4rl(source, tmp_path / "store")
    report = export_d4rl(tmp_path / "store", tmp_path / f"back{suffix}")
    assert (report.episodes, report.steps) == (len(bounds()), N)
    back = read_file(tmp_path / f"back{suffix}")
    for key, value in data.items():
        assert_same(back[key], value, key)
    assert_same(back["metadata/scores"], METADATA["metadata/scores"])
    assert_same(back["metadata/seed"], METADATA["metadata/seed"])
    text = back["metadata/algorithm"]
    assert (text.decode() if isinstance(text, bytes) else str(text)) == "SAC"
    card = json.loads(str(back["metadata/memmap_replay/card"].decode() if isinstance(
        back["metadata/memmap_replay/card"], bytes) else back["metadata/memmap_replay/card"]))
    assert [record["kind"] for record in card["provenance"]] == ["d4rl", "memmap_replay"]


def test_next_observations_that_are_the_next_rows_become_final_rows(tmp_path):
    data = d4rl_arrays(next_observations=True)
    source = write_file(tmp_path / "data.hdf5", data)
    report = import_d4rl(source, tmp_path / "store")
    episodes = store_contents(tmp_path / "store")
    assert "next_observation" not in episodes[0]["steps"]
    for episode, (start, stop, _) in zip(episodes, bounds()):
        assert_same(episode["final"]["observation"], data["next_observations"][stop - 1])
    assert "final row" in report.fields["observation"]
    export_d4rl(tmp_path / "store", tmp_path / "back.npz")
    back = read_file(tmp_path / "back.npz")
    for key, value in data.items():
        assert_same(back[key], value, key)


def test_next_observations_that_differ_are_kept_whole(tmp_path):
    data = d4rl_arrays(next_observations=True)
    data["next_observations"][3] += 1.0  # inside the first episode: not the next row
    source = write_file(tmp_path / "data.npz", data)
    import_d4rl(source, tmp_path / "auto")  # auto: finds out, starts again with the field
    episodes = store_contents(tmp_path / "auto")
    assert episodes[0]["final"] is None
    for episode, (start, stop, _) in zip(episodes, bounds()):
        assert_same(episode["steps"]["next_observation"], data["next_observations"][start:stop])
    export_d4rl(tmp_path / "auto", tmp_path / "back.hdf5")
    assert_same(read_file(tmp_path / "back.hdf5")["next_observations"], data["next_observations"])
    with pytest.raises(InvalidDataError, match=r"next_observations of the episode at rows 0\.\.9 are not the next"):
        import_d4rl(source, tmp_path / "final", next_observations="final")
    assert not (tmp_path / "final").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["auto", "back.hdf5", "data.npz"]  # no leftovers
    import_d4rl(source, tmp_path / "drop", next_observations="drop")
    assert "next_observation" not in store_contents(tmp_path / "drop")[0]["steps"]


def test_small_chunks_and_episodes_longer_than_a_chunk_give_the_same_store(tmp_path):
    data = d4rl_arrays(n=3000, ends=[(99, True, False), (2500, False, True), (2501, True, False)])
    for suffix in (".hdf5", ".npz"):
        source = write_file(tmp_path / f"big{suffix}", data)
        import_d4rl(source, tmp_path / f"whole{suffix}")
        import_d4rl(source, tmp_path / f"chunked{suffix}", chunk_mb=0.001)  # about 17 rows at a time
        whole, chunked = store_contents(tmp_path / f"whole{suffix}"), store_contents(tmp_path / f"chunked{suffix}")
        assert [len(e["steps"]["reward"]) for e in chunked] == [100, 2401, 1, 498]
        for a, b in zip(whole, chunked):
            for name in a["steps"]:
                assert_same(a["steps"][name], b["steps"][name], name)


def test_store_file_store_round_trip_is_exact(tmp_path):
    """A store of our own (unspecified ends mid-way, final rows on every episode, meta fields) survives a file."""
    rng = np.random.default_rng(3)
    with ReplayBuffer(tmp_path / "store", 8, 20, fields=dict(observation=("float64", (2,)), action="int64",
                      reward="float", image=("uint8", (4, 4))),
                      meta_fields=dict(task_id="int", score="float64")) as buffer:
        for number, end in enumerate(["terminated", None, "truncated", None, "terminated"]):
            length = int(rng.integers(1, 20))
            buffer.store_episode(observation=rng.standard_normal((length, 2)), action=rng.integers(0, 9, length),
                                 reward=rng.standard_normal(length).astype(np.float32),
                                 image=rng.integers(0, 255, (length, 4, 4), dtype=np.uint8), task_id=number,
                                 score=rng.standard_normal(), end=end,
                                 final=dict(observation=rng.standard_normal(2)))
    before = store_contents(tmp_path / "store")
    for suffix in (".hdf5", ".npz"):
        export_d4rl(tmp_path / "store", tmp_path / f"file{suffix}")
        back = read_file(tmp_path / f"file{suffix}")
        assert back["timeouts"].sum() == 3 and back["terminals"].sum() == 2  # a middle unspecified end: a timeout
        import_d4rl(tmp_path / f"file{suffix}", tmp_path / f"again{suffix}")
        after = store_contents(tmp_path / f"again{suffix}")
        assert len(after) == len(before)
        for a, b in zip(before, after):
            assert a["end"] == b["end"]
            assert_same(a["steps"]["observation"], b["steps"]["observation"])
            assert_same(a["steps"]["image"], b["steps"]["info__image"])
            assert_same(a["final"]["observation"], b["final"]["observation"])
            for name in ("task_id", "score"):
                assert_same(a["meta"][name], b["meta"][name], name)


# ---- edge cases ----------------------------------------------------------------------------------------------


def test_an_empty_file_gives_an_empty_store_and_back(tmp_path):
    data = {key: value[:0] for key, value in d4rl_arrays().items()}
    import_d4rl(write_file(tmp_path / "empty.hdf5", data), tmp_path / "store")
    assert store_contents(tmp_path / "store") == []
    export_d4rl(tmp_path / "store", tmp_path / "back.npz")
    back = read_file(tmp_path / "back.npz")
    assert back["observations"].shape == (0, 3) and back["terminals"].shape == (0,)


def test_one_step_episodes(tmp_path):
    data = d4rl_arrays(n=6, ends=[(row, row % 2 == 0, row % 2 == 1) for row in range(6)])
    import_d4rl(write_file(tmp_path / "ones.npz", data), tmp_path / "store")
    episodes = store_contents(tmp_path / "store")
    assert [len(e["steps"]["reward"]) for e in episodes] == [1] * 6
    assert [e["end"] for e in episodes] == [1, 2] * 3
    export_d4rl(tmp_path / "store", tmp_path / "back.hdf5")
    back = read_file(tmp_path / "back.hdf5")
    for key, value in data.items():
        assert_same(back[key], value, key)


def test_a_file_without_timeouts_or_any_flag_is_one_partial_episode(tmp_path):
    data = d4rl_arrays(ends=[])
    del data["timeouts"]
    report = import_d4rl(write_file(tmp_path / "open.hdf5", data), tmp_path / "store")
    episodes = store_contents(tmp_path / "store")
    assert len(episodes) == 1 and episodes[0]["end"] == 0 and len(episodes[0]["steps"]["reward"]) == N
    assert any(f"the last {N} steps" in note for note in report.notes)
    export_d4rl(tmp_path / "store", tmp_path / "back.hdf5")
    back = read_file(tmp_path / "back.hdf5")
    assert not back["terminals"].any() and not back["timeouts"].any()  # left open: reads back as partial


def test_big_endian_arrays_come_in_with_their_values(tmp_path):
    data = d4rl_arrays()
    data["observations"] = data["observations"].astype(">f4")
    import_d4rl(write_file(tmp_path / "be.hdf5", data), tmp_path / "store")
    stored = np.concatenate([e["steps"]["observation"] for e in store_contents(tmp_path / "store")])
    assert stored.dtype == np.float32 and np.array_equal(stored, data["observations"])


# ---- errors ----------------------------------------------------------------------------------------------------


def test_bad_files_get_clear_errors_and_leave_nothing(tmp_path):
    def attempt(name, data, error, match, **options):
        path = write_file(tmp_path / name, data)
        with pytest.raises(error, match=match):
            import_d4rl(path, tmp_path / "store", **options)
        assert not (tmp_path / "store").exists()

    good = d4rl_arrays()
    attempt("short.hdf5", {**good, "actions": good["actions"][:-1]}, InvalidDataError,
            r"'actions' has 56 rows but observations has 57")
    attempt("missing.npz", {k: v for k, v in good.items() if k != "rewards"}, UnsupportedFormatError,
            r"must hold the D4RL keys .* missing \['rewards'\]")
    attempt("flags.hdf5", {**good, "terminals": np.where(good["terminals"], 2, 0)}, InvalidDataError,
            r"'terminals' must hold only 0/1 .* \(got 2 at row 9\)")
    attempt("flags2d.hdf5", {**good, "timeouts": good["timeouts"][:, None]}, InvalidDataError,
            r"'timeouts' must have shape \(N,\)")
    attempt("text.npz", {**good, "observations": np.array(["a"] * N)}, InvalidDataError,
            r"'observations' must be an array of numbers")
    attempt("badinfo.hdf5", {**good, "infos/bad-name": good["rewards"]}, InvalidDataError,
            r"infos/bad-name cannot become the field 'info__bad-name'")
    attempt("next.hdf5", {**good, "next_observations": good["observations"].astype(np.float64)}, InvalidDataError,
            r"next_observations and observations differ in dtype", next_observations="final")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(UnsupportedFormatError, match=r"junk.hdf5 is not a readable HDF5 file"):
        import_d4rl(tmp_path / "junk.hdf5", tmp_path / "store")
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(UnsupportedFormatError, match=r"must end in \.hdf5, \.h5 or \.npz"):
        import_d4rl(tmp_path / "x.txt", tmp_path / "store")
    with pytest.raises(StoreNotFoundError, match=r"no file at .*nowhere.hdf5"):
        import_d4rl(tmp_path / "nowhere.hdf5", tmp_path / "store")
    with pytest.raises(OptionError, match=r"next_observations must be one of"):
        import_d4rl(tmp_path / "short.hdf5", tmp_path / "store", next_observations="maybe")


def test_pickled_npz_members_are_refused_never_loaded(tmp_path):
    path = tmp_path / "pickle.npz"
    np.savez(path, **d4rl_arrays())
    with zipfile.ZipFile(path, "a") as archive:
        with archive.open("metadata/evil.npy", "w") as stream:
            np.lib.format.write_array(stream, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(UnsupportedFormatError, match=r"'metadata/evil' holds Python objects \(a pickle\)"):
        import_d4rl(path, tmp_path / "store")


def test_targets_are_not_overwritten_unless_asked(tmp_path):
    source = write_file(tmp_path / "data.hdf5", d4rl_arrays())
    import_d4rl(source, tmp_path / "store")
    with pytest.raises(TargetExistsError, match=r"store already exists; pass overwrite=True"):
        import_d4rl(source, tmp_path / "store")
    other = write_file(tmp_path / "other.hdf5", d4rl_arrays(seed=1, ends=[(5, True, False)]))
    import_d4rl(other, tmp_path / "store", overwrite=True)
    assert len(store_contents(tmp_path / "store")) == 2
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(TargetExistsError, match=r"is not what overwrite may replace"):
        import_d4rl(source, tmp_path / "notes", overwrite=True)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"
    export_d4rl(tmp_path / "store", tmp_path / "out.npz")
    with pytest.raises(TargetExistsError, match=r"out.npz already exists"):
        export_d4rl(tmp_path / "store", tmp_path / "out.npz")
    export_d4rl(tmp_path / "store", tmp_path / "out.npz", overwrite=True)


@pytest.mark.parametrize("chunk_mb", [float("inf"), float("nan"), 0, -1, True, "64", 2.0**21])
def test_chunk_mb_must_be_a_sane_number(tmp_path, chunk_mb):
    source = write_file(tmp_path / "data.npz", d4rl_arrays())  # inf was a bare OverflowError
    with pytest.raises(OptionError, match=r"chunk_mb must be a number of megabytes > 0 and <= 1048576 \(got "):
        import_d4rl(source, tmp_path / "store", chunk_mb=chunk_mb)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.npz"]


def test_targets_that_are_folders_links_or_inside_a_store_are_refused(tmp_path):
    source = write_file(tmp_path / "data.npz", d4rl_arrays())
    import_d4rl(source, tmp_path / "store")
    before = sorted(path.name for path in (tmp_path / "store").iterdir())
    (tmp_path / "dir.npz").mkdir()  # was silently replaced by the file
    with pytest.raises(TargetExistsError, match=r"dir\.npz is a folder; the target must be the path of a file"):
        export_d4rl(tmp_path / "store", tmp_path / "dir.npz", overwrite=True)
    with pytest.raises(TargetExistsError, match=r"the target .*store/out\.npz must be outside the store at .*store"):
        export_d4rl(tmp_path / "store", tmp_path / "store" / "out.npz")  # was written among the store's files
    with pytest.raises(TargetExistsError, match=r"the target .*store/nested must be outside the store"):
        import_d4rl(source, tmp_path / "store" / "nested")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(NotAFolderError,
                       match=r"the target .*link must not be a symbolic link \(it points to .*empty\)"):
        import_d4rl(source, tmp_path / "link")  # was a bare NotADirectoryError
    assert sorted(path.name for path in (tmp_path / "store").iterdir()) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.npz", "dir.npz", "empty", "link", "store"]
    assert list((tmp_path / "empty").iterdir()) == [] and list((tmp_path / "dir.npz").iterdir()) == []


def test_one_field_cannot_take_two_roles(tmp_path):
    import_d4rl(write_file(tmp_path / "data.npz", d4rl_arrays()), tmp_path / "store")
    with pytest.raises(SchemaError, match=r"the field 'observation' cannot be both the observation and the reward"):
        export_d4rl(tmp_path / "store", tmp_path / "out.npz", reward="observation")  # wrote (N, 3) rewards
    with pytest.raises(SchemaError, match=r"the field 'action' cannot be both the observation and the action"):
        export_d4rl(tmp_path / "store", tmp_path / "out.npz", observation="action")
    assert not (tmp_path / "out.npz").exists()


def test_export_needs_one_observation_field(tmp_path, capsys):
    with ReplayBuffer(tmp_path / "store", 2, 5, fields=dict(observation__a="float", observation__b="float",
                                                           action="float", reward="float")) as buffer:
        buffer.store_episode(observation__a=np.zeros(3), observation__b=np.ones(3), action=np.zeros(3),
                             reward=np.zeros(3))
    with pytest.raises(SchemaError, match=r"one array of observations.*pass observation=NAME"):
        export_d4rl(tmp_path / "store", tmp_path / "out.hdf5")
    # the command line speaks its own flags
    assert main(["export", str(tmp_path / "store"), str(tmp_path / "out.hdf5"), "--quiet"], prog="memmap-replay") == 2
    err = capsys.readouterr().err
    assert "pass --observation FIELD to choose one" in err and "observation=" not in err, err
    (tmp_path / "taken.hdf5").write_bytes(b"")
    assert main(["export", str(tmp_path / "store"), str(tmp_path / "taken.hdf5"), "--observation", "observation__a",
                 "--quiet"], prog="memmap-replay") == 2
    err = capsys.readouterr().err
    assert "pass --overwrite to replace it" in err and "overwrite=" not in err, err
    assert main(["export", str(tmp_path / "store"), str(tmp_path / "o.hdf5"), "--observation", "observation__a",
                 "--reward", "observation__a", "--quiet"], prog="memmap-replay") == 2
    err = capsys.readouterr().err
    assert "pass --observation, --action and --reward naming different fields" in err, err
    report = export_d4rl(tmp_path / "store", tmp_path / "out.hdf5", observation="observation__a")
    assert report.fields["observation__b"] == "infos/observation/b"
    with pytest.raises(SchemaError, match=r"no field 'reward_x' for the rewards"):
        export_d4rl(tmp_path / "store", tmp_path / "out2.hdf5", observation="observation__a", reward="reward_x")
    with pytest.raises(SchemaError, match=r"next_observations cannot be written"):
        export_d4rl(tmp_path / "store", tmp_path / "out3.hdf5", observation="observation__a",
                    next_observations="require")


# ---- the commands ------------------------------------------------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memmap_replay", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_import_and_export_commands(tmp_path):
    data = d4rl_arrays(next_observations=True)
    write_file(tmp_path / "data.hdf5", data, METADATA)
    done = cli("import", "data.hdf5", "store", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["episodes"] == len(bounds())
    done = cli("export", "store", "back.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "export d4rl: store -> back.npz" in done.stdout
    back = read_file(tmp_path / "back.npz")
    for key, value in data.items():
        assert_same(back[key], value, key)
    done = cli("import", "back.npz", "store", cwd=tmp_path)
    assert done.returncode == 2 and "error: " in done.stderr and "--overwrite" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli("import", "back.npz", "store", "--overwrite", "--quiet", cwd=tmp_path).returncode == 0


def test_command_errors_and_help(tmp_path, monkeypatch, capsys):
    """Exit codes and messages (in-process, as the subprocess test above shows the same entry point works)."""
    monkeypatch.chdir(tmp_path)
    write_file(tmp_path / "short.hdf5", {**d4rl_arrays(), "rewards": np.zeros(3, np.float32)})
    for args, code, message in [
            (("import", "short.hdf5", "s"), 1, "'rewards' has 3 rows but observations has 57"),
            (("import", "nowhere.hdf5", "s"), 2, "no file at nowhere.hdf5"),
            (("import", "something", "s"), 2, "cannot tell the format of something: pass --from"),
            (("export", "nowhere", "out.hdf5"), 2, "no store at nowhere"),
            (("export", "short.hdf5", "out.hdf5"), 2, "must be a store folder"),
            (("import", "short.hdf5", "s", "--from", "csv"), 2, "invalid choice"),
            (("import", "short.hdf5", "s", "--chunk-mb", "inf"), 2, "--chunk-mb must be a number of megabytes > 0")]:
        try:
            got = main(list(args), prog="memmap-replay")
        except SystemExit as exit:  # argparse's own usage errors
            got = exit.code
        err = capsys.readouterr().err
        assert got == code, (args, err)
        assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "s").exists()
    for command in ("import", "export"):
        with pytest.raises(SystemExit, match="0"):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "examples:" in out and "exit codes:" in out
    done = cli("import", "short.hdf5", "s", "--json", cwd=tmp_path)  # the same as a user runs it
    assert done.returncode == 1 and json.loads(done.stdout)["ok"] is False and "error: " in done.stderr


def test_the_interop_package_api_is_explicit():
    import memmap_replay.interop as interop

    assert sorted(interop.__all__) == sorted({"import_minari", "export_minari", "import_d4rl", "export_d4rl",
                                              "import_memmap_replay_buffer", "export_memmap_replay_buffer",
                                              "minari_root", "Transfer", "TargetExistsError", "guess_format"})
    assert all(getattr(interop, name) is not None for name in interop.__all__)
    assert interop.guess_format("x.h5") == "d4rl" and interop.guess_format("ns/name-v2") == "minari"
    assert interop.guess_format("plain_folder") is None
    assert issubclass(TargetExistsError, FileExistsError)


def test_nested_keys_that_would_collide_are_refused():
    from memmap_replay.interop.common import flatten

    with pytest.raises(InvalidDataError, match=r"two entries that would both be stored as field 'observation__a__b'"):
        flatten({"a__b": np.zeros(2), "a": {"b": np.ones(2)}}, "observation", "observations")
    assert set(flatten({"a": {"b": np.ones(2)}, "c": (np.zeros(1),)}, "observation", "o")) == {
        "observation__a__b", "observation__c__0"}


# ---- room for online episodes after an import (offline-to-online) ----------------------------------------------


def online_episode(rng, length: int) -> dict:
    return {"observation": rng.standard_normal((length, 3)).astype(np.float32),
            "action": rng.standard_normal((length, 2)).astype(np.float32),
            "reward": rng.standard_normal(length).astype(np.float32)}


def test_an_imported_store_grows_for_online_episodes(tmp_path):
    rng = np.random.default_rng(3)
    source = write_file(tmp_path / "data.npz", d4rl_arrays())
    import_d4rl(source, tmp_path / "store", infos=False)
    offline = store_contents(tmp_path / "store")
    with ReplayBuffer.from_folder(tmp_path / "store") as buffer:
        with pytest.raises(BufferFullError, match=r"the buffer is full: an episode of 4 rows does not fit in the 0 "
                                                  r"rows left of max_steps=57(.|\n)*grow it in place"):
            buffer.store_episode(**online_episode(rng, 4))
        buffer.grow(max_episodes=20)
        for _ in range(14):
            buffer.store_episode(**online_episode(rng, 4), end="truncated")
        assert len(buffer) == 20
    for before, after in zip(offline, store_contents(tmp_path / "store")):
        for name, value in before["steps"].items():
            assert_same(after["steps"][name], value, name)


@pytest.mark.parametrize("circular", [False, True])
def test_import_with_room_takes_online_episodes(tmp_path, circular):
    rng = np.random.default_rng(4)
    data = d4rl_arrays()
    source = write_file(tmp_path / "data.hdf5", data)
    report = import_d4rl(source, tmp_path / "store", infos=False, max_episodes=10, max_timesteps=20, circular=circular)
    assert report.episodes == len(bounds())
    with ReplayBuffer.from_folder(tmp_path / "store") as buffer:
        assert (buffer.max_episodes, buffer.max_timesteps, buffer.circular) == (10, 20, circular)
        for _ in range(4):
            buffer.store_episode(**online_episode(rng, 20))
        if circular:
            buffer.store_episode(**online_episode(rng, 3))  # the oldest offline episode goes
            assert len(buffer) == 10
        else:
            with pytest.raises(BufferFullError, match="all 10 episode slots are used"):
                buffer.store_episode(**online_episode(rng, 3))
    stored = store_contents(tmp_path / "store")
    offline = bounds()[1:] if circular else bounds()
    for episode, (start, stop, _) in zip(stored, offline):
        assert_same(episode["steps"]["observation"], data["observations"][start:stop])


@pytest.mark.parametrize("options,match", [
    (dict(max_episodes=3), r"max_episodes must hold the dataset's 6 episodes \(got 3\)"),
    (dict(max_timesteps=4), r"max_timesteps must hold the dataset's 16 steps in its longest episode \(got 4\)"),
    (dict(max_steps=10), r"max_steps must hold the dataset's 57 rows .* \(got 10\)"),
    (dict(max_episodes=0), r"max_episodes must be a positive int \(got 0\)"),
    (dict(circular=1), r"circular must be True or False \(got 1\)"),
])
def test_import_room_smaller_than_the_dataset_is_refused(tmp_path, options, match):
    source = write_file(tmp_path / "data.npz", d4rl_arrays())
    with pytest.raises(OptionError, match=match):
        import_d4rl(source, tmp_path / "store", infos=False, **options)
    assert not (tmp_path / "store").exists()
    assert [path.name for path in tmp_path.iterdir()] == ["data.npz"]


def test_import_command_with_room(tmp_path):
    write_file(tmp_path / "data.hdf5", d4rl_arrays())
    done = cli("import", "data.hdf5", "store", "--max-episodes", "50", "--circular", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as buffer:
        assert (buffer.max_episodes, buffer.circular, len(buffer)) == (50, True, len(bounds()))
        assert buffer.max_steps == N + 44 * (buffer.max_timesteps + 1)
    done = cli("import", "data.hdf5", "small", "--max-episodes", "2", cwd=tmp_path)
    assert done.returncode == 2 and "max_episodes must hold the dataset's 6 episodes (got 2)" in done.stderr
