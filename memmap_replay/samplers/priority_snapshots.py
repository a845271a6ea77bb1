"""Snapshots of a prioritized sampler's priorities, saved with a training state (``buffer.save_training_state``).

A training state and the priorities it goes with must be one commit: the folder's ``priorities/<name>.npy``
go on changing after a save (the run trains on until it is killed), and a read-only reader keeps its
priorities in memory only. So, inside ``collecting_snapshots()``, each prioritized sampler's ``state_dict()``
also takes a ``PrioritySnapshot`` of its sum tree and names it in the state (``"priorities": key``); the
training-state file (``core/training.py``) stores the snapshots' arrays beside the JSON, under the same
commit, and ``load_training_state`` puts each snapshot back in place of its key, for ``load_state_dict``.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

from ..errors import InvalidDataError

__all__ = ["PrioritySnapshot", "collecting_snapshots", "snapshot_key"]


_COLLECTING: contextvars.ContextVar[dict[str, "PrioritySnapshot"] | None] = contextvars.ContextVar(
    "memmap_replay_priority_snapshots", default=None)


class PrioritySnapshot:
    """A prioritized sampler's priorities at one instant, as ``buffer.save_training_state`` keeps them beside
    the state (``load_training_state`` hands them back inside the sampler's state, for ``load_state_dict``):
    the sum tree's leaves (``priority ** alpha`` per row, the tree's capacity long: a tree rebuilt from them
    draws exactly as the saved one did) and the episodes they were of (ids and first rows, ascending ids).
    A snapshot is the sampler's, not the folder's ``priorities/<name>.npy``: those go on changing after the
    save (and a read-only reader has none), so a training state and its priorities are one commit."""

    PARTS = ("leaves", "ids", "starts")

    def __init__(self, leaves: np.ndarray, ids: np.ndarray, starts: np.ndarray):
        self.leaves = np.asarray(leaves, dtype=np.float64)
        self.ids, self.starts = np.asarray(ids, dtype=np.int64), np.asarray(starts, dtype=np.int64)

    def arrays(self) -> dict[str, np.ndarray]:
        """The parts by name (what the training-state file stores)."""
        return {part: getattr(self, part) for part in self.PARTS}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "PrioritySnapshot":
        """A snapshot of stored parts, checked (``InvalidDataError`` names what is wrong)."""
        if set(arrays) != set(cls.PARTS):
            raise InvalidDataError(f"a priority snapshot must have the parts {list(cls.PARTS)} (got {sorted(arrays)})")
        leaves, ids, starts = (arrays[part] for part in cls.PARTS)
        if leaves.dtype != np.float64 or leaves.ndim != 1 or not len(leaves):
            raise InvalidDataError(f"a priority snapshot's leaves must be float64 of one dimension (got {leaves.dtype} "
                                   f"{leaves.shape})")
        if not (np.isfinite(leaves).all() and (leaves >= 0).all()):
            raise InvalidDataError("a priority snapshot's leaves must be finite and >= 0")
        for part, values in (("ids", ids), ("starts", starts)):
            if values.dtype != np.int64 or values.shape != ids.shape or (values < 0).any():
                raise InvalidDataError(f"a priority snapshot's {part} must be int64 >= 0, one per episode (got "
                                       f"{values.dtype} {values.shape})")
        if (np.diff(ids) <= 0).any():
            raise InvalidDataError("a priority snapshot's episode ids must be ascending")
        return cls(leaves, ids, starts)


@contextmanager
def collecting_snapshots() -> Iterator[dict[str, PrioritySnapshot]]:
    """Within the block, each prioritized sampler's ``state_dict()`` also takes a snapshot of its priorities,
    collected in the dict yielded (key -> snapshot), and names its key in the state (``"priorities"``)."""
    collected: dict[str, PrioritySnapshot] = {}
    token = _COLLECTING.set(collected)
    try:
        yield collected
    finally:
        _COLLECTING.reset(token)


def snapshot_key(make: Callable[[], PrioritySnapshot]) -> str | None:
    """Inside ``collecting_snapshots``: ``make()`` collected under a new key, returned; elsewhere None."""
    collected = _COLLECTING.get()
    if collected is None:
        return None
    key = f"priorities-{len(collected)}"
    collected[key] = make()
    return key
