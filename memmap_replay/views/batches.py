"""Batches of item numbers for a view's DataLoader: in order, a seeded permutation per epoch (lazy beyond a
million items), or a block-shuffled order (``samplers.orders``) for stores bigger than RAM."""

from __future__ import annotations

from typing import Iterator, cast

import numpy as np
import torch
from torch.utils.data import Sampler

from ..core.options import count, flag, integer, short
from ..errors import OptionError
from ..samplers.orders import BlockShuffle, epoch_order_options
from ._options import generator_option

__all__ = ["BatchIndexSampler"]

_EAGER_PERMUTATION = 1 << 20  # epochs up to this many items are permuted at once, larger ones lazily


class BatchIndexSampler(Sampler):
    """Batches of item numbers as int64 arrays; a fresh permutation per epoch when ``shuffle``.

    ``seed`` fixes the order of every epoch (epoch e uses the seed sequence (seed, e)); without it the
    order follows ``generator`` (or torch's global RNG), as torch's own RandomSampler does.
    ``shuffle="blocks"``: a block-shuffled epoch (``samplers.orders``: blocks of ``block_size``
    consecutive items, shuffled, then shuffled together ``block_window`` blocks at a time), which reads
    each region of a store bigger than RAM about once an epoch."""

    def __init__(self, size: int, batch_size: int, *, shuffle: bool | str = False, drop_last: bool = False,
                 seed: int | None = None, generator: torch.Generator | None = None, block_size: int | None = None,
                 block_window: int | None = None):
        blocks = isinstance(shuffle, str) and shuffle == "blocks"
        if not blocks and not isinstance(shuffle, (bool, np.bool_)):
            raise OptionError(f"shuffle must be True, False or 'blocks' (got {short(shuffle)})")
        self.shuffle = blocks or bool(shuffle)
        self.order, self.block_size, self.block_window = epoch_order_options(
            "blocks" if blocks else "random", block_size, block_window)
        self.drop_last = flag(drop_last, "drop_last")
        # any int: its low 63 bits seed the permutations
        if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
            raise OptionError(f"seed must be an int or None (got {short(seed)})")
        self.seed = None if seed is None else int(seed)
        self.generator = generator_option(generator)
        self.batch_size = integer(batch_size, "batch_size", low=1)
        self.size = count(size, "size")
        self.epoch = 0
        self.begun: tuple[int, int | None] | None = None  # the last epoch begun: (its number, its order's seed)
        self._resume: tuple[int, int | None, int] | None = None  # (epoch, seed, first batch): resume_at()

    def begin(self) -> tuple[int, int | None]:
        """Begin the next epoch (or the one ``resume_at`` names): (its number, the seed of its order, None
        unshuffled), also kept as ``begun``; ``epoch`` becomes the number after it."""
        epoch, seed = (self.epoch, None) if self._resume is None else self._resume[:2]
        if self.shuffle and seed is None:
            seed = self.seed
            if seed is None:  # torch's generator (the given one, else the global one), as torch's samplers do
                seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
        self.begun = (epoch, seed)
        self.epoch = epoch + 1
        return self.begun

    def resume_at(self, epoch: int, seed: int | None, first: int) -> None:
        """The next ``__iter__`` gives epoch ``epoch`` from its batch ``first`` on, ordered by ``seed`` (None:
        the seed as a new epoch draws it: ``seed=``, else from the generator)."""
        self._resume = (epoch, seed, first)

    def __iter__(self) -> Iterator[np.ndarray]:
        first = self._resume[2] if self._resume is not None else 0
        epoch, seed = self.begin()
        self._resume = None
        order: BlockShuffle | np.ndarray | _LazyPermutation | None = None
        if self.shuffle:
            entropy = [cast(int, seed) & (2**63 - 1), epoch]
            if self.order == "blocks":
                order = BlockShuffle(self.size, entropy, block_size=self.block_size, block_window=self.block_window)
            # a full permutation up to a million items; beyond, a lazy one (no O(size) work per epoch)
            elif self.size <= _EAGER_PERMUTATION:
                order = np.random.default_rng(entropy).permutation(self.size)
            else:
                order = _LazyPermutation(self.size, entropy)
        stop = len(self) * self.batch_size if self.drop_last else self.size
        for begin in range(first * self.batch_size, stop, self.batch_size):
            end = min(begin + self.batch_size, stop)
            yield np.arange(begin, end, dtype=np.int64) if order is None else order[begin:end]

    def __len__(self) -> int:
        full, rest = divmod(self.size, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1


class _LazyPermutation:
    """A seeded bijection of [0, size) computed slice by slice: a 4-round Feistel network over the
    smallest even-bit domain that holds ``size``, with cycle walking back into range."""

    MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, size: int, entropy):
        self.size = size
        self.half = max(1, (int(size - 1).bit_length() + 1) // 2)
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.default_rng(entropy).integers(0, 2**63, size=4, dtype=np.uint64)

    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        half, mask = np.uint64(self.half), self.mask
        left, right = values >> half, values & mask
        for key in self.keys:
            mixed = ((right ^ key) * self.MULTIPLIER) >> np.uint64(64 - self.half)
            left, right = right, left ^ (mixed & mask)
        return (left << half) | right

    def __getitem__(self, where: slice) -> np.ndarray:
        out = self._encrypt(np.arange(where.start, where.stop, dtype=np.uint64))
        outside = out >= self.size
        while outside.any():
            out[outside] = self._encrypt(out[outside])
            outside = out >= self.size
        return out.astype(np.int64)
