"""What every view shares, a store's views and a ``ConcatView`` of shards: a torch Dataset whose
``__getitems__`` returns a whole batch, ``view[i]`` as that batch of one item, a transform applied last,
and a sampler's DataLoader."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..core.options import index as index_option
from .transform_base import apply_transform, transform_option

__all__ = ["BatchDataset"]


class BatchDataset(Dataset):
    """What every view shares (a store's views and a ``ConcatView`` of shards): ``__getitems__`` gathers a
    batch, ``view[i]`` is that batch of one item, and a sampler's DataLoader is made here.

    ``transform``: None, or a callable batch dict -> batch dict applied to every batch as its last step
    (see ``views.transforms``); it is pickled with the view for DataLoader workers."""

    transform: Any = None

    if TYPE_CHECKING:  # each kind of view has its own
        def __len__(self) -> int: ...

    def transformed(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch through ``self.transform`` (as it is without one)."""
        return batch if self.transform is None else apply_transform(self.transform, batch)

    def with_transform(self, transform: Any) -> "BatchDataset":
        """A shallow copy of this view whose batches go through ``transform`` (None: no transform); this
        view is left as it is. The copy shares the snapshot it starts from, and refreshes on its own."""
        transform = transform_option(transform)
        view = copy.copy(self)
        view.copied()
        view.transform = transform
        return view

    def copied(self) -> None:
        """Called on a shallow copy (``with_transform``): take copies of what must not be shared."""

    def __getitems__(self, items: Any) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        item = index_option(item, len(self))  # IndexTypeError (an OptionError and a TypeError) or IndexError
        return {name: value[0] for name, value in self.__getitems__(np.array([item], dtype=np.int64)).items()}

    def sampler_dataloader(self, batches: Any, **loader_options: Any):
        """A ``ReplayDataLoader`` over this view whose batches a sampler draws: ``sampler.dataloader(...)``."""
        from .loader import sampler_dataloader

        return sampler_dataloader(self, batches, **loader_options)
