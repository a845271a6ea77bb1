"""Share a store as one archive: ``pack(folder, archive)`` and ``unpack(archive, folder)``.

The archive is a tar file (compressed by suffix: ``.tar``, ``.tar.gz``/``.tgz``, ``.tar.bz2``,
``.tar.xz``/``.txz``; ``.tar.zst``/``.tzst`` where Python's tarfile has zstd) that holds the store's files
under one top folder, named after the store's folder: ``checksums.sha256`` first, then the card, then
``meta.json``, then the rest. Only the store's own files go in (``checksums.is_store_path``), as plain
files: no links, no owner names. Both directions stream file by file, so memory stays bounded.

``pack`` holds the writer lock (and every sampler's priorities lock) for its whole run, refuses a store
that ``verify`` finds damaged, writes ``checksums.sha256`` unless an up-to-date one is there, and writes
the archive under a temporary name that is renamed at the end.

``unpack`` trusts nothing in the archive: it accepts only regular files and folders of the store's
layout under one top folder (no absolute paths, no ``..``, no links, no devices, no duplicates, sizes
within what ``meta.json`` allows), applies tarfile's ``data`` filter as well where Python has it,
extracts into a temporary folder beside the target (zero blocks become holes again, so sparse files
stay sparse), checks every checksum and runs ``verify``, and only then renames the folder into place.
"""

from __future__ import annotations

import errno
import gzip
import lzma
import os
import shutil
import sys
import tarfile
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import format as fmt
from .checksums import (MANIFEST, TEXT_LIMIT, TOP_FILES, check_manifest, check_new_path, folder_lock, is_store_dir, is_store_path,
                        manifest_unlocked, read_manifest, store_files, store_folder, stray_files, writer_locked)
from .errors import (CorruptStoreError, DiskFullError, InvalidDataError, NotAFolderError, StoreNotFoundError,
                     UnsupportedFormatError)
from .verify import verify

__all__ = ["pack", "unpack", "PackSummary", "UnpackSummary", "SUFFIXES"]

SUFFIXES = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.bz2": "bz2", ".tar.xz": "xz", ".txz": "xz",
            ".tar.zst": "zst", ".tzst": "zst"}
CHUNK, BLOCK = 1 << 20, 1 << 16  # read 1 MiB at a time; an all-zero 64 KiB block becomes a hole
ZEROS = bytes(BLOCK)
MAX_MEMBERS = 100_000
DEFAULT_MAX_BYTES = 1 << 40  # 1 TiB: the most an archive may unpack to, unless told otherwise
HEADER_SLACK = 1 << 16  # room for a .npy header in the per-file limits derived from meta.json
FIRST = (MANIFEST, "card.json", "README.md", fmt.META_FILE)
LISTED = 5


@dataclass
class PackSummary:
    """What ``pack`` wrote: the archive, how many store files, their total size, the archive's size,
    and the folder's files that were left out because they are not the store's."""

    archive: Path
    files: int
    bytes: int
    archive_bytes: int
    left_out: list[str] = field(default_factory=list)


@dataclass
class UnpackSummary:
    """What ``unpack`` made: the store folder, how many files, their total size, and the disk they use
    (smaller when files are sparse)."""

    folder: Path
    files: int
    bytes: int
    disk_bytes: int


def compression(archive: Path) -> str:
    name = archive.name.lower()
    method = next((method for suffix, method in SUFFIXES.items() if name.endswith(suffix)), None)
    if method is None:
        raise InvalidDataError(f"archive {archive} must end in one of {', '.join(SUFFIXES)} (got {archive.name!r}); "
                               f"the suffix chooses the compression")
    if method == "zst" and "zst" not in tarfile.TarFile.OPEN_METH:
        raise UnsupportedFormatError(f"this Python's tarfile cannot write zstd ({archive.name}); use Python 3.14+, or "
                                     f"choose .tar.xz or .tar.gz")
    return method


# ---- pack ------------------------------------------------------------------------------------------


def pack(folder: str | os.PathLike, archive: str | os.PathLike, *, progress: bool = False,
         overwrite: bool = False) -> PackSummary:
    """Write the store at ``folder`` into one archive (see the module docstring); returns a PackSummary."""
    folder, archive = store_folder(folder), Path(archive)
    method = compression(archive)
    if archive.is_dir():
        raise NotAFolderError(f"archive {archive} is a folder; give the path of the file to write, e.g. data.tar.gz")
    if archive.resolve().is_relative_to(folder.resolve()):
        raise InvalidDataError(f"archive {archive} must be outside the store's folder {folder}; write it elsewhere")
    if not archive.parent.is_dir():
        raise NotAFolderError(f"archive {archive} cannot be written: the folder {archive.parent} does not exist")
    if archive.exists() and not overwrite:
        raise InvalidDataError(f"archive {archive} already exists; pass overwrite=True (--overwrite) to replace it")
    with writer_locked(folder, "pack"), folder_lock(folder):
        report = verify(folder, progress=progress)
        if not report.ok:
            raise CorruptStoreError(f"{folder} fails verify, so it is not packed ({len(report.problems)} problems: "
                                    f"{'; '.join(report.problems[:LISTED])}); `python -m memmap_replay verify {folder}` "
                                    f"lists them (if you wrote to the store since its last checksum, run `python -m "
                                    f"memmap_replay checksum {folder}` first)")
        files, _ = store_files(folder)
        if set(read_manifest(folder)[0] or ()) != set(files):
            manifest_unlocked(folder, progress=progress)
        files = sorted([MANIFEST, *files], key=lambda rel: (FIRST.index(rel) if rel in FIRST else len(FIRST), rel))
        total = write_archive(folder, files, archive, method, progress=progress)
    left_out = [name for name, why in stray_files(folder, None) if not name.endswith(".tmp")]
    return PackSummary(archive, len(files), total, archive.stat().st_size, left_out)


def write_archive(folder: Path, files: list[str], archive: Path, method: str, *, progress: bool) -> int:
    from tqdm import tqdm  # noqa: PLC0415

    top = folder.resolve().name or "store"
    sizes = {rel: (folder / rel).stat().st_size for rel in files}
    temp = archive.with_name(f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    options = {"compresslevel": 6} if method in ("gz", "bz2") else {}
    try:
        with tarfile.open(temp, f"w:{method}", format=tarfile.PAX_FORMAT, **options) as tar, \
                tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="pack", disable=not progress,
                     file=sys.stderr) as bar:
            made = set()
            tar.addfile(entry(top, tarfile.DIRTYPE))
            for rel in files:
                for depth in range(1, rel.count("/") + 1):
                    parent = rel.rsplit("/", rel.count("/") - depth + 1)[0]
                    if parent not in made:
                        made.add(parent)
                        tar.addfile(entry(f"{top}/{parent}", tarfile.DIRTYPE))
                with open(folder / rel, "rb") as file:
                    stat = os.fstat(file.fileno())
                    info = entry(f"{top}/{rel}", tarfile.REGTYPE, size=stat.st_size, mtime=stat.st_mtime)
                    tar.addfile(info, Counted(file, bar))
        os.replace(temp, archive)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return sum(sizes.values())


def entry(name: str, kind: bytes, size: int = 0, mtime: float | None = None) -> tarfile.TarInfo:
    """A plain tar entry: no owner names, mode 644 (files) or 755 (folders)."""
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, size, 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.mtime = int(time.time() if mtime is None else mtime)
    return info


class Counted:
    """A file object that advances a progress bar as it is read."""

    def __init__(self, file, bar):
        self.file, self.bar = file, bar

    def read(self, size: int = -1) -> bytes:
        data = self.file.read(size)
        self.bar.update(len(data))
        return data


# ---- unpack ----------------------------------------------------------------------------------------


def unpack(archive: str | os.PathLike, folder: str | os.PathLike, *, progress: bool = False, overwrite: bool = False,
           max_bytes: int = DEFAULT_MAX_BYTES) -> UnpackSummary:
    """Unpack a ``pack`` archive into ``folder`` safely (see the module docstring); returns an
    UnpackSummary. ``folder`` must not exist or be empty, unless ``overwrite`` replaces the store there."""
    archive, given = Path(archive), folder
    folder = Path(os.path.abspath(folder))  # temporary folders go beside it, also for "." or "out/"
    if not archive.is_file():
        raise StoreNotFoundError(f"no archive at {archive}: " + ("it is a folder" if archive.is_dir() else "no such file"))
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidDataError(f"max_bytes must be a positive integer (got {max_bytes!r})")
    replace = check_target(folder, overwrite)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise NotAFolderError(f"{folder.parent} cannot be created ({error.strerror}); choose another folder") from None
    temp = folder.parent / f".{folder.name}.unpacking-{uuid.uuid4().hex[:8]}"
    temp.mkdir()
    try:
        count, total = extract(archive, temp, max_bytes=max_bytes, progress=progress)
        check_unpacked(archive, temp, progress=progress)
        disk = sum(os.stat(temp / rel).st_blocks * 512 for rel in store_files(temp)[0] + [MANIFEST])
        place(temp, folder, replace)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return UnpackSummary(Path(given), count, total, disk)


def check_target(folder: Path, overwrite: bool) -> bool:
    """Whether unpacking replaces a store at ``folder``; refuses what must not be touched."""
    if not folder.name:
        raise InvalidDataError(f"{folder} cannot be unpacked into; name a folder below it")
    check_new_path(folder, "the folder to unpack into,")
    if folder.exists() and not folder.is_dir():
        raise NotAFolderError(f"{folder} must be a folder to unpack into (got a file); choose another path")
    if not folder.exists() or not any(folder.iterdir()):
        return False
    if not overwrite:
        raise InvalidDataError(f"{folder} is not empty; unpack into a new or empty folder, or pass overwrite=True "
                               f"(--overwrite) to replace the store there")
    foreign = [name for name, _ in stray_files(folder, None)]
    if not (folder / fmt.META_FILE).is_file() or foreign:
        raise InvalidDataError(f"{folder} is not a memmap_replay store (it holds {', '.join(foreign[:LISTED]) or 'no meta.json'}); "
                               f"overwrite replaces a store only: unpack into a new or empty folder")
    return True


def extract(archive: Path, temp: Path, *, max_bytes: int, progress: bool) -> tuple[int, int]:
    """Extract the archive's checked members into ``temp``; (files, bytes)."""
    from tqdm import tqdm  # noqa: PLC0415

    checker = MemberChecker(archive, temp, max_bytes)
    with open(archive, "rb") as raw, tqdm(total=os.fstat(raw.fileno()).st_size, unit="B", unit_scale=True,
                                          desc="unpack", disable=not progress, file=sys.stderr) as bar:
        try:
            with tarfile.open(fileobj=Counted(raw, bar), mode="r|*") as tar:
                for member in tar:
                    rel = checker.check(member)
                    if member.isdir():
                        (temp / rel).mkdir(parents=True, exist_ok=True)
                    else:
                        (temp / rel).parent.mkdir(parents=True, exist_ok=True)
                        write_sparse(tar.extractfile(member), temp / rel)
                        checker.extracted(rel)
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as error:
            raise CorruptStoreError(f"archive {archive} is truncated or damaged ({type(error).__name__}: {error}); "
                                    f"download or copy it again") from None
    if checker.top is None:
        raise CorruptStoreError(f"archive {archive} holds no files; pack a store with `python -m memmap_replay pack`")
    return checker.files, checker.total


class MemberChecker:
    """Refuses any archive member that is not a plain file or folder of the store's layout."""

    def __init__(self, archive: Path, temp: Path, max_bytes: int):
        self.archive, self.temp, self.max_bytes = archive, temp, max_bytes
        self.top: str | None = None
        self.seen: set[str] = set()
        self.files = self.total = 0
        self.limit: Callable[[str], int] | None = None

    def refuse(self, name: str, why: str) -> CorruptStoreError:
        return CorruptStoreError(f"archive {self.archive} is refused: member {name[:200]!r} {why}; nothing was unpacked "
                                 f"(a pack archive holds only a store's files, under one top folder)")

    def check(self, member: tarfile.TarInfo) -> str:
        name = member.name
        parts = name.removeprefix("./").split("/")
        if name.startswith("/") or "\\" in name or "\0" in name or (len(name) > 1 and name[1] == ":"):
            raise self.refuse(name, "has an absolute or non-posix path")
        if any(part in ("", ".", "..") for part in parts):
            raise self.refuse(name, "has a '..', '.' or empty part in its path (it could reach outside the folder)")
        if not (member.isreg() or member.isdir()):
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk() else
                    "a device or fifo" if member.isdev() else f"of tar type {member.type!r}")
            raise self.refuse(name, f"is {kind}; only plain files and folders are unpacked")
        if self.top is None:
            self.top = parts[0]
        rel = "/".join(parts[1:])
        if parts[0] != self.top:
            raise self.refuse(name, f"is outside the archive's top folder {self.top!r}")
        fits = (not rel or is_store_dir(rel)) if member.isdir() else (rel == MANIFEST or is_store_path(rel))
        if not fits:
            raise self.refuse(name, "is not one of a store's files (meta.json, card.json, README.md, checksums.sha256, "
                                    "steps/, meta/, episodes/, priorities/, stats/)")
        if name in self.seen:
            raise self.refuse(name, "appears twice")
        self.seen.add(name)
        if len(self.seen) > MAX_MEMBERS:
            raise self.refuse(name, f"is one member too many (at most {MAX_MEMBERS})")
        self.check_size(name, rel, member.size if member.isreg() else 0)
        if hasattr(tarfile, "data_filter"):
            try:
                tarfile.data_filter(member, str(self.temp))
            except tarfile.FilterError as error:
                raise self.refuse(name, f"fails tarfile's data filter ({error})") from None
        return rel

    def check_size(self, name: str, rel: str, size: int) -> None:
        limit = TEXT_LIMIT if rel in TOP_FILES or rel == MANIFEST else self.max_bytes
        if self.limit is not None and rel.split("/")[0] in (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR,
                                                            fmt.PRIORITIES_DIR):
            limit = min(limit, self.limit(rel))
        if size > limit:
            raise self.refuse(name, f"declares {size} bytes (expected at most {limit} for this file)")
        self.total += size
        if self.total > self.max_bytes:
            raise self.refuse(name, f"brings the unpacked size to {self.total} bytes, more than max_bytes = "
                                    f"{self.max_bytes}; pass a larger max_bytes (--max-size) if you expect that")

    def extracted(self, rel: str) -> None:
        self.files += 1
        if rel == fmt.META_FILE:
            self.limit = file_limits(self.temp)


def file_limits(temp: Path) -> Callable[[str], int] | None:
    """The largest size each layout file may have, from the capacity meta.json declares."""
    try:
        meta = fmt.read_meta(temp)
    except Exception:  # noqa: BLE001 - a bad meta.json is reported by verify after extraction
        return None
    capacity = meta.capacity
    sizes = {path.as_posix(): HEADER_SLACK + (rows or capacity.max_steps) * spec.row_nbytes
             for _, spec, path, rows in fmt.layout(meta.schema, capacity)}
    owner, steps = HEADER_SLACK + 8 * capacity.max_episodes, HEADER_SLACK + 8 * (capacity.max_steps + 1)

    def limit(rel: str) -> int:
        if rel.startswith(fmt.PRIORITIES_DIR + "/"):
            return owner if rel.endswith(".owner.npy") else steps if rel.endswith(".npy") else TEXT_LIMIT
        return sizes.get(rel, HEADER_SLACK)  # a field meta.json does not name: verify warns about it
    return limit


def write_sparse(source, path: Path) -> None:
    """Copy ``source`` into a new file, seeking over all-zero blocks so that they stay holes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            size = 0
            while chunk := source.read(CHUNK):
                for start in range(0, len(chunk), BLOCK):
                    block = chunk[start:start + BLOCK]
                    if block == ZEROS[:len(block)]:
                        out.seek(len(block), os.SEEK_CUR)
                    else:
                        out.write(block)
                size += len(chunk)
            out.truncate(size)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space left to unpack into {path.parent} ({error.strerror}); nothing was "
                                f"unpacked: free some space and try again") from None
        raise


def check_unpacked(archive: Path, temp: Path, *, progress: bool) -> None:
    problems = [str(problem) for problem in check_manifest(temp, progress=progress)]
    if problems:
        raise CorruptStoreError(f"archive {archive} does not match its own checksums, so nothing was unpacked: "
                                f"{'; '.join(problems[:LISTED])}; download or copy it again")
    report = verify(temp, checksums=False)
    if not report.ok:
        raise CorruptStoreError(f"archive {archive} holds a damaged store, so nothing was unpacked: "
                                f"{'; '.join(report.problems[:LISTED])}")


def place(temp: Path, folder: Path, replace: bool) -> None:
    """Rename the unpacked folder into place; a replaced store is first renamed aside, then deleted."""
    if not replace:
        if folder.is_dir():
            folder.rmdir()  # empty (checked); a file that appeared since makes this fail, and temp is removed
        os.rename(temp, folder)
        return
    old = folder.parent / f".{folder.name}.replaced-{uuid.uuid4().hex[:8]}"
    with writer_locked(folder, "replace"):
        os.rename(folder, old)
    os.rename(temp, folder)
    shutil.rmtree(old, ignore_errors=True)
