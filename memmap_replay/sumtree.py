"""A vectorized binary sum tree (and min tree) for proportional prioritized replay. Numpy only.

Leaves hold priorities; every inner node holds the sum (and the minimum) of its two children, in one
flat array (node 1 is the root, node i has children 2i and 2i + 1). A batch of updates rewrites its
leaves and then recomputes, level by level, the parents it touched from their children (no running
deltas, so no floating-point drift). A batch of draws descends all its values at once, one level per
step. Each level is a handful of numpy calls on arrays of the batch's size: no Python loop per item.
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidDataError

__all__ = ["SumTree"]


class SumTree:
    """``capacity`` leaves of non-negative priority (0 = never drawn)."""

    def __init__(self, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise InvalidDataError(f"capacity must be a positive int (got {capacity!r})")
        self.capacity = int(capacity)
        self.size = 1 << max(0, (self.capacity - 1).bit_length())  # leaves, padded to a power of two
        self.depth = self.size.bit_length() - 1
        self.sums = np.zeros(2 * self.size, dtype=np.float64)
        self.mins = np.full(2 * self.size, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """The smallest positive priority (inf when every leaf is 0)."""
        return float(self.mins[1])

    @property
    def leaves(self) -> np.ndarray:
        return self.sums[self.size: self.size + self.capacity]

    def update(self, indices, priorities) -> None:
        """Set the priorities of leaves ``indices`` (if an index repeats, its last value wins)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        priorities = np.broadcast_to(np.asarray(priorities, dtype=np.float64), indices.shape)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise InvalidDataError(f"leaf indices must be in [0, {self.capacity}) (got {indices.min()}..{indices.max()})")
        if not np.isfinite(priorities).all() or (priorities < 0).any():
            raise InvalidDataError("priorities must be finite and >= 0")
        sums, mins = self.sums, self.mins
        node = indices + self.size
        sums[node] = priorities
        mins[node] = np.where(priorities > 0, priorities, np.inf)
        for _ in range(self.depth):
            node >>= 1
            left = node + node
            right = left + 1
            sums[node] = sums[left] + sums[right]
            mins[node] = np.minimum(mins[left], mins[right])

    def find(self, values) -> np.ndarray:
        """Leaf index for each value in [0, total): the leaf whose prefix-sum interval holds it.
        Leaves of priority 0 are never returned."""
        values = np.array(values, dtype=np.float64, copy=True).reshape(-1)
        node = np.ones(len(values), dtype=np.int64)
        sums = self.sums
        for _ in range(self.depth):
            node += node
            left = sums[node]
            right = values >= left
            values -= left * right
            node += right
        node -= self.size
        stray = np.flatnonzero((node >= self.capacity) | (sums[np.minimum(node, self.capacity - 1) + self.size] <= 0))
        if stray.size:  # rounding at an interval's edge landed on an empty leaf: take the nearest filled one
            node[stray] = self._nearest_filled(np.minimum(node[stray], self.capacity - 1))
        return node

    def _nearest_filled(self, leaves_at: np.ndarray) -> np.ndarray:
        """The closest leaf with positive priority before (else after) each given leaf; rare, so plain."""
        filled = np.flatnonzero(self.sums[-1][: self.capacity] > 0)
        where = np.searchsorted(filled, leaves_at)
        before = filled[np.maximum(where - 1, 0)]
        after = filled[np.minimum(where, len(filled) - 1)]
        return np.where(where > 0, before, after)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified draws: one uniform value in each of ``batch_size`` equal slices of the total."""
        total = self.total
        if not total > 0:
            raise InvalidDataError("cannot sample: every priority is 0 (nothing to draw)")
        values = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        return self.find(np.minimum(values, np.nextafter(total, 0)))

    def load_leaves(self, leaves: np.ndarray) -> None:
        """Rebuild the whole tree from leaf priorities (e.g. read back from the store folder)."""
        leaves = np.asarray(leaves, dtype=np.float64)
        if leaves.shape != (self.capacity,):
            raise InvalidDataError(f"leaves must have shape ({self.capacity},) (got {leaves.shape})")
        if not np.isfinite(leaves).all() or (leaves < 0).any():
            raise InvalidDataError("priorities must be finite and >= 0")
        size = self.size
        self.sums[:] = 0
        self.mins[:] = np.inf
        self.sums[size: size + self.capacity] = leaves
        self.mins[size: size + self.capacity] = np.where(leaves > 0, leaves, np.inf)
        width = size
        while width > 1:
            width //= 2
            level = slice(width, 2 * width)
            self.sums[level] = self.sums[2 * width: 4 * width: 2] + self.sums[2 * width + 1: 4 * width: 2]
            self.mins[level] = np.minimum(self.mins[2 * width: 4 * width: 2], self.mins[2 * width + 1: 4 * width: 2])
