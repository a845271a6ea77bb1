"""Index arithmetic over the episode table: which positions a view may use, and which rows they read.

Pure numpy, no I/O. Positions are never materialised per step: a view's items are numbered through a
cumulative sum of per-episode counts, and a batch of item numbers becomes (episode, t) pairs with one
``searchsorted``. So building a view costs O(episodes), never O(steps).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .format import END_CODES

__all__ = ["EpisodeTable", "Positions", "ExplicitPositions", "PositionSource", "Sample", "NStepTargets",
           "position_keys", "position_rows", "stack_rows", "window_rows"]

_TERMINATED = END_CODES["terminated"]


@dataclass(frozen=True)
class EpisodeTable:
    """Episodes, oldest first: ids, slots, first rows, lengths, end codes and final-row flags."""

    ids: np.ndarray
    slots: np.ndarray
    start: np.ndarray
    length: np.ndarray
    end: np.ndarray
    final: np.ndarray

    def select(self, mask: np.ndarray) -> "EpisodeTable":
        return EpisodeTable(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})

    def __len__(self) -> int:
        return len(self.start)

    def positions_of(self, ids: np.ndarray) -> np.ndarray | None:
        """Table positions of episode ids (ascending in the table), or None if any is not in it."""
        known = self.ids
        if not len(known) or not len(ids):
            return None if len(ids) else np.zeros(0, dtype=np.int64)
        if known[-1] - known[0] + 1 == len(known):  # consecutive ids (no meta filter): arithmetic
            where = ids - known[0]
            return where if 0 <= where.min() and where.max() < len(known) else None
        where = np.minimum(np.searchsorted(known, ids), len(known) - 1)
        return where if np.array_equal(known[where], ids) else None

    def unchanged(self, other: "EpisodeTable", *, slots: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Masks over this table and ``other`` of the episodes both hold with the same entry (id, slot, start,
        length, end, final): what a sampler keeps its state for when the table is replaced by ``other``.
        ``slots=False`` leaves the slot out (state kept per row: a grow moves slots, never rows)."""
        _, mine, theirs = np.intersect1d(self.ids, other.ids, assume_unique=True, return_indices=True)
        same = np.ones(len(mine), dtype=bool)
        for column in ("slots", "start", "length", "end", "final")[0 if slots else 1:]:
            same &= getattr(self, column)[mine] == getattr(other, column)[theirs]
        kept, kept_other = np.zeros(len(self), dtype=bool), np.zeros(len(other), dtype=bool)
        kept[mine[same]] = True
        kept_other[theirs[same]] = True
        return kept, kept_other

    @property
    def reach(self) -> np.ndarray:
        """Per episode, how far transitions may look ahead: to ``length`` (the row after the last step)
        when the episode terminated or has a stored final observation, else to its last step."""
        open_end = (self.end == _TERMINATED) | self.final
        reach: np.ndarray = self.length - (~open_end).astype(np.int64)
        return reach


@dataclass(frozen=True)
class Positions:
    """The items of a view: ``counts[e]`` valid positions t = 0 .. counts[e] - 1 in episode e."""

    counts: np.ndarray
    cumulative: np.ndarray
    first_item: np.ndarray  # item number of each episode's t = 0

    @classmethod
    def from_counts(cls, counts: np.ndarray) -> "Positions":
        counts = np.maximum(np.asarray(counts, dtype=np.int64), 0)
        cumulative = np.cumsum(counts)
        return cls(counts, cumulative, cumulative - counts)

    def __len__(self) -> int:
        return int(self.cumulative[-1]) if len(self.cumulative) else 0

    def locate(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Item numbers -> (episode position in the table, t within the episode)."""
        episode = np.searchsorted(self.cumulative, items, side="right")
        return episode, items - self.first_item[episode]


class ExplicitPositions:
    """Positions listed one by one (after a per-step ``filter_fields``): item i is (episode[i], t[i])."""

    def __init__(self, episode: np.ndarray, t: np.ndarray):
        self.episode, self.t = episode.astype(np.int64), t.astype(np.int64)

    def __len__(self) -> int:
        return len(self.episode)

    def locate(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.episode[items], self.t[items]


class Sample:
    """What a sampler draws: ``keys`` (int64, episode id * ``key_stride`` + t; stable while the episode is
    live) and, for prioritized draws, importance ``weights`` (float32). A view's ``__getitems__`` takes it
    and gathers the batch: the keys are all that passes from a sampler to a view.

    A sampler also hands over where it found the keys (``source``: the position source it drew from,
    ``table``: that source's snapshot, ``episode``: positions in it, ``t``), so that very source skips
    looking them up again while its snapshot is the same; the keys stay the truth (the positions are
    dropped on pickling, and any other source or snapshot looks the keys up)."""

    __slots__ = ("keys", "weights", "episode", "t", "table", "source")

    def __init__(self, keys: np.ndarray, weights: np.ndarray | None = None, *, episode: np.ndarray | None = None,
                 t: np.ndarray | None = None, source: Any = None):
        self.keys, self.weights = keys, weights
        self.episode, self.t, self.source = episode, t, source
        self.table = None if source is None else source.table

    def __len__(self) -> int:
        return len(self.keys)

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray | None]:
        return self.keys, self.weights

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray | None]) -> None:
        self.keys, self.weights = state
        self.episode = self.t = self.table = self.source = None

    def positions_in(self, source: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """(episode positions, t) of the keys in ``source``'s table if they were drawn from that very
        source and snapshot, else None (look the keys up)."""
        if source is self.source and source.table is self.table and self.episode is not None and self.t is not None:
            return self.episode, self.t
        return None

    def __repr__(self) -> str:
        return f"Sample({len(self.keys)} keys{', weighted' if self.weights is not None else ''})"


@runtime_checkable
class PositionSource(Protocol):
    """What a sampler draws from, in numpy: a view provides it (every ``StoreView`` is one).

    - ``table``: the episode snapshot (``EpisodeTable``), replaced (never changed in place) when it changes;
    - ``positions``: the valid positions of each episode of ``table`` (``Positions``: ``counts`` per
      episode, or ``ExplicitPositions``), ``len(source)`` of them; ``positions.locate(items)`` turns item
      numbers into (episode position in ``table``, t);
    - ``key_stride``: keys are ``table.ids[episode] * key_stride + t``;
    - ``state``: (first, next) episode id of the snapshot;
    - ``refresh(reread=...)``: take in the store's commits and evictions (``reread``: re-read meta.json
      first), True if the snapshot changed;
    - ``store`` (its ``meta_stamp()``, ``capacity``, ``writable``), ``folder``, ``kind`` and
      ``position_spec()`` (what decides the positions: priorities kept for one source fit only an equal one).
    """

    table: EpisodeTable
    positions: Any
    key_stride: int
    state: tuple[int, int]
    folder: Any

    @property
    def kind(self) -> str: ...

    def __len__(self) -> int: ...

    def refresh(self, *, reread: bool = True) -> bool: ...

    def position_spec(self) -> dict[str, Any]: ...


def position_keys(source: PositionSource, episode: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Keys of (episode position in the source's table, t)."""
    keys: np.ndarray = source.table.ids[episode] * source.key_stride + t
    return keys


def position_rows(positions: Any, table: EpisodeTable, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The store rows (``start + t``) of every position of the chosen episodes (a bool mask over the
    table), and the table position of each row's episode. ``positions`` counts positions per episode
    (``Positions``) or lists them (``episode``, ``t`` arrays, after a per-step filter)."""
    if hasattr(positions, "counts"):
        chosen = np.flatnonzero(episodes)
        counts = positions.counts[chosen]
        episode = np.repeat(chosen, counts)
        first_of_each = np.repeat(np.cumsum(counts) - counts, counts)
        t = np.arange(len(episode), dtype=np.int64) - first_of_each
    else:
        keep = episodes[positions.episode]
        episode, t = positions.episode[keep], positions.t[keep]
    return table.start[episode] + t, episode


class NStepTargets:
    """Where n-step transitions lead, by table lookup: a few whole-batch operations per batch.

    For a transition at (episode, t) everything depends on the episode's kind (0: it may bootstrap;
    1: it terminated and its final observation is stored; 2: it terminated without one) and on
    ``c = min(reach - t, n + 1)``, the steps left to the episode's reach, capped. ``key(episode, t)``
    numbers these (kind, c) pairs, and each per-transition quantity is a small array indexed by key:

    - ``actual``: the n really taken, ``min(n, reach - t)``;
    - ``next_offset``: rows from t to the row read as the next state (``actual``, or ``actual - 1``
      when that state was never stored: kind 2 at its end, where the view zeroes it);
    - ``missing``: the next state was never stored; ``terminal``: the n steps reach a terminated end;
    - ``bootstrap``: ``gamma ** actual``, 0 where terminal (float32); ``pad``: (n,) per key, True
      for the chunk steps past ``actual``.
    """

    def __init__(self, table: EpisodeTable, n: int, gamma: float | None = None):
        self.n = n
        self.start = table.start
        self.reach = table.reach
        terminated = table.end == _TERMINATED
        kind = np.where(terminated, np.where(table.final, 1, 2), 0)
        self.key_base = kind.astype(np.int64) * (n + 2)
        c = np.tile(np.arange(n + 2, dtype=np.int64), 3)
        kind = np.repeat(np.arange(3), n + 2)
        self.actual = np.minimum(c, n)
        at_end = (c <= n) & (kind != 0)
        self.terminal = at_end
        self.missing = at_end & (kind == 2)
        self.next_offset = self.actual - self.missing
        self.bootstrap = np.where(at_end, 0.0, (1.0 if gamma is None else gamma) ** self.actual).astype(np.float32)
        self.pad = np.arange(n)[None, :] >= self.actual[:, None]
        self.short = self.actual < n

    def key(self, episode: np.ndarray, t: np.ndarray) -> np.ndarray:
        key: np.ndarray = np.minimum(self.reach[episode] - t, self.n + 1)
        key += self.key_base[episode]
        return key


def stack_rows(first_row: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, k) rows of the k frames ending at ``rows`` (oldest first), clipped at each episode's first
    row, and the mask of frames that really are in the episode (False where the first frame repeats)."""
    offsets = np.arange(-(k - 1), 1, dtype=np.int64)
    wanted = rows[:, None] + offsets[None, :]
    inside = wanted >= first_row[:, None]
    return np.where(inside, wanted, first_row[:, None]), inside


def window_rows(first_row: np.ndarray, t: np.ndarray, window: int, length: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(B, window) rows of windows starting at t, clipped at each episode's last step, and their mask."""
    steps = t[:, None] + np.arange(window, dtype=np.int64)[None, :]
    inside = steps < length[:, None]
    return first_row[:, None] + np.minimum(steps, length[:, None] - 1), inside
