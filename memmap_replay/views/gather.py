"""How a batch's rows are copied out of a step file: numpy's ``take`` in the calling thread (the default), or,
with parallel gathers on, torch's ``index_select`` over torch's CPU threads.

A batch of images is a few MB copied from scattered rows of a memory map; one thread copies at about the
speed of an in-RAM numpy gather, and the draw, the priority update and the training step wait for it.
``set_parallel_gathers(True)`` has the large gathers (``MIN_BYTES`` and up) of this process copy their rows
with ``torch.index_select``, which splits them over torch's intra-op threads (``torch.get_num_threads()``,
set with ``torch.set_num_threads``). The bytes are the same; only the copy is shared out.

Off by default, because torch's CPU threads are an OpenMP pool (GNU libgomp in torch's wheels) that does
not survive ``fork``: a child forked after its parent ran a parallel region hangs at its own first one. So:

- in a process forked (after ``import memmap_replay``) from one that had imported torch (``os.fork``,
  multiprocessing's "fork", a DataLoader's worker processes, a forkserver that preloaded torch) gathers are
  serial, and ``set_parallel_gathers(True)`` there says why it cannot be (``memmap_replay._forks``);
- the gather threads of a loader (``workers="threads"``) gather serially: they are the parallelism there;
  so do all gathers while ``torch.get_num_threads()`` is 1;
- turned on, a parent's gathers start torch's pool, so a child it forks later must not run torch's CPU
  threads either (start such children with "spawn", or ``torch.set_num_threads(1)`` in them, as torch's
  DataLoader does in its workers).

The copy needs a torch tensor over the read-only memory map, with no copy: through DLPack 1.0 (which carries
the read-only flag) where torch and numpy speak it, else ``torch.from_numpy`` with its read-only warning
silenced.

``MEMMAP_REPLAY_PARALLEL_GATHERS`` (``1``/``on``/``true``/``yes`` or ``0``/``off``/``false``/``no``) turns them on
or off from the environment; it is read at the first gather of a view or ``get_parallel_gathers()``, unless
``set_parallel_gathers`` decided first.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

from .._forks import FORKS
from ..errors import OptionError

__all__ = ["MIN_BYTES", "get_parallel_gathers", "parallel_take", "serial_gathers", "set_parallel_gathers",
           "source_tensor"]

MIN_BYTES = 1 << 18  # smaller gathers copy in less time than torch's threads take to start
ENVIRONMENT = "MEMMAP_REPLAY_PARALLEL_GATHERS"
_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no", "")
_NOT_WRITABLE = "The given NumPy array is not writable"  # torch.from_numpy's warning on a read-only array


class _Settings:
    enabled: bool | None = None  # None: not decided yet (the environment decides at the first gather)


_SETTINGS = _Settings()
_LOCAL = threading.local()  # .serial: this thread's gathers stay serial (a loader's gather thread)


def set_parallel_gathers(enabled: bool = True) -> bool:
    """Large gathers of this process copy their rows over torch's CPU threads (``enabled=True``), or in the
    calling thread with numpy (``False``, the default); returns the previous setting. The number of threads
    is torch's: ``torch.set_num_threads(n)``. See the module docstring for why it is off by default."""
    if not isinstance(enabled, (bool, np.bool_)):
        raise OptionError(f"set_parallel_gathers takes True or False (got {enabled!r})")
    if enabled and FORKS.torch_parent:
        raise OptionError("set_parallel_gathers(True) in a process forked from one that had imported torch: "
                          "torch's CPU threads (OpenMP) can hang after a fork, so gathers here stay serial; start "
                          "this process with multiprocessing's 'spawn' method (or a forkserver that does not "
                          "preload torch) to gather in parallel in it")
    try:
        previous = get_parallel_gathers()
    except OptionError:  # a bad environment variable: this call decides instead
        previous = False
    _SETTINGS.enabled = bool(enabled)
    return previous


def get_parallel_gathers() -> bool:
    """Whether parallel gathers are on for this process (off in a child forked from a process that had
    imported torch). Gathers still stay serial in a loader's gather threads and while
    ``torch.get_num_threads()`` is 1."""
    if _SETTINGS.enabled is None:
        value = os.environ.get(ENVIRONMENT, "").strip().lower()
        if value not in _ON + _OFF:
            raise OptionError(f"{ENVIRONMENT} must be one of {', '.join(_ON + _OFF[:-1])} or empty (got {value!r}); "
                              f"set it to 1 to gather in parallel, or unset it")
        _SETTINGS.enabled = value in _ON
    return _SETTINGS.enabled and not FORKS.torch_parent


def active() -> bool:
    """Whether this thread's large gathers go over torch's threads now (on, not forked, not a gather thread,
    torch has more than one thread)."""
    return get_parallel_gathers() and not getattr(_LOCAL, "serial", False) and torch.get_num_threads() > 1


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
    """A tensor over the same memory as ``source``, with no copy, or None when torch cannot gather from it (a
    dtype torch lacks or cannot index, a byte order it does not take). A read-only memory map goes through
    DLPack 1.0, which carries the flag; where torch or numpy is older, through ``torch.from_numpy`` with its
    read-only warning silenced (the tensor is only ever read)."""
    if source.ndim < 1 or not len(source):
        return None
    try:
        try:
            tensor = torch.from_dlpack(source)
        except BufferError:  # DLPack before 1.0 cannot carry a read-only array
            # (torch warns once per process: silenced here, a user's own read-only from_numpy later is quiet too)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_NOT_WRITABLE, category=UserWarning)
                tensor = torch.from_numpy(source)
        tensor[:1].index_select(0, torch.zeros(1, dtype=torch.int64))  # a dtype index_select lacks raises here
    except (BufferError, TypeError, RuntimeError, ValueError):
        return None
    return tensor


def parallel_take(tensor: torch.Tensor, rows: np.ndarray, out: np.ndarray) -> bool:
    """``out[...] = source[rows]`` by ``torch.index_select`` over torch's threads, for a large gather into
    C-contiguous, writable ``out``; False when it does not apply (a small gather; a row out of range, which torch
    refuses, maybe after writing part of ``out``): the caller then copies with numpy, whose 'clip' reads
    rows past the end as the last row."""
    if out.nbytes < MIN_BYTES or not out.flags.c_contiguous or not out.flags.writeable:
        return False
    flat = np.ascontiguousarray(rows.reshape(-1), dtype=np.int64)
    try:
        torch.index_select(tensor, 0, torch.from_numpy(flat),
                           out=torch.from_numpy(out.reshape((len(flat),) + out.shape[rows.ndim:])))
    except (IndexError, RuntimeError):  # (torch's "index out of range in self")
        return False
    return True
