"""Epoch orders: a seeded uniform permutation, or a block-shuffled order for stores bigger than RAM.

An epoch in uniform random order over a store that does not fit in the page cache reads every page many
times: a row's neighbours, read with it, are evicted long before their own turn comes. A block-shuffled
epoch reads each region of the files about once: it cuts the items (in file order) into blocks of
``block_size`` consecutive items, shuffles the blocks, then shuffles the items inside each group of
``block_window`` consecutive blocks of that order. A batch then draws from ``block_window`` blocks
at a time, and a group's pages are read once while they are cached (``block_size * block_window`` items
must fit in the page cache: the defaults, 512 x 16 canonical 12 KB steps, are 100 MB).

The statistical cost: items of one batch are not independent. A batch of B items holds about
B / ``block_window`` items from each of its ``block_window`` blocks, which are neighbouring steps of one
or two episodes (correlated), where a uniform order spreads a batch over the whole store. Larger windows
and smaller blocks approach the uniform order; ``block_window=1`` with ``block_size=1`` is it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..core.options import choice, integer
from ..errors import OptionError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["EPOCH_ORDERS", "BLOCK_SIZE", "BLOCK_WINDOW", "BlockShuffle", "epoch_order_options"]

EPOCH_ORDERS = ("random", "blocks")
BLOCK_SIZE = 512  # consecutive items a block
BLOCK_WINDOW = 16  # blocks shuffled together


def epoch_order_options(order: str, block_size: int | None, block_window: int | None) -> tuple[str, int, int]:
    """Checked (order, block_size, block_window); block options only with ``order='blocks'``."""
    order = choice(order, "order", EPOCH_ORDERS)
    if order != "blocks" and (block_size is not None or block_window is not None):
        raise OptionError("block_size and block_window shape a block-shuffled epoch: pass them with "
                          "shuffle='blocks' (or order='blocks' for a sampler), or drop them")
    block_size = BLOCK_SIZE if block_size is None else integer(block_size, "block_size", low=1)
    block_window = BLOCK_WINDOW if block_window is None else integer(block_window, "block_window", low=1)
    return order, block_size, block_window


class BlockShuffle:
    """A block-shuffled permutation of [0, size), made group by group on demand: ``order[a:b]`` builds
    only the groups of blocks that slice touches, so an epoch over billions of items costs memory for
    one group (``block_size * block_window`` items) and an array of block numbers."""

    def __init__(self, size: int, entropy: Sequence[int], *, block_size: int = BLOCK_SIZE,
                 block_window: int = BLOCK_WINDOW):
        self.size, self.entropy = size, entropy
        self.block_size, self.block_window = block_size, block_window
        blocks = -(-size // block_size)
        self.blocks = np.random.default_rng([*entropy, 0]).permutation(blocks)
        lengths = np.minimum(block_size, size - self.blocks * block_size)  # the last block may be short
        group_sizes = np.add.reduceat(lengths, np.arange(0, blocks, block_window)) if blocks else lengths
        self.group_ends = np.cumsum(group_sizes)
        self._cached: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.size

    def group(self, g: int) -> np.ndarray:
        """The items of group ``g`` in their shuffled order."""
        if self._cached is not None and self._cached[0] == g:
            return self._cached[1]
        starts = self.blocks[g * self.block_window: (g + 1) * self.block_window] * self.block_size
        items = (starts[:, None] + np.arange(self.block_size)).ravel()
        items = items[items < self.size]
        np.random.default_rng([*self.entropy, 1, g]).shuffle(items)
        self._cached = (g, items)
        return items

    def __getitem__(self, where: slice) -> np.ndarray:
        start, stop, _ = where.indices(self.size)
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        first = int(np.searchsorted(self.group_ends, start, side="right"))
        last = int(np.searchsorted(self.group_ends, stop - 1, side="right"))
        parts = []
        for g in range(first, last + 1):
            begin = int(self.group_ends[g - 1]) if g else 0
            parts.append(self.group(g)[max(start - begin, 0): stop - begin])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        out = self[0:self.size]
        return out if dtype is None else out.astype(dtype)
