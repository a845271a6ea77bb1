"""The samplers room: uniform (ring) draws, prioritized replay over a sum tree (priorities persisted in the
store folder) and prioritized sequences. A sampler draws keys (``Sample``); a view gathers them."""

from .base import ReplaySampler, UniformSampler
from .factory import SAMPLERS, make_sampler
from .prioritized import PrioritizedSampler, SequenceSampler
from .sumtree import SumTree

__all__ = ["ReplaySampler", "UniformSampler", "PrioritizedSampler", "SequenceSampler", "SumTree", "SAMPLERS",
           "make_sampler"]
