"""Compressing and decompressing a store's fields after the fact (``compress_fields``, ``decompress_fields``):
every value bit-exact, ids, rows and the ring's state kept, in place or into a new folder, and a SIGKILL at
any point of an in-place rewrite leaves the old store or the new one."""

from __future__ import annotations

import json
import os
import signal
import traceback

import numpy as np
import pytest

from memmap_replay import (CorruptStoreError, OptionError, ReplayBuffer, SampleExpiredError, SchemaError,
                           StoreLockedError, compress_fields, decompress_fields, read_card, update_card, verify)
from memmap_replay.sharing import recode, recode_files
from memmap_replay.core import folderio
from memmap_replay.core import format as fmt
from memmap_replay.core.store import EpisodeStore

pytest.importorskip("zstandard")

FIELDS = dict(image=("uint8", (12, 12, 3)), action=("float", 2), reward="float")
RING = dict(max_episodes=8, max_timesteps=9, max_steps=40, circular=True)
LINEAR = dict(max_episodes=12, max_timesteps=9, circular=False)


def episode(ep: int) -> dict:
    """Episode number ``ep``: compressible images (a few values), every value a function of ep and t."""
    length = 3 + ep % 6
    rng = np.random.default_rng(ep)
    image = np.full((length, 12, 12, 3), ep % 50, np.uint8)
    image[:, 0, 0, 0] = np.arange(length)
    image[:, 1, :3, 1] = rng.integers(0, 256, (length, 3))
    return dict(image=image, action=rng.standard_normal((length, 2)).astype(np.float32),
                reward=np.arange(length, dtype=np.float32) + ep, ep=ep)


def store_episodes(buffer, eps) -> None:
    for ep in eps:
        values = {name: value for name, value in episode(ep).items() if name in buffer.schema.fields or name == "ep"}
        final = dict(reward=values["reward"][0]) if ep % 3 == 0 else None
        buffer.store_episode(end=("terminated", "truncated", None)[ep % 3], final=final, **values)


def make_store(folder, capacity=LINEAR, count=8, fields=FIELDS) -> None:
    with ReplayBuffer(folder, fields=fields, meta_fields=dict(ep="int"), **capacity) as buffer:
        store_episodes(buffer, range(count))


def snapshot(folder) -> dict:
    """Everything a reader sees: the ring state, each live episode's entry, meta value and rows of every field."""
    store = EpisodeStore.open(folder, "r")
    try:
        state, table = store.meta.state, store.live_table()
        seen = {"state": (state.first_episode, state.next_episode, state.write_head), "episodes": []}
        for i in range(len(table)):
            start, stop = int(table.start[i]), int(table.start[i] + table.length[i] + table.final[i])
            rows = {name: np.asarray(store.step_array(name)[start:stop]).tobytes() for name in store.schema.fields}
            seen["episodes"].append((int(table.ids[i]), int(table.slots[i]), start, int(table.length[i]),
                                     int(table.end[i]), bool(table.final[i]),
                                     int(store.meta_array("ep")[table.slots[i]]), rows))
        return seen
    finally:
        store.close()


def steps_files(folder) -> list[str]:
    return sorted(os.listdir(folder / "steps"))


def meta_json(folder) -> dict:
    return json.loads((folder / "meta.json").read_text())


@pytest.mark.parametrize("capacity", [LINEAR, RING], ids=["linear", "ring"])
def test_compress_then_decompress_in_place_keeps_every_value_and_the_ring_state(tmp_path, capacity):
    folder = tmp_path / "s"
    make_store(folder, capacity, count=16 if capacity["circular"] else 8)
    before = snapshot(folder)
    report = compress_fields(folder)  # the image field (2+ dimensions) by default
    assert report.changed and list(report.fields) == ["image"] and report.fields["image"]["after"] == "zstd-3"
    assert report.fields["image"]["stored_bytes_after"] < report.fields["image"]["raw_bytes"] / 2
    assert snapshot(folder) == before
    assert steps_files(folder) == ["action.npy", "image.frames.npy", "image.index.npy", "reward.npy"]
    meta = meta_json(folder)
    assert meta["version"] == "2.0" and meta["schema"]["fields"]["image"]["codec"] == {"name": "zstd", "level": 3}
    assert verify(folder).ok and not verify(folder).warnings
    report = decompress_fields(folder)
    assert report.changed and report.fields["image"]["after"] == "raw"
    assert snapshot(folder) == before
    assert steps_files(folder) == ["action.npy", "image.npy", "reward.npy"]
    assert meta_json(folder)["version"] == "1.1"


def test_a_compressed_ring_evicts_as_a_ring_compressed_from_the_start(tmp_path):
    # wrapped: the episodes of the lap before the write head's sit past it, their frames re-placed in proportion
    make_store(tmp_path / "rewritten", RING, count=16)
    compress_fields(tmp_path / "rewritten")
    native = dict(FIELDS, image=dict(dtype="uint8", shape=(12, 12, 3), codec="zstd"))
    make_store(tmp_path / "native", RING, count=16, fields=native)
    assert snapshot(tmp_path / "rewritten") == snapshot(tmp_path / "native")
    for ep in range(16, 30):
        for name in ("rewritten", "native"):
            with ReplayBuffer.from_folder(tmp_path / name) as buffer:
                store_episodes(buffer, [ep])
        assert snapshot(tmp_path / "rewritten") == snapshot(tmp_path / "native")
    assert verify(tmp_path / "rewritten").ok


def test_into_a_new_folder_leaves_the_source_and_copies_the_card(tmp_path):
    folder, out = tmp_path / "s", tmp_path / "small"
    make_store(folder, RING, count=16)
    update_card(folder, name="tests/tiny-v0", description="a ring")
    before, files = snapshot(folder), {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    report = compress_fields(folder, "image", level=19, out=out)
    assert report.out == str(out) and report.fields["image"]["before"] == "raw"
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == files
    assert snapshot(out) == before
    assert meta_json(out)["store_id"] != meta_json(folder)["store_id"]
    card = read_card(out)
    assert card.name == "tests/tiny-v0" and card.provenance[-1]["kind"] == "compress"
    assert card.provenance[-1]["fields"] == {"image": "raw -> zstd-19"}
    # a compressed field rewritten at another level, and one kept as it is (its frames copied)
    decompress_fields(out, out=tmp_path / "raw")
    compress_fields(out, "action", out=tmp_path / "both")
    assert snapshot(tmp_path / "raw") == snapshot(tmp_path / "both") == before
    assert meta_json(tmp_path / "both")["state"]["frames"]["image"] == meta_json(out)["state"]["frames"]["image"]
    assert verify(tmp_path / "both").ok and verify(tmp_path / "raw").ok
    with ReplayBuffer.from_folder(tmp_path / "both") as buffer:  # the copy takes new episodes
        store_episodes(buffer, range(14, 20))


def test_episodes_longer_than_a_block_are_copied_in_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(recode_files, "_BLOCK_BYTES", 3 * 432 + 100)  # three image rows a block
    folder = tmp_path / "s"
    make_store(folder, RING, count=16)
    before = snapshot(folder)
    compress_fields(folder, out=tmp_path / "copy")
    compress_fields(folder, ["image", "action"])
    assert snapshot(folder) == snapshot(tmp_path / "copy") == before
    decompress_fields(folder)
    assert snapshot(folder) == before and verify(folder).ok


def test_a_copy_whose_episodes_a_ring_writer_evicts_meanwhile_is_dropped(tmp_path, monkeypatch):
    folder = tmp_path / "s"
    make_store(folder, RING, count=16)
    build = recode.build_store

    def build_while_a_writer_writes(*args, **kwargs):
        stored = build(*args, **kwargs)
        with ReplayBuffer.from_folder(folder) as writer:
            store_episodes(writer, range(16, 20))
        return stored

    monkeypatch.setattr(recode, "build_store", build_while_a_writer_writes)
    with pytest.raises(SampleExpiredError, match=r"a writer evicted episodes of .* while they were copied"):
        compress_fields(folder, out=tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and os.listdir(tmp_path) == ["s"]


def test_a_field_already_so_is_left_alone(tmp_path):
    folder = tmp_path / "s"
    make_store(folder)
    compress_fields(folder)
    meta = (folder / "meta.json").read_bytes()
    report = compress_fields(folder, "image")
    assert not report.changed and "nothing changed" in str(report)
    assert decompress_fields(folder, "action").changed is False
    assert (folder / "meta.json").read_bytes() == meta


@pytest.mark.parametrize("call,error,message", [
    (lambda f: compress_fields(f, level=9), OptionError, r"field 'image' is stored zstd-3 already: its codec or "
                                                         r"level cannot change in place.*\(out=, --out NEW\)"),
    (lambda f: compress_fields(f, "nope"), OptionError, r"fields has unknown names \['nope'\]"),
    (lambda f: compress_fields(f, "image", codec=None), OptionError, "to store fields raw, use decompress_fields"),
    (lambda f: compress_fields(f, "action", level=40), SchemaError, "must have a zstd level from -7 to 22"),
    (lambda f: compress_fields(f, "action", codec="lz4"), SchemaError, "must have a codec of"),
    (lambda f: compress_fields(f, "image", out=f / "inside"), OptionError, "must be outside the store"),
    (lambda f: compress_fields(f, "image", out=f.parent), OptionError, "out must be a new folder"),
])
def test_refusals_leave_the_store_as_it_was(tmp_path, call, error, message):
    folder = tmp_path / "s"
    make_store(folder)
    compress_fields(folder)
    before, meta = snapshot(folder), (folder / "meta.json").read_bytes()
    with pytest.raises(error, match=message):
        call(folder)
    assert (folder / "meta.json").read_bytes() == meta and snapshot(folder) == before


def test_no_image_field_to_compress_by_default(tmp_path):
    make_store(tmp_path / "s", fields=dict(action=("float", 2), reward="float"))
    with pytest.raises(OptionError, match=r"no step field of two or more dimensions.*pass fields="):
        compress_fields(tmp_path / "s")


def test_a_writer_at_work_is_waited_for_and_readers_are_told_to_reopen(tmp_path):
    folder = tmp_path / "s"
    make_store(folder)
    reader = EpisodeStore.open(folder, "r")
    with ReplayBuffer.from_folder(folder) as writer:
        store_episodes(writer, [8])  # (it holds the writer lock from its first write)
        with pytest.raises(StoreLockedError, match="writer"):
            compress_fields(folder)
    compress_fields(folder)
    with pytest.raises(CorruptStoreError, match="replaced by a new store"):
        reader.refresh()
    reader.close()


def test_leftovers_of_a_killed_rewrite_are_removed_by_the_next(tmp_path):
    folder = tmp_path / "s"
    make_store(folder)
    for name in ("image.index.npy", "image.frames.npy"):
        (folder / "steps" / name).write_bytes(b"left by a killed compress")
    assert any("steps/image.index.npy" in warning for warning in verify(folder).warnings)
    compress_fields(folder)
    decompress_fields(folder)  # (image.npy of the first rewrite was removed after its commit)
    (folder / "steps" / "image.index.npy").write_bytes(b"again")
    assert decompress_fields(folder).changed is False  # nothing to do, but the leftover goes
    assert steps_files(folder) == ["action.npy", "image.npy", "reward.npy"] and not verify(folder).warnings


# ---- a SIGKILL at several points of an in-place rewrite ------------------------------------------------------


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _killed_rewrite(folder, rewrite, target: str, k: int, when: str) -> None:
    """Run ``rewrite(folder)`` in a forked child that SIGKILLs itself at the k-th call of ``target`` (counted
    from the rewrite's commit for 'remove') before or after the call; the child must die of it."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            owner, name = {"write_rows": (fmt.NpyFile, "write_rows"), "write_meta": (fmt, "write_meta"),
                           "remove": (folderio, "remove")}[target]
            original, calls, committed = getattr(owner, name), [0], [target != "remove"]
            real_meta = fmt.write_meta

            def meta(*args, **kwargs):
                real_meta(*args, **kwargs)
                committed[0] = True

            def trapped(*args, **kwargs):
                calls[0] += committed[0]
                hit = committed[0] and calls[0] == k
                if hit and when == "before":
                    _die()
                result = original(*args, **kwargs)
                if hit:
                    _die()
                return result

            if target == "remove":
                fmt.write_meta = meta
            setattr(owner, name, trapped)
            rewrite(folder)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, "the child was not killed"


KILLS = [("write_rows", 1, "before"), ("write_rows", 3, "after"), ("write_meta", 1, "before"),
         ("write_meta", 1, "after"), ("remove", 1, "after")]


@pytest.mark.parametrize("target,k,when", KILLS)
@pytest.mark.parametrize("direction", ["compress", "decompress"])
def test_a_rewrite_killed_anywhere_leaves_the_old_store_or_the_new_one(tmp_path, direction, target, k, when):
    folder = tmp_path / "s"
    make_store(folder, RING, count=16)
    if direction == "decompress":
        compress_fields(folder)
    rewrite = compress_fields if direction == "compress" else decompress_fields
    before, old_meta = snapshot(folder), meta_json(folder)
    _killed_rewrite(folder, rewrite, target, k, when)
    committed = target == "remove" or (target == "write_meta" and when == "after")
    meta = meta_json(folder)
    assert (meta["store_id"] != old_meta["store_id"]) == committed
    assert (meta["schema"]["fields"]["image"].get("codec") is not None) == ((direction == "compress") == committed)
    assert snapshot(folder) == before  # bit-exact, old or new
    assert verify(folder).ok
    rewrite(folder)  # the next run finishes the work and removes what the killed one left
    assert snapshot(folder) == before
    wanted = ["image.frames.npy", "image.index.npy"] if direction == "compress" else ["image.npy"]
    assert steps_files(folder) == sorted(["action.npy", "reward.npy", *wanted])
    report = verify(folder)
    assert report.ok and not report.warnings


@pytest.mark.parametrize("capacity", [LINEAR, RING], ids=["linear", "ring"])
def test_an_edited_store_rewritten_keeps_its_removed_episodes_removed_and_its_trims(tmp_path, capacity):
    """A rewrite into a new folder wrote the removed episodes' slots empty (ids 0): the copy did not open. The
    copy (and a rewrite in place) shows what the source shows; the removed episodes stay removed."""
    folder = tmp_path / "s"
    make_store(folder, capacity, count=16 if capacity["circular"] else 8)
    with ReplayBuffer.from_folder(folder) as buffer:
        ids = buffer.episode_ids.tolist()
        buffer.delete_episodes([ids[0], ids[3]])
        buffer.trim(ids[1], start=1)
        buffer.trim(ids[-1], stop=-1)
    before = snapshot(folder)
    compress_fields(folder, out=tmp_path / "copy")
    assert snapshot(tmp_path / "copy") == before
    assert meta_json(tmp_path / "copy")["state"]["removed"] == 2 and verify(tmp_path / "copy").ok
    compress_fields(folder)
    assert snapshot(folder) == before and verify(folder).ok
    decompress_fields(folder, out=tmp_path / "raw")
    assert snapshot(tmp_path / "raw") == before and verify(tmp_path / "raw").ok
    with ReplayBuffer.from_folder(tmp_path / "copy") as buffer:  # the copy takes new episodes
        store_episodes(buffer, range(20, 24))
    assert verify(tmp_path / "copy").ok
