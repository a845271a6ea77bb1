"""``buffer.sampler(kind, **options)``: the options split between the sampler and its view."""

from __future__ import annotations

from typing import Any

from ..views.dataset import StoreView
from ..errors import InvalidDataError
from ..views.loader import keywords, make_dataset
from .prioritized import PrioritizedSampler, SequenceSampler
from .base import ReplaySampler, UniformSampler
from ..core.store import EpisodeStore

__all__ = ["SAMPLERS", "make_sampler"]

SAMPLERS = {"uniform": UniformSampler, "prioritized": PrioritizedSampler, "sequence": SequenceSampler}


def make_sampler(store: EpisodeStore, kind: str = "uniform", *, view: StoreView | None = None,
                 allow_empty: bool = False, **options: Any) -> ReplaySampler:
    """A ``kind`` sampler over ``view``, else over ``make_dataset(store, **view options)`` (single timesteps
    by default; a 'sequence' sampler needs ``window=``)."""
    cls = SAMPLERS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidDataError(f"kind must be one of {sorted(SAMPLERS)} (got {kind!r})")
    accepted = set().union(*(keywords(klass) for klass in cls.__mro__ if issubclass(klass, ReplaySampler)))
    sampler_options = {name: options.pop(name) for name in list(options) if name in accepted}
    if view is None:
        if kind == "sequence" and "window" not in options:
            raise InvalidDataError("a 'sequence' sampler draws windows: pass window=L (e.g. window=50)")
        if not {"n_steps", "window", "timestep_level", "hindsight"} & set(options):
            options["timestep_level"] = True
        view = make_dataset(store, allow_empty=allow_empty, **options)
    elif options:
        raise InvalidDataError(f"view options {sorted(options)} cannot be combined with view= (sampler options: "
                               f"{sorted(accepted)})")
    return cls(view, **sampler_options)
