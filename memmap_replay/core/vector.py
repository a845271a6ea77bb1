"""``VectorEpisodeWriter``: N environments stepping together (gymnasium ``VectorEnv`` style), staged in RAM
as ``core/writer.py``'s writers are; each env's episode commits on its own end flag and a fresh one begins."""

from __future__ import annotations

from typing import Any, Mapping, cast

import numpy as np

from ..errors import InvalidDataError, OptionError
from .convert import as_array, coerce
from .options import check_end, integer, validate_index
from .schema import FieldSpec
from .store import EpisodeStore, PendingEpisode
from .writer import StagingBuffer, _check_staging_memory, _coerce_steps, _too_long, _unknown

__all__ = ["VectorEpisodeWriter"]


class VectorEpisodeWriter:
    """N environments stepping together; each env's episode commits on its own end flag.

    ``store(terminated=..., truncated=..., final=..., **steps)`` takes arrays with a leading axis of
    length ``num_envs``. When ``terminated[i]`` or ``truncated[i]`` is set, env i's episode (including
    this step) commits, with ``final[field][i]`` as its final observation if ``final`` is given, and
    env i starts a fresh episode. Meta values set with ``set_meta`` (scalars, or one per env) apply to
    each env's current and later episodes. If the schema has fields named ``terminated`` or
    ``truncated``, the flags are stored in them too.
    """

    def __init__(self, store: EpisodeStore, num_envs: int, max_timesteps: int, *, split: bool = False, **meta: Any):
        num_envs = integer(num_envs, "num_envs", low=1)
        _check_staging_memory(store.schema, num_envs, max_timesteps)
        self.target = store
        self.schema = store.schema
        self.num_envs = num_envs
        try:
            self.staging = StagingBuffer(self.schema, num_envs, max_timesteps)
        except (MemoryError, ValueError) as error:  # numpy's 'array is too big' is a ValueError
            raise OptionError(f"num_envs={num_envs} needs more staging memory than this process can get "
                                   f"({error}); use fewer environments per writer") from None
        self.meta = {name: spec.default_row()[None].repeat(num_envs, 0)
                     for name, spec in self.schema.meta_fields.items()}
        self.set_meta(**meta)
        self._split = split
        self._continues = np.full(num_envs, -1, dtype=np.int64)  # per env, the segment its episode continues

    @property
    def lengths(self) -> np.ndarray:
        """Steps stored so far in each env's current episode."""
        lengths: np.ndarray = self.staging.lengths.copy()
        return lengths

    def set_meta(self, **meta: Any) -> None:
        """Meta values for each env's current and later episodes: one value for all, or one per env."""
        extra = set(meta) - set(self.schema.meta_fields)
        if extra:
            raise _unknown(extra, self.schema.meta_fields, "meta field")
        values = {}
        for name, value in meta.items():  # all checked before any changes
            spec = self.schema.meta_fields[name]
            value = as_array(value, f"meta field {name!r}")
            per_env = value.ndim == len(spec.shape) + 1
            values[name] = coerce(spec, value, (self.num_envs,) if per_env else (), kind="meta field")
        for name, value in values.items():
            self.meta[name][:] = value

    def _flags(self, flags: Any, name: str) -> np.ndarray:
        if flags is None:
            return np.zeros(self.num_envs, dtype=bool)
        return coerce(FieldSpec(name, np.dtype(bool)), flags, (self.num_envs,), kind="flag")

    def store(self, *, terminated: Any = None, truncated: Any = None, final: Mapping[str, Any] | None = None,
              active: Any = None, **steps: Any) -> list[int]:
        """Append one step for every active env; returns the slots of the episodes this call committed.

        With ``split``, an env whose episode is full first commits it as a segment (its own commit, before the
        step is stored; its slot is in the result), then the step starts the next segment.

        ``active`` (bool per env, default all) skips envs whose step is not a real transition, e.g. the
        reset step of gymnasium's NEXT_STEP autoreset. ``final`` values may be gymnasium's object arrays
        with None for envs that did not end; an env that ended with None in every field of ``final``
        commits without a final observation."""
        n = self.num_envs
        terminated, truncated = self._flags(terminated, "terminated"), self._flags(truncated, "truncated")
        active = np.ones(n, dtype=bool) if active is None else self._flags(active, "active")
        for name, flags in (("terminated", terminated), ("truncated", truncated)):
            if name in self.schema.fields and name not in steps:
                steps[name] = flags
        values = _coerce_steps(self.schema, steps, (n,))
        envs = np.flatnonzero(active)
        done = envs[(terminated | truncated)[envs]]
        finals, given = (None, None) if final is None else self._finals(final, done)
        lengths = self.staging.lengths
        full = envs[lengths[envs] >= self.staging.max_timesteps]
        if full.size:
            if not self._split:
                raise _too_long(self.staging.max_timesteps, f"env {int(full[0])}'s episode",
                                "pass truncated=True on an episode's last allowed step, commit_all(envs=[...]) or "
                                "discard(envs=[...]) it, ")
            cut = self._cut(full, values)
        else:
            cut = []
        self.staging.put({name: value[envs] for name, value in values.items()}, envs, lengths[envs])
        lengths[envs] += 1
        if done.size == 0:
            return cut
        episodes = []
        for env in done:
            episodes.append(self._pending(env, "terminated" if terminated[env] else "truncated", finals, given))
        try:
            return cut + self.target.commit(episodes)
        finally:
            lengths[done] = 0
            self._continues[done] = -1

    def _cut(self, envs: np.ndarray, values: Mapping[str, np.ndarray]) -> list[int]:
        """Commit the full episodes of ``envs`` as segments whose final rows are this step's; they go on."""
        segments = []
        for env in envs:
            segments.append(self._pending(env, None, {name: value for name, value in values.items()}, None))
        slots = self.target.commit(segments)
        self.staging.lengths[envs] = 0
        self._continues[envs] = cast("list[int]", [segment.id for segment in segments])  # (set by the commit)
        return slots

    def _pending(self, env: int | np.integer, end: str | None, finals: dict[str, np.ndarray] | None,
                 given: np.ndarray | None) -> PendingEpisode:
        """Env ``env``'s staged episode, ready to commit: its end, its final row if one was given, its meta."""
        row = None if finals is None or not (given is None or given[env]) else {
            name: value[env] for name, value in finals.items()}
        meta = {name: value[env].copy() for name, value in self.meta.items()}
        episode = self.staging.pending(int(env), end=end, final=row, meta=meta)
        episode.continues = int(self._continues[env])
        return episode

    def _finals(self, final: Mapping[str, Any], done: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Final observations per env: arrays (num_envs, ...), or sequences with None where no env ended;
        and per env whether it has one. An env that ended with None in every field commits without one."""
        if not isinstance(final, Mapping):
            raise InvalidDataError(f"final must be a dict of field -> values per env (got {type(final).__name__})")
        extra = set(final) - set(self.schema.fields)
        if extra:
            raise _unknown(extra, self.schema.fields, "field")
        out, nones = {}, {}
        for name, value in final.items():
            spec = self.schema.fields[name]
            rows = value if isinstance(value, (list, tuple)) else None
            if isinstance(value, np.ndarray) and value.dtype == object:
                rows = list(value)
            if rows is not None and any(row is None for row in rows):
                if len(rows) != self.num_envs:
                    raise InvalidDataError(f"final {name!r} must have one entry per env "
                                           f"({self.num_envs}) (got {len(rows)})")
                out[name] = np.stack([spec.default_row() if row is None else coerce(spec, row) for row in rows])
                nones[name] = np.array([row is None for row in rows])
            else:  # an array per env; gymnasium's object array holds no None when every env ended
                out[name] = coerce(spec, value if rows is None else rows, (self.num_envs,))
        if not nones:
            return out, np.ones(self.num_envs, dtype=bool)
        none = np.array([nones.get(name, np.zeros(self.num_envs, dtype=bool)) for name in out])  # (fields, envs)
        some, every = cast(np.ndarray, none.any(0)), cast(np.ndarray, none.all(0))  # per env (none is 2-d)
        mixed = done[(some & ~every)[done]]
        if mixed.size:  # a partial final observation: refused, never completed with defaults
            env, names = int(mixed[0]), list(out)
            missing = [name for i, name in enumerate(names) if none[i, env]]
            present = [name for i, name in enumerate(names) if not none[i, env]]
            raise InvalidDataError(
                f"final {missing[0]!r} is None for env {env}, which ended, while final {present[0]!r} holds its "
                f"final observation: give every field of final for an env that ended, or None in all of them "
                f"(it then commits without a final observation)")
        return out, ~every

    def commit_all(self, end: str | None = None, *, envs: Any = None,
                   final: Mapping[str, Any] | None = None) -> list[int]:
        """Commit the episodes in progress of ``envs`` (default: all; empty ones are skipped); they start afresh.

        ``final`` gives them final observations, in ``store``'s form: field -> values for every env (arrays
        of num_envs rows, or sequences with None for envs without one); an env with None in every field
        commits without a final observation. ``final`` is checked before anything changes."""
        end = check_end(end)
        chosen = np.unique(self._envs(envs))  # an env named twice commits once
        ready = chosen[self.staging.lengths[chosen] > 0]
        finals, given = (None, None) if final is None else self._finals(final, ready)
        episodes = []
        for env in ready:
            episodes.append(self._pending(env, end, finals, given))
        try:
            return self.target.commit(episodes)
        finally:
            self.staging.lengths[chosen] = 0
            self._continues[chosen] = -1

    def _envs(self, envs: Any) -> np.ndarray:
        if envs is None:
            return np.arange(self.num_envs)
        return validate_index(envs, self.num_envs, "envs")

    def discard(self, *, envs: Any = None) -> None:
        """Drop the episodes in progress of ``envs`` (default: all); their committed segments stay."""
        envs = self._envs(envs)
        self.staging.lengths[envs] = 0
        self._continues[envs] = -1
