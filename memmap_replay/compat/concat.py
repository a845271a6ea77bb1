"""memmap-replay-buffer 0.2.3's ``ConcatReplayBuffer(folders)``: several stores of the same fields read as
one, on a ``ShardSet`` (``distributed.shards``). Read-only: every write method raises ``ReadOnlyError``.

Episodes run through the first folder's (oldest first), then the next folder's, as 0.2.3 orders them;
``dataset``/``dataloader`` take 0.2.3's ``buffer.dataset``/``dataloader`` options (``compat.datasets``),
batches of trajectories from several folders are padded to their longest episode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..core.options import short
from ..distributed.shards import ConcatView, ShardSet
from ..errors import OptionError, ReadOnlyError
from ..reading.build import build_dataloader, check_kind, loader_view, view_kind
from ..reading.entries import ConcatReads
from ..reading.plan import ReadPlan
from ..reading.table import DATASET
from ..views.tensors import padded_episodes
from .datasets import dataset_of

__all__ = ["ConcatReplayBuffer"]

_WRITES = ("clear", "reset_", "advance_episode", "store_batch", "store_meta_batch", "one_episode", "batched_episode",
           "store_datapoint", "store_meta_datapoint", "store_batch_datapoint", "store_batch_meta_datapoint", "store",
           "store_episode", "update", "begin_episode", "end_episode", "grow")


class ConcatReplayBuffer(ConcatReads):
    """The stores in ``folders`` (each a store folder, opened read-only) as one read-only buffer."""

    def __init__(self, folders: Any):
        if isinstance(folders, (str, Path)) or not hasattr(folders, "__len__") or len(folders) == 0:
            raise OptionError(f"ConcatReplayBuffer needs a list of at least one store folder (got {short(folders)})")
        self.shards = ShardSet(folders=list(folders))
        self.folders = list(cast("list[Path]", self.shards.listed))  # (a ShardSet of folders= lists them)
        self.read_only = True

    @property
    def stores(self) -> list:
        return self.shards.stores

    @property
    def fieldnames(self) -> tuple[str, ...]:
        return tuple(self.stores[0].schema.fields)

    @property
    def meta_fieldnames(self) -> tuple[str, ...]:
        return tuple(self.stores[0].schema.meta_fields)

    @property
    def num_episodes(self) -> int:
        return self.shards.num_episodes

    @property
    def max_episodes(self) -> int:
        return sum(store.capacity.max_episodes for store in self.stores)

    @property
    def max_timesteps(self) -> int:
        return max(store.capacity.max_timesteps for store in self.stores)

    def __len__(self) -> int:
        return self.num_episodes

    def __repr__(self) -> str:
        return f"ConcatReplayBuffer({[str(folder) for folder in self.folders]!r}, {self.num_episodes} episodes)"

    def refresh(self) -> bool:
        """Pick up episodes committed to the folders since (by writers elsewhere); True if any changed."""
        return self.shards.refresh()

    def _filled(self) -> list:
        stores = [store for store in self.stores if store.num_episodes]
        if not stores:
            raise OptionError(f"the replay buffers in {[str(folder) for folder in self.folders]} are empty: "
                              f"store episodes in them first")
        return stores

    # dataset() and dataloader(), typed, come from ConcatReads (reading/entries.py, generated from the option table)

    def _read_dataset(self, plan: ReadPlan) -> ConcatView:
        """memmap-replay-buffer's ``dataset(...)`` of every folder holding episodes, one after the other."""
        options = dict(plan.view)
        other = sorted(name for name in ("window", "transitions", "hindsight", "allow_empty") if name in options)
        if other:
            raise OptionError(f"ConcatReplayBuffer.dataset makes memmap-replay-buffer's datasets: whole trajectories, "
                              f"single timesteps (timestep_level=True) or n-step transitions (n_steps=), each folder "
                              f"holding episodes, not {other}; for those read the folders with "
                              f"ShardSet(folders=...).dataset(...)")
        check_kind(options, view_kind(options), "ConcatReplayBuffer.dataset")
        return ConcatView([dataset_of(store, **options) for store in self._filled()])

    def _read_dataloader(self, batch_size: int, plan: ReadPlan):
        view = loader_view(plan, lambda options: self._read_dataset(ReadPlan(DATASET, view=options)))
        return build_dataloader(view, batch_size, plan)

    def get_all_data(self, fields: Any = None, meta_fields: Any = None, device: Any = None) -> dict:
        """Every episode of every folder as tensors, padded to the longest with each field's default: with neither
        ``fields`` nor ``meta_fields``, all fields, all meta fields and ``episode_lens``; else just those named."""
        if fields is None and meta_fields is None:
            fields, meta_fields = self.fieldnames, (*self.meta_fieldnames, "episode_lens")
        fields = () if fields is None else fields
        meta_fields = () if meta_fields is None else meta_fields
        parts = [padded_episodes(store, fields, meta_fields, device) for store in self.stores if store.num_episodes]
        if not parts:
            return {}
        steps = [name for name in parts[0] if name in self.fieldnames]
        longest = max((part[name].shape[1] for part in parts for name in steps), default=0)
        defaults = {name: self.stores[0].schema.fields[name].default_row() for name in steps}
        return {name: torch.cat([_pad_time(part[name], longest, defaults[name]) if name in steps else part[name]
                                 for part in parts])
                for name in parts[0]}

    def flush(self) -> None:
        """Nothing to write: the buffer is read-only."""

    def close(self) -> None:
        self.shards.close()



def _read_only(name: str):
    def write(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyError(f"ConcatReplayBuffer is read-only: it cannot {name}(); write to one of its folders "
                            f"with ReplayBuffer.from_folder(folder) instead")

    write.__name__ = write.__qualname__ = name
    write.__doc__ = "Refused: the buffer is read-only (``ReadOnlyError``)."
    return write


for _name in _WRITES:
    setattr(ConcatReplayBuffer, _name, _read_only(_name))


def _pad_time(value: torch.Tensor, length: int, default: np.ndarray) -> torch.Tensor:
    """(N, T, ...) padded to (N, length, ...) with the field's ``default`` row (0.2.3 padded with zeros here,
    and with the default within a folder: one value throughout, see docs/memmap-replay-buffer.md)."""
    if value.shape[1] == length:
        return value
    pad = torch.as_tensor(default, dtype=value.dtype, device=value.device)
    return torch.cat((value, pad.expand(value.shape[0], length - value.shape[1], *value.shape[2:])), dim=1)
