"""Hindsight experience replay (Andrychowicz et al. 2017): goals relabelled when a batch is gathered.

``HindsightView`` is a one-step transition view (t -> t + 1, an ``NStepView`` with ``n_steps=1``) that,
for a ``relabel_ratio`` share of each batch, replaces the desired goal with a goal the episode actually
achieved, and recomputes the reward with the user's ``reward_fn(achieved_goal, desired_goal)`` (numpy
arrays with a leading batch axis, returning one reward per row; vectorized, and picklable, e.g. a
module-level function, so that DataLoader workers can use it). The stored data is never rewritten.

Strategies, for a transition at step t of an episode whose last stored row is ``last`` (its final
observation when one was stored, else its last step):

- ``future``: the achieved goal of a step drawn uniformly from t + 1 .. last;
- ``final``: the achieved goal at ``last``;
- ``episode``: the achieved goal of a step drawn uniformly from the whole episode, 0 .. last.

The relabelled goal replaces ``<goal_field>`` (and ``next_<goal_field>`` when it is output); the reward
is ``reward_fn(next_<achieved_field>, new goal)``. A transition whose next state was never stored (the
last step of an episode that terminated without a final observation) is not relabelled. ``_relabeled``
marks the rows that were. Which rows are relabelled, and with which step, follows a generator seeded by
``relabel_seed`` and the batch's own (episode, t) pairs, so the same batch relabels the same way in any process.
"""

from __future__ import annotations

import typing
import zlib
from typing import Any, Callable

import numpy as np
import torch

from ..core.convert import as_array, cast, is_tensor
from ..errors import InvalidDataError, OptionError
from ..core.options import choice, number, renamed, seed_option, short
from .kinds import NStepView

__all__ = ["HindsightView", "STRATEGIES"]

STRATEGIES = ("future", "final", "episode")
_NEEDED = "; hindsight needs goal_field=, achieved_field= and reward_fn=, e.g. dict(goal_field='goal', " \
         "achieved_field='achieved', reward_fn=f)"


class HindsightView(NStepView):
    """One-step transitions with hindsight goal relabelling (see the module docstring)."""

    def __init__(self, store, *, goal_field: str | None = None, achieved_field: str | None = None,
                 reward_fn: Callable[[np.ndarray, np.ndarray], Any] | None = None, strategy: str = "future",
                 relabel_ratio: float = 0.8, relabel_seed: int = 0, n_steps: int = 1, seed: int | None = None,
                 **options: Any):
        if isinstance(n_steps, (bool, np.bool_)) or not isinstance(n_steps, (int, np.integer)) or n_steps != 1:
            raise OptionError(f"hindsight relabelling works on one-step transitions: n_steps must be 1 "
                                   f"(got {short(n_steps)})")
        if not callable(reward_fn):
            raise OptionError(f"reward_fn must be a function (achieved_goal, desired_goal) -> rewards "
                                   f"(got {short(reward_fn)}){_NEEDED if reward_fn is None else ''}")
        strategy = choice(strategy, "strategy", STRATEGIES)
        relabel_ratio = number(relabel_ratio, "relabel_ratio", low=0, high=1)
        relabel_seed = renamed("seed", seed, "relabel_seed", relabel_seed, 0, "a HindsightView")
        relabel_seed = seed_option(relabel_seed, "relabel_seed", optional=False)
        super().__init__(store, 1, **options)
        fields = store.schema.fields
        for name, value in (("goal_field", goal_field), ("achieved_field", achieved_field)):
            if not isinstance(value, str) or value not in fields:
                raise OptionError(f"{name}={short(value)} is not a step field; the fields are {sorted(fields)}"
                                       f"{_NEEDED if value is None else ''}")
        if fields[goal_field].shape != fields[achieved_field].shape:
            raise OptionError(f"goal_field {goal_field!r} {fields[goal_field].shape} and achieved_field "
                                   f"{achieved_field!r} {fields[achieved_field].shape} must have the same shape")
        missing = [f"{kind} {name!r}" for kind, name, among in (
            ("current field", goal_field, self.current_fields), ("next field", achieved_field, self.next_fields),
            ("current field", self.reward_field, self.current_fields)) if name not in among]
        if missing:
            raise OptionError(f"hindsight relabelling needs the {', '.join(missing)} in the batch; add it to "
                                   f"current_fields / next_fields (or leave them unset: all fields)")
        # (both checked above: step fields' names)
        self.goal_field, self.achieved_field = typing.cast(str, goal_field), typing.cast(str, achieved_field)
        self.reward_fn = reward_fn
        self.strategy, self.relabel_ratio, self.relabel_seed = strategy, relabel_ratio, relabel_seed
        self.check_outputs()

    def output_names(self) -> list[str]:
        return super().output_names() + ["_relabeled"]

    def advise(self, episode: np.ndarray, t: np.ndarray, *, background: bool = False) -> bool:
        """The transitions' rows, and the rest of each episode in the achieved-goal field (relabelled goals
        are read from future steps: a goal field is small, so its whole remainder costs little)."""
        if not super().advise(episode, t, background=background):
            return False  # cached (auto mode's probe), or nothing to advise
        start = self.table.start[episode]
        self.readahead.batch([self._map(self.achieved_field)], start + t, start + self.table.length[episode] + 1,
                             background=background, probe=False)
        return True

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        batch = super().gather(episode, t)
        table = self.table
        ids = table.ids[episode]
        rng = np.random.default_rng([self.relabel_seed, zlib.crc32(ids.tobytes() + t.tobytes())])
        length, final = table.length[episode], table.final[episode]
        relabel = (rng.random(len(t)) < self.relabel_ratio) & ((t + 1 < length) | final)
        chosen = np.flatnonzero(relabel)
        if chosen.size:
            self._relabel(batch, chosen, episode[chosen], t[chosen], rng)
        batch["_relabeled"] = torch.from_numpy(relabel)
        return batch

    def _relabel(self, batch: dict, chosen: np.ndarray, episode: np.ndarray, t: np.ndarray, rng) -> None:
        table = self.table
        last = table.length[episode] - 1 + table.final[episode]
        if self.strategy == "future":
            low = t + 1
            goal_t = low + (rng.random(len(t)) * (last - low + 1)).astype(np.int64)
        elif self.strategy == "final":
            goal_t = last
        else:
            goal_t = (rng.random(len(t)) * (last + 1)).astype(np.int64)
        goal = self.values_of(self.achieved_field, table.start[episode] + np.minimum(goal_t, last))
        batch[self.goal_field].numpy()[chosen] = goal
        next_goal = batch.get(f"next_{self.goal_field}")
        if next_goal is not None:
            next_goal.numpy()[chosen] = goal
        achieved = batch[f"next_{self.achieved_field}"].numpy()[chosen]
        rewards = self._rewards(self.reward_fn(achieved, goal), len(chosen))
        batch[self.reward_field].numpy()[chosen] = rewards
        if "n_step_return" in batch:  # one step: the return is the reward
            batch["n_step_return"].numpy()[chosen] = rewards
        chunk = batch.get(f"seq_{self.reward_field}")
        if chunk is not None:
            chunk.numpy()[chosen, 0] = rewards

    def _rewards(self, result: Any, count: int) -> np.ndarray:
        """``reward_fn``'s result as ``count`` values of the reward field's dtype, or InvalidDataError: a
        tensor (with or without grad, on any device) or anything numpy takes, cast only without loss."""
        label = f"the reward_fn result for field {self.reward_field!r}"
        wanted = f"reward_fn must return {count} numbers, one per row, for a batch of {count} goals"
        if is_tensor(result):  # with or without grad, on any device (bfloat16 refused with a hint)
            rewards = as_array(result, label)
        else:
            try:
                rewards = np.asarray(result)
            except (ValueError, TypeError, OverflowError) as error:  # e.g. a ragged list
                raise InvalidDataError(f"{wanted} (got a {type(result).__name__} numpy cannot read as an array: "
                                       f"{error})") from None
        if rewards.shape != (count,) or rewards.dtype.kind not in "biuf":
            raise InvalidDataError(f"{wanted} (got {rewards.dtype} {rewards.shape})")
        return cast(self.store.schema.fields[self.reward_field], rewards, label)
