"""``buffer.data`` and ``buffer.meta_data``: 0.2.3's per-field arrays, read by (episode slot, step).

memmap-replay-buffer 0.2.3 keeps one memmap per field of shape (max_episodes, max_timesteps, *shape)
(meta fields: (max_episodes, *shape)). This store keeps steps flat with an episode table, so these are
lazy indexers that give the same values: ``buffer.data['state'][slot]``, ``[slot, t]``, ``[slot, :n]``,
slices, integer arrays (two of them index pointwise, as numpy does), ``...``, ``.shape``, ``.dtype``,
``np.asarray(...)``. Rows past an episode's length, and slots holding no live episode, read as the field
default (what 0.2.3's initialised episodes hold). The episodes being written (not committed yet) are
shown at the slots they will take, as 0.2.3 shows its current episode. ``meta_data['episode_lens']`` is
the length per slot. Each read copies: writes go through ``update`` (or ``store_datapoint``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator

import numpy as np

from ..core.schema import FieldSpec
from ..core.store import EpisodeStore
from ..errors import IndexRangeError, IndexTypeError, ReadOnlyError

__all__ = ["EpisodeArrays", "FieldArray", "Staged"]

# slot -> (step rows {field: (T, ...)}, meta values {field: row}) of the episodes being written
Staged = Callable[[], "dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]"]
LENGTHS = "episode_lens"


def _read_only(what: str, name: str) -> ReadOnlyError:
    how = (f"buffer.update(slots, {name}=values) or buffer.store_meta_datapoint(slot, {name!r}, value)"
           if what == "meta_data"
           else f"buffer.update(slots, {name}=values) or buffer.store_datapoint(slot, t, {name!r}, value)")
    return ReadOnlyError(f"buffer.{what}[{name!r}] is a read-only view of the stored episodes (0.2.3's arrays were "
                         f"writable memmaps); write with {how}")


class FieldArray:
    """One field as 0.2.3's array: (max_episodes, max_timesteps, *shape), or (max_episodes, *shape) for a
    meta field (and for ``episode_lens``)."""

    def __init__(self, store: EpisodeStore, spec: FieldSpec, *, meta: bool, staged: Staged):
        self.store, self.spec, self.meta, self._staged = store, spec, meta, staged
        self.name = spec.name

    @property
    def shape(self) -> tuple[int, ...]:
        capacity = self.store.capacity
        lead = (capacity.max_episodes,) if self.meta else (capacity.max_episodes, capacity.max_timesteps)
        return lead + self.spec.shape

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        what = "meta_data" if self.meta else "data"
        return f"<buffer.{what}[{self.name!r}]: {self.dtype} {self.shape}, read by (slot{'' if self.meta else ', t'})>"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values = self[...]
        return values if dtype is None else values.astype(dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise _read_only("meta_data" if self.meta else "data", self.name)

    def __getitem__(self, key: Any) -> np.ndarray:
        key = self._full_key(key if isinstance(key, tuple) else (key,))
        try:
            return self._read(key)
        except IndexError as error:
            kind = IndexRangeError if "out of bounds" in str(error) else IndexTypeError
            raise kind(f"{self!r}: {error} (slots are 0..{self.shape[0] - 1}"
                       f"{'' if self.meta else f', steps 0..{self.shape[1] - 1}'})") from None

    def _read(self, key: tuple) -> np.ndarray:
        lead = 1 if self.meta else 2
        slots = np.arange(self.shape[0])[key[0]]
        steps = None if self.meta else np.arange(self.shape[1])[key[1]]
        if steps is not None:
            fancy = [not isinstance(k, (slice, int, np.integer)) for k in key[:2]]
            if all(fancy):  # two index arrays: pointwise, as numpy pairs them
                slots, steps = np.broadcast_arrays(slots, steps)
            else:
                slots = slots.reshape(slots.shape + (1,) * steps.ndim)
                slots, steps = np.broadcast_arrays(slots, steps.reshape((1,) * (slots.ndim - steps.ndim) + steps.shape))
        values = self._gather(slots, steps)
        return values[(slice(None),) * slots.ndim + key[lead:]]

    def _full_key(self, key: tuple) -> tuple:
        """The key with ``...`` spelled out and a full slice for every axis it leaves out."""
        if any(k is None for k in key):
            raise IndexTypeError(f"{self!r} takes no new axes (None) in its index; add them to the result")
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexTypeError(f"{self!r}: an index can only have a single ellipsis ('...')")
        if Ellipsis in [k for k in key if not isinstance(k, np.ndarray)]:
            at = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - len(key) + 1) + key[at + 1:]
        return key + (slice(None),) * (self.ndim - len(key))

    def _gather(self, slots: np.ndarray, steps: np.ndarray | None) -> np.ndarray:
        store, spec = self.store, self.spec
        max_episodes = store.capacity.max_episodes
        table = store.live_table()
        start, length = np.zeros(max_episodes, np.int64), np.zeros(max_episodes, np.int64)
        start[table.slots], length[table.slots] = table.start, table.length
        staged = self._staged()
        for slot, (rows, _) in staged.items():  # the slot an open episode will take shows that episode
            length[slot] = 0
        if self.name == LENGTHS:
            return length[slots]
        out = np.empty(slots.shape + spec.shape, spec.dtype)
        out[...] = spec.default_row()
        if steps is None:  # a meta field (it alone reads without steps)
            live = length[slots] > 0
            out[live] = store.meta_array(self.name)[slots[live]]
        else:
            live = steps < length[slots]
            out[live] = store.step_array(self.name)[start[slots[live]] + steps[live]]
        for slot, (rows, meta) in staged.items():
            here = slots == slot
            if steps is None:  # a meta field
                out[here] = meta[self.name]
            else:
                here &= steps < len(rows[self.name])
                out[here] = rows[self.name][steps[here]]
        return out


class EpisodeArrays(Mapping):
    """``buffer.data`` (step fields) or ``buffer.meta_data`` (meta fields and ``episode_lens``): field name ->
    ``FieldArray``. Read-only: writes go through ``update``."""

    def __init__(self, store: EpisodeStore, *, meta: bool, staged: Staged):
        self._store, self._meta, self._staged = store, meta, staged
        schema = store.schema
        self._specs = dict(schema.meta_fields if meta else schema.fields)
        if meta:
            self._specs.setdefault(LENGTHS, FieldSpec(LENGTHS, np.dtype(np.int64)))

    def __getitem__(self, name: str) -> FieldArray:
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise KeyError(f"{name!r} is not a {'meta field' if self._meta else 'step field'} of the store; its "
                           f"{'meta fields' if self._meta else 'fields'} are {sorted(self._specs)}")
        return FieldArray(self._store, spec, meta=self._meta, staged=self._staged)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __setitem__(self, name: str, value: Any) -> None:
        raise _read_only("meta_data" if self._meta else "data", name)

    def __repr__(self) -> str:
        return f"<buffer.{'meta_data' if self._meta else 'data'}: {list(self._specs)}>"
