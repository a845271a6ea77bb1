"""Record gymnasium environments into a store: every episode, how it ended, and its reset seed.

::

    env = RecordEpisodes(gymnasium.make("CartPole-v1"), "cartpole_data")               # one env
    envs = RecordVectorEpisodes(gymnasium.make_vec("CartPole-v1", 4), "cartpole_data")  # a VectorEnv
    ...                      # reset / step as usual: each episode commits when it ends
    env.close()              # (or a ``with`` block)

The target is a ``ReplayBuffer`` or a folder: a store already there is appended to (it must hold the
env's fields), else one is created (``max_timesteps`` defaults to ``env.spec.max_episode_steps``).

Fields, derived from the spaces and named as ``memmap_replay.interop`` names them, so that the store
exports to Minari (and with Box or Discrete spaces to D4RL) as it is (``gymnasium_fields`` gives them,
for a store of your own):

- observation -> ``observation``; a Dict space -> ``observation__<key>`` per key, a Tuple space ->
  ``observation__<index>``, nested ones ``observation__<key>__<key>``. The action -> ``action``,
  ``action__<key>``, ... Keys must be letters, digits and ``_`` without ``__`` (else refused: rename them
  with a wrapper), and a field name is at most 64 characters.
- Box -> its dtype and shape; Discrete -> int64; MultiDiscrete, MultiBinary -> their dtype and shape.
  Other spaces (Text, Graph, Sequence, OneOf) are refused.
- ``reward``: float64. ``info__<key>`` for each key of ``info_fields`` (info key -> field spec; an info
  that lacks the key stores the field's default). ``fields=`` overrides a derived spec.
- meta field ``seed`` (int64): the seed ``reset`` gave the episode's env, -1 when none (an autoreset, or
  a vector env other than Sync/AsyncVectorEnv, whose seeding is its own; the card has its seeds).

Row t of an episode holds observation t, the info that came with it (row 0: the reset's info), the
action taken there and its reward; the final row holds the observation after the last action and the
info of that step (Minari's layout: T + 1 observations and infos). Episode ends:

- the env says terminated or truncated: the episode commits with that end and its final row, so
  n-step targets bootstrap right;
- ``reset()`` in the middle of an episode (or a vector ``reset_mask`` naming its env), and ``close()``:
  ``partial='commit'`` (the default) commits it with an unspecified end and the last observation as
  final observation (bootstrapping from it is right: the episode was cut, not ended);
  ``partial='discard'`` drops it;
- an exception from the env or the store, or one leaving a ``with`` block: the episodes in progress are
  discarded, and ``step`` needs a ``reset`` first.

Vector envs: the autoreset modes NEXT_STEP (the step after an end resets that env: its action is ignored
and nothing is recorded), SAME_STEP (the final observation and info come in ``info['final_obs']`` and
``info['final_info']``) and DISABLED (reset ended envs with ``reset(options={'reset_mask': mask})``).

The dataset card gets the env spec and spaces, a provenance record per recording, and at close the
seeds given to ``reset`` (``seeds['reset']``, in order).

Modules: ``fields`` (spaces -> fields), ``recorder`` (the store and the card), ``single``
(``RecordEpisodes``), ``vector`` (``RecordVectorEpisodes``).
"""

import importlib

try:
    importlib.import_module("gymnasium.vector").VectorWrapper  # gymnasium >= 1.0
except (ImportError, AttributeError) as error:  # an optional dependency
    raise ImportError(
        f"memmap_replay.recording needs gymnasium >= 1.0 ({error}): pip install 'memmap-replay[io]'") from None

from .fields import gymnasium_fields
from .single import RecordEpisodes
from .vector import RecordVectorEpisodes

__all__ = ["RecordEpisodes", "RecordVectorEpisodes", "gymnasium_fields"]
