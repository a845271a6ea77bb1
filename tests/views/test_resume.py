"""ReplayDataLoader.state_dict() / load_state_dict(): a fresh loader made with the same arguments and loaded
with a state gives exactly the batches the first one would have given next, whatever was in flight."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from memmap_replay import ReplayBuffer
from memmap_replay.errors import InvalidDataError, OptionError


@pytest.fixture(scope="module")
def buffer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resume")
    buffer = ReplayBuffer(folder, max_episodes=20, max_timesteps=30, fields={"obs": ("float", 2), "reward": "float"})
    rng = np.random.default_rng(0)
    for e in range(10):
        n = int(rng.integers(5, 30))
        buffer.store_episode(obs=rng.random((n, 2)), reward=np.arange(n, dtype=float) + 100 * e)
    yield buffer
    buffer.close()


def _rewards(batch) -> list[float]:
    return np.asarray(batch["reward"]).tolist()


def _take(loader, count: int, iterator=None):
    """``count`` batches (rewards), starting a new iteration whenever one ends; and the live iterator."""
    out, iterator = [], iterator if iterator is not None else iter(loader)
    while len(out) < count:
        try:
            out.append(_rewards(next(iterator)))
        except StopIteration:
            iterator = iter(loader)
    return out, iterator


def _resumes(make, split: int, total: int = 30) -> None:
    reference, _ = _take(make(), total)
    first_loader = make()
    first, iterator = _take(first_loader, split)
    state = json.loads(json.dumps(first_loader.state_dict()))  # as saved: plain JSON
    del iterator
    resumed = make()
    resumed.load_state_dict(state)
    rest, _ = _take(resumed, total - split)
    assert first + rest == reference


EPOCHS = [dict(shuffle=True, seed=3), dict(shuffle=False), dict(shuffle="blocks", block_size=8, block_window=2, seed=1),
          dict(shuffle=True, seed=2, num_workers=2), dict(shuffle=True, seed=2, drop_last=True, prefetch=3)]


@pytest.mark.parametrize("options", EPOCHS, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()))
@pytest.mark.parametrize("split", [0, 1, 7, 21])
def test_epoch_loader_resumes_mid_epoch(buffer, options, split):
    _resumes(lambda: buffer.dataloader(8, timestep_level=True, **options), split)


def test_epoch_loader_with_a_generator_resumes_later_epochs_too(buffer):
    # no seed: each epoch's order is drawn from the generator; its state when the epoch began is saved
    _resumes(lambda: buffer.dataloader(8, timestep_level=True, shuffle=True,
                                       generator=torch.Generator().manual_seed(7)), 9, total=50)


def test_epoch_loader_with_worker_processes_resumes(buffer):
    _resumes(lambda: buffer.dataloader(8, timestep_level=True, shuffle="blocks", block_size=8, seed=5, num_workers=2,
                                       workers="processes"), 5)


SAMPLERS = [(dict(), dict()), (dict(), dict(num_workers=2)), (dict(replacement=False), dict(prefetch=3)),
            (dict(replacement=False, order="blocks", block_size=8), dict(num_workers=2)),
            (dict(), dict(num_batches=10))]


@pytest.mark.parametrize("options", SAMPLERS, ids=str)
@pytest.mark.parametrize("split", [0, 1, 9, 26])
def test_sampler_loader_resumes_with_draws_in_flight(buffer, options, split):
    sampler_options, loader_options = options
    _resumes(lambda: buffer.sampler("uniform", timestep_level=True, seed=4, **sampler_options)
             .dataloader(8, **loader_options), split, total=40)


def test_sampler_loader_with_worker_processes_resumes(buffer):
    _resumes(lambda: buffer.sampler("uniform", timestep_level=True, seed=4).dataloader(
        8, num_workers=2, workers="processes"), 3)


def test_a_state_lists_the_draws_in_flight(buffer):
    loader = buffer.sampler("uniform", timestep_level=True, seed=4).dataloader(8, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    assert state["batch"] == 1 and len(state["pending"]) == 4 + 1  # threads x prefetch_factor, and prefetch=1
    assert all(size == 8 and len(keys) == 8 for size, keys, _ in state["pending"])


def test_state_before_iterating_is_the_loaded_one(buffer):
    loader = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    fresh = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_a_state_of_another_loader_is_refused(buffer):
    state = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3).state_dict()
    with pytest.raises(InvalidDataError, match="same arguments"):
        buffer.dataloader(4, timestep_level=True, shuffle=True, seed=3).load_state_dict(state)
    with pytest.raises(InvalidDataError, match="loader of epochs"):
        buffer.sampler("uniform", timestep_level=True).dataloader(8).load_state_dict(state)
    with pytest.raises(InvalidDataError, match="ReplayDataLoader's state_dict"):
        buffer.dataloader(8, timestep_level=True).load_state_dict({"type": "UniformSampler"})
    with pytest.raises(InvalidDataError, match="damaged loader state_dict"):
        buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3).load_state_dict(dict(state, batch=-1))


def test_a_damaged_draws_state_changes_nothing(buffer):
    sampler = buffer.sampler("uniform", timestep_level=True, seed=4)
    loader = sampler.dataloader(8)
    state = loader.state_dict()
    before = sampler.state_dict()
    with pytest.raises(InvalidDataError, match="damaged loader state_dict"):
        loader.load_state_dict(dict(state, pending=[[8, [1, 2], None]]))
    assert sampler.state_dict() == before


def test_a_loader_over_a_plain_batch_sampler_has_no_state(buffer):
    from memmap_replay.views.loader import ReplayDataLoader

    loader = ReplayDataLoader(buffer.dataset(timestep_level=True), [np.arange(4)])
    with pytest.raises(OptionError, match="keeps no state"):
        loader.state_dict()


def test_an_epoch_over_a_view_that_changed_begins_anew(buffer):
    loader = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3)
    iterator = iter(loader)
    next(iterator)
    state = dict(loader.state_dict(), shape=dict(loader.state_dict()["shape"], size=10))  # as if fewer items then
    resumed = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    reference = buffer.dataloader(8, timestep_level=True, shuffle=True, seed=3)
    reference.batch_sampler.epoch = 1
    assert [_rewards(batch) for batch in resumed] == [_rewards(batch) for batch in reference]
