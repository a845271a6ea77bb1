"""Turning what users pass (numpy arrays, torch tensors, Python scalars and lists) into rows of a field.

Every write goes through ``coerce``: it never loses information silently. A cast is allowed when it
keeps every value (2.0 into an int field, 1 into a bool field) and refused with an ``InvalidDataError``
that names the field when it would not (2.5 into an int field, 300 into uint8, NaN into an int field).
Float to narrower float (float64 -> float32) is allowed as long as no finite value overflows.
Torch is never imported here: tensors are recognised by their type's module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidDataError
from .schema import FieldSpec

__all__ = ["as_array", "coerce"]


def is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _tensor_array(value: Any, label: str) -> np.ndarray:
    """A torch tensor's values as numpy, or the library's error saying which tensor it was and what to pass."""
    try:
        array: np.ndarray = value.detach().cpu().numpy()
        return array
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as error:
        # (torch's own errors: a dtype numpy lacks, a sparse or nested layout, a tensor holding no data)
        if getattr(value, "is_nested", False):
            kind = f"nested {value.dtype} tensor"
            fix = ("numpy cannot read a nested tensor (its rows may differ in length); pass one dense tensor with a "
                   "leading batch axis (torch.stack(rows) of rows of one length, or pad them first)")
        elif getattr(value, "is_sparse", False) or str(getattr(value, "layout", "")).startswith("torch.sparse"):
            kind, fix = f"sparse {value.dtype} tensor", "pass it dense: .to_dense()"
        elif str(getattr(value, "device", "")) == "meta":
            kind, fix = f"{value.dtype} tensor on device meta", "it holds no data: pass a tensor with values"
        else:
            kind, fix = f"{value.dtype} tensor: {error}", "convert it with .float() first"
        raise InvalidDataError(f"{label} must be convertible to numpy (got a {kind}); {fix}") from None


def as_array(value: Any, label: str) -> np.ndarray:
    """Any array-like of numbers as a numpy array (no copy for numpy input); a list or tuple of tensors is
    read tensor by tensor."""
    if isinstance(value, np.ndarray):
        array = value
    elif is_tensor(value):
        array = _tensor_array(value, label)
    else:
        if isinstance(value, (list, tuple)) and any(is_tensor(item) for item in value):
            value = [_tensor_array(item, label) if is_tensor(item) else item for item in value]
        try:
            array = np.asarray(value)
        except (ValueError, TypeError, OverflowError, RuntimeError) as error:
            hint = ("; pass one array or tensor with a leading batch axis, its rows of one shape (e.g. "
                    "torch.stack(rows))" if isinstance(value, (list, tuple)) else "")
            raise InvalidDataError(
                f"{label} must be an array of numbers (got {type(value).__name__}: {error}){hint}") from None
    if array.dtype.kind not in "biufc":
        big_ints = array.dtype.kind == "O" and array.size and all(type(x) is int for x in array.flat)
        hint = "an integer too large for int64" if big_ints else "only numbers, bools and arrays of them can be stored"
        raise InvalidDataError(
            f"{label} must hold numbers (got {type(value).__name__} of dtype {array.dtype}: {hint})"
        )
    return array


def _fit_shape(spec: FieldSpec, array: np.ndarray, lead: tuple[int, ...], label: str) -> np.ndarray:
    expected = lead + spec.shape
    if array.shape == expected:
        return array
    tail = array.shape[len(lead):]
    if array.shape[: len(lead)] == lead:
        # the seed package's leniency: a trailing singleton may be added or dropped
        if spec.shape == () and tail == (1,):
            return array[..., 0]
        if spec.shape == (1,) and tail == ():
            return array[..., None]
    if array.ndim == 0 and lead == ():
        return np.broadcast_to(array, expected)  # a scalar fills the whole row
    raise InvalidDataError(f"{label} must have shape {expected} (got {array.shape})")


def _check_integral(spec: FieldSpec, array: np.ndarray, label: str) -> None:
    if not np.isfinite(array).all():
        bad = array[~np.isfinite(array)].flat[0]
        raise InvalidDataError(f"{label} has dtype {spec.dtype} and cannot hold {bad} (got a non-finite "
                               f"{array.dtype} value)")
    fractional = array != np.trunc(array)
    if fractional.any():
        raise InvalidDataError(
            f"{label} has dtype {spec.dtype} and cannot hold {array[fractional].flat[0]} without losing its "
            f"fraction (got {array.dtype}); round or scale it first"
        )


def _check_range(spec: FieldSpec, array: np.ndarray, label: str) -> None:
    if array.size == 0 or np.can_cast(array.dtype, spec.dtype, "safe"):
        return
    info = np.iinfo(spec.dtype)
    low, high = array.min(), array.max()
    if array.dtype.kind == "f":
        # compare floats against powers of two, which floats hold exactly (iinfo.max may round up)
        too_low, too_high = float(low) < float(info.min), float(high) >= 2.0 ** (info.bits - (info.kind == "i"))
    else:
        too_low, too_high = int(low) < info.min, int(high) > info.max
    if too_low or too_high:
        bad = low if too_low else high
        raise InvalidDataError(
            f"{label} has dtype {spec.dtype} whose range is [{info.min}, {info.max}] (got {bad}); "
            f"clip it or choose a wider dtype"
        )


def _component_size(dtype: np.dtype) -> int:
    """Bytes of one real number of the dtype (a complex number has two)."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def cast(spec: FieldSpec, array: np.ndarray, label: str) -> np.ndarray:
    source, target = array.dtype, spec.dtype
    if source == target:
        return array
    if target.kind in "fc":
        if source.kind == "c" and target.kind == "f":
            raise InvalidDataError(f"{label} has dtype {target} and cannot hold complex values (got {source})")
        with np.errstate(over="ignore"):
            result = array.astype(target)
        if source.kind in "iu" and source.itemsize * 8 > np.finfo(target).nmant + 1:  # e.g. 2**53 + 1 into float64
            with np.errstate(invalid="ignore", over="ignore"):
                real = result.real if result.dtype.kind == "c" else result
                inexact = ~np.isfinite(real) | (real.astype(source) != array)  # 16777217 has no float32
            if inexact.any():
                raise InvalidDataError(
                    f"{label} has dtype {target} and cannot hold {array[inexact].flat[0]} exactly (got {source}); "
                    f"choose a wider float dtype or convert it yourself"
                )
        if source.kind in "fc" and _component_size(source) > _component_size(target):
            overflow = np.isinf(result) & np.isfinite(array)
            if overflow.any():
                raise InvalidDataError(
                    f"{label} has dtype {target} and {array[overflow].flat[0]} overflows it (got {source})"
                )
        return result
    if source.kind == "c":
        raise InvalidDataError(f"{label} has dtype {target} and cannot hold complex values (got {source})")
    if target.kind == "b":
        if source.kind != "b" and not ((array == 0) | (array == 1)).all():
            bad = array[(array != 0) & (array != 1)].flat[0]
            raise InvalidDataError(f"{label} has dtype bool and holds only 0/1 or False/True (got {bad})")
        return array.astype(target)
    if source.kind == "f":
        _check_integral(spec, array, label)
    if source.kind != "b":
        _check_range(spec, array, label)
    return array.astype(target)


def coerce(spec: FieldSpec, value: Any, lead: tuple[int, ...] = (), *, kind: str = "field") -> np.ndarray:
    """``value`` as an array of ``spec.dtype`` with shape ``lead + spec.shape``, or InvalidDataError."""
    label = f"{kind} {spec.name!r}"
    array = as_array(value, label)
    array = _fit_shape(spec, array, lead, label)
    return cast(spec, array, label)
