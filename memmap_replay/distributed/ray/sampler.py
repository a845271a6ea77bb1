"""``RayShardedSampler``: a learner's sampler over shard actors, drawing as one store would.

The draw is two-level, as ``shards.ShardedSampler`` draws across local folders:

1. how many of the batch each shard serves is multinomial in each shard's share of the positions
   (uniform) or of the priority mass, the sum of ``priority ** alpha`` (prioritized);
2. each shard draws its share with its own sampler (its generator seeded by the learner's seed and
   rank, the request's number and the shard), and answers the keys, the drawn leaves
   ``priority ** alpha``, and its positions, mass and smallest leaf.

Uniform draws are then exactly i.i.d. uniform over every position of every shard. Prioritized draws
are each position's with probability ``leaf / total mass`` in expectation, as one store's sum tree
draws them: within a shard the draws are stratified (one per equal slice of the shard's mass), which
makes a batch less variable than independent draws, never biased. Importance weights are computed here
over every shard: ``(N P_i) ** -beta / max_j (N P_j) ** -beta`` with ``P_i = leaf_i / total mass``; ``N``
and the total cancel, leaving ``(lowest leaf / leaf_i) ** beta`` with the smallest leaf of all shards,
which is how they are computed (``shards.global_weights``, as ``ShardedSampler`` computes them: it cannot
overflow). ``beta`` anneals with this sampler's draws.

The counts of a request are drawn with the masses the shards reported last. With ``draw_ahead=k`` the
sampler keeps ``k`` requests in flight, so a batch was drawn up to ``k`` batches (and their priority
updates) earlier: exact for the masses of that moment, as in Ape-X. Priority updates are sent without
waiting (``update_priorities`` returns at once; ``updates.py``); an update that failed raises at this
sampler's next draw (or at ``wait()``), one sent to an actor that died is sent again once it is back.

Batches: a shard on this learner's node answers only keys, and this process gathers the batch from the
shard's folder itself (a read-only view of the same files); a shard on another node gathers the batch
and sends it back. Draws whose episode a ring evicted before this process read them are drawn again by
their shard, which gathers them itself. Keys of a batch are ``shard key * SHARD_STRIDE + shard``, as
``ShardSet`` keys are, ``shard`` being the actor's place in ``actors``.

Rate limits (``limits.py``): a request a shard's limiter refuses is asked again until allowed
(``rate_limit="block"``, within ``timeout``) or raises ``RateLimitedError`` (``"raise"``); either way the
request stays first in line, and the next draw of the same size asks the refusing shard again, keeping
what the others drew. Redraws of evicted draws are not counted again.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import ray
import torch

from ...core.index import Sample
from ...errors import InvalidDataError, OptionError, RateLimitedError, SampleExpiredError
from ...reading.build import build_view
from ...core.options import (batch_size as batch_size_of, choice, flag, integer, renamed, seed_option, short,
                             timeout_option)
from ...samplers.base import REDRAWS, BetaSchedule, SamplerBase, damaged, distributed_rank
from ..shards import SHARD_STRIDE, ShardSample, global_weights, _merge, shard_counts
from ...core.store import EpisodeStore
from .calls import _RATE_BACKOFF, _RATE_LIMITS, ShardCall
from .server import KINDS, _node_id
from .updates import PriorityUpdates

__all__ = ["RayShardedSampler"]


class _Request:
    """One batch's draw in flight: its size, its number (which seeds it) and one call per shard."""

    __slots__ = ("size", "number", "calls")

    def __init__(self, size: int, number: int, calls: list[ShardCall]):
        self.size, self.number, self.calls = size, number, calls


class RayShardedSampler(BetaSchedule, SamplerBase):
    """A sampler across shard actors (``ShardActor`` handles), for a learner in any process of the cluster.

    ``kind``: 'prioritized' or 'uniform'. ``beta``, ``beta_final``, ``beta_steps``: the importance-weight
    exponent and its linear schedule over this sampler's draws (as ``PrioritizedSampler``'s; ``alpha`` is
    each shard's). ``draw_ahead``: requests kept in flight (0: each batch is asked for when it is needed;
    ``prefetch``, its old spelling, warns and goes in the next release).
    ``local``: gather from the shards' folders in this process (None: for shards on this node, True: all,
    an error if one is elsewhere, False: none, the actors gather). ``piggyback``: priority updates ride on
    the next draw request to their shard instead of a call of their own (``updates.py``). ``rank``,
    ``world_size``: several learners of one job (default: torch.distributed's when it is initialized) draw
    their own streams with one ``seed``. ``timeout``:
    seconds a request may wait for a shard, restarts and rate limits included. ``max_pending``: priority
    update calls in flight before the next one waits. ``rate_limit``: what a draw does when a shard's rate
    limiter refuses it: 'block' (ask again until allowed) or 'raise' (``RateLimitedError`` at once).
    """

    def __init__(self, actors: Any, kind: str = "prioritized", *, seed: int | None = None, beta: float = 0.4,
                 beta_final: float = 1.0, beta_steps: int = 0, draw_ahead: int = 2, local: bool | None = None,
                 piggyback: bool = False, rank: int | None = None, world_size: int | None = None,
                 timeout: float = 60.0, max_pending: int = 64, rate_limit: str = "block",
                 prefetch: int | None = None):
        if not isinstance(actors, (list, tuple)) or not actors:
            raise OptionError(f"actors must be a non-empty list of shard actors, e.g. [create_shard(folder)] "
                                   f"(got {short(actors)})")
        if len(actors) > SHARD_STRIDE:
            raise OptionError(f"at most {SHARD_STRIDE} shards (got {len(actors)})")
        if not all(isinstance(actor, ray.actor.ActorHandle) for actor in actors):
            raise OptionError(f"actors must be Ray actor handles of ShardActor (got {short(actors)})")
        self.actors = list(actors)
        self.kind = choice(kind, "kind", KINDS)
        seed = seed_option(seed)
        # (a SeedSequence made without entropy draws an int: numpy's stubs allow a sequence)
        self.seed = int(cast(int, np.random.SeedSequence().entropy)) if seed is None else seed
        # several learners (ranks of one job) with one seed: each its own stream, as ShardedSampler's
        self.rank, self.world_size = distributed_rank(rank, world_size)
        self.rng = np.random.default_rng([self.seed, 1 << 20, self.rank])
        self._schedule_beta(beta, beta_final, beta_steps)
        draw_ahead = renamed("prefetch", prefetch, "draw_ahead", draw_ahead, 2, "a RayShardedSampler")
        self.draw_ahead = integer(draw_ahead, "draw_ahead", low=0)
        self.timeout = timeout_option(timeout)
        self.rate_limit = choice(rate_limit, "rate_limit", _RATE_LIMITS)
        if local is not None and not isinstance(local, (bool, np.bool_)):
            raise OptionError(f"local must be None, True or False (got {short(local)})")
        self.draws = 0  # batches (and samples) handed out: the beta schedule's clock
        self.requests = 0  # requests sent: each request's number seeds its draws
        self.queue: collections.deque[_Request] = collections.deque()
        self.updates = PriorityUpdates(self._call, len(self.actors), piggyback=flag(piggyback, "piggyback"),
                                       max_pending=integer(max_pending, "max_pending", low=1))
        self.redrawn = 0  # draws made again because a ring evicted their episode before it was read here
        infos = self.info()
        self._check_shards(infos)
        self.views = [self._local_view(shard, info, local) for shard, info in enumerate(infos)]
        self._learn([info["samplers"][self.kind] for info in infos])

    # ---- the shards ----------------------------------------------------------------------------------

    def _what(self, shard: int) -> str:
        return f"shard {shard} of {len(self.actors)}"

    def _call(self, shard: int, method: str, *args: Any, **kwargs: Any) -> ShardCall:
        return ShardCall(self.actors[shard], method, *args, timeout=self.timeout, what=self._what(shard),
                         rate_limit=self.rate_limit, **kwargs)

    def info(self) -> list[dict]:
        """Each shard's ``info()`` (asked of all at once)."""
        calls = [self._call(shard, "info") for shard in range(len(self.actors))]
        return [call.result() for call in calls]

    def _check_shards(self, infos: list[dict]) -> None:
        first = infos[0]
        for shard, info in enumerate(infos):
            if self.kind not in info["kinds"]:
                raise OptionError(f"{self._what(shard)} keeps no {self.kind!r} sampler (its kinds are "
                                       f"{info['kinds']}); make every shard with kinds including {self.kind!r}")
            if not _same_view(info["view"], first["view"]):
                raise OptionError(f"every shard must draw from the same view: {self._what(shard)} has "
                                       f"{info['view']}, shard 0 {first['view']}")
        folders = [(info["node_id"], info["folder"]) for info in infos]
        if len(set(folders)) != len(folders):
            raise OptionError("actors must be distinct shards: two of them keep the same folder on one node")

    def _local_view(self, shard: int, info: dict, local: bool | None):
        """A read-only view of the shard's folder in this process, or None (the actor gathers)."""
        here = info["node_id"] is not None and info["node_id"] == _node_id() and Path(info["folder"]).is_dir()
        if local is None:
            local = here
        elif local and not here:
            raise OptionError(f"local=True needs every shard on this learner's node: {self._what(shard)} keeps "
                                   f"{info['folder']} on node {info['node_id']} (this is {_node_id()}); pass "
                                   f"local=None to let such shards gather their batches")
        if not local:
            return None
        store = EpisodeStore.open(info["folder"], "r")
        if store.meta.store_id != info["store_id"]:
            store.close()
            raise OptionError(f"{info['folder']} on this node holds another store than {self._what(shard)}'s")
        return build_view(store, dict(info["view"], allow_empty=True))

    def _learn(self, totals: list[dict]) -> None:
        """The shards' positions, masses and smallest leaves, as they last reported them."""
        self.positions = np.array([total["positions"] for total in totals], dtype=np.int64)
        self.masses = np.array([total["mass"] for total in totals], dtype=np.float64)
        self.lowest = np.array([total["lowest"] for total in totals], dtype=np.float64)

    # ---- drawing -------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests sent ahead and not yet taken."""
        return len(self.queue)

    def _await_positions(self) -> None:
        """Ask the shards for their totals again while none holds a position; rate limited shards are
        waited for as a refusal is (shards without a limiter: ``shard_counts`` says what is wrong)."""
        deadline, pause = time.monotonic() + self.timeout, _RATE_BACKOFF[0]
        while True:
            infos = self.info()
            self._learn([info["samplers"][self.kind] for info in infos])
            if self.masses.sum() > 0 or not any(info["rate_limiter"] for info in infos):
                return
            if self.rate_limit == "raise" or time.monotonic() + pause >= deadline:
                when = "(rate_limit='raise')" if self.rate_limit == "raise" else f"within timeout={self.timeout:g} s"
                raise RateLimitedError(f"no shard holds a position of this view yet {when}, and their rate limiters "
                                       f"hold learners back until writers add episodes: add episodes, or pass "
                                       f"rate_limit='block' and a longer timeout= to wait for them")
            time.sleep(pause)
            pause = min(2 * pause, _RATE_BACKOFF[1])

    def _send(self, size: int) -> _Request:
        if not self.masses.sum() > 0:  # nothing known yet: ask the shards again before giving up
            self._await_positions()
        counts = shard_counts(self.rng, self.masses, size)
        number = self.requests
        self.requests += 1
        calls = [self._call(shard, "sample", int(count), self.kind, seed=[self.seed, self.rank, number, shard],
                            gather=bool(count) and self.views[shard] is None, updates=self.updates.take(shard))
                 for shard, count in enumerate(counts)]
        return _Request(size, number, calls)

    def _take(self, size: int) -> tuple[_Request, list[dict]]:
        """The next request of ``size`` draws (sent ahead with ``draw_ahead``) and its answers, after sending
        the requests that keep ``draw_ahead`` in flight."""
        self.updates.poll()
        if self.queue and self.queue[0].size != size:
            self._drop_requests()  # drawn for another batch size
        request = self.queue.popleft() if self.queue else self._send(size)
        while len(self.queue) < self.draw_ahead:
            self.queue.append(self._send(size))
        try:
            answers = [call.result() for call in request.calls]
        except RateLimitedError:
            self.queue.appendleft(request)  # asked again at the next draw, keeping what the other shards drew
            raise
        self._learn(answers)
        self._answered(request, answers)
        return request, answers

    def _answered(self, request: _Request, answers: list) -> None:
        """Take in what a request's answers (and its refusals) say of the priority updates it carried."""
        for call, answer in zip(request.calls, answers):
            for refusal in call.refused:
                self.updates.answered(refusal.done)
            if answer is not None:
                self.updates.answered(answer)

    def _drop_requests(self) -> None:
        """Drop the requests sent ahead, once answered (the updates they carried have landed); refused
        ones are not asked again."""
        queue, self.queue = self.queue, collections.deque()
        for request in queue:
            self._answered(request, [call.result(settle=True) for call in request.calls])

    def _weights(self, answers: list[dict]) -> np.ndarray | None:
        if self.kind != "prioritized":
            return None
        leaves = np.concatenate([answer["leaves"] for answer in answers])
        return global_weights(leaves, [answer["lowest"] for answer in answers], self.beta)

    def sample(self, batch_size: int) -> ShardSample:
        """Keys (and weights) of ``batch_size`` draws, as ``ShardedSampler.sample`` gives them."""
        _, answers = self._take(batch_size_of(batch_size))
        parts = [(shard, Sample(np.array(answer["keys"]))) for shard, answer in enumerate(answers)
                 if len(answer["keys"])]
        sample = ShardSample(parts, self._weights(answers))
        self.draws += 1
        return sample

    def refresh(self) -> bool:
        """Nothing to re-read here: the shard actors follow their own stores, and every request draws from the
        episodes live in them then. Always False."""
        return False

    def _sampler_dataloader(self, batch_size: int, num_batches: int | None, options: dict) -> Any:
        """Not available: there is no local view to build a DataLoader over (the batches come from the shards)."""
        raise OptionError("RayShardedSampler has no dataloader(): its batches come from the shard actors; call "
                          "sampler.batch(batch_size) in the training loop (or wrap it in a torch IterableDataset)")

    def batch(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A batch of ``batch_size`` draws across the shards, with ``_key`` (and ``_weight``). Draws whose
        episode a ring evicted before this process read them are drawn again (see ``_renew``)."""
        request, answers = self._take(batch_size_of(batch_size))
        parts = []
        for shard, answer in enumerate(answers):
            if not len(answer["keys"]):
                continue
            try:
                parts.append(self._part(shard, answer))
            except SampleExpiredError:
                answers[shard], part = self._renew(shard, request, answer)
                parts.append(part)
        batch = _merge(parts, None)
        weights = self._weights(answers)
        if weights is not None:
            batch["_weight"] = torch.from_numpy(weights)
        self.draws += 1
        return batch

    def _part(self, shard: int, answer: dict) -> dict[str, torch.Tensor]:
        """A shard's share of a batch: gathered by the actor, or here from its folder."""
        keys = np.array(answer["keys"])  # (a writable copy: Ray hands out read-only arrays)
        if answer["batch"] is not None:
            part = {name: torch.from_numpy(np.array(value)) for name, value in answer["batch"].items()}
        else:
            part = self.views[shard].__getitems__(Sample(keys))
        part["_key"] = torch.from_numpy(keys * SHARD_STRIDE + shard)
        return part

    def _renew(self, shard: int, request: _Request, answer: dict) -> tuple[dict, dict[str, torch.Tensor]]:
        """A share some of whose episodes a ring evicted (or ``delete_episodes`` removed) before this process read
        them: the live draws are read here, the others drawn again by the shard, which gathers them itself (in the
        writer's process nothing is evicted meanwhile). Returns the share's new answer and its batch."""
        view, keys = self.views[shard], np.array(answer["keys"])
        leaves = answer["leaves"]
        for attempt in range(1, REDRAWS + 1):
            view.refresh()
            alive = np.isin(keys // view.key_stride, view.table.ids)  # (not evicted, nor removed by an edit)
            try:
                kept = self._part(shard, dict(answer, keys=keys[alive], batch=None)) if alive.any() else None
            except SampleExpiredError:  # evicted while it was read: look again
                continue
            fresh = self._call(shard, "sample", int((~alive).sum()), self.kind, gather=True, limited=False,
                               seed=[self.seed, self.rank, request.number, shard, attempt]).result()
            self.redrawn += len(fresh["keys"])
            if kept is None:
                return fresh, self._part(shard, fresh)
            renewed = dict(fresh, keys=np.concatenate([keys[alive], fresh["keys"]]), batch=None,
                           leaves=None if leaves is None else np.concatenate([leaves[alive], fresh["leaves"]]))
            return renewed, _merge([kept, self._part(shard, fresh)], None)
        fresh = self._call(shard, "sample", len(keys), self.kind, gather=True, limited=False,  # the writer outran us
                           seed=[self.seed, self.rank, request.number, shard, 0]).result()
        self.redrawn += len(keys)
        return fresh, self._part(shard, fresh)

    # ---- priorities ----------------------------------------------------------------------------------

    def update_priorities(self, keys: Any, priorities: Any) -> int:
        """Send the priorities of a batch's ``_key`` to their shards without waiting; returns how many
        were sent. Errors come back later: at this sampler's next draw, or at ``wait()``."""
        if self.kind != "prioritized":
            raise OptionError("a uniform sampler keeps no priorities; make it with kind='prioritized'")
        return self.updates.add(keys, priorities)

    def wait(self) -> int:
        """Wait until every priority update sent has landed (raising the first that failed); returns how
        many updates the shards applied so far."""
        return self.updates.wait()

    # ---- state ---------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """This sampler's own state (the shards keep theirs in their folders); requests in flight are not
        part of it: a loaded state draws from its next request on."""
        return {"type": "RayShardedSampler", "seed": self.seed, "rng": self.rng.bit_generator.state,
                "draws": self.draws, "requests": self.requests}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("type") != "RayShardedSampler":
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise InvalidDataError(f"this is a RayShardedSampler's state_dict()? it holds a {found!r}")
        try:
            generator = type(self.rng.bit_generator)()
            generator.state = state["rng"]
            values = (seed_option(state["seed"], optional=False), integer(state["draws"], "draws", low=0),
                      integer(state["requests"], "requests", low=0))
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise damaged(error) from None
        self._drop_requests()
        self.rng.bit_generator.state = generator.state
        self.seed, self.draws, self.requests = values

    def close(self) -> None:
        """Wait for the priority updates in flight, drop the requests sent ahead, close the local views."""
        try:
            self._drop_requests()
            self.wait()
        finally:
            self.queue.clear()
            for view in getattr(self, "views", []):
                if view is not None and view._store is not None:
                    view._store.close()


def _same_view(a: dict, b: dict) -> bool:
    """Equal view options (callables, such as a hindsight reward_fn, are compared by name: each shard
    received its own copy)."""
    def plain(value):
        return (getattr(value, "__qualname__", repr(value)) if callable(value)
                               else {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else value)
    return plain(a) == plain(b)
