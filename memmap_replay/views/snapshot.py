"""What a view's snapshot promises, checked after every read: the rows and meta of a batch are those of
live episodes as one snapshot placed them.

A view reads from a snapshot of the episode table (``StoreView._snapshot``). Two things can move under it:

- the store, by a writer in another process or thread: a ring evicts, ``clear()`` drops, a grow moves slots
  (or makes a ring). A writer commits each of these in meta.json before it overwrites a row or reuses a
  slot, so a meta.json unchanged after the read (one ``stat``) means the read was intact: a seqlock
  (``_check_not_evicted``);
- the snapshot itself, taken again by another thread sharing the view (a sampler following the store, a
  loader's gather thread): the view's generation is odd while a snapshot is taken and changes with each, so a
  read that began and ended at one even generation used one snapshot (``_check_generation``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import numpy as np

from ..core.format import Capacity
from ..core.index import EpisodeTable
from ..core.store import EpisodeStore
from ..errors import InvalidDataError, SampleExpiredError, SchemaMismatchError

__all__ = ["SnapshotChecks", "SnapshotMovedError"]


class SnapshotMovedError(SampleExpiredError):
    """The view took a newer snapshot (another thread refreshed it) while a batch was read: the batch may
    mix rows or meta of the two tables. ``sample_batch`` reads it again (its keys name episodes, not
    positions); a batch of item numbers is refused (its numbers name positions of the old snapshot)."""


_SNAPSHOT_RETRIES = 8  # times sample_batch reads a batch again after the view moved to a newer snapshot


class SnapshotChecks:
    """The checks of ``StoreView`` (its ``store``, ``table``, ``key_stride``, ``_capacity``, ``_stamp`` and
    ``_generation``) that refuse a batch not read against one snapshot of live episodes."""

    if TYPE_CHECKING:  # StoreView's (a property there)
        @property
        def store(self) -> EpisodeStore: ...

    table: EpisodeTable
    key_stride: int
    _capacity: Capacity
    _edits: int
    _stamp: tuple[int, ...] | None
    _generation: int

    def _check_stride(self, store: EpisodeStore) -> None:
        """Keys are episode id * max_timesteps + t: a view cannot follow a store grown to longer episodes."""
        if store.capacity.max_timesteps != self.key_stride:
            raise SchemaMismatchError(
                f"{store.folder} was grown to max_timesteps={store.capacity.max_timesteps} since this view was made "
                f"(its keys count {self.key_stride} steps an episode): make a new view (and sampler) of the store")

    def _missing_episodes(self, ids: np.ndarray) -> NoReturn:
        """Raise for a sample's episode ids that this view (refreshed) does not hold: why, and what to do."""
        state = self.store.meta.state
        never = ids[ids >= state.next_episode]
        if len(never):
            raise InvalidDataError(
                f"the sample names episode {int(never[0])}, which was never in the buffer (its episode ids so far are "
                f"below {state.next_episode}): keys of another store? draw from a sampler over this view"
            )
        gone = ids[ids < state.first_episode]
        if len(gone):
            raise SampleExpiredError(
                f"the sample refers to episode {int(gone[0])}, which is no longer in the buffer (the ring evicted "
                f"it, or clear() dropped it, since the draw); draw again"
            )
        removed = np.setdiff1d(ids, self.store.live_table(catch_up=False).ids)
        if len(removed):  # (live ids the view leaves out are its filter's)
            raise SampleExpiredError(
                f"the sample refers to episode {int(removed[0])}, which is no longer in the buffer "
                f"(delete_episodes removed it since the draw); draw again"
            )
        raise InvalidDataError(f"the sample names episodes {sorted(set(ids.tolist()) - set(self.table.ids.tolist()))} "
                               f"that this view does not hold (its filter_meta leaves them out); draw from a sampler "
                               f"over this view")

    def _check_not_evicted(self, episode: np.ndarray) -> None:
        """After every gather: raise if the writer (another process or thread) evicted or cleared any of the
        batch's episodes, or grew the store, since the snapshot, for their rows or meta slots may have been
        overwritten during the read. A writer commits an eviction, a ``clear()`` and a grow in meta.json
        before it overwrites a row or reuses a slot, so a meta.json unchanged after the read means the rows
        and meta read were intact (a seqlock: one ``stat``); a changed one is read again, and its capacity
        and first live id decide. The writer's own store object always holds the newest state."""
        store = self.store
        with store.state_lock:  # the store's meta and stamp as one pair (other threads refresh it too)
            if not store.is_writer and store.meta_stamp() != self._stamp:
                store.refresh()
                self._stamp = store.read_stamp
            capacity, first, edits = store.capacity, store.meta.state.first_episode, store.meta.state.edits
        if edits != self._edits:  # an edit rewrote entries or meta values in place while this batch was read
            raise SampleExpiredError(
                f"{store.folder} was edited (delete_episodes, trim, relabel, add_field or compact) since this view's "
                f"snapshot, so this batch may hold rows or meta of the store before the edit; draw again (a "
                f"sampler's batch() does), or refresh() the view (a DataLoader: make a new one)")
        if capacity != self._capacity:  # a grow moved slots (or made a ring) while this batch was read
            self._check_stride(store)
            raise SampleExpiredError(
                f"{store.folder} was grown (from {self._capacity} to {capacity}) since this view's snapshot, "
                f"so this batch may hold rows or meta of other episodes (slots moved, or the ring reused them); "
                f"draw again (a sampler's batch() does), or refresh() the view (a DataLoader: make a new one)")
        oldest = self.table.ids[episode.min()]  # table ids ascend
        if oldest < first:
            raise SampleExpiredError(
                f"episode {int(oldest)} was evicted by the ring writer, or dropped by clear(), while this batch was "
                f"read (the oldest live episode is now {first}); draw again (a sampler's batch() does), or "
                f"refresh() the view (a DataLoader: make a new one)"
            )

    def _check_generation(self, generation: int) -> None:
        """Refuse a batch read while the view took a newer snapshot (``generation``: as the read began)."""
        if generation == self._generation and not generation & 1:
            return
        raise SnapshotMovedError(
            "this view took a newer snapshot of the store (refresh(), or a sampler following the store, in another "
            "thread) while this batch was read: its item numbers name positions of the old one; make a new "
            "DataLoader over the view, or draw through a sampler (whose keys name episodes)")
