"""Priority updates on their way from a learner to the shard actors.

``update_priorities`` never waits for a shard. Each shard's part of an update is either sent at once as
its own call (``actor.update_priorities.remote``, fire-and-forget), or, with ``piggyback=True``, held
until the learner's next draw request to that shard, which carries it: the shard applies it, then draws.
Both reach the shard in the same order relative to the draws already requested (an actor runs its calls
in the order they were sent); riding along saves one Ray call per shard and batch. Either way an update
that fails is raised later, not lost: at the sampler's next draw (``poll``) or at ``wait()``; one whose
actor died is sent again once Ray has restarted it (setting a priority twice sets it once).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import ray

from ...errors import InvalidDataError
from ...samplers.prioritized import as_numpy
from ..shards import SHARD_STRIDE
from .calls import ShardCall

__all__ = ["PriorityUpdates", "split_by_shard"]


def split_by_shard(keys: Any, priorities: Any, shards: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(shard, that shard's keys, float64 priorities) of a sharded batch's ``_key`` and priorities, checked."""
    keys, priorities = as_numpy(keys), as_numpy(priorities)
    if keys.dtype.kind not in "iu" or keys.ndim != 1 or priorities.shape != keys.shape:
        raise InvalidDataError(f"keys must be a batch's '_key' and priorities one per key (got keys {keys.dtype} "
                               f"{keys.shape}, priorities {priorities.shape})")
    if priorities.dtype.kind not in "biuf":
        raise InvalidDataError(f"priorities must be numbers (got {priorities.dtype})")
    if not len(keys):
        return []
    if not (priorities.min() >= 0 and priorities.max() < np.inf):
        bad = priorities[~np.isfinite(priorities) | (priorities < 0)][0]
        raise InvalidDataError(f"priorities must be finite and >= 0 (got {bad}); e.g. abs(td_error) + 1e-6")
    if keys.min() < 0:
        raise InvalidDataError(f"keys must be a sharded batch's '_key', >= 0 (got {int(keys.min())})")
    keys = keys.astype(np.int64)
    shard, local = keys % SHARD_STRIDE, keys // SHARD_STRIDE
    if shard.max() >= shards:
        raise InvalidDataError(f"keys must be a sharded batch's '_key': some name shard {int(shard.max())} of {shards}")
    priorities = priorities.astype(np.float64)
    parts = []
    for index in np.unique(shard):
        chosen = shard == index
        parts.append((int(index), local[chosen], priorities[chosen]))
    return parts


class PriorityUpdates:
    """The updates of one sampler: held for a request (``piggyback``) or in flight as calls of their own.
    ``call(shard, method, *args)`` makes a ``ShardCall``."""

    def __init__(self, call: Callable[..., ShardCall], shards: int, *, piggyback: bool, max_pending: int):
        self.call, self.shards, self.piggyback, self.max_pending = call, shards, piggyback, max_pending
        self.held: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(shards)]
        self.pending: list[ShardCall] = []  # update calls in flight
        self.applied = 0  # updates the shards applied, as far as this learner has heard back

    def add(self, keys: Any, priorities: Any) -> int:
        parts = split_by_shard(keys, priorities, self.shards)
        for shard, local, values in parts:
            if self.piggyback:
                self.held[shard].append((local, values))
            else:
                self.pending.append(self.call(shard, "update_priorities", local, values))
        while len(self.pending) > self.max_pending:  # back-pressure: the oldest must land first
            self.applied += self.pending.pop(0).result()
        return sum(len(local) for _, local, _ in parts)

    def take(self, shard: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The updates held for ``shard``, for the request about to be sent to it (None: none)."""
        held, self.held[shard] = self.held[shard], []
        if not held:
            return None
        return np.concatenate([keys for keys, _ in held]), np.concatenate([values for _, values in held])

    def answered(self, answer: dict) -> None:
        """Take in what a request's answer says of the updates it carried; raise the error they met."""
        self.applied += answer.get("applied", 0)
        if answer.get("update_error") is not None:
            raise answer["update_error"]

    def poll(self) -> None:
        """Take in the update calls that have landed; raise the first that failed."""
        if not self.pending:
            return
        ready, _ = ray.wait([call.ref for call in self.pending], num_returns=len(self.pending), timeout=0)
        if not ready:
            return
        landed = set(ready)
        keep, error = [], None
        for call in self.pending:
            if call.ref not in landed or error is not None:
                keep.append(call)
                continue
            try:
                done, applied = call.poll()
            except Exception as failure:  # noqa: BLE001 - raised below, once the others are taken in
                error = failure
                continue
            if done:
                self.applied += applied
            else:
                keep.append(call)  # sent again: its actor is restarting
        self.pending = keep
        if error is not None:
            raise error

    def wait(self) -> int:
        """Send what is held, wait until every update has landed (raising the first that failed); returns
        how many the shards applied so far."""
        for shard in range(self.shards):
            update = self.take(shard)
            if update is not None:
                self.pending.append(self.call(shard, "update_priorities", *update))
        while self.pending:
            self.applied += self.pending.pop(0).result()
        return self.applied
