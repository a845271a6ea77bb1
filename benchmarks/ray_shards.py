"""Ray shards benchmark: a learner's prioritized batches across shard actors, against local sampling.

Two shard actors (``memmap_replay.distributed.create_shard``, ring stores of the canonical fields: image
uint8 (3,64,64), action float32 (6,), reward float32, done bool; meta task_id) are filled with ``--episodes``
seeded episodes of 500 steps each, sent through Ray's object store (``add_episode``). Every sampler reads
``fields=('image', 'action', 'reward')``, single timesteps, alpha 0.6, beta 0.4, and each iteration is
``batch = sampler.batch(256)`` then ``sampler.update_priorities(batch['_key'], priorities)`` (precomputed
seeded float32 priorities); the priority updates still in flight at the end are waited for inside the
timed run.

- local       ``ReplayBuffer.from_folder(shard 0, read_only=True).sampler('prioritized', persist=False)``
              in this process: the reference every other figure is divided by;
- 1 shard     ``RayShardedSampler([shard 0], draw_ahead=2)``: the actor draws keys, this process (same node)
              gathers the rows from the shard's folder; priority updates are calls of their own;
- 2 shards    ``RayShardedSampler([shard 0, shard 1])``, the same way;
- piggyback   ``piggyback=True``: the updates ride on the next draw request (one Ray call less per shard
              and batch);
- actors gather  ``local=False``: each actor gathers its share and sends it back (what a learner on
              another node gets; here through the node's shared-memory object store);
- 2 writers   the same while two writer actors commit whole episodes (the same seeded episode, put in
              the object store once) into the shards' rings: both into shard 0 (1 shard) or one each, as
              fast as they can, or ``--writer-rate`` episodes a second each (default 10: 5,000 steps/s).
              The rings evict all the time; draws whose episode was evicted before the learner read them
              are drawn again by their shard (counted).

Each figure is the median of ``--repeats`` timed runs of ``--batches`` iterations (after ``--warm-batches``
untimed ones with a fresh sampler), the runs of the different cases interleaved; ratios are to the local
sampler's median in this run. Ray runs on this machine (``ray.init(num_cpus=os.cpu_count())``): actors,
writers and the learner share its cores.

    python benchmarks/ray_shards.py            # 100 episodes per shard, about two minutes on 2 cores
    python benchmarks/ray_shards.py --quick    # a smoke run (4 episodes of 100 steps per shard, a few batches)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import workload  # benchmarks/workload.py: the canonical episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import ray  # noqa: E402
import torch  # noqa: E402

from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.distributed import RayShardedSampler, call_shard, create_shard  # noqa: E402

READ = ("image", "action", "reward")
VIEW = dict(timestep_level=True, fields=READ, meta_fields=())
BATCH, ALPHA, BETA, SEED = 256, 0.6, 0.4, 1234
LOCAL = "local: PrioritizedSampler.batch, one store"


def episode(data: workload.Data, e: int) -> dict:
    return dict(image=data.image[e], action=data.action[e], reward=data.reward[e], done=data.done[e])


@ray.remote(num_cpus=0, max_concurrency=2)  # one thread writes, the other hears stop()
class Writer:
    """Commits one episode over and over into the shards it is given (round robin) until stopped: ``rate``
    episodes a second (0: as fast as it can)."""

    def __init__(self, steps: int, seed: int):
        data = workload.Data(1, steps, seed=seed)
        self.episode = ray.put(episode(data, 0))  # sent by reference, stored in place by the shards
        self.stopped, self.written = threading.Event(), 0

    def run(self, shards: list, rate: float) -> int:
        self.stopped.clear()
        start, written = time.monotonic(), 0
        while not self.stopped.is_set():
            call_shard(shards[written % len(shards)], "add_episode", self.episode, end="truncated")
            written += 1
            self.written += 1
            if rate:
                self.stopped.wait(max(0.0, start + written / rate - time.monotonic()))
        return written

    def count(self) -> int:
        return self.written

    def stop(self) -> None:
        self.stopped.set()


class Case:
    def __init__(self, name: str, open_sampler, writers: list[list[int]] | None = None, rate: float = 0.0):
        self.name, self.open, self.writers, self.rate = name, open_sampler, writers or [], rate


class Bench:
    def __init__(self, args, shards, folders):
        self.args, self.shards, self.folders = args, shards, folders
        rng = np.random.default_rng([SEED, 7])
        iterations = args.warm_batches + args.batches
        self.priorities = [torch.from_numpy(p) for p in rng.random((iterations, BATCH), dtype=np.float32) + 1e-3]
        self.writers = [Writer.remote(args.steps, seed=SEED + n) for n in range(2)]
        ray.get([writer.count.remote() for writer in self.writers])  # up (and idle) before anything is timed

    def cases(self) -> list[Case]:
        shards = self.shards
        def ray_sampler(chosen, **options):
            return lambda: RayShardedSampler([shards[k] for k in chosen], seed=SEED,
                                                                                  beta=BETA, draw_ahead=2, **options)
        paced = self.args.writer_rate
        return [
            Case(LOCAL, self.local_sampler),
            Case("1 shard, 0 writers", ray_sampler([0])),
            Case("1 shard, 0 writers, piggyback", ray_sampler([0], piggyback=True)),
            Case("2 shards, 0 writers", ray_sampler([0, 1])),
            Case("2 shards, 0 writers, piggyback", ray_sampler([0, 1], piggyback=True)),
            Case("2 shards, 0 writers, actors gather", ray_sampler([0, 1], local=False)),
            Case("1 shard, 2 writers (full speed)", ray_sampler([0]), writers=[[0], [0]]),
            Case("2 shards, 2 writers (full speed)", ray_sampler([0, 1]), writers=[[0], [1]]),
            Case(f"2 shards, 2 writers ({paced:g} episodes/s each)", ray_sampler([0, 1]), writers=[[0], [1]],
                 rate=paced),
        ]

    def local_sampler(self):
        self.local_buffer = ReplayBuffer.from_folder(self.folders[0], read_only=True)
        return self.local_buffer.sampler("prioritized", alpha=ALPHA, beta=BETA, persist=False, seed=SEED, **VIEW)

    def run(self, case: Case) -> tuple[float, float, int, int]:
        """Seconds of ``--batches`` iterations; the writers' seconds, their episodes and the draws made again."""
        args = self.args
        sampler = case.open()
        size, priorities = BATCH, self.priorities
        for i in range(args.warm_batches):
            sampler.update_priorities(sampler.batch(size)["_key"], priorities[i])
        writers = self.writers[:len(case.writers)]
        before = sum(ray.get([writer.count.remote() for writer in writers]))
        runs = [writer.run.remote([self.shards[k] for k in chosen], case.rate)
                for writer, chosen in zip(writers, case.writers)]
        deadline = time.monotonic() + 60
        while writers and sum(ray.get([writer.count.remote() for writer in writers])) < before + len(writers):
            if time.monotonic() > deadline:  # (the writers are writing)
                raise RuntimeError("the writer actors did not commit an episode within 60 s")
            time.sleep(0.01)
        before = sum(ray.get([writer.count.remote() for writer in writers]))
        start = time.perf_counter()
        for i in range(args.warm_batches, args.warm_batches + args.batches):
            batch = sampler.batch(size)
            sampler.update_priorities(batch["_key"], priorities[i])
        if hasattr(sampler, "wait"):
            sampler.wait()  # every update has landed
        elapsed = time.perf_counter() - start
        written = sum(ray.get([writer.count.remote() for writer in writers])) - before
        writing = time.perf_counter() - start
        for writer in writers:
            writer.stop.remote()
        ray.get(runs)
        redrawn = getattr(sampler, "redrawn", 0)
        sampler.close()
        if case.name == LOCAL:
            self.local_buffer.close()
        return elapsed, writing, written, redrawn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 episodes of 100 steps per shard, "
                                                             "1 repeat of 10 iterations")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per shard (default 100)")
    parser.add_argument("--steps", type=int, default=None, help="steps per episode (default 500)")
    parser.add_argument("--batches", type=int, default=None, help="timed iterations per run (default 300)")
    parser.add_argument("--warm-batches", type=int, default=None, help="untimed iterations first (default 5)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed runs per case; medians are printed (default 3)")
    parser.add_argument("--writer-rate", type=float, default=10.0,
                        help="episodes a second of each writer in the paced writers' case (default 10)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a scratch folder is made inside it and removed at the end unless "
                             "--keep; default: the current directory)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and its shards")
    args = parser.parse_args(argv)
    episodes = args.episodes or (4 if args.quick else 100)
    args.steps = args.steps or (100 if args.quick else 500)
    args.batches = args.batches or (10 if args.quick else 300)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.warm_batches = args.warm_batches if args.warm_batches is not None else (2 if args.quick else 5)
    if min(episodes, args.steps, args.batches, args.repeats) < 1 or args.warm_batches < 0 or not args.writer_rate > 0:
        parser.error("--episodes, --steps, --batches, --repeats and --writer-rate must be positive, --warm-batches "
                     "not negative")
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-ray-shards-", dir=parent))
    torch.set_num_threads(1)

    started = time.perf_counter()
    print(f"memmap_replay Ray shards benchmark: 2 shards of {episodes} episodes x {args.steps} steps; median of "
          f"{args.repeats} timed run(s) of {args.batches} iterations of batch({BATCH}) + update_priorities")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, ray "
          f"{ray.__version__}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'})", flush=True)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        folders = [root / f"shard-{k}" for k in range(2)]
        shards = [create_shard(folder, episodes, args.steps, workload.FIELDS, workload.META_FIELDS, circular=True,
                               view=VIEW, alpha=ALPHA) for folder in folders]
        start = time.perf_counter()
        for k, shard in enumerate(shards):
            data = workload.Data(episodes, args.steps, seed=k)
            for e in range(episodes):
                call_shard(shard, "add_episode", episode(data, e), meta=dict(task_id=int(data.task_id[e])))
            del data
        print(f"  wrote {2 * episodes} episodes through the shard actors in {time.perf_counter() - start:.1f} s",
              flush=True)
        bench = Bench(args, shards, folders)
        cases = bench.cases()
        times = {case.name: [] for case in cases}
        written = {case.name: [0, 0.0] for case in cases}  # episodes, seconds of writing
        redrawn = {case.name: 0 for case in cases}
        for repeat in range(args.repeats):
            for case in cases:
                elapsed, writing, count, again = bench.run(case)
                times[case.name].append(elapsed)
                written[case.name][0] += count
                written[case.name][1] += writing
                redrawn[case.name] += again
                print(f"  run {repeat + 1}: {case.name:<42} {args.batches / elapsed:>9,.1f} batches/s", flush=True)
    finally:
        ray.shutdown()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    local = args.batches / statistics.median(times[LOCAL])
    print()
    print(f"Ray shard figures: batch({BATCH}) + update_priorities; medians of {args.repeats} run(s) of {args.batches} "
          f"iterations; x local: over the local sampler's batches/s in this run")
    header = f"{'case':<42} {'batches/s':>10} {'x local':>8}  writers' episodes/s, draws made again"
    print(header)
    print("-" * len(header))
    for case in cases:
        rate = args.batches / statistics.median(times[case.name])
        extra = ""
        if case.writers:
            episodes_written, seconds = written[case.name]
            extra = f"  {episodes_written / seconds:,.0f} episodes/s, {redrawn[case.name]} redrawn"
        print(f"{case.name:<42} {rate:>10,.1f} {rate / local:>8.3f}{extra}")
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cpus)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
