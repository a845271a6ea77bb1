"""folderio: reads stay inside a store folder and bounded, writes never leave it, every OSError is the library's."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import DiskFullError, ReadOnlyError, ReplayBuffer, ReplayError
from memmap_replay.core import folderio
from memmap_replay.errors import CorruptStoreError, MissingFileError, StoreIOError, UnsafeEntryError
from memmap_replay.sharing.stats import _read_running


@contextmanager
def deadline(seconds: int = 5):
    """Fail instead of hanging (a FIFO opened without O_NONBLOCK blocks forever)."""
    def expired(*_):
        raise TimeoutError("the call blocked")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture
def store(tmp_path):
    folder = tmp_path / "store"
    rng = np.random.default_rng(0)
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=5, fields=dict(obs=("float", 3), reward="float"),
                      meta_fields=dict(task_id="int")) as buffer:
        for task in range(3):
            buffer.store_episode(obs=rng.normal(size=(4, 3)), reward=rng.normal(size=4), task_id=task)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not touch")
    return folder, outside


# ---- the helpers themselves ------------------------------------------------------------------------------


def test_read_bounded_refuses_files_over_the_cap(tmp_path):
    (tmp_path / "big.json").write_bytes(b" " * 101)
    with pytest.raises(UnsafeEntryError, match=r"big.json must hold at most 100 bytes \(got 101\)"):
        folderio.read_bounded(tmp_path, tmp_path / "big.json", 100)
    assert folderio.read_bounded(tmp_path, tmp_path / "big.json", 101) == b" " * 101


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "meta.json")
    with deadline(), pytest.raises(UnsafeEntryError, match="a FIFO, not a regular file"):
        folderio.read_json(tmp_path, tmp_path / "meta.json")
    with deadline(), pytest.raises(UnsafeEntryError, match="a FIFO"):
        folderio.open_write(tmp_path, tmp_path / "meta.json")


def test_links_are_followed_for_reading_only_inside_the_folder(tmp_path):
    (tmp_path / "a.json").write_text("[1]")
    (tmp_path / "inside.json").symlink_to(tmp_path / "a.json")
    (tmp_path / "outside.json").symlink_to("/etc/hostname")
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert folderio.read_json(tmp_path, tmp_path / "inside.json") == [1]
    for name in ("outside.json", "zero"):
        with pytest.raises(UnsafeEntryError, match="leads out of the store folder"):
            folderio.read_json(tmp_path, tmp_path / name)


def test_writes_never_follow_a_link_anywhere_on_the_path(tmp_path):
    folder, outside = tmp_path / "store", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "file").write_text("keep")
    (folder / "file").symlink_to(outside / "file")
    (folder / "sub").symlink_to(outside)
    with pytest.raises(UnsafeEntryError, match="never writes through links"):
        folderio.open_write(folder, folder / "file")
    with pytest.raises(UnsafeEntryError, match="is a link or not a folder"):
        folderio.open_write(folder, folder / "sub" / "file", os.O_RDWR | os.O_CREAT)
    with pytest.raises(UnsafeEntryError, match="is a link or not a folder"):
        folderio.write_atomic(folder, folder / "sub" / "new", b"x")
    with pytest.raises(UnsafeEntryError, match="a link"):
        folderio.make_dir(folder, folder / "sub")
    assert (outside / "file").read_text() == "keep" and sorted(os.listdir(outside)) == ["file"]


def test_a_shared_hard_link_is_refused_for_writing(tmp_path):
    (tmp_path / "outside").write_text("keep")
    os.link(tmp_path / "outside", tmp_path / "meta.json")
    with pytest.raises(UnsafeEntryError, match=r"a hard link shared with 1 other name"):
        folderio.open_write(tmp_path, tmp_path / "meta.json")


def test_write_atomic_uses_a_fresh_temp_name_and_leaves_nothing_on_failure(tmp_path):
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "meta.json.tmp").symlink_to(tmp_path / "victim")  # the old fixed temp name, planted
    folderio.write_atomic(tmp_path, tmp_path / "meta.json", b"{}")
    assert (tmp_path / "meta.json").read_bytes() == b"{}" and (tmp_path / "victim").read_text() == "keep"

    def fails(file):
        file.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFullError, match=r"no space left on the device .*meta.json"):
        folderio.write_atomic(tmp_path, tmp_path / "meta.json", fails)
    assert (tmp_path / "meta.json").read_bytes() == b"{}"
    assert sorted(os.listdir(tmp_path)) == ["meta.json", "meta.json.tmp", "victim"]


@pytest.mark.parametrize("code, error, words", [
    (errno.ENOSPC, DiskFullError, "no space left"), (errno.EDQUOT, DiskFullError, "no space left"),
    (errno.EACCES, ReadOnlyError, "no permission"), (errno.EROFS, ReadOnlyError, "no permission"),
    (errno.ELOOP, UnsafeEntryError, "link"), (errno.ENOENT, MissingFileError, "is missing"),
    (errno.EIO, StoreIOError, "the system failed"),
])
def test_every_oserror_becomes_the_library_error_naming_the_file(code, error, words):
    mapped = folderio.library_error(OSError(code, os.strerror(code)), "/x/steps/obs.npy", "write")
    assert type(mapped) is error and isinstance(mapped, ReplayError) and isinstance(mapped, OSError)
    assert mapped.errno == code and words in str(mapped) and "/x/steps/obs.npy" in str(mapped)


# ---- the store under these rules --------------------------------------------------------------------------


def test_a_field_file_linked_outside_is_refused_by_readers_and_writers(store):
    folder, outside = store
    target = outside / "obs.npy"
    os.replace(folder / "steps" / "obs.npy", target)
    (folder / "steps" / "obs.npy").symlink_to(target)
    before = digest(outside)
    for read_only in (True, False):
        with pytest.raises(UnsafeEntryError, match=r"steps/obs.npy leads out of the store folder"):
            ReplayBuffer.from_folder(folder, read_only=read_only)
    assert digest(outside) == before


def test_a_link_that_stays_inside_is_read_but_never_written_through(store):
    folder, _ = store
    os.replace(folder / "steps" / "reward.npy", folder / "reward-copy.npy")
    (folder / "steps" / "reward.npy").symlink_to(folder / "reward-copy.npy")
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.num_episodes == 3 and len(reader.get_all_data()["reward"]) == 3
    with ReplayBuffer.from_folder(folder) as writer, pytest.raises(UnsafeEntryError, match="is a link"):
        writer.store_episode(obs=np.zeros((2, 3)), reward=np.zeros(2), task_id=9)


def test_a_dangling_lock_link_is_never_created(store):
    folder, outside = store
    (folder / "writer.lock").unlink()
    (folder / "writer.lock").symlink_to(outside / "made-by-the-lock")
    with ReplayBuffer.from_folder(folder) as writer, pytest.raises(UnsafeEntryError, match="writer.lock is a link"):
        writer.store_episode(obs=np.zeros((2, 3)), reward=np.zeros(2), task_id=9)
    assert not (outside / "made-by-the-lock").exists()


def test_a_fifo_meta_json_or_step_file_never_blocks_an_open(store):
    folder, _ = store
    os.replace(folder / "steps" / "obs.npy", folder / "obs.npy.bak")
    os.mkfifo(folder / "steps" / "obs.npy")
    with deadline(), pytest.raises(UnsafeEntryError, match=r"obs.npy is a FIFO"):
        ReplayBuffer.from_folder(folder, read_only=True)
    os.replace(folder / "meta.json", folder / "meta.json.bak")
    os.mkfifo(folder / "meta.json")
    with deadline(), pytest.raises(UnsafeEntryError, match=r"meta.json is a FIFO"):
        ReplayBuffer.from_folder(folder, read_only=True)


def test_an_oversized_meta_json_is_refused_before_it_is_read(store):
    folder, _ = store
    with open(folder / "meta.json", "r+b") as file:
        file.truncate(folderio.MAX_JSON_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(UnsafeEntryError, match=r"meta.json must hold at most 4194304 bytes"):
        ReplayBuffer.from_folder(folder, read_only=True)


def test_stats_members_are_checked_before_anything_is_inflated(store, monkeypatch):
    folder, _ = store
    with ReplayBuffer.from_folder(folder) as buffer:
        schema, expected = buffer.schema, buffer.stats()
    running = folder / "stats" / "running.npz"
    assert set(_read_running(folder, schema)) >= {"covers", "episodes", "store_id", "obs.mean"}
    with zipfile.ZipFile(running, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.npy", b"\0" * (1 << 20))  # a zip bomb in small: 1 MiB of zeros in ~1 KiB
    with pytest.raises(ValueError, match=r"member 'bomb.npy' of 1048576 bytes"):
        _read_running(folder, schema)
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load of an npz whose members were refused"))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # a refused cache is rebuilt, not read
        assert np.allclose(reader.stats().fields["obs"].mean, expected.fields["obs"].mean)


def test_persist_true_on_a_read_only_store_is_refused_and_writes_nothing(store):
    folder, _ = store
    before = sorted(p.name for p in folder.rglob("*"))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        with pytest.raises(ReadOnlyError, match="persist=True keeps priorities in .* open read-only"):
            reader.sampler("prioritized", persist=True)
        sampler = reader.sampler("prioritized")
        batch = sampler.batch(4)
        sampler.update_priorities(batch["_key"], np.ones(4))
    assert sorted(p.name for p in folder.rglob("*")) == before


def test_priorities_linked_outside_are_refused_for_a_writer(store):
    folder, outside = store
    (folder / "priorities").symlink_to(outside, target_is_directory=True)
    before = digest(outside)
    with ReplayBuffer.from_folder(folder) as buffer:
        with pytest.raises(UnsafeEntryError, match=r"priorities.*a link.*persist=False"):
            buffer.sampler("prioritized", persist=True)
    assert digest(outside) == before and sorted(os.listdir(outside)) == ["secret.txt"]


def test_a_killed_writers_temp_files_are_removed_by_the_next_writer(store):
    folder, _ = store
    (folder / "meta.json.123.abcd0123.tmp").write_text("half")
    (folder / "meta.json.tmp").write_text("half")
    with ReplayBuffer.from_folder(folder) as writer:
        writer.store_episode(obs=np.zeros((2, 3)), reward=np.zeros(2), task_id=9)
    assert not list(folder.glob("meta.json*.tmp"))
    assert json.loads((folder / "meta.json").read_text())["state"]["next_episode"] == 4


def test_a_damaged_meta_json_is_still_a_corrupt_store(store):
    folder, _ = store
    (folder / "meta.json").write_bytes(b"\xff{")
    with pytest.raises(CorruptStoreError, match=r"meta.json is not valid JSON .*damaged"):
        ReplayBuffer.from_folder(folder, read_only=True)


def test_a_claim_of_billions_of_episodes_in_sparse_files_is_refused_before_any_allocation(store):
    from memmap_replay.core.format import npy_header

    folder, _ = store
    declared = 5 * 10**10  # 373 GiB of ids, in table files that hold a few KiB on disk
    meta = json.loads((folder / "meta.json").read_text())
    meta["capacity"]["max_episodes"] = declared
    meta["state"].update(first_episode=0, next_episode=declared)
    (folder / "meta.json").write_text(json.dumps(meta))
    for path in [*(folder / "episodes").iterdir(), *(folder / "meta").iterdir()]:
        dtype = np.load(path, mmap_mode="r").dtype
        header = npy_header(dtype, (declared,))
        with open(path, "r+b") as file:
            file.write(header)
            file.truncate(len(header) + declared * dtype.itemsize)
    with pytest.raises(UnsafeEntryError, match=r"id.npy holds \d+ bytes on disk, but meta.json declares 50000000000"):
        ReplayBuffer.from_folder(folder, read_only=True)


def test_a_shard_linked_to_a_store_outside_the_root_is_refused(tmp_path):
    from memmap_replay import ShardSet, shard_folder

    root, private = tmp_path / "root", tmp_path / "private"
    for folder, value in ((shard_folder(root, 0), 0.0), (private, 42.0)):
        with ReplayBuffer(folder, max_episodes=4, max_timesteps=4, fields=dict(obs="float")) as buffer:
            buffer.store_episode(obs=np.full(3, value))
    (root / "shard-000001").symlink_to(private, target_is_directory=True)
    with pytest.raises(UnsafeEntryError, match=r"shard-000001 leads out of the store folder"):
        ShardSet(root)
    (root / "shard-000001").unlink()
    (root / "shard-000001").symlink_to(shard_folder(root, 0), target_is_directory=True)  # inside: read
    assert len(ShardSet(root).stores) == 2


def test_a_slot_being_rewritten_is_never_read_as_its_old_episode(tmp_path):
    """The writer sets a reused slot's id to -1 before its entries: a reader whose meta.json stamp did not
    change (a coarse clock) still never pairs the old id with the new start."""
    folder = tmp_path / "ring"
    writer = ReplayBuffer(folder, max_episodes=2, max_timesteps=8, fields=dict(obs="float"), circular=True)
    writer.store_episode(obs=np.zeros(3))
    writer.store_episode(obs=np.ones(5))
    reader = ReplayBuffer.from_folder(folder, read_only=True).episode_store
    seen = []
    starts = writer.episode_store.table["start"]
    write_start = starts.write_rows

    def torn(slot, values):  # the new start is on disk, the rest of the slot not yet
        write_start(slot, values)
        reader.read_stamp = reader.meta_stamp()  # as if meta.json's stamp had not changed since it was read
        seen.append(reader.live_table(catch_up=False))

    starts.write_rows = torn
    writer.store_episode(obs=np.full(2, 2.0))  # evicts episode 0 and reuses its slot 0
    starts.write_rows = write_start
    (table,) = seen
    assert 0 not in table.ids.tolist() and table.ids.tolist() == [1] and table.start.tolist() == [3]
    writer.close()
    reader.close()


def test_temp_files_of_killed_writers_and_samplers_are_removed_under_their_lock(store):
    folder, _ = store
    with ReplayBuffer.from_folder(folder) as writer:
        writer.sampler("prioritized", name="steps").close()
    stale = [folder / "stats" / "running.npz.999.0badc0de.tmp", folder / "priorities" / "steps.json.999.0badc0de.tmp"]
    for path in stale:
        path.write_bytes(b"half")
    with ReplayBuffer.from_folder(folder) as writer:
        writer.store_episode(obs=np.zeros((2, 3)), reward=np.zeros(2), task_id=9)
        writer.sampler("prioritized", name="steps").close()
    assert not any(path.exists() for path in stale)


@pytest.mark.parametrize("shape", [(0,), (0, 2), (3, 0, 2), (2, 3)])
def test_write_all_writes_any_shape_an_empty_one_too(tmp_path, shape):
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        folderio.write_all(fd, data)
        folderio.write_all(fd, data, position=0)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data.tobytes()
