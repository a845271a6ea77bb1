"""Growing a store in place (core/grow.py, EpisodeStore.grow, ReplayBuffer.grow): the rules, the slot moves,
every episode intact afterwards, readers following a grow, and a SIGKILL at every I/O step of a grow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import traceback
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import BufferFullError, EpisodeStateError, OptionError, ReplayBuffer, SchemaMismatchError
from memmap_replay.core import format as fmt
from memmap_replay.core.grow import grow_layouts, moves
from memmap_replay.sharing.verify import verify

from conftest import REAL_FSYNC, SMALL_FIELDS, SMALL_META, episode_arrays


def length_of(number: int) -> int:
    return 2 + number % 4


def fill(buffer: ReplayBuffer, numbers) -> None:
    for number in numbers:
        buffer.store_episode(**episode_arrays(number, length_of(number)), task_id=number, end="terminated")


def contents(buffer: ReplayBuffer) -> dict[int, tuple]:
    """task_id -> (obs, action, reward, end) of every live episode, read through the episode table."""
    store = buffer.episode_store
    table = store.live_table()
    tasks = store.meta_array("task_id")
    out = {}
    for slot, start, length, end in zip(table.slots, table.start, table.length, table.end):
        rows = slice(int(start), int(start + length))
        out[int(tasks[slot])] = tuple(np.array(store.step_array(name)[rows]) for name in ("obs", "action", "reward")) \
            + (int(end),)
    return out


def expected(numbers) -> dict[int, tuple]:
    out = {}
    for number in numbers:
        arrays = episode_arrays(number, length_of(number))
        out[number] = (arrays["obs"], arrays["action"], arrays["reward"], 1)
    return out


def assert_holds(buffer: ReplayBuffer, numbers, *, evicted_ok: bool = False) -> None:
    """The buffer holds exactly the episodes ``numbers`` (``evicted_ok``: some of the oldest may be gone), intact."""
    got, want = contents(buffer), expected(numbers)
    if evicted_ok:
        assert sorted(got) == sorted(want)[len(want) - len(got):]
        want = {number: want[number] for number in got}
    assert sorted(got) == sorted(want)
    for number in want:
        for a, b in zip(got[number][:3], want[number][:3]):
            np.testing.assert_array_equal(a, b)
        assert got[number][3] == want[number][3]


# ---- the slot arithmetic -------------------------------------------------------------------------------------


def test_every_layout_path_moves_only_to_free_slots():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        old = int(rng.integers(1, 40))
        new = old + int(rng.integers(1, 60))
        live = int(rng.integers(1, old + 1))
        first = int(rng.integers(0, 500))
        ids = np.arange(first, first + live)
        path = grow_layouts(ids, old, new)
        assert path[-1] == new and len(path) <= 2
        counts = [old, *path]
        for a, b in zip(counts, counts[1:]):
            assert moves(ids, a, b) is not None, (ids, old, new, path)
        if len(path) == 2:
            assert path[0] != new


def test_ids_below_the_old_count_never_move():
    ids = np.arange(0, 7)
    assert not moves(ids, 7, 100).any()
    assert grow_layouts(ids, 7, 100) == [100]


# ---- what may change -------------------------------------------------------------------------------------------


def test_a_full_store_takes_more_episodes_after_a_grow(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6)
    fill(buffer, range(3))
    with pytest.raises(BufferFullError, match="all 3 episode slots are used"):
        fill(buffer, [3])
    buffer.grow(max_episodes=8)
    assert (buffer.max_episodes, buffer.max_steps) == (8, 3 * 7 + 5 * 7)  # room for the added episodes
    fill(buffer, range(3, 8))
    assert_holds(buffer, range(8))
    with pytest.raises(BufferFullError, match="all 8 episode slots are used"):
        fill(buffer, [8])


def test_rows_and_episode_length_grow(make_buffer):
    buffer = make_buffer(max_episodes=10, max_timesteps=5, max_steps=8)
    fill(buffer, [0, 1])  # 2 + 3 rows
    with pytest.raises(BufferFullError, match="rows left of max_steps=8"):
        fill(buffer, [2])
    buffer.grow(max_steps=100, max_timesteps=9)
    assert (buffer.max_episodes, buffer.max_steps, buffer.max_timesteps) == (10, 100, 9)
    fill(buffer, [2, 3, 4, 5])
    with buffer.one_episode(task_id=99):  # longer than the old max_timesteps
        for t in range(9):
            buffer.store(obs=np.zeros(3, np.float32), action=np.zeros(2, np.int32), reward=0.0)
    assert buffer.episode_lens[buffer.live_episodes].tolist() == [2, 3, 4, 5, 2, 3, 9]


def test_a_store_becomes_a_ring(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6)
    fill(buffer, range(3))
    buffer.grow(circular=True)
    assert buffer.circular and buffer.max_episodes == 3
    fill(buffer, range(3, 5))
    assert_holds(buffer, range(2, 5))


@pytest.mark.parametrize("options,match", [
    (dict(max_episodes=2), r"max_episodes must be at least the store's max_episodes=3 \(got 2\): a grow never shrinks"),
    (dict(max_steps=5), r"max_steps must be at least the store's max_steps=21 \(got 5\)"),
    (dict(max_timesteps=1), r"max_timesteps must be at least the store's max_timesteps=6"),
    (dict(max_timesteps=50), r"max_steps must be at least max_timesteps \+ 1 = 51 \(got 21\)"),
    (dict(max_episodes=2.5), r"max_episodes must be a positive int \(got 2.5\)"),
    (dict(circular="yes"), r"circular must be True or False"),
])
def test_what_a_grow_refuses_leaves_the_store_as_it_was(make_buffer, options, match):
    buffer = make_buffer(max_episodes=3, max_timesteps=6)
    fill(buffer, range(2))
    before = (buffer.folder / "meta.json").read_bytes()
    with pytest.raises(OptionError, match=match):
        buffer.grow(**options)
    assert (buffer.folder / "meta.json").read_bytes() == before


def test_a_ring_stays_a_ring(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6, circular=True)
    with pytest.raises(OptionError, match="circular must stay True: the store is a ring"):
        buffer.grow(circular=False)


def test_no_grow_inside_an_episode_or_read_only(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6)
    fill(buffer, [0])
    with buffer.one_episode(task_id=1):
        buffer.store(obs=np.zeros(3, np.float32), action=np.zeros(2, np.int32), reward=0.0)
        with pytest.raises(EpisodeStateError, match="cannot grow the store while an episode is open"):
            buffer.grow(max_episodes=5)
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    with pytest.raises(Exception, match="cannot grow the store: .* is open read-only"):
        reader.grow(max_episodes=5)
    reader.close()


def test_reopening_with_a_larger_capacity_says_how_to_grow(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6)
    buffer.close()
    with pytest.raises(SchemaMismatchError, match=r"max_episodes: stored 3, asked for "
                                                  r"9(.|\n)*\.grow\(max_episodes=9, "
                                                  r"max_steps=63\)(.|\n)*memmap-replay grow .* "
                                                  r"--max-episodes 9 --max-steps 63`$"):
        ReplayBuffer(buffer.folder, 9, 6, SMALL_FIELDS, SMALL_META)
    with pytest.raises(SchemaMismatchError,
                       match=r"stored 3, asked for 2\nopen it with ReplayBuffer.from_folder\(folder\), "
                                                   r"or pass overwrite=True to replace it$"):
        ReplayBuffer(buffer.folder, 2, 6, SMALL_FIELDS, SMALL_META, max_steps=21)


# ---- rings whose slots move ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stored,old,new", [(7, 3, 5), (7, 3, 4), (11, 4, 6), (30, 5, 6), (30, 5, 13), (9, 3, 6)])
def test_a_ring_grows_with_every_episode_intact(make_buffer, stored, old, new):
    buffer = make_buffer(max_episodes=old, max_timesteps=6, circular=True)
    fill(buffer, range(stored))
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert_holds(reader, range(stored - old, stored))
    buffer.grow(max_episodes=new)
    assert_holds(buffer, range(stored - old, stored))
    assert_holds(reader, range(stored - old, stored))  # a reader in another object follows the new capacity
    assert reader.max_episodes == new
    fill(buffer, range(stored, stored + new))
    assert_holds(buffer, range(stored, stored + new))
    buffer.close()
    again = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert_holds(again, range(stored, stored + new))
    assert verify(buffer.folder).ok
    reader.close()
    again.close()


def test_samplers_and_views_made_after_a_grow_see_everything(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6, circular=True)
    fill(buffer, range(7))
    buffer.grow(max_episodes=5)
    fill(buffer, range(7, 9))
    batch = buffer.sample(64)
    assert set(np.unique(batch["task_id"]).tolist()) <= set(range(4, 9))
    assert len(set(np.unique(batch["task_id"]).tolist())) >= 4


# ---- SIGKILL in the middle of a grow -------------------------------------------------------------------------

def grow_in_a_child(folder: Path, kill_at: int, options: dict) -> tuple[int, str]:
    """Grow the store at ``folder`` in a forked child that SIGKILLs itself before I/O step ``kill_at`` of the
    grow (after step ``-kill_at`` for a negative one, never for 0): (its exit code, -9 when killed; what it
    wrote: the number of steps the grow took, or its traceback). A fork, not a new interpreter: a kill each
    I/O step of four grows is some 170 children, and a fresh one costs a second to import."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        code = 1
        try:
            os.close(read)
            signal.alarm(120)  # (a hang guard: SIGALRM ends the child)
            os.fsync = REAL_FSYNC  # a durable grow syncs for real, as in a program
            calls = [0]

            def counted(real):
                def call(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == kill_at:  # before the call
                        os.kill(os.getpid(), signal.SIGKILL)
                    result = real(*args, **kwargs)
                    if calls[0] == -kill_at:  # after it
                        os.kill(os.getpid(), signal.SIGKILL)
                    return result
                return call

            buffer = ReplayBuffer.from_folder(folder)
            buffer.episode_store.require_writable("grow")  # the lock, before counting
            for name in ("write_rows", "grow", "sync"):
                setattr(fmt.NpyFile, name, counted(getattr(fmt.NpyFile, name)))
            fmt.write_meta = counted(fmt.write_meta)
            os.ftruncate = counted(os.ftruncate)
            buffer.grow(**options)
            os.write(write, str(calls[0]).encode())
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), said


@pytest.mark.parametrize("stored,old,options,durable", [
    (3, 3, dict(max_episodes=6, max_steps=200), False),  # nothing moves
    (7, 3, dict(max_episodes=5), False),  # two commits (through 4 slots)
    (7, 3, dict(max_episodes=4), True),  # two commits (through more slots than asked)
    (9, 3, dict(max_episodes=5, max_timesteps=9), False),  # moves in one commit
])
def test_a_grow_killed_at_any_step_leaves_every_episode(tmp_path, stored, old, options, durable):
    made = tmp_path / "made"
    buffer = ReplayBuffer(made, old, 6, SMALL_FIELDS, SMALL_META, circular=stored > old, durable=durable)
    fill(buffer, range(stored))
    live = range(max(0, stored - old), stored)
    ids = np.arange(stored - len(live), stored)
    path = grow_layouts(ids, old, options["max_episodes"])
    buffer.close()
    shutil.copytree(made, tmp_path / "whole")
    code, said = grow_in_a_child(tmp_path / "whole", 0, options)  # no kill: how many steps a grow takes
    assert code == 0, said
    steps = int(said)
    assert steps >= 2
    seen = set()
    for kill_at in [*range(1, steps + 1), -steps]:  # before every I/O step of the grow, and after the last
        folder = tmp_path / f"kill{kill_at}"
        shutil.copytree(made, folder)
        code, said = grow_in_a_child(folder, kill_at, options)
        assert code == -signal.SIGKILL, said
        reopened = ReplayBuffer.from_folder(folder)  # (takes the lock at its first write: cleans temps)
        count = reopened.max_episodes
        assert count in (old, *path), (kill_at, count)
        seen.add(count)
        assert_holds(reopened, live)
        report = verify(folder)
        assert report.ok, report
        # a store left at any capacity takes episodes, and growing again finishes the job when it can
        if count <= options["max_episodes"]:
            reopened.grow(**options)
        fill(reopened, [100])
        assert_holds(reopened, [*live, 100], evicted_ok=reopened.circular)
        assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]  # the writer removed the temps
        reopened.close()
    assert seen == {old, *path}  # every committed state was reached by some kill
    assert json.loads((made / "meta.json").read_text())["capacity"]["max_episodes"] == old


def test_a_view_in_another_store_object_follows_a_grow(make_buffer):
    buffer = make_buffer(max_episodes=3, max_timesteps=6, circular=True)
    fill(buffer, range(7))
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    sampler = reader.sampler("uniform", seed=0)
    assert set(sampler.batch(64)["task_id"].tolist()) == {4, 5, 6}
    buffer.grow(max_episodes=5)  # moves slots through an intermediate count
    fill(buffer, range(7, 9))
    sampler.refresh()
    batch = sampler.batch(256)
    assert set(batch["task_id"].tolist()) == set(range(4, 9))
    assert (batch["obs"][:, 0].numpy() // 1000 == batch["task_id"].numpy()).all()  # the meta of each row's episode
    buffer.grow(max_timesteps=9, max_steps=200)
    with pytest.raises(SchemaMismatchError, match=r"was grown to max_timesteps=9 since this view was made \(its keys "
                                                   r"count 6 steps an episode\): make a new view"):
        sampler.refresh()
    assert set(reader.sampler("uniform", seed=0).batch(64)["task_id"].tolist()) <= set(range(4, 9))
    reader.close()


def test_a_multiple_of_the_old_count_moves_in_one_commit():
    rng = np.random.default_rng(2)
    for _ in range(2000):
        old = int(rng.integers(1, 300))
        first, live = int(rng.integers(0, 10**6)), int(rng.integers(1, old + 1))
        ids = np.arange(first, first + live)
        new = old * int(rng.integers(2, 6))
        assert moves(ids, old, new) is not None and grow_layouts(ids, old, new) == [new]
