"""``RecordVectorEpisodes``: every episode of every sub-env of a gymnasium ``VectorEnv`` into a store."""

from __future__ import annotations

from typing import Any, Literal, Mapping, cast

import gymnasium
import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

from ..buffer import ReplayBuffer
from ..errors import EpisodeStateError, InvalidDataError, OptionError
from ..interop.common import REWARD
from ..core.options import short
from ..core.vector import VectorEpisodeWriter
from .recorder import Recorder, field_copies, recorder_options

__all__ = ["RecordVectorEpisodes"]

_NEXT_STEP, _SAME_STEP, _DISABLED = "NextStep", "SameStep", "Disabled"  # gymnasium's AutoresetMode values


class RecordVectorEpisodes(VectorWrapper):
    """Records every episode of every sub-env of a ``gymnasium.vector.VectorEnv`` into a store.

    ``RecordVectorEpisodes(envs, buffer_or_folder, ...)``, options as RecordEpisodes'. Each sub-env's
    episode commits on its own when it ends; autoreset modes: see ``memmap_replay.recording``.

    Parameters
    ----------
    env : gymnasium.vector.VectorEnv
        The vector env recorded.
    buffer_or_folder : ReplayBuffer or path
        The store recorded into: an open buffer, or a folder (a store there is appended to, else one is
        created with the capacity options below).
    fields : dict, optional
        Overrides of the derived field specs (name -> spec).
    info_fields : dict, optional
        Info keys recorded as fields ``info__<key>`` (info key -> field spec).
    seed_field : str or None
        The int64 meta field of each episode's reset seed (-1: none); None records no seed.
    partial : {'commit', 'discard'}
        An episode cut by ``reset()`` or ``close()``: committed with an unspecified end, or dropped.
    max_episodes : int
        Episode slots of a store the recorder creates (10,000). A full store that is not a ring raises
        ``BufferFullError`` from ``step``; pass ``circular=True`` to record while training without end.
    max_steps : int, optional
        Rows of a store the recorder creates (default ``max_episodes * (max_timesteps + 1)``, sparse on disk);
        in a ring, the steps kept.
    max_timesteps : int, optional
        The longest episode (default: the env's time limit, ``env.spec.max_episode_steps``).
    circular : bool
        Create a ring: a full store evicts its oldest episodes. A store that exists keeps its own capacity
        (``buffer.grow(...)`` changes it; an existing store that is not a ring is refused with
        ``circular=True``, and one that cannot take an episode gets the ``grow`` call that would make room).
    overwrite : bool
        Replace a store at the folder.
    card : bool
        Write the dataset card (env spec, spaces, provenance, reset seeds).

    Examples
    --------
    >>> import gymnasium
    >>> from memmap_replay import ReplayBuffer
    >>> from memmap_replay.recording import RecordVectorEpisodes
    >>> env = gymnasium.make_vec("CartPole-v1", 2)
    >>> with RecordVectorEpisodes(env, "cartpole", max_episodes=100, circular=True) as env:
    ...     _ = env.reset(seed=0)
    ...     _ = env.step(env.action_space.sample())
    >>> ReplayBuffer.from_folder("cartpole").max_episodes
    100
    """

    def __init__(self, env: VectorEnv, buffer_or_folder: Any, *, fields: Any = None, info_fields: Any = None,
                 seed_field: str | None = "seed", partial: str = "commit", max_episodes: int = 10_000,
                 max_steps: int | None = None, max_timesteps: int | None = None, circular: bool = False,
                 overwrite: bool = False, card: bool = True):
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode", _NEXT_STEP)  # gymnasium 1.0 had no key: _NEXT_STEP only
        self.mode = getattr(mode, "value", mode)
        if self.mode not in (_NEXT_STEP, _SAME_STEP, _DISABLED):
            raise OptionError(f"the vector env's autoreset_mode must be NEXT_STEP, SAME_STEP or DISABLED "
                                   f"(got {short(mode)})")
        # the seed of each sub-env is known where gymnasium's own vector envs give env i the seed + i
        self._seeded = isinstance(env.unwrapped, (gymnasium.vector.SyncVectorEnv, gymnasium.vector.AsyncVectorEnv))
        details = dict(recorder="RecordVectorEpisodes", num_envs=env.num_envs, autoreset_mode=self.mode,
                       vector_env=type(env.unwrapped).__name__)
        self.recorder = Recorder(env, buffer_or_folder, env.single_observation_space, env.single_action_space,
                                 details, **recorder_options(locals()))
        self.buffer: ReplayBuffer = self.recorder.buffer
        self._writer: VectorEpisodeWriter = self.buffer.vector_writer(env.num_envs)
        # per field (num_envs, ...): the observation each env is at, and the info that came with it
        self._rows: dict[str, np.ndarray] | None = None
        self._ended = np.ones(env.num_envs, dtype=bool)  # env i's episode ended; its next step is a reset
        self._seeds = [-1] * env.num_envs

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        n = self.num_envs
        mask = (options or {}).get("reset_mask")
        if mask is not None and (not isinstance(mask, np.ndarray) or mask.dtype != bool or mask.shape != (n,)):
            raise OptionError(f"options['reset_mask'] must be a bool array of shape ({n},) (got {short(mask)})")
        envs = np.arange(n) if mask is None or self._rows is None else np.flatnonzero(mask)
        self._finish(envs)
        try:
            obs, info = self.env.reset(seed=seed, options=options)
            new = self._at(obs, info)
            if self._rows is None:
                self._rows = new
            else:
                for name, value in new.items():
                    self._rows[name][envs] = value[envs]
            self._ended[envs] = False
            seeds = _sub_env_seeds(seed, n) if self._seeded else [None] * n
            self._set_seeds(envs, [-1 if seeds[i] is None else seeds[i] for i in envs])
        except BaseException:
            self._fail()
            raise
        self.recorder.note_seed(seed)
        return obs, info

    def _set_seeds(self, envs: Any, seeds: list) -> None:
        for i, seed in zip(envs, seeds):
            self._seeds[i] = seed
        if self.recorder.fieldmap.seed_field is not None:
            self._writer.set_meta(**{self.recorder.fieldmap.seed_field: self._seeds})

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        if self._rows is None:
            raise EpisodeStateError("step() needs episodes in progress, and there are none: reset() was never "
                                    "called, or an exception discarded them; call reset() first")
        try:
            result = self.env.step(actions)
            self._record(actions, *result)
        except BaseException:
            self._fail()
            raise
        return result

    def _record(self, actions: Any, obs: Any, rewards: Any, terminated: Any, truncated: Any, info: dict) -> None:
        active = ~self._ended
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        done = (terminated | truncated) & active
        new = self._at(obs, info)
        rows = cast("dict[str, np.ndarray]", self._rows)  # (step() checked that episodes are in progress)
        steps = {**rows, **self.recorder.fieldmap.actions(actions), REWARD: rewards}
        self._writer.store(terminated=terminated & active, truncated=truncated & active, active=active,
                           final=self._finals(new, info) if done.any() else None, **steps)
        if self.mode == _DISABLED:  # an ended env stays where it ended until reset(options={'reset_mask': ...})
            for name, value in new.items():
                rows[name][active] = value[active]
            self._ended |= done
        else:
            self._rows = new
            self._ended = done if self.mode == _NEXT_STEP else self._ended
        if done.any():  # these envs' next episodes begin by an autoreset (or a reset_mask): no seed known yet
            self._set_seeds(np.flatnonzero(done), [-1] * int(done.sum()))

    def _at(self, obs: Any, info: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Per field (num_envs, ...): copies of the observations and the info values that came with them."""
        return {**field_copies(self.recorder.fieldmap.observations(obs)), **self._infos(info)}

    def _finals(self, new: dict[str, np.ndarray], info: dict) -> dict[str, Any] | None:
        """The final rows of the envs that ended: where they are now, or with _SAME_STEP (where an env that
        ended shows its reset) ``info['final_obs']`` (None for the envs that did not end) and ``final_info``."""
        if self.mode != _SAME_STEP:
            return new
        finals = info.get("final_obs")
        if finals is None:
            return None
        rows = [None if row is None else self.recorder.fieldmap.observations(row) for row in finals]
        observations = {name: [None if row is None else row[name] for row in rows]
                        for name in self.recorder.fieldmap.observation}
        return {**observations, **self._infos(info.get("final_info"))}

    def _infos(self, info: Any) -> dict[str, np.ndarray]:
        """Per info field (num_envs, ...): the value where the env's info has the key, else the field's default."""
        out, n = {}, self.num_envs
        for name, key in self.recorder.fieldmap.info.items():
            spec = self.buffer.schema.fields[name]
            values = np.full((n, *spec.shape), spec.default_row())
            if isinstance(info, Mapping) and key in info:
                take = np.asarray(info.get(f"_{key}", np.ones(n, dtype=bool)), dtype=bool)
                data = np.asarray(info[key])
                if data.dtype.kind not in "biufc" or data.shape != values.shape or take.shape != (n,):
                    raise InvalidDataError(f"info[{key!r}] must be numbers of shape {values.shape} (got "
                                           f"{data.dtype} {data.shape}) to be stored in field {name!r}")
                values = values.astype(np.promote_types(values.dtype, data.dtype), copy=False)
                values[take] = data[take]  # the store then checks these values as any others
            out[name] = values
        return out

    def _finish(self, envs: np.ndarray) -> None:
        """The episodes in progress of ``envs``, cut by reset or close: committed (with each env's current
        observation as final observation) or discarded (``partial``)."""
        envs = envs[self._writer.lengths[envs] > 0]
        if envs.size and (self.recorder.partial == "discard" or self._rows is None):
            self._writer.discard(envs=envs)
        elif envs.size:
            self._writer.commit_all(envs=envs, final=self._rows)

    def _fail(self) -> None:
        self._writer.discard()
        self._rows = None
        self._ended[:] = True

    def close(self, **kwargs: Any) -> None:
        if not self.recorder.closed:
            try:
                self._finish(np.arange(self.num_envs))
            finally:
                self._rows = None
                try:
                    self.recorder.close()
                finally:
                    super().close(**kwargs)

    def __enter__(self) -> "RecordVectorEpisodes":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> Literal[False]:
        if exc_type is not None:
            self._fail()  # an exception in the block discards the episodes in progress
        self.close()
        return False


def _sub_env_seeds(seed: Any, n: int) -> list:
    """The seed each sub-env of a Sync/AsyncVectorEnv gets from ``reset(seed=...)``: seed + i, or a list's."""
    if seed is None:
        return [None] * n
    return [seed + i for i in range(n)] if np.ndim(seed) == 0 else list(seed)
