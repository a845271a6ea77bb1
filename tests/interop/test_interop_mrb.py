"""memmap-replay-buffer 0.2.3 buffers <-> stores. The buffers are written here by the REAL package (the test
extra), the way its users write them (one_episode, store_episode, the flat store loop, rings that wrapped,
ReplayBufferH5PY); what each episode should hold is what the test itself stored, not read back from the
package. Every value must come through exactly (dtype, shape, bytes), oldest episode first, with meta
fields and field defaults; an export must open in the real package with the same values; a stranger's
folder (hostile pickle, links, FIFOs, truncated or oversized files) gets a clear error and runs nothing.
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

mrb = pytest.importorskip("memmap_replay_buffer", reason="memmap-replay-buffer 0.2.3 (in the test extra) writes the "
                          "folders these tests convert: pip install 'memmap-replay[test]'")

from memmap_replay import (BufferFullError, CorruptStoreError, MissingFileError, NotAFolderError,  # noqa: E402
                           OptionError, ReplayBuffer, ReplayError, read_card, SchemaError, StoreNotFoundError,
                           UnsafeEntryError, export_memmap_replay_buffer, import_memmap_replay_buffer)
from memmap_replay.cli import main  # noqa: E402
from memmap_replay.interop import TargetExistsError, guess_format  # noqa: E402

FIELDS = dict(obs=("float", (3,), 0.5), action="int", image=("uint8", (3, 8, 8)), done="bool")
META = dict(task="int", score=("float", 2, -1.0))
MAX_T = 6


def make_episode(rng, number: int, length: int) -> dict:
    return {"obs": rng.standard_normal((length, 3)).astype(np.float32),
            "action": rng.integers(-1000, 1000, length).astype(np.int32),
            "image": rng.integers(0, 256, (length, 3, 8, 8)).astype(np.uint8),
            "done": np.arange(length) == length - 1,
            "task": np.int32(number), "score": rng.standard_normal(2).astype(np.float32)}


STEP = ("obs", "action", "image", "done")


def write_buffer(folder: Path, lengths: list[int], *, max_episodes: int = 8, circular: bool = False,
                 open_steps: int = 0, h5: bool = False, seed: int = 0, **extra) -> list[dict]:
    """A 0.2.3 buffer holding episodes of ``lengths`` (every third one through store_episode, the others
    through one_episode), then ``open_steps`` steps of the flat loop with no advance_episode. Returns the
    committed episodes in commit order and, last, the open one (if any)."""
    rng = np.random.default_rng(seed)
    kind = mrb.ReplayBufferH5PY if h5 else mrb.ReplayBuffer
    buffer = kind(folder, max_episodes, MAX_T, fields=FIELDS, meta_fields=META, circular=circular, **extra)
    episodes = []
    for number, length in enumerate(lengths):
        episode = make_episode(rng, number, length)
        if number % 3 == 2:
            buffer.store_episode(**episode)
        else:
            with buffer.one_episode(task=episode["task"], score=episode["score"]):
                for t in range(length):
                    buffer.store(**{name: episode[name][t] for name in STEP})
        episodes.append(episode)
    if open_steps:
        episode = make_episode(rng, len(lengths), open_steps)
        for t in range(open_steps):
            buffer.store(**{name: episode[name][t] for name in STEP})
        buffer.flush()
        episodes.append(episode)
    if h5:
        buffer.file.close()
    del buffer
    gc.collect()
    return episodes


def assert_store_holds(folder: Path, expected: list[dict], *, meta: bool = True) -> None:
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    try:
        got = list(buffer.iterate_episodes())
        assert len(got) == len(expected)
        for episode, want in zip(got, expected):
            assert len(episode) == len(want["obs"]) and episode.end is None and episode.final is None
            for name in STEP:
                value = episode[name]
                assert value.dtype == want[name].dtype and value.shape == want[name].shape
                assert value.tobytes() == want[name].tobytes(), name
            if meta:
                for name in ("task", "score"):
                    value = np.asarray(episode.meta[name])
                    assert value.dtype == np.asarray(want[name]).dtype
                    assert value.tobytes() == np.asarray(want[name]).tobytes()
    finally:
        buffer.close()


def test_a_folder_converts_value_for_value_with_dtypes_shapes_and_defaults(tmp_path):
    expected = write_buffer(tmp_path / "old", [5, 1, 6, 3, 2])
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert (report.episodes, report.steps, report.notes) == (5, 17, [])
    assert_store_holds(tmp_path / "new", expected)
    buffer = ReplayBuffer.from_folder(tmp_path / "new", read_only=True)
    schema = buffer.schema
    assert {name: (spec.dtype.name, spec.shape, spec.default) for name, spec in schema.fields.items()} == {
        "obs": ("float32", (3,), 0.5), "action": ("int32", (), None), "image": ("uint8", (3, 8, 8), None),
        "done": ("bool", (), None)}
    assert {name: (spec.dtype.name, spec.shape, spec.default) for name, spec in schema.meta_fields.items()} == {
        "task": ("int32", (), None), "score": ("float32", (2,), -1.0)}
    assert (buffer.max_episodes, buffer.max_timesteps, buffer.circular) == (8, MAX_T, False)  # the source's room
    buffer.close()
    card = read_card(tmp_path / "new")
    record = card.provenance[-1]
    assert record["kind"] == "memmap-replay-buffer" and record["layout"] == "folder" and record["episodes"] == 5
    assert card.extra["memmap-replay-buffer"]["config"]["fields"]["obs"] == ["float", [3], 0.5]


def test_a_ring_that_wrapped_converts_its_live_episodes_oldest_first(tmp_path):
    expected = write_buffer(tmp_path / "old", [2, 3, 4, 5, 6, 1, 2], max_episodes=3, circular=True)
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert report.episodes == 3
    assert_store_holds(tmp_path / "new", expected[-3:])
    buffer = ReplayBuffer.from_folder(tmp_path / "new")
    assert buffer.circular and buffer.max_episodes == 3
    rng = np.random.default_rng(5)
    episode = make_episode(rng, 99, 4)
    buffer.store_episode(**episode)  # the ring keeps turning: the oldest goes
    buffer.close()
    assert_store_holds(tmp_path / "new", [*expected[-2:], episode])


def test_batched_episodes_convert_in_slot_order(tmp_path):
    rng = np.random.default_rng(7)
    buffer = mrb.ReplayBuffer(tmp_path / "old", 5, MAX_T, fields=FIELDS, meta_fields=META, circular=True)
    episodes = []
    for batch in range(3):  # 3 batches of 2 in a ring of 5: the oldest goes
        pair = [make_episode(rng, 2 * batch + number, 4) for number in range(2)]
        with buffer.batched_episode(2, task=np.array([e["task"] for e in pair]),
                                    score=np.stack([e["score"] for e in pair])):
            for t in range(4):
                buffer.store_batch(**{name: np.stack([e[name][t] for e in pair]) for name in STEP})
        episodes += pair
    del buffer
    gc.collect()
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert report.episodes == 5
    assert_store_holds(tmp_path / "new", episodes[1:])


def test_the_open_episode_is_left_out_or_kept(tmp_path):
    expected = write_buffer(tmp_path / "old", [3, 4], open_steps=2)
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "skip")
    assert report.episodes == 2 and any("open episode (slot 2, 2 steps" in note for note in report.notes)
    assert_store_holds(tmp_path / "skip", expected[:2])
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "keep", open_episode="keep")
    assert report.episodes == 3
    # the open episode's meta values are the fields' defaults, as 0.2.3 initialises a slot
    expected[2].update(task=np.int32(0), score=np.full(2, -1.0, np.float32))
    assert_store_holds(tmp_path / "keep", expected)
    with pytest.raises(OptionError, match="open_episode must be one of"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "x", open_episode="yes")


def test_an_open_episode_in_a_full_ring_has_overwritten_the_oldest(tmp_path):
    expected = write_buffer(tmp_path / "old", [2, 3, 4, 5], max_episodes=3, circular=True, open_steps=1)
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert report.episodes == 2 and any("overwriting" in note for note in report.notes)
    assert_store_holds(tmp_path / "new", expected[2:4])
    import_memmap_replay_buffer(tmp_path / "old", tmp_path / "keep", open_episode="keep")
    expected[4].update(task=np.int32(0), score=np.full(2, -1.0, np.float32))
    assert_store_holds(tmp_path / "keep", expected[2:5])


def test_an_empty_buffer_converts_to_an_empty_store_with_its_fields(tmp_path):
    write_buffer(tmp_path / "old", [])
    report = import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert (report.episodes, report.steps) == (0, 0)
    buffer = ReplayBuffer.from_folder(tmp_path / "new", read_only=True)
    assert len(buffer) == 0 and set(buffer.fieldnames) == set(STEP) and set(buffer.meta_fieldnames) == {"task", "score"}
    buffer.close()


@pytest.mark.parametrize("circular", [False, True])
def test_a_replay_buffer_h5py_converts_as_a_folder_or_as_its_file(tmp_path, circular):
    lengths = [2, 3, 4, 5, 6] if circular else [4, 1, 6]
    expected = write_buffer(tmp_path / "old", lengths, max_episodes=3, circular=circular, h5=True,
                            **({"h5py_compression": "gzip"} if circular else {}))
    import_memmap_replay_buffer(tmp_path / "old", tmp_path / "from_folder")
    config = read_card(tmp_path / "from_folder").extra["memmap-replay-buffer"]["config"]
    assert config.get("h5py_compression") == ("gzip" if circular else None)
    report = import_memmap_replay_buffer(tmp_path / "old" / "data.h5", tmp_path / "from_file")
    assert report.notes == [] and report.episodes == 3
    for target in ("from_folder", "from_file"):
        assert_store_holds(tmp_path / target, expected[-3:])
    assert ReplayBuffer.from_folder(tmp_path / "from_file", read_only=True).schema.fields["obs"].default == 0.5


def test_an_h5_file_without_its_config_converts_from_its_datasets(tmp_path):
    expected = write_buffer(tmp_path / "old", [3, 2], h5=True)
    (tmp_path / "alone").mkdir()
    shutil.copy(tmp_path / "old" / "data.h5", tmp_path / "alone" / "buffer.h5")
    report = import_memmap_replay_buffer(tmp_path / "alone" / "buffer.h5", tmp_path / "new")
    assert any("no metadata.pkl" in note for note in report.notes)
    assert_store_holds(tmp_path / "new", expected)
    assert ReplayBuffer.from_folder(tmp_path / "new", read_only=True).schema.fields["obs"].default is None


def test_room_options_override_the_source(tmp_path):
    write_buffer(tmp_path / "old", [3, 2], max_episodes=4, circular=True)
    import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new", max_episodes=50, max_timesteps=9, circular=False)
    buffer = ReplayBuffer.from_folder(tmp_path / "new", read_only=True)
    assert (buffer.max_episodes, buffer.max_timesteps, buffer.circular) == (50, 9, False)
    buffer.close()
    with pytest.raises(OptionError, match="max_episodes must hold the dataset's 2 episodes"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "small", max_episodes=1)


# ---- export ----------------------------------------------------------------------------------------------------


def read_with_the_package(folder: Path) -> dict:
    buffer = mrb.ReplayBuffer.from_folder(folder, read_only=True)
    out = {"state": (buffer.num_episodes, buffer.episode_index, buffer.timestep_index),
           "lens": np.array(buffer.episode_lens[:]), "initted": np.array(buffer._initted[:]),
           "data": {name: np.array(array) for name, array in buffer.data.items()},
           "meta": {name: np.array(array) for name, array in buffer.meta_data.items()},
           "config": pickle.loads((folder / "metadata.pkl").read_bytes()), "len": len(buffer)}
    del buffer
    gc.collect()
    return out


def test_folder_to_store_to_folder_gives_the_package_the_same_values(tmp_path):
    write_buffer(tmp_path / "old", [5, 1, 6, 3, 2])
    import_memmap_replay_buffer(tmp_path / "old", tmp_path / "store")
    report = export_memmap_replay_buffer(tmp_path / "store", tmp_path / "back")
    assert (report.episodes, report.steps) == (5, 17)
    old, back = read_with_the_package(tmp_path / "old"), read_with_the_package(tmp_path / "back")
    assert back["config"] == old["config"]  # the same spelling: 0.2.3's overwrite=False check passes
    assert back["state"] == old["state"] and back["len"] == old["len"] == 5
    assert np.array_equal(back["lens"], old["lens"]) and np.array_equal(back["initted"], old["initted"])
    for group in ("data", "meta"):
        for name, array in old[group].items():
            assert back[group][name].dtype == array.dtype and back[group][name].tobytes() == array.tobytes(), name
    reopened = mrb.ReplayBuffer(tmp_path / "back", overwrite=False, **old["config"])
    assert reopened.num_episodes == 5
    del reopened
    gc.collect()


def test_a_wrapped_ring_exports_oldest_first_and_the_package_continues_it(tmp_path):
    expected = write_buffer(tmp_path / "old", [2, 3, 4, 5, 6], max_episodes=3, circular=True)
    import_memmap_replay_buffer(tmp_path / "old", tmp_path / "store")
    export_memmap_replay_buffer(tmp_path / "store", tmp_path / "back")
    back = read_with_the_package(tmp_path / "back")
    assert back["state"] == (3, 0, 0) and list(back["lens"]) == [4, 5, 6]
    for slot, want in enumerate(expected[-3:]):
        length = len(want["obs"])
        for name in STEP:
            assert back["data"][name][slot, :length].tobytes() == want[name].tobytes()
        assert back["data"]["obs"][slot, length:].tolist() == [[0.5] * 3] * (MAX_T - length)  # padded with the default
        assert back["meta"]["task"][slot] == want["task"]
    import_memmap_replay_buffer(tmp_path / "back", tmp_path / "again")
    assert_store_holds(tmp_path / "again", expected[-3:])


def test_a_native_store_exports_with_lossy_and_refuses_what_the_package_cannot_hold(tmp_path):
    rng = np.random.default_rng(3)
    buffer = ReplayBuffer(tmp_path / "store", 4, 5, fields=dict(obs=("float", 2), pixels=("uint8", (2, 2))),
                          meta_fields=dict(seed="int"))
    episodes = []
    for number in range(3):
        with buffer.one_episode(seed=number) as meta:
            obs = rng.standard_normal((number + 2, 2)).astype(np.float32)
            for t in range(len(obs)):
                buffer.store(obs=obs[t], pixels=np.full((2, 2), t, np.uint8))
            meta.set_end("terminated")
        episodes.append(obs)
    buffer.close()
    with pytest.raises(SchemaError, match=r"no place for the end codes .* of 3 episode\(s\); pass lossy=True"):
        export_memmap_replay_buffer(tmp_path / "store", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    report = export_memmap_replay_buffer(ReplayBuffer.from_folder(tmp_path / "store", read_only=True), tmp_path / "out",
                                         lossy=True)
    assert any("end codes" in note for note in report.notes)
    back = read_with_the_package(tmp_path / "out")
    assert back["config"] == {"max_episodes": 4, "max_timesteps": 5, "circular": False, "meta_fields": {"seed": "int"},
                              "fields": {"obs": ("float", (2,)), "pixels": ("uint8", (2, 2))}}
    for slot, obs in enumerate(episodes):
        assert back["data"]["obs"][slot, :len(obs)].tobytes() == obs.tobytes()
    assert list(back["meta"]["seed"]) == [0, 1, 2, 0] and back["state"] == (3, 3, 0)
    with pytest.raises(TargetExistsError, match="already exists"):
        export_memmap_replay_buffer(tmp_path / "store", tmp_path / "out", lossy=True)
    export_memmap_replay_buffer(tmp_path / "store", tmp_path / "out", lossy=True, overwrite=True)
    with pytest.raises(BufferFullError, match="more than max_episodes=2"):
        export_memmap_replay_buffer(tmp_path / "store", tmp_path / "o2", lossy=True, max_episodes=2)
    with pytest.raises(OptionError, match="longest episode has 4 steps, more than max_timesteps=3"):
        export_memmap_replay_buffer(tmp_path / "store", tmp_path / "o2", lossy=True, max_timesteps=3)


def test_a_dtype_the_package_cannot_declare_is_refused(tmp_path):
    buffer = ReplayBuffer(tmp_path / "store", 2, 3, fields=dict(obs=("float64", 2)))
    buffer.store_episode(obs=np.zeros((2, 2)))
    buffer.close()
    with pytest.raises(SchemaError, match=r"field 'obs' has dtype float64, which memmap-replay-buffer cannot declare"):
        export_memmap_replay_buffer(tmp_path / "store", tmp_path / "out")


# ---- opening a 0.2.3 folder as a store -------------------------------------------------------------------------


def test_opening_a_package_folder_says_how_to_convert_it_and_touches_nothing(tmp_path):
    write_buffer(tmp_path / "old", [2])
    before = sorted(os.listdir(tmp_path / "old"))
    with pytest.raises(StoreNotFoundError, match=r"memmap-replay-buffer 0.2.x folder .* `memmap-replay import .*old "
                                                 r"NEW_FOLDER` or memmap_replay.interop.import_memmap_replay_buffer"):
        ReplayBuffer.from_folder(tmp_path / "old")
    with pytest.raises(NotAFolderError, match="does not create a store over it"):
        ReplayBuffer(tmp_path / "old", 8, MAX_T, fields=FIELDS, meta_fields=META)
    with pytest.raises(NotAFolderError, match="does not create a store over it"):
        ReplayBuffer(tmp_path / "old", 8, MAX_T, fields=FIELDS, overwrite=True)
    assert sorted(os.listdir(tmp_path / "old")) == before


# ---- a folder from a stranger ------------------------------------------------------------------------------------


class _Runs:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_hostile_config_runs_nothing(tmp_path):
    write_buffer(tmp_path / "old", [2])
    marker = tmp_path / "pwned"
    config = pickle.loads((tmp_path / "old" / "metadata.pkl").read_bytes())
    config["fields"]["obs"] = _Runs(marker)
    (tmp_path / "old" / "metadata.pkl").write_bytes(pickle.dumps(config))
    with pytest.raises(UnsafeEntryError, match=r"metadata\.pkl asks to run STACK_GLOBAL 'posix'\.'system'.*never does"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert main(["import", str(tmp_path / "old"), str(tmp_path / "new"), "--quiet"], prog="memmap-replay") == 1
    with pytest.raises(StoreNotFoundError, match="memmap-replay-buffer 0.2.x folder"):
        ReplayBuffer.from_folder(tmp_path / "old")
    assert not marker.exists() and not (tmp_path / "new").exists()


@pytest.mark.parametrize("config, match", [
    ([1, 2], "must hold a dict with string keys"),
    ({"max_episodes": 2, "fields": {}}, r"lacks \['max_timesteps'\]"),
    ({"max_episodes": 0, "max_timesteps": 2, "fields": {}}, "max_episodes must be an integer >= 1"),
    ({"max_episodes": 2, "max_timesteps": 2, "fields": {"a": "complex"}}, "must be of a kind in"),
    ({"max_episodes": 2, "max_timesteps": 2, "fields": {"a": ("int", (-1,))}}, "shape must be an integer >= 0"),
    ({"max_episodes": 2, "max_timesteps": 2, "fields": {"a": ("int", (), "x")}}, "default of int, float or bool"),
    ({"max_episodes": 2, "max_timesteps": 2, "fields": {"a": "int"}, "circular": 1}, "circular must be True or False"),
    # what a stranger's pickle may hold is never printed whole
    ({"max_episodes": 1 << 70000, "max_timesteps": 2, "fields": {}}, r"\(got an integer of 70001 bits\)"),
    ({"max_episodes": 2, "max_timesteps": 2, "fields": {"a": ("int", ["x" * 1000] * 10000)}},
     r"shape of up to 32 integers \(got a list of 10000 items\)"),
])
def test_a_malformed_config_is_a_clear_error(tmp_path, config, match):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metadata.pkl").write_bytes(pickle.dumps(config))
    with pytest.raises(CorruptStoreError, match=match):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")


@pytest.mark.parametrize("damage, error, match", [
    ("truncate", CorruptStoreError, r"obs\.data\.npy must be \d+ bytes long .* it is truncated"),
    ("append", CorruptStoreError, r"obs\.data\.npy must be \d+ bytes long .* longer than its array"),
    ("dtype", CorruptStoreError, r"action\.data\.npy must hold a C-order array of int32 of shape \(8, 6\)"),
    ("missing", MissingFileError, r"image\.data\.npy is missing: the config metadata\.pkl lists it"),
    ("link", UnsafeEntryError, r"obs\.data\.npy is a link"),
    ("fifo", UnsafeEntryError, r"metadata\.pkl is a FIFO, not a regular file"),
    ("big config", UnsafeEntryError, r"metadata\.pkl must hold at most 1048576 bytes"),
    ("state", CorruptStoreError, r"num_episodes must be an integer >= 0 and <= 8 \(got 9\)"),
    ("lens", CorruptStoreError, r"episode_lens\[1\] must be 0\.\.max_timesteps \(6\) \(got 7\)"),
    ("header", CorruptStoreError, r"done\.data\.npy is not a readable \.npy file"),
])
def test_a_damaged_or_hostile_folder_is_a_clear_error(tmp_path, damage, error, match):
    old = tmp_path / "old"
    write_buffer(old, [2, 3])
    if damage == "truncate":
        os.truncate(old / "obs.data.npy", (old / "obs.data.npy").stat().st_size - 4)
    elif damage == "append":
        with open(old / "obs.data.npy", "ab") as file:
            file.write(b"\0" * 4)
    elif damage == "dtype":
        np.save(old / "action.data.npy", np.zeros((8, 6), np.int64))
    elif damage == "missing":
        (old / "image.data.npy").unlink()
    elif damage == "link":
        os.replace(old / "obs.data.npy", tmp_path / "elsewhere.npy")
        os.symlink(tmp_path / "elsewhere.npy", old / "obs.data.npy")
    elif damage == "fifo":
        (old / "metadata.pkl").unlink()
        os.mkfifo(old / "metadata.pkl")
    elif damage == "big config":
        (old / "metadata.pkl").write_bytes(pickle.dumps({"pad": "x" * (2 << 20)}))
    elif damage == "state":
        np.save(old / "num_episodes.state.npy", np.array(9, np.int32))
    elif damage == "lens":
        lens = np.load(old / "episode_lens.data.meta.npy")
        lens[1] = 7
        np.save(old / "episode_lens.data.meta.npy", lens)
    elif damage == "header":
        (old / "done.data.npy").write_bytes(b"\x93NUMPY\x01\x00" + b"\xff" * 20)
    with pytest.raises(error, match=match):
        import_memmap_replay_buffer(old, tmp_path / "new")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("keep", [0, 1000, 4000])
def test_a_truncated_h5_file_is_a_clear_error(tmp_path, keep):
    write_buffer(tmp_path / "old", [2, 3], h5=True)
    os.truncate(tmp_path / "old" / "data.h5", keep)
    with pytest.raises(ReplayError, match=r"data\.h5 (is not a readable HDF5 file|cannot be read)"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_an_h5_dataset_that_leads_to_another_file_is_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    write_buffer(tmp_path / "old", [2], h5=True)
    with h5py.File(tmp_path / "other.h5", "w") as other:
        other.create_dataset("x", data=np.zeros((8, 6, 3), np.float32))
    with h5py.File(tmp_path / "old" / "data.h5", "r+") as file:
        del file["data_obs"]
        file["data_obs"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "x")
    with pytest.raises(UnsafeEntryError, match=r"'data_obs' is a ExternalLink .* only plain datasets are read"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    (tmp_path / "alone").mkdir()  # without its config, the datasets are listed from the file: checked first too
    shutil.copy(tmp_path / "old" / "data.h5", tmp_path / "alone" / "data.h5")
    with pytest.raises(UnsafeEntryError, match=r"'data_obs' is a ExternalLink"):
        import_memmap_replay_buffer(tmp_path / "alone" / "data.h5", tmp_path / "new")
    with h5py.File(tmp_path / "old" / "data.h5", "r+") as file:
        del file["data_obs"]
        file.create_dataset("data_obs", shape=(8, 6, 3), dtype=np.float32,
                            external=[(str(tmp_path / "raw"), 0, 1 << 20)])
    with pytest.raises(UnsafeEntryError, match="external raw files"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")


def _sparse_folder(folder: Path, episodes: int, steps: int, length: int) -> None:
    """A 0.2.3 folder of a few KB on disk whose config claims ``episodes`` slots of ``steps`` steps, one
    committed episode of ``length`` steps and nothing else written (sparse .npy files)."""
    folder.mkdir()
    (folder / "metadata.pkl").write_bytes(pickle.dumps(dict(max_episodes=episodes, max_timesteps=steps,
                                                            fields=dict(x="float"), meta_fields={})))
    for name, dtype, shape in (("episode_lens.data.meta.npy", "int32", (episodes,)),
                               ("_initted.data.meta.npy", "bool", (episodes,)),
                               ("x.data.npy", "float32", (episodes, steps))):
        with open(folder / name, "wb") as file:
            np.lib.format.write_array_header_1_0(file,
                                                 dict(descr=np.dtype(dtype).str, fortran_order=False, shape=shape))
            offset = file.tell()
            if name.startswith("episode_lens"):
                file.write(np.int32(length).tobytes())
        os.truncate(folder / name, offset + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    for name, value in (("num_episodes", 1), ("episode_index", 1 % episodes), ("timestep_index", 0)):
        np.save(folder / f"{name}.state.npy", np.array(value, np.int32))


def test_a_huge_episode_table_is_read_a_block_at_a_time(tmp_path):
    import tracemalloc

    _sparse_folder(tmp_path / "old", 1 << 26, 1, 1)  # 320 MB of table and data claimed, a few KB on disk
    tracemalloc.start()
    try:
        assert import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new", max_episodes=4).episodes == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_rows_the_file_never_held_are_refused_before_they_are_allocated(tmp_path):
    h5py = pytest.importorskip("h5py")
    _sparse_folder(tmp_path / "old", 1, 1 << 30, 1 << 30)  # one episode of 4 GiB claimed, nothing written
    with pytest.raises(CorruptStoreError, match=r"x\.data\.npy: the episode table claims 4294967296 bytes of 'x' "
                       r"\(1073741824 rows\), but its file holds only \d+ bytes on disk.*cp --sparse=never"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    (tmp_path / "h5").mkdir()
    with h5py.File(tmp_path / "h5" / "data.h5", "w") as file:
        file.create_dataset("meta_episode_lens", data=np.array([1 << 30], np.int32))
        file.create_dataset("meta__initted", data=np.array([False]))
        file.create_dataset("data_x", shape=(1, 1 << 30), dtype="float32", chunks=(1, 1 << 16))
        file.attrs.update(num_episodes=1, episode_index=0, timestep_index=0)
    (tmp_path / "h5" / "metadata.pkl").write_bytes(pickle.dumps(dict(max_episodes=1, max_timesteps=1 << 30,
                                                                     fields=dict(x="float"), meta_fields={})))
    with pytest.raises(CorruptStoreError, match=r"data\.h5 \(/data_x\): the episode table claims 4294967296 bytes of "
                                                r"'x'.* its dataset holds only 0 bytes on disk"):
        import_memmap_replay_buffer(tmp_path / "h5", tmp_path / "new")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("name", ["../victim", "/victim", "x\0y", "", "a/b", "end", "class", "x" * 65])
@pytest.mark.parametrize("group", ["fields", "meta_fields"])
def test_a_field_name_that_is_no_file_name_is_refused_before_any_file_opens(tmp_path, monkeypatch, name, group):
    write_buffer(tmp_path / "old", [2])
    np.save(tmp_path / "victim.data.npy", np.zeros((8, 6), np.float32))  # outside the folder: never opened
    config = pickle.loads((tmp_path / "old" / "metadata.pkl").read_bytes())
    config[group][name] = "float"
    (tmp_path / "old" / "metadata.pkl").write_bytes(pickle.dumps(config))
    from memmap_replay.core import folderio

    opened = []
    real_open = folderio.open_read
    monkeypatch.setattr(folderio, "open_read", lambda folder, path, **kw: opened.append(path)
                        or real_open(folder, path, **kw))
    kind = "field" if group == "fields" else "meta field"
    with pytest.raises(SchemaError,
                       match=rf"metadata\.pkl: the {kind} {re.escape(repr(name)[:80])} cannot be imported: "
                       r"a store's field names are a letter then up to 63 .*, then import that one"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert [path.name for path in opened] == ["metadata.pkl"] and not (tmp_path / "new").exists()


def test_a_config_holding_a_torch_size_imports_as_0_2_3_wrote_it(tmp_path):
    torch = pytest.importorskip("torch")
    old = mrb.ReplayBuffer(tmp_path / "old", 2, 3, dict(x=("float", torch.zeros(2, 3).shape)), {})  # 0.2.3 takes it
    old.store(x=np.arange(6, dtype=np.float32).reshape(2, 3))
    old.advance_episode()
    old.flush()
    del old
    gc.collect()
    assert import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new").episodes == 1
    buffer = ReplayBuffer.from_folder(tmp_path / "new", read_only=True)
    try:
        assert buffer.schema.fields["x"].shape == (2, 3)
        assert next(iter(buffer.episodes()))["x"].tolist() == [np.arange(6.0).reshape(2, 3).tolist()]
    finally:
        buffer.close()


def test_an_empty_store_with_a_multi_dimensional_meta_field_exports(tmp_path):
    ReplayBuffer(tmp_path / "s", 4, 5, dict(x="float"), dict(w=("float", (2,)))).close()
    export_memmap_replay_buffer(tmp_path / "s", tmp_path / "out")
    data = read_with_the_package(tmp_path / "out")  # the package opens it: an empty buffer of the same fields
    assert data["state"] == (0, 0, 0) and data["len"] == 0 and data["meta"]["w"].shape == (4, 2)


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_a_field_of_no_value_says_how_to_import(tmp_path, shape):
    old = mrb.ReplayBuffer(tmp_path / "old", 2, 3, dict(x="float", z=("float", shape)), {})  # 0.2.3 takes it
    old.store(x=1.0)
    old.advance_episode()
    old.flush()
    del old
    gc.collect()
    with pytest.raises(SchemaError, match=rf"the field 'z' has shape {re.escape(str(shape))} in metadata\.pkl, which "
                       r"holds no value.*To import, drop the field.*del config\['fields'\]\['z'\].*or give it a size"):
        import_memmap_replay_buffer(tmp_path / "old", tmp_path / "new")
    assert not (tmp_path / "new").exists()


# ---- the command line ----------------------------------------------------------------------------------------------


def test_the_commands_import_and_export_package_folders(tmp_path, capsys):
    expected = write_buffer(tmp_path / "old", [3, 4], open_steps=1)
    assert guess_format(tmp_path / "old") == "memmap-replay-buffer"
    assert main(["import", str(tmp_path / "old"), str(tmp_path / "new"), "--quiet"], prog="memmap-replay") == 0
    assert "left out" in capsys.readouterr().out
    assert_store_holds(tmp_path / "new", expected[:2])
    assert main(["import", str(tmp_path / "old"), str(tmp_path / "keep"), "--open-episode", "keep", "--max-episodes",
                 "20", "--circular", "--quiet"], prog="memmap-replay") == 0
    buffer = ReplayBuffer.from_folder(tmp_path / "keep", read_only=True)
    assert (len(buffer), buffer.max_episodes, buffer.circular) == (3, 20, True)
    buffer.close()
    assert main(["import", str(tmp_path / "old"), str(tmp_path / "new"), "--quiet"], prog="memmap-replay") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "new"), str(tmp_path / "back"), "--to", "memmap-replay-buffer", "--quiet"],
                prog="memmap-replay") == 0
    assert read_with_the_package(tmp_path / "back")["len"] == 2
    write_buffer(tmp_path / "h5", [2, 2], h5=True)
    assert guess_format(tmp_path / "h5" / "data.h5") == "memmap-replay-buffer"
    assert main(["import", str(tmp_path / "h5" / "data.h5"), str(tmp_path / "from_h5"), "--json", "--quiet"],
                prog="memmap-replay") == 0
    assert '"episodes": 2' in capsys.readouterr().out


def test_the_export_command_asks_for_lossy(tmp_path, capsys):
    buffer = ReplayBuffer(tmp_path / "store", 2, 3, fields=dict(obs="float"))
    buffer.store_episode(obs=np.zeros(2, np.float32), end="truncated")
    buffer.close()
    assert main(["export", str(tmp_path / "store"), str(tmp_path / "out"), "--to", "memmap-replay-buffer", "--quiet"],
                prog="memmap-replay") == 2
    assert "pass --lossy to leave them out" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "store"), str(tmp_path / "out"), "--to", "memmap-replay-buffer", "--lossy",
                 "--quiet"], prog="memmap-replay") == 0
