"""The error catalogue for ``core/store.py``, the EpisodeStore: writes to a read-only or closed store, and
full buffers (episode slots and rows).

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

from memmap_replay import BufferFullError, ReadOnlyError, ReplayBuffer

from catalogue import (make_errors_store as make, raises, good_step, good_episode, good_batch, committed,
                       assert_same, assert_unchanged, files_of, nested_one_episode)


# ---- read-only and closed stores ---------------------------------------------------------------------

WRITE_PARAMS = [
    pytest.param(lambda b: b.store(**good_step(5, 0)), id="store"),
    pytest.param(lambda b: b.store_episode(**good_episode(5, 2)), id="store_episode"),
    pytest.param(lambda b: b.store_batch(**good_batch([5, 6], 0)), id="store_batch"),
    pytest.param(lambda b: b.begin_episode(), id="begin_episode"),
    pytest.param(nested_one_episode, id="one_episode"),
    pytest.param(lambda b: b.batched_episode(2).__enter__(), id="batched_episode"),
    pytest.param(lambda b: b.vector_writer(2), id="vector_writer"),
    pytest.param(lambda b: b.update(0, reward=1.0), id="update"),
    pytest.param(lambda b: b.update(0, task=3), id="update-meta"),
    pytest.param(lambda b: b.clear(), id="clear"),
    pytest.param(lambda b: b.advance_episode(), id="advance_episode"),
    pytest.param(lambda b: b.end_episode(), id="end_episode"),
]


@pytest.mark.parametrize("open_read_only", [
    pytest.param(lambda folder: ReplayBuffer.from_folder(folder, read_only=True), id="from_folder"),
    pytest.param(lambda folder: ReplayBuffer(folder, read_only=True), id="constructor"),
])
@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_every_write_to_a_read_only_buffer_raises_read_only_error(folder, open_read_only, write):
    files = files_of(folder)
    with open_read_only(folder) as reader:
        assert reader.read_only
        before = committed(reader)
        with raises(ReadOnlyError, match=r"is open read-only; open it with read_only=False"):
            write(reader)
        assert_same(before, committed(reader))
    assert files_of(folder) == files
    # it was a PermissionError too, and a writer can still append afterwards
    with ReplayBuffer.from_folder(folder) as writer:
        assert_unchanged(writer, committed(writer))


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_every_write_to_a_closed_buffer_raises_read_only_error(folder, write):
    buf = ReplayBuffer.from_folder(folder)
    buf.close()
    files = files_of(folder)
    with raises(ReadOnlyError, match=r"is closed"):
        write(buf)
    assert files_of(folder) == files


# ---- capacity: full buffers --------------------------------------------------------------------------


def fill(buffer):
    while buffer.num_episodes < buffer.max_episodes:
        buffer.store_episode(**good_episode(2 + buffer.num_episodes, 2))


def one_episode_write(b):
    with b.one_episode():
        b.store(**good_step(9, 0))


def begin_end_write(b):
    b.begin_episode()
    b.store(**good_step(9, 0))
    b.end_episode()


def advance_write(b):
    b.begin_episode()
    b.store(**good_step(9, 0))
    b.advance_episode()


def batched_write(b):
    with b.batched_episode(1):
        b.store_batch(**good_batch([9], 0))


def vector_write(b):
    b.vector_writer(2).store(**good_batch([9, 10], 0), truncated=[False, True])


FULL_WRITES = {"store_episode": lambda b: b.store_episode(**good_episode(9, 2)), "one_episode": one_episode_write,
               "end_episode": begin_end_write, "advance_episode": advance_write, "batched_episode": batched_write,
               "vector_writer": vector_write}


@pytest.mark.parametrize("write", FULL_WRITES.values(), ids=FULL_WRITES.keys())
def test_full_buffer_refuses_and_says_how_to_fix(buffer, write):
    fill(buffer)
    before = committed(buffer)
    with raises(BufferFullError,
                match=r"the buffer is full: all 6 episode slots are used and it is not circular") as info:
        write(buffer)
    message = str(info.value)
    kept = write is advance_write  # 0.2.3's flat loop keeps the open episode for a grow; reset_() drops it
    assert "circular=True" in message and "max_episodes" in message
    assert ("reset_()" if kept else "clear()") in message and ("is kept" in message) == kept
    assert_same(before, committed(buffer))
    buffer.reset_() if kept else buffer.clear()
    assert_unchanged(buffer, committed(buffer))

def test_full_buffer_commits_nothing_when_several_episodes_end_together(buffer):
    while buffer.num_episodes < buffer.max_episodes - 1:
        buffer.store_episode(**good_episode(2 + buffer.num_episodes, 2))
    before = committed(buffer)
    writer = buffer.vector_writer(2)
    writer.store(**good_batch([9, 10], 0))
    with raises(BufferFullError, match=r"buffer is full"):
        writer.store(**good_batch([9, 10], 1), terminated=[True, True])  # one would fit: all or nothing
    assert_same(before, committed(buffer))

def test_full_rows_refuse(tmp_path):
    with make(tmp_path / "rows", max_timesteps=5, max_steps=12) as buf:
        buf.store_episode(**good_episode(0, 5))
        buf.store_episode(**good_episode(1, 5))
        before = committed(buf)
        with raises(BufferFullError,
                    match=r"the buffer is full: .*rows.*circular=True.*max_episodes/max_steps.*clear\(\)"):
            buf.store_episode(**good_episode(2, 5))
        assert_same(before, committed(buf))
        buf.store_episode(**good_episode(2, 1))  # what still fits is accepted
        assert buf.num_episodes == 3
