"""In-place updates of committed episodes (``ReplayBuffer.update``): every value is checked first,
then the writes run, so a refused update changes nothing."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .convert import as_array, coerce
from ..errors import InvalidDataError, OptionError
from .options import did_you_mean, short, slice_bounds, validate_index
from .schema import FieldSpec
from .store import EpisodeStore

__all__ = ["plan_update", "meta_rows"]

_Write = tuple[Callable[[int, np.ndarray], None], int, np.ndarray]


def plan_update(store: EpisodeStore, indices: Any, data: dict[str, Any]) -> list[_Write]:
    """The checked writes of ``update(indices, **data)``, as (store method, position, contiguous rows)."""
    schema = store.schema
    if not data:
        names = sorted((*schema.fields, *schema.meta_fields))
        raise InvalidDataError(f"update needs at least one field to write (fields: {names})")
    slots, lengths, starts = _resolve_slots(store, indices)
    if np.ndim(indices) == 0 and indices is not None and not isinstance(indices, slice):
        # one episode index (the seed's form): values come without the episode axis
        data = {name: _with_episode_axis(store, name, value) for name, value in data.items()}
    writes: list[_Write] = []
    for name, value in data.items():
        writes += _field_writes(store, name, value, slots, lengths, starts)
    return writes


def _with_episode_axis(store: EpisodeStore, name: str, value: Any) -> Any:
    """Add the episode axis to a meta value or a (T, ...) step value."""
    spec = store.schema.fields.get(name)
    if spec is None and name not in store.schema.meta_fields:
        return value  # reported as unknown by _field_writes
    array = as_array(value, f"field {name!r}")
    return array[None] if spec is None or array.ndim > len(spec.shape) else array


def _field_writes(store: EpisodeStore, name: str, value: Any, slots: np.ndarray, lengths: np.ndarray,
                  starts: np.ndarray) -> list[_Write]:
    n, schema = len(slots), store.schema
    if name not in schema.fields and name not in schema.meta_fields:
        raise InvalidDataError(f"unknown field {name!r}: the store's fields are {sorted(schema.fields)} "
                               f"and meta fields {sorted(schema.meta_fields)}"
                               f"{did_you_mean([name], [*schema.fields, *schema.meta_fields])}")
    is_step = name in schema.fields
    spec = schema.fields[name] if is_step else schema.meta_fields[name]
    array = as_array(value, f"{'field' if is_step else 'meta field'} {name!r}")
    extra = array.ndim - len(spec.shape)
    if not is_step:
        rows = meta_rows(spec, array, n)
        def write_meta(slot: int, row: np.ndarray) -> None:
            return store.update_meta(name, slot, row)
        return [(write_meta, int(slot), row[None]) for slot, row in zip(slots, rows)]
    def write(start: int, block: np.ndarray) -> None:
        return store.update_rows(name, start, block)
    if extra <= 0:  # one value for every step of every selected episode
        row = coerce(spec, array)
        return [(write, int(start), np.ascontiguousarray(np.broadcast_to(row, (int(length), *spec.shape))))
                for start, length in zip(starts, lengths)]
    if extra != 2 or len(array) != n:
        raise InvalidDataError(f"field {name!r} in update must have shape ({n}, T, *{spec.shape}) (got {array.shape})")
    t = array.shape[1]
    if t > store.capacity.max_timesteps:
        raise InvalidDataError(f"field {name!r} in update has T={t} steps, more than max_timesteps="
                               f"{store.capacity.max_timesteps}")
    if n and t > lengths.min():
        raise InvalidDataError(f"field {name!r} in update has T={t} steps but a selected episode is shorter "
                               f"(shortest: {lengths.min()} steps)")
    blocks = coerce(spec, array, (n, t))
    return [(write, int(start), np.ascontiguousarray(block)) for start, block in zip(starts, blocks)]


def meta_rows(spec: FieldSpec, array: np.ndarray, count: int) -> np.ndarray:
    """Meta values for ``count`` episodes, as (count, *shape): ``array`` is one value for all of them, or one per
    episode."""
    rows = coerce(spec, array, (count,) if array.ndim == len(spec.shape) + 1 else (), kind="meta field")
    return np.ascontiguousarray(np.broadcast_to(rows, (count, *spec.shape)))


def _resolve_slots(store: EpisodeStore, indices: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slots, lengths and first rows of the live episodes that ``indices`` name."""
    table, max_episodes = store.live_table(), store.capacity.max_episodes
    if indices is None:
        return table.slots, table.length, table.start
    if isinstance(indices, slice):  # the live episodes among the slots the slice names
        named = np.zeros(max_episodes, dtype=bool)
        named[np.arange(*slice_bounds(indices, max_episodes))] = True
        keep = named[table.slots]
        return table.slots[keep], table.length[keep], table.start[keep]
    empty = isinstance(indices, (list, tuple)) and not indices  # np.asarray([]) is float64: say what it is
    if empty or not (slots := validate_index(indices, max_episodes, "episode indices")).size:
        raise OptionError(f"episode indices are empty (got {short(indices)}): update needs at least one "
                               f"episode; pass None to update every live episode")
    where = np.full(max_episodes, -1, dtype=np.int64)
    where[table.slots] = np.arange(len(table.slots))
    position = where[slots]
    if (position < 0).any():
        raise OptionError(f"episode slot {slots[position < 0][0]} holds no live episode "
                               f"(live slots: {len(table.slots)} of {max_episodes})")
    return slots, table.length[position], table.start[position]
