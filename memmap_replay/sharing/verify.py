"""verify(folder): check a store folder against the on-disk spec (``format``) without trusting it.

The checks read ``meta.json``, every ``.npy`` header and the live slots of the episode table; never the
step data of a raw field, so they take about as long as opening the store. A compressed field (format 2.0)
is checked row by row (``verify_encoded``): ``state.frames`` in meta.json, each live row's index entry, and
every live frame decoded (without the codec's package, the ``zstd`` extra, a warning says the frames were not
decoded). Each finding names the file, what is
wrong, what was expected and what was found. A *problem* is damage: a reader refuses the store, or
plain numpy cannot read a file. A *warning* is something readers ignore or a sampler rebuilds: a stray
file, the ``meta.json*.tmp`` a crash leaves behind, a damaged ``priorities/`` file (sampler state, not
data). With a ``checksums.sha256`` (see ``checksums``), every file it lists is hashed too: a file that
differs is a problem. ``python -m memmap_replay verify FOLDER`` prints the same report.

Every entry of the folder is examined with ``lstat`` before anything is opened (and files are then opened
through ``folderio``: regular files only, never blocking, links only inside the folder, JSON bounded), so
verify itself never blocks or allocates without bound. What the library refuses is a problem: a link leading
out of the folder, dangling or looping; a FIFO, device or socket; a file over its cap (JSON 4 MiB,
checksums.sha256 4 MiB, stats/running.npz 64 MiB); unknown or oversized members of stats/running.npz. So are
what readers accept but a writer refuses: a link that stays inside the folder, a hard link shared with another
file. The same entries outside the store's layout are warnings (the library neither reads nor writes them).
A folder verify calls OK is therefore one the library will neither leak from nor hang on.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..core import folderio
from ..core.progress import progress_bar
from ..core import format as fmt
from .checksums import MANIFEST, check_manifest, _judge, read_manifest, stray_files
from ..errors import (OptionError, CorruptStoreError, DiskFullError, NotAFolderError, ReadOnlyError, ReplayError,
                     SchemaError, StoreIOError, StoreNotFoundError, UnsafeEntryError)
from .returns_cache import RETURNS_FILE
from .stats import _MAX_RUNNING_BYTES, _NPY_HEADER_ROOM, RUNNING_FILE, _expected_members
from .verify_encoded import FieldFramesCheck, check_frames_state
from ..core.edits import read_journal
from ..core.format import Capacity, State, StoreMeta
from ..core.schema import Schema

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["VerifyReport", "verify"]

_MAX_LISTED = 5  # findings listed per kind of episode-table damage; the rest are counted
_STORE_DIRS = (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR)
_PRIORITY_NOTE = ("; priorities are sampler state, not data: delete the file and a prioritized sampler starts them "
                  "afresh")
_END_CODES_TEXT = ", ".join(f"{code} {name or 'unspecified'}" for code, name in fmt.END_NAMES.items())
_CHECKED_WORDS = {"meta_json": "meta.json", "npy_files": ".npy header", "live_episodes": "live episode",
                 "live_rows": "live row", "priority_files": "priorities file", "checksums": "checksummed file",
                 "entries": "folder entry", "frames": "decoded frame"}
_TOP_FILES = (fmt.META_FILE, fmt.LOCK_FILE, MANIFEST, "card.json", "README.md")
_LAYOUT_DIRS = (fmt.STEPS_DIR, fmt.META_DIR, fmt.EPISODES_DIR, fmt.PRIORITIES_DIR, fmt.STATS_DIR, fmt.RATELIMIT_DIR,
                fmt.TRAINING_DIR)
_RUNNING = f"{fmt.STATS_DIR}/{RUNNING_FILE}"
_STATS_DEPTH = 4  # stats/ may hold folders this deep (checksums covers them)
# the size caps of the files the library reads whole (folderio, stats)
_CAPS = {fmt.META_FILE: (folderio.MAX_JSON_BYTES, "JSON files"), "card.json": (folderio.MAX_JSON_BYTES, "JSON files"),
        MANIFEST: (folderio.MAX_MANIFEST_BYTES, "checksums.sha256"),
         _RUNNING: (_MAX_RUNNING_BYTES, "stats/running.npz")}


@dataclass
class VerifyReport:
    """What ``verify`` found: ``ok`` (no problems), ``problems`` and ``warnings`` (plain-words lines, each
    starting with the file concerned), ``checked`` (what was checked, counted) and ``is_store`` (False
    when the folder holds none of a store's files)."""

    folder: Path
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_CHECKED_WORDS, 0))
    is_store: bool = True
    # the system calls that failed while checking (EIO, EACCES, ENOSPC, ...) as the library's errors: a problem
    # the system caused, not damage (``pack`` raises the first of them rather than calling the store damaged)
    failures: list[ReplayError] = field(default_factory=list, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"folder": str(self.folder), "ok": self.ok, "is_store": self.is_store,
                "problems": list(self.problems), "warnings": list(self.warnings), "checked": dict(self.checked)}

    def __str__(self) -> str:
        verdict = "OK" if self.ok else f"DAMAGED: {_plural(len(self.problems), 'problem')}"
        lines = [f"{self.folder}: {verdict}, {_plural(len(self.warnings), 'warning')}",
                 "checked: " + ", ".join(("meta.json" if n else "meta.json (unreadable)") if key == "meta_json"
                                         else _plural(n, _CHECKED_WORDS[key]) for key, n in self.checked.items()
                                         if n or key != "frames")]  # (frames: compressed fields only)
        for title, found in (("problems", self.problems), ("warnings", self.warnings)):
            if found:
                lines += [f"{title}:"] + [f"  - {line}" for line in found]
        return "\n".join(lines)


def _plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word[:-1]}ies" if word.endswith("y") else f"{count} {word}s"


def verify(folder: str | os.PathLike, *, checksums: bool | None = None, progress: bool = False) -> VerifyReport:
    """Check the store at ``folder``; never raises for damage (it is reported), only for a path that
    does not exist (StoreNotFoundError) or is not a folder (NotAFolderError). ``checksums``: None checks
    ``checksums.sha256`` when there is one, True also reports its absence, False skips it (no data read);
    ``progress`` draws a bar on stderr while files are hashed."""
    folder = Path(folder)
    if not folder.exists():
        raise StoreNotFoundError(f"no store at {folder}: the folder does not exist")
    if not folder.is_dir():
        raise NotAFolderError(f"{folder} must be a folder (got a file); pass the folder that holds meta.json")
    if checksums is not None and not isinstance(checksums, bool):
        raise OptionError(f"checksums must be None, True or False (got {checksums!r})")
    report = VerifyReport(folder)
    _StoreChecker(folder, report, checksums=checksums, progress=progress).run()
    return report


class _StoreChecker:
    """The checks, in order; each one skips what an earlier finding makes meaningless."""

    def __init__(self, folder: Path, report: VerifyReport, *, checksums: bool | None = None, progress: bool = False):
        self.folder, self.report, self.checksums, self.progress = folder, report, checksums, progress
        self.schema: Schema | None = None
        self.capacity: Capacity | None = None
        self.links = True  # a 1.1 store: episodes/continues.npy is part of it
        self.state: State | None = None
        self.table: dict[str, np.ndarray] = {}  # episode table files whose headers and sizes are good
        # compressed fields: state.frames when it is good; per field its index and frames maps, when both are good
        self.frames: dict[str, dict[str, int]] | None = None
        self.encoded: dict[str, dict[str, np.ndarray]] = {}
        self.live: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (ids, start, stop) of sane episodes
        self.root = os.path.realpath(folder)  # the folder itself may be a link (a store on another disk)
        self.refused: set[str] = set()  # entries reported as ones the library refuses: not opened again
        self.reported: set[str] = set()  # entries reported by the entry checks (each once)

    def problem(self, where: str, what: str, error: BaseException | None = None) -> None:
        """Report a problem; ``error``, when a system call failed (not damage), is kept in ``failures`` too."""
        self.report.problems.append(f"{where}: {what}")
        if isinstance(error, OSError) and not isinstance(error, ReplayError):
            error = folderio.library_error(error, self.folder / where, "verify")
        if isinstance(error, (StoreIOError, ReadOnlyError, DiskFullError)):
            self.report.failures.append(error)

    def warn(self, where: str, what: str, error: BaseException | None = None) -> None:  # (harmless: error unused)
        self.report.warnings.append(f"{where}: {what}")

    def run(self) -> None:
        for check in (self.check_meta, self.check_entries, self.check_files, self.check_table, self.check_frames,
                      self.check_priorities, self.check_running, self.check_strays, self.check_checksums):
            try:
                check()
            except Exception as error:  # noqa: BLE001 - damage nobody foresaw is reported, never raised
                self.problem(check.__name__.removeprefix("check_"), f"could not be checked ({error!r})", error)

    # ---- meta.json ---------------------------------------------------------------------------------

    def check_meta(self) -> None:
        data = self.read_meta()
        if data is None:
            return
        self.report.checked["meta_json"] = 1
        if data.get("format") != fmt.FORMAT_NAME:
            self.problem("meta.json", f"'format' must be {fmt.FORMAT_NAME!r} (found {data.get('format')!r}); "
                                      f"this is not a memmap_replay store, or its meta.json was overwritten")
            return
        if not self.check_version(data.get("version")):
            return
        self.links = fmt.has_links(str(data.get("version")))  # else continues.npy is ignored
        store_id = data.get("store_id")
        if "store_id" not in data:
            self.problem("meta.json", "'store_id' is missing (expected the store's id, a string)")
        elif not isinstance(store_id, str) or not store_id:
            self.problem("meta.json", f"'store_id' must be a non-empty string (found {store_id!r})")
        self.schema = self.parse_schema(data.get("schema"))
        self.capacity = self.numbers("capacity", data.get("capacity"), Capacity)
        self.state = self.numbers("state", data.get("state"), State)
        if self.schema is not None:
            if self.schema.encoded and str(data.get("version")).split(".")[0] == "1":
                self.problem("meta.json", f"declares version {data.get('version')!r} but has compressed fields "
                                          f"{sorted(self.schema.encoded)}, a 2.0 feature (a 1.x reader would read "
                                          f"their files wrong); a reader refuses it: it was altered by hand")
            self.frames = check_frames_state(data.get("state"), self.schema, self.problem)
            if self.state is not None and self.frames is not None:
                self.state.frames = self.frames
        self.check_counters()

    def read_meta(self) -> dict | None:
        path = self.folder / fmt.META_FILE
        if not path.exists() and not path.is_symlink():
            self.report.is_store = any((self.folder / name).is_dir() for name in _STORE_DIRS)
            self.problem("meta.json", "missing (expected the store's metadata, its commit point); " + (
                "the folder holds a store's files without it: restore meta.json from a copy"
                if self.report.is_store else "this folder is not a memmap_replay store"))
            return None
        if self.refuse(fmt.META_FILE, file=True) or path.is_dir():
            if path.is_dir() and fmt.META_FILE not in self.refused:
                self.problem("meta.json", "a folder where the store must have its metadata file (expected a JSON file)")
            return None
        try:
            raw = folderio.read_bounded(self.folder, path, folderio.MAX_JSON_BYTES, doing="verify")
        except (ReplayError, OSError) as error:
            self.problem("meta.json", f"cannot be read (expected a JSON file; {error})", error)
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            self.problem("meta.json", f"not UTF-8 text (expected JSON; found byte {error.object[error.start]:#04x} "
                                      f"at offset {error.start})")
            return None
        if not text.strip():
            self.problem("meta.json", f"empty (expected a JSON object; found {len(text)} bytes, all blank)")
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:
            self.problem("meta.json", f"not valid JSON (expected a JSON object; {error})")
            return None
        if not isinstance(data, dict):
            self.problem("meta.json", f"must hold a JSON object (found a JSON {type(data).__name__})")
            return None
        return data

    def check_version(self, version: Any) -> bool:
        if version is None:
            self.problem("meta.json", f"'version' is missing (expected \"MAJOR.MINOR\" such as {fmt.FORMAT_VERSION!r})")
            return False
        if str(version).split(".")[0] not in fmt.READ_MAJORS:
            majors = fmt.MAJORS_TEXT
            self.problem("meta.json", f"format version {version!r} is not readable by this memmap_replay "
                                      f"(it reads major versions {majors}); upgrade memmap_replay")
            return False
        if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+", version):
            self.warn("meta.json", f"'version' should be a string \"MAJOR.MINOR\" (found {version!r})")
        return True

    def parse_schema(self, data: Any) -> Schema | None:
        if data is None:
            self.problem("meta.json", "'schema' is missing (expected {\"fields\": {...}, \"meta_fields\": {...}})")
            return None
        try:
            return Schema.from_json(data)
        except (SchemaError, TypeError, ValueError, KeyError, AttributeError) as error:
            self.problem("meta.json", f"'schema' is malformed: {error}")
            return None

    def numbers(self, section: str, data: Any, kind: type[DataclassInstance]) -> Any:
        names = [name for name in kind.__dataclass_fields__ if name != "frames"]  # (state.frames: check_frames)
        if not isinstance(data, dict):
            self.problem("meta.json", f"'{section}' must be a JSON object with {names} (found {data!r})")
            return None
        good, optional = True, {"edits": 0, "removed": 0}  # (state keys since 3.0: absent is 0)
        data = {**{key: value for key, value in optional.items() if key in names}, **data}
        for key in names:
            value = data.get(key)
            if key not in data:
                self.problem("meta.json", f"'{section}.{key}' is missing")
            elif key == "circular" and not isinstance(value, bool):
                self.problem("meta.json", f"'{section}.{key}' must be true or false (found {value!r})")
            elif key != "circular" and (type(value) is not int or not 0 <= value < 2**62):
                self.problem("meta.json", f"'{section}.{key}' must be an integer in 0 .. 2**62 - 1 (found {value!r})")
            else:
                continue
            good = False
        return kind(**{key: data[key] for key in names}) if good else None

    def check_counters(self) -> None:
        capacity, state, count = self.capacity, self.state, len(self.report.problems)
        if capacity is not None:
            if capacity.max_episodes < 1 or capacity.max_timesteps < 1:
                self.problem("meta.json", f"capacity.max_episodes and capacity.max_timesteps must be >= 1 (found "
                                          f"{capacity.max_episodes} and {capacity.max_timesteps})")
            elif capacity.max_steps < capacity.max_timesteps + 1:
                self.problem("meta.json", f"capacity.max_steps must be >= max_timesteps + 1 = "
                                          f"{capacity.max_timesteps + 1} (found {capacity.max_steps})")
            if len(self.report.problems) > count:
                self.capacity = capacity = None
        if state is None:
            return
        if state.first_episode > state.next_episode:
            self.problem("meta.json", f"state.first_episode must be <= state.next_episode (found "
                                      f"{state.first_episode} > {state.next_episode})")
        elif capacity is not None and state.next_episode - state.first_episode > capacity.max_episodes:
            self.problem("meta.json", f"state has {state.next_episode - state.first_episode} live episodes "
                                      f"(next_episode - first_episode) (expected at most capacity.max_episodes = "
                                      f"{capacity.max_episodes})")
        if capacity is not None and state.write_head > capacity.max_steps:
            self.problem("meta.json", f"state.write_head must be <= capacity.max_steps = {capacity.max_steps} "
                                      f"(found {state.write_head})")
        if capacity is not None and state.rows > capacity.max_steps:
            self.warn("meta.json", f"state.rows is {state.rows}, more than capacity.max_steps = {capacity.max_steps} "
                                   f"(no writer grows the files that far; harmless)")
        if len(self.report.problems) > count:
            self.state = None

    # ---- the folder's entries: links, special files, hard links, size caps (lstat only, nothing opened) --------

    def refuse(self, rel: str, *, file: bool, stray: bool = False) -> bool:
        """Report ``rel`` if the library refuses it (once); True when a reader must not open it. Nothing is
        opened: an entry is judged by ``lstat`` (and ``stat`` of a link's target inside the folder)."""
        if rel in self.refused or rel in self.reported:
            return rel in self.refused
        path = self.folder / rel
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return False
        except OSError as error:
            self.problem(rel, f"cannot be examined ({error.strerror or error})")
            self.refused.add(rel)
            return True
        what, readers_refuse, note = self.judge_entry(rel, path, info, file=file, stray=stray)
        if what is None:
            return False
        self.reported.add(rel)
        if stray:
            self.warn(rel, f"{what.split(': the library')[0]}; it is not part of the store, so the library neither "
                           f"reads nor writes it (writers use fresh temp names): you may delete it")
            return readers_refuse
        self.problem(rel, what + (f"; {note}" if note else ""))
        if readers_refuse:
            self.refused.add(rel)
        return readers_refuse

    def is_refused(self, rel: str) -> bool:
        """Whether ``rel`` or a folder holding it was reported as an entry readers refuse."""
        parts = rel.split("/")
        return any("/".join(parts[:index]) in self.refused for index in range(1, len(parts) + 1))

    def judge_entry(self, rel: str, path: Path, info: os.stat_result, *, file: bool,
                    stray: bool = False) -> tuple[str | None, bool, str]:
        """(what is wrong with the entry or None, whether readers refuse it too, how to fix it). For a stray entry
        (not the store's) only links and special files are findings: the library never opens it."""
        fix_link = f"replace the link by the {'file' if file else 'folder'} itself (to keep a store on another disk, " \
                   f"link or mount the whole store folder, not the entries in it)"
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            try:
                real = os.path.realpath(path, strict=True)
            except FileNotFoundError:
                return (f"a link to {target}, which does not exist (a dangling link): the library refuses it, and a "
                        f"writer never creates a link's target", True, "remove the link")
            except OSError as error:
                if error.errno == errno.ELOOP:
                    return f"a link to {target} that loops: the library refuses it", True, "remove the link"
                return (f"a link to {target} that cannot be followed ({error.strerror}): the library refuses it", True,
                        "remove the link")
            if real != self.root and not real.startswith(self.root.rstrip(os.sep) + os.sep):
                where = "/dev/zero, a device" if real == "/dev/zero" else real
                return (f"a link leading out of the store folder (to {where}): the library refuses it, for reading "
                        f"and writing (it never reads or writes outside the folder)", True, fix_link)
            try:
                info = os.stat(path)
            except OSError as error:
                return f"a link to {target} that cannot be followed ({error.strerror})", True, "remove the link"
            inner, refused, _ = self.judge_entry(rel, Path(real), info, file=file, stray=stray)
            if inner is not None:
                return f"a link to {target}, which is {inner.removeprefix('a ').removeprefix('an ')}", refused, fix_link
            return (f"a link (to {target}, inside the folder): readers follow it, but a writer refuses a store "
                    f"holding links, so that nothing is ever written through one", False, fix_link)
        if stat.S_ISDIR(info.st_mode):
            return None, False, ""  # a folder where a file belongs is reported by the checks of that file
        if not stat.S_ISREG(info.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                    else "a device")
            return (f"{kind}, not a regular file: the library refuses it without opening it (reading it could block "
                    f"forever or never end)", True, "replace it by the store's file, or delete it")
        if stray:
            return None, False, ""
        cap = _CAPS.get(rel) or ((folderio.MAX_JSON_BYTES, "JSON files") if rel.endswith(".json") else None)
        if cap is not None and info.st_size > cap[0]:
            return (f"{info.st_size} bytes, over the {cap[0]}-byte cap on {cap[1]}: the library refuses to read it "
                    f"(it is not a file this library wrote)", True,
                    "delete it (the statistics are rebuilt from the live episodes)" if rel == _RUNNING
                    else "replace it by a copy of the store's own")
        if info.st_nlink > 1:
            return (f"a hard link shared with {info.st_nlink - 1} other name(s): a writer refuses it (a write would "
                    f"change the other names too)", False,
                    f"give it a copy of its own (cp {rel} {rel}.copy && mv {rel}.copy {rel})")
        return None, False, ""

    def check_entries(self) -> None:
        """Every entry of the store's layout: links, special files, shared hard links and files over their caps
        are problems (the library refuses them); such entries outside the layout are warnings (it ignores them)."""
        if not self.report.is_store:
            return
        try:
            names = sorted(os.listdir(self.folder))
        except OSError as error:
            self.problem(".", f"the folder cannot be listed ({error.strerror or error})")
            return
        for name in names:
            self.report.checked["entries"] += 1
            if name in _TOP_FILES:
                self.refuse(name, file=True)
            elif name in _LAYOUT_DIRS:
                if not self.refuse(name, file=False) and (self.folder / name).is_dir():
                    self.check_layout_dir(name, depth=1)
            else:
                self.refuse(name, file=True, stray=True)

    def check_layout_dir(self, rel: str, depth: int) -> None:
        top = rel.split("/")[0]
        known = self.known_names(top)
        try:
            names = sorted(os.listdir(self.folder / rel))
        except OSError as error:
            self.problem(rel, f"cannot be listed ({error.strerror or error})")
            return
        for name in names:
            child = f"{rel}/{name}"
            self.report.checked["entries"] += 1
            is_dir = os.path.isdir(self.folder / child) and not os.path.islink(self.folder / child)
            if top == fmt.STATS_DIR and is_dir and depth < _STATS_DEPTH:
                self.check_layout_dir(child, depth + 1)
                continue
            stray = known is not None and child not in known and not (top == fmt.STATS_DIR and is_dir)
            self.refuse(child, file=not is_dir, stray=stray)

    def known_names(self, top: str) -> set[str] | None:
        """The entries of a layout folder the library reads or writes (None: every entry is the library's)."""
        if top == fmt.STATS_DIR:
            return {_RUNNING, f"{fmt.STATS_DIR}/{RETURNS_FILE}"}
        if top in (fmt.STEPS_DIR, fmt.META_DIR):
            if self.schema is None:
                return None
            layout = fmt.layout(self.schema, Capacity(1, 1, 2, False))  # (the names do not depend on the capacity)
            return {path.as_posix() for _, _, path, _ in layout if path.parts[0] == top}
        if top == fmt.EPISODES_DIR:
            return {f"{top}/{name}.npy" for name in fmt.TABLE} | {f"{top}/{fmt.JOURNAL_FILE}"}
        return None  # priorities/, ratelimit/, training/: run state the library owns, every entry

    # ---- stats/running.npz -------------------------------------------------------------------------------

    def check_running(self) -> None:
        """The members of stats/running.npz against the names and sizes the schema allows (read from the zip's
        directory and each member's .npy header, never inflated)."""
        path = self.folder / _RUNNING
        if self.schema is None or self.is_refused(_RUNNING) or not path.exists() or path.is_dir():
            return
        expected, findings = _expected_members(self.schema), []
        try:
            with os.fdopen(folderio.open_read(self.folder, path, doing="verify"), "rb") as file, \
                    zipfile.ZipFile(file) as archive:
                for info in archive.infolist():
                    name = info.filename.removesuffix(".npy")
                    if name not in expected or not info.filename.endswith(".npy"):
                        findings.append(f"an unknown member {info.filename!r} ({info.file_size} bytes)")
                    elif info.file_size > expected[name] + _NPY_HEADER_ROOM:
                        findings.append(f"member {info.filename!r} holds {info.file_size} bytes (expected at most "
                                        f"{expected[name] + _NPY_HEADER_ROOM})")
                    else:
                        with archive.open(info) as member:
                            findings += self.member_header(info.filename, member, expected[name])
        except (ReplayError, OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as error:
            self.warn(_RUNNING, f"not a readable .npz ({error}); the library rebuilds the statistics from the live "
                               f"episodes (derived data, not data)")
            return
        for finding in findings[:_MAX_LISTED]:
            self.problem(_RUNNING, f"{finding}: the library refuses the file (it never inflates a member it does not "
                                  f"expect) and rebuilds the statistics; delete it")
        if len(findings) > _MAX_LISTED:
            self.problem(_RUNNING, f"and {len(findings) - _MAX_LISTED} more members like these")

    @staticmethod
    def member_header(name: str, member, nbytes: int) -> list[str]:
        """What is wrong with a member's .npy header (its declared array must fit the expected bytes)."""
        try:
            dtype, shape, _ = fmt.parse_npy_header(member)
        except (ValueError, OSError, zipfile.BadZipFile) as error:
            return [f"member {name!r} is not a readable .npy ({error})"]
        if dtype.hasobject:
            return [f"member {name!r} holds Python objects (dtype {dtype})"]
        declared = dtype.itemsize * math.prod(shape)
        if declared > nbytes:
            return [f"member {name!r} declares an array of {declared} bytes ({dtype}, shape {shape}; expected at most "
                    f"{nbytes})"]
        return []

    # ---- .npy files ----------------------------------------------------------------------------------

    def check_files(self) -> None:
        if self.capacity is None:
            return
        rows = self.state.rows if self.state is not None else 0
        for group, spec, path, fixed in fmt.layout(self.schema or Schema({}, {}), self.capacity, links=self.links,
                                                   state=self.state):
            why = "state.rows in meta.json" if fixed is None else "capacity.max_episodes in meta.json"
            if group == fmt.FRAMES:
                why = f"state.frames.{spec.name}.bytes in meta.json"
            count = len(self.report.problems)
            array = self.check_npy(path.as_posix(), spec.dtype, spec.shape, rows if fixed is None else fixed,
                                   why, exact=fixed is not None and group != fmt.FRAMES)
            if group == fmt.EPISODES_DIR and array is not None:
                self.table[spec.name] = array
            checked = len(self.report.problems) == count and not self.is_refused(path.as_posix())
            if group in (fmt.INDEX, fmt.FRAMES) and checked:  # (then None means no rows)
                self.encoded.setdefault(spec.name, {})[group] = np.zeros((0, *spec.shape), spec.dtype) \
                    if array is None else array

    def check_npy(self, rel: str, dtype: np.dtype, shape: tuple, need: int, why: str, *, exact: bool,
                  note: str = "", at_least: int | None = None) -> np.ndarray | None:
        """Check one .npy file; a read-only map of its first ``need`` rows if they are all there.
        ``at_least``: fewer rows are fine down to this many (then a map of those): a grown store's
        priorities files are of its capacity before the grow until a sampler remaps them."""
        report = self.warn if note else self.problem
        path, expected = self.folder / rel, f"{dtype} rows of shape {shape}"
        if self.is_refused(rel):
            return None  # a link out of the folder, a FIFO, ...: reported, never opened
        if not path.is_file():
            report(rel,
                   f"{'missing' if not path.exists() else 'not a file'} (expected a .npy file of {expected}){note}")
            return None
        try:
            with os.fdopen(folderio.open_read(self.folder, path, doing="verify"), "rb") as file:
                size = os.fstat(file.fileno()).st_size
                found, found_shape, fortran = fmt.parse_npy_header(file)
                offset = file.tell()
        except (ReplayError, OSError, ValueError) as error:
            report(rel, f"not a readable .npy file (expected a standard .npy header of {expected}; {error}){note}",
                   error)
            return None
        self.report.checked["npy_files"] += 1
        if found.hasobject:
            report(rel, f"holds Python objects (dtype {found}) that only unpickling could read; a store never "
                        f"pickles (expected {expected}){note}")
            return None
        wrong = [f"{found.str if found.byteorder == '>' else found} rows of shape {tuple(found_shape[1:])}"] \
            if found != dtype or tuple(found_shape[1:]) != shape else []
        wrong += ["a single value with no rows (shape ())"] if not found_shape else []
        wrong += ["in Fortran order (expected C order)"] if fortran else []
        if wrong:
            report(rel, f"holds {', '.join(wrong)} (expected {expected}){note}")
            return None
        rows, row_bytes = found_shape[0], found.itemsize * math.prod(shape)
        declared = offset + rows * row_bytes
        least = need if at_least is None else at_least
        if rows < least:
            report(rel, f"too short: its header declares {rows} rows (expected at least {least}, {why}){note}")
        elif exact and rows > need:
            self.warn(rel,
                      f"its header declares {rows} rows (expected {need}, {why}); the rows past {need} are ignored")
        if size < declared:
            whole = max(size - offset, 0) // row_bytes if row_bytes else rows
            report(rel, f"truncated: {size} bytes on disk (expected {declared} for the {rows} rows its header "
                        f"declares; found {whole} whole rows){note}")
        elif size > declared:
            self.warn(rel, f"{size - declared} bytes past the {rows} rows its header declares (an interrupted "
                           f"grow leaves this; harmless)")
        keep = min(rows, need)
        if rows < least or size < offset + keep * row_bytes or keep == 0:
            return None
        try:
            with os.fdopen(folderio.open_read(self.folder, path, doing="verify"), "rb") as file:
                return np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=(keep, *shape))
        except (ReplayError, OSError, ValueError) as error:  # replaced since its header was read
            report(rel, f"cannot be mapped ({error}){note}", error)
            return None

    # ---- the episode table -----------------------------------------------------------------------------

    def check_table(self) -> None:
        columns = set(fmt.TABLE) - (set() if self.links else {fmt.LINKS})
        if self.capacity is None or self.state is None or set(self.table) != columns:
            return  # what makes the table unreadable is reported already
        capacity, state = self.capacity, self.state
        ids = np.arange(state.first_episode, state.next_episode, dtype=np.int64)
        slots = ids % capacity.max_episodes
        table = {name: np.asarray(array[slots]) for name, array in self.table.items()}
        self.table.clear()
        table = self.with_journal(table, slots)
        self.report.checked["live_episodes"] = len(ids) - int(np.count_nonzero(table["end"] == fmt.REMOVED))
        start, length, end, final = table["start"], table["length"], table["end"], table["final"].view(np.uint8)
        def episode(i):
            return f"live episode {ids[i]} (slot {slots[i]})"
        self.listed("episodes/id.npy", table["id"] != ids, lambda i: f"slot {slots[i]} must hold live episode "
                    f"{ids[i]} (found {table['id'][i]}); the table and meta.json disagree")
        removed = table["end"] == fmt.REMOVED
        self.listed("episodes/length.npy", ((length < 1) | (length > capacity.max_timesteps)) & ~removed,
                    lambda i: f"{episode(i)} "
                    f"has length {length[i]} (expected 1 .. {capacity.max_timesteps}, capacity.max_timesteps)")
        self.listed("episodes/start.npy", ((start < 0) | (start > state.rows)) & ~removed,
                    lambda i: f"{episode(i)} starts at row "
                    f"{start[i]} (expected a row in 0 .. {state.rows - 1}, state.rows = {state.rows})")
        self.listed("episodes/end.npy", (end > max(fmt.END_NAMES)) & ~removed, lambda i: f"{episode(i)} has end code "
                    f"{end[i]} (expected {_END_CODES_TEXT}, or {fmt.REMOVED} removed)")
        if int(removed.sum()) != state.removed:
            self.problem("episodes/end.npy", f"{int(removed.sum())} episodes in the live range are removed (end code "
                                             f"{fmt.REMOVED}) (expected state.removed = {state.removed} of meta.json)")
        if self.links:
            self.check_links(table[fmt.LINKS], ids, end, final, episode)
        self.listed("episodes/final.npy", final > 1, lambda i: f"{episode(i)} has byte {final[i]} (expected 0 or 1; "
                    f"numpy reads it as true)", warn=True)
        # (a removed episode's rows are free: a ring or compact() may have reused them)
        sane = (start >= 0) & (start <= state.rows) & (length >= 1) & (length <= capacity.max_timesteps) & ~removed
        stop = np.where(sane, start + length + (final > 0), 0)
        beyond = sane & (stop > state.rows)
        self.listed("episodes/start.npy and episodes/length.npy", beyond, lambda i: f"{episode(i)} covers rows "
                    f"{start[i]} .. {stop[i] - 1} (expected rows below state.rows = {state.rows} in meta.json)")
        inside = sane & ~beyond
        self.check_overlaps(ids[inside], start[inside], stop[inside])
        self.live = ids[inside], start[inside], stop[inside]
        # (at or after the newest episode's rows: a trim of its tail leaves rows between them)
        shown = np.flatnonzero(~removed)
        newest = int(shown[-1]) if len(shown) else -1
        if newest >= 0 and inside[newest] and state.write_head != 0 and state.write_head < stop[newest]:
            self.problem("meta.json", f"state.write_head is {state.write_head} (expected {stop[newest]} or more, after "
                                      f"the newest live episode {ids[newest]}, or 0); a writer would overwrite live "
                                      f"rows")
        self.report.checked["live_rows"] = int((stop - start)[inside].sum())

    def with_journal(self, table: dict[str, np.ndarray], slots: np.ndarray) -> dict[str, np.ndarray]:
        """The live entries with the journal of an edit in flight (odd ``state.edits``) put over them, as readers
        see them; a journal that cannot be read is a problem."""
        if self.schema is None or self.capacity is None or self.state is None or not self.state.journal:
            return table
        rel = f"{fmt.EPISODES_DIR}/{fmt.JOURNAL_FILE}"
        try:
            journal = read_journal(self.folder, StoreMeta(self.schema, self.capacity, self.state, ""))
        except (CorruptStoreError, UnsafeEntryError, OSError) as error:
            self.problem(rel, f"the journal of the edit in flight cannot be read: {error}", error)
            return table
        if journal is None:
            self.problem(rel, f"is missing or another edit's (expected edit {self.state.edits}'s journal: meta.json "
                              f"says it is in flight)")
            return table
        self.warn(rel, f"edit {self.state.edits} is in flight (its writer was killed, or is writing now): readers see "
                       f"it done, and the next writer finishes it")
        return {name: journal.over(fmt.EPISODES_DIR, name, slots, values) if name != "id" else values
                for name, values in table.items()}

    def check_frames(self) -> None:
        """Each compressed field's live rows: index entries, contiguous frames, and every frame decoded."""
        if self.schema is None or self.live is None or self.frames is None:
            return  # what makes them unreadable is reported already
        fields = {name: spec for name, spec in self.schema.encoded.items()
                  if set(self.encoded.get(name, {})) == {fmt.INDEX, fmt.FRAMES}}
        total = len(fields) * int((self.live[2] - self.live[1]).sum())
        with progress_bar(total, "decode", bool(self.progress and total), unit="frame", unit_scale=False,
                          leave=True) as bar:
            for name, spec in fields.items():
                files = self.encoded[name]
                check = FieldFramesCheck(spec, files[fmt.INDEX], files[fmt.FRAMES], self.frames[name]["head"],
                                         self.problem, self.warn)
                self.report.checked["frames"] += check.run(*self.live, progress=bar.update)

    def check_links(self, links: np.ndarray, ids: np.ndarray, end: np.ndarray, final: np.ndarray, episode) -> None:
        """Segment links: each names an earlier episode, at most one segment continues an episode, and a live
        segment that is continued was cut (end unspecified, a final row)."""
        where = f"episodes/{fmt.LINKS}.npy"
        self.listed(where, (links < 0) | (links > ids), lambda i: f"{episode(i)} holds {links[i]} (expected 0 for "
                    f"none, or 1 + the id of an earlier episode: at most {ids[i]})")
        shown = end != fmt.REMOVED  # (a removed segment's link is not followed: its neighbours were cut from it)
        named = links[(links > 0) & (links <= ids) & shown] - 1
        values, counts = np.unique(named, return_counts=True)
        for forked in values[counts > 1][:_MAX_LISTED]:
            forking = ids[(links == forked + 1) & shown].tolist()
            self.problem(where, f"episodes {forking} all continue episode {forked} (expected at most one segment to "
                                f"continue an episode)")
        before = np.searchsorted(ids, links - 1)
        live = (links > 0) & (before < len(ids)) & shown
        live[live] = (ids[before[live]] == links[live] - 1) & shown[before[live]]
        cut = (end == 0) & (final > 0)
        self.listed(where, live & ~cut[np.minimum(before, len(ids) - 1)],
                    lambda i: f"{episode(i)} continues episode {links[i] - 1}, which was not cut at max_timesteps "
                              f"(expected its end unspecified and a final row)")

    def listed(self, where: str, mask: np.ndarray, describe: Callable[[int], str], *, warn: bool = False) -> None:
        add, hits = (self.warn if warn else self.problem), np.flatnonzero(mask)
        for i in hits[:_MAX_LISTED]:
            add(where, describe(int(i)))
        if len(hits) > _MAX_LISTED:
            add(where, f"and {len(hits) - _MAX_LISTED} more live episodes like these")

    def check_overlaps(self, ids: np.ndarray, start: np.ndarray, stop: np.ndarray) -> None:
        order = np.argsort(start, kind="stable")
        ids, start, stop = ids[order], start[order], stop[order]
        reach = np.maximum.accumulate(stop)  # the furthest row any episode starting earlier covers
        clashes = np.flatnonzero(start[1:] < reach[:-1]) + 1
        where = "episodes/start.npy and episodes/length.npy"
        for k in clashes[:_MAX_LISTED]:
            j = int(np.argmax(stop[:k] > start[k]))  # an earlier episode that reaches into episode k
            self.problem(where, f"live episodes {ids[j]} (rows {start[j]} .. {stop[j] - 1}) and {ids[k]} (rows "
                                f"{start[k]} .. {stop[k] - 1}) overlap (expected each on rows of its own)")
        if len(clashes) > _MAX_LISTED:
            self.problem(where, f"and {len(clashes) - _MAX_LISTED} more overlapping live episodes")

    # ---- priorities/ and stray files ------------------------------------------------------------------

    def check_priorities(self) -> None:
        directory, capacity = self.folder / fmt.PRIORITIES_DIR, self.capacity
        if not directory.exists() or capacity is None or self.is_refused(fmt.PRIORITIES_DIR):
            return
        if not directory.is_dir():
            self.warn(fmt.PRIORITIES_DIR, "not a folder (expected the optional folder of sampler priorities); "
                                          "a persisting prioritized sampler cannot open")
            return
        for path in sorted(directory.iterdir()):
            rel, name = f"{fmt.PRIORITIES_DIR}/{path.name}", path.name
            if name.endswith(".owner.npy"):
                self.report.checked["priority_files"] += 1
                self.check_npy(rel, np.dtype(np.int64), (), capacity.max_episodes, "capacity.max_episodes",
                               exact=True, note=_PRIORITY_NOTE, at_least=1)
            elif name.endswith(".npy"):
                self.report.checked["priority_files"] += 1
                values = self.check_npy(rel, np.dtype(np.float64), (), capacity.max_steps + 1,
                                        "capacity.max_steps + 1", exact=True, note=_PRIORITY_NOTE, at_least=2)
                largest = float(values[-1]) if values is not None else 0.0
                if not (np.isfinite(largest) and largest >= 0):
                    self.warn(rel, f"the largest priority (its last entry) is {largest} (expected a finite number "
                                   f">= 0){_PRIORITY_NOTE}")
                if not (directory / (name[:-4] + ".owner.npy")).exists():
                    self.warn(rel, f"has no {name[:-4]}.owner.npy beside it (expected one){_PRIORITY_NOTE}")
            elif name.endswith(".json"):
                if not self.is_refused(rel):
                    self.check_view_spec(path, rel)
            elif not name.endswith(".lock"):
                self.warn(rel, "not a priorities file (expected <name>.npy, .owner.npy, .json, "
                               ".lock); samplers ignore it")

    def check_view_spec(self, path: Path, rel: str) -> None:
        try:
            spec = folderio.read_json(self.folder, path, doing="verify")
        except (ReplayError, OSError) as error:
            spec = error
        if not isinstance(spec, dict):
            self.warn(rel, f"not a JSON object naming the view of these priorities (found {spec!r}){_PRIORITY_NOTE}")

    def check_strays(self) -> None:
        if self.report.is_store:
            for where, what in stray_files(self.folder, self.schema):
                self.warn(where, what)

    def check_checksums(self) -> None:
        manifest = self.folder / MANIFEST
        if self.report.is_store and self.is_refused(MANIFEST) and self.checksums is not False:
            self.warn(MANIFEST, "not read (see its problem), so no file was checked against it")
            return
        if self.report.is_store and (self.checksums or (self.checksums is None and (manifest.exists() or
                                                                                   manifest.is_symlink()))):
            for line, warn in _judge(check_manifest(self.folder, progress=self.progress), self.folder):
                (self.report.warnings if warn else self.report.problems).append(line)
            self.report.checked["checksums"] = len(read_manifest(self.folder)[0] or ())
