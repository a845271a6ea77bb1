"""checksums.sha256: what it covers, that GNU sha256sum accepts it, every finding of check_manifest
(missing, changed, unlisted, malformed, unsafe), the locks it takes, and ``python -m memmap_replay
checksum`` as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from memmap_replay import CorruptStoreError, ReplayBuffer, StoreLockedError, StoreNotFoundError
from memmap_replay.sharing.card import update_card
from memmap_replay.core.format import read_meta
from memmap_replay.sharing.checksums import (MANIFEST, check_manifest, is_store_path, read_manifest, store_files,
                                             stray_files, write_manifest)
from memmap_replay.cli import main

from compressed_stores import make_compressed_store
from conftest import SMALL_FIELDS, SMALL_META, episode_arrays

STORE_FILES = ["README.md", "card.json", "episodes/continues.npy", "episodes/end.npy", "episodes/final.npy",
               "episodes/id.npy",
               "episodes/length.npy", "episodes/start.npy", "meta.json", "meta/task_id.npy", "priorities/steps.json",
               "priorities/steps.npy", "priorities/steps.owner.npy", "stats/obs/mean.npy", "stats/returns.npy",
               "stats/running.npz", "steps/action.npy",
               "steps/obs.npy", "steps/reward.npy"]


def make_store(folder):
    """Three episodes, persisted priorities, a card, a stats file and some files that are not the store's."""
    with ReplayBuffer(folder, max_episodes=6, max_timesteps=10, fields=SMALL_FIELDS, meta_fields=SMALL_META) as buffer:
        for number, length in enumerate((3, 4, 5)):
            buffer.store_episode(**episode_arrays(number, length), task_id=number)
        sampler = buffer.sampler("prioritized", seed=0)
        sampler.update_priorities(sampler.batch(4)["_key"], np.arange(1.0, 5.0))
        sampler.close()
    update_card(folder, name="test/three-v0")
    (folder / "stats/obs").mkdir(parents=True)
    np.save(folder / "stats/obs/mean.npy", np.arange(3.0))
    (folder / "notes.txt").write_text("mine, not the store's")
    (folder / "meta.json.tmp").write_text("{")
    return folder


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


def lines(folder):
    return (folder / MANIFEST).read_text().splitlines()


def test_the_manifest_covers_the_store_files_only(store):
    assert write_manifest(store) == store / MANIFEST
    text = lines(store)
    assert [line.split("  ", 1)[1] for line in text] == STORE_FILES  # sorted; no lock, tmp, notes or itself
    assert all(re.fullmatch(r"[0-9a-f]{64}  \S+", line) for line in text)
    for line in text:
        digest, rel = line.split("  ")
        assert hashlib.sha256((store / rel).read_bytes()).hexdigest() == digest
    assert (store / "writer.lock").exists() and (store / "priorities/steps.lock").exists()
    assert check_manifest(store) == []
    assert not [path for path in store.iterdir() if path.name.startswith(MANIFEST + ".")]  # no temp file left


def test_gnu_sha256sum_accepts_it(store):
    if shutil.which("sha256sum") is None:
        pytest.skip("GNU sha256sum is not installed")
    write_manifest(store)
    done = subprocess.run(["sha256sum", "-c", "--strict", MANIFEST], cwd=store, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.count(": OK") == len(STORE_FILES), done.stdout + done.stderr


def test_a_compressed_field_is_covered(tmp_path):
    """Both files of a compressed field are the store's (listed, hashed, checked by sha256sum), never strays."""
    folder = make_compressed_store(tmp_path / "compressed")
    write_manifest(folder)
    listed = [line.split("  ", 1)[1] for line in lines(folder)]
    assert [rel for rel in listed if rel.startswith("steps/")] == [
        "steps/action.npy", "steps/image.frames.npy", "steps/image.index.npy", "steps/reward.npy"]
    assert check_manifest(folder) == [] and stray_files(folder, read_meta(folder).schema) == []
    if shutil.which("sha256sum") is not None:
        done = subprocess.run(["sha256sum", "-c", "--strict", MANIFEST], cwd=folder, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.count(": OK") == len(listed), done.stdout + done.stderr
    flip_byte(folder / "steps/image.frames.npy", 200)
    flip_byte(folder / "steps/image.index.npy", -1)
    assert findings(folder) == [("steps/image.frames.npy", "changed"), ("steps/image.index.npy", "changed")]
    (folder / "steps/image.codes.npy").write_bytes(b"")  # not a file of the layout: a stray
    assert [rel for rel, _ in stray_files(folder, read_meta(folder).schema)] == ["steps/image.codes.npy"]


def test_large_files_are_hashed_in_chunks(tmp_path):
    with ReplayBuffer(tmp_path / "big", max_episodes=2, max_timesteps=300_000,
                      fields=dict(x=("float", (4,)))) as buffer:
        buffer.store_episode(x=np.random.default_rng(0).random((300_000, 4), np.float32))
    assert (tmp_path / "big/steps/x.npy").stat().st_size > 3 * (1 << 20)
    write_manifest(tmp_path / "big", progress=True)
    entries, problems = read_manifest(tmp_path / "big")
    assert problems == [] and entries["steps/x.npy"] == hashlib.sha256((
        tmp_path / "big/steps/x.npy").read_bytes()).hexdigest()


def flip_byte(path, offset=-1):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def findings(folder):
    return [(problem.path, problem.kind) for problem in check_manifest(folder)]


def test_changed_missing_and_unlisted_files(store):
    write_manifest(store)
    flip_byte(store / "steps/obs.npy")
    (store / "meta/task_id.npy").unlink()
    np.save(store / "priorities/other.npy", np.zeros(3))
    (store / "notes2.txt").write_text("still not the store's")
    problems = check_manifest(store)
    assert [(p.path, p.kind) for p in problems] == [("meta/task_id.npy", "missing"), ("steps/obs.npy", "changed"),
                                                    ("priorities/other.npy", "unlisted")]
    assert re.fullmatch(r"steps/obs\.npy: its sha256 is [0-9a-f]{12}… \(expected "
                        r"[0-9a-f]{12}…, from checksums\.sha256\)",
                        str(problems[1]))
    assert str(problems[0]).startswith("meta/task_id.npy: missing (checksums.sha256 lists it")


@pytest.mark.parametrize("line, kind, match", [
    pytest.param("not a checksum line", "malformed", r"line \d+: expected '<64 hex digits>  <path>'", id="garbage"),
    pytest.param("abc123  meta.json", "malformed", r"expected '<64 hex digits>", id="short-digest"),
    pytest.param("0" * 64 + "  ../outside.txt", "unsafe", r"not a plain relative path inside the folder", id="dotdot"),
    pytest.param("0" * 64 + "  steps/../../x", "unsafe", r"not a plain relative path", id="dotdot-inside"),
    pytest.param("0" * 64 + "  /etc/passwd", "unsafe", r"an absolute path", id="absolute"),
    pytest.param("0" * 64 + "  ./meta.json", "unsafe", r"not a plain relative path", id="dot"),
    pytest.param("0" * 64 + "  steps//obs.npy", "unsafe", r"not a plain relative path", id="empty-part"),
    pytest.param("0" * 64 + "  meta.json", "malformed", r"listed twice", id="duplicate"),
])
def test_damaged_manifest_lines(store, line, kind, match):
    write_manifest(store)
    with open(store / MANIFEST, "a") as file:
        file.write(line + "\n")
    problems = [p for p in check_manifest(store) if p.path == MANIFEST]
    assert len(problems) == 1 and problems[0].kind == kind and re.search(match, problems[0].message), problems
    assert [p for p in check_manifest(store) if p.path != MANIFEST] == []  # the good lines still check


def test_a_folder_where_the_manifest_goes_is_refused(store):
    before = sorted(path.name for path in store.iterdir())
    (store / MANIFEST).mkdir()  # was a bare IsADirectoryError from os.replace
    with pytest.raises(CorruptStoreError, match=r"checksums\.sha256 must be a file \(got a folder\), so it cannot be "
                                                r"written; remove the folder checksums\.sha256/"):
        write_manifest(store)
    assert (store / MANIFEST).is_dir() and sorted(path.name for path in store.iterdir()) == sorted([*before, MANIFEST])


def test_an_unreadable_or_missing_manifest(store):
    assert findings(store) == [(MANIFEST, "no_manifest")]
    (store / MANIFEST).write_bytes(b"\xff\xfe garbage")
    problems = check_manifest(store)
    assert problems[0].kind == "malformed" and "cannot be read as text" in problems[0].message
    assert {p.kind for p in problems[1:]} == {"unlisted"}


def test_symlinks_to_outside_are_never_read(store, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read me")
    write_manifest(store)
    os.symlink(secret, store / "stats/leak.npy")
    with open(store / MANIFEST, "a") as file:
        file.write(hashlib.sha256(secret.read_bytes()).hexdigest() + "  stats/leak.npy\n")
    assert ("stats/leak.npy", "unsafe") in findings(store)
    assert store_files(store)[1] == ["stats/leak.npy"]
    with pytest.raises(CorruptStoreError, match=r"stats/leak\.npy must be inside the folder \(found a symbolic link"):
        write_manifest(store)
    (store / "stats/leak.npy").unlink()
    os.symlink(store / "steps/obs.npy", store / "stats/inside.npy")  # a link inside the folder is read as its file
    write_manifest(store)
    assert check_manifest(store) == []


def test_the_locks_it_takes(store):
    with ReplayBuffer.from_folder(store) as writer:
        writer.store_episode(**episode_arrays(3, 2), task_id=3)
        with pytest.raises(StoreLockedError, match=r"cannot write checksums of .*: a writer is writing it \(it holds "
                                                   r"writer\.lock\); close it, then try again"):
            write_manifest(store)
        sampler = writer.sampler("prioritized", seed=0)
    with pytest.raises(StoreLockedError, match=r"a prioritized sampler \(steps\.lock\) is writing it"):
        write_manifest(store)
    sampler.close()
    assert not (store / MANIFEST).exists()
    write_manifest(store)
    with ReplayBuffer.from_folder(store) as writer:  # the locks were released
        writer.store_episode(**episode_arrays(4, 2), task_id=4)


def test_not_a_store(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"no store at .*empty: it holds no meta\.json"):
        write_manifest(tmp_path / "empty")
    with pytest.raises(StoreNotFoundError, match=r"no store at .*nowhere: the folder does not exist"):
        check_manifest(tmp_path / "nowhere")


@pytest.mark.parametrize("rel, expected", [
    ("meta.json", True), ("card.json", True), ("README.md", True), ("steps/obs.npy", True), ("meta/task.npy", True),
    ("episodes/start.npy", True), ("episodes/other.npy", False), ("priorities/steps.owner.npy", True),
    ("priorities/steps.lock", False), ("stats/a/b/c/d.json", True), ("stats/a/b/c/d/e.json", False),
    ("stats/x.tmp", False), ("stats/.hidden", False), ("writer.lock", False), (MANIFEST, False),
    ("notes.txt", False), ("steps/obs.npy.tmp", False), ("steps/1bad.npy", False), ("steps/sub/obs.npy", False),
])
def test_the_layout(rel, expected):
    assert is_store_path(rel) is expected


# ---- the command line ----------------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_cli_checksum(store):
    done = run_cli("checksum", store)
    assert done.returncode == 0 and done.stdout.strip() == f"{store / MANIFEST}: {len(STORE_FILES)} files", done.stderr
    flip_byte(store / "steps/reward.npy")
    done = run_cli("checksum", store, "--check")
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout.startswith(f"{store}: 1 problem against {MANIFEST}:\n  - steps/reward.npy: its sha256 is ")


def test_cli_checksum_in_process(store, tmp_path, capsys):
    """The other outcomes through main() (a process each would cost seconds of torch import)."""
    assert main(["checksum", str(store), "--check"]) == 1
    assert "checksums.sha256: missing: write one with" in capsys.readouterr().out
    assert main(["checksum", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"folder": str(store), "ok": True, "manifest": str(store / MANIFEST),
                                                   "files": len(STORE_FILES)}
    assert main(["checksum", str(store), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"folder": str(store), "ok": True, "problems": []}
    assert main(["checksum", str(store), "--check"]) == 0
    assert capsys.readouterr().out.strip() == f"{store}: OK, {len(STORE_FILES)} files match {MANIFEST}"
    with ReplayBuffer.from_folder(store) as writer:
        writer.store_episode(**episode_arrays(3, 2), task_id=3)
        assert main(["checksum", str(store)], prog="memmap-replay") == 2
    assert re.search(r"^memmap-replay checksum: error: cannot write checksums of .*a writer is writing it",
                     capsys.readouterr().err)
    (tmp_path / "empty").mkdir()
    for args in (["checksum", str(tmp_path / "empty")], ["checksum", str(tmp_path / "empty"), "--check"]):
        assert main(args, prog="memmap-replay") == 2
        assert "error: no store at" in capsys.readouterr().err
    for args, match in ((["checksum"], "the following arguments are required: FOLDER"),
                        (["checksum", str(store), "--bogus"], "unrecognized arguments: --bogus")):
        with pytest.raises(SystemExit, match="2"):
            main(args)
        assert match in capsys.readouterr().err
    with pytest.raises(SystemExit, match="0"):
        main(["checksum", "--help"], prog="memmap-replay")
    text = capsys.readouterr().out
    for words in ("sha256sum -c checksums.sha256", "--check", "exit codes:", "memmap-replay checksum replay_data"):
        assert words in text, words
