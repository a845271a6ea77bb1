"""Every file of a store folder is opened here, under the rules the format spec states for a folder from a
stranger (see ``format``: "Folders from strangers").

Reads stay inside the folder and bounded: only regular files are opened (with ``O_NONBLOCK``, then checked
with ``fstat``, so a FIFO or a device never blocks), a link is followed only when it resolves inside the
folder, and small files (JSON, manifests) are read under a size cap. Writes stay inside the folder: every
path is walked from the folder's descriptor without following links, temp files are fresh names created
with ``O_EXCL`` and renamed, and an entry that is a link, a special file or a hard link shared with another
file is refused. Every ``OSError`` leaves as one of the library's errors, naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, TypeAlias

from ..errors import (CorruptStoreError, DiskFullError, MissingFileError, ReadOnlyError, ReplayError, StoreIOError,
                     UnsafeEntryError)

if TYPE_CHECKING:
    import numpy as np
    from _typeshed import ReadableBuffer

__all__ = ["MAX_JSON_BYTES", "MAX_MANIFEST_BYTES", "library_error", "inside", "open_read", "read_bounded",
           "read_json", "open_write", "write_atomic", "make_dir", "remove", "check_for_writing", "entry_problem"]

MAX_JSON_BYTES = 4 << 20  # meta.json, card.json, priorities/*.json, ratelimit/*.json
MAX_MANIFEST_BYTES = 4 << 20  # checksums.sha256
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
StrPath: TypeAlias = "str | os.PathLike[str]"  # a folder or a file as callers give it


def library_error(error: OSError, path: StrPath, doing: str, *, after: str | None = None,
                  denied_fix: str = "check the folder's permissions, or open it with read_only=True to read"
                  ) -> ReplayError:
    """The library's error for an ``OSError`` met while ``doing`` something with ``path``; ``after``, when
    given, says what was left behind (before the fix), ``denied_fix`` what to do about a permission."""
    if isinstance(error, ReplayError):
        return error
    why = error.strerror or str(error) or type(error).__name__
    named = f"{path}" if not error.filename or str(error.filename) == str(path) else f"{path} ({error.filename})"
    then = f"; {after}: " if after else "; "
    mapped: DiskFullError | ReadOnlyError | CorruptStoreError | StoreIOError  # OSErrors all: they carry errno
    if error.errno in DISK_FULL:
        mapped = DiskFullError(f"no space left on the device (or quota) to {doing} {named} ({why})"
                               f"{then}free some space (or raise the quota) and try again")
    elif error.errno in DENIED:
        mapped = ReadOnlyError(f"no permission to {doing} {named} ({why}){then}{denied_fix}")
    elif error.errno == errno.ELOOP:
        mapped = UnsafeEntryError(f"cannot {doing} {path}: it is a link, and the library never writes through "
                                  f"links (or the link loops); replace it by a regular file")
    elif error.errno == errno.ENOENT:
        mapped = MissingFileError(f"{path} is missing; cannot {doing} it")
    elif isinstance(error, IsADirectoryError):
        mapped = CorruptStoreError(f"{path} is a folder where the store must have a file; cannot {doing} it")
    else:
        mapped = StoreIOError(f"the system failed to {doing} {named} ({why})"
                              + (f"{then}check the disk, then try again" if after else ""))
    mapped.errno = error.errno  # (a filename attribute would change how the message prints: the path is in it)
    return mapped


@contextmanager
def errors_named(path: StrPath, doing: str) -> Iterator[None]:
    """Turn any OSError inside the block into the library's error naming ``path``."""
    try:
        yield
    except OSError as error:
        raise library_error(error, path, doing) from None


# ---- reading -------------------------------------------------------------------------------------------


def inside(folder: StrPath, path: StrPath) -> Path:
    """``path`` with its links resolved, refused unless it stays inside ``folder``."""
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise UnsafeEntryError(f"{path} leads out of the store folder {folder} (to {real}); the library reads only "
                               f"files inside the folder: replace the link by the file itself")
    return Path(real)


def entry_problem(info: os.stat_result, *, file: bool = True) -> str | None:
    """Why an entry with this (l)stat is refused, or None."""
    if stat.S_ISLNK(info.st_mode):
        return "a link"
    if file and stat.S_ISDIR(info.st_mode):
        return "a folder where the store must have a file"
    if not file and not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                else "a device")
        return f"{kind}, not a regular file"
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return f"a hard link shared with {info.st_nlink - 1} other name(s)"
    return None


def open_read(folder: StrPath, path: StrPath, *, doing: str = "read", links: bool = True) -> int:
    """A read-only descriptor of a regular file inside ``folder`` (links followed only inside it; with
    ``links=False`` a link is refused, for folders of other formats that never hold links)."""
    real = inside(folder, path) if links else Path(path)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | (0 if links else _NOFOLLOW))
    except OSError as error:
        if error.errno == errno.ELOOP and not links:
            raise UnsafeEntryError(f"{path} is a link; the library reads this folder's files only as regular "
                                   f"files, never through links: replace the link by the file itself") from None
        raise library_error(error, path, doing) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            problem = entry_problem(info)
            if stat.S_ISDIR(info.st_mode):
                raise CorruptStoreError(f"{path} is {problem}; cannot {doing} it")
            raise UnsafeEntryError(f"{path} is {problem}; the library opens regular files only: replace it by the "
                                   f"file the store needs (`memmap_replay verify` lists every such entry)")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bounded(folder: StrPath, path: StrPath, limit: int, *, doing: str = "read", links: bool = True) -> bytes:
    """The whole of a regular file inside ``folder``, refused if it holds more than ``limit`` bytes."""
    fd = open_read(folder, path, doing=doing, links=links)
    try:
        with errors_named(path, doing):
            size = os.fstat(fd).st_size
            if size > limit:
                raise _too_big(path, size, limit)
            chunks: list[bytes] = []
            total = 0
            while total <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        if total > limit:
            raise _too_big(path, total, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_big(path: StrPath, size: int, limit: int) -> UnsafeEntryError:
    return UnsafeEntryError(f"{path} must hold at most {limit} bytes (got {size}); the library reads such files "
                            f"whole, so it refuses larger ones: the file is not one this library wrote")


def read_json(folder: StrPath, path: StrPath, *, limit: int = MAX_JSON_BYTES, doing: str = "read") -> Any:
    """A JSON file inside ``folder``, bounded; damage (bad UTF-8, bad JSON, absurd nesting) is CorruptStoreError."""
    data = read_bounded(folder, path, limit, doing=doing)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # bad UTF-8 or JSON, absurd numbers, absurd nesting
        raise CorruptStoreError(f"{path} is not valid JSON ({str(error)[:200]})") from None


# ---- writing -------------------------------------------------------------------------------------------


def _parts(folder: StrPath, path: StrPath) -> tuple[Path, list[str]]:
    root, where = Path(folder), Path(path)
    try:
        rel = where.relative_to(root)
    except ValueError:
        rel = where
    if rel.is_absolute() or not rel.parts or ".." in rel.parts:
        raise UnsafeEntryError(f"{where} is not a path inside the store folder {root}")
    return root, list(rel.parts)


@contextmanager
def _parent_fd(folder: StrPath, path: StrPath, *, doing: str) -> Iterator[tuple[int, str]]:
    """(descriptor of the folder holding ``path``, its last name), walked from ``folder`` without links."""
    root, parts = _parts(folder, path)
    with errors_named(root, doing):
        fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for index, part in enumerate(parts[:-1]):
            try:
                step = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as error:
                where = root.joinpath(*parts[:index + 1])
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeEntryError(f"cannot {doing} {path}: {where} is a link or not a folder; the library "
                                           f"writes only inside the store folder, never through links") from None
                raise library_error(error, where, doing) from None
            os.close(fd)
            fd = step
        yield fd, parts[-1]
    finally:
        os.close(fd)


def open_write(folder: StrPath, path: StrPath, flags: int = os.O_RDWR, mode: int = 0o644, *,
               doing: str = "write") -> int:
    """A descriptor for writing a regular file inside ``folder``: no link followed, no special or shared file."""
    with _parent_fd(folder, path, doing=doing) as (directory, name):
        with errors_named(path, doing):
            fd = os.open(name, flags | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, mode, dir_fd=directory)
    try:
        problem = entry_problem(os.fstat(fd))
        if problem:
            raise UnsafeEntryError(f"cannot {doing} {path}: it is {problem}; a writer refuses it so that nothing "
                                   f"outside the folder is written: replace it by a regular file of its own")
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_all(fd: int, data: ReadableBuffer | np.ndarray, position: int | None = None) -> None:
    """Write every byte (``os.write`` and ``os.pwrite`` may write fewer than asked). ``data``: bytes or a
    C-contiguous buffer of any shape, an empty one (shape (0, 2): memoryview cannot cast it) included."""
    # an ndarray is a buffer; numpy's stubs declare its __buffer__ only from Python 3.12 (mypy checks 3.10)
    view, done = memoryview(data), 0  # type: ignore[arg-type]
    if view.nbytes == 0:
        return
    view = view.cast("B")
    while done < len(view):
        written = os.write(fd, view[done:]) if position is None else os.pwrite(fd, view[done:], position + done)
        if written <= 0:  # pragma: no cover - a file system that writes nothing without an error
            raise OSError(errno.EIO, "a write wrote nothing")
        done += written


def write_atomic(folder: StrPath, path: StrPath, data: bytes | Callable[[IO[bytes]], object], *,
                 durable: bool = False, doing: str = "write") -> None:
    """Replace ``path`` inside ``folder``: a fresh temp file (``O_EXCL``), fsync, rename over ``path``. ``data`` is
    bytes, or a function that writes into a binary file object. A failure leaves ``path`` as it was."""
    with _parent_fd(folder, path, doing=doing) as (directory, name):
        temp = f"{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with errors_named(path, doing):
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=directory)
                with os.fdopen(fd, "wb", closefd=True) as file:
                    if callable(data):
                        data(file)
                    else:
                        file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                try:
                    target = os.lstat(name, dir_fd=directory)
                except FileNotFoundError:
                    target = None
                if target is not None and stat.S_ISDIR(target.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
                os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
                if durable:
                    os.fsync(directory)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=directory)
            except OSError:
                pass
            raise


def make_dir(folder: StrPath, path: StrPath, *, doing: str = "make the folder") -> None:
    """Make the folder ``path`` inside ``folder`` if absent; refuse a link or a file in its place."""
    with _parent_fd(folder, path, doing=doing) as (directory, name):
        with errors_named(path, doing):
            try:
                os.mkdir(name, 0o755, dir_fd=directory)
            except FileExistsError:
                problem = entry_problem(os.lstat(name, dir_fd=directory), file=False)
                if problem:
                    raise UnsafeEntryError(f"cannot use {path}: it is {problem}; a writer needs a folder of its "
                                           f"own there: remove it (or open the store read_only=True)") from None


def remove_entry(folder: StrPath, path: StrPath) -> None:
    """Remove ``path`` inside ``folder``: a folder with everything in it (``shutil.rmtree`` removes links inside,
    never following them), or a file or a link itself; absent is fine."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        with errors_named(path, "remove"):
            shutil.rmtree(path)
    else:
        remove(folder, path)


def remove(folder: StrPath, path: StrPath, *, doing: str = "remove") -> None:
    """Remove a file (or a link itself, never its target) inside ``folder``; absent is fine."""
    with _parent_fd(folder, path, doing=doing) as (directory, name):
        with errors_named(path, doing):
            try:
                os.unlink(name, dir_fd=directory)
            except FileNotFoundError:
                pass


def is_temp_of(entry: str, name: str) -> bool:
    """``entry`` is a temp file ``write_atomic`` makes while replacing ``name`` (or the old fixed ``name.tmp``)."""
    return re.fullmatch(rf"{re.escape(name)}(\.\d+\.[0-9a-f]+)?\.tmp", entry) is not None


def remove_temps(folder: StrPath, name: str) -> None:
    """Remove the temp files a writer killed while replacing ``name`` left behind (the caller holds the lock
    under which ``name`` is written, so no temp file of it is anyone else's)."""
    with errors_named(folder, "clean up"):
        try:
            entries = os.listdir(folder)
        except FileNotFoundError:
            return
        for entry in entries:
            if is_temp_of(entry, name):
                remove(folder, Path(folder, entry))


def check_for_writing(folder: StrPath, entries: dict[str, bool]) -> None:
    """Refuse a folder, before anything is written, whose entries (relative path -> is a file) are links,
    special files or shared hard links. Absent entries are fine."""
    for rel, is_file in entries.items():
        path = Path(folder, rel)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise library_error(error, path, "check") from None
        problem = entry_problem(info, file=is_file)
        if problem:
            raise UnsafeEntryError(
                f"{path} is {problem}; a writer refuses a store folder holding links, special files or shared "
                f"hard links, so that nothing outside it is ever written: replace it by a file of its own (or "
                f"open the store with read_only=True; `memmap_replay verify` lists every such entry)")


@contextmanager
def disk_full(message: str) -> Iterator[None]:
    """A full disk (or quota) met inside raised as ``DiskFullError(message)``; other errors as they are."""
    try:
        yield
    except OSError as error:
        if not isinstance(error, DiskFullError) and error.errno not in DISK_FULL:
            raise
        raise DiskFullError(message) from None
