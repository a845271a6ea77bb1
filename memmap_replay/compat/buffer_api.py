"""memmap-replay-buffer 0.2.3's ``ReplayBuffer``: the native facade (``memmap_replay.buffer.ReplayBuffer``) plus
the rest of 0.2.3's surface, as a subclass. ``from memmap_replay import ReplayBuffer`` (and
``memmap_replay.compat.ReplayBuffer``) is this class, the drop-in for ``from memmap_replay_buffer import
ReplayBuffer``; the native class knows nothing of it.

What is here: its constructor's ``flush_every_store_step`` (and ``**extra_config``, refused by name); its flat
loop (``store`` with no episode open starts one, ``advance_episode()`` commits it; ``store_batch`` /
``store_meta_batch`` outside ``batched_episode`` write one timestep of parallel episodes,
``advance_episode(batch_size)`` commits them), ``store_datapoint`` and its three siblings,
``timestep_index`` / ``is_new_episode``, ``reset_``, the per-field ``data`` / ``meta_data`` indexers
(``compat.arrays``), its description attributes (``shapes``, ``dtypes``, ``defaults`` and their ``meta_``
forms), its image helpers (``image_fields``, ``default_image_field``, ``episode_frames``, ``save_video``)
and ``create_collector``. Every episode is still staged in RAM and committed whole: a crash (or a buffer
closed without ``advance_episode()``) loses only the episodes not committed yet.

Slots: 0.2.3 names an episode by its slot (``episode_index``, 0 .. max_episodes - 1); so do these
methods. The episode being written will take slot ``episode_index`` (the next ones the slots after it).
"""

from __future__ import annotations

import inspect
from collections import namedtuple
from pathlib import Path
from typing import Any, Mapping, cast

import numpy as np

from ..buffer import EpisodeMeta
from ..buffer import ReplayBuffer as NativeReplayBuffer
from ..core.convert import as_array, coerce
from ..core.options import check_end, did_you_mean, integer, short
from ..core.store import EpisodeStore
from ..core.writer import EpisodeWriter, coerce_meta, segments
from ..errors import BufferFullError, EpisodeStateError, InvalidDataError, OptionError
from .arrays import EpisodeArrays
from .flat import FlatBatch

__all__ = ["ReplayBuffer"]

_ADVANCE_FIRST = "commit them with advance_episode(batch_size) first"


def _per_field(meta: bool, what) -> property:
    """0.2.3's per-field description dicts (``shapes``, ``meta_dtypes``, ...): field name -> what(spec)."""
    def get(self) -> dict:
        return {name: what(spec) for name, spec in (self.schema.meta_fields if meta else self.schema.fields).items()}
    return property(get)


class ReplayBuffer(NativeReplayBuffer):
    """A folder of memory-mapped episodes, with memmap-replay-buffer 0.2.3's methods (this module's docstring).

    ``ReplayBuffer(folder, max_episodes, max_timesteps, fields, meta_fields=None, circular=False,
    overwrite=False, read_only=False, *, max_steps=None, durable=False, track_stats=True,
    long_episodes='error', flush_every_store_step=1)``: the native ``memmap_replay.buffer.ReplayBuffer``'s
    options (its docstring says what each does), and 0.2.3's ``flush_every_store_step``, accepted (steps are
    staged in RAM and each episode is written when it commits). 0.2.3's other keywords (its
    ``**extra_config``) are refused, each by name: this store keeps no free-form config."""

    _flat: FlatBatch | None = None   # store_batch's episodes outside batched_episode
    _implicit = False                # _episode was opened by store() or advance_episode(), not begin_episode
    _next_t = 0                      # timestep_index set while no episode was open

    internal_meta_fieldnames = frozenset({"episode_lens"})  # the meta_data entry that is no meta field
    flush_every_store_step = 1

    def __init__(self, folder: str | Path, max_episodes: int | None = None, max_timesteps: int | None = None,
                 fields: Mapping[str, Any] | None = None, meta_fields: Mapping[str, Any] | None = None,
                 circular: bool = False, overwrite: bool = False, read_only: bool = False, *,
                 max_steps: int | None = None, durable: bool = False, track_stats: bool = True,
                 long_episodes: str = "error", flush_every_store_step: int = 1, _store: EpisodeStore | None = None,
                 **extra_config: Any):
        self.flush_every_store_step = integer(flush_every_store_step, "flush_every_store_step", low=0)
        if extra_config:
            known = [name for name in inspect.signature(ReplayBuffer).parameters
                     if name not in ("folder", "extra_config") and not name.startswith("_")]
            names = sorted(extra_config)
            raise OptionError(f"unknown keyword {names} for ReplayBuffer; it takes "
                              f"{known}{did_you_mean(names, known)}. memmap-replay-buffer 0.2.3 kept extra keywords in "
                              f"its pickled config: keep such values in the dataset card "
                              f"(memmap_replay.update_card(folder, ...)) or in meta fields")
        super().__init__(folder, max_episodes, max_timesteps, fields, meta_fields, circular, overwrite, read_only,
                         max_steps=max_steps, durable=durable, track_stats=track_stats, long_episodes=long_episodes,
                         _store=_store)

    # ---- the native episode methods, with the flat loop's open episodes ------------------------------------

    def _check_idle(self, action: str, *, leaves_open: bool = False) -> None:
        """Refuse ``action`` while an episode is open (``leaves_open``: unless it is the flat loop's)."""
        self._store.require_writable(action)
        self._drop_pristine()
        if leaves_open and self._vector is None and (self._implicit or self._episode is None):
            return
        if self._episode is not None or self._vector is not None or self._flat is not None:
            raise EpisodeStateError(
                f"cannot {action} while an episode is open; finish the current one_episode/batched_episode "
                f"block (or call advance_episode()) first"
            )

    def begin_episode(self, **meta: Any) -> EpisodeMeta:
        """Open an episode without a ``with`` block; ``end_episode()`` (or ``advance_episode()``) commits it."""
        handle = super().begin_episode(**meta)
        self._implicit = False
        return handle

    def store(self, **step: Any) -> None:
        """Append one timestep to the open episode; fields not given take their default. With none open, it
        opens one (0.2.3's flat loop: ``advance_episode()`` commits it); ``one_episode`` is the safer way."""
        (self._episode or self._open_implicit()).store(step)

    def close(self) -> None:
        """Release the files and the writer lock; open episodes (the flat loop's too) are discarded."""
        self._flat = None
        super().close()

    # ---- 0.2.3's description attributes ------------------------------------------------------------------

    shapes = _per_field(False, lambda spec: spec.shape)
    dtypes = _per_field(False, lambda spec: spec.dtype.type)
    defaults = _per_field(False, lambda spec: spec.default)
    meta_shapes = _per_field(True, lambda spec: spec.shape)
    meta_dtypes = _per_field(True, lambda spec: spec.dtype.type)
    meta_defaults = _per_field(True, lambda spec: spec.default)

    @property
    def memory_namedtuple(self) -> type:
        """0.2.3's ``Memory`` named tuple of the step fields (``store`` itself returns None here)."""
        return namedtuple("Memory", list(self.schema.fields))

    @property
    def data(self) -> EpisodeArrays:
        """Step fields as 0.2.3's (max_episodes, max_timesteps, *shape) arrays, read by (slot, t); see
        ``memmap_replay.compat.arrays``."""
        return EpisodeArrays(self._store, meta=False, staged=self._staged)

    @property
    def meta_data(self) -> EpisodeArrays:
        """Meta fields (and ``episode_lens``) as 0.2.3's (max_episodes, *shape) arrays, read by slot."""
        return EpisodeArrays(self._store, meta=True, staged=self._staged)

    @property
    def episode_index(self) -> int:
        """The slot the next committed episode will take (the open episode's, as in 0.2.3)."""
        return self._store.meta.state.next_episode % self.max_episodes

    @episode_index.setter
    def episode_index(self, value: Any) -> None:
        raise EpisodeStateError(f"episode_index cannot be set (got {short(value)}): the store places each episode "
                                f"as it commits (0.2.3 let its slot be moved by hand); to rewrite a stored episode "
                                f"use update(slot, ...) or store_datapoint(slot, t, name, value)")

    @property
    def timestep_index(self) -> int:
        """Steps stored so far in the open episode (0.2.3's index of the next timestep)."""
        if self._flat is not None:
            return self._flat.length
        if self._episode is not None:
            return self._episode.length
        if self._vector is not None:
            return int(self._vector.lengths.max())
        return self._next_t

    @timestep_index.setter
    def timestep_index(self, value: Any) -> None:
        """0.2.3's ``timestep_index = k``: the open episode keeps its first k steps, or is extended with default
        steps up to k; the next step is step k."""
        self._store.require_writable("set timestep_index")
        value = integer(value, "timestep_index", low=0, high=self.max_timesteps)
        if self._vector is not None:
            raise EpisodeStateError("timestep_index cannot be set inside batched_episode: each episode of the batch "
                                    "has its own length (0.2.3 shared one)")
        if self._flat is not None:
            self._flat.set_length(value)
        elif self._episode is not None:
            self._episode.rewind(min(value, self._episode.length))
            while self._episode.length < value:
                self._episode.store({})
        else:
            self._next_t = value

    @property
    def is_new_episode(self) -> bool:
        return self.timestep_index == 0

    # ---- the flat loop ---------------------------------------------------------------------------------------

    def _drop_pristine(self) -> None:
        """Forget an episode opened by advance_episode() that nothing was written to yet."""
        writer = self._episode
        if (self._implicit and writer is not None and writer.length == 0 and not writer.meta
                and writer.end is None and writer.final is None):
            self._episode = None

    def _open_implicit(self) -> EpisodeWriter:
        """``store()`` with no episode open: open one, as 0.2.3's flat loop does."""
        self._store.require_writable("store")
        if self._vector is not None:
            raise EpisodeStateError("store() needs an open episode of its own, and batched episodes are open: inside "
                                    "batched_episode use store_batch")
        meta = {}
        if self._flat is not None:
            flat = self._flat
            if flat.length or flat.width > 1:
                raise EpisodeStateError(f"store() cannot start an episode while store_batch's episodes are open; "
                                        f"{_ADVANCE_FIRST}")
            # store_meta_batch of one episode, no step yet: as 0.2.3, store() writes that episode (its meta kept)
            meta = {name: array[0].copy() for name, array in flat.meta.items()} if flat.width else {}
            self._flat, self._next_t = None, flat.length
        self._episode, self._implicit = EpisodeWriter(self._store, self._staging_for_one(), meta,
                                                      split=self._split), True
        for _ in range(self._next_t):
            self._episode.store({})
        self._next_t = 0
        return self._episode

    def _flat_batch(self, action: str) -> FlatBatch:
        self._store.require_writable(action)
        self._drop_pristine()
        if self._episode is not None:
            raise EpisodeStateError(f"cannot {action} outside batched_episode while an episode is open (from store(), "
                                    f"one_episode or begin_episode); commit it with advance_episode() first")
        if self._flat is None:
            state = self._store.meta.state  # (removed episodes hold their slots too: not num_episodes)
            if not self.circular and state.next_episode - state.first_episode >= self.max_episodes:
                removed = f" ({state.removed} by removed episodes)" if state.removed else ""
                raise BufferFullError(f"the buffer is full: all {self.max_episodes} episode slots are used{removed} "
                                      f"and it is not circular; pass circular=True to evict the oldest episodes, "
                                      f"grow it (buffer.grow(max_episodes=...)), or call clear()")
            self._flat, self._next_t = FlatBatch(self.schema, self.max_timesteps, self._next_t,
                                                    split=self._split), 0
        return self._flat

    def store_batch(self, **steps: Any) -> None:
        """One timestep for each of a batch of episodes (values with a leading batch axis): inside
        ``batched_episode``, its episodes; outside, 0.2.3's flat batch, committed by
        ``advance_episode(batch_size)``."""
        if self._vector is not None:
            self._vector.store(**steps)
        else:
            self._flat_call("store_batch", lambda flat: flat.store(steps))

    def store_meta_batch(self, **meta: Any) -> None:
        """Meta values, one per episode of the batch (inside ``batched_episode`` or 0.2.3's flat batch)."""
        if self._vector is not None:
            self._vector.set_meta(**meta)
        else:
            self._flat_call("store_meta_batch", lambda flat: flat.store_meta(meta))

    def _flat_call(self, action: str, call) -> None:
        """``call`` on the flat batch, opened for it if needed; a refused first call leaves none open (a
        batch holding nothing would block store(), one_episode and clear())."""
        fresh, next_t = self._flat is None, self._next_t
        flat = self._flat_batch(action)
        try:
            call(flat)
        except BaseException:
            if fresh and self._flat is flat:
                self._flat, self._next_t = None, next_t
            raise

    def advance_episode(self, end: str | None = None, final: Mapping[str, Any] | None = None, *,
                        batch_size: int | None = None) -> Any:
        """Commit the open episode, as 0.2.3's flat loop (``store ... if done: advance_episode()``); returns its
        slot (None if it had no step). The next ``store`` starts the next episode. ``end``: 'terminated' or
        'truncated'; ``final``: the observation after the last action. After ``store_batch`` outside
        ``batched_episode``, ``advance_episode(batch_size)`` (0.2.3's form, an int) commits the first
        ``batch_size`` episodes of the batch and returns their slots. In a ``batched_episode`` block it
        commits all its episodes."""
        if isinstance(end, (int, np.integer)) and not isinstance(end, (bool, np.bool_)):
            if batch_size is not None:
                raise OptionError(f"batch_size given twice (got {end} and batch_size={short(batch_size)})")
            end, batch_size = None, end
        elif end is not None and not isinstance(end, str):
            raise OptionError(f"advance_episode takes end='terminated', 'truncated' or None, or batch_size, an int >= "
                              f"1 (0.2.3's advance_episode(batch_size)) (got {short(end)})")
        self._store.require_writable("advance the episode")
        if self._vector is not None:
            self._vector.commit_all(end)
            return None
        if self._flat is not None:
            return self._advance_flat(end, final, batch_size)
        batch_size = None if batch_size is None else integer(batch_size, "batch_size", low=1)
        writer = self._episode
        if writer is None or (self._implicit and writer.length == 0):
            check_end(end)
            self._next_t = 0
            return None  # as 0.2.3: an episode with nothing stored does not advance (its meta values stay)
        if batch_size not in (None, 1):
            raise OptionError(f"batch_size must be 1 for the episode store() wrote (got {batch_size}); "
                              f"advance_episode(batch_size) ends episodes written with store_batch")
        try:
            slot = self.end_episode(end, final)
        except BufferFullError as error:  # kept open, as 0.2.3 keeps its steps: grow() then advance_episode()
            self._episode = writer
            raise BufferFullError(f"{_kept(error)}. The open episode ({writer.length} steps) is kept: after growing "
                                  f"the buffer, advance_episode() stores it") from None
        self._episode, self._implicit = EpisodeWriter(self._store, self._staging_for_one(), {}, split=self._split), True
        return slot

    def _advance_flat(self, end: Any, final: Any, batch_size: Any) -> list[int]:
        flat = cast(FlatBatch, self._flat)  # (advance_episode calls this with a flat batch open)
        if batch_size is None:
            if flat.width > 1:
                raise OptionError(f"advance_episode() after store_batch of {flat.width} episodes needs "
                                  f"batch_size={flat.width} (0.2.3 ended one episode by default)")
            batch_size = 1
        batch_size = integer(batch_size, "batch_size", low=1, high=self.max_episodes)  # (its episode slots)
        end = check_end(end)
        if final is not None:
            raise OptionError("final= is for one episode; episodes written with store_batch end without one")
        episodes = flat.episodes(batch_size)
        parts, last = [], []
        for episode in episodes:
            episode.end = end
            parts.extend(segments(episode, self.max_timesteps))  # long_episodes='split': linked segments
            last.append(len(parts) - 1)
        try:
            slots = self._store.commit(parts)
        except BufferFullError as error:  # kept open, as 0.2.3 keeps their steps: grow() then advance_episode()
            raise BufferFullError(f"{_kept(error)}. The open episodes ({flat.width} of {flat.length} steps) are kept: "
                                  f"after growing the buffer, advance_episode({batch_size}) stores them") from None
        self._flat = None  # committed, or dropped if the disk refuses them, as end_episode
        return [slots[index] for index in last]  # an episode cut into segments: its last one's slot

    def reset_(self) -> None:
        """0.2.3's reset: drop every episode, the open ones too."""
        self._store.require_writable("reset_")
        self._episode = self._vector = self._flat = None
        self._next_t = 0
        self.clear()

    # ---- single values, by slot ----------------------------------------------------------------------------

    def _staged(self, *, pristine: bool = False) -> dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """The open episodes at the slots they will take: (step rows per field, meta value per field). An
        episode nothing was written to yet is left out unless ``pristine``: its slot shows what it holds."""
        base, size, schema = self.episode_index, self.max_episodes, self.schema
        found = {}
        if self._episode is not None and (pristine or self._episode.length or self._episode.meta):
            meta = coerce_meta(schema, self._episode.meta)
            meta = {name: meta.get(name, spec.default_row()) for name, spec in schema.meta_fields.items()}
            length = self._episode.length
            found[base] = ({name: array[0, :length] for name, array in self._episode.staging.arrays.items()}, meta)
        lengths: list[int] | np.ndarray  # (a flat batch's episodes are as long; a vector writer's, each its own)
        for writer in (self._flat, self._vector):
            if writer is None:
                continue
            if isinstance(writer, FlatBatch):
                arrays, lengths = writer.steps, [writer.length] * writer.width
            else:
                arrays, lengths = writer.staging.arrays, writer.staging.lengths
            for env in range(len(lengths)):
                found[(base + env) % size] = ({name: array[env, : lengths[env]] for name, array in arrays.items()},
                                              {name: array[env] for name, array in writer.meta.items()})
        return found

    def _slot(self, episode_index: Any, t: Any, name: Any, meta: bool, value: Any):
        """Where ``store_datapoint``'s value goes: (open writer or None, env, row or start + t, coerced value)."""
        slot = integer(episode_index, "episode_index", low=None)
        if not 0 <= slot < self.max_episodes:  # ('out of range': 0.2.3's words, which its users' tests look for)
            raise OptionError(f"episode_index {slot} is out of range: it must be a slot in [0, {self.max_episodes})")
        specs = self.schema.meta_fields if meta else self.schema.fields
        if not isinstance(name, str) or name not in specs:
            raise InvalidDataError(f"unknown {'meta field' if meta else 'field'} {short(name)}: the store's "
                                   f"{'meta fields' if meta else 'fields'} are {sorted(specs)}"
                                   f"{did_you_mean([name], specs) if isinstance(name, str) else ''}")
        value = coerce(specs[name], value, kind="meta field" if meta else "field")
        table = self._store.live_table()
        where = np.flatnonzero(table.slots == slot)
        # an episode advance_episode() opened and nothing was written to yet takes values only for an empty
        # slot: a ring slot still holds its stored episode until then (0.2.3 wrote to that one)
        staged = self._staged(pristine=not where.size).get(slot)
        if staged is None and not where.size:
            raise OptionError(f"slot {slot} holds no episode, stored or being stored (live slots: "
                              f"{sorted(table.slots.tolist())[:20]}; the open episode takes slot {self.episode_index})")
        length = len(next(iter(staged[0].values()))) if staged is not None else int(table.length[where[0]])
        if t is not None:
            t = integer(t, "timestep_index", low=0)
            if t >= length:
                raise OptionError(f"timestep_index {t} is out of range: it must be below the episode's {length} "
                                  f"steps at slot {slot}; rows past an episode's end are not stored")
        if staged is not None:
            env = (slot - self.episode_index) % self.max_episodes
            return self._episode or self._flat or self._vector, env, t, value
        return None, None, None if t is None else int(table.start[where[0]]) + t, value

    def _write_one(self, episode_index: Any, t: Any, name: Any, value: Any, meta: bool) -> None:
        self._store.require_writable("store_meta_datapoint" if meta else "store_datapoint")
        writer, env, row, value = self._slot(episode_index, t, name, meta, value)
        if writer is None:
            if meta:
                self._store.update_meta(name, int(episode_index), value[None])
            else:
                self._store.update_rows(name, row, value[None])
        elif isinstance(writer, EpisodeWriter):
            if meta:
                writer.meta[name] = value
            else:
                writer.staging.arrays[name][0, row] = value
        elif isinstance(writer, FlatBatch):
            writer.write(env, row, name, value)
        elif meta:
            writer.meta[name][env] = value
        else:
            writer.staging.arrays[name][env, row] = value

    def store_datapoint(self, episode_index: int, timestep_index: int, name: str, datapoint: Any) -> None:
        """Write one step of one field at (slot, t): of a stored episode (in place), or of an open one."""
        self._write_one(episode_index, timestep_index, name, datapoint, meta=False)

    def store_meta_datapoint(self, episode_index: int, name: str, datapoint: Any) -> None:
        """Write one meta value of the episode at slot ``episode_index`` (stored, or open: e.g.
        ``store_meta_datapoint(buffer.episode_index, 'score', s)`` before ``advance_episode()``)."""
        self._write_one(episode_index, None, name, datapoint, meta=True)

    def store_batch_datapoint(self, episode_indices: Any, timestep_index: int, name: str, datapoints: Any) -> None:
        """``store_datapoint`` for several slots at one timestep (one value per slot)."""
        for slot, value in zip(*self._pairs(episode_indices, datapoints)):
            self._write_one(slot, timestep_index, name, value, meta=False)

    def store_batch_meta_datapoint(self, episode_indices: Any, name: str, datapoints: Any) -> None:
        """``store_meta_datapoint`` for several slots (one value per slot)."""
        for slot, value in zip(*self._pairs(episode_indices, datapoints)):
            self._write_one(slot, None, name, value, meta=True)

    def _pairs(self, episode_indices: Any, datapoints: Any) -> tuple[list[int], Any]:
        slots = np.atleast_1d(np.asarray(episode_indices)).tolist()
        values = as_array(datapoints, "datapoints")
        if len(values) != len(slots):
            raise InvalidDataError(f"datapoints must have one value per episode index "
                                   f"({len(slots)}) (got {len(values)})")
        return slots, values

    # ---- images ----------------------------------------------------------------------------------------------

    def image_fields(self) -> list[str]:
        """The fields of 2 or more dimensions per step, in declaration order (0.2.3's image-like fields)."""
        return [name for name, spec in self.schema.fields.items() if len(spec.shape) >= 2]

    def default_image_field(self) -> str:
        candidates = self.image_fields()
        if len(candidates) != 1:
            raise OptionError(f"field must be given: the store has {'no' if not candidates else 'several'} image-like "
                              f"fields (of 2 or more dimensions per step){f': {candidates}' if candidates else ''}")
        return candidates[0]

    def _live_position(self, slot: Any) -> int:
        slot = integer(slot, "episode_index", low=None)
        slots = self._store.live_table().slots
        where = np.flatnonzero(slots == slot)
        if not where.size:
            raise OptionError(f"episode_index {slot} is out of range: it holds no stored episode (live slots: "
                              f"{sorted(slots.tolist())[:20]})")
        return int(where[0])

    def episode_frames(self, episode_index: Any = 0, field: str | None = None) -> np.ndarray:
        """The frames of the episode at slot ``episode_index`` (T, ...), or of several slots one after the other."""
        field = self.default_image_field() if field is None else field
        if field not in self.schema.fields:
            raise OptionError(f"unknown field {short(field)}: the store's fields are {sorted(self.schema.fields)}")
        slots = [episode_index] if np.ndim(episode_index) == 0 else list(episode_index)
        if not slots:
            raise OptionError("episode_frames needs at least one episode index")
        table, array = self._store.live_table(), self._store.step_array(field)
        frames = []
        for slot in slots:
            position = self._live_position(slot)
            start = int(table.start[position])
            frames.append(np.array(array[start: start + int(table.length[position])]))
        return frames[0] if len(frames) == 1 else np.concatenate(frames)

    def save_video(self, path: str | Path, episode_index: int = 0, field: str | None = None, fps: float = 30,
                   **options: Any) -> Path:
        """The episode at slot ``episode_index`` as a video (.mp4 or .gif), through ``write_video`` (its
        ``layout``, ``stack``, ``scale``, ``value_range``, ``progress`` options; the [video] extra)."""
        from ..sharing.frames import write_video

        field = self.default_image_field() if field is None else field
        write_video(self, field, path, episode=self._live_position(episode_index), fps=fps, **options)
        return Path(path)

    def create_collector(self, num_groups: int, fieldnames: Any = None, meta_fieldnames: Any = None,
                         **collector_kwargs: Any):
        """0.2.3's ``EpisodeCollector`` over this buffer (collect a group-batched rollout, then store it)."""
        from .collector import EpisodeCollector  # (torch: imported on first use)

        return EpisodeCollector(self, num_groups, fieldnames=fieldnames, meta_fieldnames=meta_fieldnames,
                                **collector_kwargs)

    create_rollout_collector = create_collector


def _kept(error: BufferFullError) -> str:
    """A full store's message for an episode the flat loop keeps open: clear() is refused while one is open,
    reset_() (0.2.3's) drops it with the rest."""
    return str(error).replace("or call clear()", "or call reset_() (it drops the open episode too)")
