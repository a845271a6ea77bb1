"""Where a commit's episodes go in a store's rows and frames, and which live episodes that evicts. Numpy only.

An episode's rows are contiguous and placed after the previous episode's (``write_head``); in a ring they go back
to row 0 when they would pass ``max_steps``. A compressed field's frames are placed the same way in its frames
file: after the previous episode's (``state.frames[name]["head"]``), and back to byte 0 whenever the rows go back to
row 0. A ring evicts, oldest first, every live episode whose rows *or* frames a new one overlaps (and the oldest
when its slots run out); a store that is not a ring refuses what does not fit (``BufferFullError``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import BufferFullError
from .format import Capacity, State
from .index import EpisodeTable

if TYPE_CHECKING:
    from .encoded import EncodedField
    from .store import PendingEpisode

__all__ = ["Placement", "place", "full_error"]

# an episode's first row, the episode, and the first byte of each compressed field's frames
Placement = tuple[int, "PendingEpisode", dict[str, int]]


def full_error(what: str, grow: str = "max_episodes=..., max_steps=...") -> BufferFullError:
    """``grow``: the ``buffer.grow`` arguments that would make room (e.g. ``max_episodes=7``)."""
    return BufferFullError(
        f"the buffer is full: {what} and it is not circular; grow it in place: buffer.grow({grow}) makes room for "
        f"this commit (grow more to store more; `memmap-replay grow FOLDER --max-episodes N` from a shell), or "
        f"buffer.grow(circular=True) (or circular=True when creating it) to evict the oldest episodes; or raise "
        f"max_episodes/max_steps when creating it, or call clear()"
    )


def _room(capacity: Capacity, live: int, head: int, episodes: Sequence[PendingEpisode]) -> str:
    """The grow arguments that take ``episodes`` after ``live`` episodes and ``head`` rows."""
    slots, rows = live + len(episodes), head + sum(episode.num_rows for episode in episodes)
    return ", ".join([f"max_episodes={slots}"] * (slots > capacity.max_episodes)
                     + [f"max_steps={rows}"] * (rows > capacity.max_steps))


def place(capacity: Capacity, state: State, table: EpisodeTable, files: dict[str, EncodedField],
          episodes: Sequence[PendingEpisode], encoded: Sequence[dict[str, tuple[np.ndarray, np.ndarray]]]
          ) -> tuple[int, list[Placement], dict[str, int]]:
    """Where each episode goes (``table``: the live episodes; ``files``: the compressed fields; ``encoded``: each
    episode's (lengths, frames) per compressed field), the first live id after the evictions that makes
    necessary, and each compressed field's frames head after the commit."""
    first, head, next_id = state.first_episode, state.write_head, state.next_episode
    planned: dict[int, tuple[int, int]] = {}  # id -> (start, rows) for episodes of this commit
    ends = table.start + table.length + table.final
    heads = {name: state.frames[name]["head"] for name in files}
    spans = {name: file.span(table.start, ends - 1) for name, file in files.items()} if len(table) else {}
    planned_spans: dict[str, dict[int, tuple[int, int]]] = {name: {} for name in files}
    plan: list[Placement] = []
    for number, episode in enumerate(episodes):
        rows = episode.num_rows
        if rows > capacity.max_steps:
            raise BufferFullError(f"an episode of {rows} rows cannot fit in max_steps={capacity.max_steps} rows")
        start = head
        if start + rows > capacity.max_steps:
            if not capacity.circular:
                raise full_error(f"an episode of {rows} rows does not fit in the {capacity.max_steps - start} "
                                 f"rows left of max_steps={capacity.max_steps}",
                                 _room(capacity, next_id - first, start, episodes[number:]))
            start = 0
        if next_id - first >= capacity.max_episodes:
            if not capacity.circular:
                raise full_error(f"all {capacity.max_episodes} episode slots are used",
                                 _room(capacity, next_id - first, start, episodes[number:]))
            first += 1
        # evict oldest first, up to the newest live episode whose rows or frames the new one would overwrite
        # (after a wrap to row 0 the oldest episodes sit at the end and need not overlap themselves)
        overlaps = (table.start < start + rows) & (start < ends)
        hit = [i for i, (s, n) in planned.items() if s < start + rows and start < s + n]
        at = {}
        for name in files:
            at[name] = begin = 0 if start == 0 else heads[name]
            end = begin + len(encoded[number][name][1])
            if spans:
                lo, hi = spans[name]
                overlaps |= (lo < end) & (begin < hi)
            hit += [i for i, (lo_, hi_) in planned_spans[name].items() if lo_ < end and begin < hi_]
            planned_spans[name][next_id] = (begin, end)
            heads[name] = end
        if overlaps.any():
            hit.append(int(table.ids[overlaps].max()))
        first = max([first] + [i + 1 for i in hit])
        planned[next_id] = (start, rows)
        plan.append((start, episode, at))
        head, next_id = start + rows, next_id + 1
    return first, plan, heads
