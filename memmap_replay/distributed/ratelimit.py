"""Rate limiting: hold learners' samples and actors' inserts to a ratio (Reverb's ``SampleToInsertRatio``).

Counters: inserts ``I`` (steps, or episodes with ``unit="episodes"``, committed to a store), samples ``S``
(items learners drew), deletes ``D`` (items the ring evicted); the size is ``I - D``. With
``spi = samples_per_insert`` and an error window ``[min_diff, max_diff]``:

- a sample of ``n`` is allowed iff ``I - D >= min_size_to_sample`` and ``I * spi - (S + n) >= min_diff``;
- an insert of ``n`` is allowed iff ``I - D + n <= min_size_to_sample`` (filling up is free) or
  ``(I + n) * spi - S <= max_diff``.

``error_buffer=e`` makes the window ``spi * min_size_to_sample -/+ e``: once sampling began,
``(I - min_size_to_sample) * spi - S`` stays in ``[-e, e]`` (while nothing is evicted); a pair
``(low, high)`` is the window as given. These are Reverb's rules (``CanSample``/``CanInsert``, for any
``n``) and checks: ``samples_per_insert > 0``, ``min_size_to_sample >= 1``, a window at least
``2 * max(1, spi)`` wide, ``min_diff <= spi * min_size_to_sample``. Make the window at least
``a * spi + b`` wide for inserts of up to ``a`` and samples of up to ``b``: narrower, an insert and a
sample can each wait for the other forever. A request that can never pass (an insert with ``n * spi``,
a sample with ``n``, wider than the window) raises ``InvalidDataError`` rather than wait.

``await_*(n)`` wait until allowed, then count, in one step (a reservation: no ``inserted``/``sampled``
for it); ``mode="raise"`` raises ``RateLimitedError`` at once instead, ``timeout=`` after that long.
``can_*`` only look (for a single-threaded owner such as a Ray actor, which then calls ``inserted`` /
``sampled``). ``inserting(...)`` around a commit and ``wrap_sampler`` do it all for writers and learners.

``folder=None``: counters in memory, for the threads of one process (no thread of its own; pickles with
a copy of its counts). ``folder=`` a store or shards' root: in ``ratelimit/<name>.npy`` (three int64;
the limits in ``<name>.json``, which ``join`` reads), for every process of the machine (not over NFS).
Each check-and-count holds ``flock`` on ``<name>.lock`` for microseconds, so the bounds hold exactly
across processes; a waiter polls (1 ms, doubling up to ``poll``), so it sees room another process
made within ``poll`` (10 ms). A participant killed (SIGKILL, even holding the lock: the kernel drops
it) leaves its counts, since what it committed or drew is done (killed between a reservation and its
commit, the reservation stays). The counters persist with the folder: a restarted run carries on.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, NamedTuple, cast

import numpy as np

from ..core import folderio
from ..errors import (OptionError, CorruptStoreError, InvalidDataError, MissingFileError, NotAFolderError,
                      RateLimitedError,
                     ReadOnlyError, StoreNotFoundError, UnsafeEntryError)
from ..core.format import RATELIMIT_DIR, read_npy_header
from ..core.options import choice, integer, limiter_name, number, short
from ..samplers.base import SampleBatches
from ..samplers.loader_entry import LimitedLoader

fcntl: ModuleType | None  # None where the OS has no flock
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["RateLimiter", "RateCounts", "RateLimitedError", "LimitedSampler", "RATELIMIT_DIR"]

_FORMAT_NAME = "memmap_replay.ratelimit"
_FIRST_POLL = 0.001  # a waiter on a shared limiter sleeps this long first, then twice as long, up to poll
_INSERT, _SAMPLE, _DELETE = 0, 1, 2  # the counters' columns
_WHAT = {_INSERT: "an insert", _SAMPLE: "a sample"}
_DEFAULT = object()  # timeout not given: the limiter's own
_SHARED: "weakref.WeakSet[RateLimiter]" = weakref.WeakSet()


def _reopen_in_child() -> None:
    """A forked child shares its parent's lock descriptor (flock could not tell them apart): reopen it."""
    for limiter in list(_SHARED):
        limiter._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reopen_in_child)


class RateCounts(NamedTuple):
    """Items inserted, sampled and evicted (deleted) so far."""

    inserts: int
    samples: int
    deletes: int

    @property
    def size(self) -> int:
        return self.inserts - self.deletes


def _error_window(spi: float, min_size: int, error_buffer: Any) -> tuple[float, float]:
    """(min_diff, max_diff) of a number (centred on ``spi * min_size``) or a (low, high) pair, checked."""
    if isinstance(error_buffer, (tuple, list)):
        if len(error_buffer) != 2:
            raise OptionError(f"error_buffer must be a number or a (low, high) pair (got {short(error_buffer)})")
        low, high = (number(value, "error_buffer") for value in error_buffer)
    else:
        half = number(error_buffer, "error_buffer", low=0)
        low, high = spi * min_size - half, spi * min_size + half
    if high - low < 2 * max(1.0, spi):
        raise OptionError(f"error_buffer must leave a window at least 2 * max(1, samples_per_insert) = "
                               f"{2 * max(1.0, spi)} wide (got [{low}, {high}]), else inserts and samples could both "
                               f"block: widen it")
    if low > spi * min_size:
        raise OptionError(f"error_buffer's low end must be at most samples_per_insert * min_size_to_sample = "
                               f"{spi * min_size} (got {low}), else sampling could never start")
    return low, high


def _folder_of(value: Any) -> Path:
    """The folder of a path, a ReplayBuffer or an EpisodeStore; it must exist."""
    folder = Path(getattr(value, "folder", value))
    if not folder.exists():
        raise StoreNotFoundError(f"{folder} does not exist: a shared rate limiter keeps its counters in an existing "
                                 f"folder (the store's, or the shards' root); create the store first")
    if not folder.is_dir():
        raise NotAFolderError(f"{folder} is not a folder: pass the store's folder (or the shards' root)")
    return folder


class RateLimiter:
    """A samples-per-insert rate limiter (the rules and the files: see the module docstring).

    Parameters
    ----------
    samples_per_insert : float
        Items sampled per step (or episode, ``unit="episodes"``) inserted.
    error_buffer : float | tuple[float, float]
        How far either side may run ahead: ``e`` sets the window ``spi * min_size_to_sample +- e``, a pair sets it.
    min_size_to_sample : int, default 1
        Inserts before the first sample.
    unit : str, default 'steps'
        What an insert counts: 'steps' or 'episodes'.
    folder : path, optional
        Share the counters across processes through this folder (``RateLimiter.join`` there).
    name : str, default 'default'
        The limiter's name in the folder.
    mode : str, default 'block'
        Wait ('block') or raise ``RateLimitedError`` at once ('raise').
    timeout : float | None, default None
        Seconds a wait may take before ``RateLimitedError``.
    poll : float, default 0.01
        Seconds between looks at another process's counters.

    Examples
    --------
    >>> from memmap_replay import RateLimiter
    >>> limiter = RateLimiter(2.0, min_size_to_sample=10, error_buffer=20, mode="raise")
    >>> limiter.can_sample(1)
    False
    >>> limiter.await_insert(10)
    >>> limiter.await_sample(16)
    >>> limiter.counts
    RateCounts(inserts=10, samples=16, deletes=0)
    """

    def __init__(self, samples_per_insert: float, *, error_buffer: Any, min_size_to_sample: int = 1,
                 unit: str = "steps", folder: Any = None, name: str = "default", mode: str = "block",
                 timeout: float | None = None, poll: float = 0.01):
        self.samples_per_insert = number(samples_per_insert, "samples_per_insert", low=0, low_open=True)
        self.min_size_to_sample = integer(min_size_to_sample, "min_size_to_sample", low=1)
        self.min_diff, self.max_diff = _error_window(self.samples_per_insert, self.min_size_to_sample, error_buffer)
        self.unit = choice(unit, "unit", ("steps", "episodes"))
        self.mode = choice(mode, "mode", ("block", "raise"))
        self.timeout = None if timeout is None else number(timeout, "timeout", low=0)
        self.poll = number(poll, "poll", low=0, high=60, low_open=True)
        self.name = limiter_name(name)
        self.blocked = {"insert": 0, "sample": 0}  # this object's calls that had to wait (or were refused)
        self._cond = threading.Condition(threading.Lock())
        self._fd = -1
        self.folder = None if folder is None else _folder_of(folder)
        self._counts = np.zeros(3, dtype=np.int64)
        if self.folder is not None:
            self._open()
            _SHARED.add(self)

    @classmethod
    def join(cls, folder: Any, name: str = "default", *, mode: str = "block", timeout: float | None = None,
             poll: float = 0.01) -> "RateLimiter":
        """The shared limiter ``name`` of ``folder``, with the limits it was created with; ``mode``, ``timeout``
        and ``poll`` are this process's own (as ``RateLimiter`` takes them)."""
        root = _folder_of(folder)
        path = root / RATELIMIT_DIR / f"{limiter_name(name)}.json"
        try:  # bounded, a regular file inside the folder (folderio)
            spec = folderio.read_json(root, path, doing="read the rate limiter's limits")
            limits = dict(samples_per_insert=spec["samples_per_insert"], min_size_to_sample=spec["min_size_to_sample"],
                          error_buffer=(spec["min_diff"], spec["max_diff"]), unit=spec["unit"])
        except MissingFileError:
            raise StoreNotFoundError(
                f"no rate limiter {name!r} in {folder}: create it with RateLimiter(folder=) first") from None
        except CorruptStoreError as error:
            raise CorruptStoreError(f"{error}; create the limiter again with its options") from None
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptStoreError(
                f"{path} is damaged ({error!r}); create the limiter again with its options") from None
        return cls(**limits, folder=folder, name=name, mode=mode, timeout=timeout, poll=poll)

    @property
    def config(self) -> dict:
        """The limits as plain keyword arguments: ``RateLimiter(**config)`` has the same limits."""
        return dict(samples_per_insert=self.samples_per_insert, min_size_to_sample=self.min_size_to_sample,
                    error_buffer=(self.min_diff, self.max_diff), unit=self.unit)

    def __repr__(self) -> str:
        where = "in memory" if self.folder is None else f"{self.folder / RATELIMIT_DIR / self.name}.npy"
        return (f"RateLimiter(samples_per_insert={self.samples_per_insert}, window=[{self.min_diff}, {self.max_diff}], "
                f"min_size_to_sample={self.min_size_to_sample}, unit={self.unit!r}, {where}, {self.counts})")

    # ---- the shared files ------------------------------------------------------------------------------

    def _open(self) -> None:
        folder = cast(Path, self.folder)  # (a limiter that keeps its counters in a folder)
        directory = folder / RATELIMIT_DIR
        try:  # walked from the folder without following links (folderio): nothing is written outside it
            folderio.make_dir(folder, directory, doing="make the rate limiter's folder")
            self._fd = self._lock_file(os.O_CREAT)
        except ReadOnlyError as error:
            raise ReadOnlyError(f"cannot keep rate limiter counters in {directory}: {error}; give folder= a folder "
                                f"this process may write") from None
        with self._cond, self._flock():
            self._check_spec(directory / f"{self.name}.json")
            self._counts = _counter_file(directory / f"{self.name}.npy", folder)

    def _lock_file(self, flags: int = 0) -> int:
        """A descriptor of ``ratelimit/<name>.lock`` (opened without following links: folderio)."""
        folder = cast(Path, self.folder)  # (a limiter that keeps its counters in a folder)
        path = folder / RATELIMIT_DIR / f"{self.name}.lock"
        return folderio.open_write(folder, path, os.O_RDWR | flags, doing="lock")

    def _check_spec(self, path: Path) -> None:
        spec = dict(format=_FORMAT_NAME, version=1, samples_per_insert=self.samples_per_insert, min_diff=self.min_diff,
                    max_diff=self.max_diff, min_size_to_sample=self.min_size_to_sample, unit=self.unit)
        folder = cast(Path, self.folder)  # (a limiter that keeps its counters in a folder)
        try:
            stored = folderio.read_json(folder, path, doing="read the rate limiter's limits")
        except (MissingFileError, CorruptStoreError):
            stored = None  # none yet, or a creation cut short (or damaged): (re)write it
        if isinstance(stored, dict) and stored.get("format") == _FORMAT_NAME and stored != spec:
            raise OptionError(
                f"the rate limiter {self.name!r} in {path.parent} has other limits ({stored}); this one asks for "
                f"{spec}: pass the same options (or RateLimiter.join), another name=, or delete "
                f"{path.parent}/{self.name}.*")
        if stored != spec:
            folderio.write_atomic(folder, path, json.dumps(spec).encode("utf-8"),
                                  doing="write the rate limiter's limits")

    @contextmanager
    def _flock(self) -> Iterator[None]:
        """The lock between processes (the caller holds this object's thread lock)."""
        if self.folder is None or fcntl is None:
            yield
            return
        if self._fd < 0:
            raise InvalidDataError(f"this rate limiter was closed "
                                   f"({self.folder / RATELIMIT_DIR / self.name}); open it again")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _after_fork(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        if self._fd >= 0:
            os.close(self._fd)
            try:
                self._fd = self._lock_file()
            except OSError:  # the folder went away (or the lock file is not ours): the child's copy is closed
                self._fd = -1

    def close(self) -> None:
        """Let go of the shared files (the counters stay in the folder); nothing to do in memory."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        _SHARED.discard(self)

    def __enter__(self) -> "RateLimiter":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def __getstate__(self) -> dict:
        state = dict(self.config, mode=self.mode, timeout=self.timeout, poll=self.poll, name=self.name)
        return dict(state, folder=str(self.folder)) if self.folder is not None else dict(state, counts=self.counts)

    def __setstate__(self, state: dict) -> None:
        counts = state.pop("counts", None)
        type(self).__init__(self, **state)
        if counts is not None:
            self._counts[:] = counts

    # ---- the rules ---------------------------------------------------------------------------------------

    @property
    def counts(self) -> RateCounts:
        """The counters now (one consistent snapshot, across processes too)."""
        with self._cond, self._flock():
            return RateCounts(*map(int, self._counts))

    def _allows(self, kind: int, n: int) -> bool:
        inserts, samples, deletes = map(int, self._counts)
        if kind == _SAMPLE:
            return (inserts - deletes >= self.min_size_to_sample
                    and inserts * self.samples_per_insert - (samples + n) >= self.min_diff)
        return (inserts - deletes + n <= self.min_size_to_sample
                or (inserts + n) * self.samples_per_insert - samples <= self.max_diff)

    def _never(self, kind: int, n: int) -> None:
        """Raise if no number of the other side's calls could let a blocked request through."""
        spi = self.samples_per_insert
        widest = n * spi if kind == _INSERT else n + max(0.0, spi * self.min_size_to_sample - self.max_diff)
        if widest > self.max_diff - self.min_diff:
            raise OptionError(f"{_WHAT[kind]} of {n} never fits the error window [{self.min_diff}, {self.max_diff}] "
                              f"(samples_per_insert={spi}): make it smaller, or widen error_buffer to {widest / 2}")

    def _refused(self, kind: int, n: int, counts: RateCounts, timeout: float | None) -> RateLimitedError:
        spi, (inserts, samples, deletes) = self.samples_per_insert, counts
        if kind == _SAMPLE:
            behind = max(self.min_size_to_sample - inserts + deletes,
                         math.ceil((samples + n + self.min_diff) / spi) - inserts)
            need = f"the actors are behind: it needs about {behind} more {self.unit} inserted"
        else:
            need = (f"the learners are behind: it needs {math.ceil((inserts + n) * spi - samples - self.max_diff)} "
                    f"more sampled")
        when = "at once (mode='raise')" if timeout is None else f"within timeout={timeout} s"
        return RateLimitedError(
            f"rate limiter {self.name!r}: {_WHAT[kind]} of {n} was not allowed {when} ({counts}, samples_per_insert="
            f"{spi}, window [{self.min_diff}, {self.max_diff}], min_size_to_sample={self.min_size_to_sample}): {need}; "
            f"wait longer (timeout=, mode='block') or keep the other side running")

    # ---- the calls -------------------------------------------------------------------------------------

    def can_insert(self, n: int = 1) -> bool:
        """Whether an insert of ``n`` is allowed now (counts nothing)."""
        return self._look(_INSERT, n)

    def can_sample(self, n: int = 1) -> bool:
        """Whether a sample of ``n`` is allowed now (counts nothing)."""
        return self._look(_SAMPLE, n)

    def _look(self, kind: int, n: Any) -> bool:
        n = integer(n, "n", low=1)
        with self._cond, self._flock():
            return self._allows(kind, n)

    def await_insert(self, n: int = 1, *, timeout: Any = _DEFAULT) -> None:
        """Wait until an insert of ``n`` is allowed, then count it (no ``inserted`` for it)."""
        self._acquire(_INSERT, n, timeout)

    def await_sample(self, n: int = 1, *, timeout: Any = _DEFAULT) -> None:
        """Wait until a sample of ``n`` is allowed, then count it (no ``sampled`` for it)."""
        self._acquire(_SAMPLE, n, timeout)

    def _acquire(self, kind: int, n: Any, timeout: Any) -> None:
        """Count ``n`` once allowed; wait for it (as the mode and the timeout say: None is forever) or raise."""
        n = integer(n, "n", low=1)
        if timeout is _DEFAULT:
            timeout = self.timeout
        elif timeout is not None:
            timeout = number(timeout, "timeout", low=0)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, waited = _FIRST_POLL, False
        with self._cond:
            while True:
                with self._flock():
                    counts = RateCounts(*map(int, self._counts))
                    if self._allows(kind, n):
                        self._counts[kind] += n
                        break
                if not waited:
                    self.blocked["sample" if kind == _SAMPLE else "insert"] += 1
                    waited = True
                self._never(kind, n)
                left = None if deadline is None else deadline - time.monotonic()
                if self.mode == "raise" or (left is not None and left <= 0):
                    raise self._refused(kind, n, counts, None if self.mode == "raise" else timeout)
                if self.folder is not None:  # another process may make room: look again soon
                    left = delay if left is None else min(delay, left)
                    delay = min(2 * delay, self.poll)
                self._cond.wait(left)
            self._cond.notify_all()

    def inserted(self, n: int = 1) -> None:
        """Count ``n`` inserts, allowed or not (after ``can_insert``; never after ``await_insert``)."""
        self._add(_INSERT, integer(n, "n", low=0))

    def sampled(self, n: int = 1) -> None:
        """Count ``n`` samples, allowed or not (after ``can_sample``; never after ``await_sample``)."""
        self._add(_SAMPLE, integer(n, "n", low=0))

    def removed(self, n: int = 1) -> None:
        """Count ``n`` items the store evicted (they no longer count towards ``min_size_to_sample``)."""
        self._add(_DELETE, integer(n, "n", low=0))

    def _add(self, kind: int, n: int, deletes: int = 0) -> None:
        with self._cond:
            with self._flock():
                if kind == _DELETE and self._counts[_DELETE] + n > self._counts[_INSERT]:
                    raise OptionError(f"removed({n}) would remove more than was inserted "
                                           f"({RateCounts(*map(int, self._counts))})")
                self._counts[kind] += n
                self._counts[_DELETE] += deletes
            self._cond.notify_all()

    # ---- state ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The counters and the limits (JSON-able), for ``load_state_dict`` in a resumed run (and
        ``buffer.save_training_state``)."""
        limits = dict(self.config, error_buffer=[self.min_diff, self.max_diff])
        return {"type": "RateLimiter", "limits": limits, "counts": list(self.counts), "shared": self.folder is not None,
                "blocked": dict(self.blocked)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Carry on from a ``state_dict()`` of a limiter with the same limits. In memory (no ``folder``), every
        counter is restored. Shared through a folder, only the samples are (the learner's side, which a
        resumed run draws again from its saved place); inserts and deletes stay the folder's, which the actors
        kept counting meanwhile. Every value is checked first, so a refused state changes nothing."""
        if not isinstance(state, dict) or state.get("type") != "RateLimiter":
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise InvalidDataError(f"this is a RateLimiter's state_dict()? it holds a {found!r}")
        limits = dict(self.config, error_buffer=[self.min_diff, self.max_diff])
        if state.get("limits") != limits:
            raise InvalidDataError(f"the state_dict is of a rate limiter with other limits "
                                   f"({short(state.get('limits'))}); this one has {limits}: make the limiter with "
                                   f"the same options")
        counts, blocked = state.get("counts"), state.get("blocked", {})
        if not isinstance(counts, list) or len(counts) != 3:
            raise InvalidDataError(f"a RateLimiter state_dict's 'counts' must be [inserts, samples, deletes] "
                                   f"(got {short(counts)})")
        inserts, samples, deletes = (integer(value, "each count", low=0, error=InvalidDataError) for value in counts)
        if deletes > inserts:
            raise InvalidDataError(f"a RateLimiter state_dict cannot count more deletes than inserts (got {counts})")
        if not isinstance(blocked, dict) or set(blocked) - {"insert", "sample"}:
            raise InvalidDataError(f"'blocked' must be a dict of 'insert' and 'sample' counts (got {short(blocked)})")
        blocked = {key: integer(value, "blocked", low=0, error=InvalidDataError) for key, value in blocked.items()}
        with self._cond:
            with self._flock():
                if self.folder is None:
                    self._counts[:] = (inserts, samples, deletes)
                else:
                    self._counts[_SAMPLE] = samples
            self.blocked.update(blocked)
            self._cond.notify_all()

    # ---- integrations ----------------------------------------------------------------------------------

    @contextmanager
    def inserting(self, n: int | None = None, *, buffer: Any = None, timeout: Any = _DEFAULT) -> Iterator[None]:
        """Around a commit: waits for room for ``n`` inserts and counts them; if the block raises they are
        taken back. With ``buffer=`` (the writer's ReplayBuffer or EpisodeStore) what the block committed
        and evicted is counted instead (``n=None``: waits for room for one). ::

            with limiter.inserting(len(obs), buffer=buffer):
                buffer.store_episode(obs=obs, action=action, reward=reward)
        """
        store = None if buffer is None else getattr(buffer, "episode_store", buffer)
        if store is None and n is None:
            raise OptionError("inserting() needs n= (what the block inserts) or buffer= (to measure it)")
        reserved = 1 if n is None else integer(n, "n", low=1)
        since = live_before = 0  # with a store: its next episode id and live episodes before the block
        if store is not None:
            since = store.meta.state.next_episode
            live_before = self._live(store, since)[0]
        self._acquire(_INSERT, reserved, timeout)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            if store is not None:  # what was committed, and evicted, in place of the reservation
                live_after, committed = self._live(store, since)
                self._add(_INSERT, committed - reserved, deletes=live_before + committed - live_after)
            elif failed:
                self._add(_INSERT, -reserved)

    def _live(self, store: Any, since: int) -> tuple[int, int]:
        """(live items of a store, items of its episodes with an id from ``since`` on)."""
        table = store.live_table()
        items = table.length if self.unit == "steps" else np.ones(len(table.ids), dtype=np.int64)
        return int(items.sum()), int(items[table.ids >= since].sum())

    def wrap_sampler(self, sampler: Any) -> "LimitedSampler":
        """``sampler`` whose ``sample``/``batch`` wait for the limiter and count their draws."""
        return LimitedSampler(sampler, self)


def _counter_file(path: Path, folder: Path) -> np.ndarray:
    """The map of ``path`` (three int64) inside ``folder``, made afresh (zeros) if it is missing or damaged.
    Opened without following links (folderio), so the counters are never written outside the folder."""
    try:
        offset, dtype, shape, size = read_npy_header(path, folder)
        if dtype == np.int64 and shape == (3,) and size >= offset + 24:
            return _map_counters(path, folder, offset)
    except UnsafeEntryError:
        raise  # a link out of the folder, a FIFO, ...: never written through
    except CorruptStoreError:
        pass  # missing or damaged
    folderio.write_atomic(folder, path, lambda out: np.save(out, np.zeros(3, dtype=np.int64)),
                          doing="make the rate limiter's counters")
    offset = read_npy_header(path, folder)[0]
    return _map_counters(path, folder, offset)


def _map_counters(path: Path, folder: Path, offset: int) -> np.ndarray:
    fd = folderio.open_write(folder, path, os.O_RDWR, doing="map the rate limiter's counters")
    with os.fdopen(fd, "r+b") as file, folderio.errors_named(path, "map the rate limiter's counters"):
        return np.memmap(file, dtype=np.int64, mode="r+", offset=offset, shape=(3,))


class LimitedSampler(LimitedLoader):
    """A sampler (anything with ``sample(n)``, ``batch(n)``) behind a rate limiter: a draw of ``n`` first
    waits for ``limiter.await_sample(n)``; a draw that fails gives its count back. The rest (``view``,
    ``update_priorities``, ``state_dict``, ...) is the sampler's."""

    def __init__(self, sampler: Any, limiter: RateLimiter):
        if not callable(getattr(sampler, "sample", None)):
            raise OptionError(f"wrap_sampler needs a sampler (with sample(n)); got {type(sampler).__name__}")
        self.sampler, self.limiter = sampler, limiter

    endless = True  # (batches() draws through sample(), each waited for: never the wrapped sampler's epochs)

    def _draw(self, method: str, batch_size: Any, timeout: Any) -> Any:
        n = integer(batch_size, "batch_size", low=1)
        self.limiter._acquire(_SAMPLE, n, timeout)
        try:
            return getattr(self.sampler, method)(n)
        except BaseException:
            self.limiter._add(_SAMPLE, -n)
            raise

    def sample(self, batch_size: int, *, timeout: Any = _DEFAULT) -> Any:
        return self._draw("sample", batch_size, timeout)

    def batch(self, batch_size: int, *, timeout: Any = _DEFAULT) -> Any:
        return self._draw("batch", batch_size, timeout)

    def batches(self, batch_size: int, num_batches: int | None = None) -> SampleBatches:
        """Samples of ``batch_size`` (endless if ``num_batches`` is None), each waited for: a batch sampler
        for a DataLoader over ``sampler.view`` (a ``SampleBatches`` of draws: every batch through ``sample``,
        which waits, whatever the wrapped sampler does for epochs)."""
        n = integer(batch_size, "batch_size", low=1)
        total = None if num_batches is None else integer(num_batches, "num_batches", low=0)
        return SampleBatches(cast(Any, self), n, total, drop_last=False)

    # dataloader(), typed, comes from LimitedLoader (reading/entries.py, generated from the option table)

    def _sampler_dataloader(self, batch_size: int, num_batches: int | None, options: dict) -> Any:
        """A ``ReplayDataLoader`` over the sampler's view whose every batch waits for the limiter, as
        ``batches()`` does (the wrapped sampler's own ``dataloader`` would not ask the limiter). Every batch
        is whole (``drop_last`` has nothing to drop)."""
        options.pop("drop_last", None)
        return self.sampler.view.sampler_dataloader(self.batches(batch_size, num_batches), **options)

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "limiter") or name.startswith("__"):  # unpickling, protocols: not the sampler's
            raise AttributeError(name)
        return getattr(self.sampler, name)
