"""Learners under torch.distributed: each rank its own sampler stream over shard folders.

Every stored value encodes (shard, episode, t): ``obs = shard * 10**6 + episode * 1000 + t``, so the steps
two ranks drew can be compared by value as well as by key."""

import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, ReplayBuffer, ReplayDataLoader, ShardSet, shard_folder
from memmap_replay.distributed.shards import SHARD_STRIDE

from conftest import reap

if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "ddp_shards.py"
SHARDS, EPISODES, STRIDE = 3, 8, 32
BATCH, DRAWS = 32, 4


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp") / "shards"
    rng = np.random.default_rng(7)
    for shard in range(SHARDS):
        buffer = ReplayBuffer(shard_folder(root, shard), EPISODES, STRIDE, fields=dict(obs="float"))
        for episode in range(EPISODES):
            length = int(rng.integers(5, STRIDE + 1))
            buffer.store_episode(obs=shard * 10**6 + episode * 1000 + np.arange(length, dtype=np.float64))
        buffer.close()
    return root


def stream(root, kind, *, priorities=None, **options):
    """DRAWS batches of one sampler over a fresh ShardSet: keys, weights (prioritized) and obs per batch.
    ``priorities(keys, obs)``: the priority update after each draw."""
    shards = ShardSet(root)
    sampler = shards.sampler(kind, **options)
    out = []
    for _ in range(DRAWS):
        batch = sampler.batch(BATCH)
        out.append({name: value.numpy().copy() for name, value in batch.items()})
        if priorities is not None:
            sampler.update_priorities(batch["_key"], priorities(batch["_key"].numpy(), batch["obs"].numpy()))
    shards.close()
    return out


def same(a, b) -> bool:
    return all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_ranks_with_one_seed_draw_different_reproducible_streams(root, kind):
    rank0 = stream(root, kind, seed=3, rank=0, world_size=2)
    rank1 = stream(root, kind, seed=3, rank=1, world_size=2)
    for mine, theirs in zip(rank0, rank1):
        assert not np.array_equal(mine["_key"], theirs["_key"])
        for batch in (mine, theirs):  # each row is what was stored at its key's (shard, episode, t)
            shard, local = batch["_key"] % SHARD_STRIDE, batch["_key"] // SHARD_STRIDE
            episode, t = np.divmod(local, STRIDE)
            np.testing.assert_array_equal(batch["obs"], shard * 10**6 + episode * 1000 + t)
    assert same(rank0, stream(root, kind, seed=3, rank=0, world_size=2))  # reproducible
    assert same(rank1, stream(root, kind, seed=3, rank=1, world_size=2))
    assert not same(rank0, stream(root, kind, seed=4, rank=0, world_size=2))  # and the seed matters


def test_same_seed_and_rank_give_the_same_batches_with_priority_updates(root):
    """The DDP loop: every rank applies every rank's updates; a rerun of (seed, rank) repeats the batches."""
    def run():
        shards = [ShardSet(root) for _ in range(2)]
        samplers = [s.sampler("prioritized", alpha=0.6, beta=0.4, beta_steps=DRAWS, seed=11, rank=r, world_size=2)
                    for r, s in enumerate(shards)]
        drawn = []
        for _ in range(DRAWS):
            batches = [sampler.batch(BATCH) for sampler in samplers]
            drawn.append([{name: value.numpy().copy() for name, value in b.items()} for b in batches])
            keys = torch.cat([b["_key"] for b in batches])  # what all_gather gives every rank
            losses = torch.cat([b["obs"] % 97 + 1.0 for b in batches])  # a stand-in per-sample loss
            for sampler in samplers:
                sampler.update_priorities(keys, losses)
        trees = [[shard.tree.leaves.copy() for shard in sampler.samplers] for sampler in samplers]
        for s in shards:
            s.close()
        return drawn, trees

    drawn, trees = run()
    for mine, theirs in zip(*trees):  # the ranks' priorities are the same
        np.testing.assert_array_equal(mine, theirs)
    assert any(not np.array_equal(a["_key"], b["_key"]) for a, b in drawn)  # their draws are not
    again, _ = run()
    assert all(same(a, b) for a, b in zip(drawn, again))


def epoch_keys(sampler) -> np.ndarray:
    return np.concatenate([sample.keys for sample in sampler.batches(BATCH)])


@pytest.mark.parametrize("world_size", [2, 3])
def test_uniform_epochs_give_ranks_disjoint_equal_shares(root, world_size):
    buffer = ReplayBuffer.from_folder(shard_folder(root, 0), read_only=True)
    size = len(buffer.dataset(timestep_level=True))
    samplers = [buffer.sampler("uniform", replacement=False, seed=5, rank=rank, world_size=world_size)
                for rank in range(world_size)]
    share = -(-size // world_size)
    for _ in range(2):  # two epochs: each its own permutation, split the same way
        shares = [epoch_keys(sampler) for sampler in samplers]
        assert [len(keys) for keys in shares] == [share] * world_size
        # every position, and none twice but the share * world_size - size of the padding
        assert len(np.unique(np.concatenate(shares))) == size
    again = buffer.sampler("uniform", replacement=False, seed=5, rank=1, world_size=world_size)
    first = epoch_keys(again)
    assert not np.array_equal(first, epoch_keys(again))  # the next epoch is another order
    buffer.close()


def test_sharded_epochs_split_with_torch_distributed_sampler(root):
    """A ShardedSampler draws with replacement; epochs over the shards split as any torch Dataset does (the
    README's recipe: torch's DistributedSampler, batched, into a ReplayDataLoader)."""
    shards = ShardSet(root)
    with pytest.raises(InvalidDataError, match="sharded sampler draws with replacement"):
        shards.sampler("uniform", replacement=False, rank=0, world_size=2)
    view = shards.dataset(timestep_level=True)
    shares = []
    for rank in range(2):
        split = torch.utils.data.DistributedSampler(view, num_replicas=2, rank=rank, shuffle=True, seed=5)
        split.set_epoch(1)
        loader = ReplayDataLoader(view, torch.utils.data.BatchSampler(split, BATCH, drop_last=False))
        shares.append(torch.cat([batch["obs"] for batch in loader]).numpy())
    everything = view.__getitems__(np.arange(len(view)))["obs"].numpy()
    assert len(shares[0]) == len(shares[1]) == -(-len(view) // 2)
    assert np.unique(np.concatenate(shares)).tolist() == np.unique(everything).tolist()
    assert len(np.intersect1d(shares[0], shares[1])) == len(shares[0]) * 2 - len(view)  # the padding only
    shards.close()


RANK = textwrap.dedent("""
    import sys
    import numpy as np
    import torch.distributed as dist
    from memmap_replay import ShardSet
    root, rank, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{{port}}", rank=rank, world_size=2)
    shards = ShardSet(root)
    keys = [shards.sampler(kind, seed=3).sample({batch}).keys for kind in ("uniform", "prioritized")]
    np.save(out, np.stack(keys))
    shards.close()
    dist.barrier()
    dist.destroy_process_group()
""").format(batch=BATCH)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_samplers_read_the_rank_from_torch_distributed(root, tmp_path):
    script, port = tmp_path / "rank.py", str(free_port())
    script.write_text(RANK)
    processes = [subprocess.Popen([sys.executable, str(script), str(root), str(rank), port,
                                   str(tmp_path / f"rank{rank}.npy")], stderr=subprocess.PIPE) for rank in range(2)]
    for process in processes:
        assert process.wait(timeout=120) == 0, reap(process, 10)
        reap(process, 10)
    for rank in range(2):
        shards = ShardSet(root)
        expected = [shards.sampler(kind, seed=3, rank=rank, world_size=2).sample(BATCH).keys
                    for kind in ("uniform", "prioritized")]
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), np.stack(expected))
        shards.close()


def test_example_trains_with_two_ranks(tmp_path):
    """The example's final loss is the mean squared error over every stored step. Its inputs are N(0, I), so
    that loss is |w_hat - w|^2 + bias^2 + noise^2: at best the noise floor 0.0025 (noise std 0.05), at the
    start about |w|^2 (3.4). Below 0.01 (four times the floor) the weights are found to within about 0.03
    each, three orders of magnitude below the start; it measures 0.0026."""
    result = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "data")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "episodes:" in line)
    assert float(re.search(r"final loss ([0-9.]+)", line).group(1)) < 0.01, line
    assert "priorities in sync: True" in line
