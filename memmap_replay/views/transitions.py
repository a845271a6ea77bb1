"""One-step transitions, as a DQN or SAC learner takes them (TorchRL's or cpprb's layout).

``TransitionView`` is ``NStepView`` with ``n_steps=1`` and its rules exactly, but it reads and returns only
what a one-step learner uses. With B the batch size, a batch holds:

- every field of ``fields`` (default: every step field) at t, (B, ...): the observations, ``action``,
  ``reward``, ...;
- ``next_<field>`` (B, ...) for each observation field: the next row (t + 1); at the last step of an
  episode the stored final observation, or zeros when the episode terminated without one (its discount
  is 0, so the value is never used);
- ``terminated`` and ``truncated``, bool (B,): True only at an episode's last step, when the episode
  terminated / was truncated;
- with ``gamma``: ``discount``, float32 (B,): ``gamma``, or 0 where terminated.

Which fields are observations: ``observation_fields=`` names them; by default every field of ``fields``
whose name starts with ``obs``, ``state``, ``image`` or ``pixel`` (``obs``, ``observation``,
``observation__pos``, ``state``, ``image_left``, ``pixels``, ...; case-insensitive). A store with none
of these names is refused with an error that says to pass ``observation_fields=``.

Which steps are transitions (the n-step view's rule): every step, except the last step of an episode
whose end is unknown (no end recorded, or truncated without a final observation): there is no next
state to learn from, so it is left out. ``frame_stack=k`` stacks the observation fields of 2 or more
dimensions (``stack_fields``) at t and at t + 1 alike.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..core.format import END_CODES
from ..core.options import check_names, number
from ..core.schema import OBSERVATION_PREFIXES, observation_like
from ..errors import OptionError
from .dataset import check_store
from .kinds import NStepView

__all__ = ["TransitionView", "OBSERVATION_PREFIXES", "observation_fields_of"]

_TRUNCATED = END_CODES["truncated"]
# NStepView's options that a transitions view sets itself
_NSTEP_ONLY = ("n_steps", "current_fields", "next_fields", "sequence_fields", "reward_field")


def observation_fields_of(fields: tuple[str, ...], chosen: Any = None, known: Any = None) -> tuple[str, ...]:
    """The observation fields among ``fields``: ``chosen`` (checked: step fields of ``known``, the store's,
    among ``fields``, at least one), else those named like observations (``OBSERVATION_PREFIXES``)."""
    if chosen is None:
        found = tuple(name for name in fields if observation_like(name))
        if not found:
            *most, last = OBSERVATION_PREFIXES
            prefixes = ", ".join(map(repr, most)) + f" or {last!r}"
            raise OptionError(
                f"a transitions view must know which fields are observations (they get a next_<field>): none of "
                f"the fields {list(fields)} has a name starting with {prefixes}; name them with "
                f"observation_fields=, e.g. buffer.dataset(transitions=True, observation_fields=({fields[0]!r},))"
                if fields else "a transitions view needs at least one field (got fields=())")
        return found
    chosen = check_names(chosen, dict.fromkeys(fields) if known is None else known, "field")
    outside = [name for name in chosen if name not in fields]
    if outside:
        raise OptionError(f"observation_fields {outside} must be among the fields the view returns, {list(fields)}: "
                          f"add them to fields=, or leave fields unset (every step field)")
    if not chosen:
        raise OptionError(f"observation_fields must name at least one of the fields {list(fields)} (got ()); leave "
                          f"it unset to take those named like observations")
    return chosen


class TransitionView(NStepView):
    """One-step transitions (t, t + 1) with ``terminated``/``truncated`` flags and, with ``gamma``, a
    ``discount``; see the module docstring."""

    kind = "transitions"
    refused_options = _NSTEP_ONLY  # NStepView's, which a transitions view sets itself

    def __init__(self, store, *, fields: Any = None, observation_fields: Any = None, gamma: float | None = None,
                 filter_fields: Mapping[str, Any] | None = None, frame_stack: int = 1, stack_fields: Any = None,
                 stack_pad: str = "repeat", **options: Any):
        refused = [name for name in _NSTEP_ONLY if name in options]
        if refused:
            raise OptionError(f"a transitions view takes fields= and observation_fields=, not {refused}: it returns "
                              f"the fields at t and next_<observation> at t + 1; for n-step transitions use "
                              f"n_steps= (NStepView) instead")
        schema = check_store(store).schema
        chosen = tuple(schema.fields) if fields is None else check_names(fields, schema.fields, "field")
        if fields is not None and not chosen:
            raise OptionError(f"fields must name at least one step field (got ()); the store's fields are "
                              f"{sorted(schema.fields)}")
        observed = observation_fields_of(chosen, observation_fields, schema.fields)
        # the discount's gamma, known to output_names() before NStepView's checks (its own gamma, for the
        # n-step return, stays None: no reward is read)
        self._discount = None if gamma is None else number(gamma, "gamma", low=0, high=1)
        super().__init__(store, 1, current_fields=chosen, next_fields=observed, sequence_fields=(),
                         filter_fields=filter_fields, frame_stack=frame_stack, stack_fields=stack_fields,
                         stack_pad=stack_pad, **options)
        self.fields = self.current_fields
        self.observation_fields = observed
        # as given; NStepView's targets carry it too from the next build on (their bootstrap column is
        # gamma or 0, as the discount is), but this view's outputs never read that column
        self.gamma = self._discount

    def read_fields(self) -> tuple[str, ...]:
        return self.current_fields  # the observation fields are among them: nothing else is read

    def output_names(self) -> list[str]:
        names = list(self.current_fields) + [f"next_{name}" for name in self.next_fields]
        names += ["terminated", "truncated"] + (["discount"] if self._discount is not None else [])
        names += list(self.meta_fields)
        return names + (["_index", "_t"] if self.return_indices else [])

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        batch, key, _ = self.gather_states(episode, t)
        table = self.table
        terminated = self.targets.terminal[key]
        truncated = (t == table.length[episode] - 1) & (table.end[episode] == _TRUNCATED)
        batch["terminated"], batch["truncated"] = torch.from_numpy(terminated), torch.from_numpy(truncated)
        if self._discount is not None:
            discount = np.where(terminated, np.float32(0), np.float32(self._discount))
            batch["discount"] = torch.from_numpy(discount)
        return batch
