"""The views room, where torch lives: datasets over a store (trajectory, timestep, window, n-step and
one-step transition views, hindsight relabelling) that gather a whole batch per field in one call, their
DataLoaders, and batch transforms (``views.transforms``: ToFloat, RandomShift, Rearrange, Compose,
NumpyTransform)."""

from .dataset import Sample, StoreView
from .hindsight import HindsightView
from .kinds import NStepView, TimestepView, TrajectoryView, WindowView
from .loader import BatchIndexSampler, ReplayDataLoader
from .transitions import TransitionView
from .transforms import Compose, NumpyTransform, RandomShift, Rearrange, ToFloat

__all__ = ["Sample", "StoreView", "HindsightView", "NStepView", "TimestepView", "TrajectoryView", "WindowView",
           "TransitionView", "BatchIndexSampler", "ReplayDataLoader", "Compose", "NumpyTransform", "RandomShift",
           "Rearrange", "ToFloat"]
