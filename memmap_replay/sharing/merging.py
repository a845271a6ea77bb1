"""``merge``: stores with the same schema (or their common fields) into one new store, their cards merged. Numpy
only; the copying, the hidden build folder and the checks are ``sharing/editing.py``'s (its docstring says what an
episode keeps and what a kill leaves)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.options import flag
from ..core.progress import progress_bar
from ..core.schema import Schema
from ..core.store import EpisodeStore
from ..errors import OptionError, SchemaMismatchError
from .editing import EditReport, build_store, check_target, has_checksums, open_source, source_details

__all__ = ["merge"]


def merge(out: str | os.PathLike, *folders: str | os.PathLike, fields: str = "same", progress: bool = False,
          max_episodes: int | None = None, max_steps: int | None = None, max_timesteps: int | None = None,
          circular: bool = False) -> EditReport:
    """Merge stores into one new store.

    Every live episode of each store goes into the new store whole (steps, end, final observation, meta
    values, links between the segments of a long episode), the stores in the order given, each store's
    episodes oldest first. A compressed field stored with the same codec in a source and in the new store is
    copied frame by frame without decoding. The new store is built in a hidden folder beside ``out`` and moved
    onto it when complete: a kill at any instant leaves no ``out`` or a complete one.

    Parameters
    ----------
    out : str or os.PathLike
        The new store's folder: absent or empty (its parent is created if need be).
    *folders : str or os.PathLike
        The stores to merge, at least one.
    fields : {'same', 'common'}, default 'same'
        ``'same'``: every store must have the same step fields and meta fields (names, dtypes, shapes), else
        ``SchemaMismatchError`` naming the fields that differ, and nothing is written. ``'common'``: the new
        store has the step and meta fields every store has with the same dtype and shape. A field's default and
        codec are the first store's.
    progress : bool, default False
        Draw a progress bar on stderr.
    max_episodes, max_steps, max_timesteps : int, optional
        Room for episodes stored later; None sizes the new store to the merged data. Each must hold it.
    circular : bool, default False
        Make the new store a ring (``ReplayBuffer.grow``).

    Returns
    -------
    EditReport
        The sources, the new store's folder and counts, how each field was copied.

    Examples
    --------
    >>> report = merge("merged", "run_a", "run_b")  # doctest: +SKIP
    """
    progress = flag(progress, "progress")
    if fields not in ("same", "common"):
        raise OptionError(f"fields must be 'same' or 'common' (got {fields!r})")
    if not folders:
        raise OptionError("merge needs at least one store folder to merge (got none)")
    target = check_target(out, "out")
    paths = [Path(folder) for folder in folders]
    stores: list[EpisodeStore] = []
    try:
        for path in paths:
            stores.append(open_source(path))
        schema = merged_schema([store.schema for store in stores], paths, fields)
        report = EditReport("merge", [str(path) for path in paths])
        tables = [store.live_table() for store in stores]  # (read once: the episodes copied are these)
        total = sum(int(table.length.sum()) for table in tables)
        details = [source_details(path, store) for path, store in zip(paths, stores)]

        def finish(tmp: Path) -> None:
            _merged_card(tmp, paths, details, fields, report)

        with progress_bar(total, "merge", progress) as bar:
            out_info = build_store("merge", target, schema,
                                   [(store, table, range(len(table))) for store, table in zip(stores, tables)],
                                   room=dict(max_episodes=max_episodes, max_steps=max_steps,
                                             max_timesteps=max_timesteps, circular=circular),
                                   finish=finish, bar=bar)
        report.fields = out_info.pop("fields")
        report.outputs["merged"] = out_info
    finally:
        for store in stores:
            store.close()
    return report


def merged_schema(schemas: list[Schema], paths: list[Path], fields: str) -> Schema:
    """The new store's schema: the first store's, which every store must share (``'same'``), or the step and
    meta fields all of them have with one dtype and shape (``'common'``)."""
    first = schemas[0]

    def key(spec: Any) -> tuple:
        return spec.dtype, tuple(spec.shape)

    kept = {}
    for group in ("fields", "meta_fields"):
        specs = getattr(first, group)
        kept[group] = {name: spec for name, spec in specs.items()
                       if all(name in getattr(other, group) and key(getattr(other, group)[name]) == key(spec)
                              for other in schemas[1:])}
        if fields == "same":
            differing = []
            for path, other in zip(paths[1:], schemas[1:]):
                theirs = getattr(other, group)
                for name in sorted(set(specs) | set(theirs)):
                    if name not in kept[group]:
                        differing.append(_difference(name, specs.get(name), theirs.get(name), paths[0], path))
            if differing:
                what = "step fields" if group == "fields" else "meta fields"
                raise SchemaMismatchError(
                    f"the stores to merge must have the same {what} (names, dtypes, shapes); these differ: "
                    f"{'; '.join(dict.fromkeys(differing))}. Pass fields='common' (--fields common) to merge the "
                    f"fields every store has alike; nothing was written")
    if not kept["fields"]:
        raise SchemaMismatchError(f"the stores to merge have no step field in common (same name, dtype and shape): "
                                  f"{[list(schema.fields) for schema in schemas]}; nothing was written")
    return Schema(kept["fields"], kept["meta_fields"])


def _difference(name: str, ours: Any, theirs: Any, first: Path, other: Path) -> str:
    def text(spec: Any, path: Path) -> str:
        return f"absent in {path}" if spec is None else f"{spec.dtype}{tuple(spec.shape)} in {path}"

    return f"{name!r}: {text(ours, first)}, {text(theirs, other)}"


def _merged_card(tmp: Path, paths: list[Path], details: list[dict], fields: str, report: EditReport) -> None:
    """The sources' cards merged: the values all cards that have them agree on, the provenance of each source
    in turn, then a record of the merge naming every source."""
    from .card import DatasetCard, add_provenance, read_card, write_card
    from .checksums import write_manifest

    cards = [card for card in (read_card(path) for path in paths) if card is not None]
    if cards:
        merged = DatasetCard()
        for key in DatasetCard.__dataclass_fields__:
            if key in ("provenance", "unknown"):
                continue
            values = [getattr(card, key) for card in cards if getattr(card, key) not in (None, {}, [])]
            if values and all(value == values[0] for value in values):
                setattr(merged, key, values[0])
            elif values:
                report.notes.append(f"the cards differ on {key!r}: the merged card leaves it out")
        merged.provenance = [record for card in cards for record in card.provenance]
        write_card(tmp, merged)
    add_provenance(tmp, "merge", " + ".join(str(path) for path in paths), sources=details, fields=fields)
    if has_checksums(paths):
        write_manifest(tmp)
