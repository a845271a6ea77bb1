"""The training loops the resume tests run (test_resume_training.py, test_resume_kill.py): each reads one order
(uniform draws, prioritized draws with their updates, a mixed uniform + prioritized sampler, a block-shuffled
epoch loader), saves its training state every ``SAVE_EVERY`` steps, and logs each batch."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np

from memmap_replay import MixedSampler, ReplayBuffer

ORDERS = ("uniform", "prioritized", "mixed", "blocks")
SAVE_EVERY = 5
BATCH = 8


def make_stores(root: Path) -> None:
    """Two small stores, 'a' and 'b', of steps whose reward names them (episode * 100 + t)."""
    rng = np.random.default_rng(0)
    for name, episodes in (("a", 9), ("b", 7)):
        with ReplayBuffer(root / name, max_episodes=16, max_timesteps=30,
                          fields={"obs": ("float", 2), "reward": "float"}) as buffer:
            for e in range(episodes):
                n = int(rng.integers(5, 30))
                buffer.store_episode(obs=rng.random((n, 2)), reward=np.arange(n, dtype=float) + 100 * e)


def copy_stores(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _endless(loader: Any):
    while True:
        yield from loader


def _priorities(rewards: np.ndarray, step: int) -> np.ndarray:
    return np.asarray(rewards, dtype=np.float64) % 7 + 0.25 * (step % 3) + 0.01


def train(root: Path, order: str, total: int, log: Callable[[dict], None], *, resume: bool = False,
          loader_options: dict | None = None, pace: Callable[[], None] | None = None) -> int:
    """Run the loop of ``order`` over the stores in ``root`` until step ``total`` (from the saved state when
    ``resume``); ``log`` gets {"step", "reward"} per batch and {"saved": step} after each save. Returns the
    step it started at."""
    loader_options = loader_options or {}
    buffer = ReplayBuffer.from_folder(root / "a")
    other = ReplayBuffer.from_folder(root / "b") if order == "mixed" else None
    objects: dict[str, Any] = {}
    prioritized = None
    if order == "uniform":
        objects["loader"] = buffer.sampler("uniform", timestep_level=True, seed=1).dataloader(BATCH, **loader_options)
    elif order == "prioritized":
        prioritized = buffer.sampler("prioritized", timestep_level=True, seed=2, alpha=0.7, beta=0.5, beta_steps=40)
        objects["loader"] = prioritized.dataloader(BATCH, **loader_options)
    elif order == "mixed":
        assert other is not None
        prioritized = other.sampler("prioritized", timestep_level=True, seed=4, alpha=0.6, beta=0.4)
        objects["mixed"] = MixedSampler({buffer.sampler("uniform", timestep_level=True, seed=3): 0.5,
                                         prioritized: 0.5})
    else:
        objects["loader"] = buffer.dataloader(BATCH, timestep_level=True, shuffle="blocks", block_size=8,
                                              block_window=2, seed=5, **loader_options)
    step = 0
    if resume:
        saved = buffer.load_training_state("run")
        for key, value in objects.items():
            value.load_state_dict(saved[key])
        step = saved["step"]
    start = step
    batches = _endless(objects["loader"]) if "loader" in objects else None
    try:
        while step < total:
            if pace is not None:
                pace()
            if batches is not None:
                batch = next(batches)
            else:
                batch = objects["mixed"].batch(BATCH)
            rewards = np.asarray(batch["reward"])
            log({"step": step, "reward": rewards.tolist()})
            if order == "prioritized":
                assert prioritized is not None
                prioritized.update_priorities(batch["_key"], _priorities(rewards, step))
            elif order == "mixed":
                objects["mixed"].update_priorities(batch, _priorities(rewards, step))
            step += 1
            if step % SAVE_EVERY == 0:
                buffer.save_training_state("run", {**objects, "step": step})
                log({"saved": step})
    finally:
        if prioritized is not None:
            prioritized.close()
        buffer.close()
        if other is not None:
            other.close()
    return start


def file_log(path: Path) -> Callable[[dict], None]:
    """A log that appends one JSON line per entry with one write (whole lines survive a SIGKILL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(entry: dict) -> None:
        os.write(fd, (json.dumps(entry) + "\n").encode())

    return log


def read_log(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
