"""The torch edge of the store: numpy gathers turned into tensors (torch is imported here only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import OptionError
from ..core.index import window_rows
from ..core.options import short
from ..core.store import EpisodeStore

__all__ = ["padded_episodes", "to_tensor", "device_option"]


def device_option(value: Any, name: str = "device") -> torch.device | None:
    """None, or a device this machine has: a ``torch.device``, its name ('cpu', 'cuda:0') or an accelerator
    index. A dtype or a number is refused (``tensor.to(torch.float64)`` would cast instead of move), and an
    absent accelerator is named here, not by torch's bare errors at the first move."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, torch.device, int, np.integer)):
        raise OptionError(f"{name} must be a torch device or its name, e.g. 'cpu' or 'cuda:0' (got {short(value)})")
    try:
        device = torch.device(int(value) if isinstance(value, np.integer) else value)
    except (RuntimeError, ValueError, TypeError):
        raise OptionError(f"{name} must be a torch device or its name, e.g. 'cpu' or 'cuda:0' (got {short(value)})") \
            from None
    if not device_present(device):
        raise OptionError(f"{name} {str(device)!r} is not available on this machine (torch sees no such device); "
                               f"pass device='cpu', or None to leave the tensors on the CPU")
    return device


def device_present(device: torch.device) -> bool:
    if device.type in ("cpu", "meta"):
        return True
    if device.type == "cuda":  # without creating a CUDA context
        return torch.cuda.is_available() and (device.index is None or device.index < torch.cuda.device_count())
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, ValueError):
        return False
    return True


def to_tensor(array: np.ndarray, device: Any = None) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array) if array.flags.writeable else np.array(array))
    return tensor if device is None else tensor.to(device)


def padded_episodes(store: EpisodeStore, fields: Any, meta_fields: Any, device: Any = None) -> dict[str, torch.Tensor]:
    """Live episodes, oldest first, padded with zeros to the longest: one gather per field. ``fields`` and
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
        values[~inside] = 0
        out[name] = to_tensor(values, device)
    for name in meta_fields:
        if name == "episode_lens":
            out[name] = to_tensor(table.length.copy(), device)
            continue
        out[name] = to_tensor(store.meta_array(name)[table.slots], device)
    return out


def name_tuple(names: Any, known: dict, kind: str) -> tuple[str, ...]:
    """One name (a str) or a tuple/list of names, each in ``known``."""
    if isinstance(names, str):
        names = (names,)
    if not isinstance(names, (tuple, list)):
        raise OptionError(f"{kind}s must be a name or a tuple of names (got {short(names)})")
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise OptionError(f"unknown {kind} {short(name)}: the store's {kind}s are {sorted(known)}")
    return tuple(names)
