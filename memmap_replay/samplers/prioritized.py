"""Prioritized replay (Schaul et al. 2015) over a view's positions (prioritized sequences: ``sequence``).

Each valid position of the view (a step, an n-step start, a window start) is the leaf of a sum tree at
its row in the store (``start + t``), holding ``priority ** alpha``. Draws are stratified over the tree's
total; importance weights are ``(N * P(i)) ** -beta / max_j (N * P(j)) ** -beta``, the maximum over every
position in the buffer (which reduces to ``(p_i / p_min) ** (-alpha * beta)``). New positions enter at the
largest priority seen so far. ``update_priorities`` takes the ``_key`` of a batch: a key names
(episode id, t), so an update aimed at an episode that the ring evicted meanwhile (its slot and rows
possibly refilled) is dropped, never applied to the newcomer.

Priorities persist in the store folder (``priorities/<name>.npy``: the raw priority per row, float64,
then the largest priority seen;
``priorities/<name>.owner.npy``: per episode slot, the id whose priorities the rows hold, -1 for none),
written as they change, so a sampler opened again on the folder samples as before; a sampler on a buffer
opened read-only starts from them too, and keeps its own updates in memory (it never writes the folder).
They are sampler state, not committed data: a writer that evicts episodes never touches them, and a sampler opening the
folder ignores any row whose episode is no longer live.

A grow of the store (``buffer.grow``) keeps them: rows never move in a grow, so a sampler opened afterwards
starts from the priorities set before it, remapped to the new capacity (``samplers/priority_files.py``: a
writable buffer's sampler remaps the files in the folder, a read-only reader in memory). A sampler left
open across a grow in the writer's process follows it at its next draw or update (its files remapped in
place, episodes whose slot moved keep their priorities), except a grow of ``max_timesteps``, which changes
every key: the sampler then refuses (``SchemaMismatchError``) and lets go of its files, so that a new
sampler made after the grow takes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CorruptStoreError, InvalidDataError, ReadOnlyError, SampleExpiredError, SchemaMismatchError
from ..core.format import Capacity
from ..core.index import EpisodeTable, PositionSource, Sample, position_rows
from ..core.options import INT64_MAX, flag, integer, number, priorities_name
from . import kernels
from .base import BetaSchedule, ReplaySampler, _optional
from .priority_files import PriorityFiles, read_stored_priorities
from .priority_snapshots import PrioritySnapshot, snapshot_key
from .sumtree import NOTHING_TO_DRAW, SumTree

__all__ = ["PrioritizedSampler", "as_numpy"]

_MIN_TREE = 1 << 16  # leaves a tree starts with; it doubles as the rows in use need
_FLOAT_MAX = float(np.finfo(np.float64).max)
_STRAY_REDRAWS = 4  # draws again after clearing leaves of rows no position owns (an invariant: never in practice)


class PrioritizedSampler(BetaSchedule, ReplaySampler):
    """Proportional prioritized draws over a view's positions.

    ``alpha``: how much priorities count (0 = uniform). ``beta``: importance-weight exponent, annealed
    linearly to ``beta_final`` over ``beta_steps`` draws (0: kept fixed). ``name``/``persist``: the
    priorities are kept in ``priorities/<name>.npy`` of the store folder (``persist=False``: in memory).

    On a read-only buffer (``read_only=True``) the sampler starts from the priorities stored under
    ``name`` (when they are there and belong to this kind of view) and keeps its updates in memory: a
    reader never writes into a folder opened read-only (nor takes the priorities' lock). ``persist=True``
    there is refused (it asks to write the folder); ``persist=False`` ignores the stored priorities and
    starts every position at 1.0."""

    endless = True

    def __init__(self, view: PositionSource, *, alpha: float = 0.6, beta: float = 0.4, beta_final: float = 1.0,
                 beta_steps: int = 0, name: str | None = None, persist: bool | None = None, **options: Any):
        super().__init__(view, **options)
        self.alpha = number(alpha, "alpha", low=0.0)
        self._schedule_beta(beta, beta_final, beta_steps)
        self._capacity = capacity = self.view.store.capacity
        self.max_steps = capacity.max_steps
        self.max_raw = self._largest_raw()
        self.tree = SumTree(min(capacity.max_steps, _MIN_TREE))  # grows with the rows in use
        self.max_priority = 1.0
        self.dropped = 0  # priority updates dropped because their episode had been evicted
        chosen = None if persist is None else flag(persist, "persist")  # None: the store decides
        persist = self.view.store.writable if chosen is None else chosen
        if persist and not self.view.store.writable:
            raise ReadOnlyError(f"persist=True keeps priorities in {view.folder}/priorities, but the store is open "
                                f"read-only and a reader never writes its folder: leave persist out to start from "
                                f"the stored priorities and keep updates in memory (persist=False: start afresh), "
                                f"or open the store with read_only=False")
        if name is None:
            name = view.kind + (f"-rank{self.rank}" if self.world_size > 1 else "")
        self.name = priorities_name(name)
        spec = {"view": view.position_spec(), "key_stride": view.key_stride}
        self.files = PriorityFiles(view.folder, name, capacity.max_steps + 1, capacity.max_episodes, spec) \
            if persist else None
        stored: tuple[np.ndarray, np.ndarray] | None = None
        if self.files is not None:
            stored = self.files.values, self.files.owner
        elif not self.view.store.writable and chosen is None:  # a reader: the stored ones, copied into memory
            stored = read_stored_priorities(view.folder, name, capacity.max_steps + 1, capacity.max_episodes, spec)
        self._load(stored)

    def _largest_raw(self) -> float:
        """The largest priority: the tree's total (of up to max_steps leaves, each priority ** alpha) stays finite."""
        try:
            return (_FLOAT_MAX / (2 * self.max_steps)) ** (1.0 / self.alpha) if self.alpha > 0 else _FLOAT_MAX
        except OverflowError:
            return _FLOAT_MAX

    # ---- the tree follows the view -------------------------------------------------------------------

    def _load(self, stored: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Fill the tree for every live position: ``stored`` priorities (values, owner) where the slot's
        owner is the live episode, the largest stored (or 1.0) elsewhere. A reader's files may be of the
        store before a grow (remapped here, in memory): an id's owner entry is at ``id % len(owner)`` (the
        slot count they were written under), and a row past the values is unknown."""
        table = self.view.table
        rows, episode = position_rows(self.view.positions, table, np.ones(len(table), dtype=bool))
        raw = np.full(len(rows), np.nan)
        if stored is not None:
            values, owner = stored  # (a reader's read-only maps: only the live rows are read)
            owned = owner[table.ids % len(owner)] == table.ids
            known = owned[episode] & (rows < len(values) - 1)
            raw[known] = values[rows[known]]
            raw[(raw < 0) | (raw > self.max_raw)] = np.nan  # damaged values: as if unknown (NaN stays NaN)
            known &= ~np.isnan(raw)
            stored_max = float(values[-1])
            if 0 < stored_max <= self.max_raw:
                self.max_priority = stored_max
            elif known.any():
                self.max_priority = max(float(raw[known].max()), np.finfo(np.float64).tiny)
        self._raise_max(self.max_priority)
        self._set(rows, np.where(np.isnan(raw), self.max_priority, raw), table)
        self._sort_starts()

    def _raise_max(self, priority: float) -> None:
        """The largest priority seen (new positions enter at it), kept after the rows' priorities."""
        self.max_priority = priority
        if self.files is not None:
            self.files.values[-1] = priority

    def _changed(self, old_table: EpisodeTable, old_positions: Any) -> None:
        """Leaves of episodes gone from the table go to 0, then new ones enter at the largest priority. An
        episode is kept only if its whole entry (id, slot, start, length, end, final) is unchanged: if its
        rows were different (a snapshot that held them wrong), the old rows go and the new ones come. Its
        slot may differ (the store was grown: slots move, rows never do); the files then follow the grow first."""
        capacity = getattr(self.view, "capacity", None) or self.view.store.capacity  # the snapshot's
        if capacity != self._capacity:
            try:
                self._follow_grow(capacity)
            except BaseException:
                self._seen = (old_table, old_positions)  # nothing changed: the next draw tries again
                raise
        table = self.view.table
        kept, kept_new = old_table.unchanged(table, slots=False)
        gone = ~kept
        if gone.any():
            rows, _ = position_rows(old_positions, old_table, gone)
            self.tree.update(rows, 0.0)
        new = ~kept_new
        if new.any():
            rows, _ = position_rows(self.view.positions, table, new)
            self._set(rows, np.full(len(rows), self.max_priority), table.select(new))
        self._sort_starts()

    def _follow_grow(self, capacity: Capacity) -> None:
        """The store was grown while this sampler was open: its files remapped to the new capacity (owner
        entries to their new slots, the values longer), its tree allowed the new rows."""
        if self.files is not None:
            self.files.resize(capacity.max_steps + 1, capacity.max_episodes)
        self._capacity = capacity
        self.max_steps = capacity.max_steps
        self.max_raw = self._largest_raw()  # (more rows: the leaves so far stay within the finite total)
        if self.max_priority > self.max_raw:
            self._raise_max(self.max_raw)

    def _update(self, reread: bool) -> bool:
        try:
            return super()._update(reread)
        except SchemaMismatchError:
            grown = self.view.store.capacity.max_timesteps
            if grown == self.view.key_stride:
                raise
            held = self.files is not None
            self.close()  # a sampler made after the grow may take the priorities (remapped)
            raise SchemaMismatchError(
                f"{self.view.folder} was grown to max_timesteps={grown} since this sampler was made (its keys count "
                f"{self.view.key_stride} steps an episode), so it cannot draw or update any more"
                + (f": this sampler let go of its priorities {self.name!r} (flushed); make a new one with "
                   f"buffer.sampler(...), which takes them" if held else
                   ": make a new one with buffer.sampler(...)")) from None

    def _set(self, rows: np.ndarray, raw: np.ndarray, owners: EpisodeTable | None = None) -> None:
        """Priorities ``raw`` at ``rows``; ``owners``: the episodes whose rows these now are."""
        if len(rows) and rows.max() >= self.tree.capacity:
            self._grow(int(rows.max()) + 1)
        self.tree.set_leaves(rows, self._leaves_of(raw))
        self._keep(rows, raw, owners)

    def _leaves_of(self, raw: np.ndarray) -> np.ndarray:
        return raw ** self.alpha if self.alpha != 1.0 else raw

    def _keep(self, rows: np.ndarray, raw: np.ndarray, owners: EpisodeTable | None = None) -> None:
        """The raw priorities at ``rows`` into the folder's file (when persisted)."""
        if self.files is not None:
            self.files.values[rows] = raw
            if owners is not None:
                self.files.owner[owners.slots] = owners.ids

    def _grow(self, rows: int) -> None:
        """A tree of at least ``rows`` leaves (doubling, at most max_steps), rebuilt from the old leaves."""
        old = self.tree
        tree = SumTree(min(self.max_steps, max(rows, 2 * old.capacity)))
        leaves = np.zeros(tree.capacity)
        leaves[: old.capacity] = old.leaves
        tree.load_leaves(leaves)
        self.tree = tree

    def _sort_starts(self) -> None:
        """Episodes by first row, to find the episode of a drawn row with one searchsorted (and, for
        listed positions, their rows in order, to check the keys of updates)."""
        self._by_start = np.argsort(self.view.table.start, kind="stable")
        self._starts = self.view.table.start[self._by_start]
        if not hasattr(self.view.positions, "counts"):
            table = self.view.table
            self._listed_rows = np.sort(position_rows(self.view.positions, table, np.ones(len(table), dtype=bool))[0])

    # ---- drawing and updating ------------------------------------------------------------------------

    def _draw(self, batch_size: int) -> Sample:
        tree = self.tree
        for _ in range(_STRAY_REDRAWS):
            drawn = self._draw_compiled(batch_size)
            if isinstance(drawn, Sample):
                return drawn
            rows, leaves = drawn if drawn is not None else tree.sample_with_values(batch_size, self.rng)
            episode, t, keys, stray = self._locate(rows)
            if stray is None:
                break
            self.tree.update(rows[stray], 0.0)  # a leaf no position of the view owns: never drawn again
        else:
            raise CorruptStoreError(f"the sum tree of this sampler keeps drawing rows that no live episode holds "
                                    f"(row {int(rows[stray][0])}); make the sampler again")
        return Sample(keys, tree.weights(leaves, self.beta), episode=episode, t=t, source=self.view)

    def _draw_compiled(self, batch_size: int) -> Sample | tuple[np.ndarray, np.ndarray] | None:
        """A whole draw by the compiled kernels (one call): a Sample; or the drawn rows and their leaves
        when some need Python's care (a stray leaf moved, a row no position owns); None without them."""
        counts, compiled = getattr(self.view.positions, "counts", None), kernels.compiled()
        if compiled is None or counts is None:
            return None
        tree, table = self.tree, self.view.table
        rows, episode, t, keys = np.empty((4, batch_size), dtype=np.int64)
        found, weights = np.empty(batch_size), np.empty(batch_size, dtype=np.float32)
        strays, bad = compiled.draw_positions(tree.flat, tree.top, tree.levels, self.rng.random(batch_size),
                                              self.beta, self._starts, self._by_start, table.start, counts, table.ids,
                                              self.view.key_stride, rows, found, episode, t, keys, weights)
        if strays < 0:
            raise InvalidDataError(NOTHING_TO_DRAW)
        if strays or bad:
            return tree.moved(rows, found, strays)
        return Sample(keys, weights, episode=episode, t=t, source=self.view)

    def _locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Drawn rows -> (table position of their episode, t, key, and the draws no position owns or None)."""
        table, counts, compiled = self.view.table, getattr(self.view.positions, "counts", None), kernels.compiled()
        if compiled is None or counts is None:
            episode = self._by_start[np.searchsorted(self._starts, rows, side="right") - 1]
            t = rows - table.start[episode]
            return episode, t, self.keys_of(episode, t), self._stray(rows, episode, t)
        episode, t, keys = np.empty((3, len(rows)), dtype=np.int64)
        bad = compiled.locate_rows(rows, self._starts, self._by_start, table.start, counts, table.ids,
                                   self.view.key_stride, episode, t, keys)
        return episode, t, keys, self._stray(rows, episode, t) if bad else None

    def _stray(self, rows: np.ndarray, episode: np.ndarray, t: np.ndarray) -> np.ndarray | None:
        """The draws whose row is no position of the view (a check, one gather and compare per batch), or None.
        Every nonzero leaf is a position of a live episode: this keeps a broken invariant from ever handing
        out a row of no episode (or of a neighbour, with t past its episode's end)."""
        counts = getattr(self.view.positions, "counts", None)
        if counts is not None:
            bad = (t < 0) | (t >= counts[episode])
        else:
            listed = self._listed_rows
            found = np.minimum(np.searchsorted(listed, rows), max(len(listed) - 1, 0))
            bad = (t < 0) | (listed[found] != rows) if len(listed) else np.ones(len(rows), dtype=bool)
        return np.flatnonzero(bad) if bad.any() else None

    def leaves_of(self, keys: np.ndarray) -> np.ndarray:
        """The leaves (``priority ** alpha``) of this sampler's fresh draw's keys (of episodes in the view).
        Read under the view's lock, the tree brought to the view's snapshot first (a loader's gather thread
        may have refreshed the view since the draw); a key whose episode left the view meanwhile (evicted)
        is a ``SampleExpiredError``: draw again."""
        with self._view_lock():
            self.reconcile()
            ids, t = np.divmod(keys, self.view.key_stride)
            table = self.view.table
            where = table.positions_of(ids)
            if where is None:
                raise SampleExpiredError("an episode of this draw was evicted before its priorities were read (the "
                                         "ring writer moved on since the draw); draw again")
            priorities: np.ndarray = self.tree.leaves[table.start[where] + t]
            return priorities

    def update_priorities(self, keys: Any, priorities: Any) -> int:
        """Set the priorities of drawn positions (a batch's ``_key``, and e.g. ``|td_error| + eps``).
        Updates for episodes evicted since the draw are dropped; returns how many were applied."""
        with self._view_lock():  # the view's snapshot stays while the keys are located in it
            return self._update_priorities(keys, priorities)

    def _update_priorities(self, keys: Any, priorities: Any) -> int:
        applied = self._update_compiled(keys, priorities)
        if applied is not None:
            return applied
        keys, raw, highest, top = self._checked(keys, priorities)
        if not len(keys):
            return 0
        if self.follow:
            self.sync()
        else:
            self.reconcile()
        if top // self.view.key_stride >= self.view.state[1]:
            raise InvalidDataError(f"keys must come from this sampler's batches ('_key'): key {top} names episode "
                                   f"{top // self.view.key_stride}, which was never committed to this buffer")
        ids, t = np.divmod(keys, self.view.key_stride)
        table = self.view.table
        where = table.positions_of(ids)
        if where is None:  # some episodes were evicted since the draw: drop their updates
            where = np.minimum(np.searchsorted(table.ids, ids), max(len(table) - 1, 0))
            live = (table.ids[where] == ids) if len(table) else np.zeros(len(ids), dtype=bool)
            self.dropped += int((~live).sum())
            where, t, raw = where[live], t[live], raw[live]
            if not len(where):
                return 0
            highest = raw.max()
        rows = table.start[where] + t
        counts = getattr(self.view.positions, "counts", None)
        if counts is not None:
            valid = (t < counts[where]).all()
        else:  # listed positions (filter_fields): the rows must be listed ones
            found = np.minimum(np.searchsorted(self._listed_rows, rows), max(len(self._listed_rows) - 1, 0))
            valid = len(self._listed_rows) > 0 and np.array_equal(self._listed_rows[found], rows)
        if not valid:
            raise InvalidDataError("keys must come from this sampler's batches ('_key'): some name no position of "
                                   "its view")
        if highest > self.max_priority:
            self._raise_max(float(highest))
        self._set(rows, raw)
        return len(where)

    def _update_compiled(self, keys: Any, priorities: Any) -> int | None:
        """``update_priorities`` by the compiled kernels, when they run and all is well (int64 keys, each a
        position of a live episode; priorities finite, >= 0 and not too large; positions counted per
        episode); else None, and numpy's way decides (its checks say what is wrong, and it drops the
        updates of episodes evicted since the draw). The same priorities, leaves and largest priority."""
        compiled = kernels.compiled()
        if compiled is None or getattr(self.view.positions, "counts", None) is None:
            return None
        keys, priorities = as_numpy(keys), as_numpy(priorities)
        if (keys.dtype != np.int64 or keys.ndim != 1 or priorities.dtype.kind != "f" or priorities.shape != keys.shape
                or not len(keys)):
            return None
        keys, raw = np.ascontiguousarray(keys), np.ascontiguousarray(priorities, dtype=np.float64)
        fine, highest = compiled.checked_priorities(keys, raw, self.max_raw)
        if not fine:
            return None
        if self.follow:
            self.sync()
        else:
            self.reconcile()
        # the counts of the table as synced (a sync may replace the view's table and positions)
        table, tree, counts = self.view.table, self.tree, getattr(self.view.positions, "counts", None)
        if counts is None or len(counts) != len(table.ids):
            return None
        rows = np.empty(len(keys), dtype=np.int64)
        if not compiled.update_rows(keys, self.view.key_stride, table.ids, table.start, counts, self.view.state[1],
                                    self._leaves_of(raw), tree.flat, tree.size, tree.levels, tree.capacity,
                                    rows):
            return None
        if highest > self.max_priority:
            self._raise_max(highest)
        self._keep(rows, raw)
        return len(rows)

    def _checked(self, keys: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray, float, int]:
        """int64 keys, float64 priorities, the largest priority and the largest key; or InvalidDataError."""
        keys = as_numpy(keys)
        if keys.dtype.kind not in "iu" or keys.ndim != 1:
            raise InvalidDataError(f"keys must be a 1-d int array, a batch's '_key' (got {keys.dtype} {keys.shape})")
        priorities = as_numpy(priorities)
        if priorities.dtype.kind not in "biuf" or priorities.shape != keys.shape:
            raise InvalidDataError(f"priorities must be {len(keys)} numbers, one per key (got {priorities.dtype} "
                                   f"{priorities.shape})")
        if not len(keys):
            return keys.astype(np.int64), np.zeros(0), 0.0, 0
        lowest, highest = priorities.min(), priorities.max()  # NaN makes both NaN
        if not (lowest >= 0 and highest < np.inf):
            bad = priorities[~np.isfinite(priorities) | (priorities < 0)][0]
            raise InvalidDataError(f"priorities must be finite and >= 0 (got {bad}); e.g. abs(td_error) + 1e-6")
        highest = float(highest)  # (a float16 scalar compared with a large Python float would overflow)
        if highest > self.max_raw:
            raise InvalidDataError(self._too_large(highest, self.max_raw))
        low, top = int(keys.min()), int(keys.max())
        if low < 0:
            raise InvalidDataError(f"keys must be >= 0, a batch's '_key' (got {low})")
        if top > INT64_MAX:  # uint64 keys that int64 cannot hold
            raise InvalidDataError(f"keys must be a batch's '_key', at most {INT64_MAX} (got {top})")
        return keys.astype(np.int64, copy=False), priorities.astype(np.float64, copy=False), highest, top

    def _too_large(self, priority: Any, limit: float) -> str:
        return (f"priorities must be at most {limit:.6g} (got {priority}): the sum of priority ** "
                f"alpha (alpha={self.alpha}) over up to {self.max_steps} positions must stay a finite "
                f"float64; scale them down")

    # ---- state ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state (JSON-able). Inside ``buffer.save_training_state`` it also names a snapshot of
        the priorities (``"priorities"``), saved beside the state in the same commit."""
        state = super().state_dict()
        state.update(max_priority=self.max_priority, dropped=self.dropped)
        key = snapshot_key(self._snapshot)
        if key is not None:
            state["priorities"] = key
        return state

    def _snapshot(self) -> PrioritySnapshot:
        """The tree's leaves, and the episodes of the table the tree matches (``_seen``)."""
        table = self._seen[0]
        return PrioritySnapshot(self.tree.leaves.copy(), table.ids.copy(), table.start.copy())

    def _restore(self, snapshot: PrioritySnapshot) -> None:
        """The tree rebuilt from a snapshot's leaves, for the episodes of the view that it holds (the same id
        and first row); the view's other episodes enter at the largest priority, as new ones do."""
        with self._view_lock():
            table, positions = self.view.table, self.view.positions
            rows, episode = position_rows(positions, table, np.ones(len(table), dtype=bool))
            where = np.minimum(np.searchsorted(snapshot.ids, table.ids), max(len(snapshot.ids) - 1, 0))
            same = ((snapshot.ids[where] == table.ids) & (snapshot.starts[where] == table.start) if len(snapshot.ids)
                    else np.zeros(len(table), dtype=bool))
            kept = same[episode] & (rows < len(snapshot.leaves))
            capacity = min(self.max_steps, max(len(snapshot.leaves), int(rows.max()) + 1 if len(rows) else 1))
            leaves = np.zeros(capacity)
            leaves[rows] = np.where(kept, snapshot.leaves[np.minimum(rows, len(snapshot.leaves) - 1)],
                                    self._leaves_of(np.full(len(rows), self.max_priority)))
            tree = SumTree(capacity)
            tree.load_leaves(leaves)
            self.tree = tree
            if self.alpha > 0:  # the folder's raw priorities follow (a later sampler opened there starts from them)
                self._keep(rows, np.minimum(leaves[rows] ** (1.0 / self.alpha), self.max_raw), table)
            self._seen = (table, positions)
            self._sort_starts()

    def _checked_state(self, state: dict[str, Any]) -> dict[str, Any]:
        values = super()._checked_state(state)
        values["max_priority"] = _optional(state, "max_priority", self.max_priority, number, low=0.0, low_open=True,
                                          high=self.max_raw)
        values["dropped"] = _optional(state, "dropped", 0, integer, low=0)
        snapshot = state.get("priorities")
        if isinstance(snapshot, str):
            raise InvalidDataError(f"the state names priorities saved beside a training state ({snapshot!r}); load "
                                   f"it with buffer.load_training_state(name), which hands them back")
        if snapshot is not None and not isinstance(snapshot, PrioritySnapshot):
            raise InvalidDataError(f"'priorities' must be a PrioritySnapshot (got {type(snapshot).__name__})")
        values["snapshot"] = snapshot
        return values

    def _apply_state(self, values: dict[str, Any]) -> None:
        super()._apply_state(values)
        self._raise_max(values["max_priority"])
        self.dropped = values["dropped"]
        if values["snapshot"] is not None:
            self._restore(values["snapshot"])

    def close(self) -> None:
        """Flush the priorities to the folder and let another sampler keep them."""
        files, self.files = getattr(self, "files", None), None
        if files is not None:
            files.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the OS drops the lock with the process anyway
            pass


def as_numpy(values: Any) -> np.ndarray:
    """A numpy array of a tensor (on any device) or of anything numpy takes."""
    if hasattr(values, "detach"):
        try:
            array: np.ndarray = values.numpy()  # a CPU tensor without grad: its memory, one call
            return array
        except (RuntimeError, TypeError):  # with grad, or on a device
            return np.asarray(values.detach().cpu().numpy())
    return np.asarray(values)
