"""pack and unpack: round trips in every compression (sparse files stay sparse), every refusal, hostile
archives that must leave nothing behind, and ``python -m memmap_replay pack|unpack`` as a user runs them."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import (CorruptStoreError, DiskFullError, InvalidDataError, NotAFolderError, ReplayBuffer,
                           StoreLockedError, StoreNotFoundError, UnsupportedFormatError, verify)
from memmap_replay.core.codecs import frame_bound
from memmap_replay.sharing.card import read_card
from memmap_replay.sharing.checksums import MANIFEST, write_manifest
from memmap_replay.cli import main
from memmap_replay.sharing.pack import pack, unpack

from compressed_stores import all_data, make_compressed_store
from test_checksums import make_store

SUFFIXES = [".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2"]


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


@pytest.fixture
def archive(store, tmp_path):
    return pack(store, tmp_path / "store.tar").archive


def same_data(first: Path, second: Path) -> None:
    with ReplayBuffer.from_folder(first, read_only=True) as one, ReplayBuffer.from_folder(second,
                                                                                          read_only=True) as two:
        a, b = one.get_all_data(), two.get_all_data()
        assert a.keys() == b.keys() and one.num_episodes == two.num_episodes == 3
        for key in a:
            np.testing.assert_array_equal(a[key].numpy(), b[key].numpy(), err_msg=key)


def leftovers(parent: Path) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if path.name.startswith("."))


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_round_trip(store, tmp_path, suffix):
    summary = pack(store, tmp_path / f"data{suffix}")
    assert summary.files == 20 and summary.left_out == ["notes.txt"]  # meta.json.tmp is neither listed nor packed
    assert summary.archive_bytes == (tmp_path / f"data{suffix}").stat().st_size
    with tarfile.open(tmp_path / f"data{suffix}") as tar:
        names = tar.getnames()
        assert names[:5] == ["store", "store/checksums.sha256", "store/card.json", "store/README.md", "store/meta.json"]
        assert all(member.isreg() or member.isdir() for member in tar.getmembers())
        assert {member.uname for member in tar.getmembers()} == {""}
    unpacked = unpack(tmp_path / f"data{suffix}", tmp_path / "out")
    assert unpacked.folder == tmp_path / "out" and unpacked.files == 20 and unpacked.bytes == summary.bytes
    same_data(store, tmp_path / "out")
    assert read_card(tmp_path / "out") == read_card(store)
    for rel in ("priorities/steps.npy", "stats/obs/mean.npy", MANIFEST):
        assert (tmp_path / "out" / rel).read_bytes() == (store / rel).read_bytes()
    assert not (tmp_path / "out/notes.txt").exists()
    report = verify(tmp_path / "out", checksums=True)
    assert report.ok and not report.warnings and report.checked["checksums"] == 19, report
    assert leftovers(tmp_path) == []


def test_sparse_files_stay_sparse(tmp_path):
    """Steps files grow ahead of the data (holes); unpack seeks over zero blocks, so disk use stays alike."""
    rng = np.random.default_rng(5)
    with ReplayBuffer(tmp_path / "images", max_episodes=4, max_timesteps=200,
                      fields=dict(image=("uint8", (3, 64, 64)), reward="float")) as buffer:
        buffer.store_episode(image=rng.integers(0, 255, (100, 3, 64, 64), dtype=np.uint8),
                             reward=rng.random(100, dtype=np.float32))
    def disk(folder):
        return sum(path.stat().st_blocks * 512 for path in folder.rglob("*") if path.is_file())
    def apparent(folder):
        return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    pack(tmp_path / "images", tmp_path / "images.tar.gz")
    summary = unpack(tmp_path / "images.tar.gz", tmp_path / "copy")
    same_data_images(tmp_path / "images", tmp_path / "copy")
    assert apparent(tmp_path / "copy") == apparent(tmp_path / "images")
    if disk(tmp_path / "images") < apparent(tmp_path / "images") // 2:  # the file system keeps holes
        assert disk(tmp_path / "copy") <= disk(tmp_path / "images") + 64 * 1024
        assert summary.disk_bytes <= disk(tmp_path / "copy")


def same_data_images(first: Path, second: Path) -> None:
    with ReplayBuffer.from_folder(first, read_only=True) as one, ReplayBuffer.from_folder(second,
                                                                                          read_only=True) as two:
        a, b = one.get_all_data(), two.get_all_data()
        for key in a:
            np.testing.assert_array_equal(a[key].numpy(), b[key].numpy(), err_msg=key)


def test_zstd_only_where_python_has_it(store, tmp_path):
    if "zst" in tarfile.TarFile.OPEN_METH:
        pack(store, tmp_path / "data.tar.zst")
        unpack(tmp_path / "data.tar.zst", tmp_path / "out")
        same_data(store, tmp_path / "out")
    else:
        with pytest.raises(UnsupportedFormatError, match=r"cannot write zstd \(data\.tar\.zst\); use Python 3\.14\+"):
            pack(store, tmp_path / "data.tar.zst")
        assert not (tmp_path / "data.tar.zst").exists()


def test_pack_refusals(store, tmp_path):
    with pytest.raises(InvalidDataError, match=r"must end in one of \.tar, \.tar\.gz, .* \(got 'data\.zip'\)"):
        pack(store, tmp_path / "data.zip")
    with pytest.raises(InvalidDataError, match=r"must be outside the store's folder"):
        pack(store, store / "inside.tar")
    (tmp_path / "dir.tar").mkdir()
    with pytest.raises(NotAFolderError, match=r"dir\.tar is a folder; give the path of the file to write"):
        pack(store, tmp_path / "dir.tar")
    with pytest.raises(NotAFolderError, match=r"cannot be written: the folder .*nowhere does not exist"):
        pack(store, tmp_path / "nowhere" / "x.tar")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"no store at .*empty: it holds no meta\.json"):
        pack(tmp_path / "empty", tmp_path / "x.tar")
    pack(store, tmp_path / "data.tar")
    with pytest.raises(InvalidDataError, match=r"data\.tar already exists; pass overwrite=True"):
        pack(store, tmp_path / "data.tar")
    assert pack(store, tmp_path / "data.tar", overwrite=True).files == 20
    with ReplayBuffer.from_folder(store) as writer:
        writer.clear()  # a write: the writer holds the lock
        with pytest.raises(StoreLockedError, match=r"cannot pack .*a writer is writing it"):
            pack(store, tmp_path / "locked.tar")
    assert not (tmp_path / "locked.tar").exists() and leftovers(tmp_path) == []


def test_pack_refuses_a_damaged_store(store, tmp_path):
    os.truncate(store / "steps/obs.npy", (store / "steps/obs.npy").stat().st_size - 1)
    with pytest.raises(CorruptStoreError, match=r"fails verify, so it is not packed \(1 problems: steps/obs\.npy: "
                                                r"truncated.*memmap_replay verify"):
        pack(store, tmp_path / "data.tar")
    assert not (tmp_path / "data.tar").exists() and leftovers(tmp_path) == []


def test_pack_refuses_data_that_no_longer_matches_its_checksums(store, tmp_path):
    write_manifest(store)
    path = store / "steps/reward.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match=r"fails verify.*steps/reward\.npy: its sha256 is"):
        pack(store, tmp_path / "data.tar")
    assert not (tmp_path / "data.tar").exists()
    write_manifest(store)  # the user says the change is theirs
    assert pack(store, tmp_path / "data.tar").files == 20


def test_a_failed_pack_leaves_no_archive(store, tmp_path, monkeypatch):
    def broken(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", broken)
    with pytest.raises(DiskFullError, match=r"no space left on the device \(or quota\) to write the archive "
                                            r".*data\.tar\.gz \(No space left on device\); no archive was written"):
        pack(store, tmp_path / "data.tar.gz")
    assert not (tmp_path / "data.tar.gz").exists() and leftovers(tmp_path) == []


# ---- unpack: refusals and hostile archives ---------------------------------------------------------------


def rebuild(good: Path, out: Path, change=None, extra=(), mode="w") -> Path:
    """Copy the members of ``good`` into ``out``: ``change(info, data)`` returns the members to write instead
    (a list of (TarInfo, bytes or None)), ``extra`` members are appended."""
    with tarfile.open(good) as source, tarfile.open(out, mode) as target:
        for info in source.getmembers():
            data = source.extractfile(info).read() if info.isreg() else None
            for new, payload in (change(info, data) if change else [(info, data)]):
                target.addfile(new, io.BytesIO(payload) if payload is not None else None)
        for new, payload in extra:
            target.addfile(new, io.BytesIO(payload) if payload is not None else None)
    return out


def member(name, kind=tarfile.REGTYPE, data=b"", linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, linkname
    return info, data if kind == tarfile.REGTYPE else None


def tamper(rel, edit):
    def change(info, data):
        if info.name == f"store/{rel}":
            data = edit(data)
            info.size = len(data)
        return [(info, data)]
    return change


def drop(rel):
    return lambda info, data: [] if info.name == f"store/{rel}" else [(info, data)]


def flipped(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


def damaged_meta(store: Path):
    """meta.json claims more rows than the files hold; the manifest is made to agree, so only verify sees it."""
    import hashlib

    meta = json.loads((store / "meta.json").read_text())
    meta["state"]["rows"] += 10_000
    text = json.dumps(meta).encode()
    manifest = (store / MANIFEST).read_text().replace(hashlib.sha256((store / "meta.json").read_bytes()).hexdigest(),
                                                      hashlib.sha256(text).hexdigest()).encode()
    replacements = {"store/meta.json": text, f"store/{MANIFEST}": manifest}

    def change(info, data):
        if info.name in replacements:
            data = replacements[info.name]
            info.size = len(data)
        return [(info, data)]
    return change


HOSTILE = {
    "dotdot": (dict(extra=[member("store/../evil.txt", data=b"x")]), r"member 'store/\.\./evil\.txt' has a '\.\.'"),
    "dotdot-first": (dict(extra=[member("../evil.txt", data=b"x")]), r"has a '\.\.', '\.' or empty part"),
    "absolute": (dict(extra=[member("{tmp}/evil_abs.txt", data=b"x")]), r"has an absolute or non-posix path"),
    "symlink": (dict(extra=[member("store/steps/link.npy", tarfile.SYMTYPE, linkname="/etc/passwd")]),
                r"is a symbolic link; only plain files and folders are unpacked"),
    "hardlink": (dict(extra=[member("store/steps/hard.npy", tarfile.LNKTYPE, linkname="store/meta.json")]),
                 r"is a hard link"),
    "device": (dict(extra=[member("store/steps/dev.npy", tarfile.CHRTYPE)]), r"is a device or fifo"),
    "fifo": (dict(extra=[member("store/steps/fifo.npy", tarfile.FIFOTYPE)]), r"is a device or fifo"),
    "outside-layout": (dict(extra=[member("store/notes.txt", data=b"x")]), r"'store/notes\.txt' is not "
                                                                           r"one of a store's files"),
    "script-in-steps": (dict(extra=[member("store/steps/run.sh", data=b"rm -rf /")]), r"is not one of a store's files"),
    "second-top-folder": (dict(extra=[member("other/meta.json", data=b"{}")]),
                          r"outside the archive's top folder 'store'"),
    "top-is-a-file": (dict(change=lambda info, data: [], extra=[member("store", data=b"x")]),
                      r"'store' is not one of a store's"),
    "duplicate": (dict(extra=[member("store/meta.json", data=b"{}")]), r"'store/meta\.json' appears twice"),
    "backslash": (dict(extra=[member("store\\..\\evil", data=b"x")]), r"has an absolute or non-posix path"),
    "too-large-for-meta": (dict(change=tamper("steps/obs.npy", lambda data: data + bytes(200_000))),
                           r"'store/steps/obs\.npy' declares \d+ bytes \(expected at most \d+ for this file\)"),
    "tampered-data": (dict(change=tamper("steps/obs.npy", flipped)), r"does not match its own checksums, so nothing "
                                                                      r"was unpacked: steps/obs\.npy: its sha256 is"),
    "tampered-priorities": (dict(change=tamper("priorities/steps.npy", flipped)), r"priorities/steps\.npy: its sha256"),
    "no-manifest": (dict(change=drop(MANIFEST)), r"checksums\.sha256: missing"),
    "missing-file": (dict(change=drop("steps/reward.npy")), r"steps/reward\.npy: missing"),
    "empty": (dict(change=lambda info, data: []), r"holds no files"),
}


def renamed(info: tarfile.TarInfo, name: str) -> tarfile.TarInfo:
    copy = tarfile.TarInfo(name)
    copy.type, copy.size, copy.linkname = info.type, info.size, info.linkname
    return copy


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_archives_are_refused_and_leave_nothing(store, archive, tmp_path, kind):
    options, match = HOSTILE[kind]
    if "extra" in options:
        options = dict(options, extra=[(renamed(info, info.name.format(tmp=tmp_path)), data)
                                       for info, data in options["extra"]])
    bad = rebuild(archive, tmp_path / "bad.tar", **options)
    target = tmp_path / "unpacked" / "store"
    with pytest.raises(CorruptStoreError, match=match):
        unpack(bad, target)
    assert not target.exists() and leftovers(tmp_path / "unpacked") == []
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "evil_abs.txt").exists()


def test_a_damaged_store_with_matching_checksums_is_refused(store, archive, tmp_path):
    bad = rebuild(archive, tmp_path / "bad.tar.gz", change=damaged_meta(store), mode="w:gz")
    with pytest.raises(CorruptStoreError, match=r"holds a damaged store, so nothing was unpacked: "
                                                r"steps/obs\.npy: too short"):
        unpack(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("suffix, cut", [(".tar", 0.5), (".tar", "last-file"), (".tar.gz", 0.5), (".tar.gz", 0.95),
                                         (".tar.xz", 0.7)])
def test_truncated_archives(store, tmp_path, suffix, cut):
    good = pack(store, tmp_path / f"data{suffix}").archive
    data = good.read_bytes()
    if cut == "last-file":  # cut in the middle of the last file's bytes (a .tar ends in padding that is safe to lose)
        with tarfile.open(good) as tar:
            last = tar.getmembers()[-1]
        good.write_bytes(data[:last.offset_data + last.size // 2])
    else:
        good.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(CorruptStoreError, match=r"(is truncated or damaged|does not match its own checksums|holds no "
                                                r"files|: missing)"):
        unpack(good, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_not_an_archive_and_size_limits(store, archive, tmp_path):
    (tmp_path / "noise.tar.gz").write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(CorruptStoreError, match=r"noise\.tar\.gz is truncated or damaged \(ReadError"):
        unpack(tmp_path / "noise.tar.gz", tmp_path / "out")
    with pytest.raises(CorruptStoreError, match=r"brings the unpacked size to \d+ bytes, more than max_bytes = 2000; "
                                                r"pass a larger max_bytes"):
        unpack(archive, tmp_path / "out", max_bytes=2000)
    with pytest.raises(InvalidDataError, match=r"max_bytes must be a positive integer \(got 0\)"):
        unpack(archive, tmp_path / "out", max_bytes=0)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_unpack_targets(store, archive, tmp_path):
    with pytest.raises(StoreNotFoundError, match=r"no archive at .*nope\.tar: no such file"):
        unpack(tmp_path / "nope.tar", tmp_path / "out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAFolderError, match=r"file must be a folder to unpack into \(got a file\)"):
        unpack(archive, tmp_path / "file")
    (tmp_path / "empty").mkdir()
    unpack(archive, tmp_path / "empty")  # an empty folder is filled
    same_data(store, tmp_path / "empty")
    with pytest.raises(InvalidDataError, match=r"empty is not empty; unpack into a new or empty folder, or pass "
                                               r"overwrite=True"):
        unpack(archive, tmp_path / "empty")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/thesis.tex").write_text("precious")
    with pytest.raises(InvalidDataError, match=r"mine is not a memmap_replay store \(it holds thesis\.tex\); overwrite "
                                               r"replaces a store only"):
        unpack(archive, tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine/thesis.tex").read_text() == "precious"
    with ReplayBuffer.from_folder(tmp_path / "empty") as writer:
        writer.clear()  # holds the writer lock
        with pytest.raises(StoreLockedError, match=r"cannot replace .*empty: a writer is writing it"):
            unpack(archive, tmp_path / "empty", overwrite=True)
    assert leftovers(tmp_path) == []
    with ReplayBuffer.from_folder(tmp_path / "empty", read_only=True) as reader:
        assert reader.num_episodes == 0  # the cleared store is still there, untouched
    unpack(archive, tmp_path / "empty", overwrite=True)
    same_data(store, tmp_path / "empty")
    assert leftovers(tmp_path) == []


def test_unpack_refuses_links_and_folders_inside_a_store(store, archive, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")  # was a bare NotADirectoryError after extracting it all
    with pytest.raises(NotAFolderError, match=r"the folder to unpack into, .*link must not be a symbolic link \(it "
                                              r"points to .*empty\); give the path it points to"):
        unpack(archive, tmp_path / "link")
    before = sorted(path.name for path in store.iterdir())
    for inside in ("copy", "steps"):  # was unpacked into a folder among the store's own files
        with pytest.raises(InvalidDataError, match=rf"the folder to unpack into, .*store/{inside} must be outside the "
                                                   rf"store at .*store \(got a path inside it\)"):
            unpack(archive, store / inside, overwrite=True)
    assert sorted(path.name for path in store.iterdir()) == before and list((tmp_path / "empty").iterdir()) == []
    assert leftovers(tmp_path) == [] and leftovers(store) == []


# ---- the command line ----------------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_cli_pack_and_unpack(store, tmp_path):
    done = run_cli("pack", store, tmp_path / "data.tar.gz")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert re.fullmatch(rf"packed 20 files \([\d,]+ bytes\) of {store} into {tmp_path}/data\.tar\.gz \([\d,]+ bytes\)\n"
                        rf"left out \(not the store's files\): notes\.txt\n", done.stdout), done.stdout
    done = run_cli("unpack", tmp_path / "data.tar.gz", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and result["files"] == 20 and result["folder"] == str(tmp_path / "out")
    same_data(store, tmp_path / "out")
    rebuild(tmp_path / "data.tar.gz", tmp_path / "evil.tar", extra=[member("../evil.txt", data=b"x")])
    done = run_cli("unpack", tmp_path / "evil.tar", tmp_path / "out2")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("python -m memmap_replay unpack: error: archive ") and "'../evil.txt'" in done.stderr
    assert not (tmp_path / "out2").exists() and not (tmp_path / "evil.txt").exists()


@pytest.mark.parametrize("args, code, match", [
    pytest.param(["pack", "{store}", "{tmp}/x.zip"], 2, r"must end in one of \.tar", id="pack-bad-suffix"),
    pytest.param(["pack", "{tmp}/empty", "{tmp}/x.tar"], 2, r"no store at .*empty", id="pack-not-a-store"),
    pytest.param(["pack", "{damaged}", "{tmp}/x.tar"], 1, r"fails verify, so it is not packed", id="pack-damaged"),
    pytest.param(["pack", "{store}"], 2, r"the following arguments are required: ARCHIVE", id="pack-no-archive"),
    pytest.param(["unpack", "{tmp}/nope.tar", "{tmp}/out"], 2, r"no archive at .*nope\.tar", id="unpack-no-archive"),
    pytest.param(["unpack", "{archive}", "{store}"], 2, r"is not empty; unpack into a new or empty folder",
                 id="unpack-not-empty"),
    pytest.param(["unpack", "{bad}", "{tmp}/out"], 1, r"does not match its own checksums", id="unpack-tampered"),
    pytest.param(["unpack", "{archive}", "{tmp}/out", "--max-size", "lots"], 2,
                 r"--max-size: must be a size such as 500M", id="unpack-bad-size"),
    pytest.param(["unpack", "{archive}", "{tmp}/out", "--max-size", "1K"], 1, r"more than max_bytes = 1024",
                 id="unpack-too-big"),
    pytest.param(["unpack", "{archive}"], 2, r"the following arguments are required: FOLDER", id="unpack-no-folder"),
])
def test_cli_refusals(store, archive, tmp_path, capsys, args, code, match):
    (tmp_path / "empty").mkdir()
    damaged = make_store(tmp_path / "damaged")
    (damaged / "meta/task_id.npy").unlink()
    bad = rebuild(archive, tmp_path / "bad.tar", change=tamper("steps/obs.npy", flipped))
    names = dict(store=store, tmp=tmp_path, damaged=damaged, archive=archive, bad=bad)
    try:
        result = main([arg.format(**names) for arg in args], prog="memmap-replay")
    except SystemExit as exit:
        result = exit.code
    err = capsys.readouterr().err
    assert result == code and re.search(match, err), err
    assert "Traceback" not in err and not (tmp_path / "out").exists() and not (tmp_path / "x.tar").exists()


def test_cli_help_teaches(capsys):
    for command, words in (("pack",
                            ("checksums.sha256 first", ".tar.gz", "left out", "memmap-replay pack replay_data")),
                           ("unpack", ("no '..', no links", "beside FOLDER", "--overwrite", "--max-size", "Sparse"))):
        with pytest.raises(SystemExit, match="0"):
            main([command, "--help"], prog="memmap-replay")
        text = capsys.readouterr().out
        for word in (*words, "exit codes:"):
            assert word in text, (command, word)


# ---- unpack's limits: re-spelled duplicates, bombs before and after meta.json, sparse members ----------------

pack_module = sys.modules["memmap_replay.sharing.pack"]
GIB = 1 << 30
READ_BOUND = 2 << 20  # a refused archive may make unpack read (from the archive file plus out of members) this much


class ReadTooMuch(BaseException):
    """Raised by the read counter past its bound (a BaseException, so that nothing on the way swallows it)."""


@pytest.fixture
def read_counter(monkeypatch):
    """Counts the bytes unpack reads from the archive file and out of its members; raises past READ_BOUND."""
    count = {"bytes": 0}

    def add(data):
        count["bytes"] += len(data)
        if count["bytes"] > READ_BOUND:
            raise ReadTooMuch(f"unpack read {count['bytes']} bytes, more than {READ_BOUND}")
        return data

    class Reader:
        def __init__(self, file):
            self.file = file

        def read(self, *args):
            return add(self.file.read(*args))

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    real_open, real_extract = open, tarfile.TarFile.extractfile
    monkeypatch.setattr(pack_module, "open", lambda *args, **kwargs: Reader(real_open(*args, **kwargs)), raising=False)
    monkeypatch.setattr(tarfile.TarFile, "extractfile", lambda self, member: Reader(real_extract(self, member)))
    return count


def members_of(archive: Path) -> list:
    with tarfile.open(archive) as tar:
        return [(info, tar.extractfile(info).read() if info.isreg() else None) for info in tar.getmembers()]


def write_tar(path: Path, members) -> Path:
    """A plain tar of (TarInfo or a raw header, payload): payload is bytes, None, or (prefix, size): ``size``
    bytes of data of which all but ``prefix`` are a hole in the archive file (cheap however large)."""
    with open(path, "wb") as out:
        for info, payload in members:
            out.write(info if isinstance(info, bytes) else info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
            if isinstance(payload, tuple):
                prefix, size = payload
                out.write(prefix)
                out.seek(-(-size // 512) * 512 - len(prefix), os.SEEK_CUR)
            elif payload:
                out.write(payload + bytes(-len(payload) % tarfile.BLOCKSIZE))
        out.write(bytes(2 * tarfile.BLOCKSIZE))
        out.truncate()
    return path


def regular(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def gnu_sparse(name: str, realsize: int, stored: int) -> bytes:
    """An old-GNU sparse header (type 'S'): one data block of ``stored`` bytes, real size ``realsize``."""
    info = regular(name, stored)
    info.type = tarfile.GNUTYPE_SPARSE
    buf = bytearray(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
    buf[386:410] = tarfile.itn(0, 12, tarfile.GNU_FORMAT) + tarfile.itn(stored, 12, tarfile.GNU_FORMAT)
    buf[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)
    buf[148:156] = b" " * 8
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf)


def pax_sparse(name: str, realsize: int, version: str) -> tuple[tarfile.TarInfo, bytes]:
    """A PAX sparse member (GNU's 0.0, 0.1 or 1.0 format) with one 512-byte data block."""
    data = b"x" * 512
    if version == "1.0":
        info = regular(f"{name.rpartition('/')[0]}/GNUSparseFile.0/{name.rpartition('/')[2]}", 1024)
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                            "GNU.sparse.realsize": str(realsize)}
        return info, b"1\n0\n512\n".ljust(512, b"\0") + data
    info = regular(name, 512)
    info.pax_headers = ({"GNU.sparse.size": str(realsize), "GNU.sparse.numblocks": "1", "GNU.sparse.offset": "0",
                         "GNU.sparse.numbytes": "512"} if version == "0.0" else
                        {"GNU.sparse.size": str(realsize), "GNU.sparse.map": "0,512"})
    return info, data


def pax_record(keyword: str, value: str) -> bytes:
    body = f" {keyword}={value}\n"
    length = len(body) + 1
    length = len(body) + len(str(length + len(str(length))))
    return f"{length}{body}".encode()


def pax_bomb(size: int) -> tuple[tarfile.TarInfo, tuple]:
    """A PAX extended header whose records take ``size`` bytes (one comment, then zeros tarfile reads whole)."""
    info = regular("././@PaxHeader", size)
    info.type = tarfile.XHDTYPE
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"), (pax_record("comment", "hi"), size)


def with_member(good: list, new: list, *, before: str = "store/meta.json", after: str | None = None) -> list:
    """The good members with ``new`` inserted before the member named ``before`` (or after ``after``)."""
    out = []
    for info, data in good:
        if info.name == before and after is None:
            out.extend(new)
        out.append((info, data))
        if info.name == after:
            out.extend(new)
    return out


def bomb_archive(kind: str, good: list, tmp_path: Path) -> Path:
    steps = "store/steps/obs.npy"
    if kind == "zeros-before-meta.tar.gz":  # the case: a data file of zeros before meta.json, compressed
        members = with_member(good, [(regular("store/stats/zeros.npy", 32 << 20), (b"", 32 << 20))])
        plain = write_tar(tmp_path / "plain.tar", members)
        import gzip
        (tmp_path / "bomb.tar.gz").write_bytes(gzip.compress(plain.read_bytes(), 1))
        return tmp_path / "bomb.tar.gz"
    members = {
        "data-before-meta": lambda: with_member(good, [(regular(steps, 2 * GIB), (b"", 2 * GIB))]),
        "gnu-sparse-before-meta": lambda: with_member(good, [(gnu_sparse(steps, 64 * GIB, 512), b"x" * 512)]),
        "pax-sparse-1.0-before-meta": lambda: with_member(good, [pax_sparse(steps, 64 * GIB, "1.0")]),
        "meta-too-large": lambda: [(regular("store/meta.json", 8 << 20), (b"{", 8 << 20))
                                   if info.name == "store/meta.json"
                                   else (info, data) for info, data in good],
        "gnu-sparse-after-meta": lambda: with_member(good,
                                                     [(gnu_sparse("store/stats/s.npy", 64 * GIB, 512), b"x" * 512)],
                                                     after="store/meta.json"),
        "pax-sparse-0.0-after-meta": lambda: with_member(good, [pax_sparse("store/stats/s.npy", 64 * GIB, "0.0")],
                                                         after="store/meta.json"),
        "pax-sparse-0.1-after-meta": lambda: with_member(good, [pax_sparse("store/stats/s.npy", 64 * GIB, "0.1")],
                                                         after="store/meta.json"),
        "pax-sparse-1.0-after-meta": lambda: with_member(good, [pax_sparse("store/stats/s.npy", 64 * GIB, "1.0")],
                                                         after="store/meta.json"),
        "sparse-stores-more-than-it-declares": lambda: with_member(
            good, [(gnu_sparse("store/stats/s.npy", 1000, 256 << 20), (b"x" * 512, 256 << 20))],
            after="store/meta.json"),
        "stats-bomb-after-meta": lambda: with_member(good, [(regular("store/stats/big.npy", GIB), (b"", GIB))],
                                                     after="store/meta.json"),
        "field-bomb-after-meta": lambda: with_member(good, [(regular("store/steps/other.npy", GIB), (b"", GIB))],
                                                     after="store/meta.json"),
        "bomb-after-unreadable-meta": lambda: with_member(
            [(regular(info.name, 8), b"not json") if info.name == "store/meta.json" else (info, data)
             for info, data in good], [(regular("store/stats/big.npy", GIB), (b"", GIB))], after="store/meta.json"),
        "pax-header-bomb": lambda: with_member(good, [pax_bomb(256 << 20)], after="store/meta.json"),
        "pax-header-bomb-first": lambda: [pax_bomb(256 << 20), *good],
    }[kind]()
    return write_tar(tmp_path / "bomb.tar", members)


BOMBS = {
    "zeros-before-meta.tar.gz": r"'store/stats/zeros\.npy' comes before meta\.json; a pack archive holds meta\.json "
                                r"before the store's data files",
    "data-before-meta": r"'store/steps/obs\.npy' comes before meta\.json",
    "gnu-sparse-before-meta": r"'store/steps/obs\.npy' comes before meta\.json",
    "pax-sparse-1.0-before-meta": r"'store/steps/obs\.npy' comes before meta\.json",
    "meta-too-large": r"'store/meta\.json' declares 8388608 bytes \(expected at most 4194304 for this file\)",
    "gnu-sparse-after-meta": r"'store/stats/s\.npy' declares 68719476736 bytes as its real size \(a sparse member\)",
    "pax-sparse-0.0-after-meta": r"'store/stats/s\.npy' declares 68719476736 bytes as its real size",
    "pax-sparse-0.1-after-meta": r"'store/stats/s\.npy' declares 68719476736 bytes as its real size",
    "pax-sparse-1.0-after-meta": r"'store/stats/s\.npy' declares 68719476736 bytes as its real size",
    "sparse-stores-more-than-it-declares": r"'store/stats/s\.npy' takes 268435456 bytes in the archive \(expected at "
                                           r"most \d+ for this file\)",
    "stats-bomb-after-meta": r"'store/stats/big\.npy' declares 1073741824 bytes \(expected at most \d+ for this file\)",
    "field-bomb-after-meta": r"'store/steps/other\.npy' declares 1073741824 bytes \(expected at most 65536 for this",
    "bomb-after-unreadable-meta": r"is refused: its meta\.json cannot be read \(.*not valid JSON",
    "pax-header-bomb": r"is refused: its tar headers \(PAX records, long names or a sparse map\) take more than "
                       r"64 KiB for one member",
    "pax-header-bomb-first": r"is refused: its tar headers \(PAX records, long names or a sparse map\) take more "
                             r"than 64 KiB for one member",
}


@pytest.mark.parametrize("kind", list(BOMBS))
def test_bombs_are_refused_before_their_data_is_read(store, archive, tmp_path, read_counter, kind):
    """Every member's declared size (the real size of a sparse one) and stored size is checked before its data
    is read, members before meta.json included; unpack reads at most READ_BOUND bytes of a refused archive
    (the counter raises past it: without the checks, unpack read gigabytes)."""
    bomb = bomb_archive(kind, members_of(archive), tmp_path)
    read_counter["bytes"] = 0
    target = tmp_path / "unpacked" / "store"
    with pytest.raises(CorruptStoreError, match=BOMBS[kind]):
        unpack(bomb, target)
    assert read_counter["bytes"] <= READ_BOUND
    assert not target.exists() and leftovers(tmp_path / "unpacked") == []


def test_a_sparse_member_within_the_limits_is_unpacked(store, archive, tmp_path):
    """A sparse member is checked by its real size, not refused for being sparse: a stats file stored sparse
    (as GNU tar -S writes it) unpacks to its real size, holes and all."""
    good = members_of(archive)
    body = b"y" * 512
    header = gnu_sparse("store/stats/sparse.npy", 4096, 512)
    members = with_member(good, [(header, body)], after="store/meta.json")
    bad = write_tar(tmp_path / "sparse.tar", members)
    with pytest.raises(CorruptStoreError, match=r"does not match its own checksums.*stats/sparse\.npy"):
        unpack(bad, tmp_path / "out")  # not in the manifest: refused there, after being read within its limits
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


RESPELLED = {
    "dot-slash": ("./store/meta.json", r"'\./store/meta\.json' appears twice \(as 'store/meta\.json': the same path "
                                       r"spelled otherwise\)"),
    "dot-slash-data": ("./store/steps/obs.npy", r"'\./store/steps/obs\.npy' appears twice \(as 'store/steps/obs\.npy'"),
    "double-slash": ("store//meta.json", r"'store//meta\.json' has a '\.\.', '\.' or empty part"),
    "dot-part": ("store/./meta.json", r"'store/\./meta\.json' has a '\.\.', '\.' or empty part"),
}


@pytest.mark.parametrize("kind", list(RESPELLED))
def test_respelled_duplicates_are_refused(store, archive, tmp_path, kind):
    """Duplicates are found by normalized path: `./store/meta.json` after `store/meta.json` was a bare
    FileExistsError."""
    name, match = RESPELLED[kind]
    bad = rebuild(archive, tmp_path / "bad.tar", extra=[member(name, data=b"{}")])
    with pytest.raises(CorruptStoreError, match=match):
        unpack(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_file_where_another_member_needs_a_folder_is_refused(store, archive, tmp_path):
    """stats/a as a file, then stats/a/b: was a bare FileExistsError from mkdir."""
    bad = rebuild(archive, tmp_path / "bad.tar", extra=[member("store/stats/a", data=b"1"),
                                                        member("store/stats/a/b", data=b"2")])
    with pytest.raises(CorruptStoreError, match=r"'store/stats/a/b' needs 'a' to be a folder, but another member made "
                                                r"it a file"):
        unpack(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


# ---- fault injection: every os/file call pack.py makes fails once, at each position in turn ----------------

import errno  # noqa: E402
import hashlib  # noqa: E402

from memmap_replay import ReadOnlyError, ReplayError  # noqa: E402
from memmap_replay.errors import StoreIOError  # noqa: E402

FAULTS = {errno.ENOSPC: (DiskFullError, r"no space left on the device \(or quota\) to .*free some space"),
          errno.EACCES: (ReadOnlyError, r"no permission to .*choose a place you may write to"),
          errno.EIO: (StoreIOError, r"the system failed to .*check the disk")}
OS_CALLS = ("open", "fdopen", "mkdir", "rmdir", "rename", "replace", "fsync", "fstat", "stat", "unlink")
FILE_CALLS = ("read", "write", "seek", "truncate", "flush")


class Faults:
    """Counts the calls pack.py makes to the os module, to ``open`` and to the files it opens; the ``at``-th
    one fails with OSError(``code``) (a close fails after closing, as on NFS)."""

    def __init__(self):
        self.calls, self.at, self.code, self.hit = 0, None, None, None

    def arm(self, at, code):
        self.calls, self.at, self.code, self.hit = 0, at, code, None

    def tick(self, site):
        self.calls += 1
        if self.calls == self.at:
            self.hit = site
            raise OSError(self.code, os.strerror(self.code))


class FaultyFile:
    def __init__(self, file, faults):
        self._file, self._faults = file, faults

    def __getattr__(self, name):
        real = getattr(self._file, name)
        if name not in FILE_CALLS:
            return real

        def call(*args, **kwargs):
            self._faults.tick(name)
            return real(*args, **kwargs)
        return call

    def close(self):
        if not self._file.closed:
            self._file.close()
            self._faults.tick("close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FaultyOS:
    def __init__(self, faults):
        self._faults = faults

    def __getattr__(self, name):
        real = getattr(os, name)
        if name not in OS_CALLS:
            return real

        def call(*args, **kwargs):
            self._faults.tick(name)
            result = real(*args, **kwargs)
            return FaultyFile(result, self._faults) if name == "fdopen" else result
        return call


@pytest.fixture
def faults(monkeypatch):
    found = Faults()

    def faulty_open(*args, **kwargs):
        found.tick("open")
        return FaultyFile(open(*args, **kwargs), found)

    monkeypatch.setattr(pack_module, "os", FaultyOS(found))
    monkeypatch.setattr(pack_module, "open", faulty_open, raising=False)
    return found


def tree(folder: Path) -> dict:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("code", list(FAULTS), ids=errno.errorcode.get)
def test_pack_fault_injection(store, tmp_path, faults, code):
    """The n-th call fails, for every n along pack: only the mapped ReplayError escapes, naming the file;
    no archive and no temporary file are left; the store is unchanged."""
    write_manifest(store)  # so pack writes nothing into the store
    before, out = tree(store), tmp_path / "out"
    out.mkdir()
    faults.arm(None, code)
    pack(store, out / "dry.tar.gz")
    total = faults.calls
    (out / "dry.tar.gz").unlink()
    assert total > 40, total
    error, match = FAULTS[code]
    for at in range(1, total + 1):
        faults.arm(at, code)
        with pytest.raises(ReplayError) as raised:
            pack(store, out / "data.tar.gz")
        assert isinstance(raised.value, error) and re.search(match, str(raised.value)), (at, faults.hit, raised.value)
        assert re.search(r"(data\.tar\.gz|store/\S+).*no archive was written", str(raised.value)), str(raised.value)
        assert faults.hit and list(out.iterdir()) == [], (at, faults.hit, list(out.iterdir()))
        assert tree(store) == before
    faults.arm(None, code)
    pack(store, out / "data.tar.gz")  # and the next try works
    unpack(out / "data.tar.gz", tmp_path / "copy")
    same_data(store, tmp_path / "copy")


@pytest.mark.parametrize("into, code", [(into, code) for into in ("new", "replace") for code in FAULTS]
                         + [("empty", errno.ENOSPC)], ids=lambda value: errno.errorcode.get(value, value))
def test_unpack_fault_injection(store, tmp_path, faults, code, into):
    """The n-th call fails, for every n along unpack (into a new folder, an empty one, or replacing a store):
    only the mapped ReplayError escapes; no temporary folder is left; the archive and a replaced store are
    unchanged (and an empty folder is still there)."""
    write_manifest(store)
    good = pack(store, tmp_path / "data.tar.gz").archive
    archive_hash = hashlib.sha256(good.read_bytes()).hexdigest()
    parent = tmp_path / "place"
    parent.mkdir()
    target = parent / "target"
    if into == "empty":
        target.mkdir()
    elif into == "replace":
        with ReplayBuffer(target, max_episodes=2, max_timesteps=4, fields=dict(x="float")) as other:
            other.store_episode(x=np.arange(3, dtype=np.float32))
    before = tree(target) if into == "replace" else None
    faults.arm(None, code)
    unpack(good, parent / "dry")
    total = faults.calls
    shutil.rmtree(parent / "dry")
    assert total > 40, total
    error, match = FAULTS[code]
    for at in range(1, total + 1):
        faults.arm(at, code)
        with pytest.raises(ReplayError) as raised:
            unpack(good, target, overwrite=into == "replace")
        assert isinstance(raised.value, error) and re.search(match, str(raised.value)), (at, faults.hit, raised.value)
        assert "nothing was unpacked" in str(raised.value), str(raised.value)
        assert faults.hit and leftovers(parent) == [], (at, faults.hit, leftovers(parent))
        if into == "replace":
            assert tree(target) == before, (at, faults.hit)
        elif into == "empty":
            assert target.is_dir() and list(target.iterdir()) == [], (at, faults.hit)
        else:
            assert not target.exists(), (at, faults.hit)
        assert hashlib.sha256(good.read_bytes()).hexdigest() == archive_hash
    faults.arm(None, code)
    unpack(good, target, overwrite=into == "replace")
    same_data(store, target)


# ---- compressed fields -----------------------------------------------------------------------------------


COMPRESSED_EPISODES = 200  # max_steps 2,200: the frames file grows to 1 MiB (a hole past the 0.5 KiB of frames)


@pytest.fixture(scope="module")
def compressed(tmp_path_factory):
    return make_compressed_store(tmp_path_factory.mktemp("compressed") / "store", max_episodes=COMPRESSED_EPISODES)


def test_a_compressed_store_round_trips_bit_exact(compressed, tmp_path):
    """The frames and the index travel as the store's files: unpacked byte for byte, they decode to the same rows
    (a frames file is allowed what every row raw takes: max_steps x the row's bytes; before, one byte a row)."""
    assert (compressed / "steps/image.frames.npy").stat().st_size > 1 << 20
    summary = pack(compressed, tmp_path / "c.tar.gz")
    with tarfile.open(summary.archive) as tar:
        assert {"store/steps/image.frames.npy", "store/steps/image.index.npy"} <= set(tar.getnames())
    unpacked = unpack(summary.archive, tmp_path / "out")
    assert unpacked.files == summary.files and leftovers(tmp_path) == []
    for rel in ("steps/image.frames.npy", "steps/image.index.npy", "meta.json", MANIFEST):
        assert (tmp_path / "out" / rel).read_bytes() == (compressed / rel).read_bytes(), rel
    report = verify(tmp_path / "out", checksums=True)
    assert report.ok and not report.warnings and report.checked["frames"] == 19, report
    before, after = all_data(compressed), all_data(tmp_path / "out")
    assert before.keys() == after.keys()
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    assert before["image"].any()


@pytest.mark.parametrize("rel, row_bytes", [("steps/image.frames.npy", frame_bound(16 * 16 * 3)),
                                            ("steps/image.index.npy", 16)])
def test_the_size_limits_of_a_compressed_field(compressed, tmp_path, rel, row_bytes):
    """unpack allows a compressed field's frames every row incompressible (max_steps x a frame of raw blocks) and its
    index 16 bytes a row (and a .npy header's room); one byte more is refused before any of it is read."""
    limit = (1 << 16) + COMPRESSED_EPISODES * 11 * row_bytes
    good = members_of(pack(compressed, tmp_path / "c.tar").archive)

    def sized(size):
        return [(regular(info.name, size), (data[:512], size)) if info.name == f"store/{rel}" else (info, data)
                for info, data in good]
    with pytest.raises(CorruptStoreError, match=rf"member 'store/{re.escape(rel)}' declares {limit + 1} bytes "
                                                rf"\(expected at most {limit} for this file\)"):
        unpack(write_tar(tmp_path / "over.tar", sized(limit + 1)), tmp_path / "over")
    with pytest.raises(CorruptStoreError, match=rf"does not match its own checksums.*{re.escape(rel)}: its sha256"):
        unpack(write_tar(tmp_path / "at.tar", sized(limit)), tmp_path / "at")  # (the size passes; the bytes differ)
    assert leftovers(tmp_path) == []
