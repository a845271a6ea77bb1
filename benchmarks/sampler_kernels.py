"""The sampler benchmark's kernel figures (used by benchmarks/samplers.py): which kernels are there, the
first use's compile time, and cpprb's prioritized buffer on the same data.

- ``available()``: the kernels this run measures: numpy always, numba when it is installed (``numba
  kernels`` imports it: the samplers' own choice is made per case with ``kernels.select``).
- ``first_use()``: in fresh processes, with ``NUMBA_CACHE_DIR`` a new empty folder: the seconds of
  ``import numba`` alone, of the kernels' first use with an empty cache (import, compile, cache written),
  and of a first use again with that cache (import, cache read). A fresh process, because a process
  compiles the kernels once.
- ``CpprbPrioritized``: cpprb's ``PrioritizedReplayBuffer`` (C++, in RAM) filled with the same rows
  (image, action, reward), alpha 0.6; an iteration is ``rb.sample(256, beta=0.4)`` then
  ``rb.update_priorities(batch['indexes'], priorities)`` with the same precomputed priorities. Every run
  first resets all priorities to 1 (untimed). It draws with its own generator: the rows differ from our
  samplers' (not their number of bytes), so its figure is compared with the limit's batches/s of the P group.
- ``print_kernels`` and ``print_ratios``: the run's header line on the kernels, and the closing lines:
  numba over numpy for each way, and the P ways over cpprb.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CPPRB = "cpprb PrioritizedReplayBuffer: sample(256) + update_priorities"
THREADS_LIMIT = "numpy limit over the library's threads"  # (benchmarks/samplers.py's row, its name's start)

FIRST_USE = """
import sys, time
sys.path.insert(0, {root!r})
start = time.perf_counter()
import numba  # noqa: F401
imported = time.perf_counter() - start
if {kernels}:
    import numpy as np
    from memmap_replay.samplers import kernels
    from memmap_replay.samplers.sumtree import SumTree
    start = time.perf_counter()
    assert kernels.select("numba") == "numba"
    tree = SumTree(1000)
    tree.update(np.arange(1000), np.ones(1000))
    tree.sample(16, np.random.default_rng(0))
    print(imported, time.perf_counter() - start + imported)
else:
    print(imported)
"""


def available() -> list[str]:
    try:
        import numba  # noqa: F401
    except ImportError:
        return ["numpy"]
    return ["numpy", "numba"]


def first_use(repeats: int = 3) -> dict[str, float]:
    """Seconds: 'import numba', 'compile' (first use, empty cache), 'cached' (first use, cache written); the
    import and the cached use are the best of ``repeats`` fresh processes."""
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        env.pop("MEMMAP_REPLAY_KERNELS", None)

        def run(kernels: bool) -> list[float]:
            code = FIRST_USE.format(root=str(ROOT), kernels=kernels)
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            return [float(x) for x in out.stdout.split()]

        imported = min(run(False)[0] for _ in range(repeats))  # (the first one may read numba's files from disk)
        compiled = run(True)[1]
        cached = min(run(True)[1] for _ in range(repeats))
    return {"import numba": imported, "compile": compiled, "cached": cached}


def cpprb_version() -> str | None:
    if importlib.util.find_spec("cpprb") is None:
        return None
    from importlib.metadata import version
    return version("cpprb")


class CpprbPrioritized:
    """cpprb's PrioritizedReplayBuffer over the rows of ``ram`` (field -> array of every step)."""

    def __init__(self, ram: dict[str, np.ndarray], alpha: float, beta: float):
        from cpprb import PrioritizedReplayBuffer
        steps = len(next(iter(ram.values())))
        env_dict = {name: {"shape": array.shape[1:] or 1, "dtype": array.dtype} for name, array in ram.items()}
        start = time.perf_counter()
        self.buffer = PrioritizedReplayBuffer(steps, env_dict, alpha=alpha)
        chunk = 5000
        for begin in range(0, steps, chunk):
            self.buffer.add(**{name: array[begin: begin + chunk] for name, array in ram.items()})
        self.filled = time.perf_counter() - start
        self.steps, self.beta = steps, beta

    def reset(self) -> None:
        self.buffer.update_priorities(np.arange(self.steps), np.ones(self.steps))

    def timed(self, priorities, warm: int, count: int, batch: int, before, clock):
        """A timed run: priorities reset, ``warm`` untimed iterations, ``before()``, then ``count`` timed."""
        def run() -> float:
            self.reset()
            self.iterate(priorities, 0, warm, batch)
            before()
            start = clock()
            last = self.iterate(priorities, warm, warm + count, batch)
            elapsed = clock() - start
            del last
            return elapsed
        return run

    def iterate(self, priorities, begin: int, end: int, batch: int):
        """Iterations begin..end-1: sample, then update the sampled rows' priorities; the last batch."""
        rb, beta, sample = self.buffer, self.beta, None
        for i in range(begin, end):
            sample = rb.sample(batch, beta=beta)
            rb.update_priorities(sample["indexes"], priorities[i])
        return sample


def print_ratios(results: dict, limit: str) -> None:
    """numba over numpy for each prioritized way, and the P ways over cpprb's buffer."""
    lines = []
    for (group, how), (rate, _) in results.items():
        way = how.replace(", numba", ", {kernel}")
        if way != how and (group, way.format(kernel="numpy")) in results:
            numpy_rate = results[(group, way.format(kernel="numpy"))][0]
            lines.append(f"  {group:<14} {way.format(kernel='*'):<60} numba / numpy {rate / numpy_rate:.2f}")
    threads_limit = next((rate for (group, how), (rate, _) in results.items() if how.startswith(THREADS_LIMIT)), None)
    cpprb = results.get(("P", CPPRB))
    for (group, how), (rate, _) in results.items():
        if group != "P" or how == limit or how.startswith(THREADS_LIMIT) or how == CPPRB:
            continue
        if threads_limit is not None and how.endswith("parallel gathers"):
            lines.append(f"  P              {how:<60} / the threads' limit {rate / threads_limit:.2f}")
        if cpprb is not None:
            verdict = " (goal: above cpprb: " + ("met)" if rate > cpprb[0] else "NOT met)") if ", numba" in how else ""
            lines.append(f"  P              {how:<60} / cpprb {rate / cpprb[0]:.2f}{verdict}")
    if lines:
        print("Kernel ratios in this run:")
        print("\n".join(lines))


def print_kernels(use_cpprb: bool, repeats: int = 3, compile_time: bool = True) -> None:
    """Which kernels this run measures, the first use's compile time (``first_use(repeats)``; left out when not
    ``compile_time``), and whether cpprb is compared."""
    names = available()
    if "numba" in names and not compile_time:
        import numba
        print(f"sum tree kernels: numpy and numba {numba.__version__}; first use's compile time not measured "
              f"(--no-compile-time)", flush=True)
    elif "numba" in names:
        import numba
        times = first_use(repeats)
        print(f"sum tree kernels: numpy and numba {numba.__version__}; first use in a fresh process "
              f"{times['compile']:.2f} s with an empty numba cache (import numba {times['import numba']:.2f} s, "
              f"compiling {times['compile'] - times['import numba']:.2f} s), {times['cached']:.2f} s from the cache",
              flush=True)
    else:
        print("sum tree kernels: numpy only (numba is not installed: pip install 'memmap-replay[fast]')")
    version = cpprb_version()
    if not use_cpprb:
        print("cpprb: left out (--no-cpprb)")
    elif version is None:
        print("cpprb: not installed, not compared (pip install cpprb)")
