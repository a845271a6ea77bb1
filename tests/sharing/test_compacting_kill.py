"""``compact()`` killed (SIGKILL) at seeded instants in a forked child, on a store with few free rows after its last
episode (so that it moves them in several rounds): the folder reopens with exactly the same episodes and values,
``verify`` is clean, and ``compact()`` again finishes. A reader in another process drawing batches while a writer
deletes and compacts again and again gets each batch from one version of the store, never a torn one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, verify

from kill_sweeps import fork_writer, reap
from test_inplace_kill import batches_read, read_while, wait_for_batches

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float")
META = dict(task_id="int")
MAX_TIMESTEPS = 12
COUNT = 30


def episode(rng: np.random.Generator, number: int) -> dict:
    """Steps whose obs is (episode id, step, noise); truncated ones with a final observation."""
    length = int(rng.integers(3, MAX_TIMESTEPS + 1))
    obs = np.stack([np.full(length, number), np.arange(length), rng.standard_normal(length)], 1).astype(np.float32)
    end = ("terminated", "truncated")[number % 2]
    return dict(obs=obs, action=rng.integers(-9, 9, (length, 2)).astype(np.int32),
                reward=rng.standard_normal(length).astype(np.float32), task_id=number % 5, end=end,
                final=dict(obs=np.full(3, -number, np.float32)) if end == "truncated" else None)


def make_store(folder: Path, seed: int = 0) -> int:
    """``COUNT`` episodes with a few free rows after them (just more than the longest episode), some deleted and
    trimmed so that most move; returns the live rows compact() leaves."""
    rng = np.random.default_rng(seed)
    episodes = [episode(rng, number) for number in range(COUNT)]
    rows = sum(len(item["obs"]) + (item["final"] is not None) for item in episodes)
    with ReplayBuffer(folder, 2 * COUNT, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META,
                      max_steps=rows + MAX_TIMESTEPS + 2) as buffer:
        for item in episodes:
            buffer.store_episode(**item)
        buffer.delete_episodes([0, 7, 8, 19])
        buffer.trim(3, start=1)
        buffer.trim(12, stop=2)
        return sum(len(item) + (item.final is not None) for item in buffer.episodes())


def snapshot(folder: Path) -> list[tuple]:
    """Every live episode as a reader sees it: id, end, meta values, every field's bytes, the final row's."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return [(item.id, item.end, dict(item.meta), {name: item[name].tobytes() for name in FIELDS},
                 None if item.final is None else {name: item.final[name].tobytes() for name in FIELDS})
                for item in buffer.episodes()]


def sweep(tmp_path: Path, kills: int) -> None:
    base = tmp_path / "base"
    rows_after = make_store(base)
    want = snapshot(base)
    timed = tmp_path / "timed"
    shutil.copytree(base, timed)
    pid = fork_writer(timed, ReplayBuffer.compact)
    started = time.monotonic()
    assert reap(pid) == 0
    took = time.monotonic() - started
    assert snapshot(timed) == want
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    with ReplayBuffer.from_folder(probe) as buffer:
        assert buffer.compact().commits >= 6  # (several rounds through the few free rows: kills fall among them)
    rng = np.random.default_rng(kills)
    for number in range(kills):
        folder = tmp_path / f"s{number}"
        shutil.copytree(base, folder)
        pid = fork_writer(folder, ReplayBuffer.compact)
        time.sleep(float(rng.uniform(0, took)))
        os.kill(pid, signal.SIGKILL)
        assert reap(pid) in (0, signal.SIGKILL), f"kill {number}: the child failed before the kill"
        assert snapshot(folder) == want, f"kill {number}: the episodes changed"
        report = verify(folder)
        assert report.ok, report
        with ReplayBuffer.from_folder(folder) as writer:
            assert writer.compact().rows_after == rows_after
        assert snapshot(folder) == want
        report = verify(folder)
        assert report.ok, report
        # (the next writer removed any journal temp file a kill left; one of the card's, written after the compact's
        # last commit, is only a warning)
        assert [line for line in report.warnings if not line.startswith(("card.json.", "README.md."))] == [], report
        shutil.rmtree(folder)


def test_a_few_kills_during_compact_leave_every_episode(tmp_path):
    sweep(tmp_path, kills=4)


@pytest.mark.slow
def test_kills_at_many_instants_during_compact_leave_every_episode(tmp_path):
    sweep(tmp_path, kills=30)


def test_a_reader_in_another_process_never_gets_a_torn_batch_during_compacts(tmp_path):
    folder, control = tmp_path / "s", tmp_path / "control"
    control.mkdir()
    rng = np.random.default_rng(11)
    with ReplayBuffer(folder, 128, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META,
                      max_steps=20 * MAX_TIMESTEPS) as buffer:
        for number in range(12):
            buffer.store_episode(**dict(episode(rng, number), task_id=0))
    def work(reader: subprocess.Popen) -> None:
        moved, next_id = 0, 12
        with ReplayBuffer.from_folder(folder) as buffer:
            for k in range(12, 24):
                ids = buffer.episode_ids.tolist()
                buffer.delete_episodes(sorted(rng.choice(ids, 1 + k % 2, replace=False).tolist()))
                moved += buffer.compact().moved_episodes
                for _ in range(1 + k % 2):  # (as many as were deleted)
                    buffer.store_episode(**dict(episode(rng, next_id), task_id=0))
                    next_id += 1
                wait_for_batches(reader, control, batches_read(control) + 2)
            assert moved > 8

    assert read_while(folder, control, work) >= 24
    assert verify(folder).ok
