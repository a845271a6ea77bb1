"""memmap_replay: a disk-backed memmap episode store for reinforcement learning."""

from . import errors
from .buffer import EpisodeMeta, ReplayBuffer
from .errors import *  # noqa: F403 - the error hierarchy, listed in errors.__all__
from .format import FORMAT_VERSION
from .her import HindsightView
from .dataset import Sample
from .loader import BatchIndexSampler, ReplayDataLoader
from .prioritized import PrioritizedSampler, SequenceSampler
from .samplers import ReplaySampler, UniformSampler
from .shards import ConcatView, ShardedSampler, ShardSet, shard_folder
from .schema import FieldSpec, Schema
from .store import EpisodeStore
from .verify import VerifyReport, verify
from .views import NStepView, TimestepView, TrajectoryView, WindowView
from .writer import VectorEpisodeWriter

__version__ = "0.1.0"

__all__ = [
    "ReplayBuffer",
    "EpisodeMeta",
    "EpisodeStore",
    "VectorEpisodeWriter",
    "TrajectoryView",
    "TimestepView",
    "WindowView",
    "NStepView",
    "HindsightView",
    "BatchIndexSampler",
    "Sample",
    "ReplaySampler",
    "UniformSampler",
    "PrioritizedSampler",
    "SequenceSampler",
    "ShardSet",
    "ShardedSampler",
    "ConcatView",
    "shard_folder",
    "ReplayDataLoader",
    "FieldSpec",
    "Schema",
    "FORMAT_VERSION",
    "verify",
    "VerifyReport",
    *errors.__all__,
]
