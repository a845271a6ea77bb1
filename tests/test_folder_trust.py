"""Hostile folders (issue 20, item 2): a store folder from a stranger never makes the library write outside
it, read outside it, block, or allocate without bound; it gets the library's error or clean handling.

The battery: a table of planted entries (``PLANTS``: links out of the folder to a file, a folder, /dev/zero,
dangling and looping links, links that stay inside, FIFOs, 1 GiB sparse files, hard links shared with a file
outside, zip bombs and unknown or oversized members in ``stats/running.npz``, temp names planted as links)
crossed with every entry point (``ENTRIES``: opening read-only and reading, a DataLoader batch, prioritized
samplers read-only and writable (persist=True, the default), ``buffer.stats()``, a writer's commit, the
``info``, ``stats`` and ``verify`` commands, ``memmap_replay.sharing.verify`` and ``pack``).

Every case runs in a child process (this file run as a script) under ``RLIMIT_AS`` = 3 GiB and an alarm of
``CASE_SECONDS``: the cases of one entry point share a child, which is restarted after a case that hangs or
kills it. Each case copies a small template store and an "outside" tree (the targets of the links, a file
sharing a hard link, ...) into a fresh folder, plants one entry, runs the entry point and records:

- the outcome: returned (``ok``), a ``ReplayError`` (``error``; for the commands a non-zero exit, for verify a
  report that is not OK), ``hang`` (the alarm rang) or ``bad`` (anything else escaped: MemoryError, a bare
  OSError, ...);
- whether the outside tree changed (every name, link target and byte, hashed before and after);
- for the read-only entry points, whether the store folder changed (a reader never writes a byte);
- what it printed or returned, checked for the markers of the outside files (data read from outside).

``EXPECT`` gives, per group of plants and entry point, the outcome the rules (the format spec's "folders from
strangers") ask for: ``error``, ``ok`` or ``any`` (either, cleanly). Whatever the group: never ``hang`` or
``bad``, nothing outside changed, no outside data shown, an error names the planted entry, and verify names
it. Then a property-based fuzzer mutates a valid folder's meta.json, .npy headers and episode table bytes,
and opens, reads and writes it (in one child, under the same limits): only ReplayError subclasses escape.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import tokenize
import traceback
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (conftest, for the children; imported where needed:
# it imports torch, seconds for each child of an entry that never uses it)

CASE_SECONDS = 8  # the alarm of one case (a healthy case takes a fraction of a second)
STARTUP_SECONDS = 120  # a child's imports, before its first case (the watchdog's allowance)
MEMORY_LIMIT = 3 << 30  # RLIMIT_AS of a child
GIB = 1 << 30
SECRET = "OUTSIDE-SECRET"  # in every outside text file
NPY_MARK = b"OUTS" * 4  # the bytes of the outside copies of .npy data
STATS_MARK = 4242.5  # the mean of the outside copy of stats/running.npz
MAX_EPISODES, MAX_TIMESTEPS, LENGTHS = 6, 10, (3, 4, 5)

ENTRIES = ("open_ro", "dataloader", "prioritized_ro", "prioritized_rw", "stats_api", "write", "cli_info",
           "cli_stats", "cli_verify", "verify_api", "pack")
READ_ONLY_ENTRIES = {"open_ro", "dataloader", "prioritized_ro", "stats_api", "cli_info", "cli_stats", "cli_verify",
                     "verify_api"}
TORCH_ENTRIES = {"open_ro", "dataloader", "prioritized_ro", "prioritized_rw", "write"}


# ---- the template: a small store and the outside tree --------------------------------------------------


def build_template(root: Path) -> Path:
    """root/store (3 episodes, persisted priorities, running statistics, a card), root/outside (the targets
    of the links, each carrying a marker) and root/bombs (hostile stats/running.npz files)."""
    from memmap_replay import ReplayBuffer
    from memmap_replay.sharing.card import update_card

    from conftest import SMALL_FIELDS, SMALL_META, episode_arrays

    store, outside, bombs = root / "store", root / "outside", root / "bombs"
    with ReplayBuffer(store, max_episodes=MAX_EPISODES, max_timesteps=MAX_TIMESTEPS, fields=SMALL_FIELDS,
                      meta_fields=SMALL_META) as buffer:
        for number, length in enumerate(LENGTHS):
            final = dict(obs=np.full(3, -1.0, np.float32)) if number == 1 else None
            buffer.store_episode(**episode_arrays(number, length), task_id=number, final=final,
                                 end="terminated" if number == 1 else "truncated")
        sampler = buffer.sampler("prioritized", seed=0)
        batch = sampler.batch(4)
        sampler.update_priorities(batch["_key"], np.arange(1.0, 5.0))
        sampler.close()
    update_card(store, name="trust/battery-v1", description="a small store")
    running = store / "stats" / "running.npz"
    assert running.is_file() and (store / "priorities" / "steps.npy").is_file() and (store / "card.json").is_file()

    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}: a file outside the store\n")
    shutil.copy(store / "meta.json", outside / "meta.json")
    (outside / "card.json").write_text(json.dumps({"description": SECRET, "name": "outside/secret-v1"}))
    (outside / "checksums.sha256").write_text(f"{'0' * 64}  {SECRET}\n")
    shutil.copytree(store / "steps", outside / "steps")
    marked_npy(store / "steps" / "obs.npy", outside / "steps" / "obs.npy")
    marked_npy(store / "steps" / "obs.npy", outside / "obs.npy")
    marked_npy(store / "episodes" / "start.npy", outside / "start.npy")
    marked_npy(store / "priorities" / "steps.npy", outside / "prio.npy")
    shutil.copytree(store / "priorities", outside / "priorities")
    (outside / "stats").mkdir()
    with np.load(running, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    arrays["obs.mean"] = np.full_like(arrays["obs.mean"], STATS_MARK)
    np.savez(outside / "stats" / "running.npz", **arrays)
    shutil.copy(outside / "stats" / "running.npz", outside / "running.npz")

    bombs.mkdir()
    with np.load(running, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    # a member that is not the store's, whose header declares 4 GiB (the body is 16 bytes)
    write_npz(bombs / "extra_4g.npz", arrays, {"extra.npy": npy_bytes("<f8", (1 << 29,)) + bytes(16)})
    # a member the store has (obs.mean, 3 numbers), whose header declares 4 GiB
    write_npz(bombs / "known_4g.npz", {k: v for k, v in arrays.items() if k != "obs.mean"},
              {"obs.mean.npy": npy_bytes("<f8", (1 << 29,)) + bytes(16)})
    # a deflate bomb: obs.m2 as 128 MiB of zeros, deflated to a few hundred KiB
    write_npz(bombs / "deflate.npz", {k: v for k, v in arrays.items() if k != "obs.m2"},
              {"obs.m2.npy": (npy_bytes("<f8", (1 << 24,)), 128 << 20)})
    # an unknown small member
    write_npz(bombs / "unknown.npz", arrays, {"notes.npy": npy_bytes("<i8", (2,)) + bytes(16)})
    return root


def marked_npy(source: Path, target: Path) -> None:
    """A .npy of ``source``'s dtype and shape whose data bytes are the outside marker."""
    array = np.load(source, mmap_mode="r")
    raw = (NPY_MARK * (array.nbytes // len(NPY_MARK) + 1))[: array.nbytes]
    np.save(target, np.frombuffer(raw, dtype=array.dtype).reshape(array.shape))


def npy_bytes(descr: str, shape: tuple) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def write_npz(path: Path, arrays: dict, members: dict) -> None:
    """An .npz of ``arrays`` plus raw ``members``: bytes stored as they are, or (header, n) for a member of
    ``header`` and n zero bytes, deflated (a zip bomb)."""
    np.savez(path, **arrays)
    with zipfile.ZipFile(path, "a") as out:
        for name, body in members.items():
            if not isinstance(body, tuple):
                out.writestr(name, body)
    for name, body in members.items():
        if isinstance(body, tuple):
            deflated_member(path, name, *body)


def deflated_member(path: Path, name: str, header: bytes, zeros: int) -> None:
    """Rewrite the zip at ``path`` with member ``name`` as ``header`` + ``zeros`` zero bytes, deflated."""
    with zipfile.ZipFile(path) as check:
        kept = {info.filename: check.read(info) for info in check.infolist() if info.filename != name}
    with zipfile.ZipFile(path, "w") as rewrite:
        for member_name, data in kept.items():
            rewrite.writestr(member_name, data)
        info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with rewrite.open(info, "w", force_zip64=True) as member:
            member.write(header)
            chunk = bytes(16 << 20)
            for _ in range(zeros // len(chunk)):
                member.write(chunk)


# ---- the planted entries -------------------------------------------------------------------------------


def clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def link(rel: str, target) -> callable:
    """``rel`` becomes a symlink to ``target`` (a function of (store, outside), or a fixed path)."""
    def plant(store, outside, bombs):
        destination = target(store, outside) if callable(target) else target
        clear(store / rel)
        os.symlink(destination, store / rel)
    return plant


def out(name: str):
    return lambda store, outside: outside / name


def moved_inside(rel: str, new_name: str):
    """``rel`` moved to ``new_name`` beside it, and ``rel`` a relative link to it (staying inside)."""
    def plant(store, outside, bombs):
        os.rename(store / rel, (store / rel).parent / new_name)
        os.symlink(new_name, store / rel)
    return plant


def fifo(rel: str):
    def plant(store, outside, bombs):
        clear(store / rel)
        os.mkfifo(store / rel)
    return plant


def sparse(rel: str, size: int = GIB):
    def plant(store, outside, bombs):
        with open(store / rel, "r+b" if (store / rel).exists() else "wb") as file:
            file.truncate(size)
    return plant


def hardlink(rel: str, name: str):
    """``rel`` shares its inode with outside/``name`` (a file of someone else's)."""
    def plant(store, outside, bombs):
        os.link(store / rel, outside / name)
    return plant


def loop(rel: str):
    def plant(store, outside, bombs):
        clear(store / rel)
        os.symlink(Path(rel).name + ".loop", store / rel)
        os.symlink(Path(rel).name, (store / rel).parent / (Path(rel).name + ".loop"))
    return plant


def bomb(name: str):
    def plant(store, outside, bombs):
        shutil.copy(bombs / name, store / "stats" / "running.npz")
    return plant


def nothing(store, outside, bombs):
    pass


DEV_ZERO = "/dev/zero"
# (name, group, plant, the entry verify must name)
PLANTS = [
    ("control", "control", nothing, None),
    # entries every reader needs: refused by every entry point
    ("meta_link_out", "data", link("meta.json", out("meta.json")), "meta.json"),
    ("meta_devzero", "data", link("meta.json", DEV_ZERO), "meta.json"),
    ("meta_dangling", "data", link("meta.json", out("nothing.json")), "meta.json"),
    ("meta_loop", "data", loop("meta.json"), "meta.json"),
    ("meta_fifo", "data", fifo("meta.json"), "meta.json"),
    ("meta_sparse_1g", "data", sparse("meta.json"), "meta.json"),
    ("steps_obs_link_out", "data", link("steps/obs.npy", out("obs.npy")), "steps/obs.npy"),
    ("steps_obs_devzero", "data", link("steps/obs.npy", DEV_ZERO), "steps/obs.npy"),
    ("steps_obs_dangling", "data", link("steps/obs.npy", out("nothing.npy")), "steps/obs.npy"),
    ("steps_obs_loop", "data", loop("steps/obs.npy"), "steps/obs.npy"),
    ("steps_obs_fifo", "data", fifo("steps/obs.npy"), "steps/obs.npy"),
    ("steps_dir_link_out", "data", link("steps", out("steps")), "steps"),
    ("episodes_start_link_out", "data", link("episodes/start.npy", out("start.npy")), "episodes/start.npy"),
    ("meta_task_id_fifo", "data", fifo("meta/task_id.npy"), "meta/task_id.npy"),
    # links that stay inside: followed by readers, refused by writers
    ("meta_link_inside", "inside", moved_inside("meta.json", "meta.json.real"), "meta.json"),
    ("steps_obs_link_inside", "inside", moved_inside("steps/obs.npy", "obs.npy.real"), "steps/obs.npy"),
    ("steps_dir_link_inside", "inside", moved_inside("steps", "steps.real"), "steps"),
    # hard links shared with a file outside: a writer refuses them
    ("meta_hardlink", "hardlink", hardlink("meta.json", "meta-shared.json"), "meta.json"),
    ("steps_obs_hardlink", "hardlink", hardlink("steps/obs.npy", "obs-shared.npy"), "steps/obs.npy"),
    # the optional sharing files
    ("card_link_out", "optional", link("card.json", out("card.json")), "card.json"),
    ("card_devzero", "optional", link("card.json", DEV_ZERO), "card.json"),
    ("card_fifo", "optional", fifo("card.json"), "card.json"),
    ("card_sparse_1g", "optional_big", sparse("card.json"), "card.json"),
    ("card_hardlink", "optional", hardlink("card.json", "card-shared.json"), "card.json"),
    ("readme_link_out", "optional", link("README.md", out("secret.txt")), "README.md"),
    ("checksums_link_out", "optional", link("checksums.sha256", out("checksums.sha256")), "checksums.sha256"),
    ("checksums_devzero", "optional", link("checksums.sha256", DEV_ZERO), "checksums.sha256"),
    ("checksums_fifo", "optional", fifo("checksums.sha256"), "checksums.sha256"),
    ("checksums_sparse_1g", "optional_big", sparse("checksums.sha256"), "checksums.sha256"),
    # the writer's lock file
    ("lock_dangling", "lock", link("writer.lock", out("created-by-lock")), "writer.lock"),
    ("lock_fifo", "lock", fifo("writer.lock"), "writer.lock"),
    ("lock_link_out", "lock", link("writer.lock", out("secret.txt")), "writer.lock"),
    # stats/running.npz: derived data, treated as absent when refused, never written through
    ("running_link_out", "stats_unsafe", link("stats/running.npz", out("running.npz")), "stats/running.npz"),
    ("running_devzero", "stats_unsafe", link("stats/running.npz", DEV_ZERO), "stats/running.npz"),
    ("running_fifo", "stats_unsafe", fifo("stats/running.npz"), "stats/running.npz"),
    ("running_hardlink", "stats_unsafe", hardlink("stats/running.npz", "running-shared.npz"), "stats/running.npz"),
    ("stats_dir_link_out", "stats_unsafe", link("stats", out("stats")), "stats"),
    ("running_sparse_1g", "stats_bomb", sparse("stats/running.npz"), "stats/running.npz"),
    ("running_extra_4g_member", "stats_bomb", bomb("extra_4g.npz"), "stats/running.npz"),
    ("running_known_4g_member", "stats_bomb", bomb("known_4g.npz"), "stats/running.npz"),
    ("running_deflate_bomb", "stats_bomb", bomb("deflate.npz"), "stats/running.npz"),
    ("running_unknown_member", "stats_bomb", bomb("unknown.npz"), "stats/running.npz"),
    # priorities/: sampler state, started afresh or refused, never written through
    ("prio_link_out", "prio", link("priorities/steps.npy", out("prio.npy")), "priorities/steps.npy"),
    ("prio_devzero", "prio", link("priorities/steps.npy", DEV_ZERO), "priorities/steps.npy"),
    ("prio_fifo", "prio", fifo("priorities/steps.npy"), "priorities/steps.npy"),
    ("prio_hardlink", "prio", hardlink("priorities/steps.npy", "prio-shared.npy"), "priorities/steps.npy"),
    ("prio_json_fifo", "prio", fifo("priorities/steps.json"), "priorities/steps.json"),
    ("prio_dir_link_out", "prio_dir", link("priorities", out("priorities")), "priorities"),
    # temp names planted as links: writers use fresh names, so nothing is written through them
    ("meta_tmp_link_out", "tmp", link("meta.json.tmp", out("secret.txt")), "meta.json.tmp"),
    ("running_tmp_link_out", "tmp", link("stats/running.npz.tmp", out("secret.txt")), "stats/running.npz.tmp"),
]
PLANT_BY_NAME = {name: (group, plant, rel) for name, group, plant, rel in PLANTS}


def expect(default: str, **entries: str) -> dict[str, str]:
    table = dict.fromkeys(ENTRIES, default)
    table.update(entries)
    return table


WRITERS_REFUSE = dict(write="error", cli_verify="error", verify_api="error")  # a commit refuses; verify reports
EXPECT = {
    "control": expect("ok"),
    "data": expect("error"),
    "inside": expect("ok", pack="any", prioritized_rw="any", **WRITERS_REFUSE),
    "hardlink": expect("any", **WRITERS_REFUSE),
    "optional": expect("ok", cli_info="any", pack="any", prioritized_rw="any", **WRITERS_REFUSE),
    "optional_big": expect("ok", cli_info="any", pack="any", prioritized_rw="any", write="any", cli_verify="error",
                           verify_api="error"),
    "lock": expect("ok", pack="any", prioritized_rw="any", **WRITERS_REFUSE),
    "stats_unsafe": expect("ok", cli_info="any", pack="any", prioritized_rw="any", **WRITERS_REFUSE),
    "stats_bomb": expect("ok", cli_info="any", pack="any", write="any", prioritized_rw="any", cli_verify="error",
                         verify_api="error"),
    "prio": expect("ok", prioritized_ro="any", prioritized_rw="any", write="any", pack="any", cli_verify="error",
                   verify_api="error"),
    "prio_dir": expect("ok", prioritized_ro="any", prioritized_rw="any", pack="any", **WRITERS_REFUSE),
    "tmp": expect("ok", write="any", prioritized_rw="any", pack="any", cli_verify="any", verify_api="any"),
}


# ---- the child: runs cases -----------------------------------------------------------------------------


class Hang(BaseException):
    """The alarm rang: the case blocked or ran away."""


class Refused(Exception):
    """A command exited non-zero, or verify reported problems: the 'error' outcome, with what it printed."""

    def __init__(self, text: str, code: int = 1):
        super().__init__(text)
        self.text, self.code = text, code


def on_alarm(signum, frame):
    raise Hang(f"no answer after {CASE_SECONDS} s")


def tree_hash(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every entry under ``root`` (names, kinds, link targets, contents), without following or opening
    anything but regular files (large ones by size and mtime)."""
    found = {}
    for directory, folders, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            folders[:] = [name for name in folders if name not in skip]
            files = [name for name in files if name not in skip]
        for name in folders + files:
            path = os.path.join(directory, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = "link -> " + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                if info.st_size > 64 << 20:
                    found[rel] = f"big file {info.st_size} {info.st_mtime_ns}"
                else:
                    with open(path, "rb") as file:
                        found[rel] = hashlib.sha256(file.read()).hexdigest()
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = "folder"
            else:
                found[rel] = f"special {stat.S_IFMT(info.st_mode):o}"
    return found


def changes(before: dict, after: dict) -> list[str]:
    return sorted(f"{rel}: {before.get(rel, 'absent')} -> {after.get(rel, 'absent')}"
                  for rel in set(before) | set(after) if before.get(rel) != after.get(rel))


def digest(value) -> str:
    """A digest of what a read returned (tensors, arrays, dicts, tuples, dataclasses)."""
    hasher = hashlib.sha256()

    def feed(item):
        if hasattr(item, "numpy") and hasattr(item, "detach"):
            item = item.detach().cpu().numpy()
        if isinstance(item, np.ndarray):
            hasher.update(f"{item.dtype}{item.shape}".encode())
            hasher.update(np.ascontiguousarray(item).tobytes())
        elif isinstance(item, dict):
            for key in sorted(item, key=str):
                hasher.update(str(key).encode())
                feed(item[key])
        elif isinstance(item, (list, tuple)):
            for part in item:
                feed(part)
        elif hasattr(item, "__dict__"):
            feed(vars(item))
        else:
            hasher.update(repr(item).encode())

    feed(value)
    return hasher.hexdigest()


def archive_leaks(path: Path) -> bool:
    marks = (NPY_MARK, SECRET.encode(), np.float64(STATS_MARK).tobytes())
    with open(path, "rb") as file:
        tail = b""
        while chunk := file.read(1 << 20):
            if any(mark in tail + chunk for mark in marks):
                return True
            tail = chunk[-32:]
    return False


def enter(entry: str, store: Path, outdir: Path) -> str:
    """Run one entry point on ``store``; returns what it read or printed (for the leak checks)."""
    from memmap_replay import ReplayBuffer
    from memmap_replay.sharing import verify
    from memmap_replay.sharing.pack import pack

    if entry == "open_ro":
        with ReplayBuffer.from_folder(store, read_only=True) as buffer:
            return digest(buffer.get_all_data())
    if entry == "dataloader":
        with ReplayBuffer.from_folder(store, read_only=True) as buffer:
            return digest(next(iter(buffer.dataloader(4))))
    if entry in ("prioritized_ro", "prioritized_rw"):
        with ReplayBuffer.from_folder(store, read_only=entry == "prioritized_ro") as buffer:
            sampler = buffer.sampler("prioritized", seed=0)
            batch = sampler.batch(4)
            sampler.update_priorities(batch["_key"], np.arange(1.0, 5.0))
            sampler.close()
        return ""
    if entry == "stats_api":
        with ReplayBuffer.from_folder(store, read_only=True) as buffer:
            return buffer.stats().to_json(default=str)
    if entry == "write":
        from conftest import episode_arrays

        with ReplayBuffer.from_folder(store) as buffer:
            buffer.store_episode(**episode_arrays(3, 4), task_id=3)
        return ""
    if entry.startswith("cli_"):
        from memmap_replay.cli import main

        printed, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                code = main([entry.removeprefix("cli_"), str(store)], prog="memmap-replay")
            except SystemExit as error:
                code = error.code
        text = printed.getvalue() + errors.getvalue()
        if code != 0:
            raise Refused(text, code)
        return text
    if entry == "verify_api":
        report = verify(store)
        if not report.ok:
            raise Refused(str(report))
        return str(report)
    if entry == "pack":
        pack(store, outdir / "store.tar")
        return ""
    raise ValueError(entry)


def run_case(entry: str, plant_name: str, template: Path, work: Path) -> dict:
    from memmap_replay import ReplayError

    group, plant, rel = PLANT_BY_NAME[plant_name]
    case = work / plant_name
    store, outside, outdir = case / "store", case / "outside", case / "out"
    shutil.copytree(template / "store", store, symlinks=True)
    shutil.copytree(template / "outside", outside, symlinks=True)
    outdir.mkdir()
    plant(store, outside, template / "bombs")
    outside_before, store_before = tree_hash(case, skip=("store", "out")), tree_hash(store)
    result = {"plant": plant_name, "entry": entry, "outcome": "ok", "type": "", "message": "", "payload": ""}
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        result["payload"] = enter(entry, store, outdir)
    except Hang as error:
        result.update(outcome="hang", type="Hang", message=str(error) + "\n" + traceback.format_exc()[-1500:])
    except Refused as error:
        result.update(outcome="error", type=f"exit {error.code}", message=error.text[-3000:], payload=error.text,
                      code=error.code)
    except ReplayError as error:
        result.update(outcome="error", type=type(error).__name__, message=str(error)[:1500])
    except BaseException as error:  # noqa: BLE001 - MemoryError, bare OSError, ...: reported, the case fails
        result.update(outcome="bad", type=type(error).__name__, message=f"{error}\n{traceback.format_exc()[-2500:]}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    result["outside_changed"] = changes(outside_before, tree_hash(case, skip=("store", "out")))
    result["store_changed"] = changes(store_before, tree_hash(store))
    archive = outdir / "store.tar"
    result["archive_leaks"] = archive.is_file() and archive_leaks(archive)
    with contextlib.suppress(OSError):
        shutil.rmtree(case)
    return result


def child_main(spec: dict) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, on_alarm)
    if spec["entry"] in TORCH_ENTRIES:
        import torch  # noqa: F401 - imported before the first case's alarm
        import conftest  # noqa: F401 - (its episode_arrays for the write entry; it imports torch too)
    import memmap_replay.cli  # noqa: F401
    import memmap_replay.sharing.pack  # noqa: F401
    import memmap_replay.sharing.verify  # noqa: F401

    template, work = Path(spec["template"]), Path(spec["work"])
    with open(spec["results"], "a", buffering=1) as results:
        for plant_name in spec["plants"]:
            results.write(json.dumps({"start": plant_name}) + "\n")
            result = run_case(spec["entry"], plant_name, template, work)
            results.write(json.dumps(result) + "\n")
            if result["outcome"] == "hang":
                os._exit(3)  # a thread or descriptor may still be stuck: the parent starts a fresh child


# ---- the parent: runs the children, judges the results -------------------------------------------------


def run_entry(entry: str, template: Path, work: Path) -> dict[str, dict]:
    """Every plant's result for ``entry``, restarting the child after a case that hangs or kills it."""
    remaining, done, attempt = [name for name, *_ in PLANTS], {}, 0
    while remaining:
        attempt += 1
        results, errors = work / f"{entry}.{attempt}.jsonl", work / f"{entry}.{attempt}.stderr"
        case_work = work / f"{entry}.{attempt}"
        case_work.mkdir(parents=True)
        spec = dict(entry=entry, plants=remaining, template=str(template), work=str(case_work), results=str(results))
        results.touch()
        with open(errors, "wb") as stderr:
            child = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)],
                                     stdout=subprocess.DEVNULL, stderr=stderr)
            lines, last, allowance = 0, time.monotonic(), STARTUP_SECONDS
            while child.poll() is None:  # a watchdog behind the child's own alarm (which a C loop could outlast)
                time.sleep(0.05)
                count = results.read_text().count("\n")
                if count != lines:
                    lines, last, allowance = count, time.monotonic(), CASE_SECONDS * 4
                elif time.monotonic() - last > allowance:
                    child.kill()
                    child.wait()
        started = None
        for line in results.read_text().splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                done[record["plant"]], started = record, None
        if started is not None:
            tail = errors.read_bytes().decode(errors="replace")[-2000:]
            done[started] = {"plant": started, "entry": entry, "outcome": "hang" if child.returncode < 0 else "bad",
                             "type": f"child ended ({child.returncode})", "message": tail, "payload": "",
                             "outside_changed": [], "store_changed": [], "archive_leaks": False}
        elif not done or child.returncode not in (0, 3):
            raise RuntimeError(f"the {entry} child failed before its cases: {errors.read_text()[-3000:]}")
        remaining = [name for name in remaining if name not in done]
        shutil.rmtree(case_work, ignore_errors=True)
    return done


@pytest.fixture(scope="module")
def battery(tmp_path_factory) -> dict[tuple[str, str], dict]:
    root = tmp_path_factory.mktemp("trust")
    template = build_template(root / "template")
    with ThreadPoolExecutor(2) as pool:
        found = dict(zip(ENTRIES, pool.map(lambda entry: run_entry(entry, template, root / "work"), ENTRIES)))
    return {(plant, entry): found[entry][plant] for plant, *_ in PLANTS for entry in ENTRIES}


def judge(result: dict, control: dict, group: str, rel: str | None) -> list[str]:
    """What is wrong with one case's result (empty: it passes)."""
    entry, outcome, wanted = result["entry"], result["outcome"], EXPECT[group][result["entry"]]
    wrong = []
    if outcome in ("hang", "bad"):
        wrong.append(f"{outcome}: {result['type']}: {result['message']}")
    elif wanted != "any" and outcome != wanted:
        wrong.append(f"expected {wanted}, got {outcome} ({result['type']}: {result['message'][:600]})")
    if result["outside_changed"]:
        wrong.append(f"the outside tree changed: {result['outside_changed']}")
    if entry in READ_ONLY_ENTRIES and result["store_changed"]:
        wrong.append(f"a reader changed the store folder: {result['store_changed']}")
    if result["archive_leaks"]:
        wrong.append("the archive holds bytes of a file outside the folder")
    shown = result["payload"] + result["message"]
    for mark in (SECRET, str(STATS_MARK)):
        if mark in shown:
            wrong.append(f"it showed data of a file outside the folder ({mark!r})")
    if "Traceback" in result["payload"]:
        wrong.append(f"it printed a traceback: {result['payload'][-600:]}")
    if outcome == "ok" and entry in ("open_ro", "dataloader") and result["payload"] != control["payload"]:
        wrong.append("it read other data than the store's own (a digest differs from the healthy store's)")
    if outcome == "error" and entry == "cli_verify" and result.get("code") != 1:
        wrong.append(f"the verify command must exit 1 for a damaged store (got {result['type']})")
    if rel is not None and outcome == "error" and entry not in ("cli_info", "cli_stats") \
            and Path(rel).name not in result["message"]:
        wrong.append(f"the error does not name {rel}: {result['type']}: {result['message'][:600]}")
    if rel is not None and entry in ("verify_api", "cli_verify") and rel not in shown:
        wrong.append(f"verify does not name {rel}: {shown[-1500:]}")
    return wrong


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("plant", [name for name, *_ in PLANTS])
def test_hostile_folder(battery, plant, entry):
    group, _, rel = PLANT_BY_NAME[plant]
    wrong = judge(battery[plant, entry], battery["control", entry], group, rel)
    assert not wrong, f"{plant} x {entry}:\n" + "\n".join(wrong)


def test_the_expectation_table_covers_every_case():
    assert {group for _, group, _, _ in PLANTS} == set(EXPECT)
    assert all(set(table) == set(ENTRIES) and set(table.values()) <= {"ok", "error", "any"}
               for table in EXPECT.values())
    assert len({name for name, *_ in PLANTS}) == len(PLANTS)


# ---- the fuzzer -------------------------------------------------------------------------------------------


FUZZ_EXAMPLES = 150


def npy_header_of(path: Path) -> tuple[dict, int] | None:
    """({descr, fortran_order, shape}, data offset) of a .npy file, or None when its header is unreadable."""
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(file)
            return {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape}, file.tell()
    except (ValueError, SyntaxError, EOFError, TypeError, OSError, tokenize.TokenError):
        return None


def fuzz_main(spec: dict) -> None:
    """Runs in a child: hypothesis mutates copies of the template store; only ReplayError may escape."""
    import resource

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import torch  # noqa: F401
    from memmap_replay import ReplayBuffer
    from memmap_replay import ReplayError
    from memmap_replay.sharing import verify

    from conftest import episode_arrays

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, on_alarm)
    template, work = Path(spec["template"]), Path(spec["work"])
    counter = iter(range(10**9))

    json_leaf = st.one_of(st.none(), st.booleans(), st.text(max_size=8),
                          st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**31, 2**62, 2**63, 2**64, 10**30]),
                          st.floats(allow_nan=True, allow_infinity=True))
    json_value = st.recursive(json_leaf,
                              lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                              max_leaves=8)
    npy_files = sorted(str(path.relative_to(template / "store")) for path in (template / "store").rglob("*.npy"))
    table_files = [rel for rel in npy_files if rel.startswith("episodes/")]
    meta_edit = st.tuples(st.just("meta"), st.integers(0, 10**6), st.one_of(st.integers(0, 20), json_value))
    header_edit = st.tuples(st.just("header"), st.sampled_from(npy_files),
                            st.one_of(st.tuples(st.just("shape"), st.lists(st.one_of(
                                st.integers(-2, 2**62), st.sampled_from([0, 1, 2**31, 2**40, 2**63])), max_size=3)),
                                st.tuples(st.just("descr"), st.sampled_from(
                                    ["<f8", ">f4", "|b1", "<i8", "|O", "<U3", "|V8", "<c16", "[('a','<i4')]",
                                     "bogus"])),
                                st.tuples(st.just("fortran"), st.booleans()),
                                st.tuples(st.just("bytes"), st.integers(0, 127), st.binary(min_size=1, max_size=8))))
    table_edit = st.tuples(st.just("table"), st.sampled_from(table_files), st.integers(0, MAX_EPISODES - 1),
                           st.binary(min_size=1, max_size=8))

    def json_paths(value, prefix=()):
        yield prefix
        if isinstance(value, dict):
            for key, item in value.items():
                yield from json_paths(item, prefix + (key,))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from json_paths(item, prefix + (index,))

    def apply(store: Path, edit) -> None:
        kind = edit[0]
        if kind == "meta":
            data = json.loads((store / "meta.json").read_text())
            paths = list(json_paths(data))
            path = paths[edit[1] % len(paths)]
            if not path:
                data = edit[2]
            else:
                holder = data
                for key in path[:-1]:
                    holder = holder[key]
                holder[path[-1]] = edit[2]
            (store / "meta.json").write_text(json.dumps(data))
        elif kind == "header":
            path = store / edit[1]
            raw, parsed = path.read_bytes(), npy_header_of(path)
            change = edit[2]
            if change[0] == "bytes" or parsed is None:  # (an earlier edit broke the header: poke its bytes)
                position = change[1] % 128 if change[0] == "bytes" else 8
                poke = change[2] if change[0] == "bytes" else b"\xff"
                path.write_bytes(raw[:position] + poke + raw[position + len(poke):])
                return
            header, offset = parsed
            header[{"shape": "shape", "descr": "descr", "fortran": "fortran_order"}[change[0]]] = \
                tuple(change[1]) if change[0] == "shape" else change[1]
            try:
                buffer = io.BytesIO()
                np.lib.format.write_array_header_1_0(buffer, header)
                new = buffer.getvalue()
            except (ValueError, TypeError):  # numpy will not write it: the text as is, padded as numpy pads
                body = repr(header).encode("latin1")
                body = body.ljust(((len(body) + 11 + 63) // 64) * 64 - 11) + b"\n"
                new = np.lib.format.magic(1, 0) + len(body).to_bytes(2, "little") + body
            path.write_bytes(new + raw[offset:])
        else:
            path = store / edit[1]
            raw, parsed = bytearray(path.read_bytes()), npy_header_of(path)
            offset, itemsize = (parsed[1], np.dtype(parsed[0]["descr"]).itemsize) if parsed else (128, 8)
            position = offset + edit[2] * itemsize
            raw[position:position + len(edit[3])] = edit[3]
            path.write_bytes(bytes(raw))

    seen = dict.fromkeys(("examples", "read", "refused for reading", "verify ok", "written", "refused for writing"), 0)

    def exercise(store: Path) -> None:
        seen["examples"] += 1
        try:
            with ReplayBuffer.from_folder(store, read_only=True) as buffer:
                buffer.get_all_data()
                if buffer.num_episodes:
                    buffer.sampler("uniform", seed=0).batch(4)
                buffer.stats()
            seen["read"] += 1
        except ReplayError:
            seen["refused for reading"] += 1
        seen["verify ok"] += verify(store).ok  # never raises for damage
        try:
            with ReplayBuffer.from_folder(store) as buffer:
                buffer.store_episode(**episode_arrays(3, 4), task_id=3)
            seen["written"] += 1
        except ReplayError:
            seen["refused for writing"] += 1

    @settings(max_examples=spec["examples"], derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.one_of(meta_edit, header_edit, table_edit), min_size=1, max_size=3))
    def fuzz(edits):
        store = work / f"case{next(counter)}"
        shutil.copytree(template / "store", store, symlinks=True)
        for edit in edits:
            apply(store, edit)
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            exercise(store)
        except Hang as error:
            raise AssertionError(f"a hang: {error}") from None  # a failure hypothesis shrinks and reports
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            shutil.rmtree(store, ignore_errors=True)

    fuzz()
    print(json.dumps(seen))


def test_fuzzed_folders_raise_only_library_errors(tmp_path):
    template = build_template(tmp_path / "template")
    (tmp_path / "work").mkdir()
    spec = dict(template=str(template), work=str(tmp_path / "work"), examples=FUZZ_EXAMPLES)
    child = subprocess.run([sys.executable, __file__, "--fuzz", json.dumps(spec)], capture_output=True,
                           timeout=900)  # a backstop: every example has its own alarm
    report = (child.stdout + child.stderr).decode(errors="replace")
    assert child.returncode == 0, f"the fuzzer found an escape (or a hang):\n{report[-6000:]}"
    seen = json.loads(child.stdout.decode().splitlines()[-1])
    # the mutations reach both sides: folders that are read and written, and folders that are refused
    assert seen["examples"] >= FUZZ_EXAMPLES and seen["read"] and seen["refused for reading"] and seen["written"], seen


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child_main(json.loads(sys.argv[2]))
    elif sys.argv[1] == "--fuzz":
        fuzz_main(json.loads(sys.argv[2]))


# ---- a compressed field's two files (format 2.0) ---------------------------------------------------------


COMPRESSED_FILES = ("steps/image.frames.npy", "steps/image.index.npy")


def test_a_writer_checks_a_compressed_fields_two_files():
    """The entries a writer checks come from the store's layout: a compressed field's frames and index."""
    from memmap_replay.core import format as fmt
    from memmap_replay.core.schema import Schema

    entries = fmt._writer_entries(Schema.parse(dict(image=dict(dtype="uint8", shape=(4,), codec="zstd"), x="float")))
    assert all(entries[rel] is True for rel in (*COMPRESSED_FILES, "steps/x.npy")) and "steps/image.npy" not in entries


@pytest.fixture(scope="module")
def compressed_template(tmp_path_factory):
    from compressed_stores import make_compressed_store

    return make_compressed_store(tmp_path_factory.mktemp("trust_compressed") / "store")


@pytest.mark.parametrize("kind", ["link_out", "fifo", "hardlink", "link_inside"])
@pytest.mark.parametrize("rel", COMPRESSED_FILES)
def test_a_compressed_fields_files_follow_the_folder_rules(compressed_template, tmp_path, rel, kind):
    """A link out of the folder or a FIFO in place of a compressed field's file is refused by readers and writers
    (never read through, never waited on); a link inside or a shared hard link is read, and refused by a writer;
    verify names the file every time; nothing outside the folder changes."""
    from memmap_replay import ReplayBuffer, ReplayError, UnsafeEntryError, verify

    from compressed_stores import all_data, episode

    store, outside = Path(shutil.copytree(compressed_template, tmp_path / "store")), tmp_path / "outside"
    outside.mkdir()
    expected = all_data(store)
    path = store / rel
    if kind == "link_out":
        shutil.copy(path, outside / path.name)
        path.unlink()
        os.symlink(outside / path.name, path)
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif kind == "hardlink":
        os.link(path, outside / f"{path.name}.shared")
    else:
        moved_inside(rel, f"{path.name}.real")(store, outside, None)
    before = tree_hash(outside)
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_SECONDS)  # (a FIFO opened without O_NONBLOCK would block here)
    try:
        if kind in ("link_out", "fifo"):
            with pytest.raises(ReplayError, match=re.escape(path.name)):
                all_data(store)
        else:
            read = all_data(store)
            assert all(np.array_equal(read[name], expected[name]) for name in expected)
        with pytest.raises(UnsafeEntryError, match=re.escape(path.name)):
            with ReplayBuffer.from_folder(store) as writer:
                writer.store_episode(**episode(np.random.default_rng(0), 3))
        report = verify(store)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not report.ok and any(line.startswith(f"{rel}: ") for line in report.problems), report
    assert not [line for line in report.problems if not line.startswith(f"{rel}: ")], report  # (nothing else)
    assert tree_hash(outside) == before
