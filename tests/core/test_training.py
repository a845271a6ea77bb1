"""core/training.py: a training state and its arrays are one commit; reads follow the folder-trust rules."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from memmap_replay.core import folderio, training
from memmap_replay.core.training import TRAINING_DIR, read_training_state, write_training_state
from memmap_replay.errors import (CorruptStoreError, InvalidDataError, OptionError, StoreNotFoundError,
                                  UnsafeEntryError)

STORE = "0" * 32
LIMIT = 1 << 20


def _arrays(value: float) -> dict[str, np.ndarray]:
    return {"p.leaves": np.full(5, value), "p.ids": np.arange(3, dtype=np.int64)}


def _read(folder):
    return read_training_state(folder, "run", store_id=STORE, array_bytes=LIMIT)


def test_a_state_and_its_arrays_round_trip(tmp_path):
    write_training_state(tmp_path, "run", {"step": np.int64(7), "loader": {"batch": 3}}, _arrays(1.5), store_id=STORE)
    state, arrays = _read(tmp_path)
    assert state == {"step": 7, "loader": {"batch": 3}}
    assert arrays.keys() == {"p.leaves", "p.ids"} and (arrays["p.leaves"] == 1.5).all()
    assert arrays["p.ids"].dtype == np.int64
    write_training_state(tmp_path, "run", {"step": 8}, _arrays(2.5), store_id=STORE)
    assert _read(tmp_path)[0] == {"step": 8}
    files = sorted(os.listdir(tmp_path / TRAINING_DIR))
    assert len([name for name in files if name.endswith(".npy")]) == 2  # the older generation's are gone


@pytest.mark.parametrize("fail_at", range(3))
def test_a_save_cut_short_at_any_write_leaves_the_previous_state_whole(tmp_path, monkeypatch, fail_at):
    write_training_state(tmp_path, "run", {"step": 1}, _arrays(1.0), store_id=STORE)
    real, calls = folderio.write_atomic, []

    def failing(*args, **kwargs):
        calls.append(args[1])
        if len(calls) > fail_at:
            raise KeyboardInterrupt  # as a kill would stop it: nothing after this write happens
        return real(*args, **kwargs)

    monkeypatch.setattr(folderio, "write_atomic", failing)
    with pytest.raises(KeyboardInterrupt):
        write_training_state(tmp_path, "run", {"step": 2}, _arrays(2.0), store_id=STORE)
    monkeypatch.setattr(folderio, "write_atomic", real)
    state, arrays = _read(tmp_path)
    assert state == {"step": 1} and (arrays["p.leaves"] == 1.0).all()
    write_training_state(tmp_path, "run", {"step": 3}, _arrays(3.0), store_id=STORE)  # cleans up what was left
    assert len([name for name in os.listdir(tmp_path / TRAINING_DIR) if name.endswith(".npy")]) == 2


def test_names_and_values_are_checked(tmp_path):
    for name in ("", "../x", "a.b", "__", "x" * 65, 3):
        with pytest.raises(OptionError, match="training state's name"):
            write_training_state(tmp_path, name, {}, {}, store_id=STORE)
    with pytest.raises(InvalidDataError, match="plain JSON values"):
        write_training_state(tmp_path, "run", {"x": float("nan")}, {}, store_id=STORE)
    with pytest.raises(InvalidDataError, match="one of"):
        write_training_state(tmp_path, "run", {}, {"a": np.zeros(2, dtype=np.float32)}, store_id=STORE)
    assert not (tmp_path / TRAINING_DIR).exists()  # refused before anything is written
    with pytest.raises(StoreNotFoundError, match="no training state 'run'"):
        _read(tmp_path)


def _damage(folder, how: str) -> None:
    directory = folder / TRAINING_DIR
    array = next(directory / name for name in sorted(os.listdir(directory)) if name.endswith(".npy"))
    document = json.loads((directory / "run.json").read_text())
    if how == "array bytes":
        data = bytearray(array.read_bytes())
        data[-1] ^= 1
        array.write_bytes(bytes(data))
    elif how == "array missing":
        array.unlink()
    elif how == "array too big":
        array.write_bytes(array.read_bytes() + b"\0" * LIMIT)
    elif how == "array is a link":
        outside = folder.parent / f"{folder.name}-outside.npy"
        outside.write_bytes(array.read_bytes())
        array.unlink()
        array.symlink_to(outside)
    elif how == "another store":
        document["store_id"] = "1" * 32
    elif how == "another version":
        document["version"] = 2
    elif how == "not json":
        (directory / "run.json").write_text("{")
    elif how == "described wrongly":
        document["arrays"]["p.ids"]["shape"] = [4]
    elif how == "a pickle":
        np.save(array, np.array([{}], dtype=object), allow_pickle=True)
        document["arrays"]["p.leaves"]["sha256"] = __import__("hashlib").sha256(array.read_bytes()).hexdigest()
        document["arrays"]["p.ids"]["sha256"] = document["arrays"]["p.leaves"]["sha256"]
    if how in ("another store", "another version", "described wrongly", "a pickle"):
        (directory / "run.json").write_text(json.dumps(document))


@pytest.mark.parametrize("how, error, match", [
    ("array bytes", CorruptStoreError, "checksum"),
    ("array missing", CorruptStoreError, "is missing"),
    ("array too big", UnsafeEntryError, "bytes"),
    ("array is a link", UnsafeEntryError, "link"),
    ("another store", CorruptStoreError, "another store"),
    ("another version", CorruptStoreError, "version 2"),
    ("not json", CorruptStoreError, "JSON|json"),
    ("described wrongly", CorruptStoreError, "not what"),
    ("a pickle", CorruptStoreError, "not a .npy|pickle|holds"),
])
def test_a_damaged_or_hostile_state_is_refused(tmp_path, how, error, match):
    folder = tmp_path / "store"
    folder.mkdir()
    write_training_state(folder, "run", {"step": 1}, _arrays(1.0), store_id=STORE)
    _damage(folder, how)
    with pytest.raises(error, match=match):
        _read(folder)


def test_a_link_in_place_of_the_folder_is_never_written_through(tmp_path):
    folder, outside = tmp_path / "store", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / TRAINING_DIR).symlink_to(outside)
    with pytest.raises(UnsafeEntryError, match="link"):
        write_training_state(folder, "run", {}, _arrays(1.0), store_id=STORE)
    assert os.listdir(outside) == []
    assert training.FORMAT_NAME == "memmap_replay.training_state"


def _saved_store(folder):
    from memmap_replay import ReplayBuffer

    buffer = ReplayBuffer(folder, 4, 8, fields=dict(obs=("float", 2)), overwrite=True)
    buffer.store_episode(obs=np.zeros((3, 2)))
    buffer.save_training_state("run", {"step": 3})
    return buffer


def test_training_states_are_run_state_verify_and_overwrite_know(tmp_path):
    from memmap_replay import ReplayBuffer
    from memmap_replay.sharing.verify import verify

    _saved_store(tmp_path / "store").close()
    report = verify(tmp_path / "store")
    assert report.ok and not [line for line in report.warnings if TRAINING_DIR in line], report.warnings
    ReplayBuffer(tmp_path / "store", 4, 8, fields=dict(obs=("float", 2)), overwrite=True).close()
    assert not (tmp_path / "store" / TRAINING_DIR).exists()  # a new store does not inherit the old run's states


def test_a_foreign_file_in_training_keeps_overwrite_from_deleting_it(tmp_path):
    from memmap_replay import ReplayBuffer
    from memmap_replay.errors import NotAFolderError

    _saved_store(tmp_path / "store").close()
    (tmp_path / "store" / TRAINING_DIR / "notes.txt").write_text("mine")
    with pytest.raises(NotAFolderError, match="notes.txt is not one of a store's files"):
        ReplayBuffer(tmp_path / "store", 4, 8, fields=dict(obs=("float", 2)), overwrite=True)
    assert (tmp_path / "store" / TRAINING_DIR / "notes.txt").read_text() == "mine"
