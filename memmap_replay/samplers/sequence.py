"""Prioritized sequences (R2D2): a window view's windows drawn by priority, one priority per window or
per step (``eta * max + (1 - eta) * mean`` over each window's steps)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidDataError, OptionError
from ..core.index import PositionSource
from ..core.options import number
from .prioritized import _FLOAT_MAX, PrioritizedSampler, as_numpy

__all__ = ["SequenceSampler"]


class SequenceSampler(PrioritizedSampler):
    """Prioritized windows (R2D2): a ``WindowView``'s windows drawn by priority; ``update_priorities`` takes
    one priority per window, or per step ``(B, L)`` (e.g. ``|td_error|``), which becomes
    ``eta * max + (1 - eta) * mean`` over the window. For uniform windows use ``UniformSampler``."""

    def __init__(self, view: PositionSource, *, eta: float = 0.9, **options: Any):
        if not (hasattr(view, "window") and hasattr(view, "time_major")):  # a WindowView
            raise OptionError(f"a SequenceSampler draws windows: pass buffer.dataset(window=L) "
                                   f"(got a {type(view).__name__})")
        self.eta = number(eta, "eta", low=0.0, high=1.0)
        super().__init__(view, **options)

    def update_priorities(self, keys: Any, priorities: Any, mask: Any = None) -> int:
        """Priorities per window ``(B,)``, or per step ``(B, L)`` (``(L, B)`` from a time-major view),
        combined as ``eta * max + (1 - eta) * mean`` over each window's steps; ``mask`` (the batch's
        ``_mask`` of partial windows) leaves the padding steps out."""
        priorities = as_numpy(priorities)
        if priorities.ndim != 2:
            if mask is not None:
                raise InvalidDataError("mask= goes with step priorities (batch, window); these are one per window")
            return super().update_priorities(keys, priorities)
        window = self.view.window
        if self.view.time_major:
            priorities = priorities.T
        if priorities.shape[1] != window:
            layout = f"({window}, batch) from this time-major view" if self.view.time_major else f"(batch, {window})"
            raise InvalidDataError(f"step priorities must be {layout} (got {priorities.shape})")
        if priorities.dtype.kind not in "biuf":
            raise InvalidDataError(f"step priorities must be numbers (got {priorities.dtype})")
        if priorities.size:
            highest = float(priorities.max())
            if not (priorities.min() >= 0 and highest < np.inf):
                raise InvalidDataError("step priorities must be finite and >= 0; e.g. abs(td_error) + 1e-6")
            limit = min(self.max_raw, _FLOAT_MAX / (2 * window))  # (a window's mean sums its steps)
            if highest > limit:
                raise InvalidDataError("step " + self._too_large(highest, limit))
        priorities = priorities.astype(np.float64)
        if mask is None:
            return super().update_priorities(keys, self.eta * priorities.max(axis=1)
                                             + (1 - self.eta) * priorities.mean(axis=1))
        mask = as_numpy(mask)
        mask = mask.T if self.view.time_major and mask.shape != priorities.shape else mask
        if mask.shape != priorities.shape or mask.dtype != bool or not mask[:, 0].all():
            raise InvalidDataError(f"mask must be the batch's '_mask': bools of shape {priorities.shape}, True at "
                                   f"each window's first step (got {mask.dtype} {mask.shape})")
        steps = mask.sum(axis=1)
        highest = np.where(mask, priorities, 0.0).max(axis=1)
        mean = np.where(mask, priorities, 0.0).sum(axis=1) / steps
        return super().update_priorities(keys, self.eta * highest + (1 - self.eta) * mean)
