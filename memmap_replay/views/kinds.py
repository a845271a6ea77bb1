"""The views: trajectory, timestep, window (Dreamer) and n-step (with frame stacking) datasets.

Each gathers a batch with one fancy-index call per field from the store's memory maps. Shapes, with
B the batch size:

- ``TrajectoryView``: whole episodes padded with zeros to the longest in the batch: fields (B, T, ...),
  ``_lens`` (B,), and ``_mask`` (B, T) with ``return_mask=True``. memmap-replay-buffer 0.2.3's keywords:
  ``slice_by_episode_len=False`` gives every episode as max_timesteps rows, padded with the field default;
  ``return_episode_lens=False`` leaves ``_lens`` out (only with sliced episodes: else nothing tells steps
  from padding).
- ``next_fields`` (trajectories and windows): ``next_<field>`` shaped as the field, at each step the field at
  the next state t + 1: the next step's row, at an episode's last step its stored final observation, zeros
  where the episode has none; zeros at padded steps (as the fields). Read in the same gather (the seqlock
  covers it); ``row_ranges`` reach the row after the sequence.
- ``episode_flags=True`` (trajectories and windows): ``_is_first``, ``_is_last`` and ``_is_terminal``, bool
  (B, T) like the fields (Dreamer's flags): True at the episode's first step, at its last step, and at its
  last step only when it terminated (not when truncated or of unrecorded end); False at padded steps.
- ``TimestepView``: single steps: fields (B, ...); with ``frame_stack=k`` the stacked fields are
  (B, k, ...), oldest frame first.
- ``WindowView``: windows of ``window`` steps that never cross an episode end: fields (B, L, ...), or
  (L, B, ...) with ``time_major=True``; with ``allow_partial=True`` windows may run past the end,
  zero-padded, with ``_lens`` and ``_mask``.
- ``NStepView``: ``current_fields`` at t, ``next_<field>`` at t + n (clipped at the episode's end),
  ``seq_<field>`` for t .. t + n - 1 (zero-padded), ``n_step_lens``; with ``gamma``, ``n_step_return``
  and ``bootstrap_discount`` (``gamma ** n_step_lens``, 0 where the n steps reach a terminated end).

Frames before an episode's first step are a repeat of the first frame (``stack_pad='repeat'``) or
zeros (``stack_pad='zero'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch
from einops import rearrange

from .dataset import ExplicitPositions, StoreView, flag
from .next_steps import NextSteps
from ..errors import OptionError
from ..core.episodes import step_flags
from ..core.index import NStepTargets, Positions, stack_rows, window_rows
from ..core.options import check_filter, check_names, choice, name as name_option, number, positive, short
from ..core.store import EpisodeStore

__all__ = ["TrajectoryView", "TimestepView", "WindowView", "NStepView"]

_STACK_PADS = ("repeat", "zero")
_FLAGS = ("_is_first", "_is_last", "_is_terminal")


def _steps(value: Any, name: str, store: EpisodeStore) -> int:
    """A number of steps: a positive int, at most the store's max_timesteps."""
    return positive(value, name, most=store.capacity.max_timesteps, most_is="the store's max_timesteps=")


class TrajectoryView(NextSteps, StoreView):
    """Whole episodes, padded to the longest in the batch, with lengths (and a mask on request)."""

    scattered_reads = False  # whole episodes: the kernel's readahead on a fault helps

    def __init__(self, store: EpisodeStore, *, return_mask: bool = False, episode_flags: bool = False,
                 slice_by_episode_len: bool = True, return_episode_lens: bool = True, next_fields: Any = None,
                 **options: Any):
        super().__init__(store, **options)
        self.setup_next(store, next_fields)
        self.return_mask = flag(return_mask, "return_mask")
        self.episode_flags = flag(episode_flags, "episode_flags")
        self.slice_by_episode_len = flag(slice_by_episode_len, "slice_by_episode_len")
        self.return_episode_lens = flag(return_episode_lens, "return_episode_lens")
        if not (self.slice_by_episode_len or self.return_episode_lens):
            raise OptionError("return_episode_lens=False needs slice_by_episode_len=True: episodes padded to "
                              "max_timesteps need their lengths (_lens) to tell steps from padding")
        self.check_outputs()

    def output_names(self) -> list[str]:
        lens = ["_lens"] if self.return_episode_lens else []
        names = super().output_names() + self.next_outputs() + lens + (["_mask"] if self.return_mask else [])
        return names + (list(_FLAGS) if self.episode_flags else [])

    def sequence_outputs(self) -> tuple[str, ...]:
        """The outputs of one value per step, (B, T, ...); the others hold one value per episode."""
        return _per_step(self)

    def row_ranges(self, episode: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = self.table.start[episode]
        end = start + self.table.length[episode]
        return start, (end + self.table.final[episode]) if self.next_fields else end

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        length = self.table.length[episode]
        longest = int(length.max()) if len(length) else 0
        fill = {}
        if not self.slice_by_episode_len:  # 0.2.3's whole rows: max_timesteps steps, the default past the end
            longest, fill = self.key_stride, {name: self.store.schema.fields[name].default_row()
                                              for name in self.fields}
        rows, inside = window_rows(self.table.start[episode], np.zeros_like(episode), longest, length)
        if self.next_fields:
            batch = self.read_steps(episode, np.broadcast_to(np.arange(longest, dtype=np.int64), inside.shape),
                                    inside, fill)
        else:
            batch = {name: self.rows_of(name, rows, inside, fill.get(name, 0)) for name in self.fields}
        if self.return_episode_lens:
            batch["_lens"] = torch.from_numpy(length.copy())
        if self.return_mask:
            batch["_mask"] = torch.from_numpy(inside)
        if self.episode_flags:
            steps = np.broadcast_to(np.arange(longest, dtype=np.int64), inside.shape)
            flags = step_flags(steps, length, self.table.end[episode], inside)
            batch.update(zip(_FLAGS, map(torch.from_numpy, flags)))
        return batch


class _FrameStacking:
    """``frame_stack=k`` for ``stack_fields`` (default: every field of 2 or more dimensions)."""

    if TYPE_CHECKING:  # the view's (StoreView.rows_of)
        def rows_of(self, name: str, rows: np.ndarray, keep: np.ndarray | None = None,
                    fill: Any = 0) -> torch.Tensor: ...

    def setup_stacking(self, store: EpisodeStore, frame_stack: int, stack_fields: Any, stack_pad: str) -> None:
        self.frame_stack = _steps(frame_stack, "frame_stack", store)
        self.stack_pad = choice(stack_pad, "stack_pad", _STACK_PADS)
        if stack_fields is None:
            stack_fields = [name for name, spec in store.schema.fields.items() if len(spec.shape) >= 2]
        self.stack_fields = frozenset(check_names(stack_fields, store.schema.fields, "field"))
        if self.frame_stack > 1 and not self.stack_fields:
            raise OptionError("frame_stack needs stack_fields: the store has no field of 2 or more dimensions")

    def stacked_ranges(self, first: np.ndarray, t: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows [lo, hi): step t's stacked frames (from the episode's first row on) to ``reach`` steps on."""
        rows = first + t
        lo = np.maximum(rows - (self.frame_stack - 1), first) if self.frame_stack > 1 else rows
        return lo, rows + reach

    def step_rows(self, name: str, rows: np.ndarray, first_row: np.ndarray, keep: np.ndarray | None = None):
        """The field at ``rows`` (B,), stacked to (B, k, ...) if it is a stacked field."""
        if self.frame_stack == 1 or name not in self.stack_fields:
            return self.rows_of(name, rows, keep)
        stacked, inside = stack_rows(first_row, rows, self.frame_stack)
        valid = inside if self.stack_pad == "zero" else np.ones_like(inside)
        if keep is not None:
            valid = valid & keep[:, None]
        return self.rows_of(name, stacked, valid)


class TimestepView(StoreView, _FrameStacking):
    """Single timesteps; ``filter_fields`` keeps the steps whose scalar fields equal the given values."""

    kind = "steps"

    def __init__(self, store: EpisodeStore, *, filter_fields: Mapping[str, Any] | None = None, frame_stack: int = 1,
                 stack_fields: Any = None, stack_pad: str = "repeat", **options: Any):
        super().__init__(store, **options)
        self.setup_stacking(store, frame_stack, stack_fields, stack_pad)
        self.filter_fields = filter_fields
        self.build()
        self.check_outputs()

    def build(self) -> None:
        self.positions = _filtered(self.store, self.table, Positions.from_counts(self.table.length), self.filter_fields)

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        first = self.table.start[episode]
        return {name: self.step_rows(name, first + t, first) for name in self.fields}

    def row_ranges(self, episode: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.stacked_ranges(self.table.start[episode], t, 1)


class WindowView(NextSteps, StoreView):
    """Windows of ``window`` consecutive steps inside one episode (Dreamer sequences)."""

    def __init__(self, store: EpisodeStore, window: int, *, allow_partial: bool = False, time_major: bool = False,
                 episode_flags: bool = False, next_fields: Any = None, **options: Any):
        super().__init__(store, **options)
        self.setup_next(store, next_fields)
        self.window = _steps(window, "window", store)
        self.allow_partial = flag(allow_partial, "allow_partial")
        self.time_major = flag(time_major, "time_major")
        self.episode_flags = flag(episode_flags, "episode_flags")
        self.build()
        self.check_outputs()

    @property
    def kind(self) -> str:
        return f"window{self.window}" + ("-partial" if self.allow_partial else "")

    def position_spec(self) -> dict:
        return {**super().position_spec(), "window": self.window, "allow_partial": self.allow_partial}

    def build(self) -> None:
        length = self.table.length
        self.positions = Positions.from_counts(length if self.allow_partial else length - self.window + 1)

    def output_names(self) -> list[str]:
        names = super().output_names() + self.next_outputs() + (["_lens", "_mask"] if self.allow_partial else [])
        return names + (list(_FLAGS) if self.episode_flags else [])

    def sequence_outputs(self) -> tuple[str, ...]:
        """The outputs of one value per step, (B, L, ...) ((L, B, ...) time-major); the others hold one
        value per window."""
        return _per_step(self)

    def row_ranges(self, episode: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start, length = self.table.start[episode], self.table.length[episode]
        if self.next_fields:  # the row after the window too (the final observation's after the last step)
            return start + t, start + np.minimum(t + self.window + 1, length + self.table.final[episode])
        return start + t, start + np.minimum(t + self.window, length)

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        length = self.table.length[episode]
        rows, inside = window_rows(self.table.start[episode], t, self.window, length)
        keep = inside if self.allow_partial else None
        steps = t[:, None] + np.arange(self.window, dtype=np.int64)[None, :]
        if self.next_fields:
            batch = self.read_steps(episode, steps, keep, {})
        else:
            batch = {name: self.rows_of(name, rows, keep) for name in self.fields}
        if self.episode_flags:
            batch.update(zip(_FLAGS, map(torch.from_numpy, step_flags(steps, length, self.table.end[episode], inside))))
        if self.time_major:
            batch = {name: rearrange(value, "b l ... -> l b ...") for name, value in batch.items()}
        if self.allow_partial:
            batch["_lens"] = torch.from_numpy(np.minimum(self.window, length - t))
            batch["_mask"] = torch.from_numpy(inside.T.copy() if self.time_major else inside)
        return batch


class NStepView(StoreView, _FrameStacking):
    """n-step transitions. Unlike the seed package, the last step of an episode that terminated (or that
    has a stored final observation) is a transition too, so a terminal reward reaches the learner."""

    refused_options: tuple[str, ...] = ("fields",)  # StoreView's; this view says what it takes instead

    def __init__(self, store: EpisodeStore, n_steps: int, *, current_fields: Any = None, next_fields: Any = None,
                 sequence_fields: Any = (), gamma: float | None = None, reward_field: str = "reward",
                 filter_fields: Mapping[str, Any] | None = None, frame_stack: int = 1, stack_fields: Any = None,
                 stack_pad: str = "repeat", **options: Any):
        if options.get("fields") is not None:
            raise OptionError("an n-step view takes current_fields, next_fields and sequence_fields, not fields")
        super().__init__(store, **options)
        schema = store.schema
        self.n_steps = _steps(n_steps, "n_steps", store)
        self.current_fields = self.fields if current_fields is None else check_names(current_fields, schema.fields,
                                                                                     "field")
        self.next_fields = self.fields if next_fields is None else check_names(next_fields, schema.fields, "field")
        self.sequence_fields = check_names(() if sequence_fields is None else sequence_fields, schema.fields, "field")
        self.gamma = None if gamma is None else number(gamma, "gamma", low=0, high=1)
        if self.gamma is not None:
            spec = schema.fields.get(reward_field) if isinstance(reward_field, str) else None
            if spec is None or spec.shape != ():
                raise OptionError(
                    f"gamma needs a scalar reward field: reward_field={short(reward_field)} is "
                    f"{'not a field' if spec is None else f'of shape {spec.shape}'} (fields: {sorted(schema.fields)})"
                )
        else:
            name_option(reward_field, "reward_field")
        self.reward_field = reward_field
        self.setup_stacking(store, frame_stack, stack_fields, stack_pad)
        self.filter_fields = filter_fields
        self.build()
        self.fused = frozenset(name for name in self.current_fields if name in self.next_fields
                               and (self.frame_stack == 1 or name not in self.stack_fields))
        self.chunk_steps = np.arange(self.n_steps, dtype=np.int64)[None, :]
        self.discounts = ((1.0 if self.gamma is None else self.gamma) ** np.arange(self.n_steps)).astype(np.float32)
        self.check_outputs()

    @property
    def kind(self) -> str:
        return f"nstep{self.n_steps}"

    def read_fields(self) -> tuple[str, ...]:
        names = (*self.current_fields, *self.next_fields, *self.sequence_fields)
        if self.gamma is not None:
            names += (self.reward_field,)
        return tuple(dict.fromkeys(names))

    def row_ranges(self, episode: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # step t (and its stacked frames) through step t + n (the next state), chunks between
        return self.stacked_ranges(self.table.start[episode], t, self.n_steps + 1)

    def position_spec(self) -> dict:
        return {**super().position_spec(), "n_steps": self.n_steps}

    def build(self) -> None:
        self.targets = NStepTargets(self.table, self.n_steps, self.gamma)
        self.positions = _filtered(self.store, self.table, Positions.from_counts(self.targets.reach),
                                   self.filter_fields)

    def output_names(self) -> list[str]:
        names = list(self.current_fields) + [f"next_{name}" for name in self.next_fields]
        names += [f"seq_{name}" for name in self.sequence_fields] + ["n_step_lens"]
        if self.gamma is not None:
            names += ["n_step_return", "bootstrap_discount", "terminal"]
        names += list(self.meta_fields)
        return names + (["_index", "_t"] if self.return_indices else [])

    def gather(self, episode: np.ndarray, t: np.ndarray) -> dict[str, torch.Tensor]:
        batch, key, rows = self.gather_states(episode, t)
        targets = self.targets
        actual = targets.actual[key]
        if self.sequence_fields or self.gamma is not None:
            # chunk steps past the episode's reach are read (from whatever row follows) and zeroed
            chunk_rows = rows[:, None] + self.chunk_steps
            pad = targets.pad[key] if targets.short[key].any() else None
            chunks = {name: self.chunk_of(name, chunk_rows, pad) for name in self.sequence_fields}
            batch.update((f"seq_{name}", torch.from_numpy(values)) for name, values in chunks.items())
        batch["n_step_lens"] = torch.from_numpy(actual)
        if self.gamma is not None:
            rewards = chunks.get(self.reward_field)
            if rewards is None:
                rewards = self.chunk_of(self.reward_field, chunk_rows, pad)
            batch["n_step_return"] = torch.from_numpy(rewards.astype(np.float32, copy=False) @ self.discounts)
            batch["bootstrap_discount"] = torch.from_numpy(targets.bootstrap[key])
            batch["terminal"] = torch.from_numpy(targets.terminal[key])
        return batch

    def gather_states(self, episode: np.ndarray, t: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
        """``current_fields`` at t and ``next_<field>`` of ``next_fields`` at the next state (zeros where it
        was never stored), reading nothing else: (batch, the transitions' ``NStepTargets`` keys, rows of t)."""
        targets, size = self.targets, len(t)
        first = targets.start[episode]
        rows = first + t
        key = targets.key(episode, t)
        next_rows = rows + targets.next_offset[key]
        # a terminated episode without a final observation has no row after its last step: read the last
        # step there and zero it (its bootstrap discount is 0, so the value is never used)
        missing = targets.missing[key]
        stored = ~missing if missing.any() else None
        batch = {}
        for name in self.current_fields:
            if name in self.fused:  # state and next state in one gather, then two views of the result
                both = self.values_of(name, np.concatenate((rows, next_rows)))
                if stored is not None:
                    both[size:][missing] = 0
                batch[name], batch[f"next_{name}"] = torch.from_numpy(both[:size]), torch.from_numpy(both[size:])
            else:
                batch[name] = self.step_rows(name, rows, first)
        for name in self.next_fields:
            if name not in self.fused:
                batch[f"next_{name}"] = self.step_rows(name, next_rows, first, stored)
        return batch, key, rows

    def chunk_of(self, name: str, chunk_rows: np.ndarray, pad: np.ndarray | None) -> np.ndarray:
        values = self.values_of(name, chunk_rows)
        if pad is not None:
            values[pad] = 0
        return values


def _per_step(view: StoreView) -> tuple[str, ...]:
    """A sequence view's per-step output names (its fields, ``next_<field>``, ``_mask`` and the episode flags,
    renamed by ``fieldname_map``)."""
    flags = _FLAGS if getattr(view, "episode_flags", False) else ()
    nexts = [f"next_{name}" for name in getattr(view, "next_fields", ())]
    return tuple(view.fieldname_map.get(name, name) for name in (*view.fields, *nexts, "_mask", *flags))


def _filtered(store: EpisodeStore, table, positions: Positions, filter_fields: Mapping[str, Any] | None):
    """Keep only the positions whose scalar step fields equal ``filter_fields`` (reads those fields)."""
    if not check_filter(filter_fields, store.schema.fields, "filter_fields", "field") or filter_fields is None:
        return positions
    for name in filter_fields:
        shape = store.schema.fields[name].shape
        if shape != ():
            raise OptionError(f"filter_fields takes scalar fields only: field {name!r} has shape {shape}")
    for name, value in filter_fields.items():
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # a ragged list, ...
            array = np.asarray(None)
        if array.ndim != 0 or array.dtype.kind not in "biufc":
            raise OptionError(f"filter_fields value for {name!r} must be one number (got {short(value)})")
    items = np.arange(len(positions), dtype=np.int64)
    episode, t = positions.locate(items)
    rows = table.start[episode] + t
    keep = np.ones(len(items), dtype=bool)
    for name, value in filter_fields.items():
        keep &= store.step_array(name)[rows] == value
    return ExplicitPositions(episode[keep], t[keep])
