"""Batch output memory: pooled arrays reused once unreferenced, and a target (a worker's slot) first."""

import numpy as np
import torch

from memmap_replay.views.pool import OutputPool, output_array, set_output_target


def test_output_pool_keeps_bounded_memory():
    pool = OutputPool()
    source = np.zeros((1000, 1024), np.uint8)
    for size in range(200, 1000, 7):  # many distinct batch sizes, each dropped at once
        pool.take(source, np.arange(size))
    assert pool.kept <= pool.MAX_KEPT_BYTES
    assert sum(len(bucket) for bucket in pool.free.values()) <= len(pool.free) * pool.KEEP
    held = [pool.take(source, np.arange(200)) for _ in range(pool.KEEP + 2)]  # all held: none shared
    assert len({array.ctypes.data for array in held}) == len(held)
    slices = [torch.from_numpy(array)[:3] for array in held]  # a slice of a tensor holds the array too
    del held
    again = pool.take(source, np.arange(200))
    assert all(again.ctypes.data != piece.data_ptr() for piece in slices)
    del slices
    assert pool.take(source, np.arange(200)).ctypes.data == pool.free[((200, 1024), source.dtype)][0].ctypes.data


def test_empty_serves_the_target_first_then_the_pool():
    pool = OutputPool()
    arena = np.zeros(4096, np.uint8)
    handed = []

    def target(shape, dtype):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if sum(handed) + nbytes > len(arena):
            return None  # no room left: the pool serves
        out = arena[sum(handed):sum(handed) + nbytes].view(dtype).reshape(shape)
        handed.append(nbytes)
        return out

    pool.target = target
    first = pool.take(np.arange(40, dtype=np.float32).reshape(10, 4), np.array([3, 1]))
    assert first.base is arena and first.tolist() == [[12, 13, 14, 15], [4, 5, 6, 7]]
    big = pool.empty((1 << 18,), np.uint8)  # larger than the target's room
    assert big.base is not arena and len(handed) == 1


def test_output_array_follows_the_process_target():
    arena = np.zeros(1024, np.float64)
    set_output_target(lambda shape, dtype: arena[:int(np.prod(shape))].reshape(shape))
    try:
        out = output_array((4, 2), np.float64)
        assert out.base is arena
    finally:
        set_output_target(None)
    assert output_array((4, 2), np.float64).base is not arena


def test_output_target_is_per_thread():
    import threading

    arena = np.zeros(64, np.float64)
    set_output_target(lambda shape, dtype: arena[:int(np.prod(shape))].reshape(shape))
    seen = []
    try:
        worker = threading.Thread(target=lambda: seen.append(output_array((4,), np.float64).base is arena))
        worker.start()
        worker.join()
        assert seen == [False] and output_array((4,), np.float64).base is arena
    finally:
        set_output_target(None)
