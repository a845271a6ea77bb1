"""The distributed room: many writers (one store a shard, read as one by ``ShardSet``), rate limits
(Reverb's samples-per-insert), and, in ``distributed.ray`` (the ``[ray]`` extra), shard actors and a
learner's sampler across them.

Names load on first use: the shards need torch and the Ray names need Ray, and ``import memmap_replay``
imports neither (the rate limiter is numpy only).
"""

import importlib as _importlib

_LAZY = {
    "ShardSet": "shards", "ShardedSampler": "shards", "ConcatView": "shards", "shard_folder": "shards",
    "RateLimiter": "ratelimit", "RateCounts": "ratelimit", "LimitedSampler": "ratelimit",
    # the Ray side (``memmap_replay.distributed.ray``): these names are kept here for
    # ``from memmap_replay.distributed import create_shard``
    "ShardActor": "ray", "ShardServer": "ray", "create_shard": "ray", "RayShardedSampler": "ray",
    "ShardCall": "ray", "ShardUnavailableError": "ray", "call_shard": "ray", "Refused": "ray",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [name for name, module in _LAZY.items() if module != "ray"]
