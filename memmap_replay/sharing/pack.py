"""Share a store as one archive: ``pack(folder, archive)`` and ``unpack(archive, folder)``.

The archive is a tar file (compressed by suffix: ``.tar``, ``.tar.gz``/``.tgz``, ``.tar.bz2``,
``.tar.xz``/``.txz``; ``.tar.zst``/``.tzst`` where Python's tarfile has zstd) that holds the store's files
under one top folder, named after the store's folder: the top folder, ``checksums.sha256``, ``card.json``
and ``README.md`` (when present), then ``meta.json``, then the rest. Only the store's own files go in
(``checksums.is_store_path``), as plain files: no links, no owner names. Both directions stream file by
file, so memory stays bounded.

``pack`` holds the writer lock (and every sampler's priorities lock) for its whole run, refuses a store
that ``verify`` finds damaged, writes ``checksums.sha256`` unless an up-to-date one is there, and writes
the archive under a fresh temporary name (created exclusively), flushed to disk, then renamed at the end.

``unpack`` trusts nothing in the archive: it accepts only regular files and folders of the store's
layout under one top folder (no absolute paths, no ``..``, no links, no devices, no duplicates however
spelled, sizes within what ``meta.json`` allows), applies tarfile's ``data`` filter as well where Python
has it, extracts into a temporary folder beside the target (zero blocks become holes again, so sparse
files stay sparse), checks every checksum and runs ``verify``, and only then renames the folder into place.
Its work is bounded before any data is read:

- before ``meta.json`` only the top folder, ``checksums.sha256``, ``card.json`` and ``README.md`` may
  come (each at most ``_TEXT_LIMIT``, 64 MiB), and ``meta.json`` itself at most ``_META_LIMIT`` (4 MiB);
  a store's data file placed before ``meta.json`` is refused, since its size could not be checked;
- after it, every file's declared size (the real size of a sparse member, GNU or PAX) is checked against
  what the capacity in ``meta.json`` allows for that file (a compressed field's frames: ``max_steps`` frames
  of rows that do not compress; its index: 16 bytes a row), the bytes the archive stores for a member
  against the same limit, and the running total against what such a store can hold and ``max_bytes``;
- the headers that tarfile reads before handing over a member (PAX records, long names, sparse maps)
  may take at most ``_HEADER_LIMIT`` (64 KiB) per member and ``_HEADERS_LIMIT`` (64 MiB) in all: the
  decompressed archive is read through a meter that refuses to go further.

Every operating-system error leaves as one of the library's errors, naming the file: ``DiskFullError``
(no space, quota), ``ReadOnlyError`` (no permission, read-only file system) or ``StoreIOError``
(anything else). A failed ``pack`` leaves no archive and no temporary file; a failed ``unpack`` leaves no
temporary folder, and a store it was replacing stays in place.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import os
import shutil
import tarfile
import time
import uuid
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..core import folderio, format as fmt
from ..core.progress import progress_bar
from ..core.encoded import frames_limit
from .checksums import (MANIFEST, _TEXT_LIMIT, _TOP_FILES, check_manifest, check_new_path, _folder_lock, _is_store_dir,
                        is_store_path,
                        _manifest_unlocked, read_manifest, store_files, store_folder, stray_files, _writer_locked)
from ..errors import (OptionError, CorruptStoreError, DiskFullError, NotAFolderError, ReadOnlyError, ReplayError,
                     StoreIOError, StoreNotFoundError, UnsupportedFormatError)
from .verify import verify

__all__ = ["pack", "unpack", "PackSummary", "UnpackSummary", "SUFFIXES"]

SUFFIXES = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.bz2": "bz2", ".tar.xz": "xz", ".txz": "xz",
            ".tar.zst": "zst", ".tzst": "zst"}
_CHUNK, _BLOCK = 1 << 20, 1 << 16  # read 1 MiB at a time; an all-zero 64 KiB block becomes a hole
_ZEROS = bytes(_BLOCK)
_MAX_MEMBERS = 100_000
DEFAULT_MAX_BYTES = 1 << 40  # 1 TiB: the most an archive may unpack to, unless told otherwise
_HEADER_SLACK = 1 << 16  # room for a .npy header in the per-file limits derived from meta.json
_META_LIMIT = folderio.MAX_JSON_BYTES  # 4 MiB: the most meta.json (and a priorities/*.json) may take in an archive
_HEADER_LIMIT = 1 << 16  # 64 KiB: the most tar headers (PAX records, long names, sparse maps) one member may take
_HEADERS_LIMIT = 1 << 26  # 64 MiB: the most all the archive's headers may take together
_SAMPLER_SETS = 16  # persisted samplers (priorities/<name>.npy, .owner.npy, .json) an archive may hold
_STATS_ROWS = 16  # stats/ and unnamed files may take 64 MiB plus this many float64 copies of every field's row
_FIRST = (MANIFEST, "card.json", "README.md", fmt.META_FILE)
_BEFORE_META = ("", MANIFEST, "card.json", "README.md")  # what may come before meta.json ("" is the top folder)
_LISTED = 5
_MAGIC = ((b"\x1f\x8b", "gz"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x5d\x00\x00", "xz"),
         (b"\x28\xb5\x2f\xfd", "zst"))


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


def _compression(archive: Path) -> str:
    name = archive.name.lower()
    method = next((method for suffix, method in SUFFIXES.items() if name.endswith(suffix)), None)
    if method is None:
        raise OptionError(f"archive {archive} must end in one of {', '.join(SUFFIXES)} (got {archive.name!r}); "
                               f"the suffix chooses the compression")
    if method == "zst" and "zst" not in tarfile.TarFile.OPEN_METH:
        raise UnsupportedFormatError(f"this Python's tarfile cannot write zstd ({archive.name}); use Python 3.14+, or "
                                     f"choose .tar.xz or .tar.gz")
    return method


# ---- operating-system errors ---------------------------------------------------------------------------


def _library_error(error: OSError, doing: str, path, after: str) -> ReplayError:
    """The library's error for an ``OSError`` met while ``doing`` something with ``path``; ``after`` says
    what was left behind and how to go on."""
    return folderio.library_error(error, path, doing, after=after,
                                  denied_fix="choose a place you may write to (or that you may read), or fix its "
                                             "permissions")


@contextmanager
def _os_errors(doing: str, path, after: str) -> Iterator[None]:
    """Turn an ``OSError`` inside the block (that is not already the library's) into the library's error."""
    try:
        yield
    except OSError as error:
        if isinstance(error, ReplayError):
            raise
        raise _library_error(error, doing, path, after) from None


class _SourceReadError(Exception):
    """An OSError met reading a store's file while packing (so that it is not blamed on the archive)."""

    def __init__(self, error: OSError, path: Path):
        super().__init__(str(error))
        self.error, self.path = error, path


# ---- pack ------------------------------------------------------------------------------------------


def pack(folder: str | os.PathLike, archive: str | os.PathLike, *, progress: bool = False,
         overwrite: bool = False) -> PackSummary:
    """Write the store at ``folder`` into one archive (see the module docstring); returns a PackSummary."""
    folder, archive = store_folder(folder), Path(archive)
    method = _compression(archive)
    if archive.is_dir():
        raise NotAFolderError(f"archive {archive} is a folder; give the path of the file to write, e.g. data.tar.gz")
    if archive.resolve().is_relative_to(folder.resolve()):
        raise OptionError(f"archive {archive} must be outside the store's folder {folder}; write it elsewhere")
    if not archive.parent.is_dir():
        raise NotAFolderError(f"archive {archive} cannot be written: the folder {archive.parent} does not exist")
    if archive.exists() and not overwrite:
        raise OptionError(f"archive {archive} already exists; pass overwrite=True (--overwrite) to replace it")
    with _os_errors("pack", folder, "no archive was written"):
        with _writer_locked(folder, "pack"), _folder_lock(folder):
            report = verify(folder, progress=progress)
            if report.failures:  # the system failed a read (EIO, EACCES, ...): not damage
                raise report.failures[0]
            if not report.ok:
                raise CorruptStoreError(f"{folder} fails verify, so it is not packed ({len(report.problems)} problems: "
                                        f"{'; '.join(report.problems[:_LISTED])}); `python -m memmap_replay verify "
                                        f"{folder}` lists them (if you wrote to the store since its last checksum, run "
                                        f"`python -m memmap_replay checksum {folder}` first)")
            files, _ = store_files(folder)
            if set(read_manifest(folder)[0] or ()) != set(files):
                with _os_errors("write", folder / MANIFEST, "no archive was written (the store is unchanged)"):
                    _manifest_unlocked(folder, progress=progress)
            files = sorted([MANIFEST, *files],
                           key=lambda rel: (_FIRST.index(rel) if rel in _FIRST else len(_FIRST), rel))
            total, archive_bytes = _write_archive(folder, files, archive, method, progress=progress)
        left_out = [name for name, why in stray_files(folder, None) if not name.endswith(".tmp")]
    return PackSummary(archive, len(files), total, archive_bytes, left_out)


def _write_archive(folder: Path, files: list[str], archive: Path, method: str, *,
                  progress: bool) -> tuple[int, int]:
    """Write the archive under a fresh temporary name, flush it to disk and rename it; (bytes, archive bytes).
    On any failure the temporary file is removed and ``archive`` is untouched."""

    top = folder.resolve().name or "store"
    temp = archive.with_name(f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    options = {"compresslevel": 6} if method in ("gz", "bz2") else {}
    after = f"no archive was written (nothing is left at {archive.parent})"
    created = False
    try:
        with _os_errors("write the archive", archive, after):
            with open(temp, "xb") as out:  # a fresh name, created exclusively (never through a link)
                created = True
                total = 0
                # typeshed's overloads take the mode as a literal (here made from the method) and no **options
                with tarfile.open(archive, f"w:{method}", fileobj=out, format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                                  **options) as tar, \
                        progress_bar(_source_bytes(folder, files), "pack", progress, unit="B", leave=True) as bar:
                    made = set()
                    tar.addfile(_entry(top, tarfile.DIRTYPE))
                    for rel in files:
                        for depth in range(1, rel.count("/") + 1):
                            parent = rel.rsplit("/", rel.count("/") - depth + 1)[0]
                            if parent not in made:
                                made.add(parent)
                                tar.addfile(_entry(f"{top}/{parent}", tarfile.DIRTYPE))
                        total += _add_file(tar, folder / rel, f"{top}/{rel}", bar)
                out.flush()
                os.fsync(out.fileno())
                archive_bytes = os.fstat(out.fileno()).st_size
            os.replace(temp, archive)
    except _SourceReadError as failed:
        _remove_partial(temp, created)
        raise _library_error(failed.error, "read", failed.path, "no archive was written") from None
    except BaseException:
        _remove_partial(temp, created)
        raise
    return total, archive_bytes


def _add_file(tar: tarfile.TarFile, path: Path, name: str, bar) -> int:
    """Add one store file to the archive; its size. Errors reading it are told apart from errors writing."""
    try:
        file = open(path, "rb")
    except OSError as error:
        raise _SourceReadError(error, path) from None
    with file:
        try:
            info = os.fstat(file.fileno())
        except OSError as error:
            raise _SourceReadError(error, path) from None
        tar.addfile(_entry(name, tarfile.REGTYPE, size=info.st_size, mtime=info.st_mtime), _Counted(file, bar, path))
    return info.st_size


def _source_bytes(folder: Path, files: list[str]) -> int:
    try:
        return sum((folder / rel).stat().st_size for rel in files)
    except OSError as error:
        raise _SourceReadError(error, Path(error.filename or folder)) from None


def _remove_partial(temp: Path, created: bool) -> None:
    if created:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - the folder became unwritable between creating and removing
            pass


def _entry(name: str, kind: bytes, size: int = 0, mtime: float | None = None) -> tarfile.TarInfo:
    """A plain tar entry: no owner names, mode 644 (files) or 755 (folders)."""
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode = kind, size, 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.mtime = int(time.time() if mtime is None else mtime)
    return info


class _Counted:
    """A file object that advances a progress bar as it is read; a failed read of a store file (``path``)
    is told apart from a failed write of the archive."""

    def __init__(self, file, bar, path: Path | None = None):
        self.file, self.bar, self.path = file, bar, path

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.file.read(size)
        except OSError as error:
            if self.path is None or isinstance(error, ReplayError):
                raise
            raise _SourceReadError(error, self.path) from None
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
        raise StoreNotFoundError(f"no archive at {archive}: "
                                 + ("it is a folder" if archive.is_dir() else "no such file"))
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise OptionError(f"max_bytes must be a positive integer (got {max_bytes!r})")
    replace = _check_target(folder, overwrite)
    after = "nothing was unpacked"
    if not folder.parent.is_dir():
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            if error.errno in folderio.DISK_FULL + folderio.DENIED:
                raise _library_error(error, "create the folder", folder.parent, after) from None
            raise NotAFolderError(
                f"{folder.parent} cannot be created ({error.strerror}); choose another folder") from None
    temp = folder.parent / f".{folder.name}.unpacking-{uuid.uuid4().hex[:8]}"
    with _os_errors("create a temporary folder in", folder.parent, after):
        os.mkdir(temp)
    try:
        count, total = _extract(archive, temp, folder, max_bytes=max_bytes, progress=progress)
        _check_unpacked(archive, temp, progress=progress)
        with _os_errors("measure the unpacked files in", temp, after):
            disk = sum(os.stat(temp / rel).st_blocks * 512 for rel in store_files(temp)[0] + [MANIFEST])
        with _os_errors("move the unpacked store into", folder, after + " (a store that was there is still there)"):
            _place(temp, folder, replace)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return UnpackSummary(Path(given), count, total, disk)


def _check_target(folder: Path, overwrite: bool) -> bool:
    """Whether unpacking replaces a store at ``folder``; refuses what must not be touched."""
    if not folder.name:
        raise OptionError(f"{folder} cannot be unpacked into; name a folder below it")
    check_new_path(folder, "the folder to unpack into,")
    if folder.exists() and not folder.is_dir():
        raise NotAFolderError(f"{folder} must be a folder to unpack into (got a file); choose another path")
    with _os_errors("look into", folder, "nothing was unpacked"):
        if not folder.exists() or not any(folder.iterdir()):
            return False
    if not overwrite:
        raise OptionError(f"{folder} is not empty; unpack into a new or empty folder, or pass overwrite=True "
                               f"(--overwrite) to replace the store there")
    foreign = [name for name, _ in stray_files(folder, None)]
    if not (folder / fmt.META_FILE).is_file() or foreign:
        raise OptionError(f"{folder} is not a memmap_replay store (it holds "
                          f"{', '.join(foreign[:_LISTED]) or 'no meta.json'}); overwrite replaces a store only: unpack "
                          f"into a new or empty folder")
    return True


class _Overrun(Exception):
    """The archive's headers went past what the meter allows (raised inside tarfile, caught in extract)."""


class _Meter:
    """The decompressed archive as tarfile reads it: it counts every byte and never reads past ``allowed``
    (absolute position in the decompressed stream), so no header or member can make unpack read more than
    was checked. Decompression errors become CorruptStoreError, read errors the library's I/O errors."""

    def __init__(self, stream, archive: Path):
        self.stream, self.archive = stream, archive
        self.position = 0
        self.allowed = _HEADER_LIMIT

    def read(self, size: int = -1) -> bytes:
        room = self.allowed - self.position
        if room <= 0:
            raise _Overrun()
        size = room if size is None or size < 0 else min(size, room)
        try:
            data = self.stream.read(size)
        except (EOFError, zlib.error, lzma.LZMAError) as error:
            raise _damaged(self.archive, error) from None
        except OSError as error:
            if isinstance(error, ReplayError):
                raise
            if error.errno is None:  # gzip's BadGzipFile, bz2's "Invalid data stream": the bytes, not the disk
                raise _damaged(self.archive, error) from None
            raise _library_error(error, "read the archive", self.archive, "nothing was unpacked") from None
        self.position += len(data)
        return data


def _damaged(archive: Path, error: BaseException) -> CorruptStoreError:
    return CorruptStoreError(f"archive {archive} is truncated or damaged ({type(error).__name__}: {error}); "
                             f"download or copy it again")


def _decompressed(raw, head: bytes, archive: Path):
    """A readable stream of the tar bytes in ``raw`` (the archive file, read from its start), decompressed as
    its first bytes ``head`` say."""
    method = next((method for magic, method in _MAGIC if head.startswith(magic)), "")
    if method == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if method == "bz2":
        return bz2.BZ2File(raw)
    if method == "xz":
        return lzma.LZMAFile(raw)
    if method == "zst":
        try:
            from compression.zstd import ZstdFile  # noqa: PLC0415 - Python 3.14+
        except ImportError:
            raise UnsupportedFormatError(f"archive {archive} is compressed with zstd, which this Python cannot read; "
                                         f"use Python 3.14+, or ask for a .tar.xz or .tar.gz") from None
        return ZstdFile(raw)
    return raw


def _extract(archive: Path, temp: Path, folder: Path, *, max_bytes: int, progress: bool) -> tuple[int, int]:
    """Extract the archive's checked members into ``temp``; (files, bytes)."""

    checker = _MemberChecker(archive, temp, max_bytes)
    after = "nothing was unpacked"
    with _os_errors("read the archive", archive, after), open(archive, "rb") as raw, \
            progress_bar(os.fstat(raw.fileno()).st_size, "unpack", progress, unit="B", leave=True) as bar:
        head = raw.read(8)
        raw.seek(0)
        meter = _Meter(_decompressed(_Counted(raw, bar), head, archive), archive)
        try:
            # a stream ("r|") is only read: typeshed asks of any file object write, seek and tell too
            with tarfile.open(fileobj=meter, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    rel = checker.check(member, stored=tar.offset - member.offset_data)
                    meter.allowed = tar.offset + checker.header_room()
                    if member.isdir():
                        checker.make_dirs(member.name, rel)
                    else:
                        checker.make_dirs(member.name, rel.rpartition("/")[0])
                        checker.write(member, rel, tar.extractfile(member), folder)
                        checker.extracted(rel)
                    checker.headers_start = tar.offset
        except ReplayError:
            raise
        except _Overrun:
            raise CorruptStoreError(f"archive {archive} is refused: its tar headers (PAX records, long names "
                                    f"or a sparse map) take more than {_HEADER_LIMIT >> 10} KiB for one member "
                                    f"(or {_HEADERS_LIMIT >> 20} MiB in all), at byte {meter.position:,} of "
                                    f"the tar stream; nothing was unpacked (a pack archive's headers take a "
                                    f"few hundred bytes a member)") from None
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, ValueError, RecursionError,
                UnicodeError) as error:
            raise _damaged(archive, error) from None
    if checker.top is None:
        raise CorruptStoreError(f"archive {archive} holds no files; pack a store with `python -m memmap_replay pack`")
    return checker.files, checker.total


class _MemberChecker:
    """Refuses any archive member that is not a plain file or folder of the store's layout, or that is larger
    than the store it belongs to can need; every check is made before the member's data is read."""

    def __init__(self, archive: Path, temp: Path, max_bytes: int):
        self.archive, self.temp, self.max_bytes = archive, temp, max_bytes
        self.top: str | None = None
        self.seen: dict[str, str] = {}  # normalized path -> the member's name as spelled
        self.files = self.total = 0
        self.limit: Callable[[str], int] | None = None
        self.budget = max_bytes  # what the files may take in all: max_bytes, and what meta.json's capacity needs
        self.headers_start = 0  # where the next member's headers start
        self.headers = 0  # bytes of headers so far

    def refuse(self, name: str, why: str) -> CorruptStoreError:
        return CorruptStoreError(f"archive {self.archive} is refused: member {name[:200]!r} {why}; nothing was "
                                 f"unpacked (a pack archive holds only a store's files, under one top folder)")

    def header_room(self) -> int:
        return max(min(_HEADER_LIMIT, _HEADERS_LIMIT - self.headers), 0)

    def check(self, member: tarfile.TarInfo, stored: int) -> str:
        """The member's path inside the store, once it passed every check; ``stored`` is how many bytes of
        data (with padding) the archive holds for it."""
        name = member.name
        self.headers += member.offset_data - self.headers_start
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
        fits = (not rel or _is_store_dir(rel)) if member.isdir() else (rel == MANIFEST or is_store_path(rel))
        if not fits:
            raise self.refuse(name, "is not one of a store's files (meta.json, card.json, README.md, checksums.sha256, "
                                    "steps/, meta/, episodes/, priorities/, stats/)")
        key = "/".join(parts)
        if key in self.seen:
            also = "" if self.seen[key] == name else f" (as {self.seen[key][:200]!r}: the same path spelled otherwise)"
            raise self.refuse(name, f"appears twice{also}")
        self.seen[key] = name
        if len(self.seen) > _MAX_MEMBERS:
            raise self.refuse(name, f"is one member too many (at most {_MAX_MEMBERS})")
        if self.limit is None and rel not in _BEFORE_META and rel != fmt.META_FILE:
            raise self.refuse(name, f"comes before {fmt.META_FILE}; a pack archive holds {fmt.META_FILE} before the "
                                    f"store's data files, so that their sizes can be checked against it (make the "
                                    f"archive with `python -m memmap_replay pack`)")
        if self.headers > _HEADERS_LIMIT:
            raise self.refuse(name, f"brings the archive's tar headers to {self.headers} bytes, more than "
                                    f"{_HEADERS_LIMIT >> 20} MiB")
        self.check_size(name, rel, member.size if member.isreg() else 0, stored, member.issparse())
        if hasattr(tarfile, "data_filter"):
            try:
                tarfile.data_filter(member, str(self.temp))
            except tarfile.FilterError as error:
                raise self.refuse(name, f"fails tarfile's data filter ({error})") from None
        return rel

    def check_size(self, name: str, rel: str, size: int, stored: int, sparse: bool = False) -> None:
        """Declared size (the real size of a sparse member) and stored bytes against the limits, before any
        of the member's data is read."""
        if rel == fmt.META_FILE:
            limit = _META_LIMIT
        elif rel in _TOP_FILES or rel == MANIFEST:
            limit = _TEXT_LIMIT
        else:
            limit = self.limit(rel) if self.limit is not None else 0
        if size > limit:
            what = " as its real size (a sparse member)" if sparse else ""
            raise self.refuse(name, f"declares {size} bytes{what} (expected at most {limit} for this file)")
        if stored > _blocks(limit):
            raise self.refuse(name, f"takes {stored} bytes in the archive (expected at most {_blocks(limit)} for this "
                                    f"file)")
        self.total += size
        if self.total > self.max_bytes:
            raise self.refuse(name, f"brings the unpacked size to {self.total} bytes, more than max_bytes = "
                                    f"{self.max_bytes}; pass a larger max_bytes (--max-size) if you expect that")
        if self.total > self.budget:
            raise self.refuse(name, f"brings the unpacked size to {self.total} bytes, more than a store of the "
                                    f"capacity its {fmt.META_FILE} declares can hold ({self.budget} bytes)")

    def make_dirs(self, name: str, rel: str) -> None:
        """Create ``rel`` and its parents inside the temporary folder (never through a link)."""
        path = self.temp
        for part in rel.split("/") if rel else ():
            path = path / part
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path) or os.path.islink(path):
                    raise self.refuse(name,
                                      f"needs {part!r} to be a folder, but another member made it a file") from None
            except OSError as error:
                raise _library_error(error, "create", path, "nothing was unpacked") from None

    def write(self, member: tarfile.TarInfo, rel: str, source, folder: Path) -> None:
        try:
            _write_sparse(source, self.temp / rel)
        except (FileExistsError, IsADirectoryError):
            raise self.refuse(member.name, "collides with another member (the same file, or a folder of that name: "
                                           "a file system that ignores case or Unicode form sees one name)") from None
        except OSError as error:
            if isinstance(error, ReplayError):
                raise
            raise _library_error(error, "write", folder / rel, "nothing was unpacked (no temporary folder is "
                                                              "left)") from None

    def extracted(self, rel: str) -> None:
        self.files += 1
        if rel == fmt.META_FILE:
            self.limit, self.budget = _file_limits(self.temp, self.archive, self.max_bytes)


def _blocks(size: int) -> int:
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def _file_limits(temp: Path, archive: Path, max_bytes: int) -> tuple[Callable[[str], int], int]:
    """The largest size each file may have, from the capacity meta.json declares, and the most all files
    may take together (never more than ``max_bytes``). A meta.json that cannot be read is refused here."""
    try:
        meta = fmt.read_meta(temp)
    except (StoreIOError, ReadOnlyError, DiskFullError):  # the system failed the read: not the archive's fault
        raise
    except ReplayError as error:
        raise CorruptStoreError(f"archive {archive} is refused: its {fmt.META_FILE} cannot be read "
                                f"({str(error).replace(str(temp), '<archive>')}); nothing was unpacked") from None
    capacity, schema = meta.capacity, meta.schema
    files = list(fmt.layout(schema, capacity))  # (episodes/continues.npy too: a 1.0 store may hold one)
    # a compressed field's frames: at most every row raw; its index: (offset, length) per row
    sizes = {path.as_posix(): _HEADER_SLACK + (
             frames_limit(schema.fields[spec.name], capacity.max_steps) if group == fmt.FRAMES
             else (rows or capacity.max_steps) * spec.row_nbytes) for group, spec, path, rows in files}
    owner, steps = _HEADER_SLACK + 8 * capacity.max_episodes, _HEADER_SLACK + 8 * (capacity.max_steps + 1)
    # (statistics are per field: a compressed field's shape, not its files')
    shapes = [schema.fields[spec.name].shape if group == fmt.FRAMES else spec.shape
              for group, spec, _, _ in files if group != fmt.INDEX]
    extras = _TEXT_LIMIT + _STATS_ROWS * sum(8 * math.prod(shape) for shape in shapes)
    budget = (3 * _TEXT_LIMIT + _META_LIMIT + sum(sizes.values()) + _SAMPLER_SETS * (owner + steps + _META_LIMIT)
              + extras)

    def limit(rel: str) -> int:
        if rel.startswith(fmt.PRIORITIES_DIR + "/"):
            return owner if rel.endswith(".owner.npy") else steps if rel.endswith(".npy") else _META_LIMIT
        if rel.startswith("stats/"):
            return extras
        return sizes.get(rel, _HEADER_SLACK)  # a field meta.json does not name: verify warns about it
    return limit, min(max_bytes, budget)


def _write_sparse(source, path: Path) -> None:
    """Copy ``source`` into a new file, seeking over all-zero blocks so that they stay holes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        out = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
    with out:
        size = 0
        while chunk := source.read(_CHUNK):
            for start in range(0, len(chunk), _BLOCK):
                block = chunk[start:start + _BLOCK]
                if block == _ZEROS[:len(block)]:
                    out.seek(len(block), os.SEEK_CUR)
                else:
                    out.write(block)
            size += len(chunk)
        out.truncate(size)


def _check_unpacked(archive: Path, temp: Path, *, progress: bool) -> None:
    problems = [str(problem) for problem in check_manifest(temp, progress=progress)]
    if problems:
        raise CorruptStoreError(f"archive {archive} does not match its own checksums, so nothing was unpacked: "
                                f"{'; '.join(problems[:_LISTED])}; download or copy it again")
    report = verify(temp, checksums=False)
    if report.failures:  # the system failed a read (EIO, EACCES, ...): not damage
        raise report.failures[0]
    if not report.ok:
        raise CorruptStoreError(f"archive {archive} holds a damaged store, so nothing was unpacked: "
                                f"{'; '.join(report.problems[:_LISTED])}")


def _place(temp: Path, folder: Path, replace: bool) -> None:
    """Rename the unpacked folder into place; a replaced store is first renamed aside, then deleted. If the
    last rename fails, what was at ``folder`` is put back."""
    if not replace:
        emptied = folder.is_dir()
        if emptied:
            os.rmdir(folder)  # empty (checked); a file that appeared since makes this fail, and temp is removed
        try:
            os.rename(temp, folder)
        except BaseException:
            if emptied:
                os.mkdir(folder)
            raise
        return
    old = folder.parent / f".{folder.name}.replaced-{uuid.uuid4().hex[:8]}"
    with _writer_locked(folder, "replace"):
        os.rename(folder, old)
    try:
        os.rename(temp, folder)
    except BaseException:
        os.rename(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)
