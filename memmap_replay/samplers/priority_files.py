"""A prioritized sampler's files in the store folder: ``priorities/<name>.npy`` (the raw priority per row,
float64, then the largest priority seen), ``priorities/<name>.owner.npy`` (per episode slot, the id
whose priorities the rows hold, -1 for none) and ``priorities/<name>.json`` (the view they belong to),
opened for a writable buffer's sampler (locked, written as priorities change), or read once, bounded and
read-only, for a reader's.

After a grow of the store (``core/grow.py``) the files are of the capacity they were written under, and
are remapped, not dropped: rows never move in a grow, so a longer ``max_steps`` only extends the values
(the old rows kept, the largest priority moved to the new last entry), and the owner entries go from slot
``id % old`` to ``id % new`` (``old``: the owner file's length, the ``max_episodes`` it was written under;
of two ids meeting in a slot the larger is kept: ids only grow, so the other one is evicted). The key
stride (``max_timesteps``) is not part of what the values mean (keys are computed from rows and the view):
a spec that differs only in ``key_stride`` is the same view's. A writable sampler's files are remapped in
the folder, crash-safely (each a new file beside, then ``os.replace``: a kill between two leaves files that
are each of the old size or the new one, and the next sampler finishes), under the priorities' lock; a
read-only reader remaps in memory (read-only maps of the old files, only its live rows gathered) and never
writes. A file smaller than the capacity is one of before a grow; one of another dtype, a larger one or a
truncated one is damaged: as if there were none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

import numpy as np

from ..core import folderio
from ..errors import (CorruptStoreError, DiskFullError, MissingFileError, OptionError, ReadOnlyError,
                     StoreLockedError, UnsafeEntryError)
from ..core.format import PRIORITIES_DIR, npy_header, read_npy_header
from ..core.lock import WriterLock

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["PriorityFiles", "read_stored_priorities", "same_view", "remapped_owner"]

_CHUNK = 1 << 20  # values copied at a time when a file is remapped (memory stays small whatever max_steps)
_Remap = Callable[[IO[bytes], np.ndarray, int], None]  # writes a file of ``length`` entries from ``old``


def same_view(stored: Any, spec: dict[str, Any]) -> bool:
    """``stored`` (a ``<name>.json``) names the view of ``spec``: equal, up to the key stride (a grown
    ``max_timesteps``); the values are per row, which the stride does not change."""
    if stored == spec:
        return True
    if not isinstance(stored, dict):
        return False
    return ({key: value for key, value in stored.items() if key != "key_stride"}
            == {key: value for key, value in spec.items() if key != "key_stride"})


def remapped_owner(old: np.ndarray, slots: int) -> np.ndarray:
    """An owner file's entries, written when the store had ``len(old)`` slots, at their slots among ``slots``
    (``id % slots``). An entry that is not its slot's id (damage) is dropped; of two ids meeting in one slot
    the larger is kept (ids only grow: the smaller one's episode was evicted before the other came)."""
    ids = np.asarray(old, dtype=np.int64)
    valid = (ids >= 0) & (ids % max(len(ids), 1) == np.arange(len(ids)))
    owner = np.full(slots, -1, dtype=np.int64)
    np.maximum.at(owner, ids[valid] % slots, ids[valid])
    return owner


def _write_values(file: IO[bytes], old: np.ndarray, length: int) -> None:
    """A values file of ``length`` entries from ``old`` (shorter): its rows, zeros, its largest priority last."""
    header = npy_header(np.dtype(np.float64), (length,))
    file.write(header)
    for start in range(0, len(old) - 1, _CHUNK):
        file.write(np.ascontiguousarray(old[start: min(start + _CHUNK, len(old) - 1)], dtype=np.float64).data)
    file.flush()  # blocks reserved for the rest: a full disk fails here, never as a SIGBUS on a write to the map
    os.posix_fallocate(file.fileno(), 0, len(header) + length * 8)
    file.seek(len(header) + (length - 1) * 8)
    file.write(np.asarray(old[-1:], dtype=np.float64).data)


def _write_owner(file: IO[bytes], old: np.ndarray, length: int) -> None:
    """An owner file of ``length`` slots from ``old`` (of another slot count)."""
    file.write(npy_header(np.dtype(np.int64), (length,)))
    file.write(remapped_owner(old, length).data)


class PriorityFiles:
    """``priorities/<name>.npy`` and ``.owner.npy`` in the store folder, memory-mapped for writing, under
    a lock of their own (one sampler per name at a time). Opened under the folder rules of ``folderio``:
    never through a link, never a special or shared file."""

    def __init__(self, folder: Path, name: str, rows: int, slots: int, spec: dict[str, Any]):
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
            for file in (f"{name}.json", f"{name}.npy", f"{name}.owner.npy"):
                folderio.remove_temps(directory, file)  # a killed sampler's (the lock is ours now)
            self._check_spec(directory / f"{name}.json", spec, name)
            self.values_path = values_path = directory / f"{name}.npy"
            self.owner_path = owner_path = directory / f"{name}.owner.npy"
            self.values, fresh = self._open(values_path, np.float64, rows, 0.0, _write_values)
            if fresh:  # new (or replaced after damage): no slot owns any priority any more
                folderio.remove(folder, owner_path)
            self.owner, _ = self._open(owner_path, np.int64, slots, -1, _write_owner)
        except BaseException:
            self.lock.release()
            raise

    def _check_spec(self, path: Path, spec: dict[str, Any], name: str) -> None:
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
        if same_view(stored, spec):  # the same view of a store grown to longer episodes: the values hold
            folderio.write_atomic(self.folder, path, json.dumps(spec).encode())
            return
        if stored not in (None, "damaged") and os.path.lexists(path.with_suffix(".npy")):
            raise OptionError(
                f"the priorities {name!r} in {path.parent} belong to another view ({stored}); this sampler "
                f"draws from {spec}: pass another name= (or delete {path.parent}/{name}.*)"
            )
        for stale in (path.with_suffix(".npy"), path.with_name(f"{name}.owner.npy")):
            folderio.remove(self.folder, stale)  # no record of their view: start afresh
        folderio.write_atomic(self.folder, path, json.dumps(spec).encode())

    def _open(self, path: Path, dtype: DTypeLike, length: int, fill: float, remap: _Remap) -> tuple[np.memmap, bool]:
        """The file's map, and whether it was made afresh; a shorter file (of the store before a grow) is
        first remapped to ``length`` entries by ``remap(file, old, length)``."""
        try:
            offset, found, shape, size = read_npy_header(path, self.folder)
            whole = (found == dtype and len(shape) == 1 and 0 < shape[0] <= length
                     and size >= offset + shape[0] * found.itemsize)
        except MissingFileError:
            whole = None
        except UnsafeEntryError:
            raise
        except CorruptStoreError:
            whole = False
        if whole and shape[0] < length:
            whole = self._remap(path, dtype, offset, shape[0], length, remap)
            offset = len(npy_header(np.dtype(dtype), (length,)))
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

    def _remap(self, path: Path, dtype: DTypeLike, offset: int, count: int, length: int, remap: _Remap) -> bool:
        """Replace the file of ``count`` entries at ``path`` by one of ``length`` (a new file beside, then
        ``os.replace``); False if it turns out damaged (shrunk since its header was read)."""
        fd = folderio.open_write(self.folder, path, os.O_RDONLY, doing="read")  # no link, no special file
        with os.fdopen(fd, "rb") as file, folderio.errors_named(path, "read"):
            if os.fstat(file.fileno()).st_size < offset + count * np.dtype(dtype).itemsize:
                return False
            old = np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(count,))
            self._replace(path, old, length, remap)
            del old
        return True

    def _replace(self, path: Path, old: np.ndarray, length: int, remap: _Remap) -> None:
        try:
            folderio.write_atomic(self.folder, path, lambda file: remap(file, old, length), doing="remap")
        except DiskFullError as error:
            raise DiskFullError(f"{error}; or pass persist=False to keep priorities in memory") from None

    def resize(self, rows: int, slots: int) -> None:
        """Follow a grow of the store while open: the files remapped to ``rows`` values and ``slots`` owner
        entries (as at an open: a new file beside each, then ``os.replace``), and mapped again."""
        self.values = self._resized(self.values_path, self.values, rows, _write_values)
        self.owner = self._resized(self.owner_path, self.owner, slots, _write_owner)

    def _resized(self, path: Path, array: np.memmap, length: int, remap: _Remap) -> np.memmap:
        """``array`` (the map of ``path``), or the map of ``path`` remapped to ``length`` entries."""
        array.flush()
        if len(array) == length:
            return array
        self._replace(path, array, length, remap)
        return self._map(path, folderio.open_write(self.folder, path, os.O_RDWR), array.dtype, length,
                         len(npy_header(array.dtype, (length,))))

    @staticmethod
    def _map(path: Path, fd: int, dtype: DTypeLike, length: int, offset: int) -> np.memmap:
        """A writable map of ``length`` items after ``offset`` of the file open at ``fd`` (closed here)."""
        with os.fdopen(fd, "r+b") as file, folderio.errors_named(path, "map"):
            return np.memmap(file, dtype=dtype, mode="r+", offset=offset, shape=(length,))

    def close(self) -> None:
        for array in (self.values, self.owner):
            array.flush()
        self.lock.release()


def read_stored_priorities(folder: Path, name: str, rows: int, slots: int, spec: dict[str, Any]
                           ) -> tuple[np.ndarray, np.ndarray] | None:
    """A read-only reader's view of ``priorities/<name>.npy`` and ``.owner.npy`` (values, owner): read-only
    maps, taken without the lock and writing nothing (the caller gathers the live rows from them, so memory
    follows the rows in use, not the capacity); None when there are none, or none whole and of this view's
    spec (the writable path would start those afresh). Another view's priorities under the name are
    refused, as the writable path refuses them. Files of the store before a grow (at most ``rows`` values,
    at most ``slots`` owner entries; a spec of another key stride) are returned as they are: the caller
    remaps in memory (a row past the values is unknown; an id's owner entry is at ``id % len(owner)``)."""
    directory = Path(folder) / PRIORITIES_DIR
    spec_path = directory / f"{name}.json"
    try:
        stored = folderio.read_json(folder, spec_path)
    except MissingFileError:
        return None
    except CorruptStoreError:
        return None
    if not same_view(stored, spec):
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
        if found != dtype or len(shape) != 1 or not 0 < shape[0] <= length:
            return None  # damaged, or of another store (a grow never shrinks): as if there were none
        count = shape[0]  # (fewer than ``length``: the store's before a grow)
        if size < offset + count * dtype.itemsize:
            return None  # truncated
        with os.fdopen(folderio.open_read(folder, path), "rb") as file, folderio.errors_named(path, "map"):
            if os.fstat(file.fileno()).st_size < offset + count * dtype.itemsize:  # shrunk since the header
                return None
            arrays.append(np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(count,)))
    return arrays[0], arrays[1]
