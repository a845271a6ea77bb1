"""The prioritized sampler's per-batch key arithmetic compiled with numba (``pip install memmap-replay[fast]``).

Imported only by ``kernels`` at the first use of a sum tree, like ``sumtree_numba``. Two kernels, each
the numpy code of ``PrioritizedSampler`` in one pass (integer arithmetic: the same results exactly):

- ``locate_rows``: drawn store rows -> (table position of the episode, t, key), and how many are not a
  position of the view (``_draw``: ``searchsorted`` over the episodes' first rows, ``t < counts``);
- ``rows_of_keys``: keys handed back to ``update_priorities`` -> (table position, t, row), or why not.

After a batch's gather has pushed the interpreter and numpy out of the CPU caches, each small numpy call
costs several microseconds: one compiled pass instead of about ten of them is what pays here.
"""

from __future__ import annotations

import numba
from numba import types

from .kernels import EVICTED, LIVE, NOT_A_POSITION
from .sumtree_numba import cached_njit

__all__ = ["locate_rows", "rows_of_keys"]

_I64 = types.Array(types.int64, 1, "C")
_IN_I64 = types.Array(types.int64, 1, "C", readonly=True)


@numba.njit(cache=False, inline="always")
def _right_of(sorted_values, value):
    """``searchsorted(sorted_values, value, side="right")``."""
    low, high = 0, len(sorted_values)
    while low < high:
        middle = (low + high) >> 1
        if sorted_values[middle] > value:
            high = middle
        else:
            low = middle + 1
    return low


@cached_njit(types.int64(_IN_I64, _IN_I64, _IN_I64, _IN_I64, _IN_I64, _IN_I64, types.int64, _I64, _I64, _I64))
def locate_rows(rows, starts, by_start, start, counts, ids, stride, episode, t, keys):
    """For each drawn row: ``episode`` = the table position of the episode with the last first row at or
    before it (``by_start[searchsorted(starts, row, 'right') - 1]``, -1 wrapping as numpy's index does),
    ``t`` = row - its first row, ``keys`` = id * stride + t. Returns how many have ``t`` outside
    [0, counts[episode]) (rows no position of the view owns)."""
    bad = 0
    episodes = len(by_start)
    for i in range(len(rows)):
        where = _right_of(starts, rows[i]) - 1
        position = by_start[where + episodes if where < 0 else where]
        step = rows[i] - start[position]
        episode[i], t[i] = position, step
        keys[i] = ids[position] * stride + step
        if step < 0 or step >= counts[position]:
            bad += 1
    return bad


@cached_njit(types.int64(_IN_I64, types.int64, _IN_I64, _IN_I64, _IN_I64, _I64, _I64, _I64))
def rows_of_keys(keys, stride, ids, start, counts, where, t, rows):
    """For each key (id * stride + t, >= 0): ``where`` = the table position of episode ``id`` (``ids``:
    ascending), ``t``, ``rows`` = its first row + t. Returns ``EVICTED`` as soon as an id is not in the
    table (the caller then drops those keys), else ``NOT_A_POSITION`` if some t is not below its
    episode's count, else ``LIVE``."""
    episodes = len(ids)
    if episodes == 0:
        return EVICTED if len(keys) else LIVE
    first, consecutive = ids[0], ids[episodes - 1] - ids[0] + 1 == episodes
    answer = LIVE
    for i in range(len(keys)):
        episode, step = keys[i] // stride, keys[i] % stride
        if consecutive:
            position = episode - first
            if position < 0 or position >= episodes:
                return EVICTED
        else:
            position = min(_right_of(ids, episode - 1), episodes - 1)  # searchsorted(ids, episode, 'left')
            if ids[position] != episode:
                return EVICTED
        where[i], t[i] = position, step
        rows[i] = start[position] + step
        if step >= counts[position]:
            answer = NOT_A_POSITION
    return answer
