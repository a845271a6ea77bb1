"""TorchRL's batch layout (``output="torchrl"``): a ``tensordict.TensorDict`` nested as TorchRL's
replay buffers give it and its losses (``torchrl.objectives``: DQNLoss, SACLoss, IQLLoss, CQLLoss, ...)
read it. Built from the dict batch in the main process, after the batch came.

Read in TorchRL 0.14: the losses' ``_AcceptedKeys`` (``objectives/dqn.py``, ``sac.py``) read ``action``,
``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")`` and ``priority_weight``; its
environments give reward and the done flags a trailing dimension of 1 (``[..., 1]``); its prioritized
samplers give ``priority_weight`` of shape ``[B]``; ``MultiStepTransform`` gives the n-step return as
``("next", "reward")``, the single reward as ``("next", "reward_orig")`` and ``steps_to_next_obs``;
``SliceSampler`` (``data/replay_buffers/samplers/slice.py``) gives a flat ``[B * T]`` batch whose
``("next", "truncated")`` it sets True at each slice's last step (``done`` then ``done | truncated``).

With B the batch size, a store field ``reward`` (the view's ``reward_field``) and observation fields
(``next_<obs>``; the transitions view's ``observation_fields``, or fields named ``obs*``, ``state*``,
``image*``, ``pixel*``; ``observation_like``):

- transitions (``transitions=True``, hindsight), batch size ``[B]``: every field at the root as named
  (``obs``, ``action``, ...), except ``reward`` -> ``("next", "reward")`` ``[B, 1]``; ``next_<obs>`` ->
  ``("next", <obs>)``; ``terminated`` / ``truncated`` -> ``("next", ...)`` bool ``[B, 1]``, and
  ``("next", "done")`` = terminated | truncated. ``discount`` stays at the root.
- n-step views (``n_steps=``, with ``gamma``), ``[B]``: as transitions, with ``("next", "reward")`` the
  n-step return ``[B, 1]``, ``("next", "reward_orig")`` the step's own reward, ``steps_to_next_obs`` the
  steps to the next observation ``[B, 1]`` (TorchRL's value estimators discount by ``gamma **`` it),
  ``("next", "terminated")`` whether the n steps reach a terminated end; ``("next", "truncated")`` False
  (``done`` = ``terminated``). ``bootstrap_discount`` and ``seq_<field>`` stay at the root; ``next_<field>``
  of fields that are not observations too.
- single timesteps, ``[B]``: every field at the root, ``reward`` -> ``("next", "reward")`` ``[B, 1]``
  (no next observation, no flags: a timestep view has none).
- sequences (windows, trajectories), ``[B, T]`` (``[T, B]`` with ``time_major=True``): a sequence of T
  stored steps is T steps of TorchRL's layout, so ``window=T`` is ``SliceSampler(slice_len=T)``'s batch
  reshaped to ``[B, T]`` (as TorchRL's own Dreamer reshapes it). The steps' fields at the root, the view's
  ``next_<obs>`` (its ``next_fields``: at each step the next state, after an episode's last step its final
  observation, zeros where it has none) as ``("next", <obs>)``, ``reward`` as ``("next", "reward")``
  ``[B, T, 1]``; ``("next", "terminated")`` the view's ``_is_terminal`` (True at the last step of an episode
  that terminated); ``("next", "truncated")`` True at each sequence's last real step, as ``SliceSampler``
  marks it (a truncated end, a window that stops before the episode ends, and a terminated end too, where
  ``terminated`` is True as well); ``("next", "done")`` = terminated | truncated. ``buffer.dataloader(...,
  output="torchrl")`` makes such a view with ``episode_flags=True`` and ``next_fields`` the observation
  fields, unless given; a view made without the flags (``sampler.dataloader`` over
  ``buffer.sampler("sequence", window=T)``) is refused, naming both options. Trajectories and partial
  windows, padded, add ``("collector", "mask")`` ``[B, T]`` (SliceSampler's ``pad_output`` key), True at real
  steps; padded steps are zeros, flags False. ``_is_first`` and ``_is_last`` stay at the root; per-sequence
  outputs (meta fields, ``_lens``, ...) are repeated along T (expanded views, no copy).

Everywhere: ``_weight`` (a prioritized draw's importance weights) -> ``priority_weight``, which TorchRL's
losses read; an integer field named ``action*`` becomes int64 (TorchRL's discrete actions, the index
``DQNLoss(action_space="categorical")`` gathers with; a ``"one-hot"`` action is the user's to make);
``_key``, ``_index``, ``_t``, meta fields stay at the root as named. A store whose fields have other
names (``obs``, ``act``) keeps them, nested as above: TorchRL's modules take ``in_keys=["obs"]`` and its losses
``loss.set_keys(action="act")``; ``fieldname_map`` renames a field to TorchRL's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.schema import OBSERVATION_PREFIXES, observation_like  # noqa: F401  (OBSERVATION_PREFIXES: the rule, for readers)
from ..errors import OptionError

__all__ = ["TorchRLLayout", "torchrl_layout", "to_torchrl", "observation_like"]

_FLAGS = ("terminated", "truncated")
_NARROW_INTS = (torch.int8, torch.int16, torch.int32, torch.uint8)


@dataclass(frozen=True)
class TorchRLLayout:
    """What a view's batches become in TorchRL's layout (``torchrl_layout(view)``).

    Attributes
    ----------
    kind : str
        ``"transitions"``, ``"nstep"``, ``"steps"`` (single timesteps) or ``"sequence"``.
    reward : str
        The batch's name of the reward field, nested under ``"next"``.
    next_names : dict
        A batch name of a next observation -> its name under ``"next"`` (``next_obs`` -> ``obs``).
    per_step : tuple of str
        A sequence view's per-step outputs (the others hold one value per sequence).
    time_major : bool
        A sequence view's per-step outputs come (T, B, ...).
    flags : tuple of str
        A sequence view's batch names of ``_is_first``, ``_is_last``, ``_is_terminal``, ``_lens`` and ``_mask``.
    """

    kind: str
    reward: str = "reward"
    next_names: Any = None
    per_step: tuple[str, ...] = ()
    time_major: bool = False
    flags: tuple[str, ...] = ("_is_first", "_is_last", "_is_terminal", "_lens", "_mask")


def _nested(next_fields: Any, reward_field: Any) -> list[str]:
    """The next fields that go under ``"next"``: the observation-named ones, else every one but the reward."""
    names = [name for name in next_fields if observation_like(name)]
    return names or [name for name in next_fields if name != reward_field]


def torchrl_layout(view: Any) -> TorchRLLayout:
    """The layout of ``view``'s batches: its kind, reward and next-observation names (after its
    ``fieldname_map``). A ``ConcatView`` (shards) has its first shard's; a Dataset of another library is
    taken as single steps. (Told by what a view has, not its class: ``views.kinds`` imports what imports
    this module.)

    Parameters
    ----------
    view : Dataset
        A view (``buffer.dataset(...)``, ``sampler.view``, ``loader.dataset``).

    Returns
    -------
    TorchRLLayout
        What ``to_torchrl`` makes of its batches.
    """
    parts = getattr(view, "views", None)
    if isinstance(parts, (list, tuple)) and parts:
        view = parts[0]
    renames = dict(getattr(view, "fieldname_map", None) or {})

    def out(name: str) -> str:  # the batch's name of a view output
        return str(renames.get(name, name))

    reward_field = getattr(view, "reward_field", "reward")
    reward = out(reward_field)
    next_fields = getattr(view, "next_fields", None)
    sequence = getattr(view, "sequence_outputs", None)
    if sequence is not None:  # trajectories, windows
        observed = _nested(next_fields or (), reward_field)
        return TorchRLLayout("sequence", reward, {out(f"next_{name}"): out(name) for name in observed},
                             tuple(sequence()), bool(getattr(view, "time_major", False)),
                             tuple(out(name) for name in ("_is_first", "_is_last", "_is_terminal", "_lens", "_mask")))
    if next_fields is not None:  # transitions, n-step and hindsight views
        chosen = getattr(view, "observation_fields", None)  # a transitions view's
        # an n-step view: its observation-named next fields, else every one but the reward
        observed = _nested(next_fields, reward_field) if chosen is None else list(chosen)
        kind = ("transitions" if getattr(view, "kind", None) == "transitions" else
                "nstep" if getattr(view, "gamma", None) is not None else "nstep-without-gamma")
        return TorchRLLayout(kind, reward, {out(f"next_{name}"): out(name) for name in observed})
    return TorchRLLayout("steps", reward, {})


def to_torchrl(batch: dict[str, torch.Tensor], view: Any, *, device: Any = None):
    """``batch`` (a dict batch of ``view``) in TorchRL's layout: a TensorDict of batch size [B] (steps)
    or [B, T] (sequences); see this module's docstring for what goes where.

    Parameters
    ----------
    batch : dict
        A batch as ``output="dict"`` gives it (of a loader, a sampler's ``batch()``, ``MixedSampler.batch()``).
    view : Dataset or TorchRLLayout
        The view that gathered it (``sampler.view``, ``loader.dataset``), or its ``torchrl_layout``.
    device : torch.device, optional
        The TensorDict's device.

    Returns
    -------
    tensordict.TensorDict
        ``observation``-like fields and ``action`` at the root, ``("next", ...)`` holding the next
        observations, ``reward`` and ``done`` / ``terminated`` / ``truncated`` (``[..., 1]``).
    """
    from .output import require_tensordict

    tensordict = require_tensordict("output='torchrl'", "torchrl")
    layout = view if isinstance(view, TorchRLLayout) else torchrl_layout(view)
    if layout.kind == "nstep-without-gamma":
        raise OptionError("output='torchrl' over an n-step view needs gamma= (TorchRL's ('next', 'reward') is then "
                          "the n-step return, with steps_to_next_obs); pass gamma=, or transitions=True for one step")
    if layout.kind == "sequence" and any(name in batch for name in layout.per_step):
        root, nested, size = _sequences(batch, layout)
    else:
        root, nested = _steps(batch, layout)
        size = [len(next(iter(batch.values())))] if batch else [0]
    if nested:
        root["next"] = nested
    out = _build(tensordict.TensorDict, root, size, device)
    if layout.time_major and len(size) == 2:
        out = out.transpose(0, 1)
    return out


class _Misfit(Exception):
    """A value the unchecked build cannot take (not a tensor, or not of the batch's leading dimensions)."""


def _build(cls: Any, source: dict, size: list[int], device: Any) -> Any:
    """``cls(source, batch_size=size, device=device)`` (nested dicts as nested TensorDicts of the same batch
    size). Its constructor checks each value's type and batch dimensions, which costs more than the rest of the
    conversion; where every value is a tensor of those leading dimensions (checked here, at a fraction of the
    cost) and there is no device to move to, tensordict's own unchecked constructor (``_new_unsafe``, which its
    operations use for results known to fit) builds the same TensorDict. Anything else (a transform's
    stranger outputs, a device, a tensordict without it) goes through the checked constructor, which says
    what does not fit."""
    unchecked = getattr(cls, "_new_unsafe", None)
    if device is not None or unchecked is None:
        return cls(source, batch_size=size, device=device)
    batch_size = torch.Size(size)
    dims = len(size)

    def make(values: dict) -> Any:
        checked = {}
        for name, value in values.items():
            if isinstance(value, dict):
                value = make(value)
            elif not isinstance(value, torch.Tensor) or value.shape[:dims] != batch_size:
                raise _Misfit(name)
            checked[name] = value
        return unchecked(checked, batch_size=batch_size)

    try:
        return make(source)
    except _Misfit:
        return cls(source, batch_size=size, device=device)


_ARANGES: dict[int, torch.Tensor] = {}


def _arange(span: int) -> torch.Tensor:
    """``torch.arange(span)[None, :]``, made once per span (only compared against: never handed out)."""
    found = _ARANGES.get(span)
    if found is None:
        if len(_ARANGES) > 64:
            _ARANGES.clear()
        found = _ARANGES[span] = torch.arange(span)[None, :]
    return found


def _scalar(value: torch.Tensor, dims: int) -> torch.Tensor:
    """A per-step scalar with TorchRL's trailing dimension of 1 (``[B]`` -> ``[B, 1]``)."""
    return value.unsqueeze(-1) if value.dim() == dims else value


def _is_action(name: str, value: torch.Tensor) -> bool:
    """An integer action field not of TorchRL's dtype for discrete actions, int64 (``torch.gather``'s index)."""
    return name.startswith("action") and value.dtype in _NARROW_INTS


def _steps(batch: dict, layout: TorchRLLayout) -> tuple[dict, dict]:
    root: dict[str, torch.Tensor] = {}
    nested: dict[str, torch.Tensor] = {}
    renames = layout.next_names or {}
    nstep = layout.kind == "nstep"
    for name, value in batch.items():
        if name in renames:
            nested[renames[name]] = value
        elif name == layout.reward:
            nested[f"{name}_orig" if nstep else name] = _scalar(value, 1)
        elif name == "_weight":
            root["priority_weight"] = value
        elif _is_action(name, value):
            root[name] = value.long()
        elif layout.kind == "transitions" and name in _FLAGS:
            nested[name] = _scalar(value, 1)
        elif nstep and name in ("n_step_return", "n_step_lens", "terminal"):
            continue  # below
        else:
            root[name] = value
    if nstep:
        nested[layout.reward] = _scalar(batch["n_step_return"], 1)
        root["steps_to_next_obs"] = _scalar(batch["n_step_lens"], 1)
        nested["terminated"] = _scalar(batch["terminal"], 1)
        nested["truncated"] = torch.zeros_like(nested["terminated"])
    if "terminated" in nested and "truncated" in nested:
        nested["done"] = nested["terminated"] | nested["truncated"]
    return root, nested


def _sequences(batch: dict, layout: TorchRLLayout) -> tuple[dict, dict, list[int]]:
    """A sequence batch (B, T, ...) as T of TorchRL's steps, [B, T] (see the module docstring)."""
    _, _, terminal, lens_name, mask_name = layout.flags
    if terminal not in batch:
        raise OptionError(
            "output='torchrl' over windows and trajectories needs the episode flags (('next', 'terminated') is "
            "_is_terminal) and the next observations: make the view with episode_flags=True and next_fields=[the "
            "observation fields], e.g. buffer.sampler('sequence', window=8, episode_flags=True, next_fields=['obs']) "
            "(buffer.dataloader(..., output='torchrl') adds both unless given)")
    steps = [name for name in layout.per_step if name in batch]
    if layout.time_major:  # worked on batch-major; transposed back at the end
        batch = {name: (value.transpose(0, 1) if name in steps else value) for name, value in batch.items()}
    rows, span = batch[steps[0]].shape[:2]
    lens = batch.get(lens_name)
    if lens is None and mask_name in batch:
        lens = batch[mask_name].sum(1)
    where = _arange(span)
    if lens is None:  # every sequence whole: the last step is each one's last real step
        last = np.zeros((rows, span, 1), dtype=bool)
        last[:, -1:] = True
        truncated = torch.from_numpy(last)
    else:
        real = lens.to(torch.int64).clamp(0, span)
        truncated = (where == (real - 1)[:, None]).unsqueeze(-1)  # SliceSampler's mark: each one's last real step
    terminated = _scalar(batch[terminal], 2)
    nested: dict[str, torch.Tensor] = {"terminated": terminated, "truncated": truncated,
                                       "done": terminated | truncated}
    root: dict[str, Any] = {}
    renames = layout.next_names or {}
    for name, value in batch.items():
        if name in (mask_name, terminal):
            continue  # ("collector", "mask") below; ("next", "terminated") above
        if name in renames:
            nested[renames[name]] = value
        elif name in steps:
            if name == layout.reward:
                nested[name] = _scalar(value, 2)
            else:
                root[name] = value.long() if _is_action(name, value) else value
        else:  # one value per sequence: along T as an expanded view
            root["priority_weight" if name == "_weight" else name] = value.unsqueeze(1).expand(
                rows, span, *value.shape[1:])
    if lens is not None:
        root["collector"] = {"mask": where < real[:, None]}
    return root, nested, [rows, span]
