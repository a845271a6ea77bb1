"""memmap-replay-buffer 0.2.3's ReplayBuffer surface that our own API does not already cover: the
``LegacyBufferAPI`` mixin of ``ReplayBuffer`` (``buffer_api``), its flat batch of parallel episodes
(``flat``) and the ``data`` / ``meta_data`` indexers by (episode slot, step) (``arrays``). Numpy only.
"""

from .arrays import EpisodeArrays, FieldArray
from .buffer_api import LegacyBufferAPI
from .flat import FlatBatch

__all__ = ["EpisodeArrays", "FieldArray", "FlatBatch", "LegacyBufferAPI"]
