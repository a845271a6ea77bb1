"""What the importers and exporters share: field naming, building a store episode by episode in a temporary
folder that replaces the target only when complete, reading a store episode by episode, and the report.

Field naming (the same for every format)::

    observation                 the observation (a Box space), one row per step plus the final row
    observation__<key>          one field per leaf of a Dict observation space (nested: observation__a__b)
    observation__<i>            one field per leaf of a Tuple observation space (observation__0, ...)
    action, action__<key>, ...  the action, named the same way
    reward                      the reward
    next_observation            D4RL's next_observations, only where they are not simply the next row
    info__<key>                 each numeric info (nested dicts: info__a__b)

Per-episode (meta) fields: ``also_truncated`` (bool) appears only when some episode was both terminated
and truncated at its last step (its end code says terminated); the formats add their own (see there).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from ..core.progress import progress_bar
from ..core import folderio
from ..core import format as fmt
from ..buffer import ReplayBuffer
from ..sharing.building import check_room, place, remove as _remove, temporary_sibling
from ..sharing.checksums import check_new_path
from ..errors import (CorruptStoreError, InvalidDataError, NotAFolderError, OptionError, ReplayError, SchemaError,
                      StoreNotFoundError)
from ..core.extras import require_extra
from ..core.schema import NAME_PATTERN, RESERVED_NAMES
from ..core.store import EpisodeStore
from ..core.writer import whole_episode

__all__ = ["TargetExistsError", "Transfer", "StoreBuilder", "StoredEpisode", "read_store", "stored_episodes",
           "flatten", "require", "progress_bar", "pick_roles", "provenance_record", "same_bytes", "place",
           "temporary_sibling"]

OBSERVATION, ACTION, REWARD, _NEXT_OBSERVATION, INFO = "observation", "action", "reward", "next_observation", "info"
SEP = "__"
_ALSO_TRUNCATED = "also_truncated"
_COMMIT_BYTES = 64 * 2**20  # episodes are committed together up to this many bytes (one meta.json write)


class TargetExistsError(ReplayError, FileExistsError):
    """The folder or file an import or export would write already holds data."""


@dataclass
class Transfer:
    """What an import or export did: source, target, counts, bytes of step data, fields and notes."""

    kind: str
    source: str
    target: str
    episodes: int = 0
    steps: int = 0
    nbytes: int = 0
    fields: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"{self.kind}: {self.source} -> {self.target}",
                 f"  {self.episodes} episodes, {self.steps} steps, {self.nbytes / 1e6:.1f} MB"]
        lines += [f"  {name}: {how}" for name, how in self.fields.items()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def require(module: str, what: str) -> Any:
    """Import an optional package of the ``io`` extra, or ``MissingExtraError`` (an ImportError) saying how
    to install it (``core.extras.require_extra``)."""
    return require_extra(module, "io", what)


def provenance_record(kind: str, source: Any, **details: Any) -> dict:
    """A provenance record as ``card.add_provenance`` makes one, for a card written elsewhere (an export)."""
    from .._version import __version__

    return {"kind": kind, "source": os.fspath(source), "tool": f"memmap_replay {__version__}",
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"), **details}


# ---- naming ------------------------------------------------------------------------------------------------


def _field_name(name: str, where: str) -> str:
    if not NAME_PATTERN.fullmatch(name) or name in RESERVED_NAMES:
        raise InvalidDataError(
            f"{where} cannot become the field {name!r}: field names are a letter then up to 63 letters, digits or "
            f"underscores, not {sorted(RESERVED_NAMES)}; keys of Dict spaces and infos must be such names too")
    return name


def flatten(value: Any, prefix: str, where: str) -> dict[str, np.ndarray]:
    """A nested dict / tuple of arrays as {prefix__key__...: array}; a Tuple's items are numbered."""
    if isinstance(value, Mapping):
        items = [(str(key), sub) for key, sub in value.items()]
    elif isinstance(value, tuple):
        items = [(str(number), sub) for number, sub in enumerate(value)]
    else:
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise InvalidDataError(f"{where} holds {array.dtype} values (strings or objects), which a store cannot "
                                   f"hold; only numbers and bools can be imported")
        return {_field_name(prefix, where): array}
    out: dict[str, np.ndarray] = {}
    for key, sub in items:
        for name, array in flatten(sub, f"{prefix}{SEP}{key}", f"{where}[{key!r}]").items():
            if name in out:  # e.g. {"a__b": x, "a": {"b": y}}
                raise InvalidDataError(f"{where} has two entries that would both be stored as field {name!r}; "
                                       f"rename one of the keys (a key must not contain {SEP!r})")
            out[name] = array
    return out


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and bytes (NaN equals NaN, -0.0 differs from 0.0)."""
    return (a.shape == b.shape and a.dtype == b.dtype
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


# ---- placing a finished result -----------------------------------------------------------------------------


def _check_target(target: Path, overwrite: bool, is_ours, *, file: bool = False) -> None:
    """``target`` may be written: absent, an empty folder (unless it is to be a ``file``), or (with
    overwrite) something ``is_ours`` accepts; never a symbolic link, nor inside a store's folder."""
    check_new_path(target, "the target", TargetExistsError)
    if file and target.is_dir():
        raise TargetExistsError(f"{target} is a folder; the target must be the path of a file to write (e.g. "
                                f"{target / 'data.hdf5'}), or remove the folder")
    if not target.exists():
        if not target.parent.is_dir():
            raise NotAFolderError(f"{target.parent} must be an existing folder to hold {target.name}; create it first")
        return
    if target.is_dir() and not any(target.iterdir()):
        return
    if not overwrite:
        raise TargetExistsError(f"{target} already exists; pass overwrite=True (--overwrite) to replace it, or "
                                f"choose another target")
    if not is_ours(target):
        raise TargetExistsError(f"{target} exists and is not what overwrite may replace (it must hold a store, a "
                                f"Minari dataset or a D4RL file); remove it yourself or choose another target")


# ---- building a store ----------------------------------------------------------------------------------------


class StoreBuilder:
    """A new store built in a hidden sibling of ``folder`` and moved onto it by ``finish`` (a failed or
    interrupted import leaves ``folder`` as it was). Episodes are committed in groups of up to 64 MB.

    ``fields``/``meta_fields`` map name -> (dtype, shape); every value added must have exactly that dtype
    (no cast, so nothing is rounded)."""

    def __init__(self, folder: str | os.PathLike, fields: Mapping[str, tuple], meta_fields: Mapping[str, tuple], *,
                 episodes: int, max_timesteps: int, rows: int, overwrite: bool, room: Mapping[str, Any] | None = None):
        self.folder = Path(folder)
        self.room = check_room(room, episodes=episodes, max_timesteps=max_timesteps, rows=rows)
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            if error.errno in folderio.DISK_FULL + folderio.DENIED:
                raise folderio.library_error(error, self.folder.parent, "create the folder") from None
            raise NotAFolderError(
                f"{self.folder.parent} cannot be created ({error.strerror}); choose another folder") from None
        _check_target(self.folder, overwrite, lambda path: (path / fmt.META_FILE).is_file())
        self.tmp = temporary_sibling(self.folder, "importing")
        self.buffer = ReplayBuffer(self.tmp, max(1, episodes), max(1, max_timesteps),
                                   fields={name: spec for name, spec in fields.items()},
                                   meta_fields=dict(meta_fields), max_steps=max(rows, max_timesteps + 1))
        self.schema = self.buffer.schema
        self.pending: list = []
        self.pending_bytes = 0
        self.steps = self.nbytes = self.episodes = 0

    def add(self, steps: Mapping[str, np.ndarray], meta: Mapping[str, Any], *, end: str | None,
            final: Mapping[str, np.ndarray] | None, where: str) -> None:
        for group, values, specs in (("field", steps, self.schema.fields), ("field", final or {}, self.schema.fields),
                                     ("meta field", meta, self.schema.meta_fields)):
            for name, value in values.items():
                dtype = np.asarray(value).dtype
                if dtype != specs[name].dtype:
                    raise InvalidDataError(f"{where}: {group} {name!r} has dtype {dtype} where earlier episodes had "
                                           f"{specs[name].dtype}; a store field has one dtype and import never casts")
        episode = whole_episode(self.schema, self.buffer.max_timesteps, {**steps, **meta}, end=end, final=final)
        nbytes = sum(chunk.nbytes for chunks in episode.rows.values() for chunk in chunks)
        self.pending.append(episode)
        self.pending_bytes += nbytes
        self.steps += episode.length
        self.nbytes += nbytes
        self.episodes += 1
        if self.pending_bytes >= _COMMIT_BYTES:
            self.flush()

    def flush(self) -> None:
        self.buffer.episode_store.commit(self.pending)
        self.pending, self.pending_bytes = [], 0

    def finish(self, card: Mapping[str, Any], kind: str, source: str, details: Mapping[str, Any]) -> Path:
        from ..sharing.card import add_provenance, update_card

        self.flush()
        if self.room:
            self.buffer.grow(**self.room)
        self.buffer.close()
        if card:
            update_card(self.tmp, **card)
        add_provenance(self.tmp, kind, source, **details)
        place(self.tmp, self.folder)
        return self.folder

    def abort(self) -> None:
        """Drop the half-built store (called while an error is on its way out: a second failure, say of a
        full disk, while cleaning up must not hide the first)."""
        try:
            self.buffer.close()
        except (ReplayError, OSError):
            pass
        try:
            _remove(self.tmp)
        except (ReplayError, OSError):
            pass

    def __enter__(self) -> "StoreBuilder":
        return self

    def __exit__(self, kind, *exc_info) -> None:
        if kind is not None or self.tmp.exists():
            self.abort()


def _spec_of(array: np.ndarray, name: str) -> tuple[str, tuple[int, ...]]:
    """(dtype, shape of one row) of a (T, ...) array; a row of size 0 cannot be stored."""
    if 0 in array.shape[1:]:
        raise InvalidDataError(f"{name} has rows of shape {array.shape[1:]}, which hold no value; a store field "
                               f"needs at least one value per row")
    return array.dtype.name, tuple(int(dim) for dim in array.shape[1:])


# ---- reading a store -------------------------------------------------------------------------------------------


@dataclass
class StoredEpisode:
    """One live episode of a store: step fields (T, ...), the final row (or None), end, meta values."""

    number: int
    steps: dict
    final: dict | None
    end: str | None
    meta: dict

    @property
    def length(self) -> int:
        return len(next(iter(self.steps.values())))


def read_store(folder: str | os.PathLike) -> EpisodeStore:
    """Open a store read-only; a path without one is StoreNotFoundError (NotAFolderError for a file)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise NotAFolderError(f"{path} must be a store folder (got a file)")
    if not (path / fmt.META_FILE).is_file():
        raise StoreNotFoundError(f"no store at {path}: it holds no meta.json")
    return EpisodeStore.open(path, "r")


def stored_episodes(store: EpisodeStore, fields: tuple[str, ...] | None = None,
                    meta_fields: tuple[str, ...] | None = None) -> Iterator[StoredEpisode]:
    """The live episodes oldest first, each read on its own: a raw field with plain file reads (no memory map, so
    that the process's resident memory stays one episode however large the store), a compressed field decoded
    from its frames (``store.step_array(name).take``: a fraction of the raw bytes, in the page cache)."""
    table = store.live_table()
    fields = tuple(store.schema.fields) if fields is None else fields
    meta_fields = tuple(store.schema.meta_fields) if meta_fields is None else meta_fields
    metas = {name: store.meta_array(name) for name in meta_fields}
    descriptors, raw = {}, {}
    try:
        for name in fields:  # regular files inside the folder only (folderio)
            file = store.steps[name]
            if isinstance(file, fmt.NpyFile):
                raw[name] = file
                descriptors[name] = folderio.open_read(store.folder, file.path)
        for number in range(len(table)):
            start, length, slot = int(table.start[number]), int(table.length[number]), int(table.slots[number])
            rows = length + int(table.final[number])
            read = {name: _read_rows(descriptors[name], raw[name], start, rows) if name in raw
                    else store.step_array(name).take(np.arange(start, start + rows)) for name in fields}
            steps = {name: array[:length] for name, array in read.items()}
            final = {name: array[length] for name, array in read.items()} if table.final[number] else None
            meta = {name: np.array(array[slot]) for name, array in metas.items()}
            yield StoredEpisode(number, steps, final, fmt.END_NAMES[int(table.end[number])], meta)
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)


def _read_rows(descriptor: int, file: fmt.NpyFile, start: int, count: int) -> np.ndarray:
    out = np.empty((count, *file.spec.shape), file.spec.dtype)
    view, position, done = out.data.cast("B"), file.offset + start * file.spec.row_nbytes, 0
    while done < len(view):
        with folderio.errors_named(file.path, "read"):
            got = os.preadv(descriptor, [view[done:]], position + done)
        if got == 0:
            raise CorruptStoreError(f"{file.path} is truncated: rows {start}..{start + count - 1} are not all on disk")
        done += got
    return out


def pick_roles(store: EpisodeStore, observation: Any, action: Any, reward: Any) -> tuple[list[str], list[str], str]:
    """The fields of the observation and the action (``_pick_fields``) and the reward field, each field in
    one role only (an export that wrote one field as both would not read back)."""
    specs = store.schema.fields
    if not isinstance(reward, str) or reward not in specs:
        raise SchemaError(f"the store has no field {reward!r} for the rewards; its fields are {list(specs)}: "
                          f"pass reward=NAME")
    roles: dict[str, str] = {}
    for role, names in (("observation", _pick_fields(store, observation, OBSERVATION, "observation", "observation")),
                        ("action", _pick_fields(store, action, ACTION, "action", "action")), ("reward", [reward])):
        for name in names:
            if name in roles:
                raise SchemaError(f"the field {name!r} cannot be both the {roles[name]} and the {role}: each must be "
                                  f"its own field; pass observation=, action= and reward= naming different fields")
            roles[name] = role
    return ([name for name, role in roles.items() if role == "observation"],
            [name for name, role in roles.items() if role == "action"], reward)


def _pick_fields(store: EpisodeStore, given: Any, default: str, what: str, option: str) -> list[str]:
    """The step fields that make up ``what`` (e.g. the observation): ``given`` (a name or list of names), or
    the field ``default``, or its nested fields ``default__*``."""
    names = list(store.schema.fields)
    if given is None:
        chosen = [default] if default in names else [name for name in names if name.startswith(default + SEP)]
        if not chosen:
            raise SchemaError(f"the store has no field {default!r} (nor {default}__*) for the {what}; its fields are "
                              f"{names}: pass {option}=NAME to say which field holds it")
        return chosen
    chosen = [given] if isinstance(given, str) else list(given)
    missing = [name for name in chosen if name not in names]
    if missing or not chosen:
        raise OptionError(f"{option} must name fields of the store {names} (got {chosen})")
    return chosen


def segment_notes(store) -> list[str]:
    """An export's note on the linked segments of long episodes (``long_episodes='split'``) it writes as episodes."""
    linked = int((store.links(store.live_table()) >= 0).sum())
    if not linked:
        return []
    return [f"{linked} episode(s) continue an earlier segment of a longer episode (long_episodes='split'): every "
            f"segment is written as an episode of its own, ending where it was cut (end unspecified)"]
