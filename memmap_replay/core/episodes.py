"""Episodes as values: read one live episode (its steps, final observation, end, meta values) from a store.

Numpy only. ``EpisodeList`` is a snapshot of the live episodes (optionally filtered by meta values) taken
when it is made; it reads an episode only when it is indexed or iterated, so iterating a large store holds
one episode at a time. An ``Episode`` holds copies of its rows (writable numpy arrays, its own): it stays
valid whatever the ring evicts afterwards. Reading is checked against the ring as views check a batch: an
episode the writer evicted before or while its rows were copied raises ``SampleExpiredError`` (never torn
data); read the list again (``buffer.episodes()``) to get the episodes live now.

Also here: ``end_names`` (the end codes of the episode table as names) and ``step_flags`` (Dreamer's
``is_first``/``is_last``/``is_terminal`` per step, for the sequence views).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, KeysView, Mapping, cast, overload

import numpy as np

from ..errors import (CorruptStoreError, EpisodeStateError, IndexRangeError, IndexTypeError, OptionError,
                      SampleExpiredError)
from . import format as fmt
from .index import EpisodeTable
from .options import check_filter, check_names, count, flag, seed_option, short

if TYPE_CHECKING:
    from .store import EpisodeStore

__all__ = ["Episode", "EpisodeList", "chains", "select_episodes", "end_names", "step_flags"]

_TERMINATED = fmt.END_CODES["terminated"]
_TRUNCATED = fmt.END_CODES["truncated"]
# end code -> name ('' where the end was not recorded); codes are uint8, so every code has an entry
_END_NAMES = np.full(256, "", dtype="<U10")
for _code, _name in fmt.END_NAMES.items():
    _END_NAMES[_code] = _name or ""


def end_names(codes: np.ndarray) -> np.ndarray:
    """End codes of the episode table as names: 'terminated', 'truncated', or '' (not recorded)."""
    return _END_NAMES[np.asarray(codes, dtype=np.uint8)]


def step_flags(steps: np.ndarray, length: np.ndarray, end: np.ndarray, inside: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dreamer's per-step flags of (B, L) steps ``t`` of episodes of ``length`` (B,) and end codes (B,):
    ``is_first`` at t = 0, ``is_last`` at t = length - 1, ``is_terminal`` there only when the episode
    terminated; False wherever ``inside`` is False (padding)."""
    is_first = (steps == 0) & inside
    is_last = (steps == (length - 1)[:, None]) & inside
    is_terminal = is_last & (end == _TERMINATED)[:, None]
    return is_first, is_last, is_terminal


def chains(ids: np.ndarray, continues: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Linked segments grouped into episodes: ``(order, bounds)``, where episode k's segments are the positions
    ``order[bounds[k]:bounds[k + 1]]`` in ``ids`` (ascending), oldest first, episodes in order of their first
    segment. A segment whose predecessor (``continues``: its id, -1 for none) is among ``ids`` joins that one's
    episode; numpy only (pointer jumping), for tables of any size."""
    positions = np.arange(len(ids))
    head = positions.copy()
    linked = np.flatnonzero(continues >= 0)
    if linked.size and len(ids):
        before = np.minimum(np.searchsorted(ids, continues[linked]), len(ids) - 1)
        known = ids[before] == continues[linked]
        head[linked[known]] = before[known]
        while True:  # each segment's first segment: halve the distance until every head is a first
            jumped = head[head]
            if np.array_equal(jumped, head):
                break
            head = jumped
    order = np.lexsort((positions, head))
    grouped = head[order]
    bounds = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1], True]) if len(ids) else np.zeros(1, np.int64)
    return order, bounds


def meta_mask(store: EpisodeStore, slots: np.ndarray, filter_meta: Mapping[str, Any] | None, *,
              option: str = "filter_meta") -> np.ndarray | None:
    """Which of the episodes in ``slots`` have meta values equal to every value of ``filter_meta`` (None: no
    filter). ``option``: what the caller calls the filter, in errors."""
    if not check_filter(filter_meta, store.schema.meta_fields, option, "meta field") or filter_meta is None:
        return None
    keep = np.ones(len(slots), dtype=bool)
    for name in filter_meta:
        spec = store.schema.meta_fields[name]
        try:
            wanted = np.asarray(filter_meta[name])
        except (ValueError, TypeError):  # a ragged list, ...
            wanted = np.asarray(None)
        if wanted.shape not in ((), spec.shape) or wanted.dtype.kind not in "biufc":
            raise OptionError(f"{option} value for {name!r} must be a number or an array of shape {spec.shape} "
                              f"(got {short(filter_meta[name])})")
        values = store.meta_array(name)[slots]
        equal = values == wanted
        keep &= equal.reshape(len(values), -1).all(axis=1) if equal.ndim > 1 else equal
    return keep


def select_episodes(store: EpisodeStore, filter_meta: Mapping[str, Any] | None) -> EpisodeTable:
    """The live episodes whose meta values equal every value of ``filter_meta`` (None: all of them)."""
    table = store.live_table(catch_up=True)
    keep = meta_mask(store, table.slots, filter_meta)
    return table if keep is None else table.select(keep)


class Episode:
    """One episode read from a store; it holds copies of its rows, so it outlives the ring's evictions.

    - ``len(episode)``: T, its number of steps; ``episode['obs']`` (or ``episode.fields['obs']``): (T, ...)
    - ``end``: 'terminated', 'truncated' or None (not recorded); ``terminated``/``truncated``: bools, and
      ``terminations``/``truncations``: (T,) bools, True at the last step only (Minari's arrays)
    - ``final``: the final observation (the row after the last action) as a dict of every read field's value
      there (fields not given in ``final=`` when it was stored hold their defaults), or None when none
      was stored; ``observations('obs')``: (T + 1, ...), the T steps then the final observation (Minari's shape)
    - ``meta``: dict of meta values; ``id``: the episode id (stable while it is in the store); ``slot``
    - segments of a long episode (``long_episodes='split'``): ``continues``, the id of the segment this one
      continues (None: it starts an episode; an id no longer live: its start was evicted), and
      ``continued_by``, the id of the segment that continues it (None: none is stored, yet)
    """

    __slots__ = ("id", "slot", "end", "meta", "continues", "continued_by", "_rows", "_length", "_has_final")

    def __init__(self, *, id: int, slot: int, length: int, end: str | None, rows: Mapping[str, np.ndarray],
                 has_final: bool, meta: Mapping[str, Any], continues: int | None = None,
                 continued_by: int | None = None):
        self.id, self.slot, self.end = id, slot, end
        self.meta = dict(meta)
        self.continues, self.continued_by = continues, continued_by
        self._rows, self._length, self._has_final = dict(rows), length, has_final

    def __len__(self) -> int:
        return self._length

    @property
    def fields(self) -> dict[str, np.ndarray]:
        """Step field name -> its (T, ...) values."""
        return {name: rows[: self._length] for name, rows in self._rows.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._rows_of(name)[: self._length]

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def keys(self) -> KeysView[str]:
        return self._rows.keys()

    @property
    def final(self) -> dict[str, np.ndarray] | None:
        if not self._has_final:
            return None
        return {name: rows[self._length] for name, rows in self._rows.items()}

    @property
    def terminated(self) -> bool:
        return self.end == "terminated"

    @property
    def truncated(self) -> bool:
        return self.end == "truncated"

    @property
    def terminations(self) -> np.ndarray:
        return self._at_last(self.terminated)

    @property
    def truncations(self) -> np.ndarray:
        return self._at_last(self.truncated)

    def _at_last(self, value: bool) -> np.ndarray:
        flags = np.zeros(self._length, dtype=bool)
        if self._length:
            flags[-1] = value
        return flags

    def observations(self, name: str) -> np.ndarray:
        """The field's T steps followed by the final observation: (T + 1, ...) (it shares memory with
        ``episode[name]``). An episode stored without a final observation raises ``EpisodeStateError``:
        there is no (T + 1)-th row to give (``episode[name]`` has its T rows)."""
        rows = self._rows_of(name)
        if not self._has_final:
            raise EpisodeStateError(
                f"episode {self.id} has no final observation stored (end: {self.end or 'not recorded'}), so "
                f"{name!r} has {self._length} rows, not T + 1 = {self._length + 1}; read episode[{name!r}] for "
                f"its {self._length} steps, or store episodes with their final observation "
                f"(end_episode(end, final=dict({name}=obs)) or set_end(end, final=...))")
        return rows

    def _rows_of(self, name: str) -> np.ndarray:
        rows = self._rows.get(name) if isinstance(name, str) else None
        if rows is None:
            raise OptionError(f"episode {self.id} has no field {short(name)}: it holds {sorted(self._rows)} (the "
                              f"fields it was read with)")
        return rows

    def __repr__(self) -> str:
        links = "".join(f", {name}={getattr(self, name)}" for name in ("continues", "continued_by")
                        if getattr(self, name) is not None)
        return (f"Episode(id={self.id}, slot={self.slot}, {self._length} steps, end={self.end!r}, "
                f"final={'stored' if self._has_final else None}{links}, fields={list(self._rows)}, meta={self.meta})")

    @classmethod
    def joined(cls, segments: list["Episode"]) -> "Episode":
        """Linked segments as one episode: their steps in order, the last one's end, final row and meta
        values; the first one's id, slot and ``continues``."""
        first, last = segments[0], segments[-1]
        rows = {name: np.concatenate([segment[name] for segment in segments]
                                     + ([last._rows[name][last._length:]] if last._has_final else []))
                for name in first._rows}
        return cls(id=first.id, slot=first.slot, length=sum(len(segment) for segment in segments), end=last.end,
                   rows=rows, has_final=last._has_final, meta=last.meta, continues=first.continues,
                   continued_by=last.continued_by)


class EpisodeList:
    """The live episodes of a store when the list was made (oldest first, filtered by ``filter_meta``),
    read one at a time: ``len``, ``episodes[i]`` (negative counts from the end), slices (a smaller list),
    iteration (``reversed`` too). ``ids``, ``slots``, ``lengths`` and ``ends`` describe them without reading any
    row. (No ``in``, ``index`` or ``count``: they would read every episode to compare copies.)
    ``fields``/``meta_fields`` choose what each episode reads (default: all).

    ``join_segments=True``: an episode stored as linked segments (``long_episodes='split'``) is one item,
    its live segments joined (``Episode.joined``); ``ids``/``slots`` are its first segment's, ``lengths`` the
    sum, ``ends`` the last one's, and ``filter_meta`` compares the last one's meta values (each segment keeps
    the meta values it had when it was cut)."""

    def __init__(self, store: EpisodeStore, *, filter_meta: Mapping[str, Any] | None = None, fields: Any = None,
                 meta_fields: Any = None, join_segments: bool = False):
        schema = store.schema
        self._store = store
        self.fields = tuple(schema.fields) if fields is None else check_names(fields, schema.fields, "field")
        self.meta_fields = (tuple(schema.meta_fields) if meta_fields is None
                            else check_names(meta_fields, schema.meta_fields, "meta field"))
        self._capacity = store.capacity  # a grow moves slots: the table's no longer name the episodes
        self._chains: tuple[np.ndarray, np.ndarray] | None = None  # join_segments: ``chains`` of the table
        self._complete = filter_meta is None  # the table holds every live episode (a successor is in it)
        self._successors: tuple[np.ndarray, np.ndarray] | None = None  # (continued ids sorted, their successors)
        if not flag(join_segments, "join_segments"):
            self.table = select_episodes(store, filter_meta)
            self._edits = store.meta.state.edits  # (of the meta.json the table was read with)
            return
        self.table = store.live_table(catch_up=True)
        self._edits = store.meta.state.edits
        self._chains = order, bounds = chains(self.table.ids, store.links(self.table))
        keep = meta_mask(store, self.table.slots[order[bounds[1:] - 1]], filter_meta)  # by the last segment's
        self._items = np.arange(len(bounds) - 1) if keep is None else np.flatnonzero(keep)
        self._complete = True

    def __len__(self) -> int:
        return len(self.table) if self._chains is None else len(self._items)

    def _firsts(self) -> np.ndarray | slice:
        if self._chains is None:
            return slice(None)
        order, bounds = self._chains
        firsts: np.ndarray = order[bounds[self._items]]
        return firsts

    def _segments_of(self, item: int) -> np.ndarray:
        order, bounds = cast("tuple[np.ndarray, np.ndarray]", self._chains)  # (a list that joins segments)
        k = self._items[item]
        segments: np.ndarray = order[bounds[k]: bounds[k + 1]]
        return segments

    @property
    def ids(self) -> np.ndarray:
        ids: np.ndarray = self.table.ids[self._firsts()].copy()
        return ids

    @property
    def slots(self) -> np.ndarray:
        slots: np.ndarray = self.table.slots[self._firsts()].copy()
        return slots

    @property
    def lengths(self) -> np.ndarray:
        if self._chains is None:
            lengths: np.ndarray = self.table.length.copy()
            return lengths
        order, bounds = self._chains
        lengths = (np.add.reduceat(self.table.length[order], bounds[:-1])[self._items] if len(order)
                               else order.copy())
        return lengths

    @property
    def ends(self) -> np.ndarray:
        """'terminated', 'truncated' or '' (not recorded) per episode (a numpy str array)."""
        if self._chains is None:
            return end_names(self.table.end)
        order, bounds = self._chains
        return end_names(self.table.end[order[bounds[self._items + 1] - 1]])

    @overload
    def __getitem__(self, item: slice) -> EpisodeList: ...

    @overload
    def __getitem__(self, item: int | np.integer) -> Episode: ...

    def __getitem__(self, item: Any) -> EpisodeList | Episode:
        if isinstance(item, slice):
            part = EpisodeList.__new__(EpisodeList)
            part.__dict__.update(self.__dict__)
            if self._chains is None:
                part.table = self.table.select(np.arange(len(self))[item])
                part._complete = False
            else:
                part._items = self._items[item]
            return part
        return self.read(self.position(item))

    def position(self, item: Any) -> int:
        """The position of episode ``item`` (an int, negative from the end) in this list."""
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            raise IndexTypeError(f"an episode is indexed by an int position among the live episodes, 0 the oldest "
                                 f"and -1 the newest (got {type(item).__name__}: {short(item)})")
        size, at = len(self), int(item)
        if not -size <= at < size:
            held = f"[{-size}, {size})" if size else "nothing: there are no episodes"
            raise IndexRangeError(f"episode index must be in {held} for the {size} episodes (got {at}); "
                                  f"0 is the oldest, -1 the newest")
        return at + size if at < 0 else at

    def __iter__(self) -> Iterator[Episode]:
        for position in range(len(self)):
            yield self.read(position)

    def __reversed__(self) -> Iterator[Episode]:
        for position in range(len(self) - 1, -1, -1):
            yield self.read(position)

    def __repr__(self) -> str:
        ids = f", ids {self.ids[0]}..{self.ids[-1]}" if len(self) else ""
        return (f"EpisodeList({len(self)} episodes{ids}, fields={list(self.fields)}, "
                f"meta_fields={list(self.meta_fields)})")

    def sample(self, n: Any, *, seed: Any = None, replacement: bool = False) -> list[Episode]:
        """``n`` episodes drawn uniformly (without replacement unless ``replacement=True``), seeded."""
        n, replacement = count(n, "n"), flag(replacement, "replacement")
        rng = np.random.default_rng(seed_option(seed))
        if n > len(self) and not replacement:
            raise OptionError(f"cannot draw {n} episodes without replacement from {len(self)}; ask for at most "
                              f"{len(self)}, or pass replacement=True")
        if n and not len(self):
            raise OptionError(f"cannot draw {n} episodes: there are no episodes (store some first)")
        return [self.read(int(position)) for position in rng.choice(len(self), size=n, replace=replacement)]

    def read(self, position: int) -> Episode:
        """The episode at ``position`` (in [0, len)), its rows copied, checked against the ring."""
        if self._chains is None:
            return self._segment(position)
        return Episode.joined([self._segment(int(part)) for part in self._segments_of(position)])

    def _segment(self, position: int) -> Episode:
        """The episode (segment) at table ``position``."""
        table, store = self.table, self._store
        start, length, slot = int(table.start[position]), int(table.length[position]), int(table.slots[position])
        has_final = bool(table.final[position])
        episode_id = int(table.ids[position])
        self._check_live(position)  # before: an episode evicted already may have no rows left to copy
        stop = start + length + has_final
        try:
            rows = {name: np.array(store.step_array(name)[start:stop]) for name in self.fields}
        except CorruptStoreError:  # a compressed field's frames the ring overwrote while they were decoded
            self._check_live(position)
            raise
        meta = {name: np.array(store.meta_array(name)[slot])[()] for name in self.meta_fields}
        continues = store.links(table.select(np.array([position])))[0]
        self._check_live(position)  # after: its rows were not overwritten while they were copied
        end = fmt.END_NAMES.get(int(table.end[position]))
        return Episode(id=episode_id, slot=slot, length=length, end=end, rows=rows, has_final=has_final, meta=meta,
                       continues=None if continues < 0 else int(continues), continued_by=self._successor(episode_id))

    def _successor(self, episode_id: int) -> int | None:
        """The id of the live segment that continues episode ``episode_id`` (None: none, as the list knows)."""
        store = self._store
        if not store.meta.links:
            return None
        if self._successors is None:  # once per list: the linked segments and what they continue, by the latter
            live = self.table if self._complete else store.live_table(catch_up=False)
            links = store.links(live)
            order = np.argsort(links, kind="stable")
            self._successors = links[order], live.ids[order]
        continued, ids = self._successors
        where = np.searchsorted(continued, episode_id)
        return int(ids[where]) if where < len(continued) and continued[where] == episode_id else None

    def _check_live(self, position: int) -> None:
        """Raise if the store no longer holds the episode at table ``position`` where the list says (a ring
        writer evicted it, ``clear()``, a grow moved its slot, an edit removed or trimmed it). The writer's own
        store holds the newest state; a reader reads meta.json again when its stamp changed (a writer commits
        an eviction there before it overwrites a row), as views do."""
        store, episode_id = self._store, int(self.table.ids[position])
        if not store.is_writer and store.meta_stamp() != store.read_stamp:
            store.refresh()  # (also: the store_id check, and a grown capacity adopted)
        first = store.meta.state.first_episode
        if episode_id < first:
            raise SampleExpiredError(
                f"episode {episode_id} is no longer in the buffer (the oldest live episode is now {first}: the "
                f"ring evicted it, or the buffer was cleared, since the list of episodes was made); read the list "
                f"again with buffer.episodes()")
        if store.capacity != self._capacity:
            raise SampleExpiredError(
                "the buffer was grown since the list of episodes was made (episode slots moved); read the list "
                "again with buffer.episodes()")
        if store.meta.state.edits != self._edits:  # an edit since: is this episode's entry still the list's?
            slot = int(self.table.slots[position])
            entry = store.entries(np.array([slot]))
            if int(entry["end"][0]) == fmt.REMOVED or int(entry["id"][0]) != episode_id:
                raise SampleExpiredError(
                    f"episode {episode_id} is no longer in the buffer (delete_episodes removed it since the list of "
                    f"episodes was made); read the list again with buffer.episodes()")
            if any(int(entry[name][0]) != int(getattr(self.table, name)[position])
                   for name in ("start", "length", "end", "final")):
                raise SampleExpiredError(
                    f"episode {episode_id} was trimmed, or its rows moved by compact(), since the list of episodes "
                    f"was made; read the list again with buffer.episodes()")
