"""Checking the options users pass (flags, counts, seeds, numbers, choices, names, ranks, ...).

The one home for these checks, so that every entry point words its errors the same way: what the option
must be, what came, and (where it helps) how to fix it. Every check raises ``OptionError`` (a subclass of
``InvalidDataError``, so code catching that still catches these) and returns the value in its plain
Python form. Arrays, tensors and numpy scalars are refused where a plain value is meant:
``np.array([1, 2])`` as a flag or a choice would otherwise end in numpy's "truth value is ambiguous".

Also here, the checks of one option family that several rooms share or that once lived beside their only
caller: capacities (``positive_int``), an episode's ``end``, episode and env indices (``validate_index``,
``slice_bounds``), ``timeout``, ``quantiles``, field and meta-field names and filters (``check_names``,
``check_filter``, ``name_tuple``, ``named_tuple_option``) and the file names of priorities and rate limiters.

The torch-typed options (``device``, ``generator``) are checked in the views room (``views/_options.py``):
this module is numpy-only.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import keyword
import math
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any, Callable, Literal, TypeGuard, TypeVar, cast, overload

import numpy as np

from ..errors import ArgumentError, IndexTypeError, OptionError, ReplayError

__all__ = ["flag", "integer", "positive", "count", "batch_size", "seed_option", "rank_option", "follow_option",
           "number", "choice", "names", "name", "index", "short", "INT64_MAX", "positive_int", "check_end",
           "validate_index", "slice_bounds", "timeout_option", "check_quantiles", "check_names", "check_filter",
           "name_tuple", "named_tuple_option", "priorities_name", "limiter_name", "did_you_mean",
           "is_default", "not_at_defaults", "renamed", "deprecated", "keyword_errors"]

INT64_MAX = 2**63 - 1
_ENDS = ("terminated", "truncated")  # an episode's end (``end=``), None aside


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
    checked = int(value)
    top = INT64_MAX if high is None else high
    if checked > top:
        raise error(f"{name} must be at most {top} (got {checked})")
    if checked < -INT64_MAX - 1:
        raise error(f"{name} must be at least {-INT64_MAX - 1} (got {checked})")
    return checked


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


@overload
def seed_option(value: Any, name: str = ..., *, optional: Literal[False]) -> int: ...


@overload
def seed_option(value: Any, name: str = ..., *, optional: bool = ...) -> int | None: ...


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
    at = int(item)
    if not -size <= at < size:  # in Python ints: 2**63 and beyond must not overflow numpy
        raise IndexError(f"item indices must be in [0, {size}) (got {at})")
    return at + size if at < 0 else at


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
    found: tuple[str, ...] = tuple(value)
    if known is not None:
        known = tuple(known)
        unknown = [item for item in found if item not in known]
        if unknown:
            raise OptionError(f"{what} has unknown names {unknown}: the known ones are {sorted(known)}"
                              f"{did_you_mean(unknown, known)}")
    return found


def positive_int(value: Any, name: str) -> int:
    """A capacity count: a positive int below 2**40."""
    count = positive(value, name)
    if count >= 2**40:  # rows and slots are int64 byte offsets; the format caps counters at 2**62
        raise OptionError(f"{name} must be below 2**40 (got {count}); no machine holds that many")
    return count


def check_end(end: Any) -> str | None:
    if end is None:
        return None
    if not isinstance(end, str) or end not in _ENDS:  # an array is refused, never compared elementwise
        raise OptionError(f"end must be 'terminated', 'truncated' or None (got {short(end)})")
    return str(end)


def validate_index(value: Any, size: int, what: str) -> np.ndarray:
    """Integer indices in [0, size) as an int64 array, else InvalidDataError."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:  # e.g. a ragged list
        raise OptionError(
            f"{what} must be an int or a 1-d array of ints (got {type(value).__name__}: {error})") from None
    if array.dtype.kind not in "iu" or array.ndim > 1:
        raise OptionError(f"{what} must be an int or a 1-d array of ints (got {array.dtype} of shape {array.shape})")
    array = np.atleast_1d(array)
    if array.size:
        low, high = array.min(), array.max()  # in the given dtype: a uint64 beyond int64 must not wrap
        if low < 0 or high >= size:
            raise OptionError(f"{what} must be in [0, {size}) (got {low}..{high})")
    return array.astype(np.int64)


def slice_bounds(indices: slice, size: int) -> tuple[int, int, int]:
    """start, stop, step of a slice over ``size`` slots; its bounds must be ints or None, its step not 0."""
    for what in ("start", "stop", "step"):
        if getattr(indices, what) is not None:
            integer(getattr(indices, what), f"episode indices as a slice: its {what}", low=None)  # or None
    if indices.step == 0:
        raise OptionError(f"episode indices as a slice must have a non-zero step (got {short(indices)})")
    return indices.indices(size)


def timeout_option(value: Any) -> float:
    return number(value, "timeout", low=0.0, low_open=True)


def check_quantiles(quantiles: Any) -> tuple[float, ...]:
    if quantiles is None:
        return ()
    if isinstance(quantiles, (int, float, np.integer, np.floating)) and not isinstance(quantiles, bool):
        quantiles = (quantiles,)
    if not isinstance(quantiles, (tuple, list)) or not quantiles:
        raise OptionError(f"quantiles must be a number in [0, 1] or a non-empty tuple of them (got {quantiles!r})")
    return tuple(number(q, "each quantile", low=0.0, high=1.0) for q in quantiles)


def check_names(value: Any, known: Mapping[str, Any], what: str) -> tuple[str, ...]:
    """A name or a tuple/list of names (``names``), each in ``known``."""
    checked = names(value, f"{what}s")
    unknown = [item for item in checked if item not in known]
    if unknown:
        raise OptionError(f"unknown {what} {unknown}: the store's {what}s are {sorted(known)}"
                          f"{did_you_mean(unknown, known)}")
    return checked


def check_filter(filters: Any, known: Mapping[str, Any], option: str, what: str) -> bool:
    """A ``filter_meta`` / ``filter_fields`` dict of known names (None: no filter); True if it filters."""
    if filters is None:
        return False
    if not isinstance(filters, Mapping):  # never 0, '' or [] as 'no filter', never an array's truth value
        raise OptionError(f"{option} must be a dict of {what} -> value, e.g. {{'name': 1}} (got {short(filters)})")
    for name in filters:
        if not isinstance(name, str):
            raise OptionError(f"{option} keys must be {what} names (str) (got {short(name)} in {short(filters)})")
    unknown = [name for name in filters if name not in known]
    if unknown:
        raise OptionError(f"{option} has unknown {what} {unknown}: the store's {what}s are {sorted(known)}"
                          f"{did_you_mean(unknown, known)}")
    return bool(filters)


def name_tuple(names: Any, known: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    """One name (a str) or a tuple/list of names, each in ``known``."""
    if isinstance(names, str):
        names = (names,)
    if not isinstance(names, (tuple, list)):
        raise OptionError(f"{kind}s must be a name or a tuple of names (got {short(names)})")
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise OptionError(f"unknown {kind} {short(name)}: the store's {kind}s are {sorted(known)}"
                              f"{did_you_mean([name], known)}")
    return tuple(names)


def named_tuple_option(value: Any) -> tuple[str, ...] | None:
    """``to_named_tuple``: batch names (leading underscores are dropped in the tuple's field names)."""
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not all(isinstance(name, str) for name in names):
        hint = "; it is not a switch: name the outputs the tuple holds" if isinstance(value, (bool, np.bool_)) else ""
        raise OptionError(f"to_named_tuple must be a tuple of output names, e.g. ('obs', 'action'), one per entry of "
                          f"the named tuple, in order (got {short(value)}){hint}")
    names = tuple(names)
    fields = [name.lstrip("_") for name in names]
    if (len(set(fields)) != len(fields) or not all(name.isidentifier() for name in fields)
            or any(keyword.iskeyword(name) for name in fields)):
        raise OptionError(f"to_named_tuple names must be distinct identifiers, not Python keywords, once leading "
                               f"underscores are dropped (got {names}); rename an output with fieldname_map")
    return names


_FILE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_file_name(name: Any, *, not_only_marks: bool = True) -> TypeGuard[str]:
    """Whether ``name`` names the library's files in a store folder (priorities/, ratelimit/, training/): ASCII
    letters, digits, '_' and '-', at most 64 (non-ASCII letters take up to 4 bytes each: 64 of them would not
    fit a file system's 255-byte names), and (``not_only_marks``) not only '_' and '-'."""
    return (isinstance(name, str) and _FILE_NAME.fullmatch(name) is not None
            and (not not_only_marks or bool(name.strip("_-"))))


def priorities_name(name: Any) -> str:
    """A name of files under priorities/ (``is_file_name``)."""
    if not is_file_name(name):
        raise OptionError(f"name must be letters, digits, '_' or '-' (at most 64), a file name (got {name!r})")
    return name


def limiter_name(name: Any) -> str:
    if not is_file_name(name, not_only_marks=False):
        raise OptionError(f"name must be 1 to 64 letters, digits, '_' or '-' (a file name) (got {short(name)})")
    return name


def did_you_mean(unknown: Iterable[Any], known: Iterable[Any]) -> str:
    """``"; did you mean 'shuffle'?"`` for the unknown names close to a known one (``difflib``), else ``""``:
    the end of an unknown-name message. With several unknown names, each suggestion says whose it is."""
    unknown = list(unknown)
    known = [name for name in known if isinstance(name, str)]
    pairs = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1) if isinstance(name, str) else []
        if close:
            pairs.append((name, close[0]))
    if not pairs:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {pairs[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{close!r} for {name!r}" for name, close in pairs) + "?"


def is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is an option's ``default``: the same object, or an equal plain value of its type
    (never an array's elementwise comparison)."""
    if value is default:
        return True
    if default is None or not isinstance(default, (bool, int, float, str, tuple)):
        return False
    return type(value) is type(default) and value == default


def not_at_defaults(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The ``options`` whose values are not their ``defaults`` (``is_default``)."""
    return {name: value for name, value in options.items() if not is_default(value, defaults[name])}


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the caller's first frame outside this package (Python shows
    one attributed to ``__main__``, and tests can tell whose call it was)."""
    frame: FrameType | None = sys._getframe(1)
    level = 2  # (stacklevel 2: the caller of this function)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def renamed(old: str, value: Any, new: str, current: Any, default: Any, where: str) -> Any:
    """The value of option ``new`` when the caller may have used its old spelling ``old`` (kept for one
    release, with a ``DeprecationWarning`` that names the new one): ``value`` (``old``'s, None when not
    given) or ``current`` (``new``'s, ``default`` when not given); both given is an error."""
    if value is None:
        return current
    deprecated(f"{old}= of {where} is now spelled {new}= (the old spelling goes in the next release)")
    if not is_default(current, default):
        raise OptionError(f"{old}= and {new}= of {where} are one option ({new}= is its new name); pass {new}= only "
                          f"(got {old}={short(value)}, {new}={short(current)})")
    return value


_Entry = TypeVar("_Entry", bound=Callable[..., Any])


def keyword_errors(where: str) -> Callable[[_Entry], _Entry]:
    """A decorator for an entry point with a typed signature: an unknown keyword (or a missing or extra
    argument) is an ``OptionError`` that names the closest option, not Python's bare ``TypeError``.
    ``inspect.signature`` and editors still show the function's own signature."""

    def decorate(function: _Entry) -> _Entry:
        signature = inspect.signature(function)
        known = [name for name in signature.parameters if name != "self"]

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as error:
                unknown = sorted(name for name in kwargs if name not in signature.parameters)
                if unknown:
                    raise ArgumentError(f"unknown keyword {unknown} for {where} (help({where}) lists its options)"
                                        f"{did_you_mean(unknown, known)}") from None
                raise ArgumentError(f"{where}: {error}") from None
            return function(*args, **kwargs)

        return cast(_Entry, checked)  # (the function's own signature: functools.wraps)

    return decorate


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
