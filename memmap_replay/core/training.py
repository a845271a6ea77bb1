"""Training states in a store folder: ``training/<name>.json`` and the arrays saved with it, one commit.

A training state is a run's place (its loaders', samplers', rate limiters' ``state_dict()`` and the user's
own values, JSON) and the arrays that go with it (the priorities of its prioritized samplers, as snapshots).
It is written by the store's commit protocol: each array first, as ``training/<name>.<generation>.<i>.npy``
(a fresh temp file, fsync, ``os.replace``, fsync of the folder), then ``training/<name>.json``, which
names the generation, the same way (its replacement is the commit point), and last the files of older
generations are removed. A kill at any instant leaves the old state or the new one, each whole with its
arrays; files of a generation that never committed are removed by the next save. Saves of one name are
serialised by ``training/<name>.lock`` (``flock``, held for the save only).

Reads follow the folder-trust rules (``folderio``): regular files inside the folder only, the JSON
bounded (``MAX_JSON_BYTES``), each array bounded by the caller's limit, loaded without pickle, of a dtype
and shape the JSON names, and its SHA-256 checked. A state names the store it was saved for
(``store_id``): a folder overwritten by another store since refuses it.

Numpy only. The names of arrays and what they mean are the caller's (``buffer.save_training_state``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import folderio
from .format import TRAINING_DIR
from .options import is_file_name
from ..errors import CorruptStoreError, InvalidDataError, MissingFileError, OptionError, StoreNotFoundError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["TRAINING_DIR", "training_state_name", "write_training_state", "read_training_state"]

FORMAT_NAME = "memmap_replay.training_state"
VERSION = 1
_DTYPES = ("float64", "int64")
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# a saved array's file after ``<name>``: ``.<generation>.<i>.npy``; then, for a temp file of any of a state's files
ARRAY_SUFFIX, TEMP_SUFFIX = r"\.([0-9a-f]{12})\.\d+\.npy", r"(\.\d+\.[0-9a-f]+\.tmp)?"
# every file a training state may have: name.json, name.lock, its arrays, their temps (``checks``: a store's own)
STATE_FILE = re.compile(rf"[A-Za-z0-9_-]{{1,64}}(\.json|\.lock|{ARRAY_SUFFIX}){TEMP_SUFFIX}")


def training_state_name(name: Any) -> str:
    """A training state's name: 1 to 64 ASCII letters, digits, '_' or '-' (a file name), not only '_' and '-'."""
    if not is_file_name(name):
        raise OptionError(f"a training state's name must be 1 to 64 letters, digits, '_' or '-' (a file name), e.g. "
                          f"'run1' (got {name!r})")
    return name


def _json_value(value: Any) -> Any:
    """``json.dumps``'s fallback: numpy scalars as Python numbers; anything else is refused."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(f"a {type(value).__name__} is not JSON")


def _encoded(document: dict[str, Any]) -> bytes:
    try:
        return json.dumps(document, default=_json_value, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise InvalidDataError(f"a training state must hold plain JSON values (dicts with str keys, lists, str, "
                               f"finite numbers, bools, None) and objects with state_dict(): {error}") from None


@contextmanager
def _locked(folder: Path, name: str) -> Iterator[None]:
    """``training/<name>.lock`` held (blocking: saves of one name wait for each other)."""
    fd = folderio.open_write(folder, folder / TRAINING_DIR / f"{name}.lock", os.O_RDWR | os.O_CREAT, doing="lock")
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (drops the flock)


def _array_file(name: str, generation: str, index: int) -> str:
    return f"{name}.{generation}.{index}.npy"


def write_training_state(folder: Path, name: str, state: dict[str, Any], arrays: dict[str, np.ndarray], *,
                         store_id: str) -> None:
    """Commit ``state`` (JSON-able) and ``arrays`` (key -> float64 or int64 array) as the training state
    ``name`` of the store ``store_id`` in ``folder`` (see the module docstring)."""
    name = training_state_name(name)
    folder = Path(folder)
    generation = secrets.token_hex(6)
    entries = {}
    for index, (key, array) in enumerate(arrays.items()):
        array = np.ascontiguousarray(array)
        if not _KEY.fullmatch(key) or array.dtype.name not in _DTYPES:
            raise InvalidDataError(f"array {key!r} of a training state must be named by letters, digits, '_', '.' or "
                                   f"'-' and be one of {_DTYPES} (got {array.dtype})")
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        entries[key] = (index, buffer.getvalue(), array)
    document = {"format": FORMAT_NAME, "version": VERSION, "store_id": store_id, "generation": generation,
                "state": state,
                "arrays": {key: {"index": index, "dtype": array.dtype.name, "shape": list(array.shape),
                                 "sha256": hashlib.sha256(data).hexdigest()}
                           for key, (index, data, array) in entries.items()}}
    encoded = _encoded(document)  # (refused before anything is written)
    directory = folder / TRAINING_DIR
    folderio.make_dir(folder, directory, doing="make the training states' folder")
    with _locked(folder, name):
        for key, (index, data, _) in entries.items():
            folderio.write_atomic(folder, directory / _array_file(name, generation, index), data, durable=True,
                                  doing="save the training state's arrays")
        folderio.write_atomic(folder, directory / f"{name}.json", encoded, durable=True,
                              doing="save the training state")
        _remove_stale(folder, directory, name, generation)


def _remove_stale(folder: Path, directory: Path, name: str, generation: str) -> None:
    """Remove the arrays of other generations of ``name`` (committed before, or never committed) and the temp
    files of killed saves (the caller holds the name's lock)."""
    pattern = re.compile(rf"{re.escape(name)}{ARRAY_SUFFIX}{TEMP_SUFFIX}")
    with folderio.errors_named(directory, "clean up"):
        entries = os.listdir(directory)
    for entry in entries:
        found = pattern.fullmatch(entry)
        stale = found is not None and (found.group(1) != generation or found.group(2) is not None)
        if stale or folderio.is_temp_of(entry, f"{name}.json"):
            folderio.remove(folder, directory / entry, doing="remove an old training state's file")


def read_training_state(folder: Path, name: str, *, store_id: str, array_bytes: int
                        ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(state, arrays) of the training state ``name`` in ``folder``, checked (see the module docstring);
    ``array_bytes``: the most bytes an array file may have."""
    name = training_state_name(name)
    folder = Path(folder)
    path = folder / TRAINING_DIR / f"{name}.json"
    try:
        document = folderio.read_json(folder, path, doing="read the training state")
    except MissingFileError:
        raise StoreNotFoundError(f"no training state {name!r} in {folder / TRAINING_DIR}: save one first with "
                                 f"buffer.save_training_state({name!r}, state)") from None
    where = f"the training state {path}"
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise CorruptStoreError(f"{where} is not one (no format {FORMAT_NAME!r}); save it again")
    if document.get("version") != VERSION:
        raise CorruptStoreError(f"{where} is of version {document.get('version')!r}; this library reads version "
                                f"{VERSION}: upgrade memmap_replay, or save it again")
    if document.get("store_id") != store_id:
        raise CorruptStoreError(f"{where} was saved for another store (store_id {document.get('store_id')!r}; this "
                                f"folder holds {store_id!r}: it was overwritten since); save a new one")
    generation, described, state = document.get("generation"), document.get("arrays"), document.get("state")
    if (not isinstance(generation, str) or not re.fullmatch(r"[0-9a-f]{12}", generation)
            or not isinstance(described, dict) or not isinstance(state, dict)):
        raise CorruptStoreError(f"{where} is damaged (its generation, arrays or state); save it again")
    arrays = {key: _read_array(folder, name, generation, key, entry, array_bytes, where)
              for key, entry in described.items()}
    return state, arrays


def _read_array(folder: Path, name: str, generation: str, key: Any, entry: Any, limit: int, where: str) -> np.ndarray:
    if (not isinstance(key, str) or not _KEY.fullmatch(key) or not isinstance(entry, dict)
            or type(entry.get("index")) is not int or not 0 <= entry["index"] < 1 << 20
            or entry.get("dtype") not in _DTYPES or not isinstance(entry.get("shape"), list)
            or not isinstance(entry.get("sha256"), str)):
        raise CorruptStoreError(f"{where} describes array {key!r} wrongly ({str(entry)[:200]}); save it again")
    path = folder / TRAINING_DIR / _array_file(name, generation, entry["index"])
    try:
        data = folderio.read_bounded(folder, path, limit, doing="read the training state's arrays")
    except MissingFileError:
        raise CorruptStoreError(f"{path}, an array of {where}, is missing; save the training state again") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CorruptStoreError(f"{path} does not match its checksum in {where} (damaged); save it again")
    try:
        array: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as error:
        raise CorruptStoreError(f"{path} is not a .npy array ({error}); save the training state again") from None
    if array.dtype.name != entry["dtype"] or list(array.shape) != entry["shape"]:
        raise CorruptStoreError(f"{path} holds {array.dtype} {array.shape}, not what {where} says; save it again")
    return array
