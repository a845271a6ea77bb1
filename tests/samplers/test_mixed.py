"""MixedSampler: exact per-source counts, the turning tie-break, each row from the source it says, seeds,
state_dict, buffers or samplers as sources, and refusals."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, MixedSampler, OptionError, ReplayBuffer

FIELDS = dict(obs=("float", 3))
META = dict(task="int")


def make(tmp_path, name: str, task: int, episodes: int = 4, fields=FIELDS) -> ReplayBuffer:
    buffer = ReplayBuffer(tmp_path / name, 20, 10, fields, META)
    for number in range(episodes):
        length = 3 + number
        shape = buffer.schema.fields["obs"].shape
        buffer.store_episode(obs=np.full((length, *shape), task * 100 + number, np.float32), task=task)
    return buffer


@pytest.fixture
def sources(tmp_path):
    buffers = [make(tmp_path, "offline", 1), make(tmp_path, "online", 2), make(tmp_path, "demos", 3)]
    yield buffers
    for buffer in buffers:
        buffer.close()


@pytest.mark.parametrize("ratios,batch_size,expected", [
    ([0.5, 0.5], 8, [4, 4]), ([0.75, 0.25], 8, [6, 2]), ([3, 1], 10, [8, 2]), ([1, 1, 1], 3, [1, 1, 1]),
    ([1, 1, 1], 9, [3, 3, 3]), ([0.7, 0.2, 0.1], 10, [7, 2, 1]), ([1, 0], 5, [5, 0]), ([0.9, 0.1], 1, [1, 0])])
def test_counts_are_exact(sources, ratios, batch_size, expected):
    sampler = MixedSampler(list(zip(sources, ratios)), seed=0)
    assert sampler.counts(batch_size).tolist() == expected
    assert sampler.counts(batch_size).sum() == batch_size


def test_the_extra_row_turns_between_sources(sources):
    sampler = MixedSampler({sources[0]: 0.5, sources[1]: 0.5}, seed=0)
    seen = []
    for _ in range(6):
        seen.append(sampler.counts(3).tolist())
        sampler.batch(3)
    assert seen == [[2, 1], [1, 2]] * 3
    totals = Counter()
    third = MixedSampler({sources[0]: 1, sources[1]: 1, sources[2]: 1}, seed=0)
    for _ in range(30):
        totals.update(dict(enumerate(third.counts(4).tolist())))
        third.batch(4)
    assert dict(totals) == {0: 40, 1: 40, 2: 40}


def test_every_row_comes_from_the_source_it_names(sources):
    sampler = MixedSampler({sources[0]: 0.25, sources[1]: 0.5, sources[2]: 0.25}, names=["offline", "online", "demos"],
                           seed=1)
    for _ in range(5):
        batch = sampler.batch(16)
        assert batch["obs"].shape == (16, 3) and isinstance(batch["_source"], torch.Tensor)
        source = batch["_source"].numpy()
        assert Counter(source.tolist()) == {0: 4, 1: 8, 2: 4}
        assert (batch["task"].numpy() == source + 1).all()  # task 1, 2, 3 per source
        assert ((batch["obs"][:, 0].numpy() // 100) == source + 1).all()
    assert sampler.names == ("offline", "online", "demos")
    by_source = sampler.batch_by_source(8)
    assert {name: len(part["obs"]) for name, part in by_source.items()} == {"offline": 2, "online": 4, "demos": 2}


def test_the_same_seed_gives_the_same_batches_and_state_dict_resumes(sources):
    a = MixedSampler({sources[0]: 0.5, sources[1]: 0.5}, seed=7)
    b = MixedSampler({sources[0]: 0.5, sources[1]: 0.5}, seed=7)
    other = MixedSampler({sources[0]: 0.5, sources[1]: 0.5}, seed=8)
    batches = [a.batch(9) for _ in range(3)]
    for batch in batches:
        again = b.batch(9)
        assert all(torch.equal(batch[key], again[key]) for key in batch)
    assert not torch.equal(other.batch(9)["_key"], batches[0]["_key"])
    state = a.state_dict()
    after = [a.batch(9) for _ in range(2)]
    fresh = MixedSampler({sources[0]: 0.5, sources[1]: 0.5}, seed=99)
    fresh.load_state_dict(state)
    for batch in after:
        again = fresh.batch(9)
        assert all(torch.equal(batch[key], again[key]) for key in batch)


def test_samplers_as_sources(sources):
    offline = sources[0].sampler("uniform", seed=3)
    online = sources[1].sampler("prioritized", seed=4, persist=False)
    sampler = MixedSampler([(offline, 1), (online, 3)])
    batch = sampler.batch(8)
    assert batch["_source"].tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    assert batch["_weight"][:2].tolist() == [1.0, 1.0]  # uniform draws: weight 1 beside the prioritized ones
    assert batch["_weight"].dtype == online.batch(2)["_weight"].dtype


def test_sources_with_other_fields_are_refused_by_batch_but_not_by_batch_by_source(tmp_path, sources):
    odd = make(tmp_path, "odd", 4, fields=dict(obs=("float", 5)))
    sampler = MixedSampler({sources[0]: 0.5, odd: 0.5}, seed=0)
    with pytest.raises(InvalidDataError, match=r"field 'obs' of source '1' is Tensor torch.float32 of row shape \(5,\) "
                                               r"but source '0' gives Tensor torch.float32 of row shape \(3,\)"):
        sampler.batch(4)
    parts = sampler.batch_by_source(4)
    assert parts["1"]["obs"].shape == (2, 5)
    odd.close()


@pytest.mark.parametrize("sources_of,options,match", [
    (lambda s: {}, {}, r"sources must be a dict of source -> ratio, or a list of \(source, ratio\) pairs"),
    (lambda s: [s[0]], {}, r"sources must be a dict of source -> ratio"),
    (lambda s: {s[0]: -1}, {}, r"each ratio must be a finite number >= 0.0 \(got -1\)"),
    (lambda s: {s[0]: 0, s[1]: 0}, {}, r"at least one ratio must be > 0 \(got \[0.0, 0.0\]\)"),
    (lambda s: {s[0]: float("nan")}, {}, r"each ratio must be a finite number"),
    (lambda s: {"folder": 1}, {}, r"source '0' must be a sampler \(with sample and batch\) or a buffer"),
    (lambda s: {s[0]: 1, s[1]: 1}, dict(names=["a"]), r"names must be 2 distinct non-empty names"),
    (lambda s: {s[0]: 1, s[1]: 1}, dict(names=["a", "a"]), r"names must be 2 distinct non-empty names"),
    (lambda s: {s[0]: 1}, dict(seed=-1), r"seed must be an int >= 0 or None \(got -1\)"),
])
def test_refusals(sources, sources_of, options, match):
    with pytest.raises(OptionError, match=match):
        MixedSampler(sources_of(sources), **options)


def test_bad_batch_sizes_and_state(sources):
    sampler = MixedSampler({sources[0]: 1}, seed=0)
    with pytest.raises(OptionError, match=r"batch_size must be a positive int \(got 0\)"):
        sampler.batch(0)
    with pytest.raises(InvalidDataError, match=r"must hold 'drawn' and 'sources'"):
        sampler.load_state_dict({"drawn": 1})
    with pytest.raises(InvalidDataError, match=r"one state per source \(1\)"):
        sampler.load_state_dict({"drawn": 1, "sources": []})


class NumpySource:
    """A sampler whose batches are numpy arrays (as a numpy-only view would give)."""

    def __init__(self, value: float, weighted: bool = False):
        self.value, self.weighted = value, weighted

    def sample(self, batch_size):
        return np.zeros(batch_size, np.int64)

    def batch(self, batch_size):
        out = {"x": np.full((batch_size, 2), self.value, np.float64), "_key": np.arange(batch_size)}
        if self.weighted:
            out["_weight"] = np.full(batch_size, 0.5, np.float64)
        return out

    def refresh(self):
        return False


def test_numpy_batches_concatenate_with_numpy():
    sampler = MixedSampler([(NumpySource(1.0), 2), (NumpySource(2.0, weighted=True), 1)])
    batch = sampler.batch(6)
    assert isinstance(batch["x"], np.ndarray) and batch["x"][:, 0].tolist() == [1, 1, 1, 1, 2, 2]
    assert batch["_source"].tolist() == [0, 0, 0, 0, 1, 1]
    assert batch["_weight"].tolist() == [1, 1, 1, 1, 0.5, 0.5] and batch["_weight"].dtype == np.float64
    assert sampler.refresh() is False


def test_a_source_drawing_ahead_is_refused(make_buffer):
    from memmap_replay import MixedSampler, OptionError
    from conftest import episode_arrays

    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5))
    with pytest.raises(OptionError, match=r"source 'a' draws ahead \(draw_ahead=2\).*make that sampler with "
                                          r"draw_ahead=0"):
        MixedSampler({buffer.sampler("uniform", seed=0, draw_ahead=2): 1.0}, names=["a"], seed=0)
