"""Readers in other processes while ring writers overwrite, and writers killed while readers read.

Every value written is a pure function of (writer, episode id, t), and every row carries a checksum of its
other fields; a reader checks each row it is handed against the (episode id, t) its batch says the row is
(``_key`` of a sampler's batch, or the view's own table for a plain view) and counts it as good, stale, torn
or wrong meta. The writers, the readers and the checks are in benchmarks/live_checks.py (shared with
benchmarks/stress.py); this file gives them its store's shape (``RingLive``).

A reader must see only good rows. Workers are forked from a helper process (``Workers``) that imported
memmap_replay once, so the many short-lived writers of the kill test start in milliseconds rather than
the 1.6 s an import of torch takes. Every wait has a time limit, every worker has a lifetime limit, and
every process is reaped.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import InvalidDataError, ReplayBuffer, SampleExpiredError, ShardSet, shard_folder
from memmap_replay.core.index import position_rows
from memmap_replay.distributed.shards import SHARD_STRIDE

from conftest import reap

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # live_checks.py, shared with stress.py

from live_checks import KINDS, SHARD_BITS, Live, Tally, counting, read_log, ready, stopped  # noqa: E402

MAX_T = 16  # max_timesteps: the key stride (key = episode id * MAX_T + t)
RING = dict(max_episodes=8, max_timesteps=MAX_T, max_steps=64, circular=True)  # ~6 episodes of 2..16 steps
FIELDS = dict(obs=("float", (2, 3)), frame=("uint8", (4, 4)), action=("int", 2), eid="int64", t="int32",
              check="int64")
META = dict(tag="int64")
WAIT = 60.0  # seconds any wait may take before the test gives up (a hang guard, not a timing assertion)
LIFETIME = 120.0  # no worker outlives this, whatever happens to the test process


# ---- what a writer writes (a pure function of (global episode number, t)) and the checks: live_checks.py -----


class RingLive(Live):
    MAX_T, MIN_LENGTH, RING, FIELDS, META = MAX_T, 2, RING, FIELDS, META
    CHECKED = ("obs", "frame", "action", "eid", "t")  # the fields the checksum covers
    LIFETIME, FIRST_WAIT, STEPWISE_EVERY, SEED_STRIDE = LIFETIME, LIFETIME, 3, 100_000

    def payload(self, h, gid):
        return dict(obs=((h[:, None, None] + np.arange(6).reshape(2, 3) * 977) % (1 << 23)).astype(np.float32),
                    frame=(((h[:, None, None] >> 3) + np.arange(16).reshape(4, 4) * 13) % 256).astype(np.uint8),
                    action=np.stack([h, -gid], axis=1).astype(np.int32))


LIVE = RingLive()
episode_rows, classify, numpy_batch = LIVE.episode_rows, LIVE.classify, LIVE.numpy_batch
# workers (forked from the Workers helper process, which finds them here by name)
writer_main, sampler_reader, view_reader = LIVE.writer_main, LIVE.sampler_reader, LIVE.view_reader
prioritized_reader = LIVE.prioritized_reader
grow_writer_main, loader_reader = LIVE.grow_writer_main, LIVE.loader_reader


def check_store(folder, logs=None, shard=0, exited=False):
    """Reopen ``folder`` read-only: every live episode is exactly what was written for its id, and every
    id a writer logged as committed is live unless evicted; after a writer that ``exited`` cleanly (so it
    logged every commit) the store holds no id it did not log. Returns (first, next) live ids."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        state = store.meta.state
        assert store.live_table().ids.tolist() == list(range(state.first_episode, state.next_episode))
        for episode_id, gid, length, tag, rows, want in LIVE.live_episodes(store, shard):
            assert int(length) == len(want["eid"]), f"episode {episode_id}: length {length}"
            assert int(tag) == gid, f"episode {episode_id}: tag {tag}"
            for name, values in want.items():
                np.testing.assert_array_equal(rows[name], values, err_msg=f"episode {episode_id}, field {name!r}")
        for log in logs or ():
            opened, done = read_log(log)
            assert done == list(range(opened, opened + len(done))), f"{log}: ids committed out of order"
            if done:
                assert state.next_episode > done[-1], f"{log}: committed episode {done[-1]} is not in the store"
            if exited:
                assert state.next_episode == opened + len(done), f"{log}: the store holds ids the writer did not log"
        return state.first_episode, state.next_episode


# ---- workers (forked from the Workers helper process) -------------------------------------------------------


def wait_for_readers(workers, pids, results):
    deadline = time.monotonic() + WAIT
    while not all(Path(f"{result}.ready").exists() for result in results):
        if time.monotonic() > deadline:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            pytest.fail("the readers did not read a batch in time:\n" + "\n".join(workers.stderr(pid) for pid in pids))
        time.sleep(0.001)


def shard_reader(root, shards, stop_file, result, seed, kind="uniform", batch_size=64):
    """A ShardSet's sampler of ``kind`` across ``shards`` ring shards while their writers write (a prioritized
    one's batches go back to ``update_priorities`` with their own keys: a refusal is counted)."""
    deadline = time.monotonic() + LIFETIME
    tally = Tally()
    while sum((shard_folder(root, k) / "meta.json").exists() for k in range(shards)) < shards:
        if time.monotonic() > deadline:
            raise TimeoutError("the shard writers did not create their shards")
        time.sleep(0.001)
    shard_set = ShardSet(root)
    while min(store.num_episodes for store in shard_set.stores) == 0:
        if time.monotonic() > deadline:
            raise TimeoutError("a shard writer committed no episode")
        time.sleep(0.001)
        shard_set.refresh()
    tally.first_ids = [store.meta.state.first_episode for store in shard_set.stores]
    sampler = shard_set.sampler(kind, seed=seed)
    rng = np.random.default_rng(seed)
    for sub in sampler.samplers:
        counting(sub.view, tally)
    while not stopped(stop_file, deadline):
        before = tally.expired
        try:
            batch = sampler.batch(batch_size)
        except SampleExpiredError:  # batch() draws again a few times; if all of them expired, so do we
            tally.failed += 1
            tally.redrawn += 1
            continue
        tally.redrawn += tally.expired > before
        keys = batch["_key"].numpy()
        shard, (ids, t) = keys % SHARD_STRIDE, np.divmod(keys // SHARD_STRIDE, MAX_T)
        LIVE.check(tally, numpy_batch(batch), shard << SHARD_BITS | ids, t, batch["tag"].numpy())
        if kind == "prioritized":
            try:
                tally.updated += sampler.update_priorities(batch["_key"], rng.random(len(keys)) + 1e-3)
            except InvalidDataError as error:  # the batch's own keys must never be refused
                tally.refused += 1
                tally.refusals = (tally.refusals + [str(error)[:200]])[:4]
        if tally.batches == 1:
            ready(result)
    shard_set.refresh()
    tally.last_ids = [store.meta.state.first_episode for store in shard_set.stores]
    shard_set.close()
    tally.save(result)


# ---- the helper process that forks the workers -------------------------------------------------------------

ZYGOTE = r"""
import json, os, signal, sys, time, traceback
sys.path.insert(0, sys.argv[1])
import test_live  # memmap_replay, numpy and torch imported once; every worker is a fork of this process
if os.environ.get("MEMMAP_REPLAY_KERNELS", "auto") != "numpy":
    try:  # the sum tree's numba kernels (loaded at import), once here rather than in every prioritized reader
        import memmap_replay.samplers.sumtree_numba, memmap_replay.samplers.positions_numba  # noqa: E401, F401
    except Exception:  # noqa: BLE001 - no numba (or none that loads): the readers' first sum tree chooses numpy
        pass

children = set()
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "start":
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(os.open(request["error"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
                getattr(test_live, request["target"])(*request["args"])
            except BaseException:
                os.write(2, traceback.format_exc().encode())
                code = 1
            os._exit(code)
        children.add(pid)
        reply = pid
    else:  # wait for a child, at most request["timeout"] seconds
        deadline = time.monotonic() + request["timeout"]
        reply = None
        while reply is None and time.monotonic() < deadline:
            pid, status = os.waitpid(request["pid"], os.WNOHANG)
            if pid:
                children.discard(pid)
                reply = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.001)
    print(json.dumps(reply), flush=True)
for pid in children:  # stdin closed: the test is over, take no child along
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""


class Workers:
    """Starts worker functions of this module in processes forked from one helper process."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.helper = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(Path(__file__).parent)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.errors: dict[int, Path] = {}
        self.count = 0

    def _ask(self, request: dict, timeout: float):
        self.helper.stdin.write((json.dumps(request) + "\n").encode())
        self.helper.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self.helper.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise TimeoutError(f"the helper process did not answer {request} within {timeout} s")
        line = self.helper.stdout.readline()
        if not line:
            raise RuntimeError(f"the helper process died: {reap(self.helper, 10)}")
        return json.loads(line.decode())

    def start(self, target, *args) -> int:
        self.count += 1
        error = self.tmp / f"worker-{self.count}.error"
        pid = self._ask(dict(op="start", target=target.__name__,
                             args=[str(a) if isinstance(a, Path) else a for a in args], error=str(error)), WAIT)
        self.errors[pid] = error
        return pid

    def wait(self, pid: int, timeout: float = WAIT) -> int:
        """The worker's exit code (negative: killed by that signal); fails the test if it takes too long."""
        code = self._ask(dict(op="wait", pid=pid, timeout=timeout), timeout + WAIT)
        if code is None:
            os.kill(pid, signal.SIGKILL)
            self._ask(dict(op="wait", pid=pid, timeout=WAIT), 2 * WAIT)
            pytest.fail(f"worker {pid} did not finish within {timeout} s")
        return code

    def stderr(self, pid: int) -> str:
        error = self.errors[pid]
        return error.read_text() if error.exists() else ""

    def finish(self, pid: int, timeout: float = WAIT) -> None:
        """Wait for a worker that must end cleanly."""
        code = self.wait(pid, timeout)
        assert code == 0, f"worker {pid} exited with {code}:\n{self.stderr(pid)}"

    def kill(self, pid: int) -> None:
        """SIGKILL a worker; it must die of it (not have ended on its own)."""
        os.kill(pid, signal.SIGKILL)
        code = self.wait(pid)
        assert code == -signal.SIGKILL, f"worker {pid} ended on its own ({code}):\n{self.stderr(pid)}"

    def close(self) -> None:
        stderr = reap(self.helper, WAIT)  # closes its stdin: it kills and reaps any worker still running, then exits
        assert self.helper.returncode == 0, stderr


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    helper = Workers(tmp_path_factory.mktemp("workers"))
    yield helper
    helper.close()


# ---- the known bugs ---------------------------------------------------------------------------------------------


class WrongRows(AssertionError):
    """A reader was handed rows that are not what its batch says they are."""


def expect_only_good_rows(**tallies):
    """The last check of a live test: raise WrongRows if any reader got a wrong row, or had the keys of its
    own batches refused by update_priorities."""
    wrong = {name: tally for name, tally in tallies.items() if tally.wrong or tally.refused}
    if wrong:
        raise WrongRows("readers got wrong rows or refusals: " + "; ".join(f"{name}: {tally}"
                                                                           for name, tally in wrong.items()))


# ---- a: readers against one ring writer ---------------------------------------------------------------------

READ_SECONDS = 3.0  # how long the readers read while the writers write (not a timing assertion)
WRAPS = 10  # the ring must have wrapped at least this many times while the readers read


def wait_for_commits(workers, pid, log, count=1):
    deadline = time.monotonic() + WAIT
    while len(read_log(log)[1]) < count:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            workers.wait(pid)
            pytest.fail(f"the writer committed fewer than {count} episodes in {WAIT} s:\n{workers.stderr(pid)}")
        time.sleep(0.001)


def check_readers_exercised(tallies):
    """Each reader read while the ring wrapped many times, and met SampleExpiredError at least once."""
    for name, tally in tallies.items():
        assert tally.batches > 0, f"{name}: {tally}"
        evicted = [last - first for first, last in zip(tally.first_ids, tally.last_ids)]
        assert min(evicted) >= WRAPS * RING["max_episodes"], f"{name}: too few evictions while it read: {tally}"
        assert tally.expired > 0 and tally.redrawn > 0, f"{name}: the seqlock check never fired: {tally}"


def read_while_writing(tmp_path, workers, folder, writer: tuple, readers: dict) -> tuple[dict, Path]:
    """A writer process (function, *extra arguments after folder, stop file and log) and reader processes
    (name -> (function, *extra arguments)) for READ_SECONDS from the readers' first batch; (their tallies,
    the writer's log), once every process ended cleanly."""
    stop, log = tmp_path / "stop", tmp_path / "writer.log"
    function, *extra = writer
    writer_pid = workers.start(function, folder, stop, log, *extra)
    results = {name: tmp_path / f"{name}.json" for name in readers}
    pids = [workers.start(function, folder, stop, results[name], *extra)
            for name, (function, *extra) in readers.items()]
    wait_for_readers(workers, pids, results.values())
    time.sleep(READ_SECONDS)
    stop.touch()
    for pid in pids + [writer_pid]:
        workers.finish(pid)
    return {name: Tally.load(path) for name, path in results.items()}, log


def read_against_a_ring_writer(tmp_path, workers, readers: dict) -> dict:
    """Reader processes (name -> (function, *extra arguments)) against a ring writer for READ_SECONDS; their
    tallies, once every row they read and everything the writer logged are checked."""
    folder = tmp_path / "ring"
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **RING).close()
    tallies, log = read_while_writing(tmp_path, workers, folder, (writer_main,), readers)
    check_readers_exercised(tallies)
    check_store(folder, [log], exited=True)  # what the writer logged is what the store holds
    expect_only_good_rows(**tallies)
    return tallies


def test_readers_in_other_processes_while_a_ring_writer_overwrites(tmp_path, workers):
    read_against_a_ring_writer(tmp_path, workers, {"sampler": (sampler_reader, 1), "view": (view_reader, 2)})


SAMPLER_KINDS = ("prioritized", "nstep", "sequence", "limited", "uniform")  # live_checks.Live.prioritized_reader


def test_samplers_following_a_ring_writer_in_another_process_get_their_keys_rows(tmp_path, workers):
    """Prioritized (steps, n-step, rate-limited), sequence and uniform samplers with follow="disk" against a
    ring writer: every row is the row its _key names, and update_priorities takes every batch's own keys."""
    tallies = read_against_a_ring_writer(tmp_path, workers, {kind: (prioritized_reader, seed, kind)
                                                             for seed, kind in enumerate(SAMPLER_KINDS, 10)})
    for kind in SAMPLER_KINDS[:-1]:
        assert tallies[kind].updated > 0, f"{kind}: {tallies[kind]}"


# ---- b: several ring writers into shards, one reader across them ------------------------------------------------

SHARDS = 3


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_shard_set_reader_while_several_ring_writers_overwrite(tmp_path, workers, kind):
    root, stop = tmp_path / "shards", tmp_path / "stop"
    logs = [tmp_path / f"writer{k}.log" for k in range(SHARDS)]
    writers = [workers.start(writer_main, shard_folder(root, k), stop, logs[k], k, True) for k in range(SHARDS)]
    result = tmp_path / "reader.json"
    reader = workers.start(shard_reader, root, SHARDS, stop, result, 3, kind)
    wait_for_readers(workers, [reader], [result])
    time.sleep(READ_SECONDS)
    stop.touch()
    for pid in [reader] + writers:
        workers.finish(pid)
    tally = Tally.load(result)
    check_readers_exercised({"shard reader": tally})
    for k in range(SHARDS):
        check_store(shard_folder(root, k), [logs[k]], shard=k, exited=True)
    expect_only_good_rows(shard_reader=tally)


# ---- b2: DataLoader epochs in other processes while the writer grows the store ----------------------------------

# per scenario, the readers (kind of view or sampler, kind of loader workers): each pair at least once
GROW_READERS = {
    "to_ring": [("timestep", "processes"), ("window", "threads"), ("nstep", "threads"), ("sampler", "processes")],
    "cleared": [("timestep", "threads"), ("window", "processes"), ("nstep", "processes"), ("sampler", "threads")],
    "ring": [("timestep", "processes"), ("window", "threads"), ("nstep", "processes"), ("sampler", "threads")],
}


@pytest.mark.parametrize("scenario", LIVE.GROW_SCENARIOS)
def test_loader_epochs_in_other_processes_while_the_writer_grows_the_store(tmp_path, workers, scenario):
    """A writer process grows the store (a flat one into a ring; a flat one cleared past max_episodes, then
    grown so live episodes move and new ones reuse their old slots; a ring) while reader processes run
    DataLoader epochs (worker threads and worker processes) over views and a prioritized sampler made before:
    every row they are handed is the row of the episode its batch names, with that episode's meta, or the
    epoch is refused with a library error naming the grow; never another episode's rows or meta."""
    folder = tmp_path / "store"
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **dict(RING, circular=scenario == "ring")).close()
    readers = {f"{kind}-{kinds}": (loader_reader, seed, kind, kinds)
               for seed, (kind, kinds) in enumerate(GROW_READERS[scenario], 20)}
    tallies, log = read_while_writing(tmp_path, workers, folder, (grow_writer_main, scenario, 7), readers)
    changes = [line for line in log.read_text().splitlines() if line.startswith(("grow", "clear"))]
    assert len(changes) >= 2, f"the writer changed the store {len(changes)} times"
    for name, tally in tallies.items():
        assert tally.batches > 0, f"{name}: {tally}"
        assert tally.expired > 0, f"{name}: no epoch was refused, so none read across a change: {tally}"
    check_store(folder, [log], exited=True)
    expect_only_good_rows(**tallies)


# ---- c: a ring writer killed at random instants while readers read --------------------------------------------

KILLS = 24


def test_sigkill_a_ring_writer_at_random_instants_while_readers_read(tmp_path, workers):
    """Kill a writer after a random number of commits plus a random fraction of a commit; after each kill the
    folder reopens with every committed episode intact, and the next writer carries on from it."""
    rng = np.random.default_rng(2024)
    folder, stop = tmp_path / "ring", tmp_path / "stop"
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **RING).close()
    results = {"sampler": tmp_path / "sampler.json", "view": tmp_path / "view.json"}
    readers = [workers.start(sampler_reader, folder, stop, results["sampler"], 4),
               workers.start(view_reader, folder, stop, results["view"], 5)]
    next_id = 0
    for trial in range(KILLS):
        log = tmp_path / f"writer{trial}.log"
        writer = workers.start(writer_main, folder, tmp_path / "never", log)
        wait_for_commits(workers, writer, log, int(rng.integers(0, 40)))
        time.sleep(float(rng.uniform(0, 0.002)))
        workers.kill(writer)
        opened, done = read_log(log)
        assert opened in (None, next_id), f"trial {trial}: the writer opened at {opened}, after {next_id}"
        logged = next_id if opened is None else opened + len(done)  # the next id by the writer's log
        first, next_id = check_store(folder, [log] if opened is not None else [])
        # the kill may land after a commit and before its log line, never later
        assert next_id in ((logged,) if opened is None else (logged, logged + 1)), \
            f"trial {trial}: the store's next id is {next_id}, the writer logged up to {logged - 1}"
    with ReplayBuffer.from_folder(folder) as buffer:  # the last writer's lock is gone: write once more
        rows = episode_rows(next_id)
        buffer.store_episode(end="terminated", tag=next_id, **rows)
    assert check_store(folder)[1] == next_id + 1
    assert next_id - first >= 0 and first > 10 * RING["max_episodes"], "the ring must have wrapped"
    stop.touch()
    for pid in readers:
        workers.finish(pid)
    tallies = {name: Tally.load(path) for name, path in results.items()}
    for name, tally in tallies.items():
        assert tally.batches > 0, f"{name}: {tally}"
    expect_only_good_rows(**tallies)


# ---- deterministic reproductions (one process; a hook runs the writer at the instant that matters) -----------


def write_episodes(buffer, count, shard=0):
    """Commit ``count`` more episodes (ids continue from the store's)."""
    for _ in range(count):
        gid = shard << SHARD_BITS | buffer.episode_store.meta.state.next_episode
        buffer.store_episode(end="terminated", tag=gid, **episode_rows(gid))


def only_good(batch, shard_keys=False):
    keys = batch["_key"].numpy()
    shard = keys % SHARD_STRIDE if shard_keys else 0
    ids, t = np.divmod(keys // SHARD_STRIDE if shard_keys else keys, MAX_T)
    kind = classify(numpy_batch(batch), shard << SHARD_BITS | ids, t, batch["tag"].numpy())
    return [KINDS[k] for k in kind if k]


@pytest.fixture
def ring(tmp_path):
    """A ring writer holding 8 committed episodes, and a reader of the same folder."""
    with ReplayBuffer(tmp_path / "ring", fields=FIELDS, meta_fields=META, **RING) as writer, \
            ReplayBuffer.from_folder(tmp_path / "ring", read_only=True) as reader:
        write_episodes(writer, 8)
        reader.refresh()
        yield writer, reader


def evict_during_the_first_gather(view, writer) -> list:
    """Make the writer evict everything while ``view`` gathers its next batch; the sizes of the gathers made."""
    gather, calls = view.gather, []

    def gather_while_the_writer_evicts(episode, t):
        batch = gather(episode, t)
        calls.append(len(episode))
        if len(calls) == 1:
            write_episodes(writer, 12)
        return batch

    view.gather = gather_while_the_writer_evicts
    return calls


def test_a_batch_whose_episodes_are_evicted_during_the_gather_is_drawn_again(ring):
    """The seqlock check, deterministically: the writer evicts everything the reader drew while it gathers;
    the view raises SampleExpiredError and the sampler's batch() draws again from the live episodes."""
    writer, reader = ring
    sampler = reader.sampler("uniform", seed=0)
    view = sampler.view
    gather, calls = view.gather, evict_during_the_first_gather(view, writer)
    batch = sampler.batch(64)
    assert len(calls) == 2 and only_good(batch) == []
    assert batch["_key"].numpy().min() // MAX_T >= reader.episode_store.meta.state.first_episode
    view.gather = gather
    write_episodes(writer, 12)
    with pytest.raises(SampleExpiredError, match="evicted by the ring writer"):
        view.__getitems__(np.arange(len(view)))  # a stale view over a plain index batch raises


def test_a_commit_between_reading_meta_json_and_stamping_it_is_caught(ring):
    """sampler.refresh(): the store reads meta.json, then the view stats it for its stamp. A writer that
    commits evictions in between must not make the check pass on rows it overwrote."""
    writer, reader = ring
    sampler = reader.sampler("uniform", seed=0)
    store = reader.episode_store
    real_stamp, commits = store.meta_stamp, []

    def stamp_after_a_commit():
        if not commits:
            commits.append(1)
            write_episodes(writer, 12)  # lands between store.refresh() reading meta.json and the stamp
        return real_stamp()

    write_episodes(writer, 1)  # something new to refresh to
    store.meta_stamp = stamp_after_a_commit
    sampler.refresh()
    assert commits
    try:
        batch = sampler.view.__getitems__(sampler.sample(256))
    except SampleExpiredError:
        return  # caught: fine
    assert only_good(batch) == []


def test_a_view_built_after_the_writer_moved_on_never_returns_overwritten_rows(ring):
    """No hook at all: a reader opened (or refreshed) earlier builds a view after the writer evicted and
    overwrote what the reader's meta.json said was live. Raising SampleExpiredError is fine; wrong rows are not."""
    writer, reader = ring
    write_episodes(writer, 12)
    view = reader.dataset(timestep_level=True)
    try:
        batch = view.__getitems__(np.arange(len(view)))
    except SampleExpiredError:
        return
    episode, t = view.positions.locate(np.arange(len(view)))
    kind = classify(numpy_batch(batch), view.table.ids[episode], t, batch["tag"].numpy())
    assert [KINDS[k] for k in kind if k] == []


def test_a_check_that_learned_of_evictions_keeps_refusing_the_evicted_episodes(ring):
    """No hook: a view over episodes the writer then evicts. A first batch of a live episode passes the check
    (which notices meta.json changed and re-reads it); a second batch over the evicted, overwritten oldest
    episode must raise SampleExpiredError, not return its rows because meta.json did not change again."""
    writer, reader = ring
    view = reader.dataset(timestep_level=True)
    oldest = (view.table.start[0], view.table.start[0] + view.table.length[0])
    while True:  # until a new episode overwrote rows of the view's oldest episode
        write_episodes(writer, 1)
        live = writer.episode_store.live_table()
        if live.start[-1] < oldest[1] and oldest[0] < live.start[-1] + live.length[-1]:
            break
    assert view.table.ids[-1] in live.ids and view.table.ids[0] not in live.ids
    episode, t = view.positions.locate(np.arange(len(view)))
    newest = np.flatnonzero(episode == len(view.table) - 1)
    batch = view.__getitems__(newest)  # live: passes, and the check has now read the new meta.json
    assert classify(numpy_batch(batch), view.table.ids[episode[newest]], t[newest], batch["tag"].numpy()).max() == 0
    first = np.flatnonzero(episode == 0)
    try:
        batch = view.__getitems__(first)
    except SampleExpiredError:
        return
    kind = classify(numpy_batch(batch), view.table.ids[episode[first]], t[first], batch["tag"].numpy())
    assert [KINDS[k] for k in kind if k] == []


def test_meta_fields_are_read_before_the_eviction_check(ring):
    writer, reader = ring
    sampler = reader.sampler("uniform", seed=0)
    view = sampler.view
    check, commits = view._check_not_evicted, []

    def evict_just_after_the_check(episode):
        check(episode)
        if not commits:
            commits.append(1)
            write_episodes(writer, 12)  # every slot the batch read now holds a newer episode

    view._check_not_evicted = evict_just_after_the_check
    batch = sampler.batch(64)
    assert commits and only_good(batch) == []


def test_a_sharded_batch_whose_episodes_are_evicted_during_the_gather_is_drawn_again(tmp_path):
    root = tmp_path / "shards"
    with ReplayBuffer(shard_folder(root, 0), fields=FIELDS, meta_fields=META, **RING) as writer:
        write_episodes(writer, 8)
        shards = ShardSet(root)
        sampler = shards.sampler("uniform", seed=0)
        evict_during_the_first_gather(sampler.samplers[0].view, writer)
        try:
            batch = sampler.batch(64)  # as UniformSampler.batch: refresh and draw again
            assert only_good(batch, shard_keys=True) == []
        finally:
            shards.close()


# ---- the episode table read while a writer reuses slots, and samplers built on it ------------------------------


def entries_are_the_writers(table, writer):
    """Every episode of a reader's ``table`` is live in the writer's store with exactly the writer's entry."""
    truth = writer.episode_store.live_table()
    where = truth.positions_of(table.ids)
    assert where is not None, f"the table holds evicted episodes {sorted(set(table.ids) - set(truth.ids))}"
    for column in ("slots", "start", "length", "end", "final"):
        np.testing.assert_array_equal(getattr(table, column), getattr(truth, column)[where], err_msg=column)


@pytest.mark.parametrize("reused", [1, 3, 8])
def test_a_table_read_after_the_writer_reused_slots_holds_only_intact_live_episodes(ring, reused):
    """The reader reads meta.json, then the writer evicts and reuses slots, then the reader reads the table:
    an evicted id must never get the newcomer's entry (start, length) from its reused slot."""
    writer, reader = ring
    store = reader.episode_store
    store.refresh()
    first = store.meta.state.first_episode
    while writer.episode_store.meta.state.next_episode < first + RING["max_episodes"] + reused:
        write_episodes(writer, 1)  # after the reader's read of meta.json, before its read of the table
    entries_are_the_writers(store.live_table(), writer)


def test_a_view_built_after_the_writer_evicted_everything_takes_the_newer_table(ring):
    writer, reader = ring
    reader.refresh()
    write_episodes(writer, 12)  # every episode of the meta.json just read is evicted, every slot reused
    view = reader.dataset(window=3)  # not empty: the table is read again after meta.json
    assert len(view) > 0
    entries_are_the_writers(view.table, writer)
    batch = view.__getitems__(np.arange(len(view)))
    episode, start = view.positions.locate(np.arange(len(view)))
    kind = classify(numpy_batch(batch, 3), np.repeat(view.table.ids[episode], 3),
                    (start[:, None] + np.arange(3)).reshape(-1), np.repeat(batch["tag"].numpy(), 3))
    assert [KINDS[k] for k in kind if k] == []


@pytest.mark.parametrize("options", [dict(), dict(n_steps=3), dict(window=3)], ids=["steps", "nstep3", "window3"])
def test_prioritized_samplers_over_tables_read_while_the_writer_commits_draw_only_live_rows(ring, options):
    """Each time the reader re-reads meta.json the writer commits one more episode (evicting the oldest)
    before the reader reads the table. Every batch holds only its keys' rows, update_priorities takes every
    batch's own keys, and every leaf of the sum tree with mass is a position of a live episode."""
    writer, reader = ring
    kind = "sequence" if "window" in options else "prioritized"
    sampler = reader.sampler(kind, follow="disk", seed=0, **options)
    store = reader.episode_store
    real_refresh = store.refresh

    def refresh_then_commit():
        changed = real_refresh()
        write_episodes(writer, 1)  # lands between the reader's read of meta.json and of the episode table
        return changed

    store.refresh = refresh_then_commit
    write_episodes(writer, 1)  # the first change the sampler follows; each refresh then brings one more
    window = options.get("window")
    batches = 0
    for _ in range(60):
        try:
            batch = sampler.batch(32)
        except SampleExpiredError:
            continue
        batches += 1
        ids, t = np.divmod(batch["_key"].numpy(), MAX_T)
        tags = batch["tag"].numpy()
        if window:
            ids, t, tags = np.repeat(ids, window), (t[:, None] + np.arange(window)).reshape(-1), np.repeat(tags, window)
        kind_of_rows = classify(numpy_batch(batch, window), ids, t, tags)
        assert [KINDS[k] for k in kind_of_rows if k] == []
        sampler.update_priorities(batch["_key"], np.full(len(batch["_key"]), 2.0))  # never refused
        table = sampler.view.table
        rows, _ = position_rows(sampler.view.positions, table, np.ones(len(table), dtype=bool))
        stray = np.setdiff1d(np.flatnonzero(sampler.tree.leaves[:sampler.tree.capacity]), rows)
        assert stray.size == 0, f"leaves with mass at rows {stray[:8]} that no live episode of the table holds"
    assert batches > 0
