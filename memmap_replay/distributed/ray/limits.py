"""Rate limits in shard actors: samples per insert held at a ratio by each shard, as a Reverb server does.

``create_shard(..., rate_limiter=...)`` (or ``ShardServer``) gives a shard a ``RateLimiter``:

- a dict of its limits, ``dict(samples_per_insert=4.0, error_buffer=200, min_size_to_sample=1000,
  unit="steps")``, plus ``shared=True`` to keep its counters in the shard's folder
  (``ratelimit/<name>.npy``, ``name=`` default "default"): a restarted actor then carries on from the
  counts it had. Without it the counters are in the actor's memory and a restart begins them anew. Either
  way a limiter that has counted nothing yet starts from what the folder holds: its items counted as
  inserted, and as sampled on target (the middle of the window), so a reopened shard is not held back by
  a past it cannot know;
- a ``RateLimiter``: its limits, counted in the actor's memory as above, or, if it keeps its counters in
  a folder, that limiter itself, joined as it is (e.g. one limiter in the root folder of the shards of
  one node, given to each of them: one ratio for those shards together, not per shard).

The limit is per shard (unless shards join one limiter): each shard holds its own inserts and the draws
of its share of every batch to the ratio. So every shard must be written to: a shard no writer feeds
stops the learners once its window is spent, since each batch asks every shard for a share.

``add_episode`` counts the episode's steps (or 1, ``unit="episodes"``) as inserts, and what the ring
evicts for it as deletes; ``sample(count)`` counts ``count`` samples (a redraw of draws whose episode was
evicted is not counted again). A call the limiter does not allow now is not waited for in the actor (that
would stop its other calls): the actor answers a ``Refused`` instead, having inserted or drawn nothing,
and the caller decides. ``call_shard(..., rate_limit="block")`` and ``RayShardedSampler(...,
rate_limit="block")`` (the default) send the call again (after 1 ms, doubling up to 50 ms) until it is
allowed, for at most their ``timeout``, then raise ``RateLimitedError``; ``rate_limit="raise"`` raises it
at once. A sampler keeps a refused request and asks for it again at its next draw, so the shares other
shards drew are not lost. A request that can never fit the window (an episode whose steps times
``samples_per_insert`` exceed its width, a batch share wider than it) raises ``InvalidDataError``.
Calling the actor yourself (``ray.get(shard.add_episode.remote(...))``), check for a ``Refused`` answer.
``info()["rate_limiter"]`` shows a shard's limits, counts and refusals.
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Any, Mapping, NamedTuple

import numpy as np

from ...errors import OptionError, RateLimitedError
from ...core.options import flag, short
from ..ratelimit import RateLimiter

__all__ = ["Refused", "limiter_option", "shard_limiter", "limiter_info", "insert_refusal", "sample_refusal"]

_LIMITS = ("samples_per_insert", "error_buffer", "min_size_to_sample", "unit")
_SHARD_KEYS = ("shared", "name")


class Refused(NamedTuple):
    """A shard's answer to a call its rate limiter does not allow now: nothing was inserted or drawn.

    ``message``: why; ``done``: what the call did anyway (a draw request's priority updates: ``applied``,
    ``update_error``); ``resend``: keyword arguments to send the call again with."""

    message: str
    done: dict
    resend: dict


def limiter_option(value: Any) -> dict | RateLimiter | None:
    """A shard's ``rate_limiter=`` checked (its limits tried on an in-memory limiter)."""
    if value is None or isinstance(value, RateLimiter):
        return value
    if not isinstance(value, Mapping):
        raise OptionError(f"rate_limiter must be None, a RateLimiter or a dict of its limits, e.g. "
                               f"dict(samples_per_insert=4.0, error_buffer=200, min_size_to_sample=1000) "
                               f"(got {short(value)})")
    unknown = sorted(set(value) - set(_LIMITS) - set(_SHARD_KEYS))
    if unknown:
        raise OptionError(f"rate_limiter has unknown keys {unknown}: it takes {list(_LIMITS + _SHARD_KEYS)}")
    if "samples_per_insert" not in value or "error_buffer" not in value:
        raise OptionError(f"rate_limiter needs samples_per_insert and error_buffer (got {sorted(value)})")
    value = dict(value)
    flag(value.get("shared", False), "rate_limiter's shared")
    RateLimiter(**{key: value[key] for key in _LIMITS if key in value}, name=value.get("name", "default"))
    return value


def shard_limiter(option: dict | RateLimiter | None, store: Any) -> RateLimiter | None:
    """The limiter of a shard over ``store`` (see the module), in mode 'raise': it never waits."""
    option = limiter_option(option)
    if option is None:
        return None
    if isinstance(option, RateLimiter) and option.folder is not None:  # joined as it is
        return RateLimiter(**option.config, folder=option.folder, name=option.name, mode="raise")
    if isinstance(option, RateLimiter):
        option = dict(option.config)  # its limits, counted in memory
    limits = {key: option[key] for key in _LIMITS if key in option}
    folder = store.folder if option.get("shared", False) else None
    limiter = RateLimiter(**limits, folder=folder, name=option.get("name", "default"), mode="raise")
    if not any(limiter.counts):  # nothing counted yet: start from what the folder holds, sampled on target
        table = store.live_table()
        items = int(table.length.sum()) if limiter.unit == "steps" else len(table.ids)
        if items:
            limiter.inserted(items)
            middle = (limiter.min_diff + limiter.max_diff) / 2
            limiter.sampled(max(0, math.floor(items * limiter.samples_per_insert - middle)))
    return limiter


def limiter_info(limiter: RateLimiter | None) -> dict | None:
    """A shard's limiter as plain values: its limits, counts, where the counts are, and how many calls it
    refused (``refused``: inserts and samples)."""
    if limiter is None:
        return None
    return dict(limiter.config, counts=limiter.counts._asdict(), size=limiter.counts.size, name=limiter.name,
                folder=None if limiter.folder is None else str(limiter.folder), refused=dict(limiter.blocked))


def _episode_items(limiter: RateLimiter, episode: Mapping[str, Any]) -> int:
    """What an episode (a dict of (T, ...) arrays) counts as: its T steps, or 1 episode."""
    if limiter.unit == "episodes":
        return 1
    return max([int(np.shape(value)[0]) for value in episode.values() if np.ndim(value)] + [1])


def _refusal(limiter: RateLimiter, what: str, n: int, done: dict | None = None,
            resend: dict | None = None) -> Refused:
    asked, behind = ((f"an insert of {n} {limiter.unit}", "the learners are behind: sample from it") if what == "insert"
                     else (f"a draw of {n}", "the writers are behind: add episodes"))
    return Refused(f"its rate limiter does not allow {asked} now ({limiter.counts}, samples_per_insert="
                   f"{limiter.samples_per_insert}, window [{limiter.min_diff}, {limiter.max_diff}], min_size_to_sample="
                   f"{limiter.min_size_to_sample}): {behind}", done or {}, resend or {})


def insert_refusal(limiter: RateLimiter, episode: Mapping[str, Any], buffer: Any, stack: ExitStack) -> Refused | None:
    """None if the episode may be inserted (what its commit, in ``stack``, inserts and evicts is then
    counted), else the ``Refused`` answer."""
    n = _episode_items(limiter, episode)
    try:
        stack.enter_context(limiter.inserting(n, buffer=buffer))
    except RateLimitedError:
        return _refusal(limiter, "insert", n)
    return None


def sample_refusal(limiter: RateLimiter, count: int, done: dict) -> Refused | None:
    """None if ``count`` draws may be handed out (they are counted), else the ``Refused`` answer; ``done``:
    the priority updates the request carried, applied already (so not sent again)."""
    try:
        limiter.await_sample(count)
    except RateLimitedError:
        return _refusal(limiter, "sample", count, done, {"updates": None})
    return None
