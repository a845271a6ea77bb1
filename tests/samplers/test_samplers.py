"""Samplers: one contract every sampler keeps, a property test against a model of the store and of the
priorities, draw statistics (chi-square), importance weights, stale updates, ranks, windows and errors.

Every episode here is written with ``episode_arrays(number, length)`` and the test's ``Episodes`` record
which number each episode id holds, so a key (episode id * key_stride + t) can be checked against brute
force: is the id live, is t a valid position of the view, and does the gathered batch hold what was
written at (episode, t)?
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import pickle
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from memmap_replay import (InvalidDataError, PrioritizedSampler, RateLimiter, ReplayBuffer, Sample, SampleExpiredError,
                           ReadOnlyError, SequenceSampler, ShardSet, StoreLockedError, UniformSampler)
from memmap_replay.distributed.shards import SHARD_STRIDE, ShardSample
from memmap_replay.samplers import Sampler
from memmap_replay.views.kinds import TimestepView

from conftest import KERNELS, chi_square_ok, episode_arrays, select_kernel

STRIDE = 8  # max_timesteps, so the key stride, of every buffer whose keys a test decodes
FIRST = [(5, "terminated", False), (3, "truncated", True), (6, None, False), (4, "terminated", True)]
MORE = [(6, None, True), (8, "terminated", False), (5, "truncated", False)]  # wraps rows, evicts 0, 1, 2


def steps(length, end, final):
    return length


def windows(size):
    return lambda length, end, final: max(length - size + 1, 0)


def n_step(length, end, final):
    return length if end == "terminated" or final else length - 1  # the episode's reach


class Episodes:
    """A buffer and what the test wrote into it: episode id -> (number, length, end, final)."""

    def __init__(self, buffer: ReplayBuffer):
        self.buffer, self.written = buffer, {}

    def store(self, length, end=None, final=False) -> int:
        number = len(self.written) + 1
        self.buffer.store_episode(**episode_arrays(number, length), task_id=number, end=end,
                                  final=dict(obs=np.full(3, -1.0)) if final else None)
        episode_id = self.buffer.episode_store.meta.state.next_episode - 1
        self.written[episode_id] = (number, length, end, final)
        return episode_id

    def live(self) -> list[int]:
        return self.buffer.episode_store.live_table().ids.tolist()

    def valid_keys(self, count) -> set[int]:
        """Brute force: every key of a live episode with t below the view's count for it."""
        return {i * STRIDE + t for i in self.live() for t in range(count(*self.written[i][1:]))}

    def reopen(self) -> None:
        folder = self.buffer.folder
        self.buffer.close()
        self.buffer = ReplayBuffer.from_folder(folder)


def check_batch(batch: dict, episodes: Episodes, local=lambda keys: keys) -> np.ndarray:
    """The gathered values are what was written at each key's (episode, t); returns the keys (``local``: a
    sharded key's key in its store)."""
    keys = local(batch["_key"].numpy())
    assert keys.dtype == np.int64 and keys.ndim == 1 and len(keys) >= 1
    ids, t = np.divmod(keys, STRIDE)
    number = np.array([episodes.written[i][0] for i in ids])
    expected = number * 1000 + t
    reward = batch["reward"].numpy()
    if reward.ndim == 2:  # windows: consecutive steps of one episode
        expected = expected[:, None] + np.arange(reward.shape[1])
    np.testing.assert_array_equal(reward, expected)
    np.testing.assert_array_equal(batch["obs"][..., 0].numpy(), expected)
    np.testing.assert_array_equal(batch["task_id"].numpy(), number)
    return keys




# ---- the contract every sampler keeps ------------------------------------------------------------------

FACTORIES = {  # id: (kind, options, positions per episode, how the sampler is made)
    "uniform": ("uniform", {}, steps, "buffer"),
    "uniform-epoch": ("uniform", dict(replacement=False), steps, "buffer"),
    "prioritized": ("prioritized", {}, steps, "buffer"),
    "sequence": ("sequence", dict(window=3), windows(3), "buffer"),
    "nstep-prioritized": ("prioritized", dict(n_steps=2, gamma=0.9), n_step, "buffer"),
    "nstep-uniform": ("uniform", dict(n_steps=3), n_step, "buffer"),
    "transitions-uniform": ("uniform", dict(transitions=True), n_step, "buffer"),
    "transitions-prioritized": ("prioritized", dict(transitions=True, gamma=0.9), n_step, "buffer"),
    "sharded-uniform": ("uniform", {}, steps, "sharded"),
    "sharded-prioritized": ("prioritized", {}, steps, "sharded"),
    "rate-limited": ("uniform", {}, steps, "limited"),
    "rate-limited-prioritized": ("prioritized", {}, steps, "limited"),
}


@pytest.fixture
def episodes(make_buffer):
    """Four episodes (varied ends, final rows) in a ring of 5 slots and 32 rows."""
    record = Episodes(make_buffer("contract", max_episodes=5, max_timesteps=STRIDE, max_steps=32, circular=True))
    for spec in FIRST:
        record.store(*spec)
    yield record
    record.buffer.close()  # the reopened one, if any


@pytest.fixture
def closing():
    """Samplers to close at teardown (prioritized ones hold their priorities' lock)."""
    opened = []
    yield opened
    for sampler in opened:
        if hasattr(sampler, "close"):
            sampler.close()


def factory_params():
    """Every factory; the prioritized ones with each sum tree kernel."""
    for name, (kind, *_) in FACTORIES.items():
        for kernel in ["numpy"] if kind == "uniform" else KERNELS:
            yield pytest.param((name, kernel), id=name if kind == "uniform" else f"{name}-{kernel}")


@pytest.fixture(params=list(factory_params()))
def factory(request, closing):
    """(make(buffer, **options), count): a sampler of this kind; count(length, end, final) = its positions.
    ``make.local(keys)``: the keys in the store (a sharded sampler's keys also name the shard). Prioritized
    samplers run on the sum tree kernel the parameter names."""
    from memmap_replay.samplers import kernels
    name, kernel = request.param
    select_kernel(kernel)
    request.addfinalizer(kernels.reset)
    kind, options, count, how = FACTORIES[name]
    names = itertools.count()

    def make(buffer, **overrides):
        chosen = {**options, "seed": 11, **overrides}
        if kind == "uniform":
            chosen.pop("name", None)  # uniform samplers keep nothing in the folder
        else:
            chosen.setdefault("name", f"s{next(names)}")
        if how == "sharded":  # the buffer's folder as the one shard of a ShardSet
            shards = ShardSet(folders=[buffer.folder])
            closing.append(shards)
            sampler = shards.sampler(kind, **chosen)
        else:
            sampler = buffer.sampler(kind, **chosen)
            closing.append(sampler)
        if how == "limited":  # a limiter that always lets a draw through
            limiter = RateLimiter(1.0, error_buffer=1e12)
            limiter.inserted(10**9)
            sampler = limiter.wrap_sampler(sampler)
        return sampler

    make.kind, make.id = kind, name
    make.local = (lambda keys: keys // SHARD_STRIDE) if how == "sharded" else (lambda keys: keys)
    make.persistent = how != "sharded"  # a sharded sampler keeps its priorities in memory
    return make, count


class TestSamplerContract:
    def test_draws_are_live_valid_positions(self, factory, episodes):
        make, count = factory
        sampler = make(episodes.buffer)
        assert isinstance(sampler, Sampler)  # the protocol's methods and attributes
        valid = episodes.valid_keys(count)
        seen = set()
        for _ in range(30):
            sample = sampler.sample(7)
            size = len(sample)  # (always 7: test_sample_has_the_requested_size)
            assert isinstance(sample, (Sample, ShardSample)) and size >= 1
            assert sample.keys.dtype == np.int64 and sample.keys.shape == (size,)
            if make.kind == "uniform":
                assert sample.weights is None
            else:
                assert sample.weights.dtype == np.float32 and sample.weights.shape == (size,)
                assert ((sample.weights > 0) & (sample.weights <= 1)).all()
            keys = make.local(sample.keys)
            assert set(keys.tolist()) <= valid
            seen.update(keys.tolist())
        assert len(seen) > len(valid) // 2  # the draws spread over the positions
        assert set(check_batch(sampler.batch(3), episodes, make.local).tolist()) <= valid

    def test_sample_has_the_requested_size(self, factory, episodes):
        make, count = factory
        sampler = make(episodes.buffer)
        assert len(episodes.valid_keys(count)) % 7 != 0  # an epoch does not split into batches of 7
        assert [len(sampler.sample(7)) for _ in range(12)] == [7] * 12

    def test_seeded(self, factory, episodes):
        make, _ = factory
        def draws(sampler):
            return [sampler.sample(6).keys.tolist() for _ in range(5)]
        first, again = draws(make(episodes.buffer)), draws(make(episodes.buffer))
        other = draws(make(episodes.buffer, seed=12))
        assert first == again
        assert first != other

    @pytest.mark.parametrize("reopen", [False, True], ids=["same-buffer", "reopened"])
    def test_state_dict_round_trip(self, factory, episodes, reopen):
        make, _ = factory
        sampler = make(episodes.buffer, name="kept")
        for _ in range(3):
            sample = sampler.sample(5)
        if hasattr(sampler, "update_priorities") and make.persistent:  # priorities that matter, kept in the folder
            assert sampler.update_priorities(sample.keys, np.arange(1.0, 6.0) ** 2) == 5
        state = json.loads(json.dumps(sampler.state_dict()))  # plain JSON-able values
        expected = [sampler.sample(5) for _ in range(6)]
        if hasattr(sampler, "close"):
            sampler.close()
        if reopen:
            episodes.reopen()
        restored = make(episodes.buffer, seed=999, name="kept")
        restored.load_state_dict(state)
        got = [restored.sample(5) for _ in range(6)]
        assert [s.keys.tolist() for s in got] == [s.keys.tolist() for s in expected]
        if make.kind != "uniform":
            assert [s.weights.tolist() for s in got] == [s.weights.tolist() for s in expected]
            if make.persistent:
                assert min(min(s.weights) for s in got) < 1  # the stored priorities really were used

    def test_dataloader_batches_are_the_sampler_draws(self, factory, episodes):
        self.dataloader_batches_are_the_sampler_draws(factory, episodes, num_workers=0)

    def test_worker_processes_give_the_sampler_draws(self, factory, episodes):
        self.dataloader_batches_are_the_sampler_draws(factory, episodes, num_workers=2)

    @staticmethod
    def dataloader_batches_are_the_sampler_draws(factory, episodes, num_workers):
        make, count = factory
        valid = episodes.valid_keys(count)
        twin = make(episodes.buffer)  # same seed: the same draws (one epoch, a short last batch, without replacement)
        expected = [sample.keys.tolist() for sample in twin.batches(4, 5)]
        loaders = [make(episodes.buffer).dataloader(4, num_batches=5, num_workers=num_workers),
                   DataLoader(make(episodes.buffer).view, batch_sampler=make(episodes.buffer).batches(4, 5),
                              collate_fn=pass_through, num_workers=num_workers)]
        # the plain DataLoader's view and batch sampler belong to two samplers with the same seed and data
        for loader in loaders:
            batches = list(loader)
            assert [b["_key"].tolist() for b in batches] == expected
            for batch in batches:
                assert set(check_batch(batch, episodes, make.local).tolist()) <= valid
                assert ("_weight" in batch) == (make.kind != "uniform")

    def test_follows_new_commits(self, factory, episodes):
        make, count = factory
        sampler = make(episodes.buffer)
        sampler.sample(4)  # an epoch (without replacement) is under way
        new = episodes.store(7, "truncated")
        valid = episodes.valid_keys(count)
        drawn = np.concatenate([check_batch(sampler.batch(8), episodes, make.local) for _ in range(20)])
        assert set(drawn.tolist()) <= valid
        assert new in set((drawn // STRIDE).tolist())

    def test_follows_evictions(self, factory, episodes):
        make, count = factory
        sampler = make(episodes.buffer)
        sampler.sample(4)
        before = set(episodes.live())
        for spec in MORE:
            episodes.store(*spec)
        evicted = before - set(episodes.live())
        assert len(evicted) >= 2 and episodes.buffer.episode_store.live_table().start.min() == 0  # rows reused
        valid = episodes.valid_keys(count)
        drawn = make.local(np.concatenate([sampler.sample(8).keys for _ in range(20)]))
        assert not set((drawn // STRIDE).tolist()) & evicted
        assert set(drawn.tolist()) <= valid
        check_batch(sampler.batch(8), episodes, make.local)

    def test_refresh_follows_a_writer_elsewhere(self, factory, episodes):
        make, count = factory
        reader = ReplayBuffer.from_folder(episodes.buffer.folder, read_only=True)
        try:
            sampler = make(reader, follow=False)
            new = episodes.store(7, "truncated")  # through the other buffer object: only meta.json tells
            assert new not in set((make.local(sampler.sample(64).keys) // STRIDE).tolist())
            assert sampler.refresh() is True and sampler.refresh() is False
            drawn = make.local(np.concatenate([sampler.sample(8).keys for _ in range(20)]))
            assert new in set((drawn // STRIDE).tolist()) and set(drawn.tolist()) <= episodes.valid_keys(count)
        finally:
            reader.close()


def pass_through(batch):
    return batch


def test_the_ray_sampler_shares_the_protocol():
    pytest.importorskip("ray", reason="Ray is not installed: the Ray sampler's contract runs where it is")
    from memmap_replay.distributed.ray.sampler import RayShardedSampler
    from memmap_replay.samplers import BetaSchedule, SamplerBase

    assert issubclass(RayShardedSampler, SamplerBase) and issubclass(RayShardedSampler, BetaSchedule)
    for method in ("sample", "batch", "batches", "state_dict", "load_state_dict", "update_priorities"):
        assert callable(getattr(RayShardedSampler, method))


def test_importing_the_samplers_room_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, memmap_replay.samplers, memmap_replay.core.index; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ---- property test: random stores, draws, updates and reopenings against a model ------------------------

OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("store"), st.integers(1, 8), st.sampled_from(["terminated", "truncated", None]), st.booleans()),
    st.tuples(st.just("open"), st.integers(1, 8)),  # an episode still being written while the samplers draw
    st.tuples(st.just("sample"), st.integers(1, 6)),
    st.tuples(st.just("update"), st.integers(0, 2**16)),
    st.tuples(st.just("reopen")),
), min_size=1, max_size=25)
ALPHA, BETA = 0.7, 0.5


class Model:
    """What the samplers should do: live ids from the store, data from what was written, priorities as
    described (new positions enter at the largest priority seen so far, updates of evicted ids dropped)."""

    def __init__(self, folder):
        self.folder, self.written, self.priority, self.max_priority = folder, {}, {}, 1.0
        self.buffer = ReplayBuffer(folder, 4, STRIDE, fields=dict(obs=("float", (2,)), reward="float"),
                                   circular=True, max_steps=24, overwrite=True)
        self.open_samplers()

    def open_samplers(self, states=None):
        store = self.buffer.episode_store
        self.uniform = UniformSampler(TimestepView(store), seed=3)
        self.prioritized = PrioritizedSampler(TimestepView(store), alpha=ALPHA, beta=BETA, seed=4, name="model")
        if states:
            self.uniform.load_state_dict(states[0])
            self.prioritized.load_state_dict(states[1])

    def live(self) -> dict[int, int]:
        table = self.buffer.episode_store.live_table()
        return dict(zip(table.ids.tolist(), table.length.tolist()))

    def sync(self) -> None:
        """The prioritized sampler's view of the store: new positions at the max, evicted ones gone."""
        live = self.live()
        self.priority = {key: p for key, p in self.priority.items() if key // STRIDE in live}
        for i, length in live.items():
            for t in range(length):
                self.priority.setdefault(i * STRIDE + t, self.max_priority)

    def write(self, length, end=None, final=False) -> None:
        number = len(self.written) + 1
        data = episode_arrays(number, length)
        self.buffer.store_episode(obs=data["obs"][:, :2], reward=data["reward"], end=end,
                                  final=dict(obs=np.full(2, -1.0)) if final else None)
        self.written[self.buffer.episode_store.meta.state.next_episode - 1] = number

    def write_step_by_step(self, length) -> None:
        """An episode written step by step; the samplers draw while it is still open (uncommitted)."""
        number, buffer = len(self.written) + 1, self.buffer
        data = episode_arrays(number, length)
        buffer.begin_episode()
        for t in range(length):
            buffer.store(obs=data["obs"][t, :2], reward=data["reward"][t])
        self.draw(4, uncommitted=buffer.episode_store.meta.state.next_episode)
        buffer.end_episode(end="truncated")
        self.written[buffer.episode_store.meta.state.next_episode - 1] = number

    def draw(self, size, uncommitted=-1):
        live = self.live()
        for sampler in (self.uniform, self.prioritized):
            if not live:
                with pytest.raises(InvalidDataError, match="nothing to sample"):
                    sampler.sample(size)
                continue
            sample = sampler.sample(size)
            ids, t = np.divmod(sample.keys, STRIDE)
            assert all(i in live and 0 <= s < live[i] for i, s in zip(ids.tolist(), t.tolist()))
            assert uncommitted not in ids
            batch = sampler.view.__getitems__(sample)
            expected = np.array([self.written[i] for i in ids]) * 1000 + t
            np.testing.assert_array_equal(batch["reward"].numpy(), expected)
            np.testing.assert_array_equal(batch["_key"].numpy(), sample.keys)
            if sampler is self.prioritized:
                self.sync()
                p = np.array([self.priority[k] for k in sample.keys.tolist()])
                smallest = min(self.priority.values())
                np.testing.assert_allclose(sample.weights, (p ** ALPHA / smallest ** ALPHA) ** -BETA, rtol=1e-5)
                self.last = sample.keys

    def update(self, seed) -> None:
        keys = np.unique(getattr(self, "last", np.zeros(0, np.int64)))
        if not len(keys):
            return
        values = np.random.default_rng(seed).uniform(0.05, 4.0, len(keys))
        dropped = self.prioritized.dropped
        applied = self.prioritized.update_priorities(keys, values)
        self.sync()
        live = np.isin(keys // STRIDE, list(self.live()))
        assert applied == live.sum() and self.prioritized.dropped - dropped == (~live).sum()
        for key, value in zip(keys[live].tolist(), values[live].tolist()):
            self.priority[key] = value
        if live.any():
            self.max_priority = max(self.max_priority, values[live].max())

    def reopen(self) -> None:
        self.prioritized.sync()  # (also covered: test_a_restored_sampler_enters_new_episodes_at_the_restored_max)
        self.sync()
        states = [json.loads(json.dumps(s.state_dict())) for s in (self.uniform, self.prioritized)]
        self.prioritized.close()
        self.buffer.close()
        self.buffer = ReplayBuffer.from_folder(self.folder)
        self.open_samplers(states)

    def close(self) -> None:
        self.prioritized.close()
        self.buffer.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_random_operations_never_draw_a_dead_position(tmp_path_factory, operations, kernel):
    model = Model(tmp_path_factory.mktemp("model"))
    try:
        for operation in operations:
            name = operation[0]
            if name == "store":
                model.write(*operation[1:])
            elif name == "open":
                model.write_step_by_step(operation[1])
            elif name == "sample":
                model.draw(operation[1])
            elif name == "update":
                model.update(operation[1])
            else:
                model.reopen()
        model.draw(5)
    finally:
        model.close()


# ---- statistics and importance weights -----------------------------------------------------------------

def uneven_episodes(make_buffer, **options) -> Episodes:
    """Episodes of 2, 8, 4 and 7 steps (21 positions): uniform over steps is not uniform over episodes."""
    record = Episodes(make_buffer("uneven", max_episodes=6, max_timesteps=STRIDE, **options))
    for length in (2, 8, 4, 7):
        record.store(length, "terminated")
    return record


@pytest.fixture
def uneven(make_buffer):
    record = uneven_episodes(make_buffer)
    yield record
    record.buffer.close()  # the reopened one, if any


def counts_of(sampler, keys, batches, size):
    drawn = np.concatenate([sampler.sample(size).keys for _ in range(batches)])
    where = {key: i for i, key in enumerate(keys.tolist())}
    return np.bincount([where[key] for key in drawn.tolist()], minlength=len(keys)), len(drawn)


def skewed(expected):
    """The expectation with its first five cells 30% heavier (same total): a fit the test must reject."""
    heavier = expected.copy()
    heavier[:5] *= 1.3
    return heavier * expected.sum() / heavier.sum()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_prioritized_frequencies_follow_priority_to_the_alpha(uneven, alpha, kernel):
    sampler = uneven.buffer.sampler("prioritized", alpha=alpha, seed=5, persist=False)
    keys = np.array(sorted(uneven.valid_keys(steps)))
    priorities = np.random.default_rng(0).uniform(0.2, 3.0, len(keys))
    assert sampler.update_priorities(keys, priorities) == len(keys) == 21
    counts, total = counts_of(sampler, keys, 150, 128)
    expected = priorities ** alpha / (priorities ** alpha).sum() * total
    assert chi_square_ok(counts, expected)
    assert not chi_square_ok(counts, skewed(expected))  # the test can fail
    if alpha != 1.0:
        assert not chi_square_ok(counts, priorities / priorities.sum() * total)  # alpha is applied


@pytest.mark.parametrize("options, count", [(dict(timestep_level=True), steps), (dict(window=3), windows(3))],
                         ids=["steps", "windows"])
def test_uniform_frequencies_are_uniform_over_valid_positions(uneven, options, count):
    sampler = uneven.buffer.sampler("uniform", seed=5, **options)
    keys = np.array(sorted(uneven.valid_keys(count)))
    counts, total = counts_of(sampler, keys, 150, 128)
    assert counts.sum() == total  # every draw is a valid position
    expected = np.full(len(keys), total / len(keys))
    assert chi_square_ok(counts, expected)
    per_episode = np.array([1 / count(*uneven.written[key // STRIDE][1:]) for key in keys])
    assert not chi_square_ok(counts, per_episode / per_episode.sum() * total)  # not uniform over episodes


@pytest.mark.parametrize("rows", [54, 10_000], ids=["flat-tree", "deep-tree"])  # a sum tree of 0 or 2 levels
def test_weights_are_normalised_over_every_live_position(make_buffer, rows, kernel):
    alpha, beta = 0.7, 0.5
    uneven = uneven_episodes(make_buffer, max_steps=rows)
    sampler = uneven.buffer.sampler("prioritized", alpha=alpha, beta=beta, seed=1, persist=False)
    assert sampler.tree.levels == (0 if rows < 4096 else 2)
    keys = np.array(sorted(uneven.valid_keys(steps)))
    priorities = np.random.default_rng(1).uniform(0.5, 3.0, len(keys))
    priorities[3] = 1e-4  # the smallest priority, (almost) never drawn: weights still count it
    sampler.update_priorities(keys, priorities)
    by_key = dict(zip(keys.tolist(), priorities))
    def expected_of(drawn):
        return (np.array([by_key[k] for k in drawn.tolist()]) ** alpha / 1e-4 ** alpha) ** -beta
    for _ in range(20):
        sample = sampler.sample(32)
        assert keys[3] not in sample.keys
        np.testing.assert_allclose(sample.weights, expected_of(sample.keys), rtol=1e-6)
        assert sample.weights.max() < 0.2  # not normalised by the batch's own maximum
    batch = sampler.batch(16)
    np.testing.assert_allclose(batch["_weight"].numpy(), expected_of(batch["_key"].numpy()), rtol=1e-6)


def test_beta_anneals_linearly_to_beta_final(uneven):
    sampler = uneven.buffer.sampler("prioritized", alpha=1.0, beta=0.2, beta_final=0.9, beta_steps=10, seed=2,
                                    persist=False)
    keys = np.array(sorted(uneven.valid_keys(steps)))
    priorities = np.where(np.arange(len(keys)) % 2, 4.0, 1.0)
    sampler.update_priorities(keys, priorities)
    by_key = dict(zip(keys.tolist(), priorities))
    betas = []
    for draw in range(14):
        beta = 0.2 + 0.7 * min(1.0, draw / 10)
        assert sampler.beta == pytest.approx(beta)
        sample = sampler.sample(16)
        ratio = np.array([by_key[k] for k in sample.keys.tolist()])  # each priority over the smallest (1.0)
        np.testing.assert_allclose(sample.weights, ratio ** -beta, rtol=1e-6)
        assert (sample.weights < 1).any()  # the weights really depend on beta
        betas.append(sampler.beta)
    np.testing.assert_allclose(np.diff(betas[:10]), 0.07)
    assert betas[-1] == pytest.approx(0.9)


# ---- stale updates -------------------------------------------------------------------------------------

def test_updates_for_evicted_episodes_are_dropped(make_buffer, closing, kernel):
    """Episode 0's keys, drawn before the ring gave its slot and its rows to episode 3, update nothing."""
    episodes = Episodes(make_buffer("stale", max_episodes=3, max_timesteps=STRIDE, max_steps=27, circular=True))
    for _ in range(3):
        episodes.store(8, "terminated")
    sampler = episodes.buffer.sampler("prioritized", alpha=1.0, beta=1.0, seed=0, name="stale")
    closing.append(sampler)
    drawn = sampler.sample(24).keys
    old = drawn[drawn // STRIDE == 0]
    assert len(old) > 0
    newcomer = episodes.store(8, "terminated")
    table = episodes.buffer.episode_store.live_table()
    assert episodes.live() == [1, 2, 3] and table.slots[-1] == 0 and table.start[-1] == 0  # slot and rows of 0
    assert sampler.update_priorities(old, np.full(len(old), 50.0)) == 0
    assert sampler.dropped == len(old)
    assert sampler.update_priorities(drawn, np.full(len(drawn), 50.0)) == len(drawn) - len(old)  # the live ones
    assert sampler.dropped == 2 * len(old)
    assert sampler.max_priority == 50.0
    # the newcomer entered at 1.0 and kept it: its weights are 1 (the smallest priority), the others 1/50
    drawn_again = [sampler.sample(32) for _ in range(10)]
    new_weights = np.concatenate([s.weights[s.keys // STRIDE == newcomer] for s in drawn_again])
    assert len(new_weights) > 0 and (new_weights == 1.0).all()
    sampler.close()
    stored = np.load(episodes.buffer.folder / "priorities" / "stale.npy")
    np.testing.assert_array_equal(stored[table.start[-1]: table.start[-1] + 8], 1.0)


def test_a_view_gathers_episodes_it_does_not_know_yet(episodes):
    view = episodes.buffer.dataset(timestep_level=True)  # a snapshot of the first four episodes
    sampler = episodes.buffer.sampler("uniform", seed=0)
    new = episodes.store(7, "truncated")
    sample = sampler.sample(64)
    assert new in (sample.keys // STRIDE)
    for gathered in (sample, pickle.loads(pickle.dumps(sample))):  # in process, and as a worker receives it
        np.testing.assert_array_equal(check_batch(view.__getitems__(gathered), episodes), sample.keys)
    assert len(view) == len(episodes.valid_keys(steps))  # it refreshed itself
    batch = episodes.buffer.sample(5)  # the buffer's own default sampler
    assert len(check_batch(batch, episodes)) == 5 and "_weight" not in batch
    with pytest.raises(InvalidDataError, match="sampler must be a sampler"):
        episodes.buffer.sample(5, sampler="prioritized")


def test_gathering_an_evicted_sample_raises(make_buffer):
    episodes = Episodes(make_buffer("expired", max_episodes=2, max_timesteps=4, max_steps=8, circular=True))
    for _ in range(2):
        episodes.store(4)
    sample = episodes.buffer.sampler("uniform", seed=0).sample(8)
    for _ in range(2):
        episodes.store(4)  # both evicted, their rows rewritten
    with pytest.raises(SampleExpiredError, match="no longer in the buffer"):
        episodes.buffer.dataset(timestep_level=True).__getitems__(sample)


def test_a_stale_view_refuses_rows_the_ring_rewrote(make_buffer):
    episodes = Episodes(make_buffer("rewritten", max_episodes=2, max_timesteps=4, max_steps=8, circular=True))
    for _ in range(2):
        episodes.store(4)
    sampler = episodes.buffer.sampler("uniform", seed=0)
    sample = sampler.sample(8)
    for _ in range(2):
        episodes.store(4)
    with pytest.raises(SampleExpiredError, match="no longer in the buffer"):
        sampler.view.__getitems__(sample)  # the sampler's own view, not synced since the draw


# ---- ranks ---------------------------------------------------------------------------------------------

def test_ranks_share_an_epoch_without_replacement(uneven):
    uneven.store(1)
    everything = uneven.valid_keys(steps)
    assert len(everything) == 22  # not a multiple of 3: the shares need padding
    view = uneven.buffer.dataset(timestep_level=True)
    samplers = [UniformSampler(view, replacement=False, seed=7, rank=rank, world_size=3) for rank in range(3)]
    for epoch in range(2):
        shares = [np.concatenate([s.keys for s in sampler.batches(3)]) for sampler in samplers]
        assert [len(share) for share in shares] == [8, 8, 8] == [len(s.batches(3)) * 3 - 1 for s in samplers]
        together = Counter(np.concatenate(shares).tolist())
        assert set(together) == everything  # every position, each once, and two repeats to pad
        assert sum(together.values()) - len(everything) == 2 and max(together.values()) == 2
        if epoch == 0:
            first = shares
    assert any(not np.array_equal(a, b) for a, b in zip(first, shares))  # a new order each epoch


def test_ranks_draw_different_streams_with_replacement(uneven):
    for kind in ("uniform", "prioritized"):
        options = {} if kind == "uniform" else dict(persist=False)
        made = [uneven.buffer.sampler(kind, seed=7, rank=rank, world_size=3, **options) for rank in (0, 1, 0)]
        zero, one, zero_again = ([s.sample(16).keys.tolist() for _ in range(3)] for s in made)
        assert zero == zero_again and zero != one


# ---- sequences -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("eta", [0.0, 0.9, 1.0])
def test_step_priorities_aggregate_as_eta_max_plus_mean(uneven, closing, eta):
    sampler = uneven.buffer.sampler("sequence", window=4, eta=eta, alpha=1.0, beta=1.0, seed=3, name="seq")
    closing.append(sampler)
    assert isinstance(sampler, SequenceSampler)
    keys = np.array(sorted(uneven.valid_keys(windows(4))))
    step = np.random.default_rng(4).uniform(0.1, 2.0, (len(keys), 4))
    assert sampler.update_priorities(torch.from_numpy(keys), torch.from_numpy(step)) == len(keys)
    window = eta * step.max(axis=1) + (1 - eta) * step.mean(axis=1)
    by_key = dict(zip(keys.tolist(), window))
    for _ in range(10):
        sample = sampler.sample(16)
        np.testing.assert_allclose(sample.weights, window.min() / np.array([by_key[k] for k in sample.keys.tolist()]),
                                   rtol=1e-6)
    sampler.close()
    stored = np.load(uneven.buffer.folder / "priorities" / "seq.npy")  # one raw priority per window start
    table = uneven.buffer.episode_store.live_table()
    rows = [table.start[list(table.ids).index(k // STRIDE)] + k % STRIDE for k in keys.tolist()]
    np.testing.assert_allclose(stored[rows], window)


def test_windows_lie_inside_one_episode(uneven, closing):
    sampler = uneven.buffer.sampler("sequence", window=4, seed=3, name="inside")
    closing.append(sampler)
    for _ in range(20):
        batch = sampler.batch(8)
        keys = check_batch(batch, uneven)  # consecutive steps of the key's episode
        ids, t = np.divmod(keys, STRIDE)
        assert all(s + 4 <= uneven.written[i][1] for i, s in zip(ids.tolist(), t.tolist()))
        assert batch["reward"].shape == (8, 4)


# ---- bad inputs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, options, match", [
    ("uniform", dict(seed=-1), "seed must be an int >= 0 or None"),
    ("uniform", dict(rank=3, world_size=3), "rank must be below world_size=3"),
    ("uniform", dict(world_size=0), "world_size must be an int >= 1"),
    ("uniform", dict(replacement="no"), "replacement must be True or False"),
    ("prioritized", dict(alpha=-0.5), r"alpha must be a finite number >= 0.0 \(got -0.5\)"),
    ("prioritized", dict(alpha=float("nan")), "alpha must be a finite number >= 0.0"),
    ("prioritized", dict(beta=1.5), r"beta must be a finite number in \[0.0, 1.0\] \(got 1.5\)"),
    ("prioritized", dict(beta_final=True), r"beta_final must be a finite number in \[0.0, 1.0\]"),
    ("prioritized", dict(beta_steps=-2), "beta_steps must be an int >= 0"),
    ("prioritized", dict(name="../up"), "name must be letters, digits"),
    ("sequence", dict(window=3, eta=1.5), r"eta must be a finite number in \[0.0, 1.0\] \(got 1.5\)"),
    ("sequence", {}, "draws windows: pass window=L"),
    ("nope", {}, r"kind must be one of \['prioritized', 'sequence', 'uniform'\] \(got 'nope'\)"),
])
def test_bad_options(uneven, kind, options, match):
    with pytest.raises(InvalidDataError, match=match):  # raised before a priorities file is opened
        uneven.buffer.sampler(kind, **options)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True, "8"])
def test_bad_batch_sizes(uneven, batch_size):
    sampler = uneven.buffer.sampler("prioritized", persist=False)
    for call in (sampler.sample, sampler.batch, sampler.batches, sampler.dataloader):
        with pytest.raises(InvalidDataError, match="batch_size must be a positive int"):
            call(batch_size)


def test_bad_arguments_and_states(uneven):
    buffer = uneven.buffer
    for cls in (UniformSampler, PrioritizedSampler):
        with pytest.raises(InvalidDataError, match=r"a sampler draws from a view \(buffer.dataset.*got ReplayBuffer"):
            cls(buffer)
    with pytest.raises(InvalidDataError, match="a SequenceSampler draws windows: pass buffer.dataset"):
        SequenceSampler(buffer.dataset(timestep_level=True))
    uniform = buffer.sampler("uniform")
    with pytest.raises(InvalidDataError, match=r"UniformSampler's state_dict\(\)\? it holds a 'PrioritizedSampler'"):
        uniform.load_state_dict(buffer.sampler("prioritized", persist=False).state_dict())
    with pytest.raises(InvalidDataError, match="a damaged sampler state_dict"):
        uniform.load_state_dict({"type": "UniformSampler"})
    with pytest.raises(InvalidDataError, match=r"unknown keyword \['shuffle'\]"):
        uniform.dataloader(4, shuffle=True)
    with pytest.raises(InvalidDataError, match="num_batches must be an int >= 0"):
        uniform.batches(4, -1)
    with pytest.raises(TypeError, match="an endless batch sampler has no length; pass num_batches="):
        len(uniform.batches(4))
    assert len(uniform.batches(4, 7)) == 7


def test_bad_priorities(uneven, closing, kernel):
    sampler = uneven.buffer.sampler("sequence", window=3, seed=0, name="bad")
    closing.append(sampler)
    keys = sampler.sample(3).keys
    for priorities, match in [
        ([1.0, 2.0], r"priorities must be 3 numbers, one per key \(got float64 \(2,\)\)"),
        ([1.0, np.nan, 2.0], "priorities must be finite and >= 0 \\(got nan\\)"),
        ([1.0, -2.0, 2.0], "priorities must be finite and >= 0 \\(got -2.0\\)"),
        ([1.0, np.inf, 2.0], "priorities must be finite and >= 0 \\(got inf\\)"),
        (np.ones((3, 4)), r"step priorities must be \(batch, 3\) \(got \(3, 4\)\)"),
        ([[1.0, np.nan, 1.0]] * 3, "finite and >= 0"),
    ]:
        with pytest.raises(InvalidDataError, match=match):
            sampler.update_priorities(keys, priorities)
    for bad_keys, match in [(keys[None], "keys must be a 1-d int array"), (keys * 1.0, "keys must be a 1-d int array"),
                            (keys - 10**6, "keys must be >= 0")]:
        with pytest.raises(InvalidDataError, match=match):
            sampler.update_priorities(bad_keys, [1.0, 1.0, 1.0])
    table = uneven.buffer.episode_store.live_table()
    past_the_last_window = table.ids[0] * STRIDE + table.length[0] - 2  # a step, but no window starts there
    with pytest.raises(InvalidDataError, match="some name no position of its view"):
        sampler.update_priorities([past_the_last_window], [100.0])
    assert sampler.dropped == 0


def test_one_prioritized_sampler_per_name(uneven):
    first = uneven.buffer.sampler("prioritized", name="shared")
    with pytest.raises(StoreLockedError, match="another sampler .* keeps the priorities 'shared'"):
        uneven.buffer.sampler("prioritized", name="shared")
    other = uneven.buffer.sampler("prioritized", name="other")  # another name is another file
    first.close()
    second = uneven.buffer.sampler("prioritized", name="shared")  # released by close()
    assert len(second.sample(4)) == 4
    for sampler in (second, other):
        sampler.close()


def test_sampling_an_empty_buffer(make_buffer):
    buffer = make_buffer("empty")
    with pytest.raises(InvalidDataError, match="the TimestepView has no items: the buffer holds 0 episodes"):
        buffer.sampler("uniform")
    store = buffer.episode_store
    prioritized = PrioritizedSampler(TimestepView(store), persist=False)
    for sampler in (UniformSampler(TimestepView(store)), prioritized):
        with pytest.raises(InvalidDataError, match=r"nothing to sample: the view has no items \(0 episodes"):
            sampler.sample(4)
    buffer.store_episode(**episode_arrays(1, 3), task_id=1)
    assert len(prioritized.sample(4)) == 4  # following the store, it samples once there is something


# ---- bugs found by these tests, fixed ----------------------------------------------------------------------

def test_negative_step_priorities_are_rejected(uneven):
    sampler = uneven.buffer.sampler("sequence", window=3, seed=0, persist=False)
    keys = sampler.sample(2).keys
    with pytest.raises(InvalidDataError, match="finite and >= 0"):
        sampler.update_priorities(keys, [[-1.0, 5.0, 5.0], [1.0, 1.0, 1.0]])


def test_a_key_a_filter_excluded_never_becomes_drawable(uneven):
    sampler = uneven.buffer.sampler("prioritized", filter_fields=dict(reward=2003.0), seed=0, persist=False)
    assert set(sampler.sample(8).keys.tolist()) == {1 * STRIDE + 3}  # episode 1 (number 2), t = 3 only
    try:
        with pytest.raises(InvalidDataError, match="some name no position of its view"):
            sampler.update_priorities([1 * STRIDE + 2], [100.0])
    finally:
        drawn = np.concatenate([sampler.sample(8).keys for _ in range(5)])
        assert set(drawn.tolist()) == {1 * STRIDE + 3}


def test_a_dropped_prioritized_sampler_releases_its_name(uneven):
    sampler = uneven.buffer.sampler("prioritized", seed=0, name="dropped")
    assert len(sampler.sample(2)) == 2
    del sampler
    gc.collect()
    uneven.buffer.sampler("prioritized", seed=0, name="dropped").close()


def test_a_restored_sampler_enters_new_episodes_at_the_restored_max(uneven):
    sampler = uneven.buffer.sampler("prioritized", alpha=1.0, beta=1.0, seed=0, name="restored")
    keys = np.array(sorted(uneven.valid_keys(steps)))
    sampler.update_priorities(keys, np.full(len(keys), 10.0))
    sampler.update_priorities(keys, np.ones(len(keys)))  # every priority back to 1; the largest seen stays 10
    new = uneven.store(6, "terminated")  # committed after the sampler's last draw or update
    state = sampler.state_dict()
    sampler.close()
    uneven.reopen()
    restored = uneven.buffer.sampler("prioritized", alpha=1.0, beta=1.0, seed=0, name="restored")
    try:
        restored.load_state_dict(state)
        assert restored.max_priority == 10.0
        drawn = [restored.sample(32) for _ in range(5)]
        new_weights = np.concatenate([s.weights[s.keys // STRIDE == new] for s in drawn])
        assert len(new_weights) > 0
        np.testing.assert_allclose(new_weights, 0.1)  # priority 10 (as the unbroken sampler) against a minimum of 1
    finally:
        restored.close()


def test_an_epoch_restored_mid_way_carries_on_through_batches(uneven):
    sampler = uneven.buffer.sampler("uniform", replacement=False, seed=0)
    batches = iter(sampler.batches(4))
    next(batches), next(batches)
    state = sampler.state_dict()
    rest = [s.keys.tolist() for s in batches]
    assert len(rest) == 4  # 21 positions: 4 + 4 drawn, 4 + 4 + 4 + 1 to go
    restored = uneven.buffer.sampler("uniform", replacement=False, seed=0)
    restored.load_state_dict(state)
    assert [s.keys.tolist() for s in restored.batches(4)] == rest


# ---- found by review, fixed ----------------------------------------------------------------------------

def test_a_sampler_follows_a_view_someone_else_refreshed(make_buffer):
    episodes = Episodes(make_buffer("shared", max_episodes=4, max_timesteps=STRIDE, circular=True))
    for length in (4, 4, 4, 4):
        episodes.store(length, "terminated")
    view = episodes.buffer.dataset(timestep_level=True)
    prioritized = PrioritizedSampler(view, seed=0, persist=False)
    uniform = UniformSampler(view, replacement=False, seed=0)
    uniform.sample(3)
    for _ in range(3):
        episodes.store(4, "terminated")  # evicts ids 0..2 and reuses their rows
    UniformSampler(view, seed=1).sample(2)  # a third sampler refreshes the shared view
    live = set(episodes.live())
    for sampler in (prioritized, uniform):
        for _ in range(5):
            batch = sampler.batch(16)
            assert set((batch["_key"].numpy() // STRIDE).tolist()) <= live
            check_batch(batch, episodes)  # the values are what was written under those keys
    assert prioritized.tree.total == len(view)  # evicted rows left the tree, new ones entered at 1.0


def test_an_eviction_mid_epoch_keeps_the_ranks_equal(make_buffer):
    episodes = Episodes(make_buffer("ranks", max_episodes=5, max_timesteps=STRIDE, circular=True))
    for length in (5, 6, 7, 5, 6):
        episodes.store(length, None)
    view = episodes.buffer.dataset(timestep_level=True)
    samplers = [UniformSampler(view, replacement=False, seed=3, rank=rank, world_size=2) for rank in range(2)]
    iterators = [iter(sampler.batches(4)) for sampler in samplers]
    [next(iterator) for iterator in iterators]
    episodes.store(6, None)  # evicts episode 0 mid-epoch
    counts = [1 + sum(1 for _ in iterator) for iterator in iterators]
    assert counts[0] == counts[1] == len(samplers[0].batches(4))  # DDP needs the same number of batches
    drawn = np.concatenate([samplers[0].sample(50).keys, samplers[1].sample(50).keys])
    assert 0 not in set((drawn // STRIDE).tolist())


def test_priorities_belong_to_one_kind_of_view(uneven):
    steps_sampler = uneven.buffer.sampler("prioritized", seed=0)
    assert steps_sampler.name == "steps"
    steps_sampler.close()
    with pytest.raises(InvalidDataError, match="belong to another view"):
        uneven.buffer.sampler("prioritized", window=3, name="steps", seed=0)
    windows_sampler = uneven.buffer.sampler("sequence", window=3, seed=0)  # its own default name
    assert windows_sampler.name == "window3"
    windows_sampler.close()
    ranks = [uneven.buffer.sampler("prioritized", rank=rank, world_size=2, seed=0) for rank in range(2)]
    assert [sampler.name for sampler in ranks] == ["steps-rank0", "steps-rank1"]
    for sampler in ranks:
        sampler.close()


def test_the_largest_priority_survives_a_reopen_even_when_small(uneven):
    sampler = uneven.buffer.sampler("prioritized", seed=0, name="small")
    keys = sampler.sample(4).keys
    sampler.update_priorities(keys, np.full(4, 0.1))
    sampler.close()
    again = uneven.buffer.sampler("prioritized", seed=0, name="small")
    assert again.max_priority == 1.0  # 0.1 never beat the initial 1.0
    again.close()


def test_time_major_and_partial_windows_take_step_priorities(uneven):
    major = uneven.buffer.sampler("sequence", window=3, time_major=True, seed=0, persist=False)
    batch = major.batch(4)
    assert major.update_priorities(batch["_key"], torch.ones(3, 4)) == 4  # (L, B), as the batch is laid out
    partial = uneven.buffer.sampler("sequence", window=6, allow_partial=True, eta=0.5, seed=0, persist=False)
    batch = partial.batch(64)
    mask = batch["_mask"].numpy()
    assert (~mask).any()  # some windows run past their episode's end
    partial.update_priorities(batch["_key"], np.where(mask, 2.0, 0.0), mask=batch["_mask"])
    ids, t = np.divmod(batch["_key"].numpy(), STRIDE)
    rows = partial.view.table.start[partial.view.table.positions_of(ids)] + t
    # every real step had priority 2 and the padding is left out: max 2 and mean 2, whatever the length
    np.testing.assert_allclose(partial.tree.leaves[rows] ** (1 / partial.alpha), 2.0)
    with pytest.raises(InvalidDataError, match="mask must be the batch's '_mask'"):
        partial.update_priorities(batch["_key"], np.ones((64, 6)), mask=np.ones((64, 5), bool))


def test_a_read_only_buffer_keeps_priorities_in_memory(uneven):
    folder = uneven.buffer.folder
    uneven.buffer.close()
    reader = ReplayBuffer.from_folder(folder, read_only=True)
    sampler = reader.sampler("prioritized", seed=0)
    sampler.update_priorities(sampler.sample(4).keys, np.full(4, 3.0))
    assert sampler.files is None and not (folder / "priorities").exists()
    reader.close()


def _folder_snapshot(folder):
    """Every file under ``folder``: its bytes and its mtime (ns)."""
    return {path.relative_to(folder): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_read_only_reader_starts_from_the_stored_priorities_and_never_writes(uneven):
    folder = uneven.buffer.folder
    writer = uneven.buffer.sampler("prioritized", seed=0)
    keys = np.unique(np.concatenate([writer.sample(16).keys for _ in range(8)]))
    writer.update_priorities(keys, np.linspace(0.1, 5.0, len(keys)))
    expected = writer.tree.leaves.copy()
    writer.close()
    uneven.buffer.close()
    before = _folder_snapshot(folder)
    reader = ReplayBuffer.from_folder(folder, read_only=True)
    sampler = reader.sampler("prioritized", seed=0)
    np.testing.assert_allclose(sampler.tree.leaves[: len(expected)], expected)  # the stored ones, not all 1.0
    assert sampler.files is None
    weights = np.concatenate([sampler.sample(64).weights for _ in range(4)])
    assert not np.allclose(weights, 1.0)
    batch = sampler.sample(8)
    assert sampler.update_priorities(batch.keys, np.full(8, 7.0)) == 8  # applied, in memory
    rows = sampler.view.table.start[sampler.view.table.positions_of(batch.keys // STRIDE)] + batch.keys % STRIDE
    np.testing.assert_allclose(sampler.tree.leaves[rows], 7.0 ** sampler.alpha)
    sampler.close()
    fresh = reader.sampler("prioritized", seed=0, persist=False)  # persist=False: start afresh at 1.0
    assert np.all(fresh.tree.leaves[fresh.tree.leaves > 0] == 1.0)
    with pytest.raises(ReadOnlyError, match="persist=True keeps priorities in .* leave persist out to start from "
                                            "the stored priorities"):
        reader.sampler("prioritized", persist=True)
    with pytest.raises(InvalidDataError, match="belong to another view .* pass another name=, or persist=False"):
        reader.sampler("prioritized", name="steps", window=3)
    reader.close()
    assert _folder_snapshot(folder) == before  # byte-identical, mtimes unchanged


def test_a_read_only_reader_ignores_damaged_stored_priorities(uneven):
    folder = uneven.buffer.folder
    writer = uneven.buffer.sampler("prioritized", seed=0)
    writer.update_priorities(writer.sample(4).keys, np.full(4, 9.0))
    writer.close()
    uneven.buffer.close()
    values = folder / "priorities" / "steps.npy"
    os.truncate(values, values.stat().st_size - 8)  # the largest priority's bytes are gone
    before = _folder_snapshot(folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        sampler = reader.sampler("prioritized", seed=0)
        assert np.all(sampler.tree.leaves[sampler.tree.leaves > 0] == 1.0)  # as if there were none
        sampler.update_priorities(sampler.sample(4).keys, np.full(4, 2.0))
        sampler.close()
    assert _folder_snapshot(folder) == before


def test_the_tree_grows_with_the_rows_in_use(make_buffer):
    buffer = make_buffer("big", max_episodes=100_000, max_timesteps=100, max_steps=10_000_000)
    buffer.store_episode(**episode_arrays(1, 50), task_id=1)
    sampler = buffer.sampler("prioritized", seed=0, persist=False)
    assert sampler.tree.capacity < 1_000_000  # not 10 M leaves for 50 stored steps
    sampler.close()


def test_a_view_refuses_keys_it_cannot_hold(uneven, kernel):
    steps_sample = uneven.buffer.sampler("uniform", seed=0).sample(64)
    windows = uneven.buffer.dataset(window=4)
    foreign = Sample(pickle.loads(pickle.dumps(steps_sample)).keys)  # steps past the last window start
    with pytest.raises(InvalidDataError, match="no positions of this view"):
        windows.__getitems__(foreign)
    filtered = uneven.buffer.dataset(timestep_level=True, filter_meta=dict(task_id=2))
    with pytest.raises(InvalidDataError, match="does not hold"):
        filtered.__getitems__(Sample(np.array([0 * STRIDE + 1])))  # episode 0 is task 1


# ---- readers against a ring writer ---------------------------------------------------------------------

def test_a_reader_never_returns_rows_the_ring_overwrote(make_buffer):
    """The reader has its own store object, as another process has; the writer evicts and overwrites."""
    episodes = Episodes(make_buffer("ring", max_episodes=3, max_timesteps=STRIDE, max_steps=3 * STRIDE, circular=True))
    for _ in range(3):
        episodes.store(STRIDE, "terminated")
    reader = ReplayBuffer.from_folder(episodes.buffer.folder, read_only=True)
    view = reader.dataset(timestep_level=True)
    items = np.arange(len(view))
    assert check_batch(view.__getitems__(UniformSampler(view, seed=0).sample(8)), episodes) is not None
    episodes.store(STRIDE, "terminated")  # evicts episode 0 and overwrites its rows
    with pytest.raises(SampleExpiredError, match="evicted by the ring writer"):
        view.__getitems__(items)  # the snapshot still lists episode 0: its rows now hold episode 3
    sampler = UniformSampler(reader.dataset(timestep_level=True), seed=0, follow=False)
    episodes.store(STRIDE, "terminated")  # the sampler's snapshot is stale again
    for _ in range(5):
        check_batch(sampler.batch(16), episodes)  # batch() draws again after a refresh: the values are right
    assert set((sampler.batch(64)["_key"].numpy() // STRIDE).tolist()) <= set(episodes.live())
    reader.close()


def test_follow_disk_picks_up_a_writer_in_another_process(make_buffer):
    episodes = Episodes(make_buffer("disk", max_episodes=10, max_timesteps=STRIDE))
    episodes.store(4, "terminated")
    reader = ReplayBuffer.from_folder(episodes.buffer.folder, read_only=True)  # its own store object
    sampler = reader.sampler("uniform", seed=0, follow="disk")
    other = ReplayBuffer.from_folder(episodes.buffer.folder, read_only=True)  # a third process, say
    still = other.sampler("uniform", seed=0)
    assert set((sampler.sample(32).keys // STRIDE).tolist()) == {0}
    episodes.store(6, "terminated")
    drawn = np.concatenate([sampler.sample(32).keys for _ in range(4)])
    assert set((drawn // STRIDE).tolist()) == {0, 1}  # the new episode, without a refresh() call
    assert set((np.concatenate([still.sample(32).keys for _ in range(4)]) // STRIDE).tolist()) == {0}
    with pytest.raises(InvalidDataError, match="follow must be True, False or 'disk'"):
        reader.sampler("uniform", follow="always")
    reader.close()
    other.close()
