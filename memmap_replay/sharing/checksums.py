"""Checksums of a store: ``checksums.sha256``, in the format of GNU ``sha256sum`` (so that
``sha256sum -c checksums.sha256`` run in the folder checks it without this library).

One line per file, sorted by path: 64 lowercase hex digits, two spaces, the path relative to the folder
with ``/`` separators. It covers every file of the store's layout (``is_store_path``) except itself,
``writer.lock``, ``priorities/*.lock`` and temporary ``*.tmp`` files; files that are not the store's
(your notes, say) are neither listed nor packed. Files are read in chunks, so memory stays bounded.

Also here, shared by the card, ``checksum`` and ``pack``: the layout test, the atomic file write and the
two locks (the writer lock, so that nothing is written while files are hashed or packed, and a lock on
the folder itself, which serializes card edits with manifests and packing).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from ..core import folderio
from ..core.progress import progress_bar
from ..core import format as fmt
from ..errors import (CorruptStoreError, InvalidDataError, MissingFileError, NotAFolderError, StoreLockedError,
                     StoreNotFoundError, UnsafeEntryError)
from ..core.lock import WriterLock
from ..core.schema import NAME_PATTERN
from ..core.store import CommitObserver, observe_commits

fcntl: ModuleType | None  # None where the OS has no flock
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: card edits are not serialized
    fcntl = None

__all__ = ["MANIFEST", "ManifestProblem", "write_manifest", "check_manifest", "read_manifest", "is_store_path",
           "store_files", "stray_files", "check_new_path"]

MANIFEST = "checksums.sha256"
_CHUNK = 1 << 20
_TOP_FILES = frozenset({fmt.META_FILE, "card.json", "README.md"})
_STORE_DIRS = (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR, fmt.PRIORITIES_DIR, "stats")
_FIELD_FILE = re.compile(rf"{NAME_PATTERN.pattern}\.npy")
_DIR_FILES: dict[str, Callable[[str], object]] = {  # folder -> whether an entry's name is one of its files
    fmt.STEPS_DIR: fmt.STEP_FILE.fullmatch,
    fmt.META_DIR: _FIELD_FILE.fullmatch,
    fmt.EPISODES_DIR: frozenset(f"{name}.npy" for name in fmt.TABLE).__contains__,
    fmt.PRIORITIES_DIR: re.compile(r"[A-Za-z0-9_-]{1,64}(\.owner\.npy|\.npy|\.json)").fullmatch,
}
_STATS_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # stats/ is free-form, up to 4 levels deep
_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
_MAX_LISTED = 5
_TEXT_LIMIT = 1 << 26  # 64 MiB: the most card.json, README.md and checksums.sha256 may take (unpack refuses more)


def is_store_path(rel: str) -> bool:
    """Whether ``rel`` (a relative posix path) names one of a store's files that checksums cover."""
    parts = rel.split("/")
    if len(parts) == 1:
        return rel in _TOP_FILES
    if parts[0] == "stats":
        return 2 <= len(parts) <= 5 and all(_STATS_PART.fullmatch(part) for part in parts[1:]) \
            and not rel.endswith((".tmp", ".lock"))
    owned = _DIR_FILES.get(parts[0])
    return len(parts) == 2 and owned is not None and bool(owned(parts[1]))


def _is_store_dir(rel: str) -> bool:
    parts = rel.split("/")
    return parts[0] in _STORE_DIRS and (len(parts) == 1 or (parts[0] == "stats" and len(parts) <= 4 and all(
        _STATS_PART.fullmatch(part) for part in parts[1:])))


def store_files(folder: Path) -> tuple[list[str], list[str]]:
    """(the store's files, sorted; the store paths that are links to outside the folder)."""
    found: list[str] = []
    escaping: list[str] = []
    _walk(folder, folder.resolve(), "", found, escaping)
    return sorted(found), escaping


def _walk(folder: Path, root: Path, rel: str, found: list, escaping: list) -> None:
    with folderio.errors_named(folder / rel, "list"):
        names = sorted(os.listdir(folder / rel))
    for name in names:
        child = f"{rel}/{name}" if rel else name
        path = folder / child
        if not (is_store_path(child) or _is_store_dir(child)):
            continue
        if not _inside(root, path):
            escaping.append(child)
        elif path.is_file() and is_store_path(child):
            found.append(child)
        elif path.is_dir() and _is_store_dir(child):
            _walk(folder, root, child, found, escaping)


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a symlink loop
        return False


# ---- writing ---------------------------------------------------------------------------------------


def write_manifest(folder: str | os.PathLike, *, progress: bool = False) -> Path:
    """Hash every store file into ``checksums.sha256`` (atomically); returns its path. Takes the writer
    lock while it reads (StoreLockedError if a writer is writing)."""
    folder = store_folder(folder)
    with _writer_locked(folder, "write checksums of"), _folder_lock(folder):
        return _manifest_unlocked(folder, progress=progress)


def _manifest_unlocked(folder: Path, *, progress: bool = False) -> Path:
    files, escaping = store_files(folder)
    if escaping:
        raise CorruptStoreError(f"{folder}: {', '.join(escaping)} must be inside the folder (found a symbolic link to "
                                f"outside it); replace the link by the file itself")
    digests = _hash_files(folder, files, progress=progress)
    text = "".join(f"{digests[rel]}  {rel}\n" for rel in files)
    _write_atomic(folder / MANIFEST, text.encode("utf-8"))
    return folder / MANIFEST


def _refresh_entries(folder: Path, names: tuple[str, ...]) -> None:
    """Re-hash ``names`` in an existing, well-formed manifest (the card does this when it rewrites itself)."""
    entries, problems = read_manifest(folder)
    if entries is None or problems:
        return
    entries.update(_hash_files(folder, [name for name in names if (folder / name).is_file()]))
    _write_atomic(folder / MANIFEST, "".join(f"{entries[rel]}  {rel}\n" for rel in sorted(entries)).encode("utf-8"))


def _hash_files(folder: Path, files: list[str], *, progress: bool = False) -> dict[str, str]:
    """sha256 of each file: regular files inside ``folder`` only (a FIFO, a device or a link out of the folder
    raises UnsafeEntryError naming it; nothing blocks), read in chunks."""
    total = sum(_size_of(folder / rel) for rel in files) if progress else 0
    buffer = bytearray(_CHUNK)
    view, digests = memoryview(buffer), {}
    with progress_bar(total, "sha256", progress, unit="B", leave=True) as bar:
        for rel in files:
            digest, path = hashlib.sha256(), folder / rel
            fd = folderio.open_read(folder, path, doing="hash")
            try:
                with folderio.errors_named(path, "hash"):
                    while count := os.readv(fd, [buffer]):
                        digest.update(view[:count])
                        bar.update(count)
            finally:
                os.close(fd)
            digests[rel] = digest.hexdigest()
    return digests


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # (only for the progress bar: hashing it will say what is wrong)
        return 0


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` (a file directly in a store folder) by ``data``: a fresh temporary file, fsync,
    ``os.replace``, opened without following links (folderio.write_atomic); a failure leaves ``path`` as it
    was and raises the library's error naming it (DiskFullError, ReadOnlyError, ...)."""
    try:
        folderio.write_atomic(path.parent, path, data, doing="write")
    except CorruptStoreError as error:
        if not path.is_dir() or path.is_symlink():
            raise
        raise CorruptStoreError(f"{path} must be a file (got a folder), so it cannot be written; remove the folder "
                                f"{path.name}/ from {path.parent}, then try again") from error


# ---- checking --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestProblem:
    """One finding of ``check_manifest``: the path concerned, its kind (``missing``, ``changed``,
    ``unlisted``, ``malformed``, ``_unsafe``, ``no_manifest``) and a message in plain words."""

    path: str
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def read_manifest(folder: Path) -> tuple[dict[str, str] | None, list[ManifestProblem]]:
    """The manifest's entries (path -> hex digest), None if there is none, and its malformed lines. An I/O
    error reading it (no permission, EIO) raises the library's error (ReadOnlyError, StoreIOError)."""
    try:
        text = folderio.read_bounded(folder, folder / MANIFEST, folderio.MAX_MANIFEST_BYTES).decode("utf-8")
    except MissingFileError:
        return None, []
    except UnsafeEntryError as error:
        return {}, [ManifestProblem(MANIFEST, "unsafe", f"not read: {error}")]
    except CorruptStoreError as error:  # (a folder in its place) -- an I/O error (EIO, EACCES) is raised as such
        return {}, [ManifestProblem(MANIFEST, "malformed", f"cannot be read ({error}); write it again with "
                                                          f"`python -m memmap_replay checksum {folder}`")]
    except UnicodeDecodeError as error:
        return {}, [ManifestProblem(MANIFEST, "malformed", f"cannot be read as text ({error}); write it again with "
                                                          f"`python -m memmap_replay checksum {folder}`")]
    entries: dict[str, str] = {}
    problems: list[ManifestProblem] = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.fullmatch(line)
        rel = match.group(2) if match else ""
        why = ("expected '<64 hex digits>  <path>'" if not match else _unsafe(rel) or
               ("listed twice" if rel in entries else ""))
        if why:
            kind = "malformed" if not match or rel in entries else "unsafe"
            problems.append(ManifestProblem(MANIFEST, kind, f"line {number}: {why} (found {line[:120]!r})"))
        elif match is not None:  # (always, when there is no problem)
            entries[rel] = match.group(1).lower()
    return entries, problems


def _unsafe(rel: str) -> str:
    parts = rel.split("/")
    if rel.startswith("/") or re.match(r"[A-Za-z]:", rel):
        return "an absolute path; a manifest lists paths inside the folder only"
    if ".." in parts or "." in parts or "" in parts or "\\" in rel or "\0" in rel:
        return "a path that is not a plain relative path inside the folder ('..', '.', '\\' or an empty part)"
    return ""


def check_manifest(folder: str | os.PathLike, *, progress: bool = False) -> list[ManifestProblem]:
    """Compare the store's files with ``checksums.sha256``: each listed file must exist inside the folder
    and have its digest, and each store file must be listed. Returns the problems (empty: all match). A
    file the system fails to read (no permission, EIO) raises the library's error naming it, since what
    it holds is unknown."""
    folder = store_folder(folder, need_meta=False)
    entries, problems = read_manifest(folder)
    if entries is None:
        return [ManifestProblem(MANIFEST, "no_manifest", f"missing: write one with `python -m memmap_replay checksum "
                                                         f"{folder}`")]
    root, readable = folder.resolve(), []
    for rel in sorted(entries):
        path = folder / rel
        if not _inside(root, path):
            problems.append(ManifestProblem(rel, "unsafe", "a symbolic link to outside the folder (or a loop); it was "
                                                           "not read: a store's files are inside its folder"))
        elif not path.is_file():
            what = "missing" if not path.exists() else "not a file"
            problems.append(ManifestProblem(rel, "missing", f"{what} (checksums.sha256 lists it, sha256 "
                                                            f"{entries[rel][:12]}…)"))
        else:
            readable.append(rel)
    digests = {}
    for rel in readable:  # one at a time, so that a file that cannot be read is named and the others still checked
        try:
            digests.update(_hash_files(folder, [rel], progress=progress))
        except UnsafeEntryError as error:
            problems.append(ManifestProblem(rel, "unsafe", f"not read: {error}"))
        except (MissingFileError, CorruptStoreError) as error:  # gone meanwhile, or a folder: an I/O error raises
            problems.append(ManifestProblem(rel, "missing", f"cannot be read ({error})"))
    for rel in digests:
        if digests[rel] != entries[rel]:
            problems.append(ManifestProblem(rel, "changed", f"its sha256 is {digests[rel][:12]}… (expected "
                                                            f"{entries[rel][:12]}…, from checksums.sha256)"))
    files, escaping = store_files(folder)
    problems += [ManifestProblem(rel, "unsafe", "a symbolic link to outside the folder; a store's files must be "
                                                "inside it") for rel in escaping if rel not in entries]
    problems += [ManifestProblem(rel, "unlisted", "not in checksums.sha256 (added after it was written?)")
                 for rel in files if rel not in entries]
    return problems


def _judge(problems: list[ManifestProblem], folder: Path) -> list[tuple[str, bool]]:
    """verify's reading of ``check_manifest``'s findings: (line, is a warning). A changed, missing or
    unlisted priorities file is sampler state, and an unlisted card, README or stats file is not data: warnings.
    The rest are problems; the first _MAX_LISTED of each kind are listed and the others counted."""
    lines: list[tuple[str, bool]] = []
    seen: dict[tuple[str, bool], int] = {}
    for problem in problems:
        text, sampler = str(problem), problem.path.startswith(fmt.PRIORITIES_DIR + "/")
        warn = sampler or (problem.kind == "unlisted" and not _is_data_path(problem.path))
        if sampler:
            text += "; priorities are sampler state, not data: a sampler that updates them changes the file"
        elif problem.path == fmt.META_FILE and problem.kind == "changed":
            text += (f"; the store was written to after checksums.sha256 was (or meta.json is damaged): if you wrote "
                     f"it, run `python -m memmap_replay checksum {folder}` to write a fresh manifest")
        key = (problem.kind, warn)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= _MAX_LISTED:
            lines.append((text, warn))
    return lines + [(f"{MANIFEST}: and {count - _MAX_LISTED} more {kind} files", warn)
                    for (kind, warn), count in seen.items() if count > _MAX_LISTED]


def _is_data_path(rel: str) -> bool:
    return rel == fmt.META_FILE or rel.split("/")[0] in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR)


def stray_files(folder: Path, schema) -> list[tuple[str, str]]:
    """(path, why) of every file in the folder that is not the store's: verify warns about them."""
    known = {fmt.LOCK_FILE, MANIFEST, fmt.RATELIMIT_DIR, fmt.TRAINING_DIR, *_TOP_FILES, *_STORE_DIRS}  # run state too
    strays: list[tuple[str, str]] = []
    with folderio.errors_named(folder, "list"):
        paths = sorted(folder.iterdir())
    for path in paths:
        if folderio.is_temp_of(path.name, fmt.META_FILE):
            strays.append((path.name, "left by a commit that was interrupted (a crash or kill); readers ignore it and "
                                      "the next writer removes it; you may delete it"))
        elif path.name.endswith(".tmp"):
            strays.append((path.name, "a temporary file left by an interrupted write (of the card or the "
                                      "checksums); you may delete it"))
        elif path.name not in known:
            strays.append((path.name, "not part of the store (readers ignore it)"))
    if schema is None:
        return strays
    # every .npy of the layout (a compressed field's two files in steps/), whatever the store's capacity
    layout = {path.as_posix() for _, _, path, _ in fmt.layout(schema, fmt.Capacity(1, 1, 2, False))}
    layout |= {f"{fmt.EPISODES_DIR}/{name}.npy" for name in fmt.TABLE}  # (continues.npy: also a 1.0 store's)
    for group in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR):
        if (folder / group).is_dir():
            strays += [(f"{group}/{path.name}", f"not part of the store (meta.json names no such file in {group}/); "
                                                f"readers ignore it") for path in sorted((folder / group).iterdir())
                       if f"{group}/{path.name}" not in layout]
    return strays


# ---- folders and locks -------------------------------------------------------------------------------


def store_folder(folder: str | os.PathLike, *, need_meta: bool = True) -> Path:
    folder = Path(folder)
    if not folder.exists():
        raise StoreNotFoundError(f"no store at {folder}: the folder does not exist")
    if not folder.is_dir():
        raise NotAFolderError(f"{folder} must be a folder (got a file); pass the folder that holds meta.json")
    if need_meta and not (folder / fmt.META_FILE).is_file():
        raise StoreNotFoundError(f"no store at {folder}: it holds no meta.json")
    return folder


def check_new_path(path: Path, what: str, error: type[Exception] = InvalidDataError) -> None:
    """``path``, about to be written as a new store or file, is not a symbolic link and not directly in a
    store's folder (where readers ignore it, verify warns, and unpack --overwrite refuses the store)."""
    if path.is_symlink():
        raise NotAFolderError(f"{what} {path} must not be a symbolic link (it points to {os.path.realpath(path)}); "
                              f"give the path it points to, or another path")
    parent = Path(os.path.abspath(path)).parent
    if (parent / fmt.META_FILE).is_file() and (parent / fmt.STEPS_DIR).is_dir():
        raise error(f"{what} {path} must be outside the store at {parent} (got a path inside it); "
                               f"choose a path beside the store, not in it")


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive OS lock on the folder itself (blocking): card edits, manifests and packing take turns."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with folderio.errors_named(folder, "lock"):
        fd = os.open(folder, os.O_RDONLY)
    try:
        with folderio.errors_named(folder, "lock"):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _writer_locked(folder: Path, action: str) -> Iterator[None]:
    """Hold the store's writer lock and every persisted sampler's priorities lock, so nothing changes the
    files while they are read; StoreLockedError says who holds one."""
    locks: list[WriterLock] = []
    try:
        for path in [folder / fmt.LOCK_FILE, *sorted((folder / fmt.PRIORITIES_DIR).glob("*.lock"))]:
            try:
                locks.append(WriterLock(path, folder=folder))
            except StoreLockedError:
                who = "a writer" if path.name == fmt.LOCK_FILE else f"a prioritized sampler ({path.name})"
                raise StoreLockedError(f"cannot {action} {folder}: {who} is writing it (it holds "
                                       f"{path.relative_to(folder)}); close it, then try again") from None
            except PermissionError:
                continue  # a folder we may not write: nobody with our rights can be writing it either
        yield
    finally:
        for lock in locks:
            lock.release()


class _ManifestObserver(CommitObserver):
    last = True  # its hooks run after the other observers' (it hashes what they wrote)

    """A write makes checksums.sha256 stale: it goes before a writer's first change (``checksum`` writes it
    again). An edit in place (``delete_episodes``, ``trim``, ``relabel``, ``add_field``, ``compact``) brings a manifest
    that was current before it up to date instead: the files the edit wrote are hashed again, the others keep their
    lines (so an edit's cost still follows what it changed)."""

    def __init__(self) -> None:
        self.dropped = False
        # the entries of a manifest that was current before this writer's changes, while every change since is an
        # edit's (which rewrote it); ``candidate``: those entries, during a change not yet known to be an edit
        self.kept: dict[str, str] | None = None
        self.candidate: dict[str, str] | None = None

    def changing(self, store) -> None:
        folder = Path(store.folder)
        if not self.dropped:
            if self.kept is None:
                entries, problems = read_manifest(folder)
                self.kept = entries if entries and not problems else None
            folderio.remove(store.folder, folder / MANIFEST)
            self.dropped = True
        self.candidate, self.kept = self.kept, None  # (a change that is no edit leaves it stale for good)

    def editing(self, store, kind) -> None:
        self.kept = self.candidate

    def edited(self, store, paths, slots) -> None:
        if self.kept is None:
            return
        folder = Path(store.folder)
        with _folder_lock(folder):
            # (the observers of derived data ran before this one: stats/ holds what they wrote)
            derived = [rel for rel in store_files(folder)[0] if rel.startswith(f"{fmt.STATS_DIR}/")]
            written = [rel for rel in {fmt.META_FILE, *paths, *derived} if (folder / rel).is_file()]
            entries = {rel: digest for rel, digest in self.kept.items() if (folder / rel).exists()}
            entries.update(_hash_files(folder, written))
            _write_atomic(folder / MANIFEST, "".join(f"{entries[rel]}  {rel}\n" for rel in sorted(entries)).encode())
        self.kept, self.dropped = entries, False


observe_commits(lambda store: _ManifestObserver())
