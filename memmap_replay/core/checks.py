"""The checks ``EpisodeStore.open`` makes: the path, whether a store is there, whether the folder's files
may be replaced by a new store, whether a stored schema and capacity match the ones asked for, and
whether the episode table agrees with meta.json. Nothing here writes, except ``make_folder``.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import folderio
from . import format as fmt
from ..errors import (OptionError, CorruptStoreError, NotAFolderError, ReadOnlyError, ReplayError, SchemaMismatchError,
                     StoreNotFoundError, UnsafeEntryError, UnsupportedFormatError)
from .format import Capacity, StoreMeta
from .schema import NAME_PATTERN, Schema
from .training import STATE_FILE

if TYPE_CHECKING:
    from .store import EpisodeStore

__all__ = ["MODES", "MRB_CONFIG", "refuse_mrb_folder", "locate", "make_folder", "check_replaceable", "check_live_ids",
           "holds_episodes", "check_matches"]

MODES = ("r", "r+", "a", "w", "w-")
_LARGE_TABLE = 1 << 24  # live episodes beyond which their count must be backed by ids on disk (_check_claim)
# the names a store's subfolders may hold (anything else belongs to someone else, and is never deleted)
_FIELD_FILE = re.compile(rf"{NAME_PATTERN.pattern}\.npy")
_OWN_FILES: dict[str, Callable[[str], object]] = {  # folder -> whether an entry's name is one of its files
    fmt.STEPS_DIR: fmt.STEP_FILE.fullmatch,
    fmt.META_DIR: _FIELD_FILE.fullmatch,
    # (the episode table, and an edit's journal or its temp file: core/edits.py)
    fmt.EPISODES_DIR: lambda entry: (entry in {f"{name}.npy" for name in fmt.TABLE}
                                     or entry == fmt.JOURNAL_FILE or folderio.is_temp_of(entry, fmt.JOURNAL_FILE)),
    fmt.PRIORITIES_DIR: re.compile(r".+\.(npy|json|lock)").fullmatch,  # a sampler's files, by any name
    fmt.RATELIMIT_DIR: re.compile(r"[A-Za-z0-9_-]{1,64}\.(npy|json|lock)(\.tmp)?").fullmatch,
    fmt.TRAINING_DIR: STATE_FILE.fullmatch,  # a training state's files (core/training.py)
}


def locate(folder: Any, mode: str) -> tuple[Path, bool]:
    """The folder as a Path, and whether it holds a meta.json; refuses what ``mode`` cannot open."""
    if not isinstance(mode, str) or mode not in MODES:
        raise OptionError(f"mode must be one of {MODES} (got {mode!r})")
    if isinstance(folder, (str, bytes)) and not folder:
        raise OptionError("folder must be a path (got an empty one, which would mean the current directory); "
                               "pass e.g. 'replay_data'")
    folder = Path(folder)
    if "\x00" in str(folder):
        raise OptionError(f"folder must not contain a NUL byte (got {str(folder)!r})")
    try:
        a_file = folder.exists() and not folder.is_dir()
        exists = (folder / fmt.META_FILE).exists()
    except OSError as error:  # e.g. a name too long for the file system
        raise NotAFolderError(f"{folder} cannot be a store folder ({error.strerror}); choose another path") from None
    if a_file:
        raise NotAFolderError(f"{folder} must be a folder (got a file); choose another path")
    if not exists:
        refuse_mrb_folder(folder, mode)
    if mode in ("r", "r+") and not exists:
        what = "does not exist" if not folder.exists() else "holds no meta.json"
        if any((folder / name).is_dir() for name in (fmt.STEPS_DIR, fmt.EPISODES_DIR)):
            raise StoreNotFoundError(
                f"no store at {folder}: the folder {what}, only a store's other files (meta.json was lost, or "
                f"creating the store was interrupted); restore meta.json from a copy, or create a new store "
                f"there with ReplayBuffer(folder, max_episodes, max_timesteps, fields, overwrite=True); "
                f"`python -m memmap_replay verify {folder}` lists what is there")
        raise StoreNotFoundError(f"no store at {folder}: the folder {what}; check the path, or create a store "
                                 f"there with ReplayBuffer(folder, max_episodes, max_timesteps, fields)")
    if mode == "w-" and exists:
        raise SchemaMismatchError(f"a store already exists at {folder}; pass overwrite=True (mode 'w') to replace it")
    return folder, exists


MRB_CONFIG = "metadata.pkl"  # memmap-replay-buffer 0.2.x's config


def refuse_mrb_folder(folder: Path, mode: str) -> None:
    """A folder written by memmap-replay-buffer 0.2.x (its ``metadata.pkl``, no meta.json) is never opened as a
    store, nor made one: the error says how to convert it (nothing is converted or deleted silently)."""
    try:
        found = (folder / MRB_CONFIG).exists() or (folder / MRB_CONFIG).is_symlink()
    except OSError:
        return
    if not found:
        return
    how = (f"convert it into a store in another folder with `memmap-replay import {folder} NEW_FOLDER` or "
           f"memmap_replay.interop.import_memmap_replay_buffer({str(folder)!r}, 'NEW_FOLDER'), then open that")
    if mode in ("r", "r+"):
        raise StoreNotFoundError(f"{folder} is a memmap-replay-buffer 0.2.x folder (it holds {MRB_CONFIG}), not a "
                                 f"memmap_replay store, which this library never reads by unpickling; {how}")
    raise NotAFolderError(f"{folder} holds a memmap-replay-buffer 0.2.x buffer ({MRB_CONFIG}): memmap_replay does not "
                          f"create a store over it (0.2.x's overwrite=True default wiped a folder; this library never "
                          f"deletes another program's files); {how}, or choose another folder for the new store")


def make_folder(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; returns the folders it made, outermost first (none if it was there)."""
    made, path = [], folder
    while not os.path.lexists(path) and path.parent != path:
        made.append(path)
        path = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise NotAFolderError(
            f"{folder} cannot be created: a part of its path is a file; choose another path") from None
    except PermissionError as error:
        raise ReadOnlyError(f"{folder} cannot be created ({error.strerror}); choose a folder you may write") from None
    except OSError as error:
        raise NotAFolderError(f"{folder} cannot be created ({error.strerror}); choose another path") from None
    return made[::-1]


def present_entries(folder: Path) -> set[str]:
    """The names of a store's own entries (``format._OWNED``) that ``folder`` holds now (links too)."""
    return {name for name in fmt._OWNED if os.path.lexists(folder / name)}


def undo_creation(folder: Path, before: set[str], made: list[Path], *, lock: bool) -> None:
    """After a creation that failed (a full disk): remove the store's entries it made in ``folder`` (those not
    in ``before``), the writer lock file if it made it (``lock``), then the folders it made (``make_folder``),
    innermost first, each only if empty. Only those names: the user's files stay; a link is removed, never
    followed (``shutil.rmtree`` does not follow links inside a folder). Best effort: the creation's own error
    is the one the caller raises."""
    names = [name for name in fmt._OWNED if name not in before]
    if lock:
        names.append(fmt.LOCK_FILE)
    for name in names:
        try:
            folderio.remove_entry(folder, folder / name)
        except (OSError, ReplayError):
            pass
    for path in reversed(made):
        try:
            os.rmdir(path)
        except OSError:
            break


def check_replaceable(folder: Path) -> None:
    """Creating a store removes the files the format owns: refuse if any of them is another program's
    (a meta.json that is not a memmap_replay store's, or a foreign file in steps/, meta/, ...)."""
    if not folder.is_dir():
        return
    meta = folder / fmt.META_FILE
    if meta.exists() or meta.is_symlink():
        declared = _declared_format(meta)
        if declared != fmt.FORMAT_NAME:
            raise UnsupportedFormatError(
                f"{meta} is not a memmap_replay store's (it must declare format {fmt.FORMAT_NAME!r}, got "
                f"{declared}): a new store would replace it, so none is made; if it is another program's, choose "
                f"another folder; if it is a damaged store's, move that meta.json away first")
    for name, owned in _OWN_FILES.items():
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        foreign: Path | None
        if path.is_symlink() or not path.is_dir():
            foreign = path
        else:
            foreign = next((entry for entry in sorted(path.iterdir())
                            if entry.is_symlink() or not entry.is_file() or not owned(entry.name)), None)
        if foreign is not None:
            raise NotAFolderError(
                f"{folder} cannot hold a store: {foreign} is not one of a store's files, and creating the store "
                f"would delete it (a store's {name}/ holds only its own .npy files); move it, or choose another "
                f"folder")


def _declared_format(path: Path) -> str:
    """What a meta.json says its format is, in words for a message."""
    try:
        data = folderio.read_json(path.parent, path)
    except UnsafeEntryError:  # a link out of the folder, a FIFO, a huge file: refused, never read
        raise
    except OSError:
        return "something that is not a JSON file"

    if not isinstance(data, dict) or "format" not in data:
        return "no format"
    return data["format"] if data["format"] == fmt.FORMAT_NAME else repr(data["format"])[:80]


def check_live_ids(store: EpisodeStore) -> bool:
    """The live slots of an ``EpisodeStore``'s episode table agree with its meta.json: O(episodes), no step
    data read. True once checked; False when the store took a newer meta.json while the check read its table
    (a writer grew the store: the table is then of the new capacity, which the checked state does not
    describe): the caller checks again, against the meta.json taken."""
    meta = store.meta
    state, max_timesteps = meta.state, meta.capacity.max_timesteps
    _check_claim(store)
    ids = np.arange(state.first_episode, state.next_episode, dtype=np.int64)
    stored = store.table["id"].array()[ids % store.meta.capacity.max_episodes]
    if not np.array_equal(stored, ids):
        i = int(np.argmax(stored != ids))
        raise CorruptStoreError(
            f"{store.folder}: episodes/id.npy does not match meta.json's live episodes "
            f"{state.first_episode}..{state.next_episode - 1}; the episode table is damaged "
            f"(slot {ids[i] % store.meta.capacity.max_episodes} must hold episode {ids[i]}, got {stored[i]})"
        )
    if not len(ids):
        return True
    table = store.live_table(catch_up=False)  # (of ``state``: a newer meta.json is the retry's business)
    if store.meta is not meta:  # it adopted a grown store's meta.json: its table is not of ``state``
        return False
    if not len(table):  # a writer evicted them all since meta.json was read (the table leaves them out)
        return True
    def where(i: int, files: str) -> str:
        return f"{store.folder}: {files}: episode {table.ids[i]} (slot {table.slots[i]})"
    bad = (table.start < 0) | (table.start > state.rows) | (table.length < 1) | (table.length > max_timesteps)
    ends = table.start + table.length + table.final  # may wrap only where start or length is bad already
    bad |= ends > state.rows
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptStoreError(
            f"{where(i, 'episodes/start.npy, episodes/length.npy')} has start {table.start[i]}, length "
            f"{table.length[i]}: the episode table points outside the {state.rows} stored rows (expected a "
            f"length of 1..{max_timesteps} within them)"
        )
    if (table.end > max(fmt.END_NAMES)).any():
        i = int(np.argmax(table.end > max(fmt.END_NAMES)))
        raise CorruptStoreError(f"{where(i, 'episodes/end.npy')} has end code {table.end[i]} (expected 0 "
                                f"unspecified, 1 terminated or 2 truncated)")
    # live episodes never share a row; ids run in at most two ascending runs of starts (a ring wraps
    # once), which a stable sort (timsort) merges in linear time
    order = np.argsort(table.start, kind="stable")
    reach = np.maximum.accumulate(ends[order])
    clash = np.flatnonzero(table.start[order][1:] < reach[:-1])
    if clash.size:
        i = int(order[clash[0] + 1])
        raise CorruptStoreError(f"{where(i, 'episodes/start.npy, episodes/length.npy')} has rows "
                                f"{table.start[i]}..{ends[i] - 1}, which another live episode also holds")
    if len(table) > len(ids) - state.removed:  # (fewer: evicted since meta.json was read, or more removed)
        raise CorruptStoreError(f"{store.folder}: episodes/end.npy marks {len(ids) - len(table)} of the episodes "
                                f"{ids[0]}..{ids[-1]} removed (end code {fmt.REMOVED}), but meta.json's "
                                f"state.removed counts {state.removed}; the episode table or meta.json is damaged")
    # at or after the newest live episode's rows (a trim of its tail leaves rows between them, and compact() may
    # free a removed newest episode's rows); in a ring, after the newest episode placed, removed or not
    newest = ends[-1] if table.ids[-1] == ids[-1] or not store.capacity.circular else _removed_end(store, ids[-1])
    if newest is not None and state.write_head != 0 and state.write_head < newest:
        raise CorruptStoreError(f"{store.folder}: meta.json's state.write_head is {state.write_head} (expected "
                                f"{newest}, the row after the newest episode {ids[-1]}, or beyond it, or 0)")
    return True


def _removed_end(store: EpisodeStore, episode: int) -> int | None:
    """The row after the rows of the removed episode ``episode`` (a ring's newest, whose rows the write head
    follows), or None when its slot holds another episode by now."""
    entry = store.entries(np.array([episode % store.meta.capacity.max_episodes]))
    end = int(entry["start"][0]) + int(entry["length"][0]) + int(entry["final"][0])
    return end if int(entry["id"][0]) == episode else None


def _check_claim(store: EpisodeStore) -> None:
    """A reader holds the live episodes' table in memory (about 50 bytes an episode): beyond ``_LARGE_TABLE``
    episodes, meta.json's count must be backed by ids actually written in ``episodes/id.npy``, so a stranger's
    folder of sparse files cannot make a reader allocate memory for billions of episodes it does not hold."""
    live = store.meta.state.next_episode - store.meta.state.first_episode
    if live <= _LARGE_TABLE:
        return
    path = store.table["id"].path
    written = os.stat(path).st_blocks * 512
    if written < live * 8 // 2:
        raise UnsafeEntryError(
            f"{path} holds {written} bytes on disk, but meta.json declares {live} live episodes ({live * 8} bytes of "
            f"ids): a store this library wrote has them written; the folder is damaged or not what it claims")


def holds_episodes(folder: Path) -> bool:
    """A folder without meta.json whose episode table records episodes (its metadata was lost), as
    opposed to an empty table left by an interrupted creation, which may be created again."""
    path = folder / fmt.EPISODES_DIR / "length.npy"
    try:
        offset, dtype, shape, size = fmt.read_npy_header(path, folder)
        with fmt._open_npy(folder, path) as file:
            count = min(int(np.prod(shape)), max(0, size - offset) // dtype.itemsize)
            lengths = np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(count,)) if count else np.zeros(0)
            return bool(np.any(lengths))
    except (OSError, ValueError, TypeError):  # missing or half-written: nothing was ever committed with it
        return False


def check_matches(folder: Path, meta: StoreMeta, schema: Schema | None, capacity: Capacity | None) -> None:
    """Reopening with a schema or capacity that differs from the stored one is an error, never a wipe. A field asked
    for raw (no codec) matches the stored field compressed (``memmap-replay compress`` changed it; reads are the
    same); a codec asked for that differs from the stored one does not."""
    if schema is not None:
        stored = meta.schema.fields
        schema = replace(schema, fields={name: replace(spec, codec=stored[name].codec)
                                         if spec.codec is None and name in stored else spec
                                         for name, spec in schema.fields.items()})
    lines = meta.schema.differences(schema) if schema is not None else []
    if capacity is not None and capacity != meta.capacity:
        for key, stored in vars(meta.capacity).items():
            if getattr(capacity, key) != stored:
                lines.append(f"{key}: stored {stored!r}, asked for {getattr(capacity, key)!r}")
    if lines:
        raise SchemaMismatchError(
            f"the store at {folder} was created with a different config:\n  " + "\n  ".join(lines)
            + "\nopen it with ReplayBuffer.from_folder(folder), or pass overwrite=True to replace it"
            + _grow_hint(folder, meta, schema, capacity)
        )


def _grow_hint(folder: Path, meta: StoreMeta, schema: Schema | None, capacity: Capacity | None) -> str:
    """How to raise the capacity in place, when only a larger capacity was asked for."""
    if capacity is None or (schema is not None and meta.schema.differences(schema)):
        return ""
    old, flags, options = meta.capacity, [], []
    for key in ("max_episodes", "max_steps", "max_timesteps"):
        asked, stored = getattr(capacity, key), getattr(old, key)
        if asked < stored:
            return ""
        if asked > stored:
            flags.append(f"--{key.replace('_', '-')} {asked}")
            options.append(f"{key}={asked}")
    if old.circular and not capacity.circular:
        return ""
    if capacity.circular and not old.circular:
        flags.append("--circular")
        options.append("circular=True")
    return (f"\nor, to keep its episodes and raise its capacity in place: ReplayBuffer.from_folder(folder)"
            f".grow({', '.join(options)}), or `memmap-replay grow {folder} {' '.join(flags)}`")
