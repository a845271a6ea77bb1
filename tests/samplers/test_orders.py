"""Epoch orders (samplers/orders.py): the block-shuffled permutation."""

import numpy as np
import pytest

from memmap_replay.errors import OptionError
from memmap_replay.samplers.orders import BLOCK_SIZE, BLOCK_WINDOW, BlockShuffle, epoch_order_options


@pytest.mark.parametrize("size", [0, 1, 7, 64, 65, 1000, 100_003])
@pytest.mark.parametrize("block_size, block_window", [(1, 1), (64, 4), (10, 3), (5000, 2)])
def test_a_block_shuffle_is_a_permutation_and_any_slicing_gives_the_same_order(size, block_size, block_window):
    order = BlockShuffle(size, [7, 1], block_size=block_size, block_window=block_window)
    full = np.asarray(order)
    assert full.dtype == np.int64 and len(order) == size
    assert np.array_equal(np.sort(full), np.arange(size))
    sliced = [order[begin: begin + 37] for begin in range(0, size, 37)]
    assert np.array_equal(np.concatenate(sliced) if sliced else np.zeros(0, np.int64), full)
    assert np.array_equal(order[size // 3: size // 2], full[size // 3: size // 2])
    assert len(order[5:5]) == 0


def test_each_stretch_of_the_order_draws_from_one_window_of_blocks():
    size, block, window = 192 * 512, 512, 16  # whole blocks: every group holds window * block items
    order = np.asarray(BlockShuffle(size, [3], block_size=block, block_window=window))
    group_items = block * window
    for begin in range(0, size, group_items):  # every group: its window's blocks only
        blocks = np.unique(order[begin: begin + group_items] // block)
        assert len(blocks) == window
    first_batch = order[:256] // block
    assert len(np.unique(first_batch)) == window  # 256 items from 16 blocks of 512: all 16 show up


def test_the_order_is_seeded_and_differs_between_seeds():
    a = np.asarray(BlockShuffle(10_000, [1, 0]))
    assert np.array_equal(a, np.asarray(BlockShuffle(10_000, [1, 0])))
    assert not np.array_equal(a, np.asarray(BlockShuffle(10_000, [1, 1])))


def test_the_order_is_random_at_the_batch_level():
    """Within a window the items are shuffled: consecutive items are rarely neighbours in the file."""
    order = np.asarray(BlockShuffle(50_000, [5]))
    neighbours = np.mean(np.abs(np.diff(order)) == 1)
    assert neighbours < 0.01
    assert abs(np.corrcoef(np.arange(len(order)), order)[0, 1]) < 0.1  # no drift through the file


def test_block_options_are_checked():
    assert epoch_order_options("random", None, None) == ("random", BLOCK_SIZE, BLOCK_WINDOW)
    assert epoch_order_options("blocks", 64, 2) == ("blocks", 64, 2)
    with pytest.raises(OptionError, match="order must be one of 'random', 'blocks'"):
        epoch_order_options("sorted", None, None)
    with pytest.raises(OptionError, match="block_size must be a positive int"):
        epoch_order_options("blocks", 0, None)
    with pytest.raises(OptionError, match="block_window must be a positive int"):
        epoch_order_options("blocks", 8, 2.5)
    with pytest.raises(OptionError, match="pass them with shuffle='blocks'"):
        epoch_order_options("random", 64, None)
