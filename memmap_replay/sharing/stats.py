"""Field statistics for normalization: running moments kept as episodes commit, and on-demand summaries.

Running moments. For each tracked step field, per element of the field (an observation of shape (17,)
gets 17 means): count, mean, M2 (the sum of squared deviations), min and max, in float64. Each commit
folds its episodes in with Chan et al.'s pairwise update (stable: no sum of squares is ever formed), so
keeping them costs a pass over the episode's rows already in RAM, never a reread of the store.

- They count the transition rows of every episode committed since the store was created (not the
  final-observation row). In a ring buffer that includes evicted episodes, as a running normalizer's
  statistics do; ``stats(recompute=True)`` gives them over the live episodes only, by reading them.
- Tracked by default: numeric (bool, int, float) fields with at most ``TRACK_LIMIT`` numbers per row:
  observations, actions, rewards, not images. Any other field's statistics are computed on request by
  reading the live episodes (``stats(fields=['image'])``), as are quantiles.
- On disk: ``stats/running.npz`` (plain arrays, read with ``allow_pickle=False``): per field
  ``<field>.count|mean|m2|min|max``; ``covers``, the episode ids folded in (ids below it);
  ``episodes``, how many episodes that is; ``store_id``, the store they belong to. It is derived data, saved atomically
  at most once a second and on close: whoever reads it folds in the live episodes it does not cover yet, and a damaged
  or missing file starts afresh from the live episodes. After a crash of a ring writer, episodes evicted before the file
  caught up are missing from the running moments (``StoreStats.episodes_counted`` says how many are in).

Per channel (``FieldStats.channels``): an image field, uint8 of three axes that ``images.image_layout``
reads as (C, H, W) or (H, W, C) (a last axis of 1, 3 or 4, else a first axis of 1 or 3), also gets
count, mean, std, min and max per channel, pooled exactly from the per-element moments (every element
counts as many rows): arrays of shape (C,), ``count`` being rows x H x W. No quantiles per channel.
Other fields (a float image, a frame stack (4, 84, 84), a 2-D grid) have ``channels`` None.

LeRobot's ``meta/stats.json`` (``StoreStats.to_lerobot()``): one key per field, each with ``mean``, ``std``,
``min``, ``max`` (nested lists) and ``count`` (the rows counted, as a list of one int); an image's values are per
channel with the field's other axes kept as 1 ((C, 1, 1) or (1, 1, C): they broadcast against a stored row), a
scalar field's are lists of one value. Values are in the stored units (0-255 for uint8 images; LeRobot
computes image statistics after scaling to [0, 1]: divide by 255 for that), NaN and inf as null.

Episode summaries (always over the live episodes): count, and min/max/mean/std of the length and,
when the store has a scalar ``reward`` (or ``rewards``) field, of the return (the sum of rewards).

Compression (``compression_summary``): per compressed field, its codec (``zstd-3``) and the measured ratio, the raw
bytes of the live rows (final-observation rows included) over the bytes of their encoded frames, read from the
field's index (no frame is decoded, so it needs no codec package). ``info``, ``stats`` and the card show it.
"""

from __future__ import annotations

import json
import math
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, cast

import numpy as np

from ..core import folderio
from ..errors import OptionError
from ..core.format import STATS_DIR, parse_npy_header
from ..core.options import check_quantiles, names as option_names
from ..core.store import CommitObserver, observe_commits
from .images import image_layout
from .returns_cache import ReturnsCache, cached_returns

__all__ = ["FieldStats", "StoreStats", "RunningStats", "TRACK_LIMIT", "channel_layout", "compression_summary",
           "ratio_text"]

TRACK_LIMIT = 1024  # numbers per row: fields up to this size are tracked on commit
RUNNING_FILE = "running.npz"
_MAX_RUNNING_BYTES = 64 << 20  # stats/running.npz is refused (and rebuilt) beyond this
_NPY_HEADER_ROOM = 4096  # what a member may hold beyond its array's bytes (numpy's header)
_SAVE_EVERY = 1.0  # seconds between saves of the running moments by a writer
_REWARD_FIELDS = ("reward", "rewards")
_READ_BYTES = 16 << 20  # float64 bytes per read when computing from the live episodes (bounds memory)


@dataclass
class _Moments:
    """count, mean, M2, min, max per element (float64 arrays of the field's shape)."""

    count: int
    mean: np.ndarray
    m2: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> "_Moments":
        return cls(0, np.zeros(shape), np.zeros(shape), np.full(shape, np.inf), np.full(shape, -np.inf))

    @classmethod
    def of(cls, rows: np.ndarray) -> "_Moments":
        if len(rows) == 0:
            return cls.empty(rows.shape[1:])
        x = rows.astype(np.float64, copy=False)
        with np.errstate(invalid="ignore", over="ignore"):  # inf or NaN in the data: NaN moments, as numpy's
            mean = x.mean(axis=0)
            return cls(len(x), mean, np.square(x - mean).sum(axis=0), x.min(axis=0), x.max(axis=0))

    def merge(self, other: "_Moments") -> "_Moments":
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        with np.errstate(invalid="ignore", over="ignore"):
            delta = other.mean - self.mean
            return _Moments(n, self.mean + delta * (other.count / n),
                           self.m2 + other.m2 + np.square(delta) * (self.count * other.count / n),
                           np.minimum(self.low, other.low), np.maximum(self.high, other.high))


def channel_layout(spec) -> str | None:
    """'CHW' or 'HWC' for an image field (uint8, three axes, channels first or last as ``image_layout``
    guesses them), else None: the fields whose statistics also come per channel."""
    if spec.dtype != np.uint8 or len(spec.shape) != 3 or 0 in spec.shape:
        return None
    layout = image_layout(spec.shape)
    return layout if layout in ("CHW", "HWC") else None


@dataclass
class FieldStats:
    """Statistics of one field, per element: arrays of the field's shape (float64). An image field's
    ``channels`` holds the same per channel (arrays of shape (C,)) and ``layout`` says where its channel
    axis is ('CHW' or 'HWC'); both are None for other fields."""

    count: int
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    quantiles: dict[float, np.ndarray] = field(default_factory=dict)
    channels: "FieldStats | None" = None
    layout: str | None = None

    @classmethod
    def of(cls, moments: _Moments) -> "FieldStats":
        std = np.sqrt(moments.m2 / moments.count) if moments.count else np.full_like(moments.mean, np.nan)
        nan = np.full_like(moments.mean, np.nan)
        empty = moments.count == 0
        return cls(moments.count, nan if empty else moments.mean, std, nan if empty else moments.low,
                   nan if empty else moments.high)

    def to_dict(self) -> dict:
        """Plain values that ``json.dumps`` takes: count, and mean/std/min/max (and quantiles, keyed by
        their str) as nested lists, NaN and inf as None."""
        out = {"count": self.count, **{key: _as_json(getattr(self, key)) for key in ("mean", "std", "min", "max")}}
        if self.quantiles:
            out["quantiles"] = {str(q): _as_json(value) for q, value in self.quantiles.items()}
        if self.channels is not None:
            out["channels"] = {"layout": self.layout, **self.channels.to_dict()}
        return out

    def per_channel(self, layout: str) -> "FieldStats":
        """These per-element statistics of a (C, H, W) ('CHW') or (H, W, C) ('HWC') field pooled per channel:
        exact, since every element counts the same rows (population std, as per element)."""
        axes = (1, 2) if layout == "CHW" else (0, 1)
        mean, std = np.asarray(self.mean, np.float64), np.asarray(self.std, np.float64)
        pixels = math.prod(mean.shape[axis] for axis in axes)
        channel_mean = mean.mean(axis=axes)
        with np.errstate(invalid="ignore"):
            variance = (np.square(std) + np.square(mean - np.expand_dims(channel_mean, axes))).mean(axis=axes)
        return FieldStats(self.count * pixels, channel_mean, np.sqrt(np.maximum(variance, 0)),
                          np.asarray(self.min, np.float64).min(axis=axes),
                          np.asarray(self.max, np.float64).max(axis=axes))

    def to_lerobot(self) -> dict:
        """This field as an entry of LeRobot's ``meta/stats.json``: mean, std, min, max as nested lists (per
        channel for an image, shaped (C, 1, 1) or (1, 1, C); a scalar as a list of one value) and count
        (the rows counted, i.e. steps, as LeRobot counts frames, also for an image) as a list of one int;
        NaN and inf as null."""
        source, shape = self, np.shape(self.mean)
        if self.channels is not None:
            source = self.channels
            shape = (-1, 1, 1) if self.layout == "CHW" else (1, 1, -1)
        elif shape == ():
            shape = (1,)
        return {**{key: _as_json(np.reshape(np.asarray(getattr(source, key), np.float64), shape))
                   for key in ("mean", "std", "min", "max")}, "count": [int(self.count)]}

    def to_json(self, **dumps_options: Any) -> str:
        """``to_dict()`` as a JSON string (``dumps_options`` go to ``json.dumps``, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), **dumps_options)


@dataclass
class StoreStats:
    """What ``buffer.stats()`` returns: per field statistics and a summary of the live episodes."""

    fields: dict[str, FieldStats]
    episodes: dict[str, Any]
    episodes_counted: int  # episodes in the running moments (every committed one unless recompute=True)

    def to_dict(self) -> dict:
        """Plain values that ``json.dumps`` takes: ``fields`` (name -> ``FieldStats.to_dict()``),
        ``episodes`` and ``episodes_counted``."""
        return {"fields": {name: value.to_dict() for name, value in self.fields.items()},
                "episodes": _plain(self.episodes), "episodes_counted": self.episodes_counted}

    def to_lerobot(self) -> dict:
        """LeRobot's ``meta/stats.json``: field name -> ``FieldStats.to_lerobot()`` (see the module docstring)."""
        return {name: value.to_lerobot() for name, value in self.fields.items()}

    def write_lerobot(self, path: str | os.PathLike) -> Path:
        """``to_lerobot()`` written to ``path`` (e.g. ``stats.json``) as indented JSON, atomically (a temporary
        file beside it, then ``os.replace``); returns the path."""
        from .checksums import check_new_path, _write_atomic  # noqa: PLC0415

        path = Path(path)
        if not path.parent.is_dir():
            raise OptionError(f"the statistics file {path} must be in an existing folder ({path.parent} is not one); "
                              f"create the folder first or choose another path")
        check_new_path(path, "the statistics file")
        _write_atomic(path, (json.dumps(self.to_lerobot(), indent=2) + "\n").encode("utf-8"))
        return path

    def to_json(self, **dumps_options: Any) -> str:
        """All of it as a JSON string (``to_dict()`` through ``json.dumps``; ``dumps_options`` go to it, e.g.
        ``indent=2``): NaN and inf, which JSON lacks, are null."""
        return json.dumps(self.to_dict(), **dumps_options)


def _plain(value: Any) -> Any:
    """Nested dicts of numbers as plain Python values, NaN and inf as None (JSON has neither)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _as_json(array: np.ndarray) -> Any:
    """A float array as JSON (NaN and inf as null: JSON has neither)."""
    clean = np.where(np.isfinite(array), array, np.nan).astype(object)
    clean[~np.isfinite(array)] = None
    return clean.tolist()


def _tracked_by_default(schema) -> tuple[str, ...]:
    return tuple(name for name, spec in schema.fields.items()
                 if spec.dtype.kind in "biuf" and math.prod(spec.shape) <= TRACK_LIMIT)


def _expected_members(schema) -> dict[str, int]:
    """The members stats/running.npz may hold, and the bytes of each array."""
    sizes = {"covers": 8, "episodes": 8, "store_id": 4 * 64}
    for name in _tracked_by_default(schema):
        nbytes = 8 * math.prod(schema.fields[name].shape)
        sizes.update({f"{name}.count": 8, **{f"{name}.{part}": nbytes for part in ("mean", "m2", "min", "max")}})
    return sizes


def _read_running(folder: Path, schema) -> dict[str, np.ndarray]:
    """The arrays of stats/running.npz, read only after every member was checked against the names and sizes the
    schema allows (an unknown or oversized member, a zip bomb, is never inflated: ValueError)."""
    path = folder / STATS_DIR / RUNNING_FILE
    expected = _expected_members(schema)
    with os.fdopen(folderio.open_read(folder, path), "rb") as file:
        if os.fstat(file.fileno()).st_size > _MAX_RUNNING_BYTES:
            raise ValueError(f"{path} is over {_MAX_RUNNING_BYTES} bytes")
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else None
                if name not in expected or info.file_size > expected[name] + _NPY_HEADER_ROOM:
                    raise ValueError(f"{path} holds a member {info.filename!r} of {info.file_size} bytes that this "
                                     f"store's statistics never have")
                with archive.open(info) as member:  # numpy allocates what the header declares: check it first
                    dtype, shape, _ = parse_npy_header(member)
                if dtype.hasobject or dtype.itemsize * math.prod(shape) > expected[name]:
                    raise ValueError(f"{path}: member {info.filename!r} declares {dtype} of shape {shape}, more "
                                     f"than this store's statistics hold")
        file.seek(0)
        with np.load(file, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}


class RunningStats:
    """The running moments of the tracked fields and the episode ids they cover."""

    def __init__(self, moments: dict[str, _Moments], covers: int, episodes: int, store_id: str):
        self.moments, self.covers, self.episodes, self.store_id = moments, covers, episodes, store_id
        self.saved_at = time.monotonic()

    @classmethod
    def fresh(cls, schema, store_id: str) -> "RunningStats":
        moments = {name: _Moments.empty(schema.fields[name].shape) for name in _tracked_by_default(schema)}
        return cls(moments, 0, 0, store_id)

    @classmethod
    def load(cls, folder: Path, schema, store_id: str) -> "RunningStats":
        """From ``stats/running.npz``; a fresh start when it is missing, damaged, or another store's."""
        try:
            arrays = _read_running(Path(folder), schema)
            if str(arrays["store_id"]) != store_id:
                raise ValueError("another store's statistics (the folder was overwritten)")
            moments = {}
            for name in _tracked_by_default(schema):
                parts = [arrays[f"{name}.{part}"] for part in ("count", "mean", "m2", "min", "max")]
                if any(part.shape != schema.fields[name].shape or part.dtype != np.float64 for part in parts[1:]):
                    raise ValueError(f"{name}: wrong shape")
                moments[name] = _Moments(int(parts[0]), *parts[1:])
            return cls(moments, int(arrays["covers"]), int(arrays["episodes"]), store_id)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError):
            return cls.fresh(schema, store_id)

    def save(self, folder: Path) -> None:
        """Atomically (tmp file, then replace); a failure leaves the previous file (it is derived data)."""
        directory = Path(folder) / STATS_DIR
        arrays = {"covers": np.int64(self.covers), "episodes": np.int64(self.episodes),
                  "store_id": np.str_(self.store_id)}
        for name, moments in self.moments.items():
            arrays.update({f"{name}.count": np.int64(moments.count), f"{name}.mean": moments.mean,
                           f"{name}.m2": moments.m2, f"{name}.min": moments.low, f"{name}.max": moments.high})
        try:
            folderio.make_dir(folder, directory)
            folderio.write_atomic(folder, directory / RUNNING_FILE, lambda out: np.savez(out, **arrays))
        except OSError:  # a full disk, a read-only folder: the previous file stays (a fresh temp name is removed)
            return
        self.saved_at = time.monotonic()

    def add(self, rows: Mapping[str, list[np.ndarray]], length: int) -> None:
        """Fold in one episode's transition rows (its rows as chunks, as a writer hands them over)."""
        for name in self.moments:
            taken = 0
            for chunk in rows[name]:
                part = chunk[: length - taken]
                taken += len(part)
                self.moments[name] = self.moments[name].merge(_Moments.of(part))

    def committed(self, episodes: Iterable, next_episode: int, folder: Path) -> None:
        """A writer's hook after a commit: fold the episodes in, save now and then."""
        for episode in episodes:
            self.add(episode.rows, episode.length)
            self.episodes += 1
        self.covers = next_episode
        if time.monotonic() - self.saved_at >= _SAVE_EVERY:
            self.save(folder)

    def catch_up(self, store) -> None:
        """Fold in the live episodes this has not seen (committed after the last save, or never saved)."""
        table = store.live_table()
        new = table.ids >= self.covers
        if new.any():
            for name in self.moments:
                self.moments[name] = self.moments[name].merge(
                    _read_moments(store, name, table.start[new], table.length[new]))
            self.episodes += int(new.sum())
        self.covers = max(self.covers, store.meta.state.next_episode)


def _read_moments(store, name: str, starts: np.ndarray, lengths: np.ndarray) -> _Moments:
    """Moments of a field over the given row ranges, read from the store in bounded chunks."""
    array = store.steps[name].array()
    moments = _Moments.empty(store.meta.schema.fields[name].shape)
    for _, rows in _chunks(starts, lengths, _read_rows(store, name)):
        moments = moments.merge(_Moments.of(array[rows]))
    return moments


def _read_rows(store, name: str) -> int:
    """Rows per read of a field: _READ_BYTES as float64."""
    return max(1, _READ_BYTES // (8 * max(1, math.prod(store.meta.schema.fields[name].shape))))


def _chunks(starts: np.ndarray, lengths: np.ndarray, size: int) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """(episodes, rows): whole episodes in row order (indices into ``starts``) and their rows, about
    ``size`` rows at a time (one episode at least), so a read is one sorted gather per chunk."""
    order = np.argsort(starts, kind="stable")
    ends = np.cumsum(lengths[order])
    first = 0
    while first < len(order):
        begin = ends[first] - lengths[order[first]]
        last = max(first + 1, int(np.searchsorted(ends, begin + size, "right")))
        picked = order[first:last]
        n = lengths[picked]
        offsets = np.repeat(starts[picked] - (np.cumsum(n) - n), n)
        yield picked, np.arange(int(n.sum()), dtype=np.int64) + offsets
        first = last


def _summary(values: np.ndarray) -> dict:
    if values.size == 0:
        return {"min": None, "max": None, "mean": None, "std": None}
    values = values.astype(np.float64)
    return {"min": float(values.min()), "max": float(values.max()), "mean": float(values.mean()),
            "std": float(values.std())}


def return_field(schema) -> str | None:
    """The field whose sum over an episode is its return: the first scalar number field named as a reward."""
    return next((name for name in _REWARD_FIELDS if name in schema.fields and schema.fields[name].shape == ()
                 and schema.fields[name].dtype.kind in "biuf"), None)


def episode_summary(store) -> dict:
    table = store.live_table()
    out = {"count": int(len(table.ids)), "steps": int(table.length.sum()), "length": _summary(table.length)}
    reward = return_field(store.meta.schema)
    if reward is not None:
        out["return_field"] = reward
        out["return"] = _summary(cached_returns(store, table, reward, _episode_returns))
    return out


def compression_summary(store) -> dict[str, dict[str, Any]]:
    """Per compressed step field: ``codec`` ("zstd-3"), ``raw_bytes`` and ``encoded_bytes`` of its live rows
    (final-observation rows included) and ``ratio``, raw over encoded (None without live rows). Reads the fields'
    index files only: no frame is decoded."""
    encoded = store.meta.schema.encoded
    if not encoded:
        return {}
    table = store.live_table()
    spans = table.length + table.final.astype(np.int64)  # the rows each live episode holds
    out = {}
    for name, spec in encoded.items():
        index = store.steps[name].index.array()
        stored = 0
        for _, rows in _chunks(table.start, spans, _READ_BYTES // 16):
            stored += int(index[rows, 1].sum())
        raw = int(spans.sum()) * spec.row_nbytes
        out[name] = {"codec": str(spec.codec), "raw_bytes": raw, "encoded_bytes": stored,
                     "ratio": raw / stored if stored else None}
    return out


def ratio_text(ratio: float | None) -> str:
    """A compression ratio for people: '312x', '44x', '2.5x'; '-' for none."""
    if ratio is None or not math.isfinite(ratio):
        return "-"
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.2g}x"


def _episode_returns(store, name: str, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum of the field over each episode's transition rows (in float64), by differences of running sums."""
    array = store.steps[name].array()
    returns = np.zeros(len(starts))
    for picked, rows in _chunks(starts, lengths, _read_rows(store, name)):
        sums = np.concatenate(([0.0], np.cumsum(array[rows], dtype=np.float64)))
        ends = np.cumsum(lengths[picked])
        returns[picked] = sums[ends] - sums[ends - lengths[picked]]
    return returns


def compute_stats(store, running: RunningStats | None, *, fields: Any = None, quantiles: Any = None,
                  recompute: bool = False) -> StoreStats:
    """The statistics ``buffer.stats()`` returns (see the module docstring). ``running`` is the writer's
    (current); None loads the saved moments and folds in what they miss, in memory."""
    schema = store.meta.schema
    if fields is None:
        wanted = None
    else:
        wanted = option_names(fields, "fields", schema.fields)
        complex_ = [name for name in wanted if schema.fields[name].dtype.kind not in "biuf"]
        if complex_:
            raise OptionError(f"statistics are kept for bool, int and float fields (got {complex_}, of dtype "
                                   f"{schema.fields[complex_[0]].dtype}); take .real/.imag yourself")
    qs = check_quantiles(quantiles)
    if running is None:
        running = RunningStats.load(store.folder, schema, store.meta.store_id)
        running.catch_up(store)
    table = store.live_table()
    if wanted is None:
        wanted = tuple(name for name, spec in schema.fields.items() if spec.dtype.kind in "biuf") \
            if recompute else tuple(running.moments)
    out = {}
    for name in wanted:
        if name in running.moments and not recompute:
            moments = running.moments[name]
        else:
            moments = _read_moments(store, name, table.start, table.length)
        out[name] = FieldStats.of(moments)
        if qs:
            out[name].quantiles = _live_quantiles(store, name, table, qs)
        layout = channel_layout(schema.fields[name])
        if layout is not None:
            out[name].channels, out[name].layout = out[name].per_channel(layout), layout
    counted = len(table.ids) if recompute else running.episodes
    return StoreStats(out, episode_summary(store), counted)


def _live_quantiles(store, name: str, table, qs: tuple[float, ...]) -> dict[float, np.ndarray]:
    """Exact quantiles over the live transition rows (they are read into memory: one field at a time)."""
    shape = store.meta.schema.fields[name].shape
    if not len(table.ids):
        return {q: np.full(shape, np.nan) for q in qs}
    array = store.steps[name].array()
    rows = np.concatenate([array[part] for _, part in _chunks(table.start, table.length, _read_rows(store, name))])
    return dict(zip(qs, np.quantile(rows.astype(np.float64), qs, axis=0)))


class _StatsObserver(CommitObserver):
    """Keeps a writer's running statistics: loaded and caught up before its first commit, fed each commit's
    rows (already in RAM), saved now and then and on ``sync``/``close``."""

    def __init__(self) -> None:
        self.running: RunningStats | None = None
        self.returns: ReturnsCache | None = None  # each episode's return, for the card's summary

    def changing(self, store) -> None:
        if self.running is None:
            folderio.remove_temps(Path(store.folder) / STATS_DIR, RUNNING_FILE)  # a killed writer's

    def committing(self, store, episodes) -> None:
        if self.running is None:  # the saved moments, caught up with the live episodes
            self.running = RunningStats.load(store.folder, store.meta.schema, store.meta.store_id)
            self.running.catch_up(store)

    def editing(self, store, kind) -> None:
        """An edit that removes or adds rows (a delete, a trim, a new field) changes what the moments cover: they
        are recomputed from the episodes left when next needed (the file goes now, so that no reader takes it). A
        relabel or a compact changes no row's value: they stay."""
        if kind in ("relabel", "compact"):
            return
        self.running = None
        if (Path(store.folder) / STATS_DIR).is_dir():  # (none before the first save)
            folderio.remove(store.folder, Path(store.folder) / STATS_DIR / RUNNING_FILE)

    def edited(self, store, paths, slots) -> None:
        """The returns of the episodes an edit changed (a trim) are summed again; the first edit of a store written
        before the returns were kept sums every episode's, once."""
        returns = self._returns(store)
        if returns is None:
            return
        table = store.live_table()
        changed = table.select(np.isin(table.slots, slots))
        returns.edited(changed.ids, changed.start, changed.length, _episode_returns)
        returns.fill(table, _episode_returns)

    def _returns(self, store) -> ReturnsCache | None:
        field = return_field(store.meta.schema)
        if field is not None and (self.returns is None or self.returns.field != field):
            self.returns = ReturnsCache(store, field)
        return self.returns if field is not None else None

    def committed(self, store, episodes) -> None:
        returns = self._returns(store)
        if returns is not None:
            returns.committed(episodes)
        # (committing() loaded them)
        cast(RunningStats, self.running).committed(episodes, store.meta.state.next_episode, store.folder)

    def flush(self, store, *, closing: bool) -> None:
        if self.running is not None:
            self.running.save(store.folder)
        if closing and self.returns is not None:
            self.returns.close()


@observe_commits
def _track(store) -> _StatsObserver | None:
    return _StatsObserver() if store.track_stats else None


def running_stats(store) -> RunningStats | None:
    """The running moments a writing store keeps in this process (None: not tracked, or nothing committed yet)."""
    if not store.track_stats:
        return None
    return next((observer.running for observer in store._observers or () if isinstance(observer, _StatsObserver)),
                None)
