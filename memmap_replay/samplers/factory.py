"""The sampler kinds by name (``buffer.sampler(kind, ...)``; which options are the sampler's and which its
view's, the option table says: ``reading/table.py``)."""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .base import ReplaySampler, UniformSampler
from .prioritized import PrioritizedSampler
from .sequence import SequenceSampler

__all__ = ["SAMPLERS", "sampler_class"]

SAMPLERS = {"uniform": UniformSampler, "prioritized": PrioritizedSampler, "sequence": SequenceSampler}


def sampler_class(kind: Any) -> type[ReplaySampler]:
    """The sampler class of a kind's name."""
    cls = SAMPLERS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise OptionError(f"kind must be one of {sorted(SAMPLERS)} (got {kind!r})")
    return cls
