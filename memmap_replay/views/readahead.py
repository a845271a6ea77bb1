"""Cold-aware gathers: before a view reads a batch, it tells the kernel every byte range it will read.

A numpy gather from a memory map reads pages one fault at a time: on a cold store (pages not in the page
cache, or a store bigger than RAM) each random row waits for the disk in turn. Advising the ranges first
(``MADV_WILLNEED``) puts all of a batch's reads in flight together, so the disk serves them in parallel;
the gather then finds its pages arriving or arrived. Measured on this project's machines (2 GB store,
256 random 12 KB rows a batch), this beat a thread pool of ``preadv`` per row, and needs no copy outside
numpy's own gather. Advice is a hint: any failure to give it is ignored and the gather reads as before.

One system call advises a whole batch: ``process_madvise`` (Linux 5.10+) takes up to 1,024 ranges at
once; elsewhere one ``madvise`` per range. In ``"auto"`` mode a view first probes a few of the batch's
ranges with ``mincore`` and skips the advice when they are all cached; after such a probe it skips the
probe too for the next 1, 2, 4, ... up to 64 batches (any uncached probe starts over), so warm reads pay
about a microsecond a batch, and a store that does not fit in RAM is advised every batch. A gather much
slower than the fastest seen (pages that were not cached after all) ends such a spell at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import mmap
import os
import queue
import sys
import threading
from typing import Any, Sequence, cast

import numpy as np

from ..core.encoded import EncodedColumn, frame_spans
from ..core.options import short
from ..errors import OptionError

__all__ = ["READAHEAD_MODES", "Readahead", "readahead_mode"]

READAHEAD_MODES = ("auto", "always", "off")
PAGE = mmap.PAGESIZE
PROBES = 8  # ranges of a batch probed for residency in "auto" mode
MERGE_GAP = 1 << 16  # ranges closer than this are advised as one (a separate request would cost more)
MAX_IOV = 1024  # UIO_MAXIOV: ranges per process_madvise call
# the kernel reads at most the disk's readahead window (read_ahead_kb, often 128 KiB) of each advised
# range and silently drops the rest: longer ranges are advised in pieces of this size
PIECE = 1 << 17
_MADV_WILLNEED = 3
_SYS_PROCESS_MADVISE = 440  # the same number on every Linux architecture (asm-generic and x86_64 tables)


def readahead_mode(value: object, name: str = "readahead") -> str:
    """``"auto"`` (also True), ``"always"`` or ``"off"`` (also False)."""
    if value is True:
        return "auto"
    if value is False or value is None:
        return "off"
    if isinstance(value, str) and value in READAHEAD_MODES:
        return value
    raise OptionError(f"{name} must be one of {READAHEAD_MODES}, True or False (got {short(value)}); "
                      f"'auto' advises a batch's rows when they are not cached, 'always' every batch, 'off' never")


class _Kernel:
    """The system calls, looked up once per process (a DataLoader worker forked from a process that
    opened a pidfd must open its own: a pidfd names one process)."""

    def __init__(self) -> None:
        self.pid = -1
        self.pidfd = -1
        self.libc: Any = None  # a ctypes.CDLL once found (its functions are looked up by name, untyped)
        self.local = threading.local()  # .vec: mincore's answer, one byte per page (bit 0: resident)
        self.batched = sys.platform.startswith("linux") and hasattr(os, "pidfd_open")
        try:
            self.libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            self.libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            self.libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
            self.libc.syscall.restype = ctypes.c_long
        except (OSError, AttributeError):  # no libc with madvise/mincore (not a POSIX system)
            self.libc = None

    @property
    def usable(self) -> bool:
        return self.libc is not None

    def _own_pidfd(self) -> int:
        pid = os.getpid()
        if self.pid != pid:
            with _LOCK:  # the advisor thread and the caller's thread may both come here first
                if self.pid != pid:
                    self.pidfd = -1  # the parent's pidfd (inherited by fork) names the parent
                    try:
                        self.pidfd = os.pidfd_open(pid)
                    except OSError:
                        self.batched = False
                    self.pid = pid
        return self.pidfd

    def advise(self, starts: np.ndarray, lengths: np.ndarray) -> None:
        """MADV_WILLNEED on each (start address, length) range; errors are ignored (advice only)."""
        if self.batched and self._own_pidfd() >= 0:
            iov = np.empty((len(starts), 2), dtype=np.uint64)
            iov[:, 0], iov[:, 1] = starts, lengths
            for begin in range(0, len(iov), MAX_IOV):
                chunk = iov[begin: begin + MAX_IOV]
                done = self.libc.syscall(_SYS_PROCESS_MADVISE, self.pidfd, ctypes.c_void_p(chunk.ctypes.data),
                                         ctypes.c_size_t(len(chunk)), _MADV_WILLNEED, 0)
                if done < 0 and begin == 0 and ctypes.get_errno() in (38, 22, 1):  # ENOSYS, EINVAL, EPERM
                    self.batched = False  # an older kernel, or a sandbox: one madvise per range from now on
                    break
            else:
                return
        for start, length in zip(starts.tolist(), lengths.tolist()):
            self.libc.madvise(start, length, _MADV_WILLNEED)

    def resident(self, start: int, length: int) -> bool:
        """Whether every page of the range is in the page cache (``mincore``; True if it cannot tell)."""
        pages = -(-length // PAGE)
        local = self.local  # one answer buffer per thread: views may be probed from several threads
        answer = getattr(local, "vec", None)
        if answer is None or len(answer) < pages:
            answer = local.vec = bytearray(max(pages, 64))
        vec = (ctypes.c_ubyte * pages).from_buffer(answer)
        if self.libc.mincore(start, length, vec) != 0:
            return True
        return answer.find(0, 0, pages) < 0


class _Advisor:
    """One background thread per process that gives the advice handed to it: a large ``MADV_WILLNEED``
    (a window of blocks, say) blocks its caller until the disk's queue takes it, and advice for batches
    still ahead need not hold up the batch being gathered. Advice on a range unmapped meanwhile fails
    harmlessly."""

    def __init__(self) -> None:
        self.pid = -1
        self.jobs: queue.SimpleQueue | None = None

    def submit(self, kernel: _Kernel, starts: np.ndarray, lengths: np.ndarray) -> None:
        pid = os.getpid()
        if self.pid != pid:  # first use in this process (threads do not survive a fork)
            with _LOCK:
                if self.pid != pid:
                    self.jobs = queue.SimpleQueue()
                    threading.Thread(target=self._run, args=(self.jobs,), name="memmap_replay readahead",
                                     daemon=True).start()
                    self.pid = pid
        cast(queue.SimpleQueue, self.jobs).put((kernel, starts, lengths))  # (made above, at the first use)

    @staticmethod
    def _run(jobs: queue.SimpleQueue) -> None:
        while True:
            kernel, starts, lengths = jobs.get()
            try:
                kernel.advise(starts, lengths)
            except Exception:  # advice only: never let the thread die  # noqa: BLE001
                pass


_LOCK = threading.Lock()
_ADVISOR = _Advisor()
_KERNEL: _Kernel | None = None


def _after_fork_in_child() -> None:
    """A child forked while another thread held the lock would wait for it forever: a fresh one."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _kernel() -> _Kernel:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _Kernel()
    return _KERNEL


class Readahead:
    """A view's readahead: ``batch(maps, lo, hi)`` advises rows ``lo[i]..hi[i]-1`` of every map.

    ``mode``: ``"auto"`` advises only when a probe finds some of the batch's pages not cached;
    ``"always"`` advises every batch; ``"off"`` never. ``advised``/``skipped`` count the batches."""

    QUIET_MOST = 64  # batches left unprobed after a probe found a batch cached: 1, 2, 4, ... 64
    SLOW = 4.0  # a gather this many times slower than the fastest seen (+ SLOW_EXTRA) ends a quiet spell
    SLOW_EXTRA = 1e-4  # seconds: about one page read from a fast disk

    def __init__(self, mode: str = "auto"):
        self.mode = mode
        self.advised = 0
        self.skipped = 0
        self._quiet = 0  # batches still to skip without a probe
        self._quiet_next = 1  # how many the next all-cached probe buys
        self._fastest = math.inf  # the fastest gather seen (seconds)

    def due(self) -> bool:
        """Whether this batch should be looked at: False when off, or while recent probes found the
        batches cached (auto mode skips the next 1, 2, 4, ... up to ``QUIET_MOST`` without a probe)."""
        if self.mode == "off":
            return False
        if self._quiet:
            self._quiet -= 1
            self.skipped += 1
            return False
        return True

    def timed(self, seconds: float) -> None:
        """A gather's time: one much slower than the fastest seen (its pages were not all cached, say)
        ends a quiet spell, so the next batch is probed."""
        if seconds < self._fastest:
            self._fastest = seconds
        elif self._quiet and seconds > self.SLOW * self._fastest + self.SLOW_EXTRA:
            self._quiet, self._quiet_next = 0, 1

    def batch(self, maps: Sequence[Any], lo: np.ndarray, hi: np.ndarray, *, background: bool = False,
              probe: bool = True) -> bool:
        """Advise the rows [lo, hi) (row numbers, one range per batch item) of each map; True if advised.
        In auto mode, first probe whether they are cached (then skip). ``background``: the advice is given
        by a thread of its own (for batches ahead: this one goes on at once)."""
        if self.mode == "off" or not len(lo) or not maps:
            return False
        kernel = _kernel()
        if not kernel.usable:
            return False
        plain = [array for array in maps if isinstance(array, np.ndarray)]
        encoded = [column for column in maps if isinstance(column, EncodedColumn)]
        if self.mode == "auto" and probe:
            if self._cached(kernel, plain, encoded, lo, hi):
                self._quiet, self._quiet_next = self._quiet_next, min(2 * self._quiet_next, self.QUIET_MOST)
                self.skipped += 1
                return False
            self._quiet_next = 1
        if encoded:  # the index entries first: the frames' ranges are read from them (the pages then in flight)
            self._advise(kernel, [column.index for column in encoded], lo, hi, background=False)
        return self._advise(kernel, plain, lo, hi, background=background,
                            extra=[_frame_ranges(column, lo, hi) for column in encoded])

    def _advise(self, kernel: _Kernel, maps: Sequence[np.ndarray], lo: np.ndarray, hi: np.ndarray, *,
                background: bool, extra: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> bool:
        # merged per map (two maps' ranges are never joined across the gap between them), then in pieces
        ranges = [_pieces(*_merged(*_byte_ranges(array, lo, hi))) for array in maps if len(array)]
        ranges += [_pieces(*_merged(*pair)) for pair in extra if len(pair[0])]
        ranges = [(starts, lengths) for starts, lengths in ranges if len(starts)]
        if not ranges:
            return False
        starts = np.concatenate([starts for starts, _ in ranges])
        lengths = np.concatenate([lengths for _, lengths in ranges])
        if background:
            _ADVISOR.submit(kernel, starts, lengths)
        else:
            kernel.advise(starts, lengths)
        self.advised += 1
        return True

    @staticmethod
    def _cached(kernel: _Kernel, plain: Sequence[np.ndarray], encoded: Sequence[EncodedColumn], lo: np.ndarray,
                hi: np.ndarray) -> bool:
        """Whether a few of the batch's ranges (spread over it) of its widest raw map and of every compressed
        field's frames are all cached: a few ``mincore`` calls, so that a warm batch skips the advice at the cost of
        microseconds."""
        step = max(1, len(lo) // PROBES)
        lo, hi = lo[::step][:PROBES], hi[::step][:PROBES]
        probed = [_frame_ranges(column, lo, hi) for column in encoded]  # (small raw fields stay cached: not these)
        if plain:
            probed.append(_byte_ranges(max(plain, key=lambda array: array.strides[0]), lo, hi))
        return all(kernel.resident(start, end - start)
                   for starts, ends in probed for start, end in zip(starts.tolist(), ends.tolist()))


def _rows_in(lo: np.ndarray, hi: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ranges [lo, hi) clipped to ``rows`` rows, empty ones left out."""
    lo, hi = np.clip(lo, 0, rows), np.clip(hi, 0, rows)
    keep = hi > lo
    return (lo, hi) if keep.all() else (lo[keep], hi[keep])


def _byte_ranges(array: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) addresses of rows [lo, hi) of a mapped array, clipped to its rows, the starts aligned
    down to a page (empty ranges left out)."""
    lo, hi = _rows_in(lo, hi, len(array))
    row_bytes = np.uint64(array.strides[0])
    return _addresses(array, lo.astype(np.uint64) * row_bytes, hi.astype(np.uint64) * row_bytes)


def _frame_ranges(column: EncodedColumn, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) addresses of the frames of rows [lo, hi) of a compressed field, as its index says (clipped to
    its frames: a damaged index is the gather's to report), the starts aligned down to a page."""
    frames = column.frames
    lo, hi = _rows_in(lo, hi, len(column.index))
    if not len(lo) or not len(frames):
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    first, last = frame_spans(column.index, lo, hi - 1)
    begin = np.clip(first, 0, len(frames))
    return _addresses(frames, begin, np.clip(last, begin, len(frames)))


def _addresses(array: np.ndarray, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) addresses of byte offsets [begin, end) of a mapped array, the starts aligned down to a page."""
    base = array.ctypes.data
    start = base + begin.astype(np.uint64)
    return start & np.uint64(~(PAGE - 1) & 0xFFFFFFFFFFFFFFFF), base + end.astype(np.uint64)


def _pieces(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges cut into pieces of at most ``PIECE`` bytes (each advised range is read whole)."""
    counts = ((lengths + np.uint64(PIECE - 1)) // np.uint64(PIECE)).astype(np.int64)
    if (counts <= 1).all():
        return starts, lengths
    first = np.repeat(starts, counts)
    offset = (np.arange(int(counts.sum()))
              - np.repeat(np.cumsum(counts) - counts, counts)).astype(np.uint64) * np.uint64(PIECE)
    ends = np.repeat(starts + lengths, counts)
    piece_starts = first + offset
    return piece_starts, np.minimum(ends - piece_starts, np.uint64(PIECE))


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ranges, overlapping or close ones (gap below ``MERGE_GAP``) joined: (starts, lengths)."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1] + np.uint64(MERGE_GAP)
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(starts)) - 1
    return starts[first], reach[last] - starts[first]
