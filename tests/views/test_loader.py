"""DataLoaders: batches through workers (fork, spawn, forkserver), samplers, keywords, named tuples."""

import gc
import pickle
import weakref

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, ReplayBuffer
from memmap_replay.views.loader import BatchIndexSampler

from conftest import episode_arrays


def all_rewards(loader):
    return sorted(float(r) for batch in loader for r in batch["reward"].reshape(-1))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_timestep_epoch_sees_every_step_once(filled, num_workers):
    loader = filled.dataloader(4, timestep_level=True, shuffle=True, num_workers=num_workers, seed=3)
    expected = sorted(float(r) for n in range(6) for r in episode_arrays(n, 5 + n)["reward"])
    assert all_rewards(loader) == expected
    assert len(loader) == int(np.ceil(len(expected) / 4))


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_workers_under_every_start_method(filled, context):
    loader = filled.dataloader(8, n_steps=2, gamma=0.9, num_workers=2, multiprocessing_context=context)
    batches = list(loader)
    assert sum(len(b["reward"]) for b in batches) == len(filled.dataset(n_steps=2, gamma=0.9))
    inline = list(filled.dataloader(8, n_steps=2, gamma=0.9))
    for a, b in zip(batches, inline):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name])


@pytest.mark.parametrize("transport", ["slots", "torch"])
def test_a_deleted_loader_with_persistent_workers_stops_them_at_once(filled, transport):
    """Its torch iterator is freed when the loader is (no reference cycle): a cycle is freed by the garbage
    collector, which closes the iterator's queues before it runs, so the workers never hear they are done and
    torch waits 5 s for each before killing it."""
    loader = filled.dataloader(8, num_workers=2, persistent_workers=True, multiprocessing_context="fork",
                               worker_transport=transport)
    batches = iter(loader)
    next(batches)
    workers = list(loader._iterator._workers)
    iterator = weakref.ref(loader._iterator)
    gc.disable()
    try:
        del batches, loader
        assert iterator() is None  # freed by reference counting, its workers told to stop
    finally:
        gc.enable()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0


def test_pickled_view_is_small_and_carries_no_arrays(filled):
    view = filled.dataset(timestep_level=True)
    blob = pickle.dumps(view)
    assert len(blob) < 8_000
    again = pickle.loads(blob)
    assert again._store is None
    assert torch.equal(again.__getitems__(np.arange(5))["reward"], view.__getitems__(np.arange(5))["reward"])


def test_same_seed_same_batches_and_drop_last(filled):
    first = [b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True, seed=7)]
    second = [b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True, seed=7)]
    other = [b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True, seed=8)]
    assert first == second and first != other
    torch.manual_seed(0)
    a = [b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True)]
    torch.manual_seed(0)
    b = [b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True)]
    assert a == b
    dropped = list(filled.dataloader(4, timestep_level=True, drop_last=True))
    assert all(len(batch["reward"]) == 4 for batch in dropped) and len(dropped) == 45 // 4


def test_batch_sampler_epochs_differ_and_cover():
    sampler = BatchIndexSampler(10, 3, shuffle=True, seed=1)
    one, two = [np.concatenate(list(sampler)) for _ in range(2)]
    assert sorted(one) == sorted(two) == list(range(10)) and not np.array_equal(one, two)
    assert [len(b) for b in BatchIndexSampler(10, 3)] == [3, 3, 3, 1]
    with pytest.raises(InvalidDataError, match="batch_size must be a positive int"):
        BatchIndexSampler(10, 0)


def test_named_tuple_device_and_field_map(filled):
    loader = filled.dataloader(2, return_mask=True, device="cpu",
                               to_named_tuple=("obs", "reward", "task_id", "_mask", "_lens"))
    batch = next(iter(loader))
    assert batch._fields == ("obs", "reward", "task_id", "mask", "lens")
    assert batch.obs.shape == (2, 6, 3) and batch.mask.shape == (2, 6) and batch.lens.tolist() == [5, 6]
    loader = filled.dataloader(3, n_steps=2, sequence_fields=("reward",), fieldname_map={"seq_reward": "rewards"},
                               to_named_tuple=("rewards", "n_step_lens"))
    rewards, lens = next(iter(loader))
    assert rewards.shape == (3, 2) and lens.shape == (3,)
    with pytest.raises(InvalidDataError, match=r"to_named_tuple names \['nope'\] are not in the batch"):
        next(iter(filled.dataloader(2, to_named_tuple=("nope",))))


@pytest.mark.parametrize("kwargs, match", [
    (dict(bogus=1), r"unknown keyword \['bogus'\]"),
    (dict(timestep_level=True, n_steps=2), "choose one of"),
    (dict(timestep_level=True, return_mask=True), "return_mask applies to trajectories"),
    (dict(fields=("nope",)), r"unknown field \['nope'\]"),
    (dict(filter_meta=dict(nope=1)), r"unknown meta field \['nope'\]"),
    (dict(n_steps=0), "n_steps must be a positive int"),
    (dict(window=15), "has no items"),
    (dict(window=100), "at most the store.s max_timesteps=20"),
    (dict(n_steps=10**12), "at most the store.s max_timesteps=20"),
    (dict(timestep_level="no"), "timestep_level must be True or False"),
    (dict(return_mask="no"), "return_mask must be True or False"),
    (dict(n_steps=2, gamma="0.9"), "gamma must be a finite number"),
    (dict(fieldname_map={"rewrd": "r"}), "does not output"),
    (dict(fieldname_map={"obs": "reward"}), "twice"),
    (dict(fields=5), "must be a name or a tuple of names"),
    (dict(shuffle="no"), "shuffle must be True, False or .blocks."),
    (dict(seed=1.5), "seed must be an int"),
    (dict(num_workers=-1), "num_workers must be an int"),
    (dict(to_named_tuple=("obs", "_obs")), "distinct"),
    (dict(timestep_level=True, stack_pad="edge", frame_stack=2, stack_fields=("obs",)), "stack_pad must be one of"),
])
def test_bad_keywords_are_errors(filled, kwargs, match):
    with pytest.raises(InvalidDataError, match=match):
        filled.dataloader(2, **kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda b: b.dataloader(2, shufle=True),
     r"unknown keyword \['shufle'\] for ReplayBuffer.dataloader \(help\(ReplayBuffer.dataloader\) lists its "
     r"options\); did you mean 'shuffle'\?$"),
    (lambda b: b.dataset(timestep_level=True, fram_stack=2), r"unknown keyword \['fram_stack'\].*did "
                                                             r"you mean 'frame_stack'\?$"),
    (lambda b: b.sampler("prioritized", alhpa=0.5),
     r"unknown keyword \['alhpa'\] for ReplayBuffer.sampler .*did you mean 'alpha'\?$"),
    (lambda b: b.sampler("uniform").dataloader(2, pin_memroy=True), r"unknown keyword \['pin_memroy'\].*did "
                                                                    r"you mean 'pin_memory'\?$"),
    (lambda b: b.dataset(fields=("rewrd",)), r"unknown field \['rewrd'\]: the store's fields are .*; "
                                             r"did you mean 'reward'\?$"),
    (lambda b: b.dataset(filter_meta=dict(taskid=1)), r"filter_meta has unknown meta field \['taskid'\].*did "
                                                      r"you mean 'task_id'\?$"),
    (lambda b: b.get_all_data(fields=("ob",)), r"unknown field 'ob': .*; did you mean 'obs'\?$"),
    (lambda b: b.store_episode(obs=np.zeros((2, 3)), rewrd=np.zeros(2)),
     r"unknown field \['rewrd'\].*did you mean 'reward'\?$"),
    (lambda b: b.update(0, rewrd=1.0), r"unknown field 'rewrd'.*did you mean 'reward'\?$"),
    (lambda b: b.dataset(fields=("ob", "zzz", "rewrd")), r"did you mean 'obs' for 'ob', 'reward' for 'rewrd'\?$"),
])
def test_unknown_names_suggest_the_closest(filled, call, match):
    with pytest.raises(InvalidDataError, match=match):
        call(filled)


def test_an_unknown_name_far_from_every_known_one_gets_no_suggestion(filled):
    with pytest.raises(InvalidDataError, match=r"unknown keyword \['zzzz'\] .*lists its options\)$"):
        filled.dataloader(2, zzzz=1)


def test_to_named_tuple_says_what_it_takes(filled):
    with pytest.raises(InvalidDataError, match=r"to_named_tuple must be a tuple of output names, e.g. \('obs', "
                                               r"'action'\), .*\(got True\); it is not a switch"):
        filled.dataloader(2, to_named_tuple=True)
    loader = filled.dataloader(2, to_named_tuple=("obs", "action"))
    assert next(iter(loader))._fields == ("obs", "action")


def test_a_filter_that_matches_nothing_says_so(filled):
    with pytest.raises(InvalidDataError, match=r"the TimestepView has no items: no episode matched the filter "
                                               r"filter_meta=\{'task_id': 7\} \(the buffer holds 6 episodes\); check "
                                               r"its names and values, or pass allow_empty=True"):
        filled.dataset(timestep_level=True, filter_meta=dict(task_id=7))
    with pytest.raises(InvalidDataError, match=r"no step of the 6 episodes it keeps matched the filter "
                                               r"filter_fields=\{'reward': -5.0\}"):
        filled.dataloader(2, timestep_level=True, filter_fields=dict(reward=-5.0))
    assert len(filled.dataset(timestep_level=True, filter_meta=dict(task_id=7), allow_empty=True)) == 0


def test_seed_style_filter_meta_and_meta_included(filled):
    loader = filled.dataloader(8, filter_meta=dict(task_id=1), timestep_level=True, drop_last=True,
                               to_named_tuple=("obs", "action", "task_id"))
    batches = list(loader)
    assert batches and all(t.tolist() == [1] * 8 for _, _, t in batches)


def test_reader_process_view_from_folder(filled, tmp_path):
    filled.close()
    reader = ReplayBuffer.from_folder(filled.folder, read_only=True)
    batch = next(iter(reader.dataloader(2, window=3, time_major=True)))
    assert batch["obs"].shape == (3, 2, 3)
    reader.close()


@pytest.mark.parametrize("size", [1, 2, 3, 1000, 100_003, (1 << 20) + 7])
def test_lazy_permutation_is_a_seeded_bijection(size):
    from memmap_replay.views.loader import _LazyPermutation

    values = _LazyPermutation(size, [5, 0])[slice(0, size)]
    assert np.array_equal(np.sort(values), np.arange(size))
    assert np.array_equal(values, _LazyPermutation(size, [5, 0])[slice(0, size)])
    if size > 1000:
        assert not np.array_equal(values, _LazyPermutation(size, [6, 0])[slice(0, size)])
        assert abs(np.corrcoef(np.arange(size), values)[0, 1]) < 0.05  # shuffled, not a near-identity


def test_large_epochs_are_shuffled_lazily_and_cover_everything():
    size = (1 << 20) + 123
    sampler = BatchIndexSampler(size, 4096, shuffle=True, seed=9)
    seen = np.concatenate(list(sampler))
    assert np.array_equal(np.sort(seen), np.arange(size))
    assert not np.array_equal(seen, np.concatenate(list(sampler)))  # a new order each epoch


def test_pin_memory_is_harmless_without_an_accelerator(filled):
    batch = next(iter(filled.dataloader(4, timestep_level=True, pin_memory=True)))
    assert batch["reward"].shape == (4,)
    if torch.cuda.is_available():
        assert batch["reward"].is_pinned()


def test_torch_generator_orders_shuffles(filled):
    orders = [[b["reward"].tolist() for b in filled.dataloader(4, timestep_level=True, shuffle=True,
                                                               generator=torch.Generator().manual_seed(0))]
              for _ in range(2)]
    assert orders[0] == orders[1]
