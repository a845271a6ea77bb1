"""Stress benchmark: readers against a ring writer, writers killed with SIGKILL, and the learner's rate with actors.

Three parts, one run, one final table:

1. **Readers against a ring writer.** One writer process fills a small ring store (16 episodes of 4..32 steps
   in 256 rows, so rows are reused all the time) as fast as it can, alternating ``store_episode`` and
   ``one_episode`` + ``store``, for ``--minutes``. Six reader processes read it meanwhile: one through a
   uniform sampler with ``refresh()`` before every ``batch(64)``, one through a plain window view (3 steps)
   and a ``BatchIndexSampler`` that build the view again after ``SampleExpiredError``, and four samplers that
   follow the writer by themselves (``follow="disk"``): prioritized single steps, prioritized ``n_steps=3``
   (the next rows checked too), prioritized sequences (windows of 3) and a rate-limited prioritized one, each
   handing every batch's ``_key`` back to ``update_priorities`` (a refusal of its own keys counts as a
   failure, like a wrong row). Every value written is
   a pure function of (episode id, t), and every row carries a checksum of its other fields, so each reader
   checks every row of every batch against the key its batch gives it: *stale* (a whole row of another
   episode or step), *torn* (fields of two writes) and *wrong meta* (the meta field of another episode) must
   all be 0. At the end the store is reopened: every episode the writer logged as committed and the ring has
   not evicted must be there and intact, and the store must hold nothing the writer did not log ("episodes
   lost" must be 0).
2. **Kill trials.** ``--kills`` times (200): a writer process opens the same kind of ring store, commits a
   random number (0..30) of episodes, and is SIGKILLed a random 0..2 ms later, anywhere in its
   step/commit cycle, while a sampler reader reads. After each kill the folder is reopened read-only and
   every live episode checked against what was written for its id, and the live ids against the writer's
   log: the count of trials that reopened intact must equal the number of trials.
3. **The learner's rate.** Four ring shards (``shard_folder(root, k)``) of image uint8 (3, 64, 64), action
   float32 (6,) and reward. A learner in this process draws ``batch(256)`` of the image field from
   ``ShardSet(root).sampler('uniform')`` for ``--rate-seconds``, with no actor writing, then with 4 actor
   processes writing whole episodes into the 4 shards as fast as they can (so they evict all the time);
   repeated ``--repeats`` times, interleaved; the medians in batches/s and their ratio (4 actors / 0 actors)
   are measured in this run. The actors take CPU from the learner on a small machine: the ratio says how
   much.

Workers are forked from a forkserver that has imported memmap_replay once (``set_forkserver_preload``), so
a killed writer is replaced in milliseconds. Exit status 0 unless ``--strict`` and a must-be-zero figure is not.

    python benchmarks/stress.py                # 2 minutes of readers, 200 kill trials, learner rates: ~4 min
    python benchmarks/stress.py --minutes 1
    python benchmarks/stress.py --quick        # a ~20 s smoke run (fewer trials, shorter phases)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from memmap_replay import ReplayBuffer, SampleExpiredError, ShardSet, shard_folder  # noqa: E402

from live_checks import Live, Tally, read_log, stopped  # noqa: E402  (benchmarks/, next to this file)

MAX_T = 32  # max_timesteps: the key stride
RING = dict(max_episodes=16, max_timesteps=MAX_T, max_steps=256, circular=True)
FIELDS = dict(image=("uint8", (3, 32, 32)), obs=("float", (4,)), action=("int", 2), eid="int64", t="int32",
              check="int64")
META = dict(tag="int64")
LIFETIME = 3600.0  # no worker outlives this
WAIT = 60.0  # longest wait for a worker before giving up

SHARDS = 4
SHARD_FIELDS = dict(image=("uint8", (3, 64, 64)), action=("float", 6), reward="float")
BATCH = 256


# ---- what the writers write (a pure function of (episode id, t)) and the checks: live_checks.py --------------

IMAGE_OFFSETS = np.random.default_rng(7).integers(0, 256, size=(3, 32, 32), dtype=np.int64)


class StressLive(Live):
    MAX_T, MIN_LENGTH, RING, FIELDS, META = MAX_T, 4, RING, FIELDS, META
    CHECKED = ("image", "obs", "action", "eid", "t")
    LIFETIME, FIRST_WAIT, STEPWISE_EVERY, SEED_STRIDE = LIFETIME, WAIT, 2, 1_000_000

    def payload(self, h, gid):
        return dict(image=((h[:, None, None, None] + IMAGE_OFFSETS) % 256).astype(np.uint8),
                    obs=((h[:, None] + np.arange(4) * 977) % (1 << 23)).astype(np.float32),
                    action=np.stack([h, -gid], axis=1).astype(np.int32))


LIVE = StressLive()
episode_length = LIVE.episode_length
writer_main = LIVE.writer_main  # workers: bound methods of LIVE, which pickles as this module's class


PRIORITIZED_KINDS = ("prioritized", "nstep", "sequence", "limited")  # live_checks.Live.prioritized_reader


def reader_main(kind, folder, stop_file, result, seed):
    """A uniform sampler with refresh() before every batch(64) (``kind`` "sampler"), a plain window view
    (3 steps) and a BatchIndexSampler that build the view again after SampleExpiredError ("window"), or a
    sampler following the writer by itself whose batches go back to update_priorities (PRIORITIZED_KINDS)."""
    if kind in PRIORITIZED_KINDS:
        return LIVE.prioritized_reader(folder, stop_file, result, seed, kind)
    (LIVE.sampler_reader if kind == "sampler" else LIVE.view_reader)(folder, stop_file, result, seed)


def store_problems(folder, logs=(), writer_exited=False):
    """Reopen read-only and list what is wrong: a live episode that is not what was written for its id, an
    id a writer logged as committed that is gone though not evicted, an id the store holds that no writer
    logged (only when the writer exited cleanly, so that it logged every commit). Returns (problems, first,
    next) ids."""
    problems = []
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        state = store.meta.state
        ids = store.live_table().ids.tolist()
        if ids != list(range(state.first_episode, state.next_episode)):
            problems.append(f"live ids {ids} are not {state.first_episode}..{state.next_episode - 1}")
        for episode_id, _, length, tag, rows, want in LIVE.live_episodes(store):
            if int(length) != len(want["eid"]) or int(tag) != episode_id:
                problems.append(f"episode {episode_id}: length {length}, tag {tag}")
                continue
            for name, values in want.items():
                if not np.array_equal(rows[name], values):
                    problems.append(f"episode {episode_id}: field {name!r} is not what was written")
        for log in logs:
            opened, done = read_log(log)
            if done and done != list(range(opened, opened + len(done))):
                problems.append(f"{log.name}: ids logged out of order")
            if done and state.next_episode <= done[-1]:
                problems.append(f"{log.name}: committed episodes {state.next_episode}..{done[-1]} are gone")
            if writer_exited and done and state.next_episode != done[-1] + 1:
                problems.append(f"{log.name}: the store holds ids up to {state.next_episode - 1}, the writer "
                                f"committed up to {done[-1]}")
        return problems, state.first_episode, state.next_episode


# ---- workers ----------------------------------------------------------------------------------------------------


def actor_main(folder, stop_file, result, seed, length):
    """Write whole episodes into a ring shard as fast as possible (the data: one seeded episode, reused)."""
    deadline = time.monotonic() + LIFETIME
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (length, 3, 64, 64), dtype=np.uint8)
    action = rng.standard_normal((length, 6), dtype=np.float32)
    reward = rng.standard_normal(length, dtype=np.float32)
    steps = 0
    started = time.monotonic()
    with ReplayBuffer.from_folder(folder) as buffer:
        while not stopped(stop_file, deadline):
            buffer.store_episode(image=image, action=action, reward=reward, end="truncated")
            steps += length
            Path(result).write_text(json.dumps(dict(steps=steps, seconds=time.monotonic() - started)))


# ---- the parts --------------------------------------------------------------------------------------------------


class Workers:
    """Processes forked from a forkserver that imported memmap_replay and this script once, so a worker starts
    in milliseconds instead of importing torch again. The script is preloaded as the module ``stress`` and
    the workers are its functions: Python 3.11's forkserver ignores a preload of ``__main__``, and it does
    not take this process's sys.path either (only its environment), hence PYTHONPATH."""

    def __init__(self):
        here = Path(__file__).resolve().parent
        paths = [str(here), str(here.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)  # for the forkserver, started at the first worker
        self.context = multiprocessing.get_context("forkserver")
        preload = ["stress"]
        if os.environ.get("MEMMAP_REPLAY_KERNELS", "auto") != "numpy" and importlib.util.find_spec("numba"):
            # the sum tree's compiled kernels (their modules load them at import): each prioritized reader
            # would otherwise import numba and load them again, seconds on a small machine
            preload += ["memmap_replay.samplers.sumtree_numba", "memmap_replay.samplers.positions_numba"]
        self.context.set_forkserver_preload(preload)
        self.module = importlib.import_module("stress")  # this file, under its own name (benchmarks/ is on sys.path)
        self.alive = []

    def start(self, target, *args):
        target = getattr(self.module, target.__name__)
        process = self.context.Process(target=target, args=args, daemon=True)
        process.start()
        self.alive.append(process)
        return process

    def join(self, process, timeout=WAIT):
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join(10)
            raise RuntimeError(f"{process.name} did not finish within {timeout} s")
        self.alive.remove(process)
        code = process.exitcode
        process.close()
        return code

    def close(self):
        for process in list(self.alive):
            process.kill()
            process.join(10)


def wait_until(condition, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout} s")
        time.sleep(0.001)


def stress(workers, root, seconds):
    """Part 1: 1 writer + 6 readers on one ring for ``seconds``."""
    folder, stop, log = root / "stress", root / "stress.stop", root / "stress-writer.log"
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **RING).close()
    writer = workers.start(writer_main, str(folder), str(stop), str(log))
    wait_until(lambda: read_log(log)[1], "the writer's first commit")
    kinds = ["sampler", "window", *PRIORITIZED_KINDS]
    results = [root / f"stress-reader{k}.json" for k in range(len(kinds))]
    readers = [workers.start(reader_main, kind, str(folder), str(stop), str(result), k + 1)
               for k, (kind, result) in enumerate(zip(kinds, results))]
    wait_until(lambda: all(Path(f"{result}.ready").exists() for result in results), "every reader's first batch")
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(min(10.0, max(0.0, seconds - (time.monotonic() - started))))
        print(f"  {time.monotonic() - started:5.0f} s: {len(read_log(log)[1]):,} episodes committed", flush=True)
    stop.touch()
    codes = [workers.join(process) for process in readers + [writer]]
    if any(codes):
        raise RuntimeError(f"a stress worker failed (exit codes {codes}); see its traceback above")
    tally = Tally()
    by_kind = {}
    for kind, result in zip(kinds, results):
        by_kind[kind] = Tally.load(result)
        tally.merge(by_kind[kind])
    problems, first, next_id = store_problems(folder, [log], writer_exited=True)
    done = read_log(log)[1]
    steps = sum(episode_length(i) for i in done)
    return dict(seconds=seconds, episodes=len(done), steps=steps, wraps=first / RING["max_episodes"], tally=tally,
                by_kind=by_kind, problems=problems, lost=len(problems))


def kill_trials(workers, root, trials, seed):
    """Part 2: ``trials`` SIGKILLs of a ring writer at random instants, a sampler reader reading throughout."""
    rng = np.random.default_rng(seed)
    folder, stop = root / "kills", root / "kills.stop"
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **RING).close()
    # a reader only starts once there is an episode: the first writer commits one before it may be killed
    result = root / "kills-reader.json"
    reader = None
    intact, failures, next_id, killed_commits = 0, [], 0, 0
    started = time.monotonic()
    for trial in range(trials):
        log = root / f"kills-writer{trial}.log"
        writer = workers.start(writer_main, str(folder), str(root / "never"), str(log))
        commits = int(rng.integers(1 if reader is None else 0, 31))
        wait_until(lambda: len(read_log(log)[1]) >= commits, f"trial {trial}: {commits} commits")
        time.sleep(float(rng.uniform(0, 0.002)))
        writer.kill()
        code = workers.join(writer)
        if reader is None:
            reader = workers.start(reader_main, "sampler", str(folder), str(stop), str(result), 99)
        opened, done = read_log(log)
        logged = next_id if opened is None else opened + len(done)
        problems, first, new_next = store_problems(folder, [log])
        if code != -9:
            problems.append(f"the writer exited with {code}, not by SIGKILL")
        if opened not in (None, next_id):
            problems.append(f"the writer opened at id {opened}, the store held up to {next_id - 1}")
        if new_next not in ((logged,) if opened is None else (logged, logged + 1)):
            problems.append(f"next id {new_next} after the writer logged up to {logged - 1}")
        killed_commits += new_next - next_id
        next_id = new_next
        if problems:
            failures.append(f"trial {trial}: {problems[:3]}")
        else:
            intact += 1
        if (trial + 1) % 50 == 0:
            print(f"  {trial + 1} trials in {time.monotonic() - started:.0f} s: {intact} intact", flush=True)
    stop.touch()
    if reader is not None and workers.join(reader):
        raise RuntimeError("the kill-trial reader failed; see its traceback above")
    tally = Tally.load(result) if reader is not None else Tally()
    return dict(trials=trials, intact=intact, failures=failures, commits=killed_commits,
                seconds=time.monotonic() - started, tally=tally)


def fill_shards(root, episodes, length, seed):
    rng = np.random.default_rng(seed)
    for k in range(SHARDS):
        capacity = dict(max_episodes=episodes, max_timesteps=length, max_steps=episodes * (length + 1), circular=True)
        with ReplayBuffer(shard_folder(root, k), fields=SHARD_FIELDS, **capacity) as buffer:
            for _ in range(episodes):
                buffer.store_episode(image=rng.integers(0, 256, (length, 3, 64, 64), dtype=np.uint8),
                                     action=rng.standard_normal((length, 6), dtype=np.float32),
                                     reward=rng.standard_normal(length, dtype=np.float32), end="truncated")


def learner_rate(sampler, seconds):
    """batch(256) of the image field for ``seconds``; SampleExpiredError (ShardedSampler.batch() does not draw
    again itself) is caught and the batch drawn again. Returns (batches/s, expired)."""
    for _ in range(5):  # untimed
        try:
            sampler.batch(BATCH)
        except SampleExpiredError:
            pass
    batches = expired = 0
    batch = None
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            batch = sampler.batch(BATCH)  # the previous batch is alive until this returns, as in training
        except SampleExpiredError:
            expired += 1
            continue
        batches += 1
    elapsed = time.perf_counter() - start
    del batch
    return batches / elapsed, expired


def learner(workers, root, seconds, repeats, episodes, length):
    """Part 3: the learner's batches/s with 0 and with 4 actors writing, interleaved repeats."""
    shards_root = root / "shards"
    fill_shards(shards_root, episodes, length, seed=0)
    shards = ShardSet(shards_root)
    sampler = shards.sampler("uniform", seed=0, fields=("image",), meta_fields=())
    rates = {0: [], SHARDS: []}
    expired = {0: 0, SHARDS: 0}
    actor_steps = []
    for repeat in range(repeats):
        for actors in (0, SHARDS):
            stop = root / f"actors{repeat}-{actors}.stop"
            results = [root / f"actor{repeat}-{actors}-{k}.json" for k in range(actors)]
            procs = [workers.start(actor_main, str(shard_folder(shards_root, k)), str(stop), str(results[k]), k, length)
                     for k in range(actors)]
            wait_until(lambda: all(result.exists() for result in results), "every actor's first commit")
            rate, lost = learner_rate(sampler, seconds)
            stop.touch()
            if any(workers.join(process) for process in procs):
                raise RuntimeError("an actor failed; see its traceback above")
            rates[actors].append(rate)
            expired[actors] += lost
            if actors:
                figures = [json.loads(result.read_text()) for result in results]
                actor_steps.append(sum(f["steps"] / f["seconds"] for f in figures))
            print(f"  repeat {repeat + 1}: {actors} actors writing: {rate:,.1f} batches/s", flush=True)
    shards.close()
    idle, busy = statistics.median(rates[0]), statistics.median(rates[SHARDS])
    return dict(idle=idle, busy=busy, ratio=busy / idle, rates=rates, expired=expired,
                actor_steps=statistics.median(actor_steps), batch_mb=BATCH * 3 * 64 * 64 / 2**20)


# ---- the report ----------------------------------------------------------------------------------------------


def print_table(part1, part2, part3, args) -> bool:
    """The final table; returns True when every must-be-zero figure is zero."""
    t1, t2 = part1["tally"], part2["tally"]
    def wrong(tally):
        return tally.stale + tally.torn + tally.wrong_meta
    sections = [
        (f"1 writer + {len(part1['by_kind'])} readers on a ring ({part1['seconds']:.0f} s; {RING['max_episodes']} "
         f"episodes in {RING['max_steps']} rows; image uint8 (3, 32, 32) + 5 fields)", [
            ("steps written", f"{part1['steps']:,}", f"{part1['episodes']:,} episodes, "
             f"{part1['steps'] / part1['seconds']:,.0f} steps/s; the ring wrapped {part1['wraps']:,.0f} times"),
            ("batches read", f"{t1.batches:,}", f"{t1.rows:,} rows checked"),
            *((f"  {kind} reader", f"{tally.batches:,}", f"batches; {tally.rows:,} rows, {tally.wrong:,} wrong, "
               f"{tally.redrawn:,} redrawn" + (f", {tally.updated:,} priority updates applied, {tally.dropped:,} "
                                               f"dropped (evicted), {tally.refused:,} refused" if kind in
                                               PRIORITIZED_KINDS else ""))
              for kind, tally in part1["by_kind"].items()),
            ("SampleExpiredError met", f"{t1.expired:,}", f"{t1.redrawn:,} batches redrawn; {t1.failed} batch() calls "
             f"gave up after their redraws"),
            ("update_priorities refusing a batch's own keys", f"{t1.refused:,}", "must be 0"),
            ("wrong rows: stale / torn / wrong meta", f"{t1.stale:,} / {t1.torn:,} / {t1.wrong_meta:,}", "must be 0"),
            ("torn or mixed batches (any wrong row)", f"{t1.wrong_batches:,}", "must be 0"),
            ("episodes lost", f"{part1['lost']:,}", "must be 0"),
        ]),
        (f"SIGKILL trials of a ring writer ({part2['seconds']:.0f} s; a sampler reader reading throughout)", [
            ("reopened with every committed episode intact", f"{part2['intact']} / {part2['trials']}",
             f"must be {part2['trials']}; {part2['commits']:,} commits in all"),
            ("reader: wrong rows / batches read", f"{wrong(t2):,} / {t2.batches:,}", "must be 0 wrong rows"),
        ]),
        (f"learner: ShardSet(4 ring shards).sampler('uniform').batch({BATCH}) of image uint8 (3, 64, 64); medians of "
         f"{args.repeats} interleaved repeat(s) of {args.rate_seconds:g} s", [
            ("0 actors writing", f"{part3['idle']:,.1f} batches/s", f"{part3['idle'] * part3['batch_mb']:,.0f} MB/s"),
            (f"{SHARDS} actors writing", f"{part3['busy']:,.1f} batches/s",
             f"actors {part3['actor_steps']:,.0f} steps/s in all; {part3['expired'][SHARDS]:,} SampleExpiredError "
             f"out of batch()"),
            (f"ratio {SHARDS} actors / 0 actors", f"{part3['ratio']:.2f}", f"on {os.cpu_count()} cpus"),
        ]),
    ]
    print()
    print("Stress figures")
    rows = [row for _, section in sections for row in section]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for title, section in sections:
        print(title)
        for name, value, note in section:
            print(f"  {name:<{widths[0]}}  {value:>{widths[1]}}  {note}".rstrip())
    examples = (t1.examples + t2.examples)[:3]
    for e in examples:
        print(f"  e.g. {e['kind']}: key ({e['episode']}, {e['t']}) got row ({e['row_eid']}, {e['row_t']}) "
              f"tag {e['tag']}")
    for failure in part1["problems"][:3] + part2["failures"][:3]:
        print(f"  problem: {failure}")
    zero = {"wrong rows": wrong(t1) + wrong(t2), "torn or mixed batches": t1.wrong_batches + t2.wrong_batches,
            "priority updates refused": t1.refused,
            "episodes lost": part1["lost"], "kill trials not intact": part2["trials"] - part2["intact"]}
    bad = {name: value for name, value in zero.items() if value}
    print()
    if bad:
        print(f"FAIL: {', '.join(f'{name} {value:,}' for name, value in bad.items())} (each must be 0)")
    else:
        print(f"PASS: 0 wrong rows in {t1.rows + t2.rows:,} checked, 0 torn or mixed batches, 0 episodes lost, "
              f"{part2['intact']}/{part2['trials']} kill trials intact")
    return not bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=None,
                        help="how long 1 writer and 6 readers run (default 2; --quick: 0.1)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run (~20 s): 6 s of readers, 10 kill trials, 1 repeat of 1.5 s for the learner")
    parser.add_argument("--kills", type=int, default=None, help="SIGKILL trials (default 200)")
    parser.add_argument("--rate-seconds", type=float, default=None, help="each timed learner run (default 5)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved learner repeats (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill instants")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where to write (a scratch folder is made inside it and removed at the end unless "
                             "--keep; default: the current directory, so the same disk as the project)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a must-be-zero figure is not")
    args = parser.parse_args(argv)

    seconds = args.minutes * 60 if args.minutes is not None else (6.0 if args.quick else 120.0)
    args.kills = args.kills if args.kills is not None else (10 if args.quick else 200)
    args.rate_seconds = args.rate_seconds or (1.5 if args.quick else 5.0)
    args.repeats = args.repeats or (1 if args.quick else 3)
    episodes, length = (8, 50) if args.quick else (40, 100)  # per learner shard
    if seconds <= 0 or args.kills < 1 or args.rate_seconds <= 0 or args.repeats < 1:
        parser.error("--minutes, --kills, --rate-seconds and --repeats must be positive")
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-stress-", dir=parent))
    torch.set_num_threads(1)  # as the other benchmarks: the work is numpy's; keep torch off the other core

    started = time.perf_counter()
    print(f"memmap_replay stress benchmark: {seconds:.0f} s of 1 ring writer + 6 readers, {args.kills} SIGKILL trials, "
          f"learner rate with 0 and {SHARDS} actors")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}, kernel {platform.release()}")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'})", flush=True)
    workers = Workers()
    try:
        print("part 1: readers against a ring writer ...", flush=True)
        part1 = stress(workers, root, seconds)
        print(f"part 2: {args.kills} SIGKILL trials ...", flush=True)
        part2 = kill_trials(workers, root, args.kills, args.seed)
        print(f"part 3: the learner's rate, {SHARDS} shards of {episodes} episodes x {length} steps ...", flush=True)
        part3 = learner(workers, root, args.rate_seconds, args.repeats, episodes, length)
    finally:
        workers.close()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    passed = print_table(part1, part2, part3, args)
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cpus)")
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    raise SystemExit(main())
