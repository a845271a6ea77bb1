"""EpisodeStore: a folder of per-field .npy files, the episode table, capacity, ring eviction and commits.

Numpy only. Writers hand it whole episodes (``commit``); it places them, evicts the oldest episodes in
circular mode, writes the rows and commits ``meta.json`` (see ``format`` for the protocol). Readers
get read-only maps of every file and the live episodes' table (``live_table``), which views and
samplers index with one gather per field.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, TypeVar, cast

import numpy as np

from . import folderio
from . import format as fmt
from ..errors import (CorruptStoreError, DiskFullError, ReadOnlyError, SchemaMismatchError,
                     StoreNotFoundError, UnsupportedFormatError)
from .edits import Journal, StoreEdits
from .encoded import EncodedField, frames_limit
from .placement import Placement, place
from .format import Capacity, NpyFile, StoreMeta
from .index import EpisodeTable
from .lock import WriterLock
from .grow import grow_store, grown_capacity
from .checks import (MODES, check_live_ids, check_matches, check_replaceable, holds_episodes, locate, make_folder,
                     present_entries, undo_creation)
from .schema import FieldSpec, Schema

__all__ = ["EpisodeStore", "PendingEpisode", "MODES", "CommitObserver", "observe_commits"]

_MIN_GROWTH_ROWS = 1024
StepFile = NpyFile | EncodedField  # a raw step field's file, or a compressed field's two
_CONSISTENCY_RETRIES = 20
_REPLACING = "meta.json.replacing"  # the old meta.json while a store is created over it


class CommitObserver:
    """What another room does around a writer's changes (running statistics, the checksum manifest): the
    store calls these hooks and nothing else. ``changing`` before each change (the first one of a store is
    its first write), ``committing``/``committed`` around a commit (``committed`` after meta.json is replaced),
    ``flush`` on ``sync`` and ``close``. Every hook runs under the writer lock."""

    def changing(self, store: "EpisodeStore") -> None:
        pass

    def committing(self, store: "EpisodeStore", episodes: list["PendingEpisode"]) -> None:
        pass

    def committed(self, store: "EpisodeStore", episodes: list["PendingEpisode"]) -> None:
        pass

    def editing(self, store: "EpisodeStore", kind: str) -> None:
        """Before an edit of committed episodes writes anything (``begin_edit``), after ``changing``; ``kind``: the
        verb ("delete_episodes", "trim", "relabel", "add_field", "compact")."""

    def edited(self, store: "EpisodeStore", paths: list[str], slots: np.ndarray) -> None:
        """After an edit is committed and written; ``paths``: the files it wrote besides meta.json (relative);
        ``slots``: the episode slots whose entries it changed."""

    def flush(self, store: "EpisodeStore", *, closing: bool) -> None:
        pass

    last = False  # its hooks run after those of the observers without it (the checksum manifest's)


# factories of the observers each writing store gets (None: none for this store); rooms register theirs
_OBSERVERS: list[Callable[["EpisodeStore"], CommitObserver | None]] = []
_Factory = TypeVar("_Factory", bound=Callable[["EpisodeStore"], "CommitObserver | None"])


def observe_commits(factory: _Factory) -> _Factory:
    """Register a factory of commit observers for every store that writes (usable as a decorator)."""
    _OBSERVERS.append(factory)
    return factory


@dataclass
class PendingEpisode:
    """A finished episode ready to commit: its rows per step field (as chunks), meta values, and end."""

    rows: Mapping[str, list[np.ndarray]]
    length: int
    end: str | None = None
    final: bool = False
    meta: Mapping[str, np.ndarray] = field(default_factory=dict)
    # the segment this one continues: an episode id, or an episode committed before it in the same commit;
    # -1: it starts an episode
    continues: "int | PendingEpisode" = -1
    id: int | None = None  # set when it commits
    # a compressed field's rows already encoded by the same codec, as (lengths, frames back to back): committed
    # as they are, never decoded (a merge copies frames so); such a field needs no entry in ``rows``
    encoded: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return self.length + int(self.final)


class EpisodeStore(StoreEdits):
    """Open with ``EpisodeStore.open(folder, mode, schema=..., capacity=...)``; modes as h5py/zarr:
    'r' read-only, 'r+' read/write (must exist), 'a' read/write (create if absent), 'w' create (wiping a
    store already there), 'w-' create (fail if a store is there)."""

    _meta_path: str | None = None  # meta.json's path as a string, made at the first meta_stamp()

    def __init__(self, folder: Path, meta: StoreMeta, *, writable: bool, lock: WriterLock | None, durable: bool):
        self.folder = folder
        self.meta = meta
        # meta_stamp() taken before ``meta`` was read, when known (a refresh); None: not known
        self.read_stamp: tuple[int, ...] | None = None
        # a stamp of meta.json at which every episode of ``meta`` was seen live (a writer appended since)
        self._table_stamp: tuple[int, ...] | None = None
        self.writable = writable
        self.durable = durable
        self._lock = lock
        self._closed = False
        self.track_stats = True  # read by the running statistics' observer (sharing/stats.py)
        self._observers: list[CommitObserver] | None = None  # made at the first change
        # the journal of the edit in flight (odd ``state.edits``), and the meta files with it put over them
        self._journal: Journal | None = None
        self._overlaid: dict[str, np.ndarray] = {}
        self._journal_checked = False  # a stale journal removed (at this writer's first change)
        self._state_lock, self._state_pid = threading.RLock(), os.getpid()
        self.steps: dict[str, StepFile] = {}
        self.metas: dict[str, NpyFile] = {}
        self.table: dict[str, NpyFile] = {}
        self._open_files()

    # ---- opening -----------------------------------------------------------------------------------

    @classmethod
    def open(cls, folder: folderio.StrPath, mode: str = "r", *, schema: Schema | None = None,
             capacity: Capacity | None = None, durable: bool = False) -> "EpisodeStore":
        # a damaged folder gets the library's error naming the file, and where to get the full list
        hint = f"; `python -m memmap_replay verify {folder}` lists every problem of the folder"
        try:
            return cls._open(folder, mode, schema=schema, capacity=capacity, durable=durable)
        except (CorruptStoreError, UnsupportedFormatError) as error:
            raise type(error)(f"{error}{hint}") from None
        except IsADirectoryError as error:  # a folder where the layout has a file
            raise CorruptStoreError(f"{error.filename} is a folder where the store must have a file{hint}") from None

    @classmethod
    def _open(cls, folder: folderio.StrPath, mode: str, *, schema: Schema | None, capacity: Capacity | None,
              durable: bool) -> "EpisodeStore":
        folder, exists = locate(folder, mode)
        if mode == "r":
            return cls(folder, fmt.read_meta(folder), writable=False, lock=None, durable=durable)
        if exists and mode in ("r+", "a"):
            # an existing store opened for writing takes the writer lock at its first write, so that
            # reopening a folder a writer in this or another process has open (the seed package's
            # `from_folder` idiom) works; a second writer gets StoreLockedError when it writes
            meta = fmt.read_meta(folder)
            check_matches(folder, meta, schema, capacity)
            return cls(folder, meta, writable=True, lock=None, durable=durable)
        check_replaceable(folder)  # before any file is made: another program's files are never touched
        made = make_folder(folder)
        lock_made = not os.path.lexists(folder / fmt.LOCK_FILE)
        try:
            lock = WriterLock(folder / fmt.LOCK_FILE, folder=folder)
        except BaseException:
            undo_creation(folder, present_entries(folder), made, lock=False)  # (the folders made, if still empty)
            raise
        before, theirs = present_entries(folder), False  # a failed creation removes what it made, no more
        try:
            folderio.remove_temps(folder, fmt.META_FILE)  # a killed writer's
            if mode != "w" and (folder / fmt.META_FILE).exists():
                theirs = True  # another writer created the store between our first look and taking the lock
                if mode == "w-":
                    raise SchemaMismatchError(f"a store already exists at {folder}; pass overwrite=True to replace it")
                meta = fmt.read_meta(folder)
                check_matches(folder, meta, schema, capacity)
                folderio.check_for_writing(folder, fmt._writer_entries(meta.schema))
                return cls(folder, meta, writable=True, lock=lock, durable=durable)
            if schema is None or capacity is None:
                raise StoreNotFoundError(f"no store at {folder} to open, and no schema and capacity to create one")
            if mode != "w" and not (folder / _REPLACING).exists() and holds_episodes(folder):
                raise CorruptStoreError(
                    f"{folder} holds a store's episode table with episodes in it but no meta.json (it was lost or "
                    f"deleted): creating a store here would delete them; restore meta.json from a copy, or pass "
                    f"overwrite=True to start afresh; `python -m memmap_replay verify {folder}` lists what is there")
            meta = cls._create(folder, schema, capacity, durable)
            return cls(folder, meta, writable=True, lock=lock, durable=durable)
        except BaseException:
            lock.release()
            if not theirs:
                undo_creation(folder, before, made, lock=lock_made)
            raise

    @staticmethod
    def _create(folder: Path, schema: Schema, capacity: Capacity, durable: bool) -> StoreMeta:
        """Remove only the files the format owns, write fresh ones, then commit meta.json last. An old
        meta.json is first renamed to a marker, so that a creation killed half-way is known for one (and
        never mistaken for a store whose meta.json was lost)."""
        with folderio.errors_named(folder, "create a store in"):
            if (folder / fmt.META_FILE).exists():
                os.replace(folder / fmt.META_FILE, folder / _REPLACING)  # renames a link itself, never its target
            for name in fmt._OWNED:
                folderio.remove_entry(folder, folder / name)
        for name in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR):
            folderio.make_dir(folder, folder / name)
        for _, spec, path, rows in fmt.layout(schema, capacity):
            fmt._create_npy(folder, folder / path, spec, rows or 0)
        meta = StoreMeta.new(schema, capacity)
        fmt.write_meta(folder, meta, durable=durable)
        folderio.remove(folder, folder / _REPLACING)
        return meta

    def _open_layout(self, meta: StoreMeta) -> tuple[dict[str, StepFile], dict[str, NpyFile], dict[str, NpyFile]]:
        """Every file of ``meta``'s layout, opened and checked (a compressed field's two as one EncodedField)."""
        steps: dict[str, StepFile] = {}
        metas: dict[str, NpyFile] = {}
        table: dict[str, NpyFile] = {}
        index: dict[str, NpyFile] = {}
        groups = {fmt.STEPS_DIR: steps, fmt.META_DIR: metas, fmt.EPISODES_DIR: table, fmt.INDEX: index}
        opened: list[NpyFile] = []
        try:
            for group, spec, path, rows in fmt.layout(meta.schema, meta.capacity, links=meta.links, state=meta.state):
                file = NpyFile.open(self.folder, self.folder / path, spec, meta.state.rows if rows is None else rows,
                                    writable=self.writable)
                opened.append(file)
                # a reader maps every row the header declares: they must all be on disk
                needed, size = file.offset + file.rows * spec.row_nbytes, file.size
                if size < needed:
                    raise CorruptStoreError(f"{file.path} is truncated: its header declares {file.rows} rows "
                                            f"({needed} bytes) (got {size} bytes on disk)")
                if group == fmt.FRAMES:
                    steps[spec.name] = EncodedField(meta.schema.fields[spec.name], index.pop(spec.name), file)
                else:
                    groups[group][spec.name] = file  # type: ignore[index]  # (steps takes NpyFile too)
        except BaseException:
            for file in opened:
                file.close()
            raise
        return steps, metas, table

    def _open_files(self) -> None:
        try:
            self.steps, self.metas, self.table = self._open_layout(self.meta)
        except BaseException:
            self.close()
            raise
        for attempt in range(_CONSISTENCY_RETRIES):
            checked = self.meta
            try:
                if check_live_ids(self):
                    return
                # (else a writer grew the store meanwhile, and this store took its meta.json: check that one)
            except CorruptStoreError:
                # a writer may have committed between our read of meta.json and of the table: look again,
                # and call it damage only if meta.json is still the one checked
                try:
                    fresh = fmt.read_meta(self.folder)
                except CorruptStoreError:
                    fresh = checked
                if fresh.state == checked.state or attempt == _CONSISTENCY_RETRIES - 1:
                    self.close()
                    raise
                self._adopt(fresh)
        # (a writer grew the store at every attempt: the store keeps the meta.json it took last, whose table
        # ``live_table`` reads under its seqlock)

    # ---- reading -----------------------------------------------------------------------------------

    @property
    def schema(self) -> Schema:
        return self.meta.schema

    @property
    def capacity(self) -> Capacity:
        return self.meta.capacity

    @property
    def num_episodes(self) -> int:
        state = self.meta.state
        return state.next_episode - state.first_episode - state.removed

    @property
    def is_writer(self) -> bool:
        """This object holds the folder's writer lock: its in-memory state is the newest committed one."""
        return self._lock is not None and not self._lock.inherited

    @property
    def state_lock(self) -> threading.RLock:
        """Held while ``meta`` and ``read_stamp`` change (``refresh``, ``live_table``): threads sharing this
        store (views and their gather threads) read them, and the table, as one pair under it. A forked child
        gets a lock of its own (one held by another thread at the fork would never be released there)."""
        if self._state_pid != os.getpid():
            self._state_lock, self._state_pid = threading.RLock(), os.getpid()
        return self._state_lock

    def meta_stamp(self) -> tuple[int, ...]:
        """What changes whenever a writer replaces ``meta.json`` (a commit or an eviction). (Called per draw
        by samplers following the disk and per gather by every view: one ``stat`` of a path made once.)"""
        path = self._meta_path
        if path is None:
            path = self._meta_path = os.fspath(self.folder / fmt.META_FILE)
        try:
            info = os.stat(path)
        except OSError as error:
            raise folderio.library_error(error, self.folder / fmt.META_FILE, "look at") from None
        return info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size

    def live_table(self, *, catch_up: bool = True) -> EpisodeTable:
        """The live episodes (oldest first) with their entries in the episode table, removed ones left out (see
        ``_live_table``)."""
        with self.state_lock:
            table = self._live_table(catch_up)
        shown = table.end != fmt.REMOVED
        return table if shown.all() else table.select(shown)

    def _live_table(self, catch_up: bool) -> EpisodeTable:
        """The live episodes (oldest first) with their entries in the episode table. The writer's own store
        reads its own state. Any other reader gets a consistent snapshot while a writer in another process (or
        another store object) commits, as a seqlock around the read of the table:

        A writer commits an eviction in meta.json before it reuses the evicted episode's slot or rows. So if
        meta.json is unchanged since ``meta`` was read (``read_stamp``) and every slot holds the id read for
        it (``episodes/id.npy``), the table is whole. Otherwise meta.json is read again: the episodes still
        live then were never touched while their entries were read; the ones evicted meanwhile are left out.
        ``catch_up=True`` (the default): then the newer meta.json is taken instead (as ``refresh`` does) and
        the table read again, up to ``_CONSISTENCY_RETRIES`` times, so that ``meta`` (``num_episodes``) and
        the table agree; ``catch_up=False`` keeps ``meta`` and leaves the evicted episodes out. An edit
        committed meanwhile (``state.edits`` changed) rewrote entries in place: the newer meta.json is taken
        and the table read again, as after a grow."""
        table, stored = self._table_of()
        if self.is_writer:
            return table
        for attempt in range(_CONSISTENCY_RETRIES if catch_up else 1):
            if not len(table):
                return table
            stamp = self.meta_stamp()  # after the reads of the table
            if stamp in (self.read_stamp, self._table_stamp) and np.array_equal(stored, table.ids):
                return table
            fresh = fmt.read_meta(self.folder)
            if fresh.store_id != self.meta.store_id:
                raise CorruptStoreError(f"{self.folder} was replaced by a new store (overwrite); open it again")
            # a writer grew the store (the slots of ``meta`` are gone), or edited entries in place
            if fresh.capacity != self.meta.capacity or fresh.state.edits != self.meta.state.edits:
                self.read_stamp = stamp
                self._adopt(fresh)
                return self._live_table(catch_up)
            live = table.ids >= fresh.state.first_episode
            wrong = live & (stored != table.ids)
            if wrong.any():  # no writer reuses a live episode's slot: the table itself is damaged
                i = int(np.argmax(wrong))
                raise CorruptStoreError(
                    f"{self.folder}: episodes/id.npy does not match meta.json's live episodes (slot "
                    f"{table.slots[i]} must hold episode {table.ids[i]}, got {stored[i]}); the episode table is "
                    f"damaged; `python -m memmap_replay verify {self.folder}` lists every problem of the folder")
            if live.all():  # (episodes committed since are for the next refresh)
                if fresh.state == self.meta.state:
                    self.read_stamp = stamp  # ``meta`` is as read after this stamp: next time, the fast way
                # every episode of ``meta`` was live at ``stamp``: while meta.json keeps it, the fast way holds
                self._table_stamp = stamp
                return table
            if not catch_up or attempt == _CONSISTENCY_RETRIES - 1:
                break
            self.read_stamp = stamp
            self._adopt(fresh)
            table, stored = self._table_of()
        return table.select(live)

    def _table_of(self) -> tuple[EpisodeTable, np.ndarray]:
        """The table of ``meta``'s live episodes as the slots hold it now, and the ids the slots hold."""
        self.journal()  # (first: taking a journal may take a newer meta.json, whose ids the table is then of)
        state = self.meta.state
        ids = np.arange(state.first_episode, state.next_episode, dtype=np.int64)
        slots = ids % self.meta.capacity.max_episodes
        entries = self.entries(slots, ("start", "length", "end", "final", "id"))
        table = EpisodeTable(ids, slots, entries["start"], entries["length"], entries["end"],
                             entries["final"].astype(bool))
        return table, (entries["id"] if not self.is_writer else ids)

    def step_array(self, name: str, *, random: bool = False) -> np.ndarray:
        """A step field's read-only map; ``random``: one marked for scattered reads (``NpyFile.array``). A
        compressed field's is an ``EncodedColumn``, array-like (``shape``, ``dtype``, ``len``, ``nbytes``):
        indexing it or its ``take(rows, out=...)`` decodes the rows (typed as an array for its readers)."""
        return cast(np.ndarray, self.steps[name].array(random=random))

    def refresh(self) -> bool:
        """Re-read meta.json; True if it changed. Picks up episodes a writer committed since."""
        with self.state_lock:
            stamp = self.meta_stamp()  # before the read: a commit after it makes the next stamp differ
            meta = fmt.read_meta(self.folder)
            if meta.store_id != self.meta.store_id:
                raise CorruptStoreError(f"{self.folder} was replaced by a new store (overwrite); open it again")
            changed = meta.state != self.meta.state
            self._adopt(meta)
            self.read_stamp = stamp
            return changed

    def _adopt(self, meta: StoreMeta) -> None:
        """Take a newer meta.json; the step files have grown to its row count before it was written. A new
        capacity (a writer grew the store) reopens every file, whose headers have grown before it was written."""
        # (a new schema: a field was added, and its file is new)
        grown = meta.capacity != self.meta.capacity or meta.schema != self.meta.schema
        if not meta.links and fmt.LINKS in self.table:  # a 1.0 writer wrote it: its links file is stale, and the
            self.table.pop(fmt.LINKS).close()           # next writer of this version makes a new one
        # a writer upgraded a 1.0 store (its links file is new): open it as a grow would
        linked = meta.links and fmt.LINKS not in self.table
        self.meta, self._table_stamp = meta, None
        if grown or linked:
            # the new files are opened first and swapped in whole: a view's gather threads share this store
            # and may look a file up meanwhile (the old maps stay valid while a gather holds them)
            old = self._files()
            self.steps, self.metas, self.table = self._open_layout(meta)
            for closed in old:
                closed.close()
        for step in self.steps.values():
            step.rows = max(step.rows, meta.state.rows)
            if isinstance(step, EncodedField):  # (its frames file grew before meta.json was written)
                step.frames.rows = max(step.frames.rows, meta.state.frames[step.spec.name]["bytes"])

    def _files(self) -> tuple[NpyFile, ...]:
        steps = [part for file in self.steps.values()
                 for part in (file.files if isinstance(file, EncodedField) else (file,))]
        return (*steps, *self.metas.values(), *self.table.values())

    # ---- writing -----------------------------------------------------------------------------------

    def require_writable(self, action: str) -> None:
        """Raise unless this store may write; takes the writer lock on the first write."""
        if not self.writable:
            raise ReadOnlyError(f"cannot {action}: {self.folder} is open read-only; open it with read_only=False")
        if self._closed:
            raise ReadOnlyError(f"cannot {action}: the store at {self.folder} is closed")
        if self._lock is not None and self._lock.inherited:
            raise ReadOnlyError(
                f"cannot {action}: this buffer was inherited through fork() and its parent holds the writer "
                f"lock of {self.folder}; a forked process must open the folder itself (read_only=True to read)"
            )
        if self._lock is None:
            folderio.check_for_writing(self.folder, fmt._writer_entries(self.meta.schema))
            self._lock = WriterLock(self.folder / fmt.LOCK_FILE, folder=self.folder)
            try:
                folderio.remove_temps(self.folder, fmt.META_FILE)  # a killed writer's
                self.refresh()  # another writer may have committed since this store was opened
            except BaseException:
                self._lock.release()
                self._lock = None
                raise

    def commit(self, episodes: Iterable[PendingEpisode]) -> list[int]:
        """Place, write and commit finished episodes; returns their slots. All or nothing on a full store
        (or a full disk: then none of them is committed, and every episode committed before is intact)."""
        episodes = list(episodes)
        self.require_writable("store episodes")
        if not episodes:
            return []
        with folderio.disk_full(f"no space left for {self.folder} while committing {len(episodes)} episode(s): they "
                                f"were not committed, and every episode committed before is intact (in a ring, except "
                                f"those already evicted to make room for them); free some space (or raise the quota) "
                                f"and store them again"):
            return self._commit(episodes)

    def _commit(self, episodes: list[PendingEpisode]) -> list[int]:
        for observer in self._changing():
            observer.committing(self, episodes)
        encoded = self._encode(episodes)
        state = self.meta.state
        first, plan, heads = self._plan(episodes, encoded)
        # phase 1: evictions are committed before any row is overwritten (episodes of this very commit
        # that a later one evicts were never live, so the committed first id stops at next_episode)
        evicted_first = min(first, state.next_episode)
        if evicted_first != state.first_episode:
            self._write_meta(replace(state, first_episode=evicted_first, commits=state.commits + 1,
                                     removed=state.removed - self._removed_between(state.first_episode,
                                                                                   evicted_first)))
        self._ensure_rows(max(start + episode.num_rows for start, episode, _ in plan))
        frames = self._ensure_frames(plan, encoded, heads)
        slots, encoded_files = [], self._encoded_files()
        for offset, (start, episode, at) in enumerate(plan):
            episode_id = state.next_episode + offset
            slot = episode_id % self.capacity.max_episodes
            # the slot's id goes to -1 while its entries are rewritten, and the new id comes last: a reader
            # that reads the ids after the entries (``live_table``) never takes a torn entry for a whole one
            self.table["id"].write_rows(slot, np.array([-1], dtype=fmt.TABLE["id"]))
            for name, encoded_file in encoded_files.items():
                encoded_file.write(start, at[name], *encoded[offset][name])
            for name, chunks in episode.rows.items():
                file = self.steps[name]
                if isinstance(file, EncodedField):
                    continue
                position = start
                for chunk in chunks:
                    file.write_rows(position, chunk)
                    position += len(chunk)
            for name, value in episode.meta.items():
                self.metas[name].write_rows(slot, value[None])
            prev = episode.continues
            # a segment of this very commit: committed before this one, so it has its id
            link = cast(int, prev.id) if isinstance(prev, PendingEpisode) else prev
            episode.id = episode_id
            entry = {"start": start, "length": episode.length, "end": fmt.END_CODES[episode.end],
                     "final": episode.final, "continues": link + 1, "id": episode_id}
            for name, number in entry.items():
                self.table[name].write_rows(slot, np.array([number], dtype=fmt.TABLE[name]))
            slots.append(slot)
        last_start, last, _ = plan[-1]
        if self.durable:
            for synced in self._files():
                synced.sync()
        self._write_meta(replace(self.meta.state, first_episode=first, next_episode=state.next_episode + len(plan),
                                 write_head=last_start + last.num_rows, commits=self.meta.state.commits + 1,
                                 frames=frames))
        for observer in self.observers:
            observer.committed(self, episodes)
        return slots

    @property
    def observers(self) -> list[CommitObserver]:
        """This store's commit observers (made from the registered factories at the first change)."""
        if self._observers is None:
            made = [observer for factory in _OBSERVERS if (observer := factory(self)) is not None]
            self._observers = sorted(made, key=lambda observer: observer.last)
        return self._observers

    def _changing(self) -> list[CommitObserver]:
        self._finish_edit()
        if not self._journal_checked:  # a journal a writer killed before its commit (or before removing it) left
            folderio.remove(self.folder, self.folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE)
            folderio.remove_temps(self.folder / fmt.EPISODES_DIR, fmt.JOURNAL_FILE)
            self._journal_checked = True
        self._ensure_links()
        for observer in self.observers:
            observer.changing(self)
        return self.observers

    def _ensure_links(self) -> None:
        """Before a writer's first change to a 1.0 store: a fresh ``episodes/continues.npy`` of zeros (one a 1.0
        writer left is stale), so that the 1.1 meta.json it commits next describes it. Readers ignore the file
        until then (the store stays 1.0 for them)."""
        if self.meta.links:
            return
        path = self.folder / fmt.EPISODES_DIR / f"{fmt.LINKS}.npy"
        spec = FieldSpec(fmt.LINKS, fmt.TABLE[fmt.LINKS])
        stale = self.table.pop(fmt.LINKS, None)
        if stale is not None:
            stale.close()
        folderio.remove(self.folder, path)
        fmt._create_npy(self.folder, path, spec, self.capacity.max_episodes)
        self.table[fmt.LINKS] = NpyFile.open(self.folder, path, spec, self.capacity.max_episodes, writable=True)
        if self.durable:
            self.table[fmt.LINKS].sync()
            fmt._fsync_folder(self.folder / fmt.EPISODES_DIR)
        self.meta = replace(self.meta, links=True)

    def links(self, table: EpisodeTable) -> np.ndarray:
        """The id of the segment each episode of ``table`` continues (-1: it starts an episode), as read now."""
        if not self.meta.links:
            return np.full(len(table), -1, dtype=np.int64)
        links = self.entries(table.slots, (fmt.LINKS,))[fmt.LINKS].astype(np.int64) - 1
        if not self.is_writer:  # a slot the ring reused since ``table`` was read: its episode is gone
            links[np.asarray(self.table["id"].array()[table.slots]) != table.ids] = -1
        return links

    def _encoded_files(self) -> dict[str, EncodedField]:
        return {name: file for name, file in self.steps.items() if isinstance(file, EncodedField)}

    def _encode(self, episodes: list[PendingEpisode]) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
        """Each episode's compressed fields as (lengths, frames), encoded before anything on disk changes."""
        files = self._encoded_files()
        return [{name: episode.encoded[name] if name in episode.encoded else file.encode(episode.rows[name])
                 for name, file in files.items()} for episode in episodes]

    def _ensure_frames(self, plan: list[Placement], encoded: list[dict[str, tuple[np.ndarray, np.ndarray]]],
                       heads: dict[str, int]) -> dict[str, dict[str, int]]:
        """Room in each compressed field's frames file for the frames ``plan`` places; ``state.frames`` after."""
        frames = {}
        for name, file in self._encoded_files().items():
            end = max(at[name] + len(parts[name][1]) for (_, _, at), parts in zip(plan, encoded))
            frames[name] = {"head": heads[name],
                            "bytes": file.ensure_bytes(end, frames_limit(file.spec, self.capacity.max_steps))}
        return frames

    def _plan(self, episodes: list[PendingEpisode], encoded: list[dict[str, tuple[np.ndarray, np.ndarray]]]
              ) -> tuple[int, list[Placement], dict[str, int]]:
        """Where each episode goes, and the evictions that makes necessary (``core/placement.py``)."""
        # (not removed episodes: their rows are free, and their slots are counted by the state's ids)
        return place(self.capacity, self.meta.state, self.live_table(), self._encoded_files(), episodes, encoded)

    def _ensure_rows(self, rows: int) -> None:
        state = self.meta.state
        if rows <= state.rows:
            return
        grown = min(self.capacity.max_steps, max(rows, 2 * state.rows, _MIN_GROWTH_ROWS))
        for file in self.steps.values():
            if file.rows < grown:
                file.grow(grown)
        state.rows = grown  # committed with the next meta.json; files never shrink, so this is safe

    def _write_meta(self, state: fmt.State, *, capacity: Capacity | None = None, schema: Schema | None = None) -> None:
        meta = StoreMeta(schema or self.meta.schema, capacity or self.meta.capacity, state, self.meta.store_id)
        try:
            fmt.write_meta(self.folder, meta, durable=self.durable)
        except OSError as error:
            if error.errno not in folderio.DISK_FULL:
                raise
            raise DiskFullError(f"no space left for {self.folder} to write meta.json ({error.strerror}): the store "
                                f"is as it was; free some space (or raise the quota) and try again") from None
        self.meta = meta

    def grow(self, *, max_episodes: int | None = None, max_steps: int | None = None,
             max_timesteps: int | None = None, circular: bool | None = None) -> Capacity:
        """Raise the capacity in place (None keeps a value; see ``core/grow.py`` for what may change and how a
        crash at any point leaves either the old or the new capacity, with every committed episode). Returns
        the new capacity. Live episodes keep their ids; their slots (``id % max_episodes``) may change."""
        self.require_writable("grow the store")
        capacity = grown_capacity(self.capacity, max_episodes=max_episodes, max_steps=max_steps,
                                  max_timesteps=max_timesteps, circular=circular)
        if capacity == self.capacity:
            return capacity
        self._changing()
        with folderio.disk_full(f"no space left for {self.folder} while growing it to {capacity}: its capacity is "
                        f"{self.capacity} and every committed episode is intact; free some space and grow it again"):
            grow_store(self, capacity)
        return self.capacity

    def clear(self) -> None:
        """Drop every episode (ids keep counting, so old slot contents can never look live again)."""
        self.require_writable("clear")
        self._changing()
        state = self.meta.state
        self._write_meta(replace(state, first_episode=state.next_episode, write_head=0, commits=state.commits + 1,
                                 removed=0))

    def update_rows(self, name: str, start: int, values: np.ndarray) -> None:
        self.require_writable("update")
        self._changing()
        self.steps[name].write_rows(start, values)

    def update_meta(self, name: str, slot: int, values: np.ndarray) -> None:
        self.require_writable("update")
        self._changing()
        self.metas[name].write_rows(slot, values)

    def sync(self) -> None:
        """fsync every data file and meta.json's folder: what is committed survives a power cut."""
        for observer in self._observers or ():
            observer.flush(self, closing=False)
        if self._lock is not None:
            for file in self._files():
                file.sync()
            fmt._fsync_folder(self.folder)

    def __del__(self) -> None:
        # a buffer that is never closed still releases its descriptors and the writer lock
        if not getattr(self, "_closed", True):
            self.close()

    def close(self) -> None:
        if not self._closed and not sys.is_finalizing():  # (at interpreter exit, no open() is left)
            for observer in self._observers or ():
                observer.flush(self, closing=True)
        self._closed = True
        for file in (*self.steps.values(), *self.metas.values(), *self.table.values()):
            file.close()  # (a compressed field closes its two files and lets go of its column)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

