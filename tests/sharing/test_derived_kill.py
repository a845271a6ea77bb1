"""``add_field`` under SIGKILL: a writer killed at any instant while it adds a field to a store of 2000 episodes
leaves either the store without the field (``verify`` OK; the half-written ``steps/<name>.npy``, or meta.json's
temporary file, at most a warning)
or the store with the field holding exactly the reference values; either way the next writer adds the field of
that name (a stale file is replaced) with the reference values. And a reader in another process sees a field added
to a store it reopens."""

from __future__ import annotations

import os
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kill_sweeps import fork_writer, reap
from memmap_replay import ReplayBuffer, discounted_return, returns_to_go, verify

FIELDS = dict(obs=("float", 3), reward="float")
META = dict(task_id="int")
MAX_TIMESTEPS = 16
BATCHES = [(250, length) for length in (3, 9, 4, 12, 5, 16, 1, 7)]  # (episodes, steps each): 2000 episodes
NAME = "rtg"


def make_store(folder: Path, seed: int = 0) -> list[np.ndarray]:
    """A closed store of 2000 episodes written in batches (some terminated with a final observation, some
    truncated, some without an end); returns each episode's rewards, oldest first."""
    rng = np.random.default_rng(seed)
    rewards: list[np.ndarray] = []
    with ReplayBuffer(folder, 2048, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META) as buffer:
        for number, (count, length) in enumerate(BATCHES):
            block = rng.standard_normal((length, count)).astype(np.float32)
            with buffer.batched_episode(count, task_id=number) as writer:
                for t in range(length):
                    buffer.store_batch(obs=rng.standard_normal((count, 3)).astype(np.float32), reward=block[t])
                end = (None, "terminated", "truncated")[number % 3]
                if end is not None:
                    writer.commit_all(end, final=dict(obs=np.ones((count, 3), np.float32)) if number % 2 else None)
            rewards += list(block.T)
    return rewards


def reference(rewards: list[np.ndarray]) -> list[np.ndarray]:
    """Returns-to-go in a float64 loop from each episode's end."""
    out = []
    for row in rewards:
        values, running = np.zeros(len(row)), 0.0
        for t in range(len(row) - 1, -1, -1):
            running = float(row[t]) + running
            values[t] = running
        out.append(values)
    return out


def add(buffer: ReplayBuffer) -> None:
    buffer.add_field(NAME, returns_to_go(dtype="float64"), block=8)


def read_field(folder: Path) -> list[np.ndarray] | None:
    """The field's rows per live episode (oldest first), or None when the store has no such field."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        if NAME not in buffer.fieldnames:
            return None
        data = buffer.get_all_data(fields=(NAME,), meta_fields=())
        lengths = data["episode_lens"].numpy()
        return [row[:length] for row, length in zip(data[NAME].numpy(), lengths)]


def matches(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(np.allclose(g, w, rtol=1e-12, atol=1e-9) for g, w in zip(got, want))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, list[np.ndarray]]:
    folder = tmp_path_factory.mktemp("derived_kill") / "base"
    return folder, reference(make_store(folder))


def sweep(tmp_path: Path, base: tuple[Path, list[np.ndarray]], kills: int) -> list[str]:
    folder0, want = base
    timed = tmp_path / "timed"
    shutil.copytree(folder0, timed)
    pid = fork_writer(timed, add)
    started = time.monotonic()
    assert reap(pid) == 0
    took = time.monotonic() - started  # (add_field and the close, after the writer opened)
    done = read_field(timed)
    assert done is not None and matches(done, want)
    rng = np.random.default_rng(kills)
    seen = []
    for number in range(kills):
        folder = tmp_path / f"s{number}"
        shutil.copytree(folder0, folder)
        pid = fork_writer(folder, add)
        time.sleep(float(rng.uniform(0, took)))
        os.kill(pid, signal.SIGKILL)
        assert reap(pid) in (0, signal.SIGKILL), f"kill {number}: the child failed before the kill"
        got = read_field(folder)
        report = verify(folder)
        assert report.ok, (number, report)
        if got is None:  # the store as it was: at most a stray file of the field (or a commit's temp), a warning
            assert all(f"steps/{NAME}.npy" in line or "left by a commit that was interrupted" in line
                       for line in report.warnings), (number, report.warnings)
            seen.append("stray" if (folder / "steps" / f"{NAME}.npy").exists() else "before")
            with ReplayBuffer.from_folder(folder) as writer:
                add(writer)
            got = read_field(folder)
            assert got is not None
            report = verify(folder)
            assert report.ok and not report.warnings, (number, report)
        else:
            seen.append("after")
            for done_rows, got_rows in zip(done, got):  # exactly the values of the run not killed
                np.testing.assert_array_equal(got_rows, done_rows)
        assert matches(got, want), f"kill {number}: the field's values are not the reference's"
        shutil.rmtree(folder)
    return seen


def test_a_few_kills_during_add_field_leave_the_store_before_or_after(tmp_path, base):
    assert len(sweep(tmp_path, base, kills=3)) == 3


@pytest.mark.slow
def test_kills_at_many_instants_during_add_field_leave_the_store_before_or_after(tmp_path, base):
    seen = sweep(tmp_path, base, kills=30)
    assert "after" in seen and {"before", "stray"} & set(seen), seen  # (the instants met both sides)


# ---- a reader in another process ---------------------------------------------------------------------------


def make_small_store(folder: Path) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    rewards = [rng.standard_normal(int(rng.integers(1, MAX_TIMESTEPS + 1))).astype(np.float32) for _ in range(8)]
    with ReplayBuffer(folder, 16, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META) as buffer:
        for number, row in enumerate(rewards):
            buffer.store_episode(obs=np.zeros((len(row), 3), np.float32), reward=row, task_id=number,
                                 end="truncated", final=dict(obs=np.ones(3, np.float32)) if number % 2 else None)
    return rewards


READER = r'''
import json, sys
from memmap_replay import ReplayBuffer
with ReplayBuffer.from_folder(sys.argv[1], read_only=True) as buffer:
    print(json.dumps({str(e.id): [e["rtg"].tolist(), float(e.meta["ret"])] for e in buffer.episodes()}))
'''


def test_a_reader_in_another_process_sees_the_field(tmp_path):
    folder = tmp_path / "s"
    rewards = make_small_store(folder)
    with ReplayBuffer.from_folder(folder) as writer:
        writer.add_field("rtg", returns_to_go(dtype="float64"))
        writer.add_field("ret", discounted_return(gamma=0.9, dtype="float64"))
        done = subprocess.run([sys.executable, "-c", READER, str(folder)], capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert sorted(map(int, got)) == list(range(len(rewards)))
    for number, (row, want) in enumerate(zip(rewards, reference(rewards))):
        rtg, ret = got[str(number)]
        np.testing.assert_allclose(rtg, want, rtol=1e-12, atol=1e-12)
        assert ret == pytest.approx(sum(0.9 ** t * float(r) for t, r in enumerate(row)), rel=1e-12, abs=1e-12)
