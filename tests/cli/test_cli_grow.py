"""The ``grow`` command: raising a store's capacity from the command line, its refusals and exit codes.

One test runs ``python -m memmap_replay grow`` as a user would; the rest call ``cli.main`` in-process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.cli import EXIT_OK, EXIT_USAGE, main

FIELDS = dict(obs=("float", 3), reward="float")


def full_store(folder, episodes: int = 3, **options) -> None:
    rng = np.random.default_rng(0)
    with ReplayBuffer(folder, episodes, 5, FIELDS, **options) as buffer:
        for _ in range(episodes):
            buffer.store_episode(obs=rng.standard_normal((4, 3)).astype(np.float32),
                                 reward=rng.standard_normal(4).astype(np.float32))


def test_grow_then_store_more(tmp_path, capsys):
    full_store(tmp_path / "s")
    assert main(["grow", str(tmp_path / "s"), "--max-episodes", "6", "--max-steps", "60", "--circular"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "max_episodes 3 -> 6" in out and "max_steps 18 -> 60" in out and "circular False -> True" in out
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        assert (buffer.max_episodes, buffer.max_steps, buffer.circular, len(buffer)) == (6, 60, True, 3)
        for _ in range(5):
            buffer.store_episode(obs=np.zeros((4, 3), np.float32), reward=np.zeros(4, np.float32))
        assert len(buffer) == 6


def test_grow_json(tmp_path, capsys):
    full_store(tmp_path / "s")
    assert main(["grow", str(tmp_path / "s"), "--max-timesteps", "9", "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["before"]["max_timesteps"] == 5 and report["capacity"]["max_timesteps"] == 9


@pytest.mark.parametrize("args,message", [
    ([], "nothing to grow: pass --max-episodes"),
    (["--max-episodes", "2"], r"max_episodes must be at least the store's max_episodes=3 \(got 2\)"),
    (["--max-steps", "0"], r"max_steps must be a positive int \(got 0\)"),
])
def test_grow_refusals_leave_the_store(tmp_path, capsys, args, message):
    full_store(tmp_path / "s")
    before = (tmp_path / "s" / "meta.json").read_bytes()
    assert main(["grow", str(tmp_path / "s"), *args]) == EXIT_USAGE
    assert re.search(message, capsys.readouterr().err)
    assert (tmp_path / "s" / "meta.json").read_bytes() == before


def test_grow_of_no_store_or_of_a_ring_to_linear(tmp_path, capsys):
    assert main(["grow", str(tmp_path / "absent"), "--max-episodes", "4"]) == EXIT_USAGE
    assert "no store at" in capsys.readouterr().err
    full_store(tmp_path / "ring", circular=True)
    assert main(["grow", str(tmp_path / "ring"), "--circular", "--max-episodes", "4"]) == EXIT_OK  # stays a ring
    with ReplayBuffer.from_folder(tmp_path / "ring", read_only=True) as buffer:
        assert buffer.circular and buffer.max_episodes == 4


def test_grow_while_a_writer_writes_is_refused(tmp_path, capsys):
    full_store(tmp_path / "s")
    writer = ReplayBuffer.from_folder(tmp_path / "s")
    writer.episode_store.require_writable("hold the lock")
    try:
        assert main(["grow", str(tmp_path / "s"), "--max-episodes", "9"]) == EXIT_USAGE
        assert "stop the writer, then grow the store" in capsys.readouterr().err
    finally:
        writer.close()


def test_python_dash_m_grow(tmp_path):
    full_store(tmp_path / "s")
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "grow", "s", "--max-episodes", "10"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "max_episodes 3 -> 10" in done.stdout
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "grow", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--max-episodes N" in done.stdout and "Crash-safe" in done.stdout
