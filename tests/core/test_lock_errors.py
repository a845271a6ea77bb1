"""The error catalogue for ``core/lock.py``, the writer lock: a second writer is refused at its first write,
and writes once the first one closes.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

from memmap_replay import ReplayBuffer, StoreLockedError

from catalogue import (make_errors_store as make, raises, good_episode, committed, assert_same,
                       assert_episode, assert_unchanged, nested_one_episode)


# ---- a second writer ---------------------------------------------------------------------------------

SECOND_WRITER_WRITES = {
    "store_episode": lambda b: b.store_episode(**good_episode(5, 2)),
    "begin_episode": lambda b: b.begin_episode(),
    "one_episode": nested_one_episode,
    "batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "vector_writer": lambda b: b.vector_writer(2),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("write", SECOND_WRITER_WRITES.values(), ids=SECOND_WRITER_WRITES.keys())
def test_second_writer_is_refused_at_its_first_write(folder, write):
    with ReplayBuffer.from_folder(folder) as first:
        first.store_episode(**good_episode(2, 2))  # the first write takes the writer lock
        before = committed(first)
        with ReplayBuffer.from_folder(folder) as second:  # opening is fine: the lock is taken at a write
            with raises(StoreLockedError, match=r"one writer at a time.*close\(\) the other writer.*read_only=True"):
                write(second)
            assert_same(before, committed(second))
            with raises(StoreLockedError, match=r"one writer at a time"):  # still refused, still clear
                write(second)
        with raises(StoreLockedError, match=r"one writer at a time"):
            make(folder, overwrite=True)  # never wipes a store another writer holds
        with ReplayBuffer.from_folder(folder, read_only=True) as reader:
            assert_same(before, committed(reader))
        assert_unchanged(first, before)

def test_refused_second_writer_can_write_once_the_first_closes(folder):
    with ReplayBuffer.from_folder(folder) as second:
        with ReplayBuffer.from_folder(folder) as first:
            first.store_episode(**good_episode(2, 2))
            with raises(StoreLockedError, match=r"one writer at a time"):
                second.store_episode(**good_episode(3, 2))
        second.store_episode(**good_episode(3, 2))  # takes the lock, sees the first writer's episode
        episodes, _ = committed(second)
        assert len(episodes) == 4
        assert_episode(episodes[2], 2, range(2))
        assert_episode(episodes[3], 3, range(2))
