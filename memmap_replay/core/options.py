"""Checking the options users pass (flags, counts, seeds, numbers, choices, names, devices).

One home for these checks so every entry point words its errors the same way: what the option must be,
what came, and (where it helps) how to fix it. Each check returns the value in its plain Python form.
Arrays, tensors and numpy scalars are refused where a plain value is meant: ``np.array([1, 2])`` as a
flag or a choice would otherwise end in numpy's "truth value is ambiguous".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import InvalidDataError, ReplayError

__all__ = ["flag", "integer", "seed_option", "number", "bounded", "choice", "names", "name"]

INT64_MAX = 2**63 - 1


def flag(value: Any, name: str, *, error: type[ReplayError] = InvalidDataError) -> bool:
    """A True/False option; anything else (a string, a number, an array) is an error, never silently truthy."""
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{name} must be True or False (got {short(value)})")
    return bool(value)


def integer(value: Any, name: str, *, low: int | None = 0, high: int | None = None,
            error: type[ReplayError] = InvalidDataError) -> int:
    """An int (Python or numpy) in [low, high]; None leaves that side open, but never past int64."""
    what = "a positive int" if low == 1 and high is None else f"an int{bounds(low, high)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise error(f"{name} must be {what} (got {short(value)})")
    if low is not None and value < low:
        raise error(f"{name} must be {what} (got {short(value)})")
    value = int(value)
    top = INT64_MAX if high is None else high
    if value > top:
        raise error(f"{name} must be at most {top} (got {value})")
    if value < -INT64_MAX - 1:
        raise error(f"{name} must be at least {-INT64_MAX - 1} (got {value})")
    return value


def seed_option(value: Any, name: str = "seed", *, optional: bool = True) -> int | None:
    """A seed: an int >= 0 (numpy's seed sequences refuse negative entropy), or None when optional."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidDataError(f"{name} must be an int >= 0{' or None' if optional else ''} (got {short(value)})")
    return int(value)


def number(value: Any, name: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> float:
    """A finite real number in [low, high] ((low, high] with ``low_open``)."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        try:
            result = float(value)
        except OverflowError:  # a Python int beyond float's range
            ok = False
        else:
            ok = math.isfinite(result) and (low is None or (result > low if low_open else result >= low)) \
                and (high is None or result <= high)
    if not ok:
        if low is not None and high is not None:
            where = f" in {'(' if low_open else '['}{low}, {high}]"
        elif low is not None:
            where = f" {'>' if low_open else '>='} {low}"
        elif high is not None:
            where = f" <= {high}"
        else:
            where = ""
        raise InvalidDataError(f"{name} must be a finite number{where} (got {short(value)})")
    return result


def choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """One of ``choices`` (compared by equality, only for values of a plain hashable type)."""
    choices = tuple(choices)
    if isinstance(value, (np.ndarray, list, dict, set)) or not any(
            type(value) is type(c) and value == c for c in choices):
        raise InvalidDataError(f"{name} must be one of {', '.join(map(repr, choices))} (got {short(value)})")
    return value


def name(value: Any, what: str) -> str:
    """A non-empty str (a field or option name)."""
    if not isinstance(value, str) or not value:
        raise InvalidDataError(f"{what} must be a name (a non-empty str) (got {short(value)})")
    return value


def names(value: Any, what: str, known: Iterable[str] | None = None, *, one: bool = True) -> tuple[str, ...]:
    """A name or a tuple/list of names (``one=False``: only a tuple/list), each in ``known`` when given."""
    if isinstance(value, str) and one:
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(isinstance(item, str) for item in value):
        form = "a name or a tuple of names" if one else "a tuple or list of names"
        raise InvalidDataError(f"{what} must be {form} (got {short(value)})")
    value = tuple(value)
    if known is not None:
        known = tuple(known)
        unknown = [item for item in value if item not in known]
        if unknown:
            raise InvalidDataError(f"{what} has unknown names {unknown}: the known ones are {sorted(known)}")
    return value


def bounds(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    return f" <= {high}" if high is not None else ""


def short(value: Any, limit: int = 120) -> str:
    """repr of a value, shortened to ``limit`` characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user object whose repr fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bounded(value: Any, name: str, low: float, high: float | None) -> float:
    """``options.number`` in [low, high] (``high=None``: open above), worded "a number in [low, high]" /
    "a number >= low", as the samplers' and hindsight's messages have always been; a Python int beyond
    int64 is refused too, as everywhere else (numpy holds no such int; it is never a meant float)."""
    where = f"in [{low}, {high}]" if high is not None else f">= {low}"
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InvalidDataError(f"{name} must be a number {where} (got {short(value)}, an int beyond int64)")
    try:
        return number(value, name, low=low, high=high)
    except InvalidDataError:
        raise InvalidDataError(f"{name} must be a number {where} (got {short(value)})") from None
