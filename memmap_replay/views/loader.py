"""DataLoaders over a view: batches of item numbers in, whole batches out (built by ``reading/build.py``).

The sampler yields a numpy array of item numbers per batch; the DataLoader hands it to the view's
``__getitems__``, which gathers the batch with one indexing call per field; the collate function only
passes it through. A ``transform=`` (or ``collate_fn=``, torch's name for it) rides on the view, so
it runs where the batch is gathered: in the worker, or in the main process without workers. Named
tuples and the move to a device happen in the main process, so workers work under every start method.
"""

from __future__ import annotations

import functools
import itertools
import os
import weakref
from collections import deque, namedtuple
from typing import Any, Callable, Iterable, Iterator, Protocol, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..errors import OptionError, ReplayError
from ..core.options import choice, flag, integer, named_tuple_option, short
from ._options import device_option, generator_option
from .device import DevicePrefetcher, can_pin, pinned
from .output import output_option, to_tensordict
from .torchrl_layout import to_torchrl
from .transforms import loader_transform
from .batches import BatchIndexSampler, _LazyPermutation  # noqa: F401 - re-exported (BatchIndexSampler is public)
from .resume import LoaderPlace, checked_loader_state, loader_state, record, resumed_items
from .transport import (PROCESS_OPTIONS, WORKER_KINDS, WORKER_TRANSPORTS, SlotPacker, SlotReader, slot_release_option,
                        threaded, worker_generator)

__all__ = ["BatchIndexSampler", "ReplayDataLoader", "sampler_dataloader", "with_loader_transform"]


def _pinned(make, items) -> dict:
    """``make(items)`` pinned (``views.device.pinned``). Gathering straight into pooled pinned memory would
    save that copy, but a pool cannot tell when an asynchronous device copy has finished reading a block:
    not done until it can be tested on a GPU."""
    return pinned(make(items))


def _pass_through(batch: dict) -> dict:
    """The collate function: a view's ``__getitems__`` already returns a whole batch."""
    return batch


def _batch_type(names: tuple[str, ...]) -> type[tuple[Any, ...]]:
    """The named tuple class ``Batch`` with these fields (``to_named_tuple``)."""
    return namedtuple("Batch", names)


class _BlockOrdered(Protocol):
    """A batch sampler of block-shuffled epochs (``BatchIndexSampler(shuffle="blocks")``): what
    ``_items_ahead`` reads of one whose ``order`` is ``"blocks"``."""

    order: str
    block_size: int
    block_window: int
    batch_size: int
    size: int


class ReplayDataLoader(DataLoader):
    """A DataLoader whose batches may become named tuples or TensorDicts (``output="tensordict"``, see
    ``views.output``) and move to a device (``non_blocking``; see ``views.device``: pinned with
    ``pin_memory=True``, and on an accelerator copied a batch ahead on a side stream unless ``prefetch=0``).

    ``prefetch`` (default 1): with ``num_workers=0`` the loader takes the next ``prefetch`` batches' items
    from its batch sampler ahead of time and has the view advise their rows (``view.prefetch``), so their
    disk reads overlap the training step on the current batch. (With workers, torch's DataLoader keeps
    ``prefetch_factor`` batches a worker in flight already, each worker advising its own.) A sampler's
    draws are then made ``prefetch`` batches early: priorities updated after a batch affect the draws
    from the one after next on, and episodes committed meanwhile show up a batch later.

    Workers (``num_workers > 0``; ``views.transport``): ``workers="threads"`` gathers (and transforms) in
    ``num_workers`` threads of this process, with no transport: numpy's gathers and torch's ops release
    the GIL. ``workers="processes"`` is torch's worker processes, whose batches travel through
    shared-memory slots (``worker_transport="slots"``; ``"torch"``: torch's own transport), given back
    when the batch's tensors are gone (``slot_release="unused"``) or at the next batch (``"next"``).
    ``workers="auto"`` (the default) is threads, measured the faster on every view here, unless an option
    only processes have is given (``worker_init_fn``, ``multiprocessing_context``, ``persistent_workers``)."""

    def __init__(self, dataset, batch_sampler: BatchIndexSampler, *, to_named_tuple: tuple[str, ...] | None = None,
                 device: Any = None, non_blocking: bool = True, prefetch: int = 1, output: str = "dict",
                 workers: str = "auto", worker_transport: str = "slots", slot_release: str = "unused",
                 **loader_options: Any):
        device, non_blocking = device_option(device), flag(non_blocking, "non_blocking")
        self.prefetch = integer(prefetch, "prefetch", low=0)
        integer(loader_options.get("num_workers", 0), "num_workers", low=0)  # (torch's own error otherwise)
        to_named_tuple = named_tuple_option(to_named_tuple)
        self.output = output_option(output, to_named_tuple)
        generator_option(loader_options.get("generator"))
        self.worker_transport = choice(worker_transport, "worker_transport", WORKER_TRANSPORTS)
        self.slot_release = slot_release_option(slot_release)
        workers = choice(workers, "workers", WORKER_KINDS)
        process_only = sorted(name for name in PROCESS_OPTIONS if loader_options.get(name) not in (None, False))
        if workers == "threads" and process_only:
            raise OptionError(f"{process_only} apply to worker processes; with workers='threads' the num_workers "
                              f"threads run in this process: drop them, or pass workers='processes'")
        # auto: threads (no transport; numpy's gathers and torch's ops release the GIL), unless an option
        # only processes have asks for processes
        self.workers = "processes" if workers == "processes" or (workers == "auto" and process_only) else "threads"
        # (torch's stubs type a collate function's argument as a list: here it gets what the view's
        # __getitems__ returns, a whole batch)
        collate: Callable[[Any], Any] = _pass_through
        if (self.workers == "processes" and self.worker_transport == "slots"
                and loader_options.get("num_workers", 0) > 0):
            # a worker's batches in flight, the two the main process may still hold, the one being gathered
            collate = SlotPacker((loader_options.get("prefetch_factor") or 2) + 3)
        self._slot_reader: SlotReader | None = None
        self._runs = 0  # iterations with gather threads (a seeded transform's draws depend on it)
        self._place: LoaderPlace | None = None  # the iteration in progress (views/resume.py)
        self._resume: tuple[dict[str, Any], dict[str, Any]] | None = None  # (state, checked values) loaded
        # the order's seed seeds the workers too (torch draws each iteration's worker seeds from the generator)
        loader_options["generator"] = worker_generator(batch_sampler, loader_options.get("generator"))
        super().__init__(dataset, batch_sampler=batch_sampler, collate_fn=collate, **loader_options)
        self.device = device
        self.non_blocking = non_blocking
        self.to_named_tuple = to_named_tuple
        if to_named_tuple is not None:
            names = tuple(name.lstrip("_") for name in to_named_tuple)
            self.batch_type = _batch_type(names)

    def check_worker_number_rationality(self) -> None:
        if getattr(self, "workers", None) != "threads":  # torch's warning speaks of processes
            super().check_worker_number_rationality()

    def _batches(self):
        if self.num_workers > 0 and self.workers == "processes":
            yield from self._from_processes()
            return
        # in this process the view already returns whole batches: skip torch's fetch machinery
        trusted = isinstance(self.batch_sampler, BatchIndexSampler) and hasattr(self.dataset, "batch")
        make = self.dataset.batch if trusted else self.dataset.__getitems__
        if self.pin_memory and can_pin():
            make = functools.partial(_pinned, make)
        items = self._items_ahead()
        if self.num_workers > 0:  # gather threads
            self._runs += 1
            # as torch seeds its workers: from the loader's generator (worker_generator), else the global RNG
            base = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
            yield from threaded(items, make, self.num_workers, self.num_workers * (self.prefetch_factor or 2),
                                run=self._runs, base=base, timeout=self.timeout or None)
            return
        for chosen in items:
            yield make(chosen)

    def _items_ahead(self) -> Iterator:
        """The batch sampler's items, each told to the view (``view.prefetch``) ``prefetch`` batches before
        its turn, so its disk reads overlap the work until then."""
        prefetch = getattr(self.dataset, "prefetch", None)
        # (a batch sampler is always given: __init__ takes one)
        sampler, depth = cast("Iterable[Any]", self._index_sampler), self.prefetch
        blocks = getattr(self.batch_sampler, "order", None) == "blocks" and hasattr(self.dataset, "advise")
        if prefetch is not None and depth and blocks:
            # whole blocks, each advised once, a window of blocks ahead: the next window's reads overlap
            # the batches of this one
            ordered = cast(_BlockOrdered, self.batch_sampler)
            depth = max(depth, -(-ordered.block_size * ordered.block_window // ordered.batch_size))
            prefetch = _block_prefetch(self.dataset, ordered.size, ordered.block_size)
        return _prefetched(sampler, prefetch, depth, getattr(self.dataset, "cancel_prefetch", None))

    def _from_processes(self) -> Iterator:
        """torch's worker processes; with slots, each batch wrapped over its worker's shared memory. A loop
        that ends early (an error, ``break``) stops the workers (unless persistent) there and then, not when
        torch's iterator is garbage: an iterator caught in a reference cycle (an error's traceback) may
        otherwise be collected in a worker process of the next loader, which cannot stop them."""
        packer = self.collate_fn if isinstance(self.collate_fn, SlotPacker) else None
        reader: SlotReader | None = None  # (set with slots)
        if packer is not None:
            reader = self._slot_reader
            if reader is None or not self.persistent_workers:  # new workers: new slots (an iteration of its own)
                reader = self._slot_reader = SlotReader(self.slot_release)
            else:  # the same workers: slots of batches dropped by a loop stopped early are free again
                reader.restart()
                packer.new_iteration()
        pin = self.pin_memory and can_pin()  # (torch's pinning thread passes a SlotBatch by)
        iterator, pid = super().__iter__(), os.getpid()
        try:
            for item in iterator:
                if reader is not None:
                    item = reader.unpack(item)
                    item = pinned(item) if pin else item
                yield item
        finally:
            shutdown = getattr(iterator, "_shutdown_workers", None)  # (torch's own, idempotent)
            if not self.persistent_workers and shutdown is not None and os.getpid() == pid:  # (not in a fork)
                shutdown()

    def __iter__(self):
        generator = None if self.generator is None else self.generator.get_state().tolist()
        loaded, self._resume = self._resume, None
        place = self._place = LoaderPlace(loaded[1]["batch"] if loaded else 0, generator)
        place.loaded = loaded
        batches = self._batches()
        if self.device is not None:  # a batch ahead on an accelerator (unless prefetch=0: nothing drawn early)
            batches = DevicePrefetcher(batches, self.device, non_blocking=self.non_blocking,
                                       pin_memory=self.pin_memory, ahead=self.prefetch > 0)
        try:
            for batch in batches:
                place.hand_out()
                yield self._output(batch)
        finally:
            place.active = False

    @property
    def _index_sampler(self) -> Any:
        """What torch's iterator (and ``_items_ahead``) take the items from: the batch sampler's, each
        recorded in the iteration's place (``views/resume.py``), after those of a loaded state."""
        return _RecordedItems(self)

    def _source_items(self) -> Iterator:
        place = self._place if self._place is not None else LoaderPlace()
        batches: Any = self.batch_sampler  # (always given: __init__ takes one)
        if place.loaded is not None:  # (torch's iterator may ask twice before it draws: the same items)
            (_, values), place.loaded = place.loaded, None
            place.source = resumed_items(batches, values, self.generator)
        return record(batches if place.source is None else place.source, place, batches)

    def state_dict(self) -> dict[str, Any]:
        """Where this loader is (JSON-able), for ``load_state_dict`` on a loader made with the same arguments
        (e.g. after a restart: ``buffer.save_training_state``). Taken between batches: the batches handed out
        so far count; those prefetched, in worker threads or processes, or drawn ahead but not handed out yet
        are given again after a resume, never lost or skipped. Over a batch sampler of epochs
        (``buffer.dataloader``): the epoch, the batch in it and the seeds of its order; over a sampler's draws
        (``sampler.dataloader``): the sampler's ``state_dict()`` and the draws not handed out yet.

        Returns
        -------
        dict
            Plain JSON-able values.
        """
        place = self._place if self._place is not None and self._place.active else None
        loaded = self._resume or (place.loaded if place is not None else None)
        if loaded is not None:
            return loaded[0]  # loaded, not begun yet
        return loader_state(self.batch_sampler, place, self.generator)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (a ``state_dict()`` of a loader made with the same arguments): the next
        iteration gives exactly the batches the saved loader would have given next, then carries on as it
        would have. A sampler's state is loaded into it now. A random ``transform``'s draws are not part of
        the state. Every value is checked first: a refused state changes nothing.

        Parameters
        ----------
        state : dict
            What ``state_dict()`` returned (as saved, e.g. through JSON).
        """
        values = checked_loader_state(self.batch_sampler, state, self.generator)
        if values["kind"] == "draws":  # (checked by the sampler itself, before anything changes)
            cast(Any, self.batch_sampler).sampler.load_state_dict(values.pop("sampler"))
        if "generator" in values:
            self.generator.set_state(values["generator"])
        self._resume = (state, values)
        self._place = None

    def _output(self, batch: dict) -> Any:
        """The batch as the caller asked: a dict, a named tuple, a TensorDict or TorchRL's layout."""
        if self.to_named_tuple is not None:
            missing = [name for name in self.to_named_tuple if name not in batch]
            if missing:
                raise OptionError(f"to_named_tuple names {missing} are not in the batch; it has {sorted(batch)}")
            return self.batch_type(*(batch[name] for name in self.to_named_tuple))
        if self.output == "torchrl":
            return to_torchrl(batch, self.dataset, device=self.device)
        if self.output == "tensordict":
            steps = getattr(self.dataset, "sequence_outputs", None)
            return to_tensordict(batch, steps() if steps is not None else (),
                                 time_major=getattr(self.dataset, "time_major", False), device=self.device)
        return batch


class _RecordedItems:
    """A loader's ``_index_sampler``: iterating it gives the batch sampler's items, recorded (``_source_items``).
    It holds the loader weakly: torch's iterator holds it, and a loader holds its persistent workers' iterator, so a
    strong reference would make a cycle, which the garbage collector frees with the iterator's queues closed first
    (their weakref callbacks run before finalizers): the workers would then never hear that they are done, and
    deleting the loader would wait 5 s for each of them."""

    def __init__(self, loader: ReplayDataLoader):
        self._loader = weakref.ref(loader)

    @property
    def loader(self) -> ReplayDataLoader:
        loader = self._loader()
        if loader is None:  # (torch's iterator outliving its loader: nothing is drawn from it any more)
            raise ReplayError("the ReplayDataLoader of this iterator was deleted: iterate a loader you hold")
        return loader

    def __iter__(self) -> Iterator:
        return self.loader._source_items()

    def __len__(self) -> int:
        return len(cast(Any, self.loader.batch_sampler))


def _prefetched(batches: Iterable, prefetch: Any, depth: int, cancel: Any = None) -> Iterator:
    """The batches, each taken ``depth`` batches ahead of its turn and passed to ``prefetch`` then; if
    the loop stops early, ``cancel(n)`` is told of the n batches prefetched that will not be asked for."""
    if prefetch is None or depth == 0:
        yield from batches
        return
    iterator = iter(batches)
    ahead: deque = deque()
    try:
        for items in itertools.islice(iterator, depth):
            prefetch(items)
            ahead.append(items)
        while ahead:
            for items in itertools.islice(iterator, 1):
                prefetch(items)
                ahead.append(items)
            yield ahead.popleft()
    finally:
        if ahead and cancel is not None:
            cancel(len(ahead))


def _block_prefetch(view: Any, size: int, block_size: int):
    """``view.prefetch`` for one block-shuffled epoch: a batch that enters blocks has them advised whole,
    each once (the next batches read the rest of them, so the disk reads in large runs); the batches
    whose blocks were advised are only counted."""
    entered = np.zeros(-(-size // block_size), dtype=bool)

    def prefetch(items: np.ndarray) -> bool:
        blocks = np.unique(np.asarray(items) // block_size)
        new = blocks[~entered[blocks]]
        advised = False
        if len(new):
            entered[new] = True
            whole = (new[:, None] * block_size + np.arange(block_size)).ravel()
            advised = view.advise(*view.positions.locate(whole[whole < size]), background=True)
        return view.prefetch(items, covered=True) or advised

    return prefetch


def with_loader_transform(view: Any, transform: Any) -> Any:
    """The view a loader reads with ``transform``: the view itself without one, else a shallow copy
    carrying it (``view.with_transform``), so the caller's view (or a sampler's) is left unchanged."""
    if transform is None:
        return view
    if not hasattr(view, "with_transform"):
        raise OptionError(f"transform= needs a view of this library (with with_transform) (got {short(view)}); "
                          f"apply the transform in your own Dataset instead")
    if view.transform is not None:
        raise OptionError(f"the view has a transform already ({short(view.transform, 80)}) and the loader got "
                          f"another ({short(transform, 80)}); pass one, e.g. Compose(view.transform, transform)")
    return view.with_transform(transform)


def sampler_dataloader(view: Dataset, batches: Any, *, transform: Any = None, collate_fn: Any = None,
                       **loader_options: Any) -> ReplayDataLoader:
    """``sampler.dataloader(...)``: a ``ReplayDataLoader`` over ``view`` whose batches a sampler draws
    (``batches``: its ``batches(...)``), in the main process; DataLoader workers only gather (and run
    ``transform``/``collate_fn``, which go to a shallow copy of ``view``: the sampler's own is unchanged).
    ``loader_options``: the loader options a sampler's ``dataloader`` signature names (reading/table.py)."""
    view = with_loader_transform(view, loader_transform(transform, collate_fn))
    return ReplayDataLoader(view, batches, **loader_options)
