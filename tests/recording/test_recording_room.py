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
