"""Fault injection at every I/O call site, the way SQLite tests its I/O layer.

A scenario runs once with no fault to count the library's calls of ``os.open``, ``os.write``, ``os.pwrite``,
``os.fsync``, ``os.replace``, ``os.rename``, ``os.mkdir``, ``os.ftruncate``, ``os.posix_fallocate``, the
builtin ``open``, and the ``write`` / ``flush`` of the file objects it and ``os.fdopen`` return (only
calls made from memmap_replay's own code count: the caller's module is checked). Then, for every n, it runs
again with the n-th call failing with ENOSPC, EACCES or EIO in turn (every one of them at every n with
MEMMAP_REPLAY_FAULTS=all) and, for every n that is an ``os.write`` or ``os.pwrite``, with that call writing
only half of its bytes. ``os.fdopen`` does no I/O (it is not a fault point); the first four writes of each
file object count (np.savez makes ~150 small writes to one file from one call site). After each run:

- only ``ReplayError`` subclasses escape, and the one for the errno (DiskFullError, ReadOnlyError,
  StoreIOError); a short write is no error at all (the library writes the rest);
- nothing is left half-written: no temporary file anywhere, meta.json valid, the card, the manifest, the
  persisted priorities and an archive each either the old one or the new one, whole;
- every committed episode reads back byte for byte, from a fresh EpisodeStore here and, for the store
  scenario, from a fresh process (one child reads every folder the loop left).

The scenario is cut into stages (create, store and ring eviction / prioritized sampling with persisted
priorities / pack / unpack / card / manifest), each started from a copy of a folder made without faults, so
that each injection point runs only its own stage.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import DiskFullError, ReadOnlyError, ReplayBuffer, ReplayError, StoreIOError
from memmap_replay.sharing.card import read_card, update_card
from memmap_replay.sharing.checksums import check_manifest, write_manifest
from memmap_replay.sharing.pack import pack, unpack
from memmap_replay.core.store import EpisodeStore

from conftest import SMALL_FIELDS, SMALL_META, episode_arrays

OS_CALLS = ("open", "write", "pwrite", "fsync", "replace", "rename", "mkdir", "ftruncate", "posix_fallocate")
ERRORS = {"ENOSPC": (errno.ENOSPC, DiskFullError), "EACCES": (errno.EACCES, ReadOnlyError),
          "EIO": (errno.EIO, StoreIOError)}
# every errno at every call (slow: ~2,000 cases); by default each call fails with one of them in turn
EVERY_ERRNO = os.environ.get("MEMMAP_REPLAY_FAULTS") == "all"
MAX_EPISODES, EPISODES = 3, 5  # a ring of three slots, five episodes stored: two evicted


def length_of(number: int) -> int:
    return 2 + number % 3


def ours(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == "memmap_replay" or name.startswith("memmap_replay.")


class Faults:
    """Wraps the os calls, the builtin open and the file objects they return; counts the library's calls and
    makes the ``fail_at``-th one fail (``kind``: an errno name, or "short" for a short os.write/os.pwrite)."""

    def __init__(self, monkeypatch):
        self.active, self.calls, self.names, self.fail_at, self.kind, self.fired = False, 0, [], 0, None, None
        for name in OS_CALLS:
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self.wrap(name, getattr(os, name)))
        monkeypatch.setattr(builtins, "open", self.wrap("builtin open", builtins.open))
        real_fdopen = os.fdopen  # no I/O of its own (not a fault point), but its file's writes are

        def fdopen(*args, **kwargs):
            file = real_fdopen(*args, **kwargs)
            return FileProxy(file, self) if self.active and ours(sys._getframe(1)) else file

        monkeypatch.setattr(os, "fdopen", fdopen)

    def start(self, fail_at: int = 0, kind: str | None = None) -> None:
        self.active, self.calls, self.names, self.fail_at, self.kind, self.fired = True, 0, [], fail_at, kind, None

    def stop(self) -> None:
        self.active = False

    def hit(self, name: str, short=None):
        """Count one call; raise the injected error if it is the one to fail (or return ``short``'s result)."""
        self.calls += 1
        self.names.append(name)
        if self.calls != self.fail_at:
            return None
        if self.kind == "short":
            if short is not None:
                self.fired = name
                return short
            return None
        self.fired = name
        code = ERRORS[self.kind][0]
        raise OSError(code, os.strerror(code))

    def wrap(self, name: str, real):
        faults = self

        def fake(*args, **kwargs):
            if not faults.active or not ours(sys._getframe(1)):
                return real(*args, **kwargs)
            short = None
            if name in ("write", "pwrite") and faults.kind == "short" and faults.calls + 1 == faults.fail_at:
                data = memoryview(args[1]).cast("B")
                if len(data) > 1:  # write the first half only, and say so
                    short = lambda: real(args[0], data[:len(data) // 2], *args[2:])  # noqa: E731
            result = faults.hit(name, short)
            if result is not None:
                return result()
            result = real(*args, **kwargs)
            return FileProxy(result, faults) if name == "builtin open" else result

        return fake


class FileProxy:
    """A file object of the library's whose write and flush count as calls (whoever calls them: numpy's
    np.save and zipfile write through it)."""

    WRITES = 4  # writes of one stream that count (np.savez makes ~150 small writes from one call site)

    def __init__(self, file, faults: Faults):
        self._file, self._faults, self._writes = file, faults, 0

    def write(self, data):
        self._writes += 1
        if self._faults.active and self._writes <= self.WRITES:
            self._faults.hit("file.write")
        return self._file.write(data)

    def flush(self):
        if self._faults.active:
            self._faults.hit("file.flush")
        return self._file.flush()

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self._file)

    def __enter__(self):
        self._file.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._file.__exit__(*exc_info)


# ---- checks ------------------------------------------------------------------------------------------------


def temporaries(root: Path) -> list[str]:
    """Files a write leaves only when it is interrupted: *.tmp, *.partial, hidden siblings of a target."""
    found = []
    for path in root.rglob("*"):
        name = path.name
        if name.endswith((".tmp", ".partial")) or ".partial." in name or (name.startswith(".") and "-" in name):
            found.append(str(path.relative_to(root)))
    return found


def episodes_of(folder: Path) -> dict[int, dict[str, np.ndarray]]:
    """Every live episode of the store at ``folder`` (by its number), read from a fresh read-only store."""
    store = EpisodeStore.open(folder, "r")
    try:
        table = store.live_table()
        out = {}
        for start, length in zip(table.start.tolist(), table.length.tolist()):
            data = {name: np.array(store.step_array(name)[start:start + length]) for name in SMALL_FIELDS}
            out[int(data["reward"][0]) // 1000] = data
        return out
    finally:
        store.close()


def ring_after_failure(done: list[int], next_one: int | None) -> list[list[int]]:
    """What a ring may hold after the commit of ``next_one`` failed: the episodes before, the episodes after
    (the failure came once all was committed), or those before less the ones its eviction had already
    committed (a ring commits an eviction before it overwrites the evicted rows)."""
    before, allowed = ring(done), [ring(done)]
    if next_one is not None:
        after = ring(done + [next_one])
        allowed += [after, [number for number in after if number != next_one]]
    return allowed or [before]


def check_episodes(folder: Path, allowed: list[list[int]]) -> str | None:
    """None if the live episodes are one of the ``allowed`` lists and each is byte for byte what was stored."""
    try:
        found = episodes_of(folder)
    except ReplayError as error:
        return f"the store cannot be read: {error!r}"
    if sorted(found) not in [sorted(numbers) for numbers in allowed]:
        return f"live episodes {sorted(found)}, expected one of {allowed}"
    for number, data in found.items():
        expected = episode_arrays(number, length_of(number))
        for name in SMALL_FIELDS:
            if data[name].tobytes() != expected[name].tobytes() or data[name].shape != expected[name].shape:
                return f"episode {number} field {name} differs from what was stored"
    return None


def store_episode(buffer: ReplayBuffer, number: int) -> None:
    buffer.store_episode(**episode_arrays(number, length_of(number)), task_id=number)


def make_store(folder: Path, numbers) -> None:
    with ReplayBuffer(folder, max_episodes=MAX_EPISODES, max_timesteps=4, fields=SMALL_FIELDS,
                      meta_fields=SMALL_META, circular=True) as buffer:
        for number in numbers:
            store_episode(buffer, number)


def ring(numbers: list[int]) -> list[int]:
    return numbers[-MAX_EPISODES:]


# ---- stages: each returns a checker of the folder it leaves ------------------------------------------------


class Stage:
    """One stage of the scenario: ``prepare`` (no faults) makes the starting state in ``root``, ``run`` is
    what the faults hit, ``check`` returns a list of problems (empty: all is well)."""

    def prepare(self, root: Path) -> None:
        pass

    def run(self, root: Path) -> None:
        raise NotImplementedError

    def check(self, root: Path, failed: bool) -> list[str]:
        raise NotImplementedError


class CreateStoreEvict(Stage):
    """Create a ring store, store five episodes in it (the last two evict the first two), close it."""

    def run(self, root):
        self.done = []
        buffer = None
        try:
            buffer = ReplayBuffer(root / "store", max_episodes=MAX_EPISODES, max_timesteps=4, fields=SMALL_FIELDS,
                                  meta_fields=SMALL_META, circular=True)
            for number in range(EPISODES):
                store_episode(buffer, number)
                self.done.append(number)
        finally:
            if buffer is not None:
                buffer.close()

    def check(self, root, failed):
        folder = root / "store"
        if not (folder / "meta.json").exists():
            return [] if not self.done else ["meta.json is gone after episodes were committed"]
        next_one = len(self.done) if len(self.done) < EPISODES else None
        problem = check_episodes(folder, ring_after_failure(self.done, next_one))
        return [problem] if problem else []


class Priorities(Stage):
    """A prioritized sampler with persisted priorities: draw, update the priorities, store an episode (the
    ring evicts one), update again, close; a new sampler then reopens the priorities."""

    def prepare(self, root):
        make_store(root / "store", range(MAX_EPISODES))

    def run(self, root):
        self.stored = False
        with ReplayBuffer.from_folder(root / "store") as buffer:
            sampler = buffer.sampler("prioritized", persist=True, name="p", seed=0)
            try:
                batch = sampler.batch(4)
                sampler.update_priorities(batch["_key"], np.arange(1.0, 5.0))
                store_episode(buffer, MAX_EPISODES)
                self.stored = True
                batch = sampler.batch(4)
                sampler.update_priorities(batch["_key"], np.arange(2.0, 6.0))
            finally:
                sampler.close()

    def check(self, root, failed):
        folder = root / "store"
        problems = []
        first = list(range(MAX_EPISODES))
        allowed = [ring(first + [MAX_EPISODES])] if self.stored else ring_after_failure(first, MAX_EPISODES)
        problem = check_episodes(folder, allowed)
        if problem:
            problems.append(problem)
        try:  # the persisted priorities reopen (whatever the fault left, it is a file a sampler accepts)
            with ReplayBuffer.from_folder(folder) as buffer:
                buffer.sampler("prioritized", persist=True, name="p", seed=0).sample(2)
        except ReplayError as error:
            problems.append(f"the persisted priorities do not reopen: {error!r}")
        return problems


class Pack(Stage):
    def prepare(self, root):
        make_store(root / "store", range(EPISODES))
        write_manifest(root / "store")

    def run(self, root):
        pack(root / "store", root / "a.tar")

    def check(self, root, failed):
        problems = []
        if (root / "a.tar").exists():
            try:
                unpack(root / "a.tar", root / "check")
            except ReplayError as error:
                return [f"the archive left behind does not unpack: {error!r}"]
            problem = check_episodes(root / "check", [ring(list(range(EPISODES)))])
            if problem:
                problems.append("the archive: " + problem)
        elif not failed:
            problems.append("pack raised nothing, yet wrote no archive")
        problem = check_episodes(root / "store", [ring(list(range(EPISODES)))])
        return problems + ([problem] if problem else [])


class Unpack(Stage):
    def prepare(self, root):
        make_store(root / "store", range(EPISODES))
        pack(root / "store", root / "a.tar")
        shutil.rmtree(root / "store")

    def run(self, root):
        unpack(root / "a.tar", root / "out")

    def check(self, root, failed):
        out = root / "out"
        if not out.exists() or not any(out.iterdir()):
            return [] if failed else ["unpack raised nothing, yet left no store"]
        problem = check_episodes(out, [ring(list(range(EPISODES)))])
        return [problem] if problem else []


class Card(Stage):
    OLD, NEW = "faults/old-v0", "faults/new-v1"

    def prepare(self, root):
        make_store(root / "store", range(EPISODES))
        update_card(root / "store", name=self.OLD)
        write_manifest(root / "store")  # so that the card's write refreshes it too

    def run(self, root):
        update_card(root / "store", name=self.NEW, description="after a fault, or not")

    def check(self, root, failed):
        problems = []
        try:
            card = read_card(root / "store")
        except ReplayError as error:
            return [f"the card cannot be read: {error!r}"]
        if card is None or card.name not in (self.OLD, self.NEW) or (not failed and card.name != self.NEW):
            problems.append(f"the card is {card!r}")
        readme = (root / "store" / "README.md").read_text()
        body = readme.split("\n---\n\n", 1)[-1]  # after the front matter
        if not readme.startswith("---\n") or not body.startswith(("# " + self.OLD, "# " + self.NEW)):
            problems.append(f"README.md starts {readme[:40]!r}")
        if not failed and check_manifest(root / "store"):
            problems.append(
                f"the manifest is stale after a card write that succeeded: {check_manifest(root / 'store')}")
        problem = check_episodes(root / "store", [ring(list(range(EPISODES)))])
        return problems + ([problem] if problem else [])


class Manifest(Stage):
    def prepare(self, root):
        make_store(root / "store", range(EPISODES))
        update_card(root / "store", name="faults/card-v0")

    def run(self, root):
        write_manifest(root / "store")

    def check(self, root, failed):
        problems = []
        if (root / "store" / "checksums.sha256").exists():
            findings = check_manifest(root / "store")
            if findings:
                problems.append(f"the manifest left behind is not whole: {findings[:3]}")
        elif not failed:
            problems.append("write_manifest raised nothing, yet wrote no manifest")
        problem = check_episodes(root / "store", [ring(list(range(EPISODES)))])
        return problems + ([problem] if problem else [])


STAGES = {"create_store_evict": CreateStoreEvict, "priorities": Priorities, "pack": Pack, "unpack": Unpack,
          "card": Card, "manifest": Manifest}


def run_case(stage: Stage, template: Path, root: Path, faults: Faults, fail_at: int, kind: str) -> list[str]:
    shutil.copytree(template, root)
    faults.start(fail_at, kind)
    error = None
    try:
        stage.run(root)
    except Exception as caught:  # noqa: BLE001 - whatever escapes is judged below
        error = caught
    finally:
        faults.stop()
    where = f"{kind} at call {fail_at} ({faults.fired})"
    problems = []
    if error is not None:
        if kind == "short":
            problems.append(f"a short write is no error, yet {error!r} escaped")
        elif not isinstance(error, ERRORS[kind][1]):
            problems.append(f"{type(error).__name__} escaped (expected {ERRORS[kind][1].__name__}): {error!r:.300}")
    problems += [f"left {name}" for name in temporaries(root)]
    problems += stage.check(root, failed=error is not None)
    return [f"{where}: {problem}" for problem in problems]


@pytest.mark.parametrize("name", list(STAGES))
def test_a_fault_at_every_call_of_each_stage(name, tmp_path, monkeypatch):
    stage = STAGES[name]()
    template = tmp_path / "template"
    template.mkdir()
    stage.prepare(template)
    faults = Faults(monkeypatch)
    clean = tmp_path / "clean"
    assert run_case(stage, template, clean, faults, 0, "EIO") == []  # fail_at=0: no fault (and N is counted)
    calls, names = faults.calls, list(faults.names)
    assert calls > 0, "the stage made no I/O call the fixture sees"
    problems, cases = [], 0
    for n in range(1, calls + 1):
        kinds = list(ERRORS) if EVERY_ERRNO else [list(ERRORS)[n % len(ERRORS)]]
        kinds += ["short"] if names[n - 1] in ("write", "pwrite") else []
        for kind in kinds:
            root = tmp_path / f"{kind}-{n}"
            problems += run_case(stage, template, root, faults, n, kind)
            cases += 1
            if name != "create_store_evict":
                shutil.rmtree(root)
    print(f"{name}: {calls} calls ({', '.join(f'{c}: {names.count(c)}' for c in sorted(set(names)))}), {cases} cases")
    assert problems == [], "\n".join(problems[:40]) + f"\n({len(problems)} problems in {cases} cases)"
    if name == "create_store_evict":  # every folder the loop left, read by a fresh process
        folders = sorted(str(path / "store") for path in tmp_path.iterdir() if (path / "store" / "meta.json").exists())
        check_in_a_fresh_process(folders)


FRESH_READER = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_faults import episodes_of, length_of
from conftest import episode_arrays, SMALL_FIELDS
from pathlib import Path
bad = []
for folder in json.loads(sys.stdin.read()):
    for number, data in episodes_of(Path(folder)).items():
        expected = episode_arrays(number, length_of(number))
        if any(data[name].tobytes() != expected[name].tobytes() for name in SMALL_FIELDS):
            bad.append((folder, number))
print(json.dumps(bad))
"""


def check_in_a_fresh_process(folders: list[str]) -> None:
    code = FRESH_READER.format(tests=str(Path(__file__).parent))
    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(folders), capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [], result.stdout[:2000]


# ---- a read-only reader writes nothing -----------------------------------------------------------------------


WRITE_CALLS = ("write", "pwrite", "fsync", "replace", "rename", "mkdir", "ftruncate", "posix_fallocate", "unlink",
               "rmdir", "truncate")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def snapshot(folder: Path) -> dict:
    """Every entry of the tree: kind, mode, size, mtime and (files) the sha256 of the bytes."""
    import hashlib

    out = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[str(path.relative_to(folder))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return out


class NoWrites:
    """Records every call that could write, made by the library (os calls, and opens for writing whoever
    makes them, builtin open included, of a path inside ``folder``)."""

    def __init__(self, monkeypatch, folder: Path):
        self.folder, self.seen = str(folder), []
        for name in WRITE_CALLS:
            if hasattr(os, name):
                monkeypatch.setattr(os, name, self.watch(name, getattr(os, name)))
        real_open, real_builtin = os.open, builtins.open

        def os_open(path, flags, *args, **kwargs):
            if flags & WRITE_FLAGS and (ours(sys._getframe(1)) or self.inside(path)):
                self.seen.append(f"os.open({path}, {flags:#o})")
            return real_open(path, flags, *args, **kwargs)

        def builtin_open(file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and set(mode) & set("wax+") and (ours(sys._getframe(1)) or self.inside(file)):
                self.seen.append(f"open({file}, {mode!r})")
            return real_builtin(file, mode, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(builtins, "open", builtin_open)

    def inside(self, path) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.path.abspath(path).startswith(self.folder)

    def watch(self, name: str, real):
        def fake(*args, **kwargs):
            if ours(sys._getframe(1)) or any(self.inside(arg) for arg in args[:2]):
                self.seen.append(f"os.{name}{tuple(str(arg)[:80] for arg in args[:2])}")
            return real(*args, **kwargs)

        return fake


SAMPLER_CASES = [("uniform", {})] + [(kind, dict(options, persist=persist))
                                     for kind, options in (("prioritized", {}), ("sequence", {"window": 2}))
                                     for persist in (None, False, True)]


@pytest.fixture
def read_only_store(tmp_path):
    folder = tmp_path / "store"
    make_store(folder, range(EPISODES))
    with ReplayBuffer.from_folder(folder) as writer:  # a writer's persisted priorities are there too
        for name, kind, options in (("ro", "prioritized", {}), ("ro_seq", "sequence", {"window": 2})):
            sampler = writer.sampler(kind, name=name, persist=True, seed=0, **options)
            batch = sampler.batch(4)
            sampler.update_priorities(batch["_key"], np.full(4, 3.0))
            sampler.close()
    return folder


@pytest.mark.parametrize("kind, options", SAMPLER_CASES, ids=[f"{kind}-{options.get('persist')}"
                                                                for kind, options in SAMPLER_CASES])
def test_a_read_only_reader_writes_nothing_whatever_the_sampler_options(read_only_store, monkeypatch, kind, options):
    folder = read_only_store
    before = snapshot(folder)
    watcher = NoWrites(monkeypatch, folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        name = "ro_seq" if kind == "sequence" else "ro"
        named = dict(options, name=name) if kind != "uniform" else options
        try:
            sampler = reader.sampler(kind, seed=0, **named)
        except ReadOnlyError as error:  # persist=True: refused (or kept in memory), never written
            assert options.get("persist") is True and "read-only" in str(error), error
            sampler = reader.sampler(kind, seed=0, **dict(named, persist=False))
        for _ in range(3):
            batch = sampler.batch(4)
            if kind != "uniform":
                sampler.update_priorities(batch["_key"], np.arange(1.0, 5.0))
        if hasattr(sampler, "close"):
            sampler.close()
    monkeypatch.undo()
    assert watcher.seen == []
    assert snapshot(folder) == before


def test_a_read_only_reader_writes_nothing_for_stats_views_and_loaders(read_only_store, monkeypatch):
    folder = read_only_store
    (folder / "stats" / "running.npz").unlink()  # stale or missing statistics: a reader computes, never saves
    before = snapshot(folder)
    watcher = NoWrites(monkeypatch, folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        reader.stats()
        reader.stats(recompute=True)
        reader.get_all_data()
        reader.sample(4)
        for options in ({}, {"timestep_level": True}, {"n_steps": 2}, {"window": 2}):
            view = reader.dataset(**options)
            assert len(view) > 0
            for batch in reader.dataloader(2, shuffle=True, seed=0, **options):
                assert len(batch) > 0
    monkeypatch.undo()
    assert watcher.seen == []
    assert snapshot(folder) == before


# ---- the entry points of item 4, one by one ------------------------------------------------------------------


class FailingFile:
    """A real file whose writes fail with ``code`` from the second one on (a disk that fills up)."""

    def __init__(self, file, code: int):
        self._file, self._code, self._writes = file, code, 0

    def write(self, data):
        self._writes += 1
        if self._writes > 1:
            raise OSError(self._code, os.strerror(self._code))
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self._file.__exit__(*exc_info)


def export_store(tmp_path) -> Path:
    folder = tmp_path / "store"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=4, fields=dict(observation=("float", (3,)),
                      action=("int", 2), reward="float"), circular=True) as buffer:
        for number in range(3):
            data = episode_arrays(number, length_of(number))
            buffer.store_episode(observation=data["obs"], action=data["action"], reward=data["reward"])
    return folder


@pytest.mark.parametrize("code, error, match", [
    (errno.ENOSPC, DiskFullError, r"no space left on the device \(or quota\) to write .*data\.npz"),
    (errno.EACCES, ReadOnlyError, r"no permission to write .*data\.npz"),
    (errno.EIO, StoreIOError, r"the system failed to write .*data\.npz")])
def test_export_d4rl_on_a_full_disk_or_a_read_only_target(tmp_path, monkeypatch, code, error, match):
    import io

    from memmap_replay.interop import export_d4rl

    folder, out = export_store(tmp_path), tmp_path / "out"
    out.mkdir()
    real_open = io.open

    def failing_open(file, mode="r", *args, **kwargs):  # zipfile opens its file with io.open
        if isinstance(file, (str, os.PathLike)) and ".exporting-" in str(file) and "w" in mode:
            if code == errno.EACCES:
                raise PermissionError(code, os.strerror(code), str(file))
            return FailingFile(real_open(file, mode, *args, **kwargs), code)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", failing_open)
    with pytest.raises(error, match=match):
        export_d4rl(folder, out / "data.npz")
    monkeypatch.undo()
    assert sorted(os.listdir(out)) == []  # no archive, no temporary file
    export_d4rl(folder, out / "data.npz")  # space again: it works
    assert sorted(os.listdir(out)) == ["data.npz"]


def refuse_creating_files(monkeypatch) -> list[str]:
    """A folder this process may not write into (the tests run as root, where chmod does not stop writes):
    the library's os.open of a new file or folder fails with EACCES."""
    real_open, real_mkdir, refused = os.open, os.mkdir, []

    def os_open(path, flags, *args, **kwargs):
        if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR) and ours(sys._getframe(1)):
            refused.append(str(path))
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    def os_mkdir(path, *args, **kwargs):
        if ours(sys._getframe(1)):
            refused.append(str(path))
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(os, "mkdir", os_mkdir)
    return refused


def test_update_card_and_write_manifest_in_a_read_only_folder(tmp_path, monkeypatch):
    folder = tmp_path / "store"
    make_store(folder, range(2))
    before = snapshot(folder)
    refused = refuse_creating_files(monkeypatch)
    with pytest.raises(ReadOnlyError, match=r"no permission to write .*card\.json .*check the folder's permissions"):
        update_card(folder, name="faults/read-only-v0")
    with pytest.raises(ReadOnlyError, match=r"no permission to write .*checksums\.sha256"):
        write_manifest(folder)
    monkeypatch.undo()
    assert refused and snapshot(folder) == before


def test_update_card_and_write_manifest_on_a_full_disk(tmp_path, monkeypatch):
    folder = tmp_path / "store"
    make_store(folder, range(2))
    write_manifest(folder)
    before = snapshot(folder)
    real_fsync = os.fsync

    def full(fd):
        if ours(sys._getframe(1)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFullError, match=r"no space left on the device \(or quota\) to write .*card\.json"):
        update_card(folder, name="faults/full-v0")
    with pytest.raises(DiskFullError, match=r"no space left on the device \(or quota\) to write .*checksums\.sha256"):
        write_manifest(folder)
    monkeypatch.undo()
    assert snapshot(folder) == before  # the old card (none) and the old manifest, no temporary file


def test_rate_limiter_files_are_never_written_through_a_link(tmp_path):
    from memmap_replay import UnsafeEntryError
    from memmap_replay.distributed.ratelimit import RATELIMIT_DIR, RateLimiter

    folder, outside = tmp_path / "store", tmp_path / "outside.npy"
    make_store(folder, range(2))
    np.save(outside, np.zeros(3, dtype=np.int64))
    before = outside.read_bytes()
    (folder / RATELIMIT_DIR).mkdir()
    os.symlink(outside, folder / RATELIMIT_DIR / "default.npy")
    with pytest.raises(UnsafeEntryError, match=r"default\.npy leads out of the store folder"):
        RateLimiter(1.0, error_buffer=4, folder=folder)
    (folder / RATELIMIT_DIR / "default.npy").unlink()
    (folder / RATELIMIT_DIR / "default.json").unlink()
    os.symlink("/dev/zero", folder / RATELIMIT_DIR / "default.json")  # refused for reading, replaced (not followed)
    with RateLimiter(1.0, error_buffer=4, folder=folder) as limiter:
        limiter.inserted(2)
        assert limiter.counts.inserts == 2
    assert outside.read_bytes() == before
    assert not (folder / RATELIMIT_DIR / "default.json").is_symlink()
    assert RateLimiter.join(folder).counts.inserts == 2
