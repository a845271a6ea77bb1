"""``ReplayBuffer.add_field`` (``sharing/derived.py``, ``core/derive.py``): the values of the ready-made
``returns_to_go`` and ``discounted_return``, of functions and of arrays, per step and per episode, against a
reference in plain numpy (random lengths, ends and final observations; dtype, default, reads, block boundaries;
deleted and trimmed episodes; a compressed store left byte-identical); readers that see the new field (a refreshed
reader's new sampler and DataLoader, another process, ``verify``, the card and the checksum manifest); bad input
refused with nothing changed. The kill sweep and a reader in another process are in ``test_derived_kill.py``,
the returns cache in ``test_returns_cache.py``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import (InvalidDataError, OptionError, ReadOnlyError, ReplayBuffer, SchemaError,
                           discounted_return, read_card, returns_to_go, verify, write_manifest)

from compressed_stores import make_compressed_store

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float")
META = dict(task_id="int")
ENDS = ("terminated", "truncated", None)
MAX_TIMESTEPS = 12


def make_store(folder: Path, seed: int = 0, count: int = 10) -> list[dict]:
    """A closed store of ``count`` episodes of random lengths (1 to MAX_TIMESTEPS), ends and final observations;
    returns the reference in plain numpy: id, steps, end, final (or None), meta."""
    rng = np.random.default_rng(seed)
    reference = []
    with ReplayBuffer(folder, 16, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META) as buffer:
        for number in range(count):
            length = int(rng.integers(1, MAX_TIMESTEPS + 1))
            steps = dict(obs=rng.standard_normal((length, 3)).astype(np.float32),
                         action=rng.integers(-9, 9, (length, 2)).astype(np.int32),
                         reward=rng.standard_normal(length).astype(np.float32))
            end = ENDS[int(rng.integers(3))]
            final = dict(obs=rng.standard_normal(3).astype(np.float32)) if end and rng.random() < 0.6 else None
            buffer.store_episode(**steps, task_id=number % 3, end=end, final=final)
            reference.append(dict(id=number, steps=steps, end=end, final=final, meta=dict(task_id=number % 3)))
    assert any(item["final"] is not None for item in reference) and any(item["final"] is None for item in reference)
    return reference


def backward(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1}, a float64 loop from the end."""
    out, running = np.zeros(len(rewards)), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def discounted(rewards: np.ndarray, gamma: float) -> float:
    return float(sum(gamma ** t * float(r) for t, r in enumerate(rewards)))


def listing(folder: Path) -> tuple[bytes, list[str], list[str]]:
    """meta.json's bytes and the files of steps/ and meta/."""
    return ((folder / "meta.json").read_bytes(), sorted(path.name for path in (folder / "steps").iterdir()),
            sorted(path.name for path in (folder / "meta").iterdir()))


# ---- values against plain numpy ----------------------------------------------------------------------------


def test_returns_to_go_and_discounted_return_against_numpy(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=1)
    with ReplayBuffer.from_folder(folder) as buffer:
        spec = buffer.add_field("rtg", returns_to_go())
        assert spec.dtype == np.float32 and spec.shape == ()
        buffer.add_field("rtg9", returns_to_go(gamma=0.9, dtype="float64"))
        buffer.add_field("rtg0", returns_to_go(gamma=0.0))
        spec = buffer.add_field("ret", discounted_return(gamma=0.9, dtype="float64"))
        assert spec.dtype == np.float64 and spec.shape == ()
        buffer.add_field("ret99", discounted_return())
        assert "rtg" in buffer.fieldnames and "ret" in buffer.meta_fieldnames and "ret" not in buffer.fieldnames
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        for got, want in zip(reader.episodes(), reference, strict=True):
            rewards = want["steps"]["reward"]
            assert got["rtg"].dtype == np.float32 and got["rtg9"].dtype == np.float64
            np.testing.assert_allclose(got["rtg"], backward(rewards, 1.0), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got["rtg9"], backward(rewards, 0.9), rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(got["rtg0"], rewards)
            np.testing.assert_allclose(got.meta["ret"], discounted(rewards, 0.9), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got.meta["ret99"], discounted(rewards, 0.99), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got.meta["ret"], got["rtg9"][0], rtol=1e-12)
            for name in ("obs", "action", "reward"):
                np.testing.assert_array_equal(got[name], want["steps"][name])
            if want["final"] is not None:  # (no default given: the final row holds zeros)
                assert got.final["rtg"] == 0 and got.final["rtg9"] == 0
    assert verify(folder).ok


def test_functions_and_arrays_per_step_and_per_episode(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=2)
    steps = {name: np.concatenate([item["steps"][name] for item in reference]) for name in FIELDS}
    with ReplayBuffer.from_folder(folder) as buffer:
        spec = buffer.add_field("twice", lambda episode: episode["obs"][:, :2] * 2, default=-1.5)
        assert spec.dtype == np.float32 and spec.shape == (2,)
        spec = buffer.add_field("shape", lambda episode: np.array([len(episode), episode["action"].sum()]),
                                per="episode", dtype="int16")
        assert spec.dtype == np.int16 and spec.shape == (2,)
        spec = buffer.add_field("flat", steps["action"][:, 0] + 100, dtype="int64", default=7)
        assert spec.dtype == np.int64 and spec.shape == ()
        buffer.add_field("order", np.arange(len(reference)) * 10, per="episode")
        buffer.add_field("mean_obs", np.stack([item["steps"]["obs"].mean(0) for item in reference]), per="episode",
                         dtype="float64")
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        for number, (got, want) in enumerate(zip(reader.episodes(), reference, strict=True)):
            np.testing.assert_array_equal(got["twice"], want["steps"]["obs"][:, :2] * 2)
            np.testing.assert_array_equal(got.meta["shape"], [len(want["steps"]["obs"]),
                                                              want["steps"]["action"].sum()])
            assert got.meta["shape"].dtype == np.int16
            np.testing.assert_array_equal(got["flat"], want["steps"]["action"][:, 0] + 100)
            assert got.meta["order"] == number * 10
            np.testing.assert_array_equal(got.meta["mean_obs"], want["steps"]["obs"].mean(0).astype(np.float64))
            if want["final"] is None:
                assert got.final is None
            else:  # the default in the final row; the final observation as stored
                np.testing.assert_array_equal(got.final["twice"], [-1.5, -1.5])
                assert got.final["flat"] == 7
                np.testing.assert_array_equal(got.final["obs"], want["final"]["obs"])
                np.testing.assert_array_equal(got.observations("twice")[-1], [-1.5, -1.5])
    assert verify(folder).ok


def test_reads_limits_the_fields_the_function_sees(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=3)
    seen: list[set] = []

    def fn(episode):
        seen.append(set(episode.keys()))
        return episode["reward"] * 3

    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.add_field("tripled", fn, reads=["reward"])
        assert seen and all(keys == {"reward"} for keys in seen)
        seen.clear()
        buffer.add_field("all_fields", fn)  # (a plain function: every field)
        assert seen and all(keys == {"obs", "action", "reward", "tripled"} for keys in seen)
        seen.clear()
        buffer.add_field("rtg", returns_to_go())  # (it says it reads reward)
        for got, want in zip(buffer.episodes(), reference, strict=True):
            np.testing.assert_array_equal(got["tripled"], want["steps"]["reward"] * 3)


@pytest.mark.parametrize("block", [1, 3, 4, 9, 10, 256])
def test_block_boundaries_change_no_value(tmp_path, block):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=4, count=10)
    rows = np.concatenate([item["steps"]["reward"] for item in reference])
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.add_field("rtg", returns_to_go(gamma=0.9, dtype="float64"), block=block, default=-1.0)
        buffer.add_field("index", np.arange(len(rows)), block=block)
        buffer.add_field("ret", discounted_return(gamma=0.5, dtype="float64"), block=block)
        buffer.add_field("position", np.arange(10) + 1, per="episode", block=block)
        for number, (got, want) in enumerate(zip(buffer.episodes(), reference, strict=True)):
            rewards = want["steps"]["reward"]
            np.testing.assert_allclose(got["rtg"], backward(rewards, 0.9), rtol=1e-12, atol=1e-12)
            first = sum(len(item["steps"]["reward"]) for item in reference[:number])
            np.testing.assert_array_equal(got["index"], np.arange(first, first + len(rewards)))
            np.testing.assert_allclose(got.meta["ret"], discounted(rewards, 0.5), rtol=1e-12, atol=1e-12)
            assert got.meta["position"] == number + 1
            if want["final"] is not None:
                assert got.final["rtg"] == -1.0 and got.final["index"] == 0
    assert verify(folder).ok


def test_after_deletes_and_trims_the_values_line_up_with_episode_ids(tmp_path):
    folder = tmp_path / "s"
    reference = {item["id"]: item for item in make_store(folder, seed=5, count=12)}
    long = [id for id, item in reference.items() if len(item["steps"]["reward"]) >= 4]
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.delete_episodes([0, 5, 11])
        buffer.trim(long[1], start=1)
        buffer.trim(long[2], stop=-2)
        buffer.trim(long[3], start=1, stop=-1)
        kept = {}
        for got in buffer.episodes():  # (the trims against the reference are test_inplace's)
            kept[got.id] = got["reward"].copy()
        ids = buffer.episode_ids.tolist()
        assert ids == sorted(set(reference) - {0, 5, 11}) == list(kept)
        rows = np.concatenate([kept[id] for id in ids])
        buffer.add_field("copy", rows * 2, block=3)
        buffer.add_field("id_of", np.array(ids) * 100, per="episode", block=3)
        buffer.add_field("rtg", returns_to_go(dtype="float64"), block=3)
        buffer.add_field("length", lambda episode: len(episode), per="episode", block=3)
        for got in buffer.episodes():
            np.testing.assert_array_equal(got["copy"], kept[got.id] * 2)
            assert got.meta["id_of"] == got.id * 100 and got.meta["length"] == len(kept[got.id])
            np.testing.assert_allclose(got["rtg"], backward(kept[got.id], 1.0), rtol=1e-12, atol=1e-12)
    report = verify(folder)
    assert report.ok, report


def test_a_compressed_store_gets_a_raw_field_and_keeps_its_frames(tmp_path):
    pytest.importorskip("zstandard")
    folder = make_compressed_store(tmp_path / "c", lengths=(3, 4, 5, 6, 7))
    names = sorted(path.name for path in (folder / "steps").iterdir() if path.name.startswith("image"))
    assert names  # (the compressed field's files)
    before = {name: hashlib.sha256((folder / "steps" / name).read_bytes()).hexdigest() for name in names}
    with ReplayBuffer.from_folder(folder) as buffer:
        images = {item.id: item["image"] for item in buffer.episodes()}
        rewards = {item.id: item["reward"] for item in buffer.episodes()}
        buffer.add_field("rtg", returns_to_go(dtype="float64"))
        buffer.add_field("bright", lambda episode: episode["image"].reshape(len(episode), -1).sum(1), reads=["image"])
        for got in buffer.episodes():
            np.testing.assert_array_equal(got["image"], images[got.id])
            np.testing.assert_allclose(got["rtg"], backward(rewards[got.id], 1.0), rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(got["bright"], images[got.id].reshape(len(got), -1).sum(1))
    after = {name: hashlib.sha256((folder / "steps" / name).read_bytes()).hexdigest() for name in names}
    assert after == before
    schema = json.loads((folder / "meta.json").read_text())["schema"]
    fields = schema["fields"] if "fields" in schema else schema
    assert "codec" not in fields["rtg"] and "codec" in fields["image"]
    assert (folder / "steps" / "rtg.npy").is_file() and (folder / "steps" / "bright.npy").is_file()
    report = verify(folder)
    assert report.ok, report


def test_a_ring_that_wrapped_gets_its_values_where_its_episodes_are(tmp_path):
    folder = tmp_path / "ring"
    rng = np.random.default_rng(12)
    rewards = {}
    with ReplayBuffer(folder, 6, 8, max_steps=30, circular=True, fields=FIELDS) as buffer:
        for number in range(23):
            length = int(rng.integers(1, 9))
            rewards[number] = rng.standard_normal(length).astype(np.float32)
            buffer.store_episode(obs=np.zeros((length, 3), np.float32), action=np.zeros((length, 2), np.int32),
                                 reward=rewards[number], end="truncated",
                                 final=dict(obs=np.ones(3, np.float32)) if number % 2 else None)
        ids = buffer.episode_ids.tolist()
        assert ids[0] > 0 and buffer.episode_ids.tolist() == list(range(ids[0], 23))
        buffer.add_field("copy", np.concatenate([rewards[id] for id in ids]) * 2, default=-7)
        buffer.add_field("rtg", returns_to_go(dtype="float64"))
        for got in buffer.episodes():
            np.testing.assert_array_equal(got["copy"], rewards[got.id] * 2)
            np.testing.assert_allclose(got["rtg"], backward(rewards[got.id], 1.0), rtol=1e-12, atol=1e-12)
            assert got.final is None or got.final["copy"] == -7
        for _ in range(4):  # (the ring goes on, over the new field too)
            buffer.store_episode(obs=np.zeros((4, 3), np.float32), action=np.zeros((4, 2), np.int32),
                                 reward=np.ones(4, np.float32), copy=np.arange(4), rtg=np.zeros(4))
    report = verify(folder)
    assert report.ok and not report.warnings, report


def test_a_stale_link_out_of_the_store_at_the_new_file_is_replaced_not_followed(tmp_path):
    folder, outside = tmp_path / "s", tmp_path / "outside.npy"
    reference = make_store(folder, seed=13, count=3)
    np.save(outside, np.arange(5.0))
    before = outside.read_bytes()
    os.symlink(outside, folder / "steps" / "rtg.npy")
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.add_field("rtg", returns_to_go(dtype="float64"))
        for got, want in zip(buffer.episodes(), reference, strict=True):
            np.testing.assert_allclose(got["rtg"], backward(want["steps"]["reward"], 1.0), rtol=1e-12, atol=1e-12)
    assert outside.read_bytes() == before and not (folder / "steps" / "rtg.npy").is_symlink()
    report = verify(folder)
    assert report.ok and not report.warnings, report


# ---- readers -------------------------------------------------------------------------------------------------


def test_a_reader_opened_before_sees_the_field_after_refresh(tmp_path):
    folder = tmp_path / "s"
    reference = make_store(folder, seed=6)
    by_id = {item["id"]: backward(item["steps"]["reward"], 1.0) for item in reference}
    with ReplayBuffer.from_folder(folder, read_only=True) as reader, ReplayBuffer.from_folder(folder) as writer:
        writer.add_field("rtg", returns_to_go(dtype="float64"))
        writer.add_field("ret", discounted_return(gamma=1.0, dtype="float64"))
        reader.refresh()
        assert "rtg" in reader.fieldnames and "ret" in reader.meta_fieldnames
        batch = reader.sampler("uniform", timestep_level=True, seed=0).batch(128)
        ids, t = np.divmod(batch["_key"].numpy(), MAX_TIMESTEPS)
        want = np.array([by_id[id][step] for id, step in zip(ids.tolist(), t.tolist())])
        np.testing.assert_allclose(batch["rtg"].numpy(), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(batch["ret"].numpy(), [by_id[id][0] for id in ids.tolist()], rtol=1e-12)
        seen = set()
        for batch in reader.dataloader(16, timestep_level=True, return_indices=True, shuffle=False):
            for slot, step, value in zip(batch["_index"].tolist(), batch["_t"].tolist(), batch["rtg"].tolist()):
                assert value == pytest.approx(by_id[slot][step], rel=1e-12, abs=1e-12)
                seen.add((slot, step))
        assert len(seen) == sum(len(item["steps"]["reward"]) for item in reference)


def test_the_card_records_the_field_and_the_manifest_stays_current(tmp_path):
    folder = tmp_path / "s"
    make_store(folder, seed=8)
    write_manifest(folder)
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.add_field("rtg", returns_to_go(gamma=0.5))
        buffer.add_field("ones", np.ones(buffer.num_episodes, np.uint8), per="episode")
    report = verify(folder, checksums=True)
    assert report.ok and not report.warnings, report
    listed = (folder / "checksums.sha256").read_text()
    assert "steps/rtg.npy" in listed and "meta/ones.npy" in listed
    done = subprocess.run(["sha256sum", "--quiet", "-c", "checksums.sha256"], cwd=folder, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [record for record in read_card(folder).provenance if record["kind"] == "add_field"]
    assert [(record["field"], record["per"]) for record in records] == [("rtg", "step"), ("ones", "episode")]
    assert records[0]["dtype"] == "float32" and "gamma=0.5" in records[0]["values"]
    assert records[1]["values"] == "an array" and records[1]["dtype"] == "uint8"


# ---- bad input: a library error, nothing changed -------------------------------------------------------------


def wrong_rows_later(episode):
    """Right for the first episode, one row short from the third (raised after the file was made)."""
    return episode["reward"] if episode.id < 2 else episode["reward"][:-1]


BAD = [
    (lambda b: b.add_field("obs", returns_to_go()), SchemaError, "already has a field 'obs'"),
    (lambda b: b.add_field("task_id", np.zeros(b.num_episodes), per="episode"), SchemaError,
     "already has a meta field 'task_id'"),
    (lambda b: b.add_field("reward", np.zeros(b.num_steps)), SchemaError, "already has a field 'reward'"),
    (lambda b: b.add_field("no good", returns_to_go()), SchemaError, "field name must be a letter followed by"),
    (lambda b: b.add_field("1st", returns_to_go()), SchemaError, "field name must be a letter followed by"),
    (lambda b: b.add_field("../x", np.zeros(b.num_steps)), SchemaError, "field name must be a letter followed by"),
    (lambda b: b.add_field("x", np.zeros(b.num_steps + 1)), InvalidDataError, r"one row per step .*\(got shape"),
    (lambda b: b.add_field("x", np.zeros(b.num_episodes), per="step"), InvalidDataError, "one row per step"),
    (lambda b: b.add_field("x", np.zeros(b.num_steps), per="episode"), InvalidDataError, "one row per episode"),
    (lambda b: b.add_field("x", np.float32(1.0)), InvalidDataError, "one row per step"),
    (lambda b: b.add_field("x", lambda e: e["reward"][:-1]), InvalidDataError, "one row per step of the episode"),
    (lambda b: b.add_field("x", wrong_rows_later), InvalidDataError, "one row per step of the episode"),
    (lambda b: b.add_field("x", lambda e: np.zeros((len(e), 2)) if e.id < 3 else np.zeros((len(e), 3))),
     InvalidDataError, r"shape"),
    (lambda b: b.add_field("x", returns_to_go(), per="neither"), OptionError, "per"),
    (lambda b: b.add_field("x", np.zeros(b.num_steps), per="neither"), OptionError, "per"),
    (lambda b: b.add_field("x", returns_to_go(), reads=["colour"]), OptionError, "colour"),
    (lambda b: b.add_field("x", returns_to_go(reward="colour")), OptionError, "colour"),
    (lambda b: b.add_field("x", returns_to_go(), block=0), OptionError, "block"),
    (lambda b: b.add_field("x", returns_to_go(gamma=1.5)), OptionError, r"gamma must be a number in \[0, 1\]"),
    (lambda b: b.add_field("x", returns_to_go(gamma=-0.1)), OptionError, r"gamma must be a number in \[0, 1\]"),
    (lambda b: b.add_field("x", discounted_return(gamma=float("nan"))), OptionError, "gamma must be a number"),
    (lambda b: b.add_field("x", discounted_return(gamma=True)), OptionError, "gamma must be a number"),
]


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_input_is_refused_and_changes_nothing(tmp_path, call, error, match):
    folder = tmp_path / "s"
    make_store(folder, seed=9)
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.delete_episodes(1)
        before, ids = listing(folder), buffer.episode_ids.tolist()
        with pytest.raises(error, match=match):
            call(buffer)
        assert listing(folder) == before and buffer.episode_ids.tolist() == ids
        assert "x" not in buffer.fieldnames and "x" not in buffer.meta_fieldnames
        buffer.add_field("x", returns_to_go())  # (the writer still adds fields, that name too)
    report = verify(folder)
    assert report.ok and not report.warnings, report


def test_a_store_without_live_episodes_takes_arrays_but_no_function(tmp_path):
    folder = tmp_path / "s"
    make_store(folder, seed=10, count=3)
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.delete_episodes(buffer.episode_ids)
        before = listing(folder)
        for per in ("step", "episode"):
            with pytest.raises(InvalidDataError, match="needs at least one live episode"):
                buffer.add_field("x", lambda episode: episode["reward"], per=per)
            with pytest.raises(InvalidDataError, match="needs at least one live episode"):
                buffer.add_field("x", returns_to_go() if per == "step" else discounted_return())
            assert listing(folder) == before
    assert verify(folder).ok


def test_a_read_only_buffer_adds_no_field(tmp_path):
    folder = tmp_path / "s"
    make_store(folder, seed=11)
    before = listing(folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        for call in (lambda: reader.add_field("rtg", returns_to_go()),
                     lambda: reader.add_field("x", np.zeros(reader.num_episodes), per="episode")):
            with pytest.raises(ReadOnlyError, match="is open read-only; open it with read_only=False"):
                call()
    assert listing(folder) == before
