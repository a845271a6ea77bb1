"""``ReplayBuffer.compact()`` (``sharing/compacting.py``): after deletes and trims of raw and compressed stores every
live episode keeps its steps, end, final observation, meta values and id (against a reference in plain numpy, a
reopened reader and ``verify``); ``rows_after`` is the live rows; episodes stored afterwards are right; the step
files' disk blocks go down (holes punched); a compressed field's frames are never decoded; nothing to compact, the
newest episodes deleted, a ring refused with nothing changed, a store without room grown by the rows missing
(``CompactReport.max_steps``), compact-grow-compact. The kill sweep and the live reader in another process are in
``test_compacting_kill.py``."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import OptionError, ReplayBuffer, verify
from memmap_replay.core.codecs import ZstdFrames

from compressed_stores import FIELDS as COMPRESSED_FIELDS, LENGTHS, episode as compressed_episode, images, \
    make_compressed_store
from test_inplace import MAX_TIMESTEPS, assert_store, episode, make_store, trimmed


def live_rows(reference: list[dict]) -> int:
    return sum(len(item["steps"]["obs"]) + (item["final"] is not None) for item in reference)


def edit(buffer: ReplayBuffer, reference: list[dict], deletes: list[int], trims: dict[int, tuple]) -> list[dict]:
    """Delete and trim episodes of the buffer and of the reference alike; returns the reference after."""
    buffer.delete_episodes(deletes)
    new = []
    for item in reference:
        if item["id"] in deletes:
            continue
        if item["id"] in trims:
            start, stop = trims[item["id"]]
            buffer.trim(item["id"], start=start, stop=stop)
            item = trimmed(item, start, stop)
        new.append(item)
    return new


def store_more(buffer: ReplayBuffer, reference: list[dict], count: int, seed: int, *, first: int) -> None:
    """Store ``count`` more episodes, ids ``first``, ``first + 1``, ... (ids are never reused)."""
    rng = np.random.default_rng(seed)
    for number in range(first, first + count):
        item = episode(rng, number, int(rng.integers(2, MAX_TIMESTEPS + 1)))
        buffer.store_episode(**item["steps"], **item["meta"], end=item["end"], final=item["final"])
        reference.append(item)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compact_after_deletes_and_trims_keeps_every_episode(tmp_path, seed):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=seed, count=12, max_episodes=32)
    with ReplayBuffer.from_folder(folder) as buffer:
        rows_before = buffer._store.meta.state.write_head
        reference = edit(buffer, reference, [0, 3, 4, 9], {1: (1, None), 5: (None, -1), 7: (1, -1), 11: (0, 1)})
        report = buffer.compact()
        assert report.rows_before == rows_before
        assert report.rows_after == live_rows(reference) < rows_before
        assert report.moved_episodes > 0 and report.commits > 0
        assert_store(folder, buffer, reference)
        store_more(buffer, reference, 5, seed=seed + 10, first=12)  # (they go after the compacted rows)
        assert_store(folder, buffer, reference)
    with ReplayBuffer.from_folder(folder) as buffer:  # a second compact: the new episodes are in place already
        again = buffer.compact()
        assert (again.moved_episodes, again.copied_rows, again.rows_after) == (0, 0, live_rows(reference))
        assert_store(folder, buffer, reference)


def compressed_reference(lengths=LENGTHS, seed: int = 0) -> list[dict]:
    """``make_compressed_store``'s episodes, made from the same seeded draws in plain numpy."""
    rng = np.random.default_rng(seed)
    reference = []
    for number, length in enumerate(lengths):
        final = dict(image=images(rng, 1)[0]) if number == 1 else None
        reference.append(dict(id=number, steps=compressed_episode(rng, length), final=final,
                              end="terminated" if number % 2 else "truncated", meta=dict(task_id=number)))
    return reference


def compressed_trimmed(item: dict, start, stop) -> dict:
    length = len(item["steps"]["image"])
    first, last, _ = slice(start, stop).indices(length)
    new = dict(item, steps={name: rows[first:last] for name, rows in item["steps"].items()})
    if last < length:
        new.update(end="truncated", final={name: rows[last] for name, rows in item["steps"].items()})
    return new


def assert_compressed(folder: Path, buffer: ReplayBuffer, reference: list[dict]) -> None:
    for reader in (buffer, ReplayBuffer.from_folder(folder, read_only=True)):
        episodes = reader.episodes()
        assert [item.id for item in episodes] == [item["id"] for item in reference]
        for got, want in zip(episodes, reference):
            assert (got.end, got.meta, len(got)) == (want["end"], want["meta"], len(want["steps"]["image"]))
            for name in COMPRESSED_FIELDS:
                np.testing.assert_array_equal(got[name], want["steps"][name])
            assert (got.final is None) == (want["final"] is None)
            for name, value in (want["final"] or {}).items():
                np.testing.assert_array_equal(got.final[name], value)
        if reader is not buffer:
            reader.close()
    report = verify(folder)
    assert report.ok, report


def test_compact_of_a_compressed_store_moves_index_entries_and_never_decodes(tmp_path, monkeypatch):
    pytest.importorskip("zstandard")
    lengths = (3, 4, 5, 6, 7, 8, 9, 4)
    folder = make_compressed_store(tmp_path / "c", lengths=lengths, max_episodes=12, max_steps=120)
    reference = compressed_reference(lengths)
    with ReplayBuffer.from_folder(folder) as buffer:
        assert_compressed(folder, buffer, reference)  # (the reference is make_compressed_store's)
        buffer.delete_episodes([0, 2, 5])
        buffer.trim(3, start=2)
        buffer.trim(6, start=1, stop=-3)
        reference = [compressed_trimmed(item, 2, None) if item["id"] == 3 else
                     compressed_trimmed(item, 1, -3) if item["id"] == 6 else item
                     for item in reference if item["id"] not in (0, 2, 5)]
        frames_before = os.stat(folder / "steps" / "image.frames.npy").st_blocks

        def no_decoding(*args, **kwargs):
            raise AssertionError("compact() decoded a frame")

        with monkeypatch.context() as patch:
            patch.setattr(ZstdFrames, "decode_into", no_decoding)
            report = buffer.compact()
        expected = sum(len(item["steps"]["image"]) + (item["final"] is not None) for item in reference)
        assert report.rows_after == expected and report.moved_episodes == len(reference)
        assert os.stat(folder / "steps" / "image.frames.npy").st_blocks <= frames_before
        assert_compressed(folder, buffer, reference)
        rng = np.random.default_rng(5)
        for number in (8, 9):
            steps = compressed_episode(rng, 5)
            buffer.store_episode(**steps, task_id=number, end="terminated")
            reference.append(dict(id=number, steps=steps, final=None, end="terminated", meta=dict(task_id=number)))
        assert_compressed(folder, buffer, reference)


def punches_holes(folder: Path) -> bool:
    """Whether the file system of ``folder`` gives blocks back for a punched hole."""
    path = folder / "probe"
    with open(path, "wb") as file:
        file.write(b"\1" * (1 << 18))
        file.flush()
        before = os.stat(path).st_blocks
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        done = libc.fallocate(file.fileno(), 0x03, 0, 1 << 17) == 0  # PUNCH_HOLE | KEEP_SIZE
        after = os.stat(path).st_blocks
    path.unlink()
    return done and after < before


def steps_blocks(folder: Path) -> int:
    return sum(os.stat(path).st_blocks for path in (folder / "steps").iterdir())


def test_compact_gives_disk_blocks_back(tmp_path):
    if not punches_holes(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not punch holes (fallocate PUNCH_HOLE): compact() only "
                    f"marks the rows free there")
    folder, rng = tmp_path / "s", np.random.default_rng(0)
    rows = {}  # 4 KiB rows, so that each freed row is a whole block
    with ReplayBuffer(folder, 32, 16, fields=dict(obs=("float", 1024)), max_steps=400) as buffer:
        for number in range(16):
            rows[number] = rng.standard_normal((16, 1024)).astype(np.float32)
            buffer.store_episode(obs=rows[number], end="terminated")
        before = steps_blocks(folder)
        buffer.delete_episodes(list(range(0, 16, 2)))
        report = buffer.compact()
        assert report.rows_after == 8 * 16
        assert report.freed_bytes > 0
        after = steps_blocks(folder)
        assert report.freed_bytes == (before - after) * 512
        # the live rows' blocks and a few more (a row straddles two blocks: the header shifts them); 1 MiB before
        assert after * 512 <= report.rows_after * 4096 + 4 * 4096 < before * 512
        assert {item.id: item["obs"].tobytes() for item in buffer.episodes()} == {
            number: rows[number].tobytes() for number in range(1, 16, 2)}
    assert verify(folder).ok


def test_nothing_to_compact(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, count=6)
    with ReplayBuffer.from_folder(folder) as buffer:
        head = buffer._store.meta.state.write_head
        report = buffer.compact()
        assert (report.moved_episodes, report.copied_rows, report.commits) == (0, 0, 0)
        assert report.rows_before == report.rows_after == head == live_rows(reference)
        assert_store(folder, buffer, reference)
    with ReplayBuffer(tmp_path / "empty", 4, 4, fields=dict(obs="float")) as buffer:
        report = buffer.compact()
        assert (report.moved_episodes, report.rows_after) == (0, 0)
    assert verify(tmp_path / "empty").ok


@pytest.mark.parametrize("deleted", [[9], [8, 9], [0, 9]])
def test_compact_after_deleting_the_newest_episodes_reopens(tmp_path, deleted):
    folder = tmp_path / "s"
    reference = make_store(folder, count=10)
    with ReplayBuffer.from_folder(folder) as buffer:
        reference = edit(buffer, reference, deleted, {})
        assert buffer.compact().rows_after == live_rows(reference)
    with ReplayBuffer.from_folder(folder) as buffer:  # (the write head is after the newest live episode)
        assert_store(folder, buffer, reference)
        store_more(buffer, reference, 3, seed=4, first=10)  # new ids after the deleted ones: ids are never reused
        assert buffer.episode_ids[-3:].tolist() == [10, 11, 12]
        assert_store(folder, buffer, reference)


def folder_state(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != "writer.lock"}


def test_compact_of_a_ring_is_refused(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, count=6, circular=True)
    with ReplayBuffer.from_folder(folder) as buffer:
        reference = edit(buffer, reference, [1, 2], {})
        before = folder_state(folder)
        with pytest.raises(OptionError, match=r"compact\(\) is for stores that are not rings"):
            buffer.compact()
        assert folder_state(folder) == before
        assert_store(folder, buffer, reference)


def tight_store(folder: Path) -> list[dict]:
    """8 episodes of 10-11 steps in a store with 3 free rows after them; episode 0 deleted, so every other one must
    move, through too few free rows."""
    rng = np.random.default_rng(3)
    reference = [episode(rng, number, MAX_TIMESTEPS - 2 + number % 2) for number in range(8)]
    with ReplayBuffer(folder, 16, MAX_TIMESTEPS, fields=dict(obs=("float", 3), action=("int", 2), reward="float"),
                      meta_fields=dict(task_id="int"), max_steps=live_rows(reference) + 3) as buffer:
        for item in reference:
            buffer.store_episode(**item["steps"], **item["meta"], end=item["end"], final=item["final"])
        return edit(buffer, reference, [0], {})


def test_compact_without_room_grows_max_steps_by_what_is_missing(tmp_path):
    folder = tmp_path / "s"
    reference = tight_store(folder)
    with ReplayBuffer.from_folder(folder) as buffer:
        max_steps = buffer._store.capacity.max_steps
        report = buffer.compact()
        assert report.max_steps is not None and report.max_steps[0] == max_steps < report.max_steps[1]
        assert buffer._store.capacity.max_steps == report.max_steps[1]
        assert report.rows_after == live_rows(reference)
        assert_store(folder, buffer, reference)
        again = buffer.compact()
        assert (again.moved_episodes, again.max_steps) == (0, None)


def test_compact_then_grow_then_compact(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=4, count=10, max_episodes=16, max_steps=10 * MAX_TIMESTEPS + 20)
    with ReplayBuffer.from_folder(folder) as buffer:
        reference = edit(buffer, reference, [2, 6], {4: (2, None)})
        assert buffer.compact().rows_after == live_rows(reference)
        buffer.grow(max_episodes=24, max_steps=24 * MAX_TIMESTEPS)
        store_more(buffer, reference, 6, seed=9, first=10)
        assert_store(folder, buffer, reference)
        reference = edit(buffer, reference, [1, 12], {7: (None, 2), 14: (1, -1)})
        assert buffer.compact().rows_after == live_rows(reference)
        assert_store(folder, buffer, reference)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.episode_ids.tolist() == [item["id"] for item in reference]
