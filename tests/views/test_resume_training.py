"""buffer.save_training_state / load_training_state with the loops of tests/resume_loops.py, in this process: a
run abandoned after a save (its later batches and priority updates lost, its priority files moved on) resumes
with exactly the batches an uninterrupted run gives, for every order. The SIGKILL version:
test_resume_kill.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.errors import InvalidDataError, StoreNotFoundError
from resume_loops import ORDERS, SAVE_EVERY, copy_stores, make_stores, train


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    make_stores(root)
    return root


def _batches(entries: list[dict]) -> dict[int, list]:
    return {entry["step"]: entry["reward"] for entry in entries if "step" in entry}


@pytest.mark.parametrize("order", ORDERS)
def test_a_run_abandoned_after_a_save_resumes_exactly(stores, tmp_path, order):
    total = 40
    reference: list[dict] = []
    train(copy_stores(stores, tmp_path / "reference"), order, total, reference.append)
    root = copy_stores(stores, tmp_path / "run")
    abandoned: list[dict] = []
    train(root, order, 3 * SAVE_EVERY + 3, abandoned.append)  # 3 steps past the last save, then "killed"
    resumed: list[dict] = []
    start = train(root, order, total, resumed.append, resume=True)
    assert start == 3 * SAVE_EVERY
    expected = _batches(reference)
    assert _batches(abandoned) == {step: expected[step] for step in range(3 * SAVE_EVERY + 3)}
    assert _batches(resumed) == {step: expected[step] for step in range(start, total)}


@pytest.mark.parametrize("order", ["prioritized", "blocks"])
def test_a_run_with_worker_threads_resumes_exactly(stores, tmp_path, order):
    reference: list[dict] = []
    train(copy_stores(stores, tmp_path / "reference"), order, 30, reference.append, loader_options={"num_workers": 2})
    root = copy_stores(stores, tmp_path / "run")
    train(root, order, 2 * SAVE_EVERY + 4, [].append, loader_options={"num_workers": 2})
    resumed: list[dict] = []
    train(root, order, 30, resumed.append, resume=True, loader_options={"num_workers": 2})
    assert _batches(resumed) == {step: _batches(reference)[step] for step in range(2 * SAVE_EVERY, 30)}


def test_a_read_only_reader_saves_and_loads_its_priorities(stores, tmp_path):
    root = copy_stores(stores, tmp_path / "run")
    with ReplayBuffer.from_folder(root / "a", read_only=True) as reader:
        sampler = reader.sampler("prioritized", timestep_level=True, seed=2)
        batch = sampler.batch(8)
        sampler.update_priorities(batch["_key"], np.arange(8.0) + 1)
        reader.save_training_state("reader", {"sampler": sampler, "step": np.int64(3), "note": "x"})
        after = [sampler.batch(8)["_key"].tolist() for _ in range(5)]
    assert not (root / "a" / "priorities").exists()  # a reader's priorities live in its training state only
    with ReplayBuffer.from_folder(root / "a", read_only=True) as reader:
        saved = reader.load_training_state("reader")
        assert saved["step"] == 3 and saved["note"] == "x"
        again = reader.sampler("prioritized", timestep_level=True, seed=2)
        again.load_state_dict(saved["sampler"])
        assert [again.batch(8)["_key"].tolist() for _ in range(5)] == after


def test_a_state_that_names_saved_priorities_needs_load_training_state(stores, tmp_path):
    root = copy_stores(stores, tmp_path / "run")
    with ReplayBuffer.from_folder(root / "a") as buffer:
        sampler = buffer.sampler("prioritized", timestep_level=True, seed=2)
        buffer.save_training_state("run", {"sampler": sampler})
        document = json.loads((root / "a" / "training" / "run.json").read_text())
        with pytest.raises(InvalidDataError, match="load_training_state"):
            sampler.load_state_dict(document["state"]["sampler"])
        sampler.close()


def test_saving_refuses_what_is_not_json_and_loading_what_is_not_there(stores, tmp_path):
    root = copy_stores(stores, tmp_path / "run")
    with ReplayBuffer.from_folder(root / "a") as buffer:
        with pytest.raises(InvalidDataError, match="plain JSON values"):
            buffer.save_training_state("run", {"weights": np.zeros(3)})
        with pytest.raises(InvalidDataError, match="str keys"):
            buffer.save_training_state("run", {1: 2})
        with pytest.raises(StoreNotFoundError, match="no training state 'run'"):
            buffer.load_training_state("run")
        assert not (root / "a" / "training" / "run.json").exists()


def test_a_reader_saves_while_a_writer_appends(stores, tmp_path):
    root = copy_stores(stores, tmp_path / "run")
    writer = ReplayBuffer.from_folder(root / "a")  # holds the writer lock
    with ReplayBuffer.from_folder(root / "a", read_only=True) as reader:
        loader = reader.dataloader(8, timestep_level=True, shuffle=True, seed=1)
        iterator = iter(loader)
        next(iterator)
        for step in range(3):
            writer.store_episode(obs=np.zeros((4, 2)), reward=np.arange(4.0))
            reader.save_training_state("reader", {"loader": loader, "step": step})
        saved = reader.load_training_state("reader")
        assert saved["step"] == 2 and saved["loader"]["batch"] == 1
    assert writer.num_episodes == 9 + 3
    writer.close()
