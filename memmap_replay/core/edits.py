"""Edits of committed episodes in place (format 3.0, "Edits" in ``format``): new episode-table entries and meta
values for some slots, committed as one. Numpy only.

An edit is a journal: ``episodes/journal.npy``, one record per edited slot holding its whole new entry (start,
length, end, final, continues) and every meta value. The writer writes it (temp file, fsync, rename), commits
``meta.json`` with ``state.edits`` made odd (the commit point: from here on the edit is the store's), writes the
records into ``episodes/`` and ``meta/`` in place, then commits ``meta.json`` again with ``edits`` even. While
``edits`` is odd, readers take the journal's records over the files' (``Journal.over``), so that a reader never sees
an entry half written (the journal is removed once ``edits`` is even again); a writer that finds it odd (its
predecessor was killed) writes the records again before its first change. A kill before the first commit leaves the
old store (the journal is ignored), after it the new one.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import folderio
from . import format as fmt
from ..errors import CorruptStoreError
from .schema import Schema

if TYPE_CHECKING:
    from .store import EpisodeStore

__all__ = ["Journal", "journal_dtype", "read_journal"]

_COLUMNS = tuple(name for name in fmt.TABLE if name != "id")  # an edit never changes a slot's occupant
_HEADER_LIMIT = 1 << 16


def journal_dtype(schema: Schema) -> np.dtype:
    """A journal record: the edit's number, the slot, its table entry, then every meta value (``meta.<name>``)."""
    parts: list[tuple[Any, ...]] = [("edit", "<i8"), ("slot", "<i8")]
    parts += [(name, fmt.TABLE[name].newbyteorder("<") if fmt.TABLE[name].itemsize > 1 else fmt.TABLE[name])
              for name in _COLUMNS]
    parts += [(f"meta.{spec.name}", spec.dtype, spec.shape) for spec in schema.meta_fields.values()]
    return np.dtype(parts)


@dataclass
class Journal:
    """The new entries of an edit's slots (``records``: a ``journal_dtype`` array, slots ascending and distinct)."""

    records: np.ndarray
    number: int = 0  # the edit's number (``state.edits`` while it is in flight)

    @classmethod
    def of(cls, store: EpisodeStore, slots: np.ndarray) -> "Journal":
        """The current entries of ``slots`` (live slots of the writer's store, after its ``begin_edit``), to be
        changed before the commit."""
        if store.meta.state.journal:  # (begin_edit finishes an edit a killed writer left: its entries are the base)
            store._finish_edit()
        slots = np.unique(np.asarray(slots, dtype=np.int64))
        records = np.zeros(len(slots), journal_dtype(store.schema))
        records["slot"] = slots
        for name in _COLUMNS:
            records[name] = store.table[name].array()[slots]
        for name, file in store.metas.items():
            records[f"meta.{name}"] = file.array()[slots]
        return cls(records)

    @property
    def slots(self) -> np.ndarray:
        return np.asarray(self.records["slot"])

    def position(self, slot: int) -> int:
        return int(np.searchsorted(self.slots, slot))

    def put(self, name: str, slots: np.ndarray, values: np.ndarray) -> None:
        """Set column ``name`` (a table column, or ``meta.<field>``) of the records of ``slots`` (any order) to
        ``values`` (one per slot, in the order of ``slots``)."""
        self.records[name][np.searchsorted(self.slots, slots)] = values

    def over(self, group: str, name: str, slots: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` (read from the file of ``group``/``name`` at ``slots``) with the journal's entries put over
        them (a copy when any slot is the journal's)."""
        where = np.minimum(np.searchsorted(self.slots, slots), max(len(self.slots) - 1, 0))
        hit = self.slots[where] == slots if len(self.slots) else np.zeros(len(slots), bool)
        if not hit.any():
            return values
        values = np.array(values)
        values[hit] = self.records[name if group == fmt.EPISODES_DIR else f"meta.{name}"][where[hit]]
        return values

    def write(self, store: EpisodeStore, number: int) -> None:
        """Write the journal as edit ``number`` (before the commit that makes ``edits`` odd)."""
        self.records["edit"] = self.number = number
        buffer = io.BytesIO()
        np.save(buffer, self.records, allow_pickle=False)
        folderio.write_atomic(store.folder, store.folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE, buffer.getvalue(),
                              durable=store.durable)

    def apply(self, store: EpisodeStore) -> None:
        """Write the records into the episode table and meta files, a run of adjacent slots at a time."""
        slots = self.slots
        if not len(slots):
            return
        breaks = np.flatnonzero(np.diff(slots) != 1) + 1
        runs = zip(np.r_[0, breaks], np.r_[breaks, len(slots)])
        files = [(name, store.table[name]) for name in _COLUMNS] + [(f"meta.{name}", file)
                                                                     for name, file in store.metas.items()]
        for first, stop in runs:
            for name, file in files:
                file.write_rows(int(slots[first]), np.ascontiguousarray(self.records[name][first:stop]))
        if store.durable:
            for _, file in files:
                file.sync()


def read_journal(folder: Path, meta: fmt.StoreMeta) -> Journal | None:
    """The journal of ``meta``'s edit in flight, checked (bounded, its dtype, its slots); None when it is a later
    edit's, or gone (the writer finished ``meta``'s edit since ``meta`` was read, and maybe began another)."""
    path = folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE
    dtype = journal_dtype(meta.schema)
    limit = _HEADER_LIMIT + meta.capacity.max_episodes * dtype.itemsize
    try:
        data = folderio.read_bounded(folder, path, limit)
    except FileNotFoundError:  # (the writer finished the edit and removed it since ``meta`` was read)
        return None
    try:
        records = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise CorruptStoreError(f"{path} is not a readable .npy file ({error})") from None
    slots = records["slot"] if records.dtype == dtype and records.ndim == 1 else None
    if slots is None:
        raise CorruptStoreError(f"{path} must hold a 1-D array of {dtype} (got {records.dtype} {records.shape})")
    numbers = np.unique(records["edit"])
    if len(numbers) == 1 and numbers[0] > meta.state.edits:
        return None
    if (len(slots) == 0 or len(numbers) != 1 or numbers[0] != meta.state.edits or slots[0] < 0
            or slots[-1] >= meta.capacity.max_episodes or (np.diff(slots) <= 0).any()):
        raise CorruptStoreError(f"{path} must hold edit {meta.state.edits}'s entries, for slots ascending below "
                                f"{meta.capacity.max_episodes} (got edit(s) {numbers[:4]}, slots {slots[:8]}...): "
                                f"the edit's journal is damaged")
    return Journal(records, meta.state.edits)
