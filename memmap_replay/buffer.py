"""ReplayBuffer: the native front door over an EpisodeStore and its episode writers.

This module's ``ReplayBuffer`` is the native facade: episodes are written inside ``one_episode`` /
``begin_episode`` ... ``end_episode``, ``batched_episode`` or ``store_episode``. ``from memmap_replay import
ReplayBuffer`` gives its subclass ``memmap_replay.compat.ReplayBuffer``, the drop-in for
``from memmap_replay_buffer import ReplayBuffer``: the same buffer plus the rest of memmap-replay-buffer 0.2.3's
surface (its flat loop, ``store_batch`` outside ``batched_episode``, ``store_datapoint`` and siblings,
``data``/``meta_data``, the image helpers, its constructor's ``flush_every_store_step``). Differences from 0.2.3,
on purpose: opening an existing folder never wipes it unless ``overwrite=True``; an exception inside
``one_episode`` discards that episode; an episode is stored when it commits (a crash or ``close()`` loses only the
open one); ``store`` returns nothing; ``len(buffer)`` and ``episode_lens`` count committed episodes only.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, cast

import numpy as np

from .errors import BufferFullError, EpisodeStateError, OptionError, SchemaError
from .core.codecs import require_codecs
from .core.episodes import Episode, EpisodeList, end_names
from .core.format import Capacity
from .core.schema import Schema
from .core.store import EpisodeStore
from .core.options import choice, flag, positive_int
from .core.update import plan_update
from .core.vector import VectorEpisodeWriter
from .core.writer import EpisodeWriter, StagingBuffer, segments, whole_episode
from .reading.entries import BufferReads
from .sharing.inplace import BufferEdits

if TYPE_CHECKING:
    from .samplers.base import ReplaySampler

LONG_EPISODES = ("error", "split")

__all__ = ["ReplayBuffer", "EpisodeMeta", "Episode", "EpisodeList"]


class EpisodeMeta(dict):
    """What ``one_episode`` yields: a dict of the episode's meta values (fill it in inside the block),
    plus ``set_end('terminated')`` / ``set_end('truncated', final={...})`` to say how the episode ended."""

    def __init__(self, writer: EpisodeWriter):
        super().__init__(writer.meta)
        self._writer = writer

    def set_end(self, end: str | None, final: Mapping[str, Any] | None = None) -> None:
        self._writer.set_end(end, final)


class ReplayBuffer(BufferReads, BufferEdits):
    """A folder of memory-mapped episodes (the native facade; ``memmap_replay.ReplayBuffer`` adds 0.2.3's methods).

    Parameters
    ----------
    folder : str | Path
        The store's folder (created, or opened when it holds a store).
    max_episodes, max_timesteps : int
        Episode slots, and steps per episode.
    fields, meta_fields : Mapping[str, Any]
        Name -> spec, e.g. ``dict(state=('float', (3, 16, 16), 0.), action=('int', 2))``; meta fields hold one
        value per episode.
    circular : bool, default False
        Evict whole episodes, oldest first, when episode slots or rows run out.
    overwrite : bool, default False
        Replace a store already in the folder (only the store's own files are removed).
    read_only : bool, default False
        Open for reading only (never takes the writer lock).
    max_steps : int, optional
        Row capacity (default ``max_episodes * (max_timesteps + 1)``); disk use grows with the rows actually
        stored, not with the capacity.
    durable : bool, default False
        Fsync data and folder on every commit (survives power loss, not only a crash).
    track_stats : bool, default True
        Keep running statistics of the small numeric fields as episodes commit (``stats()``); False leaves the
        catch-up to whoever asks next.
    long_episodes : str, default 'error'
        What a step past ``max_timesteps`` does: ``'error'`` (an ``InvalidDataError``), or ``'split'``: the
        episode goes on in a new segment linked to the one before (``Episode.continues``,
        ``buffer.episodes(join_segments=True)``).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from memmap_replay import ReplayBuffer
    >>> buffer = ReplayBuffer(tempfile.mkdtemp(), max_episodes=100, max_timesteps=50,
    ...                       fields={"obs": ("float", 4), "action": "int", "reward": "float"},
    ...                       meta_fields={"task": "int"})
    >>> with buffer.one_episode(task=3):
    ...     for t in range(10):
    ...         buffer.store(obs=np.random.rand(4), action=t % 2, reward=1.0)
    >>> buffer.num_episodes, buffer.num_steps
    (1, 10)
    >>> next(iter(buffer.dataloader(4, timestep_level=True)))["obs"].shape
    torch.Size([4, 4])
    """

    def __init__(self, folder: str | Path, max_episodes: int | None = None, max_timesteps: int | None = None,
                 fields: Mapping[str, Any] | None = None, meta_fields: Mapping[str, Any] | None = None,
                 circular: bool = False, overwrite: bool = False, read_only: bool = False, *,
                 max_steps: int | None = None, durable: bool = False, track_stats: bool = True,
                 long_episodes: str = "error", _store: EpisodeStore | None = None):
        for name, value in (("overwrite", overwrite), ("read_only", read_only), ("durable", durable),
                            ("track_stats", track_stats)):
            flag(value, name)
        if _store is None:
            if read_only and overwrite:
                raise OptionError("read_only=True and overwrite=True contradict each other; pass one of them")
            if read_only:
                _store = EpisodeStore.open(folder, "r", durable=durable)
            else:
                schema, capacity = self._spec(max_episodes, max_timesteps, fields, meta_fields, circular, max_steps)
                require_codecs(schema)  # before a file is made
                _store = EpisodeStore.open(folder, "w" if overwrite else "a", schema=schema, capacity=capacity,
                                           durable=durable)
        try:
            require_codecs(_store.schema)  # a store whose fields need a codec's package is refused without it
        except BaseException:
            _store.close()
            raise
        self._store = _store
        _store.track_stats = track_stats
        self.long_episodes: str = choice(long_episodes, "long_episodes", LONG_EPISODES)
        self.folder = _store.folder
        self.read_only = not _store.writable
        self._staging: StagingBuffer | None = None
        self._episode: EpisodeWriter | None = None
        self._vector: VectorEpisodeWriter | None = None
        self._sampler: ReplaySampler | None = None  # buffer.sample()'s default sampler, made at its first call

    @staticmethod
    def _spec(max_episodes, max_timesteps, fields, meta_fields, circular, max_steps) -> tuple[Schema, Capacity]:
        if fields is None:
            raise SchemaError("fields are required to create a store, e.g. fields=dict(state=('float', 4)); "
                              "to open an existing folder use ReplayBuffer.from_folder(folder)")
        max_episodes = positive_int(max_episodes, "max_episodes")
        max_timesteps = positive_int(max_timesteps, "max_timesteps")
        if max_steps is None:
            max_steps = max_episodes * (max_timesteps + 1)
        if positive_int(max_steps, "max_steps") < max_timesteps + 1:
            raise OptionError(f"max_steps must be at least max_timesteps + 1 = {max_timesteps + 1} (got {max_steps})")
        circular = flag(circular, "circular")
        return Schema.parse(fields, meta_fields), Capacity(max_episodes, max_timesteps, max_steps, circular)

    @classmethod
    def from_folder(cls, folder: str | Path, read_only: bool = False, *, durable: bool = False,
                    track_stats: bool = True, long_episodes: str = "error") -> "ReplayBuffer":
        """Open an existing store; read-only opens never take the writer lock.

        Examples
        --------
        >>> import numpy as np, tempfile
        >>> from memmap_replay import ReplayBuffer
        >>> folder = tempfile.mkdtemp()
        >>> with ReplayBuffer(folder, 10, 20, fields={"obs": ("float", 2)}) as writer:
        ...     writer.store_episode(obs=np.zeros((5, 2)))
        0
        >>> reader = ReplayBuffer.from_folder(folder, read_only=True)  # in this or any other process
        >>> reader.num_episodes, reader.num_steps
        (1, 5)
        """
        for name, value in (("read_only", read_only), ("durable", durable), ("track_stats", track_stats)):
            flag(value, name)
        return cls(folder, _store=EpisodeStore.open(folder, "r" if read_only else "r+", durable=durable),
                   track_stats=track_stats, long_episodes=long_episodes)

    # ---- description ---------------------------------------------------------------------------------

    @property
    def episode_store(self) -> EpisodeStore:
        """The underlying numpy EpisodeStore (files, episode table, commits)."""
        return self._store

    @property
    def schema(self) -> Schema:
        return self._store.schema

    @property
    def max_episodes(self) -> int:
        return self._store.capacity.max_episodes

    @property
    def max_timesteps(self) -> int:
        return self._store.capacity.max_timesteps

    @property
    def max_steps(self) -> int:
        return self._store.capacity.max_steps

    @property
    def circular(self) -> bool:
        return self._store.capacity.circular

    @property
    def fieldnames(self) -> tuple[str, ...]:
        return tuple(self.schema.fields)

    @property
    def meta_fieldnames(self) -> tuple[str, ...]:
        return tuple(self.schema.meta_fields)

    @property
    def num_episodes(self) -> int:
        """Committed (live) episodes."""
        return self._store.num_episodes

    @property
    def num_steps(self) -> int:
        """Timesteps in the committed episodes."""
        return int(self._store.live_table().length.sum())

    @property
    def episode_lens(self) -> np.ndarray:
        """Length per slot (max_episodes,), 0 for slots without a live episode (as in the seed package)."""
        lens = np.zeros(self.max_episodes, dtype=np.int64)
        table = self._store.live_table()
        lens[table.slots] = table.length
        return lens

    @property
    def episode_ids(self) -> np.ndarray:
        """Ids of the live episodes, oldest first (what ``delete_episodes``, ``trim`` and ``relabel`` take)."""
        return self._store.live_table().ids

    @property
    def live_episodes(self) -> np.ndarray:
        """Slots of the live episodes, oldest first."""
        return self._store.live_table().slots

    @property
    def ends(self) -> np.ndarray:
        """How each live episode ended, oldest first: a numpy str array of 'terminated', 'truncated', or ''
        where no end was recorded (``buffer.ends == 'terminated'`` is a mask over the live episodes)."""
        return end_names(self._store.live_table().end)

    def __len__(self) -> int:
        return self.num_episodes

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writable"
        return (f"ReplayBuffer({str(self.folder)!r}, {self.num_episodes} episodes, {self.num_steps} steps, "
                f"fields={list(self.fieldnames)}, meta_fields={list(self.meta_fieldnames)}, {mode})")

    def refresh(self) -> bool:
        """Pick up episodes committed by a writer in another process; True if anything changed."""
        return self._store.refresh()

    # ---- writing ---------------------------------------------------------------------------------------

    @property
    def _split(self) -> bool:
        return self.long_episodes == "split"

    def _check_idle(self, action: str, *, leaves_open: bool = False) -> None:
        """Refuse ``action`` while an episode is open. ``leaves_open``: the action leaves an open episode as it is
        (update, grow); refused here all the same, the 0.2.3 subclass allows it beside its flat loop's episode."""
        self._store.require_writable(action)
        if self._episode is not None or self._vector is not None:
            raise EpisodeStateError(
                f"cannot {action} while an episode is open; finish the current one_episode/batched_episode "
                f"block (or call end_episode()) first"
            )

    def _staging_for_one(self) -> StagingBuffer:
        if self._staging is None:
            self._staging = StagingBuffer(self.schema, 1, self.max_timesteps)
        return self._staging

    def begin_episode(self, **meta: Any) -> EpisodeMeta:
        """Open an episode without a ``with`` block; ``end_episode()`` commits it."""
        self._check_idle("begin an episode")
        self._episode = EpisodeWriter(self._store, self._staging_for_one(), meta, split=self._split)
        return EpisodeMeta(self._episode)

    @contextmanager
    def one_episode(self, **meta: Any) -> Iterator[EpisodeMeta]:
        """``with buffer.one_episode(task_id=1) as episode: buffer.store(...)``; commits on a clean exit,
        discards the episode if the block raises (with ``long_episodes='split'``, the segments it committed stay).
        ``episode`` is a dict of meta values to fill in.

        Examples
        --------
        >>> import tempfile
        >>> from memmap_replay import ReplayBuffer
        >>> buffer = ReplayBuffer(tempfile.mkdtemp(), 10, 20, fields={"obs": "float"}, meta_fields={"ret": "float"})
        >>> with buffer.one_episode() as episode:
        ...     for t in range(3):
        ...         buffer.store(obs=t)
        ...     episode["ret"] = 2.5  # known only at the end
        >>> try:
        ...     with buffer.one_episode():
        ...         buffer.store(obs=0.0)
        ...         raise RuntimeError("the env crashed")
        ... except RuntimeError:
        ...     pass
        >>> buffer.num_episodes, float(buffer.episode(0).meta["ret"])
        (1, 2.5)
        """
        handle = self.begin_episode(**meta)
        try:
            yield handle
        except BaseException:
            self._episode = None
            raise
        # (the writer begin_episode opened above)
        writer, self._episode = cast(EpisodeWriter, self._episode), None
        writer.meta.update(handle)
        writer.commit()

    def store(self, **step: Any) -> None:
        """Append one timestep to the open episode (``one_episode`` or ``begin_episode``); fields not given take
        their default."""
        episode = self._episode
        if episode is None:
            raise EpisodeStateError(
                "store() needs an open episode of its own, and batched episodes are open: inside batched_episode use "
                "store_batch" if self._vector is not None else
                "store() needs an open episode: `with buffer.one_episode(): buffer.store(...)`, or begin_episode() ... "
                "end_episode() (memmap_replay.ReplayBuffer, 0.2.3's drop-in, opens one itself: its flat loop)")
        episode.store(step)

    def set_episode_end(self, end: str | None, final: Mapping[str, Any] | None = None) -> None:
        """How the open episode ended: 'terminated' (no bootstrap) or 'truncated' (time limit), and
        optionally its final observation (the one after the last action), e.g. ``final=dict(state=obs)``."""
        if self._episode is None:
            raise EpisodeStateError("set_episode_end() needs an open episode (one_episode or begin_episode)")
        self._episode.set_end(end, final)

    def end_episode(self, end: str | None = None, final: Mapping[str, Any] | None = None) -> int | None:
        """Commit the episode opened with ``begin_episode`` and leave none open; returns its slot."""
        self._store.require_writable("end an episode")
        if self._episode is None:
            raise EpisodeStateError("no episode is open: call begin_episode() first")
        if end is not None or final is not None:
            self._episode.set_end(end, final)  # checked first: a bad end or final keeps the episode open
        writer, self._episode = self._episode, None
        return writer.commit()

    def store_episode(self, *, end: str | None = None, final: Mapping[str, Any] | None = None, **arrays: Any) -> int:
        """Store a whole episode at once: step fields as (T, ...) arrays, meta fields alongside; returns its id.

        ``end`` is 'terminated', 'truncated' or None; ``final`` the observation after the last action.

        Examples
        --------
        >>> import numpy as np, tempfile
        >>> from memmap_replay import ReplayBuffer
        >>> buffer = ReplayBuffer(tempfile.mkdtemp(), 10, 20, fields={"obs": ("float", 3), "reward": "float"},
        ...                       meta_fields={"seed": "int"})
        >>> buffer.store_episode(obs=np.zeros((6, 3)), reward=np.ones(6), seed=7, end="terminated",
        ...                      final={"obs": np.ones(3)})
        0
        >>> buffer.dataset(transitions=True, gamma=0.99)[5]["discount"].item()  # the terminal step
        0.0
        """
        self._check_idle("store an episode")
        episode = whole_episode(self.schema, self.max_timesteps, arrays, end=end, final=final, split=self._split)
        parts = segments(episode, self.max_timesteps)
        try:
            return self._store.commit(parts)[-1]
        except BufferFullError as error:
            if len(parts) == 1:
                raise
            rows = sum(part.num_rows for part in parts)
            raise BufferFullError(f"an episode of {episode.length} steps is stored as {len(parts)} linked segments "
                                  f"of at most max_timesteps={self.max_timesteps} steps, needing {rows} rows and "
                                  f"{len(parts)} episode slots at once: {error}") from None

    def vector_writer(self, num_envs: int, **meta: Any) -> VectorEpisodeWriter:
        """A writer for ``num_envs`` environments stepping together (gymnasium VectorEnv style)."""
        self._store.require_writable("write")
        return VectorEpisodeWriter(self._store, num_envs, self.max_timesteps, split=self._split, **meta)

    @contextmanager
    def batched_episode(self, batch_size: int, **meta: Any) -> Iterator[VectorEpisodeWriter]:
        """``batch_size`` episodes written in lockstep with ``store_batch``; all commit on a clean exit."""
        self._check_idle("begin batched episodes")
        self._vector = VectorEpisodeWriter(self._store, batch_size, self.max_timesteps, split=self._split, **meta)
        try:
            yield self._vector
        except BaseException:
            self._vector = None
            raise
        writer, self._vector = self._vector, None
        writer.commit_all()

    def store_batch(self, **steps: Any) -> None:
        """One timestep for each episode of the open ``batched_episode`` block (values with a leading batch axis)."""
        self._batch("store_batch").store(**steps)

    def store_meta_batch(self, **meta: Any) -> None:
        """Meta values, one per episode of the open ``batched_episode`` block."""
        self._batch("store_meta_batch").set_meta(**meta)

    def _batch(self, action: str) -> VectorEpisodeWriter:
        if self._vector is None:
            raise EpisodeStateError(f"{action}() needs an open batched_episode block: `with "
                                    f"buffer.batched_episode(n): buffer.{action}(...)`")
        return self._vector

    def update(self, indices: Any = None, **data: Any) -> None:
        """Overwrite stored data of committed episodes in place (not crash-atomic).

        ``indices`` are episode slots (int, list, array or slice; None = all live episodes). Step fields
        take (len(indices), T, *shape) values (T up to the shortest selected episode's length), or one
        value (scalar or one row) for every step; meta fields take (len(indices), *shape) or one value.
        With one int index (the seed package's form) values come without the episode axis. Every value
        is checked before anything is written. Refused while an episode is open (0.2.3's flat loop, in
        ``memmap_replay.ReplayBuffer``, keeps its open episode as it is)."""
        self._check_idle("update", leaves_open=True)
        for write, position, rows in plan_update(self._store, indices, data):
            write(position, rows)

    def grow(self, *, max_episodes: int | None = None, max_steps: int | None = None,
             max_timesteps: int | None = None, circular: bool | None = None) -> "ReplayBuffer":
        """Raise the store's capacity in place, keeping every episode (None keeps a value): more episode
        slots, more rows, longer episodes, or ``circular=True`` to turn it into a ring. Values never shrink,
        and a ring stays a ring. Crash-safe: killed at any point, the folder reopens with every committed
        episode, with the old capacity or the new one. Episode ids stay; slots (``live_episodes``) may move.
        Samplers and datasets made before keep the old capacity: make new ones. Returns the buffer. An open
        episode must end first (but 0.2.3's flat loop's, in ``memmap_replay.ReplayBuffer``: it stays open, so that
        a full buffer can grow and then take it)."""
        self._check_idle("grow the store", leaves_open=True)
        self._store.grow(max_episodes=max_episodes, max_steps=max_steps, max_timesteps=max_timesteps,
                         circular=circular)
        self._staging = None  # sized by max_timesteps
        self._sampler = None
        return self

    def clear(self) -> None:
        """Remove every episode."""
        self._check_idle("clear")
        self._store.clear()

    def flush(self) -> None:
        """fsync everything committed so far (commits already survive a process crash without it)."""
        if not self.read_only:
            self._store.sync()

    def close(self) -> None:
        """Release the files and the writer lock; an open episode is discarded."""
        self._episode = self._vector = None
        self._store.close()

    # ---- training state ----------------------------------------------------------------------------------

    def save_training_state(self, name: str, state: Mapping[str, Any]) -> None:
        """Save a run's place in the folder, crash-safely, as ``training/<name>.json`` (``core/training.py``).

        Parameters
        ----------
        name : str
            1 to 64 letters, digits, '_' or '-'; a save replaces the last one of that name.
        state : dict
            Objects with ``state_dict()`` (loaders, samplers, a ``MixedSampler``, a ``RateLimiter``), saved
            through it, and plain JSON values (step counters, ...). The priorities of every prioritized sampler
            among them are saved with it, in the same commit: a kill at any instant leaves the previous state or
            this one, each with its priorities. A buffer opened read-only saves too (a trainer beside a writer
            in another process): only ``training/`` is written, never the store's data.
        """
        from .samplers.training import save_training_state

        save_training_state(self.folder, name, state, store_id=self._store.meta.store_id)

    def load_training_state(self, name: str) -> dict[str, Any]:
        """The state saved by ``save_training_state(name, ...)``: each object's ``state_dict()`` (give it to
        the ``load_state_dict`` of the same object made again with the same arguments) and the plain values.

        Parameters
        ----------
        name : str
            The name it was saved under.

        Returns
        -------
        dict
            As saved; a prioritized sampler's state carries its priorities (a ``PrioritySnapshot``).
        """
        from .samplers.training import load_training_state

        capacity = self._store.capacity
        return load_training_state(self.folder, name, store_id=self._store.meta.store_id,
                                   array_bytes=8 * max(capacity.max_steps + 1, capacity.max_episodes) + 4096)

    def __enter__(self) -> "ReplayBuffer":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- reading -----------------------------------------------------------------------------------------

    # dataset(), dataloader() and sampler(), typed, come from BufferReads (reading/entries.py, generated from the
    # option table); they compose a plan and build it here

    def _read_dataset(self, plan: Any) -> Any:
        from .reading.build import build_view

        return build_view(self._store, plan.view)

    def _read_dataloader(self, batch_size: int, plan: Any) -> Any:
        from .reading.build import build_dataloader, build_view, loader_view

        view = loader_view(plan, lambda options: build_view(self._store, options, caller="a dataloader"))
        return build_dataloader(view, batch_size, plan)

    def _read_sampler(self, kind: str, plan: Any) -> Any:
        from .reading.build import build_sampler

        return build_sampler(self._store, kind, plan)

    def sample(self, batch_size: int, sampler: Any = None) -> dict:
        """A batch of ``batch_size`` draws from ``sampler`` (default: uniform single timesteps with
        replacement, every field, made at the first call), with their ``_key`` (and ``_weight``)."""
        if sampler is None:
            if self._sampler is None:
                self._sampler = self.sampler("uniform")
            sampler = self._sampler
        if not hasattr(sampler, "batch") or not hasattr(sampler, "sample"):
            raise OptionError(f"sampler must be a sampler, e.g. buffer.sampler('prioritized') (got {sampler!r})")
        return sampler.batch(batch_size)

    def episodes(self, *, filter_meta: Mapping[str, Any] | None = None, fields: Any = None,
                 meta_fields: Any = None, join_segments: bool = False) -> EpisodeList:
        """The live episodes now (oldest first; those whose meta values equal ``filter_meta``), read one at a
        time when indexed or iterated: ``Episode`` objects holding copies of their rows (``fields`` and
        ``meta_fields`` choose what they read; default all). ``join_segments``: the linked segments of a long
        episode (``long_episodes='split'``) as one. See ``memmap_replay.core.episodes``."""
        return EpisodeList(self._store, filter_meta=filter_meta, fields=fields, meta_fields=meta_fields,
                           join_segments=join_segments)

    def episode(self, index: int, *, fields: Any = None, meta_fields: Any = None,
                join_segments: bool = False) -> Episode:
        """The live episode at ``index`` (0 the oldest, -1 the newest); ``IndexRangeError`` past either end."""
        return self.episodes(fields=fields, meta_fields=meta_fields, join_segments=join_segments)[index]

    def iterate_episodes(self, *, filter_meta: Mapping[str, Any] | None = None, fields: Any = None,
                         meta_fields: Any = None, join_segments: bool = False) -> Iterator[Episode]:
        """The live episodes one at a time, oldest first (``iter(buffer.episodes(...))``)."""
        return iter(self.episodes(filter_meta=filter_meta, fields=fields, meta_fields=meta_fields,
                                  join_segments=join_segments))

    def sample_episodes(self, n: int, *, seed: int | None = None, replacement: bool = False,
                        filter_meta: Mapping[str, Any] | None = None, fields: Any = None,
                        meta_fields: Any = None, join_segments: bool = False) -> list[Episode]:
        """``n`` live episodes drawn uniformly, without replacement unless ``replacement=True``."""
        episodes = self.episodes(filter_meta=filter_meta, fields=fields, meta_fields=meta_fields,
                                 join_segments=join_segments)
        return episodes.sample(n, seed=seed, replacement=replacement)

    def get_all_data(self, fields: tuple[str, ...] | None = None, meta_fields: tuple[str, ...] | None = None,
                     device: Any = None) -> dict:
        """Every live episode as torch tensors, padded to the longest: step fields (N, T_max, ...), meta
        fields (N, ...), and ``episode_lens`` (N,), always. Oldest episode first. ``fields`` and
        ``meta_fields`` take a name or a tuple of names; each left out (None) means all of its kind, whatever
        the other selects (``meta_fields=()`` for none: e.g. ``get_all_data(fields='obs', meta_fields=())``
        gives ``obs`` and ``episode_lens``)."""
        from .views.tensors import padded_episodes

        fields = self.fieldnames if fields is None else fields
        if meta_fields is None:
            meta_fields = self.meta_fieldnames
        if isinstance(meta_fields, str):
            meta_fields = (meta_fields,)
        if isinstance(meta_fields, (tuple, list)) and "episode_lens" not in meta_fields:
            meta_fields = (*meta_fields, "episode_lens")  # (anything else: padded_episodes says what it takes)
        return padded_episodes(self._store, fields, meta_fields, device)

    def stats(self, fields: Any = None, *, quantiles: Any = None, recompute: bool = False):
        """Field statistics for normalization (``memmap_replay.sharing.stats.StoreStats``): per element of each
        field count, mean, std, min, max (and ``quantiles`` on request), per channel too for an image field
        (uint8 (C, H, W) or (H, W, C): ``.fields['image'].channels``), plus the live episodes' length and
        return summary; ``.to_lerobot()`` / ``.write_lerobot('stats.json')`` give LeRobot's stats.json. Small numeric
        fields are kept up to date as episodes commit; other ``fields`` are read from the live episodes.
        ``recompute=True`` reads the live episodes instead of the running moments (which, in a ring, also count evicted
        episodes)."""
        from .sharing.stats import compute_stats, running_stats

        recompute = flag(recompute, "recompute")
        running = running_stats(self._store)
        return compute_stats(self._store, running, fields=fields, quantiles=quantiles, recompute=recompute)
