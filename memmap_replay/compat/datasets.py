"""memmap-replay-buffer 0.2.3's datasets, as thin subclasses of this project's views.

``ReplayDatasetTrajectory(buffer, fields=..., ...)`` (alias ``ReplayDataset``), ``ReplayDatasetTimestep``,
``ReplayDatasetTimeWindow`` and ``ReplayDatasetNStep`` take 0.2.3's arguments (a ``ReplayBuffer``, or a
folder opened read-only) and give 0.2.3's keys and shapes; they are views (``views.kinds``), so a batch is
gathered with one call per field and ``buffer.dataloader(dataset=ds, ...)`` takes them. ``dataset_of``
is 0.2.3's ``buffer.dataset(...)`` switch over these classes.

What an item holds, as in 0.2.3 (meta fields ride along unless ``include_metadata=False``):

- trajectory: the fields (T, ...) up to the episode's length (``max_timesteps`` rows, zero past the end,
  with ``slice_by_episode_len=False``), ``_lens`` (unless ``return_episode_lens=False``), ``_index`` (the
  episode's buffer row) with ``return_indices``; a batch pads to its longest episode;
- timestep: the fields at (episode, t), ``_indices`` = [row, t] with ``return_indices``;
- time window: one item per episode, a window of ``window_length`` steps at a random start (zero-padded
  when the episode is shorter), ``_lens``, ``_reaches_episode_end``, and ``_index``, ``_start`` with
  ``return_indices``; the start comes from the dataset's own generator (``seed=``), not numpy's global one;
- n-step: ``current_fields`` at t, ``next_<field>`` at t + n (clipped to the episode), ``seq_<field>``
  (zero-padded), ``n_step_lens``, ``_indices``; episodes of at least 2 steps.

Differences: episodes come oldest first (0.2.3: by buffer row; the same until a ring wraps); a plain torch
``DataLoader(ds, batch_size=B)`` hands its ``collate_fn`` the gathered batch dict, not B item dicts (use
``buffer.dataloader(dataset=ds, ...)``, or ``collate_fn=lambda batch: batch``); unknown keywords are errors.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch

from ..core.index import Positions
from ..core.options import flag, seed_option, short
from ..core.store import EpisodeStore
from ..errors import OptionError
from ..views.kinds import NStepView, TimestepView, TrajectoryView, WindowView

__all__ = ["ReplayDataset", "ReplayDatasetTrajectory", "ReplayDatasetTimestep", "ReplayDatasetTimeWindow",
           "ReplayDatasetNStep", "dataset_of", "store_of"]


def store_of(replay_buffer: Any) -> EpisodeStore:
    """The store a 0.2.3 dataset reads: a ``ReplayBuffer``'s, an ``EpisodeStore``, or a folder opened read-only."""
    if isinstance(replay_buffer, (str, os.PathLike)):
        return EpisodeStore.open(replay_buffer, "r")
    store = getattr(replay_buffer, "episode_store", replay_buffer)
    if not isinstance(store, EpisodeStore):
        raise OptionError(f"a replay dataset reads a ReplayBuffer, or the folder of one (got {short(replay_buffer)})")
    return store


def _meta_fields(include_metadata: Any, options: dict) -> Any:
    """0.2.3's ``include_metadata`` as this project's ``meta_fields`` (None: every meta field)."""
    if flag(include_metadata, "include_metadata"):
        return options.pop("meta_fields", None)
    if options.get("meta_fields"):
        raise OptionError("include_metadata=False and meta_fields contradict each other; pass one of them")
    options.pop("meta_fields", None)
    return ()


def _one_each(view) -> Positions:
    """One position (t = 0) per episode of the view (its table holds those of at least ``min_episode_len`` steps)."""
    return Positions.from_counts(np.ones(len(view.table), dtype=np.int64))


if TYPE_CHECKING:
    from ..views.dataset import StoreView as _StepBase  # the view the mixin goes before (a store view)
else:
    _StepBase = object


class _StepIndices(_StepBase):
    """With ``return_indices``, this project's ``_index`` (row) and ``_t`` as 0.2.3's ``_indices`` [row, t]."""

    def output_names(self) -> list[str]:
        names = super().output_names()
        return [name for name in names if name not in ("_index", "_t")] + (["_indices"] if "_index" in names else [])

    def assemble(self, episode: np.ndarray, t: np.ndarray, generation: int | None = None) -> dict[str, torch.Tensor]:
        batch = super().assemble(episode, t, generation)
        if "_index" in batch:
            batch["_indices"] = torch.stack((batch.pop("_index"), batch.pop("_t")), dim=-1)
        return batch


class ReplayDatasetTrajectory(TrajectoryView):
    """Whole episodes (0.2.3's ``ReplayDatasetTrajectory``, also ``ReplayDataset``)."""

    def __init__(self, replay_buffer: Any, fields: Any = None, fieldname_map: Mapping[str, str] | None = None,
                 include_metadata: bool = True, filter_meta: Mapping[str, Any] | None = None,
                 filter_fields: Mapping[str, Any] | None = None, return_indices: bool = False,
                 slice_by_episode_len: bool = True, return_episode_lens: bool = True, *, min_episode_len: int = 1,
                 **options: Any):
        if filter_fields is not None:
            raise OptionError("filter_fields applies to single steps and n-step transitions (ReplayDatasetTimestep, "
                              "ReplayDatasetNStep), not to whole trajectories; use filter_meta here")
        super().__init__(store_of(replay_buffer), fields=fields, fieldname_map=fieldname_map,
                         meta_fields=_meta_fields(include_metadata, options), filter_meta=filter_meta,
                         return_indices=return_indices, slice_by_episode_len=slice_by_episode_len,
                         return_episode_lens=return_episode_lens, min_episode_len=min_episode_len, **options)
        self.build()

    def build(self) -> None:
        self.positions = _one_each(self)

    def output_names(self) -> list[str]:
        return [name for name in super().output_names() if name != "_t"]

    def assemble(self, episode: np.ndarray, t: np.ndarray, generation: int | None = None) -> dict[str, torch.Tensor]:
        batch = super().assemble(episode, t, generation)
        batch.pop("_t", None)
        return batch


ReplayDataset = ReplayDatasetTrajectory


class ReplayDatasetTimestep(_StepIndices, TimestepView):
    """Single timesteps (0.2.3's ``ReplayDatasetTimestep``)."""

    def __init__(self, replay_buffer: Any, fields: Any = None, fieldname_map: Mapping[str, str] | None = None,
                 return_indices: bool = False, include_metadata: bool = True,
                 filter_meta: Mapping[str, Any] | None = None, filter_fields: Mapping[str, Any] | None = None,
                 **options: Any):
        super().__init__(store_of(replay_buffer), fields=fields, fieldname_map=fieldname_map,
                         meta_fields=_meta_fields(include_metadata, options), filter_meta=filter_meta,
                         filter_fields=filter_fields, return_indices=return_indices, **options)


class ReplayDatasetNStep(_StepIndices, NStepView):
    """n-step transitions (0.2.3's ``ReplayDatasetNStep``): from episodes of at least 2 steps, as there."""

    def __init__(self, replay_buffer: Any, n_steps: int, current_fields: Any = None, next_fields: Any = None,
                 sequence_fields: Any = None, fieldname_map: Mapping[str, str] | None = None,
                 return_indices: bool = False, include_metadata: bool = True,
                 filter_meta: Mapping[str, Any] | None = None, filter_fields: Mapping[str, Any] | None = None,
                 **options: Any):
        super().__init__(store_of(replay_buffer), n_steps, current_fields=current_fields, next_fields=next_fields,
                         sequence_fields=sequence_fields, fieldname_map=fieldname_map,
                         meta_fields=_meta_fields(include_metadata, options), filter_meta=filter_meta,
                         filter_fields=filter_fields, return_indices=return_indices, **options)




class ReplayDatasetTimeWindow(WindowView):
    """One window of ``window_length`` steps per episode, at a random start (0.2.3's
    ``ReplayDatasetTimeWindow``); ``seed`` seeds the starts."""

    def __init__(self, replay_buffer: Any, window_length: int, fields: Any = None,
                 fieldname_map: Mapping[str, str] | None = None, include_metadata: bool = True,
                 filter_meta: Mapping[str, Any] | None = None, return_indices: bool = False, *,
                 seed: int | None = None, min_episode_len: int = 1, **options: Any):
        if "allow_partial" in options:
            raise OptionError("ReplayDatasetTimeWindow pads windows of short episodes itself: drop allow_partial "
                              "(WindowView(store, window, allow_partial=...) has it)")
        self.seed = seed_option(seed)
        self._rng = np.random.default_rng(self.seed)
        super().__init__(store_of(replay_buffer), window_length, allow_partial=True, fields=fields,
                         fieldname_map=fieldname_map, meta_fields=_meta_fields(include_metadata, options),
                         filter_meta=filter_meta, return_indices=return_indices, min_episode_len=min_episode_len,
                         **options)

    def build(self) -> None:
        self.positions = _one_each(self)

    def output_names(self) -> list[str]:
        names = [name for name in super().output_names() if name not in ("_mask", "_t")]
        return names + ["_reaches_episode_end"] + (["_start"] if self.return_indices else [])

    def sequence_outputs(self) -> tuple[str, ...]:
        return tuple(name for name in super().sequence_outputs() if name != "_mask")

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if self.seed is None:  # each process draws its own starts
            state["_rng"] = None
        return state

    def assemble(self, episode: np.ndarray, t: np.ndarray, generation: int | None = None) -> dict[str, torch.Tensor]:
        if self._rng is None:
            self._rng = np.random.default_rng()
        length = self.table.length[episode]
        start = self._rng.integers(0, length - np.minimum(self.window, length) + 1)
        batch = super().assemble(episode, start.astype(np.int64), generation)
        batch.pop("_mask", None)
        batch["_reaches_episode_end"] = torch.from_numpy(start + np.minimum(self.window, length) >= length)
        if self.return_indices:
            batch["_start"] = batch.pop("_t")
        return batch


def dataset_of(replay_buffer: Any, *, n_steps: int | None = None, timestep_level: bool = False,
               **options: Any) -> TrajectoryView | TimestepView | NStepView:
    """0.2.3's ``buffer.dataset(...)``: ``n_steps`` -> ``ReplayDatasetNStep``, ``timestep_level=True`` ->
    ``ReplayDatasetTimestep``, else ``ReplayDatasetTrajectory``; an empty one is an error, as there."""
    if n_steps is not None and flag(timestep_level, "timestep_level"):
        raise OptionError("choose one of n_steps and timestep_level (got both)")
    store = store_of(replay_buffer)
    dataset: TrajectoryView | TimestepView | NStepView
    if n_steps is not None:
        dataset = ReplayDatasetNStep(store, n_steps, **options)
    elif timestep_level:
        dataset = ReplayDatasetTimestep(store, **options)
    else:
        dataset = ReplayDatasetTrajectory(store, **options)
    if len(dataset) == 0 and store.num_episodes == 0:
        raise OptionError(f"the replay buffer at {store.folder} is empty: store episodes before making a dataset")
    return dataset
