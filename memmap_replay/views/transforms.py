"""Batch transforms: functions of a whole gathered batch, run where the batch is made.

A view (``transform=`` on every view, ``buffer.dataset``, ``buffer.dataloader``, ``sampler.dataloader``)
hands its batch to the transform as the last step of ``__getitems__``: inside the DataLoader worker that
gathered it when the loader has workers (so transforms run in parallel), in the main process otherwise
(and in ``sampler.batch``).

The contract. A transform is a callable ``transform(batch) -> dict``: ``batch`` is the whole batch, a dict
name -> torch.Tensor with the batch on the leading axis (B, ...), or (B, T, ...) for trajectory, window
and frame-stacked fields; it may change tensors in place (the batch is its own) and returns the dict the
loader yields (name -> tensor). It sees the names after ``fieldname_map``, plus the extra keys of the
batch (``_key``, ``_weight``, ``_lens``, ``_mask``, ``_index``, ``_t``, ``_relabeled``, ...). To run under
the ``spawn`` or ``forkserver`` start methods it must pickle (it travels with the view to each worker):
a module-level function or class, not a lambda. The built-ins below touch only the fields named.

- ``ToFloat(fields, scale=1/255, mean=None, std=None)``: integers (uint8 images) to floats in [0, 1],
  optionally normalized per channel; ``ToFloat.from_stats(buffer.stats(['image']), 'image')``.
- ``RandomShift(fields, pad=4, seed=None)``: DrQ's random shift, vectorized over the batch.
- ``Rearrange(fields, 'b c h w -> b h w c')``: einops' rearrange.
- ``Compose(t1, t2, ...)``: one after the other.
- ``NumpyTransform(fn)``: ``fn`` takes and returns numpy arrays.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from einops import EinopsError, rearrange

from ..errors import InvalidDataError, OptionError
from ..core.options import number, short
from .pool import numpy_dtype, output_array
from .transform_base import (FieldTransform, _field_names, apply_transform, loader_transform,  # noqa: F401
                             transform_option)
from .augment import RandomShift  # noqa: F401 - a built-in, exported here with the others

__all__ = ["ToFloat", "RandomShift", "Rearrange", "Compose", "NumpyTransform", "FieldTransform",
           "transform_option", "loader_transform", "apply_transform"]

def _stats_values(entry: Any, field: str) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) as float64 arrays of one field's statistics: a FieldStats (its per-channel ones when it has
    them) or a mapping with 'mean' and 'std' (a stats.json entry; null values read as NaN)."""
    channels = getattr(entry, "channels", None)
    source = channels if channels is not None else entry
    try:
        if isinstance(source, dict):
            values = [source[key] for key in ("mean", "std")]
        else:
            values = [getattr(source, key) for key in ("mean", "std")]
        mean, std = (_floats(value) for value in values)
    except (KeyError, AttributeError, TypeError, ValueError) as error:
        raise OptionError(f"the statistics of {field!r} must have numeric 'mean' and 'std' of one shape (got "
                          f"{short(entry, 80)}: {error})") from None
    if mean.shape != std.shape or mean.ndim == 0:
        raise OptionError(f"the statistics of {field!r} must have mean and std of one shape with at least one axis "
                          f"(got {mean.shape} and {std.shape})")
    return mean, std


def _floats(value: Any) -> np.ndarray:
    """An array of float64; JSON's null (None) as NaN."""
    if isinstance(value, (list, tuple)):
        value = np.asarray(value, dtype=object)
        # numpy compares an object array with None elementwise; its stubs take no None operand
        value[np.equal(value, None)] = np.nan  # type: ignore[call-overload]
    return np.asarray(value, np.float64)


def _channel_values(value: Any, name: str) -> np.ndarray | None:
    """None, a number or a 1-d sequence of finite numbers, as a float64 array (1-d, one per channel)."""
    if value is None:
        return None
    try:
        array = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError):
        array = None
    if array is None or array.ndim > 1 or array.size == 0 or not np.isfinite(array).all():
        raise OptionError(f"{name} must be a number or a sequence of finite numbers, one per channel "
                          f"(got {short(value)}); e.g. {name}=(0.485, 0.456, 0.406)")
    return array.reshape(-1)


class ToFloat(FieldTransform):
    """Integer fields (uint8 images) to floats: ``x * scale``, then ``(x - mean) / std`` per channel.

    - ``scale`` (default 1/255: uint8 to [0, 1]); a float field is refused unless ``scale=1`` (it would be
      scaled twice).
    - ``mean``, ``std``: None, one number, or one number per channel, in the scaled units (0.5 means mid
      grey with the default scale); ``channel_dim`` (default -3, the C of (..., C, H, W); -1 for
      channels-last) counts from the end, so the same transform fits (B, C, H, W) and (B, T, C, H, W).
    - ``dtype``: a floating torch dtype (default float32).

    ``buffer.stats()`` does not keep images' statistics as episodes commit (only small numeric fields), but
    ``buffer.stats(['image'])`` reads them from the live episodes, per pixel and (a uint8 (C, H, W) or
    (H, W, C) field) per channel: ``ToFloat.from_stats`` takes those, or a loaded ``stats.json``."""

    def __init__(self, fields: Any, *, scale: float = 1 / 255, mean: Any = None, std: Any = None,
                 dtype: torch.dtype = torch.float32, channel_dim: int = -3):
        super().__init__(fields)
        self.scale = number(scale, "scale", low=0, low_open=True)
        self.mean = _channel_values(mean, "mean")
        self.std = _channel_values(std, "std")
        if self.std is not None and not (self.std > 0).all():
            raise OptionError(f"std must be > 0 for every channel (got {self.std.tolist()}); a constant channel "
                              f"needs std=1 there")
        if self.mean is not None and self.std is not None and len(self.mean) != len(self.std) \
                and 1 not in (len(self.mean), len(self.std)):
            raise OptionError(f"mean and std must have one value per channel each (got {len(self.mean)} and "
                              f"{len(self.std)})")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise OptionError(f"dtype must be a floating torch dtype, e.g. torch.float32 (got {short(dtype)})")
        self.dtype = dtype
        if isinstance(channel_dim, (bool, np.bool_)) or not isinstance(channel_dim, (int, np.integer)) \
                or channel_dim >= 0:
            raise OptionError(f"channel_dim must be a negative int, counted from the end: -3 for (..., C, H, W), "
                              f"-1 for (..., H, W, C) (got {short(channel_dim)})")
        self.channel_dim = int(channel_dim)
        inverse = 1 / self.scale  # dividing by 255 rounds each value correctly, multiplying by 1/255 may not
        self.divisor = inverse if inverse == round(inverse) else None

    @classmethod
    def from_stats(cls, stats: Any, field: str, **options: Any) -> "ToFloat":
        """A ``ToFloat`` of ``field`` normalized by the store's statistics, scaled by ``scale``. ``stats`` is
        what ``buffer.stats([field])`` returns (an image field's per-channel statistics are used as they are;
        per-element ones are pooled per channel along ``channel_dim``), or a mapping field -> {"mean", "std"}
        such as a loaded ``stats.json`` (``StoreStats.to_lerobot()``: per channel as (C, 1, 1), or per
        element); a one-axis mean and std are taken as one value per channel."""
        field = _field_names(field, "ToFloat.from_stats")[0]
        if "mean" in options or "std" in options:
            raise OptionError("from_stats computes mean and std; pass them to ToFloat(...) instead")
        known = getattr(stats, "fields", stats)
        if not isinstance(known, dict) or field not in known:
            held = sorted(known) if isinstance(known, dict) else None
            raise OptionError(f"stats must be buffer.stats([{field!r}]) or a loaded stats.json holding field {field!r} "
                              f"(got {short(stats, 80) if held is None else f'statistics of {held}'})")
        made = cls(field, **options)
        mean, std = _stats_values(known[field], field)
        if mean.ndim == 1:  # per channel already
            channel_mean, channel_std = mean, std
        else:
            if mean.ndim < -made.channel_dim:
                raise OptionError(f"the statistics of {field!r} (shape {mean.shape}) have no channel axis "
                                  f"{made.channel_dim}; pass channel_dim= to match them, or mean and std")
            axes = tuple(axis for axis in range(mean.ndim) if axis != mean.ndim + made.channel_dim)
            channel_mean = mean.mean(axis=axes)  # every element counts as many values: pooled exactly
            channel_var = (np.square(std) + np.square(mean)).mean(axis=axes) - np.square(channel_mean)
            channel_std = np.sqrt(np.maximum(channel_var, 0))
        if not (np.isfinite(channel_mean).all() and np.isfinite(channel_std).all()):
            raise OptionError(f"the statistics of {field!r} are not finite (mean {channel_mean.tolist()}): no "
                              f"episodes were counted; store episodes first, or pass mean and std to ToFloat")
        if not (channel_std > 0).all():
            raise OptionError(f"field {field!r} is constant in some channel (std {channel_std.tolist()}); pass "
                              f"mean and std to ToFloat yourself")
        made.mean, made.std = channel_mean * made.scale, channel_std * made.scale
        return made

    def _per_channel(self, values: np.ndarray | None, value: torch.Tensor, name: str) -> torch.Tensor | None:
        if values is None:
            return None
        channels = value.shape[self.channel_dim] if value.ndim >= -self.channel_dim else None
        if channels is None or len(values) not in (1, channels):
            raise OptionError(f"ToFloat's mean/std have {len(values)} values, one per channel, but field {name!r} "
                              f"of shape {tuple(value.shape)} has "
                              f"{'no axis ' + str(self.channel_dim) if channels is None else f'{channels} channels'} "
                              f"(channel_dim={self.channel_dim}); pass channel_dim or one value per channel")
        shape = (len(values),) + (1,) * (-self.channel_dim - 1)
        return torch.as_tensor(values, dtype=self.dtype).reshape(shape)

    def convert(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if value.dtype.is_floating_point and self.scale != 1:
            raise OptionError(f"ToFloat would scale field {name!r} by {self.scale}, but it is {value.dtype} "
                              f"already; pass scale=1 (to normalize only) or leave the field out")
        divided = self.divisor is not None and self.divisor != 1
        out = _output_like(value, self.dtype, self.divisor if divided else None)
        if self.divisor is None:
            out.mul_(self.scale)
        mean, std = self._per_channel(self.mean, value, name), self._per_channel(self.std, value, name)
        if mean is not None:
            out.sub_(mean)
        if std is not None:
            out.div_(std)
        return out


def _output_like(value: torch.Tensor, dtype: torch.dtype, divisor: float | None = None) -> torch.Tensor:
    """``value`` converted to ``dtype`` (and divided by ``divisor``), written into batch output memory
    (``views.pool``: reused, and in a DataLoader worker its shared-memory slot) where numpy has the dtype."""
    as_numpy = numpy_dtype(dtype)
    if as_numpy is None or value.device.type != "cpu" or value.requires_grad:  # in torch's own memory
        out = value.to(dtype, copy=True)
        return out if divisor is None else out.div_(divisor)
    out = torch.from_numpy(output_array(tuple(value.shape), as_numpy))
    out.copy_(value)  # then divided in place: faster than one mixed-dtype torch.div(value, d, out=out)
    return out if divisor is None else out.div_(divisor)


class Rearrange(FieldTransform):
    """einops' ``rearrange(value, pattern, **axes)`` on each field named; the pattern covers the batch axes
    too, e.g. ``Rearrange('image', 'b c h w -> b h w c')`` or, for windows, ``'b t c h w -> b t h w c'``."""

    def __init__(self, fields: Any, pattern: str, **axes: int):
        super().__init__(fields)
        if not isinstance(pattern, str) or "->" not in pattern:
            raise OptionError(f"pattern must be an einops pattern 'input axes -> output axes', e.g. "
                              f"'b c h w -> b h w c' (got {short(pattern)})")
        for axis, length in axes.items():
            if isinstance(length, (bool, np.bool_)) or not isinstance(length, (int, np.integer)) or length < 1:
                raise OptionError(f"axis length {axis}= must be a positive int (got {short(length)})")
        self.pattern, self.axes = pattern, {axis: int(length) for axis, length in axes.items()}

    def convert(self, name: str, value: torch.Tensor) -> torch.Tensor:
        try:
            return rearrange(value, self.pattern, **self.axes)
        except EinopsError as error:
            raise OptionError(f"Rearrange {self.pattern!r} does not fit field {name!r} of shape "
                              f"{tuple(value.shape)} (the batch axes included): {str(error).splitlines()[0]}; "
                              f"fix the pattern") from None

    def __repr__(self) -> str:
        return f"Rearrange({list(self.fields)}, {self.pattern!r})"


class Compose:
    """Transforms applied one after the other: ``Compose(ToFloat('image'), RandomShift('image'))`` (a list
    of transforms works too)."""

    def __init__(self, *transforms: Callable):
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        if not transforms:
            raise OptionError("Compose needs at least one transform, e.g. Compose(ToFloat('image'), "
                              "RandomShift('image'))")
        for position, transform in enumerate(transforms):
            transform_option(transform, f"Compose's transform {position}")
        self.transforms = tuple(transforms)

    def __call__(self, batch: dict) -> dict:
        for transform in self.transforms:
            batch = apply_transform(transform, batch)
        return batch

    def __repr__(self) -> str:
        return f"Compose({', '.join(map(repr, self.transforms))})"


class NumpyTransform:
    """A transform written in numpy: ``fn`` receives the batch as numpy arrays (name -> ndarray, sharing
    the tensors' memory) and returns a dict of arrays (or numbers), turned back into tensors. ``fn`` must
    pickle for spawned workers (a module-level function)."""

    def __init__(self, fn: Callable):
        if not callable(fn):
            raise OptionError(f"NumpyTransform's fn must be a callable dict of numpy arrays -> dict (got "
                              f"{short(fn)}); e.g. a module-level function def f(batch): ...; return batch")
        self.fn = fn

    def __call__(self, batch: dict) -> dict:
        out = self.fn({name: value.numpy() for name, value in batch.items()})
        if not isinstance(out, dict):
            raise InvalidDataError(f"NumpyTransform's fn {short(self.fn, 80)} returned a {type(out).__name__}; it "
                                   f"must return a dict name -> numpy array")
        result = {}
        for name, value in out.items():
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            if array.dtype.kind not in "biufc":
                raise InvalidDataError(f"NumpyTransform's fn returned {name!r} as {array.dtype} (got "
                                       f"{short(value, 60)}); return numeric numpy arrays")
            result[name] = torch.from_numpy(np.ascontiguousarray(array))
        return result

    def __repr__(self) -> str:
        return f"NumpyTransform({self.fn!r})"

