"""Samplers: numpy-only draws of the positions a view may use, as ``Sample`` keys any view turns into a batch.

Every sampler follows one protocol:

- ``sample(batch_size) -> Sample``: keys (episode id * ``view.key_stride`` + t, stable while the episode is
  live) and, for prioritized draws, importance weights;
- ``batch(batch_size) -> dict``: ``view.__getitems__(sample(batch_size))``, with ``_key`` (and ``_weight``);
  with ``draw_ahead=k`` the next k draws are made as a batch is returned and handed to ``view.prefetch``
  (their rows are read from disk meanwhile); they are kept in ``state_dict()``;
- ``batches(batch_size, num_batches=None)``: a batch sampler for a torch DataLoader (endless for draws
  with replacement, one epoch without); ``dataloader(batch_size, ...)``: the view wraps it in a
  ``ReplayDataLoader`` (the views room builds it: this room never imports torch);
- a seeded ``np.random.Generator`` (``seed``; each ``rank`` of a distributed job gets its own stream),
  ``state_dict()`` / ``load_state_dict()`` (plain JSON-able values);
- ``follow=True``: each draw first takes in the episodes committed (and evicted) since the last one by the
  store object the sampler shares with a writer in this process; ``follow="disk"``: also by a writer in
  another process (each draw ``stat``s ``meta.json`` and reads it again only when it changed);
  ``refresh()`` re-reads ``meta.json`` once. Following costs O(episodes) numpy work when something
  changed, never a scan of the steps.

A sampler draws from a ``PositionSource`` (``core.index``: the episode table, the valid positions, the key
stride and ``refresh``), which every view provides; it yields keys, and only ``batch()`` hands them to the
view to gather. ``Sampler`` is the protocol every sampler keeps (these, the sharded and the Ray samplers,
and a rate-limited wrapper); ``SamplerBase`` holds what they share: the seeded stream of each rank, the
redraw loop of ``batch()``, ``batches()`` / ``dataloader()`` and the importance-weight exponent's schedule.
"""

from __future__ import annotations

import contextlib
import sys
from collections import deque
from typing import Any, Callable, Iterator, Protocol, cast, runtime_checkable

import numpy as np

from ..errors import InvalidDataError, OptionError, ReplayError, SampleExpiredError
from ..core.index import EpisodeTable, PositionSource, Positions, Sample, position_keys
from .loader_entry import SamplerLoader
from .orders import BlockShuffle, epoch_order_options
from ..core.options import (batch_size as batch_size_of, flag, follow_option, integer, number, rank_option, renamed,
                            seed_option, short)

__all__ = ["Sampler", "SamplerBase", "BetaSchedule", "ReplaySampler", "UniformSampler", "SampleBatches",
           "distributed_rank"]

REDRAWS = 3  # batch(): draws again this many times when a ring writer evicts what was drawn


def distributed_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's when it is initialized, else (0, 1). (Never
    imports torch: a process group exists only where torch.distributed was imported.)"""
    dist = sys.modules.get("torch.distributed")
    if rank is None and world_size is None and dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return rank_option(rank, world_size)


def damaged(error: Exception) -> InvalidDataError:
    """The error of a state_dict that cannot be loaded (the library's own reason, or a builtin's repr)."""
    reason = str(error) if isinstance(error, InvalidDataError) else repr(error)
    return InvalidDataError(f"a damaged sampler state_dict ({reason}); save it again with state_dict()")


def checked_ahead(entries: Any) -> list[tuple[int, Sample]]:
    """The draws made ahead that a state_dict lists: [batch size, keys, weights or None] each."""
    if not isinstance(entries, list):
        raise InvalidDataError(f"'ahead' must be a list (got {short(entries)})")
    ahead = []
    for entry in entries:
        size, keys, weights = entry
        if not isinstance(keys, list) or not all(type(key) is int and key >= 0 for key in keys):
            raise InvalidDataError(f"'ahead' keys must be a list of ints >= 0 (got {short(keys)})")
        keys = np.asarray(keys, dtype=np.int64)
        if len(keys) != integer(size, "batch size", low=1):
            raise InvalidDataError(f"'ahead' holds {len(keys)} keys for a batch of {size}")
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float32)
            if weights.shape != keys.shape or not (np.isfinite(weights).all() and (weights > 0).all()):
                raise InvalidDataError(f"'ahead' must hold one finite weight > 0 per key (got {short(weights)})")
        ahead.append((int(size), Sample(keys, weights)))
    return ahead


def _optional(state: dict[str, Any], key: str, default: Any, check: Callable[..., Any], **options: Any) -> Any:
    """``check(state[key], key, **options)``, or ``default`` when the state has no such key."""
    return check(state[key], key, **options) if key in state else default


@runtime_checkable
class Sampler(Protocol):
    """What every sampler offers: ``sample(n)`` (keys, and weights for prioritized draws), ``batch(n)``
    (the view's batch of a sample, drawn again if a ring evicted it), ``batches(n, num_batches)`` and
    ``dataloader(n, ...)``, ``refresh()``, a seeded stream (``seed``, ``draws``) and ``state_dict()`` /
    ``load_state_dict()``; ``view`` gathers its samples."""

    seed: int
    draws: int

    def sample(self, batch_size: int) -> Any: ...

    def batch(self, batch_size: int) -> dict[str, Any]: ...

    def batches(self, batch_size: int, num_batches: int | None = None) -> Any: ...

    def dataloader(self, batch_size: int, num_batches: int | None = None, **options: Any) -> Any: ...

    def refresh(self) -> bool: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SamplerBase(SamplerLoader):
    """What every sampler shares: a seeded stream per rank, ``batch()`` with its redraws, ``batches()`` and
    ``dataloader()``. Subclasses implement ``sample(n)`` and ``refresh()`` and set ``view`` (what gathers)."""

    endless = True  # draws with replacement: batches() never ends unless told how many
    # set by subclasses: what gathers (a view; the PositionSource a ReplaySampler draws from), duck-typed
    view: Any
    seed: int
    rank: int
    world_size: int
    rng: np.random.Generator
    draws: int
    # samplers without replacement (``endless`` False) read epochs: SampleBatches calls these
    epoch: Callable[[int, int | None, bool], Iterator[Sample]]
    remaining: Callable[[], int]

    def _seed_stream(self, seed: Any, rank: int | None, world_size: int | None, *salt: int) -> None:
        """``seed``, ``rank``, ``world_size`` and ``rng``: each rank its own stream, the seed sequence
        (seed, *salt, rank)."""
        seed = seed_option(seed)
        self.rank, self.world_size = distributed_rank(rank, world_size)
        # (a SeedSequence made without entropy draws an int: numpy's stubs allow a sequence)
        self.seed = int(cast(int, np.random.SeedSequence().entropy)) if seed is None else seed
        self.rng = np.random.default_rng([self.seed, *salt, self.rank])

    def sample(self, batch_size: int) -> Any:
        raise NotImplementedError

    def refresh(self) -> bool:
        raise NotImplementedError

    def _gather(self, sample: Any) -> dict[str, Any]:
        batch: dict[str, Any] = self.view.__getitems__(sample)
        return batch

    draw_ahead = 0  # batches batch() draws ahead (ReplaySampler's draw_ahead=)
    _ahead: deque[tuple[int, Sample]] | None = None  # those draws: (batch_size, Sample), oldest first

    def batch(self, batch_size: int) -> dict[str, Any]:
        """A batch of ``batch_size`` draws, gathered by the view (with ``_key``, and ``_weight`` if weighted).
        A draw whose episode a ring writer evicts before or while it is read is drawn again. With
        ``draw_ahead=k``, the next k batches are drawn as this one is returned and their rows advised to the
        kernel (``view.prefetch``), so their disk reads overlap the work on this one."""
        for attempt in range(REDRAWS + 1):
            sample = self._drawn_ahead(batch_size)
            try:
                batch = self._gather(sample if sample is not None else self.sample(batch_size))
                break
            except SampleExpiredError:
                if attempt == REDRAWS:
                    raise
                self._drop_ahead()  # drawn before the eviction: stale too
                self.refresh()
        if self.draw_ahead:
            self._draw_ahead(batch_size)
        return batch

    def _drawn_ahead(self, batch_size: int) -> Any:
        """The oldest draw made ahead if it has this batch size (else the draws ahead are dropped)."""
        ahead = self._ahead
        if not ahead:
            return None
        size, sample = ahead[0]
        if size == batch_size:
            ahead.popleft()
            return sample
        self._drop_ahead()
        return None

    def _drop_ahead(self) -> None:
        """Forget the draws made ahead (the view is told: it will not be asked for them)."""
        if self._ahead:
            cancel = getattr(self.view, "cancel_prefetch", None)
            if cancel is not None:
                cancel(len(self._ahead))
            self._ahead.clear()

    def _draw_ahead(self, batch_size: int) -> None:
        if self._ahead is None:
            self._ahead = deque()
        prefetch = getattr(self.view, "prefetch", None)
        while len(self._ahead) < self.draw_ahead:
            try:
                sample = self.sample(batch_size)
            except ReplayError:  # nothing to draw now (say, a ring emptied): batch() will draw and say so
                return
            self._ahead.append((batch_size, sample))
            if prefetch is not None:
                prefetch(sample)

    def batches(self, batch_size: int, num_batches: int | None = None, *, drop_last: bool = False) -> "SampleBatches":
        """A batch sampler for a torch DataLoader: ``num_batches`` draws (endless if None and the sampler draws
        with replacement; one epoch of this rank's share without replacement)."""
        return SampleBatches(self, batch_size_of(batch_size), num_batches, flag(drop_last, "drop_last"))

    # dataloader(), typed, comes from SamplerLoader (samplers/loader_entry.py, generated from the option table)

    def _sampler_dataloader(self, batch_size: int, num_batches: int | None, options: dict[str, Any]) -> Any:
        """A ``ReplayDataLoader`` over the view whose batches this sampler draws (in the main process;
        DataLoader workers only gather). The view builds it (the views room, where torch lives)."""
        drop_last = options.pop("drop_last", False)
        return self.view.sampler_dataloader(self.batches(batch_size, num_batches, drop_last=drop_last), **options)


class BetaSchedule:
    """The importance-weight exponent of prioritized draws: ``beta``, annealed linearly to ``beta_final``
    over ``beta_steps`` draws (0: kept fixed)."""

    draws: int  # the draws so far (the sampler this is mixed into counts them)

    def _schedule_beta(self, beta: float, beta_final: float, beta_steps: int) -> None:
        self.beta0 = number(beta, "beta", low=0.0, high=1.0)
        self.beta_final = number(beta_final, "beta_final", low=0.0, high=1.0)
        self.beta_steps = integer(beta_steps, "beta_steps", low=0)

    @property
    def beta(self) -> float:
        if not self.beta_steps:
            return self.beta0
        return self.beta0 + (self.beta_final - self.beta0) * min(1.0, self.draws / self.beta_steps)


class ReplaySampler(SamplerBase):
    """The common part of the samplers over one store. Subclasses implement ``_draw(batch_size) -> Sample``
    and, if they keep per-position state, ``_changed(old_table, old_positions)``. ``view``: the
    ``PositionSource`` drawn from (a view)."""

    def __init__(self, view: PositionSource, *, seed: int | None = None, rank: int | None = None,
                 world_size: int | None = None, follow: bool | str = True, draw_ahead: int = 0,
                 prefetch: int | None = None):
        if not isinstance(view, PositionSource):
            raise OptionError(f"a sampler draws from a view (buffer.dataset(...)); got {type(view).__name__}")
        self.view = view
        draw_ahead = renamed("prefetch", prefetch, "draw_ahead", draw_ahead, 0, f"a {type(self).__name__}")
        self.draw_ahead = integer(draw_ahead, "draw_ahead", low=0)
        self._seed_stream(seed, rank, world_size)
        self.follow = follow_option(follow)
        self._stamp = self.view.store.meta_stamp() if follow == "disk" else None
        self.draws = 0
        self._seen = (view.table, view.positions)  # the snapshot this sampler's own state matches

    # ---- following the store ---------------------------------------------------------------------------

    def sync(self) -> bool:
        """Take in what the writer of this process (with ``follow="disk"``: of any process) committed or
        evicted since the last draw."""
        if self.follow == "disk":
            stamp = self.view.store.meta_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                return self._update(reread=True)
        return self._update(reread=False)

    def refresh(self) -> bool:
        """Re-read ``meta.json`` (a writer in another process), then take in what changed."""
        with self._view_lock():
            return self._update(reread=True)

    def _view_lock(self) -> Any:
        """The view's lock (a loader's gather threads may refresh the view while this sampler reads it), or
        none for a position source that has none."""
        lock = getattr(self.view, "lock", None)
        return contextlib.nullcontext() if lock is None else lock

    def _update(self, reread: bool) -> bool:
        self.view.refresh(reread=reread)
        return self.reconcile()

    def reconcile(self) -> bool:
        """Bring this sampler's state to the view's snapshot, whoever refreshed the view (this sampler,
        another one sharing it, the view itself catching up while it gathers); True if it changed."""
        table, positions = self._seen
        if self.view.table is table:
            return False
        self._seen = (self.view.table, self.view.positions)
        self._changed(table, positions)
        return True

    def _changed(self, old_table: EpisodeTable, old_positions: Positions) -> None:
        """Hook: the view's table and positions were replaced."""

    # ---- drawing ---------------------------------------------------------------------------------------

    def sample(self, batch_size: int) -> Sample:
        batch_size = batch_size_of(batch_size)
        with self._view_lock():  # one snapshot of the view from the sync to the draw
            if self.follow:
                self.sync()
            else:
                self.reconcile()
            if len(self.view) == 0:
                raise InvalidDataError(
                    f"nothing to sample: the view has no items ({self.view.store.num_episodes} episodes in the "
                    f"buffer); store more episodes first"
                )
            sample = self._draw(batch_size)
        self.draws += 1
        return sample

    def _draw(self, batch_size: int) -> Sample:
        raise NotImplementedError

    def keys_of(self, episode: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Keys of (episode position in the view's table, t)."""
        return position_keys(self.view, episode, t)

    def sample_of(self, episode: np.ndarray, t: np.ndarray, weights: np.ndarray | None = None) -> Sample:
        """The Sample of (episode position in the view's table, t)."""
        return Sample(position_keys(self.view, episode, t), weights, episode=episode, t=t, source=self.view)

    # ---- state -----------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The sampler's own state (JSON-able): its generator, draws so far and subclass counters."""
        state: dict[str, Any] = {"type": type(self).__name__, "seed": self.seed, "rank": self.rank,
                 "rng": self.rng.bit_generator.state, "draws": self.draws}
        if self._ahead:  # draws made ahead by batch(): a resumed sampler serves them first
            state["ahead"] = [[size, sample.keys.tolist(), None if sample.weights is None else sample.weights.tolist()]
                              for size, sample in self._ahead]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict()``: every value is checked first, so a refused state changes nothing."""
        if not isinstance(state, dict) or state.get("type") != type(self).__name__:
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise InvalidDataError(f"this is a {type(self).__name__}'s state_dict()? it holds a {found!r}")
        try:
            values = self._checked_state(state)
        except (KeyError, TypeError, ValueError, OverflowError) as error:  # (InvalidDataError is a ValueError)
            raise damaged(error) from None
        self._apply_state(values)

    def _checked_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The values of ``state`` to load, checked (raises KeyError, ..., InvalidDataError); subclasses add theirs."""
        generator = type(self.rng.bit_generator)()  # a scratch generator: the state must load into one
        generator.state = state["rng"]
        return {"rng": generator.state, "draws": integer(state["draws"], "draws", low=0),
                "seed": seed_option(state["seed"], optional=False), "ahead": checked_ahead(state.get("ahead", []))}

    def _apply_state(self, values: dict[str, Any]) -> None:
        """Load checked values (cannot fail)."""
        self.rng.bit_generator.state = values["rng"]
        self.draws, self.seed = values["draws"], values["seed"]
        self._ahead = deque(values["ahead"])


class SampleBatches:
    """The batch sampler ``sampler.batches(...)`` returns: yields ``Sample`` objects for a DataLoader."""

    def __init__(self, sampler: SamplerBase, batch_size: int, num_batches: int | None, drop_last: bool):
        if num_batches is not None and (isinstance(num_batches, bool) or not isinstance(num_batches, (int, np.integer))
                                        or num_batches < 0):
            raise OptionError(f"num_batches must be an int >= 0 or None (got {num_batches!r})")
        self.sampler, self.batch_size, self.num_batches, self.drop_last = sampler, batch_size, num_batches, drop_last
        self._done = 0  # batches of the next iteration given before (resume_after)

    def resume_after(self, done: int) -> None:
        """The next ``__iter__`` is the rest of an iteration that gave ``done`` batches already: it draws
        ``num_batches - done`` (a resumed loader, ``ReplayDataLoader.load_state_dict``)."""
        self._done = integer(done, "done", low=0)

    def __iter__(self) -> Iterator[Sample]:
        sampler, done = self.sampler, self._done
        self._done = 0
        limit = None if self.num_batches is None else max(self.num_batches - done, 0)
        if sampler.endless:
            count = 0
            while limit is None or count < limit:
                yield sampler.sample(self.batch_size)
                count += 1
            return
        yield from sampler.epoch(self.batch_size, limit, self.drop_last)

    def __len__(self) -> int:
        if self.num_batches is not None:
            return self.num_batches if self.sampler.endless else min(self.num_batches, self._epoch_batches())
        if self.sampler.endless:
            raise TypeError("an endless batch sampler has no length; pass num_batches=")
        return self._epoch_batches()

    def _epoch_batches(self) -> int:
        full, rest = divmod(self.sampler.remaining(), self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1


class UniformSampler(ReplaySampler):
    """Uniform over the view's valid positions (steps, window starts, n-step starts, ...) of committed
    episodes. With ``replacement`` (the default) each draw is independent and the stream is endless;
    without, each epoch visits every position once in a seeded order, and the ranks of a distributed job
    get disjoint shares of it (as torch's DistributedSampler: padded by wrapping so all are equal). A
    position whose episode the ring evicts during an epoch is replaced by a uniform draw from the live
    ones (seeded), so every rank still gets as many batches. An epoch resumes from ``state_dict`` exactly
    when the store holds the same episodes as when it began; otherwise a new epoch begins.
    ``order="blocks"`` (without replacement): a block-shuffled epoch (``samplers.orders``), for stores
    bigger than RAM; ``block_size`` and ``block_window`` shape it."""

    def __init__(self, view: PositionSource, *, replacement: bool = True, order: str = "random",
                 block_size: int | None = None, block_window: int | None = None, **options: Any):
        super().__init__(view, **options)
        self.replacement = flag(replacement, "replacement")
        if self.draw_ahead and not self.replacement:
            raise OptionError(f"draw_ahead={self.draw_ahead} draws batches ahead, which an epoch without replacement "
                              f"would lose when the batch size changes; drop draw_ahead, or read the epoch through "
                              f"sampler.dataloader(...), which looks ahead by itself")
        self.order, self.block_size, self.block_window = epoch_order_options(order, block_size, block_window)
        if self.order != "random" and self.replacement:
            raise OptionError(f"order={self.order!r} orders an epoch: pass replacement=False with it (draws with "
                              f"replacement have no epochs)")
        self.endless = self.replacement
        self.epochs = 0
        self._order: np.ndarray | None = None  # this rank's share of the current epoch (keys)
        self._cursor = 0
        self._epoch_table: EpisodeTable | None = None  # the table the epoch's keys were made from
        self._epoch_ids = (0, 0)  # the first and next episode id of that table

    def _draw(self, batch_size: int) -> Sample:
        if self.replacement:
            items = self.rng.integers(0, len(self.view), batch_size)
            return self.sample_of(*self.view.positions.locate(items))
        parts, wanted = [], batch_size
        while wanted:  # a batch that reaches an epoch's end carries on into the next epoch
            if self._order is None or self._cursor >= len(self._order):
                self._start_epoch()
            keys = self._take(wanted)
            parts.append(keys)
            wanted -= len(keys)
        return Sample(parts[0] if len(parts) == 1 else np.concatenate(parts))

    def _take(self, count: int) -> np.ndarray:
        """The next ``count`` keys of the epoch (a copy), evicted ones replaced by live ones."""
        begin = self._cursor
        keys: np.ndarray = cast(np.ndarray, self._order)[begin: begin + count].copy()  # (an epoch in progress)
        self._cursor += len(keys)
        table = self.view.table
        if table is not self._epoch_table:
            gone = np.flatnonzero(~np.isin(keys // self.view.key_stride, table.ids))
            if gone.size:
                rng = np.random.default_rng([self.seed, self.epochs, self.rank, begin])
                keys[gone] = self.keys_of(*self.view.positions.locate(rng.integers(0, len(self.view), gone.size)))
        return keys

    def share(self) -> int:
        """Positions this rank visits per epoch."""
        return -(-len(self.view) // self.world_size)

    def remaining(self) -> int:
        """Positions left in the epoch in progress, else in a new epoch."""
        if self._order is not None and self._cursor < len(self._order):
            return len(self._order) - self._cursor
        return self.share()

    def _start_epoch(self) -> None:
        """This rank's share of a permutation common to all ranks (seeded by seed and epoch, not rank)."""
        size = len(self.view)
        if self.order == "blocks":
            order = np.asarray(BlockShuffle(size, [self.seed, self.epochs], block_size=self.block_size,
                                            block_window=self.block_window))
        else:
            order = np.random.default_rng([self.seed, self.epochs]).permutation(size)
        share = -(-size // self.world_size)
        if share * self.world_size > size:  # pad by wrapping, so that every rank has as many
            order = np.resize(order, share * self.world_size)
        mine = order[self.rank::self.world_size]
        self._order = self.keys_of(*self.view.positions.locate(mine))
        self._cursor = 0
        self._epoch_table = self.view.table
        self._epoch_ids = self.view.state
        self.epochs += 1

    def epoch(self, batch_size: int, num_batches: int | None, drop_last: bool) -> Iterator[Sample]:
        """The epoch in progress (else a new one) of this rank's share, in batches."""
        with self._view_lock():  # (held for each step, never across a yield)
            if self.follow:
                self.sync()
            if self._order is None or self._cursor >= len(self._order):
                self._start_epoch()
        count = 0
        while (self._cursor < len(order := cast(np.ndarray, self._order))  # (an epoch in progress)
               and (num_batches is None or count < num_batches)):
            if drop_last and len(order) - self._cursor < batch_size:
                self._cursor = len(order)
                break
            with self._view_lock():  # the view's snapshot stays while the keys are taken from it
                if self.follow:
                    self.sync()
                keys = self._take(batch_size)
            self.draws += 1
            count += 1
            yield Sample(keys)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(replacement=self.replacement, epochs=self.epochs, cursor=self._cursor,
                     in_epoch=self._order is not None and self._cursor < len(self._order),
                     epoch_ids=list(self._epoch_ids))
        return state

    def _checked_state(self, state: dict[str, Any]) -> dict[str, Any]:
        values = super()._checked_state(state)
        values["epochs"] = _optional(state, "epochs", 0, integer, low=0)
        values["cursor"] = _optional(state, "cursor", 0, integer, low=0)
        values["in_epoch"] = _optional(state, "in_epoch", False, flag)
        epoch_ids = state.get("epoch_ids", ()) if values["in_epoch"] else ()
        if not isinstance(epoch_ids, (list, tuple)) or len(epoch_ids) not in (0, 2):
            raise InvalidDataError(f"epoch_ids must be a list of 2 episode ids (got {short(epoch_ids)})")
        values["epoch_ids"] = tuple(integer(value, "epoch_ids", low=0) for value in epoch_ids)
        return values

    def _apply_state(self, values: dict[str, Any]) -> None:
        super()._apply_state(values)
        self.epochs = values["epochs"]
        self._order, self._cursor = None, 0
        if self.follow:
            self.sync()
        if values["in_epoch"] and not self.replacement and self.epochs > 0 and values["epoch_ids"] == self.view.state:
            self.epochs -= 1  # the store holds what it held: rebuild the epoch in progress and carry on
            self._start_epoch()
            self._cursor = values["cursor"]
