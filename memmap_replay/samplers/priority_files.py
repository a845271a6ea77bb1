"""A prioritized sampler's files in the store folder: ``priorities/<name>.npy`` (the raw priority per row,
float64, then the largest priority seen) and ``priorities/<name>.owner.npy`` (per episode slot, the id
whose priorities the rows hold, -1 for none), opened for a writable buffer's sampler (locked, grown,
written as priorities change), or read once, bounded and read-only, for a reader's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..core import folderio
from ..errors import (CorruptStoreError, DiskFullError, MissingFileError, OptionError, ReadOnlyError,
                     StoreLockedError, UnsafeEntryError)
from ..core.format import PRIORITIES_DIR, npy_header, read_npy_header
from ..core.lock import WriterLock

__all__ = ["PriorityFiles", "read_stored_priorities"]


class PriorityFiles:
    """``priorities/<name>.npy`` and ``.owner.npy`` in the store folder, memory-mapped for writing, under
    a lock of their own (one sampler per name at a time). Opened under the folder rules of ``folderio``:
    never through a link, never a special or shared file."""

    def __init__(self, folder: Path, name: str, rows: int, slots: int, spec: dict):
        self.folder = folder = Path(folder)
        directory = folder / PRIORITIES_DIR
        try:
            folderio.make_dir(folder, directory)
            self.lock = WriterLock(directory / f"{name}.lock", folder=folder)
        except StoreLockedError:
            raise StoreLockedError(
                f"another sampler (in this or another process) keeps the priorities {name!r} of {folder}; close it "
                f"first, or give this one another name= (or persist=False)"
            ) from None
        except (ReadOnlyError, DiskFullError, UnsafeEntryError) as error:
            raise type(error)(f"{error}; pass persist=False to keep priorities in memory") from None
        try:
            folderio.remove_temps(directory, f"{name}.json")  # a killed sampler's (the lock is ours now)
            self._check_spec(directory / f"{name}.json", spec, name)
            self.values_path = values_path = directory / f"{name}.npy"
            owner_path = directory / f"{name}.owner.npy"
            self.values, fresh = self._open(values_path, np.float64, rows, 0.0)
            if fresh:  # new (or replaced after damage): no slot owns any priority any more
                folderio.remove(folder, owner_path)
            self.owner, _ = self._open(owner_path, np.int64, slots, -1)
        except BaseException:
            self.lock.release()
            raise

    def _check_spec(self, path: Path, spec: dict, name: str) -> None:
        """The priorities under a name belong to one kind of view: refuse another's."""
        try:
            stored = folderio.read_json(self.folder, path)
        except MissingFileError:
            stored = None
        except UnsafeEntryError:
            raise
        except CorruptStoreError:
            stored = "damaged"
        if stored == spec:
            return
        if stored not in (None, "damaged") and os.path.lexists(path.with_suffix(".npy")):
            raise OptionError(
                f"the priorities {name!r} in {path.parent} belong to another view ({stored}); this sampler "
                f"draws from {spec}: pass another name= (or delete {path.parent}/{name}.*)"
            )
        for stale in (path.with_suffix(".npy"), path.with_name(f"{name}.owner.npy")):
            folderio.remove(self.folder, stale)  # no record of their view: start afresh
        folderio.write_atomic(self.folder, path, json.dumps(spec).encode())

    def _open(self, path: Path, dtype, length: int, fill) -> tuple[np.ndarray, bool]:
        """The file's map, and whether it was made afresh."""
        try:
            offset, found, shape, size = read_npy_header(path, self.folder)
            whole = found == dtype and shape == (length,) and size >= offset + length * found.itemsize
        except MissingFileError:
            whole = None
        except UnsafeEntryError:
            raise
        except CorruptStoreError:
            whole = False
        if whole:  # (numpy would silently pad a truncated file with zeros: priority 0, never drawn)
            return self._map(path, folderio.open_write(self.folder, path, os.O_RDWR), dtype, length, offset), False
        if whole is not None:
            folderio.remove(self.folder, path)  # damaged or of another size: start this file afresh
        header = npy_header(np.dtype(dtype), (length,))
        fd = folderio.open_write(self.folder, path, os.O_RDWR | os.O_CREAT | os.O_EXCL, doing="create")
        try:  # blocks reserved now: a full disk fails here, never as a SIGBUS on a later write to the map
            with folderio.errors_named(path, "create"):
                folderio.write_all(fd, header)
                os.posix_fallocate(fd, 0, len(header) + length * np.dtype(dtype).itemsize)
        except BaseException as error:
            os.close(fd)
            folderio.remove(self.folder, path)
            if isinstance(error, DiskFullError):
                raise DiskFullError(f"{error}; or pass persist=False to keep priorities in memory") from None
            raise
        array = self._map(path, fd, dtype, length, len(header))
        if fill:
            array[:] = fill
        return array, True

    @staticmethod
    def _map(path: Path, fd: int, dtype, length: int, offset: int) -> np.ndarray:
        """A writable map of ``length`` items after ``offset`` of the file open at ``fd`` (closed here)."""
        with os.fdopen(fd, "r+b") as file, folderio.errors_named(path, "map"):
            return np.memmap(file, dtype=dtype, mode="r+", offset=offset, shape=(length,))

    def close(self) -> None:
        for array in (self.values, self.owner):
            array.flush()
        self.lock.release()


def read_stored_priorities(folder: Path, name: str, rows: int, slots: int, spec: dict
                           ) -> tuple[np.ndarray, np.ndarray] | None:
    """A read-only reader's view of ``priorities/<name>.npy`` and ``.owner.npy`` (values, owner): read-only
    maps, taken without the lock and writing nothing (the caller gathers the live rows from them, so memory
    follows the rows in use, not the capacity); None when there are none, or none whole and of this view's
    spec (the writable path would start those afresh). Another view's priorities under the name are
    refused, as the writable path refuses them."""
    directory = Path(folder) / PRIORITIES_DIR
    spec_path = directory / f"{name}.json"
    try:
        stored = folderio.read_json(folder, spec_path)
    except MissingFileError:
        return None
    except CorruptStoreError:
        return None
    if stored != spec:
        raise OptionError(
            f"the priorities {name!r} in {directory} belong to another view ({stored}); this sampler draws "
            f"from {spec}: pass another name=, or persist=False to start this read-only reader at priority 1.0"
        )
    arrays = []
    for path, dtype, length in ((directory / f"{name}.npy", np.dtype(np.float64), rows),
                                (directory / f"{name}.owner.npy", np.dtype(np.int64), slots)):
        try:
            offset, found, shape, size = read_npy_header(path, folder)
        except (MissingFileError, CorruptStoreError):
            return None
        if found != dtype or shape != (length,) or size < offset + length * dtype.itemsize:
            return None  # damaged or of another size: as if there were none
        with os.fdopen(folderio.open_read(folder, path), "rb") as file, folderio.errors_named(path, "map"):
            if os.fstat(file.fileno()).st_size < offset + length * dtype.itemsize:  # shrunk since the header
                return None
            arrays.append(np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(length,)))
    return arrays[0], arrays[1]
