"""Flat column files, HDF5 (h5py) and ``.npz``, read and written a slice of rows at a time.

Reading: ``open_columns(path)`` lists every array (HDF5 datasets by their path, ``a/b``; npz members
without ``.npy``) with its dtype and shape. ``rows(key, start, stop)`` reads a slice: an HDF5 dataset is
sliced on disk; an npz member is *streamed* (decompressed as it is read, forward only; reading backwards
starts the member again), so neither keeps more than the rows asked for in memory, compressed or not.
The one exception is an npz member saved in Fortran order with two or more dimensions, which has no row
order on disk: it is loaded whole. Members holding Python objects (pickles) are refused, never loaded.

``RowWindow`` keeps a window of rows of several keys in memory and moves it forward episode by episode;
``encode_value`` / ``decode_value`` turn small metadata values into JSON for a card and back.

Writing: ``write_columns(path, columns, metadata, ...)`` writes columns of known length from a function
yielding their rows in order: HDF5 in one pass over the rows; npz one member after another (a zip
member is written whole before the next), so the rows are produced once per column.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ..core import format as fmt
from ..errors import InvalidDataError, UnsupportedFormatError
from .common import require

__all__ = ["open_columns", "write_columns", "Column", "RowWindow", "SUFFIXES", "encode_value", "decode_value"]

_METADATA_LIMIT = 1024  # numbers: a metadata array larger than this is not put in a card

SUFFIXES = {".hdf5": "hdf5", ".h5": "hdf5", ".npz": "npz"}
_STRING = np.dtype("O")  # the dtype listed for a text (string) array


def _kind_of(path: Path) -> str:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise UnsupportedFormatError(f"{path} must end in .hdf5, .h5 or .npz to be read or written as D4RL-style "
                                     f"flat arrays (got {path.suffix or 'no suffix'!r})")
    return kind


def open_columns(path: str | Path):
    path = Path(path)
    return (_H5Columns if _kind_of(path) == "hdf5" else _NpzColumns)(path)


class _H5Columns:
    def __init__(self, path: Path):
        h5py = require("h5py", "reading .hdf5 files")
        try:
            self.file = h5py.File(path, "r")
        except OSError as error:
            raise UnsupportedFormatError(
                f"{path} is not a readable HDF5 file ({error}); is it a D4RL .hdf5 file?") from None
        self.keys: dict[str, tuple[Any, tuple[int, ...]]] = {}  # key -> (dtype or _STRING, shape)
        self.path, self.h5py = path, h5py
        self.file.visititems(self._add)

    def _add(self, name: str, item: Any) -> None:
        if isinstance(item, self.h5py.Dataset):
            text = self.h5py.check_string_dtype(item.dtype) is not None
            self.keys[name] = (_STRING if text else item.dtype, tuple(item.shape))

    def rows(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.file[key][start:stop]

    def value(self, key: str) -> Any:
        data = self.file[key]
        if self.keys[key][0] is _STRING:
            return data.asstr()[()]
        return data[()]

    def close(self) -> None:
        self.file.close()


class _NpzColumns:
    def __init__(self, path: Path):
        self.path = path
        self.keys: dict[str, tuple[Any, tuple[int, ...]]] = {}  # key -> (dtype or _STRING, shape)
        self.streams: dict[str, tuple[Any, int]] = {}  # key -> (open stream, its position)
        self.whole: dict[str, np.ndarray | None] = {}  # key -> all its values (None until read)
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as error:
            raise UnsupportedFormatError(
                f"{path} is not a readable .npz (zip) file ({error}); is it a D4RL .npz?") from None
        self.members = {}
        for member in self.zip.namelist():
            if member.endswith(".npy"):
                key = member[:-4]
                self.members[key] = member
                with self.zip.open(member) as stream:
                    shape, fortran, dtype = self._header(stream, key)
                self.keys[key] = (_STRING if dtype.kind in "US" else dtype, shape)
                if fortran and len(shape) > 1:
                    self.whole[key] = None  # loaded on first read

    def _header(self, stream, key: str):
        try:
            dtype, shape, fortran = fmt.parse_npy_header(stream)
        except ValueError as error:
            raise UnsupportedFormatError(f"{self.path}: {key!r} is not a .npy array ({error})") from None
        if dtype.hasobject:
            raise UnsupportedFormatError(f"{self.path}: {key!r} holds Python objects (a pickle), which memmap_replay "
                                         f"never loads; save it as a numeric or string array")
        return shape, fortran, dtype

    def rows(self, key: str, start: int, stop: int) -> np.ndarray:
        dtype, shape = self.keys[key]
        if key in self.whole:
            whole = self.whole[key]
            if whole is None:
                whole = self.whole[key] = self.value(key)
            return whole[start:stop]
        row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        stream, position = self.streams.get(key, (None, 0))
        if stream is None or start < position:
            if stream is not None:
                stream.close()
            stream = self.zip.open(self.members[key])
            self._header(stream, key)
            position = 0
        skip = (start - position) * row
        while skip:
            skip -= len(stream.read(min(skip, 1 << 24)))
        data = stream.read((stop - start) * row)
        if len(data) != (stop - start) * row:
            raise InvalidDataError(f"{self.path}: {key!r} is truncated: its header says {shape[0]} rows")
        self.streams[key] = (stream, stop)
        return np.frombuffer(data, dtype=dtype).reshape((stop - start, *shape[1:]))

    def value(self, key: str) -> Any:
        with self.zip.open(self.members[key]) as stream:
            array = np.lib.format.read_array(stream, allow_pickle=False)
        return array.item() if array.dtype.kind in "US" and array.ndim == 0 else array

    def close(self) -> None:
        for stream, _ in self.streams.values():
            stream.close()
        self.zip.close()


class RowWindow:
    """Rows ``lo .. hi`` of every step key in memory; ``rows(start, stop)`` moves forward through the file."""

    def __init__(self, source, keys: list[str], length: int, chunk: int):
        self.source, self.keys, self.length = source, keys, length
        row = sum(source.keys[key][0].itemsize * math.prod(source.keys[key][1][1:]) for key in keys)
        self.chunk_rows = max(1, chunk // max(1, row))
        self.lo = self.hi = 0
        self.data: dict[str, np.ndarray] = {}

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if stop > self.hi:
            high = min(self.length, max(stop, start + self.chunk_rows))
            fresh = {key: _native(self.source.rows(key, self.hi, high)) for key in self.keys}
            keep = start - self.lo
            self.data = {key: np.concatenate([self.data[key][keep:], fresh[key]]) if key in self.data and
                         keep < len(self.data[key]) else fresh[key] for key in self.keys}
            self.lo, self.hi = start, high
        return {key: self.data[key][start - self.lo:stop - self.lo] for key in self.keys}


def _native(array: np.ndarray) -> np.ndarray:
    """Big-endian data in the machine's byte order (the same values; a store holds native dtypes)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def encode_value(value: Any) -> dict | None:
    """A metadata value as JSON: {"text": ...} or {"dtype", "shape", "data"}; None if it cannot be."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return {"text": value}
    array = np.asarray(value)
    if array.dtype.kind in "USO":
        return {"text": [item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
                         for item in array.reshape(-1).tolist()]}
    if array.dtype.kind not in "biuf" or array.size > _METADATA_LIMIT:
        return None
    data = [number if not isinstance(number, float) or math.isfinite(number) else str(number)
            for number in array.reshape(-1).tolist()]
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": data}


def decode_value(value: Any) -> Any:
    if "text" in value:
        return value["text"] if isinstance(value["text"], str) else np.array(value["text"])
    data = [float(item) if isinstance(item, str) else item for item in value["data"]]
    return np.array(data, dtype=value["dtype"]).reshape(value["shape"])


# ---- writing ---------------------------------------------------------------------------------------------------


class Column:
    """A column of ``length`` rows of ``dtype`` and ``shape``; ``rows(item)`` gives each item's rows in order."""

    def __init__(self, key: str, dtype: Any, shape: tuple, rows: Callable[[Any], np.ndarray]):
        self.key, self.dtype, self.shape, self.rows = key, np.dtype(dtype), tuple(shape), rows


def write_columns(path: Path, columns: list[Column], length: int, items: Callable[[], Iterable[Any]],
                  metadata: dict[str, Any], *, compression: str | None, bar) -> None:
    """Write the columns (``items()`` is called once per pass over the data) and the metadata values."""
    if _kind_of(path) == "hdf5":
        _write_h5(path, columns, length, items, metadata, compression, bar)
    else:
        _write_npz(path, columns, length, items, metadata, compression, bar)


def _write_h5(path, columns, length, items, metadata, compression, bar) -> None:
    h5py = require("h5py", "writing .hdf5 files")
    with h5py.File(path, "w") as file:
        sets = {column.key: file.create_dataset(column.key, shape=(length, *column.shape), dtype=column.dtype,
                                                compression=compression if length else None) for column in columns}
        position = 0
        for item in items():
            for column in columns:
                rows = column.rows(item)
                sets[column.key][position:position + len(rows)] = rows
            position += len(rows) if columns else 0
            bar.update(len(rows) if columns else 0)
        for key, value in metadata.items():
            if isinstance(value, str):
                file.create_dataset(key, data=value, dtype=h5py.string_dtype())
            else:
                file.create_dataset(key, data=value)


def _write_npz(path, columns, length, items, metadata, compression, bar) -> None:
    mode = zipfile.ZIP_DEFLATED if compression else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=mode, allowZip64=True) as archive:
        for column in columns:
            with archive.open(column.key + ".npy", "w", force_zip64=True) as stream:
                _write_header(stream, column.dtype, (length, *column.shape))
                for item in items():
                    rows = np.ascontiguousarray(column.rows(item), dtype=column.dtype)
                    stream.write(rows.tobytes())
                    bar.update(len(rows) / max(1, len(columns)))
        for key, value in metadata.items():
            array = np.asarray(value)
            with archive.open(key + ".npy", "w", force_zip64=True) as stream:
                _write_header(stream, array.dtype, array.shape)
                stream.write(np.ascontiguousarray(array).tobytes())


def _write_header(stream, dtype: np.dtype, shape: tuple) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    try:
        np.lib.format.write_array_header_1_0(stream, header)
    except ValueError:  # a header longer than 64 KiB
        np.lib.format.write_array_header_2_0(stream, header)
