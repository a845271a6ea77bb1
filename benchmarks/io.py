"""Import / export benchmark on the canonical "dreamer-small" workload (shared/bench/WORKLOAD.md).

200 episodes x 500 steps; step fields image uint8 (3,64,64), action float32 (6,), reward float32 (),
done bool (); meta field task_id int; about 1.23 GB. The store is written once with ``store_episode``
from seeded data. Then, each figure the median of ``--repeats`` timed passes (default 3), each pass into
a fresh target (the previous one removed, ``os.sync()``, untimed):

- reference: ``np.save`` of each field's bytes (the whole store's rows, read from the store's ``.npy``
  files beforehand) into new ``.npy`` files, and ``np.load`` of those files back into RAM: the plain way
  to move the same bytes, measured in the same run; the ratios are to it (export to ``np.save``, import
  to ``np.load``);
- ``export_d4rl`` to ``.hdf5`` and to ``.npz`` (uncompressed), and ``import_d4rl`` of those files;
- ``export_minari`` (observation = image, ``missing_final='repeat'``: the canonical episodes have no final
  observation) into a scratch ``MINARI_DATASETS_PATH``, and ``import_minari`` of it (skipped without
  minari, or with ``--no-minari``).

Rates are steps/s and MB/s of step data (1.23 GB per pass at full size). Imports and exports go episode by
episode through the page cache, so the figures are memory-bound copies plus each format's own overhead
(HDF5's per-dataset calls, zip's CRC, minari's per-episode file opens and metadata rewrites).

    python benchmarks/io.py            # the canonical workload, a few minutes on 2 cores
    python benchmarks/io.py --quick    # a smoke run (6 episodes, 1 repeat), a few seconds
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
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

from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.interop import export_d4rl, export_minari, import_d4rl, import_minari  # noqa: E402

T_STEPS = 500
MB = 1e6


def write_store(folder: Path, data: workload.Data) -> None:
    with ReplayBuffer(folder, data.episodes, T_STEPS, fields=workload.FIELDS,
                      meta_fields=workload.META_FIELDS) as buffer:
        for e in range(data.episodes):
            buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e], done=data.done[e],
                                 task_id=int(data.task_id[e]))


class Bench:
    """Timed passes into fresh targets under ``scratch``, and the table of figures."""

    def __init__(self, scratch: Path, steps: int, nbytes: int, repeats: int, sync: bool):
        self.scratch, self.steps, self.nbytes, self.repeats, self.sync = scratch, steps, nbytes, repeats, sync
        self.rows: list[tuple[str, float, list[float], str | None]] = []

    def clean(self) -> None:
        for child in self.scratch.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        if self.sync:
            os.sync()
        gc.collect()

    def measure(self, label: str, run, prepare=None, reference: str | None = None) -> float:
        """``prepare()`` (untimed) then ``run()`` (timed), ``repeats`` times; the median seconds."""
        times = []
        for _ in range(self.repeats):
            self.clean()
            if prepare is not None:
                prepare()
                if self.sync:
                    os.sync()
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        seconds = statistics.median(times)
        self.rows.append((label, seconds, times, reference))
        spread = ", ".join(f"{t:.3g}" for t in times)
        print(f"  {label:<34} {self.steps / seconds:>11,.0f} steps/s {self.nbytes / seconds / MB:>8,.0f} MB/s   "
              f"[{spread}] s", flush=True)
        return seconds

    def table(self) -> None:
        seconds = {label: s for label, s, _, _ in self.rows}
        print("\nImport/export figures (medians; ratio: the reference's time / ours, so 1.0 is as fast as numpy)")
        print(f"  {'what':<34} {'steps/s':>11} {'MB/s':>8}  {'x reference':>12}")
        for label, s, _, reference in self.rows:
            ratio = f"{seconds[reference] / s:>12.2f}" if reference in seconds else f"{'':>12}"
            print(f"  {label:<34} {self.steps / s:>11,.0f} {self.nbytes / s / MB:>8,.0f}  {ratio}")


def numpy_reference(bench: Bench, store: Path) -> None:
    fields = [name for name in workload.FIELDS]
    ram = {name: np.array(np.load(store / "steps" / f"{name}.npy", mmap_mode="r")[:bench.steps]) for name in fields}
    target = bench.scratch / "npy"

    def save() -> None:
        target.mkdir()
        for name, array in ram.items():
            np.save(target / f"{name}.npy", array)

    def load() -> None:
        loaded = [np.load(target / f"{name}.npy") for name in fields]
        assert sum(array.nbytes for array in loaded) == bench.nbytes

    bench.measure("np.save (reference)", save)
    bench.measure("np.load (reference)", load, prepare=save)


def d4rl_passes(bench: Bench, store: Path) -> None:
    for suffix in (".hdf5", ".npz"):
        path = bench.scratch / f"data{suffix}"
        bench.measure(f"export_d4rl {suffix}", lambda: export_d4rl(store, path, observation="image"),
                      reference="np.save (reference)")
        bench.measure(f"import_d4rl {suffix}", lambda: import_d4rl(path, bench.scratch / "imported"),
                      prepare=lambda: export_d4rl(store, path, observation="image"), reference="np.load (reference)")


def minari_passes(bench: Bench, store: Path) -> None:
    root = bench.scratch / "minari"
    def export():
        return export_minari(store, "bench/canonical-v0", datasets_path=root, observation="image",
                                       missing_final="repeat")
    bench.measure("export_minari", export, reference="np.save (reference)")
    bench.measure("import_minari", lambda: import_minari(root / "bench" / "canonical-v0", bench.scratch / "imported"),
                  prepare=export, reference="np.load (reference)")


def stats_passes(bench: Bench, store: Path, episodes: int) -> None:
    """``buffer.stats()`` on the canonical store, and the cost of keeping statistics on commit: the same
    episodes stored with and without ``track_stats``, alternating, medians (goal: at most 10% slower)."""
    with ReplayBuffer.from_folder(store, read_only=True) as reader:
        bench.measure("stats() (running moments)", reader.stats)
        bench.measure("stats(recompute=True)", lambda: reader.stats(recompute=True))
    # one store, tracking switched on and off episode by episode (disk and page-cache state alike for both)
    data = workload.Data(episodes, T_STEPS)
    times: dict[bool, list[float]] = {True: [], False: []}
    bench.clean()
    with ReplayBuffer(bench.scratch / "s", episodes, T_STEPS, fields=workload.FIELDS,
                      meta_fields=workload.META_FIELDS, circular=True) as buffer:
        for repeat in range(bench.repeats + 1):  # the first round warms up, untimed
            for e in range(episodes):
                track = bool((e + repeat) % 2)
                buffer.episode_store.track_stats = track
                started = time.perf_counter()
                buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e],
                                     done=data.done[e], task_id=int(data.task_id[e]))
                if repeat:
                    times[track].append(time.perf_counter() - started)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"  store_episode without stats {off * 1e3:.2f} ms, with stats {on * 1e3:.2f} ms per episode "
          f"(medians of {len(times[True])}): {on / off:.3f}x (goal <= 1.10)", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 6 episodes, 1 repeat")
    parser.add_argument("--episodes", type=int, default=None, help="episodes of 500 steps (default 200)")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per figure (default 3)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a temporary folder is made inside it and removed at the end; "
                             "default: the current directory)")
    parser.add_argument("--no-sync", dest="sync", action="store_false", help="do not os.sync() before each pass")
    parser.add_argument("--no-minari", dest="minari", action="store_false", help="skip the Minari passes")
    args = parser.parse_args(argv)
    episodes = args.episodes or (6 if args.quick else 200)
    repeats = args.repeats or (1 if args.quick else 3)
    if episodes < 1 or repeats < 1:
        parser.error("--episodes and --repeats must be positive")
    minari = args.minari and importlib.util.find_spec("minari") is not None
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-io-", dir=parent))
    print(f"memmap_replay import/export benchmark: {episodes} episodes x {T_STEPS} steps, median of {repeats} pass(es)")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.2f}; folder {root}; os.sync() before each pass: {args.sync}")
    try:
        data = workload.Data(episodes, T_STEPS)
        store, scratch = root / "store", root / "scratch"
        scratch.mkdir()
        write_store(store, data)
        print(f"  store: {data.total_steps} steps x {data.row_nbytes} B/step = {data.nbytes / 1e9:.3f} GB", flush=True)
        del data.image  # the store holds it now
        stats_episodes = min(episodes, 40)
        bench = Bench(scratch, data.total_steps, data.nbytes, repeats, args.sync)
        numpy_reference(bench, store)
        d4rl_passes(bench, store)
        if minari:
            minari_passes(bench, store)
        else:
            print("  (Minari passes skipped: minari is not installed, or --no-minari)")
        stats_passes(bench, store, stats_episodes)
        bench.clean()
        bench.table()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
