"""The canonical workload of shared/bench/WORKLOAD.md, shared by the benchmark scripts."""

from __future__ import annotations

import numpy as np

FIELDS = dict(image=("uint8", (3, 64, 64)), action=("float", 6), reward="float", done="bool")
META_FIELDS = dict(task_id="int")


class Data:
    """Pre-generated episodes (seeded): image uint8 (3, 64, 64), action float32 (6,), reward, done, task_id."""

    def __init__(self, episodes: int, steps: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.episodes, self.steps = episodes, steps
        self.image = rng.integers(0, 256, (episodes, steps, 3, 64, 64), dtype=np.uint8)
        self.action = rng.standard_normal((episodes, steps, 6), dtype=np.float32)
        self.reward = rng.standard_normal((episodes, steps), dtype=np.float32)
        self.done = np.zeros((episodes, steps), dtype=bool)
        self.done[:, -1] = True
        self.task_id = rng.integers(0, 10, episodes)
        self.row_nbytes = sum(a[0, 0].nbytes for a in (self.image, self.action, self.reward, self.done))

    @property
    def total_steps(self) -> int:
        return self.episodes * self.steps

    @property
    def nbytes(self) -> int:
        return self.total_steps * self.row_nbytes
