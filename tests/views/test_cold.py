"""Cold reads: readahead, prefetch and block-shuffled epochs give the very batches the warm path gives,
on a store whose pages are evicted between batches; prefetch looks ahead in order; resumes are exact."""

import ctypes
import gc
import mmap
import os
import sys

import numpy as np
import pytest
import torch

from memmap_replay import OptionError, ReplayBuffer

from conftest import REAL_FSYNC

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="evicting pages uses Linux's madvise/fadvise")
FIELDS = dict(image=("uint8", (3, 16, 16)), action=("float", 2), reward="float")
KINDS = {
    "steps": (16, dict(timestep_level=True)),
    "stacked steps": (16, dict(timestep_level=True, frame_stack=3)),
    "n-step": (16, dict(n_steps=3, gamma=0.9, current_fields=("image",), next_fields=("image",),
                        sequence_fields=("action", "reward"), frame_stack=2)),
    "windows": (8, dict(window=5)),
    "partial windows": (8, dict(window=9, allow_partial=True)),
    "trajectories": (3, dict()),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A store of 12 episodes of 3..40 steps, synced to disk (so that its pages can be evicted)."""
    path = tmp_path_factory.mktemp("cold") / "store"
    rng = np.random.default_rng(21)
    buffer = ReplayBuffer(path, 12, 40, fields=FIELDS, meta_fields=dict(task_id="int"))
    for e in range(12):
        n = int(rng.integers(3, 41))
        buffer.store_episode(image=rng.integers(0, 255, (n, 3, 16, 16), dtype=np.uint8),
                             action=rng.standard_normal((n, 2), dtype=np.float32),
                             reward=rng.standard_normal(n, dtype=np.float32), task_id=e)
    buffer.close()
    for file in path.rglob("*.npy"):
        fd = os.open(file, os.O_RDONLY)
        REAL_FSYNC(fd)  # (the tests' os.fsync does not wait for the disk: conftest.py)
        os.close(fd)
    return path


def evict(folder, *views) -> None:
    """Drop the store's pages: out of the views' maps (madvise) and out of the page cache (fadvise)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for view in views:
        for array in view._sources.values():
            start = array.ctypes.data & -mmap.PAGESIZE
            libc.madvise(start, array.ctypes.data + array.nbytes - start, mmap.MADV_DONTNEED)
    for file in folder.rglob("*.npy"):
        fd = os.open(file, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def warm_batches(folder, batch_size: int, **options) -> list[dict]:
    """The batches of a loader without readahead, read warm; its maps are gone on return (so that an
    eviction afterwards drops every page)."""
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    batches = batches_of(buffer.dataloader(batch_size, shuffle=True, readahead="off", **options))
    buffer.close()
    gc.collect()
    return batches


def batches_of(loader) -> list[dict]:
    return [{name: value.clone() for name, value in batch.items()} for batch in loader]


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


@linux
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("readahead", ["auto", "always"])
def test_cold_batches_are_byte_identical_to_warm_ones(folder, kind, readahead):
    batch_size, options = KINDS[kind]
    warm = warm_batches(folder, batch_size, seed=5, **options)
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    loader = buffer.dataloader(batch_size, shuffle=True, seed=5, readahead=readahead, **options)
    cold = []
    for batch in loader:  # evicted before every batch: each is read (and advised) cold
        cold.append({name: value.clone() for name, value in batch.items()})
        evict(folder, loader.dataset)
    assert same(warm, cold)
    assert loader.dataset.readahead.advised > 0  # the cold batches were advised


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_the_loader_prefetches_each_batch_ahead_in_order_and_the_batches_do_not_change(folder, depth, monkeypatch):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    reference = batches_of(buffer.dataloader(16, shuffle=True, seed=2, timestep_level=True, prefetch=0))
    loader = buffer.dataloader(16, shuffle=True, seed=2, timestep_level=True, prefetch=depth)
    order = [np.asarray(items) for items in loader.batch_sampler]
    loader.batch_sampler.epoch = 0  # the same epoch again
    prefetched = []
    monkeypatch.setattr(loader.dataset, "prefetch", lambda items: prefetched.append(np.asarray(items)))
    seen = []
    for i, batch in enumerate(loader):
        seen.append({name: value.clone() for name, value in batch.items()})
        assert len(prefetched) == min(i + 1 + depth, len(order)) if depth else not prefetched
    assert all(np.array_equal(a, b) for a, b in zip(prefetched, order))
    assert same(reference, seen)


def test_a_loop_stopped_early_leaves_no_batch_counted_as_prefetched(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    loader = buffer.dataloader(16, shuffle=True, seed=2, timestep_level=True, prefetch=3)
    iterator = iter(loader)
    next(iterator), next(iterator)
    assert loader.dataset._ahead == 3  # batches 2, 3 and 4 prefetched
    iterator.close()  # the loop stops (as a break does): its batches ahead are given back
    assert loader.dataset._ahead == 0


@linux
def test_prefetch_advises_the_next_batch_and_its_gather_skips_the_look(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    loader = buffer.dataloader(16, shuffle=True, seed=2, timestep_level=True, readahead="always", prefetch=1)
    view = loader.dataset
    iterator = iter(loader)
    next(iterator)
    assert view.readahead.advised == 2 and view._ahead == 1  # batches 0 and 1 prefetched, batch 0 gathered
    next(iterator)
    assert view.readahead.advised == 3 and view._ahead == 1


def test_sampler_prefetch_draws_the_same_batches_and_resumes_exactly(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    plain = buffer.sampler("uniform", seed=9)
    ahead = buffer.sampler("uniform", seed=9, draw_ahead=2)
    for _ in range(3):
        assert torch.equal(plain.batch(8)["_key"], ahead.batch(8)["_key"])
    state = ahead.state_dict()
    assert len(state["ahead"]) == 2  # the two draws made ahead travel with the state
    resumed = buffer.sampler("uniform", seed=0, draw_ahead=2)
    resumed.load_state_dict(state)
    for _ in range(4):
        expected = plain.batch(8)["_key"]
        assert torch.equal(ahead.batch(8)["_key"], expected) and torch.equal(resumed.batch(8)["_key"], expected)
    ahead.batch(4)  # another batch size: the draws ahead are dropped and drawn anew
    assert [size for size, _ in ahead._ahead] == [4, 4]


def test_prioritized_prefetch_is_seeded_and_updates_reach_later_draws(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)

    def run():
        sampler = buffer.sampler("prioritized", seed=4, draw_ahead=1, persist=False)
        keys = []
        for _ in range(6):
            batch = sampler.batch(8)
            keys.append(batch["_key"].clone())
            sampler.update_priorities(batch["_key"], torch.full((8,), 50.0))
        return keys, sampler

    first, sampler = run()
    second, _ = run()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert len(sampler.state_dict()["ahead"]) == 1 and sampler.state_dict()["ahead"][0][2] is not None


def test_prefetch_must_be_a_count(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    with pytest.raises(OptionError, match="prefetch must be an int >= 0"):
        buffer.dataloader(4, timestep_level=True, prefetch=-1)
    with pytest.raises(OptionError, match="draw_ahead must be an int >= 0"):
        buffer.sampler("uniform", draw_ahead=1.5)
    with pytest.raises(OptionError, match="readahead must be one of"):
        buffer.dataloader(4, timestep_level=True, readahead="yes")


def test_a_block_shuffled_epoch_visits_every_item_once_in_blocks(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    loader = buffer.dataloader(16, shuffle="blocks", block_size=8, block_window=2, seed=3, timestep_level=True,
                               return_indices=True)
    items = np.concatenate([np.asarray(b) for b in loader.batch_sampler])
    assert np.array_equal(np.sort(items), np.arange(len(loader.dataset)))
    # a batch of 16 holds one group of 2 blocks of 8 (two groups, 4 blocks, where the short last block
    # shifts the seams)
    assert all(len(np.unique(np.asarray(b) // 8)) <= 4 for b in loader.batch_sampler)
    loaders = [buffer.dataloader(16, shuffle="blocks", block_size=8, block_window=2, seed=3, timestep_level=True,
                                 return_indices=True) for _ in range(2)]
    first = batches_of(loaders[0])
    assert same(first, batches_of(loaders[1]))  # seeded
    assert np.array_equal(torch.cat([b["_t"] for b in first]).numpy(),
                          loaders[0].dataset.positions.locate(items)[1])  # the batches follow the order
    with pytest.raises(OptionError, match="shuffle must be True, False or 'blocks'"):
        buffer.dataloader(16, shuffle="block", timestep_level=True)
    with pytest.raises(OptionError, match="pass them with shuffle='blocks'"):
        buffer.dataloader(16, shuffle=True, block_size=8, timestep_level=True)


def test_a_block_shuffled_sampler_epoch_covers_every_position_once(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    sampler = buffer.sampler("uniform", replacement=False, order="blocks", block_size=8, block_window=2, seed=1)
    keys = np.concatenate([sample.keys for sample in sampler.batches(16)])
    view = sampler.view
    expected = np.concatenate([view.table.ids[e] * view.key_stride + np.arange(n)
                               for e, n in enumerate(view.table.length)])
    assert np.array_equal(np.sort(keys), np.sort(expected))
    with pytest.raises(OptionError, match="pass replacement=False with it"):
        buffer.sampler("uniform", order="blocks")


@linux
def test_workers_read_cold_batches_with_their_own_advice(folder):
    warm = warm_batches(folder, 16, seed=8, timestep_level=True)
    evict(folder)
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    cold = batches_of(buffer.dataloader(16, shuffle=True, seed=8, timestep_level=True, readahead="always",
                                        num_workers=2))
    assert same(warm, cold)


def rand_read_flags(path) -> list[bool]:
    """For each map of ``path`` in this process: whether it is marked MADV_RANDOM (VmFlags 'rr')."""
    flags, current = [], False
    with open("/proc/self/smaps") as smaps:
        lines = smaps.read().splitlines()
    for line in lines:
        if not line[0].isupper() or ":" not in line.split()[0]:  # a mapping's header line
            current = line.rstrip().endswith(str(path))
        elif current and line.startswith("VmFlags:"):
            flags.append("rr" in line.split()[1:])
    return flags


@linux
@pytest.mark.parametrize("options, readahead, marked", [
    (dict(timestep_level=True), "auto", True), (dict(n_steps=2), "always", True), (dict(window=4), "auto", True),
    (dict(timestep_level=True), "off", False), (dict(), "auto", False)],
    ids=["steps", "n-step", "windows", "readahead off", "trajectories"])
def test_scattered_views_map_their_files_for_random_reads(folder, options, readahead, marked):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    view = buffer.dataset(readahead=readahead, **options)
    view.__getitems__(np.arange(3))
    image = (folder / "steps" / "image.npy").resolve()
    if not image.exists():
        image = next(folder.rglob("image.npy")).resolve()
    assert rand_read_flags(image) == [marked]


def test_a_block_shuffled_loader_advises_each_block_whole_once_an_epoch(folder, monkeypatch):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    loader = buffer.dataloader(16, shuffle="blocks", block_size=8, block_window=2, seed=3, timestep_level=True,
                               readahead="always")
    view = loader.dataset
    advised = []
    original = view.advise
    monkeypatch.setattr(view, "advise", lambda episode, t, **options: advised.append((episode, t))
                        or original(episode, t))
    for _ in range(2):  # two epochs: each block advised once in each
        advised.clear()
        assert list(loader)
        positions = {(int(e), int(t)) for episode, t in advised for e, t in zip(episode, t)}
        everything = {(int(e), int(t)) for e, t in zip(*view.positions.locate(np.arange(len(view))))}
        assert positions == everything and sum(len(episode) for episode, _ in advised) == len(view)


def test_prefetch_is_refused_where_draws_ahead_would_be_lost(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    with pytest.raises(OptionError, match="draw_ahead=1 draws batches ahead, which an epoch without replacement"):
        buffer.sampler("uniform", replacement=False, draw_ahead=1)


def test_draws_dropped_ahead_are_given_back_to_the_view(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    sampler = buffer.sampler("uniform", seed=1, draw_ahead=2, readahead="always")
    sampler.batch(4)
    assert sampler.view._ahead == 2
    sampler.batch(8)  # another batch size: the two draws ahead are dropped, two new ones made
    assert len(sampler._ahead) == 2 and sampler.view._ahead == 2


@linux
def test_a_forked_worker_does_not_inherit_the_batches_prefetched(folder):
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    view = buffer.dataset(timestep_level=True, readahead="always")
    view.prefetch(np.arange(4))
    assert view._ahead == 1
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child's first gather looks for itself
        try:
            view.__getitems__(np.arange(4))
            os.write(write, bytes([view.readahead.advised]))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 1) == bytes([2])  # the parent's prefetch, and the child's own look at its gather
    os.close(read)
    os.close(write)


def test_sharded_samplers_draw_ahead_and_their_shards_views_advise(tmp_path):
    from memmap_replay import ShardSet

    rng = np.random.default_rng(0)
    folders = []
    for shard in range(2):
        path = tmp_path / f"shard{shard}"
        buffer = ReplayBuffer(path, 4, 10, fields=FIELDS)
        for _ in range(3):
            buffer.store_episode(image=rng.integers(0, 255, (10, 3, 16, 16), dtype=np.uint8),
                                 action=rng.standard_normal((10, 2), dtype=np.float32),
                                 reward=rng.standard_normal(10, dtype=np.float32))
        buffer.close()
        folders.append(path)
    shards = ShardSet(folders=folders)
    plain = shards.sampler("uniform", seed=3)
    ahead = shards.sampler("uniform", seed=3, draw_ahead=1, readahead="always")
    for _ in range(3):
        assert torch.equal(plain.batch(6)["_key"], ahead.batch(6)["_key"])
    assert len(ahead._ahead) == 1 and sum(view.readahead.advised for view in ahead.view.views) > 0
    shards.close()


@pytest.mark.parametrize("ahead, match", [
    ([[2, [1.7, 3], None]], "'ahead' keys must be a list of ints >= 0"),
    ([[2, [True, 3], None]], "'ahead' keys must be a list of ints >= 0"),
    ([[2, [-1, 3], None]], "'ahead' keys must be a list of ints >= 0"),
    ([[3, [1, 3], None]], "'ahead' holds 2 keys for a batch of 3"),
    ([[2, [1, 3], [1.0, float("nan")]]], "one finite weight > 0 per key"),
    ([[2, [1, 3], [1.0, -2.0]]], "one finite weight > 0 per key"),
    ([[2, [1, 3], [1.0]]], "one finite weight > 0 per key"),
    ({"a": 1}, "'ahead' must be a list"),
])
def test_a_state_dict_with_damaged_draws_ahead_is_refused_and_changes_nothing(folder, ahead, match):
    from memmap_replay import InvalidDataError

    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    sampler = buffer.sampler("uniform", seed=2, draw_ahead=1)
    sampler.batch(2)
    state = sampler.state_dict()
    with pytest.raises(InvalidDataError, match=match):
        sampler.load_state_dict(dict(state, ahead=ahead))
    assert sampler.state_dict() == state


def goal_distance(achieved, desired):
    return -np.linalg.norm(achieved - desired, axis=-1)


def test_a_hindsight_view_advises_the_achieved_goals_to_each_episode_end(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    buffer = ReplayBuffer(tmp_path / "her", 4, 20, fields=dict(obs=("float", 2), goal=("float", 2),
                                                               achieved=("float", 2), reward="float"))
    for _ in range(3):
        buffer.store_episode(obs=rng.random((20, 2)), goal=rng.random((20, 2)), achieved=rng.random((20, 2)),
                             reward=np.zeros(20), end="terminated")
    view = buffer.dataset(hindsight=dict(goal_field="goal", achieved_field="achieved", reward_fn=goal_distance),
                          readahead="always")
    calls = []
    original = view.readahead.batch
    monkeypatch.setattr(view.readahead, "batch",
                        lambda maps, lo, hi, **options: calls.append((len(maps), lo, hi))
                        or original(maps, lo, hi, **options))
    expected = view.__getitems__(np.array([0, 25]))
    episode, t = view.positions.locate(np.array([0, 25]))
    end = view.table.start[episode] + view.table.length[episode]
    assert len(calls) == 2 and calls[1][0] == 1 and (calls[1][2] >= end).all()  # one map: the achieved goals
    view.readahead.mode = "off"
    assert all(torch.equal(value, view.__getitems__(np.array([0, 25]))[name]) for name, value in expected.items()
               if name not in ("goal", "next_goal", "reward", "_relabeled"))
