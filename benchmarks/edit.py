"""Edit benchmark (issue 31): what an edit in place costs against the store's size.

Stores of small vector fields (obs float32 (4,), action float32 (2,), reward float32 (): 28 bytes a step; meta
fields task_id int, 0, and group int, episode ``e``'s ``e % 100``, so each group is 1% of the episodes) of 100
thousand, 1 million and 10 million steps, in episodes of 1,000 steps (100, 1,000 and 10,000 episodes; the 10M
store is 280 MB). Each is written with ``batched_episode`` blocks of 100 episodes from seeded data (the fastest
public write path here, about twice ``store_episode``'s rate on episodes this small), closed, ``os.sync()``-ed, and
reopened with ``ReplayBuffer.from_folder``. Then, per store, the verbs of ``VERBS`` (a table:
a new verb such as ``add_field`` or ``compact`` is one more row), each timed ``--repeats`` times (medians printed),
the repeats interleaved (one of each verb in turn) so that a change of load on the machine touches them alike:

- ``delete_episodes`` of 10 random live episodes (one call, one commit);
- ``trim`` of 10 random live episodes, each ``trim(id, stop=-10)`` (its last 10 steps cut: 10 calls, 10 commits);
- ``relabel`` of 10 random live episodes (one call: ``relabel(ids, task_id=...)``);
- ``relabel`` by a filter matching 1% of the episodes (``relabel({"group": k}, group=100 + k)``, a fresh ``k`` each
  time, the group of an episode never deleted): 1 episode of the 100k store, 100 of the 10M one, so this row is
  expected to grow with the episodes it changes;
- then, the store closed, ``write_manifest`` run (untimed) and the store reopened: ``relabel`` of 10 episodes with a
  current checksum manifest, which the edit keeps current (the files it wrote are hashed again).

Every repeat takes fresh ids (episodes never edited before by that verb; a deleted one is never named again). Before
each timed run ``os.sync()`` writes back dirty pages (untimed), so that the bytes counted are the edit's own:
"written" is the growth of ``write_bytes`` in ``/proc/self/io`` over the timed run (bytes this process sent towards
the disk, page by page, at the moment it dirtied them: meta.json, the journal, the episode-table and meta pages
written in place, the card), and "write()" the growth of ``wchar`` (bytes passed to write calls). The time is the
wall clock of the verb's calls, and beside it this process's CPU time (``time.process_time``: without the waits
for the disk and for other processes, steadier on a shared machine). The stores are opened with ``durable=False``,
the default (each file an edit replaces is still fsynced before its rename: meta.json twice, the journal, the
card's two files); ``--durable`` adds the fsyncs of folders and of the files written in place.

For reference, the edits that make new stores (their cost follows the rows: they copy them) on the smallest store
(after its edits): ``merge(out, store, store)`` and ``split(store, {"train": 0.9, "val": 0.1}, seed=0)``, each into
fresh folders (removed, untimed, between repeats).

The table gives, per verb, the median ms per store size, the ratio of the largest store's time to the smallest's
("flat" means close to 1: the cost follows the episodes changed, not the store's size), and the bytes written per
store size.

    python benchmarks/edit.py            # 100k, 1M and 10M steps: under a minute on 2 cores
    python benchmarks/edit.py --quick    # a smoke run (stores of 5,000 and 50,000 steps, 2 repeats), seconds
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from memmap_replay import ReplayBuffer, merge, returns_to_go, split, write_manifest  # noqa: E402

FIELDS = dict(obs=("float", 4), action=("float", 2), reward="float")
META_FIELDS = dict(task_id="int", group="int")
ROW_BYTES = 4 * 4 + 2 * 4 + 4
LABELS = 100  # group = episode % LABELS: each value names 1% of the episodes
BLOCK = 100  # episodes per batched_episode block
PICK = 10  # episodes an edit by ids names
SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (5_000, 50_000)
SEED = 1234
MB = 1e6


# ---- the verbs ------------------------------------------------------------------------------------------------


@dataclass
class Verb:
    """A row of the table. ``run(buffer, ids, repeat)`` makes the edit (timed); ``ids`` are ``picks`` fresh live
    episode ids: from the pool of episodes the verb removes (``removes``: never named again) or from the pool of
    episodes that stay live (shared by the verbs that keep them, each verb going through it once; ``distinct``: no
    two of a verb's ids with the same ``id % LABELS``). ``manifest``: measured after the others, with a current
    checksum manifest."""

    name: str
    run: Callable[[ReplayBuffer, list[int], int], Any]
    picks: int = 0
    removes: bool = False
    distinct: bool = False
    manifest: bool = False
    counts: bool = False  # print how many episodes each repeat changed (what the call returned)


def relabel_filter(buffer: ReplayBuffer, ids: list[int], repeat: int) -> int:
    """Relabel the episodes of one group (1%): the group of ``ids[0]``, a live episode (episode ``e``, id ``e``, is
    in group ``e % LABELS``), to a value no filter names (so no later repeat matches them again)."""
    label = ids[0] % LABELS
    return buffer.relabel({"group": label}, group=LABELS + label)


VERBS = [
    Verb(f"delete_episodes ({PICK})", lambda b, ids, r: b.delete_episodes(ids), PICK, removes=True),
    Verb(f"trim x {PICK} (stop=-10)", lambda b, ids, r: [b.trim(i, stop=-10) for i in ids], PICK),
    Verb(f"relabel ({PICK} ids)", lambda b, ids, r: b.relabel(ids, task_id=-1 - r), PICK),
    Verb(f"relabel (filter, {100 // LABELS}%)", relabel_filter, 1, distinct=True, counts=True),
    Verb(f"relabel ({PICK} ids), manifest", lambda b, ids, r: b.relabel(ids, task_id=-1 - r), PICK, manifest=True),
]


# ---- measuring ------------------------------------------------------------------------------------------------


def io_counters() -> dict[str, int] | None:
    """This process's write_bytes and wchar (``/proc/self/io``), or None where there is none."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    values = dict(line.split(": ") for line in text.splitlines() if ": " in line)
    return {"written": int(values["write_bytes"]), "write()": int(values["wchar"])}


@dataclass
class Figure:
    times: list[float]
    cpu: list[float]
    written: list[int]
    calls: list[int]
    changed: list[int]

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def cpu_seconds(self) -> float:
        return statistics.median(self.cpu)

    @property
    def nbytes(self) -> float | None:
        return statistics.median(self.written) if self.written else None


def timed(run: Callable[[], Any], figure: Figure) -> Any:
    """``run()`` after an untimed ``os.sync()``: its seconds and bytes written go into ``figure``."""
    os.sync()
    before = io_counters()
    started, cpu = time.perf_counter(), time.process_time()
    result = run()
    figure.times.append(time.perf_counter() - started)
    figure.cpu.append(time.process_time() - cpu)
    after = io_counters()
    if before is not None and after is not None:
        figure.written.append(after["written"] - before["written"])
        figure.calls.append(after["write()"] - before["write()"])
    return result


def kib(nbytes: float | None) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 1024:,.0f}"


def build(folder: Path, episodes: int, steps: int, seed: int) -> float:
    """A store of ``episodes`` x ``steps`` written with ``batched_episode`` blocks; its seconds."""
    rng = np.random.default_rng(seed)
    elapsed = 0.0
    with ReplayBuffer(folder, episodes, steps, fields=FIELDS, meta_fields=META_FIELDS) as buffer:
        for begin in range(0, episodes, BLOCK):
            n = min(BLOCK, episodes - begin)
            obs = rng.standard_normal((steps, n, 4), dtype=np.float32)
            action = rng.standard_normal((steps, n, 2), dtype=np.float32)
            reward = rng.standard_normal((steps, n), dtype=np.float32)
            started = time.perf_counter()
            with buffer.batched_episode(n):
                buffer.store_meta_batch(task_id=np.zeros(n, dtype=np.int64), group=np.arange(begin, begin + n) % LABELS)
                for t in range(steps):
                    buffer.store_batch(obs=obs[t], action=action[t], reward=reward[t])
            elapsed += time.perf_counter() - started
        if not np.array_equal(buffer.episode_ids, np.arange(episodes)):  # (relabel_filter counts on it)
            raise SystemExit(f"the episodes of a new store should have ids 0..{episodes - 1}, in the order written")
    return elapsed


class Pools:
    """Fresh live ids for the verbs: a seeded shuffle of the store's ids, removed ones from its front, kept ones
    from its back (each verb that keeps its episodes walking the back part on its own)."""

    def __init__(self, ids: np.ndarray, verbs: list[Verb], repeats: int, seed: int):
        self.order = [int(i) for i in np.random.default_rng(seed).permutation(ids)]
        self.gone = repeats * sum(v.picks for v in verbs if v.removes)
        kept = repeats * max([v.picks for v in verbs if not v.removes] + [0])
        if self.gone + kept > len(self.order):
            raise SystemExit(f"{len(self.order)} episodes are too few for {repeats} repeats of these verbs "
                             f"({self.gone + kept} fresh ids needed): fewer --repeats, or bigger stores")
        self.used: dict[str, int] = {}
        self.labels: dict[str, set[int]] = {}

    def take(self, verb: Verb) -> list[int]:
        start = self.used.get(verb.name, 0)
        if verb.removes:  # (one such verb: measure_store checks)
            self.used[verb.name] = start + verb.picks
            return self.order[start:start + verb.picks]
        kept = self.order[self.gone:][::-1]
        if not verb.distinct:
            self.used[verb.name] = start + verb.picks
            return kept[start:start + verb.picks]
        labels = self.labels.setdefault(verb.name, set())
        taken = []
        for position in range(start, len(kept)):
            if kept[position] % LABELS not in labels:
                labels.add(kept[position] % LABELS)
                taken.append(kept[position])
                if len(taken) == verb.picks:
                    break
        self.used[verb.name] = position + 1
        return taken


def measure_store(folder: Path, args, verbs: list[Verb]) -> dict[str, Figure]:
    """Every verb's figures on the store in ``folder``: the plain verbs interleaved, then the manifest ones."""
    figures = {verb.name: Figure([], [], [], [], []) for verb in verbs}
    buffer = ReplayBuffer.from_folder(folder, durable=args.durable)
    removing = [verb for verb in verbs if verb.removes]
    if len(removing) > 1:
        raise SystemExit("one verb that removes episodes at a time (Pools shares the front of the order)")
    pools = Pools(buffer.episode_ids, verbs, args.repeats, SEED)
    try:
        for phase in (False, True):
            batch = [verb for verb in verbs if verb.manifest == phase]
            if phase and batch:
                buffer.close()
                write_manifest(folder)
                buffer = ReplayBuffer.from_folder(folder, durable=args.durable)
            for repeat in range(args.repeats):
                for verb in batch:
                    ids = pools.take(verb) if verb.picks else []
                    result = timed(lambda: verb.run(buffer, ids, repeat), figures[verb.name])
                    if isinstance(result, int):  # (episodes changed, as the verbs return it)
                        figures[verb.name].changed.append(result)
    finally:
        buffer.close()
    return figures


def row_edits(folder: Path, args) -> None:
    """The edits in place whose cost follows the rows by nature, once each on the store the verbs left: add_field
    of returns_to_go() (every reward read, a new field written) and compact() (every live row after the first
    deleted or trimmed episode moved, through the free rows: twice)."""
    with ReplayBuffer.from_folder(folder, durable=args.durable) as buffer:
        steps = buffer.num_steps
        figure = Figure([], [], [], [], [])
        timed(lambda: buffer.add_field("return_to_go", returns_to_go()), figure)
        print(f"  {'add_field(returns_to_go())':<30} {figure.seconds * 1e3:>9,.1f} ms  {steps:,} steps "
              f"({steps / figure.seconds / 1e6:,.1f} M steps/s); written {kib(figure.nbytes)} KiB", flush=True)
        figure = Figure([], [], [], [], [])
        report = timed(buffer.compact, figure)
        print(f"  {'compact()':<30} {figure.seconds * 1e3:>9,.1f} ms  {report.moved_episodes:,} episodes moved, "
              f"{report.copied_rows:,} rows copied ({report.copied_rows / figure.seconds / 1e6:,.1f} M rows/s), rows "
              f"{report.rows_before:,} -> {report.rows_after:,}, {report.freed_bytes / MB:,.1f} MB of disk freed, "
              f"{report.commits} commits; written {kib(figure.nbytes)} KiB", flush=True)


def reference_edits(folder: Path, scratch: Path, args, steps: int) -> list[tuple[str, Figure, int, str]]:
    """merge (the store twice) and split (90/10) of ``folder`` into fresh folders under ``scratch``."""
    rows = []
    ways = [("merge(out, store, store)", lambda out: merge(out, folder, folder)),
            ("split 0.9 / 0.1", lambda out: split(folder, {"train": 0.9, "val": 0.1}, out=out, seed=0))]
    for label, run in ways:
        figure, report = Figure([], [], [], [], []), None
        for repeat in range(args.repeats):
            out = scratch / f"out-{repeat}"
            report = timed(lambda: run(out), figure)
            shutil.rmtree(out)
        outputs = report.outputs.values() if report is not None else []
        copied = sum(int(o["steps"]) for o in outputs)
        how = ", ".join(sorted({str(o["data"]) for o in outputs}))
        rows.append((label, figure, copied, how))
        print(f"  {label:<30} {figure.seconds * 1e3:>9,.1f} ms  {copied:,} steps "
              f"({copied * ROW_BYTES / figure.seconds / MB:,.0f} MB/s of step data; rows {how}); "
              f"written {kib(figure.nbytes)} KiB   [{', '.join(f'{t * 1e3:.1f}' for t in figure.times)}]", flush=True)
    return rows


def size_name(steps: int) -> str:
    return f"{steps / 1e6:g}M" if steps >= 1_000_000 else f"{steps / 1e3:g}k"


def table(sizes: list[int], results: dict[int, dict[str, Figure]], verbs: list[Verb], episodes: dict[int, int]) -> None:
    names = [size_name(s) for s in sizes]
    first, last = sizes[0], sizes[-1]
    print(f"\nEdit figures: ms per edit (median), by store size ({' / '.join(f'{episodes[s]:,}' for s in sizes)} "
          f"episodes); x: the {names[-1]} store's time / the {names[0]} store's (flat: close to 1); KiB written "
          f"(write_bytes of /proc/self/io) per store size; CPU: this process's CPU time (no waits for the disk or "
          f"for other processes: steadier on a shared machine)")
    ms_head = "".join(f"{n + ' ms':>11}" for n in names)
    cpu_head = "".join(f"{n + ' CPU':>10}" for n in names)
    print(f"  {'verb':<30}{ms_head} {'x':>6}{cpu_head} {'x CPU':>6}   KiB written ({' / '.join(names)})")
    for verb in verbs:
        figures = [results[s][verb.name] for s in sizes]
        ms = "".join(f"{f.seconds * 1e3:>11,.2f}" for f in figures)
        cpu = "".join(f"{f.cpu_seconds * 1e3:>10,.2f}" for f in figures)
        ratio = results[last][verb.name].seconds / results[first][verb.name].seconds
        cpu_ratio = results[last][verb.name].cpu_seconds / max(results[first][verb.name].cpu_seconds, 1e-9)
        written = " / ".join(kib(f.nbytes) for f in figures)
        print(f"  {verb.name:<30}{ms} {ratio:>6.2f}{cpu} {cpu_ratio:>6.2f}   {written}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: stores of 5,000 and 50,000 steps (episodes "
                                                             "of 100 steps), 2 repeats")
    parser.add_argument("--sizes", type=lambda text: [int(float(v)) for v in text.split(",")], default=None,
                        help="store sizes in steps, comma-separated (default 1e5,1e6,1e7)")
    parser.add_argument("--episode-steps", type=int, default=None, help="steps per episode (default 1000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per figure; medians are printed "
                                                                  "(default 5)")
    parser.add_argument("--durable", action="store_true", help="open the stores with durable=True (fsyncs timed)")
    parser.add_argument("--no-reference", dest="reference", action="store_false", help="skip merge and split")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a scratch folder is made inside it and removed at the end unless "
                             "--keep; default: the current directory, so the same disk as the project)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and its stores")
    args = parser.parse_args(argv)
    sizes = sorted(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    steps = args.episode_steps or (100 if args.quick else 1000)
    args.repeats = args.repeats or (2 if args.quick else 5)
    if min(*sizes, steps, args.repeats) < 1:
        parser.error("--sizes, --episode-steps and --repeats must be positive")
    episodes = {size: max(1, size // steps) for size in sizes}
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-edit-", dir=parent))
    counters = io_counters() is not None
    print(f"memmap_replay edit benchmark: stores of {', '.join(f'{s:,}' for s in sizes)} steps in episodes of "
          f"{steps:,} steps ({', '.join(f'{episodes[s]:,}' for s in sizes)} episodes), {ROW_BYTES} bytes a step; "
          f"median of {args.repeats} repeat(s); durable={args.durable}")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cpus, load average "
          f"{os.getloadavg()[0]:.2f}, kernel {platform.release()}; bytes written from /proc/self/io: "
          f"{'yes' if counters else 'not available here'}")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'})", flush=True)
    results: dict[int, dict[str, Figure]] = {}
    try:
        warm = root / "warm-up"  # every verb once, untimed (imports, first calls), on a store of its own
        build(warm, 4 * PICK, 200, seed=0)
        measure_store(warm, argparse.Namespace(repeats=1, durable=args.durable), VERBS)
        shutil.rmtree(warm)
        for number, size in enumerate(sizes):
            folder = root / f"store-{size_name(size)}"
            seconds = build(folder, episodes[size], steps, seed=number + 1)
            os.sync()
            print(f"{size_name(size)} steps: wrote {episodes[size] * steps:,} steps "
                  f"({episodes[size] * steps * ROW_BYTES / MB:,.0f} MB) in {seconds:.1f} s", flush=True)
            results[size] = measure_store(folder, args, VERBS)
            for verb in VERBS:
                figure = results[size][verb.name]
                calls = statistics.median(figure.calls) if figure.calls else None
                changed = f", episodes changed {figure.changed}" if verb.counts else ""
                print(f"  {verb.name:<30} {figure.seconds * 1e3:>9,.2f} ms ({figure.cpu_seconds * 1e3:,.2f} CPU)  "
                      f"written {kib(figure.nbytes):>6} KiB, "
                      f"write() {kib(calls):>6} KiB{changed}   [{', '.join(f'{t * 1e3:.2f}' for t in figure.times)}]",
                      flush=True)
            row_edits(folder, args)
            if number == 0 and args.reference:
                print("  reference, edits that make new stores (O(rows)) on this store:", flush=True)
                scratch = root / "scratch"
                scratch.mkdir()
                reference_edits(folder, scratch, args, steps)
                shutil.rmtree(scratch)
            if not args.keep:
                shutil.rmtree(folder)
        table(sizes, results, VERBS, episodes)
        if sizes[-1] >= 10_000_000:
            delete = results[sizes[-1]][VERBS[0].name].seconds * 1e3
            print(f"\nGoal (issue 31): delete_episodes of {PICK} episodes from a {size_name(sizes[-1])}-step store in "
                  f"milliseconds: {delete:,.1f} ms")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
