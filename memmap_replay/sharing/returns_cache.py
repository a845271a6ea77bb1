"""Each episode's return, kept by the writer in ``stats/returns.npy`` (derived data, like ``stats/running.npz``), so
that the card's summary of a large store (``episode_summary``: the returns' min, max, mean and std, rendered into
README.md whenever the card changes, e.g. by an edit's provenance record) reads one number per episode instead of
every reward row.

The file is a ``.npy`` of records ``[("key", "<i8"), ("value", "<f8")]``; episode ``id``'s entry is at ``id % len``,
and counts only while its ``key`` is ``id + 1`` (0: none, so that a new file is all holes: nothing is written
until an episode's return is). The writer fills the entries of the episodes it commits
(their rows are in memory then) and of the episodes an edit changed (it sums their rows again), writing an entry's
value before its id. A reader takes the entries whose id matches, reads the ids again after the values (an entry
rewritten meanwhile is not taken), and sums the rows of the others; it never writes. A missing, damaged or foreign
file is a cache miss, nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from ..core import folderio
from ..core import format as fmt
from ..core.format import NpyFile
from ..core.schema import FieldSpec
from ..errors import CorruptStoreError, ReplayError

if TYPE_CHECKING:
    from ..core.index import EpisodeTable
    from ..core.store import EpisodeStore, PendingEpisode

__all__ = ["RETURNS_FILE", "ReturnsCache", "cached_returns"]

RETURNS_FILE = "returns.npy"
_SPEC = FieldSpec("returns", np.dtype([("key", "<i8"), ("value", "<f8")]))


def _path(store: EpisodeStore) -> Path:
    return Path(store.folder) / fmt.STATS_DIR / RETURNS_FILE


def _open_file(store: EpisodeStore, min_rows: int, *, writable: bool) -> NpyFile:
    """The cache's file, refused (``CorruptStoreError``) unless the rows its header claims are all on disk: a
    damaged header's row count would fail, or overflow, the map."""
    file = NpyFile.open(store.folder, _path(store), _SPEC, min_rows, writable=writable)
    if file.offset + file.rows * _SPEC.row_nbytes > file.size:
        file.close()
        raise CorruptStoreError(f"{_path(store)} claims {file.rows} rows in its header but holds "
                                f"{max(file.size - file.offset, 0) // _SPEC.row_nbytes} (a damaged cache)")
    return file


def cached_returns(store: EpisodeStore, table: EpisodeTable, name: str, compute: Any) -> np.ndarray:
    """The return (sum of field ``name``) of each episode of ``table``: from the cache where it holds it, else
    ``compute(store, name, starts, lengths)`` over the episodes' rows."""
    returns = np.full(len(table), np.nan)
    hit = np.zeros(len(table), dtype=bool)
    try:
        file = _open_file(store, 0, writable=False)
    except (ReplayError, OSError):
        file = None
    if file is not None and file.rows and len(table):
        try:
            entries = file.array()
            where = table.ids % file.rows
            before = np.asarray(entries["key"][where])
            values = np.asarray(entries["value"][where])
            # (the keys again after the values: an entry the writer rewrote meanwhile is not taken)
            hit = (before == table.ids + 1) & (np.asarray(entries["key"][where]) == table.ids + 1) & np.isfinite(values)
            returns[hit] = values[hit]
        except (ReplayError, OSError, ValueError):
            hit[:] = False
        finally:
            file.close()
    missing = np.flatnonzero(~hit)
    if len(missing):
        returns[missing] = compute(store, name, table.start[missing], table.length[missing])
    return returns


class ReturnsCache:
    """The writer's side: entries of committed and edited episodes (``field``: the reward field summed)."""

    def __init__(self, store: EpisodeStore, field: str):
        self.field = field
        self.file: NpyFile | None = None
        self._store = store

    def _open(self) -> NpyFile:
        store, path = self._store, _path(self._store)
        if self.file is None:
            try:
                self.file = _open_file(store, store.capacity.max_episodes, writable=True)
            except (ReplayError, OSError):  # none yet, or one to start afresh (below)
                pass
        if self.file is None or self.file.rows < store.capacity.max_episodes:
            if self.file is not None:
                self.file.close()
            folderio.make_dir(store.folder, path.parent)
            folderio.remove(store.folder, path)  # (a cache: one of another capacity, or damaged, starts afresh)
            fmt._create_npy(store.folder, path, _SPEC, store.capacity.max_episodes)  # (holes: every key 0, none)
            self.file = NpyFile.open(store.folder, path, _SPEC, store.capacity.max_episodes, writable=True)
        return self.file

    def committed(self, episodes: Iterable[PendingEpisode]) -> None:
        values = {int(episode.id): float(sum(np.sum(chunk, dtype=np.float64) for chunk in episode.rows[self.field]))
                  for episode in episodes if episode.id is not None and self.field in episode.rows}
        self._put(values)

    def fill(self, table: EpisodeTable, compute: Any) -> None:
        """Entries for the episodes of ``table`` that have none (a store written before the cache existed): read
        once, so that later summaries read one number per episode."""
        try:
            file = self._open()
            where = table.ids % file.rows
            missing = np.flatnonzero(np.asarray(file.array()["key"][where]) != table.ids + 1)
        except (ReplayError, OSError):
            self.close()
            return
        if len(missing):
            self.edited(table.ids[missing], table.start[missing], table.length[missing], compute)

    def edited(self, ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, compute: Any) -> None:
        if len(ids):
            self._put(dict(zip(ids.tolist(), compute(self._store, self.field, starts, lengths).tolist())))

    def _put(self, values: dict[int, float]) -> None:
        """Write entries, best effort: the cache is written after the commit it describes, which a full disk here
        must not undo (an entry half written has key 0: a miss)."""
        if not values:
            return
        try:
            file = self._open()
            for episode_id, value in values.items():
                slot = episode_id % file.rows
                file.write_rows(slot, np.array([(0, value)], dtype=_SPEC.dtype))  # the value first, then the key
                file.write_rows(slot, np.array([(episode_id + 1, value)], dtype=_SPEC.dtype))
        except (ReplayError, OSError):
            self.close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
