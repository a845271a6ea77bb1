"""The torch-typed option checks (``device``, ``generator``): the views room's part of ``core.options``
(which is numpy-only), worded the same way and raising the same ``OptionError``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import OptionError
from ..core.options import short

__all__ = ["device_option", "generator_option"]


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
    if not _device_present(device):
        raise OptionError(f"{name} {str(device)!r} is not available on this machine (torch sees no such device); "
                               f"pass device='cpu', or None to leave the tensors on the CPU")
    return device


def _device_present(device: torch.device) -> bool:
    if device.type in ("cpu", "meta"):
        return True
    if device.type == "cuda":  # without creating a CUDA context
        return torch.cuda.is_available() and (device.index is None or device.index < torch.cuda.device_count())
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError, ValueError):
        return False
    return True


def generator_option(value: Any) -> torch.Generator | None:
    if value is not None and not isinstance(value, torch.Generator):
        raise OptionError(f"generator must be a torch.Generator or None (got {short(value)})")
    return value
