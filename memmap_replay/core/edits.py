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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, cast

import numpy as np

from . import folderio
from . import format as fmt
from ..errors import CorruptStoreError
from .schema import Schema

if TYPE_CHECKING:
    import threading

    from .format import NpyFile
    from .store import CommitObserver, EpisodeStore

__all__ = ["Journal", "StoreEdits", "journal_dtype", "read_journal"]

_COLUMNS = tuple(name for name in fmt.TABLE if name != "id")  # an edit never changes a slot's occupant
_HEADER_LIMIT = 1 << 16
_JOURNAL_RETRIES = 20  # times a reader takes a newer meta.json to find its journal


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

    def write(self, store: StoreEdits, number: int) -> None:
        """Write the journal as edit ``number`` (before the commit that makes ``edits`` odd)."""
        self.records["edit"] = self.number = number
        buffer = io.BytesIO()
        np.save(buffer, self.records, allow_pickle=False)
        folderio.write_atomic(store.folder, store.folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE, buffer.getvalue(),
                              durable=store.durable)

    def apply(self, store: StoreEdits) -> None:
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


class StoreEdits:
    """``EpisodeStore``'s side of edits: the journal in flight as readers take it (``journal``, ``entries``,
    ``meta_array``), and the writer's edit (``begin_edit``, ``commit_edit``, ``end_edit``, ``edit``)."""

    if TYPE_CHECKING:  # (EpisodeStore's)
        folder: Path
        meta: fmt.StoreMeta
        table: dict[str, NpyFile]
        metas: dict[str, NpyFile]
        durable: bool
        _journal: Journal | None
        _overlaid: dict[str, np.ndarray]

        @property
        def state_lock(self) -> threading.RLock: ...
        @property
        def is_writer(self) -> bool: ...
        @property
        def capacity(self) -> fmt.Capacity: ...
        @property
        def observers(self) -> list[CommitObserver]: ...
        def refresh(self) -> bool: ...
        def require_writable(self, action: str) -> None: ...
        def _changing(self) -> list[CommitObserver]: ...
        def _write_meta(self, state: fmt.State, *, capacity: fmt.Capacity | None = None,
                        schema: Schema | None = None) -> None: ...

    def journal(self) -> Journal | None:
        """The journal of the edit in flight in ``meta`` (None: none). A reader whose meta.json is older than the
        journal on disk (the writer finished that edit and began another) takes the newer meta.json first."""
        if not self.meta.state.edits & 1:  # (no edit in flight, nearly always: no lock taken)
            return None
        with self.state_lock:
            return self._journal_now()

    def _journal_now(self) -> Journal | None:
        for _ in range(_JOURNAL_RETRIES):
            edits = self.meta.state.edits
            if not edits & 1:
                return None
            if self._journal is not None and self._journal.number == edits:
                return self._journal
            journal = read_journal(self.folder, self.meta)
            if journal is not None:
                self._journal, self._overlaid = journal, {}
                return journal
            if self.is_writer or not self.refresh() and self.meta.state.edits == edits:
                break
        raise CorruptStoreError(f"{self.folder}/{fmt.EPISODES_DIR}/{fmt.JOURNAL_FILE} must hold the journal of edit "
                                f"{self.meta.state.edits}, which meta.json says is in flight (edits is odd): it is "
                                f"missing or another edit's, so the edit cannot be read or finished; restore the "
                                f"folder from a copy (`python -m memmap_replay verify {self.folder}` lists every "
                                f"problem)")

    def entries(self, slots: np.ndarray, names: Iterable[str] = tuple(fmt.TABLE)) -> dict[str, np.ndarray]:
        """The episode-table entries of ``slots`` (columns ``names`` of ``format.TABLE``) as readers see them: an
        edit's journal in flight over the files' (a removed episode's ``end`` is ``format.REMOVED``)."""
        journal = self.journal()
        entries = {}
        for name in names:
            values = np.asarray(self.table[name].array()[slots])
            entries[name] = (values if journal is None or name == "id"
                             else journal.over(fmt.EPISODES_DIR, name, slots, values))
        return entries

    def meta_array(self, name: str) -> np.ndarray:
        """A meta field's values by slot: its read-only map, or while an edit is in flight a copy with the
        journal's values put over it (so a reader never sees an edit half written). (Per batch and meta field: the
        map itself, with no lock taken, unless an edit is in flight.)"""
        if not self.meta.state.edits & 1:
            return self.metas[name].array()
        with self.state_lock:
            journal = self.journal()
            if journal is None:
                return self.metas[name].array()
            if name not in self._overlaid:
                values = np.array(self.metas[name].array())
                values[journal.slots] = journal.records[f"meta.{name}"]
                values.flags.writeable = False
                self._overlaid[name] = values
            return self._overlaid[name]

    def _removed_between(self, first: int, stop: int) -> int:
        """How many episodes of ids ``first <= id < stop`` are removed (before their slots are reused)."""
        if not self.meta.state.removed or stop <= first:
            return 0
        slots = np.arange(first, stop, dtype=np.int64) % self.capacity.max_episodes
        return int(np.count_nonzero(self.table["end"].array()[slots] == fmt.REMOVED))

    def begin_edit(self, kind: str) -> None:
        """Before an edit of committed episodes writes anything: the writer lock, an edit a killed writer left in
        flight finished, and the observers told (``kind``: the verb, e.g. "delete_episodes"). Then any number of
        ``commit_edit``, and ``end_edit``."""
        self.require_writable("edit the store")
        for observer in self._changing():
            observer.editing(cast("EpisodeStore", self), kind)

    def commit_edit(self, journal: Journal, *, removed: int = 0, write_head: int | None = None) -> None:
        """Commit new entries and meta values for some live slots (``journal``, made by ``Journal.of`` after
        ``begin_edit``) as one edit (``core/edits.py``): the journal, then meta.json (the commit point), then the
        entries in place, then meta.json again. ``removed``: how many episodes the edit removes; ``write_head``: a
        new one (``compact`` moves rows)."""
        state = self.meta.state
        if not len(journal.records):  # (no entry changes: a plain commit, its ``edits`` moved on by a whole edit)
            self._write_meta(replace(state, edits=state.edits + 2, removed=state.removed + removed,
                                     commits=state.commits + 1,
                                     write_head=state.write_head if write_head is None else write_head))
            return
        with folderio.disk_full(f"no space left for {self.folder} to commit the edit: the store is as it was; "
                                f"free some space and try again"):
            journal.write(self, state.edits + 1)
            self._write_meta(replace(state, edits=state.edits + 1, removed=state.removed + removed,
                                     commits=state.commits + 1,
                                     write_head=state.write_head if write_head is None else write_head))
        self._journal, self._overlaid = journal, {}
        self._finish_edit(tell=False)

    def end_edit(self, slots: np.ndarray, files: Iterable[NpyFile] = ()) -> None:
        """After an edit's last commit: the observers told which slots' entries it changed and which files it
        wrote (the episode table's and meta files besides ``files``)."""
        self._edited([*self.table.values(), *self.metas.values(), *files], slots)

    def edit(self, journal: Journal, *, removed: int = 0) -> None:
        """An edit of one commit (``begin_edit`` was called, and ``journal`` made after it), then ``end_edit``."""
        self.commit_edit(journal, removed=removed)
        self.end_edit(journal.slots)

    def _edited(self, files: list[NpyFile], slots: np.ndarray) -> None:
        """Tell the observers that an edit wrote ``files`` and changed the entries of ``slots``."""
        paths = sorted({file.path.relative_to(self.folder).as_posix() for file in files})
        for observer in self.observers:
            observer.edited(cast("EpisodeStore", self), paths, slots)

    def _finish_edit(self, *, tell: bool = True) -> None:
        """Write the entries of the edit in flight (this writer's, or one a killed writer committed) in place, then
        commit meta.json with ``edits`` even. ``tell``: tell the observers (a killed writer's edit)."""
        journal = self.journal()
        if journal is None:
            return
        journal.apply(self)
        state = self.meta.state
        self._write_meta(replace(state, edits=state.edits + 1, commits=state.commits + 1))
        self._journal, self._overlaid = None, {}
        folderio.remove(self.folder, self.folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE)
        if tell:
            self._edited([*self.table.values(), *self.metas.values()], journal.slots)

