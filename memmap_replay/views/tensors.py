"""The torch edge of the store: numpy gathers turned into tensors (torch is imported here only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..core.index import window_rows
from ..core.options import name_tuple
from ..core.store import EpisodeStore
from ._options import device_option

__all__ = ["padded_episodes", "to_tensor"]


def to_tensor(array: np.ndarray, device: Any = None) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array) if array.flags.writeable else np.array(array))
    return tensor if device is None else tensor.to(device)


def padded_episodes(store: EpisodeStore, fields: Any, meta_fields: Any, device: Any = None) -> dict[str, torch.Tensor]:
    """Live episodes, oldest first, padded to the longest with each field's default (as ``buffer.data`` reads
    steps past an episode's end, and as memmap-replay-buffer 0.2.3 pads): one gather per field. ``fields`` and
    ``meta_fields`` are a name or a tuple/list of names (``episode_lens`` is a meta field here)."""
    fields = name_tuple(fields, store.schema.fields, "field")
    meta_fields = name_tuple(meta_fields, {**store.schema.meta_fields, "episode_lens": None}, "meta field")
    device = device_option(device)
    table = store.live_table()
    if len(table.slots) == 0:  # no episode: empty tensors of the right dtypes and shapes
        empty = {name: np.zeros((0, 0, *store.schema.fields[name].shape), store.schema.fields[name].dtype)
                 for name in fields}
        empty.update({name: np.zeros((0, *store.schema.meta_fields[name].shape), store.schema.meta_fields[name].dtype)
                      for name in meta_fields if name != "episode_lens"})
        if "episode_lens" in meta_fields:
            empty["episode_lens"] = np.zeros(0, np.int64)
        return {name: to_tensor(value, device) for name, value in empty.items()}
    rows, inside = window_rows(table.start, np.zeros_like(table.start), int(table.length.max()), table.length)
    out = {}
    for name in fields:
        values = store.step_array(name)[rows]
        values[~inside] = store.schema.fields[name].default_row()
        out[name] = to_tensor(values, device)
    for name in meta_fields:
        if name == "episode_lens":
            out[name] = to_tensor(table.length.copy(), device)
            continue
        out[name] = to_tensor(store.meta_array(name)[table.slots], device)
    return out
