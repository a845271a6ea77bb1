"""``ReplayBuffer.compact()``: the rows of the live episodes rewritten contiguously from row 0, in id order, and the
rest freed (rows of removed episodes and trimmed-off steps, a compressed field's frames no live row uses).

No row a reader may read is ever overwritten before a commit says it is free, so readers keep reading the old rows
until the commit that moves them (their batch is then refused as read across an edit, and drawn again). Episodes move
in rounds through the free rows past the write head (the scratch): a round copies its episodes' rows there and
commits (an edit of their entries: ``core/edits.py``), then copies them down to their places and commits again. A
kill at any instant leaves every episode whole, each at its old place, in the scratch or at its new place; run
``compact()`` again to finish. Each round moves as many episodes as the scratch holds; a store with fewer free rows
after its last episode than its longest episode to move, or than an eighth of the rows to move (so that at most 8
rounds move them), has ``max_steps`` grown first by the rows missing (a grow in place: the files stay sparse there;
``CompactReport.max_steps`` says so). A compressed field's rows move as index
entries (its frames stay where they are and are never decoded); frames of no live row are freed.

Freeing is a hole punched in each file (``fallocate(PUNCH_HOLE)``): the files keep their size, and the blocks go back
to the file system. Where the file system cannot punch holes, the rows are only marked free (the next episodes go
there) and ``CompactReport.freed_bytes`` says 0. Only stores that are not rings: a ring reuses the rows of removed
episodes as it wraps, oldest first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..core import folderio
from ..core.edits import Journal
from ..core.progress import progress_bar
from ..core.encoded import EncodedField
from ..core.format import NpyFile
from ..core.store import EpisodeStore
from ..errors import BufferFullError, OptionError
from .rowcopy import RowCopier

__all__ = ["CompactReport", "compact"]

_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01  # linux/falloc.h
_ROUNDS = 8  # at most this many rounds through the scratch: max_steps grows when the free rows are fewer


@dataclass(frozen=True)
class CompactReport:
    """What ``compact()`` did: episodes moved, rows copied (each moved row is copied twice: to the scratch and to its
    place), the rows the live episodes take now and took before (``rows_after``/``rows_before``: the write head),
    the disk blocks given back (``freed_bytes``, measured), the commits made, and ``max_steps`` (before, after)
    when the store had too few free rows after its last episode to move its longest one through, and compact grew
    it by the rows missing (None: it did not)."""

    moved_episodes: int
    copied_rows: int
    rows_before: int
    rows_after: int
    freed_bytes: int
    commits: int
    max_steps: tuple[int, int] | None = None


def compact(store: EpisodeStore, *, progress: bool = False) -> CompactReport:
    """Compact a writer's store (see the module)."""
    if store.capacity.circular:
        raise OptionError("compact() is for stores that are not rings: a ring (circular=True) reuses the rows of "
                          "removed and trimmed episodes as it wraps, oldest first; there is nothing to compact")
    table = store.live_table()  # (an edit a killed writer left in flight: as readers see it, finished)
    start, rows = table.start.copy(), table.length + table.final
    targets = np.r_[0, np.cumsum(rows)[:-1]].astype(np.int64) if len(table) else np.zeros(0, np.int64)
    moving = np.flatnonzero(targets != start)
    before, before_blocks, commits, copied = store.meta.state.write_head, _blocks(store), 0, 0
    grown_from = None
    if len(moving):  # room after the last row (the files stay sparse there) for the longest episode to move, and
        # for an eighth of the rows to move (at most 8 rounds)
        room = store.capacity.max_steps - int((start + rows).max())
        short = max(int(rows[moving].max()), int(rows[moving].sum()) // _ROUNDS) - room
        if short > 0:
            grown_from = store.capacity.max_steps
            store.grow(max_steps=grown_from + short)
    store.begin_edit("compact")
    copier, scratch_end = RowCopier(), before
    try:
        with progress_bar(2 * int(rows[moving].sum()), "compact", progress, unit="row", leave=True) as bar:
            first = True
            while len(moving := np.flatnonzero(targets != start)):
                # a round through the scratch, the free rows after the last one (two commits): the next episodes in
                # id order that fit; first, and where no round fits, every episode whose place no live row holds
                # goes straight there (one commit; after a compact killed between a round's two commits: the
                # episodes in the scratch)
                head = int((start + rows).max())
                room = store.capacity.max_steps - head
                round_ = next(_rounds(moving, rows, room), moving[:0])
                fits = len(round_) and int(rows[round_].sum()) <= room
                direct = moving[_free_places(start, rows, targets[moving], rows[moving])] if first or not fits else []
                first = False
                if len(direct):
                    sources, start[direct] = start[direct].copy(), targets[direct]
                    commits += _move(store, copier, table.slots[direct], sources, targets[direct], rows[direct],
                                     write_head=int((start + rows).max()))
                    copied += int(rows[direct].sum())
                    bar.update(2 * int(rows[direct].sum()))
                    continue
                if not fits:
                    longest = int(rows[moving[0]])
                    raise BufferFullError(
                        f"compact() moves episodes through the free rows after the last one, and {store.folder} has "
                        f"{room} of them, fewer than the {longest} rows of episode {int(table.ids[moving[0]])}, the "
                        f"next to move ({len(table) - len(moving)} of {len(table)} episodes are in place, each move "
                        f"committed); grow it, buffer.grow(max_steps={store.capacity.max_steps + longest - room}), "
                        f"then compact() again")
                scratch = head + np.r_[0, np.cumsum(rows[round_])[:-1]].astype(np.int64)
                scratch_end = max(scratch_end, int(scratch[-1] + rows[round_][-1]))
                commits += _move(store, copier, table.slots[round_], start[round_], scratch, rows[round_],
                                 write_head=int(scratch[-1] + rows[round_][-1]))
                start[round_] = targets[round_]
                commits += _move(store, copier, table.slots[round_], scratch, targets[round_], rows[round_],
                                 write_head=int((start + rows).max()))
                copied += 2 * int(rows[round_].sum())
                bar.update(2 * int(rows[round_].sum()))
    finally:
        copier.close()
    after = int(targets[-1] + rows[-1]) if len(table) else 0
    if after != store.meta.state.write_head:  # (rows after the last episode are free: a trimmed or removed tail)
        store.commit_edit(Journal.of(store, np.zeros(0, np.int64)), write_head=after)
        commits += 1
    _free(store, store.live_table(), after, scratch_end)  # (the entries after the moves)
    moved = np.flatnonzero(targets != table.start)
    store.end_edit(table.slots[moved], _written_files(store))
    return CompactReport(len(moved), copied, before, after, max(before_blocks - _blocks(store), 0), commits,
                         None if grown_from is None else (grown_from, store.capacity.max_steps))


def _free_places(start: np.ndarray, rows: np.ndarray, places: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Which of the ``places`` (rows ``places .. places + sizes - 1``) no live episode (rows ``start .. start +
    rows - 1``) holds any row of."""
    if not len(start):
        return np.ones(len(places), dtype=bool)
    order = np.argsort(start, kind="stable")
    starts, reach = start[order], np.maximum.accumulate((start + rows)[order])
    # the live episodes starting before a place's end: the furthest row they reach must be at or before its start
    before = np.searchsorted(starts, places + sizes, side="left")
    furthest = np.where(before > 0, reach[np.maximum(before - 1, 0)], 0)
    free: np.ndarray = furthest <= places
    return free


def _rounds(moving: np.ndarray, rows: np.ndarray, room: int) -> Iterator[np.ndarray]:
    """The moving episodes in id order, cut into runs whose rows fit in the scratch."""
    first, used = 0, 0
    for position in range(len(moving)):
        size = int(rows[moving[position]])
        if used + size > room:
            yield moving[first:position]
            first, used = position, 0
        used += size
    if first < len(moving):
        yield moving[first:]


def _move(store: EpisodeStore, copier: RowCopier, slots: np.ndarray, sources: np.ndarray, places: np.ndarray,
          rows: np.ndarray, *, write_head: int) -> int:
    """Copy each episode's rows from ``sources`` to ``places`` (free rows), then commit the new starts as one edit."""
    store._ensure_rows(int((places + rows).max()))
    runs = list(zip(sources.tolist(), places.tolist(), rows.tolist()))
    for file in _row_files(store):
        copier.copy(file, file, runs)
    if store.durable:
        for file in _row_files(store):
            file.sync()
    journal = Journal.of(store, slots)
    journal.put("start", slots, places)
    store.commit_edit(journal, write_head=write_head)
    return 2


def _written_files(store: EpisodeStore) -> list[NpyFile]:
    """The step files a compact writes (rows moved, holes punched)."""
    return [part for file in store.steps.values()
            for part in ((file.index, file.frames) if isinstance(file, EncodedField) else (file,))]


def _row_files(store: EpisodeStore) -> list[NpyFile]:
    """The files with one entry per row: raw fields' and compressed fields' index files."""
    return [file.index if isinstance(file, EncodedField) else file for file in store.steps.values()]


def _free(store: EpisodeStore, table: Any, head: int, end: int) -> None:
    """Punch out rows ``head .. end`` of every row file, and the frames no live row uses."""
    for rowfile in _row_files(store):
        stop = min(end, rowfile.rows)
        if stop > head:
            _punch(rowfile, rowfile.offset + head * rowfile.spec.row_nbytes, (stop - head) * rowfile.spec.row_nbytes)
    for file in store.steps.values():
        if not isinstance(file, EncodedField) or not len(table):
            continue
        lo, hi = file.span(table.start, table.start + table.length + table.final - 1)
        order = np.argsort(lo)
        lo, hi = lo[order], np.maximum.accumulate(hi[order])
        used_until = 0
        for begin, stop in zip(lo.tolist(), hi.tolist()):
            if begin > used_until:
                _punch(file.frames, file.frames.offset + used_until, begin - used_until)
            used_until = max(used_until, stop)
        limit = store.meta.state.frames[file.spec.name]["bytes"]
        if limit > used_until:
            _punch(file.frames, file.frames.offset + used_until, limit - used_until)


_libc: Any = None


def _punch(file: NpyFile, offset: int, length: int) -> None:
    """Give the blocks of ``length`` bytes at ``offset`` back to the file system (reads there give zeros)."""
    global _libc
    if length <= 0:
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if _libc.fallocate(file._writer(), _PUNCH_HOLE | _KEEP_SIZE, offset, length) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS):
            with folderio.errors_named(file.path, "free rows of"):
                raise OSError(code, os.strerror(code))


def _blocks(store: EpisodeStore) -> int:
    """Bytes of disk the step files take now."""
    total = 0
    for file in _written_files(store):
        with folderio.errors_named(file.path, "look at"):
            total += os.stat(file.path).st_blocks * 512
    return total
