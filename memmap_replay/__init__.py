"""memmap_replay: a disk-backed memmap episode store for reinforcement learning."""

from .buffer import EpisodeMeta, ReplayBuffer
from .errors import (BufferFullError, CorruptStoreError, EpisodeStateError, InvalidDataError, NotAFolderError,
                     ReadOnlyError, ReplayError, SchemaError, SchemaMismatchError, StoreLockedError,
                     StoreNotFoundError, UnsupportedFormatError)
from .format import FORMAT_VERSION
from .schema import FieldSpec, Schema
from .store import EpisodeStore
from .writer import VectorEpisodeWriter

__version__ = "0.1.0"

__all__ = [
    "ReplayBuffer",
    "EpisodeMeta",
    "EpisodeStore",
    "VectorEpisodeWriter",
    "FieldSpec",
    "Schema",
    "FORMAT_VERSION",
    "ReplayError",
    "SchemaError",
    "SchemaMismatchError",
    "InvalidDataError",
    "BufferFullError",
    "EpisodeStateError",
    "ReadOnlyError",
    "StoreNotFoundError",
    "NotAFolderError",
    "StoreLockedError",
    "CorruptStoreError",
    "UnsupportedFormatError",
]
