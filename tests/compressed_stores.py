"""Small stores with a compressed field, for the tests of the sharing tools and commands (verify, checksums,
pack, card, stats, info) and of the folder-trust rules.

``make_compressed_store``: episodes of ``LENGTHS`` steps (episode 1 with a final observation) whose ``image`` is
uint8 (16, 16, 3) stored with zstd: zeros with a few random pixels, so a frame compresses some 20 to 30 times and
the stores stay tiny; a raw ``action`` and ``reward`` per step and a ``task_id`` per episode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memmap_replay import ReplayBuffer

IMAGE = (16, 16, 3)
LENGTHS = (3, 4, 5, 6)
FIELDS = dict(image=dict(dtype="uint8", shape=IMAGE, codec="zstd", level=3), action=("int", ()), reward="float")


def images(rng: np.random.Generator, count: int, pixels: int = 3) -> np.ndarray:
    """``count`` frames of zeros with ``pixels`` random pixels each (random colours)."""
    frames = np.zeros((count, *IMAGE), np.uint8)
    for frame in frames:
        frame[rng.integers(0, IMAGE[0], pixels), rng.integers(0, IMAGE[1], pixels)] = rng.integers(1, 256, (pixels, 3))
    return frames


def episode(rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    return dict(image=images(rng, length), action=rng.integers(0, 4, length).astype(np.int32),
                reward=rng.random(length).astype(np.float32))


def make_compressed_store(folder: Path, *, lengths=LENGTHS, seed: int = 0, max_episodes: int = 6,
                          max_timesteps: int = 10, **options) -> Path:
    """A closed store of ``lengths`` episodes (episode 1 with a final observation row); ``options`` go to
    ReplayBuffer (max_steps, circular, ...)."""
    rng = np.random.default_rng(seed)
    with ReplayBuffer(folder, max_episodes=max_episodes, max_timesteps=max_timesteps, fields=FIELDS,
                      meta_fields=dict(task_id="int"), **options) as buffer:
        for number, length in enumerate(lengths):
            final = dict(image=images(rng, 1)[0]) if number == 1 else None
            buffer.store_episode(**episode(rng, length), task_id=number, final=final,
                                 end="terminated" if number % 2 else "truncated")
    return folder


def all_data(folder: Path) -> dict[str, np.ndarray]:
    """Every live episode's fields, decoded (get_all_data as numpy)."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return {name: np.asarray(value) for name, value in buffer.get_all_data().items()}
