"""What a loader's batch becomes: a dict of tensors (``output="dict"``), a ``tensordict.TensorDict``
(``output="tensordict"``, the ``[tensordict]`` extra: the dict's flat names), or TorchRL's nested layout
(``output="torchrl"``, the ``[torchrl]`` extra: ``views.torchrl_layout``), converted in the main process
after the batch came.

A TensorDict's ``batch_size``:

- ``[B]`` for views of single items (timestep, n-step, hindsight transitions): every entry is ``(B, ...)``;
  frame stacks and ``seq_`` chunks keep their step dimension as a feature dimension.
- ``[B, T]`` for views of sequences (trajectories, windows; ``[T, B]`` with ``time_major=True``), which
  name their per-step outputs (``sequence_outputs()``: the fields and ``_mask``). The outputs of one value
  per sequence (``_lens``, meta fields, ``_index``, ``_t``, ``_key``, ``_weight``) are repeated along T as
  expanded views (no copy): ``td["_lens"][:, 0]`` is the dict's ``_lens``. TorchRL's losses take
  ``[B]`` for transitions and ``[B, T]`` for sequences, and its storages keep such values per step too.

A batch without per-step outputs (a trajectory view with ``fields=()``), or a dataset that does not name
them, gives ``[B]``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.extras import require_extra
from ..core.options import choice
from ..errors import OptionError

__all__ = ["OUTPUT_KINDS", "output_option", "require_tensordict", "to_tensordict"]

OUTPUT_KINDS = ("dict", "tensordict", "torchrl")


def output_option(output: Any, to_named_tuple: Any) -> str:
    """``output``: 'dict', 'tensordict' or 'torchrl' (the last two need tensordict and no ``to_named_tuple``)."""
    output = choice(output, "output", OUTPUT_KINDS)
    if output != "dict":
        if to_named_tuple is not None:
            raise OptionError(f"output={output!r} and to_named_tuple={to_named_tuple!r} cannot be combined (a "
                              f"batch is one or the other); pass one of them")
        require_tensordict(f"output={output!r}", output)
    return output


def require_tensordict(what: str = "output='tensordict'", extra: str = "tensordict") -> Any:
    """The ``tensordict`` module, or ``MissingExtraError`` naming the pip ``extra`` that brings it."""
    return require_extra("tensordict", extra, what)


def to_tensordict(batch: dict[str, torch.Tensor], sequence_outputs: Any = (), *, time_major: bool = False,
                  device: torch.device | None = None):
    """The batch as a TensorDict of batch size [B], or [B, T] ([T, B] if ``time_major``) when any of
    ``sequence_outputs`` (names of per-step outputs) is in it; other entries are expanded along T."""
    tensordict = require_tensordict()
    steps = [name for name in sequence_outputs if name in batch]
    if not batch:
        return tensordict.TensorDict({}, batch_size=[0], device=device)
    if not steps:
        size = next(iter(batch.values())).shape[:1]
        return tensordict.TensorDict(batch, batch_size=size, device=device)
    dims = batch[steps[0]].shape[:2]
    time_dim = 0 if time_major else 1
    out = {}
    for name, value in batch.items():
        if name in steps:
            out[name] = value
        else:  # one value per sequence: (B, ...) -> (B, T, ...) (or (T, B, ...)), an expanded view
            out[name] = value.unsqueeze(time_dim).expand(*dims, *value.shape[1:])
    return tensordict.TensorDict(out, batch_size=dims, device=device)
