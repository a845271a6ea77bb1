"""Fields <-> the leaves of a gymnasium space: which fields make up a Dict / Tuple value, the space for
them (the card's when it fits, else one inferred from the fields), and nesting episode arrays for writers.

A field's *path* is the chain of keys from the top of the value to its leaf: ``observation`` -> ``()``,
``observation__image`` -> ``("image",)``, ``observation__state__0`` -> ``("state", "0")``; a field
given by the user that does not start with the prefix is the whole value when it is the only one
(``observation="image"``), else a key of its own (``observation=["image", "state"]``: ``("image",)``). Tuple items are
numbered keys. Without a fitting space on the card, a node whose keys are exactly ``0 .. n-1`` becomes a Tuple, any
other node a Dict, and each leaf a Box over the whole range of its dtype (``-inf .. inf`` for floats).
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping, TypeVar

import numpy as np

from ..errors import SchemaError
from ..core.schema import FieldSpec
from .common import SEP

__all__ = ["leaf_paths", "space_for", "nest"]

_Path = tuple[str, ...]
_Key = TypeVar("_Key", bound=Hashable)  # what names a leaf's array (a field name, or the path itself)


def leaf_paths(names: Iterable[str], prefix: str) -> dict[_Path, str]:
    """path -> field name for the fields that make up one value (see the module docstring)."""
    names = list(names)
    paths: dict[_Path, str] = {}
    for name in names:
        if name == prefix or (len(names) == 1 and not name.startswith(prefix + SEP)):  # one field: the whole value
            path: _Path = ()
        elif name.startswith(prefix + SEP):
            path = tuple(name[len(prefix) + len(SEP):].split(SEP))
        else:
            path = (name,)
        paths[path] = name
    if () in paths and len(paths) > 1:
        raise SchemaError(f"the fields {sorted(paths.values())} cannot make up one {prefix}: {prefix!r} is a whole "
                          f"value and the others parts of one; pass the fields to use explicitly")
    return paths


def space_leaves(space: Any, path: _Path = ()) -> dict[_Path, Any]:
    """path -> leaf space of a gymnasium space (Dict keys and Tuple positions as keys)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {key: leaf for name, sub in space.spaces.items()
                for key, leaf in space_leaves(sub, (*path, str(name))).items()}
    if isinstance(space, spaces.Tuple):
        return {key: leaf for number, sub in enumerate(space.spaces)
                for key, leaf in space_leaves(sub, (*path, str(number))).items()}
    return {path: space}


def _fits(space: Any, paths: dict[_Path, str], specs: dict[str, FieldSpec]) -> bool:
    """The space's leaves are exactly the fields, each of the field's row shape."""
    leaves = space_leaves(space)
    return set(leaves) == set(paths) and all(
        tuple(leaf.shape or ()) == specs[paths[path]].shape for path, leaf in leaves.items())


def _box_for(spec: FieldSpec) -> Any:
    from gymnasium import spaces

    dtype = spec.dtype
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    elif dtype.kind in "iu":
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    elif dtype.kind == "b":
        low, high = 0, 1
    else:
        raise SchemaError(f"field {spec.name!r} has dtype {dtype}, which no gymnasium Box can describe; leave it out")
    return spaces.Box(low=low, high=high, shape=spec.shape, dtype=dtype)


def _inferred_space(paths: dict[_Path, str], specs: dict[str, FieldSpec]) -> Any:
    from gymnasium import spaces

    if () in paths:
        return _box_for(specs[paths[()]])
    children: dict[str, dict[_Path, str]] = {}
    for path, name in paths.items():
        children.setdefault(path[0], {})[path[1:]] = name
    subs = {key: _inferred_space(sub, specs) for key, sub in children.items()}
    if sorted(subs) == [str(number) for number in range(len(subs))]:
        return spaces.Tuple([subs[str(number)] for number in range(len(subs))])
    return spaces.Dict(subs)


def space_for(names: list[str], prefix: str, specs: dict[str, FieldSpec], card_space: dict | None,
              notes: list[str]) -> tuple[Any, dict[_Path, str]]:
    """The space of the value the fields ``names`` make up, and their paths: the card's space (a
    ``space_to_json`` dict) when its leaves are these fields with their shapes, else one inferred."""
    from ..sharing.card import space_from_json

    paths = leaf_paths(names, prefix)
    if card_space is not None:
        space = space_from_json(card_space)
        if _fits(space, paths, specs):
            return space, paths
        notes.append(f"the card's {prefix} space does not match the fields {names}; a space was inferred from them")
    return _inferred_space(paths, specs), paths


def nest(space: Any, paths: Mapping[_Path, _Key], arrays: Mapping[_Key, np.ndarray], path: _Path = ()) -> Any:
    """The episode's arrays nested as the space's value: dicts for Dict, tuples for Tuple."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {name: nest(sub, paths, arrays, (*path, str(name))) for name, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(nest(sub, paths, arrays, (*path, str(number))) for number, sub in enumerate(space.spaces))
    return arrays[paths[path]]
