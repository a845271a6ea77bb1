"""The transform contract (see ``views.transforms``): checking a transform option, applying one to a
batch with its output checked, and ``FieldTransform``, the base of the built-ins that touch named fields."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import InvalidDataError, OptionError
from ..core.options import short

__all__ = ["FieldTransform", "transform_option", "loader_transform", "apply_transform"]

_CONTRACT = "a transform takes the batch (a dict name -> tensor) and returns a dict name -> tensor"


def transform_option(value: Any, name: str = "transform") -> Callable | None:
    """None, or a callable (checked when the view or loader is made, not at the first batch)."""
    if value is not None and not callable(value):
        raise OptionError(f"{name} must be a callable batch -> batch or None ({_CONTRACT}) (got {short(value)}); "
                          f"e.g. memmap_replay.views.transforms.ToFloat('image')")
    return value


def loader_transform(transform: Any, collate_fn: Any) -> Callable | None:
    """A loader's ``transform=`` or, under torch's name, ``collate_fn=`` (the same thing here: it receives the
    gathered batch dict, not a list of samples); not both."""
    if transform is not None and collate_fn is not None:
        raise OptionError("pass transform= or collate_fn= (its other name here), not both; combine them with "
                          "Compose(first, second)")
    if collate_fn is not None:
        return transform_option(collate_fn, "collate_fn")
    return transform_option(transform)


def apply_transform(transform: Callable, batch: dict) -> dict[str, torch.Tensor]:
    """``transform(batch)``, its result checked: a dict of tensors."""
    out = transform(batch)
    if not isinstance(out, dict):
        raise InvalidDataError(f"the transform {short(transform, 80)} returned a {type(out).__name__}: {_CONTRACT}; "
                               f"return the batch dict (e.g. batch['image'] = f(batch['image']); return batch)")
    for key, value in out.items():
        if not isinstance(value, torch.Tensor):
            raise InvalidDataError(f"the transform {short(transform, 80)} returned {key!r} as a "
                                   f"{type(value).__name__}: {_CONTRACT}; convert it with torch.as_tensor, or wrap a "
                                   f"numpy function in NumpyTransform(fn)")
    return out


def _field_names(fields: Any, who: str) -> tuple[str, ...]:
    if isinstance(fields, str):
        fields = (fields,)
    if not isinstance(fields, (tuple, list)) or not fields or not all(isinstance(f, str) and f for f in fields):
        raise OptionError(f"{who} fields must be a name or a non-empty tuple/list of names, the batch keys to "
                          f"transform (got {short(fields)}); e.g. {who}('image')")
    if len(set(fields)) != len(fields):
        raise OptionError(f"{who} fields must be distinct (got {list(fields)}); name each field once")
    return tuple(fields)


class FieldTransform:
    """The base of the built-ins: ``fields``, the batch keys it changes; ``convert(name, tensor)`` per field."""

    def __init__(self, fields: Any):
        self.fields = _field_names(fields, type(self).__name__)

    def check(self, batch: Any) -> None:
        """The batch is a dict holding every field named (else OptionError naming the batch's keys)."""
        if not isinstance(batch, dict):
            raise OptionError(f"{type(self).__name__} takes a batch dict name -> tensor (got {short(batch, 80)})")
        missing = [name for name in self.fields if name not in batch]
        if missing:
            raise OptionError(f"{type(self).__name__} transforms {missing}, which the batch does not hold; its keys "
                              f"are {sorted(batch)} (names after fieldname_map); pass fields among them")

    def __call__(self, batch: dict) -> dict:
        self.check(batch)
        for name in self.fields:
            batch[name] = self.convert(name, batch[name])
        return batch

    def convert(self, name: str, value: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.fields)})"
