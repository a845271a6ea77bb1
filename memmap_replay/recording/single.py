"""``RecordEpisodes``: every episode of one gymnasium env into a store."""

from __future__ import annotations

from typing import Any, Literal, cast

import gymnasium
import numpy as np

from ..buffer import ReplayBuffer
from ..errors import EpisodeStateError
from ..interop.common import REWARD
from ..core.writer import EpisodeWriter, StagingBuffer
from .recorder import Recorder, field_copies, recorder_options

__all__ = ["RecordEpisodes"]


class RecordEpisodes(gymnasium.Wrapper):
    """Records every episode of one env into a store (see ``memmap_replay.recording``).

    The options are ``Recorder``'s (``memmap_replay.recording.recorder``; its signature and this one are held
    equal by tests/recording/test_recording.py). ``buffer`` is the ReplayBuffer recorded into.

    Parameters
    ----------
    env : gymnasium.Env
        The env recorded.
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
    >>> from memmap_replay.recording import RecordEpisodes
    >>> env = gymnasium.make("CartPole-v1")
    >>> with RecordEpisodes(env, "cartpole", max_episodes=100, circular=True) as env:
    ...     _ = env.reset(seed=0)
    ...     _ = env.step(0)
    >>> ReplayBuffer.from_folder("cartpole").circular
    True
    """

    def __init__(self, env: gymnasium.Env, buffer_or_folder: Any, *, fields: Any = None, info_fields: Any = None,
                 seed_field: str | None = "seed", partial: str = "commit", max_episodes: int = 10_000,
                 max_steps: int | None = None, max_timesteps: int | None = None, circular: bool = False,
                 overwrite: bool = False, card: bool = True):
        super().__init__(env)
        self.recorder = Recorder(env, buffer_or_folder, env.observation_space, env.action_space,
                                 dict(recorder="RecordEpisodes"), **recorder_options(locals()))
        self.buffer: ReplayBuffer = self.recorder.buffer
        self._staging = StagingBuffer(self.buffer.schema, 1, self.buffer.max_timesteps)
        self._episode: EpisodeWriter | None = None
        self._row: dict[str, np.ndarray] | None = None  # the observation the next action is taken in, its info
        self._why = "reset() was never called"  # why no episode is in progress

    def _at(self, obs: Any, info: dict) -> dict[str, np.ndarray]:
        fieldmap = self.recorder.fieldmap
        return field_copies({**fieldmap.observations(obs), **fieldmap.infos(info)})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self._finish()
        fieldmap = self.recorder.fieldmap
        meta = {} if fieldmap.seed_field is None else {fieldmap.seed_field: -1 if seed is None else seed}
        episode = EpisodeWriter(self.buffer.episode_store, self._staging, meta,  # checks the seed first
                                split=self.buffer.long_episodes == "split")
        self._why = "reset() raised an exception"
        obs, info = self.env.reset(seed=seed, options=options)
        self._row = self._at(obs, info)
        self._episode = episode
        self.recorder.note_seed(seed)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        episode = self._episode
        if episode is None:
            raise EpisodeStateError(f"step() needs an episode in progress, and there is none: {self._why}; "
                                    f"call reset() first")
        try:
            obs, reward, terminated, truncated, info = result = self.env.step(action)
            row = cast("dict[str, np.ndarray]", self._row)  # (reset() made it with the episode)
            episode.store({**row, **self.recorder.fieldmap.actions(action), REWARD: reward})
            self._row = self._at(obs, info)
            if terminated or truncated:
                end = "terminated" if terminated else "truncated"
                self._episode, self._why = None, f"the episode ended ({end})"
                episode.set_end(end, final=self._row)
                episode.commit()
        except BaseException as error:
            self._episode, self._why = None, f"the episode was discarded after {type(error).__name__}"
            raise
        return result

    def _finish(self) -> None:
        """The episode in progress, cut by reset or close: committed or discarded (``partial``)."""
        episode, self._episode = self._episode, None
        if episode is not None and episode.length and self.recorder.partial == "commit":
            episode.set_end(None, final=self._row)
            episode.commit()

    def close(self) -> None:
        if not self.recorder.closed:
            self._why = "the recorder is closed"
            try:
                self._finish()
            finally:
                try:
                    self.recorder.close()
                finally:
                    super().close()

    def __exit__(self, exc_type: Any, *rest: Any) -> Literal[False]:
        if exc_type is not None:
            self._episode = None  # an exception in the block discards the episode in progress
        self.close()
        return False
