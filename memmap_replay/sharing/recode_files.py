"""The files of ``sharing/recode.py``'s rewrites: a step field's new files written from a store's live rows, and a
whole store built in a new folder. Numpy only.

Rows are copied 1:1 (same row numbers), block by block. A compressed field's frames are placed as a writer places
them: in row order from byte 0, each episode's frames contiguous; in a ring, the episodes of the lap before the
write head's (rows past the write head) start at the byte their first row would have in proportion to the bytes
per row of the write head's lap, so that new episodes evict them as in a ring compressed from the start. A field
kept compressed as it is (into a new folder) has its index entries and frames copied at the same rows and bytes.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..core import folderio
from ..core import format as fmt
from ..core.encoded import EncodedField, frames_limit
from ..core.progress import progress_bar as bar
from ..core.format import NpyFile, StoreMeta
from ..core.index import EpisodeTable
from ..core.schema import FieldSpec, Schema
from ..core.store import EpisodeStore
from ..errors import SampleExpiredError

__all__ = ["build_store", "write_field", "rows_of", "with_removed", "check_still_live", "place_folder",
           "progress_bar"]

_BLOCK_BYTES = 32 << 20  # decoded bytes of rows read, encoded or decoded at a time (memory stays about this)


def build_store(kind: str, store: EpisodeStore, table: EpisodeTable, schema: Schema, tmp: Path,
                progress: bool) -> dict[str, int]:
    """A whole store in ``tmp``: the live slots of the table and meta fields, every step field's live rows, then
    meta.json (the commit). Returns each step field's stored bytes of live rows."""
    capacity, state = store.capacity, store.meta.state
    for name in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR):
        folderio.make_dir(tmp, tmp / name)
    slots = table.slots
    order = np.argsort(slots, kind="stable")
    table_values = {"start": table.start, "length": table.length, "end": table.end, "final": table.final,
                    "continues": store.links(table) + 1, "id": table.ids}
    for name, dtype in fmt.TABLE.items():
        _write_slots(tmp, Path(fmt.EPISODES_DIR, f"{name}.npy"), FieldSpec(name, dtype), capacity.max_episodes,
                     slots[order], np.asarray(table_values[name], dtype)[order])
    for name, spec in schema.meta_fields.items():
        _write_slots(tmp, Path(fmt.META_DIR, f"{name}.npy"), spec, capacity.max_episodes, slots[order],
                     np.asarray(store.meta_array(name)[slots[order]]))
    frames, stored = {}, {}
    with progress_bar(kind, int(rows_of(table).sum()) * len(schema.fields), progress) as bar:
        for spec in schema.fields.values():
            if spec.codec is not None and spec == store.schema.fields[spec.name]:
                frames[spec.name], stored[spec.name] = _copy_frames(store, table, spec, tmp, bar)
                continue
            entry, stored[spec.name] = write_field(store, table, spec, tmp, bar, [])
            if entry is not None:
                frames[spec.name] = entry
    for name in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR):
        fmt._fsync_folder(tmp / name)
    # (an edit in flight when the table was read is done in the copy: the table was read with its journal)
    meta = StoreMeta(schema, capacity, replace(state, commits=state.commits + 1, frames=frames,
                                               edits=state.edits + (state.edits & 1)), uuid.uuid4().hex)
    fmt.write_meta(tmp, meta, durable=True)
    return stored


def _write_slots(tmp: Path, path: Path, spec: FieldSpec, rows: int, slots: np.ndarray, values: np.ndarray) -> None:
    """A new table or meta file of ``rows`` rows holding ``values`` at ``slots`` (ascending), zeros elsewhere."""
    fmt._create_npy(tmp, tmp / path, spec, rows)
    file = NpyFile.open(tmp, tmp / path, spec, rows, writable=True)
    try:
        for lo, hi in _runs(slots):
            file.write_rows(int(slots[lo]), np.ascontiguousarray(values[lo:hi]))
        file.sync()
    finally:
        file.close()


def _runs(sorted_positions: np.ndarray) -> Iterator[tuple[int, int]]:
    """(lo, hi) index ranges of ``sorted_positions`` over which the positions are consecutive."""
    if not len(sorted_positions):
        return
    breaks = np.flatnonzero(np.diff(sorted_positions) != 1) + 1
    bounds = [0, *breaks.tolist(), len(sorted_positions)]
    yield from zip(bounds[:-1], bounds[1:])


def _copy_frames(store: EpisodeStore, table: EpisodeTable, spec: FieldSpec, tmp: Path, bar: Any
                 ) -> tuple[dict[str, int], int]:
    """A compressed field kept as it is: its live rows' index entries and frames, at the same rows and bytes.
    Returns the frames' state and the live rows' frame bytes."""
    source = store.steps[spec.name]
    assert isinstance(source, EncodedField)  # (the caller checked: the field is compressed in the source too)
    entry = dict(store.meta.state.frames[spec.name])
    target = _create(tmp, spec, store.meta.state.rows, entry["bytes"])
    assert isinstance(target, EncodedField)
    stored = 0
    try:
        frames = source.frames.array()
        for start, stop in _blocks(table, spec):
            entries = source.entries(start, stop, entry["bytes"])
            lo, hi = int(entries[:, 0].min()), int((entries[:, 0] + entries[:, 1]).max())
            target.index.write_rows(start, entries)
            target.frames.write_rows(lo, np.ascontiguousarray(frames[lo:hi]))
            stored += int(entries[:, 1].sum())
            bar.update(stop - start)
        target.sync()
    finally:
        target.close()
    return entry, stored


# ---- one field's new files ------------------------------------------------------------------------------------


def _create(folder: Path, spec: FieldSpec, rows: int, nbytes: int = 0) -> NpyFile | EncodedField:
    """The new (empty, sparse) files of a step field in ``folder``, opened for writing."""
    files = []
    for group, file_spec, path, _ in fmt.layout(Schema({spec.name: spec}, {}), fmt.Capacity(1, 1, 2, False)):
        if group in (fmt.STEPS_DIR, fmt.INDEX, fmt.FRAMES):
            count = nbytes if group == fmt.FRAMES else rows
            fmt._create_npy(folder, folder / path, file_spec, count)
            files.append(NpyFile.open(folder, folder / path, file_spec, count, writable=True))
    return files[0] if spec.codec is None else EncodedField(spec, files[0], files[1])


def write_field(store: EpisodeStore, table: EpisodeTable, spec: FieldSpec, folder: Path, bar: Any,
                 made: list[Path]) -> tuple[dict[str, int] | None, int]:
    """Write the live rows of field ``spec.name`` of ``store`` into new files in ``folder``, stored as ``spec``
    says (their paths in ``folder`` are added to ``made`` as they are created); returns the frames' state (None
    for a raw field) and the live rows' stored bytes."""
    state = store.meta.state
    made += [path for group, _, path, _ in fmt.layout(Schema({spec.name: spec}, {}), fmt.Capacity(1, 1, 2, False))
             if group in (fmt.STEPS_DIR, fmt.INDEX, fmt.FRAMES)]
    target = _create(folder, spec, state.rows)
    source = store.step_array(spec.name)
    try:
        if isinstance(target, NpyFile):
            for start, stop in _blocks(table, spec):
                target.write_rows(start, np.ascontiguousarray(source[start:stop]))
                bar.update(stop - start)
            target.sync()
            return None, int(rows_of(table).sum()) * spec.row_nbytes
        entry, stored = _encode_rows(store, table, spec, source, target, bar)
        target.sync()
        return entry, stored
    finally:
        target.close()


def _encode_rows(store: EpisodeStore, table: EpisodeTable, spec: FieldSpec, source: Any, target: EncodedField,
                 bar: Any) -> tuple[dict[str, int], int]:
    """Encode the live rows into ``target``, placing the frames as the module's docstring says."""
    limit = frames_limit(spec, store.capacity.max_steps)
    older = table.start >= store.meta.state.write_head  # a ring's episodes of the lap before the write head's
    at, head, rows_done, stored = 0, None, 0, 0
    for position in np.lexsort((table.start, older)).tolist():  # the write head's lap first, in row order
        if older[position] and head is None:  # the older lap starts at its rows' share of the bytes
            head = at
            at = max(at, int(table.start[position]) * at // max(rows_done, 1))
        for start, stop in _episode_blocks(table, position, spec):
            lengths, blob = target.encode([np.asarray(source[start:stop])])
            target.ensure_bytes(at + len(blob), limit)
            target.write(start, at, lengths, blob)
            at += len(blob)
            stored += len(blob)
            rows_done += stop - start
            bar.update(stop - start)
    return {"head": at if head is None else head, "bytes": target.frames.rows}, stored


def _blocks(table: EpisodeTable, spec: FieldSpec) -> Iterator[tuple[int, int]]:
    for position in range(len(table)):
        yield from _episode_blocks(table, position, spec)


def _episode_blocks(table: EpisodeTable, position: int, spec: FieldSpec) -> Iterator[tuple[int, int]]:
    """The rows of one live episode (its steps and final row) in blocks of about ``_BLOCK_BYTES``."""
    start = int(table.start[position])
    stop = start + int(table.length[position]) + int(table.final[position])
    step = max(1, _BLOCK_BYTES // max(spec.row_nbytes, 1))
    for lo in range(start, stop, step):
        yield lo, min(lo + step, stop)


def with_removed(store: EpisodeStore, table: EpisodeTable) -> EpisodeTable:
    """``table`` (the live table of ``store.meta``) and the removed episodes of its id range, ids ascending: a
    rewrite keeps them removed (their entries and rows as they are; ``compact`` frees them), since the ids of a
    store's range all name a slot. An episode evicted since the table was read: ``SampleExpiredError``."""
    state = store.meta.state
    if not state.removed:
        return table
    ids = np.arange(state.first_episode, state.next_episode, dtype=np.int64)
    ids = ids[~np.isin(ids, table.ids, assume_unique=True)]
    slots = ids % store.capacity.max_episodes
    entries = store.entries(slots)
    if not np.array_equal(entries["id"], ids) or (entries["end"] != fmt.REMOVED).any():
        raise SampleExpiredError(f"a writer changed episodes of {store.folder} (ids from {int(ids[0])}) while they "
                                 f"were read: nothing was written; stop the writer (or rewrite while it is idle) "
                                 f"and run again")
    removed = EpisodeTable(ids, slots, entries["start"].astype(np.int64), entries["length"].astype(np.int64),
                           entries["end"], entries["final"].astype(bool))
    order = np.argsort(np.concatenate([table.ids, ids]), kind="stable")
    return EpisodeTable(**{name: np.concatenate([getattr(table, name), getattr(removed, name)])[order]
                           for name in ("ids", "slots", "start", "length", "end", "final")})


def rows_of(table: EpisodeTable) -> np.ndarray:
    return np.asarray(table.length + table.final, dtype=np.int64)


def check_still_live(store: EpisodeStore, table: EpisodeTable, capacity: fmt.Capacity) -> None:
    """The episodes copied were not evicted (nor the store replaced or grown) while they were read: a writer
    commits an eviction before it overwrites anything, so this check after the copy covers every read."""
    store.refresh()  # (a store replaced meanwhile: CorruptStoreError, "open it again")
    meta = store.meta
    if len(table) and (meta.state.first_episode > int(table.ids[0]) or meta.capacity != capacity):
        raise SampleExpiredError(
            f"a writer evicted episodes of {store.folder} (ids from {int(table.ids[0])}), or grew it, while they were "
            f"copied: the copy was dropped; stop the writer (or rewrite while it is idle) and run again")


def place_folder(tmp: Path, out: Path) -> None:
    with folderio.errors_named(out, "create"):
        if out.is_dir():
            out.rmdir()  # (empty: checked before)
        os.replace(tmp, out)


def progress_bar(kind: str, total: int, enabled: bool) -> Any:
    return bar(total, kind, enabled, unit="row")
