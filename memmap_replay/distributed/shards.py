"""Many writers: one shard folder per actor, and readers that see all the shards as one store.

Each actor process writes its own store (``shard_folder(root, index)``), so writers never share a lock
or a file: nothing central on the hot path. A ``ShardSet`` opens every shard under a root (or any list
of store folders: the seed package's concat view) read-only, and offers:

- ``dataset(**view options)``: a ``ConcatView``, the shards' views one after the other (item numbers
  run through shard 0's items, then shard 1's, ...), for epoch-style reading with ``dataloader``;
- ``sampler(kind, **options)``: a ``ShardedSampler`` that draws across shards exactly as one store would:
  how many draws each shard serves is multinomial in its share of the positions (uniform) or of the
  priority mass (prioritized), each shard draws its share with its own sampler, and importance weights
  are normalised over every shard (by the smallest priority of all).

Keys of a sharded draw are ``shard_key * SHARD_STRIDE + shard``. ``refresh()`` picks up new shards and new
commits; a sharded sampler follows each shard's writer (another process) at each draw, re-reading a
shard's ``meta.json`` only when it changed.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..core.index import Sample
from ..views.dataset import BatchDataset, flag
from ..errors import InvalidDataError, OptionError, StoreNotFoundError
from ..core.folderio import inside
from ..core.format import META_FILE
from ..reading.build import build_dataloader, build_sampler, build_view, loader_view
from ..reading.entries import ShardReads
from ..reading.plan import ReadPlan, compose
from ..reading.table import DATASET, SAMPLER
from ..views.loader import ReplayDataLoader
from ..views.transforms import transform_option
from ..core.options import batch_size as batch_size_of, integer, renamed, short
from ..samplers.prioritized import PrioritizedSampler, as_numpy
from ..samplers.base import ReplaySampler, SamplerBase, checked_ahead, damaged
from ..core.store import EpisodeStore

__all__ = ["ShardSet", "ConcatView", "ShardedSampler", "ShardSample", "shard_folder", "SHARD_STRIDE", "shard_counts",
           "global_weights", "drawn_leaves"]

SHARD_STRIDE = 1 << 16  # keys of a sharded draw: shard key * SHARD_STRIDE + shard (so at most 65,536 shards)


def shard_counts(rng: np.random.Generator, masses: Any, n: int) -> np.ndarray:
    """How many of ``n`` draws each shard serves: multinomial in its share of ``masses`` (its positions, or
    its priority mass: the sum of ``priority ** alpha``). The first level of every sharded draw."""
    masses = np.asarray(masses, dtype=np.float64)
    total = masses.sum()
    if not total > 0:
        raise InvalidDataError("nothing to sample: no shard holds a position of this view yet; add episodes first")
    return rng.multinomial(n, masses / total)


def global_weights(leaves: np.ndarray, lowest: Any, beta: float) -> np.ndarray:
    """Importance weights of draws across shards, as one store would give them: ``(N P_i) ** -beta`` over
    its largest value with ``P_i = leaves_i / total mass``. ``N`` and the total cancel, leaving
    ``(lowest / leaves_i) ** beta`` (which cannot overflow); ``lowest``: the smallest leaf of all shards, or
    each shard's smallest leaf (``inf`` for an empty shard). float32."""
    return ((np.min(lowest) / leaves) ** beta).astype(np.float32)


def drawn_leaves(sampler: PrioritizedSampler, sample: Sample) -> np.ndarray:
    """The leaves (``priority ** alpha``) of a prioritized sampler's fresh draw."""
    return sampler.leaves_of(sample.keys)


def shard_folder(root: str | Path, index: int) -> Path:
    """The folder of writer ``index``'s shard under ``root``: give each actor process its own."""
    index = integer(index, "a shard index", low=0, high=10**6 - 1)
    return Path(root) / f"shard-{index:06d}"


class ShardSet(ShardReads):
    """Several stores read as one: the shards under ``root`` (folders holding a meta.json), or ``folders``.

    Parameters
    ----------
    root : str | Path | None
        A folder of shard folders (``shard_folder(root, k)``: one per writer process).
    folders : list, optional
        Store folders anywhere, instead of ``root``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from memmap_replay import ReplayBuffer, ShardSet, shard_folder
    >>> root = tempfile.mkdtemp()
    >>> for k in range(2):  # two writers, each its own folder (in practice, each its own process)
    ...     with ReplayBuffer(shard_folder(root, k), 10, 20, fields={"obs": ("float", 3)}) as shard:
    ...         shard.store_episode(obs=np.full((5, 3), k))
    0
    0
    >>> shards = ShardSet(root)
    >>> batch = shards.sampler("uniform", seed=0).batch(8)
    >>> batch["obs"].shape, sorted(set(batch["obs"][:, 0].tolist())) == [0.0, 1.0]
    (torch.Size([8, 3]), True)
    >>> shards.close()
    """

    def __init__(self, root: str | Path | None = None, *, folders: Any = None):
        if (root is None) == (folders is None):
            raise OptionError("pass either root= (a folder of shard folders) or folders= (a list of stores)")
        self.root = None if root is None else Path(root)
        self.listed = None if folders is None else [Path(folder) for folder in folders]
        self.stores: list[EpisodeStore] = []
        self.refresh()

    def _folders(self) -> list[Path]:
        if self.listed is not None:
            return self.listed
        root = cast(Path, self.root)  # (__init__ sets root or listed)
        if not root.is_dir():
            raise StoreNotFoundError(f"{root} is not a folder of shards; the writers create it")
        shards = sorted(path.parent for path in root.glob(f"*/{META_FILE}"))
        for shard in shards:  # a shard linked to a store elsewhere is never read as one of these
            if shard.is_symlink():
                inside(root, shard)
        return shards

    def refresh(self) -> bool:
        """Open shards that appeared since, and re-read every shard's meta.json; True if anything changed."""
        folders = self._folders()
        known = {store.folder: store for store in self.stores}
        changed = len(folders) != len(self.stores)
        stores = []
        for folder in folders:
            store = known.get(folder)
            if store is None:
                store = EpisodeStore.open(folder, "r")
            else:
                changed |= store.refresh()
            stores.append(store)
        if stores:
            schema = stores[0].schema
            for store in stores[1:]:
                if store.schema != schema:
                    raise InvalidDataError(f"every shard must have the same fields: {store.folder} differs from "
                                           f"{stores[0].folder}")
        self.stores = stores
        return changed

    def __len__(self) -> int:
        return len(self.stores)

    def __repr__(self) -> str:
        """Where the shards are, which are open, and their episodes and steps (as of the last refresh)."""
        where = f"root={str(self.root)!r}" if self.root is not None else \
            f"folders={_shortened([str(folder) for folder in cast('list[Path]', self.listed)])}"
        names = [store.folder.name if self.root is not None else str(store.folder) for store in self.stores]
        episodes = [store.num_episodes for store in self.stores]
        steps = sum(int(store.live_table().length.sum()) for store in self.stores)
        return (f"ShardSet({where}, {len(self.stores)} shards {_shortened(names)}, {sum(episodes)} episodes "
                f"{_shortened(episodes)}, {steps} steps)")

    @property
    def num_episodes(self) -> int:
        return sum(store.num_episodes for store in self.stores)

    def _require_shards(self) -> None:
        if not self.stores:
            raise InvalidDataError(f"no shards under {self.root}: no writer has committed an episode yet")

    # dataset(), dataloader() and sampler(), typed, come from ShardReads (reading/entries.py, generated from the
    # option table)

    def _read_dataset(self, plan: ReadPlan) -> "ConcatView":
        """The shards' views one after the other; ``transform`` applies to the batches of the ConcatView
        (gathered across shards), not to each shard's part."""
        options = dict(plan.view)
        transform = transform_option(options.pop("transform", None))
        self._require_shards()
        return ConcatView([build_view(store, options) for store in self.stores], transform=transform)

    def _read_dataloader(self, batch_size: int, plan: ReadPlan) -> ReplayDataLoader:
        view = loader_view(plan, lambda options: self._read_dataset(ReadPlan(DATASET, view=options)))
        return build_dataloader(view, batch_size, plan)

    def _read_sampler(self, kind: str, plan: ReadPlan) -> "ShardedSampler":
        self._require_shards()
        return ShardedSampler(self, kind, **plan.view, **plan.sampler)

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self.stores = []


def _shortened(items: list, most: int = 6) -> str:
    """A list's repr, with the middle left out past ``most`` items."""
    if len(items) <= most:
        return repr(items)
    half = most // 2
    return "[" + ", ".join(map(repr, items[:half])) + ", ..., " + ", ".join(map(repr, items[-half:])) + "]"


def _merge(parts: list[dict], order: np.ndarray | None) -> dict[str, torch.Tensor]:
    """One batch of the shards' batches: concatenated (whole trajectories of different lengths zero-padded
    to the longest), then put back into request order."""
    if len(parts) == 1 and order is None:
        return parts[0]
    batch = {name: torch.cat(_padded([part[name] for part in parts])) for name in parts[0]}
    if order is not None:
        index = torch.from_numpy(order)
        batch = {name: value[index] for name, value in batch.items()}
    return batch


def _padded(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors zero-padded at the end of each axis but the first to the largest size of that axis."""
    shape = [max(sizes) for sizes in zip(*(value.shape[1:] for value in values))]
    if all(list(value.shape[1:]) == shape for value in values):
        return values
    padded = []
    for value in values:
        out = value.new_zeros((len(value), *shape))
        corner = (slice(None), *(slice(0, size) for size in value.shape[1:]))
        out[corner] = value
        padded.append(out)
    return padded


class ConcatView(BatchDataset):
    """Views of several shards as one Dataset: item numbers run through each shard's items in turn.
    ``transform`` (``views.transforms``) applies to each whole batch, after the shards' parts are merged."""

    def __init__(self, views: list, *, transform: Any = None):
        self.views = views
        self.transform = transform_option(transform)

    @property
    def ends(self) -> np.ndarray:
        """Where each shard's items end (computed anew: copies made by ``with_transform`` share the views)."""
        return np.cumsum([len(view) for view in self.views])

    def __len__(self) -> int:
        return sum(len(view) for view in self.views)

    def copied(self) -> None:
        self.views = list(self.views)

    def refresh(self, *, reread: bool = True) -> bool:
        """Every shard's view takes in its store's commits and evictions; True if any changed."""
        changed = False
        for view in self.views:
            changed |= view.refresh(reread=reread)
        return changed

    def __getitems__(self, items: Any) -> dict[str, torch.Tensor]:
        if isinstance(items, ShardSample):
            return self.sample_batch(items)
        items = np.asarray(items, dtype=np.int64)
        lengths = np.array([len(view) for view in self.views], dtype=np.int64)
        ends = np.cumsum(lengths)  # (each shard's length once per batch)
        size = int(ends[-1]) if len(ends) else 0
        if items.ndim != 1 or (items.size and (items.min() < 0 or items.max() >= size)):
            raise IndexError(f"item indices must be a 1-d array in [0, {size}) (got {items!r:.80})")
        shard = np.searchsorted(ends, items, side="right")
        starts = ends - lengths
        parts, where = [], []
        for index in np.unique(shard):
            chosen = np.flatnonzero(shard == index)
            parts.append(self.views[index].__getitems__(items[chosen] - starts[index]))
            where.append(chosen)
        return self.transformed(_merge(parts, np.argsort(np.concatenate(where), kind="stable") if len(parts) > 1
                                       else None))

    def prefetch(self, items: Any) -> bool:
        """Advise the rows of a sharded draw that will be gathered later (each shard's view its part)."""
        if not isinstance(items, ShardSample):
            return False  # item numbers: each shard's view advises its part when it gathers
        return any([self.views[shard].prefetch(part) for shard, part in items.parts])

    def cancel_prefetch(self, count: int) -> None:
        for view in self.views:
            view.cancel_prefetch(count)

    def sample_batch(self, sample: "ShardSample") -> dict[str, torch.Tensor]:
        parts = [self.views[shard].__getitems__(part) for shard, part in sample.parts]
        for (shard, _), batch in zip(sample.parts, parts):
            batch["_key"] = batch["_key"] * SHARD_STRIDE + shard
        batch = _merge(parts, None)
        if sample.weights is not None:
            batch["_weight"] = torch.from_numpy(sample.weights)
        return self.transformed(batch)


class ShardSample:
    """A sharded draw: (shard, that shard's Sample) parts, and weights normalised over all shards."""

    __slots__ = ("parts", "weights", "keys")

    def __init__(self, parts: list[tuple[int, Sample]], weights: np.ndarray | None):
        self.parts, self.weights = parts, weights
        self.keys = np.concatenate([part.keys * SHARD_STRIDE + shard for shard, part in parts])

    def __len__(self) -> int:
        return len(self.keys)


class ShardedSampler(SamplerBase):
    """A sampler over a ShardSet: per-shard samplers of one kind, drawn from as if they were one store."""

    def __init__(self, shards: ShardSet, kind: str = "uniform", *, seed: int | None = None, follow: bool = True,
                 draw_ahead: int = 0, prefetch: int | None = None, **options: Any):
        if options.get("replacement") is False:
            raise OptionError("a sharded sampler draws with replacement; for epochs use ShardSet.dataloader")
        draw_ahead = renamed("prefetch", prefetch, "draw_ahead", draw_ahead, 0, "a ShardedSampler")
        self.draw_ahead = integer(draw_ahead, "draw_ahead", low=0)  # this sampler's own
        self.transform = transform_option(options.pop("transform", None))  # the ConcatView's, not each shard's
        self.shards, self.kind, self.options = shards, kind, dict(options, follow=False, persist=False)
        if kind == "uniform":
            self.options.pop("persist")
        # the split across shards is each rank's own too (rank 0's is the stream a single learner gets)
        self._seed_stream(seed, options.get("rank"), options.get("world_size"), 1 << 20)
        self.follow = flag(follow, "follow")
        self.draws = 0
        self.samplers: list[ReplaySampler] = []
        self._stamps: list[tuple] = []
        self._open_new_shards()

    def _open_new_shards(self) -> None:
        for index in range(len(self.samplers), len(self.shards.stores)):
            store = self.shards.stores[index]
            plan = compose(SAMPLER, dict(self.options, seed=self.seed + index, allow_empty=True),
                           where="ShardSet.sampler")
            self.samplers.append(build_sampler(store, self.kind, plan))
            self._stamps.append(store.meta_stamp())
        self.view = ConcatView([sampler.view for sampler in self.samplers], transform=self.transform)

    def sync(self) -> bool:
        """New shards, and each shard's new commits (its meta.json re-read only when it changed); True if
        anything changed."""
        changed = False
        if self.shards.listed is None and len(self.shards._folders()) != len(self.shards.stores):
            self.shards.refresh()
            self._open_new_shards()
            changed = True
        for index, sampler in enumerate(self.samplers):
            stamp = sampler.view.store.meta_stamp()
            if stamp != self._stamps[index]:
                self._stamps[index] = stamp
                changed |= sampler.refresh()
        return changed

    def refresh(self) -> bool:
        """New shards, and every shard's meta.json read again; True if anything changed."""
        changed = self.sync()
        for sampler in self.samplers:
            changed |= sampler.refresh()
        return changed

    def _masses(self) -> np.ndarray:
        if isinstance(self.samplers[0], PrioritizedSampler):
            prioritized = cast("list[PrioritizedSampler]", self.samplers)  # (every shard's sampler is one kind)
            return np.array([sampler.tree.total if len(sampler.view) else 0.0 for sampler in prioritized])
        return np.array([len(sampler.view) for sampler in self.samplers], dtype=np.float64)

    def sample(self, batch_size: int) -> ShardSample:
        batch_size = batch_size_of(batch_size)
        if self.follow:
            self.sync()
        counts = shard_counts(self.rng, self._masses(), batch_size)
        parts = []
        for shard, count in enumerate(counts):
            if count:
                sampler = self.samplers[shard]
                sampler.draws = self.draws  # one beta schedule for every shard: this sampler's draws
                parts.append((shard, sampler.sample(int(count))))
        weights = None
        if isinstance(self.samplers[0], PrioritizedSampler):
            prioritized = cast("list[PrioritizedSampler]", self.samplers)  # (every shard's sampler is one kind)
            leaves = np.concatenate([drawn_leaves(prioritized[shard], part) for shard, part in parts])
            lowest = [sampler.tree.min for sampler in prioritized if len(sampler.view)]
            weights = global_weights(leaves, lowest, self.samplers[0].beta)
        self.draws += 1
        return ShardSample(parts, weights)

    def update_priorities(self, keys: Any, priorities: Any) -> int:
        """Priorities for a sharded batch's ``_key`` (each shard's part goes to its sampler)."""
        keys, priorities = as_numpy(keys), as_numpy(priorities)
        if keys.dtype.kind not in "iu" or keys.ndim != 1 or priorities.shape[:1] != keys.shape:
            raise InvalidDataError(f"keys must be a batch's '_key' and priorities one per key (got {keys.shape}, "
                                   f"{priorities.shape})")
        shard, local = keys % SHARD_STRIDE, keys // SHARD_STRIDE
        if shard.size and shard.max() >= len(self.samplers):
            raise InvalidDataError(f"keys must be a sharded batch's '_key': some name shard {shard.max()} of "
                                   f"{len(self.samplers)}")
        applied = 0
        # (a prioritized kind's: a uniform one's samplers have no update_priorities, and raise AttributeError)
        prioritized = cast("list[PrioritizedSampler]", self.samplers)
        for index in np.unique(shard):
            chosen = shard == index
            applied += prioritized[int(index)].update_priorities(local[chosen], priorities[chosen])
        return applied

    def state_dict(self) -> dict:
        state = {"type": "ShardedSampler", "seed": self.seed, "rng": self.rng.bit_generator.state, "draws": self.draws,
                 "shards": [sampler.state_dict() for sampler in self.samplers]}
        if self._ahead:  # draws made ahead (draw_ahead=): they moved the generators, so a resume serves them first
            ahead = cast("deque[tuple[int, ShardSample]]", self._ahead)  # (SamplerBase types them as a store's)
            state["ahead"] = [[size,
                               [[shard, part.keys.tolist(), _listed(part.weights)] for shard, part in sample.parts],
                               _listed(sample.weights)] for size, sample in ahead]
        return state

    def _checked_ahead_draws(self, entries: Any) -> list[tuple[int, ShardSample]]:
        """The draws made ahead that a state_dict lists: [batch size, [[shard, keys, weights], ...], weights]."""
        if not isinstance(entries, list):
            raise InvalidDataError(f"'ahead' must be a list (got {short(entries)})")
        ahead = []
        for size, parts, weights in entries:
            shards = [integer(part[0], "shard", low=0, high=len(self.samplers) - 1) for part in parts]
            samples = checked_ahead([[len(keys), keys, part_weights] for _, keys, part_weights in parts])
            sample = ShardSample([(shard, part) for shard, (_, part) in zip(shards, samples)], None)
            _, checked = checked_ahead([[size, sample.keys.tolist(), weights]])[0]  # size and weights
            sample.weights = checked.weights
            ahead.append((int(size), sample))
        return ahead

    def load_state_dict(self, state: dict) -> None:
        """Load a ``state_dict()`` (the shards' states in order; shards opened since keep theirs). Every value is
        checked first, so a refused state changes nothing."""
        if not isinstance(state, dict) or state.get("type") != "ShardedSampler":
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise InvalidDataError(f"this is a ShardedSampler's state_dict()? it holds a {found!r}")
        try:
            generator = type(self.rng.bit_generator)()  # a scratch generator: the state must load into one
            generator.state = state["rng"]
            draws = integer(state.get("draws", 0), "draws", low=0)
            shards = state["shards"]
            if not isinstance(shards, list) or len(shards) > len(self.samplers):
                raise InvalidDataError(f"shards must be a list of at most {len(self.samplers)} shard states (one per "
                                       f"shard of this sampler)")
            for sampler, shard_state in zip(self.samplers, shards):
                if not isinstance(shard_state, dict) or shard_state.get("type") != type(sampler).__name__:
                    raise InvalidDataError(f"each shard's state must be a {type(sampler).__name__}'s state_dict()")
            values = [sampler._checked_state(shard_state) for sampler, shard_state in zip(self.samplers, shards)]
            # (SamplerBase types its draws ahead as what a store's sampler returns; a sharded one's are ShardSamples)
            ahead: list[tuple[int, Any]] = self._checked_ahead_draws(state.get("ahead", []))
        except (KeyError, TypeError, ValueError, OverflowError) as error:  # (InvalidDataError is a ValueError)
            raise damaged(error) from None
        self._drop_ahead()
        self._ahead = deque(ahead)
        self.rng.bit_generator.state = generator.state
        self.draws = draws
        for sampler, shard_values in zip(self.samplers, values):
            sampler._apply_state(shard_values)


def _listed(values: np.ndarray | None) -> list | None:
    return None if values is None else values.tolist()
