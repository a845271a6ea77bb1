"""The sampler kinds by name, and which options of ``buffer.sampler(kind, **options)`` are the sampler's
(the rest are its view's: the views room's ``make_sampler`` builds both)."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import OptionError
from .base import ReplaySampler, UniformSampler
from .prioritized import PrioritizedSampler
from .sequence import SequenceSampler

__all__ = ["SAMPLERS", "sampler_class", "sampler_options"]

SAMPLERS = {"uniform": UniformSampler, "prioritized": PrioritizedSampler, "sequence": SequenceSampler}


def sampler_class(kind: Any) -> type[ReplaySampler]:
    """The sampler class of a kind's name."""
    cls = SAMPLERS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise OptionError(f"kind must be one of {sorted(SAMPLERS)} (got {kind!r})")
    return cls


def sampler_options(cls: type[ReplaySampler], options: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The options ``cls`` takes, popped from ``options`` (what is left is the view's), and every keyword it takes."""
    accepted: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if issubclass(klass, ReplaySampler) and init is not None:
            accepted |= {name for name, p in inspect.signature(init).parameters.items() if p.kind is p.KEYWORD_ONLY}
    return {name: options.pop(name) for name in list(options) if name in accepted}, accepted
