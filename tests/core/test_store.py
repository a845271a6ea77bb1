"""EpisodeStore: placement, ring eviction of whole episodes, capacity, clear, readers refreshing."""

from dataclasses import replace

import numpy as np
import pytest

from memmap_replay import BufferFullError, CorruptStoreError, ReplayBuffer
from memmap_replay.core import format as fmt
from memmap_replay.core.store import EpisodeStore

from conftest import episode_arrays
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memmap_replay.core.writer import whole_episode


def live_numbers(buffer):
    """Episode numbers (stored in task_id) of the live episodes, oldest first."""
    data = buffer.get_all_data(meta_fields=("task_id",))
    return data["task_id"].tolist() if data else []


def check_intact(buffer):
    """Every live episode holds exactly the data written for its number."""
    store = buffer.episode_store
    table = store.live_table()
    numbers = store.meta_array("task_id")[table.slots]
    for number, start, length in zip(numbers, table.start, table.length):
        expected = episode_arrays(int(number), int(length))
        for name, values in expected.items():
            np.testing.assert_array_equal(store.step_array(name)[start:start + length], values)


def test_ring_evicts_oldest_when_slots_run_out(make_buffer):
    buffer = make_buffer(max_episodes=3, circular=True)
    for number in range(7):
        buffer.store_episode(**episode_arrays(number, 5), task_id=number)
        check_intact(buffer)
    assert live_numbers(buffer) == [4, 5, 6]
    assert buffer.num_episodes == 3 and len(buffer) == 3


def test_ring_evicts_whole_episodes_when_rows_run_out(make_buffer, rng):
    buffer = make_buffer(max_episodes=50, max_timesteps=20, max_steps=60, circular=True)
    lengths = rng.integers(1, 21, size=80)
    for number, length in enumerate(lengths):
        buffer.store_episode(**episode_arrays(number, int(length)), task_id=number)
        check_intact(buffer)
        table = buffer.episode_store.live_table()
        assert (table.start + table.length <= 60).all()
        # live episodes are the newest ones, in order, and their rows never overlap
        numbers = live_numbers(buffer)
        assert numbers == list(range(number - len(numbers) + 1, number + 1))
        order = np.argsort(table.start)
        ends = (table.start + table.length)[order]
        assert (table.start[order][1:] >= ends[:-1]).all()


def test_non_circular_full_raises_and_keeps_everything(make_buffer):
    buffer = make_buffer(max_episodes=2)
    buffer.store_episode(**episode_arrays(0, 5), task_id=0)
    buffer.store_episode(**episode_arrays(1, 5), task_id=1)
    with pytest.raises(BufferFullError, match="circular=True"):
        buffer.store_episode(**episode_arrays(2, 5), task_id=2)
    assert live_numbers(buffer) == [0, 1]
    check_intact(buffer)


def test_non_circular_row_capacity(make_buffer):
    buffer = make_buffer(max_episodes=10, max_timesteps=20, max_steps=30)
    buffer.store_episode(**episode_arrays(0, 20), task_id=0)
    with pytest.raises(BufferFullError, match="rows"):
        buffer.store_episode(**episode_arrays(1, 11), task_id=1)
    buffer.store_episode(**episode_arrays(1, 10), task_id=1)
    assert live_numbers(buffer) == [0, 1]


def test_clear_then_write_again(make_buffer):
    buffer = make_buffer(max_episodes=3)
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 4), task_id=number)
    buffer.clear()
    empty = buffer.get_all_data()  # empty tensors of the fields' dtypes and shapes
    assert buffer.num_episodes == 0 and empty["episode_lens"].tolist() == [] and empty["obs"].shape == (0, 0, 3)
    for number in range(3, 6):
        buffer.store_episode(**episode_arrays(number, 4), task_id=number)
    assert live_numbers(buffer) == [3, 4, 5]
    check_intact(buffer)


def test_reader_refresh_sees_new_commits_only(make_buffer):
    writer = make_buffer(max_episodes=4, circular=True)
    writer.store_episode(**episode_arrays(0, 5), task_id=0)
    reader = ReplayBuffer.from_folder(writer.folder, read_only=True)
    assert reader.num_episodes == 1
    with writer.one_episode(task_id=1):
        writer.store(**{k: v[0] for k, v in episode_arrays(1, 1).items()})
        assert reader.refresh() is False and reader.num_episodes == 1  # open episode invisible
    assert reader.refresh() is True and live_numbers(reader) == [0, 1]
    for number in range(2, 9):
        writer.store_episode(**episode_arrays(number, 7), task_id=number)
    reader.refresh()
    assert live_numbers(reader) == [5, 6, 7, 8]
    check_intact(reader)
    reader.close()


def test_episodes_are_contiguous_and_final_row_follows(make_buffer):
    buffer = make_buffer()
    arrays = episode_arrays(3, 6)
    buffer.store_episode(**arrays, task_id=3, end="truncated", final=dict(obs=np.full(3, 99.0)))
    buffer.store_episode(**episode_arrays(4, 2), task_id=4, end="terminated")
    table = buffer.episode_store.live_table()
    assert table.final.tolist() == [True, False] and table.end.tolist() == [2, 1]
    assert table.start.tolist() == [0, 7]  # the final row takes row 6
    obs = buffer.episode_store.step_array("obs")
    np.testing.assert_array_equal(obs[6], [99.0, 99.0, 99.0])
    assert buffer.episode_store.step_array("reward")[6] == 0  # other fields take their default there



@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    max_episodes=st.integers(1, 6),
    extra_rows=st.integers(0, 40),
    batches=st.lists(st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=3),
                     min_size=1, max_size=25),
)
def test_ring_property_never_exposes_overwritten_data(tmp_path_factory, max_episodes, extra_rows, batches):
    """Random episode lengths, final rows and multi-episode commits: live episodes are always the newest
    ones, contiguous in id, intact, and their rows never overlap."""
    folder = tmp_path_factory.mktemp("ring")
    buffer = ReplayBuffer(folder, max_episodes=max_episodes, max_timesteps=8, max_steps=9 + extra_rows,
                          fields=dict(obs=("float", (3,)), action=("int", 2), reward="float"),
                          meta_fields=dict(task_id="int"), circular=True)
    number = 0
    for batch in batches:
        episodes = []  # one commit of several episodes exercises in-commit evictions too
        for length, with_final in batch:
            arrays = dict(episode_arrays(number, length), task_id=number)
            final = dict(obs=np.full(3, -number, np.float32)) if with_final else None
            episodes.append(whole_episode(buffer.schema, 8, arrays, final=final))
            number += 1
        buffer.episode_store.commit(episodes)
        check_intact(buffer)
        table = buffer.episode_store.live_table()
        ends = table.start + table.length + table.final
        assert (ends <= 9 + extra_rows).all()
        order = np.argsort(table.start)
        assert (table.start[order][1:] >= ends[order][:-1]).all()
        numbers = live_numbers(buffer)
        assert numbers == list(range(number - len(numbers), number)) and 1 <= len(numbers) <= max_episodes
        finals = buffer.episode_store.step_array("obs")[(table.start + table.length)[table.final]]
        np.testing.assert_array_equal(finals[:, 0], -np.asarray(numbers)[table.final])
    buffer.close()


def test_readers_open_cleanly_while_a_ring_writer_commits(tmp_path):
    """Opening read-only races the writer's commits; it must retry, never report damage."""
    import subprocess
    import sys
    import time

    folder = tmp_path / "live"
    ReplayBuffer(folder, max_episodes=3, max_timesteps=4, fields=dict(x="float"), meta_fields=dict(n="int"),
                 circular=True).close()
    script = (
        "import numpy as np, sys\n"
        "from memmap_replay import ReplayBuffer\n"
        f"b = ReplayBuffer.from_folder({str(folder)!r})\n"
        "for n in range(3000):\n"
        "    b.store_episode(x=np.full(1 + n % 4, n, np.float32), n=n)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script])
    opened = 0
    try:
        deadline = time.monotonic() + 20
        while writer.poll() is None and time.monotonic() < deadline:
            reader = ReplayBuffer.from_folder(folder, read_only=True)
            opened += 1
            reader.close()
    finally:
        writer.kill()
        writer.wait()
    assert opened > 0


@pytest.mark.parametrize("damaged", [False, True], ids=["whole", "write_head-damaged-by-the-grow"])
def test_opening_while_a_writer_grows_the_store_checks_the_meta_json_it_takes(tmp_path, monkeypatch, damaged):
    """A writer grows a ring and commits between a reader's read of meta.json and its check of the episode
    table: the check's table read takes the grown store's meta.json (its slots moved), so the check starts over
    against that one (it compared the old write head with the new table's ends: a CorruptStoreError on a whole
    store). A meta.json that is damaged in the grown store is still refused."""
    folder = tmp_path / "ring"
    writer = ReplayBuffer(folder, max_episodes=4, max_timesteps=4, max_steps=12, fields=dict(x="float"),
                          circular=True)
    for n in range(6):  # ids 0..5: the grow to 6 slots moves live episodes
        writer.store_episode(x=np.full(2 + n % 3, n, np.float32))
    live_table, pending = EpisodeStore.live_table, [True]

    def grow_then_read(store, **options):
        if pending and not store.is_writer:
            pending.clear()
            writer.grow(max_episodes=6, max_steps=20)
            writer.store_episode(x=np.full(3, 99, np.float32))  # a new write head
            if damaged:
                meta = writer.episode_store.meta
                fmt.write_meta(folder, replace(meta, state=replace(meta.state, write_head=1)))
        return live_table(store, **options)

    monkeypatch.setattr(EpisodeStore, "live_table", grow_then_read)
    if damaged:
        with pytest.raises(CorruptStoreError, match=r"meta\.json's state\.write_head is 1 \(expected 10, the row "
                                                    r"after the newest episode 6, or beyond it, or 0\)"):
            EpisodeStore.open(folder, "r")
    else:
        reader = EpisodeStore.open(folder, "r")
        assert pending == [] and reader.meta == writer.episode_store.meta
        table, expected = reader.live_table(), writer.episode_store.live_table()
        np.testing.assert_array_equal(table.ids, expected.ids)
        np.testing.assert_array_equal(table.start, expected.start)
        reader.close()
    writer.close()
