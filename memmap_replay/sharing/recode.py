"""Compressing and decompressing a store's step fields after the fact: ``compress_fields`` and
``decompress_fields`` (the commands ``memmap-replay compress`` and ``memmap-replay decompress``). Numpy only.

A rewrite changes how the chosen fields are stored, never what they hold: every live row reads back bit-exact,
and the episodes keep their ids, slots and rows, a ring its state (first and next episode, write head), the
other fields and the meta fields their bytes. It is a commit like any other, so a kill at any instant leaves
the old store or the new one, each readable and whole.

In place (``out=None``), under the writer lock:

1. leftovers of a killed rewrite are removed: the files in ``steps/`` of a field's other form (``image.npy``
   beside a compressed ``image``, ``image.index.npy`` and ``image.frames.npy`` beside a raw one), which
   meta.json does not name (``verify`` lists them as stray files until then);
2. the new files of each field are written beside the old ones (their names differ), the live rows copied
   block by block, then flushed to disk;
3. meta.json is replaced atomically with the new schema: the commit. The store gets a new store id, so that a
   reader that had it open is told to open it again (as after ``overwrite``) rather than reading old files;
4. the old files are removed.

Changing the codec or level of a field that is compressed already is refused in place: its new files would
have the names of the old ones, and two files cannot be switched at once (only meta.json's replacement is
atomic). Rewrite into a new folder (``out=``), or decompress the field and compress it again (two rewrites,
the store raw in between).

Into a new folder (``out=``): the source is opened read-only (a writer may go on appending); the new store is
built in a hidden folder beside ``out`` (the live rows of every field, the live slots of the episode table and
the meta fields, the card with a provenance record of the rewrite), committed, and moved onto ``out`` when
complete. Episodes a ring writer evicts while they are copied make it fail, leaving ``out`` as it was.
Sampler state (``priorities/``) and running statistics (``stats/``) are not copied: they are rebuilt.

How the new files are written and the frames placed: ``sharing/recode_files.py``.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core import folderio
from ..core import format as fmt
from ..core.codecs import CodecSpec, parse_codec
from ..core.encoded import EncodedField
from ..core.format import StoreMeta
from ..core.index import EpisodeTable
from ..core.options import flag, names
from ..core.schema import Schema
from ..core.store import EpisodeStore
from ..errors import OptionError, StoreNotFoundError
from .checksums import check_new_path, store_folder
from .recode_files import (build_store, check_still_live, place_folder, progress_bar, rows_of,
                           with_removed, write_field)

__all__ = ["Recoded", "compress_fields", "decompress_fields", "remove_leftovers"]

Codec = CodecSpec | None  # None: raw


@dataclass
class Recoded:
    """What a rewrite did: per field, its form before and after (``'raw'`` or ``'zstd-3'``) and its live rows'
    stored bytes before and after (frames only, for a compressed field); ``changed`` is False when every field
    was already as asked (nothing was written in place)."""

    kind: str
    folder: str
    out: str | None
    episodes: int = 0
    rows: int = 0
    changed: bool = False
    fields: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        where = f"{self.folder} -> {self.out}" if self.out else f"{self.folder} (in place)"
        lines = [f"{self.kind}: {where}, {self.episodes} episodes, {self.rows} rows"]
        for name, info in self.fields.items():
            before, after = info["stored_bytes_before"], info["stored_bytes_after"]
            ratio = f", {info['raw_bytes'] / after:.1f}x smaller than raw" if after and info["after"] != "raw" else ""
            lines.append(f"  {name}: {info['before']} -> {info['after']}, {_mb(before)} -> {_mb(after)}{ratio}")
        if not self.changed and not self.out:
            lines.append("  every field was already stored so: nothing changed")
        return "\n".join(lines)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB"


def _form(codec: Codec) -> str:
    return "raw" if codec is None else str(codec)


# ---- the public functions ---------------------------------------------------------------------------------


def compress_fields(folder: str | os.PathLike, fields: Any = None, *, codec: str = "zstd", level: int | None = None,
                    out: str | os.PathLike | None = None, progress: bool = False) -> Recoded:
    """Store step fields of the store at ``folder`` compressed (``codec``, at ``level``, 3 by default), in place
    or into the new folder ``out``; see the module's docstring for what a kill leaves. ``fields``: a name or
    a list of names; None: every step field of two or more dimensions per row (images, frame stacks). Fields
    already stored so are left as they are."""
    if codec is None or codec == "raw":
        raise OptionError("codec must name a codec such as 'zstd' (got None); to store fields raw, use "
                          "decompress_fields (memmap-replay decompress)")

    def choose(schema: Schema) -> dict[str, Codec]:
        chosen = _images(schema) if fields is None else names(fields, "fields", schema.fields)
        return {name: parse_codec(name, codec, level) for name in chosen}

    return _recode("compress", folder, choose, out, progress)


def decompress_fields(folder: str | os.PathLike, fields: Any = None, *, out: str | os.PathLike | None = None,
                      progress: bool = False) -> Recoded:
    """Store step fields of the store at ``folder`` raw again (plain ``.npy`` files), in place or into the new
    folder ``out``. ``fields``: a name or a list of names; None: every compressed field. The store's format
    becomes 1.1 again (older readers open it) when no compressed field is left."""

    def choose(schema: Schema) -> dict[str, Codec]:
        chosen = tuple(schema.encoded) if fields is None else names(fields, "fields", schema.fields)
        return {name: None for name in chosen}

    return _recode("decompress", folder, choose, out, progress)


def _images(schema: Schema) -> tuple[str, ...]:
    chosen = tuple(name for name, spec in schema.fields.items() if len(spec.shape) >= 2)
    if not chosen:
        raise OptionError(f"the store has no step field of two or more dimensions per row (images) to compress by "
                          f"default; its fields are {list(schema.fields)}: pass fields= (--field NAME)")
    return chosen


def _recode(kind: str, folder: str | os.PathLike, choose: Callable[[Schema], dict[str, Codec]],
            out: str | os.PathLike | None, progress: Any) -> Recoded:
    progress = flag(progress, "progress")
    store_folder(folder)
    if out is None:
        return _in_place(kind, Path(folder), choose, progress)
    return _into(kind, Path(folder), Path(out), choose, progress)


def _changes(schema: Schema, wanted: Mapping[str, Codec]) -> dict[str, Codec]:
    return {name: codec for name, codec in wanted.items() if schema.fields[name].codec != codec}


def _new_schema(schema: Schema, changes: Mapping[str, Codec]) -> Schema:
    fields = {name: replace(spec, codec=changes[name]) if name in changes else spec
              for name, spec in schema.fields.items()}
    return Schema(fields, dict(schema.meta_fields))


# ---- in place ---------------------------------------------------------------------------------------------


def _in_place(kind: str, folder: Path, choose: Callable[[Schema], dict[str, Codec]], progress: bool) -> Recoded:
    store = EpisodeStore.open(folder, "r+")
    try:
        store.require_writable(f"{kind} fields")  # the writer lock (a writer at work: StoreLockedError)
        remove_leftovers(store.folder, store.schema)
        schema = store.schema
        changes = _changes(schema, choose(schema))
        releveled = [name for name, codec in changes.items() if codec is not None and schema.fields[name].codec]
        if releveled:
            name = releveled[0]
            raise OptionError(
                f"field {name!r} is stored {_form(schema.fields[name].codec)} already: its codec or level cannot "
                f"change in place (its new files would have the names of the old ones, and only meta.json's "
                f"replacement switches atomically); rewrite the store into a new folder (out=, --out NEW), or "
                f"decompress the field, then compress it (two rewrites; the store is raw in between)")
        table = store.live_table()
        report = Recoded(kind, str(folder), None, len(table), int(rows_of(table).sum()), bool(changes))
        report.fields = {name: _sizes(store, table, name) for name in changes}
        if not changes:
            return report
        store._changing()  # (the observers: checksums.sha256 goes, a 1.0 store's links file is made)
        new = _new_schema(schema, changes)
        state = store.meta.state
        frames = {name: dict(entry) for name, entry in state.frames.items() if name in new.encoded}
        made: list[Path] = []
        try:
            with progress_bar(kind, report.rows * len(changes), progress) as bar:
                kept = with_removed(store, table)  # (removed episodes stay removed: their rows too)
                for name in changes:
                    entry, stored = write_field(store, kept, new.fields[name], store.folder, bar, made)
                    report.fields[name].update(after=_form(changes[name]), stored_bytes_after=stored)
                    if entry is not None:
                        frames[name] = entry
            fmt._fsync_folder(store.folder / fmt.STEPS_DIR)
            meta = StoreMeta(new, store.capacity, replace(state, commits=state.commits + 1, frames=frames),
                             uuid.uuid4().hex)
        except BaseException:
            for path in made:  # (best effort: what a kill would leave, the next rewrite removes)
                try:
                    folderio.remove(store.folder, path)
                except OSError:
                    pass
            raise
        fmt.write_meta(store.folder, meta, durable=True)  # the commit
        remove_leftovers(store.folder, new)  # the old files
        fmt._fsync_folder(store.folder / fmt.STEPS_DIR)
    finally:
        store.close()
    _note(folder, report)
    return report


def remove_leftovers(folder: Path, schema: Schema) -> list[str]:
    """Remove the files in ``steps/`` of each step field's other form (which ``schema``, the committed one,
    does not name): what a rewrite killed before or after its commit left. Call under the writer lock."""
    named = {path.name for _, _, path, _ in fmt.layout(schema, fmt.Capacity(1, 1, 2, False))}
    removed = []
    for name in schema.fields:
        for other in (f"{name}.npy", f"{name}.index.npy", f"{name}.frames.npy"):
            path = folder / fmt.STEPS_DIR / other
            if other not in named and os.path.lexists(path):
                folderio.remove(folder, path)
                removed.append(other)
    return removed


# ---- into a new folder --------------------------------------------------------------------------------------


def _into(kind: str, folder: Path, out: Path, choose: Callable[[Schema], dict[str, Codec]],
          progress: bool) -> Recoded:
    check_new_path(out, "out", OptionError)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise OptionError(f"out must be a new folder (absent or empty) for the rewritten store (got {out}, which "
                          f"holds files); choose another path, or remove it")
    if not out.parent.is_dir():
        raise StoreNotFoundError(f"{out.parent} must be an existing folder to hold {out.name}; create it first")
    store = EpisodeStore.open(folder, "r")
    try:
        schema = store.schema
        changes = _changes(schema, choose(schema))
        new = _new_schema(schema, changes)
        table = store.live_table()
        report = Recoded(kind, str(folder), str(out), len(table), int(rows_of(table).sum()), bool(changes))
        report.fields = {name: _sizes(store, table, name) for name in changes}
        tmp = out.parent / f".{out.name}.{kind}-{os.getpid()}"
        folderio.remove_entry(tmp.parent, tmp)
        try:
            with folderio.errors_named(tmp, "make the folder"):
                os.mkdir(tmp)
            capacity = store.capacity
            kept = with_removed(store, table)  # (removed episodes stay removed: their ids name slots of the range)
            stored = build_store(kind, store, kept, new, tmp, progress)
            check_still_live(store, kept, capacity)
            for name, info in report.fields.items():
                info.update(after=_form(new.fields[name].codec), stored_bytes_after=stored[name])
            card_of(folder, tmp)
            place_folder(tmp, out)
        finally:
            folderio.remove_entry(tmp.parent, tmp)
    finally:
        store.close()
    _note(out, report)
    return report


# ---- sizes and the rest -------------------------------------------------------------------------------------


def _sizes(store: EpisodeStore, table: EpisodeTable, name: str) -> dict[str, Any]:
    """A field's form and stored bytes before the rewrite (frames only, for a compressed field)."""
    spec, file = store.schema.fields[name], store.steps[name]
    raw = int(rows_of(table).sum()) * spec.row_nbytes
    stored = raw
    if isinstance(file, EncodedField):
        index = file.index.array()
        stored = sum(int(index[start:start + rows, 1].sum())
                     for start, rows in zip(table.start.tolist(), rows_of(table).tolist()))
    return {"before": _form(spec.codec), "after": _form(spec.codec), "raw_bytes": raw, "stored_bytes_before": stored,
            "stored_bytes_after": stored}


def card_of(folder: Path, tmp: Path) -> None:
    """The source's card (when it has one) in the new store."""
    from .card import read_card, write_card

    card = read_card(folder)
    if card is not None:
        write_card(tmp, card)


def _note(folder: Path, report: Recoded) -> None:
    """A provenance record of the rewrite on the card of the rewritten store, when it has one."""
    from .card import add_provenance, read_card

    if report.changed and read_card(folder) is not None:
        add_provenance(folder, report.kind, report.folder,
                       fields={name: f"{info['before']} -> {info['after']}" for name, info in report.fields.items()})
