"""The memmap_replay on-disk format, version 3.0 (this docstring is the spec; tests parse its examples).

The key words MUST, MUST NOT, SHOULD and MAY are used as in RFC 2119.

Layout
------
A store is a folder::

    meta.json               the single commit point (below)
    steps/<field>.npy       one per step field: shape (rows, *field_shape); row r is one timestep
    meta/<field>.npy        one per episode (meta) field: shape (max_episodes, *field_shape), by slot
    episodes/start.npy      int64 (max_episodes,): first row of the episode held in each slot
    episodes/length.npy     int64 (max_episodes,): number of timesteps (transitions) of that episode
    episodes/end.npy        uint8 (max_episodes,): how it ended: 0 unspecified, 1 terminated, 2 truncated
    episodes/final.npy      bool  (max_episodes,): true when a final-observation row follows its last step
    episodes/id.npy         int64 (max_episodes,): the episode id of the slot's occupant
    episodes/continues.npy  int64 (max_episodes,): 1 + the id of the episode segment this one continues, 0 when
                            it starts an episode (since 1.1; see "Segments")
    writer.lock             empty; a writer holds an exclusive OS lock (flock) on it
    priorities/             OPTIONAL sampler state, not committed data: <name>.npy float64 (max_steps + 1,),
                            a raw priority per row, then the largest seen; <name>.owner.npy int64 (max_episodes,), per
                            slot the episode id those rows' priorities belong to (-1: none); <name>.lock. A reader
                            MUST ignore rows whose owner is not the slot's live episode. After a grow they
                            may be of the capacity before it (fewer entries): an id's owner entry is then at
                            id % len(owner), and rows past the values are unknown.

Every ``.npy`` file MUST be a standard numpy ``.npy`` file (format 1.0 or 2.0, C order, little-endian
numeric or bool dtype, never ``object``): ``numpy.load(path, mmap_mode='r')`` reads it. Nothing in a
store is pickled; a reader MUST NOT unpickle anything.

Sharing files and statistics (optional)
---------------------------------------
Beside the layout a store MAY hold these; a reader MUST NOT need them to read the data:

    card.json          the dataset card (below)
    README.md          the card rendered as Markdown, rewritten whenever card.json is
    checksums.sha256   the manifest (below); a writer deletes it before its first change
    stats/running.npz  running per-field statistics (derived data; ``memmap_replay.sharing.stats``)
    stats/returns.npy  each episode's return, for the card's summary (derived data; ``sharing/returns_cache.py``)
    ratelimit/         a rate limiter's shared counters and limits (run state, not data; never packed)
    training/          saved training states (``buffer.save_training_state``: run state, not data; never packed)

- ``card.json`` is a UTF-8 JSON object; every key is optional and MAY be null: ``name``
  ("namespace/name-vN": ``(NS/)*NAME-vN``, each part of ``[A-Za-z0-9_.-]`` starting with a letter, digit
  or ``_``, N a decimal version), ``description``, ``license``, ``code_url``, ``algorithm`` (strings),
  ``author`` and ``author_email`` (a string or a list of strings), ``env_spec`` (a gymnasium EnvSpec's
  ``to_json()`` parsed into an object), ``observation_space`` and ``action_space`` (an object whose
  ``type`` is Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict or Tuple, with minari's keys
  ``dtype``, ``shape``, ``low``, ``high``, ``n``, ``start``, ``nvec``, ``subspaces``, ``max_length``,
  ``min_length``, ``charset``; an infinite Box bound is the string "inf" or "-inf", and a bound equal
  everywhere MAY be one number), ``ref_min_score`` and ``ref_max_score`` (finite numbers),
  ``num_episodes_average_score`` (an integer >= 0), ``provenance`` (an array, oldest first, of objects
  with string ``kind``, ``source``, ``time`` (ISO 8601 UTC) and ``tool``, plus any details), ``seeds``
  (any JSON) and ``extra`` (an object). A writer MUST keep keys it does not know. card.json and
  README.md are replaced atomically (a ``<name>.<pid>.<random>.tmp`` file, fsync, ``os.replace``); card
  writers take an exclusive ``flock`` on the store folder itself, never ``writer.lock``.
- ``checksums.sha256`` is in GNU ``sha256sum`` format: one line per file, sorted by path, 64 lowercase
  hex digits, two spaces, the path relative to the folder with ``/`` separators; ``sha256sum -c
  checksums.sha256`` run in the folder MUST pass. It covers meta.json, card.json, README.md,
  steps/<field>.npy, meta/<field>.npy, episodes/<name>.npy, priorities/<name>.npy, .owner.npy and .json,
  and stats/ files (at most four levels of names matching ``[A-Za-z0-9_][A-Za-z0-9_.-]*``); never itself,
  writer.lock, priorities/*.lock or *.tmp. Its paths MUST NOT be absolute or hold "..", "." or empty
  parts, and a reader MUST NOT read a listed path that resolves outside the folder. It describes the
  files as they were when it was written.
- ``stats/running.npz`` is a numpy ``.npz`` of plain arrays (read with ``allow_pickle=False``): per
  tracked field ``<field>.count`` (int64) and ``<field>.mean|m2|min|max`` (float64, the field's shape),
  ``covers`` (episode ids below it are folded in), ``episodes`` (how many) and ``store_id``. A reader
  MUST treat it as a cache: a missing, damaged or other store's file is rebuilt from the live episodes.
- A pack archive is a tar file (plain, gzip, bzip2, xz or zstd) holding those files and the manifest, as
  regular files and folders only, under one top folder, in this order: the top folder, checksums.sha256,
  card.json and README.md (when present), meta.json, then every other file. A reader (``unpack``) MUST
  refuse any other member before meta.json (its size could not be checked), duplicates however spelled
  (``./top/x`` is ``top/x``; empty, ``.`` and ``..`` parts are refused), and any member whose declared
  size (for a sparse member, GNU or PAX, its real size) or stored size exceeds its limit, before reading
  its data: 4 MiB for meta.json, 64 MiB for checksums.sha256, card.json and README.md, what the capacity
  in meta.json allows for the others, and in all ``max_bytes``; tar headers take at most 64 KiB per
  member and 64 MiB in all.
- ``overwrite`` deletes ``stats/``, ``ratelimit/``, ``training/`` and ``checksums.sha256`` with the store;
  card.json and README.md stay.

meta.json
---------
Example (a store with one step field and one meta field, three committed episodes)::

    {
      "format": "memmap_replay",
      "version": "1.1",
      "store_id": "2b5c7e0c5d7a4c1fa1d5f0f8f9a3c2d1",
      "schema": {
        "fields": {"obs": {"dtype": "float32", "shape": [8], "default": 0.0}},
        "meta_fields": {"task_id": {"dtype": "int32", "shape": [], "default": null}}
      },
      "capacity": {"max_episodes": 100, "max_timesteps": 1000, "max_steps": 100100, "circular": false},
      "state": {"first_episode": 0, "next_episode": 3, "write_head": 300, "rows": 4096, "commits": 3}
    }

- ``format`` MUST be ``"memmap_replay"``. ``version`` is ``"MAJOR.MINOR"``; a reader MUST refuse a
  major version it does not know and MUST ignore keys it does not know (at any level), so minor
  versions may add keys.
- ``schema`` gives each field's numpy dtype name, shape per row and default (null means zeros).
- ``capacity``: at most ``max_episodes`` live episodes, each of at most ``max_timesteps`` steps, in at
  most ``max_steps`` rows; ``circular`` stores evict whole episodes, oldest first, when full.
- ``state``: the live episodes are those with ids ``first_episode <= id < next_episode``; episode ``id``
  lives in slot ``id % max_episodes``, and ``episodes/id.npy`` at that slot MUST equal ``id``. Its rows
  are ``start .. start + length - 1``, plus row ``start + length`` when ``final`` is set, which holds the
  observation after the last action (other fields hold their defaults there). An episode's rows are
  contiguous and never wrap. ``write_head`` is where the next episode will be placed (or 0 after a wrap);
  ``rows`` is how many rows every ``steps/*.npy`` file holds at least (a file MAY hold more, and its
  header MAY say more); ``commits`` counts commits.
- A reader MUST ignore every row, slot and file content outside the live episodes.

Segments (1.1)
--------------
An episode longer than ``max_timesteps`` MAY be stored as consecutive segments, each an episode of its own
in the table: every segment but the last has end 0 and a final row (the first row of the next segment),
and ``episodes/continues.npy`` of each later segment holds 1 + the id of the segment before it. A reader
of a 1.0 store (``version`` "1.0", where the file MAY be missing, or left stale by a 1.0 writer) MUST take
every entry as 0. A writer that opens a 1.0 store MUST (re)create ``episodes/continues.npy`` with every
entry 0 before its first change, and then commit ``meta.json`` as 1.1; it writes the entry of every slot
it fills. A segment whose predecessor is no longer live still names it.

Compressed fields (2.0)
-----------------------
A step field MAY carry a lossless codec: in the schema, ``"codec": {"name": "zstd", "level": 3}`` (a field
without the key is raw). A store with such a field has ``version`` "2.0"; one without is written as "1.1", so
that 1.x readers open it; a 1.x reader refuses a 2.0 store by its major version, as above. A compressed field
``<field>`` has no ``steps/<field>.npy``; it has two files instead:

- ``steps/<field>.frames.npy``: uint8 (bytes,), the encoded rows (frames) back to back;
- ``steps/<field>.index.npy``: int64 (rows, 2), per row the offset of its frame in the frames file and its
  length; a length of 0 means the row was never written (it reads as zeros; no live row has one). Every written
  row is one zstd frame that records its content size (exactly one row, dtype size x shape bytes) and a
  checksum of its content (a row that does not compress is a frame of raw blocks, a little longer than the row);
  a reader MUST NOT decode more than one row's bytes from a frame.

``state.frames`` has an entry per compressed field: ``{"head": H, "bytes": B}``; the frames file holds at least
B bytes (it grows as the step files do: size first, then header), and the next episode's frames go at byte H,
or at byte 0 when its rows go at row 0 (the first episode, a ring's wrap, after a clear). An episode's frames are
contiguous and in the order of its rows. A writer evicts, oldest first, every live episode whose rows *or*
frames the new episode's overlap, in the eviction commit (step 1 below), before it writes either. A reader MUST
check each index entry before it reads the frame: inside the B bytes, and at most the longest frame of one row
(zstd's compress bound of the row's size, plus 4 bytes of checksum).

With numpy and the zstandard package alone::

    import numpy as np, zstandard
    index = np.load(f"{folder}/steps/image.index.npy", mmap_mode="r")
    frames = np.load(f"{folder}/steps/image.frames.npy", mmap_mode="r")
    start, length = np.load(f"{folder}/episodes/start.npy"), np.load(f"{folder}/episodes/length.npy")
    shape, nbytes = (210, 160, 3), 210 * 160 * 3  # from meta.json's schema
    def row(r):
        offset, size = index[r]
        data = frames[offset:offset + size].tobytes()
        if size == 0:
            return np.zeros(shape, np.uint8)  # never written
        assert zstandard.frame_content_size(data) == nbytes  # never inflate more than a row
        return np.frombuffer(zstandard.ZstdDecompressor().decompress(data), np.uint8).reshape(shape)
    first_episode = np.stack([row(r) for r in range(start[0], start[0] + length[0])])

Edits (3.0)
-----------
Committed episodes MAY be edited in place (``delete_episodes``, ``trim``, ``relabel``, ``compact``): their entries in
``episodes/`` (never ``id.npy``) and their values in ``meta/`` change. ``state.edits`` counts edit commits, two per
edit, and ``state.removed`` counts the episodes of ids ``first_episode <= id < next_episode`` that are removed; both
are absent (0) in a store never edited.

- A **removed** episode has end code 255 in ``episodes/end.npy``. A reader MUST NOT show it (it is not live), and
  its rows are free: a writer MAY overwrite them without evicting it (its entries then name rows it no longer
  has). It keeps its id and slot until its id is evicted. A store with a removed episode (``state.removed`` > 0)
  has ``version`` "3.0", so that 1.x and 2.x readers, which would show it, refuse it.
- **An edit** first writes ``episodes/journal.npy`` (present only while an edit is in flight; a temp file, fsync,
  ``os.replace``): a 1-D array of records, one per edited slot, slots ascending, of the dtype ``[("edit", "<i8"),
  ("slot", "<i8"), ("start", "<i8"), ("length", "<i8"), ("end", "u1"), ("final", "?"), ("continues", "<i8")]``
  followed by ``("meta.<name>", dtype, shape)`` for each meta field in schema order: each record is its slot's whole
  new entry and meta values, and ``edit`` is the new ``state.edits``. It then replaces ``meta.json`` with
  ``state.edits`` odd (the commit point, ``version`` "3.0"), writes the records into the files in place, replaces
  ``meta.json`` with ``state.edits`` even, and removes the journal.
- While ``state.edits`` is odd, a reader MUST take the journal's records over the files' entries and meta values
  of those slots (a record whose ``edit`` is larger means the writer finished this edit and began another since
  meta.json was read: read meta.json again). A writer that finds ``state.edits`` odd MUST write the records into the
  files and commit ``meta.json`` with ``state.edits`` even before any other change. A journal while
  ``state.edits`` is even is stale: ignore it.
- A reader that took a snapshot of the table MUST read it again, and MUST NOT return a batch gathered, across a
  change of ``state.edits``: the edit may have moved rows (``compact``) or changed meta values under it.
- ``add_field`` writes ``steps/<name>.npy`` (or ``meta/<name>.npy``) first, a file no schema names yet, then
  commits ``meta.json`` with the field in the schema: a plain commit, no journal.

Commit protocol
---------------
A writer holds ``writer.lock``. To commit episodes it (1) if it must evict episodes to make room,
first replaces ``meta.json`` with ``first_episode`` advanced past them; (2) grows the step files if
needed (file size first, then the header's row count); (3) writes the rows (a compressed field's frames,
then their index entries), then the slot's entries in ``episodes/`` and ``meta/``; (4) replaces
``meta.json`` atomically: write a fresh temp file ``meta.json.<pid>.<random hex>.tmp`` (created
exclusively), flush, fsync it, ``os.replace``. A process
killed at any instant therefore leaves the last committed ``meta.json`` describing intact data; the next
writer removes the temp files (``meta.json*.tmp``) it left when it takes the lock. With ``durable=True``
the writer also fsyncs the data files before step (4) and the folder after it, so a commit survives a
power cut, not only a process crash.

Folders from strangers
----------------------
A store folder MAY come from anyone; a reader and a writer trust nothing in it. The path given to open
a store is resolved once and MAY itself be a link (that is how a store goes on another disk); inside it:

- A reader opens regular files only: it opens them without blocking (``O_NONBLOCK``) and checks them
  with ``fstat``, so a FIFO, device or socket is refused, never waited on. It follows a link only when
  the link resolves inside the folder; a link leading out (``/dev/zero``, a file elsewhere, a dangling
  or looping link) is refused.
- Reads are bounded: ``meta.json``, ``card.json``, ``priorities/*.json`` and ``ratelimit/*.json`` are at
  most 4 MiB each (``folderio.MAX_JSON_BYTES``), ``checksums.sha256`` at most 4 MiB;
  ``stats/running.npz`` at most 64 MiB, and its members MUST be the names above, each at most its
  array's bytes plus 4 KiB: they are checked before any member is inflated. A ``.npy`` header is read
  under numpy's header size limit.
- A writer writes only inside the folder: every file it opens for writing is reached from the folder's
  descriptor without following links (``O_NOFOLLOW`` on every part of the path); temp files are fresh
  names created with ``O_EXCL``, then renamed; ``writer.lock`` is opened without following links.
- Before its first write, a writer refuses a folder whose entries (``meta.json``, ``writer.lock``,
  ``steps/``, ``meta/``, ``episodes/`` and their files, ``priorities/``, ``stats/``, ``ratelimit/``,
  ``training/``, ``card.json``, ``README.md``, ``checksums.sha256``) are links of any kind, special files, or regular
  files with more than one hard link. So a field file MUST NOT be linked to another disk: put the whole
  folder there instead (or mount the disk at the folder).
- A refused entry raises ``UnsafeEntryError`` naming it; ``verify`` reports every such entry, so a folder
  ``verify`` calls OK is one the library neither leaks from nor hangs on. A store opened read-only
  never writes a byte (a sampler asked to ``persist=True`` there is refused).
"""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from . import folderio
from ..errors import CorruptStoreError, SchemaError, UnsupportedFormatError
from .schema import NAME_PATTERN, FieldSpec, Schema

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Capacity", "State", "StoreMeta", "read_meta", "write_meta"]

FORMAT_NAME = "memmap_replay"
FORMAT_VERSION = "3.0"  # the spec's version; a store without removed episodes or an edit in flight is written as
ENCODED_VERSION = "2.0"  # 2.0 when it has compressed fields, else as 1.1 (``StoreMeta.version``): older readers open it
PLAIN_VERSION = "1.1"  # the version of a store without compressed fields: older readers (1.x) open it
READ_MAJORS = ("1", "2", "3")
MAJORS_TEXT = f"{', '.join(READ_MAJORS[:-1])} and {READ_MAJORS[-1]}"  # "1, 2 and 3"
META_FILE = "meta.json"
LOCK_FILE = "writer.lock"
STEPS_DIR, META_DIR, EPISODES_DIR, PRIORITIES_DIR = "steps", "meta", "episodes", "priorities"
# the episode table: name -> dtype, one entry per slot
TABLE: dict[str, np.dtype] = {"start": np.dtype("int64"), "length": np.dtype("int64"), "end": np.dtype("uint8"),
         "final": np.dtype("bool"), "id": np.dtype("int64"), "continues": np.dtype("int64")}
# the table column a 1.0 store may lack (or hold stale): read as zeros there
LINKS = "continues"
LINKS_SINCE = (1, 1)
END_CODES = {None: 0, "terminated": 1, "truncated": 2}
END_NAMES = {code: name for name, code in END_CODES.items()}
REMOVED = 255  # the end code of a removed episode (``delete_episodes``; 3.0): no reader shows it
JOURNAL_FILE = "journal.npy"  # in episodes/: the new entries of the edit in flight (see "Edits")
STATS_DIR, _MANIFEST_FILE, RATELIMIT_DIR, TRAINING_DIR = "stats", "checksums.sha256", "ratelimit", "training"
# what overwrite=True may delete (card.json and README.md are the user's words: they stay)
_OWNED = (META_FILE, STEPS_DIR, META_DIR, EPISODES_DIR, PRIORITIES_DIR, STATS_DIR, _MANIFEST_FILE, RATELIMIT_DIR,
          TRAINING_DIR)


@dataclass(frozen=True)
class Capacity:
    max_episodes: int
    max_timesteps: int
    max_steps: int
    circular: bool


@dataclass
class State:
    first_episode: int = 0
    next_episode: int = 0
    write_head: int = 0
    rows: int = 0
    commits: int = 0
    # per compressed field: {"head": where the next episode's frames go, "bytes": bytes its frames file holds}
    frames: dict[str, dict[str, int]] = field(default_factory=dict)
    # edit commits, two per edit: odd while an edit's journal is in flight (see "Edits"); 0 in a store never edited
    edits: int = 0
    # how many episodes with ids first_episode <= id < next_episode are removed (end code REMOVED)
    removed: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.frames:  # (a store without codecs keeps 1.1's state)
            del data["frames"]
        for key in ("edits", "removed"):  # (a store never edited keeps the state older readers know)
            if not data[key]:
                del data[key]
        return data

    @property
    def journal(self) -> bool:
        """An edit's journal is in flight: its entries override the episode table's and meta files' (odd ``edits``)."""
        return bool(self.edits & 1)


@dataclass
class StoreMeta:
    schema: Schema
    capacity: Capacity
    state: State
    store_id: str
    # False for a 1.0 store: its episodes/continues.npy is absent or untrusted, every entry reads as 0
    links: bool = True

    @classmethod
    def new(cls, schema: Schema, capacity: Capacity) -> "StoreMeta":
        frames = {name: {"head": 0, "bytes": 0} for name in schema.encoded}
        return cls(schema, capacity, State(frames=frames), uuid.uuid4().hex)

    @property
    def version(self) -> str:
        """The version this store is written as: 3.0 with removed episodes or an edit in flight, else 2.0 with
        compressed fields, else 1.1 (which 1.x readers open)."""
        if self.state.removed or self.state.journal:
            return FORMAT_VERSION
        return ENCODED_VERSION if self.schema.encoded else PLAIN_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": self.version,
            "store_id": self.store_id,
            "schema": self.schema.to_json(),
            "capacity": asdict(self.capacity),
            "state": self.state.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "meta.json") -> "StoreMeta":
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise UnsupportedFormatError(f"{where} must declare format {FORMAT_NAME!r} (got {got!r})")
        version = str(data.get("version", ""))
        major = version.split(".")[0]
        if major not in READ_MAJORS:
            raise UnsupportedFormatError(
                f"{where} has format version {version!r}; this memmap_replay reads major versions "
                f"{MAJORS_TEXT} only; upgrade memmap_replay to open it"
            )
        try:
            schema = Schema.from_json(data["schema"])
            capacity = Capacity(**{key: data["capacity"][key] for key in Capacity.__dataclass_fields__})
            optional = {"frames": None, "edits": 0, "removed": 0}  # (keys a 1.x store's state has not)
            state = State(**{key: data["state"].get(key, optional[key]) if key in optional else data["state"][key]
                             for key in State.__dataclass_fields__ if key != "frames"})
            state.frames = _frames_state(data["state"].get("frames", {}), schema, where)
            store_id = str(data["store_id"])
        except SchemaError as error:
            raise CorruptStoreError(f"{where} is missing or has malformed entries: {error}") from None
        except (KeyError, TypeError, AttributeError) as error:
            raise CorruptStoreError(f"{where} is missing or has malformed entries ({error!r})") from None
        if schema.encoded and major == "1":
            raise CorruptStoreError(f"{where} declares version {version!r} but has compressed fields "
                                    f"{sorted(schema.encoded)} (they are a 2.0 feature): it was altered by hand")
        if (state.removed or state.edits & 1) and major != "3":
            raise CorruptStoreError(f"{where} declares version {version!r} but has removed episodes or an edit in "
                                    f"flight (a 3.0 feature): it was altered by hand")
        _check_numbers(capacity, state, where)
        return cls(schema, capacity, state, store_id, links=has_links(version))


def _frames_state(data: Any, schema: Schema, where: str) -> dict[str, dict[str, int]]:
    """state.frames as meta.json holds it: an entry per compressed field (a 2.0 writer writes one from the start)."""
    if not isinstance(data, dict) or set(data) - set(schema.encoded):
        raise CorruptStoreError(f"{where} must have in state.frames an entry per compressed field of "
                                f"{sorted(schema.encoded)} (got {str(data)[:200]})")
    frames = {}
    for name in schema.encoded:
        entry = data.get(name)  # (a 2.0 writer writes one for every compressed field, from the store's creation)
        if (not isinstance(entry, dict) or any(type(entry.get(key)) is not int for key in ("head", "bytes"))
                or not 0 <= entry["head"] <= entry["bytes"] < 2**62):
            raise CorruptStoreError(f"{where} must have in state.frames[{name!r}] integers 0 <= head <= bytes < 2**62 "
                                    f"(got {str(entry)[:200]})")
        frames[name] = {"head": entry["head"], "bytes": entry["bytes"]}
    return frames


def has_links(version: str) -> bool:
    """Whether a store of format ``version`` ("MAJOR.MINOR") keeps segment links (``episodes/continues.npy``)."""
    parts = version.split(".") if version.count(".") == 1 else ["", ""]
    if not all(part.isdigit() and len(part) < 6 for part in parts):
        return False
    return (int(parts[0]), int(parts[1])) >= LINKS_SINCE


def _check_numbers(capacity: Capacity, state: State, where: str) -> None:
    ints = {**asdict(capacity), **asdict(state)}
    ints.pop("circular")
    ints.pop("frames")
    if not isinstance(capacity.circular, bool) or any(type(v) is not int or not 0 <= v < 2**62 for v in ints.values()):
        raise CorruptStoreError(f"{where} must hold non-negative integers below 2**62 in "
                                f"capacity and state (got {ints})")
    if capacity.max_episodes < 1 or capacity.max_timesteps < 1 or capacity.max_steps < capacity.max_timesteps + 1:
        raise CorruptStoreError(
            f"{where} has an impossible capacity: max_episodes and max_timesteps must be >= 1 and max_steps >= "
            f"max_timesteps + 1 (got {asdict(capacity)})"
        )
    live = state.next_episode - state.first_episode
    if (live < 0 or live > capacity.max_episodes or state.write_head > capacity.max_steps
            or state.removed > max(live, 0)):
        raise CorruptStoreError(f"{where} has inconsistent counters: {asdict(state)} for capacity {asdict(capacity)}")


def read_meta(folder: Path) -> StoreMeta:
    path = folder / META_FILE
    try:
        data = folderio.read_json(folder, path)
    except FileNotFoundError:
        raise CorruptStoreError(f"{path} is missing: the folder is not a committed store") from None
    except CorruptStoreError as error:
        raise type(error)(f"{error}; the store's metadata is damaged") from None
    return StoreMeta.from_json(data, str(path))


def write_meta(folder: Path, meta: StoreMeta, *, durable: bool = False) -> None:
    """Replace meta.json atomically: a fresh temp file, fsync, rename (and fsync the folder if durable)."""
    payload = json.dumps(meta.to_json(), indent=1).encode("utf-8")
    folderio.write_atomic(folder, folder / META_FILE, payload, durable=durable)


def _fsync_folder(folder: Path) -> None:
    with folderio.errors_named(folder, "flush"):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---- .npy files ------------------------------------------------------------------------------------


# a name in steps/: a field's .npy, or a compressed field's two
STEP_FILE = re.compile(rf"{NAME_PATTERN.pattern}(\.index|\.frames)?\.npy")
INDEX, FRAMES = "index", "frames"  # the groups of a compressed field's two files (both in steps/)
INDEX_SPEC = (np.dtype("int64"), (2,))  # a compressed field's index: (offset, length) per row
FRAMES_DTYPE = np.dtype("uint8")


def layout(schema: Schema, capacity: Capacity, *, links: bool = True, state: State | None = None
           ) -> Iterator[tuple[str, FieldSpec, Path, int | None]]:
    """Every .npy file of a store: (group, spec, path in the store, rows; None = the step rows). The groups
    are the folders, and ``INDEX``/``FRAMES`` for a compressed field's files (the spec is then the file's:
    named as the field, of the file's dtype and shape; the frames' rows are ``state``'s bytes, 0 without it).
    ``links=False`` (a 1.0 store): without ``episodes/continues.npy``."""
    for spec in schema.fields.values():
        if spec.codec is None:
            yield STEPS_DIR, spec, Path(STEPS_DIR, f"{spec.name}.npy"), None
            continue
        yield INDEX, FieldSpec(spec.name, *INDEX_SPEC), Path(STEPS_DIR, f"{spec.name}.index.npy"), None
        nbytes = state.frames.get(spec.name, {}).get("bytes", 0) if state is not None else 0
        yield FRAMES, FieldSpec(spec.name, FRAMES_DTYPE), Path(STEPS_DIR, f"{spec.name}.frames.npy"), nbytes
    for spec in schema.meta_fields.values():
        yield META_DIR, spec, Path(META_DIR, f"{spec.name}.npy"), capacity.max_episodes
    for name, dtype in TABLE.items():
        if name == LINKS and not links:
            continue
        yield EPISODES_DIR, FieldSpec(name, dtype), Path(EPISODES_DIR, f"{name}.npy"), capacity.max_episodes


def _writer_entries(schema: Schema) -> dict[str, bool]:
    """The entries a writer may write (path in the store -> True for a file, False for a folder): each must be a
    file or folder of its own, never a link, a special file or a shared hard link."""
    entries = {META_FILE: True, LOCK_FILE: True, _MANIFEST_FILE: True, "card.json": True, "README.md": True,
               STEPS_DIR: False, META_DIR: False, EPISODES_DIR: False, PRIORITIES_DIR: False, STATS_DIR: False,
               RATELIMIT_DIR: False, TRAINING_DIR: False, f"{STATS_DIR}/running.npz": True}
    capacity = Capacity(1, 1, 2, False)  # the layout's names do not depend on the capacity
    entries.update((str(path), True) for _, _, path, _ in layout(schema, capacity))
    entries[f"{EPISODES_DIR}/{JOURNAL_FILE}"] = True
    return entries


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A standard .npy header; numpy pads it so the first dimension can grow without moving data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                  "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _create_npy(folder: Path, path: Path, spec: FieldSpec, rows: int) -> None:
    """A new .npy of ``rows`` rows whose body is a hole in the file (no disk used until written)."""
    header = npy_header(spec.dtype, (rows, *spec.shape))
    fd = folderio.open_write(folder, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, doing="create")
    try:
        with folderio.errors_named(path, "create"):
            folderio.write_all(fd, header)
            os.ftruncate(fd, len(header) + rows * spec.row_nbytes)
    finally:
        os.close(fd)


def _open_npy(folder: Path | None, path: Path) -> io.BufferedReader:
    """A binary file object of a .npy inside ``folder`` (a regular file; links only inside the folder)."""
    try:
        fd = folderio.open_read(Path(path).parent if folder is None else folder, path)
    except FileNotFoundError:
        raise CorruptStoreError(f"{path} is missing; the store is damaged (restore the file from a copy)") from None
    return os.fdopen(fd, "rb")


def parse_npy_header(file: IO[bytes]) -> tuple[np.dtype, tuple[int, ...], bool]:
    """(dtype, shape, fortran order) of the .npy header at ``file``'s position, leaving it after the header.
    Anything malformed is a ValueError: numpy's parser also raises SyntaxError, tokenize's TokenError, ...
    for headers a stranger wrote, and reads at most its header size limit."""
    try:
        version = np.lib.format.read_magic(file)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version[0]}.{version[1]}, not 1.0 or 2.0")
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(file)
    except (OSError, ValueError):
        raise
    except Exception as error:  # (a header is data from anyone: every way it can be malformed)
        raise ValueError(f"{type(error).__name__}: {error}"[:300]) from None
    return dtype, tuple(shape), fortran


def read_npy_header(path: Path, folder: Path | None = None) -> tuple[int, np.dtype, tuple[int, ...], int]:
    """(header length, dtype, shape, file size) of a .npy file inside ``folder`` (by default its own folder),
    with clear errors for damage."""
    with _open_npy(folder, path) as file:
        try:
            dtype, shape, fortran = parse_npy_header(file)
            offset = file.tell()
            # the size after the header: a writer grows a file's size before its header's row count, so a
            # header read first never declares rows beyond this size (read before, a grow in between did)
            size = os.fstat(file.fileno()).st_size
        except (ValueError, OSError) as error:
            raise CorruptStoreError(f"{path} is not a readable .npy file ({error})") from None
    if fortran:
        raise CorruptStoreError(f"{path} must be in C order (got Fortran order)")
    return offset, dtype, tuple(shape), size


@dataclass
class NpyFile:
    """A field's .npy file: checked header, a read-only map, and positioned writes for a writer."""

    path: Path
    spec: FieldSpec
    offset: int
    rows: int
    writable: bool
    folder: Path
    size: int = 0  # bytes on disk when opened
    fd: int = -1  # for writing: opened at the first write, without following links
    _map: np.ndarray | None = None
    _random_map: np.ndarray | None = None  # a second map, marked MADV_RANDOM (no read-around on a fault)

    @classmethod
    def open(cls, folder: Path, path: Path, spec: FieldSpec, min_rows: int, *, writable: bool) -> "NpyFile":
        offset, dtype, shape, size = read_npy_header(path, folder)
        if dtype != spec.dtype or tuple(shape[1:]) != spec.shape:
            raise CorruptStoreError(
                f"{path} must hold {spec.dtype} rows of shape {spec.shape} as meta.json says "
                f"(got {dtype} of shape {tuple(shape[1:])})"
            )
        rows = shape[0] if shape else 0
        needed = offset + min_rows * spec.row_nbytes
        if rows < min_rows or size < needed:
            raise CorruptStoreError(
                f"{path} is truncated: it must hold at least {min_rows} rows ({needed} bytes) "
                f"(got {rows} rows in the header, {size} bytes on disk)"
            )
        return cls(path, spec, offset, rows, writable, folder, size)

    def array(self, *, random: bool = False) -> np.ndarray:
        """A read-only map of all rows (no data is read until indexed). ``random``: a map of its own marked
        ``MADV_RANDOM``, so that a page fault reads that page, not the disk's whole readahead window around
        it (``read_ahead_kb``, up to MiBs): for readers of scattered rows that advise their reads."""
        current = self._random_map if random else self._map
        if current is None or len(current) != self.rows:
            if self.rows == 0:
                return np.empty((0, *self.spec.shape), self.spec.dtype)
            with _open_npy(self.folder, self.path) as file, folderio.errors_named(self.path, "map"):
                try:
                    mapped = np.memmap(file, dtype=self.spec.dtype, mode="r", offset=self.offset,
                                       shape=(self.rows, *self.spec.shape))
                except ValueError as error:  # mmap's "length is greater than file size": cut short since opened
                    raise CorruptStoreError(
                        f"{self.path} is shorter than the {self.rows} rows it held when the store was opened "
                        f"({error}); it was truncated or replaced: `python -m memmap_replay verify` lists the "
                        f"problems") from None
            if random:
                try:
                    mapped._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]  # numpy's private map
                except (AttributeError, OSError):  # advice only (no MADV_RANDOM on this platform, ...)
                    pass
            # a plain ndarray over the map (it keeps the map alive): indexing skips np.memmap's wrapper
            current = mapped.view(np.ndarray)
            if random:
                self._random_map = current
            else:
                self._map = current
        return current

    def grow(self, rows: int) -> None:
        """Make room for ``rows`` rows: file size first, then the header (a crash between is harmless)."""
        header = npy_header(self.spec.dtype, (rows, *self.spec.shape))
        if len(header) != self.offset:
            raise CorruptStoreError(f"{self.path}: cannot grow in place (header would move from {self.offset} to "
                                    f"{len(header)} bytes)")
        fd = self._writer()
        with folderio.errors_named(self.path, "grow"):
            os.ftruncate(fd, self.offset + rows * self.spec.row_nbytes)
            folderio.write_all(fd, header, 0)
        self.rows = rows

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        fd = self._writer()
        with folderio.errors_named(self.path, "write"):
            folderio.write_all(fd, np.ascontiguousarray(rows), self.offset + start * self.spec.row_nbytes)

    def _writer(self) -> int:
        if self.fd < 0:
            self.fd = folderio.open_write(self.folder, self.path, os.O_RDWR)
        return self.fd

    def sync(self) -> None:
        if self.fd >= 0:
            with folderio.errors_named(self.path, "flush"):
                os.fsync(self.fd)

    def close(self) -> None:
        self._map = self._random_map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
