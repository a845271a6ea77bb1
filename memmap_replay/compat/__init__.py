"""memmap-replay-buffer 0.2.3 compatibility: its public names over this project's machinery (see docs).

The room on top of the library (below only the command line): ``ReplayBuffer`` here is 0.2.3's, a subclass of the
native ``memmap_replay.buffer.ReplayBuffer``; ``memmap_replay.ReplayBuffer`` is this one."""

from .buffer_api import ReplayBuffer

__all__ = ["ReplayBuffer"]
