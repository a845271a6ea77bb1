"""The library's own worker threads: large gathers and frame decoding split over them. Numpy only.

A batch of images is megabytes copied from scattered rows, or hundreds of frames decoded; one thread does
that at a fraction of what the machine can. numpy's ``take`` and the codecs release the GIL while they copy
or decode, so a few plain threads share the work. They are the library's, not torch's: torch's CPU threads
are an OpenMP pool that hangs in a child forked after its parent ran it, while these are made again in
each process that uses them (a forked child, a DataLoader's worker process, starts with none).

``run(tasks)`` runs a list of callables, the calling thread taking its share, and returns when all are
done (the first error is raised, after the others have finished). A thread that is itself one of the
parallel workers of a loader (``serial()``) runs its tasks alone: the loader's threads are the parallelism
there, and nesting would only add waits.

``MEMMAP_REPLAY_THREADS`` sets the number of threads (the calling one included); by default the CPUs this
process may run on, at most 8. ``set_threads(n)`` sets it from code; ``set_threads(1)`` turns the pool off.
"""

from __future__ import annotations

import os
import queue
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from ..errors import OptionError

__all__ = ["WorkerThreads", "THREADS", "get_threads", "set_threads", "serial", "split"]

ENVIRONMENT = "MEMMAP_REPLAY_THREADS"
_MAX_DEFAULT = 8
_LOCAL = threading.local()  # .serial: this thread runs its tasks alone


def _default_threads() -> int:
    value = os.environ.get(ENVIRONMENT, "").strip()
    if value:
        if not value.isdigit() or not 1 <= int(value) <= 256:
            raise OptionError(f"{ENVIRONMENT} must be a number of threads from 1 to 256 (got {value!r}); set it to "
                              f"1 to gather and decode in the calling thread only, or unset it")
        return int(value)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (no affinity on this platform)
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, _MAX_DEFAULT))


class _Batch:
    """One ``run``: its tasks left to finish, and the first error."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()

    def finish(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            if self.left == 0:
                self.done.set()


class WorkerThreads:
    """A fork-safe pool of daemon threads (made at the first ``run`` in each process)."""

    def __init__(self) -> None:
        self._size: int | None = None
        self._pid = os.getpid()  # (a forked child starts afresh: the fork hook, or the pid check in _ensure)
        self._queue: queue.SimpleQueue[tuple[Callable[[], object], _Batch]] = queue.SimpleQueue()
        self._started = 0
        self._start_lock = threading.Lock()

    @property
    def size(self) -> int:
        """Threads that share a ``run`` (the calling one included)."""
        if self._size is None:
            self._size = _default_threads()
        return self._size

    def resize(self, size: int) -> int:
        previous = self.size
        self._size = size  # more threads start at the next run; extra ones idle (runs make ``size`` tasks at most)
        return previous

    def forked(self) -> None:
        """In a forked child: its parent's threads do not exist here, and a lock another parent thread held at the
        fork would never be released; start afresh (at the next run)."""
        self._queue, self._started, self._pid = queue.SimpleQueue(), 0, os.getpid()
        self._start_lock = threading.Lock()

    def _ensure(self) -> None:
        if self._pid != os.getpid():  # (a child made without the fork hook: os.fork before import, ...)
            self.forked()
        wanted = self.size - 1
        if self._started < wanted:
            with self._start_lock:
                while self._started < wanted:
                    thread = threading.Thread(target=self._work, args=(self._queue,), daemon=True,
                                              name=f"memmap_replay-worker-{self._started}")
                    thread.start()
                    self._started += 1

    @staticmethod
    def _work(tasks: "queue.SimpleQueue[tuple[Callable[[], object], _Batch]]") -> None:
        _LOCAL.serial = True  # a task never waits on the pool (no nested runs)
        while True:
            task, batch = tasks.get()
            try:
                task()
            except BaseException as error:  # handed to the caller of run
                batch.finish(error)
            else:
                batch.finish(None)

    def run(self, tasks: Sequence[Callable[[], object]]) -> None:
        """Run every task; the calling thread runs the first one. Raises the first error once all are done."""
        if not tasks:
            return
        if len(tasks) == 1 or self.size == 1 or getattr(_LOCAL, "serial", False):
            for task in tasks:
                task()
            return
        self._ensure()
        batch = _Batch(len(tasks) - 1)
        for task in tasks[1:]:
            self._queue.put((task, batch))
        error: BaseException | None = None
        try:
            tasks[0]()
        except BaseException as raised:
            error = raised
        batch.done.wait()
        if error is not None:
            raise error
        if batch.error is not None:
            raise batch.error

    def parts(self, items: int, min_items: int) -> int:
        """How many tasks to split ``items`` into, each of at least ``min_items`` (1: run it in the caller)."""
        if getattr(_LOCAL, "serial", False):
            return 1
        return max(1, min(self.size, items // max(min_items, 1)))


THREADS = WorkerThreads()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=THREADS.forked)


def get_threads() -> int:
    """Threads that gather and decode a batch together (the calling one included)."""
    return THREADS.size


def set_threads(count: int) -> int:
    """Gather and decode large batches over ``count`` threads (the calling one included; 1: the calling thread
    only); returns the previous count. The default is the CPUs this process may use, at most 8, or the
    ``MEMMAP_REPLAY_THREADS`` environment variable."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 256:
        raise OptionError(f"set_threads takes a number of threads from 1 to 256 (got {count!r}); 1 gathers and "
                          f"decodes in the calling thread only")
    return THREADS.resize(count)


@contextmanager
def serial() -> Iterator[None]:
    """This thread's gathers and decodes run in it alone inside the block (a loader's gather threads: they are
    the parallelism there)."""
    before = getattr(_LOCAL, "serial", False)
    _LOCAL.serial = True
    try:
        yield
    finally:
        _LOCAL.serial = before


def split(count: int, parts: int) -> list[slice]:
    """``parts`` contiguous slices covering ``range(count)`` (sizes differ by at most one)."""
    bounds = [count * part // parts for part in range(parts + 1)]
    return [slice(bounds[part], bounds[part + 1]) for part in range(parts) if bounds[part] < bounds[part + 1]]
