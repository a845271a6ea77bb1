"""A prioritized (or sequence) sampler made before ``grow()`` draws and updates on once new episodes arrive
(issue 30): it failed with the sum tree's internal "leaf indices must be in [0, 18)" (fixed by f1e1ed5, which
makes an open sampler follow a grow; ``test_priority_files`` checks persisted priorities, this the rest)."""

from __future__ import annotations

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, SchemaMismatchError

GROWS = [dict(max_episodes=8, max_steps=60), dict(max_episodes=8, max_steps=60, circular=True), dict(max_episodes=8)]


@pytest.mark.parametrize("grow", GROWS, ids=["more", "ring", "episodes"])
@pytest.mark.parametrize("kind, options", [("prioritized", dict(persist=False)), ("prioritized", dict(n_steps=2)),
                                           ("sequence", dict(window=2, persist=False))])
@pytest.mark.parametrize("reader", [False, True], ids=["writer", "reader"])
def test_a_sampler_made_before_a_grow_follows_it(tmp_path, grow, kind, options, reader):
    rng = np.random.default_rng(0)
    with ReplayBuffer(tmp_path / "store", max_episodes=3, max_timesteps=5, fields=dict(r="float")) as buffer:
        for _ in range(3):
            buffer.store_episode(r=np.ones(5))
        source = ReplayBuffer.from_folder(buffer.folder, read_only=True) if reader else buffer
        sampler = source.sampler(kind, seed=0, **options)
        sampler.update_priorities(sampler.batch(4)["_key"], rng.random(4) + 0.1)
        buffer.grow(**grow)
        for _ in range(5):
            buffer.store_episode(r=np.ones(5))
        sampler.refresh()
        for _ in range(3):
            batch = sampler.batch(16)
            assert sampler.update_priorities(batch["_key"], rng.random(16) + 0.1) == 16
        assert sampler.view.table.ids.max() == 7  # the new episodes are drawn from
        if reader:
            source.close()


def test_a_max_timesteps_grow_still_asks_for_a_new_sampler(tmp_path):
    with ReplayBuffer(tmp_path / "store", max_episodes=3, max_timesteps=5, fields=dict(r="float")) as buffer:
        buffer.store_episode(r=np.ones(5))
        sampler = buffer.sampler("prioritized", seed=0, persist=False)
        buffer.grow(max_timesteps=9, max_steps=60)
        with pytest.raises(SchemaMismatchError, match=r"grown to max_timesteps=9 .*make a new"):
            sampler.batch(2)
