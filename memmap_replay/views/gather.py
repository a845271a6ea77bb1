"""How a batch's rows are copied out of a step file: numpy's ``take``, a large one split over the library's own
threads (``core.threads``), on by default.

A batch of images is a few MB copied from scattered rows of a memory map; one thread copies at about the
speed of an in-RAM numpy gather, and the draw, the priority update and the training step wait for it.
numpy's ``take`` releases the GIL while it copies (any dtype without Python objects), so a large gather
(``MIN_BYTES`` and up) is cut into runs of rows, each thread taking its run into its own slice of the output.
The bytes are the same as one ``take``'s, rows past the end of the file included (numpy's 'clip': the last
row). A compressed field's column (``core.encoded.EncodedColumn``) splits its decoding over the same threads
itself.

The threads are ``core.threads.THREADS``: ``memmap_replay.set_threads(n)`` or ``MEMMAP_REPLAY_THREADS`` sets how
many (the calling thread included; 1 turns the split off). They are made again in each process that gathers, so a
child forked after its parent gathered in parallel (``os.fork``, multiprocessing's "fork", a DataLoader's
worker processes) gathers in parallel too, with threads of its own. Torch's CPU threads (an OpenMP pool,
which hangs in a child forked after its parent ran it) take no part.

Raw gathers stay in the calling thread (a compressed field decodes on the threads whatever the switch below
says; only ``serial()`` and one thread keep its decoding in the calling thread):

- in a loader's gather threads (``workers="threads"``; ``core.threads.serial()``): they are the parallelism;
- below ``MIN_BYTES``, where waking threads costs more than the copy saves;
- with one thread (``set_threads(1)``, ``MEMMAP_REPLAY_THREADS=1``);
- with ``set_parallel_gathers(False)`` or ``MEMMAP_REPLAY_PARALLEL_GATHERS`` set to ``0``/``off``/``false``/``no``
  (``1``/``on``/``true``/``yes`` or empty: on). The variable is read at the first gather or
  ``get_parallel_gathers()``, unless ``set_parallel_gathers`` decided first.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ..core.threads import THREADS, split
from ..errors import OptionError

__all__ = ["MIN_BYTES", "get_parallel_gathers", "set_parallel_gathers", "take"]

# smaller gathers copy in less time than the threads take to wake; each part is a quarter of this or more.
# Measured on the 2-core VM: split, a 272 KiB gather took 5 times one thread's time, 1 MiB 1.2 times; 2 MiB and
# up gained (benchmarks/read.py T, 3 MB batches: 0.86 of the numpy limit split, 0.77 not)
MIN_BYTES = 1 << 21
ENVIRONMENT = "MEMMAP_REPLAY_PARALLEL_GATHERS"
_ON, _OFF = ("1", "on", "true", "yes", ""), ("0", "off", "false", "no")


class _Settings:
    enabled: bool | None = None  # None: not decided yet (the environment decides at the first gather)


_SETTINGS = _Settings()


def set_parallel_gathers(enabled: bool = True) -> bool:
    """Large gathers of this process copy their rows over the library's threads (``enabled=True``, the
    default), or in the calling thread (``False``); returns the previous setting. The number of threads is
    ``memmap_replay.set_threads(n)`` (or ``MEMMAP_REPLAY_THREADS``)."""
    if not isinstance(enabled, (bool, np.bool_)):
        raise OptionError(f"set_parallel_gathers takes True or False (got {enabled!r})")
    try:
        previous = get_parallel_gathers()
    except OptionError:  # a bad environment variable: this call decides instead
        previous = True
    _SETTINGS.enabled = bool(enabled)
    return previous


def get_parallel_gathers() -> bool:
    """Whether large gathers of this process are split over the library's threads (on by default). Gathers
    still stay in the calling thread in a loader's gather threads and when the threads are 1."""
    if _SETTINGS.enabled is None:
        value = os.environ.get(ENVIRONMENT, "").strip().lower()
        if value not in _ON + _OFF:
            raise OptionError(f"{ENVIRONMENT} must be one of {', '.join(_ON[:-1] + _OFF)} or empty (got {value!r}); "
                              f"set it to 0 to gather in the calling thread only, or unset it")
        _SETTINGS.enabled = value in _ON
    return _SETTINGS.enabled


def parts(source: np.ndarray, count: int, out: np.ndarray) -> int:
    """How many runs of rows a gather of ``count`` rows into ``out`` is split into (1: one ``take``)."""
    if (count < 2 or out.nbytes < MIN_BYTES or source.dtype.hasobject or not out.flags.c_contiguous
            or not out.flags.writeable or not get_parallel_gathers()):
        return 1
    row_nbytes = out.nbytes // count
    return THREADS.parts(count, -(-(MIN_BYTES // 4) // max(row_nbytes, 1)))


def take(source: Any, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[...] = source[rows]`` (rows of any shape; past the end: the last row, numpy's 'clip') and ``out``:
    numpy's ``take``, split over the library's threads when it is large. A source that is no numpy array (a
    compressed field's column) takes the rows itself (its decoding is split over the same threads)."""
    if not isinstance(source, np.ndarray):
        return source.take(rows, axis=0, out=out, mode="clip")
    count = rows.size
    split_into = parts(source, count, out)
    if split_into < 2:
        return source.take(rows, axis=0, out=out, mode="clip")  # (np.take's Python layer skipped)
    take_parts(source, rows.reshape(-1), out.reshape((count,) + source.shape[1:]), split_into)
    return out


def take_parts(source: np.ndarray, rows: np.ndarray, out: np.ndarray, count: int) -> None:
    """``out[part] = source[rows[part]]`` for ``count`` runs of the flat ``rows``, over the library's threads."""
    def task(part: slice) -> Callable[[], object]:
        return lambda: source.take(rows[part], axis=0, out=out[part], mode="clip")

    THREADS.run([task(part) for part in split(len(rows), count)])
