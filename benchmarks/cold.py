"""Cold-read benchmark (figures C-T, C-S, C-N, C-traj and E of shared/bench/WORKLOAD.md): a store whose pages
are not in the page cache, and a store bigger than the memory its reader may use.

The store: ``--episodes`` (default 320, or more to be 4x ``--budget-mb``) x 500 steps of the canonical fields
(about 2 GB), written with ``store_episode`` from benchmarks/workload.py's episodes, 16 at a time.

(a) Cold batches of read.py's views T, S, N and traj (``shuffle=True``, a fixed seed). Before every timed run
the store's pages are evicted: this process holds no map of its files (checked in /proc/self/maps: fadvise
does not drop a page still mapped in some process's page tables), then ``posix_fadvise(POSIX_FADV_DONTNEED)``
on every file. A run times ``--batches`` batches, the first included (reopening is not timed), these ways:

- ours w=2 (processes) / ours threads=2: the default readahead with ``num_workers=2`` (fork; the workers'
  start-up is timed) or ``num_workers=2, workers="threads"`` (``--no-workers`` skips them);
- ours: ``ReplayBuffer.from_folder(read_only=True).dataloader(batch, shuffle=True, seed=..., readahead=MODE,
  **view)``, ``for batch in loader`` (num_workers 0), MODE "auto" (the default) and "off" (one page fault at
  a time, as before the option existed);
- the limit, on the very rows the view reads (read.py's ``rows_read`` on the first epoch's index batches of a
  loader with that seed): (1) 32 threads doing ``os.preadv`` of each row range (a window's rows are one read)
  of each field into a fresh output; (2) ``madvise(MADV_WILLNEED)`` on every row range of every field
  (page-aligned, merged where they touch) of a fresh ``np.load(mmap_mode='r')`` map, then numpy's gather.
  The limit is the better of the two; both are printed.

The ways alternate within each of ``--repeats`` rounds; figures are medians; ratios are ours over the limit
(goals T >= 0.8, N and S >= 0.7). "same bytes: checked": ours' first cold batch (each mode) equals the batch
read warm, the view reads the rows the limit reads, and the two limits read the same bytes.

(b) E: a child process in a memory cgroup (v1, or v2 where its ``memory`` controller is available) limited to
``--budget-mb``, its own anonymous memory (python, torch) included: its RSS and the page-cache room left are
printed. It times one epoch of T batches (256 steps, drop_last=False) in uniform random order, in block-shuffled
order (``shuffle="blocks"``, the default block size), and a sequential ``os.read`` of the store's files in
8 MiB chunks (dd-like), the store evicted before each. Without a cgroup (``--no-cgroup``, or none can be made)
the child evicts the store's pages every budget's worth of bytes read instead, and says so.
An in-order epoch (``shuffle=False``) is measured beside them, as the loader's own reference. The ways run
``--epoch-repeats`` rounds (default 3), interleaved, and the figures are medians: the sequential read of this
VM's disk swings between runs (the host's cache), and interleaving makes each ratio compare like with like.
``--epoch-batches`` caps each epoch (and the sequential read to the same bytes); ``--epoch-seconds`` stops
an epoch that runs longer (a plain memory map thrashes in a cgroup: each page fault reads the disk's whole
readahead window around it, printed in the header), and says so.

Without the library's ``readahead=`` or ``shuffle="blocks"`` (older versions) the script says so and measures
the rest. malloc is pinned as in read.py (``pin_malloc``). Warm figures: benchmarks/read.py (not rerun here).

    python benchmarks/cold.py            # about 2 GB written, then (a) and (b): about 10-15 minutes
    python benchmarks/cold.py --quick    # a smoke run (12 episodes, 2 batches, 1 repeat, a tiny epoch)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import gc
import itertools
import json
import math
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

import read  # benchmarks/read.py: VIEWS, DESCRIPTION, rows_read, check_same_bytes, memcpy_gbs, pin_malloc
import workload  # benchmarks/workload.py: the canonical episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.errors import OptionError  # noqa: E402

VIEWS, READ, SEED, T_STEPS = read.VIEWS, read.READ, read.SEED, read.T_STEPS
GOALS = {"T": 0.8, "S": 0.7, "N": 0.7, "traj": None}
THREADS, CHUNK, PAGE = 32, 8 * 2**20, mmap.PAGESIZE
MB, GB, MIB = 1e6, 1e9, 2**20
PREAD, MADVISE = "limit: 32 threads of preadv", "limit: madvise WILLNEED + gather"
LIBC = ctypes.CDLL(None)


# ---- the store and its pages ---------------------------------------------------------------------------------


def write_store(folder: Path, episodes: int) -> float:
    buffer = ReplayBuffer(folder, episodes, T_STEPS, fields=workload.FIELDS, meta_fields=workload.META_FIELDS,
                          overwrite=True)
    start = time.perf_counter()
    for begin in range(0, episodes, 16):  # 16 episodes generated at a time: the RAM use stays small
        data = workload.Data(min(16, episodes - begin), T_STEPS, seed=begin)
        for e in range(data.episodes):
            buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e],
                                 done=data.done[e], task_id=int(data.task_id[e]))
    buffer.close()
    os.sync()  # dirty pages cannot be evicted: write them back now
    return time.perf_counter() - start


def text(path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, TypeError):
        return ""


def store_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file())


def evict(folder: Path, drop_maps: bool = False) -> int:
    """Drop the store's pages from the page cache; returns how many maps of its files this process holds (a
    page mapped in some process's page tables survives fadvise). ``drop_maps``: first ``madvise(MADV_DONTNEED)``
    this process's maps of them (their page-table entries go; the maps stay usable)."""
    prefix, maps = str(Path(folder).resolve()) + os.sep, []
    with open("/proc/self/maps") as lines:
        for parts in (line.rstrip("\n").split(maxsplit=5) for line in lines):
            if len(parts) == 6 and parts[5].startswith(prefix):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append((lo, hi - lo))
    for address, length in maps if drop_maps else ():
        LIBC.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), mmap.MADV_DONTNEED)
    for path in store_files(folder):
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return len(maps)


def cached_fraction(folder: Path) -> float:
    """Share of the store's pages in the page cache (mincore on a throwaway map: nothing is read)."""
    cached, total = 0, 0
    for path in store_files(folder):
        if (size := path.stat().st_size) == 0:
            continue
        with open(path, "rb") as file, mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            view, vec = np.frombuffer(mapped, np.uint8), np.zeros(-(-size // PAGE), np.uint8)
            LIBC.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), ctypes.c_void_p(vec.ctypes.data))
            cached, total = cached + int((vec & 1).sum()), total + len(vec)
            del view
    return cached / max(total, 1)


def device_readahead(folder: Path) -> str:
    """The kernel's readahead window for the folder's disk (it also sizes a memory map's read-around)."""
    device = Path(f"/sys/dev/block/{os.major(os.stat(folder).st_dev)}:{os.minor(os.stat(folder).st_dev)}")
    found = text(device / "queue" / "read_ahead_kb") or text(device / ".." / "queue" / "read_ahead_kb")
    return f"{found.strip()} KiB" if found else "unknown"


def rss() -> dict[str, float]:
    """This process's resident memory in MB (anonymous, file-backed, peak) from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    return {key: int(fields.get(key, "0 kB").split()[0]) * 1024 / MB for key in ("RssAnon", "RssFile", "VmHWM")}


def support(folder: Path) -> tuple[bool, bool]:
    """Whether this version of the library takes ``readahead=`` and ``shuffle="blocks"`` (loaders built, not read)."""
    buffer = ReplayBuffer.from_folder(folder, read_only=True)

    def accepted(**options) -> bool:
        try:
            buffer.dataloader(256, seed=SEED, **VIEWS["T"][1], **options)
        except (OptionError, TypeError):
            return False
        return True

    found = accepted(shuffle=True, readahead="off"), accepted(shuffle="blocks")
    buffer.close()
    return found


# ---- (a) cold batches ----------------------------------------------------------------------------------------


class ColdKind:
    """One view's cold runs: its index batches and, worked out untimed once, the limit's reads for them."""

    def __init__(self, kind: str, folder: Path, args, readahead: bool):
        self.kind, self.folder, self.repeats, self.workers = kind, folder, args.repeats, not args.no_workers
        self.modes = ("auto", "off") if readahead else (None,)
        self.firsts: dict[str, dict] = {}  # each way's first batch (first repeat), for the same-bytes check
        batch, options, _ = VIEWS[kind]
        buffer = ReplayBuffer.from_folder(folder, read_only=True)
        dataset = buffer.dataset(**options)
        probe = buffer.dataloader(batch, shuffle=True, seed=SEED, **options).batch_sampler
        self.count = max(1, min(args.batches, len(probe)))
        items = [np.asarray(b) for b in itertools.islice(iter(probe), self.count)]
        # the limit's own maps of the step files; check_same_bytes: the view reads these rows of them
        maps = {name: np.load(folder / "steps" / f"{name}.npy", mmap_mode="r") for name in READ}
        self.files = {name: (m.filename, m.offset, m[0].nbytes) for name, m in maps.items()}
        self.plans = [read.rows_read(kind, dataset, b) for b in items]  # (out, field, rows, mask) per output
        self.check = read.check_same_bytes(kind, dataset, items[0], maps)
        self.warm = {k: v.clone() for k, v in dataset.__getitems__(items[0]).items()}  # the batch read warm
        self.shapes = [{out: (rows.shape + maps[field].shape[1:], maps[field].dtype) for out, field, rows, _ in plan}
                       for plan in self.plans]
        self.nbytes = sum(rows.size * self.files[f][2] for plan in self.plans for _, f, rows, _ in plan) / self.count
        buffer.close()
        del buffer, dataset, probe, maps
        self.reads, self.advice = [], []  # per batch: preadv groups; madvise (field, [(start, length)])
        for plan in self.plans:
            work, ranges = [], {}
            for o, (out, field, rows, _) in enumerate(plan):
                _, offset, row = self.files[field]
                lo = rows if rows.ndim == 1 else rows[:, 0]  # a window's rows are one range
                nbytes = np.broadcast_to(row if rows.ndim == 1 else (rows[:, -1] - lo + 1) * row, lo.shape)
                span = row * (1 if rows.ndim == 1 else rows.shape[1])
                work += zip([o] * len(lo), (np.arange(len(lo)) * span).tolist(), nbytes.tolist(),
                            [field] * len(lo), (offset + lo * row).tolist())
                at = offset % mmap.ALLOCATIONGRANULARITY  # where the data starts in numpy's map of the file
                ranges.setdefault(field, []).append((at + lo * row, at + lo * row + nbytes))
            self.reads.append([work[k::THREADS] for k in range(THREADS)])
            self.advice.append([(field, merged_pages(parts)) for field, parts in ranges.items()])

    def pread(self, pool) -> float:
        fds = {name: os.open(path, os.O_RDONLY) for name, (path, *_) in self.files.items()}

        def run(group, buffers):
            for o, at, length, field, offset in group:
                if os.preadv(fds[field], [buffers[o][at:at + length]], offset) != length:
                    raise OSError(f"short read of {field} at {offset}")

        outs = None  # every way allocates a batch while the previous one is alive, as a training loop does
        start = time.perf_counter()
        for shapes, groups in zip(self.shapes, self.reads):
            outs = {out: np.empty(shape, dtype) for out, (shape, dtype) in shapes.items()}
            buffers = [memoryview(a.reshape(-1).view(np.uint8)) for a in outs.values()]
            list(pool.map(run, groups, itertools.repeat(buffers)))
            self.firsts.setdefault(PREAD, outs)
        elapsed = time.perf_counter() - start
        for fd in fds.values():
            os.close(fd)
        return elapsed

    def madvise(self) -> float:
        arrays = {name: np.load(path, mmap_mode="r") for name, (path, *_) in self.files.items()}
        outs = None
        start = time.perf_counter()
        for plan, advice in zip(self.plans, self.advice):
            for field, ranges in advice:
                for begin, length in ranges:
                    arrays[field]._mmap.madvise(mmap.MADV_WILLNEED, begin, length)
            outs = {out: arrays[field][rows] for out, field, rows, _ in plan}
            self.firsts.setdefault(MADVISE, outs)
        return time.perf_counter() - start  # the maps go with this frame

    def ours(self, mode: str | None, workers: dict | None = None, name: str | None = None) -> float:
        batch, options, _ = VIEWS[self.kind]
        buffer = ReplayBuffer.from_folder(self.folder, read_only=True)
        loader = buffer.dataloader(batch, shuffle=True, seed=SEED, **({} if mode is None else {"readahead": mode}),
                                   **options, **(workers or {}))
        iterator = iter(loader)
        start = time.perf_counter()
        for i, got in enumerate(iterator):
            self.firsts.setdefault(name or label(mode), got)
            if i + 1 == self.count:
                break
        elapsed = time.perf_counter() - start
        del got, iterator, loader
        buffer.close()
        return elapsed

    def same_bytes(self) -> str:
        for name in [label(mode) for mode in self.modes] + (list(WORKER_WAYS) if self.workers else []):
            got = self.firsts[name]
            if set(got) != set(self.warm) or not all(torch.equal(got[k], self.warm[k]) for k in got):
                return f"MISMATCH: {name}'s first cold batch differs from the same batch read warm"
        for out, field, rows, mask in self.plans[0]:
            a, b = self.firsts[PREAD][out], self.firsts[MADVISE][out]
            if not np.array_equal(a if mask is None else a[mask], b if mask is None else b[mask]):
                return f"MISMATCH in {out!r}: the two limits read different bytes"
        return self.check

    def measure(self, pool) -> dict[str, list[float]]:
        ways = [(PREAD, lambda: self.pread(pool)), (MADVISE, self.madvise)]
        ways += [(label(mode), lambda mode=mode: self.ours(mode)) for mode in self.modes]
        if self.workers:  # the default readahead, with 2 worker processes (fork; start-up timed) or 2 threads
            ways += [(name, lambda extra=extra, name=name: self.ours(self.modes[0], extra, name))
                     for name, extra in WORKER_WAYS.items()]
        times: dict[str, list[float]] = {name: [] for name, _ in ways}
        for _ in range(self.repeats):
            for name, run in ways:  # interleaved: a change of load on the machine touches every way alike
                gc.collect()
                if still := evict(self.folder):
                    print(f"  warning: {still} map(s) of the store still live before '{name}': not fully cold")
                times[name].append(run())
        return times


def label(mode: str | None) -> str:
    return "ours (no readahead option)" if mode is None else f"ours readahead={mode}"


WORKER_WAYS = {"ours w=2 (processes)": dict(num_workers=2, multiprocessing_context="fork"),
               "ours threads=2": dict(num_workers=2, workers="threads")}
GOAL_WAYS = (label("auto"), label(None))  # the goals are the default's; "off" is what it was before


def verdict(ratio: float, goal: float | None) -> str:
    return "" if goal is None else f" (goal >= {goal} {'met' if ratio >= goal else 'NOT met'})"


def merged_pages(parts: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int]]:
    """Byte ranges [lo, hi) as (start, length) page-aligned ranges, sorted, merged where they touch."""
    first = np.concatenate([lo for lo, _ in parts]) // PAGE
    last = (np.concatenate([hi for _, hi in parts]) - 1) // PAGE
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])
    new = np.r_[True, first[1:] > last[:-1] + 1]
    ends = np.r_[last[np.flatnonzero(new)[1:] - 1], last[-1]]
    return list(zip((first[new] * PAGE).tolist(), ((ends - first[new] + 1) * PAGE).tolist()))


def cold_batches(folder: Path, args, readahead: bool, pool) -> list[tuple]:
    rows = []
    for kind in VIEWS:
        bench = ColdKind(kind, folder, args, readahead)
        print(f"{read.DESCRIPTION[kind]}: {bench.count} batches a run, {bench.nbytes / MB:.2f} MB a batch", flush=True)
        times = bench.measure(pool)
        rates = {name: bench.count / statistics.median(t) for name, t in times.items()}
        limit = max(rates[PREAD], rates[MADVISE])
        for name, t in times.items():
            rate, ratio, goal = rates[name], rates[name] / limit, GOALS[kind] if name in GOAL_WAYS else None
            print(f"  {name:<34} {rate:>8,.1f} batches/s {rate * bench.nbytes / MB:>7,.0f} MB/s {ratio:6.3f} x limit"
                  f"{verdict(ratio, goal)}   [{', '.join(f'{bench.count / s:,.1f}' for s in t)}]", flush=True)
            if name.startswith("ours"):
                rows.append((f"C-{kind}", name, ratio, goal))
        print(f"  {bench.same_bytes()}", flush=True)
        del bench
    return rows


# ---- (b) an epoch over a store bigger than the memory budget --------------------------------------------------


class Cgroup:
    """A memory cgroup limited to ``limit`` bytes: v1, else v2 where its memory controller is available.
    ``path`` is None (and ``reason`` says why) when none can be made."""

    def __init__(self, limit: int):
        self.path, self.version, self.reason = None, None, []
        name = f"memmap-replay-cold-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        v2 = next((p for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
                   if "memory" in text(p / "cgroup.controllers").split()), None)
        for version, root, limit_file in (("v1", Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                                          ("v2", v2, "memory.max")):
            if root is None or not (root / "cgroup.procs").exists():
                continue
            try:
                if version == "v2" and "memory" not in text(root / "cgroup.subtree_control").split():
                    (root / "cgroup.subtree_control").write_text("+memory")
                (root / name).mkdir()
                self.path, self.version = root / name, version
                (self.path / limit_file).write_text(str(limit))
                return
            except OSError as error:
                self.reason.append(f"{version}: {error}")
                self.remove()
        self.reason = self.reason or ["no cgroup-v1 memory hierarchy, no cgroup-v2 memory controller"]

    def report(self) -> str:
        v1 = self.version == "v1"
        peak = text(self.path / ("memory.max_usage_in_bytes" if v1 else "memory.peak")).strip()
        events = dict(line.split() for line in text(self.path / "memory.events").splitlines() if " " in line)
        hits = text(self.path / "memory.failcnt").strip() if v1 else events.get("max", "")
        return (f"peak usage {int(peak) / MB:,.0f} MB" if peak else "peak usage n/a") + \
            (f", limit reached {int(hits):,} times" if hits else "")

    def remove(self) -> None:
        for _ in range(50):
            try:
                if self.path is not None and self.path.exists():
                    self.path.rmdir()
                self.path = None
                return
            except OSError:
                time.sleep(0.1)  # the child's exit still being accounted
        print(f"  warning: could not remove {self.path}")


def epoch(folder: Path, args, budget: int) -> list[tuple]:
    store_bytes = sum(p.stat().st_size for p in store_files(folder))
    print(f"E: one epoch over a {store_bytes / GB:.2f} GB store, {store_bytes / budget:.1f}x the budget of "
          f"{budget / MIB:,.0f} MiB" + ("" if store_bytes >= 4 * budget else " (NOT 4x the budget: a smaller store "
                                         "than the figure asks for)"), flush=True)
    cgroup = None if args.no_cgroup else Cgroup(budget)
    command = [sys.executable, str(Path(__file__).resolve()), "--epoch-child", str(folder), "--budget-mb",
               str(args.budget_mb), "--epoch-batches", str(args.epoch_batches or 0), "--epoch-seconds",
               str(args.epoch_seconds), "--epoch-repeats", str(args.epoch_repeats)]
    if cgroup is not None and cgroup.path is not None:
        procs = cgroup.path / "cgroup.procs"  # the shell joins the cgroup, then becomes python (same pid)
        command = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *command]
        print(f"  the child runs in memory cgroup {cgroup.version} {cgroup.path} (limit {budget / MIB:,.0f} MiB)")
    else:
        command += ["--evict-every", str(budget)]
        why = "--no-cgroup" if cgroup is None else f"none could be made: {'; '.join(cgroup.reason)}"
        print(f"  NO memory cgroup ({why}): instead the child evicts the store's pages every "
              f"{budget / MIB:,.0f} MiB read")
    result, child = None, None
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        for line in child.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
            else:
                print(f"  {line.rstrip()}", flush=True)
        child.wait()
        if cgroup is not None and cgroup.path is not None:
            print(f"  cgroup: {cgroup.report()}")
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        if cgroup is not None:
            cgroup.remove()
    if child.returncode != 0 or result is None:
        print(f"  the child failed (exit {child.returncode}; -9: killed, e.g. by the OOM killer when the budget "
              f"cannot hold python + torch)")
        return []
    sequential = result.pop("sequential read")
    return [("E", name, mbs / sequential, 0.7 if name.startswith("block") else None) for name, mbs in result.items()]


def one_epoch(folder: Path, shuffle, args, cap, every: int, most: int) -> tuple[float, int, str]:
    """One epoch of T batches in the given order (``shuffle``: True, "blocks" or False), or with ``shuffle``
    None a sequential read of the store's files, after evicting its pages: (MB/s, bytes, a line to print)."""
    gc.collect()
    evict(folder)
    nbytes, since, batches, shape = 0, 0, 0, ""
    if shuffle is not None:
        buffer = ReplayBuffer.from_folder(folder, read_only=True)
        loader = buffer.dataloader(256, timestep_level=True, shuffle=shuffle, seed=SEED, fields=READ,
                                   meta_fields=(), drop_last=False)
        sampler = loader.batch_sampler
        shape = ", ".join(f"{key} {getattr(sampler, key)}" for key in ("block_size", "block_window")
                          if shuffle == "blocks" and hasattr(sampler, key))
        total = len(sampler) if cap is None else min(cap, len(sampler))
        start = time.perf_counter()
        for batch in loader:
            size = sum(v.numel() * v.element_size() for v in batch.values())
            nbytes, since, batches = nbytes + size, since + size, batches + 1
            if every and since >= every:
                evict(folder, drop_maps=True)
                since = 0
            if batches == total or time.perf_counter() - start > args.epoch_seconds:
                break
        elapsed = time.perf_counter() - start
        if batches < total:
            shape += f"{', ' if shape else ''}STOPPED at the {args.epoch_seconds:g} s cap: {batches} of {total} batches"
        del batch, loader, sampler
        buffer.close()
    else:  # dd-like, capped at the epochs' bytes when they are capped
        start = time.perf_counter()
        for path in store_files(folder):
            fd = os.open(path, os.O_RDONLY)
            while (cap is None or nbytes < most) and (chunk := os.read(fd, CHUNK)):
                nbytes, since = nbytes + len(chunk), since + len(chunk)
                if every and since >= every:
                    evict(folder)
                    since = 0
            os.close(fd)
        elapsed = time.perf_counter() - start
    rate = nbytes / elapsed / MB
    done = f"{batches:,} batches ({nbytes / GB:.2f} GB)" if shuffle is not None else f"{nbytes / GB:.2f} GB"
    return rate, nbytes, f"{done} in {elapsed:.1f} s: {rate:,.0f} MB/s" + (f"  [{shape}]" if shape else "")


def epoch_child(args) -> int:
    """In the child: the epochs and the sequential read, each after evicting the store's pages."""
    folder, every, cap = Path(args.epoch_child), args.evict_every, args.epoch_batches or None
    memory = rss()
    print(f"child pid {os.getpid()}: RSS after imports {memory['RssAnon']:,.0f} MB anonymous "
          f"({memory['RssFile']:,.0f} MB file-backed): page-cache room left in the budget about "
          f"{args.budget_mb * MIB / MB - memory['RssAnon']:,.0f} MB", flush=True)
    readahead, blocks = support(folder)
    print(f"readahead: {'the default (auto)' if readahead else 'not supported by this version'}")
    if not blocks:
        print("block-shuffled order: skipped (shuffle='blocks' not supported by this version)")
    ways = [("uniform random order", True)] + [("block-shuffled order", "blocks")] * blocks + \
        [("in-order loader", False), ("sequential read", None)]
    runs: dict[str, list[float]] = {name: [] for name, _ in ways}
    most = 0
    for round_ in range(args.epoch_repeats):  # the ways interleaved: a change of the disk's speed touches all
        for name, shuffle in ways:
            rate, nbytes, line = one_epoch(folder, shuffle, args, cap, every, most)
            runs[name].append(rate)
            most = max(most, nbytes)
            print(f"{name:<22} {line}" + (f"  (round {round_ + 1})" if args.epoch_repeats > 1 else ""), flush=True)
    result = {name: statistics.median(rates) for name, rates in runs.items()}
    if args.epoch_repeats > 1:
        for name, rates in runs.items():
            print(f"{name:<22} median {result[name]:,.0f} MB/s  [{', '.join(f'{rate:,.0f}' for rate in rates)}]")
    memory = rss()
    print(f"child peak RSS {memory['VmHWM']:,.0f} MB (anonymous now {memory['RssAnon']:,.0f} MB)", flush=True)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---- main ------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="smoke run: 12 episodes, 2 batches, 1 repeat, 3-batch epochs")
    add("--episodes", type=int, help="episodes of 500 steps (default 320, or enough for 4x --budget-mb)")
    add("--batches", type=int, help="timed batches a run (default 20)")
    add("--repeats", type=int, help="runs of each way; medians are printed (default 3)")
    add("--budget-mb", type=int, default=512, help="memory budget of the epoch's child, MiB (default 512)")
    add("--epoch-batches", type=int, help="cap on each epoch's batches (default: none)")
    add("--epoch-seconds", type=float, default=180.0,
        help="stop an epoch after this many seconds; its MB/s are of the part read (default 180)")
    add("--epoch-repeats", type=int, help="rounds of the epochs and the sequential read, interleaved; medians "
                                          "are the figures (default 3)")
    add("--no-workers", action="store_true", help="(a) without the runs with 2 worker processes and 2 threads")
    add("--no-cgroup", action="store_true", help="no memory cgroup: evict the store every budget of reading")
    add("--folder", type=Path, help="where to write (a scratch folder is made inside it and removed at the end; "
                                    "default: the current directory, so the same disk as the project)")
    add("--epoch-child", help=argparse.SUPPRESS)
    add("--evict-every", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.epoch_child:
        args.epoch_repeats = args.epoch_repeats or 1
        return epoch_child(args)

    budget = args.budget_mb * MIB
    episodes = args.episodes or (12 if args.quick else
                                 max(320, math.ceil(4 * budget / (T_STEPS * workload.Data(1, 1).row_nbytes))))
    args.batches = args.batches or (2 if args.quick else 20)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.epoch_batches = args.epoch_batches or (3 if args.quick else None)
    if not args.epoch_child:
        args.epoch_repeats = args.epoch_repeats or (1 if args.quick else 3)
    if min(args.batches, args.repeats, args.budget_mb, args.epoch_repeats) < 1 or episodes < 9:
        parser.error("--batches, --repeats, --epoch-repeats and --budget-mb must be positive, --episodes at least 9")
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-cold-", dir=parent))
    folder = root / "cold-store"

    started = time.perf_counter()
    print(f"memmap_replay cold-read benchmark: {episodes} episodes x {T_STEPS} steps; median of {args.repeats} "
          f"repeat(s) of {args.batches} batches; epoch budget {args.budget_mb} MiB")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, kernel {platform.release()}")
    print(f"folder {root} (removed at the end); {read.pin_malloc()}")
    memcpy = read.memcpy_gbs()
    print(f"memcpy (256 MiB, touched memory): {memcpy:.2f} GB/s", flush=True)
    print("warm figures (the store in the page cache): run benchmarks/read.py (not rerun here)")
    rows: list[tuple] = []
    try:
        seconds = write_store(folder, episodes)
        store_bytes = sum(p.stat().st_size for p in store_files(folder))
        print(f"wrote {episodes * T_STEPS:,} steps ({store_bytes / GB:.2f} GB on disk) with store_episode in "
              f"{seconds:.1f} s (synced)", flush=True)
        readahead, blocks = support(folder)
        print(f"readahead: {'auto and off measured' if readahead else 'not supported by this version'}; "
              f"block shuffle: {'measured in E' if blocks else 'not supported by this version (E skips it)'}")
        gc.collect()
        evict(folder)
        print(f"after an eviction {cached_fraction(folder):.1%} of the store's pages are in the page cache (mincore); "
              f"the disk's readahead (read_ahead_kb, also a map's read-around on a page fault): "
              f"{device_readahead(folder)}")

        print(f"\n(a) Cold batches: the store evicted before each run of {args.batches} batches (first included)",
              flush=True)
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            rows += cold_batches(folder, args, readahead, pool)
        print("\n(b) Epoch over a store bigger than its memory budget", flush=True)
        rows += epoch(folder, args, budget)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nCold figures: {episodes} episodes x {T_STEPS} steps, medians of {args.repeats} repeat(s), memcpy "
          f"{memcpy:.2f} GB/s. C-*: batches/s over the better limit's in this run; E: MB/s over the sequential read's")
    for figure, group in itertools.groupby(rows, key=lambda row: row[0]):
        print(f"  {figure:<7}"
              + "; ".join(f"{name} {ratio:.3f}{verdict(ratio, goal)}" for _, name, ratio, goal in group))
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
