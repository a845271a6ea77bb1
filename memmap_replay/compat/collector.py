"""memmap-replay-buffer 0.2.3's ``EpisodeCollector``: collect a group-batched rollout in memory, step by step,
then train on it in memory or store one episode per group.

- ``append(**step)``: one step of every group, each value (num_groups, *shape) or (num_groups, 1, *shape)
  (or a list of num_groups values); a meta field's value is kept per group, the last one counts;
- ``extend(**trajectories)``: whole trajectories, time-major (time, num_groups, *shape);
- ``time_major(name)`` / ``env_major(name)`` / ``groups(name)``: read back;
- ``all_data()`` / ``dataloader(batch_size, ...)``: env-major tensors, minibatches over (group, time);
- ``store(**meta)``: the num_groups episodes into the buffer in one commit (all of them or none), then
  ``clear()``. A meta value with a leading num_groups axis gives one value per group.

Values stay as given (torch tensors or numpy arrays) until they are read back or stored. Errors are this
project's (``InvalidDataError``, ``OptionError``; an unknown field with ``strict=True`` is an
``OptionError`` naming the fields, where 0.2.3 raised KeyError).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.options import check_names, flag, integer, short
from ..core.writer import segments, whole_episode
from ..errors import InvalidDataError, OptionError
from ..views.batch import BatchDataset
from ..views.batches import BatchIndexSampler
from ..views.loader import ReplayDataLoader

__all__ = ["EpisodeCollector"]


def _stack(values: list) -> Any:
    return torch.stack(values) if torch.is_tensor(values[0]) else np.stack(values)


def _group_batched(value: Any, groups: int) -> bool:
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        return value.ndim > 0 and value.shape[0] == groups
    return isinstance(value, (list, tuple)) and len(value) == groups


class _Tensors(BatchDataset):
    """Tensors of one length as a view: a batch is one index per tensor."""

    def __init__(self, data: dict[str, torch.Tensor]):
        self.data = data

    def __len__(self) -> int:
        return len(next(iter(self.data.values())))

    def __getitems__(self, items: Any) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(np.asarray(items, dtype=np.int64))
        return {name: value[index] for name, value in self.data.items()}


class EpisodeCollector:
    """A rollout of ``num_groups`` parallel environments, held in memory until ``store`` or ``clear``."""

    def __init__(self, replay_buffer: Any, num_groups: int, fieldnames: Any = None, meta_fieldnames: Any = None,
                 strict: bool = True):
        schema = getattr(replay_buffer, "schema", None)
        if schema is None or not hasattr(replay_buffer, "episode_store"):
            raise OptionError(f"an EpisodeCollector stores into a ReplayBuffer (got {short(replay_buffer)})")
        self.replay_buffer = replay_buffer
        self.schema = schema
        self.num_groups = integer(num_groups, "num_groups", low=1)
        self.fieldnames = set(schema.fields if fieldnames is None else check_names(fieldnames, schema.fields, "field"))
        self.meta_fieldnames = set(schema.meta_fields if meta_fieldnames is None
                                   else check_names(meta_fieldnames, schema.meta_fields, "meta field"))
        self.strict = flag(strict, "strict")
        self.clear()

    def __len__(self) -> int:
        return self.step_count

    def clear(self) -> None:
        """Drop the rollout collected so far."""
        self.episode_data: list[dict[str, list]] = [{} for _ in range(self.num_groups)]
        self.step_count = 0

    # ---- fields ------------------------------------------------------------------------------------------

    def field_kind(self, name: str) -> str | None:
        """'data' (a step field), 'meta', or None for a field to skip (unknown, with ``strict=False``)."""
        if name in self.fieldnames:
            return "data"
        if name in self.meta_fieldnames:
            return "meta"
        if self.strict:
            raise OptionError(f"unknown field {name!r}: the collector takes "
                              f"{sorted(self.fieldnames | self.meta_fieldnames)} (strict=False skips unknown fields)")
        return None

    def field_shape(self, name: str) -> tuple[int, ...]:
        spec = self.schema.meta_fields[name] if name in self.meta_fieldnames else self.schema.fields[name]
        return spec.shape

    def _add(self, group: int, name: str, values: list) -> None:
        self.episode_data[group].setdefault(name, []).extend(values)

    def per_group(self, name: str, value: Any) -> list:
        """One step's group-batched value as num_groups values of the field's shape."""
        if isinstance(value, (list, tuple)):
            return list(value)
        shape, rest = self.field_shape(name), tuple(value.shape[1:])
        if rest not in (shape, (1, *shape)):
            raise InvalidDataError(f"field {name!r}: append takes ({self.num_groups}, *{shape}) or "
                                   f"({self.num_groups}, 1, *{shape}) (got shape {tuple(value.shape)})")
        return list(value if rest == shape else value[:, 0])

    # ---- adding ------------------------------------------------------------------------------------------

    def append(self, **data: Any) -> None:
        """One step of every group (see the module's docstring)."""
        checked = {}
        for name, value in data.items():  # everything checked before anything is kept
            kind = self.field_kind(name)
            if kind == "meta":
                checked[name] = [value] * self.num_groups
            elif kind == "data":
                if not _group_batched(value, self.num_groups):
                    shape = self.field_shape(name)
                    raise InvalidDataError(
                        f"field {name!r}: append takes one step of every group, ({self.num_groups}, *{shape}) or "
                        f"({self.num_groups}, 1, *{shape}) (got {short(value)}); for whole trajectories, time-major "
                        f"(time, {self.num_groups}, *{shape}), use extend")
                checked[name] = self.per_group(name, value)
        for name, values in checked.items():
            for group, value in enumerate(values):
                self._add(group, name, [value])
        self.step_count += 1

    def extend(self, **trajectories: Any) -> None:
        """Whole trajectories of every group, time-major (time, num_groups, *shape)."""
        checked = {}
        time = self.step_count or None
        for name, value in trajectories.items():
            if self.field_kind(name) is None:
                continue
            if not (torch.is_tensor(value) or isinstance(value, np.ndarray)):
                raise InvalidDataError(f"field {name!r}: extend takes a tensor or array of shape (time, "
                                       f"{self.num_groups}, *shape) (got {short(value)})")
            shape = self.field_shape(name)
            if value.ndim < 2 or value.shape[1] != self.num_groups or tuple(value.shape[2:]) != shape:
                raise InvalidDataError(f"field {name!r}: extend takes time-major (time, {self.num_groups}, *{shape}) "
                                       f"(got shape {tuple(value.shape)})")
            if time is not None and value.shape[0] != time:
                raise InvalidDataError(f"field {name!r}: its time axis is {value.shape[0]} steps, but {time} steps "
                                       f"were collected")
            time = value.shape[0]
            checked[name] = value
        for name, value in checked.items():
            for group in range(self.num_groups):
                self._add(group, name, list(value[:, group]))
        if time is not None:
            self.step_count = time

    # ---- reading back ------------------------------------------------------------------------------------

    def _collected(self, name: str) -> list:
        if self.field_kind(name) is None or name not in self.episode_data[0]:
            raise OptionError(f"nothing was collected for {name!r} (collected: {sorted(self.episode_data[0])})")
        return [data[name] for data in self.episode_data]

    def groups(self, name: str) -> list:
        """One value per group: (time, *shape) of a step field, the last value of a meta field."""
        if self.field_kind(name) == "meta":
            return [values[-1] for values in self._collected(name)]
        return [_stack(values) for values in self._collected(name)]

    def time_major(self, name: str) -> Any:
        """(time, num_groups, *shape) for a step field, (num_groups, *shape) for a meta field."""
        values = self.groups(name)
        return _stack(values) if self.field_kind(name) == "meta" else _stack(values).swapaxes(0, 1)

    def env_major(self, name: str) -> Any:
        """(num_groups, time, *shape) for a step field (the layout GAE expects), (num_groups, ...) for meta."""
        return _stack(self.groups(name))

    # ---- in-memory training ------------------------------------------------------------------------------

    def all_data(self, fields: Any = None, device: Any = None) -> dict:
        """The collected step fields (or ``fields``), env-major (num_groups, time, *shape)."""
        if len(self) == 0:
            raise OptionError("the collector is empty: append or extend steps first")
        names = [name for name in self.episode_data[0] if name in self.fieldnames] if fields is None else fields
        data = {name: self.env_major(name) for name in names}
        if device is not None:
            data = {name: value.to(device) if torch.is_tensor(value) else value for name, value in data.items()}
        return data

    def dataloader(self, batch_size: int, fields: Any = None, filter_fields: dict | None = None,
                   to_named_tuple: Any = None, shuffle: bool = False, device: Any = None, *,
                   drop_last: bool = False, seed: int | None = None, **loader_options: Any) -> ReplayDataLoader:
        """Minibatches of single steps over (group, time) of the rollout, in memory; ``filter_fields`` keeps
        the steps whose scalar fields equal the values given."""
        data = {name: torch.as_tensor(value).reshape(-1, *value.shape[2:]) for name, value in self.all_data().items()}
        if filter_fields:
            keep = torch.ones(len(next(iter(data.values()))), dtype=torch.bool)
            for name, wanted in filter_fields.items():
                if name not in data or data[name].ndim != 1:
                    raise OptionError(f"filter_fields takes collected scalar fields (got {name!r}; collected: "
                                      f"{sorted(data)})")
                keep &= data[name] == wanted
            data = {name: value[keep] for name, value in data.items()}
        names = tuple(data) if fields is None else check_names(fields, data, "collected field")
        dataset = _Tensors({name: data[name] for name in names})
        sampler = BatchIndexSampler(len(dataset), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
        return ReplayDataLoader(dataset, sampler, to_named_tuple=to_named_tuple, device=device, **loader_options)

    # ---- storing -----------------------------------------------------------------------------------------

    def store(self, **meta_data: Any) -> list[int]:
        """One episode per group into the buffer, in one commit (all or none), then ``clear()``; returns the
        slots. Meta values here override collected ones; one with a leading num_groups axis is per group."""
        store = self.replay_buffer.episode_store
        store.require_writable("store the collected episodes")
        episodes, lasts = [], []
        for group, collected in enumerate(self.episode_data):
            arrays = {name: _stack(values) if name in self.fieldnames else values[-1]
                      for name, values in collected.items()}
            for name, value in meta_data.items():
                if name in self.meta_fieldnames:
                    arrays[name] = value[group] if _group_batched(value, self.num_groups) else value
                elif self.strict:
                    raise OptionError(f"store takes meta fields {sorted(self.meta_fieldnames)} (got {name!r}; "
                                      f"strict=False skips unknown names)")
            arrays = {name: value.detach().cpu().numpy() if torch.is_tensor(value) else value
                      for name, value in arrays.items()}
            split = getattr(self.replay_buffer, "long_episodes", "error") == "split"
            episode = whole_episode(self.schema, store.capacity.max_timesteps, arrays, split=split)
            episodes += segments(episode, store.capacity.max_timesteps)
            lasts.append(len(episodes) - 1)  # a long episode's last segment (long_episodes='split')
        slots = store.commit(episodes)
        slots = [slots[last] for last in lasts]
        self.clear()
        return slots
