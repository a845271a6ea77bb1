"""How a batch's rows are copied out of a step file: numpy's ``take`` in the calling thread (the default), or,
with parallel gathers on, torch's ``index_select`` over torch's CPU threads.

A batch of images is a few MB copied from scattered rows of a memory map; one thread copies at about the
speed of an in-RAM numpy gather, and the draw, the priority update and the training step wait for it.
``set_parallel_gathers(True)`` has the large gathers (``MIN_BYTES`` and up) of this process copy their rows
with ``torch.index_select``, which splits them over torch's intra-op threads (``torch.get_num_threads()``,
set with ``torch.set_num_threads``). The bytes are the same; only the copy is shared out.

Off by default, because torch's CPU threads are an OpenMP pool (GNU libgomp in torch's wheels) that does
not survive ``fork``: a child forked after its parent ran a parallel region hangs at its own first one. So:

- in a process forked from another (``os.fork``, multiprocessing's "fork", a DataLoader's worker
  processes) gathers are serial, and ``set_parallel_gathers(True)`` there says why it cannot be;
- the gather threads of a loader (``workers="threads"``) gather serially: they are the parallelism there;
- turned on, a parent's gathers start torch's pool, so a child it forks later must not run torch's CPU
  threads either (start such children with "spawn" or "forkserver", or ``torch.set_num_threads(1)`` in them,
  as torch's DataLoader does in its workers).

``MEMMAP_REPLAY_PARALLEL_GATHERS=1`` turns them on from the environment (read at the first gather).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

from ..errors import OptionError

__all__ = ["MIN_BYTES", "get_parallel_gathers", "parallel_take", "serial_gathers", "set_parallel_gathers",
           "source_tensor"]

MIN_BYTES = 1 << 18  # smaller gathers copy in less time than torch's threads take to start
ENVIRONMENT = "MEMMAP_REPLAY_PARALLEL_GATHERS"


class _Settings:
    enabled: bool | None = None  # None: not decided yet (the environment decides at the first gather)
    forked = False  # this process was forked from another: torch's OpenMP threads may hang here


_SETTINGS = _Settings()
_LOCAL = threading.local()  # .serial: this thread's gathers stay serial (a loader's gather thread)


def _forked_child() -> None:
    _SETTINGS.forked = True


os.register_at_fork(after_in_child=_forked_child)


def set_parallel_gathers(enabled: bool = True) -> bool:
    """Large gathers of this process copy their rows over torch's CPU threads (``enabled=True``), or in the
    calling thread with numpy (``False``, the default); returns the previous setting. The number of threads
    is torch's: ``torch.set_num_threads(n)``. See the module docstring for why it is off by default."""
    if not isinstance(enabled, (bool, np.bool_)):
        raise OptionError(f"set_parallel_gathers takes True or False (got {enabled!r})")
    if enabled and _SETTINGS.forked:
        raise OptionError("set_parallel_gathers(True) in a process forked from another: torch's CPU threads "
                          "(OpenMP) can hang after a fork, so gathers here stay serial; start this process with "
                          "multiprocessing's 'spawn' or 'forkserver' method to gather in parallel in it")
    previous = get_parallel_gathers()
    _SETTINGS.enabled = bool(enabled)
    return previous


def get_parallel_gathers() -> bool:
    """Whether large gathers in this process copy their rows over torch's CPU threads."""
    if _SETTINGS.enabled is None:
        value = os.environ.get(ENVIRONMENT, "").strip().lower()
        _SETTINGS.enabled = value in ("1", "true", "yes", "on")
    return _SETTINGS.enabled and not _SETTINGS.forked


def active() -> bool:
    """Whether this thread's large gathers go over torch's threads now (on, not forked, not a gather thread)."""
    enabled = _SETTINGS.enabled
    if enabled is None:
        enabled = get_parallel_gathers()
    return enabled and not _SETTINGS.forked and not getattr(_LOCAL, "serial", False) and torch.get_num_threads() > 1


@contextmanager
def serial_gathers() -> Iterator[None]:
    """This thread's gathers stay serial inside the block (a loader's gather threads: they are the
    parallelism there)."""
    before = getattr(_LOCAL, "serial", False)
    _LOCAL.serial = True
    try:
        yield
    finally:
        _LOCAL.serial = before


def source_tensor(source: np.ndarray) -> torch.Tensor | None:
    """A tensor over the same memory as ``source`` (a read-only memory map: through DLPack, which carries the
    flag, with no copy and no warning), or None when torch cannot gather from it (a dtype torch lacks or
    cannot index, a byte order it does not take, a torch too old to take read-only arrays)."""
    if source.ndim < 1 or not len(source):
        return None
    try:
        tensor = torch.from_dlpack(source)
        tensor[:1].index_select(0, torch.zeros(1, dtype=torch.int64))  # a dtype index_select lacks raises here
    except (BufferError, TypeError, RuntimeError, ValueError):
        return None
    return tensor


def parallel_take(tensor: torch.Tensor, rows: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = source[rows]`` by ``torch.index_select`` over torch's threads, for a large gather into
    C-contiguous ``out``; False when it does not apply (a small gather; a row out of range, which torch
    refuses, maybe after writing part of ``out``): the caller then copies with numpy, whose 'clip' reads
    rows past the end as the last row."""
    if out.nbytes < MIN_BYTES or not out.flags.c_contiguous:
        return False
    flat = np.ascontiguousarray(rows.reshape(-1), dtype=np.int64)
    try:
        torch.index_select(tensor, 0, torch.from_numpy(flat),
                           out=torch.from_numpy(out.reshape((len(flat),) + out.shape[rows.ndim:])))
    except (IndexError, RuntimeError):  # (torch's "index out of range in self")
        return False
    return True
