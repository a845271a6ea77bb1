"""Checking the options users pass (flags, counts, seeds, numbers, choices, names, ranks, ...).

The one home for these checks, so that every entry point words its errors the same way: what the option
must be, what came, and (where it helps) how to fix it. Every check raises ``OptionError`` (a subclass of
``InvalidDataError``, so code catching that still catches these) and returns the value in its plain
Python form. Arrays, tensors and numpy scalars are refused where a plain value is meant:
``np.array([1, 2])`` as a flag or a choice would otherwise end in numpy's "truth value is ambiguous".

The torch-typed options (``device``, ``generator``) are checked in the views room (``views.tensors``,
``views.loader``): this module is numpy-only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import IndexTypeError, OptionError, ReplayError

__all__ = ["flag", "integer", "positive", "count", "batch_size", "seed_option", "rank_option", "follow_option",
           "number", "choice", "names", "name", "index", "short", "INT64_MAX"]

INT64_MAX = 2**63 - 1


def flag(value: Any, name: str, *, error: type[ReplayError] = OptionError) -> bool:
    """A True/False option; anything else (a string, a number, an array) is an error, never silently truthy."""
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{name} must be True or False (got {short(value)})")
    return bool(value)


def integer(value: Any, name: str, *, low: int | None = 0, high: int | None = None,
            error: type[ReplayError] = OptionError) -> int:
    """An int (Python or numpy) in [low, high]; None leaves that side open, but never past int64."""
    what = "a positive int" if low == 1 and high is None else f"an int{_bounds(low, high)}"
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


def positive(value: Any, name: str, *, most: int | None = None, most_is: str = "") -> int:
    """A positive int, at most ``most`` when given (worded "at most {most_is}{most}", e.g. most_is="the
    store's max_timesteps=")."""
    if (most is not None and isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            and value > most):
        raise OptionError(f"{name} must be at most {most_is}{most} (got {value})")
    return integer(value, name, low=1)


def count(value: Any, name: str) -> int:
    """A number of items: an int in [0, 2**63 - 1] (so that ``len()`` over them works)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value > INT64_MAX:
        raise OptionError(f"{name} must be an int in [0, {INT64_MAX}] (got {value})")
    return integer(value, name, low=0)


def batch_size(value: Any) -> int:
    """``batch_size``: a positive int."""
    return integer(value, "batch_size", low=1)


def seed_option(value: Any, name: str = "seed", *, optional: bool = True) -> int | None:
    """A seed: an int >= 0 (numpy's seed sequences refuse negative entropy), or None when optional."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise OptionError(f"{name} must be an int >= 0{' or None' if optional else ''} (got {short(value)})")
    return int(value)


def rank_option(rank: Any, world_size: Any) -> tuple[int, int]:
    """``(rank, world_size)`` of a distributed run: None means 0 and 1; 0 <= rank < world_size."""
    rank = integer(0 if rank is None else rank, "rank", low=0)
    world_size = integer(1 if world_size is None else world_size, "world_size", low=None)
    if world_size < 1:  # (integer(low=1) would word it "a positive int")
        raise OptionError(f"world_size must be an int >= 1 (got {world_size})")
    if rank >= world_size:
        raise OptionError(f"rank must be below world_size={world_size} (got {rank})")
    return rank, world_size


def follow_option(value: Any) -> bool | str:
    """``follow``: True, False (Python or numpy bools) or 'disk'."""
    if isinstance(value, str) and value == "disk":
        return "disk"
    if not isinstance(value, (bool, np.bool_)):
        raise OptionError(f"follow must be True, False or 'disk' (got {short(value)})")
    return bool(value)


def number(value: Any, name: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> float:
    """A finite real number in [low, high] ((low, high] with ``low_open``; None leaves a side open). A
    Python int beyond int64 is refused, as everywhere else (numpy holds no such int; it is never a meant
    float)."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    beyond = ok and isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX
    if ok and not beyond:
        result = float(value)
        ok = math.isfinite(result) and (low is None or (result > low if low_open else result >= low)) \
            and (high is None or result <= high)
    if beyond or not ok:
        if low is not None and high is not None:
            where = f" in {'(' if low_open else '['}{low}, {high}]"
        elif low is not None:
            where = f" {'>' if low_open else '>='} {low}"
        elif high is not None:
            where = f" <= {high}"
        else:
            where = ""
        raise OptionError(f"{name} must be a finite number{where} (got {short(value)}"
                          f"{', an int beyond int64' if beyond else ''})")
    return result


def index(item: Any, size: int) -> int:
    """The item number of ``view[item]``, in [0, size): an int (Python or numpy, never a bool:
    ``view[True]`` is not ``view[1]``), negative ones counting from the end. The wrong type is an
    ``IndexTypeError`` (an OptionError and a TypeError); out of range is Python's ``IndexError``, which
    ends iteration over a view."""
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
        raise IndexTypeError(f"a view is indexed by an int (got {type(item).__name__}); use __getitems__ for a batch")
    item = int(item)
    if not -size <= item < size:  # in Python ints: 2**63 and beyond must not overflow numpy
        raise IndexError(f"item indices must be in [0, {size}) (got {item})")
    return item + size if item < 0 else item


def choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """One of ``choices`` (compared by equality, only for values of a plain hashable type)."""
    choices = tuple(choices)
    if isinstance(value, (np.ndarray, list, dict, set)) or not any(
            type(value) is type(c) and value == c for c in choices):
        raise OptionError(f"{name} must be one of {', '.join(map(repr, choices))} (got {short(value)})")
    return value


def name(value: Any, what: str) -> str:
    """A non-empty str (a field or option name)."""
    if not isinstance(value, str) or not value:
        raise OptionError(f"{what} must be a name (a non-empty str) (got {short(value)})")
    return value


def names(value: Any, what: str, known: Iterable[str] | None = None, *, one: bool = True) -> tuple[str, ...]:
    """A name or a tuple/list of names (``one=False``: only a tuple/list), each in ``known`` when given."""
    if isinstance(value, str) and one:
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(isinstance(item, str) for item in value):
        form = "a name or a tuple of names" if one else "a tuple or list of names"
        raise OptionError(f"{what} must be {form} (got {short(value)})")
    value = tuple(value)
    if known is not None:
        known = tuple(known)
        unknown = [item for item in value if item not in known]
        if unknown:
            raise OptionError(f"{what} has unknown names {unknown}: the known ones are {sorted(known)}")
    return value


def _bounds(low: int | None, high: int | None) -> str:
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
