"""The prioritized sampler's per-batch work compiled with numba (``pip install memmap-replay[fast]``).

Imported only by ``kernels`` at the first use of a sum tree, like ``sumtree_numba``. Each kernel is the
numpy code of ``PrioritizedSampler`` in one pass (the same results: integer arithmetic, the sum tree's
kernels, and only the weights' ``pow`` to a float32 ulp, see ``sumtree_numba.weights_into``):

- ``draw_positions``: a whole draw: the tree's stratified draw, the drawn rows -> (table position of the
  episode, t, key) (``searchsorted`` over the episodes' first rows, ``t < counts``) and the importance
  weights; ``locate_rows``: that location alone, for rows a sampler moved;
- ``checked_priorities`` and ``update_rows``: ``update_priorities``'s checks, then keys -> store rows and
  the tree's update, when all is well (else numpy's way runs, and says what is wrong or drops the keys of
  evicted episodes).

After a batch's gather has pushed the interpreter and numpy out of the CPU caches, each small numpy call
costs several microseconds: one compiled pass instead of about ten of them is what pays here.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

from .sumtree_numba import cached_njit, draw_into, right_of, set_into, weights_into

__all__ = ["draw_positions", "locate_rows", "checked_priorities", "update_rows"]

_I64 = types.Array(types.int64, 1, "C")
_IN_I64 = types.Array(types.int64, 1, "C", readonly=True)
_IN_F64 = types.Array(types.float64, 1, "C", readonly=True)
_F64, _F32 = types.Array(types.float64, 1, "C"), types.Array(types.float32, 1, "C")


@numba.njit(cache=False, inline="always")
def _locate(rows: np.ndarray, ascending: bool, starts: np.ndarray, by_start: np.ndarray, start: np.ndarray,
            counts: np.ndarray, ids: np.ndarray, stride: int, episode: np.ndarray, t: np.ndarray,
            keys: np.ndarray) -> int:
    """For each drawn row: ``episode`` = the table position of the episode with the last first row at or
    before it (``by_start[searchsorted(starts, row, 'right') - 1]``, -1 wrapping as numpy's index does),
    ``t`` = row - its first row, ``keys`` = id * stride + t. Returns how many have ``t`` outside
    [0, counts[episode]) (rows no position of the view owns). ``ascending`` rows (a stratified draw's)
    are searched in one walk along ``starts``."""
    bad, at = 0, 0
    episodes = len(by_start)
    for i in range(len(rows)):
        if ascending:
            while at < episodes and not starts[at] > rows[i]:
                at += 1
            where = at - 1
        else:
            where = right_of(starts, rows[i]) - 1
        position = by_start[where + episodes if where < 0 else where]
        step = rows[i] - start[position]
        episode[i], t[i] = position, step
        keys[i] = ids[position] * stride + step
        if step < 0 or step >= counts[position]:
            bad += 1
    return bad


@cached_njit(types.int64(_IN_I64, _IN_I64, _IN_I64, _IN_I64, _IN_I64, _IN_I64, types.int64, _I64, _I64, _I64))
def locate_rows(rows: np.ndarray, starts: np.ndarray, by_start: np.ndarray, start: np.ndarray, counts: np.ndarray,
                ids: np.ndarray, stride: int, episode: np.ndarray, t: np.ndarray, keys: np.ndarray) -> int:
    """``_locate``, for the drawn rows that a sampler moved in Python (rare)."""
    return _locate(rows, False, starts, by_start, start, counts, ids, stride, episode, t, keys)


@cached_njit(types.UniTuple(types.int64, 2)(_IN_F64, types.int64, types.int64, _IN_F64, types.float64, _IN_I64,
                                           _IN_I64, _IN_I64, _IN_I64, _IN_I64, types.int64, _I64, _F64, _I64, _I64,
                                           _I64, _F32))
def draw_positions(nodes: np.ndarray, top: int, levels: int, uniform: np.ndarray, beta: float, starts: np.ndarray,
                   by_start: np.ndarray, start: np.ndarray, counts: np.ndarray, ids: np.ndarray, stride: int,
                   rows: np.ndarray, found: np.ndarray, episode: np.ndarray, t: np.ndarray, keys: np.ndarray,
                   weights: np.ndarray) -> tuple[int, int]:
    """A prioritized sampler's whole draw in one call: the sum tree's stratified draw (``draw_into``), its
    rows located (``_locate``) and the importance weights (``weights_into``). Returns (strays, bad): -1
    strays if every priority is 0; with strays or bad draws the caller finishes in Python (the rows and
    ``found`` hold the descent's result), else everything is filled in."""
    strays = draw_into(nodes, top, levels, uniform, rows, found)
    if strays != 0:
        return strays, 0
    bad = _locate(rows, True, starts, by_start, start, counts, ids, stride, episode, t, keys)  # (drawn in order)
    if bad == 0:
        weights_into(nodes, top, found, beta, weights)
    return 0, bad


@cached_njit(types.Tuple((types.boolean, types.float64))(_IN_I64, _IN_F64, types.float64))
def checked_priorities(keys: np.ndarray, priorities: np.ndarray, limit: float) -> tuple[bool, float]:
    """(whether every key is >= 0 and every priority finite, >= 0 and at most ``limit``; the largest
    priority), in one pass: numpy's checks of ``update_priorities`` when all is well."""
    fine, highest = True, 0.0
    for i in range(len(keys)):
        priority = priorities[i]
        if not (priority >= 0 and priority <= limit) or keys[i] < 0:
            fine = False
        highest = max(highest, priority)
    return fine, highest


@cached_njit(types.boolean(_IN_I64, types.int64, _IN_I64, _IN_I64, _IN_I64, types.int64, _IN_F64, _F64,
                            types.int64, types.int64, types.int64, _I64))
def update_rows(keys: np.ndarray, stride: int, ids: np.ndarray, start: np.ndarray, counts: np.ndarray,
                committed: int, leaves: np.ndarray, nodes: np.ndarray, size: int, levels: int, capacity: int,
                rows: np.ndarray) -> bool:
    """The store row of each key (id * stride + t, >= 0) into ``rows`` (its episode's first row + t), then
    the sum tree's leaves at those rows set to ``leaves`` (``set_into``). True when done: every id
    committed (below ``committed``) and in the table (``ids``, ascending), every t below its episode's
    count, every row a leaf of the tree; False at the first key that is not, the tree untouched (numpy's
    way then says why, or drops the keys of evicted episodes)."""
    episodes = len(ids)
    if episodes == 0:
        return len(keys) == 0
    first, consecutive = ids[0], ids[episodes - 1] - ids[0] + 1 == episodes
    for i in range(len(keys)):
        episode, step = keys[i] // stride, keys[i] % stride
        if episode >= committed:
            return False
        if consecutive:
            position = episode - first
            if position < 0 or position >= episodes:
                return False
        else:
            position = min(right_of(ids, episode - 1), episodes - 1)  # searchsorted(ids, episode, 'left')
            if ids[position] != episode:
                return False
        if step >= counts[position] or start[position] + step >= capacity:
            return False
        rows[i] = start[position] + step
    set_into(nodes, rows, leaves, size, levels)
    return True
