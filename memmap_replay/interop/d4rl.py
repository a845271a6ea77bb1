"""D4RL-style flat arrays (``.hdf5`` or ``.npz``) <-> stores, a chunk of rows at a time, values exact.

The layout: ``observations`` (N, ...), ``actions`` (N, ...), ``rewards`` (N, ...), ``terminals`` (N,),
optional ``timeouts`` (N,), ``next_observations`` (N, ...), ``infos/<key>`` (N, ...) and
``metadata/<key>`` (anything). D4RL's conventions, kept both ways:

- Episodes end at each step where ``terminals`` or ``timeouts`` is set (a time-limit end is marked on the
  episode's last step). Steps after the last flag are a trailing partial episode with an unspecified end
  (an episode that was still running when the file was written); the report says so.
- ``terminals`` -> end ``terminated``, ``timeouts`` -> ``truncated``; both at one step -> ``terminated`` with
  the meta field ``also_truncated``.
- ``next_observations`` (``next_observations=`` ``'auto'``, the default): when every one inside an episode
  is byte for byte the next row's observation, only the one at the episode's last step is new and it
  becomes the final row; otherwise (``'auto'`` finds out while importing and starts again) they are kept
  whole in the field ``next_observation``. ``'final'`` insists on the first, ``'field'`` takes the second,
  ``'drop'`` leaves them out.
- ``infos/a/b`` -> field ``info__a__b``; other top-level keys are left out and listed in the report.
- ``metadata/*``: values of up to 1024 numbers, and text, go to the card's ``extra["d4rl"]["metadata"]``
  (numbers with their dtype and shape; non-finite floats as "nan"/"inf"/"-inf"); larger arrays (a policy's
  weights) are left out and listed in the provenance record.

Memory: ``chunk_mb`` of rows (all keys together, default 64 MB) or one episode, whichever is larger, plus
up to 64 MB of episodes waiting to commit. HDF5 datasets are read in slices; npz members are streamed
(decompressed as read), compressed or not, so an npz costs no more memory than an HDF5 file (except a
member saved in Fortran order, which is loaded whole).

Export (``export_d4rl``) writes the same layout: ``terminals`` / ``timeouts`` on each episode's last step
from its end code (an unspecified end is written as a timeout so that episodes still split, except for the
last episode, left open so it reads back as partial); ``next_observations`` from the field
``next_observation``, else from the final rows when every episode has one; other step fields as
``infos/...``; the card's D4RL metadata back as ``metadata/*``; and, under ``metadata/memmap_replay/``, the
card as JSON text, every episode's end code and every meta field, which an import of the file restores.
So file -> store -> file and store -> file -> store are exact (flag dtypes are restored from the card;
text metadata comes back as UTF-8 strings; a file without ``timeouts`` gets one).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core import format as fmt
from ..errors import InvalidDataError, OptionError, SchemaError, StoreNotFoundError, UnsupportedFormatError
from ..core.folderio import errors_named
from .columns import (_METADATA_LIMIT, _STRING, Column, RowWindow, decode_value, encode_value, _kind_of, open_columns,
                      write_columns)
from .common import (segment_notes, ACTION, _ALSO_TRUNCATED, INFO, _NEXT_OBSERVATION, OBSERVATION, REWARD, SEP,
                     StoreBuilder,
                     Transfer, _check_target, _field_name, pick_roles, place, progress_bar, provenance_record,
                     read_store, _remove, same_bytes, _spec_of, stored_episodes, temporary_sibling, check_room)

__all__ = ["import_d4rl", "export_d4rl"]

_STEP_KEYS = {"observations": OBSERVATION, "actions": ACTION, "rewards": REWARD}
_OURS = "metadata/memmap_replay/"
_NEXT_MODES = ("auto", "final", "field", "drop")
_MAX_CHUNK_MB = 1 << 20  # a terabyte of rows at a time: more is a typo (and inf cannot be a byte count)


class _Mismatch(Exception):
    """next_observations that are not the next row's observation inside an episode."""


# ---- import ------------------------------------------------------------------------------------------------


def import_d4rl(path: str | os.PathLike, folder: str | os.PathLike, *, next_observations: str = "auto",
                infos: bool = True, overwrite: bool = False, chunk_mb: float = 64, progress: bool = False,
                max_episodes: int | None = None, max_steps: int | None = None, max_timesteps: int | None = None,
                circular: bool = False) -> Transfer:
    """A D4RL-style ``.hdf5`` / ``.npz`` file as a new store at ``folder`` (see the module docstring).
    ``max_episodes``/``max_steps``/``max_timesteps``/``circular``: room for episodes stored after the import
    (offline data, then online episodes); None sizes the store to the dataset (``ReplayBuffer.grow`` later)."""
    room = dict(max_episodes=max_episodes, max_steps=max_steps, max_timesteps=max_timesteps, circular=circular)
    check_room(room, episodes=0, max_timesteps=0, rows=0)  # the types, before reading anything
    if next_observations not in _NEXT_MODES:
        raise OptionError(f"next_observations must be one of {_NEXT_MODES} (got {next_observations!r})")
    if isinstance(chunk_mb, bool) or not isinstance(chunk_mb, (int, float)) or not 0 < chunk_mb <= _MAX_CHUNK_MB:
        raise OptionError(f"chunk_mb must be a number of megabytes > 0 and <= {_MAX_CHUNK_MB} (got {chunk_mb!r})")
    path = Path(path)
    if not path.is_file():
        raise StoreNotFoundError(f"no file at {path}: pass the path of a D4RL .hdf5 or .npz file")
    mode = "final" if next_observations == "auto" else next_observations
    while True:
        try:
            return _import_once(path, folder, mode, infos=infos, overwrite=overwrite, chunk=int(chunk_mb * 2**20),
                               progress=progress, room=room)
        except _Mismatch as error:
            if next_observations != "auto":
                raise InvalidDataError(f"{path}: {error}; pass next_observations='field' to keep them whole") from None
            mode = "field"


def _import_once(path: Path, folder, mode: str, *, infos: bool, overwrite: bool, chunk: int, progress: bool,
                 room: dict) -> Transfer:
    source = open_columns(path)
    try:
        layout = _Layout(source, mode, infos)
        split = _Episodes(source, layout.length, chunk)
        ours = _OurMetadata(source, len(split.starts), layout.notes)
        if ours.ends is not None:
            split.codes = ours.ends
        meta_fields = dict(ours.meta_fields)
        if split.also.any():
            meta_fields[_ALSO_TRUNCATED] = ("bool", ())
        report = Transfer("import d4rl", str(path), str(folder), fields={**layout.described(), **{
            name: "episode meta" for name in meta_fields}})
        lengths = split.stops - split.starts
        rows = layout.length + (len(lengths) if layout.mode == "final" else 0)
        with StoreBuilder(folder, layout.fields, meta_fields, episodes=len(lengths),
                          max_timesteps=int(lengths.max(initial=1)), rows=rows, overwrite=overwrite,
                          room=room) as builder, \
                progress_bar(layout.length, "import", progress) as bar:
            window = RowWindow(source, list(layout.keys), layout.length, chunk)
            for number, (start, stop) in enumerate(zip(split.starts.tolist(), split.stops.tolist())):
                steps, final = layout.episode(window.rows(start, stop), start, stop)
                meta = {name: values[number] for name, values in ours.meta.items()}
                if _ALSO_TRUNCATED in meta_fields:
                    meta[_ALSO_TRUNCATED] = split.also[number]
                builder.add(steps, meta, end=fmt.END_NAMES[int(split.codes[number])], final=final,
                            where=f"{path}: the episode at rows {start}..{stop - 1}")
                bar.update(stop - start)
            if split.partial:
                layout.notes.append(f"the last {lengths[-1]} steps end without a terminal or timeout: they are a "
                                    f"partial episode, stored with an unspecified end")
            report.episodes, report.steps, report.nbytes = builder.episodes, builder.steps, builder.nbytes
            card = ours.card
            card["extra"] = {**card.get("extra", {}), "d4rl": layout.extra(source)}
            builder.finish(card, "d4rl", str(path), {"format": path.suffix.lstrip("."), "episodes": report.episodes,
                                                     "steps": report.steps, "notes": layout.notes})
        report.notes = layout.notes
        return report
    finally:
        source.close()


class _Layout:
    """Which keys of the file are step data, checked: present, numeric, one row per step."""

    def __init__(self, source, mode: str, infos: bool):
        self.source, self.notes = source, []
        self.keys: dict[str, str | None] = {}  # D4RL key -> the field it becomes (None: read, no field of its own)
        keys = source.keys
        missing = [key for key in (*_STEP_KEYS, "terminals") if key not in keys]
        if missing:
            raise UnsupportedFormatError(f"{source.path} must hold the D4RL keys observations, actions, "
                                         f"rewards and terminals (timeouts optional); missing {missing}; it "
                                         f"holds {sorted(keys)[:20]}")
        self.length = self.rows_of("observations")
        self.keys.update(_STEP_KEYS)
        nexts = "next_observations" in keys
        if mode in ("final", "field") and nexts:
            same = keys["next_observations"] == keys["observations"]
            if mode == "final" and not same:
                raise _Mismatch("next_observations and observations differ in dtype or shape")
            self.keys["next_observations"] = None if mode == "final" else _NEXT_OBSERVATION
        self.mode = mode if nexts and mode != "drop" else "none"
        if nexts and mode == "drop":
            self.notes.append("next_observations were left out (next_observations='drop')")
        for key in keys:
            if key.startswith("infos/") and infos:
                self.keys[key] = _field_name(INFO + SEP + key[len("infos/"):].replace("/", SEP),
                                             f"{source.path}: {key}")
            elif key not in self.keys and key not in ("terminals", "timeouts") and not key.startswith("metadata/"):
                self.notes.append(f"{key!r} is not a D4RL key and was left out")
        for key in [*self.keys, "terminals", "timeouts"]:
            if key in keys:
                self.rows_of(key)
        self.fields = {name: _spec_of(np.empty((0, *keys[key][1][1:]), keys[key][0]), key)
                       for key, name in self.keys.items() if name is not None}

    def episode(self, data: dict[str, np.ndarray], start: int, stop: int) -> tuple[dict, dict | None]:
        """An episode's step fields and final row from its rows of every key."""
        steps = {name: data[key] for key, name in self.keys.items() if name is not None}
        if self.mode != "final":
            return steps, None
        nexts = data["next_observations"]
        if not same_bytes(nexts[:-1], steps[OBSERVATION][1:]):
            raise _Mismatch(f"next_observations of the episode at rows {start}..{stop - 1} are not the next rows' "
                           f"observations")
        return steps, {OBSERVATION: nexts[-1]}

    def rows_of(self, key: str) -> int:
        dtype, shape = self.source.keys[key]
        if dtype is _STRING or dtype.kind not in "biufc" or not shape:
            raise InvalidDataError(f"{self.source.path}: {key!r} must be an array of numbers with one row per step "
                                   f"(got dtype {'text' if dtype is _STRING else dtype}, shape {shape})")
        if hasattr(self, "length") and shape[0] != self.length:
            raise InvalidDataError(f"{self.source.path}: {key!r} has {shape[0]} rows but observations has "
                                   f"{self.length}: every per-step key must have one row per step")
        if key in ("terminals", "timeouts") and len(shape) != 1:
            raise InvalidDataError(f"{self.source.path}: {key!r} must have shape (N,) (got {shape})")
        return shape[0]

    def described(self) -> dict:
        out = {name: key for key, name in self.keys.items() if name is not None}
        if self.mode == "final":
            out[OBSERVATION] += " (+ final row: next_observations at each episode's last step)"
        return out

    def extra(self, source) -> dict:
        metadata: dict[str, Any] = {}
        skipped: list[str] = []
        for key in source.keys:
            if key.startswith("metadata/") and not key.startswith(_OURS):
                value = encode_value(source.value(key))
                (skipped.append(key) if value is None else metadata.__setitem__(key[len("metadata/"):], value))
        if skipped:
            self.notes.append(f"metadata left out (over {_METADATA_LIMIT} numbers, or not numbers or text): {skipped}")
        flags = {key: (source.keys[key][0].name if key in source.keys else None) for key in ("terminals", "timeouts")}
        return {"metadata": metadata, "flag_dtypes": flags}


class _Episodes:
    """Episode boundaries from the flags, read a chunk at a time: starts, stops, end codes, both-flags."""

    def __init__(self, source, length: int, chunk: int):
        ends, terminal, timeout = [], [], []
        step = max(1, chunk // 2)
        for low in range(0, length, step):
            high = min(length, low + step)
            t = _flag(source, "terminals", low, high)
            u = _flag(source, "timeouts", low, high) if "timeouts" in source.keys else np.zeros_like(t)
            where = np.flatnonzero(t | u)
            ends.append(where + low)
            terminal.append(t[where])
            timeout.append(u[where])
        flat_ends, t, u = (np.concatenate(parts) if parts else np.empty(0, dtype) for parts, dtype in
                           ((ends, np.int64), (terminal, bool), (timeout, bool)))
        self.stops = flat_ends + 1
        self.partial = bool(length) and (not len(flat_ends) or int(self.stops[-1]) < length)
        if self.partial:
            self.stops = np.append(self.stops, length)
            t, u = np.append(t, False), np.append(u, False)
        self.starts = np.concatenate([[0], self.stops[:-1]]).astype(np.int64) if len(self.stops) else self.stops
        self.codes = np.where(t, 1, np.where(u, 2, 0)).astype(np.uint8)
        self.also = t & u


def _flag(source, key: str, low: int, high: int) -> np.ndarray:
    values = source.rows(key, low, high)
    if values.dtype != bool:
        bad = (values != 0) & (values != 1)
        if bad.any():
            row = low + int(np.flatnonzero(bad)[0])
            raise InvalidDataError(f"{source.path}: {key!r} must hold only 0/1 or False/True (got {values[bad][0]} at "
                                   f"row {row})")
    return values.astype(bool)


class _OurMetadata:
    """What an export by memmap_replay put under metadata/memmap_replay/: card, end codes, meta fields."""

    def __init__(self, source, episodes: int, notes: list[str]):
        self.card, self.ends, self.meta, self.meta_fields = {}, None, {}, {}
        if _OURS + "card" in source.keys:
            from ..sharing.card import DatasetCard

            known = set(DatasetCard.__dataclass_fields__) - {"unknown"}
            try:
                self.card = {k: v for k, v in json.loads(str(source.value(_OURS + "card"))).items() if k in known}
            except (ValueError, AttributeError):
                notes.append(f"{_OURS}card is not a JSON card and was left out")
        for key in source.keys:
            if not key.startswith(_OURS) or key == _OURS + "card":
                continue
            value = np.asarray(source.value(key))
            if value.ndim == 0 or len(value) != episodes or value.dtype.kind not in "biufc":
                notes.append(f"{key} does not hold one value per episode ({episodes}) and was left out")
            elif key == _OURS + "episode_end" and np.isin(value, list(fmt.END_NAMES)).all():
                self.ends = value.astype(np.uint8)
            elif key.startswith(_OURS + "meta/"):
                name = _field_name(key[len(_OURS + "meta/"):], f"{source.path}: {key}")
                self.meta[name] = value
                self.meta_fields[name] = (value.dtype.name, value.shape[1:])


# ---- export ------------------------------------------------------------------------------------------------


def export_d4rl(folder: str | os.PathLike, path: str | os.PathLike, *, observation: str | None = None,
                action: str | None = None, reward: str = REWARD, next_observations: str = "auto",
                infos: bool = True, compression: str | None = None, overwrite: bool = False,
                progress: bool = False) -> Transfer:
    """The store at ``folder`` as a D4RL-style ``.hdf5`` / ``.npz`` file at ``path`` (see the module docstring).

    ``next_observations``: 'auto' (from the field next_observation, or the final rows when every episode
    has one, else none), 'require' (error if neither), 'drop'. ``compression``: None or 'gzip' (HDF5) /
    any value (npz: deflate)."""
    from ..sharing.card import read_card

    if next_observations not in ("auto", "require", "drop"):
        raise OptionError(f"next_observations must be 'auto', 'require' or 'drop' (got {next_observations!r})")
    if compression not in (None, "gzip"):
        raise OptionError(f"compression must be None or 'gzip' (got {compression!r})")
    path = Path(path)
    _kind_of(path)
    store = read_store(folder)
    try:
        plan = _D4rlPlan(store, read_card(folder), observation, action, reward, next_observations, infos, folder)
        _check_target(path, overwrite, lambda target: target.is_file(), file=True)
        tmp = temporary_sibling(path, "exporting", path.suffix)
        try:
            with progress_bar(plan.length, "export", progress) as bar, errors_named(path, "write"):
                write_columns(tmp, plan.columns, plan.length,
                              lambda: stored_episodes(store, fields=plan.needed, meta_fields=()),
                              plan.metadata, compression=compression, bar=bar)
            place(tmp, path)
        finally:
            _remove(tmp)
    finally:
        store.close()
    return Transfer("export d4rl", str(folder), str(path), plan.episodes, plan.length,
                    plan.length * plan.row_nbytes, plan.described, plan.notes)


class _D4rlPlan:
    """The columns and metadata of a store's D4RL file."""

    def __init__(self, store, card, observation, action, reward, next_mode, infos, folder):
        specs, self.notes = store.schema.fields, segment_notes(store)
        table = store.live_table()
        self.episodes, self.length = len(table), int(table.length.sum())
        observations, actions, reward = pick_roles(store, observation, action, reward)
        obs, act = _one(observations, "observation"), _one(actions, "action")
        extra = (card.extra.get("d4rl") or {}) if card else {}
        flags = extra.get("flag_dtypes") or {}
        also = (store.meta_array(_ALSO_TRUNCATED)[table.slots].astype(bool)
                if _ALSO_TRUNCATED in store.schema.meta_fields
                else np.zeros(len(table), bool))
        codes, last = table.end.astype(np.uint8), len(table) - 1
        terminal = (codes == 1) | also
        timeout = (codes == 2) | also | ((codes == 0) & (np.arange(len(table)) != last))

        def marks(values, dtype):
            return lambda episode: _last_step(episode.length, values[episode.number], dtype)

        self.columns = [Column("observations", specs[obs].dtype, specs[obs].shape, lambda e: e.steps[obs]),
                        Column("actions", specs[act].dtype, specs[act].shape, lambda e: e.steps[act]),
                        Column("rewards", specs[reward].dtype, specs[reward].shape, lambda e: e.steps[reward]),
                        Column("terminals", flags.get("terminals") or "bool", (),
                               marks(terminal, flags.get("terminals"))),
                        Column("timeouts", flags.get("timeouts") or "bool", (), marks(timeout, flags.get("timeouts")))]
        self.described = {obs: "observations", act: "actions", reward: "rewards"}
        used = {obs, act, reward}
        nexts = self.next_column(store, table, obs, next_mode)
        if nexts is not None:
            self.columns.append(nexts)
            used.add(_NEXT_OBSERVATION)
        for name in specs:
            if name in used:
                continue
            if not infos:
                self.notes.append(f"step field {name!r} was left out (infos=False)")
                continue
            key = "infos/" + (name[len(INFO + SEP):] if name.startswith(INFO + SEP) else name).replace(SEP, "/")
            self.columns.append(Column(key, specs[name].dtype, specs[name].shape, lambda e, name=name: e.steps[name]))
            self.described[name] = key
        self.needed = tuple(dict.fromkeys([obs, act, reward, *(n for n in self.described if n in specs)]))
        self.row_nbytes = sum(column.dtype.itemsize * math.prod(column.shape) for column in self.columns)
        self.metadata = self.metadata_of(store, table, card, extra, folder)

    def next_column(self, store, table, obs: str, mode: str) -> Column | None:
        specs = store.schema.fields
        if mode == "drop":
            return None
        if _NEXT_OBSERVATION in specs and (specs[_NEXT_OBSERVATION].dtype, specs[_NEXT_OBSERVATION].shape) == \
                (specs[obs].dtype, specs[obs].shape):
            self.described[_NEXT_OBSERVATION] = "next_observations"
            return Column("next_observations", specs[obs].dtype, specs[obs].shape, lambda e: e.steps[_NEXT_OBSERVATION])
        if len(table) and table.final.all():
            self.described[obs] += " (+ next_observations from the final rows)"
            return Column("next_observations", specs[obs].dtype, specs[obs].shape,
                          lambda e: np.concatenate([e.steps[obs][1:], e.final[obs][None]]))
        if mode == "require":
            raise SchemaError(f"next_observations cannot be written: the store has no field {_NEXT_OBSERVATION!r} and "
                              f"not every episode has a final observation; pass next_observations='auto' or 'drop'")
        if table.final.any():
            self.notes.append("next_observations were not written: only some episodes have a final observation")
        return None

    def metadata_of(self, store, table, card, extra, folder) -> dict:
        from ..sharing.card import DatasetCard

        out = {"metadata/" + key: decode_value(value) for key, value in (extra.get("metadata") or {}).items()}
        card = DatasetCard.from_json(card.to_json()) if card else DatasetCard()
        card.provenance = [*card.provenance, provenance_record("memmap_replay", folder, store_id=store.meta.store_id,
                                                              exported_as="d4rl", fields=self.described)]
        out[_OURS + "card"] = json.dumps(card.to_json())
        out[_OURS + "episode_end"] = table.end.astype(np.uint8)
        for name in store.schema.meta_fields:
            if name != _ALSO_TRUNCATED:
                out[_OURS + "meta/" + name] = np.array(store.meta_array(name)[table.slots])
        return out


def _one(names: list[str], what: str) -> str:
    if len(names) != 1:
        raise SchemaError(f"a D4RL file holds one array of {what}s, but the {what} is made of the fields {names}; "
                          f"pass {what}=NAME to choose one")
    return names[0]


def _last_step(length: int, value: bool, dtype: Any) -> np.ndarray:
    marks = np.zeros(length, dtype=dtype or bool)
    marks[-1] = value
    return marks
