"""The sum tree's hot paths compiled with numba (``pip install memmap-replay[fast]``).

Imported only by ``kernels`` at the first use of a sum tree, never by ``import memmap_replay``: importing
this module imports numba and compiles (or loads from numba's on-disk cache) the kernels below.

The kernels get the tree's nodes flat (``SumTree.flat``): the sum of node n at ``2n``, its minimum at
``2n + 1``, so the children 2n and 2n + 1 of node n are the four floats from ``4n`` (one cache line: an
update's read and write of a level touch one line).

Each kernel does what ``SumTree``'s numpy code does, operation for operation in the same floating-point
order, so that both give the same leaves, the same sums and the same draws for the same seed: the top
level's cumulative sum is a sequential sum (as ``np.cumsum``), the search is ``searchsorted(side='right')``,
the descent subtracts the left child's sum when it goes right, parents are recomputed level by level from
their children. Loops run level by level over the whole batch (not draw by draw): the loads of one level
are independent, so a tree bigger than the caches keeps many reads in flight. (The importance weights stay
numpy's: its SIMD ``pow`` beats a compiled loop of scalar ones.)
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import numba
import numpy as np
from numba import types

__all__ = ["draw", "find", "set_leaves"]

_F64, _I64 = types.Array(types.float64, 1, "C"), types.Array(types.int64, 1, "C")  # arrays the kernels write
_IN_F64 = types.Array(types.float64, 1, "C", readonly=True)  # arrays they only read (writable ones pass too)
_IN_I64 = types.Array(types.int64, 1, "C", readonly=True)
_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])


def cached_njit(signature: Any) -> Callable[[_Kernel], Any]:
    """numba's ``njit`` with its on-disk cache; without the cache when no cache directory is writable
    (numba refuses ``cache=True`` then: the kernels are compiled again in each process)."""
    def wrap(function: _Kernel) -> Any:
        try:
            return numba.njit(signature, cache=True)(function)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(signature, cache=False)(function)
    return wrap


@numba.njit(cache=False, inline="always")
def _cumulative(nodes: np.ndarray, top: int) -> np.ndarray:
    """``np.cumsum`` of the top level's sums (nodes top .. 2 * top - 1), in the same order."""
    cumulative = np.empty(top)
    total = 0.0
    for i in range(top):
        total += nodes[2 * (top + i)]
        cumulative[i] = total
    return cumulative


@numba.njit(cache=False, inline="always")
def right_of(sorted_values: np.ndarray, value: float) -> int:
    """``searchsorted(sorted_values, value, side="right")`` (a NaN value sorts last, as in numpy)."""
    low, high = 0, len(sorted_values)
    while low < high:
        middle = (low + high) >> 1
        if sorted_values[middle] > value:
            high = middle
        else:
            low = middle + 1
    return low


@numba.njit(cache=False, inline="always")
def _search(cumulative: np.ndarray, values: np.ndarray, rows: np.ndarray) -> None:
    """``searchsorted(cumulative, values, side="right")`` into ``rows``."""
    for i in range(len(values)):
        rows[i] = right_of(cumulative, values[i])


@numba.njit(cache=False, inline="always")
def _merge(cumulative: np.ndarray, values: np.ndarray, rows: np.ndarray) -> None:
    """``_search`` of sorted ``values`` (a stratified draw's), in one walk along ``cumulative``: no
    mispredicted branch per level of a binary search."""
    top, at = len(cumulative), 0
    for i in range(len(values)):
        value = values[i]
        while at < top and not cumulative[at] > value:
            at += 1
        rows[i] = at


@numba.njit(cache=False, inline="always")
def _descend(nodes: np.ndarray, levels: int, cumulative: np.ndarray, values: np.ndarray, rows: np.ndarray,
             found: np.ndarray) -> int:
    """From ``rows`` (top-level positions, ``searchsorted`` of ``values``) down to the leaves: their leaf
    into ``rows``, its priority into ``found`` (``values`` consumed). Returns how many found a leaf of
    priority 0 (rounding at an interval's edge: the caller moves them)."""
    count, top = len(values), len(cumulative)
    for i in range(count):
        where = min(rows[i], top - 1)
        values[i] -= cumulative[where] - nodes[2 * (top + where)]
        rows[i] = top + where
        found[i] = nodes[2 * (top + where)]
    for _ in range(levels):  # level by level: the loads of one level are independent (many in flight)
        for i in range(count):
            node = 2 * rows[i]
            left = nodes[2 * node]
            value = values[i]
            right = value >= left
            values[i] = value - (left if right else 0.0)  # as numpy's values -= left * right
            node += right
            rows[i] = node
            found[i] = nodes[2 * node]
    size = top << levels
    strays = 0
    for i in range(count):
        rows[i] -= size
        if found[i] <= 0:
            strays += 1
    return strays


@numba.njit(cache=False, inline="always")
def draw_into(nodes: np.ndarray, top: int, levels: int, uniform: np.ndarray, rows: np.ndarray,
              found: np.ndarray) -> int:
    """Stratified draws, one per ``uniform`` value (in [0, 1)): value i is ``(i + uniform[i]) * total / n``,
    capped below the total. Returns -1 if the total is not > 0, else the strays (see ``_descend``)."""
    cumulative = _cumulative(nodes, top)
    total = cumulative[top - 1]
    if not total > 0:
        return -1
    count = len(uniform)
    scale = total / count
    cap = np.nextafter(total, 0.0)
    values = np.empty(count)
    for i in range(count):
        values[i] = min((i + uniform[i]) * scale, cap)
    _merge(cumulative, values, rows)
    return _descend(nodes, levels, cumulative, values, rows, found)


@numba.njit(cache=False, inline="always")
def weights_into(nodes: np.ndarray, top: int, found: np.ndarray, beta: float, weights: np.ndarray) -> None:
    """Importance weights ``(min / found) ** beta`` as float32, min the top level's smallest (positive)
    minimum. numba's scalar ``pow`` may differ from numpy's SIMD one in the last bit of the float64, which
    the float32 rounding hides but for a value within that bit of a float32 rounding boundary: a weight is
    numpy's to one float32 ulp (relative 2 ** -23 at most; none differed in 2 million tried)."""
    lanes = np.full(4, np.inf)
    for i in range(0, top - top % 4, 4):
        for lane in range(4):
            value = nodes[2 * (top + i + lane) + 1]
            lanes[lane] = value if value < lanes[lane] else lanes[lane]
    lowest = min(lanes[0], lanes[1], lanes[2], lanes[3])
    for i in range(top - top % 4, top):
        lowest = min(lowest, nodes[2 * (top + i) + 1])
    for i in range(len(found)):
        weights[i] = (lowest / found[i]) ** beta


@cached_njit(types.int64(_IN_F64, types.int64, types.int64, _IN_F64, _I64, _F64))
def draw(nodes: np.ndarray, top: int, levels: int, uniform: np.ndarray, rows: np.ndarray, found: np.ndarray) -> int:
    """``draw_into``, for ``SumTree.sample``."""
    return draw_into(nodes, top, levels, uniform, rows, found)


@cached_njit(types.int64(_IN_F64, types.int64, types.int64, _F64, _I64, _F64))
def find(nodes: np.ndarray, top: int, levels: int, values: np.ndarray, rows: np.ndarray, found: np.ndarray) -> int:
    """The leaf of each value (``values`` consumed); returns the strays (see ``_descend``)."""
    cumulative = _cumulative(nodes, top)
    _search(cumulative, values, rows)
    return _descend(nodes, levels, cumulative, values, rows, found)


@numba.njit(cache=False, inline="always")
def set_into(nodes: np.ndarray, indices: np.ndarray, priorities: np.ndarray, size: int, levels: int) -> None:
    """Leaves ``indices`` set to ``priorities``, then their parents recomputed level by level (the
    children of node n: sums at 4n and 4n + 2, minimums at 4n + 1 and 4n + 3)."""
    count = len(indices)
    at = np.empty(count, np.int64)
    for i in range(count):
        node = indices[i] + size
        priority = priorities[i]
        nodes[2 * node] = priority
        nodes[2 * node + 1] = priority if priority > 0 else np.inf
        at[i] = node
    for _ in range(levels):
        for i in range(count):
            node = at[i] >> 1
            at[i] = node
            left, right = nodes[4 * node + 1], nodes[4 * node + 3]
            nodes[2 * node] = nodes[4 * node] + nodes[4 * node + 2]
            nodes[2 * node + 1] = left if left < right else right


@cached_njit(types.int64(_F64, _IN_I64, _IN_F64, types.int64, types.int64, types.int64, types.boolean))
def set_leaves(nodes: np.ndarray, indices: np.ndarray, priorities: np.ndarray, size: int, levels: int,
               capacity: int, check: bool) -> int:
    """Leaves ``indices`` set to ``priorities`` (the last of a repeated index wins), then their parents
    recomputed level by level up to the top level. ``check``: first refuse (changing nothing) an index
    outside [0, capacity) (returns 1) or a priority not finite and >= 0 (returns 2); 0 when done."""
    count = len(indices)
    if check:
        for i in range(count):
            if indices[i] < 0 or indices[i] >= capacity:
                return 1
            if not (priorities[i] >= 0 and priorities[i] < np.inf):
                return 2
    set_into(nodes, indices, priorities, size, levels)
    return 0
