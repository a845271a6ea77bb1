"""How batches made in DataLoader workers reach the main process: shared-memory batch slots.

torch carries every tensor a worker returns through a fresh shared-memory segment (made, sent as a file
descriptor, mapped, torn down again): for the multi-MB batches of a replay view that costs about ten times
the gather itself. Here each worker keeps a few slots of shared memory instead. A slot is allocated once
(sized from the first batch that needs it, replaced by a larger one if a batch outgrows it) and travels to
the main process once; after that a batch is written into a free slot and only its layout travels (a few
hundred bytes). The main process wraps the slot's bytes as tensors, without a copy.

A slot is busy from the moment its worker writes a batch into it until the main process gives it back:
with ``slot_release="unused"`` (the default) once every tensor of that batch (and every view of one) is
gone, which is checked each time a batch arrives; with ``slot_release="next"`` when the next batch is taken
from the loader (the user promises not to keep a batch past the next one). A byte flag at the start of
each slot says whose it is: a worker writes only into slots whose flag the main process cleared, and the
main process reads a slot only after the worker's message about it arrived, so a batch is never torn. A
worker that finds no free slot (the user keeps many batches) sends its batch torch's way, which is slower
but never blocks.

On Linux a slot's memory (``views.slotmemory``) has no name at any instant: an anonymous memory file that
lives while some process maps it or holds its descriptor. A worker killed at any instant (even while it
makes a slot) leaks no slot: the kernel frees a slot once its worker is gone and the main process has
unmapped it (with the loader and the last batch over it). Not so torch's shared memory, which a batch sent
torch's way goes through, and every slot where ``os.memfd_create`` does not exist (macOS): torch names its
segments (on Linux for the instant between making and mapping one), and a worker killed while one has a
name leaves it behind.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ..core.options import choice
from ..core.threads import serial
from .pool import numpy_dtype, set_output_target
from .slotmemory import SlotMemory

__all__ = ["SLOT_RELEASES", "WORKER_TRANSPORTS", "WORKER_KINDS", "PROCESS_OPTIONS", "SlotPacker", "SlotReader",
           "SlotBatch", "batch_number", "threaded", "worker_generator"]

SLOT_RELEASES = ("unused", "next")
WORKER_TRANSPORTS = ("slots", "torch")
WORKER_KINDS = ("auto", "threads", "processes")
# options only worker processes have: with one of them, workers="auto" means processes
PROCESS_OPTIONS = ("worker_init_fn", "multiprocessing_context", "persistent_workers")
_HEADER = 64  # bytes before a slot's first tensor: byte 0 is the flag, byte 1 "the main process has it"
_KNOWN = 1  # header byte: set by the main process once it has mapped the slot
_ALIGN = 64  # every tensor starts at a multiple of this (cache lines; any dtype's alignment)
_FREE, _BUSY = 0, 1
_HEADROOM = 1.25  # a new slot holds this much more than the batch that asked for it (later batches vary)


def slot_release_option(value: Any) -> str:
    return choice(value, "slot_release", SLOT_RELEASES)


@dataclass
class SlotBatch:
    """What a worker sends for a batch written into a slot: the worker's token, the slot's number, the
    slot itself the first time it is used (``memory``: a ``SlotMemory``, which unpickles in the main
    process as the slot's root array), and the batch's layout (name, offset, dtype, shape) per tensor."""

    token: str
    index: int
    memory: SlotMemory | np.ndarray | None
    layout: tuple[tuple[str, int, str, tuple[int, ...]], ...]


def _nbytes(value: torch.Tensor) -> int:
    return value.numel() * value.element_size()


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class _Bump:
    """Hands out a slot's bytes from ``end`` on: ``(shape, dtype) -> array`` while there is room, else None
    (the output pool's target during a worker's gather)."""

    def __init__(self, root: np.ndarray):
        self.root, self.end = root, _HEADER

    def __call__(self, shape: tuple, dtype) -> np.ndarray | None:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if self.end + nbytes > len(self.root):
            return None
        out = self.root[self.end:self.end + nbytes].view(dtype).reshape(shape)
        self.end += _aligned(nbytes)
        return out


class _SlotWriter:
    """A worker's slots: finds a free one (or makes one) and writes a batch into it. After each batch it
    claims a slot for the next one and has the gathers write straight into it (``set_output_target``), so
    most of a batch is in place before it is packed and only the rest is copied."""

    def __init__(self, most: int):
        self.token = f"{os.getpid()}-{uuid.uuid4().hex}"
        self.most = most
        self.slots: list[SlotMemory] = []
        self.roots: list[np.ndarray] = []  # the same bytes as numpy arrays (byte 0: the flag, 1: known)
        self.armed: tuple[int, _Bump] | None = None  # the slot claimed for the next batch
        self.iteration = 0  # the loader's iteration this worker last saw (SlotPacker.iterations)

    def reclaim(self) -> None:
        """Free the slots the main process never mapped (their first batch was dropped, so it cannot give
        them back); every batch of an earlier iteration is dropped by now or never will be read."""
        armed = None if self.armed is None else self.armed[0]
        for i, root in enumerate(self.roots):
            if i != armed and root[_KNOWN] == 0:
                root[0] = _FREE

    def claim(self, nbytes: int) -> int | None:
        """A free slot of at least ``nbytes`` (replacing a free smaller one, or adding one), now busy; None
        if every slot is busy and there may be no more."""
        free = [i for i, root in enumerate(self.roots) if root[0] == _FREE]
        chosen = next((i for i in free if len(self.roots[i]) >= nbytes), None)
        if chosen is None:
            if free:  # a free slot too small for this batch: a larger one replaces it
                chosen = free[0]
            elif len(self.slots) < self.most:
                chosen = len(self.slots)
            else:
                return None
            memory = SlotMemory(int(nbytes * _HEADROOM) + _ALIGN)
            memory.root[:_HEADER] = 0
            if chosen == len(self.slots):  # a new slot, listed once its memory is there
                self.slots.append(memory)
                self.roots.append(memory.root)
            else:
                self.slots[chosen], self.roots[chosen] = memory, memory.root
        self.roots[chosen][0] = _BUSY
        return chosen

    def pack(self, batch: dict) -> Any:
        """The batch as a ``SlotBatch`` (written into a slot), or as it is when it holds anything but CPU
        tensors or no slot is free."""
        armed, self.armed = self.armed, None
        set_output_target(None)
        if not all(isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.layout == torch.strided
                   for v in batch.values()):
            if armed is not None:
                self.roots[armed[0]][0] = _FREE
            return batch
        packed = self._into_armed(batch, armed) if armed is not None else None
        if packed is None:  # not armed, or the batch outgrew the armed slot: copy it all into one that fits
            if armed is not None:
                self.roots[armed[0]][0] = _FREE
            total = _HEADER + sum(_aligned(_nbytes(v)) for v in batch.values())
            i = self.claim(total)
            if i is None:  # every slot is still held by the main process: torch's way this time
                return batch
            packed = self._into(batch, i, _Bump(self.roots[i]))
        i, layout, used = packed
        self.roots[i][0] = _BUSY  # (again: a new iteration may have freed the armed slot meanwhile)
        # the slot's memory travels until the main process says it has it: a batch torch drops (a loop
        # stopped early) must not leave the main process without the memory of a slot
        first = self.roots[i][_KNOWN] == 0
        nxt = self.claim(used)  # the next batch gathers into this one
        if nxt is not None:
            self.armed = (nxt, _Bump(self.roots[nxt]))
            set_output_target(self.armed[1])
        return SlotBatch(self.token, i, self.slots[i] if first else None, tuple(layout))

    def _into_armed(self, batch: dict, armed: tuple[int, _Bump]) -> tuple | None:
        """Pack into the armed slot, whose front holds what the gathers wrote there; None if it lacks room."""
        i, bump = armed
        base, size = self.slots[i].tensor.data_ptr(), len(self.roots[i])
        placed = {}
        for name, value in batch.items():
            offset = value.data_ptr() - base
            if (_HEADER <= offset and offset + _nbytes(value) <= bump.end and value.is_contiguous()
                    and not value.is_conj() and not value.is_neg()):  # (lazy flags are not in the bytes)
                placed[name] = offset
        rest = sum(_aligned(_nbytes(v)) for name, v in batch.items() if name not in placed)
        if bump.end + rest > size:
            return None
        return self._into(batch, i, bump, placed)

    def _into(self, batch: dict, i: int, bump: _Bump, placed: dict | None = None) -> tuple:
        """(slot, layout, bytes used): the batch's tensors not ``placed`` already are copied in."""
        layout, memory = [], self.slots[i].tensor
        for name, value in batch.items():
            offset = (placed or {}).get(name)
            if offset is None:
                offset, nbytes = bump.end, _nbytes(value)
                memory[offset:offset + nbytes].view(value.dtype).view(value.shape).copy_(value)
                bump.end += _aligned(nbytes)
            layout.append((name, offset, str(value.dtype).removeprefix("torch."), tuple(value.shape)))
        return i, layout, bump.end


class SlotPacker:
    """The collate function of a loader with workers: in a worker, writes the (already whole) batch into
    one of the worker's slots and returns its ``SlotBatch``; in the main process, returns the batch as is.
    ``most``: slots a worker may hold (batches in flight, those the main process still holds, and the one
    claimed for its next batch)."""

    def __init__(self, most: int):
        self.most = most
        # iterations begun over these workers, in shared memory: a worker that sees it change takes back
        # the slots the main process never got (their batches were dropped when a loop stopped early)
        self.iterations = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._writer: _SlotWriter | None = None

    def __getstate__(self) -> dict:
        return {"most": self.most, "iterations": self.iterations, "_writer": None}

    def new_iteration(self) -> None:
        """Called by the main process before it asks persistent workers for a new iteration's batches."""
        self.iterations += 1

    def __call__(self, batch: Any) -> Any:
        if get_worker_info() is None or not isinstance(batch, dict):
            return batch
        writer = self._writer
        if writer is None or not writer.token.startswith(f"{os.getpid()}-"):  # a fork of a worker: its own slots
            writer = self._writer = _SlotWriter(self.most)
        iteration = int(self.iterations[0])
        if iteration != writer.iteration:
            writer.reclaim()
            writer.iteration = iteration
        return writer.pack(batch)


_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


_NUMPY_DTYPES = {name: numpy_dtype(dtype) for name, dtype in _DTYPES.items() if numpy_dtype(dtype) is not None}


class SlotReader:
    """The main process's side: the slots of every worker, the batches made of them, and giving slots
    back (``release``: "unused" or "next", see the module docstring)."""

    UNUSED = 3  # references to a slot's root array no batch uses: the registry's, give_back's loop, getrefcount's

    def __init__(self, release: str = "unused"):
        self.release = slot_release_option(release)
        self.slots: dict[tuple[str, int], np.ndarray] = {}  # each slot's root array
        self.busy: list[tuple[str, int]] = []  # slots holding a batch handed out (oldest first)

    def unpack(self, item: Any) -> Any:
        """The batch of a worker's message (a ``SlotBatch``) as tensors over the slot; anything else as is.
        Gives back the slots whose batches are done first."""
        if self.release == "next":
            self.give_back(everything=True)
        else:
            self.give_back()
        if not isinstance(item, SlotBatch):
            return item
        key = (item.token, item.index)
        if item.memory is not None:  # (a SlotMemory when the message did not travel: in the same process)
            root = item.memory if isinstance(item.memory, np.ndarray) else item.memory.mapped()
            item.memory = None  # (the registry's reference is the one give_back counts)
            root[_KNOWN] = 1
            self.slots[key] = root
        root = self.slots[key]
        batch = {}
        for name, offset, dtype, shape in item.layout:
            # a view of the slot's root array (whose references count the batch's users) as one tensor
            numpy_dtype = _NUMPY_DTYPES.get(dtype)
            if numpy_dtype is not None:
                size = math.prod(shape) * numpy_dtype.itemsize
                batch[name] = torch.from_numpy(root[offset:offset + size].view(numpy_dtype).reshape(shape))
            else:  # numpy has no such dtype (bfloat16, ...): view the bytes through torch
                torch_dtype = _DTYPES[dtype]
                size = math.prod(shape) * torch_dtype.itemsize
                batch[name] = torch.from_numpy(root[offset:offset + size]).view(torch_dtype).view(shape)
        self.busy.append(key)
        return batch

    def give_back(self, *, everything: bool = False) -> None:
        """Clear the flag of every busy slot whose batch is gone (``everything``: of every busy slot)."""
        still = []
        for key in self.busy:
            root = self.slots[key]
            if everything or sys.getrefcount(root) == self.UNUSED:
                root[0] = _FREE
            else:
                still.append(key)
        self.busy = still

    def restart(self) -> None:
        """A new iteration over the same (persistent) workers: slots holding batches torch dropped when the
        last loop stopped early are free again (any batch a user still holds stays busy)."""
        self.give_back()
        busy = set(self.busy)
        for key, root in self.slots.items():
            if key not in busy:
                root[0] = _FREE


def worker_generator(batch_sampler: Any, generator: torch.Generator | None) -> torch.Generator | None:
    """The generator a loader draws each iteration's worker seeds from (torch's worker processes, and the
    ``base`` of gather threads): ``generator`` when given, else one seeded by the order's seed (a
    ``BatchIndexSampler``'s ``seed=``, a sampler's seed), else None (torch's global RNG). So the loader's
    ``seed=`` seeds the workers too: a random transform (``RandomShift``) draws the same in a run with the same
    seed, in worker processes as in threads."""
    if generator is not None:
        return generator
    seed = getattr(batch_sampler, "seed", None)
    if seed is None:
        seed = getattr(getattr(batch_sampler, "sampler", None), "seed", None)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        return None
    state = np.random.SeedSequence([int(seed) & (2**63 - 1), 7]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & (2**63 - 1))


_BATCH = threading.local()  # in a gather thread: (run, number, base) of the batch it is making


def batch_number() -> tuple[int, int, int] | None:
    """(run, number, base) of the batch this gather thread is making (``threaded``), else None: the
    loader's iteration, the batch's number in it and a seed drawn from torch's global RNG as the iteration
    began. A random transform draws from them, so its draws do not depend on which thread made which
    batch when."""
    return getattr(_BATCH, "number", None)


def threaded(batches: Iterable, make: Callable[[Any], dict], threads: int, depth: int, *, run: int = 0,
             base: int = 0, timeout: float | None = None) -> Iterator[dict]:
    """``make(items)`` for each of ``batches``, by a pool of ``threads`` threads, in order, ``depth`` batches
    in flight: numpy's gathers (and torch's ops in a transform) release the GIL, so the threads overlap
    them with no transport at all. ``run`` (the loader's iteration), the batch's number and ``base`` are
    what ``batch_number`` tells a transform; ``timeout``: seconds to wait for a batch (None: no limit),
    as torch's ``timeout``. A loop that stops early cancels the batches not begun."""
    def task(number: int, items: Any) -> dict:
        _BATCH.number = (run, number, base)
        try:
            with serial():  # these threads are the parallelism here (their gathers and decodes stay in them)
                return make(items)
        finally:
            _BATCH.number = None

    iterator = enumerate(batches)
    pool = ThreadPoolExecutor(threads, thread_name_prefix="memmap_replay-loader")
    pending: deque = deque()
    try:
        for number, items in itertools.islice(iterator, depth):
            pending.append(pool.submit(task, number, items))
        while pending:
            try:
                batch = pending.popleft().result(timeout)
            except FutureTimeout:
                raise RuntimeError(f"DataLoader timed out after {timeout} seconds (a gather thread's batch)") from None
            for number, items in itertools.islice(iterator, 1):
                pending.append(pool.submit(task, number, items))
            yield batch
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
