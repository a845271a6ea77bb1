"""The library's errors: one base class, each also a subclass of the matching builtin.

Catch ``ReplayError`` for anything this library raises on purpose, or the builtin (``ValueError``,
``FileNotFoundError``, ...) if you do not want to import this module.
"""

from __future__ import annotations

__all__ = [
    "ReplayError",
    "SchemaError",
    "SchemaMismatchError",
    "InvalidDataError",
    "OptionError",
    "IndexTypeError",
    "ArgumentError",
    "IndexRangeError",
    "DTypeError",
    "BufferFullError",
    "EpisodeStateError",
    "ReadOnlyError",
    "StoreNotFoundError",
    "NotAFolderError",
    "StoreLockedError",
    "CorruptStoreError",
    "UnsafeEntryError",
    "MissingFileError",
    "StoreIOError",
    "UnsupportedFormatError",
    "MissingExtraError",
    "RateLimitedError",
    "ShardUnavailableError",
    "SampleExpiredError",
    "DiskFullError",
]


class ReplayError(Exception):
    """Base class of every error memmap_replay raises on purpose."""


class SchemaError(ReplayError, ValueError):
    """A field specification is malformed (bad name, dtype, shape or default)."""


class SchemaMismatchError(SchemaError):
    """A folder holds a store whose schema or capacity differs from the one asked for."""


class InvalidDataError(ReplayError, ValueError):
    """A value given to a write does not fit its field (name, shape, dtype or range)."""


class OptionError(InvalidDataError):
    """An argument of a call is of the wrong type or out of range: ``batch_size=-1``, ``alpha='x'``,
    ``overwrite='no'``, an unknown ``device`` or field name, an index that is not an int. The message says
    what the option must be, what came, and how to fix it.

    A subclass of ``InvalidDataError`` (and so of ``ReplayError`` and ``ValueError``): code that caught
    ``InvalidDataError`` for a bad option before this class existed still catches it."""


class IndexTypeError(OptionError, TypeError):
    """A view was indexed by something other than an int (``view[True]``, ``view['0']``, ``view[0.5]``): an
    ``OptionError`` that is also a ``TypeError``, as Python's own indexing errors are."""


class ArgumentError(OptionError, TypeError):
    """A call whose arguments do not fit the signature (an unknown keyword, a missing or extra argument): an
    ``OptionError`` that is also a ``TypeError``, as Python's own such errors are."""


class IndexRangeError(OptionError, IndexError):
    """An index past the end of what it indexes (``buffer.episode(5)`` with five live episodes): an
    ``OptionError`` that is also an ``IndexError``, as Python's own indexing errors are."""


class DTypeError(InvalidDataError, TypeError):
    """An array of a dtype the call cannot take (``to_uint8`` of int32 frames): an ``InvalidDataError``
    that is also a ``TypeError``, as memmap-replay-buffer 0.2.3 raised there."""


class BufferFullError(ReplayError, ValueError):
    """A non-circular store has no room left for another episode or step."""


class EpisodeStateError(ReplayError, RuntimeError):
    """A call does not fit the episode state (store outside an episode, nested episodes, ...)."""


class ReadOnlyError(ReplayError, PermissionError):
    """A write was attempted on a store opened read-only."""


class StoreNotFoundError(ReplayError, FileNotFoundError):
    """There is no store at the given folder."""


class NotAFolderError(ReplayError, NotADirectoryError):
    """The given path exists but is not a folder."""


class StoreLockedError(ReplayError, BlockingIOError):
    """Another process holds the writer lock of this folder."""


class CorruptStoreError(ReplayError, OSError):
    """A store's files are missing, truncated or inconsistent with its metadata."""


class UnsafeEntryError(CorruptStoreError):
    """An entry of a store folder is one the library will not open: a link leading out of the folder (or,
    for writing, any link), a FIFO, device or socket, a hard link shared with another file, or a file over
    its size cap. The message names the entry; ``memmap_replay verify`` lists every such entry."""


class MissingFileError(CorruptStoreError, FileNotFoundError):
    """A file a store (or a call) needs is not in the folder; the message names it."""


class StoreIOError(ReplayError, OSError):
    """The operating system failed a read or write of a store's file (an I/O error, a file that vanished,
    ...) for a reason other than a full disk (``DiskFullError``) or a permission (``ReadOnlyError``); the
    message names the file, and ``errno`` is the system's error number."""


class UnsupportedFormatError(ReplayError, ValueError):
    """A store was written in a format (or major version) this library cannot read."""


class SampleExpiredError(ReplayError, LookupError):
    """A sample refers to an episode that the ring has evicted since it was drawn."""


class DiskFullError(ReplayError, OSError):
    """The device ran out of space (or quota) during a write; nothing half-written was committed."""


class MissingExtraError(ReplayError, ImportError):
    """An optional package a call needs is not installed; the message names the pip extra to install."""


class RateLimitedError(ReplayError, TimeoutError):
    """The rate limiter did not allow an insert or sample: at once (``mode="raise"``) or within ``timeout=``."""


class ShardUnavailableError(ReplayError, TimeoutError):
    """A shard actor did not answer in time: it died and was not restarted, or it is restarting too slowly."""
