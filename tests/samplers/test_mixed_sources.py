"""MixedSampler over sources that differ: buffers with other meta fields mix by default (the fields every
source has), what still differs is refused naming meta_fields= and batch_by_source(), and update_priorities
routes each row's priority to the sampler of its source (prioritized online beside uniform offline)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, MixedSampler, OptionError, ReplayBuffer

FIELDS = dict(obs=("float", 3), reward="float")


def make(tmp_path, name: str, meta: dict, episodes: int = 4, value: float = 0.0, **meta_values) -> ReplayBuffer:
    buffer = ReplayBuffer(tmp_path / name, 20, 10, FIELDS, meta)
    for number in range(episodes):
        length = 3 + number
        buffer.store_episode(obs=np.full((length, 3), value + number, np.float32), reward=np.zeros(length),
                             **meta_values)
    return buffer


@pytest.fixture
def offline_online(tmp_path):
    """An imported-like store (episode_id, seed, also_truncated) and a recorded-like one (seed only)."""
    offline = make(tmp_path, "offline", dict(episode_id="int64", seed=("int64", (), -1), also_truncated="bool"),
                   value=100.0, seed=3)
    online = make(tmp_path, "online", dict(seed=("int64", (), -1)), value=200.0, seed=7)
    yield offline, online
    offline.close()
    online.close()


def test_buffers_with_other_meta_fields_mix_with_the_fields_every_source_has(offline_online):
    offline, online = offline_online
    mixed = MixedSampler({offline: 0.5, online: 0.5}, names=["offline", "online"], seed=0)
    batch = mixed.batch(8)
    assert sorted(batch) == ["_key", "_source", "obs", "reward", "seed"]
    source = batch["_source"].numpy()
    assert (batch["seed"].numpy() == np.where(source == 0, 3, 7)).all()
    assert ((batch["obs"][:, 0].numpy() // 100) == source + 1).all()
    assert sorted(mixed.batch_by_source(4)["offline"]) == ["_key", "obs", "reward", "seed"]


def test_meta_fields_chooses_them(offline_online):
    offline, online = offline_online
    assert "seed" not in MixedSampler({offline: 1, online: 1}, seed=0, meta_fields=()).batch(4)
    assert "seed" in MixedSampler({offline: 1, online: 1}, seed=0, meta_fields=["seed"]).batch(4)
    with pytest.raises(OptionError, match=r"episode_id"):  # the online store has no episode_id
        MixedSampler({offline: 1, online: 1}, seed=0, meta_fields=["episode_id"])


def test_buffers_with_the_same_meta_fields_keep_them_all(tmp_path):
    meta = dict(task="int", score="float")
    a, b = make(tmp_path, "a", meta, task=1), make(tmp_path, "b", meta, task=2)
    assert sorted(MixedSampler({a: 1, b: 1}, seed=0).batch(4)) == ["_key", "_source", "obs", "reward", "score",
                                                                   "task"]
    a.close(), b.close()


def test_samplers_whose_views_differ_get_a_message_naming_meta_fields(offline_online):
    offline, online = offline_online
    mixed = MixedSampler({offline.sampler("uniform", seed=1): 1, online.sampler("uniform", seed=2): 1},
                         names=["offline", "online"])
    with pytest.raises(InvalidDataError, match=r"source 'online' gives the fields .* \(only 'online': \[\]; only "
                                               r"'offline': \['also_truncated', 'episode_id'\]\).*"
                                               r"buffer.sampler\(\.\.\., meta_fields=\[\.\.\.\], fields=\[\.\.\.\]\)"
                                               r".*batch_by_source\(\)"):
        mixed.batch(4)
    fixed = MixedSampler({offline.sampler("uniform", seed=1, meta_fields=["seed"]): 1,
                          online.sampler("uniform", seed=2): 1})
    assert sorted(fixed.batch(4)) == ["_key", "_source", "obs", "reward", "seed"]


def test_a_meta_field_of_another_dtype_is_refused_naming_meta_fields(tmp_path):
    a = make(tmp_path, "a", dict(seed="uint64"), seed=3)
    b = make(tmp_path, "b", dict(seed="int64"), seed=3)
    with pytest.raises(InvalidDataError, match=r"field 'seed' of source '1' is Tensor torch.int64 .* leave it out "
                                               r"\(meta_fields=\[\.\.\.\] or fields=\[\.\.\.\] without 'seed'"):
        MixedSampler({a: 1, b: 1}, seed=0).batch(4)
    assert "seed" not in MixedSampler({a: 1, b: 1}, seed=0, meta_fields=()).batch(4)
    a.close(), b.close()


# ---- update_priorities -------------------------------------------------------------------------------------------


def prioritized_mix(offline, online, seed=0):
    online_sampler = online.sampler("prioritized", seed=seed, persist=False)
    return MixedSampler({offline: 0.5, online_sampler: 0.5}, names=["offline", "online"], seed=seed), online_sampler


def test_update_priorities_lands_in_the_online_sampler_and_skips_the_uniform_one(offline_online):
    offline, online = offline_online
    mixed, online_sampler = prioritized_mix(offline, online)
    batch = mixed.batch(8)
    rows = batch["_source"] == 1
    keys = batch["_key"][rows].numpy()
    priorities = torch.linspace(0.5, 4.0, 8)
    assert mixed.update_priorities(batch, priorities) == int(rows.sum())  # offline rows: skipped
    alpha = online_sampler.alpha
    np.testing.assert_allclose(online_sampler.leaves_of(keys), priorities[rows].numpy() ** alpha, rtol=1e-6)
    # the same with _key and _source given apart (numpy), and the offline keys never reach the online sampler
    again = mixed.batch(8)
    online_rows = again["_source"].numpy() == 1
    values = np.full(8, 9.0)
    values[online_rows] = 0.25
    mixed.update_priorities(again["_key"].numpy(), values, sources=again["_source"].numpy())
    np.testing.assert_allclose(online_sampler.leaves_of(again["_key"][online_rows].numpy()), 0.25 ** alpha, rtol=1e-6)
    assert online_sampler.max_priority < 9.0  # the offline rows' 9.0 never reached it


def test_update_priorities_shifts_the_online_draws(tmp_path):
    offline = make(tmp_path, "offline", {}, value=100.0)
    online = make(tmp_path, "online", {}, episodes=2, value=200.0)
    mixed, online_sampler = prioritized_mix(offline, online, seed=3)
    for _ in range(20):  # every online step but those of episode 1 (obs 201) get a tiny priority
        batch = mixed.batch(16)
        obs = batch["obs"][:, 0].numpy()
        mixed.update_priorities(batch, np.where(obs == 201.0, 10.0, 1e-6))
    online_obs = np.concatenate([mixed.batch(16)["obs"][8:, 0].numpy() for _ in range(10)])
    assert (online_obs == 201.0).mean() > 0.9
    offline.close(), online.close()


def test_update_priorities_refusals(offline_online):
    offline, online = offline_online
    mixed, _ = prioritized_mix(offline, online)
    batch = mixed.batch(4)
    with pytest.raises(OptionError, match=r"needs each row's source: pass the batch itself \(update_priorities\("
                                          r"batch, priorities\)\) or sources=batch\['_source'\]"):
        mixed.update_priorities(batch["_key"], np.ones(4))
    with pytest.raises(OptionError, match=r"give sources= only with keys, not with the batch"):
        mixed.update_priorities(batch, np.ones(4), sources=batch["_source"])
    with pytest.raises(InvalidDataError, match=r"must hold '_key' and '_source'.*missing \['_source'\]"):
        mixed.update_priorities({"_key": batch["_key"]}, np.ones(4))
    with pytest.raises(InvalidDataError, match=r"one per row \(got shapes \(4,\), \(3,\) and \(4,\)\)"):
        mixed.update_priorities(batch, np.ones(3))
    with pytest.raises(InvalidDataError, match=r"sources must be a batch's '_source': ints in \[0, 2\) \(got "):
        mixed.update_priorities(batch["_key"], np.ones(4), sources=np.full(4, 2))
    single = MixedSampler({online.sampler("prioritized", seed=0, persist=False): 1})
    drawn = single.batch(4)
    assert single.update_priorities(drawn["_key"], np.ones(4)) == 4  # one source: no sources needed
