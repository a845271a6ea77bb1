"""Learners under torch.distributed: two DDP ranks on CPU (gloo) train one model from shard folders.

Three actors' shards hold regression data with known weights (y = x @ w + noise). Each rank opens the
ShardSet and draws its own prioritized stream (seeded by (seed, rank), the rank read from torch.distributed).
DistributedDataParallel averages the gradients. The per-sample losses of every rank are gathered, and every
rank applies all of them as new priorities, so the ranks' priorities stay identical: together they draw
as one prioritized sampler would, with a batch of world_size * BATCH.

    python examples/ddp_shards.py [folder]
"""

import gc
import os
import socket
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import memmap_replay
from memmap_replay import ReplayBuffer, ShardSet

WORLD, SHARDS, EPISODES, FEATURES = 2, 3, 20, 8
BATCH, STEPS, NOISE = 64, 150, 0.05


def true_weights() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(FEATURES).astype(np.float32)


def write_shards(root: Path) -> None:
    """What actor processes would do, one shard folder each (here one after the other)."""
    weights = true_weights()
    for shard in range(SHARDS):
        rng = np.random.default_rng(100 + shard)
        buffer = ReplayBuffer(memmap_replay.shard_folder(root, shard), EPISODES, 60, overwrite=True,
                              fields=dict(x=("float", FEATURES), y="float"))
        for _ in range(EPISODES):
            x = rng.standard_normal((int(rng.integers(20, 61)), FEATURES)).astype(np.float32)
            buffer.store_episode(x=x, y=x @ weights + NOISE * rng.standard_normal(len(x)), end="terminated")
        buffer.close()


def gathered(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's tensor, concatenated in rank order (each rank's batch has the same size)."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    # a copy in torch's own memory: a batch's tensors share numpy's (a Python object), and gloo's threads
    # must not hold a Python reference when the interpreter shuts down (an abort at exit otherwise)
    dist.all_gather(parts, tensor.clone())
    return torch.cat(parts)


def mean_squared_error(model: torch.nn.Module, data: dict) -> float:
    with torch.no_grad():
        return (model(data["x"]).squeeze(1) - data["y"]).pow(2).mean().item()


def train(rank: int, root: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on two cores
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)  # DDP broadcasts rank 0's parameters anyway
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        shards = ShardSet(root)
        every = shards.dataset(timestep_level=True)
        data = every.__getitems__(np.arange(len(every)))  # every stored step, to report the loss over
        initial = mean_squared_error(model, data)
        # the same seed on every rank: the rank (from torch.distributed) gives each its own stream
        sampler = shards.sampler("prioritized", alpha=0.6, beta=0.4, beta_steps=STEPS, seed=0)
        for _ in range(STEPS):
            batch = sampler.batch(BATCH)
            error = model(batch["x"]).squeeze(1) - batch["y"]
            loss = (batch["_weight"] * error.pow(2)).mean()  # importance weights correct the prioritized draws
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of the ranks here
            optimizer.step()
            # all ranks' (key, |error|): every rank applies the same updates, its priorities stay the others'
            sampler.update_priorities(gathered(batch["_key"]), gathered(error.detach().abs() + 1e-3))
        # each rank's priority mass per shard: the same on every rank
        totals = gathered(torch.tensor([s.tree.total for s in sampler.samplers], dtype=torch.float64)).view(WORLD, -1)
        in_sync = bool((totals == totals[0]).all())
        if rank == 0:
            weight_error = (model.module.weight[0].detach() - torch.from_numpy(true_weights())).abs().max().item()
            print(f"episodes: {shards.num_episodes} in {len(shards)} shards, {len(every)} steps | {WORLD} ranks x "
                  f"{sampler.draws} batches of {BATCH} | loss {initial:.3f} -> final loss "
                  f"{mean_squared_error(model, data):.5f} (noise floor {NOISE ** 2:.5f}) | largest weight error "
                  f"{weight_error:.4f} | priorities in sync: {in_sync}", flush=True)
        shards.close()
        # nothing may hold the process group when it is destroyed (DDP's reducer does, through the model):
        # a group destroyed at interpreter exit instead can abort the process
        del model, optimizer, sampler
        gc.collect()
        # rank 0 hosts the rendezvous store: no rank may leave while another still talks to it
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(root: Path) -> None:
    if not (dist.is_available() and dist.is_gloo_available()):
        sys.exit("this example needs torch.distributed with the gloo backend")
    write_shards(root)
    mp.spawn(train, args=(str(root), free_port()), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "ddp_shards")
