"""Growing a store's capacity in place (``EpisodeStore.grow``): more episode slots, more rows, longer
episodes, or a switch to a ring. Numpy only.

What may change (None keeps a value; ``max_steps=None`` with a larger ``max_episodes`` adds room for the
added episodes at ``max_timesteps + 1`` rows each, as the constructor's default): ``max_episodes``, ``max_steps`` and
``max_timesteps`` may only grow (a smaller value is refused: rows and slots in use would be cut), and ``circular`` may
go from False to True (a ring evicts oldest first once full). True to False is refused: a ring's rows may wrap, and a
non-circular store assumes that every row after its write head is free.

Crash safety (every step leaves a store that reopens with every committed episode):

1. the episode table and the meta files grow (file size first, then the ``.npy`` header; rows past the
   committed capacity are never read);
2. an episode's slot is ``id % max_episodes``: when ``max_episodes`` grows, live episodes whose slot changes
   are copied to their new slots, which no live episode uses under the committed capacity, and nothing of the
   committed layout is touched;
3. ``meta.json`` is replaced atomically with the new capacity (the commit point).

When some new slot is an old slot of another live episode (a ring whose ids passed ``max_episodes``), no
single commit can move them all without touching the committed layout: the grow then goes through an
intermediate ``max_episodes`` whose slots avoid both layouts (two commits, each one whole). A kill between
the two leaves that intermediate capacity, every episode intact: one between the old and the new one when
there is such a count (grow again to finish), else one above the new one (the store then has more slots
than asked). Either way the episode table and meta files then keep the intermediate count's rows (they are
never shortened: a reader that took the intermediate meta.json may still map them); ``verify`` warns that
the rows past ``max_episodes`` are ignored, and ``unpack`` refuses such a file once its extra rows pass its
64 KiB slack (a known limit, for rings of thousands of slots). Growing ``max_episodes`` to a multiple of itself
(twice, ...) always moves in one commit: a new slot is then the old one plus a multiple of the old count.

Step files are not touched: they grow as episodes arrive, up to ``max_steps`` (as in every store). Persisted
priorities of a prioritized sampler (``priorities/``, sampler state) are not touched either, and are kept:
rows never move in a grow, so the next sampler remaps them to the new capacity (``samplers/priority_files.py``:
values extended, owner entries moved to their new slots, the view's spec taken with its new key stride), and a
sampler left open in the writer's process follows the grow at its next draw (after a ``max_timesteps`` grow it
refuses and lets go of its files instead: make a new one).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from . import format as fmt
from .format import Capacity
from .options import flag, positive_int

if TYPE_CHECKING:
    from .store import EpisodeStore

__all__ = ["grown_capacity", "moves", "grow_layouts"]

_SEARCH = 1 << 16  # intermediate capacities above the new one tried at once
_BELOW = 64  # intermediate capacities between the old and the new one tried (each check reads every live id)


def grown_capacity(capacity: Capacity, *, max_episodes: Any = None, max_steps: Any = None,
                   max_timesteps: Any = None, circular: Any = None) -> Capacity:
    """The capacity after a grow (None keeps a value), refusing what cannot be done in place."""
    new: dict[str, int] = {}
    for name, value in (("max_episodes", max_episodes), ("max_steps", max_steps), ("max_timesteps", max_timesteps)):
        old = getattr(capacity, name)
        if value is None:
            new[name] = old
            continue
        value = positive_int(value, name)
        if value < old:
            raise OptionError(f"{name} must be at least the store's {name}={old} (got {value}): a grow never shrinks "
                              f"a store; to make a smaller one, copy the episodes you keep into a new store")
        new[name] = value
    if max_steps is None and new["max_episodes"] > capacity.max_episodes:
        # room for the added episodes at their longest, as the constructor's default max_steps (disk use
        # grows with the rows stored, not with the capacity)
        new["max_steps"] = (capacity.max_steps
                            + (new["max_episodes"] - capacity.max_episodes) * (new["max_timesteps"] + 1))
    if new["max_steps"] < new["max_timesteps"] + 1:
        raise OptionError(f"max_steps must be at least max_timesteps + 1 = {new['max_timesteps'] + 1} (got "
                          f"{new['max_steps']}); pass a larger max_steps with max_timesteps")
    ring = capacity.circular if circular is None else flag(circular, "circular")
    if capacity.circular and not ring:
        raise OptionError("circular must stay True: the store is a ring (circular=True), and a ring cannot become "
                          "non-circular in place (its rows may wrap around); leave circular=None, or export its "
                          "episodes into a new non-circular store")
    return Capacity(new["max_episodes"], new["max_timesteps"], new["max_steps"], ring)


def moves(ids: np.ndarray, old: int, new: int) -> np.ndarray | None:
    """Which live ``ids`` change slot from ``id % old`` to ``id % new`` (a bool mask), or None when one of
    their new slots is the old slot of another live episode (no single commit can move them)."""
    src, dst = ids % old, ids % new
    moved: np.ndarray = src != dst
    if moved.any() and np.isin(dst[moved], src).any():
        return None
    return moved


def grow_layouts(ids: np.ndarray, old: int, new: int) -> list[int]:
    """The episode-slot counts to commit in turn, from ``old`` slots to ``new`` (the last one), each step
    moving live episodes only to slots that no live episode uses under the step before it."""
    if old == new or moves(ids, old, new) is not None:
        return [new]
    first, live = int(ids[0]), len(ids)
    for middle in range(new - 1, max(old, new - 1 - _BELOW), -1):  # between the two: a rerun finishes a killed grow
        if moves(ids, old, middle) is not None and moves(ids, middle, new) is not None:
            return [middle, new]
    if first < new:
        # ids below first + live <= new + old: under first + live slots every id is its own slot, which
        # both the old layout (ids that move there are >= old) and the new one (ids >= new go below first) avoid
        middle = first + live
    else:
        # a count whose slots hold the live ids in one block at or above ``new`` (first + live is one)
        candidates = np.arange(new + live, min(first + live, new + live + _SEARCH) + 1, dtype=np.int64)
        rest = first % candidates
        fits = np.flatnonzero((rest >= new) & (rest + live <= candidates))
        middle = int(candidates[fits[0]]) if fits.size else first + live
    if moves(ids, old, middle) is None or moves(ids, middle, new) is None:  # pragma: no cover - by the argument above
        raise AssertionError(f"no grow path from {old} to {new} slots through {middle} for ids {first}..")
    return [middle, new]


def grow_store(store: EpisodeStore, capacity: Capacity) -> None:
    """Grow ``store`` (an EpisodeStore that may write, holding the writer lock) to ``capacity``."""
    state = store.meta.state
    ids = np.arange(state.first_episode, state.next_episode, dtype=np.int64)
    steps = grow_layouts(ids, store.capacity.max_episodes,
                         capacity.max_episodes) if len(ids) else [capacity.max_episodes]
    rows = max(steps)
    for file in (*store.metas.values(), *store.table.values()):
        if file.rows < rows:
            file.grow(rows)
    for count in steps:
        old = store.capacity.max_episodes
        moved = ids[moves(ids, old, count)] if count != old else ids[:0]
        for episode_id in moved.tolist():
            src, dst = episode_id % old, episode_id % count
            for file in (*store.metas.values(), *(store.table[name] for name in fmt.TABLE if name != "id")):
                file.write_rows(dst, np.asarray(file.array()[src : src + 1]))
            store.table["id"].write_rows(dst, np.array([episode_id], dtype=fmt.TABLE["id"]))  # the id last
        if store.durable:
            for file in (*store.metas.values(), *store.table.values()):
                file.sync()
        step = capacity if count == capacity.max_episodes else replace(store.capacity, max_episodes=count)
        store._write_meta(replace(store.meta.state, commits=store.meta.state.commits + 1), capacity=step)
