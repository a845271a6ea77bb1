"""The error catalogue for ``buffer.py``, the ReplayBuffer facade: calls outside or inside an open episode,
``read_only=True`` with ``overwrite=True``, reopening a store without its fields.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

from memmap_replay import EpisodeStateError, OptionError, ReplayBuffer, SchemaError

from catalogue import (make_errors_store as make, raises, good_step, good_episode, good_batch, committed,
                       assert_same, assert_episode, assert_unchanged, files_of, nested_one_episode)


# ---- the store every test starts from ----------------------------------------------------------------


def test_fixture_store_holds_what_was_written(buffer):
    episodes, _ = committed(buffer)
    assert [episode["length"] for episode in episodes] == [3, 4]
    assert_episode(episodes[0], 0, range(3))
    assert_episode(episodes[1], 1, range(4))
    assert [episode["end"] for episode in episodes] == [0, 1]


# ---- episode state -----------------------------------------------------------------------------------

# (store() and store_batch() outside an episode start 0.2.3's flat loop: tests/compat/test_buffer_api.py)
STATE_ERRORS = {
    "end_episode-without-episode": (lambda b: b.end_episode(), r"no episode is open: call begin_episode\(\) first"),
    "set_episode_end-without-episode": (lambda b: b.set_episode_end("terminated"),
                                        r"set_episode_end\(\) needs an open episode"),
}


@pytest.mark.parametrize("action, match", STATE_ERRORS.values(), ids=STATE_ERRORS.keys())
def test_call_outside_an_episode(buffer, action, match):
    before = committed(buffer)
    with raises(EpisodeStateError, match=match):
        action(buffer)
    assert_unchanged(buffer, before)

def test_store_after_one_episode_closed_opens_an_episode_that_commits_only_on_advance(buffer):
    with buffer.one_episode():
        buffer.store(**good_step(5, 0))
    before = committed(buffer)
    buffer.store(**good_step(5, 1))  # 0.2.3's flat loop: the episode is open, in RAM
    assert_same(committed(buffer), before)
    with raises(EpisodeStateError, match=r"cannot begin an episode while an episode is open.*advance_episode\(\)"):
        buffer.begin_episode()
    buffer.advance_episode()
    episodes, _ = committed(buffer)
    assert_same((episodes[:-1], b""), (before[0], b""))
    assert_episode(episodes[-1], 5, [1])


INSIDE_EPISODE = {
    "nested-one_episode": nested_one_episode,
    "begin_episode": lambda b: b.begin_episode(),
    "store_episode": lambda b: b.store_episode(**good_episode(8, 2)),
    "batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "store_batch": lambda b: b.store_batch(**good_batch([5, 6], 0)),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("action", INSIDE_EPISODE.values(), ids=INSIDE_EPISODE.keys())
def test_call_inside_an_open_episode_is_refused_and_the_episode_continues(buffer, action):
    before = committed(buffer)
    with buffer.one_episode(task=5, weight=1.25):
        buffer.store(**good_step(5, 0))
        with raises(EpisodeStateError, match=r"(while an episode is open|needs an open `with buffer\.batched_episode)"):
            action(buffer)
        buffer.store(**good_step(5, 1))
    episodes, _ = committed(buffer)
    assert len(episodes) == 3
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))


INSIDE_BATCHED = {
    "one_episode": nested_one_episode,
    "begin_episode": lambda b: b.begin_episode(),
    "nested-batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "store_episode": lambda b: b.store_episode(**good_episode(8, 2)),
    "store": lambda b: b.store(**good_step(5, 0)),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("action", INSIDE_BATCHED.values(), ids=INSIDE_BATCHED.keys())
def test_call_inside_batched_episode_is_refused_and_the_batch_continues(buffer, action):
    before = committed(buffer)
    with buffer.batched_episode(2):
        buffer.store_batch(**good_batch([5, 6], 0))
        with raises(EpisodeStateError,
                    match=r"(while an episode is open|store\(\) needs an open episode.*store_batch)"):
            action(buffer)
        buffer.store_batch(**good_batch([5, 6], 1))
    episodes, _ = committed(buffer)
    assert len(episodes) == 4
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert_episode(episodes[3], 6, range(2))

def test_exception_inside_one_episode_discards_it(buffer):
    before = committed(buffer)
    with pytest.raises(KeyboardInterrupt, match="stop"):
        with buffer.one_episode():
            buffer.store(**good_step(5, 0))
            raise KeyboardInterrupt("stop")
    assert_unchanged(buffer, before)


# ---- options the facade checks: read_only with overwrite, reopening without fields -------------------


def test_read_only_with_overwrite_is_refused(folder):
    files = files_of(folder)
    with raises(OptionError, match=r"read_only=True and overwrite=True contradict each other"):
        make(folder, read_only=True, overwrite=True)
    assert files_of(folder) == files

def test_reopen_without_fields_points_to_from_folder(folder):
    with raises(SchemaError, match=r"fields are required.*ReplayBuffer\.from_folder\(folder\)"):
        ReplayBuffer(folder)
