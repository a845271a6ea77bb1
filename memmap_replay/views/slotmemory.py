"""A batch slot's memory (``views.transport``): shared memory that has no name at any instant.

On Linux a slot is an anonymous memory file (``os.memfd_create``), sized (``ftruncate``) and mapped
``MAP_SHARED`` (populated) by the worker that makes it. Nothing names it: it lives while some process maps
it or holds its descriptor, and the kernel frees it with the last one, so a worker killed at any instant
(even halfway through making a slot) leaves nothing behind; nor does it count against the size of
``/dev/shm`` (a container's is often small). The first time a slot travels to the main process its
descriptor goes with it (``multiprocessing.reduction.DupFd``, as torch's own ``file_descriptor`` strategy
sends a tensor's, through the DataLoader's result queue, which pickles with ``ForkingPickler``); the main
process maps it, closes the descriptor and wraps the bytes as the slot's root array.

Where ``os.memfd_create`` does not exist (macOS), a slot is a torch tensor in shared memory
(``share_memory_()``) sent by torch's reducers: its segment has a name for a while (as long as torch's
sharing strategy there keeps one), and a worker killed meanwhile may leave it behind.
"""

from __future__ import annotations

import mmap
import os
import sys
import weakref
from multiprocessing import reduction
from typing import Protocol

import numpy as np
import torch

__all__ = ["ANONYMOUS", "NAME", "SlotMemory"]

ANONYMOUS = hasattr(os, "memfd_create")  # slots are anonymous memory files (else torch's shared memory)
NAME = "memmap_replay-slot"  # (not a name anyone can open: /proc/<pid>/maps shows "/memfd:<NAME> (deleted)")
# Python's mmap keeps a duplicate of the descriptor it maps, closed with the mapping, unless told not to (3.13 on)
_UNTRACKED = {"trackfd": False} if sys.version_info >= (3, 13) else {}
# a worker's slot is populated as it is mapped (its pages made and mapped in one call): faulting them in one
# by one as the first batch is written made process loaders a quarter slower on trajectory batches
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class SlotMemory:
    """A worker's slot of ``nbytes``: ``root`` (the bytes as a numpy uint8 array) and ``tensor`` (the same
    bytes as a torch tensor, for torch's copies). Pickled (for the main process), it is the descriptor of
    the memory, and unpickles as a root array of its own over the same bytes (``mapped``)."""

    def __init__(self, nbytes: int):
        self._fd = None
        if not ANONYMOUS:
            self.tensor = torch.empty(nbytes, dtype=torch.uint8).share_memory_()
            self.root = self.tensor.numpy()
            return
        fd = os.memfd_create(NAME, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            memory = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | _POPULATE, **_UNTRACKED)  # read-write
            self.root = np.frombuffer(memory, dtype=np.uint8)
        except BaseException:
            os.close(fd)
            raise
        # the descriptor stays open while this object lives (a batch that carries it may still be waiting
        # to be pickled by the result queue's feeder thread)
        self._fd = fd
        weakref.finalize(self, os.close, fd)
        self.tensor = torch.from_numpy(self.root)

    def mapped(self) -> np.ndarray:
        """A root array of its own over these bytes (what the main process gets from a pickled slot), for a
        reader in this process: its reference count is the reader's, not the writer's."""
        return self.tensor.numpy()

    def __reduce__(self):
        if self._fd is None:  # torch's way: the tensor travels by torch's reducers
            return (_root_of, (self.tensor,))
        return (_map_received, (reduction.DupFd(self._fd), len(self.root)))


def _root_of(tensor: torch.Tensor) -> np.ndarray:
    return tensor.numpy()


class _SentFd(Protocol):
    """What ``reduction.DupFd(fd)`` makes, unpickled: ``detach()`` gives this process's descriptor."""

    def detach(self) -> int: ...


def _map_received(sent: _SentFd, nbytes: int) -> np.ndarray:
    """In the main process: the slot's bytes, mapped ``MAP_SHARED`` from the descriptor the worker sent
    (closed here; the mapping keeps the memory alive until the root array and every view of it are gone)."""
    fd = sent.detach()
    try:
        return np.frombuffer(mmap.mmap(fd, nbytes, **_UNTRACKED), dtype=np.uint8)
    finally:
        os.close(fd)
