"""Crash safety of compressed fields (``core/encoded.py``): SIGKILL sweeps over commits of a ring store with a
compressed field, and readers in other processes while a writer rings through one.

The sweeps run ``test_crash.py``'s machinery as it is (its forked child running the same injected kill points,
its side log, its history of what was committed, its reopen-and-check) on this file's episode data: an
``image`` field of 16x16 uint8 frames with ``codec="zstd"`` beside raw fields. Each episode's frames compress
by a different amount (flat frames to a few dozen bytes, half noise to about half, noise not at all: those
rows are stored raw), so in the ring the frames of a new episode overlap old episodes whose rows they do not:
episodes are evicted by bytes as well as by rows and slots. The frames and row files start small and double
(``encoded._MIN_GROWTH_BYTES``, ``store._MIN_GROWTH_ROWS`` lowered for the test, inherited by the forked
child), so commits also grow the frames file while episodes are live.

A rehearsal in this process writes the same episodes with every file write, grow and meta.json commit
recorded (``rehearse``): it picks the commits to kill in (one whose eviction the frames decide, one where rows
and frames go back to 0, one that grows the frames file) and lists every kill point inside each (the frames
written, the index written, the episode table written, the eviction's meta.json, the final meta.json, the
frames file grown: file size and header apart). After each kill the folder must reopen with exactly the state
the last landed meta.json describes, every committed episode bit-exact through the library and through numpy
and zstandard alone (the spec's reading), ``verify`` without problems, and the next writer must go on writing.
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.core import encoded as encoded_module
from memmap_replay.core.codecs import frame_bound
from memmap_replay.core import format as fmt
from memmap_replay.core import store as store_module

import test_crash as crash

zstandard = pytest.importorskip("zstandard")

IMAGE = (16, 16)
FIELDS = dict(image=dict(dtype="uint8", shape=IMAGE, codec="zstd"), action=("int", 2), reward="float", flag="bool")
ROW_BYTES = IMAGE[0] * IMAGE[1]
RING = dict(max_episodes=6, max_timesteps=12, max_steps=60, circular=True)
LENGTHS = (1, 12)
REHEARSED = 20  # commits the rehearsal writes: the ring wraps twice


# ---- episode data: sent to the child in place of test_crash's (its other helpers use these by name) --------


def step_values(ep, t):
    """Step t of episode ep: every value encodes both; the image compresses well (kind 1), to about half (2), or
    not at all (0: noise, stored raw), episodes of a kind two by two."""
    v = ep * 1000 + t
    kind = ep // 2 % 3
    image = np.zeros((16, 16), np.uint8)
    if kind != 1:
        noise = np.random.default_rng([ep, t]).integers(0, 256, (16, 16), dtype=np.uint8)
        image[8 * (kind == 2):] = noise[8 * (kind == 2):]
    image[0, :4] = np.array([v], "<u4").view(np.uint8)
    return {"image": image, "action": np.array([v, -v], np.int32), "reward": float(v), "flag": bool(t % 2)}


def final_values(ep, length):
    """The final observation of episode ep: its image only (the other fields hold their defaults there)."""
    return {"image": step_values(ep, length)["image"]}


# test_crash's child with this file's data (its helpers find step_values and final_values by name)
SENT = (crash.episode_length, crash.episode_end, crash.episode_arrays, crash.write_one, step_values, final_values)
CHILD_SOURCE = "\n".join(["import numpy as np"] + [inspect.getsource(f) for f in SENT] + [crash.CHILD_MAIN])


def use_this_files_data(patch: pytest.MonkeyPatch) -> None:
    """test_crash's helpers on this file's data and fields; small growth steps (a forked child inherits them)."""
    for name, value in dict(step_values=step_values, final_values=final_values, FIELDS=FIELDS).items():
        patch.setattr(crash, name, value)
    patch.setattr(encoded_module, "_MIN_GROWTH_BYTES", 256)
    patch.setattr(store_module, "_MIN_GROWTH_ROWS", 16)


@pytest.fixture
def compressed(monkeypatch):
    """test_crash's machinery, its child included, on this file's data."""
    use_this_files_data(monkeypatch)
    monkeypatch.setattr(crash, "CHILD_SOURCE", CHILD_SOURCE)


# ---- the rehearsal: the same commits in this process, every write recorded --------------------------------


@dataclass
class Commit:
    """What commit number ``ep`` (it writes episode ``ep``) did: the calls the child's traps count, in order
    (target, what: a file of the store, or the state committed), and the episodes it evicted."""

    ep: int
    calls: list = field(default_factory=list)
    rows: tuple = ()  # the new episode's rows [lo, hi) and frames' bytes [lo, hi)
    frames: tuple = ()
    evicted: dict = field(default_factory=dict)  # id -> (overlaps its rows, overlaps its frames)

    def count(self, target):
        return sum(call[0] == target for call in self.calls)

    @property
    def by_bytes(self):
        """The eviction was the frames' doing: the newest episode it evicted shares bytes, not rows, with it."""
        return bool(self.evicted) and self.evicted[max(self.evicted)] == (False, True)

    @property
    def wraps(self):
        return self.rows[0] == 0 and self.frames[0] == 0 and bool(self.evicted)

    @property
    def grows_frames(self):
        return any(call[:2] == ("grow", "steps/image.frames.npy") for call in self.calls)


def spans(store) -> dict:
    """Each live episode's rows [lo, hi) and frames' bytes [lo, hi)."""
    table, index = store.live_table(), store.step_array("image").index
    ends = table.start + table.length + table.final
    return {int(i): ((int(lo), int(hi)), (int(index[lo, 0]), int(index[hi - 1, 0] + index[hi - 1, 1])))
            for i, lo, hi in zip(table.ids, table.start, ends)}


def overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def rehearse(folder: Path, capacity: dict, commits: int) -> list[Commit]:
    """Write episodes 0.. one commit each ('steps', as the child does) with every call a trap may count recorded."""
    crash.create_store(folder, **capacity)
    record: list = []

    def spy(target, owner, name, what):
        original = getattr(owner, name)

        def spied(*args, **kwargs):
            record.append((target, what(*args)))
            return original(*args, **kwargs)
        return spied

    def relative(file, *_):
        return file.path.relative_to(folder).as_posix()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fmt.NpyFile, "write_rows", spy("write_rows", fmt.NpyFile, "write_rows", relative))
        patch.setattr(fmt.NpyFile, "grow", spy("grow", fmt.NpyFile, "grow", relative))
        patch.setattr(os, "ftruncate", spy("ftruncate", os, "ftruncate", lambda *_: "a file's size"))
        patch.setattr(fmt, "write_meta", spy("write_meta", fmt, "write_meta", lambda _, meta: asdict(meta.state)))
        done = []
        with ReplayBuffer.from_folder(folder) as buffer:
            store = buffer.episode_store
            for ep in range(commits):
                before = spans(store)
                record.clear()
                crash.write_one(buffer, ep, crash.episode_length(ep, LENGTHS), "steps")
                after = spans(store)
                rows, frames = after[max(after)]
                evicted = {i: (overlap(before[i][0], rows), overlap(before[i][1], frames))
                           for i in sorted(set(before) - set(after))}
                done.append(Commit(ep, list(record), rows, frames, evicted))
    return done


def kill_points(commit: Commit, targets=("write_rows", "write_meta")) -> list[tuple]:
    """Every kill point of ``commit`` for ``targets``, each with what its call does: before each call, and after
    the last one; after each meta.json too (it landed) and after each file's new size (before its header)."""
    points = []
    for target in targets:
        calls = [what for kind, what in commit.calls if kind == target]
        for k, what in enumerate(calls, 1):
            points.append((target, k, "before", what))
            if target in ("write_meta", "ftruncate") or k == len(calls):
                points.append((target, k, "after", what))
    return points


# ---- the checks after each kill ----------------------------------------------------------------------------


def numpy_episodes(folder: Path) -> dict:
    """Every live episode's images read with numpy and zstandard alone, as the format spec says: the index entry
    (offset, length) of each row, one zstd frame of one row."""
    meta = json.loads((folder / "meta.json").read_text())
    state, slots = meta["state"], meta["capacity"]["max_episodes"]
    table = {name: np.load(folder / "episodes" / f"{name}.npy") for name in ("start", "length", "final", "id")}
    index = np.load(folder / "steps" / "image.index.npy", mmap_mode="r")
    frames = np.load(folder / "steps" / "image.frames.npy", mmap_mode="r")
    decompressor = zstandard.ZstdDecompressor()
    images = {}
    for episode_id in range(state["first_episode"], state["next_episode"]):
        slot = episode_id % slots
        assert table["id"][slot] == episode_id
        start = int(table["start"][slot])
        rows = []
        for offset, length in index[start:start + int(table["length"][slot]) + int(table["final"][slot])]:
            assert 0 < length <= frame_bound(ROW_BYTES) and offset + length <= state["frames"]["image"]["bytes"]
            frame = bytes(frames[offset:offset + length])
            assert zstandard.frame_content_size(frame) == ROW_BYTES
            rows.append(decompressor.decompress(frame))
        images[episode_id] = np.frombuffer(b"".join(rows), np.uint8).reshape(-1, *IMAGE)
    return images


def check_with_numpy(folder: Path, history: crash.History) -> None:
    for episode_id, images in numpy_episodes(folder).items():
        ep = history.id_to_ep[episode_id]
        length, mode = history.info[ep]
        _, _, arrays = crash.expected_rows(ep, length, mode)
        np.testing.assert_array_equal(images, arrays["image"], err_msg=f"episode {episode_id} (ep {ep}), with numpy")


def expected_state(log: crash.ChildLog) -> dict:
    """The state of the last meta.json that landed: the child logs a meta.json before writing it, and a trap at
    write_meta kills before the log (before) or after the write (after), so every logged one landed."""
    return ([log.open_state] + log.metas)[-1]


def kill_and_check(tmp_path: Path, name: str, commit: Commit, point: tuple) -> dict:
    """A child writes episodes 0.. and is killed at ``point`` inside commit ``commit.ep``; the folder must reopen
    with exactly what landed, every episode bit-exact, and take more."""
    target, k, when, what = point
    where = f"killed {when} {target} #{k} ({what}) of commit {commit.ep}"
    folder, history = crash.prepare(tmp_path, RING, name=name)
    trap = dict(target=target, k=k, when=when, arm_after=commit.ep)
    config = crash.child_config(folder, tmp_path / f"{name}.log", history, lengths=LENGTHS, commits=commit.ep + 2,
                                trap=trap)
    log = crash.run_self_killing_child(config, tmp_path)
    crash.absorb(history, log)
    assert len(log.dones) == commit.ep, f"{where}: the trap fired outside its commit"
    expected = expected_state(log)
    check_with_numpy(folder, history)
    state = crash.reopen_and_check(folder, history, log.candidates, lengths=LENGTHS)
    assert state == expected, f"{where}: reopened as {state}, not the last state that landed {expected}"
    check_with_numpy(folder, history)
    return state


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        use_this_files_data(patch)
        return rehearse(tmp_path_factory.mktemp("rehearsal") / "store", RING, REHEARSED)


def test_the_rehearsal_evicts_by_rows_by_bytes_and_by_slots_and_grows_the_frames(rehearsal):
    """The ring this file kills in does what the sweeps need (else they would test less than they say)."""
    reasons = {reason for commit in rehearsal for reason in commit.evicted.values()}
    assert {(True, True), (False, True), (False, False)} <= reasons, reasons
    assert any(commit.by_bytes for commit in rehearsal)
    assert any(commit.wraps for commit in rehearsal)
    assert sum(commit.grows_frames for commit in rehearsal if commit.ep >= 2) >= 2
    raw = [commit for commit in rehearsal if commit.ep // 2 % 3 == 0]
    assert raw and all(commit.frames[1] - commit.frames[0] > ROW_BYTES * (commit.rows[1] - commit.rows[0])
                       for commit in raw), "noise rows are frames of raw blocks, a little longer than the rows"


SWEEPS = {
    # the first commit whose eviction the frames decide, rows not going back to 0 (every write and both
    # meta.json commits)
    "evicts-by-bytes": (lambda c: c.by_bytes and not c.wraps, ("write_rows", "write_meta")),
    # the first one whose rows and frames go back to 0 (every write and both meta.json commits)
    "wraps": (lambda c: c.wraps, ("write_rows", "write_meta")),
    # the first one that grows the row files and the frames file with episodes live (each file's size, then its
    # header), then writes the frames and the index
    "grows-the-frames": (lambda c: c.grows_frames and c.count("grow") > 1 and c.ep >= 2,
                         ("grow", "ftruncate", "write_rows")),
}


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_a_kill_anywhere_in_a_commit_loses_no_committed_episode(tmp_path, compressed, rehearsal, sweep):
    chosen, targets = SWEEPS[sweep]
    commit = next(c for c in rehearsal if chosen(c))
    points = kill_points(commit, targets)
    if sweep == "grows-the-frames":  # the rows: the frames written, the index written
        points = [p for p in points if p[0] != "write_rows" or p[3].startswith("steps/image.")]
    files = {p[3] for p in points if p[0] == "write_rows"}
    assert {"steps/image.frames.npy", "steps/image.index.npy"} <= files
    if sweep != "grows-the-frames":
        assert {"episodes/id.npy", "episodes/start.npy", "meta/ep.npy"} <= files
        assert commit.count("write_meta") == 2, "the commit must evict first (its own meta.json), then commit"
    else:
        assert ("grow", "steps/image.frames.npy") in [(p[0], p[3]) for p in points]
    for number, point in enumerate(points):
        kill_and_check(tmp_path, f"kill{number}", commit, point)


def test_a_kill_between_the_eviction_and_the_rows_leaves_the_evicted_episodes_out(tmp_path, compressed, rehearsal):
    """Killed after the eviction's meta.json, before any frame: the episodes the frames evicted are gone, every
    other episode is whole, and the next writer writes over their frames."""
    commit = next(c for c in rehearsal if c.by_bytes and not c.wraps)
    state = kill_and_check(tmp_path, "store", commit, ("write_rows", 1, "before", "episodes/id.npy"))
    assert state["first_episode"] == max(commit.evicted) + 1
    assert state["next_episode"] == commit.ep


# ---- vector writers: one commit of several episodes -------------------------------------------------------

RING4 = dict(max_episodes=4, max_timesteps=12, max_steps=40, circular=True)
# 3 envs finish together (5 steps): each commit stores 3 episodes, 13 file writes each; killed in the 2nd's
VECTOR_TRAPS = [("write_rows", 14, "before"), ("write_rows", 15, "after"), ("write_rows", 16, "after"),
                ("write_rows", 26, "after"), ("write_meta", 2, "before")]


@pytest.mark.parametrize("target, k, when", VECTOR_TRAPS, ids=[f"{t}-{k}-{w}" for t, k, w in VECTOR_TRAPS])
def test_a_kill_in_a_vector_commit_of_several_episodes(tmp_path, compressed, target, k, when):
    folder, history = crash.prepare(tmp_path, RING4)
    trap = dict(target=target, k=k, when=when, arm_after=3)
    config = crash.child_config(folder, tmp_path / "log", history, mode="vector", lengths=5, commits=5, trap=trap)
    log = crash.run_self_killing_child(config, tmp_path)
    crash.absorb(history, log)
    assert [len(intent) for intent in log.intents] == [3] * 4
    state = crash.reopen_and_check(folder, history, log.candidates, lengths=5)
    assert state == expected_state(log)
    check_with_numpy(folder, history)


# ---- kills at random instants -----------------------------------------------------------------------------

ROUNDS = 6


@pytest.mark.parametrize("mode", ["steps", "whole"])
def test_kills_at_random_instants_under_a_reader_that_stays_open(tmp_path, compressed, mode):
    """ROUNDS kill/reopen cycles on one ring (test_crash's), watched by a reader open throughout."""
    rng = np.random.default_rng(29 + len(mode))
    folder, history = crash.prepare(tmp_path, RING)
    scenario = dict(mode=mode, capacity=RING)
    with ReplayBuffer.from_folder(folder, read_only=True) as survivor:
        for trial in range(ROUNDS):
            log = crash.kill_at_a_random_instant(tmp_path, folder, history, scenario, rng, trial)
            survivor.refresh()
            assert crash.check_store(survivor, history) in log.candidates
            check_with_numpy(folder, history)
            crash.reopen_and_check(folder, history, log.candidates)
            survivor.refresh()
            crash.check_store(survivor, history)
