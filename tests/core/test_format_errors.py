"""The error catalogue for ``core/format.py``, the on-disk format: damaged stores (``meta.json``, missing,
truncated or mismatched ``.npy`` files, an episode table that disagrees with ``meta.json``) are refused and
left as they were; newer minor versions and unknown keys open.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import CorruptStoreError, ReplayBuffer, UnsupportedFormatError

from catalogue import (ERRORS_MAX_EPISODES as MAX_EPISODES, make_errors_store as make, raises, committed,
                       assert_episode, assert_unchanged, files_of)


# ---- damaged stores ----------------------------------------------------------------------------------


def edit_meta(change):
    def mutate(folder):
        path = folder / "meta.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return mutate


def write_meta_text(text):
    def mutate(folder):
        (folder / "meta.json").write_text(text)
    return mutate


def truncate(name, size):
    def mutate(folder):
        path = folder / name
        os.truncate(path, size if size >= 0 else path.stat().st_size + size)
    return mutate


def remove(name):
    def mutate(folder):
        (folder / name).unlink()
    return mutate


def rows_of(folder):
    return json.loads((folder / "meta.json").read_text())["state"]["rows"]


def replace_npy(name, make_array, **save):
    def mutate(folder):
        np.save(folder / name, make_array(rows_of(folder)), **save)
    return mutate


def poke(name, slot, value):
    def mutate(folder):
        array = np.load(folder / name, mmap_mode="r+")
        array[slot] = value
        array.flush()
        del array
    return mutate


def garbage(name):
    def mutate(folder):
        (folder / name).write_bytes(b"garbage" * 20)
    return mutate


def set_counter(section, key, value):
    return edit_meta(lambda data: data[section].__setitem__(key, value))


CORRUPTIONS = [
    # meta.json
    pytest.param(write_meta_text("{not json"), CorruptStoreError, r"meta\.json is not valid JSON", id="meta-not-json"),
    pytest.param(write_meta_text(""), CorruptStoreError, r"meta\.json is not valid JSON", id="meta-empty"),
    pytest.param(write_meta_text("[1, 2]"), UnsupportedFormatError,
                 r"must declare format 'memmap_replay' \(got 'list'\)", id="meta-json-list"),
    pytest.param(edit_meta(lambda d: d.update(format="zarr")), UnsupportedFormatError,
                 r"must declare format 'memmap_replay' \(got 'zarr'\)", id="wrong-format"),
    pytest.param(edit_meta(lambda d: d.update(version="4.0")), UnsupportedFormatError,
                 r"format version '4\.0'.*major versions 1, 2 and 3 only; upgrade memmap_replay", id="version-4.0"),
    pytest.param(edit_meta(lambda d: d.pop("version")), UnsupportedFormatError, r"format version ''",
                 id="version-missing"),
    pytest.param(edit_meta(lambda d: d.pop("schema")), CorruptStoreError,
                 r"meta\.json is missing or has malformed entries", id="schema-missing"),
    pytest.param(edit_meta(lambda d: d["schema"].update(fields=[])), CorruptStoreError, r"malformed entries",
                 id="fields-not-object"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(dtype="object")), CorruptStoreError,
                 r"malformed entries.*'obs'.*object", id="field-dtype-object"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(shape="3")), CorruptStoreError,
                 r"malformed entries.*'obs'", id="field-shape-string"),
    pytest.param(edit_meta(lambda d: d.update(capacity="big")), CorruptStoreError, r"malformed entries",
                 id="capacity-not-object"),
    pytest.param(edit_meta(lambda d: d["state"].pop("rows")), CorruptStoreError, r"malformed entries.*'rows'",
                 id="state-key-missing"),
    pytest.param(edit_meta(lambda d: d.pop("store_id")), CorruptStoreError, r"malformed entries.*'store_id'",
                 id="store_id-missing"),
    pytest.param(set_counter("capacity", "max_episodes", "6"), CorruptStoreError, r"must hold non-negative integers",
                 id="max_episodes-string"),
    pytest.param(set_counter("capacity", "circular", "no"), CorruptStoreError, r"must hold non-negative integers",
                 id="circular-string"),
    pytest.param(set_counter("state", "commits", 2.0), CorruptStoreError, r"must hold non-negative integers",
                 id="commits-float"),
    pytest.param(set_counter("state", "commits", True), CorruptStoreError, r"must hold non-negative integers",
                 id="commits-bool"),
    pytest.param(set_counter("state", "write_head", -1), CorruptStoreError, r"must hold non-negative integers",
                 id="negative-write_head"),
    pytest.param(set_counter("state", "first_episode", -1), CorruptStoreError, r"must hold non-negative integers",
                 id="negative-first_episode"),
    pytest.param(set_counter("state", "first_episode", 5), CorruptStoreError, r"inconsistent counters",
                 id="first-after-next"),
    pytest.param(set_counter("state", "next_episode", 100), CorruptStoreError, r"inconsistent counters",
                 id="more-live-than-slots"),
    pytest.param(set_counter("state", "write_head", 10**6), CorruptStoreError, r"inconsistent counters",
                 id="write_head-beyond-max_steps"),
    pytest.param(set_counter("state", "rows", 10**6), CorruptStoreError, r"steps/\w+\.npy is truncated",
                 id="rows-beyond-files"),
    pytest.param(edit_meta(lambda d: d["state"].update(first_episode=2**70 - 1, next_episode=2**70)), CorruptStoreError,
                 r"meta\.json", id="huge-counters"),
    # missing and truncated .npy files
    pytest.param(remove("steps/obs.npy"), CorruptStoreError, r"steps/obs\.npy is missing", id="missing-step-npy"),
    pytest.param(remove("meta/task.npy"), CorruptStoreError, r"meta/task\.npy is missing", id="missing-meta-npy"),
    pytest.param(remove("episodes/start.npy"), CorruptStoreError, r"episodes/start\.npy is missing",
                 id="missing-episodes-npy"),
    pytest.param(truncate("steps/image.npy", -1), CorruptStoreError, r"steps/image\.npy is truncated",
                 id="step-npy-short-by-1"),
    pytest.param(truncate("steps/obs.npy", 100), CorruptStoreError, r"steps/obs\.npy is not a readable \.npy file",
                 id="step-npy-cut-in-header"),
    pytest.param(truncate("steps/obs.npy", 0), CorruptStoreError, r"steps/obs\.npy is not a readable \.npy file",
                 id="step-npy-empty"),
    pytest.param(truncate("meta/weight.npy", -1), CorruptStoreError, r"meta/weight\.npy is truncated",
                 id="meta-npy-short"),
    pytest.param(truncate("episodes/length.npy", -1), CorruptStoreError, r"episodes/length\.npy is truncated",
                 id="episodes-npy-short"),
    # .npy headers that disagree with meta.json
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 3), np.float64)), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows of shape \(3,\) as meta\.json says \(got "
                 r"float64 of shape \(3,\)\)", id="npy-dtype-differs"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 4), np.float32)), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows of shape \(3,\) .*\(got float32 of shape \(4,\)\)",
                 id="npy-shape-differs"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((2, 3), np.float32)), CorruptStoreError,
                 r"steps/obs\.npy is truncated: it must hold at least \d+ rows .*\(got 2 rows", id="npy-fewer-rows"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 3), ">f4")), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows", id="npy-big-endian"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.asfortranarray(np.zeros((rows, 3), np.float32))),
                 CorruptStoreError, r"steps/obs\.npy must be in C order", id="npy-fortran-order"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.array([None] * rows, dtype=object), allow_pickle=True),
                 CorruptStoreError, r"steps/obs\.npy must hold float32 rows .*\(got object", id="npy-pickled-objects"),
    pytest.param(replace_npy("meta/task.npy", lambda rows: np.zeros(MAX_EPISODES, np.int64)), CorruptStoreError,
                 r"meta/task\.npy must hold int32 rows", id="meta-npy-dtype-differs"),
    pytest.param(garbage("steps/reward.npy"), CorruptStoreError, r"steps/reward\.npy is not a readable \.npy file",
                 id="npy-garbage"),
    # episode table that disagrees with meta.json
    pytest.param(poke("episodes/id.npy", 0, 7), CorruptStoreError, r"episodes/id\.npy does not match meta\.json's live "
                                                                   r"episodes 0\.\.1", id="episode-id-mismatch"),
    pytest.param(poke("episodes/length.npy", 1, 10**6), CorruptStoreError,
                 r"the episode table points outside the \d+ stored rows", id="episode-length-too-long"),
    pytest.param(poke("episodes/length.npy", 0, 0), CorruptStoreError, r"the episode table points outside",
                 id="episode-length-zero"),
    pytest.param(poke("episodes/start.npy", 0, -5), CorruptStoreError, r"the episode table points outside",
                 id="episode-start-negative"),
]

OPENERS = {
    "read_only": lambda folder: ReplayBuffer.from_folder(folder, read_only=True),
    "writable": lambda folder: ReplayBuffer.from_folder(folder),
    "with-schema": lambda folder: make(folder),  # mode 'a': must never wipe a damaged store
}


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
@pytest.mark.parametrize("mutate, error, match", CORRUPTIONS)
def test_damaged_store_is_refused_and_left_as_it_was(folder, opener, mutate, error, match):
    mutate(folder)
    files = files_of(folder)
    for _ in range(2):  # the second try gets the same error: the writer lock was released
        with raises(error, match=match):
            opener(folder).close()
    assert files_of(folder) == files


CAPACITY_NOT_VALID = [
    pytest.param(set_counter("capacity", "max_timesteps", 0), id="max_timesteps-zero"),
    pytest.param(edit_meta(lambda d: (d["capacity"].update(max_episodes=0), d["state"].update(first_episode=2))),
                 id="max_episodes-zero"),
    pytest.param(set_counter("capacity", "max_steps", 8), id="max_steps-below-max_timesteps"),
]


@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
@pytest.mark.parametrize("mutate", CAPACITY_NOT_VALID)
def test_meta_json_with_a_capacity_that_cannot_be_is_refused(folder, read_only, mutate):
    mutate(folder)
    files = files_of(folder)
    with raises(CorruptStoreError, match=r"meta\.json .*(capacity|max_)"):
        ReplayBuffer.from_folder(folder, read_only=read_only).close()
    assert files_of(folder) == files
    # opened for writing with a schema, the damaged meta.json is refused the same way (and never wiped)
    with raises(CorruptStoreError, match=r"meta\.json .*(capacity|max_)"):
        make(folder)
    assert files_of(folder) == files


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd")
def test_failed_open_leaks_no_file_descriptors(folder):
    poke("episodes/id.npy", 0, 7)(folder)
    gc.collect()
    fds = len(os.listdir("/proc/self/fd"))
    for read_only in (False, True):
        with raises(CorruptStoreError, match=r"episodes/id\.npy does not match"):
            ReplayBuffer.from_folder(folder, read_only=read_only)
    gc.collect()  # the half-opened store is only reachable from the exception's traceback
    assert len(os.listdir("/proc/self/fd")) == fds


COMPATIBLE = [
    pytest.param(edit_meta(lambda d: d.update(version="1.7")), id="minor-version-1.7"),
    pytest.param(edit_meta(lambda d: d.update(version="1.7", comment="hi", provenance={"lab": "x"})),
                 id="unknown-top-level-keys"),
    pytest.param(edit_meta(lambda d: d["capacity"].update(compression=None)), id="unknown-capacity-key"),
    pytest.param(edit_meta(lambda d: d["state"].update(checksum="abc")), id="unknown-state-key"),
    pytest.param(edit_meta(lambda d: d["schema"].update(units={"obs": "m"})), id="unknown-schema-key"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(unit="m")), id="unknown-field-spec-key"),
]


@pytest.mark.parametrize("mutate", COMPATIBLE)
@pytest.mark.parametrize("read_only", [True, False], ids=["read_only", "writable"])
def test_newer_minor_version_and_unknown_keys_open(folder, mutate, read_only):
    mutate(folder)
    with ReplayBuffer.from_folder(folder, read_only=read_only) as buf:
        episodes, _ = committed(buf)
        assert_episode(episodes[0], 0, range(3))
        assert_episode(episodes[1], 1, range(4))
        if not read_only:
            assert_unchanged(buf, committed(buf))
