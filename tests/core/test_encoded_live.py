"""Readers in other processes while a writer rings through a store with a compressed field (``core/encoded.py``).

A reader's batch of a compressed field decodes frames that the writer may be overwriting meanwhile: the index
entry read before the frame's bytes change, or a frame half old and half new. Such a batch must be refused with
``SampleExpiredError`` (its episode was evicted: the view's check against the writer says so), never handed
out, and never a ``CorruptStoreError`` (the store is not damaged). Every batch a reader keeps is bit-exact.

The writer and the checks are ``benchmarks/live_checks.py``'s (as ``tests/test_live.py`` uses them), on a
store whose ``frame`` field is 16x16 uint8 with ``codec="zstd"``: frames compress by different amounts from
episode to episode (some rows are stored raw), so the ring evicts by the frames' bytes as well as by rows.
The readers: a uniform sampler, a window view, prioritized samplers of single steps, n-step targets and
sequences (following the writer by themselves), a prioritized sampler's DataLoader on worker threads, and whole
episodes read through ``buffer.episodes()``. (Not a loader on worker processes: each epoch starts its processes,
and the ring, whose episodes live a few milliseconds, expires nearly every epoch before its first batch.) Each
is a process forked from this one (its torch set to one thread); every wait has a limit, and every process is
reaped.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, SampleExpiredError

pytest.importorskip("zstandard")

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # live_checks.py

from live_checks import Live, Tally, mix, read_log, ready, stopped, wait_for_episodes  # noqa: E402

MAX_T = 16
WAIT = 60.0  # seconds any wait may take before the test gives up (a hang guard, not a timing assertion)
READ_SECONDS = 2.0  # the readers read at least this long while the writer writes (not a timing assertion)
WRAPS = 10  # ... and until the ring wrapped this many times since they all began


class EncodedLive(Live):
    MAX_T, MIN_LENGTH = MAX_T, 2
    RING = dict(max_episodes=8, max_timesteps=MAX_T, max_steps=64, circular=True)
    FIELDS = dict(frame=dict(dtype="uint8", shape=(16, 16), codec="zstd"), action=("int", 2), eid="int64",
                  t="int32", check="int64")
    CHECKED = ("frame", "action", "eid", "t")
    LIFETIME, FIRST_WAIT, STEPWISE_EVERY, SEED_STRIDE = 120.0, 120.0, 3, 100_000

    def payload(self, h, gid):
        """Frames of noise (kind 0: stored raw), half noise (2) or flat (1), episodes of a kind two by two; every
        frame carries its row's key."""
        count = len(h)
        noise = (mix(h[:, None] * 256 + np.arange(256)) % 256).astype(np.uint8).reshape(count, 16, 16)
        kind = (np.asarray(gid) // 2 % 3)[:, None, None, None]
        rows = np.arange(16)[None, None, :, None]
        frame = np.where((kind == 0) | ((kind == 2) & (rows >= 8)), noise[:, None], 0)[:, 0].astype(np.uint8)
        frame[:, 0, :4] = h.astype("<u4")[:, None].view(np.uint8)
        return dict(frame=frame, action=np.stack([h, -gid], axis=1).astype(np.int32))

    def episode_reader(self, folder, stop_file, result, seed):
        """Whole episodes through ``buffer.episodes()`` (the list made again after SampleExpiredError), each
        compared with what was written for its id."""
        deadline = time.monotonic() + self.LIFETIME
        tally = Tally()
        rng = np.random.default_rng(seed)
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            wait_for_episodes(buffer, time.monotonic() + self.FIRST_WAIT)
            tally.first_ids = [buffer.episode_store.meta.state.first_episode]
            while not stopped(stop_file, deadline):
                buffer.refresh()
                episodes = buffer.episodes()
                try:
                    for position in rng.integers(0, len(episodes), 4):
                        episode = episodes[int(position)]
                        got, count = episode.fields, len(episode)
                        self.check(tally, {**got, "tag": np.full(count, episode.meta["tag"])},
                                   np.full(count, episode.id), np.arange(count), np.full(count, episode.id))
                except SampleExpiredError:
                    tally.expired += 1
                    tally.redrawn += 1
                    continue
                if tally.batches >= 1:
                    ready(result)
            buffer.refresh()
            tally.last_ids = [buffer.episode_store.meta.state.first_episode]
        tally.save(result)


LIVE = EncodedLive()

READERS = {
    "sampler": (LIVE.sampler_reader, 1),
    "window-view": (LIVE.view_reader, 2),
    "prioritized": (LIVE.prioritized_reader, 3, "prioritized"),
    "nstep": (LIVE.prioritized_reader, 4, "nstep"),
    "sequence": (LIVE.prioritized_reader, 5, "sequence"),
    "loader-threads": (LIVE.loader_reader, 6, "sampler", "threads"),
    "episodes": (LIVE.episode_reader, 7),
}


def _run(target, args, error):
    """A forked worker's body: stderr to ``error``, torch on one thread, ``target(*args)``; never returns."""
    code = 1
    try:
        os.dup2(os.open(error, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # its stacks, if it is found hanging
        import torch

        torch.set_num_threads(1)  # (its OpenMP pool is not fork-safe; the library's own threads are)
        target(*args)
        code = 0
    except BaseException:
        os.write(2, traceback.format_exc().encode())
    finally:
        os._exit(code)


class Workers:
    """Worker processes forked from this one, each with its stderr in a file."""

    def __init__(self, tmp: Path):
        self.tmp, self.processes = tmp, {}

    def start(self, name, target, *args):
        error = self.tmp / f"{name}.stderr"
        process = multiprocessing.get_context("fork").Process(target=_run, args=(target, args, error))
        process.start()
        self.processes[name] = (process, error)

    def stderr(self, name) -> str:
        error = self.processes[name][1]
        return error.read_text() if error.exists() else ""

    def fail(self, why: str):
        running = [process for process, _ in self.processes.values() if process.exitcode is None]
        for process in running:
            os.kill(process.pid, signal.SIGUSR1)  # (each writes its threads' stacks to its stderr file)
        time.sleep(0.5)
        for process in running:
            os.kill(process.pid, signal.SIGKILL)
            process.join(WAIT)
        pytest.fail(why + "\n" + "\n".join(f"--- {name}:\n{self.stderr(name)}" for name in self.processes))

    def wait_until(self, ready, what: str, progress, limit: float = WAIT) -> None:
        """Until ``ready()``; fails if a worker ends meanwhile, or after ``limit`` s (saying ``progress()``)."""
        deadline = time.monotonic() + limit
        while not ready():
            ended = [name for name, (process, _) in self.processes.items() if process.exitcode is not None]
            if ended:
                self.fail(f"{ended} ended while waiting for the {what}")
            if time.monotonic() > deadline:
                self.fail(f"no {what} within {limit} s ({progress()})")
            time.sleep(0.005)

    def finish(self) -> None:
        for name, (process, _) in self.processes.items():
            process.join(WAIT)
            if process.exitcode is None:
                self.fail(f"{name} did not finish within {WAIT} s")
        failed = {name: process.exitcode for name, (process, _) in self.processes.items() if process.exitcode}
        if failed:
            self.fail(f"workers failed (exit codes {failed}): a CorruptStoreError here is a frame being overwritten "
                      f"that a view did not turn into SampleExpiredError")


def check_store(folder: Path, log: Path) -> None:
    """Every live episode is exactly what was written for its id, and the store holds what the writer logged."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        for episode_id, gid, length, tag, rows, want in LIVE.live_episodes(store):
            assert int(length) == len(want["eid"]) and int(tag) == gid, f"episode {episode_id}"
            for name, values in want.items():
                np.testing.assert_array_equal(rows[name], values, err_msg=f"episode {episode_id}, field {name!r}")
        opened, done = read_log(log)
        assert done == list(range(opened, opened + len(done)))
        assert store.meta.state.next_episode == opened + len(done)


def test_readers_in_other_processes_get_bit_exact_batches_or_sample_expired(tmp_path):
    folder, stop, log = tmp_path / "ring", tmp_path / "stop", tmp_path / "writer.log"
    ReplayBuffer(folder, fields=LIVE.FIELDS, meta_fields=LIVE.META, **LIVE.RING).close()
    Path(f"{stop}.changed").touch()  # (the loader reader waits for this after its first batch: nothing to wait for)
    workers = Workers(tmp_path)
    workers.start("writer", LIVE.writer_main, folder, stop, log)
    results = {name: tmp_path / f"{name}.json" for name in READERS}
    for name, (function, *extra) in READERS.items():
        workers.start(name, function, folder, stop, results[name], *extra)
    workers.wait_until(lambda: all(Path(f"{result}.ready").exists() for result in results.values()),
                       "first batch of every reader", lambda: sorted(name for name, result in results.items()
                                                                     if not Path(f"{result}.ready").exists()),
                       LIVE.FIRST_WAIT)  # (the prioritized samplers' numba kernels may compile first: tens of s)
    began, first = time.monotonic(), len(read_log(log)[1])
    ring = LIVE.RING["max_episodes"]

    def written():
        return len(read_log(log)[1]) - first

    workers.wait_until(lambda: written() >= WRAPS * ring and time.monotonic() - began > READ_SECONDS,
                       f"{WRAPS} wraps of the ring", lambda: f"{written()} episodes written")
    stop.touch()
    workers.finish()
    tallies = {name: Tally.load(path) for name, path in results.items()}
    check_store(folder, log)
    for name, tally in tallies.items():
        assert tally.batches > 0, f"{name}: {tally}"
        assert tally.last_ids[0] - tally.first_ids[0] >= WRAPS * ring, f"{name}: too few evictions: {tally}"
    wrong = {name: tally for name, tally in tallies.items() if tally.wrong or tally.refused}
    assert not wrong, f"readers got rows that are not what their batch says: {wrong}"
    assert sum(tally.expired for tally in tallies.values()) > 0, f"no batch was ever refused: {tallies}"
