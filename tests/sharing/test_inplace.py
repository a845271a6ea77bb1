"""Edits in place (``delete_episodes``, ``trim``, ``relabel``): the values after each edit against a reference
kept in plain numpy (episodes, ids, counts, DataLoader rows and sampler draws, a reopened buffer), ``verify`` clean
after each; bad input refused with nothing changed on disk; a ring evicting removed episodes back to format 1.1;
compressed frames untouched; the checksum manifest and the card's provenance kept current. The kill sweeps and the
live reader in another process are in ``test_inplace_kill.py``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import (IndexRangeError, IndexTypeError, InvalidDataError, OptionError, ReadOnlyError,
                           ReplayBuffer, StoreLockedError, read_card, verify, write_manifest)

from compressed_stores import make_compressed_store
from conftest import reap

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float")
META = dict(task_id="int")
ENDS = ("terminated", "truncated", None)
MAX_TIMESTEPS = 12


def make_store(folder: Path, seed: int = 0, count: int = 10, **options) -> list[dict]:
    """A closed store of ``count`` episodes of random lengths; each step's obs is (episode, step, noise). Returns
    the reference: each episode's id, steps, final observation, end and meta values in plain numpy."""
    rng = np.random.default_rng(seed)
    options = dict(dict(max_episodes=16, max_timesteps=MAX_TIMESTEPS), **options)
    reference = []
    with ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **options) as buffer:
        for number in range(count):
            reference.append(episode(rng, number, int(rng.integers(2, MAX_TIMESTEPS + 1))))
            item = reference[-1]
            buffer.store_episode(**item["steps"], **item["meta"], end=item["end"], final=item["final"])
    return reference


def episode(rng: np.random.Generator, number: int, length: int) -> dict:
    t = np.arange(length)
    obs = np.stack([np.full(length, number), t, rng.standard_normal(length)], 1).astype(np.float32)
    steps = dict(obs=obs, action=rng.integers(-9, 9, (length, 2)).astype(np.int32),
                 reward=rng.standard_normal(length).astype(np.float32))
    end = ENDS[number % 3]
    final = dict(obs=rng.standard_normal(3).astype(np.float32)) if end is not None and number % 2 else None
    return dict(id=number, steps=steps, final=final, end=end, meta=dict(task_id=number % 3))


def trimmed(item: dict, start, stop) -> dict:
    """The reference of ``trim(id, start=, stop=)``: the steps kept; a cut tail truncates, its first cut step
    becoming the final observation."""
    length = len(item["steps"]["obs"])
    first, last, _ = slice(start, stop).indices(length)
    new = dict(item, steps={name: rows[first:last] for name, rows in item["steps"].items()})
    if last < length:
        new.update(end="truncated", final={name: rows[last] for name, rows in item["steps"].items()})
    return new


def assert_matches(buffer: ReplayBuffer, reference: list[dict]) -> None:
    """Everything a reader sees equals the reference: ids, counts, episodes(), a DataLoader's epoch, draws."""
    ids = [item["id"] for item in reference]
    assert buffer.episode_ids.tolist() == ids
    assert buffer.num_episodes == len(reference)
    assert buffer.num_steps == sum(len(item["steps"]["obs"]) for item in reference)
    episodes = buffer.episodes()
    assert len(episodes) == len(reference)
    for got, want in zip(episodes, reference):
        assert got.id == want["id"] and got.end == want["end"] and got.meta == want["meta"]
        assert len(got) == len(want["steps"]["obs"])
        for name, rows in want["steps"].items():
            np.testing.assert_array_equal(got[name], rows)
        if want["final"] is None:
            assert got.final is None
        else:
            for name, value in want["final"].items():
                np.testing.assert_array_equal(got.final[name], value)
            np.testing.assert_array_equal(got.observations("obs")[-1], want["final"]["obs"])
    by_id = {item["id"]: item for item in reference}
    rows = set()
    for batch in buffer.dataloader(16, timestep_level=True, return_indices=True, shuffle=False):
        for slot, t, obs, task in zip(batch["_index"].tolist(), batch["_t"].tolist(), batch["obs"].numpy(),
                                      batch["task_id"].tolist()):
            want = by_id[slot]  # (no ring here: the slot is the id)
            np.testing.assert_array_equal(obs, want["steps"]["obs"][t])
            assert task == want["meta"]["task_id"]
            rows.add((slot, t))
    assert rows == {(item["id"], t) for item in reference for t in range(len(item["steps"]["obs"]))}
    batch = buffer.sampler("uniform", timestep_level=True, seed=0).batch(256)
    episode_ids, t = np.divmod(batch["_key"].numpy(), MAX_TIMESTEPS)
    assert set(episode_ids.tolist()) <= set(ids)
    for key_id, step, obs in zip(episode_ids.tolist(), t.tolist(), batch["obs"].numpy()):
        np.testing.assert_array_equal(obs, by_id[key_id]["steps"]["obs"][step])


def assert_store(folder: Path, buffer: ReplayBuffer, reference: list[dict]) -> None:
    """The writer, a reopened reader and ``verify`` all agree with the reference."""
    assert_matches(buffer, reference)
    report = verify(folder)
    assert report.ok, report
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert_matches(reader, reference)


def test_delete_episodes_against_the_reference(tmp_path):
    reference = make_store(tmp_path / "s")
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        assert buffer.delete_episodes([7, 3]) == 2
        reference = [item for item in reference if item["id"] not in (3, 7)]
        assert_store(tmp_path / "s", buffer, reference)
        assert buffer.delete_episodes(0) == 1
        assert buffer.delete_episodes(np.array([5, 5, 9])) == 2  # (a repeated id counts once)
        reference = [item for item in reference if item["id"] not in (0, 5, 9)]
        assert_store(tmp_path / "s", buffer, reference)
        state = json.loads((tmp_path / "s" / "meta.json").read_text())["state"]
        assert state["removed"] == 5 and state["edits"] % 2 == 0
        more = episode(np.random.default_rng(1), 10, 4)  # the store goes on taking episodes
        buffer.store_episode(**more["steps"], **more["meta"], end=more["end"], final=more["final"])
        assert_store(tmp_path / "s", buffer, reference + [more])


@pytest.mark.parametrize("start, stop", [(2, None), (None, -3), (1, -1), (-4, None), (None, 3), (-5, -2),
                                         (0, 1), (-1, None), (None, None), (0, 6)])
def test_trim_against_the_reference(tmp_path, start, stop):
    reference = make_store(tmp_path / "s", seed=3)
    chosen = [item["id"] for item in reference if len(item["steps"]["obs"]) == 6 or len(item["steps"]["obs"]) >= 8]
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        for id in chosen[:3]:  # (a truncated one with a final observation, a terminated one, one with no end)
            position = buffer.episode_ids.tolist().index(id)
            new = trimmed(reference[position], start, stop)
            assert buffer.trim(id, start=start, stop=stop) == len(new["steps"]["obs"])
            reference[position] = new
            assert_store(tmp_path / "s", buffer, reference)


def test_trim_twice_cuts_the_kept_steps(tmp_path):
    reference = make_store(tmp_path / "s", seed=4)
    id = max(reference, key=lambda item: len(item["steps"]["obs"]))["id"]
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        buffer.trim(id, start=1)
        buffer.trim(id, stop=-2)
        buffer.trim(id, start=-3)
        reference[id] = trimmed(trimmed(trimmed(reference[id], 1, None), None, -2), -3, None)
        assert_store(tmp_path / "s", buffer, reference)
        transitions = buffer.dataset(transitions=True, filter_meta=dict(task_id=reference[id]["meta"]["task_id"]),
                                     return_indices=True)
        batch = transitions.__getitems__(list(range(len(transitions))))
        last = (batch["_index"].numpy() == id) & (batch["_t"].numpy() == 2)
        np.testing.assert_array_equal(batch["next_obs"].numpy()[last][0], reference[id]["final"]["obs"])


def test_relabel_against_the_reference(tmp_path):
    reference = make_store(tmp_path / "s", seed=5)
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        assert buffer.relabel([4, 1], task_id=7) == 2
        for item in reference:
            item["meta"]["task_id"] = 7 if item["id"] in (4, 1) else item["meta"]["task_id"]
        assert_store(tmp_path / "s", buffer, reference)
        assert buffer.relabel([8, 2, 5], task_id=[80, 20, 50]) == 3  # (in the order of the ids)
        for id, value in ((8, 80), (2, 20), (5, 50)):
            reference[id]["meta"]["task_id"] = value
        assert_store(tmp_path / "s", buffer, reference)
        assert buffer.relabel({"task_id": 7}, task_id=-1) == 2
        reference[1]["meta"]["task_id"] = reference[4]["meta"]["task_id"] = -1
        assert_store(tmp_path / "s", buffer, reference)
        matching = [item for item in reference if item["meta"]["task_id"] == 0]
        assert buffer.relabel({"task_id": 0}, task_id=np.arange(len(matching)) + 100) == len(matching)
        for number, item in enumerate(matching):  # (oldest first)
            item["meta"]["task_id"] = 100 + number
        assert_store(tmp_path / "s", buffer, reference)
        before = (tmp_path / "s" / "meta.json").read_bytes()
        assert buffer.relabel({"task_id": 12345}, task_id=1) == 0
        assert (tmp_path / "s" / "meta.json").read_bytes() == before


# ---- bad input: a library error, nothing changed ----------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of the store (the writer's lock and the running statistics aside), by path."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != "writer.lock" and path.parent.name != "stats"}


BAD = [
    (lambda b: b.delete_episodes(99), IndexRangeError, r"episode id\(s\) \[99\] are not live"),
    (lambda b: b.delete_episodes([1, 4]), IndexRangeError, r"\[4\] are not live .* deleted"),
    (lambda b: b.trim(4, stop=1), IndexRangeError, r"\[4\] are not live"),
    (lambda b: b.relabel([4], task_id=1), IndexRangeError, r"\[4\] are not live"),
    (lambda b: b.delete_episodes(-1), IndexRangeError, r"\[-1\] are not live"),
    (lambda b: b.delete_episodes([]), OptionError, "needs at least one episode id"),
    (lambda b: b.delete_episodes(True), IndexTypeError, "takes episode ids: an int or a list of ints"),
    (lambda b: b.delete_episodes([np.True_]), IndexTypeError, "takes episode ids"),
    (lambda b: b.relabel([True], task_id=1), IndexTypeError, "takes episode ids"),
    (lambda b: b.trim(True, stop=1), IndexTypeError, "takes episode ids"),
    (lambda b: b.delete_episodes(2.0), IndexTypeError, "takes episode ids"),
    (lambda b: b.delete_episodes([1, 2.5]), IndexTypeError, "takes episode ids"),
    (lambda b: b.trim(2, start=3, stop=3), IndexRangeError, "must keep at least one of the episode's 6 steps"),
    (lambda b: b.trim(2, start=-2, stop=-3), IndexRangeError, "must keep at least one"),
    (lambda b: b.trim(2, start=6), IndexRangeError, "must keep at least one"),
    (lambda b: b.trim(2, stop=7), IndexRangeError, r"\[7\] outside -6..6"),
    (lambda b: b.trim(2, start=-7), IndexRangeError, r"\[-7\] outside -6..6"),
    (lambda b: b.trim(2, start=1, stop=100), IndexRangeError, "outside"),
    (lambda b: b.trim(2, start=1.0), IndexTypeError, "must be ints or None"),
    (lambda b: b.trim(2, stop=np.float64(2)), IndexTypeError, "must be ints or None"),
    (lambda b: b.relabel(1, colour=3), InvalidDataError, r"\['colour'\] are not meta fields"),
    (lambda b: b.relabel(1), OptionError, "at least one meta value"),
    (lambda b: b.relabel({"colour": 1}, task_id=3), OptionError, "unknown meta field"),
    (lambda b: b.relabel([1, 2], task_id=[1, 2, 3]), InvalidDataError, "one value for every episode"),
    (lambda b: b.relabel(1, task_id=[[1, 2]]), InvalidDataError, r"must have shape \(\)"),
    (lambda b: b.relabel([1, 1], task_id=[1, 2]), OptionError, "episode id twice"),
]


@pytest.fixture
def edited(tmp_path):
    """A store whose episode 4 is deleted and episode 2 has 6 steps, and its writer."""
    rng = np.random.default_rng(0)
    with ReplayBuffer(tmp_path / "s", 16, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META) as buffer:
        for number in range(6):
            item = episode(rng, number, 6)
            buffer.store_episode(**item["steps"], **item["meta"], end=item["end"], final=item["final"])
        buffer.delete_episodes(4)
        yield buffer


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_input_is_refused_and_changes_nothing(edited, call, error, match):
    folder = edited.episode_store.folder
    before, ids = snapshot(folder), edited.episode_ids.tolist()
    with pytest.raises(error, match=match):
        call(edited)
    assert snapshot(folder) == before and edited.episode_ids.tolist() == ids
    assert edited.trim(2, start=1) == 5  # (the writer still edits)
    assert verify(folder).ok


@pytest.mark.parametrize("verb", ["delete", "trim", "relabel"])
def test_edits_of_a_read_only_buffer_are_refused(tmp_path, verb):
    make_store(tmp_path / "s")
    before = snapshot(tmp_path / "s")
    with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as reader:
        with pytest.raises(ReadOnlyError, match="is open read-only; open it with read_only=False"):
            dict(delete=lambda: reader.delete_episodes(1), trim=lambda: reader.trim(1, stop=1),
                 relabel=lambda: reader.relabel(1, task_id=5))[verb]()
        assert reader.num_episodes == 10
    assert snapshot(tmp_path / "s") == before


HOLDER = r'''
import sys, time
from pathlib import Path
import numpy as np
from memmap_replay import ReplayBuffer

buffer = ReplayBuffer.from_folder(sys.argv[1])
length = 3
buffer.store_episode(obs=np.zeros((length, 3), np.float32), action=np.zeros((length, 2), np.int32),
                     reward=np.zeros(length, np.float32), task_id=9)
Path(sys.argv[2]).write_text("")
time.sleep(600)
'''


def test_edits_while_another_process_holds_the_writer_lock_are_refused(tmp_path):
    make_store(tmp_path / "s")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "s"), str(tmp_path / "holding")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "holding").exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                holder.kill()
                pytest.fail(f"the holder never took the lock:\n{reap(holder, 60)}")
            time.sleep(0.005)
        before = snapshot(tmp_path / "s")
        with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
            for call in (lambda: buffer.delete_episodes(1), lambda: buffer.trim(1, stop=1),
                         lambda: buffer.relabel(1, task_id=5), lambda: buffer.relabel({"task_id": 1}, task_id=5)):
                with pytest.raises(StoreLockedError, match="one writer at a time"):
                    call()
            assert buffer.num_episodes == 11
        assert snapshot(tmp_path / "s") == before
    finally:
        holder.kill()
        reap(holder, 60)


# ---- rings, compressed fields, checksums and the card ------------------------------------------------------


def test_a_ring_evicts_removed_episodes_back_to_format_1_1(tmp_path):
    folder = tmp_path / "ring"
    rng = np.random.default_rng(6)
    with ReplayBuffer(folder, 6, MAX_TIMESTEPS, max_steps=50, circular=True, fields=FIELDS,
                      meta_fields=META) as buffer:
        reference = []
        for number in range(6):
            reference.append(episode(rng, number, int(rng.integers(2, 8))))
            buffer.store_episode(**reference[-1]["steps"], **reference[-1]["meta"], end=reference[-1]["end"],
                                 final=reference[-1]["final"])
        sampler = buffer.sampler("prioritized", timestep_level=True, seed=0)
        batch = sampler.batch(64)
        sampler.update_priorities(batch["_key"], np.where(batch["_key"].numpy() // MAX_TIMESTEPS == 2, 1e6, 1e-3))
        assert buffer.delete_episodes([2, 4]) == 2
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["version"] == "3.0" and meta["state"]["removed"] == 2
        for _ in range(20):  # (a removed episode the writer kept drawing would come up here)
            assert not set((sampler.batch(64)["_key"].numpy() // MAX_TIMESTEPS).tolist()) & {2, 4}
        for number in range(6, 14):
            item = episode(rng, number, int(rng.integers(2, 8)))
            buffer.store_episode(**item["steps"], **item["meta"], end=item["end"], final=item["final"])
            reference.append(item)
            live = [each for each in reference if each["id"] not in (2, 4)][-len(buffer.episode_ids):]
            assert buffer.episode_ids.tolist() == [each["id"] for each in live]
            assert verify(folder).ok
            assert not set((sampler.batch(64)["_key"].numpy() // MAX_TIMESTEPS).tolist()) & {2, 4}
        meta = json.loads((folder / "meta.json").read_text())
        assert buffer.episode_ids[0] > 4
        assert meta["version"] == "1.1" and meta["state"].get("removed", 0) == 0
        for got, want in zip(buffer.episodes(), live):
            np.testing.assert_array_equal(got["obs"], want["steps"]["obs"])
        assert buffer.num_episodes == len(live)


def test_a_prioritized_sampler_never_draws_a_deleted_episode(tmp_path):
    make_store(tmp_path / "s")
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        sampler = buffer.sampler("prioritized", timestep_level=True, seed=1)
        batch = sampler.batch(128)  # the deleted episodes' steps get the largest priorities before the edit
        keys = batch["_key"].numpy()
        sampler.update_priorities(batch["_key"], np.where(np.isin(keys // MAX_TIMESTEPS, [1, 6]), 1e6, 1e-3))
        buffer.delete_episodes([1, 6])
        for _ in range(20):
            drawn = sampler.batch(128)
            ids = drawn["_key"].numpy() // MAX_TIMESTEPS
            assert not set(ids.tolist()) & {1, 6}
            np.testing.assert_array_equal(drawn["obs"].numpy()[:, 0], ids)
            sampler.update_priorities(drawn["_key"], np.ones(len(ids)))


def digests(folder: Path, names) -> dict[str, str]:
    return {name: hashlib.sha256((folder / "steps" / name).read_bytes()).hexdigest() for name in names}


def test_edits_of_a_compressed_store_leave_its_frames_untouched(tmp_path):
    pytest.importorskip("zstandard")
    folder = make_compressed_store(tmp_path / "c", lengths=(3, 4, 5, 6, 7))
    names = ("image.frames.npy", "image.index.npy")
    before = digests(folder, names)
    with ReplayBuffer.from_folder(folder) as buffer:
        images = {item.id: item["image"] for item in buffer.episodes()}
        buffer.delete_episodes(1)
        assert buffer.trim(3, start=1, stop=-2) == 3
        assert buffer.relabel([0, 2], task_id=[7, 8]) == 2
        assert digests(folder, names) == before
        got = {item.id: item for item in buffer.episodes()}
        assert sorted(got) == [0, 2, 3, 4]
        np.testing.assert_array_equal(got[3]["image"], images[3][1:-2])
        np.testing.assert_array_equal(got[3].final["image"], images[3][-2])
        np.testing.assert_array_equal(got[4]["image"], images[4])
        assert [got[id].meta["task_id"] for id in (0, 2, 3, 4)] == [7, 8, 3, 4]
    assert digests(folder, names) == before
    report = verify(folder)
    assert report.ok, report


@pytest.mark.parametrize("edit", [lambda buffer: buffer.delete_episodes(4), lambda buffer: buffer.trim(4, stop=-2)])
def test_verify_is_clean_after_an_edit_of_the_newest_compressed_episode(tmp_path, edit):
    pytest.importorskip("zstandard")
    folder = make_compressed_store(tmp_path / "c", lengths=(3, 4, 5, 6, 7))
    with ReplayBuffer.from_folder(folder) as buffer:
        edit(buffer)
    report = verify(folder)
    assert report.ok, report


def test_edits_keep_the_manifest_current_and_are_recorded_on_the_card(tmp_path):
    folder = tmp_path / "s"
    make_store(folder)
    write_manifest(folder)
    with ReplayBuffer.from_folder(folder) as buffer:
        for call in (lambda: buffer.delete_episodes([2, 3]), lambda: buffer.trim(5, stop=-1),
                     lambda: buffer.relabel({"task_id": 1}, task_id=9), lambda: buffer.relabel([0], task_id=4)):
            call()
            buffer.flush()
            done = subprocess.run(["sha256sum", "--quiet", "-c", "checksums.sha256"], cwd=folder,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            report = verify(folder, checksums=True)
            assert report.ok, report
    records = [record for record in read_card(folder).provenance if record["kind"] in
               ("delete_episodes", "trim", "relabel")]
    assert [record["kind"] for record in records] == ["delete_episodes", "trim", "relabel", "relabel"]
    assert records[0]["episodes"] == [2, 3] and records[1]["episode"] == 5
    assert records[2]["filter"] == {"task_id": "1"} and records[3]["episodes"] == [0]
    done = subprocess.run(["sha256sum", "--quiet", "-c", "checksums.sha256"], cwd=folder, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert verify(folder, checksums=True).ok
