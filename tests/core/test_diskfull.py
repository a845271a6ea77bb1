"""A full disk: the failing write raises DiskFullError, nothing half-written is committed, every episode
committed before stays intact, and the store takes episodes again once there is space.

Failures are injected at every write of a commit (rows, episode table, the eviction and the final
meta.json), and, where the machine lets the test mount one, provoked on a real size-limited tmpfs."""

import errno
import os
import shutil
import subprocess

import numpy as np
import pytest

from memmap_replay import DiskFullError, ReplayBuffer
from memmap_replay.core import format as fmt

from conftest import SMALL_FIELDS, SMALL_META, episode_arrays


def fingerprint(folder) -> dict:
    """Every live episode's data, by episode number (its reward encodes it), read from a fresh reader."""
    reader = ReplayBuffer.from_folder(folder, read_only=True)
    data = reader.get_all_data()
    episodes = {int(data["reward"][i, 0]) // 1000: {name: data[name][i, : int(data["episode_lens"][i])].numpy().copy()
                                                     for name in SMALL_FIELDS}
                for i in range(len(data["episode_lens"]))}
    reader.close()
    return episodes


class FailingWrites:
    """os.pwrite / os.write that fail with ENOSPC from their ``after``-th call on (counting both)."""

    def __init__(self, monkeypatch, after: int):
        self.calls, self.after = 0, after
        self.pwrite, self.write = os.pwrite, os.write
        monkeypatch.setattr(os, "pwrite", self.fake(self.pwrite))
        monkeypatch.setattr(os, "write", self.fake(self.write))

    def fake(self, real):
        def failing(*args):
            self.calls += 1
            if self.calls > self.after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(*args)
        return failing


@pytest.mark.parametrize("circular", [False, True])
def test_a_full_disk_at_every_write_of_a_commit(tmp_path, monkeypatch, circular):
    folder = tmp_path / "store"
    buffer = ReplayBuffer(folder, 3 if circular else 5, 20, fields=SMALL_FIELDS, meta_fields=SMALL_META,
                          circular=circular)
    for number in range(1, 4):
        buffer.store_episode(**episode_arrays(number, 6), task_id=number)
    buffer.close()
    # count the writes one more commit makes, then fail at each of them in turn
    probe = tmp_path / "probe"
    shutil.copytree(folder, probe)
    counter, committed_at, write_meta = FailingWrites(monkeypatch, after=10**9), [], fmt.write_meta
    monkeypatch.setattr(fmt, "write_meta", lambda *args, **kwargs: (write_meta(*args, **kwargs),
                                                                     committed_at.append(counter.calls)))
    with ReplayBuffer.from_folder(probe) as copy:
        copy.store_episode(**episode_arrays(4, 6), task_id=4)
        # the writes up to the commit (derived data written after it, stats/returns.npy, is best effort)
        writes = committed_at[-1]
    monkeypatch.undo()
    assert writes >= 3 + 5 + 1  # rows (3 fields), table entries (5), meta.json (and the eviction's, in a ring)
    for fail_at in range(writes):
        trial = tmp_path / f"trial{fail_at}"
        shutil.copytree(folder, trial)
        before = fingerprint(trial)
        buffer = ReplayBuffer.from_folder(trial)
        FailingWrites(monkeypatch, after=fail_at)
        with pytest.raises(DiskFullError, match="no space left .* were not committed"):
            buffer.store_episode(**episode_arrays(4, 6), task_id=4)
        monkeypatch.undo()
        assert not (trial / "meta.json.tmp").exists()
        after = fingerprint(trial)
        # every episode committed before is intact; an eviction committed before the failure may have gone
        assert set(after) <= set(before) and len(after) >= len(before) - 1
        for number, fields in after.items():
            for name, values in fields.items():
                np.testing.assert_array_equal(values, before[number][name])
        buffer.store_episode(**episode_arrays(5, 6), task_id=5)  # space again: the store takes episodes
        buffer.close()
        final = fingerprint(trial)
        assert 5 in final and 4 not in final
        np.testing.assert_array_equal(final[5]["obs"], episode_arrays(5, 6)["obs"])


def test_a_full_disk_when_an_episode_block_ends(tmp_path, monkeypatch):
    buffer = ReplayBuffer(tmp_path / "store", 10, 20, fields=SMALL_FIELDS, meta_fields=SMALL_META)
    buffer.store_episode(**episode_arrays(1, 5), task_id=1)
    steps = episode_arrays(2, 4)
    with pytest.raises(DiskFullError, match="no space left"):
        with buffer.one_episode(task_id=2):
            for t in range(4):
                buffer.store(**{name: values[t] for name, values in steps.items()})
            FailingWrites(monkeypatch, after=1)  # the commit at the end of the block fails at its second write
    monkeypatch.undo()
    assert buffer.num_episodes == 1 and list(fingerprint(tmp_path / "store")) == [1]
    with buffer.one_episode(task_id=3):  # the buffer carries on
        for t in range(4):
            buffer.store(**{name: values[t] for name, values in episode_arrays(3, 4).items()})
    buffer.close()
    assert sorted(fingerprint(tmp_path / "store")) == [1, 3]


@pytest.fixture
def small_filesystem(tmp_path):
    """A 2 MiB tmpfs, where the machine lets the test mount one (root with CAP_SYS_ADMIN); else skipped."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here ({result.stderr.decode().strip() or 'not permitted'}); "
                    f"the injected failures above cover the same paths")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_real_full_disk(small_filesystem):
    ballast = small_filesystem / "ballast"
    ballast.write_bytes(b"\0" * (512 << 10))  # space to free later
    folder = small_filesystem / "store"
    buffer = ReplayBuffer(folder, 1000, 100, fields=dict(obs=("float", (64,)), reward="float"))
    rng = np.random.default_rng(0)
    stored = []
    with pytest.raises(DiskFullError, match="no space left"):
        for number in range(1, 1000):
            obs = rng.standard_normal((100, 64)).astype(np.float32)
            buffer.store_episode(obs=obs, reward=np.full(100, number, dtype=np.float32))
            stored.append(obs)
    assert 3 < len(stored) < 999
    assert not (folder / "meta.json.tmp").exists()
    reader = ReplayBuffer.from_folder(folder, read_only=True)
    data = reader.get_all_data()
    assert len(data["episode_lens"]) == len(stored)
    for number, obs in enumerate(stored):
        np.testing.assert_array_equal(data["obs"][number].numpy(), obs)
    reader.close()
    ballast.unlink()  # space again: the same buffer takes episodes
    buffer.store_episode(obs=stored[0], reward=np.zeros(100, dtype=np.float32))
    assert buffer.num_episodes == len(stored) + 1
    buffer.close()


def _creation_writes(tmp_path, monkeypatch) -> int:
    counter = FailingWrites(monkeypatch, after=10**9)
    ReplayBuffer(tmp_path / "probe", 4, 10, fields=SMALL_FIELDS, meta_fields=SMALL_META).close()
    monkeypatch.undo()
    return counter.calls


def test_a_full_disk_while_creating_a_store_removes_the_folders_it_made(tmp_path, monkeypatch):
    """The DiskFullError came, but the new folder (and the parents made for it) stayed behind."""
    writes = _creation_writes(tmp_path, monkeypatch)
    assert writes > 3
    for after in range(writes):
        root = tmp_path / f"new{after}"
        FailingWrites(monkeypatch, after=after)
        with pytest.raises(DiskFullError, match="No space left"):
            ReplayBuffer(root / "parent" / "store", 4, 10, fields=SMALL_FIELDS, meta_fields=SMALL_META)
        monkeypatch.undo()
        assert not root.exists(), (after, sorted(str(path.relative_to(root)) for path in root.rglob("*")))


def test_a_full_disk_while_creating_a_store_in_a_folder_that_was_there_removes_only_what_it_made(
        tmp_path, monkeypatch):
    writes = _creation_writes(tmp_path, monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.npy").write_bytes(b"theirs")
    for after in range(writes):
        folder = tmp_path / f"there{after}"
        folder.mkdir()
        (folder / "notes.txt").write_text("the user's")
        (folder / "link").symlink_to(outside)  # a link the creation did not make: left as it is, never followed
        FailingWrites(monkeypatch, after=after)
        with pytest.raises(DiskFullError, match="No space left"):
            ReplayBuffer(folder, 4, 10, fields=SMALL_FIELDS, meta_fields=SMALL_META)
        monkeypatch.undo()
        assert sorted(path.name for path in folder.iterdir()) == ["link", "notes.txt"], after
        assert (folder / "notes.txt").read_text() == "the user's"
    assert (outside / "keep.npy").read_bytes() == b"theirs"
    ReplayBuffer(tmp_path / "there0", 4, 10, fields=SMALL_FIELDS, meta_fields=SMALL_META).close()  # and then works
