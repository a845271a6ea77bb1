"""A store -> a folder in memmap-replay-buffer 0.2.x's ``ReplayBuffer`` layout, for people who must hand data to
its users: ``memmap_replay_buffer.ReplayBuffer.from_folder(out)`` opens it and reads the same values.

What it writes: ``metadata.pkl`` (its config: ``max_episodes``, ``max_timesteps``, ``fields``,
``meta_fields``, ``circular``; the one pickle this library writes, of plain values only), one
``<field>.data.npy`` of (max_episodes, max_timesteps, *shape) per field, one ``<meta field>.data.meta.npy``
per meta field plus its ``episode_lens`` and ``_initted``, and the three ``.state.npy`` counters. The live
episodes go to slots 0, 1, ... oldest first, as 0.2.x would have stored them; each slot is padded after
its episode with the field's default (0 when none), as 0.2.x fills a slot; the slots after are zeros. The
sizes are the store's (``max_episodes``, ``max_timesteps``, ``circular`` override them); the files are
written sparse, so the disk holds the episodes only.

Refused, with the reason: a field of a dtype 0.2.x cannot declare (it knows int32 'int', float32 'float',
bool and uint8 only), an episode longer than ``max_timesteps``, more episodes than ``max_episodes``. What
0.2.x has no place for, episodes' end codes (terminated / truncated) and final rows, is refused too unless
``lossy=True`` leaves it out (the report lists it). A store imported from 0.2.x exports back with the
config's own spelling of each field (kept in its card), so that 0.2.x code passing the same config to
``ReplayBuffer(..., overwrite=False)`` finds it matching.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core import folderio
from ..core.options import flag, positive_int
from ..errors import BufferFullError, OptionError, SchemaError
from .common import (segment_notes, Transfer, _check_target, _remove, place, progress_bar, read_store, stored_episodes,
                     temporary_sibling)
from .mrb_source import CONFIG_FILE, INTERNAL, KINDS, STATE
from .plain_pickle import dump_plain

__all__ = ["export_memmap_replay_buffer"]

KIND = "memmap-replay-buffer"
_KIND_OF = {dtype: kind for kind, dtype in KINDS.items()}


def export_memmap_replay_buffer(buffer_or_folder: Any, out_folder: str | os.PathLike, *,
                                max_episodes: int | None = None, max_timesteps: int | None = None,
                                circular: bool | None = None, lossy: bool = False, overwrite: bool = False,
                                progress: bool = False) -> Transfer:
    """The committed episodes of a ``ReplayBuffer`` (or the store at a folder) as a memmap-replay-buffer 0.2.x
    folder at ``out_folder``; see the module docstring. Returns a report."""
    from ..buffer import ReplayBuffer
    from ..sharing.card import read_card

    flag(lossy, "lossy")
    flag(overwrite, "overwrite")
    own = not isinstance(buffer_or_folder, ReplayBuffer)
    store = read_store(buffer_or_folder) if own else buffer_or_folder.episode_store
    try:
        card = read_card(store.folder)
        plan = _Plan(store, card, max_episodes, max_timesteps, circular, lossy)
        out = Path(out_folder)
        _check_target(out, overwrite, lambda path: (path / CONFIG_FILE).is_file())
        tmp = temporary_sibling(out, "exporting")
        try:
            folderio.make_dir(tmp.parent, tmp)
            with progress_bar(plan.steps, "export", progress) as bar:
                plan.write(tmp, bar)
            place(tmp, out)
        finally:
            _remove(tmp)
    finally:
        if own:
            store.close()
    return Transfer(f"export {KIND}", str(store.folder), str(out), plan.episodes, plan.steps, plan.nbytes,
                    plan.described, plan.notes)


class _Plan:
    """The config and arrays of the 0.2.x folder of a store, checked before anything is written."""

    def __init__(self, store, card, max_episodes, max_timesteps, circular, lossy: bool):
        self.store, self.notes = store, segment_notes(store)
        table = store.live_table()
        self.table = table
        self.episodes, self.steps = len(table), int(table.length.sum())
        capacity = store.capacity
        self.max_episodes = capacity.max_episodes if max_episodes is None else positive_int(max_episodes,
                                                                                            "max_episodes")
        self.max_timesteps = capacity.max_timesteps if max_timesteps is None else positive_int(max_timesteps,
                                                                                               "max_timesteps")
        self.circular = capacity.circular if circular is None else flag(circular, "circular")
        if self.episodes > self.max_episodes:
            raise BufferFullError(f"the store has {self.episodes} episodes, more than max_episodes={self.max_episodes} "
                                  f"slots; pass max_episodes={self.episodes} or more")
        longest = int(table.length.max(initial=0))
        if longest > self.max_timesteps:
            raise OptionError(f"the store's longest episode has {longest} steps, more than max_timesteps="
                              f"{self.max_timesteps}; pass max_timesteps={longest} or more")
        lost = []
        if table.final.any():
            lost.append(f"the final rows of {int(table.final.sum())} episode(s)")
        if (table.end != 0).any():
            lost.append(f"the end codes (terminated / truncated) of {int((table.end != 0).sum())} episode(s)")
        if lost and not lossy:
            raise SchemaError(f"a memmap-replay-buffer folder has no place for {' and '.join(lost)}; pass lossy=True "
                              f"to leave them out, or keep them in a field of their own first")
        self.notes += [f"{what} were left out (lossy=True)" for what in lost]
        forms = ((card.extra.get(KIND) or {}).get("config") or {}) if card else {}
        self.fields = {name: self._form(spec, "field", forms.get("fields") or {})
                       for name, spec in store.schema.fields.items()}
        self.meta_fields = {name: self._form(spec, "meta field", forms.get("meta_fields") or {})
                            for name, spec in store.schema.meta_fields.items()}
        self.described = {name: f"{name}.data.npy" for name in self.fields}
        self.described.update({name: f"{name}.data.meta.npy" for name in self.meta_fields})
        self.nbytes = self.steps * sum(spec.row_nbytes for spec in store.schema.fields.values())

    @staticmethod
    def _form(spec, kind: str, known: dict) -> Any:
        """The field as 0.2.x's config spells it: the imported spelling if it still describes the field."""
        name = _KIND_OF.get(spec.dtype)
        if name is None:
            raise SchemaError(f"the {kind} {spec.name!r} has dtype {spec.dtype}, which memmap-replay-buffer cannot "
                              f"declare (it knows int32 'int', float32 'float', bool and uint8 only); export a copy "
                              f"of the store whose field has one of these dtypes")
        old = known.get(spec.name)
        if isinstance(old, list):
            old = tuple(tuple(item) if isinstance(item, list) else item for item in old)
        if old is not None and _same(old, name, spec):
            return old
        if spec.default is None:
            return name if spec.shape == () else (name, spec.shape)
        return (name, spec.shape, spec.default)

    def config(self) -> dict:
        return {"max_episodes": self.max_episodes, "max_timesteps": self.max_timesteps, "fields": self.fields,
                "meta_fields": self.meta_fields, "circular": self.circular}

    def write(self, folder: Path, bar) -> None:
        folderio.write_atomic(folder, folder / CONFIG_FILE, dump_plain(self.config()))
        n, t, schema = self.max_episodes, self.max_timesteps, self.store.schema
        files = {name: _open_npy(folder, f"{name}.data.npy", spec.dtype, (n, t, *spec.shape))
                 for name, spec in schema.fields.items()}
        try:
            for number, episode in enumerate(stored_episodes(self.store, meta_fields=())):
                for name, spec in schema.fields.items():
                    rows = episode.steps[name]
                    if spec.default not in (None, 0, False):  # 0.2.x fills a slot with the default first
                        rows = np.concatenate([rows, np.broadcast_to(spec.default_row(), (t - len(rows), *spec.shape))])
                    fd, offset = files[name]
                    folderio.write_all(fd, np.ascontiguousarray(rows).data, offset + number * t * spec.row_nbytes)
                bar.update(episode.length)
        finally:
            for fd, _ in files.values():
                os.close(fd)
        slots = self.table.slots
        metas = {name: (spec.dtype, spec.shape, self.store.meta_array(name)[slots])
                 for name, spec in schema.meta_fields.items()}
        initted = np.zeros(n, bool)
        initted[:self.episodes] = True
        initted[self.episodes % n] = False  # 0.2.x clears the flag of the slot it writes next
        lens = np.zeros(n, np.int32)
        lens[:self.episodes] = self.table.length
        metas.update({name: (KINDS[kind], shape, values) for (name, (kind, shape)), values in
                      zip(INTERNAL.items(), (lens, initted))})
        for name, (dtype, shape, values) in metas.items():
            _write_npy(folder, f"{name}.data.meta.npy", dtype, (n, *shape), values)
        counters = (self.episodes, self.episodes % n, 0)
        for name, value in zip(STATE, counters):
            _write_npy(folder, f"{name}.state.npy", np.dtype("int32"), (), np.array(value, np.int32))


def _same(form: Any, kind: str, spec) -> bool:
    """``form`` (a 0.2.x field spelling) describes ``spec``."""
    info = (form, (), None) if isinstance(form, str) else (*form, None)[:3]
    shape = (info[1],) if isinstance(info[1], int) else tuple(info[1])
    return info[0] == kind and shape == spec.shape and info[2] == spec.default and type(info[2]) is type(spec.default)


def _header(dtype: np.dtype, shape: tuple) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                   "fortran_order": False, "shape": tuple(shape)})
    return buffer.getvalue()


def _open_npy(folder: Path, name: str, dtype: np.dtype, shape: tuple) -> tuple[int, int]:
    """A new .npy of ``shape`` (zeros, sparse): its descriptor and the offset of its data."""
    header = _header(dtype, shape)
    path = folder / name
    fd = folderio.open_write(folder, path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        with folderio.errors_named(path, "write"):
            folderio.write_all(fd, header, 0)
            os.ftruncate(fd, len(header) + math.prod(shape) * np.dtype(dtype).itemsize)
    except BaseException:
        os.close(fd)
        raise
    return fd, len(header)


def _write_npy(folder: Path, name: str, dtype: np.dtype, shape: tuple, values: np.ndarray) -> None:
    """A new .npy of ``shape`` whose first rows are ``values`` (the rest zeros)."""
    fd, offset = _open_npy(folder, name, dtype, shape)
    try:
        with folderio.errors_named(folder / name, "write"):
            folderio.write_all(fd, np.ascontiguousarray(values, dtype=dtype).data, offset)
    finally:
        os.close(fd)
