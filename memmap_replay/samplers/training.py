"""What ``buffer.save_training_state`` / ``load_training_state`` do: the ``state_dict()`` of every object
given (loaders, samplers, mixed samplers, rate limiters), snapshots of the priorities of the prioritized
samplers among them (``priority_snapshots``), and the file under the folder (``core/training.py``: one
commit for the state and its priorities)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..core.options import short
from ..core.training import read_training_state, training_state_name, write_training_state
from ..errors import CorruptStoreError, InvalidDataError, OptionError
from .priority_snapshots import PrioritySnapshot, collecting_snapshots

__all__ = ["save_training_state", "load_training_state"]


def _plain(value: Any, where: str) -> Any:
    """``value`` with every object that has ``state_dict()`` replaced by its state."""
    if callable(getattr(value, "state_dict", None)) and not isinstance(value, type):
        return value.state_dict()
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise InvalidDataError(f"{where} must have str keys (JSON) (got {short(list(value))})")
        return {key: _plain(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value


def save_training_state(folder: Path, name: str, state: Any, *, store_id: str) -> None:
    """Save ``state`` (a dict) as the training state ``name`` of the store in ``folder``."""
    name = training_state_name(name)
    if not isinstance(state, dict):
        raise OptionError(f"state must be a dict, e.g. {{'loader': loader, 'step': step}} (got {short(state)})")
    with collecting_snapshots() as snapshots:
        plain = _plain(state, "state")
    arrays = {f"{key}.{part}": array for key, snapshot in snapshots.items()
              for part, array in snapshot.arrays().items()}
    write_training_state(folder, name, plain, arrays, store_id=store_id)


def load_training_state(folder: Path, name: str, *, store_id: str, array_bytes: int) -> dict[str, Any]:
    """The training state ``name``: the dict saved, each prioritized sampler's state holding its priorities'
    ``PrioritySnapshot`` (for its ``load_state_dict``)."""
    state, arrays = read_training_state(folder, name, store_id=store_id, array_bytes=array_bytes)
    parts: dict[str, dict[str, np.ndarray]] = {}
    for key, array in arrays.items():
        snapshot, _, part = key.rpartition(".")
        parts.setdefault(snapshot, {})[part] = array
    try:
        snapshots = {key: PrioritySnapshot.from_arrays(found) for key, found in parts.items()}
    except InvalidDataError as error:
        raise CorruptStoreError(f"the training state {name!r} in {folder} is damaged ({error}); save it "
                                f"again") from None
    loaded: dict[str, Any] = _with_snapshots(state, snapshots)
    return loaded


def _with_snapshots(value: Any, snapshots: dict[str, PrioritySnapshot]) -> Any:
    if isinstance(value, dict):
        out = {key: _with_snapshots(item, snapshots) for key, item in value.items()}
        key = out.get("priorities")
        if isinstance(key, str) and key in snapshots:
            out["priorities"] = snapshots[key]
        return out
    if isinstance(value, list):
        return [_with_snapshots(item, snapshots) for item in value]
    return value
