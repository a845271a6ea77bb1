"""memmap-replay-buffer 0.2.3's ``ReplayBufferH5PY``, as a ``ReplayBuffer`` that takes its arguments.

0.2.3 kept one HDF5 file, ``FOLDER/data.h5``. This class stores in this project's format in ``FOLDER``
itself (a store folder: one .npy per field and meta.json), so it is a ``ReplayBuffer`` in every respect
(no h5py needed). For one file to share, pack the folder (``memmap-replay pack FOLDER out.tar``); to read
a ``data.h5`` written by 0.2.3, convert it once with ``memmap-replay import`` (this class refuses a folder
holding one, rather than writing a store beside it). ``h5py_compression``/``h5py_compression_opts`` are
checked and kept as attributes, but nothing is compressed (``pack`` compresses).

Extras of 0.2.3 kept: ``get_buffered_storer(flush_freq)``, and ``file`` (its h5py handle: here an
object whose ``close()`` closes the buffer and ``flush()`` flushes it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, cast

import numpy as np

from ..core.options import integer, short
from ..core.writer import segments, whole_episode
from ..errors import InvalidDataError, OptionError, UnsupportedFormatError
from .buffer_api import ReplayBuffer

__all__ = ["ReplayBufferH5PY"]

_H5_FILE = "data.h5"


def _refuse_h5_file(folder: Any) -> None:
    """A folder holding 0.2.3's data.h5 (and no store) is converted, never written beside."""
    folder = Path(folder)
    if (folder / _H5_FILE).is_file() and not (folder / "meta.json").exists():
        raise UnsupportedFormatError(
            f"{folder} holds {_H5_FILE}, written by memmap-replay-buffer's ReplayBufferH5PY; this ReplayBufferH5PY "
            f"stores in memmap-replay's format: convert the file once with 'memmap-replay import {folder} NEW_FOLDER' "
            f"(or memmap_replay.interop.import_memmap_replay_buffer) and open NEW_FOLDER")


class _FileHandle:
    """What 0.2.3's ``buffer.file`` (an ``h5py.File``) was used for: ``close()`` and ``flush()``."""

    def __init__(self, buffer: ReplayBuffer):
        self._buffer = buffer

    def close(self) -> None:
        self._buffer.close()

    def flush(self) -> None:
        self._buffer.flush()


class ReplayBufferH5PY(ReplayBuffer):
    """``ReplayBufferH5PY(folder, max_episodes, max_timesteps, fields, meta_fields=None, circular=False,
    overwrite=False, read_only=False, *, h5py_compression=None, h5py_compression_opts=None, ...)``: a
    ``ReplayBuffer`` in ``folder`` (see the module's docstring). As every ReplayBuffer here, an existing
    store is opened, never wiped, unless ``overwrite=True`` (0.2.3 wiped by default)."""

    def __init__(self, folder: str | Path, max_episodes: int | None = None, max_timesteps: int | None = None,
                 fields: Mapping[str, Any] | None = None, meta_fields: Mapping[str, Any] | None = None,
                 circular: bool = False, overwrite: bool = False, read_only: bool = False, *,
                 h5py_compression: str | None = None, h5py_compression_opts: Any = None, **options: Any):
        if h5py_compression is not None and not isinstance(h5py_compression, str):
            raise OptionError(f"h5py_compression must be None or a filter name such as 'gzip' (got "
                              f"{short(h5py_compression)})")
        if options.get("_store") is None:
            _refuse_h5_file(folder)
        super().__init__(folder, max_episodes, max_timesteps, fields, meta_fields, circular, overwrite, read_only,
                         **options)
        self.h5py_compression = h5py_compression
        self.h5py_compression_opts = h5py_compression_opts

    @classmethod
    def from_folder(cls, folder: str | Path, read_only: bool = False, **options: Any) -> "ReplayBufferH5PY":
        _refuse_h5_file(folder)
        return cast("ReplayBufferH5PY", super().from_folder(folder, read_only, **options))  # (it builds a cls)

    @property
    def file(self) -> _FileHandle:
        """0.2.3's h5py file handle, for its ``close()`` and ``flush()``."""
        return _FileHandle(self)

    def get_buffered_storer(self, flush_freq: int):
        """A function ``storer(force_flush=False, **episode)`` that keeps whole episodes in memory and stores
        them ``flush_freq`` at a time, in one commit. An episode is its step fields as (T, ...) arrays
        (T up to max_timesteps), its meta values, and optionally ``episode_lens``: its length, when the
        arrays are padded past it (0.2.3 took max_timesteps rows and the length). ``force_flush=True``
        stores what is kept (with or without a new episode)."""
        flush_freq = integer(flush_freq, "flush_freq", low=1)
        kept: list = []  # episodes checked as they came, waiting for their commit
        names: list[set] = []  # the fields of the first episode kept
        known = {*self.schema.fields, *self.schema.meta_fields, "episode_lens"}

        def buffered_storer(force_flush: bool = False, **episode: Any) -> None:
            self.episode_store.require_writable("store episodes")
            unknown = sorted(set(episode) - known)
            if unknown:
                raise InvalidDataError(f"unknown field {unknown}: the buffer's fields are {sorted(self.schema.fields)} "
                                       f"and meta fields {sorted(self.schema.meta_fields)} (and episode_lens)")
            if kept and episode and set(episode) != names[0]:
                raise InvalidDataError(f"every episode given to the storer must hold the same fields: "
                                       f"{sorted(names[0])} before, {sorted(episode)} now")
            if episode:
                pending = self._whole(episode)
                if not kept:
                    names[:] = [set(episode)]
                kept.append(segments(pending, self.max_timesteps))  # long_episodes='split': linked segments
            if kept and (force_flush or len(kept) >= flush_freq):
                self.episode_store.commit([part for parts in kept for part in parts])
                kept.clear()

        return buffered_storer

    def _whole(self, values: dict):
        values = dict(values)
        length = values.pop("episode_lens", None)
        if length is not None:
            length = integer(np.asarray(length).item() if np.ndim(length) == 0 else length, "episode_lens", low=1)
            values = {name: value[:length] if name in self.schema.fields else value for name, value in values.items()}
        return whole_episode(self.schema, self.max_timesteps, values, split=self._split)
