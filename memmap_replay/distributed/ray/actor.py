"""``ShardActor``: a ``ShardServer`` as a Ray actor, and ``create_shard`` to start one on a node.

The folder of a shard lives on its node's disk, so a shard actor is pinned to its node (a hard node
affinity): when its process dies, Ray restarts it there (``max_restarts``), and the constructor reopens
the folder with every committed episode and the priorities kept in it. A node that is lost takes its shard
with it; the other shards carry on.

Episodes reach a shard through Ray's object store: ``shard.add_episode.remote(episode)`` with a dict of
numpy arrays (or ``ray.put(episode)`` first, to send one episode to several places). On the same node the
object store is shared memory: the shard's process reads the arrays in place (zero-copy, read-only
views) and copies them once, into its memory-mapped files. Only between nodes do the bytes cross the
network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...errors import InvalidDataError, OptionError
from ...core.options import integer, number, short
from .limits import limiter_option
from .server import ShardServer

__all__ = ["ShardActor", "create_shard"]

ShardActor = ray.remote(max_restarts=-1, num_cpus=0)(ShardServer)
ShardActor.__doc__ = "ShardServer as a Ray actor (restarted from its folder without limit; holds no CPU)."


def create_shard(folder: str | Path, *args: Any, node_id: str | None = None, max_restarts: int = -1,
                 num_cpus: float = 0, actor_name: str | None = None, **options: Any):
    """Start a ``ShardActor`` over ``folder`` (``ShardServer``'s arguments: ``ReplayBuffer``'s, ``view``,
    ``alpha``, ``name``, ``kinds``, ``rate_limiter``) on the node ``node_id`` (default: this process's node), restarted
    up to ``max_restarts`` times (-1: always) from its folder. ``num_cpus``: what the actor reserves (0: it
    waits on its learners and writers, it does not compute much). ``actor_name``: a Ray actor name, to find
    it with ``ray.get_actor``. Returns the actor handle."""
    limiter_option(options.get("rate_limiter"))  # a bad one is an error here, not a shard that cannot start
    if not ray.is_initialized():
        raise InvalidDataError("create_shard needs a Ray cluster: call ray.init() (or ray.init(address=...)) first")
    if node_id is None:
        node_id = ray.get_runtime_context().get_node_id()
    elif not isinstance(node_id, str) or node_id not in {node["NodeID"] for node in ray.nodes() if node["Alive"]}:
        raise OptionError(f"node_id must be the id of a live node of this cluster, as ray.nodes() lists them "
                               f"(got {short(node_id)})")
    max_restarts = integer(max_restarts, "max_restarts", low=-1)
    num_cpus = number(num_cpus, "num_cpus", low=0.0)
    settings = dict(max_restarts=max_restarts, num_cpus=num_cpus,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    if actor_name is not None:
        settings["name"] = actor_name
    return ShardActor.options(**settings).remote(str(folder), *args, **options)
