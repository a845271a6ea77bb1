"""RateLimiter.state_dict() / load_state_dict(): a resumed run carries on from the saved counters."""

from __future__ import annotations

import json

import pytest

from memmap_replay import RateLimiter
from memmap_replay.errors import InvalidDataError


def test_an_in_memory_limiter_resumes_every_counter():
    limiter = RateLimiter(2.0, min_size_to_sample=4, error_buffer=10, mode="raise")
    limiter.await_insert(6)
    limiter.await_sample(8)
    state = json.loads(json.dumps(limiter.state_dict()))
    resumed = RateLimiter(2.0, min_size_to_sample=4, error_buffer=10, mode="raise")
    resumed.load_state_dict(state)
    assert resumed.counts == limiter.counts == (6, 8, 0)
    assert resumed.can_sample(4) == limiter.can_sample(4) and resumed.can_sample(5) == limiter.can_sample(5)


def test_a_shared_limiter_resumes_the_samples_and_keeps_the_actors_inserts(tmp_path):
    limiter = RateLimiter(1.0, min_size_to_sample=1, error_buffer=100, folder=tmp_path)
    limiter.inserted(10)
    limiter.sampled(5)
    state = limiter.state_dict()
    limiter.sampled(3)  # drawn after the save, by the run that is then killed
    limiter.inserted(7)  # an actor kept inserting
    limiter.close()
    resumed = RateLimiter.join(tmp_path)
    resumed.load_state_dict(state)
    assert resumed.counts == (17, 5, 0)
    resumed.close()


def test_a_state_of_other_limits_or_damaged_is_refused_and_changes_nothing():
    limiter = RateLimiter(2.0, error_buffer=10)
    state = limiter.state_dict()
    with pytest.raises(InvalidDataError, match="other limits"):
        RateLimiter(3.0, error_buffer=10).load_state_dict(state)
    with pytest.raises(InvalidDataError, match="RateLimiter's state_dict"):
        limiter.load_state_dict({"type": "UniformSampler"})
    with pytest.raises(InvalidDataError, match="more deletes than inserts"):
        limiter.load_state_dict(dict(state, counts=[1, 0, 2]))
    with pytest.raises(InvalidDataError, match="each count"):
        limiter.load_state_dict(dict(state, counts=[1, -1, 0]))
    assert limiter.counts == (0, 0, 0)


def test_a_rate_limited_loader_resumes(tmp_path):
    from memmap_replay import ReplayBuffer

    import numpy as np

    buffer = ReplayBuffer(tmp_path / "store", max_episodes=4, max_timesteps=20, fields={"reward": "float"})
    buffer.store_episode(reward=np.arange(20.0))

    def make():
        limiter = RateLimiter(100.0, error_buffer=10_000)
        limiter.inserted(20)
        return limiter, limiter.wrap_sampler(buffer.sampler("uniform", timestep_level=True, seed=1)).dataloader(
            4, num_batches=12)

    _, loader = make()
    reference = [batch["reward"].tolist() for batch in loader]
    limiter, loader = make()
    iterator = iter(loader)
    first = [next(iterator)["reward"].tolist() for _ in range(5)]
    state = {"loader": loader.state_dict(), "limiter": limiter.state_dict()}
    del iterator
    limiter, loader = make()
    limiter.load_state_dict(state["limiter"])
    loader.load_state_dict(state["loader"])
    assert first + [batch["reward"].tolist() for batch in loader] == reference
    assert limiter.counts.samples == 12 * 4
    buffer.close()
