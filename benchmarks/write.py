"""Write benchmark (figure W of shared/bench/WORKLOAD.md) on the canonical "dreamer-small" workload.

200 episodes x 500 steps; step fields image uint8 (3,64,64), action float32 (6,), reward float32 (),
done bool (); meta field task_id int. About 1.23 GB per pass. Measured in one run, each figure the
median of ``--repeats`` passes, each pass into a fresh folder:

- per-step ``store``: ``with buffer.one_episode(task_id=...): buffer.store(...)`` for every step,
  from pre-generated numpy data (seeded), reward a Python float and done a Python bool;
- ``store_episode``: one call per episode with (T, ...) arrays;
- references of the same bytes: numpy memcpy into freshly allocated memory and into memory already
  touched, and a plain "fresh file write" (``os.pwrite`` of each episode's field bytes into one new
  file per field, as the library lays them out);
- the seed package ``memmap_replay_buffer`` (optional) through its per-step API with its defaults, on
  fewer episodes (it flushes every step).

Each figure is the median of ``--repeats`` timed passes (default 5) after ``--warmup`` untimed ones
(default 1). Before every pass, untimed: the previous pass's folder is removed, ``os.sync()`` writes
back its dirty pages (``--no-sync`` skips it) and 1.5x the pass's bytes of RAM are touched and freed
(``--no-warm`` skips it; see ``Runner`` for why). The timed region is the writing loop only (opening
the buffer is not timed); writes land in the page cache, write-back to the disk happens after.

    python benchmarks/write.py            # the canonical workload, about 1.5 minutes on 2 cores
    python benchmarks/write.py --quick    # a smoke run (10 episodes, 1 pass, no warm-up pass)
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

import workload  # benchmarks/workload.py: the canonical episodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from memmap_replay import ReplayBuffer  # noqa: E402

T_STEPS = 500
FIELDS, META_FIELDS = workload.FIELDS, workload.META_FIELDS
GOAL_STEPS_PER_S = 60_000
GOAL_MEMCPY_RATIO = 0.5
MB, GB = 1e6, 1e9


class Data(workload.Data):
    """The canonical episodes, plus what an environment loop hands to store(): Python floats and bools."""

    def __init__(self, episodes: int, steps: int, seed: int = 0):
        super().__init__(episodes, steps, seed)
        self.reward_list = self.reward.tolist()
        self.done_list = self.done.tolist()
        self.task_list = self.task_id.tolist()


class Runner:
    """Prepares every timed pass the same way (all untimed): the previous pass's folder is removed,
    ``os.sync()`` writes back its dirty pages, and ``warm_bytes`` of RAM are touched and freed.

    Why the warm-up: on a VM with free page reporting (as this Firecracker guest, kernel parameter
    page_reporting.page_reporting_order), RAM the guest freed a few seconds ago is handed back to the host,
    and the next first touch of each page costs a host fault: memcpy into such memory runs at about
    0.8 GB/s instead of 6 GB/s, and page-cache writes slow down alike. Touching the memory right before a
    pass makes the pass measure the library and the guest kernel, as on a bare machine."""

    def __init__(self, root: Path, sync: bool, warm_bytes: int):
        self.root, self.sync, self.warm_bytes, self.count = root, sync, warm_bytes, 0

    def fresh(self, tag: str) -> Path:
        """A new folder for one pass (not created yet)."""
        for child in self.root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        self.count += 1
        folder = self.root / f"{tag}-{self.count}"
        if self.sync:
            os.sync()
        if self.warm_bytes:
            np.ones(self.warm_bytes, dtype=np.uint8)  # touched, then freed at once
        gc.collect()
        return folder


def median_of(repeats: int, run, warmup: int = 1) -> tuple[float, list[float]]:
    """Median seconds of ``repeats`` timed runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    times = [run() for _ in range(repeats)]
    return statistics.median(times), times


# ---- the measured passes ---------------------------------------------------------------------------------


def per_step_pass(runner: Runner, data: Data) -> float:
    buffer = ReplayBuffer(runner.fresh("store"), data.episodes, data.steps, fields=FIELDS,
                          meta_fields=META_FIELDS, overwrite=True)
    image, action, rewards, dones, tasks = data.image, data.action, data.reward_list, data.done_list, data.task_list
    start = time.perf_counter()
    for e in range(data.episodes):
        im, ac, rw, dn = image[e], action[e], rewards[e], dones[e]
        with buffer.one_episode(task_id=tasks[e]):
            for t in range(data.steps):
                buffer.store(image=im[t], action=ac[t], reward=rw[t], done=dn[t])
    elapsed = time.perf_counter() - start
    assert buffer.num_steps == data.total_steps
    buffer.close()
    return elapsed


def store_episode_pass(runner: Runner, data: Data) -> float:
    buffer = ReplayBuffer(runner.fresh("episode"), data.episodes, data.steps, fields=FIELDS,
                          meta_fields=META_FIELDS, overwrite=True)
    start = time.perf_counter()
    for e in range(data.episodes):
        buffer.store_episode(image=data.image[e], action=data.action[e], reward=data.reward[e],
                             done=data.done[e], task_id=data.task_list[e])
    elapsed = time.perf_counter() - start
    assert buffer.num_steps == data.total_steps
    buffer.close()
    return elapsed


def memcpy_passes(runner: "Runner", data: Data, repeats: int) -> tuple[float, float]:
    """Seconds to copy data.nbytes in RAM: into freshly allocated memory, and into touched memory."""
    source = np.empty(data.nbytes, dtype=np.uint8)
    offset = 0
    for array in (data.image, data.action, data.reward, data.done):  # the same bytes
        flat = array.reshape(-1).view(np.uint8)
        source[offset:offset + flat.size] = flat
        offset += flat.size
    fresh_times, hot_times = [], []
    for _ in range(repeats):
        runner.fresh("memcpy")
        start = time.perf_counter()
        target = np.empty_like(source)  # untouched pages: the copy pays the page faults
        np.copyto(target, source)
        fresh_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        np.copyto(target, source)  # the same pages again
        hot_times.append(time.perf_counter() - start)
        del target
    return statistics.median(fresh_times), statistics.median(hot_times)


def fresh_file_pass(runner: Runner, data: Data) -> float:
    """os.pwrite of every episode's field bytes into one new file per field, the library's layout."""
    folder = runner.fresh("pwrite")
    folder.mkdir()
    arrays = dict(image=data.image, action=data.action, reward=data.reward, done=data.done)
    start = time.perf_counter()
    for name, array in arrays.items():
        fd = os.open(folder / f"{name}.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            position = 0
            for e in range(data.episodes):
                view = memoryview(array[e]).cast("B")
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], position + done)
                position += len(view)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def seed_pass(runner: Runner, data: Data, episodes: int) -> float:
    from memmap_replay_buffer import ReplayBuffer as SeedBuffer

    buffer = SeedBuffer(str(runner.fresh("seed")), episodes, data.steps, fields=FIELDS, meta_fields=META_FIELDS,
                        overwrite=True)
    image, action, rewards, dones, tasks = data.image, data.action, data.reward_list, data.done_list, data.task_list
    start = time.perf_counter()
    for e in range(episodes):
        im, ac, rw, dn = image[e], action[e], rewards[e], dones[e]
        with buffer.one_episode(task_id=tasks[e]):
            for t in range(data.steps):
                buffer.store(image=im[t], action=ac[t], reward=rw[t], done=dn[t])
    elapsed = time.perf_counter() - start
    del buffer
    gc.collect()
    return elapsed


def seed_available() -> bool:
    try:
        import memmap_replay_buffer  # noqa: F401
    except Exception:
        return False
    return True


# ---- main ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 episodes, 1 repeat, 1 seed episode")
    parser.add_argument("--episodes", type=int, default=None, help="episodes of 500 steps (default 200)")
    parser.add_argument("--repeats", type=int, default=None, help="timed passes per figure; medians "
                                                                  "are printed (default 5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed passes before each figure's "
                                                                 "timed ones (default 1)")
    parser.add_argument("--seed-episodes", type=int, default=None,
                        help="episodes written through the seed package (default 2; it flushes every step)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a temporary folder is made inside it and removed at the end; "
                             "default: the current directory, so the same disk as the project)")
    parser.add_argument("--no-sync", dest="sync", action="store_false", help="do not os.sync() before each pass")
    parser.add_argument("--no-warm", dest="warm", action="store_false",
                        help="do not touch 1.5x the pass's bytes of RAM before each pass (see Runner)")
    parser.add_argument("--no-seed", dest="seed", action="store_false", help="skip the seed package")
    args = parser.parse_args(argv)

    episodes = args.episodes or (10 if args.quick else 200)
    repeats = args.repeats or (1 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 1)
    seed_episodes = min(args.seed_episodes or (1 if args.quick else 2), episodes)
    if episodes < 1 or repeats < 1 or seed_episodes < 1 or warmup < 0:
        parser.error("--episodes, --repeats and --seed-episodes must be positive, --warmup not negative")
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-write-", dir=parent))

    print(f"memmap_replay write benchmark: {episodes} episodes x {T_STEPS} steps, median of {repeats} timed "
          f"pass(es) after {warmup} untimed")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.2f}, kernel {platform.release()}")
    print(f"folder {root}; before each pass: os.sync() {args.sync}, RAM warm-up {args.warm}")
    started = time.perf_counter()
    print("generating data (seeded) ...", flush=True)
    data = Data(episodes, T_STEPS)
    n, nbytes = data.total_steps, data.nbytes
    print(f"  {n} steps x {data.row_nbytes} B/step = {nbytes / GB:.3f} GB")
    results: dict[str, float] = {}
    try:
        runner = Runner(root, args.sync, int(1.5 * nbytes) if args.warm else 0)

        def report(label, seconds, times, steps=n, size=nbytes):
            spread = ", ".join(f"{t:.3g}" for t in times)
            print(f"  {label:<28} {steps / seconds:>12,.0f} steps/s {size / seconds / MB:>9,.0f} MB/s   [{spread}] s",
                  flush=True)

        print("per-step store ...", flush=True)
        t, times = median_of(repeats, lambda: per_step_pass(runner, data), warmup)
        results["step"] = t
        report("store (per step)", t, times)

        print("store_episode ...", flush=True)
        t, times = median_of(repeats, lambda: store_episode_pass(runner, data), warmup)
        results["episode"] = t
        report("store_episode", t, times)

        print("fresh file write (os.pwrite per episode and field into new files) ...", flush=True)
        t, times = median_of(repeats, lambda: fresh_file_pass(runner, data), warmup)
        results["pwrite"] = t
        report("fresh file write", t, times)

        print("memcpy ...", flush=True)
        results["memcpy_fresh"], results["memcpy_hot"] = memcpy_passes(runner, data, repeats)
        print(f"  into fresh memory {nbytes / results['memcpy_fresh'] / GB:.2f} GB/s, "
              f"into touched memory {nbytes / results['memcpy_hot'] / GB:.2f} GB/s", flush=True)

        if args.seed and seed_available():
            print(f"seed package memmap_replay_buffer, per-step store, {seed_episodes} episode(s), its defaults ...",
                  flush=True)
            t, times = median_of(repeats, lambda: seed_pass(runner, data, seed_episodes), warmup)
            results["seed"] = t
            report("seed store (per step)", t, times, steps=seed_episodes * T_STEPS,
                   size=seed_episodes * T_STEPS * data.row_nbytes)
        elif args.seed:
            print("seed package memmap_replay_buffer not importable: skipped (pip install memmap-replay-buffer)")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    step_rate = n / results["step"]
    episode_rate = n / results["episode"]
    episode_mbs = nbytes / results["episode"] / MB
    step_mbs = nbytes / results["step"] / MB
    pwrite_mbs = nbytes / results["pwrite"] / MB
    fresh_mbs = nbytes / results["memcpy_fresh"] / MB
    hot_mbs = nbytes / results["memcpy_hot"] / MB

    def ok(flag: bool) -> str:
        return "met" if flag else "NOT met"

    rows = [
        ("store (per step)", f"{step_rate:,.0f} steps/s", f"{step_mbs:,.0f} MB/s",
         f"{step_rate / GOAL_STEPS_PER_S:.2f} x goal {GOAL_STEPS_PER_S:,} steps/s "
         f"({ok(step_rate >= GOAL_STEPS_PER_S)})"),
        ("store_episode", f"{episode_rate:,.0f} steps/s", f"{episode_mbs:,.0f} MB/s",
         f"{episode_mbs / hot_mbs:.3f} x memcpy touched; goal >= {GOAL_MEMCPY_RATIO} "
         f"({ok(episode_mbs / hot_mbs >= GOAL_MEMCPY_RATIO)})"),
        ("", "", "", f"{episode_mbs / fresh_mbs:.3f} x memcpy fresh "
                     f"({ok(episode_mbs / fresh_mbs >= GOAL_MEMCPY_RATIO)})"),
        ("", "", "", f"{episode_mbs / pwrite_mbs:.3f} x fresh file write"),
        ("fresh file write", f"{n / results['pwrite']:,.0f} steps/s", f"{pwrite_mbs:,.0f} MB/s",
         f"{pwrite_mbs / hot_mbs:.3f} x memcpy touched, {pwrite_mbs / fresh_mbs:.3f} x memcpy fresh"),
        ("memcpy, fresh memory", "", f"{fresh_mbs:,.0f} MB/s", f"{fresh_mbs / 1000:.2f} GB/s"),
        ("memcpy, touched memory", "", f"{hot_mbs:,.0f} MB/s", f"{hot_mbs / 1000:.2f} GB/s"),
    ]
    if "seed" in results:
        seed_rate = seed_episodes * T_STEPS / results["seed"]
        rows.append(("seed store (per step)", f"{seed_rate:,.0f} steps/s",
                     f"{seed_rate * data.row_nbytes / MB:,.1f} MB/s",
                     f"ours per-step / seed = {step_rate / seed_rate:,.0f} x ({seed_episodes} episode(s))"))
    print()
    print(f"Write figures: {episodes} episodes x {T_STEPS} steps = {n:,} steps, {nbytes / GB:.3f} GB; "
          f"median of {repeats} pass(es)")
    header = ("what", "rate", "bandwidth", "ratio / goal")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [header] + rows]
    print(lines[0])
    print("-" * max(len(line) for line in lines))
    print("\n".join(lines[1:]))
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} cpus: other processes running during the passes widen the spread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
