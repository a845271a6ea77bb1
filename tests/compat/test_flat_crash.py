"""A writer in 0.2.3's flat loop (``store`` ... ``advance_episode()``, or ``store_batch`` ...
``advance_episode(batch_size)``) SIGKILLed in the middle of an episode: the folder reopens with every
committed episode intact (steps and meta values) and nothing of the open one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.sharing.verify import verify

from conftest import reap

CHILD = r"""
import sys, time
import numpy as np
from memmap_replay import ReplayBuffer

folder, mode = sys.argv[1], sys.argv[2]
buffer = ReplayBuffer(folder, 10, 20, dict(reward="float", obs=("float", (3,))), dict(task="int"))
if mode == "steps":
    for number in range(3):
        for t in range(4 + number):
            buffer.store(reward=100.0 * number + t, obs=np.full(3, number))
        buffer.store_meta_datapoint(buffer.episode_index, "task", number)
        buffer.advance_episode()
    for t in range(5):
        buffer.store(reward=999.0)
    buffer.store_meta_datapoint(buffer.episode_index, "task", 99)
else:
    buffer.store_meta_batch(task=[0, 1, 2])
    for t in range(4):
        buffer.store_batch(reward=np.array([0.0, 100.0, 200.0]) + t, obs=np.repeat(np.arange(3.0)[:, None], 3, 1))
    buffer.advance_episode(batch_size=3)
    buffer.store_meta_batch(task=[99, 99])
    for t in range(3):
        buffer.store_batch(reward=np.full(2, 999.0))
print("inside", flush=True)
time.sleep(120)
"""


def expected_rewards(mode: str, number: int) -> list[float]:
    return [100.0 * number + t for t in range(4 + number if mode == "steps" else 4)]


@pytest.mark.parametrize("mode", ["steps", "batch"])
def test_kill_inside_a_flat_episode_keeps_the_committed_ones(tmp_path, mode):
    folder = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), mode], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    try:
        assert process.stdout.readline().strip() == b"inside", "the child did not reach the open episode"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.stdout.close()
        stderr = reap(process, 60)
    assert process.returncode == -signal.SIGKILL, stderr
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.num_episodes == 3 and reader.episode_lens[3:].tolist() == [0] * 7
        for number, episode in enumerate(reader.episodes()):
            assert episode["reward"].tolist() == expected_rewards(mode, number)
            np.testing.assert_array_equal(episode["obs"], np.full((len(episode), 3), number, np.float32))
            assert episode.meta["task"] == number
    assert verify(folder).ok
    with ReplayBuffer.from_folder(folder) as writer:  # the lock died with the child: the loop goes on
        writer.store(reward=1.0)
        assert writer.advance_episode() == 3 and writer.num_episodes == 4
