"""Episode writers: steps are staged in RAM and handed to the store as whole episodes on commit.

Staging makes the per-step path a few memory copies (no page faults on fresh file pages, no I/O) and
makes an episode atomic: until it commits nothing on disk changes, so an exception or a crash
mid-episode leaves the store exactly as it was. Each staging row buffer is reused across episodes.

- ``EpisodeWriter``: one episode, step by step (``one_episode`` / ``begin_episode`` of the buffer).
- ``VectorEpisodeWriter`` (``core/vector.py``): N environments stepping together (gymnasium ``VectorEnv``
  style); each env's episode commits on its own ``terminated``/``truncated`` flag and a fresh one begins.
- ``whole_episode``: a complete episode given as arrays (``store_episode``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Iterable, Mapping, cast

import numpy as np

from .convert import as_array, coerce
from ..errors import InvalidDataError, OptionError
from .options import check_end, did_you_mean, short
from .schema import FieldSpec, Schema
from .store import EpisodeStore, PendingEpisode

__all__ = ["EpisodeWriter", "StagingBuffer", "whole_episode", "segments", "coerce_meta"]

def _unknown(names: Iterable[str], known: Mapping[str, FieldSpec], kind: str) -> InvalidDataError:
    ordered = sorted(names)
    return InvalidDataError(f"unknown {kind} {ordered}: the store's {kind}s are {sorted(known)}"
                            f"{did_you_mean(ordered, known)}")


def _check_final(final: Any) -> Mapping[str, Any] | None:
    """A final observation: None, or a dict of field -> value (one row)."""
    if final is not None and not isinstance(final, Mapping):
        raise InvalidDataError(f"final must be a dict of field -> value, e.g. final=dict(obs=next_obs) "
                               f"(got {type(final).__name__}: {short(final)})")
    return final


def coerce_meta(schema: Schema, meta: Mapping[str, Any], lead: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    extra = set(meta) - set(schema.meta_fields)
    if extra:
        raise _unknown(extra, schema.meta_fields, "meta field")
    return {name: coerce(schema.meta_fields[name], value, lead, kind="meta field") for name, value in meta.items()}


def _full_meta(schema: Schema, meta: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: meta[name] if name in meta else spec.default_row() for name, spec in schema.meta_fields.items()}


def _coerce_steps(schema: Schema, steps: Mapping[str, Any], lead: tuple[int, ...]) -> dict[str, np.ndarray]:
    extra = set(steps) - set(schema.fields)
    if extra:
        raise _unknown(extra, schema.fields, "field")
    return {name: coerce(schema.fields[name], value, lead) for name, value in steps.items()}


def _exact_scalar_check(spec: FieldSpec) -> Callable[[Any], bool]:
    """A cheap test that a Python scalar fits a scalar field as it is (else the full ``coerce`` runs)."""
    if spec.shape != ():
        return lambda value: False
    kind = spec.dtype.kind
    if kind == "f":
        limit = float(np.finfo(spec.dtype).max)
        return lambda value: (type(value) is float and not limit < abs(value) < math.inf) or type(value) is bool
    if kind in "iu":
        info = np.iinfo(spec.dtype)
        low, high = int(info.min), int(info.max)
        return lambda value: (type(value) is int and low <= value <= high) or type(value) is bool
    return lambda value: type(value) is bool


def _check_staging_memory(schema: Schema, num_envs: int, max_timesteps: int) -> None:
    """Refuse a number of envs whose staging rows (and per-env meta) cannot fit in this machine's RAM."""
    rows = min(max_timesteps + 1, StagingBuffer.INITIAL_ROWS)
    per_env = rows * sum(spec.row_nbytes for spec in schema.fields.values()) + 8 \
        + sum(spec.row_nbytes for spec in schema.meta_fields.values())
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # the OS does not say: numpy's allocation decides
        return
    if num_envs * per_env > ram:
        raise OptionError(
            f"num_envs must be at most {max(1, ram // per_env)} on this machine (got {num_envs}): each env stages "
            f"{per_env} bytes in RAM ({rows} rows of every field), {num_envs * per_env} bytes in all, more than "
            f"its {ram} bytes of memory; use fewer environments per writer")


class StagingBuffer:
    """RAM rows for ``num_envs`` episodes in progress: (num_envs, rows, *shape) per field, where rows
    grows by doubling up to max_timesteps + 1 (the final-observation row) as episodes get longer."""

    INITIAL_ROWS = 256

    def __init__(self, schema: Schema, num_envs: int, max_timesteps: int):
        self.schema = schema
        self.num_envs = num_envs
        self.max_timesteps = max_timesteps
        self.rows = min(max_timesteps + 1, self.INITIAL_ROWS)
        self.arrays = {name: np.empty((num_envs, self.rows, *spec.shape), spec.dtype)
                       for name, spec in schema.fields.items()}
        self.defaults = {name: spec.default_row() for name, spec in schema.fields.items()}
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def ensure(self, rows: int) -> bool:
        """Room for ``rows`` rows per env; True if the arrays were replaced (row views must be renewed)."""
        if rows <= self.rows:
            return False
        grown = min(self.max_timesteps + 1, max(rows, 2 * self.rows))
        for name, array in self.arrays.items():
            bigger = np.empty((self.num_envs, grown, *array.shape[2:]), array.dtype)
            bigger[:, : self.rows] = array
            self.arrays[name] = bigger
        self.rows = grown
        return True

    def put(self, values: Mapping[str, np.ndarray], envs: int | np.ndarray, rows: int | np.ndarray) -> None:
        """Write one row per env (values already coerced); fields not given take their default."""
        self.ensure(int(np.max(rows, initial=-1)) + 1)
        for name, array in self.arrays.items():
            array[envs, rows] = values[name] if name in values else self.defaults[name]

    def pending(self, env: int, *, end: str | None, final: Mapping[str, np.ndarray] | None,
                meta: Mapping[str, np.ndarray]) -> PendingEpisode:
        length = int(self.lengths[env])
        if final is not None:
            self.put(final, env, length)
        rows = length + (final is not None)
        return PendingEpisode({name: [array[env, :rows]] for name, array in self.arrays.items()},
                              length, end, final is not None, meta)


_LONGER = ("; grow the buffer to take it: buffer.grow(max_timesteps={length}) (and max_steps when it is full: the "
           "error of a full buffer gives the numbers), or create the buffer with long_episodes='split' to store "
           "longer episodes as linked segments")


def _too_long(max_timesteps: int, who: str, fixes: str) -> InvalidDataError:
    return InvalidDataError(
        f"{who} must have at most max_timesteps={max_timesteps} steps (got one more); {fixes}grow the buffer "
        f"to the longest episode it will take, e.g. buffer.grow(max_timesteps={2 * max_timesteps}) (and "
        f"max_steps when it is full: the error of a full buffer gives the numbers), create it with a larger "
        f"max_timesteps, or with long_episodes='split' to store longer episodes as linked segments")


class EpisodeWriter:
    """One episode in progress. ``meta`` is a dict the caller may fill until the episode commits.

    ``split``: a step past ``max_timesteps`` first commits the steps so far as a segment (its final row is that
    step, the first of the next segment), and the episode goes on in a new segment linked to it."""

    def __init__(self, store: EpisodeStore, staging: StagingBuffer, meta: Mapping[str, Any], *, split: bool = False):
        self.target = store
        self.schema = store.schema
        coerce_meta(self.schema, meta)  # fail early, before any step
        self.meta: dict[str, Any] = dict(meta)
        self.staging = staging
        staging.lengths[0] = 0
        self._t = 0  # steps so far, a Python int: the per-step path avoids numpy scalars
        self._max = staging.max_timesteps
        self.end: str | None = None
        self.final: dict[str, np.ndarray] | None = None
        self._split = split
        self._continues = -1  # the id of the segment the open one continues
        # the per-step fast path, by name: (field spec, this episode's staging rows, scalar test, default)
        self._renew_views()

    @property
    def length(self) -> int:
        return self._t

    def rewind(self, length: int) -> None:
        """Keep only the first ``length`` steps (at most ``self.length``); the next step is step ``length``."""
        self._t = min(self._t, length)

    def _renew_views(self) -> None:
        staging = self.staging
        self._fast = {name: (spec, staging.arrays[name][0], _exact_scalar_check(spec), staging.defaults[name])
                      for name, spec in self.schema.fields.items()}
        self._room = min(staging.rows, self._max)

    def store(self, step: Mapping[str, Any]) -> None:
        t = self._t
        if t >= self._room:
            if t >= self._max:
                if not self._split:
                    raise _too_long(self._max, "the episode", "")
                self._cut(step)  # (its final row may have grown the staging arrays: views renewed below)
                t = 0
                self._renew_views()
            else:
                self.staging.ensure(t + 1)
                self._renew_views()
        fast = self._fast
        for name, value in step.items():
            entry = fast.get(name)
            if entry is None:
                raise _unknown([name], self.schema.fields, "field")
            spec, rows, fits, _ = entry
            if type(value) is np.ndarray:
                if value.dtype != spec.dtype or value.shape != spec.shape:
                    value = coerce(spec, value)
            elif not fits(value):
                value = coerce(spec, value)
            rows[t] = value
        if len(step) != len(fast):
            for name, (_, rows, _, default) in fast.items():
                if name not in step:
                    rows[t] = default
        self._t = t + 1

    def set_end(self, end: str | None, final: Mapping[str, Any] | None = None) -> None:
        end, final = check_end(end), _check_final(final)
        final = None if final is None else _coerce_steps(self.schema, final, ())
        self.end, self.final = end, final  # both checked before either changes

    def _cut(self, step: Mapping[str, Any]) -> None:
        """Commit the steps so far as a segment whose final row is ``step``; the episode goes on from row 0."""
        first = _coerce_steps(self.schema, step, ())  # checked before anything commits
        self.staging.lengths[0] = self._t
        meta = _full_meta(self.schema, coerce_meta(self.schema, self.meta))
        segment = self.staging.pending(0, end=None, final=first, meta=meta)
        segment.continues = self._continues
        self.target.commit([segment])
        self._continues, self._t = cast(int, segment.id), 0  # (set by the commit)

    def commit(self) -> int | None:
        """Commit the episode; returns its slot, or None for an empty episode (nothing is stored)."""
        if self.length == 0:
            return None
        meta = _full_meta(self.schema, coerce_meta(self.schema, self.meta))
        self.staging.lengths[0] = self._t
        episode = self.staging.pending(0, end=self.end, final=self.final, meta=meta)
        episode.continues = self._continues
        return self.target.commit([episode])[0]


def whole_episode(schema: Schema, max_timesteps: int, arrays: Mapping[str, Any], *, end: str | None = None,
                  final: Mapping[str, Any] | None = None, split: bool = False) -> PendingEpisode:
    """A complete episode from arrays of shape (T, *field_shape), with its meta values alongside. ``split``:
    it may be longer than ``max_timesteps`` (``segments`` cuts it before it commits)."""
    end, final = check_end(end), _check_final(final)
    extra = set(arrays) - set(schema.fields) - set(schema.meta_fields)
    if extra:
        raise InvalidDataError(f"unknown field {sorted(extra)}: the store's fields are {sorted(schema.fields)} "
                               f"and its meta fields {sorted(schema.meta_fields)}"
                               f"{did_you_mean(sorted(extra), [*schema.fields, *schema.meta_fields])}")
    step_values = {name: value for name, value in arrays.items() if name in schema.fields}
    meta_values = {name: value for name, value in arrays.items() if name not in schema.fields}
    if not step_values:
        raise InvalidDataError(f"store_episode needs at least one step field of "
                               f"{sorted(schema.fields)} (got {sorted(arrays)})")
    first = next(iter(step_values))
    spec = schema.fields[first]
    step_values[first] = as_array(step_values[first], f"field {first!r}")
    shape = step_values[first].shape
    if len(shape) - len(spec.shape) != 1 and not (spec.shape == () and len(shape) == 2):
        raise InvalidDataError(
            f"field {first!r} in store_episode must have shape (T, *{spec.shape}) with a time axis "
            f"(got {shape})"
        )
    length = int(shape[0])
    if length < 1 or (length > max_timesteps and not split):
        raise InvalidDataError(f"an episode must have between 1 and max_timesteps={max_timesteps} steps (got {length})"
                               f"{'' if length < 1 else _LONGER.format(length=length)}")
    values = _coerce_steps(schema, step_values, (length,))
    meta = _full_meta(schema, coerce_meta(schema, meta_values))
    final_values = None if final is None else _coerce_steps(schema, final, ())
    rows = {}
    for name, spec in schema.fields.items():
        chunk = values[name] if name in values else np.full((length, *spec.shape), spec.default_row(), spec.dtype)
        rows[name] = [chunk]
        if final_values is not None:
            rows[name].append((final_values[name] if name in final_values else spec.default_row())[None])
    return PendingEpisode(rows, length, end, final_values is not None, meta)


def segments(episode: PendingEpisode, max_timesteps: int) -> list[PendingEpisode]:
    """An episode cut into linked segments of at most ``max_timesteps`` steps (itself when it fits): every
    segment but the last ends unspecified with the next one's first row as its final row."""
    if episode.length <= max_timesteps:
        return [episode]
    rows = {name: np.concatenate(chunks) if len(chunks) > 1 else chunks[0] for name, chunks in episode.rows.items()}
    out: list[PendingEpisode] = []
    for start in range(0, episode.length, max_timesteps):
        stop = min(start + max_timesteps, episode.length)
        last = stop == episode.length
        final = episode.final if last else True
        part = PendingEpisode({name: [values[start: stop + final]] for name, values in rows.items()}, stop - start,
                              episode.end if last else None, final, episode.meta)
        part.continues = out[-1] if out else episode.continues
        out.append(part)
    return out
