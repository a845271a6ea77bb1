"""Which field holds which part of what a gymnasium env gives, named as ``memmap_replay.interop`` names them.

The names are interop's own: a value of the space goes through ``interop.common.flatten`` (at every
step, and once for a zero value of the space to derive the fields), so a recorded store exports with
no field-name arguments, and the card's spaces fit its fields
(``interop.spaces.leaf_paths`` must give back each leaf's place in the space, else the space is refused).
"""

from __future__ import annotations

from typing import Any, Mapping, cast

import numpy as np
from gymnasium import spaces

from ..errors import InvalidDataError, OptionError, SchemaError
from ..interop.common import ACTION, INFO, OBSERVATION, REWARD, SEP, flatten
from ..interop.spaces import leaf_paths, nest, space_leaves
from ..core.options import short
from ..core.schema import Schema

__all__ = ["FieldMap", "gymnasium_fields"]

_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _leaf_zero(space: Any, where: str) -> np.ndarray:
    """A zero value of a leaf space, of the dtype and shape its field gets (Discrete: int64)."""
    if isinstance(space, spaces.Discrete):
        return np.zeros((), np.int64)
    if isinstance(space, _LEAVES):
        return np.zeros(cast("tuple[int, ...]", space.shape), space.dtype)  # (a leaf space has its shape)
    raise SchemaError(f"{where} must be a Box, Discrete, MultiDiscrete or MultiBinary space, or a Dict or Tuple of "
                      f"them, nested or not (got {short(space)}); turn it into one with an ObservationWrapper or "
                      f"ActionWrapper (e.g. gymnasium.wrappers.FlattenObservation)")


def _described(prefix: str, path: tuple[str, ...]) -> str:
    return prefix + "".join(f"[{key}]" for key in path)


def _named(value: Any, prefix: str, what: str, paths: list[tuple[str, ...]], rename: str) -> dict[str, np.ndarray]:
    """interop's field names of a value whose leaves are at ``paths``: refused unless the names give back
    exactly those paths (so that the card's space fits the fields on export)."""
    try:
        out = flatten(value, prefix, what)
    except InvalidDataError as error:  # a key that is no part of a field name
        raise SchemaError(f"{error}; {rename}") from None
    back = leaf_paths(out, prefix)
    if len(out) != len(paths) or set(back) != set(paths):
        lost = sorted(_described(prefix, path) for path in set(paths) - set(back))
        raise SchemaError(f"{what} cannot be stored as the fields {sorted(out)}: {', '.join(lost)} would not come "
                          f"back from their names ('{SEP}' joins nested keys, so no key may contain it); {rename}")
    return out


def _space_fields(space: Any, prefix: str, what: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Field name -> (dtype, shape) for the leaves of ``space``: ``prefix``, or ``prefix__<key>``..."""
    leaves = space_leaves(space)
    zeros = {path: _leaf_zero(leaf, _described(what, path)) for path, leaf in leaves.items()}
    if not zeros:
        raise SchemaError(f"{what} must have at least one Box, Discrete, MultiDiscrete or MultiBinary member "
                          f"(got {short(space)})")
    value = nest(space, {path: path for path in zeros}, zeros)
    rename = "rename the key with an ObservationWrapper or ActionWrapper"
    out = _named(value, prefix, what, list(zeros), rename)
    return {name: (array.dtype.name, array.shape) for name, array in out.items()}


class FieldMap:
    """The fields of the observation, action, reward and info keys, and a step's values split into them."""

    def __init__(self, observation_space: Any, action_space: Any, *, info_fields: Any = None,
                 fields: Any = None, seed_field: str | None = "seed"):
        if info_fields is not None and (not isinstance(info_fields, Mapping) or not all(
                isinstance(key, str) and key for key in info_fields)):
            raise OptionError(f"info_fields must be a dict of info key -> field spec, e.g. "
                                   f"info_fields={{'x_position': 'float64'}} (got {short(info_fields)})")
        if seed_field is not None and not isinstance(seed_field, str):
            raise OptionError(f"seed_field must be a meta field name or None (got {short(seed_field)})")
        self.observation = _space_fields(observation_space, OBSERVATION, "the observation space")
        self.action = _space_fields(action_space, ACTION, "the action space")
        keys = list(info_fields or {})
        info_names = _named({key: np.zeros(()) for key in keys}, INFO, "info_fields", [(key,) for key in keys],
                           "put the value under another key with a gymnasium.Wrapper")
        self.info = dict(zip(info_names, keys))  # field -> info key (flatten keeps the keys' order)
        self.seed_field = seed_field
        specs = {**self.observation, **self.action, REWARD: "float64",
                 **{name: (info_fields or {})[key] for name, key in self.info.items()}}
        if fields is not None and (not isinstance(fields, Mapping) or set(fields) - set(specs)):
            raise SchemaError(f"fields must be a dict that overrides specs of the derived fields {sorted(specs)} "
                              f"(got {short(fields)})")
        self.fields = {**specs, **(fields or {})}
        self.meta_fields = {} if seed_field is None else {seed_field: ("int64", (), -1)}
        self.schema = Schema.parse(self.fields, self.meta_fields)  # a bad override fails here

    def observations(self, value: Any) -> dict[str, np.ndarray]:
        """An observation (or a batch of them) as field -> array."""
        return flatten(value, OBSERVATION, "the observation")

    def actions(self, value: Any) -> dict[str, np.ndarray]:
        return flatten(value, ACTION, "the action")

    def infos(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The info keys the info has, as field -> value (a single env's info)."""
        return {name: info[key] for name, key in self.info.items() if key in info}

    def describe(self) -> dict[str, str]:
        """Field -> where its values come from, for the card."""
        out = {name: _described(prefix, path) for prefix, names in ((OBSERVATION, self.observation),
                                                                   (ACTION, self.action))
               for path, name in leaf_paths(names, prefix).items()}
        out.update({name: f"{INFO}[{key!r}] (given with the row's observation)" for name, key in self.info.items()})
        return {**out, REWARD: REWARD,
                **({self.seed_field: "seed given to reset, -1: none"} if self.seed_field else {})}


def gymnasium_fields(observation_space: Any, action_space: Any, *, info_fields: Any = None, fields: Any = None,
                     seed_field: str | None = "seed") -> tuple[dict, dict]:
    """``(fields, meta_fields)`` of a store that records an env with these spaces (see ``memmap_replay.recording``)."""
    fieldmap = FieldMap(observation_space, action_space, info_fields=info_fields, fields=fields, seed_field=seed_field)
    return dict(fieldmap.fields), dict(fieldmap.meta_fields)
