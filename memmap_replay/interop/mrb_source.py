"""Reading what memmap-replay-buffer 0.2.x wrote, as a folder from a stranger: its config, state and slots.

Its two layouts (both with the config ``metadata.pkl``, a pickled dict of ``max_episodes``,
``max_timesteps``, ``fields``, ``meta_fields``, ``circular`` and any extra keyword):

- ``ReplayBuffer``: one ``.npy`` per field, ``<field>.data.npy`` of shape (max_episodes, max_timesteps,
  *shape), ``<meta field>.data.meta.npy`` of (max_episodes, *shape), including its own ``episode_lens``
  (int32) and ``_initted`` (bool), and ``num_episodes`` / ``episode_index`` / ``timestep_index`` as int32
  scalars in ``<name>.state.npy``;
- ``ReplayBufferH5PY``: the same arrays as datasets ``data_<field>`` and ``meta_<field>`` of one HDF5 file
  ``data.h5``, and the three counters as its attributes.

Its field kinds: ``'int'`` int32, ``'float'`` float32, ``'bool'``, ``'uint8'``; a field is a kind, (kind,
shape) or (kind, shape, default), a shape an int or a tuple.

Safety: the config is read under a 1 MiB cap with ``plain_pickle.load_plain`` (plain data only, no code);
every file is opened as a regular file without following links (a FIFO never blocks); every ``.npy``
header must state exactly the dtype and shape the config implies and the file hold exactly those bytes;
an HDF5 dataset must be a plain dataset reached by a hard link (no virtual dataset, external raw file or
link into another file). Reads are one episode slot at a time; the episode table a block at a time.
"""

from __future__ import annotations

import keyword
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import folderio
from ..core import format as fmt
from ..core.schema import NAME_PATTERN, RESERVED_NAMES, FieldSpec
from ..errors import (CorruptStoreError, MissingFileError, ReplayError, SchemaError, StoreNotFoundError,
                      UnsafeEntryError, UnsupportedFormatError)
from .common import _read_rows, require
from .plain_pickle import load_plain

__all__ = ["CONFIG_FILE", "H5_FILE", "KINDS", "MrbConfig", "open_source", "parse_config", "is_mrb_path"]

CONFIG_FILE = "metadata.pkl"
H5_FILE = "data.h5"
MAX_CONFIG_BYTES = 1 << 20
KINDS = {"int": np.dtype("int32"), "float": np.dtype("float32"), "bool": np.dtype("bool"), "uint8": np.dtype("uint8")}
INTERNAL = {"episode_lens": ("int", ()), "_initted": ("bool", ())}
STATE = ("num_episodes", "episode_index", "timestep_index")
_INT32 = (1 << 31) - 1
MAX_INFLATION = 1100  # deflate's best ratio is about 1032: compressed data never grows more
_EXTRA_TEXT = 200  # an extra config value longer than this (as text) is not kept in the provenance


@dataclass
class MrbConfig:
    """A checked 0.2.x config: sizes, ring flag, field specs (user ones) and the original field forms."""

    max_episodes: int
    max_timesteps: int
    circular: bool
    fields: dict[str, FieldSpec]
    meta_fields: dict[str, FieldSpec]
    forms: dict[str, Any] = field(default_factory=dict)  # field name -> its form in the config (JSON-able)
    extra: dict[str, Any] = field(default_factory=dict)  # other keys with plain scalar values
    left_out: list[str] = field(default_factory=list)  # other keys, not kept


def is_mrb_path(path: Path) -> bool:
    """A folder holding ``metadata.pkl``, or an ``.h5``/``.hdf5`` file with ``metadata.pkl`` beside it."""
    if path.is_dir():
        return (path / CONFIG_FILE).is_file()
    return path.suffix.lower() in (".h5", ".hdf5") and (path.parent / CONFIG_FILE).is_file()


def _brief(value: Any) -> str:
    """``value`` (from a stranger's pickle) in a message: never its whole repr, which may be huge."""
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.80}" if isinstance(value, (str, bytes, int, float, type(None))) else type(value).__name__


def _scalar(value: Any) -> bool:
    """A plain scalar that fits in a card (JSON): None, a bool, a 64-bit int, a finite float, a short text."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return abs(value) < 1 << 63
    return value is None or (isinstance(value, str) and len(value) <= _EXTRA_TEXT)


def _int(value: Any, what: str, path: Any, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f" and <= {high}" if high is not None else ""
        raise CorruptStoreError(f"{path}: {what} must be an integer >= {low}{bound} (got {_brief(value)})")
    return value


def _field(name: Any, info: Any, path: Any, kind: str) -> tuple[FieldSpec, Any]:
    """(spec, JSON form) of one field of the config; the form keeps the config's spelling (shape 2 or (2,))."""
    if not isinstance(name, str):
        raise CorruptStoreError(f"{path}: {kind} names must be strings (got {_brief(name)})")
    if not NAME_PATTERN.fullmatch(name) or name in RESERVED_NAMES or keyword.iskeyword(name):
        # before any file is opened: the name becomes part of a file name (``../x``, ``/x``, a NUL byte)
        raise SchemaError(f"{path}: the {kind} {name!r:.80} cannot be imported: a store's field names are a letter "
                          f"then up to 63 letters, digits or underscores (they become file names), and not "
                          f"{sorted(RESERVED_NAMES)} or a Python keyword; in memmap-replay-buffer, copy the buffer "
                          f"into one whose fields have such names, then import that one")
    shape: Any  # the config's spelling, checked below
    if isinstance(info, str):
        kind_name, shape, default = info, (), None
    elif isinstance(info, (tuple, list)) and len(info) in (2, 3):
        kind_name, shape, default = (*info, None)[:3]
    else:
        raise CorruptStoreError(f"{path}: {kind} {name!r:.80} must be a kind, (kind, shape) or (kind, shape, default) "
                                f"(got {_brief(info)})")
    if not isinstance(kind_name, str) or kind_name not in KINDS:
        raise CorruptStoreError(f"{path}: {kind} {name!r:.80} must be of a kind in {sorted(KINDS)} (got "
                                f"{_brief(kind_name)})")
    spelled = shape  # the config's spelling (2 or (2,)), kept for an export back
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or len(shape) > 32:
        raise CorruptStoreError(f"{path}: {kind} {name!r:.80} must have a shape of up to 32 integers "
                                f"(got {_brief(shape)})")
    shape = tuple(_int(dim, f"{kind} {name!r:.80}'s shape", path, 0, 1 << 31) for dim in shape)
    if default is not None and (not isinstance(default, (bool, int, float)) or not _scalar(default)):
        raise CorruptStoreError(f"{path}: {kind} {name!r:.80} must have a default of int, float or bool (got "
                                f"{_brief(default)})")
    spec = FieldSpec(name, KINDS[kind_name], shape, default)
    if spec.row_nbytes > 1 << 31:
        raise CorruptStoreError(f"{path}: {kind} {name!r:.80} of shape {shape} is larger than any "
                                f"buffer (over 2 GiB a row)")
    form = info if isinstance(info, str) else [kind_name,
                                               list(shape) if isinstance(spelled, (tuple, list)) else spelled,
                                               *info[2:]]
    return spec, form


def parse_config(value: Any, path: Any) -> MrbConfig:
    """The checked config from the unpickled ``value`` (anything: it came from a stranger's file)."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise CorruptStoreError(f"{path} must hold a dict with string keys, as memmap-replay-buffer writes "
                                f"(got {type(value).__name__})")
    missing = [key for key in ("max_episodes", "max_timesteps", "fields") if key not in value]
    if missing:
        raise CorruptStoreError(f"{path} lacks {missing}: it is not a memmap-replay-buffer config")
    episodes = _int(value["max_episodes"], "max_episodes", path, 1, _INT32)  # its counters are int32
    steps = _int(value["max_timesteps"], "max_timesteps", path, 1, _INT32)
    circular = value.get("circular", False)
    if not isinstance(circular, bool):
        raise CorruptStoreError(f"{path}: circular must be True or False (got {_brief(circular)})")
    config = MrbConfig(episodes, steps, circular, {}, {})
    for group, kind, target in (("fields", "field", config.fields), ("meta_fields", "meta field", config.meta_fields)):
        given = value.get(group) or {}
        if not isinstance(given, dict):
            raise CorruptStoreError(f"{path}: {group} must be a dict (got {type(given).__name__})")
        for name, info in given.items():
            if kind == "meta field" and name in INTERNAL:
                continue
            target[name], config.forms[name] = _field(name, info, path, kind)
    both = set(config.fields) & set(config.meta_fields)
    if both:
        raise CorruptStoreError(f"{path}: {sorted(both)} are both fields and meta fields")
    for key, item in value.items():
        if key in ("max_episodes", "max_timesteps", "fields", "meta_fields", "circular"):
            continue
        if _scalar(item):
            config.extra[key] = item
        else:
            config.left_out.append(key)
    return config


def read_config(folder: Path) -> MrbConfig:
    path = folder / CONFIG_FILE
    try:
        data = folderio.read_bounded(folder, path, MAX_CONFIG_BYTES, links=False)
    except MissingFileError:
        raise StoreNotFoundError(f"{path} is missing: a memmap-replay-buffer folder holds its config there") from None
    return parse_config(load_plain(data, path), path)


@dataclass
class State:
    num_episodes: int
    episode_index: int
    timestep_index: int


def checked_state(values: dict[str, Any], config: MrbConfig, where: Any) -> State:
    """The three counters, each checked against the config's sizes."""
    state = State(_int(values["num_episodes"], "num_episodes", where, 0, config.max_episodes),
                  _int(values["episode_index"], "episode_index", where, 0, config.max_episodes - 1),
                  _int(values["timestep_index"], "timestep_index", where, 0, config.max_timesteps))
    if not config.circular and state.episode_index != state.num_episodes % config.max_episodes:
        raise CorruptStoreError(f"{where}: episode_index {state.episode_index} must be num_episodes "
                                f"{state.num_episodes} (mod max_episodes) in a buffer that is not circular")
    return state


# ---- the memmap layout -------------------------------------------------------------------------------------


class _Npy:
    """A checked ``.npy`` of a 0.2.x folder of shape ``want``, whose first ``lead`` dims index rows (0: one
    scalar; 1: episode slots; 2: slots, then steps), read a slot at a time."""

    def __init__(self, folder: Path, name: str, dtype: np.dtype, want: tuple[int, ...], lead: int):
        self.path = folder / name
        try:
            self.fd = folderio.open_read(folder, self.path, links=False)
        except MissingFileError:
            raise MissingFileError(f"{self.path} is missing: the config {CONFIG_FILE} lists it") from None
        try:
            self._check(folder, dtype, want, lead)
        except BaseException:
            os.close(self.fd)
            raise

    def _check(self, folder: Path, dtype: np.dtype, want: tuple[int, ...], lead: int) -> None:
        with folderio.errors_named(self.path, "read"), os.fdopen(os.dup(self.fd), "rb") as file:
            size = os.fstat(file.fileno()).st_size
            try:
                got_dtype, got_shape, fortran = fmt.parse_npy_header(file)
            except ValueError as error:
                raise CorruptStoreError(f"{self.path} is not a readable .npy file ({error})") from None
            offset = file.tell()
        if got_dtype != dtype or tuple(got_shape) != want or fortran:
            raise CorruptStoreError(f"{self.path} must hold a C-order array of {dtype} of shape {want} as "
                                    f"{CONFIG_FILE} says (got {got_dtype} of shape {tuple(got_shape)}"
                                    f"{', Fortran order' if fortran else ''})")
        rows = math.prod(want[:lead])
        self.file = fmt.NpyFile(self.path, FieldSpec(self.path.name, dtype, want[lead:]), offset, rows, False, folder,
                                size)
        needed = offset + rows * self.file.spec.row_nbytes
        if size != needed:
            raise CorruptStoreError(f"{self.path} must be {needed} bytes long for its header's shape {want} (got "
                                    f"{size}): it is {'truncated' if size < needed else 'longer than its array'}")
        self.steps = want[1] if lead == 2 else 1

    def read(self, slot: int, count: int) -> np.ndarray:
        return _read_rows(self.fd, self.file, slot * self.steps, count)

    def close(self) -> None:
        os.close(self.fd)


class FolderSource:
    """A folder written by memmap-replay-buffer's ``ReplayBuffer``."""

    kind = "folder"

    def __init__(self, folder: Path):
        self.path = folder
        self.config = read_config(folder)
        self.notes: list[str] = []
        self.files: dict[str, _Npy] = {}
        try:
            counters = {}
            for name in STATE:
                npy = _Npy(folder, f"{name}.state.npy", np.dtype("int32"), (), 0)
                counters[name] = int(npy.read(0, 1)[0])
                npy.close()
            self.state = checked_state(counters, self.config, folder)
            n, t = self.config.max_episodes, self.config.max_timesteps
            for name, (kind, shape) in INTERNAL.items():
                self.files[name] = _Npy(folder, f"{name}.data.meta.npy", KINDS[kind], (n, *shape), 1)
            for name, spec in self.config.meta_fields.items():
                self.files[name] = _Npy(folder, f"{name}.data.meta.npy", spec.dtype, (n, *spec.shape), 1)
            for name, spec in self.config.fields.items():
                self.files[name] = _Npy(folder, f"{name}.data.npy", spec.dtype, (n, t, *spec.shape), 2)
        except BaseException:
            self.close()
            raise

    def table(self, name: str, start: int, count: int) -> np.ndarray:
        """``count`` entries of the episode table ``name`` (episode_lens, _initted) from slot ``start``."""
        return self.files[name].read(start, count)

    def allocated(self, name: str) -> tuple[int, int]:
        """(bytes the file of ``name`` really holds on disk, 1): a sparse file's holes hold nothing."""
        return os.fstat(self.files[name].fd).st_blocks * 512, 1

    def steps(self, name: str, slot: int, length: int) -> np.ndarray:
        return self.files[name].read(slot, length)

    def meta(self, name: str, slot: int) -> np.ndarray:
        return self.files[name].read(slot, 1)[0]

    def close(self) -> None:
        for npy in self.files.values():
            npy.close()
        self.files = {}


# ---- the HDF5 layout -----------------------------------------------------------------------------------------


class H5Source:
    """An HDF5 file written by memmap-replay-buffer's ``ReplayBufferH5PY`` (its config beside it, if there)."""

    kind = "hdf5"

    def __init__(self, path: Path):
        h5py = require("h5py", "reading a ReplayBufferH5PY file")
        self.path = path
        self.stream = os.fdopen(folderio.open_read(path.parent, path, links=False), "rb")  # h5py never closes it
        try:
            self.file = h5py.File(self.stream, "r")
        except OSError as error:
            self.stream.close()
            raise UnsupportedFormatError(f"{path} is not a readable HDF5 file ({error})") from None
        try:
            self.notes: list[str] = []
            self.h5py = h5py
            if (path.parent / CONFIG_FILE).exists() or (path.parent / CONFIG_FILE).is_symlink():
                self.config = read_config(path.parent)
            else:
                self.config = self._inferred()
            counters = {name: self.file.attrs.get(name) for name in STATE}
            if any(value is None for value in counters.values()):
                raise UnsupportedFormatError(f"{path} lacks the attributes {list(STATE)} that ReplayBufferH5PY writes")
            self.state = checked_state({k: np.asarray(v).item() if np.ndim(v) == 0 else v for k, v in counters.items()},
                                       self.config, path)
            n, t = self.config.max_episodes, self.config.max_timesteps
            self.sets = {name: self._dataset(f"meta_{name}", KINDS[kind], (n, *shape))
                         for name, (kind, shape) in INTERNAL.items()}
            self.sets.update({name: self._dataset(f"meta_{name}", spec.dtype, (n, *spec.shape))
                              for name, spec in self.config.meta_fields.items()})
            self.sets.update({name: self._dataset(f"data_{name}", spec.dtype, (n, t, *spec.shape))
                              for name, spec in self.config.fields.items()})
        except BaseException as error:
            self.close()
            if isinstance(error, OSError) and not isinstance(error, ReplayError):  # h5py's, on a damaged file
                raise CorruptStoreError(f"{path} cannot be read as a ReplayBufferH5PY file ({error})") from None
            raise

    def _inferred(self) -> MrbConfig:
        """The config from the datasets alone (no metadata.pkl beside the file: no defaults, not circular)."""
        names = [name for name in self.file.keys() if name.startswith(("data_", "meta_"))]
        if "meta_episode_lens" not in names:
            raise UnsupportedFormatError(f"{self.path} holds no meta_episode_lens: it is not a ReplayBufferH5PY file")
        sets = {name: self._dataset(name, None, None) for name in names}  # checked before anything is read
        episodes = sets["meta_episode_lens"].shape[0] if sets["meta_episode_lens"].ndim else 0
        steps = [data.shape[1] for name, data in sets.items() if name.startswith("data_") and data.ndim >= 2]
        value: dict[str, Any] = {"max_episodes": episodes, "max_timesteps": max(steps, default=1), "circular": False,
                 "fields": {}, "meta_fields": {}}
        for name, data in sets.items():
            kind = next((key for key, dtype in KINDS.items() if dtype == data.dtype), repr(data.dtype))
            if name.startswith("data_"):
                value["fields"][name[5:]] = (kind, tuple(data.shape[2:]))
            elif name[5:] not in INTERNAL:
                value["meta_fields"][name[5:]] = (kind, tuple(data.shape[1:]))
        self.notes.append(f"no {CONFIG_FILE} beside {self.path.name}: fields were read from its datasets (no "
                          f"defaults), and the buffer taken as not circular")
        return parse_config(value, self.path)

    def _dataset(self, key: str, dtype: np.dtype | None, shape: tuple | None):
        """The plain dataset ``key``, checked (dtype None: any dtype and shape)."""
        link = self.file.get(key, getlink=True)
        if link is None:
            raise CorruptStoreError(f"{self.path} lacks the dataset {key!r} that its config lists")
        if not isinstance(link, self.h5py.HardLink):
            raise UnsafeEntryError(f"{self.path}: {key!r} is a {type(link).__name__} (it may lead to another file); "
                                   f"only plain datasets are read")
        data = self.file[key]
        if not isinstance(data, self.h5py.Dataset) or data.is_virtual or data.external:
            raise UnsafeEntryError(f"{self.path}: {key!r} must be a plain dataset stored in the file (not a group, a "
                                   f"virtual dataset, or one with external raw files)")
        if dtype is not None and (data.dtype != dtype or tuple(data.shape) != shape):
            raise CorruptStoreError(f"{self.path}: {key!r} must hold {dtype} of shape {shape} as the config says "
                                    f"(got {data.dtype} of shape {tuple(data.shape)})")
        return data

    def _read(self, data, key) -> np.ndarray:
        try:
            return np.asarray(data[key])
        except OSError as error:  # a damaged chunk, a failed filter
            raise CorruptStoreError(f"{self.path}: {data.name} cannot be read ({error})") from None

    def table(self, name: str, start: int, count: int) -> np.ndarray:
        """``count`` entries of the episode table ``name`` (episode_lens, _initted) from slot ``start``."""
        return self._read(self.sets[name], slice(start, start + count))

    def allocated(self, name: str) -> tuple[int, int]:
        """(bytes the dataset of ``name`` really holds in the file, how many times more its values may take:
        1 unfiltered, ``MAX_INFLATION`` compressed); unwritten chunks hold nothing."""
        data = self.sets[name]
        return data.id.get_storage_size(), 1 if data.id.get_create_plist().get_nfilters() == 0 else MAX_INFLATION

    def steps(self, name: str, slot: int, length: int) -> np.ndarray:
        return self._read(self.sets[name], (slot, slice(0, length)))

    def meta(self, name: str, slot: int) -> np.ndarray:
        return self._read(self.sets[name], slot)

    def close(self) -> None:
        self.file.close()
        self.stream.close()


def open_source(source: Any) -> FolderSource | H5Source:
    """The 0.2.x buffer at ``source``: a folder (with its .npy files, or with data.h5), or an .h5/.hdf5 file."""
    path = Path(os.fspath(source))
    if path.is_dir():
        if not (path / CONFIG_FILE).exists() and not (path / CONFIG_FILE).is_symlink():
            raise StoreNotFoundError(f"{path} holds no {CONFIG_FILE}: it is not a folder written by "
                                     f"memmap-replay-buffer")
        if (path / H5_FILE).exists() and not (path / "episode_lens.data.meta.npy").exists():
            return H5Source(path / H5_FILE)
        return FolderSource(path)
    if path.exists() or path.is_symlink():
        return H5Source(path)
    raise StoreNotFoundError(f"no file or folder at {path}: pass the folder a memmap-replay-buffer ReplayBuffer or "
                             f"ReplayBufferH5PY wrote (the one holding {CONFIG_FILE}), or its data.h5")

