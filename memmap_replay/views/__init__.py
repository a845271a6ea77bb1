"""The views room, where torch lives: datasets over a store (trajectory, timestep, window and n-step views,
hindsight relabelling) that gather a whole batch per field in one call, their DataLoaders, and batch
transforms (``views.transforms``: ToFloat, RandomShift, Rearrange, Compose, NumpyTransform)."""

from .dataset import Sample, StoreView
from .hindsight import HindsightView
from .kinds import NStepView, TimestepView, TrajectoryView, WindowView
from .loader import BatchIndexSampler, ReplayDataLoader, make_dataloader, make_dataset, make_sampler
from .transforms import Compose, NumpyTransform, RandomShift, Rearrange, ToFloat

__all__ = ["Sample", "StoreView", "HindsightView", "NStepView", "TimestepView", "TrajectoryView", "WindowView",
           "BatchIndexSampler", "ReplayDataLoader", "make_dataloader", "make_dataset", "make_sampler",
           "Compose", "NumpyTransform", "RandomShift", "Rearrange", "ToFloat"]
