"""A new field added to a committed store (``ReplayBuffer.add_field``): its file is written beside the others, then
one commit of ``meta.json`` with the new schema makes it part of the store. Numpy only.

A step field's file is ``steps/<name>.npy`` with the step files' rows (a sparse file: rows no live episode holds
read as zeros, or hold the field's default where it has one); a meta field's is ``meta/<name>.npy``, by slot. Until
the commit, readers and the format ignore the file (it is not in the schema); a kill before it leaves a stray file,
which the next ``add_field`` of that name replaces and ``verify`` reports as stray. The field is raw (``compress``
gives it a codec afterwards).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import folderio
from . import format as fmt
from ..errors import SchemaError
from .format import NpyFile
from .schema import NAME_PATTERN, FieldSpec, Schema

if TYPE_CHECKING:
    from .index import EpisodeTable
    from .store import EpisodeStore

__all__ = ["NewField"]


class NewField:
    """The file of a field being added to ``store`` (a writer): ``write`` its values, then ``commit`` (or
    ``discard``). ``per``: "step" (one row per step) or "episode" (one value per episode, a meta field)."""

    def __init__(self, store: EpisodeStore, spec: FieldSpec, per: str):
        schema = store.schema
        if not NAME_PATTERN.fullmatch(spec.name):
            raise SchemaError(f"a field name must match {NAME_PATTERN.pattern} (got {spec.name!r})")
        if spec.name in schema.fields or spec.name in schema.meta_fields:
            kind = "field" if spec.name in schema.fields else "meta field"
            raise SchemaError(f"the store already has a {kind} {spec.name!r}: give the new field another name")
        self.store, self.spec, self.per = store, spec, per
        store.begin_edit("add_field")
        group = fmt.STEPS_DIR if per == "step" else fmt.META_DIR
        self.path = store.folder / group / f"{spec.name}.npy"
        self.rows = store.meta.state.rows if per == "step" else store.capacity.max_episodes
        folderio.remove(store.folder, self.path)  # a stray one a killed add_field left
        fmt._create_npy(store.folder, self.path, spec, self.rows)
        self.file = NpyFile.open(store.folder, self.path, spec, self.rows, writable=True)

    def write(self, table: EpisodeTable, values: list[np.ndarray]) -> None:
        """The values of the episodes of ``table``: per step, (length, *shape) each (its final row, when it has
        one, gets the field's default); per episode, (*shape) each."""
        if self.per == "episode":
            for slot, value in zip(table.slots.tolist(), values):
                self.file.write_rows(slot, np.asarray(value)[None])
            return
        default = self.spec.default_row()
        for start, final, value in zip(table.start.tolist(), table.final.tolist(), values):
            rows = np.concatenate([value, default[None]]) if final and default.any() else value
            self.file.write_rows(start, rows)

    def commit(self) -> None:
        """Make the field part of the store: fsync its file (and folder) if durable, then commit meta.json."""
        store = self.store
        if store.durable:
            self.file.sync()
            fmt._fsync_folder(self.path.parent)
        schema = store.schema
        fields, metas = dict(schema.fields), dict(schema.meta_fields)
        (fields if self.per == "step" else metas)[self.spec.name] = self.spec
        state = store.meta.state
        store._write_meta(replace(state, commits=state.commits + 1), schema=Schema(fields, metas))
        if self.per == "step":
            store.steps[self.spec.name] = self.file
        else:
            store.metas[self.spec.name] = self.file
        store.end_edit(np.zeros(0, dtype=np.int64), [self.file])

    def discard(self) -> None:
        """Remove the file (the store is as it was)."""
        self.file.close()
        folderio.remove(self.store.folder, Path(self.path))
