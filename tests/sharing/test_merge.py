"""``merge``: stores into one new store, against a reference kept in plain numpy (steps, ends, finals, meta values,
linked segments), compressed fields copied frame for frame, schemas that differ refused with nothing written, the
command line, and a SIGKILL at any instant leaving no output or a complete one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from memmap_replay import (OptionError, ReplayBuffer, SchemaMismatchError, StoreNotFoundError, add_provenance,
                           compress_fields, merge, read_card, update_card, verify, write_manifest)
from memmap_replay.core import format as fmt
from memmap_replay.core.store import EpisodeStore

FIELDS = dict(obs=("float", 3), image=("uint8", (6, 6)), reward="float")
ENDS = ("terminated", "truncated", None)


def make_store(folder, seed: int, count: int, *, fields=FIELDS, meta=None, long_every: int = 0) -> list[dict]:
    """A store of ``count`` episodes (seeded values); every ``long_every``-th one longer than max_timesteps (split
    into linked segments). Returns the reference: each whole episode's values in plain numpy."""
    rng = np.random.default_rng(seed)
    reference = []
    meta = meta or dict(task_id="int")
    with ReplayBuffer(folder, 40, 8, fields=fields, meta_fields=meta, long_episodes="split") as buffer:
        for number in range(count):
            length = 12 if long_every and number % long_every == 0 else int(rng.integers(1, 8))
            steps = {name: _values(rng, name, length) for name in fields}
            final = {"obs": np.full(3, number, np.float32)} if number % 2 == 0 and "obs" in fields else None
            end = ENDS[number % 3]
            values = {name: np.int64(seed * 100 + number) for name in meta}
            buffer.store_episode(**steps, **values, end=end, final=final)
            reference.append(dict(steps=steps, final=final, end=end, meta=values))
    return reference


def _values(rng, name: str, length: int) -> np.ndarray:
    if name == "image":
        return rng.integers(0, 255, (length, 6, 6), dtype=np.uint8)
    return rng.standard_normal((length, 3) if name == "obs" else (length,)).astype(np.float32)


def read_back(folder) -> list[dict]:
    """Each whole episode of a store (its linked segments joined) in plain numpy."""
    store = EpisodeStore.open(folder, "r")
    try:
        table, links = store.live_table(), store.links(store.live_table())
        out, by_id = [], {}
        for i in range(len(table)):
            start, length, final = int(table.start[i]), int(table.length[i]), bool(table.final[i])
            rows = {name: np.asarray(store.step_array(name).take(np.arange(start, start + length + final), axis=0))
                    for name in store.schema.fields}
            meta = {name: store.meta_array(name)[int(table.slots[i])].item() for name in store.schema.meta_fields}
            segment = dict(steps={name: row[:length] for name, row in rows.items()},
                           final={name: row[length] for name, row in rows.items()} if final else None,
                           end=fmt.END_NAMES[int(table.end[i])], meta=meta)
            if int(links[i]) >= 0:
                whole = by_id[int(links[i])]
                whole["steps"] = {name: np.concatenate([whole["steps"][name], segment["steps"][name]])
                                  for name in whole["steps"]}
                whole.update(final=segment["final"], end=segment["end"])
            else:
                whole = segment
                out.append(whole)
            by_id[int(table.ids[i])] = whole
        return out
    finally:
        store.close()


def assert_same(got: list[dict], want: list[dict], fields=None) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        names = fields or list(w["steps"])
        for name in names:
            np.testing.assert_array_equal(g["steps"][name], w["steps"][name])
        assert g["end"] == w["end"]
        assert (g["final"] is None) == (w["final"] is None)
        if w["final"] is not None and "obs" in names:
            np.testing.assert_array_equal(g["final"]["obs"], w["final"]["obs"])
        assert {k: int(v) for k, v in g["meta"].items()} == {k: int(v) for k, v in w["meta"].items()}


def test_merge_keeps_every_episode_whole_in_folder_order(tmp_path):
    a = make_store(tmp_path / "a", 1, 6, long_every=3)
    b = make_store(tmp_path / "b", 2, 4)
    report = merge(tmp_path / "m", tmp_path / "a", tmp_path / "b")
    assert_same(read_back(tmp_path / "m"), a + b)
    assert report.outputs["merged"]["episodes"] == len(read_back(tmp_path / "a")) + 4 + 2  # (2 long: 2 segments)
    assert verify(tmp_path / "m").ok
    store = EpisodeStore.open(tmp_path / "m", "r")
    assert store.capacity.max_episodes == report.outputs["merged"]["episodes"]  # sized to the data
    assert int((store.links(store.live_table()) >= 0).sum()) == 2
    store.close()


def test_merge_leaves_room_when_asked(tmp_path):
    make_store(tmp_path / "a", 1, 3)
    merge(tmp_path / "m", tmp_path / "a", max_episodes=50, circular=True)
    buffer = ReplayBuffer.from_folder(tmp_path / "m")
    assert buffer.episode_store.capacity.max_episodes == 50 and buffer.episode_store.capacity.circular
    buffer.store_episode(obs=np.zeros((2, 3), np.float32), task_id=1)
    buffer.close()
    with pytest.raises(OptionError, match="max_episodes must hold the dataset's 3 episodes"):
        merge(tmp_path / "m2", tmp_path / "a", max_episodes=2)


def test_compressed_frames_are_copied_not_decoded(tmp_path, monkeypatch):
    pytest.importorskip("zstandard")
    make_store(tmp_path / "a", 1, 5)
    make_store(tmp_path / "b", 2, 3)
    for name in ("a", "b"):
        compress_fields(tmp_path / name, "image")
    from memmap_replay.core.encoded import EncodedColumn

    def refuse(*args, **kwargs):
        raise AssertionError("a frame was decoded")
    monkeypatch.setattr(EncodedColumn, "_decode", refuse)
    report = merge(tmp_path / "m", tmp_path / "a", tmp_path / "b")
    monkeypatch.undo()
    assert report.fields["image"] == "frames copied"

    def frames(folder):
        store = EpisodeStore.open(folder, "r")
        table, file = store.live_table(), store.steps["image"]
        index = np.asarray(file.index.array())
        blobs = [np.asarray(file.frames.array()[o:o + n]).tobytes() for start, length, final in
                 zip(table.start, table.length, table.final) for o, n in index[start:start + length + final]]
        store.close()
        return blobs
    assert frames(tmp_path / "m") == frames(tmp_path / "a") + frames(tmp_path / "b")
    assert verify(tmp_path / "m").ok


def test_different_schemas_are_refused_and_nothing_is_written(tmp_path):
    make_store(tmp_path / "a", 1, 2)
    make_store(tmp_path / "b", 2, 2, fields=dict(obs=("float", 3), reward="float"),
               meta=dict(task_id="int", seed="int"))
    with pytest.raises(SchemaMismatchError, match=r"'image': uint8\(6, 6\) in .*, absent in .*fields='common'"):
        merge(tmp_path / "m", tmp_path / "a", tmp_path / "b")
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]
    report = merge(tmp_path / "m", tmp_path / "a", tmp_path / "b", fields="common")
    store = EpisodeStore.open(tmp_path / "m", "r")
    assert list(store.schema.fields) == ["obs", "reward"] and list(store.schema.meta_fields) == ["task_id"]
    store.close()
    assert report.outputs["merged"]["episodes"] == 4 and verify(tmp_path / "m").ok


def test_a_folder_that_is_not_a_store_is_refused(tmp_path):
    make_store(tmp_path / "a", 1, 2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match="holds no meta.json"):
        merge(tmp_path / "m", tmp_path / "a", tmp_path / "empty")
    with pytest.raises(OptionError, match="out must be a new folder"):
        merge(tmp_path / "a", tmp_path / "a")
    assert not (tmp_path / "m").exists()


def test_cards_provenance_and_checksums_are_merged(tmp_path):
    make_store(tmp_path / "a", 1, 2)
    make_store(tmp_path / "b", 2, 2)
    update_card(tmp_path / "a", name="lab/run-a-v0", license="MIT")
    add_provenance(tmp_path / "a", "gymnasium", "CartPole-v1")
    update_card(tmp_path / "b", name="lab/run-b-v0", license="MIT")
    write_manifest(tmp_path / "b")
    report = merge(tmp_path / "m", tmp_path / "a", tmp_path / "b")
    card = read_card(tmp_path / "m")
    assert card.license == "MIT" and card.name is None
    assert any("'name'" in note for note in report.notes)
    assert [record["kind"] for record in card.provenance] == ["gymnasium", "merge"]
    sources = card.provenance[-1]["sources"]
    assert [source["name"] for source in sources] == ["lab/run-a-v0", "lab/run-b-v0"]
    assert all(len(source["store_id"]) == 32 for source in sources)
    assert (tmp_path / "m" / "checksums.sha256").is_file()
    assert verify(tmp_path / "m", checksums=True).ok


def test_cli_edit_merge(tmp_path):
    make_store(tmp_path / "a", 1, 3)
    make_store(tmp_path / "b", 2, 2)
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "edit", "merge", "m", "a", "b", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"episodes": 5' in done.stdout
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "edit", "merge", "m2", "a", "nowhere"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "edit merge: error: no store at nowhere" in done.stderr


def test_a_killed_runs_hidden_folder_is_removed_by_the_next_run(tmp_path):
    make_store(tmp_path / "a", 1, 2)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # (a process id that has ended)
    leftover = tmp_path / f".m.merge-{pid}"
    (leftover / "steps").mkdir(parents=True)
    (leftover / "steps" / "obs.npy").write_bytes(b"half")
    mine = tmp_path / f".m.merge-{os.getppid()}"  # (a live process's: left alone)
    mine.mkdir()
    merge(tmp_path / "m", tmp_path / "a")
    assert not leftover.exists() and mine.exists()
    assert verify(tmp_path / "m").ok


def test_cli_edit_without_a_verb_shows_its_help(capsys):
    from memmap_replay.cli import EXIT_USAGE, main

    assert main(["edit"]) == EXIT_USAGE
    assert "merge" in capsys.readouterr().err


# ---- a kill at any instant -------------------------------------------------------------------------------


def _fork_merge(out, *folders) -> int:
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        code = 1
        try:
            merge(out, *folders)
            code = 0
        finally:
            os._exit(code)
    return pid


def reap(pid: int, timeout: float = 120.0) -> None:
    """Wait for a forked child; one still running after ``timeout`` seconds is killed and the test fails."""
    deadline = time.monotonic() + timeout
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the child {pid} did not end within {timeout} s")
        time.sleep(0.005)


def test_a_merge_killed_at_any_instant_leaves_no_output_or_a_whole_one(tmp_path):
    want = make_store(tmp_path / "a", 1, 30) + make_store(tmp_path / "b", 2, 30)
    started = time.monotonic()
    reap(_fork_merge(tmp_path / "timed", tmp_path / "a", tmp_path / "b"))
    took = time.monotonic() - started
    seen = set()
    for step in range(48):  # (until every outcome was seen, at least 16 kills: a loaded machine is slower)
        if step >= 16 and seen == {"whole", "none"}:
            break
        out = tmp_path / f"m{step}"
        pid = _fork_merge(out, tmp_path / "a", tmp_path / "b")
        time.sleep(took * step / 12)
        os.kill(pid, signal.SIGKILL)
        reap(pid)
        if out.exists():
            assert_same(read_back(out), want)
            assert verify(out).ok
            seen.add("whole")
        else:
            seen.add("none")
            merge(out, tmp_path / "a", tmp_path / "b")  # the next run: cleans what the killed one left
            assert_same(read_back(out), want)
        assert not [name for name in os.listdir(tmp_path) if name.startswith(f".{out.name}.")]
    assert seen == {"whole", "none"}


def test_a_ring_source_gives_its_live_episodes(tmp_path):
    rng = np.random.default_rng(5)
    with ReplayBuffer(tmp_path / "ring", 6, 8, fields=dict(obs=("float", 3)), meta_fields=dict(task_id="int"),
                      max_steps=30, circular=True) as buffer:
        for number in range(25):  # evicts, and wraps the rows
            buffer.store_episode(obs=rng.standard_normal((int(rng.integers(1, 8)), 3)).astype(np.float32),
                                 task_id=number, end=ENDS[number % 3])
    want = read_back(tmp_path / "ring")
    assert 0 < len(want) <= 6
    report = merge(tmp_path / "m", tmp_path / "ring", tmp_path / "ring")
    assert_same(read_back(tmp_path / "m"), want + want)
    assert report.fields["obs"] in ("copy_file_range", "copied") and verify(tmp_path / "m").ok


def test_a_field_compressed_differently_is_re_encoded(tmp_path):
    pytest.importorskip("zstandard")
    want = make_store(tmp_path / "a", 1, 3) + make_store(tmp_path / "b", 2, 2)
    compress_fields(tmp_path / "a", "image", level=3)
    compress_fields(tmp_path / "b", "image", level=9)
    report = merge(tmp_path / "m", tmp_path / "a", tmp_path / "b")
    assert report.fields["image"] == "frames copied + re-encoded"  # (a's codec, the first store's, for b's too)
    assert_same(read_back(tmp_path / "m"), want)
    assert verify(tmp_path / "m").ok
