"""Sampler benchmark on the canonical workload: uniform and prioritized draws against the numpy limit.

"dreamer-small": 200 episodes x 500 steps; step fields image uint8 (3,64,64), action float32 (6,), reward
float32 (), done bool (); meta field task_id int. Written once with ``store_episode`` from seeded data
(``read.write_ours``), then opened with ``ReplayBuffer.from_folder(read_only=True)`` (writable for
``persist=True``, which a read-only store refuses). Every sampler reads
``fields=('image', 'action', 'reward')`` and no meta field, with a fixed ``seed``:

- uniform T  ``buffer.sampler('uniform')``: ``sampler.batch(256)`` per iteration;
- P          ``buffer.sampler('prioritized', alpha=0.6, beta=0.4, persist=False)``: ``batch = sampler.batch(256)``
             then ``sampler.update_priorities(batch['_key'], priorities)`` per iteration; and the same with
             ``persist=True`` (the priorities also written to ``priorities/default.npy`` in the store folder);
- windows    ``buffer.sampler('sequence', window=50, alpha=0.6, beta=0.4, persist=False)``: ``batch(50)`` then
             ``update_priorities`` with (50, 50) step priorities (R2D2: eta * max + (1 - eta) * mean);
- sum tree   ``SumTree(n)`` alone, leaves loaded from a seeded generator: ``tree.sample(256, rng)`` then
             ``tree.update(idx, new)`` per call, at n = 100 thousand, 1 million and 10 million leaves.

The prioritized ways (P, windows, sum tree) run with each kernel of the sum tree (``kernels.select``:
numpy, and numba's compiled kernels when numba is installed), interleaved in one run; both draw the same
keys (checked: every way of a group must draw its first way's keys). With numba, the first use's
compile time is measured in fresh processes (``sampler_kernels.first_use``: empty numba cache, then
cache written). With cpprb installed, its ``PrioritizedReplayBuffer`` on the same rows runs in the P
group (``sampler_kernels.CpprbPrioritized``: its own generator, so other rows of the same size; its
ratio is to the P group's limit).

Large gathers split over the library's own threads by default (``views.gather``; ``set_parallel_gathers``). The
uniform and P ways run both ways: as a user's process does by default (", parallel gathers") and with
``set_parallel_gathers(False)`` (the calling thread copies every batch alone). The numpy limit is one thread's
gather; the P group also has the same gather split over the same threads (``views.gather.take``, from RAM),
what a parallel gather copies at best ("numpy limit over the library's threads").

The new priorities are precomputed from a seeded generator (float32 tensors, as a learner's
``td_error.abs() + eps``), one array per iteration. Each sampler figure is compared with the numpy limit:
``{field: ram[field][rows]}``, a fancy-index gather of exactly the rows the sampler's batches read, from
the store's arrays loaded into RAM with ``np.array``. The limit does no sampling and no priority update:
the ratio says what drawing, updating and the view's gather cost on top of copying the bytes. The rows come
from an untimed recording run of the same sampler (same seed, same priorities; the keys' episode id
``key // view.key_stride`` and step ``key % key_stride``, row = that episode's first row + step), and every
timed run is checked to draw the same keys again; the recording's first batch is checked against the
limit's gather ("same bytes: checked").

Each timed run makes a fresh sampler (untimed; with ``persist=True`` the previous run's priority files are
removed first, so every run starts from the same priorities), makes ``--warm-batches`` untimed batches,
then times ``--batches`` iterations, keeping the previous batch alive while it makes the next (as a
training loop does). Figures are medians of ``--repeats`` runs, the runs of the different ways interleaved
(one of each in turn). As in benchmarks/read.py, glibc malloc's thresholds are pinned (``read.pin_malloc``),
``--warm-mb`` of RAM are touched and freed before each timed run (``read.warm_ram``), and the store's pages
are in the page cache and touched once by this process (``read.touch_pages``).

    python benchmarks/samplers.py              # the canonical workload, about 2 minutes on 2 cores
    python benchmarks/samplers.py --clock cpu  # timed by this thread's CPU time (a machine shared with other work)
    python benchmarks/samplers.py --quick      # a smoke run (20 episodes, 1 repeat, a few batches, small trees)
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import read  # benchmarks/read.py: write_ours, pin_malloc, warm_ram, touch_pages, gather_limit, memcpy_gbs
import sampler_kernels  # benchmarks/sampler_kernels.py: the kernels, their compile time, cpprb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

import memmap_replay  # noqa: E402
from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.samplers import kernels  # noqa: E402
from memmap_replay.samplers.sumtree import SumTree  # noqa: E402
from memmap_replay.core import threads  # noqa: E402
from memmap_replay.views import gather  # noqa: E402

T_STEPS = read.T_STEPS
READ = read.READ  # ('image', 'action', 'reward')
SEED = read.SEED
LIMIT = read.LIMIT
MB = read.MB
BATCH, WINDOW, WINDOW_BATCH = 256, 50, 50
ALPHA, BETA = 0.6, 0.4
GOAL_P = {"numpy": 0.7, "numba": 0.85}  # x numpy limit, by kernel (issue 19: numba >= 0.85 and above cpprb)
TREE_SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_TREE_SIZES = (10_000, 100_000, 1_000_000)
TREE_GOALS = {"numpy": {1_000_000: 3_000, 10_000_000: 2_000},  # calls/s of sample(256) + update(256)
              "numba": {1_000_000: 20_000, 10_000_000: 10_000}}
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]  # what the timed runs read (--clock)
PRIORITIZED = dict(alpha=ALPHA, beta=BETA)
PARALLEL = ", parallel gathers"  # the library's default; the other ways run with set_parallel_gathers(False)
THREADS_LIMIT = f"{sampler_kernels.THREADS_LIMIT} (in RAM)"


class SamplerCase:
    """One sampler way: how to open it, its batch size, and the step priorities of each iteration."""

    def __init__(self, group: str, how: str, kind: str, batch: int, options: dict, priorities, goal=None,
                 kernel: str = "numpy", parallel: bool = False):
        self.group, self.how, self.kind, self.batch, self.options = group, how, kind, batch, options
        self.kernel = kernel  # the sum tree's kernels while this way runs
        self.parallel = parallel  # memmap_replay.set_parallel_gathers while this way runs
        self.priorities = priorities  # None (no update) or one tensor per iteration
        self.goal = goal
        self.persist = options.get("persist", kind != "uniform")  # the prioritized samplers' default: True

    def open(self, buffer: ReplayBuffer):
        kernels.select(self.kernel)
        memmap_replay.set_parallel_gathers(self.parallel)
        if self.persist:  # every run starts from the same priorities: none stored yet
            shutil.rmtree(buffer.episode_store.folder / "priorities", ignore_errors=True)
            if not buffer.episode_store.writable:  # a read-only store never writes: persisting needs a writable one
                self.writable = buffer = ReplayBuffer.from_folder(buffer.episode_store.folder)
        return buffer.sampler(self.kind, fields=READ, meta_fields=(), seed=SEED, **self.options)


def step_rows(view, keys: np.ndarray) -> np.ndarray:
    """Store rows of sample keys: (episode id, t) -> that episode's first row + t. Untimed index arithmetic."""
    ids, t = np.divmod(keys, view.key_stride)
    table = view.table
    where = np.searchsorted(table.ids, ids)
    assert (table.ids[np.minimum(where, len(table) - 1)] == ids).all(), "a key names an episode not in the view"
    return table.start[where] + t


class Bench:
    def __init__(self, args, buffer: ReplayBuffer, ram: dict[str, np.ndarray]):
        self.args, self.buffer, self.ram = args, buffer, ram
        self.results: dict[tuple[str, str], tuple[float, list[float]]] = {}  # (group, how) -> (rate, times)
        self.goals: dict[tuple[str, str], str] = {}
        self.kernels = sampler_kernels.available()

    def record(self, group: str, how: str, seconds: float, times: list[float], calls: int, nbytes: float = 0.0,
               unit: str = "batches/s") -> None:
        rate = calls / seconds
        self.results[(group, how)] = (rate, times)
        extra = f" {nbytes * rate / MB:>8,.0f} MB/s" if nbytes else f" {seconds / calls * 1e6:>8,.1f} us/call"
        if (group, LIMIT) in self.results and how != LIMIT:
            extra += f"  {rate / self.results[(group, LIMIT)][0]:.3f} x numpy (paired {self.paired(group, how):.3f})"
        spread = ", ".join(f"{calls / t:,.0f}" for t in times)
        print(f"  {group:<14} {how:<62} {rate:>9,.1f} {unit}{extra}   [{spread}]", flush=True)

    def paired(self, group: str, how: str) -> float:
        """The median over repeats of (this way's rate / the limit's in the same round of the interleaved
        repeats): steadier than the ratio of medians when other processes come and go."""
        limit, times = self.results[(group, LIMIT)][1], self.results[(group, how)][1]
        return statistics.median(a / b for a, b in zip(limit, times))

    # ---- samplers against the numpy limit ------------------------------------------------------------

    def iterate(self, sampler, case: SamplerCase, begin: int, end: int):
        """Iterations begin..end-1 (untimed here); returns the last batch."""
        batch = None
        for i in range(begin, end):
            batch = sampler.batch(case.batch)
            if case.priorities is not None:
                sampler.update_priorities(batch["_key"], case.priorities[i])
        return batch

    def recording(self, case: SamplerCase) -> tuple[list[np.ndarray], list[np.ndarray], dict]:
        """Rows and keys of every timed iteration of ``case`` (untimed), and its first timed batch."""
        warm, count = self.args.warm_batches, self.args.batches
        sampler = case.open(self.buffer)
        self.iterate(sampler, case, 0, warm)
        keys, first = [], None
        for i in range(warm, warm + count):
            batch = self.iterate(sampler, case, i, i + 1)
            keys.append(batch["_key"].numpy().copy())
            if first is None:
                first = {name: batch[name].numpy().copy() for name in READ}
        view = sampler.view
        rows = [self.rows_of(view, case, k) for k in keys]
        if hasattr(sampler, "close"):
            sampler.close()
        return rows, keys, first

    def rows_of(self, view, case: SamplerCase, keys: np.ndarray) -> np.ndarray:
        rows = step_rows(view, keys)
        if case.kind == "sequence":
            rows = rows[:, None] + np.arange(view.window)[None, :]  # windows never cross an episode's end
        return rows

    def samplers(self, cases: list[SamplerCase], cpprb=None) -> None:
        """Each group's limit and its sampler ways (and cpprb's buffer in group P), interleaved repeats."""
        args = self.args
        warm, count = args.warm_batches, args.batches
        methods: list[tuple[str, str, object, float]] = []  # (group, how, run, bytes a batch)
        expected_keys: dict[str, list[np.ndarray]] = {}
        for case in cases:
            rows, keys, first = self.recording(case)
            plans = [[(name, self.ram[name], r) for name in READ] for r in rows]
            nbytes = sum(r.size * self.ram[name][0].nbytes for name in READ for r in rows) / count
            if case.group not in expected_keys:  # the group's first way fixes the rows its limit reads
                expected_keys[case.group] = keys
                same = all(np.array_equal(first[name], self.ram[name][rows[0]]) for name in READ)
                check = "same bytes: checked" if same else "MISMATCH: the limit does not read the sampler's rows"
                print(f"{case.group}: {count} timed iterations after {warm} untimed; {nbytes / MB:.2f} MB a batch; "
                      f"{check}", flush=True)
                methods.append((case.group, LIMIT, self.limit_run(plans), nbytes))
            elif not all(np.array_equal(a, b) for a, b in zip(keys, expected_keys[case.group])):
                raise RuntimeError(f"{case.group} {case.how}: draws other keys than the group's first way")
            methods.append((case.group, case.how, self.sampler_run(case, keys[-1]), nbytes))
            if case.goal is not None:
                self.goals[(case.group, case.how)] = case.goal
        if any(case.parallel for case in cases):  # the limit of a parallel gather: the same rows over the same threads
            p = next(case for case in cases if case.group == "P")
            rows = self.recording(p)[0]
            nbytes = next(n for group, how, _, n in methods if group == "P" and how == LIMIT)
            methods.append(("P", THREADS_LIMIT, self.threads_limit_run(rows), nbytes))
        if cpprb is not None:
            p = next(case for case in cases if case.group == "P")
            nbytes = next(n for group, how, _, n in methods if group == "P" and how == LIMIT)
            run = cpprb.timed([q.numpy() for q in p.priorities], args.warm_batches, args.batches, BATCH,
                              lambda: read.warm_ram(args.warm_bytes), lambda: clock())
            methods.append(("P", sampler_kernels.CPPRB, run, nbytes))
        for _, how, run, _ in methods:  # one untimed pass of each limit: first touches of its outputs
            if how in (LIMIT, THREADS_LIMIT):
                run()
        times: dict[tuple[str, str], list[float]] = {(group, how): [] for group, how, _, _ in methods}
        for _ in range(args.repeats):
            for group, how, run, _ in methods:
                times[(group, how)].append(run())
        for group, how, _, nbytes in methods:
            self.record(group, how, statistics.median(times[(group, how)]), times[(group, how)], count, nbytes)

    def limit_run(self, plans):
        def run() -> float:
            read.warm_ram(self.args.warm_bytes)
            previous = None
            start = clock()
            for plan in plans:
                previous = read.gather_limit(plan)
            elapsed = clock() - start
            del previous
            return elapsed
        return run

    def threads_limit_run(self, rows: list[np.ndarray]):
        """The numpy limit's gather of the same rows from the in-RAM arrays, each field's split over the library's
        threads as a view's is (``views.gather.take``, into fresh arrays): what a parallel gather copies at best."""
        ram = self.ram

        def run() -> float:
            read.warm_ram(self.args.warm_bytes)
            memmap_replay.set_parallel_gathers(True)
            previous = None
            start = clock()
            for r in rows:
                previous = {name: gather.take(ram[name], r, np.empty(r.shape + ram[name].shape[1:], ram[name].dtype))
                            for name in READ}
            elapsed = clock() - start
            del previous
            return elapsed
        return run

    def sampler_run(self, case: SamplerCase, last_keys: np.ndarray):
        warm, count = self.args.warm_batches, self.args.batches

        def run() -> float:
            sampler = case.open(self.buffer)
            self.iterate(sampler, case, 0, warm)
            read.warm_ram(self.args.warm_bytes)
            size, priorities, update = case.batch, case.priorities, case.priorities is not None
            batch = None
            start = clock()
            for i in range(warm, warm + count):
                batch = sampler.batch(size)  # the previous batch is alive until this returns
                if update:
                    sampler.update_priorities(batch["_key"], priorities[i])
            elapsed = clock() - start
            if not np.array_equal(batch["_key"].numpy(), last_keys):
                raise RuntimeError(f"{case.group} {case.how}: the timed run drew other keys than the recording")
            del batch
            if hasattr(sampler, "close"):
                sampler.close()
            return elapsed
        return run

    # ---- the sum tree alone ----------------------------------------------------------------------------

    def trees(self, sizes) -> None:
        args = self.args
        calls = args.tree_calls
        methods = []
        for n in sizes:
            start = time.perf_counter()
            tree = SumTree(n)
            tree.load_leaves(np.random.default_rng([SEED, n]).random(n))
            built = time.perf_counter() - start
            print(f"sum tree n={n:,}: {tree.levels} levels below a flat top of {tree.top}, "
                  f"{2 * tree.sums.nbytes / MB:,.0f} MB, built in {built:.2f} s; {calls} timed calls", flush=True)
            for kernel in self.kernels:
                rng = np.random.default_rng([SEED, n, 1])
                new = rng.random((calls, BATCH)) + 1e-3

                def run(tree=tree, rng=rng, new=new, kernel=kernel) -> float:
                    kernels.select(kernel)
                    read.warm_ram(args.warm_bytes)
                    start = clock()
                    for i in range(calls):
                        idx = tree.sample(BATCH, rng)
                        tree.update(idx, new[i])
                    return clock() - start

                how = f"n={n:,}: sample({BATCH}) + update, {kernel}"
                methods.append((how, run))
                if n in TREE_GOALS[kernel]:
                    self.goals[("sum tree", how)] = TREE_GOALS[kernel][n]
                run()  # untimed: first touches of the tree's pages by the draws
        times = {how: [] for how, _ in methods}
        for _ in range(args.repeats):
            for how, run in methods:
                times[how].append(run())
        for how, _ in methods:
            self.record("sum tree", how, statistics.median(times[how]), times[how], calls, unit="calls/s  ")


def sampler_cases(args, kernel_names: list[str]) -> list[SamplerCase]:
    iterations = args.warm_batches + args.batches
    rng = np.random.default_rng([SEED, 7])
    step = [torch.from_numpy(p) for p in (rng.random((iterations, BATCH), dtype=np.float32) + 1e-3)]
    windows = [torch.from_numpy(p) for p in (rng.random((iterations, WINDOW_BATCH, WINDOW), dtype=np.float32) + 1e-3)]
    update = "batch(256) + update_priorities"
    cases = [SamplerCase("uniform T", "sampler.batch(256)", "uniform", BATCH, {}, None)]
    parallel = (False, True) if args.parallel else (False,)
    if args.parallel:
        cases.append(SamplerCase("uniform T", f"sampler.batch(256){PARALLEL}", "uniform", BATCH, {}, None,
                                 parallel=True))
    for persist in (False, True):
        cases += [SamplerCase("P", f"{update}, persist={persist}, {kernel}{PARALLEL * on}", "prioritized", BATCH,
                              dict(PRIORITIZED, persist=persist), step, GOAL_P[kernel], kernel, on)
                  for on in parallel for kernel in kernel_names]
    cases += [SamplerCase(f"windows {WINDOW_BATCH}x{WINDOW}", f"batch({WINDOW_BATCH}) + update_priorities "
                          f"({WINDOW_BATCH}, {WINDOW}), {kernel}", "sequence", WINDOW_BATCH,
                          dict(PRIORITIZED, window=WINDOW, persist=False), windows, kernel=kernel)
              for kernel in kernel_names]
    return cases


def print_table(bench: Bench, args, episodes: int) -> None:
    header = ("case", "how", "batches/s", "x numpy", "paired", "goal")
    rows = []
    for (group, how), (rate, _) in bench.results.items():
        limit = bench.results.get((group, LIMIT))
        ratio = rate / limit[0] if limit is not None else None
        goal, verdict = bench.goals.get((group, how)), ""
        if goal is not None and ratio is not None and group != "sum tree":
            verdict = f">= {goal} x numpy {'met' if ratio >= goal else 'NOT met'}"
        elif goal is not None:
            verdict = f">= {goal:,} calls/s {'met' if rate >= goal else 'NOT met'}"
        paired = "" if ratio is None or how == LIMIT else f"{bench.paired(group, how):.3f}"
        rows.append((group, how, f"{rate:,.1f}", "" if ratio is None else f"{ratio:.3f}", paired, verdict))
    print()
    print(f"Sampler figures: {episodes} episodes x {T_STEPS} steps; medians of {args.repeats} repeat(s) of "
          f"{args.batches} iterations ({args.tree_calls} calls for the sum tree); ratios are to the numpy in-RAM "
          f"gather of the same rows in this run")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i in (2, 3, 4) else c.ljust(w)
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
    print("x numpy: over the numpy limit's batches/s in this run (same rows, same bytes; the limit neither draws nor")
    print("updates priorities). Sum tree: calls/s of tree.sample(256, rng) + tree.update(idx, new), no gather.")
    print("paired: the median over repeats of the ratio within each round of the interleaved runs.")
    print("numpy / numba: the sum tree's kernels (MEMMAP_REPLAY_KERNELS); both draw the same keys (checked).")
    sampler_kernels.print_ratios(bench.results, LIMIT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20 episodes, 1 repeat, 5 iterations, sum trees of 10k, 100k and 1M leaves")
    parser.add_argument("--episodes", type=int, default=None, help="episodes of 500 steps (default 200)")
    parser.add_argument("--batches", type=int, default=None, help="timed iterations per repeat (default 300)")
    parser.add_argument("--warm-batches", type=int, default=None,
                        help="untimed iterations of each fresh sampler before the timed ones (default 3)")
    parser.add_argument("--tree-calls", type=int, default=None,
                        help="timed sample + update calls per repeat on each sum tree (default 2000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per figure; medians "
                                                                  "are printed (default 5)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a scratch folder is made inside it and removed at the end unless "
                             "--keep; default: the current directory, so the same disk as the project)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and its store")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="time the runs by the wall clock (default) or by this thread's CPU time (user + system), "
                             "which leaves out the time other processes hold the CPU: steadier on a shared machine")
    parser.add_argument("--no-cpprb", dest="cpprb", action="store_false",
                        help="leave cpprb's PrioritizedReplayBuffer out even when it is installed")
    parser.add_argument("--no-parallel", dest="parallel", action="store_false",
                        help="leave out the ways with parallel gathers (the default: large gathers split over the "
                             "library's threads; the other ways run with set_parallel_gathers(False)); always left "
                             "out with --clock cpu, which counts this thread's time only")
    parser.add_argument("--no-compile-time", dest="compile_time", action="store_false",
                        help="leave out the numba kernels' first-use figures (fresh processes compiling with an "
                             "empty cache: ten seconds or more on a small machine)")
    parser.add_argument("--malloc-default", dest="pin_malloc", action="store_false",
                        help="leave glibc malloc's adaptive thresholds as they are (see read.pin_malloc)")
    parser.add_argument("--warm-mb", type=int, default=256,
                        help="MB of RAM touched and freed before each timed run (0: none; see benchmarks/read.py)")
    args = parser.parse_args(argv)

    episodes = args.episodes or (20 if args.quick else 200)
    args.batches = args.batches or (5 if args.quick else 300)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.tree_calls = args.tree_calls or (20 if args.quick else 2000)
    args.warm_batches = args.warm_batches if args.warm_batches is not None else (1 if args.quick else 3)
    args.warm_bytes = args.warm_mb * 2**20
    if min(episodes, args.batches, args.repeats, args.tree_calls) < 1 or args.warm_batches < 0 or args.warm_mb < 0:
        parser.error("--episodes, --batches, --tree-calls and --repeats must be positive, --warm-batches and "
                     "--warm-mb not negative")
    tree_sizes = QUICK_TREE_SIZES if args.quick else TREE_SIZES
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-samplers-", dir=parent))
    torch.set_num_threads(1)  # as read.py: our work is numpy's; keep torch from competing for the 2 cores
    allocator = read.pin_malloc() if args.pin_malloc else "glibc malloc left adaptive (--malloc-default)"

    started = time.perf_counter()
    global clock
    clock = CLOCKS[args.clock]
    if args.clock == "cpu" and args.parallel:
        args.parallel = False  # torch's other threads' copying would not be counted
        print("parallel gathers: left out (--clock cpu counts this thread's time, not the library's other threads')")
    print(f"memmap_replay sampler benchmark: {episodes} episodes x {T_STEPS} steps; median of {args.repeats} timed "
          f"repeat(s) of {args.batches} iterations")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, kernel {platform.release()}; "
          f"parallel gathers over {threads.get_threads()} threads (memmap_replay.core.threads)")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'}); RAM warm-up {args.warm_mb} MB "
          f"before each timed run; {allocator}; timed by the {args.clock} clock")
    print(f"memcpy (256 MiB, touched memory): {read.memcpy_gbs():.2f} GB/s", flush=True)
    sampler_kernels.print_kernels(args.cpprb, repeats=1 if args.quick else 3,  # (fresh processes: seconds each)
                                  compile_time=args.compile_time)
    try:
        print("generating data (seeded) ...", flush=True)
        data = read.Data(episodes, T_STEPS)
        folder = root / "dreamer-small"
        seconds = read.write_ours(folder, data)
        print(f"  wrote {episodes * T_STEPS:,} steps ({data.nbytes / read.GB:.3f} GB) with store_episode in "
              f"{seconds:.1f} s", flush=True)
        del data
        gc.collect()
        os.sync()  # write back the dirty pages now, not during the timed runs

        buffer = ReplayBuffer.from_folder(folder, read_only=True)
        store = buffer.episode_store
        ram = {name: np.array(store.step_array(name)) for name in READ}  # the numpy limit's in-RAM copy
        for name in store.schema.fields:
            read.touch_pages(store.step_array(name))
        bench = Bench(args, buffer, ram)
        cpprb = None
        if args.cpprb and sampler_kernels.cpprb_version() is not None:
            cpprb = sampler_kernels.CpprbPrioritized(ram, ALPHA, BETA)
            print(f"cpprb {sampler_kernels.cpprb_version()}: PrioritizedReplayBuffer of the same {len(ram['image']):,} "
                  f"rows (in RAM) filled in {cpprb.filled:.1f} s", flush=True)
        bench.samplers(sampler_cases(args, bench.kernels), cpprb)
        del cpprb
        buffer.close()
        del ram
        bench.ram = {}
        gc.collect()
        bench.trees(tree_sizes)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    print_table(bench, args, episodes)
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cpus: other processes running during the runs widen the spread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
