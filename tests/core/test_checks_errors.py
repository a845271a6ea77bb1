"""The error catalogue for ``core/checks.py``, the checks ``EpisodeStore.open`` makes: reopening with a
different schema or capacity, paths that are not store folders, folders without ``meta.json``, an unknown
open mode.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

from memmap_replay import (CorruptStoreError, EpisodeStore, NotAFolderError, OptionError, ReplayBuffer,
                           SchemaMismatchError, StoreNotFoundError)

from catalogue import (ERRORS_FIELDS as FIELDS, ERRORS_META as META, make_errors_store as make, raises,
                       committed, assert_episode, assert_unchanged, files_of)


# ---- reopening with a different schema or capacity ---------------------------------------------------

MISMATCHES = [
    pytest.param(dict(fields={**FIELDS, "obs": ("float", (4,))}), r"field 'obs': stored float32 \(3,\) default None, "
                                                                  r"asked for float32 \(4,\)", id="field-shape"),
    pytest.param(dict(fields={**FIELDS, "count": "int32"}), r"field 'count': stored int64 .*asked for int32",
                 id="field-dtype"),
    pytest.param(dict(fields={**FIELDS, "obs": ("float", (3,), 1.0)}), r"field 'obs': .*default None, "
                                                                       r"asked for .*default 1\.0", id="field-default"),
    pytest.param(dict(fields={**FIELDS, "extra": "float"}), r"field 'extra': stored absent, asked for float32",
                 id="extra-field"),
    pytest.param(dict(fields={k: v for k, v in FIELDS.items() if k != "done"}),
                 r"field 'done': stored bool \(\) default None, asked for absent", id="missing-field"),
    pytest.param(dict(meta_fields=None), r"meta field 'task': stored int32 .*asked for absent",
                 id="missing-meta-fields"),
    pytest.param(dict(meta_fields={**META, "task": "int64"}), r"meta field 'task': stored int32 .*asked for int64",
                 id="meta-dtype"),
    pytest.param(dict(max_episodes=7), r"max_episodes: stored 6, asked for 7", id="max_episodes"),
    pytest.param(dict(max_timesteps=11), r"max_timesteps: stored 10, asked for 11", id="max_timesteps"),
    pytest.param(dict(max_steps=500), r"max_steps: stored 66, asked for 500", id="max_steps"),
    pytest.param(dict(circular=True), r"circular: stored False, asked for True", id="circular"),
]


@pytest.mark.parametrize("changes, match", MISMATCHES)
def test_reopen_with_different_schema_or_capacity_is_refused(folder, changes, match):
    files = files_of(folder)
    with raises(SchemaMismatchError, match=match) as info:
        make(folder, **changes)
    message = str(info.value)
    assert "was created with a different config" in message and str(folder) in message
    assert "ReplayBuffer.from_folder(folder)" in message and "overwrite=True" in message
    assert files_of(folder) == files
    with ReplayBuffer.from_folder(folder) as buf:  # the lock was released, the data is intact
        episodes, _ = committed(buf)
        assert_episode(episodes[0], 0, range(3))
        assert_episode(episodes[1], 1, range(4))
        assert_unchanged(buf, committed(buf))

def test_reopen_lists_every_difference(folder):
    with raises(SchemaMismatchError, match=r"(?s)field 'obs'.*max_episodes: stored 6, asked for 7.*circular: stored "
                                           r"False, asked for True"):
        make(folder, fields={**FIELDS, "obs": ("float", (4,))}, max_episodes=7, circular=True)


# ---- paths that are not store folders ----------------------------------------------------------------


@pytest.mark.parametrize("opener", [
    pytest.param(lambda path: make(path), id="create"),
    pytest.param(lambda path: make(path, overwrite=True), id="overwrite"),
    pytest.param(lambda path: ReplayBuffer.from_folder(path), id="from_folder"),
    pytest.param(lambda path: ReplayBuffer.from_folder(path, read_only=True), id="from_folder-read_only"),
    pytest.param(lambda path: EpisodeStore.open(path, "r"), id="EpisodeStore.open"),
])
def test_path_that_is_a_file(tmp_path, opener):
    path = tmp_path / "a_file"
    path.write_bytes(b"precious")
    with raises(NotAFolderError, match=r"a_file must be a folder \(got a file\); choose another path"):
        opener(path)
    assert path.read_bytes() == b"precious"


def test_path_under_a_file(tmp_path):
    (tmp_path / "a_file").write_bytes(b"precious")
    with raises(NotAFolderError, match=r"a_file"):
        make(tmp_path / "a_file" / "store")


@pytest.mark.parametrize("opener", [
    pytest.param(lambda path: ReplayBuffer.from_folder(path), id="from_folder"),
    pytest.param(lambda path: ReplayBuffer.from_folder(path, read_only=True), id="from_folder-read_only"),
    pytest.param(lambda path: ReplayBuffer(path, read_only=True), id="constructor-read_only"),
])
def test_from_folder_that_does_not_exist(tmp_path, opener):
    path = tmp_path / "nowhere"
    with raises(StoreNotFoundError, match=r"no store at .*nowhere: the folder does not exist; check the path, or "
                                          r"create a store there with ReplayBuffer\(folder, max_episodes, "):
        opener(path)
    assert not path.exists()  # not created as a side effect

def test_from_folder_on_an_empty_folder(tmp_path):
    with raises(StoreNotFoundError, match=r"holds no meta\.json"):
        ReplayBuffer.from_folder(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_missing_meta_json_is_not_a_store(folder):
    (folder / "meta.json").unlink()
    files = files_of(folder)
    for read_only in (True, False):
        with raises(StoreNotFoundError, match=r"no store at .*holds no meta\.json.* create a new store there with "
                                              r"ReplayBuffer\(folder, .*overwrite=True\)"):
            ReplayBuffer.from_folder(folder, read_only=read_only)
    assert files_of(folder) == files


def test_episode_store_open_with_unknown_mode(folder):
    with raises(OptionError, match=r"mode must be one of"):
        EpisodeStore.open(folder, "x")


# ---- removed and trimmed episodes (edits in place) ---------------------------------------------------------


def test_a_store_whose_newest_episode_was_trimmed_or_removed_opens(tmp_path):
    """Rows after the newest live episode (its tail trimmed, or it removed) are no damage: the store opens."""
    import numpy as np

    with ReplayBuffer(tmp_path / "flat", 6, 10, dict(x="float")) as buffer:
        for n in range(4):
            buffer.store_episode(x=np.full(4, float(n)))
        buffer.trim(3, stop=1)
        buffer.delete_episodes([2])
    with ReplayBuffer.from_folder(tmp_path / "flat", read_only=True) as reader:
        assert reader.episode_ids.tolist() == [0, 1, 3] and reader.episode_lens[:4].tolist() == [4, 4, 0, 1]
    with ReplayBuffer(tmp_path / "ring", 3, 4, dict(x="float"), max_steps=12, circular=True) as ring:
        for n in range(4):  # the newest (3) starts over at row 0 after 2 at rows 8..11
            ring.store_episode(x=np.full(4, float(n)))
        ring.delete_episodes([3])
    with ReplayBuffer.from_folder(tmp_path / "ring", read_only=True) as reader:
        assert reader.episode_ids.tolist() == [1, 2] and reader.num_episodes == 2


def test_a_table_with_fewer_removed_episodes_than_meta_json_counts_is_refused(tmp_path):
    import json

    import numpy as np

    with ReplayBuffer(tmp_path / "store", 6, 10, dict(x="float")) as buffer:
        for n in range(4):
            buffer.store_episode(x=np.full(4, float(n)))
        buffer.delete_episodes([1])
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    meta["state"]["removed"] = 2
    (tmp_path / "store" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptStoreError, match=r"episodes/end\.npy marks 1 of the episodes 0\.\.3 removed \(end code "
                                                r"255\), but meta\.json's state\.removed counts 2"):
        ReplayBuffer.from_folder(tmp_path / "store", read_only=True)
