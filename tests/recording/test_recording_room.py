"""A recorder's capacity options: in its signature, a ring for recording while training (no BufferFullError
from step however long the run), max_steps, and a full store's error from step naming circular=True and grow."""

from __future__ import annotations

import inspect

import gymnasium
import pytest

from memmap_replay import BufferFullError, ReplayBuffer
from memmap_replay.recording import RecordEpisodes, RecordVectorEpisodes


def episodes(env, count: int, seed: int = 0) -> None:
    env.action_space.seed(seed)
    for number in range(count):
        env.reset(seed=seed + number)
        while not any(env.step(env.action_space.sample())[2:4]):
            pass


@pytest.mark.parametrize("wrapper", [RecordEpisodes, RecordVectorEpisodes])
def test_the_signature_shows_the_capacity_options(wrapper):
    parameters = inspect.signature(wrapper).parameters
    assert {name: parameters[name].default for name in ("max_episodes", "max_steps", "max_timesteps", "circular")} \
        == {"max_episodes": 10_000, "max_steps": None, "max_timesteps": None, "circular": False}
    assert "max_episodes : int" in wrapper.__doc__ and "circular : bool" in wrapper.__doc__


def test_a_ring_records_without_end(tmp_path):
    with RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "ring", max_episodes=3, max_steps=1500,
                        circular=True) as env:
        episodes(env, 12)
        assert len(env.buffer) == 3 and env.buffer.max_steps == 1500 and env.buffer.circular
    with ReplayBuffer.from_folder(tmp_path / "ring") as buffer:
        seeds = buffer.episode_store.meta_array("seed")[buffer.episode_store.live_table().slots]
        assert sorted(seeds.tolist()) == [9, 10, 11]  # the newest three


def test_a_full_store_that_is_no_ring_says_how_to_go_on(tmp_path):
    env = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "full", max_episodes=2)
    episodes(env, 2)
    with pytest.raises(BufferFullError, match=r"all 2 episode slots are used and it is not circular; grow it in "
                                              r"place: buffer.grow\(max_episodes=3\).*circular=True"):
        episodes(env, 1, seed=5)
    env.close()


def test_an_older_import_with_uint64_seeds_gets_its_own_message(tmp_path):
    from memmap_replay import SchemaMismatchError
    from memmap_replay.recording import gymnasium_fields

    env = gymnasium.make("CartPole-v1")
    fields, _ = gymnasium_fields(env.observation_space, env.action_space)
    ReplayBuffer(tmp_path / "old", 10, 500, fields, dict(seed="uint64", seeded="bool")).close()
    with pytest.raises(SchemaMismatchError, match=r"meta field 'seed' is uint64 \(an import of a Minari dataset by "
                                                  r"an older memmap_replay\).*import the dataset again.*"
                                                  r"seed_field=None"):
        RecordEpisodes(env, tmp_path / "old")
    with RecordEpisodes(env, tmp_path / "old", seed_field=None) as recorder:
        episodes(recorder, 1)
        assert len(recorder.buffer) == 1
