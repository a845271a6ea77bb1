"""memmap_replay: a disk-backed memmap episode store for reinforcement learning.

The numpy core (the store, buffer, writer, verify, card, checksums, pack, interop, stats, frames) is
imported with the package; the torch side (views, samplers, loaders, HER, shards, ``Sample``) is
imported on first use through the module ``__getattr__`` below, so ``import memmap_replay`` (and the
command line) never imports torch. ``from memmap_replay import TrajectoryView`` works as usual.
"""

import typing as _typing

from . import errors
from .buffer import EpisodeMeta
from .core.episodes import Episode, EpisodeList
from .sharing.card import DatasetCard, add_provenance, read_card, update_card, write_card
from .sharing.checksums import check_manifest, write_manifest
from .sharing.compacting import CompactReport
from .sharing.derived import discounted_return, returns_to_go
from .errors import *  # noqa: F403 - the error hierarchy, listed in errors.__all__
from .core.format import FORMAT_VERSION
from .sharing.frames import FramesWritten, contact_sheet, write_video
from .interop import (export_d4rl, export_memmap_replay_buffer, export_minari, import_d4rl, import_memmap_replay_buffer,
                      import_minari)
from .sharing.pack import pack, unpack
from .distributed.ratelimit import LimitedSampler, RateCounts, RateLimiter
from .core.schema import FieldSpec, Schema
from .sharing.stats import FieldStats, StoreStats
from .core.store import EpisodeStore
from .core.threads import get_threads, set_threads
from .sharing.verify import VerifyReport, verify
from .core.vector import VectorEpisodeWriter
from .compat import ReplayBuffer  # 0.2.3's drop-in: the native memmap_replay.buffer.ReplayBuffer + its methods
from .compat.h5 import ReplayBufferH5PY
from .compat.video import frames_to_sheet, to_uint8, trajectory_to_video

from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:  # for type checkers, IDEs and pyflakes; at run time these come from __getattr__
    from .views.dataset import Sample
    from .views.hindsight import HindsightView
    from .views.loader import BatchIndexSampler, ReplayDataLoader
    from .samplers.prioritized import PrioritizedSampler
    from .samplers.sequence import SequenceSampler
    from .samplers.base import ReplaySampler, UniformSampler
    from .samplers.mixed import MixedSampler
    from .distributed.shards import ConcatView, ShardedSampler, ShardSet, shard_folder
    from .views.kinds import NStepView, TimestepView, TrajectoryView, WindowView
    from .views.transitions import TransitionView
    from .views.gather import get_parallel_gathers, set_parallel_gathers
    from .compat.collector import EpisodeCollector
    from .compat.concat import ConcatReplayBuffer
    from .compat.datasets import (ReplayDataset, ReplayDatasetNStep, ReplayDatasetTimestep, ReplayDatasetTimeWindow,
                                  ReplayDatasetTrajectory)
    from .cli.inspect_replay_buffer import inspect_replay_buffer
    from .sharing.viewer import view
    from .sharing.recode import compress_fields, decompress_fields
    from .sharing.editing import EditReport
    from .sharing.merging import merge
    from .sharing.splitting import split

# name -> submodule, imported on first access. The torch side: importing torch takes seconds, which
# every command and every numpy-only user would pay for nothing.
_LAZY = {
    "TrajectoryView": "views.kinds",
    "TimestepView": "views.kinds",
    "WindowView": "views.kinds",
    "NStepView": "views.kinds",
    "TransitionView": "views.transitions",
    "HindsightView": "views.hindsight",
    "set_parallel_gathers": "views.gather",
    "get_parallel_gathers": "views.gather",
    "Sample": "views.dataset",
    "BatchIndexSampler": "views.loader",
    "ReplayDataLoader": "views.loader",
    "ReplaySampler": "samplers.base",
    "UniformSampler": "samplers.base",
    "PrioritizedSampler": "samplers.prioritized",
    "SequenceSampler": "samplers.sequence",
    "MixedSampler": "samplers.mixed",
    "ShardSet": "distributed.shards",
    "ShardedSampler": "distributed.shards",
    "ConcatView": "distributed.shards",
    "shard_folder": "distributed.shards",
    # memmap-replay-buffer 0.2.3's names (compat/)
    "ReplayDataset": "compat.datasets",
    "ReplayDatasetTrajectory": "compat.datasets",
    "ReplayDatasetTimestep": "compat.datasets",
    "ReplayDatasetTimeWindow": "compat.datasets",
    "ReplayDatasetNStep": "compat.datasets",
    "ConcatReplayBuffer": "compat.concat",
    "EpisodeCollector": "compat.collector",
    # (numpy only, but it loads the command line's parser: on first use too)
    "inspect_replay_buffer": "cli.inspect_replay_buffer",
    # (numpy only; the web server's modules load on first use)
    "view": "sharing.viewer",
    # (numpy only: rewriting fields compressed or raw, used rarely)
    "compress_fields": "sharing.recode",
    "decompress_fields": "sharing.recode",
    # (numpy only: edits that make new stores, used rarely)
    "merge": "sharing.merging",
    "split": "sharing.splitting",
    "EditReport": "sharing.editing",
    # gymnasium recording needs the [io] extra: kept out of __all__ so that ``from memmap_replay import *``
    # works on the core install (listed by dir() all the same)
    "RecordEpisodes": "recording",
    "RecordVectorEpisodes": "recording",
    "gymnasium_fields": "recording",
    # the Ray side needs the [ray] extra: out of __all__, as the recording names are
    "RayShardedSampler": "distributed.ray",
    "create_shard": "distributed.ray",
    "ShardActor": "distributed.ray",
    "call_shard": "distributed.ray",
}
_EXTRAS = frozenset(name for name, module in _LAZY.items() if module in ("recording", "distributed.ray"))


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ReplayBuffer",
    "EpisodeMeta",
    "Episode",
    "EpisodeList",
    "EpisodeStore",
    "VectorEpisodeWriter",
    "TrajectoryView",
    "TimestepView",
    "WindowView",
    "NStepView",
    "TransitionView",
    "HindsightView",
    "BatchIndexSampler",
    "Sample",
    "ReplaySampler",
    "UniformSampler",
    "MixedSampler",
    "PrioritizedSampler",
    "SequenceSampler",
    "ShardSet",
    "ShardedSampler",
    "ConcatView",
    "shard_folder",
    "ReplayDataLoader",
    "set_parallel_gathers",
    "set_threads",
    "get_threads",
    "get_parallel_gathers",
    "FieldSpec",
    "Schema",
    "FORMAT_VERSION",
    "verify",
    "VerifyReport",
    "contact_sheet",
    "write_video",
    "FramesWritten",
    "DatasetCard",
    "add_provenance",
    "returns_to_go",
    "CompactReport",
    "discounted_return",
    "read_card",
    "update_card",
    "write_card",
    "check_manifest",
    "write_manifest",
    "pack",
    "unpack",
    "export_d4rl",
    "export_minari",
    "import_d4rl",
    "import_minari",
    "import_memmap_replay_buffer",
    "export_memmap_replay_buffer",
    "StoreStats",
    "FieldStats",
    "RateLimiter",
    "RateCounts",
    "LimitedSampler",
    "ReplayDataset",
    "ReplayDatasetTrajectory",
    "ReplayDatasetTimestep",
    "ReplayDatasetTimeWindow",
    "ReplayDatasetNStep",
    "ConcatReplayBuffer",
    "EpisodeCollector",
    "ReplayBufferH5PY",
    "trajectory_to_video",
    "frames_to_sheet",
    "to_uint8",
    "inspect_replay_buffer",
    "view",
    "compress_fields",
    "decompress_fields",
    "merge",
    "split",
    "EditReport",
    *errors.__all__,
]
