"""What a shard actor does, as a plain class: one store folder on its node, and its samplers' state.

``ShardServer`` holds a ``ReplayBuffer`` in its folder (created, or reopened with every committed episode)
and, over one view of it, a ``PrioritizedSampler`` (priorities kept in ``priorities/<name>.npy`` of the
folder) and a ``UniformSampler``. ``ShardActor`` (``actor.py``) is this class as a Ray actor; the class
itself needs no Ray, so its logic runs (and is tested) in one process too.

A draw is asked for by a learner with a count and a seed: ``sample(count, kind, seed=..., gather=...)``
draws ``count`` positions with a generator made from ``seed`` (so a learner's draws do not depend on what
other learners asked of this shard, nor on a restart), and answers with the keys, the drawn leaves
(``priority ** alpha``, for the learner's global importance weights), the shard's size, mass and smallest
leaf after the draw, and, with ``gather=True``, the batch itself as numpy arrays (for a learner on
another node, which cannot read this node's files).

With ``rate_limiter=`` a shard holds its inserts and draws to a ratio; a call it does not allow now is
answered with a ``Refused`` (``limits.py``).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...buffer import ReplayBuffer
from ...errors import InvalidDataError, OptionError, ReplayError, StoreLockedError
from ...core.options import choice, flag, integer, number, seed_option, short
from ..shards import drawn_leaves
from .limits import Refused, insert_refusal, limiter_info, limiter_option, sample_refusal, shard_limiter

__all__ = ["ShardServer", "KINDS"]

KINDS = ("prioritized", "uniform")
_VIEW_SWITCHES = ("n_steps", "window", "timestep_level", "hindsight")


def _view_options(options: Mapping[str, Any] | None) -> dict:
    """The view options of a shard (``buffer.dataset`` keywords): single timesteps unless told otherwise."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise OptionError(f"view must be a dict of buffer.dataset options, e.g. dict(n_steps=3, gamma=0.99) "
                               f"(got {short(options)})")
    options = dict(options)
    if "allow_empty" in options:
        raise OptionError("view must not set allow_empty: a shard's view is always allowed to be empty")
    if not set(_VIEW_SWITCHES) & set(options):
        options["timestep_level"] = True
    return options


def _node_id() -> str | None:
    """The Ray node this process runs on (None outside a Ray worker or driver)."""
    try:
        import ray
    except ImportError:
        return None
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


class ShardServer:
    """A shard: ``ReplayBuffer(folder, ...)`` (the buffer's own arguments; without ``fields`` the folder must
    hold a store) and samplers over one view of it.

    ``view``: ``buffer.dataset`` options of the positions drawn (default single timesteps), ``alpha`` and
    ``name``: the prioritized sampler's (priorities kept under ``priorities/<name>.npy``), ``kinds``: which
    samplers to keep. ``lock_timeout``: how long to wait for the folder's writer lock, which a killed
    incarnation of this shard may hold for a moment while its process ends. ``rate_limiter``: None, a dict
    of ``RateLimiter`` limits (``shared=True``: counters kept in the folder) or a ``RateLimiter``
    (``limits.py``)."""

    def __init__(self, folder: str | Path, max_episodes: int | None = None, max_timesteps: int | None = None,
                 fields: Mapping[str, Any] | None = None, meta_fields: Mapping[str, Any] | None = None,
                 circular: bool = False, *, max_steps: int | None = None, durable: bool = False,
                 view: Mapping[str, Any] | None = None, alpha: float = 0.6, name: str | None = None,
                 kinds: Any = KINDS, lock_timeout: float = 30.0, rate_limiter: Any = None):
        from ...reading.build import build_sampler, build_view
        from ...reading.plan import compose
        from ...reading.table import SAMPLER

        if isinstance(kinds, str):
            kinds = (kinds,)
        if not isinstance(kinds, (tuple, list)) or not kinds:
            raise OptionError(f"kinds must be a non-empty tuple of {KINDS} (got {short(kinds)})")
        self.kinds = tuple(choice(kind, "each of kinds", KINDS) for kind in kinds)
        self.view_options = _view_options(view)
        lock_timeout = number(lock_timeout, "lock_timeout", low=0.0)
        rate_limiter = limiter_option(rate_limiter)
        self.limiter = None
        if fields is None:
            buffer = ReplayBuffer.from_folder(folder, durable=durable)
        else:
            buffer = ReplayBuffer(folder, max_episodes, max_timesteps, fields, meta_fields, circular,
                                  max_steps=max_steps, durable=durable)
        self.buffer = buffer
        self.folder = buffer.folder
        try:
            store = buffer.episode_store
            self._locked(lambda: store.require_writable("write"), lock_timeout)  # the writer lock, now
            self.view = build_view(store, dict(self.view_options, allow_empty=True))
            self.samplers = {}
            for kind in self.kinds:
                options = dict(alpha=alpha, name=name) if kind == "prioritized" else {}
                plan = compose(SAMPLER, dict(options, seed=0), where="a shard actor's sampler")
                self.samplers[kind] = self._locked(lambda: build_sampler(store, kind, plan, view=self.view),
                                                   lock_timeout)
            self.limiter = shard_limiter(rate_limiter, store)
        except BaseException:
            self.close()
            raise
        self.started = time.time()

    @staticmethod
    def _locked(make, timeout: float):
        """``make()``, tried again while a lock is held (by this shard's previous, dying process)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return make()
            except StoreLockedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _sampler(self, kind: str):
        sampler = self.samplers.get(kind)
        if sampler is None:
            raise OptionError(f"this shard keeps no {kind!r} sampler: it was made with kinds={self.kinds}; "
                                   f"ask for one of those, or make the shard with kind {kind!r} in kinds")
        return sampler

    # ---- writing -------------------------------------------------------------------------------------

    def add_episode(self, episode: Mapping[str, Any], *, end: str | None = None,
                    final: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None) -> int | Refused:
        """Commit a whole episode: step fields as (T, ...) arrays (a dict), how it ended, its final
        observation and meta values. Returns the committed episode's id (ids count every commit), or
        ``Refused`` if the rate limiter does not allow it now (nothing committed)."""
        if not isinstance(episode, Mapping):
            raise InvalidDataError(f"episode must be a dict of field name -> (T, ...) array (got {short(episode)})")
        if meta is not None and not isinstance(meta, Mapping):
            raise InvalidDataError(f"meta must be a dict of meta field name -> value (got {short(meta)})")
        clash = sorted(set(episode) & set(meta or ()))
        if clash:
            raise InvalidDataError(f"{clash} given both in episode and in meta; pass each once")
        with ExitStack() as counting:
            refused = None if self.limiter is None else insert_refusal(self.limiter, episode, self.buffer, counting)
            if refused is not None:
                return refused
            self.buffer.store_episode(end=end, final=final, **episode, **(meta or {}))
        return self.buffer.episode_store.meta.state.next_episode - 1

    # ---- sampling ------------------------------------------------------------------------------------

    def _totals(self, kind: str) -> dict:
        sampler = self._sampler(kind)
        positions = len(sampler.view)
        if kind == "prioritized":
            tree = sampler.tree
            mass, lowest = (tree.total, tree.min) if positions else (0.0, float("inf"))
            return {"positions": positions, "mass": mass, "lowest": lowest}
        return {"positions": positions, "mass": float(positions), "lowest": 1.0}

    def sample(self, count: int, kind: str = "prioritized", *, seed: Any = None, gather: bool = False,
               updates: tuple | None = None, limited: bool = True) -> dict | Refused:
        """``count`` draws (0: none, only the totals) with a generator seeded by ``seed`` (an int or a list
        of ints). Answers ``keys`` (int64), ``leaves`` (float64 priority ** alpha of each draw, prioritized
        only), this shard's ``positions``, ``mass`` (the sum of leaves, or the positions) and ``lowest``
        (the smallest leaf) after the draw, and ``batch`` (numpy arrays) with ``gather=True``. ``updates``:
        (keys, priorities) applied first; ``applied`` says how many were, ``update_error`` the error they
        met (the draw goes on). ``Refused`` if the rate limiter does not allow ``count`` draws now (the
        updates are applied all the same); ``limited=False``: not asked nor counted (a redraw of draws
        counted already)."""
        count, limited = integer(count, "count", low=0), flag(limited, "limited")
        sampler = self._sampler(choice(kind, "kind", KINDS))
        applied, error = 0, None
        if updates is not None:
            try:
                applied = self.update_priorities(*updates)
            except ReplayError as failure:  # for the learner to raise; this draw goes on
                error = failure
        seed = _request_seed(seed)
        if seed is not None:
            sampler.rng = np.random.default_rng(seed)
        keys, leaves, batch = np.zeros(0, dtype=np.int64), np.zeros(0), None
        if count:
            if self.limiter is not None and limited:  # (a draw that then fails, a view without positions, counts)
                refused = sample_refusal(self.limiter, count, {"applied": applied, "update_error": error})
                if refused is not None:
                    return refused
            sample = sampler.sample(count)
            keys = sample.keys
            if kind == "prioritized":
                leaves = drawn_leaves(sampler, sample).copy()
            if flag(gather, "gather"):
                sample.weights = None
                batch = {name: value.numpy() for name, value in self.view.__getitems__(sample).items()
                         if name != "_key"}
        else:
            sampler.sync()
        answer = {"keys": keys, "leaves": leaves if kind == "prioritized" else None, "batch": batch,
                  "applied": applied, "update_error": error}
        answer.update(self._totals(kind))
        return answer

    def update_priorities(self, keys: Any, priorities: Any) -> int:
        """Priorities of drawn positions (this shard's keys); returns how many were applied (updates for
        episodes the ring evicted since the draw are dropped)."""
        return self._sampler("prioritized").update_priorities(keys, priorities)

    # ---- state -------------------------------------------------------------------------------------

    def info(self) -> dict:
        """Where the shard is and what it holds: folder, node, process, episodes, steps, and per sampler
        its positions, mass and smallest leaf (for prioritized also ``min_priority`` and ``max_priority``,
        raw priorities); ``view`` is the view's options (a learner on this node builds the same view);
        ``rate_limiter``: its limits, counts and refusals (None without one)."""
        buffer = self.buffer
        store = buffer.episode_store
        samplers = {}
        for kind, sampler in self.samplers.items():
            sampler.sync()
            totals = self._totals(kind)
            if kind == "prioritized":
                alpha = sampler.alpha
                lowest = totals["lowest"]
                totals["min_priority"] = lowest ** (1.0 / alpha) if alpha > 0 and np.isfinite(lowest) else None
                totals["max_priority"] = sampler.max_priority
                totals["alpha"] = alpha
                totals["name"] = sampler.name
                totals["dropped"] = sampler.dropped
            samplers[kind] = totals
        return {"folder": str(self.folder), "node_id": _node_id(), "pid": os.getpid(), "store_id": store.meta.store_id,
                "episodes": buffer.num_episodes, "steps": buffer.num_steps,
                "next_episode": store.meta.state.next_episode, "view": dict(self.view_options),
                "kinds": self.kinds, "samplers": samplers, "started": self.started,
                "rate_limiter": limiter_info(self.limiter)}

    def stats(self, fields: Any = None, *, quantiles: Any = None, recompute: bool = False) -> dict:
        """``buffer.stats(...)`` as plain values (``StoreStats.to_dict()``)."""
        return self.buffer.stats(fields, quantiles=quantiles, recompute=recompute).to_dict()

    def checkpoint(self) -> dict:
        """fsync the store's files and the priorities; returns what is now durable (on this node's disk)."""
        self.buffer.flush()
        priorities = []
        for sampler in self.samplers.values():
            files = getattr(sampler, "files", None)
            if files is not None:
                files.values.flush()
                files.owner.flush()
                priorities.append(str(files.values_path))
        state = self.buffer.episode_store.meta.state
        return {"folder": str(self.folder), "episodes": self.buffer.num_episodes, "steps": self.buffer.num_steps,
                "first_episode": state.first_episode, "next_episode": state.next_episode, "priorities": priorities}

    def close(self) -> None:
        """Flush and release the priorities and the store (the folder's locks)."""
        for sampler in getattr(self, "samplers", {}).values():
            if hasattr(sampler, "close"):
                sampler.close()
        self.samplers = {}
        limiter = getattr(self, "limiter", None)
        if limiter is not None:
            limiter.close()
        self.buffer.close()


def _request_seed(seed: Any) -> Any:
    """A sample request's seed: an int >= 0, a list of them, or None."""
    if isinstance(seed, (list, tuple)):
        return [seed_option(value, "each seed", optional=False) for value in seed]
    return seed_option(seed)
