"""Beyond one machine: shard actors on Ray, and a learner's sampler across them (the ``[ray]`` extra).

- ``create_shard(folder, max_episodes, max_timesteps, fields, ..., node_id=None)`` starts a ``ShardActor``
  (a ``ShardServer`` as a Ray actor, pinned to its node, restarted from its folder when its process dies):
  writers call ``add_episode``, learners ``sample`` / ``update_priorities``; also ``info``, ``stats``,
  ``checkpoint``.
- ``RayShardedSampler(actors, kind="prioritized", seed=0, prefetch=2)`` draws across the shards exactly as
  one store would (``batch(n)``, ``sample(n)``, ``update_priorities(keys, priorities)`` sent without waiting,
  ``wait()``), gathering from the folders itself on the shards' node.
- ``call_shard(actor, method, ...)`` calls a shard and sends the call again across a restart
  (``ShardUnavailableError`` after ``timeout``).
- ``create_shard(..., rate_limiter=dict(samples_per_insert=..., error_buffer=...))``: each shard holds its
  inserts and draws to a ratio; callers wait for room or raise ``RateLimitedError``
  (``rate_limit="block"|"raise"`` of ``call_shard`` and ``RayShardedSampler``; ``limits.py``).

``import memmap_replay`` never imports Ray; this package does.
"""

import importlib.util

from ...errors import MissingExtraError

if importlib.util.find_spec("ray") is None:  # pragma: no cover - the extra is not installed
    raise MissingExtraError("memmap_replay.distributed needs Ray: pip install 'memmap-replay[ray]'")

from .actor import ShardActor, create_shard  # noqa: E402
from .calls import ShardCall, ShardUnavailableError, call_shard  # noqa: E402
from .limits import Refused  # noqa: E402
from .sampler import RayShardedSampler  # noqa: E402
from .server import ShardServer  # noqa: E402

__all__ = ["ShardActor", "ShardServer", "create_shard", "RayShardedSampler", "ShardCall", "ShardUnavailableError",
           "call_shard", "Refused"]
