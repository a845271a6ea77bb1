"""Index arithmetic over the episode table: which positions a view may use, and which rows they read.

Pure numpy, no I/O. Positions are never materialised per step: a view's items are numbered through a
cumulative sum of per-episode counts, and a batch of item numbers becomes (episode, t) pairs with one
``searchsorted``. So building a view costs O(episodes), never O(steps).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .format import END_CODES

__all__ = ["EpisodeTable", "Positions", "nstep_targets", "stack_rows", "window_rows"]

TERMINATED = END_CODES["terminated"]


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

    @property
    def reach(self) -> np.ndarray:
        """Per episode, how far transitions may look ahead: to ``length`` (the row after the last step)
        when the episode terminated or has a stored final observation, else to its last step."""
        open_end = (self.end == TERMINATED) | self.final
        return self.length - (~open_end).astype(np.int64)


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


def nstep_targets(table: EpisodeTable, episode: np.ndarray, t: np.ndarray, n: int, reach: np.ndarray | None = None):
    """For transitions starting at (episode, t): the actual n (clipped at the episode's reach), the t of
    the next state, whether a stored row holds it, and whether the n steps reach a terminated end.
    ``reach`` is ``table.reach``, passed in when the caller keeps it."""
    reach = (table.reach if reach is None else reach)[episode]
    actual = np.minimum(n, reach - t)
    next_t = t + actual
    length = table.length[episode]
    next_stored = (next_t < length) | table.final[episode]
    terminal = (next_t == length) & (table.end[episode] == TERMINATED)
    return actual, next_t, next_stored, terminal


def stack_rows(first_row: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, k) rows of the k frames ending at ``rows`` (oldest first), clipped at each episode's first
    row, and the mask of frames that really are in the episode (False where the first frame repeats)."""
    offsets = np.arange(-(k - 1), 1, dtype=np.int64)
    wanted = rows[:, None] + offsets[None, :]
    inside = wanted >= first_row[:, None]
    return np.where(inside, wanted, first_row[:, None]), inside


def window_rows(first_row: np.ndarray, t: np.ndarray, window: int, length: np.ndarray):
    """(B, window) rows of windows starting at t, clipped at each episode's last step, and their mask."""
    steps = t[:, None] + np.arange(window, dtype=np.int64)[None, :]
    inside = steps < length[:, None]
    return first_row[:, None] + np.minimum(steps, length[:, None] - 1), inside
