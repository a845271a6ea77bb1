"""Edits that make new stores, ``merge`` (``sharing/merging.py``: several stores into one) and ``split``
(``sharing/splitting.py``: one store into several), and what both share here: episodes copied whole from a store
opened read-only into a new store written by the store's own commit. Numpy only.

Each episode keeps its steps, its end, its final row, its meta values and its link to the segment it continues
(``continues``); the new store numbers episodes from 0 in the order they are copied. A compressed field whose codec
and level are the same in the source and the new store is copied frame by frame, never decoded
(``PendingEpisode.encoded``); a field raw in both is copied as byte ranges (``sharing/rowcopy.py``:
``os.copy_file_range``) once the commit has placed the episodes; any other field is read (decoded) and written by
the commit.

Crash safety: each new store is built in a hidden folder beside its target (``sharing/building.py``) and moved
onto the target when complete, so a kill at any instant leaves no target or a complete one; the hidden folder a
killed run left behind is removed by the next run that builds the same target. Running statistics are not copied
(they are rebuilt when first read); the card is (merged), with a provenance record of the edit, and a checksum
manifest is written when the sources had one.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..core import format as fmt
from ..core.encoded import EncodedField
from ..core.schema import Schema
from ..core.store import EpisodeStore, PendingEpisode
from ..errors import OptionError
from .building import check_room, place, remove, temporary_sibling
from .checksums import MANIFEST, check_new_path, store_folder
from .rowcopy import RowCopier

__all__ = ["EditReport", "open_source", "build_store", "check_target", "source_details", "has_checksums"]

_COMMIT_BYTES = 64 << 20  # episodes are committed together up to about this many bytes (one meta.json write)
_COMMIT_EPISODES = 4096  # or this many episodes (their raw fields' rows are not in memory: copied after)


@dataclass
class EditReport:
    """What ``merge`` or ``split`` did: the sources, each new store (its folder, episodes, steps, and how its raw
    rows came: ``'copy_file_range'`` or ``'copied'``), how each step field was copied (``'frames copied'``:
    compressed, never decoded; ``'copy_file_range'``, ``'copied'``; ``'re-encoded'``) and notes."""

    kind: str
    sources: list = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"{self.kind}: {', '.join(self.sources)}"]
        for name, out in self.outputs.items():
            lines.append(f"  {name} -> {out['folder']}: {out['episodes']} episodes, {out['steps']} steps "
                         f"({out['data']})")
        lines += [f"  {name}: {how}" for name, how in self.fields.items()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


# ---- reading the sources ----------------------------------------------------------------------------------


def open_source(folder: str | os.PathLike) -> EpisodeStore:
    """A source store opened read-only; a folder without one is StoreNotFoundError (NotAFolderError: a file)."""
    return EpisodeStore.open(store_folder(folder), "r")


def _frames_of(store: EpisodeStore, name: str, start: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..start+rows`` of compressed field ``name`` as (lengths, frames back to back), not decoded."""
    file = store.steps[name]
    assert isinstance(file, EncodedField)  # (the caller checked)
    entries = file.entries(start, start + rows, int(store.meta.state.frames[name]["bytes"]))
    offsets, lengths = entries[:, 0], entries[:, 1]
    frames = file.frames.array()
    lo = int(offsets[0])
    if np.array_equal(offsets, lo + np.concatenate([[0], np.cumsum(lengths[:-1])])):  # back to back (as written)
        return lengths, np.array(frames[lo:lo + int(lengths.sum())], dtype=np.uint8)
    return lengths, np.concatenate([np.asarray(frames[o:o + n]) for o, n in zip(offsets.tolist(), lengths.tolist())])


def episodes_of(store: EpisodeStore, table: Any, schema: Schema, positions: Iterable[int], links: dict,
                copied: dict[str, str]) -> Iterable[tuple[PendingEpisode, int]]:
    """The live episodes at ``positions`` of ``table`` (``store``'s) as pending episodes of a store of ``schema``,
    each with its first row in ``store``. The fields raw in both stores are left out of the episodes' rows: they
    are copied as byte ranges once the episodes are placed (``ranged``). ``links`` maps a source episode id to
    the episode copied from it (so that a segment continues its copy); ``copied`` gets how each field was copied."""
    source_links = store.links(table)
    by_range = ranged(store, schema)
    metas = {name: store.meta_array(name) for name in schema.meta_fields}
    for position in positions:
        start, length = int(table.start[position]), int(table.length[position])
        final, slot = bool(table.final[position]), int(table.slots[position])
        rows, encoded = {}, {}
        for name, spec in schema.fields.items():
            if name in by_range:
                _note(copied, name, "ranged")
                continue
            if spec.codec is not None and spec.codec == store.schema.fields[name].codec:
                encoded[name] = _frames_of(store, name, start, length + final)
                _note(copied, name, "frames copied")
            else:
                rows[name] = [np.asarray(store.step_array(name).take(np.arange(start, start + length + final), axis=0))]
                _note(copied, name, "copied" if spec.codec == store.schema.fields[name].codec else "re-encoded")
        meta = {name: np.array(array[slot], dtype=schema.meta_fields[name].dtype) for name, array in metas.items()}
        previous = links.get(int(source_links[position]), -1)
        episode = PendingEpisode(rows, length, fmt.END_NAMES[int(table.end[position])], final, meta,
                                 continues=previous, encoded=encoded)
        links[int(table.ids[position])] = episode
        yield episode, start


def _note(copied: dict[str, str], name: str, how: str) -> None:
    """Add a way field ``name`` was copied (``'frames copied + re-encoded'`` when sources differ)."""
    ways = copied[name].split(" + ") if name in copied else []
    if how not in ways:
        copied[name] = " + ".join([*ways, how])


def ranged(store: EpisodeStore, schema: Schema) -> list[str]:
    """The step fields raw in ``store`` and in ``schema``: copied row range by row range."""
    return [name for name, spec in schema.fields.items()
            if spec.codec is None and store.schema.fields[name].codec is None]


def _nbytes(episode: PendingEpisode) -> int:
    return (sum(chunk.nbytes for chunks in episode.rows.values() for chunk in chunks)
            + sum(blob.nbytes for _, blob in episode.encoded.values()))


# ---- writing a new store ----------------------------------------------------------------------------------


def check_target(target: str | os.PathLike, what: str) -> Path:
    """``target`` may become a new store: absent or an empty folder, its parent a folder, outside any store."""
    target = Path(target)
    check_new_path(target, what, OptionError)
    if target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise OptionError(f"{what} must be a new folder (absent or empty) for the new store (got {target}, which "
                          f"holds files); choose another path, or remove it")
    return target


def _remove_leftovers(target: Path, kind: str) -> None:
    """The hidden folders a killed run building ``target`` left (their process is gone)."""
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}.{kind}-"
    for path in target.parent.iterdir():
        pid = path.name[len(prefix):]
        if path.name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            remove(path)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # (this process's own leftover: an earlier call that failed)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_store(kind: str, target: Path, schema: Schema, parts: Sequence[tuple[EpisodeStore, Any, Sequence[int]]],
                *, room: dict, finish: Callable[[Path], None], bar: Any) -> dict[str, Any]:
    """A new store at ``target`` holding the episodes at ``positions`` of each ``(store, table, positions)`` of
    ``parts`` in that order (``table``: the store's live table the positions were chosen from, read once: a
    writer's later commit cannot move them), built in a hidden sibling; ``finish(tmp)`` writes the card before
    it is moved in. Returns its counts and how each field was copied."""
    chosen = [(table.length[list(positions)], table.final[list(positions)]) for _, table, positions in parts]
    episodes = sum(len(lengths) for lengths, _ in chosen)
    steps = sum(int(lengths.sum()) for lengths, _ in chosen)
    rows = steps + sum(int(finals.sum()) for _, finals in chosen)
    longest = max((int(lengths.max()) for lengths, _ in chosen if len(lengths)), default=1)
    room = check_room(room, episodes=episodes, max_timesteps=longest, rows=rows)
    capacity = fmt.Capacity(max(1, episodes), max(1, longest), max(rows, longest + 1, 2), False)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target, kind)
    tmp = temporary_sibling(target, kind)
    copied: dict[str, str] = {}
    copier = RowCopier()
    try:
        store = EpisodeStore.open(tmp, "w-", schema=schema, capacity=capacity)
        store.track_stats = False  # (rebuilt from the rows when first read)
        try:
            pending, size = [], 0
            for source, table, positions in parts:
                links: dict = {}
                for episode, first_row in episodes_of(source, table, schema, positions, links, copied):
                    pending.append((episode, first_row))
                    size += _nbytes(episode)
                    if size >= _COMMIT_BYTES or len(pending) >= _COMMIT_EPISODES:
                        _commit(store, source, pending, links, copier, bar)
                        pending, size = [], 0
                _commit(store, source, pending, links, copier, bar)
                pending, size = [], 0
            if room:
                store.grow(**room)
            store.sync()
        finally:
            store.close()
            copier.close()
        for source, table, _ in parts:
            _check_still_live(source, table)
        finish(tmp)
        place(tmp, target)
    finally:
        remove(tmp)
    copied.update({name: how.replace("ranged", copier.how) for name, how in copied.items()})
    return {"folder": str(target), "episodes": episodes, "steps": steps, "data": copier.how, "fields": copied}


def _commit(store: EpisodeStore, source: EpisodeStore, pending: list[tuple[PendingEpisode, int]], links: dict,
            copier: RowCopier, bar: Any) -> None:
    """Commit the episodes (their table entries, meta values and the fields given as rows or frames), then copy
    the rows of the raw fields to where the commit placed them. The store is in its hidden folder until it is
    complete, so that no reader sees an episode before its rows."""
    if not pending:
        return
    store.commit([episode for episode, _ in pending])
    table = store.live_table()
    starts = dict(zip(table.ids.tolist(), table.start.tolist()))
    runs = [(first_row, starts[episode.id], episode.num_rows) for episode, first_row in pending]
    for name in ranged(source, store.schema):
        source_file, target_file = source.steps[name], store.steps[name]
        assert isinstance(source_file, fmt.NpyFile) and isinstance(target_file, fmt.NpyFile)  # (raw in both)
        copier.copy(source_file, target_file, runs)
    for key, value in list(links.items()):  # (committed: keep the id, not the rows)
        if isinstance(value, PendingEpisode) and value.id is not None:
            links[key] = value.id
    bar.update(sum(episode.length for episode, _ in pending))


def _check_still_live(store: EpisodeStore, table: Any) -> None:
    from .recode_files import check_still_live

    check_still_live(store, table, store.capacity)


def source_details(folder: Path, store: EpisodeStore) -> dict[str, Any]:
    """A source as a provenance record names it: its folder, card name and store id."""
    from .card import read_card

    card = read_card(folder)
    return {"folder": str(folder), "name": None if card is None else card.name, "store_id": store.meta.store_id,
            "episodes": store.num_episodes}


def has_checksums(folders: Iterable[Path]) -> bool:
    return any((Path(folder) / MANIFEST).is_file() for folder in folders)
