"""memmap-replay-buffer 0.2.3's EpisodeCollector (compat/collector.py): collect, read back, store."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memmap_replay import EpisodeCollector, InvalidDataError, OptionError

FIELDS = dict(obs=("float", (3,)), action="int", done="bool")
META = dict(ret="float")
GROUPS, STEPS = 4, 3


@pytest.fixture
def buffer(make_buffer):
    return make_buffer(fields=FIELDS, meta_fields=META)


@pytest.fixture
def rollout():
    generator = torch.Generator().manual_seed(5)
    return dict(obs=torch.randn(GROUPS, STEPS, 3, generator=generator),
                action=torch.randint(0, 9, (GROUPS, STEPS), generator=generator))


def collected(buffer, rollout, **options):
    collector = EpisodeCollector(buffer, GROUPS, **options)
    for t in range(STEPS):
        step = dict(obs=rollout["obs"][:, t], action=rollout["action"][:, t:t + 1])  # both layouts
        collector.append(**step)
    return collector


def test_append_then_read_back_in_both_layouts(buffer, rollout):
    collector = collected(buffer, rollout)
    assert len(collector) == STEPS
    assert torch.equal(collector.env_major("obs"), rollout["obs"])
    assert torch.equal(collector.time_major("action"), rollout["action"].T)
    assert [value.shape for value in collector.groups("obs")] == [(STEPS, 3)] * GROUPS
    assert set(collector.all_data()) == {"obs", "action"}


def test_store_commits_one_episode_per_group_with_meta_values(buffer, rollout):
    collector = collected(buffer, rollout)
    slots = collector.store(ret=torch.arange(GROUPS, dtype=torch.float32))
    assert len(slots) == GROUPS and len(collector) == 0 and buffer.num_episodes == GROUPS
    data = buffer.get_all_data()
    assert torch.allclose(data["obs"], rollout["obs"])
    assert torch.equal(data["action"].long(), rollout["action"])
    assert torch.equal(data["ret"], torch.arange(GROUPS, dtype=torch.float32))


def test_extend_takes_time_major_trajectories_and_one_meta_value_for_all(buffer, rollout):
    collector = EpisodeCollector(buffer, GROUPS)
    collector.extend(obs=rollout["obs"].swapaxes(0, 1).numpy())
    collector.extend(done=np.zeros((STEPS, GROUPS), dtype=bool))
    assert len(collector) == STEPS and isinstance(collector.env_major("obs"), np.ndarray)
    collector.store(ret=1.5)
    assert torch.equal(buffer.get_all_data()["ret"], torch.full((GROUPS,), 1.5))


def test_dataloader_flattens_groups_and_time(buffer, rollout):
    collector = collected(buffer, rollout)
    batches = list(collector.dataloader(batch_size=5))
    assert [batch["obs"].shape for batch in batches] == [(5, 3), (5, 3), (2, 3)]
    assert torch.equal(torch.cat([batch["obs"] for batch in batches]), rollout["obs"].reshape(-1, 3))
    kept = next(iter(collector.dataloader(batch_size=12, filter_fields=dict(action=int(rollout["action"][0, 0])),
                                          to_named_tuple=("obs",))))
    assert len(kept.obs) == int((rollout["action"] == rollout["action"][0, 0]).sum())


def test_bad_steps_are_refused_and_nothing_is_kept(buffer, rollout):
    collector = collected(buffer, rollout)
    with pytest.raises(InvalidDataError, match="use extend"):
        collector.append(obs=torch.zeros(GROUPS + 1, 3), action=torch.zeros(GROUPS, dtype=torch.int64))
    with pytest.raises(InvalidDataError, match=r"append takes \(4, \*\(3,\)\)"):
        collector.append(obs=torch.zeros(GROUPS, 2))
    with pytest.raises(OptionError, match="unknown field 'velocity'"):
        collector.append(velocity=torch.zeros(GROUPS))
    with pytest.raises(InvalidDataError, match="its time axis is 5 steps, but 3 steps"):
        collector.extend(done=np.zeros((5, GROUPS), dtype=bool))
    assert len(collector) == STEPS and len(collector.env_major("obs")[0]) == STEPS
    EpisodeCollector(buffer, GROUPS, strict=False).append(velocity=torch.zeros(GROUPS))  # skipped


def test_a_bad_episode_stores_none_of_them(buffer, rollout):
    collector = collected(buffer, rollout)
    with pytest.raises(InvalidDataError, match="ret"):
        collector.store(ret=np.zeros((GROUPS, 2)))
    assert buffer.num_episodes == 0
    with pytest.raises(OptionError, match="store takes meta fields"):
        collector.store(bonus=1.0)


def test_an_empty_collector_and_a_wrong_buffer_are_refused(buffer):
    with pytest.raises(OptionError, match="the collector is empty"):
        EpisodeCollector(buffer, 2).all_data()
    with pytest.raises(OptionError, match="stores into a ReplayBuffer"):
        EpisodeCollector(object(), 2)
