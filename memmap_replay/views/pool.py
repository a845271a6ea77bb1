"""Batch output memory: the arrays a gather (or a transform) writes a batch into.

A fresh multi-MB array per batch costs a page fault per 4 KiB page when the allocator has handed the
previous one back to the OS, so large outputs come from a pool of arrays reused once nothing else refers to
them. In a DataLoader worker the outputs go straight into the worker's shared-memory slot instead
(``set_output_target``, ``views.transport``).
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

from . import gather

__all__ = ["OUTPUTS", "OutputPool", "numpy_dtype", "output_array", "set_output_target"]


class OutputPool:
    """Batch output memory, reused once the batch that used it is gone.

    A fresh multi-MB array per batch costs a page fault per 4 KiB page when the allocator has handed
    the previous one back to the OS. Large outputs are arrays kept here, one list per shape and dtype;
    an array is free again when nothing but the pool refers to it (its reference count: every tensor,
    slice or view of it holds a reference), so memory still held by a user is never reused."""

    KEEP = 8  # arrays kept per shape and dtype
    MIN_BYTES = 1 << 17  # below this, glibc's malloc serves (and reuses) memory from its heap
    MAX_KEPT_BYTES = 1 << 29  # at most 512 MiB kept in all, whatever the mix of batch sizes
    UNUSED = 3  # references to a free array while take() checks it: its list, the loop variable, the call

    def __init__(self) -> None:
        self.free: dict[tuple, list[np.ndarray]] = {}
        self.kept = 0
        self._local = threading.local()

    @property
    def target(self) -> Any:
        """Where this thread's gathers want their outputs (a DataLoader worker's shared-memory slot, see
        views.transport; pinned memory): a callable (shape, dtype) -> array, or None when it has no room
        left; None: the pool. Per thread, so gather threads each have their own."""
        return getattr(self._local, "target", None)

    @target.setter
    def target(self, target: Any) -> None:
        self._local.target = target

    def take(self, source: Any, rows: np.ndarray) -> np.ndarray:
        """``source[rows]`` (rows of any shape; past the end: the last row, numpy's 'clip', which also skips its
        bounds-checked copy through a buffer) into ``empty`` memory, by ``views.gather.take``: numpy's ``take``,
        a large one split over the library's threads. ``source`` is a step file's array, or a compressed field's
        column (``core.encoded.EncodedColumn``), which decodes the rows into the output itself."""
        return gather.take(source, rows, self.empty(rows.shape + tuple(source.shape[1:]), source.dtype))

    def empty(self, shape: tuple, dtype: Any) -> np.ndarray:
        """An uninitialized array for a batch output: the target's memory if one is set (and has room), a
        pooled array if large, else a fresh one from the heap."""
        dtype = np.dtype(dtype)
        target = self.target
        if target is not None:
            out = target(shape, dtype)
            if out is not None:
                return out
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.MIN_BYTES:  # small blocks come from the heap, which reuses them without faults
            return np.empty(shape, dtype)
        key = (shape, dtype)
        bucket = self.free.get(key)
        if bucket is None:
            bucket = self.free[key] = []
        for out in bucket:
            if sys.getrefcount(out) == self.UNUSED:
                return out
        out = np.empty(shape, dtype)
        if len(bucket) < self.KEEP and self.kept + nbytes <= self.MAX_KEPT_BYTES:
            bucket.append(out)
            self.kept += nbytes
        return out


OUTPUTS = OutputPool()


def set_output_target(target: Any) -> None:
    """Gathers of this thread write their outputs through ``target(shape, dtype)`` (an array, or None to
    fall back to the pool) until it is set to None: a DataLoader worker's batch slot (``views.transport``),
    or pinned memory."""
    OUTPUTS.target = target


def output_array(shape: tuple, dtype: Any) -> np.ndarray:
    """An uninitialized array for a batch output (``OutputPool.empty``): transforms write their results here,
    so they too reuse memory, and in a worker land in its slot."""
    return OUTPUTS.empty(tuple(shape), dtype)


def numpy_dtype(dtype: Any) -> np.dtype | None:
    """numpy's dtype for a torch dtype (the same name and size), or None where numpy has none (bfloat16,
    complex32, float8, ...: such tensors are handled through torch)."""
    try:
        found = np.dtype(str(dtype).removeprefix("torch."))
    except TypeError:
        return None
    return found if found.itemsize == dtype.itemsize else None
