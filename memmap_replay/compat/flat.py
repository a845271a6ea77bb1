"""0.2.3's flat batch: ``store_batch`` / ``store_meta_batch`` outside ``batched_episode``, then
``advance_episode(batch_size)``.

memmap-replay-buffer 0.2.3 writes one timestep of a batch of parallel episodes per ``store_batch`` call,
at a timestep index the batch shares, and ``advance_episode(batch_size)`` ends ``batch_size`` of them,
each as long as that index. ``FlatBatch`` keeps those episodes in RAM until then (like every writer here:
a crash loses only them): rows (width, rows, *shape) per field and a meta row per episode, holding the
field defaults wherever nothing was written, as 0.2.3's freshly initialised episodes do.
"""

from __future__ import annotations

from typing import Any, Mapping, cast

import numpy as np

from ..core.convert import as_array, coerce
from ..core.schema import Schema
from ..core.store import PendingEpisode
from ..core.writer import coerce_meta
from ..errors import InvalidDataError

__all__ = ["FlatBatch", "batch_width"]


def batch_width(values: Mapping[str, Any], what: str, known: Mapping) -> int:
    """The batch size shared by every value (its leading axis), checked as 0.2.3's ``store_batch`` does."""
    if not values:
        raise InvalidDataError(f"{what} needs at least one {'meta ' if what == 'store_meta_batch' else ''}field, "
                               f"each with a leading batch axis (fields: {sorted(known)})")
    width = None
    for name, value in values.items():
        array = as_array(value, f"field {name!r} in {what}")
        if array.ndim == 0:
            raise InvalidDataError(f"field {name!r} in {what} must have a leading batch axis (got a scalar)")
        if width is not None and len(array) != width:
            raise InvalidDataError(f"every field in {what} must have the same batch size: field {name!r} has "
                                   f"{len(array)}, the ones before {width}")
        width = len(array)
    return cast(int, width)  # (values is not empty)


class FlatBatch:
    """Parallel episodes in progress, stored a timestep at a time (all at the same timestep)."""

    def __init__(self, schema: Schema, max_timesteps: int, length: int = 0, *, split: bool = False):
        self.schema = schema
        self.max_timesteps = max_timesteps
        self.split = split  # long_episodes='split': the episodes may grow past max_timesteps (cut when they commit)
        self.width = 0
        self.length = 0
        self.steps = {name: np.empty((0, 0, *spec.shape), spec.dtype) for name, spec in schema.fields.items()}
        self.meta = {name: np.empty((0, *spec.shape), spec.dtype) for name, spec in schema.meta_fields.items()}
        self.set_length(length)

    def _ensure(self, width: int, rows: int) -> None:
        """Room for ``width`` episodes of ``rows`` rows; new room holds the defaults."""
        old_width, old_rows = self.width, next(iter(self.steps.values())).shape[1]
        if width <= old_width and rows <= old_rows:
            return
        width = max(width, old_width)
        limit = 2 * old_rows if self.split else self.max_timesteps
        rows = old_rows if rows <= old_rows else max(rows, min(2 * old_rows, limit))
        for name, spec in self.schema.fields.items():
            grown = np.empty((width, rows, *spec.shape), spec.dtype)
            grown[...] = spec.default_row()
            grown[:old_width, :old_rows] = self.steps[name]
            self.steps[name] = grown
        for name, spec in self.schema.meta_fields.items():
            grown = np.empty((width, *spec.shape), spec.dtype)
            grown[...] = spec.default_row()
            grown[:old_width] = self.meta[name]
            self.meta[name] = grown
        self.width = width

    def store(self, steps: Mapping[str, Any]) -> None:
        """One timestep for the first ``len(values)`` episodes; fields not given take their default."""
        width = batch_width(steps, "store_batch", self.schema.fields)
        extra = sorted(set(steps) - set(self.schema.fields))
        if extra:
            raise InvalidDataError(f"unknown field {extra} in store_batch: the store's fields are "
                                   f"{sorted(self.schema.fields)}")
        if self.length >= self.max_timesteps and not self.split:
            raise InvalidDataError(f"the episodes must have at most max_timesteps={self.max_timesteps} steps (got one "
                                   f"more); advance_episode(batch_size) ends them, create the buffer with a larger "
                                   f"max_timesteps, or with long_episodes='split' to store longer ones as linked "
                                   f"segments")
        values = {name: coerce(self.schema.fields[name], value, (width,)) for name, value in steps.items()}
        self._ensure(width, self.length + 1)
        for name, spec in self.schema.fields.items():
            self.steps[name][:width, self.length] = values[name] if name in values else spec.default_row()
        self.length += 1

    def store_meta(self, meta: Mapping[str, Any]) -> None:
        """Meta values for the first ``len(values)`` episodes."""
        width = batch_width(meta, "store_meta_batch", self.schema.meta_fields)
        values = coerce_meta(self.schema, meta, (width,))
        self._ensure(width, 0)
        for name, value in values.items():
            self.meta[name][:width] = value

    def set_length(self, length: int) -> None:
        """0.2.3's ``timestep_index = k``: the next timestep goes to row k; rows past k hold defaults again."""
        if length > self.max_timesteps:
            raise InvalidDataError(f"timestep_index must be at most max_timesteps={self.max_timesteps} (got {length})")
        self._ensure(self.width, length)
        for name, spec in self.schema.fields.items():
            self.steps[name][:, length:] = spec.default_row()
        self.length = length

    def write(self, env: int, t: int | None, name: str, value: np.ndarray) -> None:
        """``store_datapoint`` into episode ``env`` (meta when ``t`` is None); the value is coerced."""
        self._ensure(env + 1, 0)
        if t is None:
            self.meta[name][env] = value
        else:
            self.steps[name][env, t] = value

    def episodes(self, count: int) -> list[PendingEpisode]:
        """The first ``count`` episodes, ready to commit (none when no timestep was stored); with ``split``
        they may be longer than max_timesteps (the caller cuts them with ``segments``)."""
        if self.length == 0:
            return []
        self._ensure(count, self.length)
        return [PendingEpisode({name: [array[env, : self.length]] for name, array in self.steps.items()},
                               self.length, meta={name: array[env] for name, array in self.meta.items()})
                for env in range(count)]
