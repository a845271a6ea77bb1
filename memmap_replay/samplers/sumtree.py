"""A vectorized sum tree (and min tree) for proportional prioritized replay. Numpy only.

Leaves hold priorities; every inner node holds the sum (and the minimum) of its two children (node i has
children 2i and 2i + 1, leaf j is node ``size + j``). Each node's sum and minimum sit side by side in one
float64 array ``nodes`` of shape (2 * size, 2) (``flat``: the same, one-dimensional), which starts on a
cache line: the two children of node i are the 32 bytes [sum(2i), min(2i), sum(2i + 1), min(2i + 1)]
from ``flat[4i]``, always within one 64-byte cache line, so an update reads and writes one line per level
(with two arrays of sums and of minimums, it was one line in each). ``sums`` and ``mins`` are the strided
views ``nodes[:, 0]`` and ``nodes[:, 1]``. The tree stops at a flat top level of ``top`` nodes (nodes
``top .. 2 * top - 1``): nothing above it is stored. A draw takes the cumulative sum of that level (a few
thousand numbers, recomputed exactly for each batch, so nothing drifts) and one ``searchsorted``, then
descends the remaining levels; an update rewrites its leaves and recomputes the parents it touched, from
their children, up to the top level. The numpy code reads both children's sums and minimums with one
gather of ``nodes`` seen as rows of four floats (row i: the children of node i), and gathers or writes
single nodes through a view of ``nodes`` as complex numbers (sum + min * 1j): numpy's gathers of
one-dimensional arrays of 16-byte items are several times faster than those of rows of a 2-D array. Each
level is a handful of numpy calls on arrays of the batch's size: no Python loop per item.

With numba installed, the draws and the updates run as compiled kernels instead
(``sumtree_numba``, chosen by ``kernels``: ``MEMMAP_REPLAY_KERNELS=numpy`` keeps this numpy code), which
do the same floating-point operations in the same order: the same seed draws the same leaves with either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidDataError, OptionError
from ..core.options import integer, short
from . import kernels

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["SumTree"]

_TOP = 1 << 12  # default flat top level: 4,096 nodes (a cumsum of a few microseconds)
NOTHING_TO_DRAW = "cannot sample: every priority is 0 (nothing to draw)"
_LINE = 64  # bytes of a cache line: the nodes array starts on one, so a node's children never straddle two


def _aligned(count: int) -> np.ndarray:
    """``count`` float64 (uninitialized) starting at a cache line's start (malloc aligns to 16 bytes only)."""
    buffer = np.empty(count + _LINE // 8)
    skip = (-buffer.ctypes.data % _LINE) // 8
    return buffer[skip: skip + count]


class SumTree:
    """``capacity`` leaves of non-negative priority (0 = never drawn). ``top``: nodes of the flat top
    level, a power of two (fewer means a deeper descent, more a longer cumulative sum per draw)."""

    def __init__(self, capacity: int, *, top: int | None = None):
        self.capacity = integer(capacity, "capacity", low=1)
        self.size = 1 << max(0, (self.capacity - 1).bit_length())  # leaves, padded to a power of two
        top = _TOP if top is None else top
        if isinstance(top, (bool, np.bool_)) or not isinstance(top, (int, np.integer)) or top < 1 or top & (top - 1):
            raise OptionError(f"top must be a power of two (got {short(top)})")
        self.top = min(int(top), self.size)
        self.levels = (self.size // self.top).bit_length() - 1  # levels below the top one
        # flat: what the compiled kernels get, the sum of node i at 2i, its minimum at 2i + 1
        self.flat = _aligned(4 * self.size)
        self.nodes = self.flat.reshape(2 * self.size, 2)  # node i: (sum, min)
        self.sums, self.mins = self.nodes[:, 0], self.nodes[:, 1]  # strided views
        self.sums[:] = 0
        self.mins[:] = np.inf
        # children: row i = [sum(2i), min(2i), sum(2i + 1), min(2i + 1)], the two children of node i
        self._children = self.flat.reshape(self.size, 4)
        self._pairs = self.flat.view(np.complex128)  # node i: sum + min * 1j (one item: fast numpy gathers)

    @property
    def _top_sums(self) -> np.ndarray:
        return self.sums[self.top: 2 * self.top]

    @property
    def total(self) -> float:
        return float(self._top_sums.sum())

    @property
    def min(self) -> float:
        """The smallest positive priority (inf when every leaf is 0)."""
        return float(self.mins[self.top: 2 * self.top].min())

    @property
    def leaves(self) -> np.ndarray:
        return self.sums[self.size: self.size + self.capacity]

    def update(self, indices: ArrayLike, priorities: ArrayLike) -> None:
        """Set the priorities of leaves ``indices`` (if an index repeats, its last value wins)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        priorities = np.asarray(priorities, dtype=np.float64)
        if priorities.shape != indices.shape:
            priorities = np.broadcast_to(priorities, indices.shape)
        if indices.size == 0:
            return
        compiled = kernels.compiled()
        if compiled is None:
            self._check(indices, priorities)
            self._set_leaves(indices, priorities)
        elif compiled.set_leaves(self.flat, np.ascontiguousarray(indices), np.ascontiguousarray(priorities),
                                 self.size, self.levels, self.capacity, True):
            self._check(indices, priorities)  # the kernel refused them, changing nothing: say why

    def _check(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise InvalidDataError(f"leaf indices must be in [0, {self.capacity}) (got "
                                   f"{indices.min()}..{indices.max()})")
        if not np.isfinite(priorities).all() or (priorities < 0).any():
            raise InvalidDataError("priorities must be finite and >= 0")

    def set_leaves(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """``update`` without its priority checks: float64 priorities finite and >= 0 of the indices' shape (for
        callers that checked them already); indices out of range are refused."""
        indices = np.ascontiguousarray(indices, dtype=np.int64)
        if len(indices) and (indices.min() < 0 or indices.max() >= self.capacity):  # (the kernel checks no bounds)
            self._check(indices, np.zeros(0))
        compiled = kernels.compiled()
        if compiled is None:
            self._set_leaves(indices, priorities)
        else:
            compiled.set_leaves(self.flat, indices, np.ascontiguousarray(priorities, dtype=np.float64),
                                self.size, self.levels, self.capacity, False)

    def _set_leaves(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        pairs, children = self._pairs, self._children
        node = indices + self.size
        written = np.empty(len(node), dtype=np.complex128)  # (sum, min) of each node written
        sums, mins = written.real, written.imag
        sums[:] = priorities
        mins[:] = np.where(priorities > 0, priorities, np.inf)
        pairs[node] = written
        for _ in range(self.levels):
            node >>= 1
            both = children.take(node, axis=0)  # both children's sums and minimums: one gather
            np.add(both[:, 0], both[:, 2], out=sums)
            np.minimum(both[:, 1], both[:, 3], out=mins)
            pairs[node] = written

    def find(self, values: ArrayLike) -> np.ndarray:
        """Leaf index for each value in [0, total): the leaf whose prefix-sum interval holds it.
        Leaves of priority 0 are never returned."""
        values = np.array(values, dtype=np.float64, copy=True).reshape(-1)
        compiled = kernels.compiled()
        if compiled is None:
            return self._find(values, np.cumsum(self._top_sums))[0]
        rows, found = np.empty(len(values), dtype=np.int64), np.empty(len(values))
        return self.moved(rows, found, compiled.find(self.flat, self.top, self.levels, values, rows, found))[0]

    def _find(self, values: np.ndarray, cumulative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``find`` of float64 ``values`` (consumed), given the top level's cumsum; also the leaves' values."""
        top = self._top_sums
        where = np.minimum(np.searchsorted(cumulative, values, side="right"), self.top - 1)
        values -= cumulative[where] - top[where]
        node = where + self.top
        pairs = self._pairs
        for _ in range(self.levels):
            node += node  # the left child
            left = pairs[node].real
            right = values >= left
            values -= left * right
            node += right
        # the chosen leaf's value (padding leaves past capacity hold 0)
        found = top[where] if not self.levels else pairs[node].real
        node -= self.size
        return self.moved(node, found)

    def moved(self, leaves: np.ndarray, found: np.ndarray, strays: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """Drawn leaves, their values: rounding at an interval's edge may land on an empty leaf (of value 0),
        moved to the nearest filled one. ``strays``: how many there are (-1: count them)."""
        if strays:
            stray = np.flatnonzero(found <= 0)
            if stray.size:
                leaves[stray] = self._nearest_filled(np.minimum(leaves[stray], self.capacity - 1))
                found[stray] = self.leaves[leaves[stray]]
        return leaves, found

    def _nearest_filled(self, leaves_at: np.ndarray) -> np.ndarray:
        """The closest leaf with positive priority before (else after) each given leaf; rare, so plain."""
        filled = np.flatnonzero(self.leaves > 0)
        where = np.searchsorted(filled, leaves_at)
        before = filled[np.maximum(where - 1, 0)]
        after = filled[np.minimum(where, len(filled) - 1)]
        return np.where(where > 0, before, after)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified draws: one uniform value in each of ``batch_size`` equal slices of the total."""
        return self.sample_with_values(batch_size, rng)[0]

    def sample_with_values(self, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``sample``, and the drawn leaves' values."""
        if batch_size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        compiled = kernels.compiled()
        if compiled is not None:
            rows, found = np.empty(batch_size, dtype=np.int64), np.empty(batch_size)
            strays = compiled.draw(self.flat, self.top, self.levels, rng.random(batch_size), rows, found)
            if strays < 0:
                raise InvalidDataError(NOTHING_TO_DRAW)
            return self.moved(rows, found, strays)
        cumulative = np.cumsum(self._top_sums)
        total = cumulative[-1]
        if not total > 0:
            raise InvalidDataError(NOTHING_TO_DRAW)
        values = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        np.minimum(values, np.nextafter(total, 0), out=values)
        return self._find(values, cumulative)

    def weights(self, found: np.ndarray, beta: float) -> np.ndarray:
        """Importance weights (float32) of drawn leaves of values ``found``: ``(N * P) ** -beta`` over its
        maximum among every leaf, which is ``(min / found) ** beta`` (written so, it cannot overflow). Numpy
        with either kernel: its SIMD ``pow`` is faster than a compiled loop's (measured)."""
        return ((self.min / found) ** beta).astype(np.float32)

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
        while width > self.top:
            width //= 2
            level = slice(width, 2 * width)
            pairs = self._children[level]
            self.sums[level] = pairs[:, 0] + pairs[:, 2]
            self.mins[level] = np.minimum(pairs[:, 1], pairs[:, 3])
