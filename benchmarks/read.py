"""Read benchmark (figures T, S, N, trajectory and R of shared/bench/WORKLOAD.md) on the canonical workload.

"dreamer-small": 200 episodes x 500 steps; step fields image uint8 (3,64,64), action float32 (6,), reward
float32 (), done bool (); meta field task_id int. Written once with ``store_episode`` from seeded data, then
read. Every view reads the step fields it names and no meta field (``meta_fields=()``):

- T    ``dataloader(256, timestep_level=True, fields=('image', 'action', 'reward'))``: 256 random steps;
- S    ``dataloader(50, window=50, fields=(...same...))``: 50 windows of 50 steps inside one episode;
- N    ``dataloader(256, n_steps=5, gamma=0.99, current_fields=('image',), next_fields=('image',),
       sequence_fields=('action', 'reward'))``: image at t and t+5, action and reward chunks t..t+4, the
       discounted return and bootstrap discount;
- traj ``dataloader(8, fields=(...same...))``: 8 whole episodes (500 steps each, so no padding here);

all with ``shuffle=True`` (a fixed ``seed``). Each is measured these ways, on the very same index batches
(the first epoch of a DataLoader made with that seed):

- numpy limit: ``{field: ram[field][rows]}``, a fancy-index gather of exactly the bytes the view returns,
  from the store's arrays loaded into RAM with ``np.array`` (``rows``: the rows the view reads, worked out
  untimed beforehand and checked against the view's own output: "same bytes: checked");
- numpy via DataLoader w=0 / w=2: that same gather as the ``__getitems__`` of a plain torch DataLoader
  (batch sampler ``[[0], [1], ...]``): what torch's DataLoader costs by itself, and with workers what
  carrying the batches from the workers to this process costs;
- ours ``__getitems__`` direct: ``dataset.__getitems__(items)``, no DataLoader;
- ours DataLoader w=0 / w=1 / w=2: ``buffer.dataloader(..., num_workers=0, 1 or 2)`` (pin_memory off;
  workers are gather threads by default, ``workers="auto"``); "processes=2": ``workers="processes"``,
  torch's worker processes, whose batches come back in shared-memory slots (``views.transport``);
  "processes=2 torch transport": the same with ``worker_transport="torch"`` (a fresh shared-memory segment
  per tensor, torch's own way). A few untimed batches first (worker start-up and prefetch excluded), each
  repeat from a fresh DataLoader; the worker rows also give their ratio to w=0 (goal: w=2 >= 0.9 of w=0).
- T+x: T with ``transform=Compose(RandomShift("image", pad=4), ToFloat("image"))`` with w=0, w=2 (threads)
  and processes=2, as ratios to w=0 (goal: >= 1.5).

Every loop keeps the previous batch alive while it makes the next one, as ``for batch in loader:`` does.
Ratios are to the numpy limit (goals at num_workers 0: T >= 0.9, S and N >= 0.8). Figures are medians of
``--repeats`` timed runs of ``--batches`` batches each, the runs of the different ways interleaved (one of
each in turn), so that a change of load on the machine touches them alike. The store's pages are in the page
cache and the main process has touched its memory map once before the timed runs (a training process's
steady state); workers map the files afresh, so their first touches (minor page faults) are in their
figures, as they are in the "fresh map" line (T on a store just reopened). Before each in-process block,
``--warm-mb`` of RAM are touched and freed (see benchmarks/write.py's ``Runner``: on this VM freed memory is
handed back to the host and the next first touch costs a host fault), and glibc malloc's thresholds are
pinned (see ``pin_malloc``; ``--malloc-default`` leaves them adaptive).

R: ``ReplayBuffer.from_folder(read_only=True)`` + ``dataloader(...)`` + its first batch, in ms (page cache
warm), for the canonical store, and for two stores of small fields (action float32 (6,) + reward): 200
episodes (100 thousand steps) and 20,000 episodes (10 million steps, about 300 MB), to show that neither
opening nor sampling scans the store; with, outside the total, the batch sampler alone making its first
index batch.

Peers, if importable (both optional): the seed package ``memmap_replay_buffer`` (its timestep-level
DataLoader, batch 256, shuffle, the same three fields and no meta, on the same data written through its
``store_episode``; fewer episodes if its writing is slow, said so) and TorchRL (``LazyMemmapStorage`` +
``RandomSampler``, ``rb.sample()`` of 256, its own API without a DataLoader, on the same three fields).

    python benchmarks/read.py            # the canonical workload, about 2.5-3 minutes on 2 cores
    python benchmarks/read.py --quick    # a smoke run (20 episodes, 1 repeat, a few batches)
    python benchmarks/read.py --outputs  # only what output="tensordict" / "torchrl" cost (below), about 20 s

``--outputs``: batches/s of ``output="dict"``, ``"tensordict"`` and ``"torchrl"`` through ``buffer.dataloader``
(batch 256, w=0) on a store of small fields (100 episodes x 500 steps; obs float32 (17,), action (6,), reward;
every episode with a final observation), for transitions (``gamma``) and windows of 16 steps (for
``"torchrl"`` with ``next_fields=["obs"]`` and the episode flags, which it adds), as ratios to ``"dict"``:
medians of ``--repeats`` runs of ``--batches`` batches, the three interleaved, each run a fresh loader.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import workload  # benchmarks/workload.py: the canonical episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from memmap_replay import ReplayBuffer  # noqa: E402

T_STEPS = 500
FIELDS, META_FIELDS = workload.FIELDS, workload.META_FIELDS
SMALL_FIELDS = dict(action=("float", 6), reward="float")
READ = ("image", "action", "reward")
N_STEPS, GAMMA, WINDOW = 5, 0.99, 50
SEED = 1234
LIMIT = "numpy limit (in RAM)"
MB, GB = 1e6, 1e9

# name -> (batch size, keyword arguments of buffer.dataset / buffer.dataloader, goal ratio at num_workers 0)
VIEWS = {
    "T": (256, dict(timestep_level=True, fields=READ, meta_fields=()), 0.9),
    "S": (50, dict(window=WINDOW, fields=READ, meta_fields=()), 0.8),
    "N": (256, dict(n_steps=N_STEPS, gamma=GAMMA, current_fields=("image",), next_fields=("image",),
                    sequence_fields=("action", "reward"), meta_fields=()), 0.8),
    "traj": (8, dict(fields=READ, meta_fields=()), None),
}
DESCRIPTION = {
    "T": "T   256 random steps (image, action, reward)",
    "S": f"S   50 windows x {WINDOW} steps",
    "N": f"N   256 x n={N_STEPS}, gamma={GAMMA}",
    "traj": "traj 8 whole episodes",
}


# ---- data and stores -------------------------------------------------------------------------------------


Data = workload.Data  # the canonical episodes, shared with benchmarks/write.py


def write_ours(folder: Path, data: Data) -> float:
    buffer = ReplayBuffer(folder, data.episodes, data.steps, fields=FIELDS, meta_fields=META_FIELDS, overwrite=True)
    start = time.perf_counter()
    for e in range(data.episodes):
        buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e], done=data.done[e],
                             task_id=int(data.task_id[e]))
    elapsed = time.perf_counter() - start
    buffer.close()
    return elapsed


def write_small(folder: Path, episodes: int, seed: int) -> float:
    """A store of small fields only (action float32 (6,), reward float32), written with store_episode."""
    rng = np.random.default_rng(seed)
    chunk = 1000  # episodes generated at a time (keeps the RAM use small)
    buffer = ReplayBuffer(folder, episodes, T_STEPS, fields=SMALL_FIELDS, overwrite=True)
    elapsed = 0.0
    for begin in range(0, episodes, chunk):
        n = min(chunk, episodes - begin)
        action = rng.standard_normal((n, T_STEPS, 6), dtype=np.float32)
        reward = rng.standard_normal((n, T_STEPS), dtype=np.float32)
        start = time.perf_counter()
        for e in range(n):
            buffer.store_episode(action=action[e], reward=reward[e])
        elapsed += time.perf_counter() - start
    buffer.close()
    return elapsed


def touch_pages(array: np.ndarray) -> None:
    """Read one byte per 4 KiB page of a memory map, so this process has mapped all of it."""
    flat = np.asarray(array).reshape(-1).view(np.uint8)
    int(flat[::4096].sum())


def pin_malloc() -> str:
    """Fix glibc malloc's thresholds, so every run (and every view, whatever ran before it) sees the same
    allocator: blocks under 32 MiB (glibc's largest mmap threshold) come from the heap, and the heap is not
    trimmed below 1 GiB. By default glibc adapts its mmap threshold to the largest block freed so far and
    trims the heap top past twice that: in a fresh process a batch of two 3 MB images (N) is given back to
    the kernel after every batch and the next batch's output pages are first-touched again (about 1,500
    page faults a batch, several times the gather's own time on this VM), while after one 31 MB batch (S)
    it no longer is. Pinned, batches reuse touched heap memory, as a long-running training loop's do.
    Blocks of 32 MiB or more (a trajectory batch's 49 MB of images) are still mapped afresh each time, by
    the numpy limit and by us alike."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        if libc.mallopt(m_trim_threshold, 1 << 30) == 1 and libc.mallopt(m_mmap_threshold, 32 << 20) == 1:
            return "glibc malloc pinned (mallopt: mmap threshold 32 MiB, trim threshold 1 GiB)"
    except (OSError, AttributeError):
        pass
    return "malloc left as it is (not glibc)"


def warm_ram(nbytes: int) -> None:
    if nbytes:
        np.ones(nbytes, dtype=np.uint8)  # touched, then freed at once (see the module docstring)
    gc.collect()


def median_of(repeats: int, run) -> tuple[float, list[float]]:
    times = [run() for _ in range(repeats)]
    return statistics.median(times), times


# ---- the rows a view reads ---------------------------------------------------------------------------------


def rows_read(kind: str, dataset, items: np.ndarray) -> list[tuple[str, str, np.ndarray, np.ndarray | None]]:
    """(output name, field, rows, mask or None) for every array the view gathers for ``items``; the mask
    marks the entries the view keeps (it zeroes the others). Untimed: index arithmetic, no data."""
    episode, t = dataset.positions.locate(np.asarray(items, dtype=np.int64))
    table = dataset.table
    first, length = table.start[episode], table.length[episode]
    if kind == "T":
        return [(name, name, first + t, None) for name in READ]
    if kind in ("S", "traj"):
        span = WINDOW if kind == "S" else int(length.max())
        if kind == "traj":
            t = np.zeros_like(t)
        steps = t[:, None] + np.arange(span)[None, :]
        inside = steps < length[:, None]
        rows = first[:, None] + np.minimum(steps, length[:, None] - 1)
        return [(name, name, rows, None if inside.all() else inside) for name in READ]
    if kind == "N":
        reach = table.reach[episode]
        actual = np.minimum(N_STEPS, reach - t)
        next_t = t + actual
        next_stored = (next_t < length) | table.final[episode]
        steps = np.arange(N_STEPS)
        in_chunk = steps[None, :] < actual[:, None]
        chunk = first[:, None] + np.minimum(t[:, None] + steps[None, :], length[:, None] - 1)
        nxt = first + np.where(next_stored, next_t, next_t - 1)
        return [("image", "image", first + t, None), ("next_image", "image", nxt, next_stored),
                ("seq_action", "action", chunk, in_chunk), ("seq_reward", "reward", chunk, in_chunk)]
    raise ValueError(kind)


def check_same_bytes(kind: str, dataset, items: np.ndarray, ram: dict[str, np.ndarray]) -> str:
    """The view's own output for ``items`` equals the numpy gather of the planned rows (where it keeps them)."""
    batch = dataset.__getitems__(items)
    for out, field, rows, mask in rows_read(kind, dataset, items):
        expected = ram[field][rows]
        got = batch[out].numpy()
        if mask is not None:
            expected = expected.copy()
            expected[~mask] = 0
        if got.shape != expected.shape or not np.array_equal(got, expected):
            return f"MISMATCH in {out!r}: the numpy limit does not read the same rows as the view"
    return "same bytes: checked"


def gather_limit(plan: list[tuple[str, np.ndarray, np.ndarray]]) -> dict:
    return {out: array[rows] for out, array, rows in plan}


class LimitDataset(Dataset):
    """Batch i is the numpy limit's gather of plan i (as tensors): for a DataLoader with [[i], ...] batches."""

    def __init__(self, plans):
        self.plans = plans

    def __len__(self) -> int:
        return len(self.plans)

    def __getitems__(self, index: list[int]) -> dict:
        return {out: torch.from_numpy(array) for out, array in gather_limit(self.plans[index[0]]).items()}


def as_is(batch):
    return batch


# ---- measurements -------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, buffer: ReplayBuffer, ram: dict[str, np.ndarray]):
        self.args, self.buffer, self.ram = args, buffer, ram
        self.results: dict[tuple[str, str], tuple[float, float, list[float]]] = {}  # (view, how) -> (b/s, MB/s, times)

    def loader(self, kind: str, num_workers: int, **extra):
        batch, options, _ = VIEWS[kind]
        return self.buffer.dataloader(batch, shuffle=True, seed=SEED, num_workers=num_workers, **options, **extra)

    def record(self, kind: str, how: str, seconds: float, times: list[float], batches: int, nbytes: float):
        rate = batches / seconds
        self.results[(kind, how)] = (rate, nbytes * rate / MB, times)
        ratio = ""
        if (kind, LIMIT) in self.results and how != LIMIT:
            ratio = f"  {rate / self.results[(kind, LIMIT)][0]:.3f} x numpy"
        spread = ", ".join(f"{batches / t:,.0f}" for t in times)
        print(f"  {how:<26} {rate:>9,.1f} batches/s {nbytes * rate / MB:>8,.0f} MB/s{ratio}   [{spread}]", flush=True)

    def view(self, kind: str) -> None:
        args = self.args
        batch, options, _ = VIEWS[kind]
        dataset = self.buffer.dataset(**options)
        probe = self.loader(kind, 0)
        total = len(probe.batch_sampler)
        full = len(dataset) // batch  # full batches in an epoch
        warm = min(args.warm_batches, max(full - 1, 0))
        count = max(1, min(args.batches, full - warm))
        # the first epoch's batches of a DataLoader made with this seed: the same for every repeat
        batches = [np.asarray(b) for b in itertools.islice(iter(probe.batch_sampler), warm + count)]
        del probe
        timed = batches[warm:warm + count]
        plans = [[(out, self.ram[field], rows) for out, field, rows, _ in rows_read(kind, dataset, items)]
                 for items in batches]
        nbytes = sum(rows.size * array[0].nbytes for plan in plans[warm:] for _, array, rows in plan) / count
        print(f"{DESCRIPTION[kind]}: {len(dataset):,} items, {total} batches an epoch, {count} timed "
              f"after {warm} untimed; {nbytes / MB:.2f} MB a batch; "
              f"{check_same_bytes(kind, dataset, timed[0], self.ram)}", flush=True)

        # the loops keep the previous batch alive while making the next, as `for batch in loader:` does
        def limit() -> float:
            warm_ram(args.warm_bytes)
            previous = None
            start = time.perf_counter()
            for plan in plans[warm:]:
                previous = gather_limit(plan)
            elapsed = time.perf_counter() - start
            del previous
            return elapsed

        def getitems() -> float:
            warm_ram(args.warm_bytes)
            previous = None
            start = time.perf_counter()
            for items in timed:
                previous = dataset.__getitems__(items)
            elapsed = time.perf_counter() - start
            del previous
            return elapsed

        def timed_iteration(loader, workers: int) -> float:
            iterator = iter(loader)
            for _ in range(warm):
                next(iterator)
            warm_ram(args.warm_bytes if workers == 0 else 0)  # workers already run: do not compete with them
            previous = None
            start = time.perf_counter()
            for _ in range(count):
                previous = next(iterator)
            elapsed = time.perf_counter() - start
            del iterator, previous  # shuts the workers down
            return elapsed

        def limit_loader(workers: int):
            """The numpy limit through a plain torch DataLoader: the DataLoader's own cost (and, with
            workers, the cost of carrying batches from the workers to this process)."""
            return DataLoader(LimitDataset(plans), batch_sampler=[[i] for i in range(len(plans))],
                              collate_fn=as_is, num_workers=workers)

        methods = [(LIMIT, limit), ("numpy via DataLoader w=0", lambda: timed_iteration(limit_loader(0), 0)),
                   ("ours __getitems__ direct", getitems),
                   ("ours DataLoader w=0", lambda: timed_iteration(self.loader(kind, 0), 0))]
        if args.workers:
            methods += [("numpy via DataLoader w=2", lambda: timed_iteration(limit_loader(2), 2)),
                        ("ours DataLoader w=1", lambda: timed_iteration(self.loader(kind, 1), 1)),
                        ("ours DataLoader w=2", lambda: timed_iteration(self.loader(kind, 2), 2)),
                        ("ours processes=2", lambda: timed_iteration(self.loader(kind, 2, workers="processes"), 2)),
                        ("ours processes=2 torch transport",
                         lambda: timed_iteration(self.loader(kind, 2, workers="processes", worker_transport="torch"),
                                                 2))]
        limit()  # one untimed pass of each in-process way: caches, allocator
        getitems()
        # the repeats are interleaved (one of each way in turn), so a change of load on the machine
        # touches every way alike
        times: dict[str, list[float]] = {label: [] for label, _ in methods}
        for _ in range(args.repeats):
            for label, run in methods:
                times[label].append(run())
        for label, _ in methods:
            self.record(kind, label, statistics.median(times[label]), times[label], count, nbytes)

    def fresh_map(self, folder: Path) -> None:
        """T through __getitems__ on a freshly opened store: the first touches of the map are timed."""
        kind = "T"
        args = self.args
        batch, options, _ = VIEWS[kind]
        count = max(1, min(args.batches, len(self.buffer.dataset(**options)) // batch))

        def run() -> float:
            buffer = ReplayBuffer.from_folder(folder, read_only=True)
            dataset = buffer.dataset(**options)
            loader = buffer.dataloader(batch, shuffle=True, seed=SEED + 1, **options)
            items = [np.asarray(b) for b in itertools.islice(iter(loader.batch_sampler), count)]
            warm_ram(args.warm_bytes)
            previous = None
            start = time.perf_counter()
            for chunk in items:
                previous = dataset.__getitems__(chunk)
            elapsed = time.perf_counter() - start
            del previous
            buffer.close()
            return elapsed

        nbytes = batch * sum(self.ram[name][0].nbytes for name in READ)
        seconds, times = median_of(args.repeats, run)
        self.record(kind, "ours __getitems__ fresh map", seconds, times, count, nbytes)


    def transformed(self) -> None:
        """T with a transform (DrQ's random shift of 4 pixels, then image uint8 -> float in [0, 1]), made in
        the main process (w=0) and by workers or threads: the work that workers exist for."""
        from memmap_replay.views import Compose, RandomShift, ToFloat

        args, kind = self.args, "T"
        batch, options, _ = VIEWS[kind]
        count = max(1, min(args.batches, len(self.buffer.dataset(**options)) // batch - 4))
        transform = Compose(RandomShift("image", pad=4, seed=SEED), ToFloat("image"))  # shift the uint8 bytes
        ways = {"transform w=0": dict(num_workers=0)}
        if args.workers:
            ways.update({"transform w=2": dict(num_workers=2),
                         "transform processes=2": dict(num_workers=2, workers="processes")})
        nbytes = batch * (self.ram["image"][0].size * 4 + sum(self.ram[name][0].nbytes for name in READ[1:]))

        def run(extra: dict) -> float:
            iterator = iter(self.loader(kind, transform=transform, **extra))
            for _ in range(4):
                next(iterator)
            previous = None
            start = time.perf_counter()
            for _ in range(count):
                previous = next(iterator)
            elapsed = time.perf_counter() - start
            del iterator, previous
            return elapsed

        print(f"T with a transform (RandomShift('image', pad=4) then ToFloat('image')): {count} timed batches after "
              f"4 untimed; {nbytes / MB:.2f} MB a batch out", flush=True)
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.repeats):
            for name, extra in ways.items():
                times[name].append(run(extra))
        for name in ways:
            seconds = statistics.median(times[name])
            self.results[("T+transform", name)] = (count / seconds, nbytes * count / seconds / MB, times[name])
            versus = times["transform w=0"] and statistics.median(times["transform w=0"]) / seconds
            print(f"  {name:<26} {count / seconds:>9,.1f} batches/s {nbytes * count / seconds / MB:>8,.0f} MB/s  "
                  f"{versus:.2f} x w=0   [{', '.join(f'{count / t:,.0f}' for t in times[name])}]", flush=True)


def reopen_first_batch(folder: Path, options: dict, batch: int, repeats: int) -> tuple[dict[str, float], list[float]]:
    """Median ms of from_folder(read_only=True), building the DataLoader, and its first batch; and, outside
    the total, the DataLoader's batch sampler alone making its first index batch (an untimed second loader)."""
    parts: dict[str, list[float]] = {"open": [], "loader": [], "first batch": [], "total": [], "sampler": []}

    def once() -> None:
        t0 = time.perf_counter()
        buffer = ReplayBuffer.from_folder(folder, read_only=True)
        t1 = time.perf_counter()
        loader = buffer.dataloader(batch, shuffle=True, **options)
        t2 = time.perf_counter()
        first = next(iter(loader))
        t3 = time.perf_counter()
        assert len(next(iter(first.values()))) == batch
        sampler = buffer.dataloader(batch, shuffle=True, **options).batch_sampler
        t4 = time.perf_counter()
        next(iter(sampler))
        t5 = time.perf_counter()
        buffer.close()
        for name, value in (("open", t1 - t0), ("loader", t2 - t1), ("first batch", t3 - t2), ("total", t3 - t0),
                            ("sampler", t5 - t4)):
            parts[name].append(value * 1000)

    once()  # untimed: imports, first use
    for values in parts.values():
        values.clear()
    for _ in range(repeats):
        once()
    return {name: statistics.median(values) for name, values in parts.items()}, parts["total"]


def memcpy_gbs(nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    source = np.ones(nbytes, dtype=np.uint8)
    target = np.empty_like(source)
    np.copyto(target, source)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times) / GB


# ---- peers ---------------------------------------------------------------------------------------------------


def seed_available() -> bool:
    try:
        import memmap_replay_buffer  # noqa: F401
    except Exception:
        return False
    return True


def torchrl_available() -> bool:
    """Without importing it: importing torchrl sets multiprocessing's start method to 'spawn' for the whole
    process, which would change our num_workers=2 figures (and break the seed package's workers). So it is
    imported last, after every DataLoader with workers has run."""
    return all(importlib.util.find_spec(name) is not None for name in ("torchrl", "tensordict"))


def write_seed(folder: Path, data: Data, episodes: int, budget: float) -> tuple[int, float]:
    """Episodes written through the seed package's store_episode; stops early past ``budget`` seconds."""
    from memmap_replay_buffer import ReplayBuffer as SeedBuffer

    buffer = SeedBuffer(str(folder), episodes, data.steps, fields=FIELDS, meta_fields=META_FIELDS, overwrite=True)
    start = time.perf_counter()
    written = 0
    for e in range(episodes):
        buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e], done=data.done[e],
                             task_id=int(data.task_id[e]))
        written += 1
        if time.perf_counter() - start > budget:
            break
    elapsed = time.perf_counter() - start
    buffer.flush()
    del buffer
    gc.collect()
    return written, elapsed


def measure_seed(bench: Bench, folder: Path, batches: int, repeats: int, workers_list) -> None:
    from memmap_replay_buffer import ReplayBuffer as SeedBuffer

    buffer = SeedBuffer.from_folder(str(folder), read_only=True)
    for workers in workers_list:
        def run(buffer=buffer, workers=workers) -> float:
            loader = buffer.dataloader(256, timestep_level=True, shuffle=True, fields=READ, num_workers=workers,
                                       dataset_kwargs=dict(include_metadata=False))
            iterator = iter(loader)
            for _ in range(bench.args.warm_batches):
                next(iterator)
            warm_ram(bench.args.warm_bytes if workers == 0 else 0)
            start = time.perf_counter()
            for _ in range(batches):
                batch = next(iterator)
            elapsed = time.perf_counter() - start
            assert tuple(batch["image"].shape) == (256, 3, 64, 64), batch["image"].shape
            del iterator
            return elapsed

        nbytes = 256 * sum(bench.ram[name][0].nbytes for name in READ)
        seconds, times = median_of(repeats, run)
        bench.record("T", f"seed DataLoader w={workers}", seconds, times, batches, nbytes)
    gc.collect()


def write_torchrl(folder: Path, data: Data):
    from tensordict import TensorDict
    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import RandomSampler

    logging.getLogger("torchrl").setLevel(logging.WARNING)
    storage = LazyMemmapStorage(data.episodes * data.steps, scratch_dir=str(folder), existsok=True)
    rb = TensorDictReplayBuffer(storage=storage, sampler=RandomSampler(), batch_size=256)
    start = time.perf_counter()
    for e in range(data.episodes):
        rb.extend(TensorDict({"image": torch.from_numpy(data.image[e]), "action": torch.from_numpy(data.action[e]),
                              "reward": torch.from_numpy(data.reward[e])}, batch_size=[data.steps]))
    return rb, time.perf_counter() - start


def measure_torchrl(bench: Bench, rb, batches: int, repeats: int) -> None:
    def run() -> float:
        warm_ram(bench.args.warm_bytes)
        start = time.perf_counter()
        for _ in range(batches):
            batch = rb.sample()
        elapsed = time.perf_counter() - start
        assert tuple(batch["image"].shape) == (256, 3, 64, 64)
        return elapsed

    for _ in range(min(batches, 20)):  # untimed: its lazy set-up and this process's first touches of the map
        rb.sample()
    nbytes = 256 * sum(bench.ram[name][0].nbytes for name in READ)
    seconds, times = median_of(repeats, run)
    bench.record("T", "torchrl rb.sample()", seconds, times, batches, nbytes)


# ---- --outputs: what the TensorDict outputs cost over the dict ---------------------------------------------------

OUTPUT_CASES = {"transitions": dict(transitions=True, gamma=GAMMA), "window 16": dict(window=16)}


def outputs(args, parent: Path) -> int:
    """``--outputs`` (see the module docstring): batches/s of each ``output`` and its ratio to ``"dict"``."""
    kinds = ["dict"] + (["tensordict", "torchrl"] if importlib.util.find_spec("tensordict") else [])
    episodes = args.episodes or (4 if args.quick else 100)
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix=".bench-outputs-", dir=parent))
    try:
        buffer = ReplayBuffer(root / "small", episodes, T_STEPS, fields=dict(obs=("float", 17), action=("float", 6),
                                                                             reward="float"))
        rng = np.random.default_rng(SEED)
        for number in range(episodes):
            buffer.store_episode(obs=rng.random((T_STEPS, 17)), action=rng.random((T_STEPS, 6)),
                                 reward=rng.random(T_STEPS), end="terminated" if number % 2 else "truncated",
                                 final=dict(obs=rng.random(17)))
        print(f"output= figures: {episodes} episodes x {T_STEPS} steps (obs (17,), action (6,), reward), batch 256, "
              f"w=0; medians of {args.repeats} run(s) of {args.batches} batches, interleaved; torch "
              f"{torch.__version__}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
        if len(kinds) == 1:
            print("  tensordict not importable: only output='dict' (pip install 'memmap-replay[torchrl]')")
        for case, options in OUTPUT_CASES.items():
            rates: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.repeats):
                for kind in kinds:
                    loader = buffer.dataloader(256, shuffle=True, seed=SEED, output=kind, **options)
                    warm = min(args.warm_batches, len(loader) - 1)
                    count = min(args.batches, len(loader) - warm)  # (within one epoch)
                    batches = iter(loader)
                    for _ in range(warm):
                        next(batches)
                    began = time.perf_counter()
                    for _ in range(count):
                        next(batches)
                    rates[kind].append(count / (time.perf_counter() - began))
            median = {kind: statistics.median(values) for kind, values in rates.items()}
            print(f"  {case:<12} " + "   ".join(f"{kind} {rate:,.0f}/s ({rate / median['dict']:.2f} x dict)"
                                               for kind, rate in median.items()), flush=True)
        buffer.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


# ---- main ------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20 episodes, a 1,000-episode small store, 1 repeat, 5 batches")
    parser.add_argument("--episodes", type=int, default=None, help="episodes of 500 steps (default 200)")
    parser.add_argument("--big-episodes", type=int, default=None,
                        help="episodes of the small-field store for R at scale (default 20,000 = 10 million steps)")
    parser.add_argument("--batches", type=int, default=None,
                        help="timed batches per repeat (default 100; fewer where an epoch has fewer)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per figure; medians "
                                                                  "are printed (default 5)")
    parser.add_argument("--warm-batches", type=int, default=None,
                        help="untimed batches before the timed ones of a DataLoader (default 4)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a scratch folder is made inside it and removed at the end unless "
                             "--keep; default: the current directory, so the same disk as the project)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and its stores")
    parser.add_argument("--no-workers", dest="workers", action="store_false", help="skip num_workers=2")
    parser.add_argument("--no-seed", dest="seed", action="store_false", help="skip the seed package")
    parser.add_argument("--no-torchrl", dest="torchrl", action="store_false", help="skip TorchRL")
    parser.add_argument("--seed-write-budget", type=float, default=60.0,
                        help="seconds of writing through the seed package before it stops with fewer "
                             "episodes (default 60)")
    parser.add_argument("--malloc-default", dest="pin_malloc", action="store_false",
                        help="leave glibc malloc's adaptive thresholds as they are (see pin_malloc)")
    parser.add_argument("--outputs", action="store_true",
                        help="only the output='dict' / 'tensordict' / 'torchrl' figures (see the docstring)")
    parser.add_argument("--warm-mb", type=int, default=256,
                        help="MB of RAM touched and freed before each measured block (0: none; see the docstring)")
    args = parser.parse_args(argv)

    episodes = args.episodes or (20 if args.quick else 200)
    big_episodes = args.big_episodes or (1000 if args.quick else 20_000)
    args.batches = args.batches or (5 if args.quick else 100)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.warm_batches = args.warm_batches if args.warm_batches is not None else (1 if args.quick else 4)
    args.warm_bytes = args.warm_mb * 2**20
    if min(episodes, big_episodes, args.batches, args.repeats) < 1 or args.warm_batches < 0 or args.warm_mb < 0:
        parser.error("--episodes, --big-episodes, --batches and --repeats must be positive, --warm-batches and "
                     "--warm-mb not negative")
    parent = args.folder if args.folder is not None else Path.cwd()
    if args.outputs:
        parent.mkdir(parents=True, exist_ok=True)
        return outputs(args, parent)
    if episodes < 9:
        parser.error("--episodes must be at least 9 (a trajectory batch is 8 episodes)")
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-read-", dir=parent))
    # our gathers are numpy's and do not use torch's threads; TorchRL's do, and on this 2-core machine its
    # rb.sample() is fastest with one (about 300 batches/s against about 190 with the default 2)
    torch.set_num_threads(1)
    allocator = pin_malloc() if args.pin_malloc else "glibc malloc left adaptive (--malloc-default)"

    started = time.perf_counter()
    print(f"memmap_replay read benchmark: {episodes} episodes x {T_STEPS} steps; median of {args.repeats} timed "
          f"repeat(s) of up to {args.batches} batches")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, kernel {platform.release()}")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'}); RAM warm-up {args.warm_mb} MB "
          f"before each block; {allocator}")
    memcpy = memcpy_gbs()
    print(f"memcpy (256 MiB, touched memory): {memcpy:.2f} GB/s", flush=True)
    want_seed = args.seed and seed_available()
    want_torchrl = args.torchrl and torchrl_available()
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    try:
        print("generating data (seeded) ...", flush=True)
        data = Data(episodes, T_STEPS)
        folder = root / "dreamer-small"
        seconds = write_ours(folder, data)
        print(f"  wrote {episodes * T_STEPS:,} steps ({data.nbytes / GB:.3f} GB) with store_episode in {seconds:.1f} s",
              flush=True)
        seed_folder, seed_episodes = root / "seed", 0
        if want_seed:
            seed_episodes, seconds = write_seed(seed_folder, data, episodes, args.seed_write_budget)
            print(f"  seed package: wrote {seed_episodes} episode(s) with its store_episode in {seconds:.1f} s"
                  + ("" if seed_episodes == episodes else f" (stopped at the {args.seed_write_budget:.0f} s budget)"),
                  flush=True)
        elif args.seed:
            print("  seed package memmap_replay_buffer not importable: skipped (pip install memmap-replay-buffer)")
        if args.torchrl and not want_torchrl:
            print("  torchrl not importable: skipped (pip install torchrl)")
        if not want_torchrl:
            del data  # else kept for TorchRL, written last (see torchrl_available)
            gc.collect()
        small_folder, big_folder = root / "small-100k", root / "small-big"
        seconds = write_small(small_folder, 200, seed=1)
        print(f"  small-field store: 200 episodes ({200 * T_STEPS:,} steps) in {seconds:.1f} s", flush=True)
        seconds = write_small(big_folder, big_episodes, seed=2)
        big_steps = big_episodes * T_STEPS
        print(f"  small-field store: {big_episodes:,} episodes ({big_steps:,} steps, "
              f"{big_steps * 28 / MB:,.0f} MB) in {seconds:.1f} s", flush=True)
        os.sync()  # write back the dirty pages now, not during the timed reads

        buffer = ReplayBuffer.from_folder(folder, read_only=True)
        store = buffer.episode_store
        ram = {name: np.array(store.step_array(name)) for name in READ}  # the numpy limit's in-RAM copy
        for name in FIELDS:
            touch_pages(store.step_array(name))
        bench = Bench(args, buffer, ram)
        for kind in VIEWS:
            bench.view(kind)
        bench.fresh_map(folder)
        bench.transformed()

        if want_seed:
            print(f"seed package (memmap_replay_buffer), T through its DataLoader, {seed_episodes} episode(s) ...",
                  flush=True)
            measure_seed(bench, seed_folder, max(1, min(args.batches, 50)), max(1, min(args.repeats, 3)),
                         (0, 2) if args.workers else (0,))
        print("R: reopen (read-only) + dataloader + first batch, ms (page cache warm) ...", flush=True)
        reopen = {}
        cases = [("canonical T", folder, VIEWS["T"][1], 256), ("canonical N", folder, VIEWS["N"][1], 256),
                 ("small 100k steps T", small_folder, dict(timestep_level=True, meta_fields=()), 256),
                 (f"small {big_steps / 1e6:g}M steps T", big_folder, dict(timestep_level=True, meta_fields=()), 256),
                 (f"small {big_steps / 1e6:g}M steps N", big_folder,
                  dict(n_steps=N_STEPS, gamma=GAMMA, current_fields=("action",), next_fields=("action",),
                       sequence_fields=("reward",), meta_fields=()), 256)]
        for label, path, options, batch in cases:
            parts, totals = reopen_first_batch(path, options, batch, max(args.repeats, 3))
            reopen[label] = parts
            print(f"  {label:<24} total {parts['total']:7.2f} ms  (open {parts['open']:.2f}, dataloader "
                  f"{parts['loader']:.2f}, first batch {parts['first batch']:.2f}, of which the sampler's first "
                  f"index batch about {parts['sampler']:.2f})   "
                  f"[{', '.join(f'{t:.1f}' for t in totals)}]", flush=True)
        buffer.close()

        if want_torchrl:
            print("torchrl (imported only now: it sets multiprocessing's start method to 'spawn') ...", flush=True)
            rb, seconds = write_torchrl(root / "torchrl", data)
            del data
            gc.collect()
            os.sync()
            print(f"  wrote {episodes * T_STEPS:,} steps (image, action, reward) into LazyMemmapStorage in "
                  f"{seconds:.1f} s; T: LazyMemmapStorage + RandomSampler, rb.sample(), no DataLoader", flush=True)
            measure_torchrl(bench, rb, args.batches, args.repeats)
            del rb
            gc.collect()
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    # ---- the final table ----
    results = bench.results
    header = ("view", "how", "batches/s", "MB/s", "x numpy", "goal (num_workers 0)")
    for kind in VIEWS:
        limit = results[(kind, LIMIT)][0]
        goal = VIEWS[kind][2]
        for (view, how), (rate, mbs, _) in results.items():
            if view != kind:
                continue
            ratio = rate / limit
            verdict = ""
            if how == "ours DataLoader w=0" and goal is not None:
                verdict = f">= {goal} {'met' if ratio >= goal else 'NOT met'}"
            elif how.startswith(("ours DataLoader w=", "ours processes=")) and (kind, "ours DataLoader w=0") in results:
                versus = rate / results[(kind, "ours DataLoader w=0")][0]
                two = how in ("ours DataLoader w=2", "ours processes=2")
                verdict = f"{versus:.2f} x w=0" + (f"; >= 0.9 {'met' if versus >= 0.9 else 'NOT met'}" if two else "")
            rows.append((kind, how, f"{rate:,.1f}", f"{mbs:,.0f}", f"{ratio:.3f}", verdict))
    main = results.get(("T+transform", "transform w=0"))
    for (view, how), (rate, mbs, _) in results.items():
        if view == "T+transform" and main is not None:
            versus = rate / main[0]
            goal = ("" if how == "transform w=0"
                    else f"{versus:.2f} x w=0; >= 1.5 {'met' if versus >= 1.5 else 'NOT met'}")
            rows.append(("T+x", how, f"{rate:,.1f}", f"{mbs:,.0f}", "", goal))
    for label, parts in reopen.items():
        total = parts["total"]
        rows.append(("R", label, "", "", "", f"{total:.1f} ms; < 50 ms {'met' if total < 50 else 'NOT met'}"))
    if want_seed and seed_episodes != episodes:
        notes.append(f"the seed package's T is on {seed_episodes} episodes (its writing hit the time budget)")
    print()
    print(f"Read figures: {episodes} episodes x {T_STEPS} steps; medians of {args.repeats} repeat(s); memcpy "
          f"{memcpy:.2f} GB/s; ratios are to the numpy in-RAM gather of the same rows in this run")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in (0, 1, 5) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + rows]
    print(lines[0])
    print("-" * max(len(line) for line in lines))
    previous = None
    for row, line in zip(rows, lines[1:]):
        if previous is not None and row[0] != previous:
            print()
        previous = row[0]
        print(line)
    print("x numpy: batches/s over the numpy limit's in this run (same rows, same bytes). 'numpy via DataLoader':")
    print("the limit's own gather carried by a plain torch DataLoader (its cost alone; with workers, the cost of")
    print("moving each batch through shared memory). 'fresh map': T on a store just reopened (first touches timed).")
    for note in notes:
        print(f"note: {note}")
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cpus: other processes running during the runs widen the spread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
