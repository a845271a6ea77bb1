"""The base of every view: a torch Dataset that carries a folder and an episode snapshot, not arrays.

A view is built over the episodes live when it is made (filtered by meta values if asked). It holds
the folder path, the store's id and that small episode table; each process (a DataLoader worker under
fork, spawn or forkserver) reopens the files read-only on first use, so a pickled view is a few KB
and reading never writes to the store. ``__getitems__`` gathers a whole batch with one numpy indexing
call per field; ``__getitem__`` is the same for one item. A view's ``transform`` (``views.transforms``)
is the batch's last step, in the process that gathers it (a DataLoader worker, or the main process).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from typing import Any, Mapping

import numpy as np
import torch

from ..errors import CorruptStoreError, InvalidDataError, OptionError, ReplayError
from ..core.episodes import select_episodes as _select_episodes
from ..core.index import ExplicitPositions, Positions, Sample  # (Sample, ExplicitPositions: re-exported)
from ..core.store import EpisodeStore
from ..core.options import flag  # noqa: F401 - re-exported: views, loader and samplers import it from here
from ..core.options import check_names, integer, short
from .pool import OUTPUTS
from .readahead import Readahead, readahead_mode
from .batch import BatchDataset
from .snapshot import _SNAPSHOT_RETRIES, SnapshotChecks, SnapshotMovedError
from .transforms import transform_option

__all__ = ["BatchDataset", "StoreView", "ExplicitPositions", "Sample"]


def _describe(value: Any) -> str:
    """An array by its dtype and shape, anything else by its (short) repr."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return short(value)


def check_store(store: Any) -> EpisodeStore:
    """The store a view reads: an ``EpisodeStore``, else an error that says where to get one."""
    if not isinstance(store, EpisodeStore):
        fix = ("pass buffer.episode_store, or use buffer.dataset(...)" if hasattr(store, "episode_store")
               else "open one with EpisodeStore.open(folder, 'r'), or use "
                    "ReplayBuffer.from_folder(folder).dataset(...)")
        raise OptionError(f"a view reads an EpisodeStore (got {short(store)}); {fix}")
    return store


class StoreView(SnapshotChecks, BatchDataset):
    """Base view, a ``PositionSource`` for samplers (``core.index``). Subclasses set ``self.positions`` and
    implement ``gather(episode, t) -> dict``."""

    def __init__(self, store: EpisodeStore, *, fields: Any = None, meta_fields: Any = None,
                 filter_meta: Mapping[str, Any] | None = None, fieldname_map: Mapping[str, str] | None = None,
                 return_indices: bool = False, readahead: Any = "auto", transform: Any = None,
                 min_episode_len: int = 1):
        check_store(store)
        self.folder = store.folder
        self.store_id = store.meta.store_id
        schema = store.schema
        self.fields = tuple(schema.fields) if fields is None else check_names(fields, schema.fields, "field")
        self.meta_fields = (tuple(schema.meta_fields) if meta_fields is None
                            else check_names(meta_fields, schema.meta_fields, "meta field"))
        if fieldname_map is not None and not isinstance(fieldname_map, Mapping):
            raise OptionError(f"fieldname_map must be a dict of output name -> new name (got {fieldname_map!r})")
        self.fieldname_map = dict(fieldname_map or {})
        for source, target in self.fieldname_map.items():
            if not isinstance(source, str) or not isinstance(target, str) or not target:
                raise OptionError(f"fieldname_map must map names to non-empty names (got {source!r}: {target!r})")
        self.return_indices = flag(return_indices, "return_indices")
        self.transform = transform_option(transform)
        self.readahead = Readahead(readahead_mode(readahead))
        self._ahead = 0  # batches prefetch() looked at that are still to be gathered (in process _ahead_pid)
        self._ahead_pid = os.getpid()
        self._store: EpisodeStore | None = store
        self._sources: dict[str, np.ndarray] = {}
        self.filter_meta = filter_meta
        self.min_episode_len = integer(min_episode_len, "min_episode_len", low=1)  # (0.2.3's keyword)
        self.key_stride = store.capacity.max_timesteps  # sample keys: episode id * key_stride + t
        # snapshots taken, twice each (odd: one is being taken): a batch is read against one snapshot,
        # checked by comparing this before and after (threads of a loader share the view)
        self._generation = 0
        self._lock, self._lock_pid = threading.RLock(), os.getpid()  # (each process its own: see ``lock``)
        self._snapshot(store)
        self.positions: Positions | ExplicitPositions = Positions.from_counts(np.ones(len(self.table)))

    def _snapshot(self, store: EpisodeStore) -> None:
        with store.state_lock:  # the table, stamp, state and capacity of one meta.json (threads share the store)
            self._take_snapshot(store)

    def _take_snapshot(self, store: EpisodeStore) -> None:
        # the table first: reading it consistently may take a newer meta.json (store.live_table), whose
        # state and stamp are then the snapshot's.
        table = _select_episodes(store, self.filter_meta)
        if self.min_episode_len > 1:
            table = table.select(table.length >= self.min_episode_len)
        self.table = table
        # the seqlock's stamp: meta.json's as it was before store.meta was read (unknown at first: the
        # first check after a gather then reads meta.json again, once). Every store is checked, not only
        # rings: clear() frees a flat store's rows and slots, and a grow (to a ring, or one that moves slots)
        # in another process changes where an episode's meta lives.
        self._stamp = store.read_stamp or ()
        state = store.meta.state
        self.state = (state.first_episode, state.next_episode)
        self._capacity = store.capacity
        self._edits = state.edits

    @property
    def kind(self) -> str:
        """Names a sampler's priorities by default (each kind of view its own)."""
        return "trajectories"

    # options of a parent class this view refuses with its own message (reading/build.py leaves them to it)
    refused_options: tuple[str, ...] = ()
    # reads scattered rows: with readahead on, its maps are marked MADV_RANDOM (a page fault outside the
    # advised ranges reads one page, not the disk's readahead window of up to MiBs around it)
    scattered_reads = True

    def position_spec(self) -> dict:
        """What decides this view's positions (JSON-able): priorities kept for one view fit only an
        equal one. Subclasses add their parameters."""
        def described(options):
            return None if not options else sorted([name, repr(value)] for name, value in options.items())
        return {"view": type(self).__name__, "filter_meta": described(self.filter_meta),
                **({"min_episode_len": self.min_episode_len} if self.min_episode_len > 1 else {}),
                "filter_fields": described(getattr(self, "filter_fields", None))}

    def build(self) -> None:
        """Set ``self.positions`` (and what else depends on ``self.table``); subclasses override."""
        self.positions = Positions.from_counts(np.ones(len(self.table)))

    def refresh(self, *, reread: bool = True) -> bool:
        """Take in the episodes committed (and evicted) since the view was built; True if they changed.
        ``reread`` re-reads ``meta.json`` first (a writer in another process); without it the view follows
        the store object it shares with a writer in this process."""
        with self.lock:
            store = self.store
            if reread:
                store.refresh()
            self._check_stride(store)
            state = store.meta.state
            if ((state.first_episode, state.next_episode) == self.state and store.capacity == self._capacity
                    and state.edits == self._edits):
                return False  # (a grown capacity moves slots, an edit removes or changes entries: taken again)
            self._generation += 1  # odd while the snapshot changes: a batch read meanwhile is read again or refused
            try:
                self._snapshot(store)
                self._sources = {}  # the files may have grown: map them again on the next read
                self.build()
            finally:
                self._generation += 1
            return True

    # ---- pickling: paths, not arrays --------------------------------------------------------------------

    def output_names(self) -> list[str]:
        """The names a batch carries before ``fieldname_map`` (subclasses add theirs)."""
        names = list(self.fields) + list(self.meta_fields)
        return names + (["_index", "_t"] if self.return_indices else [])

    def check_outputs(self) -> None:
        """Every output name must be distinct, after fieldname_map too: nothing silently replaces another."""
        names = self.output_names()
        unknown = sorted(set(self.fieldname_map) - set(names))
        if unknown:
            raise OptionError(f"fieldname_map renames {unknown}, which this view does not output; it outputs {names}")
        for candidates in (names, [self.fieldname_map.get(name, name) for name in names]):
            clashes = sorted({name for name in candidates if candidates.count(name) > 1})
            if clashes:
                break
        if clashes:
            raise OptionError(
                f"this view would output {clashes} twice (its outputs: {names}); select fewer fields or rename "
                f"one with fieldname_map"
            )

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_store"] = None
        state["_sources"] = {}  # a memory map would pickle all its bytes
        state["_ahead"] = 0
        state["_lock"] = None
        return state

    def copied(self) -> None:
        self._sources = dict(self._sources)
        self.readahead = copy.copy(self.readahead)
        self._lock, self._lock_pid = threading.RLock(), os.getpid()  # a copy has a snapshot of its own

    @property
    def capacity(self):
        """The store's capacity as of this view's snapshot (slots of its table are of this ``max_episodes``)."""
        return self._capacity

    @property
    def lock(self) -> threading.RLock:
        """Held while the snapshot changes, and by a sampler while it follows and draws from this view (a
        loader's gather threads may refresh the view while the sampler in the main thread reads it). Each
        process has its own: a DataLoader worker forked while another thread held it would wait forever."""
        lock = self._lock
        if lock is None or self._lock_pid != os.getpid():
            lock, self._lock_pid = threading.RLock(), os.getpid()
            self._lock = lock
        return lock

    @property
    def store(self) -> EpisodeStore:
        if self._store is None:
            self._store = EpisodeStore.open(self.folder, "r")
            if self._store.meta.store_id != self.store_id:
                raise CorruptStoreError(f"{self.folder} now holds another store (overwritten); build the view again")
        return self._store

    # ---- torch Dataset -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.positions)

    def __getitems__(self, items: Any) -> dict[str, torch.Tensor]:
        """The batch of the given item numbers (checked; negative numbers count from the end), or of a
        sampler's ``Sample`` (then with ``_key`` and, for prioritized draws, ``_weight``), through the
        view's ``transform``."""
        if isinstance(items, Sample):
            return self.sample_batch(items)
        return self.batch(items, checked=False)

    def sample_batch(self, sample: Sample) -> dict[str, torch.Tensor]:
        """The batch of a sampler's draw: its keys name (episode id, t), which stay valid while the episode
        is live, whatever this view's snapshot; a view that does not know an episode yet refreshes."""
        keys, weights = sample.keys, sample.weights
        # what a sampler draws: cheap checks (one dtype / shape check each, one min below)
        if not isinstance(keys, np.ndarray) or keys.dtype.kind != "i" or keys.ndim != 1:
            raise InvalidDataError(f"a Sample's keys must be a 1-d int64 array, as samplers draw them (got "
                                   f"{_describe(keys)}); draw from a sampler over this view")
        if weights is not None and (not isinstance(weights, np.ndarray) or weights.dtype.kind != "f"
                                    or weights.shape != keys.shape):
            raise InvalidDataError(f"a Sample's weights must be None or a float array of one weight per key, shape "
                                   f"{keys.shape} (got {_describe(weights)})")
        for attempt in range(_SNAPSHOT_RETRIES + 1):
            with self.lock:  # the keys located in one snapshot (another thread may be taking a newer one)
                store = self._store
                state = store.meta.state if store is not None else None
                if state is not None and ((state.first_episode, state.next_episode) != self.state
                                          or state.edits != self._edits):
                    self.refresh(reread=False)  # the writer in this process committed, evicted or edited since
                known = sample.positions_in(self)
                if known is not None:  # drawn from this very snapshot: the sampler located the keys already
                    episode, t = known
                else:
                    episode, t = self._locate_keys(keys)
                generation = self._generation
            try:
                batch = self.assemble(episode, t, generation)
                break
            except SnapshotMovedError:  # another thread refreshed the view meanwhile: read the keys again
                if attempt == _SNAPSHOT_RETRIES:
                    raise SnapshotMovedError(
                        f"other threads took {_SNAPSHOT_RETRIES + 1} newer snapshots of this view while this sample "
                        f"was read (a writer committing faster than the batch is read?); draw again") from None
        batch["_key"] = torch.from_numpy(np.ascontiguousarray(keys))
        if weights is not None:
            batch["_weight"] = torch.from_numpy(weights)
        return self.transformed(batch)

    def _locate_keys(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode positions in this view's table, t) of a sample's keys, refreshing once for episodes
        this snapshot does not know yet; raises for keys that name no position of this view."""
        if len(keys) and keys.min() < 0:
            raise InvalidDataError(f"a Sample's keys must be >= 0 (episode id * {self.key_stride} + t) (got "
                                   f"{int(keys.min())}); draw from a sampler over this view")
        ids, t = np.divmod(keys, self.key_stride)
        episode = self.episodes_of(ids)
        if episode is None:
            self.refresh()
            episode = self.episodes_of(ids)
        if episode is None:
            self._missing_episodes(ids)
        counts = getattr(self.positions, "counts", None)
        if counts is not None and (t >= counts[episode]).any():
            raise InvalidDataError("the sample names steps that are no positions of this view (keys of another "
                                   "kind of view?); draw from a sampler over this view")
        return episode, t

    def episodes_of(self, ids: np.ndarray) -> np.ndarray | None:
        """Positions in ``self.table`` of episode ids, or None if any is not in it."""
        return self.table.positions_of(ids)

    def checked(self, items: Any) -> np.ndarray:
        """Item numbers as a 1-d int64 array in [0, len) (negative ones count from the end): a dtype check
        and one min/max."""
        try:
            raw = items if isinstance(items, np.ndarray) else np.asarray(items)
        except (ValueError, TypeError, OverflowError):  # ragged lists, ...
            raise IndexError(f"item indices must be a 1-d array of ints (got {short(items)})") from None
        size = len(self)
        if raw.size and raw.dtype.kind not in "iu":  # 0.5 or True must not quietly name an item
            if raw.dtype.kind == "O" and all(type(item) is int for item in raw.flat):  # ints beyond 64 bits
                raise IndexError(f"item indices must be in [0, {size}) (got {min(raw.flat)}..{max(raw.flat)})")
            raise IndexError(f"item indices must be ints (got {raw.dtype}: {short(raw.flat[0])})")
        if raw.ndim != 1:
            raise IndexError(f"item indices must be a 1-d array (got shape {raw.shape})")
        if not raw.size:
            return np.zeros(0, dtype=np.int64)
        low, high = raw.min(), raw.max()
        if low < -size or high >= size:  # before the cast: uint64 values >= 2**63 must not wrap
            raise IndexError(f"item indices must be in [0, {size}) (got {low}..{high})")
        items = raw.astype(np.int64, copy=False)  # no copy for the int64 arrays samplers yield
        if low < 0:
            items = np.where(items < 0, items + size, items)
        return items

    def batch(self, items: Any, *, checked: bool = True) -> dict[str, torch.Tensor]:
        """The batch of item numbers already known to be in range (e.g. from BatchIndexSampler; ``checked=False``:
        check them first), through the view's ``transform``."""
        with self.lock:  # checked against, and located in, one snapshot (another thread may be taking a newer one)
            generation = self._generation
            episode, t = self.positions.locate(items if checked else self.checked(items))
        return self.transformed(self.assemble(episode, t, generation))

    def assemble(self, episode: np.ndarray, t: np.ndarray, generation: int | None = None) -> dict[str, torch.Tensor]:
        """The batch of (episode position in the table, t) pairs: the view's gather, then meta fields, then
        the ``fieldname_map`` renames (the names a transform sees); no transform yet. Refused
        (``SnapshotMovedError``) if the view took a newer snapshot since ``generation`` (default: now), as
        another thread's refresh: the positions would name other episodes there."""
        if generation is None:
            generation = self._generation
        table = self.table
        try:
            batch = self._read(episode, t, table)
        except SnapshotMovedError:
            raise
        except Exception:
            self._check_generation(generation)  # a table replaced under the read: positions out of its range ...
            raise
        self._check_generation(generation)  # last: every read above used the one snapshot
        if self.return_indices:
            batch["_index"] = torch.from_numpy(table.slots[episode])
            batch["_t"] = torch.from_numpy(np.ascontiguousarray(t))
        return {self.fieldname_map.get(name, name): value for name, value in batch.items()}

    def _read(self, episode: np.ndarray, t: np.ndarray, table) -> dict[str, torch.Tensor]:
        """The gather (advised first when due), the meta fields, then the check against the writer."""
        readahead = self.readahead
        if self._ahead and self._ahead_pid == os.getpid():  # prefetch() looked at this batch already
            self._ahead -= 1
        elif readahead.due():
            self.advise(episode, t)
        try:
            if readahead.mode == "auto":
                began = time.perf_counter()
                batch = self.gather(episode, t)
                readahead.timed(time.perf_counter() - began)
            else:
                batch = self.gather(episode, t)
        except CorruptStoreError:
            # a compressed field's frames that the ring overwrote while they were decoded: evicted, not damaged
            if len(episode):
                self._check_not_evicted(episode)
            raise
        for name in self.meta_fields:
            batch[name] = torch.from_numpy(np.ascontiguousarray(self.store.meta_array(name)[table.slots[episode]]))
        if len(episode):  # after every read of the batch's rows and slots
            self._check_not_evicted(episode)
        return batch

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # ---- readahead: the rows a batch will read, told to the kernel before reading -----------------------

    def read_fields(self) -> tuple[str, ...]:
        """The step fields a gather reads (subclasses with other field lists override)."""
        return self.fields

    def row_ranges(self, episode: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows [lo, hi) of the step files that the batch of (episode, t) reads, one range per item (a
        superset is fine: it is advice); every field of ``read_fields()`` reads within them."""
        start = self.table.start[episode]
        return start, start + self.table.length[episode]

    def advise(self, episode: np.ndarray, t: np.ndarray, *, background: bool = False) -> bool:
        """Tell the kernel every row range the batch of (episode, t) will read, in one call, so the reads
        are in flight together (see ``views.readahead``; ``background``: from a thread of its own, for a
        batch ahead); True if advised."""
        if not len(episode):
            return False
        lo, hi = self.row_ranges(episode, t)
        return self.readahead.batch([self._map(name) for name in self.read_fields()], lo, hi, background=background)

    def prefetch(self, items: Any, *, covered: bool = False) -> bool:
        """Advise the rows of a batch that will be asked for later (item numbers or a sampler's
        ``Sample``), so its disk reads overlap the work until then; never raises for a stale sample (its
        gather will). Call it once per batch, in the order they will be gathered: the gather of a batch
        prefetched skips the look. ``covered``: its rows were advised already (a block-shuffled loader
        advises whole blocks), so only count it. True if advice was given."""
        if self.readahead.mode == "off":
            return False
        if self._ahead_pid != os.getpid():  # a forked copy does not inherit its parent's batches ahead
            self._ahead, self._ahead_pid = 0, os.getpid()
        try:
            looked = not covered and self.readahead.due()
            if looked:
                if isinstance(items, Sample):
                    known = items.positions_in(self)
                    episode, t = known if known is not None else self._locate_keys(items.keys)
                else:
                    episode, t = self.positions.locate(self.checked(items))
        except (ReplayError, IndexError):  # evicted, or not this view's: its gather will say so (not counted)
            return False
        self._ahead += 1
        return looked and self.advise(episode, t, background=True)

    def cancel_prefetch(self, count: int) -> None:
        """``count`` batches given to ``prefetch`` will not be gathered after all (a loop stopped early)."""
        self._ahead = max(0, self._ahead - count)

    # ---- helpers for subclasses --------------------------------------------------------------------------

    def rows_of(self, name: str, rows: np.ndarray, keep: np.ndarray | None = None, fill: Any = 0) -> torch.Tensor:
        """One fancy-index gather of ``rows`` (any shape) from a step field; ``fill`` where ``keep`` is False."""
        values = self.values_of(name, rows)
        if keep is not None and not keep.all():
            values[~keep] = fill
        return torch.from_numpy(values)

    def values_of(self, name: str, rows: np.ndarray) -> np.ndarray:
        """``rows_of`` as a numpy array, without a mask. Rows past the end of the file read its last row."""
        return OUTPUTS.take(self._map(name), rows)  # (large gathers: split over the library's threads)

    def _map(self, name: str) -> np.ndarray:
        """The step field's memory map (made at the first read: it covers every row of the snapshot)."""
        source = self._sources.get(name)
        if source is None:
            scattered = self.scattered_reads and self.readahead.mode != "off"
            source = self._sources[name] = self.store.step_array(name, random=scattered)
        return source
