"""Episodes as a read API (core/episodes.py, ReplayBuffer.episode/episodes/iterate_episodes/sample_episodes/
ends): values, ends and final observations of episodes of known ends, negative indices, filters, seeded
draws, the ring evicting episodes held (by the writer and by a reader in another store object)."""

import numpy as np
import pytest

from memmap_replay import (Episode, EpisodeList, EpisodeStateError, IndexRangeError, IndexTypeError, OptionError,
                           ReplayBuffer, SampleExpiredError)
from memmap_replay.core.episodes import end_names, step_flags

from conftest import episode_arrays


def test_episodes_of_known_ends(three):
    a, b, c = three.episodes()
    assert [len(a), len(b), len(c)] == [4, 3, 3]
    assert [a.end, b.end, c.end] == ["terminated", "truncated", None]
    assert [a.terminated, b.terminated, c.terminated] == [True, False, False]
    assert [a.truncated, b.truncated, c.truncated] == [False, True, False]
    assert a.terminations.tolist() == [False, False, False, True] and not a.truncations.any()
    assert b.truncations.tolist() == [False, False, True] and not b.terminations.any()
    assert not c.terminations.any() and not c.truncations.any()
    for episode, number in zip((a, b, c), (1, 2, 3)):
        expected = episode_arrays(number, len(episode))
        assert sorted(episode.fields) == sorted(expected) and sorted(episode.keys()) == sorted(expected)
        for name, values in expected.items():
            np.testing.assert_array_equal(episode[name], values)
            assert episode[name].dtype == values.dtype and name in episode
        assert episode.meta == {"task_id": number} and episode.id == number - 1 and episode.slot == number - 1
    assert a.final is None and c.final is None
    assert b.final["obs"].tolist() == [-2, -2, -2]
    assert b.final["reward"] == 0 and b.final["action"].tolist() == [0, 0]  # not given in final=: defaults
    observations = b.observations("obs")
    assert observations.shape == (4, 3) and observations[:, 0].tolist() == [2000, 2001, 2002, -2]
    assert three.ends.tolist() == ["terminated", "truncated", ""]
    assert three.ends.dtype.kind == "U" and (three.ends == "terminated").tolist() == [True, False, False]
    assert "Episode(id=1, slot=1, 3 steps, end='truncated', final=stored" in repr(b)


def test_observations_without_a_final_row_and_unknown_fields(three):
    a = three.episode(0)
    with pytest.raises(EpisodeStateError, match=r"episode 0 has no final observation stored \(end: terminated\), so "
                                                 r"'obs' has 4 rows, not T \+ 1 = 5"):
        a.observations("obs")
    with pytest.raises(EpisodeStateError, match=r"end: not recorded"):
        three.episode(2).observations("reward")
    with pytest.raises(OptionError, match=r"episode 0 has no field 'image': it holds \['action', 'obs', 'reward'\]"):
        a["image"]
    with pytest.raises(OptionError, match=r"has no field 'action': it holds \['obs'\]"):
        three.episode(1, fields="obs").observations("action")


def test_negative_indices_and_range_errors(three):
    assert three.episode(-1).meta["task_id"] == 3 and three.episode(-3).meta["task_id"] == 1
    assert three.episode(np.int64(1)).id == 1
    with pytest.raises(IndexRangeError, match=r"episode index must be in \[-3, 3\) for the 3 episodes \(got 3\)"):
        three.episode(3)
    with pytest.raises(IndexError, match=r"must be in \[-3, 3\) for the 3 episodes \(got -4\); 0 is the oldest"):
        three.episode(-4)
    with pytest.raises(IndexTypeError, match=r"an episode is indexed by an int position .* \(got bool: True\)"):
        three.episode(True)
    with pytest.raises(IndexTypeError, match=r"\(got str: '0'\)"):
        three.episodes()["0"]


def test_an_empty_buffer(make_buffer):
    buffer = make_buffer()
    assert len(buffer.episodes()) == 0 and list(buffer.iterate_episodes()) == []
    assert buffer.ends.shape == (0,) and buffer.sample_episodes(0, seed=1) == []
    with pytest.raises(IndexRangeError, match=r"must be in nothing: there are no episodes for the 0 episodes"):
        buffer.episode(0)
    with pytest.raises(OptionError, match=r"cannot draw 2 episodes: there are no episodes"):
        buffer.sample_episodes(2, replacement=True)


def test_the_list_is_lazy_sliceable_and_describes_without_reading(three):
    episodes = three.episodes()
    assert isinstance(episodes, EpisodeList) and len(episodes) == 3
    assert episodes.ids.tolist() == [0, 1, 2] and episodes.slots.tolist() == [0, 1, 2]
    assert episodes.lengths.tolist() == [4, 3, 3] and episodes.ends.tolist() == ["terminated", "truncated", ""]
    newest_two = episodes[1:]
    assert isinstance(newest_two, EpisodeList) and newest_two.ids.tolist() == [1, 2]
    assert [episode.id for episode in newest_two] == [1, 2] and newest_two[-1].id == 2
    assert [episode.id for episode in episodes[::-2]] == [2, 0]
    assert [episode.id for episode in reversed(episodes)] == [2, 1, 0]
    assert repr(episodes) == ("EpisodeList(3 episodes, ids 0..2, fields=['obs', 'action', 'reward'], "
                              "meta_fields=['task_id'])")
    iterator = three.iterate_episodes()
    assert not isinstance(iterator, list)
    first = next(iterator)
    assert isinstance(first, Episode) and first.id == 0


def test_fields_and_meta_fields_choose_what_is_read(three):
    episode = three.episode(1, fields=("obs",), meta_fields=())
    assert list(episode.fields) == ["obs"] and episode.meta == {} and len(episode) == 3
    assert list(episode.final) == ["obs"]
    bare = three.episode(0, fields=())
    assert bare.fields == {} and len(bare) == 4 and bare.meta == {"task_id": 1}
    with pytest.raises(OptionError, match=r"unknown field \['image'\]: the store's fields are"):
        three.episodes(fields="image")
    with pytest.raises(OptionError, match=r"unknown meta field \['seed'\]"):
        three.episode(0, meta_fields="seed")


def test_filter_meta(three):
    assert [episode.meta["task_id"] for episode in three.episodes(filter_meta=dict(task_id=2))] == [2]
    assert [episode.id for episode in three.iterate_episodes(filter_meta={"task_id": 3})] == [2]
    assert len(three.episodes(filter_meta=dict(task_id=9))) == 0
    drawn = three.sample_episodes(5, seed=0, replacement=True, filter_meta=dict(task_id=1))
    assert [episode.id for episode in drawn] == [0] * 5
    with pytest.raises(OptionError, match=r"filter_meta has unknown meta field \['seed'\]"):
        three.episodes(filter_meta=dict(seed=1))
    with pytest.raises(OptionError, match=r"filter_meta must be a dict of meta field -> value"):
        three.episodes(filter_meta=[("task_id", 1)])


def test_sample_episodes_is_seeded(make_buffer):
    buffer = make_buffer(max_episodes=10)
    for number in range(8):
        buffer.store_episode(**episode_arrays(number, 2 + number % 3), task_id=number)
    ids = [[episode.id for episode in buffer.sample_episodes(5, seed=seed)] for seed in (3, 3, 4)]
    assert ids[0] == ids[1] and ids[0] != ids[2]
    assert len(set(ids[0])) == 5  # without replacement
    everything = [episode.id for episode in buffer.sample_episodes(8, seed=1)]
    assert sorted(everything) == list(range(8))
    many = buffer.sample_episodes(20, seed=2, replacement=True)
    assert len(many) == 20 and set(episode.id for episode in many) <= set(range(8))
    for episode in many:
        np.testing.assert_array_equal(episode["reward"],
                                      episode_arrays(episode.meta["task_id"], len(episode))["reward"])
    with pytest.raises(OptionError, match=r"cannot draw 9 episodes without replacement from 8; ask for at most 8"):
        buffer.sample_episodes(9, seed=0)
    with pytest.raises(OptionError, match=r"seed must be an int >= 0 or None \(got -1\)"):
        buffer.sample_episodes(1, seed=-1)
    with pytest.raises(OptionError, match=r"n must be an int >= 0 \(got 1.5\)"):
        buffer.sample_episodes(1.5)
    with pytest.raises(OptionError, match=r"replacement must be True or False \(got 'yes'\)"):
        buffer.sample_episodes(1, replacement="yes")


def test_episodes_hold_writable_copies(three):
    episode = three.episode(0)
    episode["reward"][:] = -7
    assert episode["reward"].tolist() == [-7] * 4
    assert three.episode(0)["reward"].tolist() == [1000, 1001, 1002, 1003]  # the store is as it was


@pytest.mark.parametrize("reader", ["writer", "other store"])
def test_ring_eviction_of_episodes_held(make_buffer, tmp_path, reader):
    buffer = make_buffer(max_episodes=3, max_timesteps=5, max_steps=18, circular=True)
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 5), task_id=number, end="terminated")
    source = buffer if reader == "writer" else ReplayBuffer.from_folder(buffer.folder, read_only=True)
    try:
        episodes = source.episodes()
        oldest = episodes[0]  # read before the eviction: a copy, intact whatever happens to its rows
        buffer.store_episode(**episode_arrays(7, 5), task_id=7, end="truncated")  # evicts episode 0
        with pytest.raises(SampleExpiredError, match=r"episode 0 is no longer in the buffer \(the oldest live episode "
                                                     r"is now 1: the ring evicted it.*read the list again"):
            episodes[0]
        with pytest.raises(SampleExpiredError, match="episode 0 is no longer in the buffer"):
            list(episodes)
        np.testing.assert_array_equal(oldest["obs"], episode_arrays(0, 5)["obs"])
        assert [episode.meta["task_id"] for episode in episodes[1:]] == [1, 2]  # still live: readable
        if reader == "other store":
            source.refresh()
        assert [episode.meta["task_id"] for episode in source.iterate_episodes()] == [1, 2, 7]
        assert source.ends.tolist() == ["terminated", "terminated", "truncated"]
        newest = source.episode(-1)
        assert newest.end == "truncated" and newest.id == 3 and newest.slot == 0
        np.testing.assert_array_equal(newest["action"], episode_arrays(7, 5)["action"])
    finally:
        if source is not buffer:
            source.close()


@pytest.mark.parametrize("reader", ["writer", "other store"])
def test_a_grow_expires_a_list_made_before_it(make_buffer, reader):
    """A grow moves slots: a list made before it must not read another episode's meta values."""
    buffer = make_buffer(max_episodes=4, max_timesteps=5, max_steps=30, circular=True)
    for number in range(6):  # ids 2..5 live in a ring of 4
        buffer.store_episode(**episode_arrays(number, 5), task_id=number)
    source = buffer if reader == "writer" else ReplayBuffer.from_folder(buffer.folder, read_only=True)
    try:
        episodes = source.episodes()
        buffer.grow(max_episodes=8)
        for number in range(6, 10):
            buffer.store_episode(**episode_arrays(number, 5), task_id=number)
        with pytest.raises(SampleExpiredError, match=r"the buffer was grown since the list of episodes was made"):
            episodes[-1]
        if reader == "other store":
            source.refresh()
        assert [episode.meta["task_id"] for episode in source.episodes()] == list(range(2, 10))
    finally:
        if source is not buffer:
            source.close()


def test_clear_expires_episodes_held(three):
    episodes = three.episodes()
    three.clear()
    with pytest.raises(SampleExpiredError, match=r"episode 2 is no longer in the buffer .*or the buffer was cleared"):
        episodes[-1]
    assert len(three.episodes()) == 0


def test_end_names_and_step_flags():
    assert end_names(np.array([0, 1, 2, 7], dtype=np.uint8)).tolist() == ["", "terminated", "truncated", ""]
    steps = np.array([[0, 1, 2], [1, 2, 3]])
    inside = np.array([[True, True, True], [True, True, False]])
    first, last, terminal = step_flags(steps, np.array([3, 3]), np.array([1, 2], dtype=np.uint8), inside)
    assert first.tolist() == [[True, False, False], [False, False, False]]
    assert last.tolist() == [[False, False, True], [False, True, False]]
    assert terminal.tolist() == [[False, False, True], [False, False, False]]


def test_an_eviction_while_the_rows_are_copied_is_caught(make_buffer, monkeypatch):
    """The writer evicts the episode between the check before the copy and the copy itself: the check after
    the copy raises, and torn rows never reach the caller."""
    buffer = make_buffer(max_episodes=2, max_timesteps=5, max_steps=10, circular=True)
    for number in range(2):
        buffer.store_episode(**episode_arrays(number, 5), task_id=number)
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    try:
        store, original = reader.episode_store, reader.episode_store.step_array
        writes = []

        def step_array_during_a_commit(name, **options):
            if not writes:  # once: a commit that evicts episode 0 and overwrites its rows
                writes.append(buffer.store_episode(**episode_arrays(9, 5), task_id=9))
            return original(name, **options)

        monkeypatch.setattr(store, "step_array", step_array_during_a_commit)
        episodes = reader.episodes()
        with pytest.raises(SampleExpiredError, match=r"episode 0 is no longer in the buffer \(the oldest live episode "
                                                     r"is now 1"):
            episodes[0]
        assert writes and episodes[1].meta["task_id"] == 1
    finally:
        reader.close()


def test_a_list_made_before_an_edit_refuses_removed_and_trimmed_episodes_and_reads_the_others(filled):
    episodes = filled.episodes()
    filled.delete_episodes(1)
    filled.trim(2, stop=2)
    filled.relabel(3, task_id=7)
    assert episodes[0].id == 0 and len(episodes[0]) == 5
    with pytest.raises(SampleExpiredError, match=r"episode 1 is no longer in the buffer \(delete_episodes removed "
                                                 r"it since the list of episodes was made\)"):
        episodes[1]
    with pytest.raises(SampleExpiredError, match=r"episode 2 was trimmed, or its rows moved by compact\(\), since the "
                                                 r"list of episodes was made"):
        episodes[2]
    assert int(episodes[3].meta["task_id"]) == 7 and len(episodes[3]) == 8
    read = []
    for episode in filled.episodes():  # deleting the one just read: the next ones are read as they are
        read.append(episode.id)
        if episode.id % 2:
            filled.delete_episodes(episode.id)
    assert read == [0, 2, 3, 4, 5] and filled.episode_ids.tolist() == [0, 2, 4]
