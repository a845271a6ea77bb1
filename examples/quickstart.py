"""Quickstart: write episodes (step by step, whole, and from vectorized envs), reopen, print a summary.

    python examples/quickstart.py [folder]
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

from memmap_replay import ReplayBuffer


def main(folder: Path) -> None:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(
        folder,
        max_episodes=100,
        max_timesteps=200,
        fields=dict(obs=("uint8", (3, 32, 32)), action=("float", 4), reward="float"),
        meta_fields=dict(task_id="int", seed="int"),
        circular=True,
        overwrite=True,
    )

    # 1. step by step, saying how the episode ended and what came after the last action
    for episode in range(3):
        with buffer.one_episode(task_id=episode % 2) as meta:
            for t in range(int(rng.integers(50, 200))):
                buffer.store(obs=rng.integers(0, 256, (3, 32, 32), dtype=np.uint8),
                             action=rng.standard_normal(4).astype(np.float32), reward=float(t % 7 == 0))
            meta["seed"] = 1000 + episode
            meta.set_end("truncated", final=dict(obs=np.zeros((3, 32, 32), np.uint8)))

    # 2. a whole episode in one call
    buffer.store_episode(obs=rng.integers(0, 256, (120, 3, 32, 32), dtype=np.uint8),
                         action=rng.standard_normal((120, 4)).astype(np.float32),
                         reward=np.ones(120, np.float32), task_id=1, end="terminated")

    # 3. eight environments stepping together; each env's episode commits on its own flag
    envs = buffer.vector_writer(8, task_id=2)
    for _ in range(300):
        envs.store(obs=rng.integers(0, 256, (8, 3, 32, 32), dtype=np.uint8),
                   action=rng.standard_normal((8, 4)).astype(np.float32),
                   reward=rng.standard_normal(8).astype(np.float32),
                   terminated=rng.random(8) < 0.02, truncated=envs.lengths >= 199)
    buffer.close()

    # reopen, from this or any other process
    reopened = ReplayBuffer.from_folder(folder, read_only=True)
    data = reopened.get_all_data(fields=("reward",), meta_fields=("task_id", "episode_lens"))
    print(reopened)
    print(f"episodes: {reopened.num_episodes}, steps: {reopened.num_steps}, "
          f"longest: {int(data['episode_lens'].max())}, tasks: {sorted(set(data['task_id'].tolist()))}")
    print(f"mean return: {float(data['reward'].sum(1).mean()):.2f}")
    reopened.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "quickstart")
