"""Many writers: shard folders written by several processes at once, read as one store.

Every value written encodes (shard, episode number, t): ``obs = shard * 10**6 + number * 1000 + t``, so
any key a reader returns can be checked against what its writer wrote."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from memmap_replay import (ConcatView, InvalidDataError, ReplayBuffer, ShardSet, StoreNotFoundError, shard_folder)
from memmap_replay.distributed.shards import SHARD_STRIDE

from conftest import reap
from conftest import chi_square_ok

STRIDE = 16  # max_timesteps of every shard: the key stride
FIELDS = dict(obs="float", reward="float")

WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from memmap_replay import ReplayBuffer  # (not ShardSet's module: it imports torch, seconds a writer)
    folder, shard, episodes, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    rng = np.random.default_rng(shard)
    buffer = ReplayBuffer(folder, 1000, {stride}, fields={fields!r}, circular=True)
    for number in range(episodes):
        length = int(rng.integers(2, {stride} + 1))
        values = shard * 10**6 + number * 1000 + np.arange(length, dtype=np.float64)
        buffer.store_episode(obs=values, reward=values, end="terminated")
        time.sleep(pause)
    buffer.close()
""").format(stride=STRIDE, fields=FIELDS)


def start_writers(root, shards, episodes, pause=0.0):
    """A writer process for each of shards 0..shards-1 of the set at ``root`` (``shard_folder`` names its folder)."""
    return [subprocess.Popen([sys.executable, "-c", WRITER, str(shard_folder(root, shard)), str(shard), str(episodes),
                              str(pause)],
                             stderr=subprocess.PIPE) for shard in range(shards)]


def written_by(shard: int, number: int) -> int:
    """The episode length writer ``shard`` drew for its episode ``number`` (same generator as the writer)."""
    rng = np.random.default_rng(shard)
    lengths = [int(rng.integers(2, STRIDE + 1)) for _ in range(number + 1)]
    return lengths[number]


def check(batch) -> None:
    """Each row's values are what its writer wrote at the key's (shard, episode, t)."""
    keys = batch["_key"].numpy()
    shard, local = keys % SHARD_STRIDE, keys // SHARD_STRIDE
    episode, t = np.divmod(local, STRIDE)  # each writer's episode ids count its episodes from 0
    expected = shard * 10**6 + episode * 1000 + t
    np.testing.assert_array_equal(batch["obs"].numpy(), expected)
    assert all(t_ < written_by(int(s), int(e)) for s, e, t_ in zip(shard, episode, t))


@pytest.fixture
def three_shards(tmp_path):
    root = tmp_path / "shards"
    for process in start_writers(root, 3, episodes=12):  # three writer processes at once
        assert process.wait(timeout=120) == 0, reap(process, 10)
        reap(process, 10)
    shards = ShardSet(root)
    yield shards
    shards.close()


def test_several_writers_at_once_and_one_reader_over_all(three_shards):
    assert len(three_shards) == 3 and three_shards.num_episodes == 36
    view = three_shards.dataset(timestep_level=True)
    assert isinstance(view, ConcatView)
    every = view.__getitems__(np.arange(len(view)))
    total = sum(written_by(s, n) for s in range(3) for n in range(12))
    assert len(view) == total and len(np.unique(every["obs"].numpy())) == total
    loader = three_shards.dataloader(7, shuffle=True, seed=0, timestep_level=True)
    seen = np.concatenate([batch["obs"].numpy() for batch in loader])
    assert sorted(seen.tolist()) == sorted(every["obs"].numpy().tolist())  # each step once, across shards
    mixed = view.__getitems__(np.array([len(view) - 1, 0, 5]))  # request order is kept across shards
    np.testing.assert_array_equal(mixed["obs"].numpy(), every["obs"].numpy()[[len(view) - 1, 0, 5]])
    # every option of buffer.dataloader: a device, named tuples, the loader's readahead, a block order
    named = three_shards.dataloader(7, timestep_level=True, device="cpu", to_named_tuple=("obs",), prefetch=2,
                                    block_size=4, shuffle="blocks", seed=1)
    seen = np.concatenate([batch.obs.numpy() for batch in named])
    assert sorted(seen.tolist()) == sorted(every["obs"].numpy().tolist())


def test_uniform_across_shards_is_uniform_over_every_position(three_shards):
    sampler = three_shards.sampler("uniform", seed=0)
    draws = []
    for _ in range(200):
        batch = sampler.batch(64)
        check(batch)
        draws.append(batch["_key"].numpy())
    keys = np.concatenate(draws)
    sizes = np.array([sum(written_by(s, n) for n in range(12)) for s in range(3)])
    counts = np.bincount(keys % SHARD_STRIDE, minlength=3)
    assert chi_square_ok(counts, sizes / sizes.sum() * len(keys))  # each shard in proportion to its steps
    assert not chi_square_ok(counts, np.full(3, len(keys) / 3) * [1.15, 1.0, 0.85])


def test_prioritized_across_shards_matches_one_store(three_shards):
    sampler = three_shards.sampler("prioritized", alpha=1.0, beta=1.0, seed=1)
    def heavy(keys):
        return np.where(keys % SHARD_STRIDE == 2, 9.0, 1.0)  # shard 2's steps weigh 9 times more
    for _ in range(30):
        batch = sampler.batch(256)
        check(batch)
        sampler.update_priorities(batch["_key"], heavy(batch["_key"].numpy()))
    mass = np.array([sub.tree.total for sub in sampler.samplers])
    steps = np.array([len(sub.view) for sub in sampler.samplers], dtype=float)
    assert mass[2] / steps[2] > 1.5 * mass[0] / steps[0]
    drawn = np.concatenate([sampler.batch(256)["_key"].numpy() for _ in range(100)])
    counts = np.bincount(drawn % SHARD_STRIDE, minlength=3)
    assert chi_square_ok(counts, mass / mass.sum() * len(drawn))  # each shard in proportion to its mass
    assert not chi_square_ok(counts, steps / steps.sum() * len(drawn))  # not merely to its size
    # weights are normalised over every shard: (p / the smallest p of all shards) ** -beta
    batch = sampler.batch(256)
    keys = batch["_key"].numpy()
    leaves = []
    for key in keys:
        sub = sampler.samplers[key % SHARD_STRIDE]
        episode, t = divmod(key // SHARD_STRIDE, STRIDE)
        row = sub.view.table.start[sub.view.table.positions_of(np.array([episode]))[0]] + t
        leaves.append(sub.tree.leaves[row])
    lowest = min(sub.tree.min for sub in sampler.samplers)
    np.testing.assert_allclose(batch["_weight"].numpy(), (np.array(leaves) / lowest) ** -1.0, rtol=1e-5)


def test_a_reader_follows_writers_while_they_write(tmp_path):
    root = tmp_path / "live"
    writers = start_writers(root, 2, episodes=40, pause=0.01)
    try:
        while not (shard_folder(root, 1) / "meta.json").exists() or not (shard_folder(root, 0) / "meta.json").exists():
            pass
        shards = ShardSet(root)
        while shards.num_episodes == 0:
            shards.refresh()
        sampler = shards.sampler("uniform", seed=0)
        seen = set()
        while any(writer.poll() is None for writer in writers):
            batch = sampler.batch(32)
            check(batch)
            seen.update((batch["_key"].numpy() // SHARD_STRIDE // STRIDE).tolist())
    finally:
        for writer in writers:
            assert writer.wait(timeout=120) == 0, reap(writer, 10)
            reap(writer, 10)
    for _ in range(20):
        check(sampler.batch(64))
    assert max(seen) > 5  # episodes committed after the sampler was made were drawn
    shards.close()


def test_several_existing_folders_as_one(tmp_path):
    folders = []
    for index in range(2):
        folder = tmp_path / f"run{index}"
        with ReplayBuffer(folder, 10, STRIDE, fields=FIELDS) as buffer:
            buffer.store_episode(obs=np.arange(3.0) + 10 * index, reward=np.zeros(3))
        folders.append(folder)
    shards = ShardSet(folders=folders)
    view = shards.dataset(timestep_level=True)
    assert view.__getitems__(np.arange(6))["obs"].tolist() == [0, 1, 2, 10, 11, 12]
    assert repr(shards) == (f"ShardSet(folders={[str(folder) for folder in folders]}, 2 shards "
                            f"{[str(folder) for folder in folders]}, 2 episodes [1, 1], 6 steps)")
    shards.close()
    assert repr(shards).endswith(", 0 shards [], 0 episodes [], 0 steps)")


def test_trajectories_of_different_lengths_across_shards_pad_to_the_longest(tmp_path):
    folders = []
    for index, length in enumerate((3, 5)):
        folder = tmp_path / f"run{index}"
        with ReplayBuffer(folder, 10, STRIDE, fields=FIELDS) as buffer:
            buffer.store_episode(obs=np.arange(length) + 10.0 * index, reward=np.ones(length))
        folders.append(folder)
    shards = ShardSet(folders=folders)
    batch = shards.dataset(return_mask=True).__getitems__(np.array([1, 0]))
    assert batch["obs"].tolist() == [[10, 11, 12, 13, 14], [0, 1, 2, 0, 0]]
    assert batch["_mask"].sum(dim=1).tolist() == [5, 3] and batch["_lens"].tolist() == [5, 3]
    shards.close()


def test_a_shard_set_shows_its_folders_and_counts(tmp_path):
    root = tmp_path / "shards"
    for index in range(8):
        with ReplayBuffer(shard_folder(root, index), 10, STRIDE, fields=FIELDS) as buffer:
            for _ in range(index % 2 + 1):
                buffer.store_episode(obs=np.arange(3.0), reward=np.zeros(3))
    with_root = ShardSet(root)
    assert repr(with_root) == (f"ShardSet(root={str(root)!r}, 8 shards ['shard-000000', 'shard-000001', "
                               f"'shard-000002', ..., 'shard-000005', 'shard-000006', 'shard-000007'], 12 episodes "
                               f"[1, 2, 1, ..., 2, 1, 2], 36 steps)")
    with_root.close()


def test_errors(tmp_path):
    with pytest.raises(InvalidDataError, match="either root= .* or folders="):
        ShardSet()
    with pytest.raises(StoreNotFoundError, match="is not a folder of shards"):
        ShardSet(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidDataError, match="no writer has committed"):
        ShardSet(tmp_path / "empty").sampler()
    with pytest.raises(InvalidDataError, match="a shard index must be an int"):
        shard_folder(tmp_path, -1)
    for index, fields in enumerate((FIELDS, dict(obs="int", reward="float"))):
        ReplayBuffer(shard_folder(tmp_path / "mixed", index), 10, STRIDE, fields=fields).close()
    with pytest.raises(InvalidDataError, match="every shard must have the same fields"):
        ShardSet(tmp_path / "mixed")


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_resumed_sharded_sampler_serves_its_draws_ahead(three_shards, kind):
    """With prefetch=k the draws ahead have moved the generators: the state_dict carries them, so a sampler
    resumed from it serves the very batches the original goes on to serve."""
    sampler = three_shards.sampler(kind, seed=3, draw_ahead=2)
    for _ in range(3):
        sampler.batch(16)
    state = json.loads(json.dumps(sampler.state_dict()))
    assert len(state["ahead"]) == 2
    resumed = three_shards.sampler(kind, seed=99, draw_ahead=2)
    resumed.batch(16)  # draws of its own ahead: the load drops them
    resumed.load_state_dict(state)
    for _ in range(4):
        a, b = sampler.batch(16), resumed.batch(16)
        assert torch.equal(a["_key"], b["_key"]) and torch.equal(a["obs"], b["obs"])
    broken = json.loads(json.dumps(sampler.state_dict()))
    broken["ahead"][0][1][0][1] = [-1]
    with pytest.raises(InvalidDataError,
                       match="a damaged sampler state_dict .*'ahead' keys must be a list of ints >= 0"):
        resumed.load_state_dict(broken)
