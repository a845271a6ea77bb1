"""What the viewer's page asks the server for, as plain JSON-ready values (and frames as PNG bytes).

``StoreApi`` opens the store read-only (no writer lock: a writer may keep appending) the first time it is
asked, and follows the writer: every answer first looks at meta.json's stamp and refreshes the store when
it changed (``EpisodeStore.refresh``), so new episodes appear and evicted ones go. One lock serializes
the reads of the store (its maps and table are not meant for threads); PNG encoding happens outside it.

Every name the page sends (an episode id, a field, a column) is checked against the store; an unknown
one is an ``OptionError``, an episode no longer live a ``SampleExpiredError``. Nothing here builds a path.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np

from ...core import format as fmt
from ...core.episodes import EpisodeList
from ...core.index import EpisodeTable
from ...core.store import EpisodeStore
from ...errors import CorruptStoreError, IndexRangeError, OptionError, SampleExpiredError
from ..card import read_card
from ..images import peak, resolve_range
from ..stats import compute_stats
from .priorities import episode_priorities
from .pictures import LruBytes, encode_png, image_fields, plot_fields
from .table import TABLE_LIMIT, EpisodeColumns

__all__ = ["StoreApi"]

_SERIES_POINTS = 1000  # the overview's curves: at most this many points (bins of episodes: mean, min, max)
_HISTOGRAM_BINS = 30
_STEP_POINTS = 5000  # an episode's per-step series: at most this many points (min and max per bucket of steps)
_MAX_FRAME_PIXELS = 4096 * 4096  # pixels of one frame (a tiled stack: all of its frames)
_MAX_FRAME_BYTES = 64 << 20  # bytes of one stored row of an image field read for a frame
_RANGE_ROWS = 16  # rows of an episode sampled for a float image field's value range
_CATCH_UP = 5  # reads of the table a ring writer may outrun before its state is shown as it is
_MAX_RANGES = 10_000  # value ranges of float image fields kept (per field and episode)
_CARD_KEYS = ("name", "description", "license", "author", "algorithm", "code_url")


class StoreApi:
    """The answers of the viewer's JSON endpoints for the store at ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)
        self._lock = threading.RLock()
        self._store: EpisodeStore | None = None
        self._columns: EpisodeColumns | None = None
        self._table: EpisodeTable | None = None
        self._state: fmt.State | None = None
        self._columns_state: fmt.State | None = None
        self._stats: tuple[Any, dict] | None = None
        self._ranges: dict[tuple[str, int], Any] = {}
        self.frames = LruBytes()

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    # ---- following the store --------------------------------------------------------------------------

    def _replaced(self, store: EpisodeStore) -> bool:
        """True when meta.json now names another store (the folder was overwritten). Call under the lock."""
        try:
            return fmt.read_meta(self.folder).store_id != store.meta.store_id
        except (CorruptStoreError, OSError):
            return False  # (being written: the refresh's error is said, and the next request looks again)

    def _reopen(self) -> None:
        """Close the store and drop everything known of it: the next ``_current`` opens the folder's new store."""
        self.close()
        self._columns = self._table = self._state = self._columns_state = self._stats = None
        self._ranges.clear()
        self.frames.clear()

    def _current(self, *, columns: bool = False):
        """``_follow``; a folder overwritten by a new store since (a new ``store_id``) is opened again, and
        every cache of the old one dropped (frames, value ranges, columns, returns, statistics)."""
        for attempt in range(3):
            try:
                return self._follow(columns=columns)
            except CorruptStoreError:
                if attempt == 2 or self._store is None or not self._replaced(self._store):
                    raise
                self._reopen()

    def _follow(self, *, columns: bool = False):
        """The store, refreshed if a writer committed since, and its live table; ``columns``: the episodes
        table's columns brought up to date too (its returns read: only the overview and the table need
        them, so the page itself is answered before they are summed). Call under the lock."""
        if self._store is None:
            self._store = EpisodeStore.open(self.folder, "r")
            self._columns = EpisodeColumns(self._store.schema)
        store = self._store
        if self._table is None or store.meta_stamp() != store.read_stamp:
            store.refresh()
        if self._table is None or store.meta.state != self._state:
            edited = self._state is not None and store.meta.state.edits != self._state.edits
            self._table, self._state = store.live_table(), store.meta.state
            if len(self._ranges) > _MAX_RANGES or edited:  # (a trim moves an episode's steps: its range too)
                self._ranges.clear()
        if columns and self._columns_state != self._state:
            for _ in range(_CATCH_UP):
                cast(EpisodeColumns, self._columns).update(store, self._table)  # (made with the store)
                # a ring writer (or clear() and new episodes) may have overwritten episodes whose returns were
                # just summed: then take its newer state (the returns of the episodes still live were read
                # whole, and are kept)
                if not len(self._table) or store.meta_stamp() == store.read_stamp or \
                        fmt.read_meta(store.folder).state.first_episode <= self._table.ids[0]:
                    break
                store.refresh()
                self._table, self._state = store.live_table(), store.meta.state
            self._columns_state = self._state
        return store, self._table

    def store_id(self) -> str:
        """The identity of the store served (meta.json's ``store_id``: a new one when the folder is overwritten)."""
        with self._lock:
            store, _ = self._current()
            return store.meta.store_id

    def state(self) -> dict:
        """What changes when a writer commits: the page polls this to follow a live store."""
        with self._lock:
            store, table = self._current()
            return {"store": store.meta.store_id, "episodes": len(table), "steps": int(table.length.sum()),
                    "first": store.meta.state.first_episode, "next": store.meta.state.next_episode,
                    "edits": store.meta.state.edits}  # (delete_episodes, trim and relabel change no other one)

    # ---- overview ------------------------------------------------------------------------------------

    def overview(self) -> dict:
        """The card, counts, the end mix, return and length over episode order and their histograms."""
        with self._lock:
            store, table = self._current(columns=True)
            columns = cast(EpisodeColumns, self._columns)  # (made with the store)
            schema, capacity = store.schema, store.capacity
            images, plots = image_fields(schema), plot_fields(schema)
            fields = [{"name": name, "dtype": spec.dtype.name, "shape": list(spec.shape),
                       "kind": "image" if name in images else "plot" if name in plots else "other"}
                      for name, spec in schema.fields.items()]
            meta = [{"name": name, "dtype": spec.dtype.name, "shape": list(spec.shape)}
                    for name, spec in schema.meta_fields.items()]
            ends = columns.values["end"]
            curves = {"length": columns.values["length"].astype(np.float64)}
            if columns.reward:
                curves["return"] = columns.values["return"]
            out = {
                "folder": str(self.folder), "episodes": len(table), "steps": int(table.length.sum()),
                "capacity": {"max_episodes": capacity.max_episodes, "max_timesteps": capacity.max_timesteps,
                             "max_steps": capacity.max_steps, "circular": capacity.circular},
                "ends": {"terminated": int((ends == "terminated").sum()), "truncated": int((ends == "truncated").sum()),
                         "not recorded": int((ends == "").sum())},
                "fields": fields, "meta_fields": meta, "return_field": columns.reward,
                "columns": list(columns.columns),
                "series": {name: _series(columns.ids, values) for name, values in curves.items()},
                "histograms": {name: _histogram(values) for name, values in curves.items()},
            }
        out["card"], out["card_error"] = _card(self.folder)
        return out

    def stats(self) -> dict:
        """Per-field statistics (``buffer.stats()``'s), summarized per field for a table; cached per state."""
        with self._lock:
            store, _ = self._current()
            if self._stats is None or self._stats[0] != self._state:
                result = compute_stats(store, None)
                rows = [{"name": name, "shape": list(np.shape(value.mean)), "count": value.count,
                         **{key: _summary(getattr(value, key), key) for key in ("mean", "std", "min", "max")}}
                        for name, value in result.fields.items()]
                self._stats = (self._state, {"fields": rows, "episodes_counted": result.episodes_counted})
            return self._stats[1]

    # ---- episodes ------------------------------------------------------------------------------------

    def episodes(self, *, offset: int = 0, limit: int = 50, sort: str = "id", descending: bool = False,
                 filters: tuple[str, ...] = ()) -> dict:
        """One page of the episodes table (``EpisodeColumns.query``)."""
        if not 1 <= limit <= TABLE_LIMIT:
            raise OptionError(f"limit must be in [1, {TABLE_LIMIT}] (got {limit})")
        if offset < 0:
            raise OptionError(f"offset must be at least 0 (got {offset})")
        with self._lock:
            self._current(columns=True)
            columns = cast(EpisodeColumns, self._columns)  # (made with the store)
            return columns.query(offset=offset, limit=limit, sort=sort, descending=descending, filters=filters)

    def _position(self, table, episode_id: int) -> int:
        positions = table.positions_of(np.array([episode_id], dtype=np.int64))
        if positions is None:
            first = int(table.ids[0]) if len(table) else None
            held = f"live ids are {first} to {int(table.ids[-1])}" if first is not None else "the store has no episodes"
            raise IndexRangeError(f"episode id {episode_id} is not in the store ({held}); it may have been evicted")
        return int(positions[0])

    def episode(self, episode_id: int) -> dict:
        """One episode: its end, final row, meta values, image fields and the per-step values of its small
        fields (its rows only, through ``EpisodeList``: checked against the ring)."""
        with self._lock:
            store, table = self._current()
            plots = plot_fields(store.schema)
            listed = EpisodeList(store, fields=plots)
            position = listed.position(self._position(listed.table, episode_id))
            episode = listed.read(position)
            priorities = episode_priorities(store, episode_id=episode_id, slot=int(listed.table.slots[position]),
                                            start=int(listed.table.start[position]), length=len(episode))
            ids = listed.table.ids
            neighbours = [int(ids[position - 1]) if position else None,
                          int(ids[position + 1]) if position + 1 < len(ids) else None]
        steps, bucket = _steps_shown(len(episode))
        series = {name: _per_element(episode[name], bucket) for name in plots}
        final = episode.final
        images = image_fields(store.schema)
        frames = len(episode) + (final is not None)
        return {
            "store": store.meta.store_id, "id": episode.id, "position": position, "previous": neighbours[0],
            "next": neighbours[1], "length": len(episode), "end": episode.end,
            "final": final is not None, "continues": episode.continues, "continued_by": episode.continued_by,
            "meta": {name: _json(value) for name, value in episode.meta.items()},
            "images": [{**info, "frames": frames} for info in images.values()],
            "plots": [{"name": name, "shape": list(store.schema.fields[name].shape), "values": series[name]}
                      for name in plots]
                     + [{"name": f"priority ({name})", "shape": [], "values": _per_element(values, bucket)}
                        for name, values in priorities.items()],
            # a long episode's per-step values: the min and max of every ``bucket`` steps, at the steps ``x``
            "downsampled": None if bucket == 1 else {"bucket": bucket, "x": steps, "points": len(steps)},
            "final_values": None if final is None else {name: _json(final[name]) for name in plots},
        }

    def frame(self, field: str, episode_id: int, step: int, stack: str = "last") -> bytes:
        """Step ``step`` of an image field of an episode as PNG (step = length: its final observation)."""
        with self._lock:
            store, table = self._current()
            # the store's identity in the key: a folder overwritten by a new store has other frames for the same ids;
            # its edits: a trim moves an episode's steps (a frame read before it is put after the edit is not taken)
            key = (store.meta.store_id, store.meta.state.edits, field, episode_id, step, stack)
            cached = self.frames.get(key)
            if cached is not None:
                return cached
            images = image_fields(store.schema)
            if field not in images:
                raise OptionError(f"field must be one of the image fields {sorted(images)} (got {field!r})")
            if stack not in ("last", "tile"):
                raise OptionError(f"stack must be 'last' or 'tile' (got {stack!r})")
            position = self._position(table, episode_id)
            start, length = int(table.start[position]), int(table.length[position])
            rows = length + int(table.final[position])
            if not 0 <= step < rows:
                raise IndexRangeError(f"step must be in [0, {rows}) for episode {episode_id} ({length} steps"
                                      f"{' and its final observation' if rows > length else ''}; got {step})")
            spec, array = store.schema.fields[field], store.step_array(field)
            info = images[field]
            pixels = info["height"] * info["width"] * (info["stack"] if stack == "tile" else 1)
            row_bytes = int(np.prod(spec.shape)) * spec.dtype.itemsize
            if pixels > _MAX_FRAME_PIXELS or row_bytes > _MAX_FRAME_BYTES:
                tiled = f" x {info['stack']} tiled" if stack == "tile" else ""
                raise FrameTooLargeError(
                    f"a frame of {field!r} is too large to show ({info['height']} x {info['width']}{tiled} "
                    f"pixels, {row_bytes >> 20} MB a row; the "
                    f"viewer shows at most {_MAX_FRAME_PIXELS} pixels and {_MAX_FRAME_BYTES >> 20} MB a frame)")
            row = np.array(array[start + step])
            value_range = self._ranges.get((field, episode_id))
            if value_range is None:
                # a float field's range from a few rows spread over the episode (never the whole episode)
                picked = np.unique(np.linspace(0, rows - 1, min(rows, _RANGE_ROWS)).round().astype(np.int64))
                value_range = resolve_range(spec.dtype, None, lambda: max(peak(np.asarray(array[start + int(i)]))
                                                                          for i in picked))
                self._ranges[(field, episode_id)] = value_range
            self._check_live(store, episode_id)
        data = encode_png(spec, row, stack=stack, value_range=value_range)
        self.frames.put(key, data)
        return data

    @staticmethod
    def _check_live(store: EpisodeStore, episode_id: int) -> None:
        """A ring writer (or ``clear()`` and new episodes) may have overwritten the episode while its row was
        read: refuse the row. A writer commits that in meta.json before it overwrites a row: one stat decides
        when meta.json is as the store last read it."""
        if store.meta_stamp() != store.read_stamp and fmt.read_meta(store.folder).state.first_episode > episode_id:
            raise SampleExpiredError(f"episode {episode_id} was evicted by the ring writer (or dropped by clear()) "
                                     f"while its frame was read; go back to the episodes table for the live ones")


class FrameTooLargeError(OptionError):
    """A frame above the viewer's bounds (pixels, or bytes of its stored row): answered 413."""


def _card(folder: Path) -> tuple[dict | None, str | None]:
    """The card's texts (every value a string, a list of them, or None), or the reason it cannot be read."""
    try:
        card = read_card(folder)
    except CorruptStoreError as error:
        return None, str(error)
    if card is None:
        return None, None
    out = {key: getattr(card, key) for key in _CARD_KEYS}
    env = card.env_spec if isinstance(card.env_spec, dict) else {}
    out["env"] = env.get("id") if isinstance(env.get("id"), str) else None
    return out, None


def _json(value: Any) -> Any:
    """A numpy value as plain JSON (nested lists); NaN and inf as None, complex as its magnitude."""
    array = np.asarray(value)
    if array.dtype.kind == "c":
        array = np.abs(array)
    return _finite(array.tolist()) if array.dtype.kind == "f" else array.tolist()


def _finite(value: Any) -> Any:
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value if math.isfinite(value) else None


def _steps_shown(length: int) -> tuple[list[int], int]:
    """The steps a per-step series is shown at: every one up to _STEP_POINTS, else two points (the min and
    the max) per bucket of steps, at the bucket's first and last steps; and the bucket's size (1: every step)."""
    if length <= _STEP_POINTS:
        return list(range(length)), 1
    bucket = -(-length // (_STEP_POINTS // 2))
    starts = np.arange(0, length, bucket)
    return np.stack([starts, np.minimum(starts + bucket, length) - 1], 1).reshape(-1).tolist(), bucket


def _per_element(rows: np.ndarray, bucket: int = 1) -> list[list]:
    """(T, ...) rows as one series per element (bools as 0/1); ``bucket`` > 1: the min and the max of every
    ``bucket`` rows, interleaved (see ``_steps_shown``)."""
    flat: np.ndarray = np.asarray(rows).reshape(len(rows), -1).astype(np.float64)
    if bucket > 1:
        pad = -len(flat) % bucket
        flat = np.concatenate([flat, np.full((pad, flat.shape[1]), np.nan)]).reshape(-1, bucket, flat.shape[1])
        with warnings.catch_warnings():  # an all-NaN bucket: 'All-NaN slice encountered'
            warnings.simplefilter("ignore", RuntimeWarning)
            flat = np.stack([np.nanmin(flat, 1), np.nanmax(flat, 1)], 1).reshape(-1, flat.shape[2])
    return [_json(flat[:, j]) for j in range(flat.shape[1])]


def _series(ids: np.ndarray, values: np.ndarray) -> dict:
    """A curve over episode order: every point, or bins of episodes (mean, min, max) beyond _SERIES_POINTS."""
    values = np.asarray(values, np.float64)
    if len(values) <= _SERIES_POINTS:
        return {"x": ids.tolist(), "mean": _short(values), "min": None, "max": None, "binned": 1}
    size = -(-len(values) // _SERIES_POINTS)
    pad = size * -(-len(values) // size) - len(values)
    bins = np.concatenate([values, np.full(pad, np.nan)]).reshape(-1, size)
    with warnings.catch_warnings():  # an all-NaN bin: 'Mean of empty slice' (warnings are errors in tests)
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, low, high = np.nanmean(bins, 1), np.nanmin(bins, 1), np.nanmax(bins, 1)
    return {"x": ids[::size].tolist(), "mean": _short(mean), "min": _short(low), "max": _short(high), "binned": size}


def _short(values: np.ndarray) -> list:
    """A curve's values to 5 significant digits (what a plot can show; a third of the bytes), NaN as None."""
    return [float(f"{value:.5g}") if math.isfinite(value) else None for value in values.tolist()]


def _histogram(values: np.ndarray) -> dict:
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return {"edges": [], "counts": []}
    low, high = float(values.min()), float(values.max())
    # edges made here, not by np.histogram: a range a few ulps wide (returns summed in another order) makes
    # it raise 'Too many bins for data range'; such a range is one bin, and the edges are always increasing
    scale = max(abs(low), abs(high), 1e-300)
    if not high - low > scale * 1e-9 or not math.isfinite(high - low):
        pad = 0.5 if low == high else 0.0  # one value: a bin of width 1 around it, as np.histogram makes
        return {"edges": [low - pad, high + pad], "counts": [len(values)]}
    edges = np.linspace(low, high, _HISTOGRAM_BINS + 1)
    edges[0], edges[-1] = low, high
    counts = np.bincount(np.clip(np.searchsorted(edges, values, side="right") - 1, 0, _HISTOGRAM_BINS - 1),
                         minlength=_HISTOGRAM_BINS)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def _summary(values: np.ndarray, key: str) -> Any:
    """A statistic of a field for one table cell: the value of a scalar field, the list for up to 4
    elements, else over the elements (the min of the mins, the max of the maxes, the mean of the means)."""
    values = np.asarray(values, np.float64)
    if values.size <= 4:
        return _json(values)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return None
    return float({"min": finite.min, "max": finite.max}.get(key, finite.mean)())
