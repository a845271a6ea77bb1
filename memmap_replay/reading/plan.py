"""A read call's arguments, composed into one frozen plan: the view's, the sampler's and the loader's options.

An entry point (``reading/entries.py``) passes its arguments here as they came. ``compose`` keeps those not
at their defaults, maps an old spelling to its new name (with a ``DeprecationWarning`` that names it),
runs each option's check from the table (``reading/table.py``), and splits them by owner. Nothing is
built yet: ``reading/build.py`` builds the view, the sampler and the DataLoader from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..core.options import deprecated, did_you_mean, is_default, short
from ..errors import OptionError
from .table import BY_NAME, HINDSIGHT_OPTIONS, Option

__all__ = ["ReadPlan", "compose", "hindsight_options"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ReadPlan:
    """The options of one read call that are not at their defaults, by owner (``reading/table.py``)."""

    entry: str
    view: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    sampler: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    loader: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


def _renamed(option: Option, where: str) -> None:
    deprecated(f"{option.name}= of {where} is now spelled {option.renamed}= (the old spelling goes in the next "
               f"release): {option.doc}")


def compose(entry: str, arguments: Mapping[str, Any], *, where: str = "") -> ReadPlan:
    """The plan of an entry point's call: ``arguments`` are its keyword options, each named by the table."""
    table = BY_NAME[entry]
    where = where or entry
    given: dict[str, Any] = {}
    for name, value in arguments.items():
        option = table[name]
        if option.renamed is not None:
            if value is None:
                continue
            _renamed(option, where)
            new = table[option.renamed]
            current = arguments.get(new.name, new.default)
            if not is_default(current, new.default):
                raise OptionError(f"{name}= and {new.name}= are one option ({new.name}= is its new name); pass "
                                  f"{new.name}= only (got {name}={short(value)}, {new.name}={short(current)})")
            option = new
        elif is_default(value, option.default):
            continue
        if option.check is not None:
            option.check(value, option.name)
        given[option.name] = value
    parts: dict[str, dict[str, Any]] = {"view": {}, "sampler": {}, "loader": {}}
    for name, value in given.items():
        parts[table[name].owner][name] = value
    return ReadPlan(entry, **{owner: MappingProxyType(part) for owner, part in parts.items()})


_HINDSIGHT = {option.name: option for option in HINDSIGHT_OPTIONS}


def hindsight_options(value: Any) -> dict[str, Any]:
    """``hindsight=``'s dict, its keys checked against the table (an old spelling mapped to its new name)."""
    if not isinstance(value, Mapping):
        raise OptionError(f"hindsight must be a dict of HindsightView options, e.g. dict(goal_field='goal', "
                          f"achieved_field='achieved', reward_fn=f) (got {short(value)})")
    options = dict(value)
    unknown = sorted(str(name) for name in options if name not in _HINDSIGHT)
    if unknown:
        known = sorted(name for name, option in _HINDSIGHT.items() if option.renamed is None)
        raise OptionError(f"unknown hindsight option {unknown}; hindsight= takes {known}{did_you_mean(unknown, known)}")
    for name in [name for name in options if _HINDSIGHT[name].renamed]:
        option = _HINDSIGHT[name]
        _renamed(option, "hindsight=")
        if option.renamed in options:
            raise OptionError(f"hindsight= has both {name!r} and {option.renamed!r}, one option ({option.renamed!r} "
                              f"is its new name); keep {option.renamed!r} only")
        options[option.renamed] = options.pop(name)
    return options

