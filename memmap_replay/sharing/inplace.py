"""Edits of a writable buffer in place: ``delete_episodes``, ``trim`` and ``relabel`` (this module's ``BufferEdits``,
a base of ``ReplayBuffer``). Each is one crash-safe commit of new episode-table entries and meta values
(``core/edits.py``) whose cost follows the episodes it changes, never the store's size: no step row is read or
written (a compressed field's frames included). After the commit the card records the edit in its provenance, and a
checksum manifest that was current is brought up to date (``checksums`` observer).
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..core import format as fmt
from ..core.convert import as_array
from ..core.update import meta_rows
from ..core.edits import Journal
from ..core.episodes import meta_mask
from ..core.index import EpisodeTable
from ..core.schema import FieldSpec
from ..core.options import did_you_mean, short
from ..core.store import EpisodeStore
from ..errors import IndexRangeError, IndexTypeError, InvalidDataError, OptionError
from .card import record_edit
from .compacting import CompactReport, compact
from .derived import add_field

__all__ = ["BufferEdits"]

_LISTED = 1000  # ids a provenance record lists (then it says how many more)


class BufferEdits:
    """``ReplayBuffer``'s edits of committed episodes in place (its ``_check_idle`` and ``_store``)."""

    _store: EpisodeStore

    def _check_idle(self, action: str, *, leaves_open: bool = False) -> None:  # (ReplayBuffer's)
        raise NotImplementedError

    def delete_episodes(self, ids: int | Iterable[int]) -> int:
        """Remove the episodes with these ids (``buffer.episode_ids`` lists them; ``Episode.id``) from every reader
        at one commit; returns how many. Their rows stay on disk, unread, until ``compact()`` frees them (a ring
        overwrites them as it wraps). Crash-safe: killed at any instant, the folder reopens with all of them or
        none. Readers in other processes see them gone at their next refresh; a batch read across the edit is
        never returned (``SampleExpiredError``: a sampler draws again). Prioritized samplers drop their
        priorities; running statistics are recomputed from the episodes left at their next use."""
        self._check_idle("delete episodes")
        store = self._store
        table, positions = _live_positions(store, ids, "delete_episodes")
        store.begin_edit("delete_episodes")
        slots = table.slots[positions]
        links = _links_cut(store, table, positions, head=True, tail=True)
        journal = Journal.of(store, np.r_[slots, list(links)])
        journal.records["end"][np.searchsorted(journal.slots, slots)] = fmt.REMOVED
        _put_links(journal, links)
        store.edit(journal, removed=len(positions))
        _record(store, "delete_episodes", episodes=_listed(table.ids[positions]))
        return len(positions)

    def trim(self, id: int, start: int | None = None, stop: int | None = None) -> int:
        """Keep steps ``start:stop`` of episode ``id`` (a Python slice of its steps: negative counts from its end;
        ``trim(id, stop=-10)`` drops the last 10 steps); returns its new length. A cut tail makes the episode
        truncated, with the first step cut off as its final observation (so ``next_obs`` at the new last step is
        the observation that followed it); a kept tail keeps its end and final observation. Cutting the head of a
        segment of a split episode (``long_episodes='split'``) makes it start an episode, and cutting its tail ends
        the link of the segment that continued it. One crash-safe commit; no step row is read or written (the cut
        rows are freed by ``compact()``)."""
        self._check_idle("trim an episode")
        store = self._store
        table, positions = _live_positions(store, [id], "trim")
        position = int(positions[0])
        length = int(table.length[position])
        if not _is_index(start) or not _is_index(stop):
            raise IndexTypeError(f"trim(id={int(table.ids[position])}, start={start!r}, stop={stop!r}): start and stop "
                                 f"must be ints or None, as in episode[start:stop] (got {type(start).__name__} and "
                                 f"{type(stop).__name__})")
        first, last, step = slice(start, stop).indices(length)
        outside = [value for value in (start, stop) if value is not None and not -length <= value <= length]
        if step != 1 or last - first < 1 or outside:
            raise IndexRangeError(
                f"trim(id={int(table.ids[position])}, start={start!r}, stop={stop!r}) must keep at least one of the "
                f"episode's {length} steps (start and stop are ints or None, as in episode[start:stop]: "
                f"0 <= start < stop <= {length} after negative ones count from the end; got "
                f"{f'{outside} outside -{length}..{length}' if outside else f'steps {first}:{last}'})")
        if first == 0 and last == length:
            return length
        slot = int(table.slots[position])
        cut_tail = last < length
        store.begin_edit("trim")
        links = _links_cut(store, table, np.array([position]), head=first > 0, tail=cut_tail)
        journal = Journal.of(store, np.array([slot, *links]))
        entry = journal.records[journal.position(slot)]
        entry["start"] = int(table.start[position]) + first
        entry["length"] = last - first
        if first:
            entry["continues"] = 0
        if cut_tail:
            entry["end"], entry["final"] = fmt.END_CODES["truncated"], True
        _put_links(journal, links)
        store.edit(journal)
        _record(store, "trim", episode=int(table.ids[position]), steps=[first, last], length=length)
        return last - first

    def relabel(self, ids_or_filter: int | Iterable[int] | Mapping[str, Any], /, **meta: Any) -> int:
        """Set meta values of episodes: ``relabel([3, 7], task_id=2)`` (episode ids), or every live episode
        whose meta values equal a filter's, ``relabel({"task_id": 1}, task_id=2)``. A value is one for every
        episode, or one per episode (in the order of the ids, or oldest first for a filter). Returns how many
        episodes changed (0 when a filter matches none). One crash-safe commit: readers see all the new values
        or none."""
        self._check_idle("relabel episodes")
        store = self._store
        if not meta:
            raise OptionError(f"relabel needs at least one meta value to set, as relabel(ids, name=value) "
                              f"(meta fields: {sorted(store.schema.meta_fields)})")
        unknown = sorted(set(meta) - set(store.schema.meta_fields))
        if unknown:
            known = store.schema.meta_fields
            raise InvalidDataError(f"relabel sets meta fields; {unknown} are not meta fields of the store (its meta "
                                   f"fields: {sorted(known)}){did_you_mean(unknown, known)}")
        chosen: dict[str, Any]
        if isinstance(ids_or_filter, Mapping):
            table = store.live_table()
            keep = meta_mask(store, table.slots, ids_or_filter, option="relabel's filter")
            positions = np.flatnonzero(keep) if keep is not None else np.arange(len(table))
            chosen = {"filter": {key: short(value) for key, value in ids_or_filter.items()}}
        else:
            table, positions = _live_positions(store, ids_or_filter, "relabel", unique=True)
            chosen = {"episodes": _listed(table.ids[positions])}
        values = {name: _values(store, name, value, len(positions)) for name, value in meta.items()}
        if not len(positions):
            return 0
        slots = table.slots[positions]
        store.begin_edit("relabel")
        journal = Journal.of(store, slots)
        for name, rows in values.items():
            journal.put(f"meta.{name}", slots, rows)
        store.edit(journal)
        _record(store, "relabel", **chosen, values={name: short(value) for name, value in meta.items()})
        return len(positions)


    def add_field(self, name: str, values: Any, *, per: str | None = None, dtype: Any = None, default: Any = None,
                  reads: Sequence[str] | None = None, block: int = 256, progress: bool = False) -> FieldSpec:
        """Add a field computed from the live episodes, or given: ``values`` is a function of an ``Episode``
        (returning ``(T, *shape)`` per step, or one value per episode), or an array with one row per step of the live
        episodes (oldest first, as ``buffer.episode_ids`` orders them) or, with ``per="episode"``, one per episode.
        ``per``: "step" (a step field) or "episode" (a meta field); the ready-made ``returns_to_go()`` and
        ``discounted_return()`` say theirs. ``dtype``: the values' unless given; ``default``: what rows of no live
        episode hold (a final row, say). ``reads``: the fields the function's episodes hold (default: what the
        function says, else all). Episodes are read and written ``block`` at a time (``progress``: a bar). The file
        is written beside the others and one commit of meta.json adds the field: killed before it, the store is
        as it was. Returns the new field's spec. Existing views and samplers do not see it: make new ones."""
        self._check_idle("add a field")
        store = self._store
        spec = add_field(store, name, values, per=per, dtype=dtype, default=default, reads=reads, block=block,
                         progress=progress)
        _record(store, "add_field", field=name, per=per or getattr(values, "per", "step"),
                values=repr(values) if callable(values) else "an array", dtype=spec.dtype.name,
                shape=list(spec.shape))
        return spec


    def compact(self, *, progress: bool = False) -> CompactReport:
        """Rewrite the rows of the live episodes contiguously from row 0 and free the rest: rows of deleted episodes,
        trimmed-off steps, and a compressed field's frames that no live row uses (their disk blocks go back to the
        file system: holes punched in the files). Readers keep reading the old rows until the commit that moves
        them. Episodes keep their ids and slots (deleted ones keep their slots: a store that is not a ring never
        reuses an id). Episodes move in at most 8 rounds through the free rows after the last one (a store with too
        few of them has its ``max_steps`` grown first: the files stay sparse there); killed at any instant, every
        episode is whole, and ``compact()`` again finishes. Not for rings (they reuse free rows as they wrap).
        Returns a ``CompactReport`` (rows before and after, disk bytes freed, ``max_steps`` if grown, ...)."""
        self._check_idle("compact the store")
        store = self._store
        report = compact(store, progress=progress)
        _record(store, "compact", moved_episodes=report.moved_episodes, rows_before=report.rows_before,
                rows_after=report.rows_after, freed_bytes=report.freed_bytes,
                **({"max_steps": list(report.max_steps)} if report.max_steps else {}))
        return report


def _is_index(value: Any) -> bool:
    return value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def _live_positions(store: EpisodeStore, ids: Any, verb: str, *, unique: bool = False
                    ) -> tuple[EpisodeTable, np.ndarray]:
    """The live table and the positions in it of the episodes ``ids`` names (ints; each live). Repeated ids
    count once (``unique``: they are refused, for values given per id)."""
    table = store.live_table()
    listed = [ids] if isinstance(ids, (numbers.Integral, bool, np.bool_)) else ids
    try:
        values = [operator.index(value) for value in _no_bools(listed)]
    except TypeError:
        raise IndexTypeError(f"{verb} takes episode ids: an int or a list of ints, as buffer.episode_ids lists them "
                             f"(got {short(ids)})") from None
    if not values:
        raise OptionError(f"{verb} needs at least one episode id (got {short(ids)}); buffer.episode_ids lists them")
    wanted = np.asarray(values, dtype=np.int64)
    if unique and len(np.unique(wanted)) != len(wanted):
        raise OptionError(f"{verb} got an episode id twice in {short(ids)}: name each episode once")
    where = np.minimum(np.searchsorted(table.ids, wanted), max(len(table) - 1, 0))
    found = (table.ids[where] == wanted) if len(table) else np.zeros(len(wanted), bool)
    if not found.all():
        missing = wanted[~found][:10].tolist()
        span = f"{int(table.ids[0])}..{int(table.ids[-1])}" if len(table) else "none"
        raise IndexRangeError(f"{verb}: episode id(s) {missing} are not live in {store.folder} (never stored, "
                              f"evicted by the ring, or deleted; live ids: {len(table)} in {span}, "
                              f"buffer.episode_ids lists them); nothing was changed")
    return table, (where if unique else np.unique(where))


def _no_bools(values: Iterable[Any]) -> Iterable[Any]:
    """``values``, with a TypeError at a bool (True is not episode 1)."""
    for value in values:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError("a bool is not an episode id")
        yield value


def _links_cut(store: EpisodeStore, table: EpisodeTable, positions: np.ndarray, *, head: bool, tail: bool
               ) -> dict[int, str]:
    """The live segments of a split episode (``long_episodes='split'``) whose link an edit of the episodes at
    ``positions`` cuts, by slot: with ``tail`` (their ends go) the segment continuing one of them no longer does
    ("unlink"); with ``head`` (their starts go) the segment one of them continues is cut short ("truncate": its
    end becomes truncated, keeping its final row)."""
    edited = set(table.ids[positions].tolist())
    cut: dict[int, str] = {}
    # (only a segment cut at max_timesteps, its end unspecified and a final row, may be continued: the links of
    # every episode are read only then; the edited episodes' own links are read for their heads)
    continued = positions[(table.end[positions] == 0) & table.final[positions]]
    if tail and len(continued):
        links = store.links(table)
        for after in np.flatnonzero(np.isin(links, table.ids[continued])).tolist():
            if int(table.ids[after]) not in edited:
                cut[int(table.slots[after])] = "unlink"
    if head:
        before = store.links(table.select(positions))
        where = np.searchsorted(table.ids, before)
        for link, at in zip(before.tolist(), where.tolist()):
            if link >= 0 and at < len(table) and table.ids[at] == link and link not in edited:
                cut[int(table.slots[at])] = "truncate"
    return cut


def _put_links(journal: Journal, cut: dict[int, str]) -> None:
    """The journal's records of the segments ``_links_cut`` found: unlinked, or truncated."""
    for slot, how in cut.items():
        record = journal.records[journal.position(slot)]
        if how == "unlink":
            record["continues"] = 0
        else:
            record["end"] = fmt.END_CODES["truncated"]


def _values(store: EpisodeStore, name: str, value: Any, count: int) -> np.ndarray:
    """``value`` for meta field ``name``: one for every episode or one per episode, as (count, *shape)."""
    spec = store.schema.meta_fields[name]
    array = as_array(value, f"meta field {name!r}")
    per_episode = array.ndim == len(spec.shape) + 1
    if per_episode and len(array) != count:
        raise InvalidDataError(f"relabel: meta field {name!r} must have one value for every episode, or one per "
                               f"episode: shape {spec.shape} or ({count}, *{spec.shape}) (got shape {array.shape})")
    return meta_rows(spec, array, count)


def _listed(ids: np.ndarray) -> list[int] | dict[str, Any]:
    """Episode ids for a provenance record: all of them, or the first ``_LISTED`` and how many."""
    values = sorted(int(value) for value in ids)
    return values if len(values) <= _LISTED else {"first": values[:_LISTED], "count": len(values)}


def _record(store: EpisodeStore, kind: str, **details: Any) -> None:
    record_edit(store, kind, **details)
