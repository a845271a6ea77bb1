"""The samplers room: uniform (ring) draws, prioritized replay over a sum tree (priorities persisted in the
store folder) and prioritized sequences. A sampler draws keys (``Sample``) from a view's positions (``PositionSource``);
a view gathers them. The reading room (``reading/build.py``) builds a sampler with its view. Numpy only:
importing this room never imports torch."""

from .base import BetaSchedule, ReplaySampler, Sampler, SamplerBase, UniformSampler
from .factory import SAMPLERS, sampler_class
from .mixed import MixedSampler
from .prioritized import PrioritizedSampler
from .sequence import SequenceSampler
from .sumtree import SumTree

__all__ = ["Sampler", "SamplerBase", "BetaSchedule", "ReplaySampler", "UniformSampler", "PrioritizedSampler",
           "SequenceSampler", "MixedSampler", "SumTree", "SAMPLERS", "sampler_class"]
