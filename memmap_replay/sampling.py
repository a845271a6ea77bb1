"""``buffer.sampler(kind, **options)``: the options split between the sampler and its view."""

from __future__ import annotations

import inspect
from typing import Any

from .errors import InvalidDataError
from .loader import make_dataset
from .prioritized import PrioritizedSampler, SequenceSampler
from .samplers import ReplaySampler, UniformSampler
from .store import EpisodeStore

__all__ = ["SAMPLERS", "make_sampler"]

SAMPLERS = {"uniform": UniformSampler, "prioritized": PrioritizedSampler, "sequence": SequenceSampler}


def sampler_keywords(cls) -> set[str]:
    names = set()
    for klass in cls.__mro__:
        if klass in (object,) or "__init__" not in vars(klass):
            continue
        names |= {name for name, p in inspect.signature(klass.__init__).parameters.items()
                  if p.kind is p.KEYWORD_ONLY}
        if klass is ReplaySampler:
            break
    return names


def make_sampler(store: EpisodeStore, kind: str = "uniform", **options: Any) -> ReplaySampler:
    """A ``kind`` sampler over ``make_dataset(store, **view options)`` (single timesteps by default; a
    'sequence' sampler needs ``window=``)."""
    cls = SAMPLERS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidDataError(f"kind must be one of {sorted(SAMPLERS)} (got {kind!r})")
    accepted = sampler_keywords(cls)
    sampler_options = {name: options.pop(name) for name in list(options) if name in accepted}
    if kind == "sequence" and "window" not in options:
        raise InvalidDataError("a 'sequence' sampler draws windows: pass window=L (e.g. window=50)")
    if not {"n_steps", "window", "timestep_level"} & set(options):
        options["timestep_level"] = True
    view = make_dataset(store, **options)
    return cls(view, **sampler_options)
