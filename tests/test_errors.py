"""Bad input gets the library's error with a clear message, and leaves the store exactly as it was.

Every expected error is checked for its exact class, the library base class ``ReplayError`` and the
matching builtin (see ``raises``). After every failed write the committed episodes (data, lengths, end
codes) and the bytes of ``meta.json`` are compared with what they were before, and the store must still
accept a good episode; after every failed open every file of the folder is compared byte for byte.
"""

from __future__ import annotations

import gc
import json
import keyword
import math
import os
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memmap_replay
from memmap_replay import (BufferFullError, CorruptStoreError, EpisodeStateError, EpisodeStore, InvalidDataError,
                           NotAFolderError, ReadOnlyError, ReplayBuffer, ReplayError, Schema, SchemaError,
                           SchemaMismatchError, StoreLockedError, StoreNotFoundError, UnsupportedFormatError, SampleExpiredError,
                           DiskFullError, MissingExtraError, RateLimitedError,
                           ShardUnavailableError)
from memmap_replay import errors as errors_module
from memmap_replay.errors import IndexTypeError, MissingFileError, OptionError, StoreIOError, UnsafeEntryError

# ---- the store every test starts from ---------------------------------------------------------------

FIELDS = dict(
    obs=("float", (3,)),
    action=("int", 2),
    reward="float",
    image=("uint8", (3, 64, 64)),
    done="bool",
    count="int64",
    small="int32",
)
META = dict(task="int", weight="float")
MAX_EPISODES, MAX_TIMESTEPS = 6, 10

# each error and the builtin it must also be
BUILTIN = {
    SchemaError: ValueError,
    SchemaMismatchError: ValueError,
    InvalidDataError: ValueError,
    OptionError: ValueError,
    IndexTypeError: TypeError,
    BufferFullError: ValueError,
    EpisodeStateError: RuntimeError,
    ReadOnlyError: PermissionError,
    StoreNotFoundError: FileNotFoundError,
    NotAFolderError: NotADirectoryError,
    StoreLockedError: BlockingIOError,
    CorruptStoreError: OSError,
    UnsupportedFormatError: ValueError,
    SampleExpiredError: LookupError,
    DiskFullError: OSError,
    MissingExtraError: ImportError,
    RateLimitedError: TimeoutError,
    ShardUnavailableError: TimeoutError,
    UnsafeEntryError: OSError,
    MissingFileError: FileNotFoundError,
    StoreIOError: OSError,
}


@contextmanager
def raises(error, match):
    """``pytest.raises`` that also checks the exact class, ReplayError and the matching builtin."""
    with pytest.raises(error, match=match) as info:
        yield info
    assert type(info.value) is error, f"expected exactly {error.__name__}, got {type(info.value).__name__}"
    assert isinstance(info.value, ReplayError)
    assert isinstance(info.value, BUILTIN[error])


def good_step(e: int, t: int) -> dict:
    """Step t of episode e: every value encodes (e, t); Python scalars for scalar fields (the fast path)."""
    return dict(
        obs=np.array([e, t, e + t], dtype=np.float32),
        action=np.array([e, -t], dtype=np.int32),
        reward=float(10 * e + t),
        image=np.full((3, 64, 64), (16 * e + t) % 256, dtype=np.uint8),
        done=t % 2 == 0,
        count=1000 * e + t,
        small=-(100 * e + t),
    )


def good_steps(e: int, ts) -> dict:
    steps = [good_step(e, t) for t in ts]
    return {name: np.stack([np.asarray(step[name]) for step in steps]) for name in FIELDS}


def good_episode(e: int, length: int) -> dict:
    """A whole episode for store_episode: (T, ...) arrays and its meta values."""
    return dict(good_steps(e, range(length)), task=e, weight=e / 4)


def good_batch(es, t: int) -> dict:
    """Step t of episodes es, stacked along a leading batch axis (store_batch / vector writer)."""
    steps = [good_step(e, t) for e in es]
    return {name: np.stack([np.asarray(step[name]) for step in steps]) for name in FIELDS}


def make(folder, **kwargs) -> ReplayBuffer:
    options = dict(max_episodes=MAX_EPISODES, max_timesteps=MAX_TIMESTEPS, fields=FIELDS, meta_fields=META)
    options.update(kwargs)
    return ReplayBuffer(folder, **options)


@pytest.fixture
def buffer(tmp_path):
    """A writable store holding episode 0 (3 steps) and episode 1 (4 steps, terminated)."""
    buf = make(tmp_path / "store")
    buf.store_episode(**good_episode(0, 3))
    buf.store_episode(**good_episode(1, 4), end="terminated")
    yield buf
    buf.close()


@pytest.fixture
def folder(tmp_path):
    """The folder of a closed store holding episodes 0 (3 steps) and 1 (4 steps)."""
    with make(tmp_path / "store") as buf:
        buf.store_episode(**good_episode(0, 3))
        buf.store_episode(**good_episode(1, 4), end="terminated")
    return tmp_path / "store"


# ---- reading back what is committed ------------------------------------------------------------------


def committed(buffer):
    """The committed episodes oldest first (numpy copies, trimmed to their length), and meta.json's bytes."""
    table = buffer.episode_store.live_table()
    data = buffer.get_all_data()
    episodes = []
    for i, length in enumerate(table.length.tolist()):
        episode = {"length": length, "end": int(table.end[i]), "final": bool(table.final[i])}
        for name in buffer.fieldnames:
            episode[name] = data[name][i, :length].numpy().copy()
        for name in buffer.meta_fieldnames:
            episode[name] = data[name][i].numpy().copy()
        episodes.append(episode)
    return episodes, (buffer.folder / "meta.json").read_bytes()


def assert_same(before, after):
    (episodes_a, meta_a), (episodes_b, meta_b) = before, after
    assert len(episodes_a) == len(episodes_b)
    for a, b in zip(episodes_a, episodes_b):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert meta_a == meta_b, "meta.json changed"


def assert_episode(episode, e: int, ts):
    """A committed episode holds exactly the good steps ts of episode e."""
    expected = good_steps(e, ts)
    assert episode["length"] == len(ts)
    for name in FIELDS:
        np.testing.assert_array_equal(episode[name], expected[name].astype(episode[name].dtype), err_msg=name)


def assert_unchanged(buffer, before):
    """Nothing committed changed, and the store still takes (and returns) a good episode."""
    assert_same(before, committed(buffer))
    count = buffer.num_episodes
    buffer.store_episode(**good_episode(7, 2))
    assert buffer.num_episodes == count + 1
    last = committed(buffer)[0][-1]
    assert_episode(last, 7, range(2))
    assert last["task"] == 7 and last["weight"] == 7 / 4


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file of a store folder (but the lock file), byte for byte."""
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != "writer.lock"}

def test_fixture_store_holds_what_was_written(buffer):
    episodes, _ = committed(buffer)
    assert [episode["length"] for episode in episodes] == [3, 4]
    assert_episode(episodes[0], 0, range(3))
    assert_episode(episodes[1], 1, range(4))
    assert [episode["end"] for episode in episodes] == [0, 1]


# ---- the hierarchy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("error, builtin", BUILTIN.items(), ids=[error.__name__ for error in BUILTIN])
def test_each_error_is_a_replay_error_and_its_builtin(error, builtin):
    assert issubclass(error, ReplayError)
    assert issubclass(error, builtin)
    assert issubclass(ReplayError, Exception) and not issubclass(ReplayError, (ValueError, OSError))

def test_schema_mismatch_is_a_schema_error():
    assert issubclass(SchemaMismatchError, SchemaError)


def test_option_error_is_an_invalid_data_error_and_not_a_schema_error():
    # code that caught InvalidDataError for a bad option before OptionError existed still catches it
    assert issubclass(OptionError, InvalidDataError) and not issubclass(OptionError, SchemaError)
    assert issubclass(IndexTypeError, OptionError) and issubclass(IndexTypeError, TypeError)


@pytest.mark.parametrize("item", [True, np.True_, 0.0, "0", None], ids=repr)
def test_every_view_kind_refuses_an_index_that_is_not_an_int_alike(buffer, item):
    # one check for a store's views and a ConcatView of shards (they had drifted: ConcatView[True] was item 1)
    from memmap_replay.distributed.shards import ConcatView
    view = buffer.dataset(timestep_level=True)
    for indexed in (view, ConcatView([view, view])):
        with raises(IndexTypeError, match=rf"^a view is indexed by an int \(got {type(item).__name__}\); use "
                                          rf"__getitems__ for a batch"):
            indexed[item]
    assert ConcatView([view, view])[-1]["reward"] == view[-1]["reward"]


@pytest.mark.parametrize("name", errors_module.__all__)
def test_every_error_is_exported_and_documented(name):
    error = getattr(errors_module, name)
    assert getattr(memmap_replay, name) is error
    assert name in memmap_replay.__all__
    assert error.__doc__ and error.__doc__.strip()
    assert error is ReplayError or error in BUILTIN


# ---- unknown fields ----------------------------------------------------------------------------------


def in_one_episode(b, action):
    with b.one_episode():
        b.store(**good_step(5, 0))
        action()


def in_batched_episode(b, action):
    with b.batched_episode(2):
        b.store_batch(**good_batch([5, 6], 0))
        action()


UNKNOWN_FIELD_WRITES = {
    "store": lambda b: in_one_episode(b, lambda: b.store(**good_step(5, 1), bogus=1.0)),
    "store-unknown-first": lambda b: in_one_episode(b, lambda: b.store(bogus=1.0, **good_step(5, 1))),
    "store_episode": lambda b: b.store_episode(**good_steps(5, range(2)), bogus=np.zeros(2)),
    "store_batch": lambda b: in_batched_episode(b, lambda: b.store_batch(**good_batch([5, 6], 1), bogus=np.zeros(2))),
    "vector_writer.store": lambda b: b.vector_writer(2).store(**good_batch([5, 6], 0), bogus=np.zeros(2),
                                                              truncated=[True, True]),
    "update": lambda b: b.update([0, 1], bogus=1.0),
    "set_end-final": lambda b: in_one_episode(b, lambda: b.set_episode_end("truncated", final=dict(bogus=1.0))),
    "vector-final": lambda b: b.vector_writer(2).store(**good_batch([5, 6], 0), final=dict(bogus=np.zeros(2)),
                                                       truncated=[True, True]),
}


@pytest.mark.parametrize("write", UNKNOWN_FIELD_WRITES.values(), ids=UNKNOWN_FIELD_WRITES.keys())
def test_unknown_field_is_refused_and_named(buffer, write):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown (meta )?field.*'bogus'") as info:
        write(buffer)
    assert "obs" in str(info.value) or "task" in str(info.value)  # it lists what the store has
    assert_unchanged(buffer, before)


def set_episode_meta_inside(b):
    with b.one_episode() as episode:
        b.store(**good_step(5, 0))
        episode["bogus"] = 1


UNKNOWN_META_WRITES = {
    "one_episode": lambda b: b.one_episode(bogus=1).__enter__(),
    "begin_episode": lambda b: b.begin_episode(bogus=1),
    "store_episode": lambda b: b.store_episode(**good_episode(5, 2), bogus=1),
    "batched_episode": lambda b: b.batched_episode(2, bogus=1).__enter__(),
    "vector_writer": lambda b: b.vector_writer(2, bogus=1),
    "vector_writer.set_meta": lambda b: b.vector_writer(2).set_meta(bogus=1),
    "episode-dict": set_episode_meta_inside,
}


@pytest.mark.parametrize("write", UNKNOWN_META_WRITES.values(), ids=UNKNOWN_META_WRITES.keys())
def test_unknown_meta_field_is_refused_and_named(buffer, write):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown (meta )?field \['bogus'\]: the store's .*meta fields (are )?\['task', 'weight'\]"):
        write(buffer)
    # no episode was left open by the failed call
    with raises(EpisodeStateError, match=r"store\(\) needs an open episode"):
        buffer.store(**good_step(5, 0))
    assert_unchanged(buffer, before)

def test_update_unknown_name_lists_fields_and_meta_fields(buffer):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown field 'bogus': the store's fields are \[.*'obs'.*\] and meta fields \['task', 'weight'\]"):
        buffer.update(0, bogus=1)
    assert_unchanged(buffer, before)


def test_store_episode_typo_in_step_field_lists_the_step_fields(buffer):
    arrays = good_episode(5, 2)
    arrays["rewrd"] = arrays.pop("reward")
    before = committed(buffer)
    with raises(InvalidDataError, match=r"'rewrd'.*'reward'"):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("kwargs", [dict(fields=("bogus",)), dict(meta_fields=("bogus",))], ids=["field", "meta_field"])
def test_get_all_data_unknown_name(buffer, kwargs):
    with raises(OptionError, match=r"unknown (meta )?field 'bogus'"):
        buffer.get_all_data(**kwargs)


def test_get_all_data_unknown_name_on_empty_store(tmp_path):
    with make(tmp_path / "empty") as buf:
        with raises(OptionError, match=r"unknown field 'bogus'"):
            buf.get_all_data(fields=("bogus",))


# ---- values that do not fit their field: every write path --------------------------------------------


def stack(value, k: int):
    """k copies of one row along a new leading axis (tensors stay tensors, anything else becomes a list)."""
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0).expand(k, *value.shape)
    return [value] * k


def write_store(b, field, value):
    with b.one_episode():
        b.store(**good_step(5, 0))
        b.store(**{**good_step(5, 1), field: value})


def write_store_episode(b, field, value):
    b.store_episode(**{**good_episode(5, 2), field: stack(value, 2)})


def write_store_batch(b, field, value):
    with b.batched_episode(2):
        b.store_batch(**good_batch([5, 6], 0))
        b.store_batch(**{**good_batch([5, 6], 1), field: stack(value, 2)})


def write_vector(b, field, value):
    writer = b.vector_writer(2)
    writer.store(**good_batch([5, 6], 0))
    writer.store(**{**good_batch([5, 6], 1), field: stack(value, 2)}, truncated=[True, True])


def write_update(b, field, value):
    b.update([0, 1], **{field: value})  # one row for every step of both episodes


def write_final(b, field, value):
    with b.one_episode() as episode:
        b.store(**good_step(5, 0))
        episode.set_end("truncated", final={**good_step(5, 1), field: value})


STEP_WRITES = {"store": write_store, "store_episode": write_store_episode, "store_batch": write_store_batch,
               "vector_writer": write_vector, "update": write_update, "final": write_final}


SHAPE_CASES = [
    pytest.param("image", np.zeros((64, 64, 3), np.uint8), "3, 64, 64", "64, 64, 3", id="image-HWC-for-CHW"),
    pytest.param("image", np.zeros((3, 64), np.uint8), "3, 64, 64", "3, 64", id="image-missing-axis"),
    pytest.param("obs", np.zeros(4, np.float32), "3", "4", id="obs-too-long"),
    pytest.param("obs", np.zeros((3, 2), np.float32), "3", "3, 2", id="obs-extra-axis"),
    pytest.param("action", np.zeros(3, np.int32), "2", "3", id="action-too-long"),
]


@pytest.mark.parametrize("write", STEP_WRITES.values(), ids=STEP_WRITES.keys())
@pytest.mark.parametrize("field, value, expected, got", SHAPE_CASES)
def test_wrong_shape_names_field_expected_and_got(buffer, write, field, value, expected, got):
    before = committed(buffer)
    pattern = rf"'{field}'.*must have shape \(.*{re.escape(expected)},?\).*\(got \(.*{re.escape(got)},?\)\)"
    with raises(InvalidDataError, match=pattern):
        write(buffer, field, value)
    assert_unchanged(buffer, before)


BAD_VALUES = [
    # lossy casts
    pytest.param("count", 2.5, r"'count' has dtype int64 and cannot hold 2\.5 without losing its fraction", id="2.5-into-int"),
    pytest.param("small", np.float32(-1.5), r"'small' has dtype int32 and cannot hold -1\.5", id="np.float32-fraction-into-int"),
    pytest.param("action", np.array([1.0, 2.5]), r"'action' has dtype int32 and cannot hold 2\.5", id="float-array-with-fraction-into-int"),
    pytest.param("image", np.full((3, 64, 64), 0.9), r"'image' has dtype uint8 and cannot hold 0\.9", id="0.9-into-uint8-image"),
    pytest.param("small", torch.tensor(1.5), r"'small' has dtype int32 and cannot hold 1\.5", id="float-tensor-fraction-into-int"),
    pytest.param("reward", 1 + 2j, r"'reward' has dtype float32 and cannot hold complex", id="complex-into-float"),
    pytest.param("small", 3j, r"'small' has dtype int32 and cannot hold complex", id="complex-into-int"),
    pytest.param("reward", 16777217, r"'reward' has dtype float32", id="int-that-float32-rounds"),
    # out of range
    pytest.param("image", np.full((3, 64, 64), 300), r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)", id="300-into-uint8"),
    pytest.param("image", np.full((3, 64, 64), -1), r"'image' has dtype uint8 whose range is \[0, 255\] \(got -1\)", id="-1-into-uint8"),
    pytest.param("image", torch.full((3, 64, 64), 300), r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)", id="300-tensor-into-uint8"),
    pytest.param("small", 2**40, r"'small' has dtype int32 whose range is \[-2147483648, 2147483647\] \(got 1099511627776\)", id="2**40-into-int32"),
    pytest.param("small", np.uint64(2**63), r"'small' has dtype int32 whose range", id="uint64-into-int32"),
    pytest.param("count", 2**70, r"'count' must hold numbers .*too large for int64", id="2**70-into-int64"),
    pytest.param("reward", 1e39, r"'reward' has dtype float32 and 1e\+39 overflows it", id="1e39-into-float32"),
    pytest.param("obs", np.array([0.0, -1e39, 0.0]), r"'obs' has dtype float32 and -1e\+39 overflows it", id="array-overflows-float32"),
    pytest.param("done", 2, r"'done' has dtype bool and holds only 0/1 or False/True \(got 2\)", id="2-into-bool"),
    pytest.param("done", 0.5, r"'done' has dtype bool and holds only 0/1 or False/True \(got 0\.5\)", id="0.5-into-bool"),
    pytest.param("count", 2.0**63, r"'count' has dtype int64 whose range", id="2.0**63-into-int64"),
    pytest.param("small", np.float32(2**31), r"'small' has dtype int32 whose range", id="float32-2**31-into-int32"),
    # NaN and inf
    pytest.param("count", float("nan"), r"'count' has dtype int64 and cannot hold nan", id="nan-into-int"),
    pytest.param("count", float("inf"), r"'count' has dtype int64 and cannot hold inf", id="inf-into-int"),
    pytest.param("action", np.array([1.0, -np.inf]), r"'action' has dtype int32 and cannot hold -inf", id="-inf-array-into-int"),
    pytest.param("image", np.full((3, 64, 64), np.nan), r"'image' has dtype uint8 and cannot hold nan", id="nan-into-uint8"),
    pytest.param("done", float("nan"), r"'done' has dtype bool and holds only 0/1", id="nan-into-bool"),
    # strings, objects, None, tensors numpy cannot hold
    pytest.param("reward", "abc", r"'reward' must hold numbers \(got \w+ of dtype <U3: only numbers, bools and arrays", id="str"),
    pytest.param("reward", b"x", r"'reward' must hold numbers", id="bytes"),
    pytest.param("reward", None, r"'reward' must hold numbers", id="None"),
    pytest.param("action", {"a": 1}, r"'action' must hold numbers", id="dict"),
    pytest.param("action", object(), r"'action' must hold numbers", id="object"),
    pytest.param("obs", [1, "a", 2], r"'obs' must hold numbers", id="list-with-str"),
    pytest.param("obs", torch.zeros(3, dtype=torch.bfloat16),
                 r"'obs' must be convertible to numpy \(got a torch\.bfloat16 tensor.*convert it with \.float\(\) first",
                 id="bfloat16-tensor"),
]


@pytest.mark.parametrize("write", STEP_WRITES.values(), ids=STEP_WRITES.keys())
@pytest.mark.parametrize("field, value, match", BAD_VALUES)
def test_bad_value_is_refused_and_store_unchanged(buffer, write, field, value, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        write(buffer, field, value)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("field, value, match", [
    pytest.param("count", 2.5, r"'count' has dtype int64 and cannot hold 2\.5", id="2.5-into-int"),
    pytest.param("image", 0.9, r"'image' has dtype uint8 and cannot hold 0\.9", id="0.9-scalar-into-image"),
    pytest.param("image", 300, r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)", id="300-scalar-into-image"),
    pytest.param("obs", float("nan"), None, id="nan-into-float-is-fine"),
])
def test_scalar_broadcast_to_a_row_is_checked(buffer, field, value, match):
    before = committed(buffer)
    if match is None:
        write_store(buffer, field, value)
        assert np.isnan(committed(buffer)[0][-1][field][1]).all()
        return
    with raises(InvalidDataError, match=match):
        write_store(buffer, field, value)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("value", [None, {"a": 1}, object()], ids=["None", "dict", "object"])
def test_object_value_message_does_not_blame_a_large_integer(buffer, value):
    with raises(InvalidDataError, match=r"'reward' must hold numbers") as info:
        write_store(buffer, "reward", value)
    assert "too large" not in str(info.value)


RAGGED = [[1, 2], [3]]


@pytest.mark.parametrize("write", [
    pytest.param(lambda b: write_store(b, "action", RAGGED), id="store"),
    pytest.param(lambda b: write_store_batch(b, "action", RAGGED), id="store_batch"),
    pytest.param(lambda b: b.store_episode(**{**good_episode(5, 2), "action": RAGGED}), id="store_episode-not-first"),
    pytest.param(lambda b: b.store_episode(**{**good_episode(5, 2), "obs": [[1, 2, 3], [3]]}), id="store_episode-first-field"),
    pytest.param(lambda b: b.update([0, 1], action=RAGGED), id="update-step-field"),
    pytest.param(lambda b: b.update([0, 1], task=RAGGED), id="update-meta-field"),
    pytest.param(lambda b: b.vector_writer(2).set_meta(task=RAGGED), id="vector-set_meta"),
])
def test_ragged_list_is_refused_with_the_library_error(buffer, write):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"'(action|obs|task)' must be an array of numbers"):
        write(buffer)
    assert_unchanged(buffer, before)


# ---- meta values that do not fit ---------------------------------------------------------------------

META_WRITES = {
    "one_episode": lambda b, meta: b.one_episode(**meta).__enter__(),
    "begin_episode": lambda b, meta: b.begin_episode(**meta),
    "store_episode": lambda b, meta: b.store_episode(**good_steps(5, range(2)), **meta),
    "batched_episode": lambda b, meta: b.batched_episode(2, **meta).__enter__(),
    "vector_writer": lambda b, meta: b.vector_writer(2, **meta),
    "update": lambda b, meta: b.update([0, 1], **meta),
}


@pytest.mark.parametrize("write", META_WRITES.values(), ids=META_WRITES.keys())
@pytest.mark.parametrize("meta, match", [
    pytest.param(dict(task=2.5), r"meta field 'task' has dtype int32 and cannot hold 2\.5", id="2.5-into-int"),
    pytest.param(dict(task=2**40), r"meta field 'task' has dtype int32 whose range", id="2**40-into-int32"),
    pytest.param(dict(task=float("nan")), r"meta field 'task' has dtype int32 and cannot hold nan", id="nan-into-int"),
    pytest.param(dict(task=None), r"meta field 'task' must hold numbers", id="None"),
    pytest.param(dict(weight="heavy"), r"meta field 'weight' must hold numbers", id="str"),
    pytest.param(dict(weight=1e39), r"meta field 'weight' has dtype float32 and 1e\+39 overflows", id="1e39-into-float32"),
    pytest.param(dict(weight=np.zeros((2, 3))), r"meta field 'weight' must have shape \(.*\) \(got \(2, 3\)\)", id="wrong-shape"),
])
def test_bad_meta_value_is_refused(buffer, write, meta, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        write(buffer, meta)
    with raises(EpisodeStateError, match=r"store\(\) needs an open episode"):
        buffer.store(**good_step(5, 0))
    assert_unchanged(buffer, before)

def test_bad_meta_value_set_inside_one_episode_discards_the_episode(buffer):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"meta field 'task' has dtype int32 and cannot hold 0\.5"):
        with buffer.one_episode() as episode:
            buffer.store(**good_step(5, 0))
            episode["task"] = 0.5
    assert_unchanged(buffer, before)


# ---- values that do fit exactly ----------------------------------------------------------------------

GOOD_VALUES = [
    pytest.param("count", 2.0, 2, id="2.0-into-int"),
    pytest.param("small", np.float64(-3.0), -3, id="np.float64-integral-into-int32"),
    pytest.param("action", [1.0, -2.0], [1, -2], id="integral-float-list-into-int"),
    pytest.param("done", 1, True, id="1-into-bool"),
    pytest.param("done", 0.0, False, id="0.0-into-bool"),
    pytest.param("done", np.int64(1), True, id="np.int64-1-into-bool"),
    pytest.param("obs", np.array([0.5, 1.25, -2.0]), [0.5, 1.25, -2.0], id="float64-array-into-float32"),
    pytest.param("reward", np.float64(0.1), np.float32(0.1), id="float64-0.1-rounds-into-float32"),
    pytest.param("reward", float("inf"), float("inf"), id="inf-into-float32"),
    pytest.param("reward", float("nan"), float("nan"), id="nan-into-float32"),
    pytest.param("reward", True, 1.0, id="True-into-float"),
    pytest.param("small", True, 1, id="True-into-int"),
    pytest.param("image", np.full((3, 64, 64), 255, np.int64), np.full((3, 64, 64), 255), id="int64-255-into-uint8"),
    pytest.param("image", np.full((3, 64, 64), 7.0), np.full((3, 64, 64), 7), id="float-7.0-into-uint8"),
    pytest.param("count", 2**62, 2**62, id="2**62-into-int64"),
    pytest.param("count", -2**63, -2**63, id="int64-min"),
    pytest.param("small", np.uint8(200), 200, id="np.uint8-into-int32"),
    pytest.param("obs", [1, 2, 3], [1.0, 2.0, 3.0], id="int-list-into-float"),
    pytest.param("obs", torch.tensor([1.0, 2.0, 3.0], requires_grad=True), [1.0, 2.0, 3.0], id="tensor-requires-grad"),
    pytest.param("obs", torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True), [1.0, 2.0, 3.0],
                 id="float64-tensor-requires-grad"),
    pytest.param("image", torch.full((3, 64, 64), 9, dtype=torch.uint8), np.full((3, 64, 64), 9), id="uint8-tensor"),
    pytest.param("small", torch.tensor(-7), -7, id="int64-tensor-into-int32"),
]

GOOD_WRITES = {k: v for k, v in STEP_WRITES.items() if k != "final"}


@pytest.mark.parametrize("write", GOOD_WRITES.values(), ids=GOOD_WRITES.keys())
@pytest.mark.parametrize("field, value, expected", GOOD_VALUES)
def test_exact_cast_is_stored_exactly(buffer, write, field, value, expected):
    write(buffer, field, value)
    expected = np.asarray(expected, dtype=buffer.schema.fields[field].dtype)
    episodes, _ = committed(buffer)
    if write is write_update:
        written = [episodes[0][field], episodes[1][field]]
    elif write is write_store_episode:
        written = [episodes[-1][field]]
    elif write is write_store:
        written = [episodes[-1][field][1:]]
    else:  # the batched writers: step 1 of the last two episodes
        written = [episodes[-2][field][1:], episodes[-1][field][1:]]
    for rows in written:
        np.testing.assert_array_equal(rows, np.broadcast_to(expected, rows.shape))


# ---- a failed step inside an open episode ------------------------------------------------------------

BAD_STEPS = [
    pytest.param(dict(bogus=1.0), id="unknown-field"),
    pytest.param(dict(image=np.zeros((64, 64, 3), np.uint8)), id="wrong-shape"),
    pytest.param(dict(count=2.5), id="lossy"),
    pytest.param(dict(image=np.full((3, 64, 64), 300)), id="out-of-range"),
    pytest.param(dict(small=float("nan")), id="nan-into-int"),
    pytest.param(dict(reward=None), id="None"),
    pytest.param(dict(obs=torch.zeros(3, dtype=torch.bfloat16)), id="bfloat16"),
]
BAD_STEP_MATCH = r"'(bogus|image|count|small|reward|obs)'"


def bad_step(t, bad):
    """Good values for every field first (so a partial write would show), the bad one last."""
    step = good_step(5, t)
    for name in bad:
        step.pop(name, None)
    step.update(bad)
    return step


@pytest.mark.parametrize("bad", BAD_STEPS)
@pytest.mark.parametrize("opener", ["one_episode", "begin_episode"])
def test_failed_step_is_not_stored_and_the_episode_continues(buffer, bad, opener):
    before = committed(buffer)

    def steps():
        buffer.store(**good_step(5, 0))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            buffer.store(**bad_step(1, bad))
        buffer.store(**good_step(5, 1))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            buffer.store(**bad_step(2, bad))  # the last call before the commit fails: no trace either

    if opener == "one_episode":
        with buffer.one_episode(task=5, weight=1.25):
            steps()
    else:
        buffer.begin_episode(task=5, weight=1.25)
        steps()
        buffer.end_episode()
    episodes, _ = committed(buffer)
    assert len(episodes) == 3
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert episodes[2]["task"] == 5 and episodes[2]["weight"] == 1.25


@pytest.mark.parametrize("bad", BAD_STEPS)
@pytest.mark.parametrize("writer", ["batched_episode", "vector_writer"])
def test_failed_batch_step_is_not_stored_and_the_episodes_continue(buffer, bad, writer):
    before = committed(buffer)

    def bad_batch(t):
        batch = good_batch([5, 6], t)
        for name, value in bad.items():
            batch.pop(name, None)
            batch[name] = stack(value, 2)
        return batch

    def steps(store):
        store(**good_batch([5, 6], 0))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            store(**bad_batch(1))
        store(**good_batch([5, 6], 1))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            store(**bad_batch(2), truncated=[True, True])

    if writer == "batched_episode":
        with buffer.batched_episode(2):
            steps(buffer.store_batch)
    else:
        vector = buffer.vector_writer(2)
        steps(vector.store)
        assert vector.lengths.tolist() == [2, 2]
        vector.commit_all()
    episodes, _ = committed(buffer)
    assert len(episodes) == 4
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert_episode(episodes[3], 6, range(2))

def test_step_that_leaves_out_fields_takes_their_defaults_after_a_failed_step(buffer):
    with buffer.one_episode():
        with raises(InvalidDataError, match=r"'count' has dtype int64 and cannot hold 2\.5"):
            buffer.store(**{**good_step(5, 0), "count": 2.5})  # every other field reached the staging row
        buffer.store(obs=np.ones(3), reward=1.0)
    last = committed(buffer)[0][-1]
    assert last["length"] == 1 and last["count"].tolist() == [0] and last["small"].tolist() == [0]
    assert last["image"].max() == 0 and last["obs"].tolist() == [[1.0, 1.0, 1.0]]


# ---- episode state -----------------------------------------------------------------------------------


def nested_one_episode(b):
    with b.one_episode():
        pass


STATE_ERRORS = {
    "store-outside-episode": (lambda b: b.store(**good_step(5, 0)), r"store\(\) needs an open episode.*one_episode"),
    "store_batch-outside-batched": (lambda b: b.store_batch(**good_batch([5, 6], 0)), r"store_batch\(\) needs an open `with buffer\.batched_episode"),
    "end_episode-without-episode": (lambda b: b.end_episode(), r"no episode is open: call begin_episode\(\) first"),
    "set_episode_end-without-episode": (lambda b: b.set_episode_end("terminated"), r"set_episode_end\(\) needs an open episode"),
}


@pytest.mark.parametrize("action, match", STATE_ERRORS.values(), ids=STATE_ERRORS.keys())
def test_call_outside_an_episode(buffer, action, match):
    before = committed(buffer)
    with raises(EpisodeStateError, match=match):
        action(buffer)
    assert_unchanged(buffer, before)

def test_store_after_one_episode_closed(buffer):
    with buffer.one_episode():
        buffer.store(**good_step(5, 0))
    before = committed(buffer)
    with raises(EpisodeStateError, match=r"store\(\) needs an open episode"):
        buffer.store(**good_step(5, 1))
    assert_unchanged(buffer, before)


INSIDE_EPISODE = {
    "nested-one_episode": nested_one_episode,
    "begin_episode": lambda b: b.begin_episode(),
    "store_episode": lambda b: b.store_episode(**good_episode(8, 2)),
    "batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "store_batch": lambda b: b.store_batch(**good_batch([5, 6], 0)),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("action", INSIDE_EPISODE.values(), ids=INSIDE_EPISODE.keys())
def test_call_inside_an_open_episode_is_refused_and_the_episode_continues(buffer, action):
    before = committed(buffer)
    with buffer.one_episode(task=5, weight=1.25):
        buffer.store(**good_step(5, 0))
        with raises(EpisodeStateError, match=r"(while an episode is open|needs an open `with buffer\.batched_episode)"):
            action(buffer)
        buffer.store(**good_step(5, 1))
    episodes, _ = committed(buffer)
    assert len(episodes) == 3
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))


INSIDE_BATCHED = {
    "one_episode": nested_one_episode,
    "begin_episode": lambda b: b.begin_episode(),
    "nested-batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "store_episode": lambda b: b.store_episode(**good_episode(8, 2)),
    "store": lambda b: b.store(**good_step(5, 0)),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("action", INSIDE_BATCHED.values(), ids=INSIDE_BATCHED.keys())
def test_call_inside_batched_episode_is_refused_and_the_batch_continues(buffer, action):
    before = committed(buffer)
    with buffer.batched_episode(2):
        buffer.store_batch(**good_batch([5, 6], 0))
        with raises(EpisodeStateError, match=r"(while an episode is open|store\(\) needs an open episode.*store_batch)"):
            action(buffer)
        buffer.store_batch(**good_batch([5, 6], 1))
    episodes, _ = committed(buffer)
    assert len(episodes) == 4
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert_episode(episodes[3], 6, range(2))

def test_exception_inside_one_episode_discards_it(buffer):
    before = committed(buffer)
    with pytest.raises(KeyboardInterrupt, match="stop"):
        with buffer.one_episode():
            buffer.store(**good_step(5, 0))
            raise KeyboardInterrupt("stop")
    assert_unchanged(buffer, before)


# ---- read-only and closed stores ---------------------------------------------------------------------

WRITE_PARAMS = [
    pytest.param(lambda b: b.store(**good_step(5, 0)), id="store"),
    pytest.param(lambda b: b.store_episode(**good_episode(5, 2)), id="store_episode"),
    pytest.param(lambda b: b.store_batch(**good_batch([5, 6], 0)), id="store_batch"),
    pytest.param(lambda b: b.begin_episode(), id="begin_episode"),
    pytest.param(nested_one_episode, id="one_episode"),
    pytest.param(lambda b: b.batched_episode(2).__enter__(), id="batched_episode"),
    pytest.param(lambda b: b.vector_writer(2), id="vector_writer"),
    pytest.param(lambda b: b.update(0, reward=1.0), id="update"),
    pytest.param(lambda b: b.update(0, task=3), id="update-meta"),
    pytest.param(lambda b: b.clear(), id="clear"),
    pytest.param(lambda b: b.advance_episode(), id="advance_episode"),
    pytest.param(lambda b: b.end_episode(), id="end_episode"),
]


@pytest.mark.parametrize("open_read_only", [
    pytest.param(lambda folder: ReplayBuffer.from_folder(folder, read_only=True), id="from_folder"),
    pytest.param(lambda folder: ReplayBuffer(folder, read_only=True), id="constructor"),
])
@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_every_write_to_a_read_only_buffer_raises_read_only_error(folder, open_read_only, write):
    files = files_of(folder)
    with open_read_only(folder) as reader:
        assert reader.read_only
        before = committed(reader)
        with raises(ReadOnlyError, match=r"is open read-only; open it with read_only=False"):
            write(reader)
        assert_same(before, committed(reader))
    assert files_of(folder) == files
    # it was a PermissionError too, and a writer can still append afterwards
    with ReplayBuffer.from_folder(folder) as writer:
        assert_unchanged(writer, committed(writer))


@pytest.mark.parametrize("write", WRITE_PARAMS)
def test_every_write_to_a_closed_buffer_raises_read_only_error(folder, write):
    buf = ReplayBuffer.from_folder(folder)
    buf.close()
    files = files_of(folder)
    with raises(ReadOnlyError, match=r"is closed"):
        write(buf)
    assert files_of(folder) == files

def test_read_only_with_overwrite_is_refused(folder):
    files = files_of(folder)
    with raises(OptionError, match=r"read_only=True and overwrite=True contradict each other"):
        make(folder, read_only=True, overwrite=True)
    assert files_of(folder) == files


SECOND_WRITER_WRITES = {
    "store_episode": lambda b: b.store_episode(**good_episode(5, 2)),
    "begin_episode": lambda b: b.begin_episode(),
    "one_episode": nested_one_episode,
    "batched_episode": lambda b: b.batched_episode(2).__enter__(),
    "vector_writer": lambda b: b.vector_writer(2),
    "update": lambda b: b.update(0, reward=1.0),
    "clear": lambda b: b.clear(),
}


@pytest.mark.parametrize("write", SECOND_WRITER_WRITES.values(), ids=SECOND_WRITER_WRITES.keys())
def test_second_writer_is_refused_at_its_first_write(folder, write):
    with ReplayBuffer.from_folder(folder) as first:
        first.store_episode(**good_episode(2, 2))  # the first write takes the writer lock
        before = committed(first)
        with ReplayBuffer.from_folder(folder) as second:  # opening is fine: the lock is taken at a write
            with raises(StoreLockedError, match=r"one writer at a time.*close\(\) the other writer.*read_only=True"):
                write(second)
            assert_same(before, committed(second))
            with raises(StoreLockedError, match=r"one writer at a time"):  # still refused, still clear
                write(second)
        with raises(StoreLockedError, match=r"one writer at a time"):
            make(folder, overwrite=True)  # never wipes a store another writer holds
        with ReplayBuffer.from_folder(folder, read_only=True) as reader:
            assert_same(before, committed(reader))
        assert_unchanged(first, before)

def test_refused_second_writer_can_write_once_the_first_closes(folder):
    with ReplayBuffer.from_folder(folder) as second:
        with ReplayBuffer.from_folder(folder) as first:
            first.store_episode(**good_episode(2, 2))
            with raises(StoreLockedError, match=r"one writer at a time"):
                second.store_episode(**good_episode(3, 2))
        second.store_episode(**good_episode(3, 2))  # takes the lock, sees the first writer's episode
        episodes, _ = committed(second)
        assert len(episodes) == 4
        assert_episode(episodes[2], 2, range(2))
        assert_episode(episodes[3], 3, range(2))


# ---- reopening with a different schema or capacity ---------------------------------------------------

MISMATCHES = [
    pytest.param(dict(fields={**FIELDS, "obs": ("float", (4,))}), r"field 'obs': stored float32 \(3,\) default None, asked for float32 \(4,\)", id="field-shape"),
    pytest.param(dict(fields={**FIELDS, "count": "int32"}), r"field 'count': stored int64 .*asked for int32", id="field-dtype"),
    pytest.param(dict(fields={**FIELDS, "obs": ("float", (3,), 1.0)}), r"field 'obs': .*default None, asked for .*default 1\.0", id="field-default"),
    pytest.param(dict(fields={**FIELDS, "extra": "float"}), r"field 'extra': stored absent, asked for float32", id="extra-field"),
    pytest.param(dict(fields={k: v for k, v in FIELDS.items() if k != "done"}), r"field 'done': stored bool \(\) default None, asked for absent", id="missing-field"),
    pytest.param(dict(meta_fields=None), r"meta field 'task': stored int32 .*asked for absent", id="missing-meta-fields"),
    pytest.param(dict(meta_fields={**META, "task": "int64"}), r"meta field 'task': stored int32 .*asked for int64", id="meta-dtype"),
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
    assert "was created differently" in message and str(folder) in message
    assert "ReplayBuffer.from_folder(folder)" in message and "overwrite=True" in message
    assert files_of(folder) == files
    with ReplayBuffer.from_folder(folder) as buf:  # the lock was released, the data is intact
        episodes, _ = committed(buf)
        assert_episode(episodes[0], 0, range(3))
        assert_episode(episodes[1], 1, range(4))
        assert_unchanged(buf, committed(buf))

def test_reopen_lists_every_difference(folder):
    with raises(SchemaMismatchError, match=r"(?s)field 'obs'.*max_episodes: stored 6, asked for 7.*circular: stored False, asked for True"):
        make(folder, fields={**FIELDS, "obs": ("float", (4,))}, max_episodes=7, circular=True)

def test_reopen_without_fields_points_to_from_folder(folder):
    with raises(SchemaError, match=r"fields are required.*ReplayBuffer\.from_folder\(folder\)"):
        ReplayBuffer(folder)


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
    pytest.param(write_meta_text("[1, 2]"), UnsupportedFormatError, r"must declare format 'memmap_replay' \(got 'list'\)", id="meta-json-list"),
    pytest.param(edit_meta(lambda d: d.update(format="zarr")), UnsupportedFormatError, r"must declare format 'memmap_replay' \(got 'zarr'\)", id="wrong-format"),
    pytest.param(edit_meta(lambda d: d.update(version="2.0")), UnsupportedFormatError, r"format version '2\.0'.*major version 1 only; upgrade memmap_replay", id="version-2.0"),
    pytest.param(edit_meta(lambda d: d.pop("version")), UnsupportedFormatError, r"format version ''", id="version-missing"),
    pytest.param(edit_meta(lambda d: d.pop("schema")), CorruptStoreError, r"meta\.json is missing or has malformed entries", id="schema-missing"),
    pytest.param(edit_meta(lambda d: d["schema"].update(fields=[])), CorruptStoreError, r"malformed entries", id="fields-not-object"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(dtype="object")), CorruptStoreError, r"malformed entries.*'obs'.*object", id="field-dtype-object"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(shape="3")), CorruptStoreError, r"malformed entries.*'obs'", id="field-shape-string"),
    pytest.param(edit_meta(lambda d: d.update(capacity="big")), CorruptStoreError, r"malformed entries", id="capacity-not-object"),
    pytest.param(edit_meta(lambda d: d["state"].pop("rows")), CorruptStoreError, r"malformed entries.*'rows'", id="state-key-missing"),
    pytest.param(edit_meta(lambda d: d.pop("store_id")), CorruptStoreError, r"malformed entries.*'store_id'", id="store_id-missing"),
    pytest.param(set_counter("capacity", "max_episodes", "6"), CorruptStoreError, r"must hold non-negative integers", id="max_episodes-string"),
    pytest.param(set_counter("capacity", "circular", "no"), CorruptStoreError, r"must hold non-negative integers", id="circular-string"),
    pytest.param(set_counter("state", "commits", 2.0), CorruptStoreError, r"must hold non-negative integers", id="commits-float"),
    pytest.param(set_counter("state", "commits", True), CorruptStoreError, r"must hold non-negative integers", id="commits-bool"),
    pytest.param(set_counter("state", "write_head", -1), CorruptStoreError, r"must hold non-negative integers", id="negative-write_head"),
    pytest.param(set_counter("state", "first_episode", -1), CorruptStoreError, r"must hold non-negative integers", id="negative-first_episode"),
    pytest.param(set_counter("state", "first_episode", 5), CorruptStoreError, r"inconsistent counters", id="first-after-next"),
    pytest.param(set_counter("state", "next_episode", 100), CorruptStoreError, r"inconsistent counters", id="more-live-than-slots"),
    pytest.param(set_counter("state", "write_head", 10**6), CorruptStoreError, r"inconsistent counters", id="write_head-beyond-max_steps"),
    pytest.param(set_counter("state", "rows", 10**6), CorruptStoreError, r"steps/\w+\.npy is truncated", id="rows-beyond-files"),
    pytest.param(edit_meta(lambda d: d["state"].update(first_episode=2**70 - 1, next_episode=2**70)), CorruptStoreError,
                 r"meta\.json", id="huge-counters"),
    # missing and truncated .npy files
    pytest.param(remove("steps/obs.npy"), CorruptStoreError, r"steps/obs\.npy is missing", id="missing-step-npy"),
    pytest.param(remove("meta/task.npy"), CorruptStoreError, r"meta/task\.npy is missing", id="missing-meta-npy"),
    pytest.param(remove("episodes/start.npy"), CorruptStoreError, r"episodes/start\.npy is missing", id="missing-episodes-npy"),
    pytest.param(truncate("steps/image.npy", -1), CorruptStoreError, r"steps/image\.npy is truncated", id="step-npy-short-by-1"),
    pytest.param(truncate("steps/obs.npy", 100), CorruptStoreError, r"steps/obs\.npy is not a readable \.npy file", id="step-npy-cut-in-header"),
    pytest.param(truncate("steps/obs.npy", 0), CorruptStoreError, r"steps/obs\.npy is not a readable \.npy file", id="step-npy-empty"),
    pytest.param(truncate("meta/weight.npy", -1), CorruptStoreError, r"meta/weight\.npy is truncated", id="meta-npy-short"),
    pytest.param(truncate("episodes/length.npy", -1), CorruptStoreError, r"episodes/length\.npy is truncated", id="episodes-npy-short"),
    # .npy headers that disagree with meta.json
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 3), np.float64)), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows of shape \(3,\) as meta\.json says \(got float64 of shape \(3,\)\)", id="npy-dtype-differs"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 4), np.float32)), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows of shape \(3,\) .*\(got float32 of shape \(4,\)\)", id="npy-shape-differs"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((2, 3), np.float32)), CorruptStoreError,
                 r"steps/obs\.npy is truncated: it must hold at least \d+ rows .*\(got 2 rows", id="npy-fewer-rows"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 3), ">f4")), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows", id="npy-big-endian"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.asfortranarray(np.zeros((rows, 3), np.float32))), CorruptStoreError,
                 r"steps/obs\.npy must be in C order", id="npy-fortran-order"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.array([None] * rows, dtype=object), allow_pickle=True), CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows .*\(got object", id="npy-pickled-objects"),
    pytest.param(replace_npy("meta/task.npy", lambda rows: np.zeros(MAX_EPISODES, np.int64)), CorruptStoreError,
                 r"meta/task\.npy must hold int32 rows", id="meta-npy-dtype-differs"),
    pytest.param(garbage("steps/reward.npy"), CorruptStoreError, r"steps/reward\.npy is not a readable \.npy file", id="npy-garbage"),
    # episode table that disagrees with meta.json
    pytest.param(poke("episodes/id.npy", 0, 7), CorruptStoreError, r"episodes/id\.npy does not match meta\.json's live episodes 0\.\.1", id="episode-id-mismatch"),
    pytest.param(poke("episodes/length.npy", 1, 10**6), CorruptStoreError, r"the episode table points outside the \d+ stored rows", id="episode-length-too-long"),
    pytest.param(poke("episodes/length.npy", 0, 0), CorruptStoreError, r"the episode table points outside", id="episode-length-zero"),
    pytest.param(poke("episodes/start.npy", 0, -5), CorruptStoreError, r"the episode table points outside", id="episode-start-negative"),
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

def test_missing_meta_json_is_not_a_store(folder):
    (folder / "meta.json").unlink()
    files = files_of(folder)
    for read_only in (True, False):
        with raises(StoreNotFoundError, match=r"no store at .*holds no meta\.json"):
            ReplayBuffer.from_folder(folder, read_only=read_only)
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
    pytest.param(edit_meta(lambda d: d.update(version="1.7", comment="hi", provenance={"lab": "x"})), id="unknown-top-level-keys"),
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
    with raises(StoreNotFoundError, match=r"no store at .*nowhere: the folder does not exist"):
        opener(path)
    assert not path.exists()  # not created as a side effect

def test_from_folder_on_an_empty_folder(tmp_path):
    with raises(StoreNotFoundError, match=r"holds no meta\.json"):
        ReplayBuffer.from_folder(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_episode_store_open_with_unknown_mode(folder):
    with raises(OptionError, match=r"mode must be one of"):
        EpisodeStore.open(folder, "x")


# ---- schema and capacity errors ----------------------------------------------------------------------


def one_field(spec, name="x"):
    return dict(fields={name: spec})


SCHEMA_ERRORS = [
    # dtypes
    *[pytest.param(one_field(dtype), r"field 'x' must have a numeric", id=f"dtype-{dtype}")
      for dtype in ["str", "object", "datetime64", "timedelta64", "S5", "U3", "V8", "notadtype", "f4,i4"]],
    pytest.param(one_field(str), r"field 'x' must have a numeric", id="dtype-str-type"),
    pytest.param(one_field(object), r"field 'x' must have a numeric", id="dtype-object-type"),
    pytest.param(one_field(("object", 3)), r"field 'x' must have a numeric", id="dtype-object-with-shape"),
    # shapes
    *[pytest.param(one_field(("float", shape)), r"field 'x' must have a shape that is an int or a tuple of ints", id=f"shape-{shape!r}")
      for shape in [2.5, (2.0, 3), "3", (3, None), (True,), [[3]], None]],
    *[pytest.param(one_field(("float", shape)), r"field 'x' must have a shape of positive sizes", id=f"shape-{shape!r}")
      for shape in [0, (3, 0), (-1,), (4, -2)]],
    pytest.param(one_field(("uint8", (2**16, 2**16))), r"field 'x' must take at most 2147483648 bytes per row", id="row-too-large"),
    # spec forms
    *[pytest.param(one_field(spec), r"field 'x' must be a dtype name, \(dtype, shape\) or \(dtype, shape, default\)", id=f"spec-{spec!r}")
      for spec in [3, None, (), ("float", 3, 0.0, "extra")]],
    pytest.param(one_field({"shape": [3]}), r"field 'x' as a dict must have the key 'dtype'", id="spec-dict-without-dtype"),
    # names
    *[pytest.param(one_field("float", name), rf"field name must be a letter .*\(got {re.escape(repr(name))}\)", id=f"name-{name!r}")
      for name in ["../x", "a/b", "", "has space", "1abc", "_x", "a.b", "a-b", "x" * 65, "é"]],
    pytest.param(dict(fields={3: "float"}), r"field name must be a letter .*\(got 3\)", id="name-int"),
    pytest.param(one_field("float", "obs\n"), r"field name must be a letter .*\(got 'obs\\n'\)", id="name-trailing-newline"),
    *[pytest.param(one_field("float", name), rf"field name '{name}' is reserved", id=f"reserved-{name}")
      for name in ["end", "final", "episode_lens", "class", "lambda", "None", "True"]],
    pytest.param(dict(fields=dict(obs="float"), meta_fields={"../m": "int"}), r"meta field name must be a letter", id="meta-name-path"),
    pytest.param(dict(fields=dict(obs="float"), meta_fields={"end": "int"}), r"meta field name 'end' is reserved", id="meta-name-reserved"),
    # defaults
    pytest.param(one_field(("uint8", (), 300)), r"field 'x' of dtype uint8 cannot hold its default 300 \(it would become 44\)", id="default-300-uint8"),
    pytest.param(one_field(("uint8", (), -1)), r"field 'x' of dtype uint8 cannot hold its default -1", id="default--1-uint8"),
    pytest.param(one_field(("int", (), 0.5)), r"field 'x' of dtype int32 cannot hold its default 0\.5", id="default-0.5-int"),
    pytest.param(one_field(("int", (), 2**40)), r"field 'x' of dtype int32 cannot hold its default 1099511627776", id="default-2**40-int32"),
    pytest.param(one_field(("bool", (), 2)), r"field 'x' of dtype bool cannot hold its default 2", id="default-2-bool"),
    pytest.param(one_field(("float", (), float("nan"))), r"field 'x' must have a finite default \(got nan\)", id="default-nan"),
    pytest.param(one_field(("float", (), float("-inf"))), r"field 'x' must have a finite default \(got -inf\)", id="default-inf"),
    pytest.param(one_field(("float", (), "zero")), r"field 'x' must have a scalar default or None \(got 'zero'\)", id="default-str"),
    pytest.param(one_field(("float", (), [0.0])), r"field 'x' must have a scalar default or None", id="default-list"),
    pytest.param(one_field(("int", (), 1j)), r"field 'x' of dtype int32 cannot have a complex default", id="default-complex-for-int"),
    pytest.param(one_field(("float", (), 1e39)), r"field 'x' of dtype float32 cannot hold its default 1e\+39", id="default-1e39-float32"),
    pytest.param(one_field(("int64", (), 2**70)), r"field 'x' of dtype int64 cannot hold its default", id="default-2**70-int64"),
    pytest.param(one_field(("uint64", (), 2**64)), r"field 'x' of dtype uint64 cannot hold its default", id="default-2**64-uint64"),
    # the schema as a whole
    pytest.param(dict(fields={}), r"fields must be a non-empty dict", id="fields-empty"),
    pytest.param(dict(fields=["obs"]), r"fields must be a non-empty dict", id="fields-list"),
    pytest.param(dict(fields=None), r"fields are required to create a store", id="fields-None"),
    pytest.param(dict(fields=dict(obs="float"), meta_fields=["task"]), r"meta_fields must be a dict", id="meta_fields-list"),
    pytest.param(dict(fields=dict(obs="float", task="int"), meta_fields=dict(task="int")),
                 r"fields and meta_fields must have distinct names \(both have \['task'\]\)", id="overlapping-names"),
    # capacity
    *[pytest.param(dict(fields=FIELDS, **{key: value}), rf"{key} must be a positive int \(got {re.escape(repr(value))}\)", id=f"{key}-{value!r}")
      for key in ["max_episodes", "max_timesteps"] for value in [0, -1, 1.5, "10", True, None]],
    pytest.param(dict(fields=FIELDS, max_steps=0), r"max_steps must be a positive int \(got 0\)", id="max_steps-0"),
    pytest.param(dict(fields=FIELDS, max_steps=10), r"max_steps must be at least max_timesteps \+ 1 = 11 \(got 10\)", id="max_steps-too-small"),
    pytest.param(dict(fields=FIELDS, circular="yes"), r"circular must be True or False \(got 'yes'\)", id="circular-str"),
    pytest.param(dict(fields=FIELDS, circular=1), r"circular must be True or False \(got 1\)", id="circular-int"),
]


@pytest.mark.parametrize("kwargs, match", SCHEMA_ERRORS)
def test_bad_schema_or_capacity_is_refused_before_touching_disk(tmp_path, kwargs, match):
    options = dict(max_episodes=MAX_EPISODES, max_timesteps=MAX_TIMESTEPS, meta_fields=None)
    options.update(kwargs)
    # a field spec is a SchemaError; a capacity or flag of the wrong type or range an OptionError
    error = SchemaError if set(kwargs) <= {"fields", "meta_fields"} else OptionError
    with raises(error, match=match):
        ReplayBuffer(tmp_path / "new", **options)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("name", sorted(n for n in keyword.kwlist if n.isidentifier()))
def test_every_python_keyword_is_a_reserved_name(name):
    with raises(SchemaError, match=rf"'{name}' is reserved"):
        Schema.parse({name: "float"})

def test_bad_schema_does_not_touch_an_existing_store(folder):
    files = files_of(folder)
    with raises(SchemaError, match=r"field 'obs' must have a shape of positive sizes"):
        make(folder, fields={**FIELDS, "obs": ("float", 0)}, overwrite=True)
    assert files_of(folder) == files


@pytest.mark.parametrize("spec", [
    pytest.param(("float", (), 0.5), id="0.5"),
    pytest.param(("float", (), -1), id="int-minus-1"),
    pytest.param(("uint8", (3,), 255), id="uint8-255"),
    pytest.param(("bool", (), True), id="bool-True"),
    pytest.param(("int", (), 2.0), id="int-2.0"),
    pytest.param(("float", (), 0.1), id="float32-0.1"),
])
def test_defaults_the_dtype_can_hold_are_accepted(spec):
    Schema.parse(dict(x=spec))


# ---- capacity: full buffers and too-long episodes ----------------------------------------------------


def fill(buffer):
    while buffer.num_episodes < buffer.max_episodes:
        buffer.store_episode(**good_episode(2 + buffer.num_episodes, 2))


def one_episode_write(b):
    with b.one_episode():
        b.store(**good_step(9, 0))


def begin_end_write(b):
    b.begin_episode()
    b.store(**good_step(9, 0))
    b.end_episode()


def advance_write(b):
    b.begin_episode()
    b.store(**good_step(9, 0))
    b.advance_episode()


def batched_write(b):
    with b.batched_episode(1):
        b.store_batch(**good_batch([9], 0))


def vector_write(b):
    b.vector_writer(2).store(**good_batch([9, 10], 0), truncated=[False, True])


FULL_WRITES = {"store_episode": lambda b: b.store_episode(**good_episode(9, 2)), "one_episode": one_episode_write,
               "end_episode": begin_end_write, "advance_episode": advance_write, "batched_episode": batched_write,
               "vector_writer": vector_write}


@pytest.mark.parametrize("write", FULL_WRITES.values(), ids=FULL_WRITES.keys())
def test_full_buffer_refuses_and_says_how_to_fix(buffer, write):
    fill(buffer)
    before = committed(buffer)
    with raises(BufferFullError, match=r"the buffer is full: all 6 episode slots are used and it is not circular") as info:
        write(buffer)
    message = str(info.value)
    assert "circular=True" in message and "max_episodes" in message and "clear()" in message
    assert_same(before, committed(buffer))
    buffer.clear()
    assert_unchanged(buffer, committed(buffer))

def test_full_buffer_commits_nothing_when_several_episodes_end_together(buffer):
    while buffer.num_episodes < buffer.max_episodes - 1:
        buffer.store_episode(**good_episode(2 + buffer.num_episodes, 2))
    before = committed(buffer)
    writer = buffer.vector_writer(2)
    writer.store(**good_batch([9, 10], 0))
    with raises(BufferFullError, match=r"buffer is full"):
        writer.store(**good_batch([9, 10], 1), terminated=[True, True])  # one would fit: all or nothing
    assert_same(before, committed(buffer))

def test_full_rows_refuse(tmp_path):
    with make(tmp_path / "rows", max_timesteps=5, max_steps=12) as buf:
        buf.store_episode(**good_episode(0, 5))
        buf.store_episode(**good_episode(1, 5))
        before = committed(buf)
        with raises(BufferFullError, match=r"the buffer is full: .*rows.*circular=True.*max_episodes/max_steps.*clear\(\)"):
            buf.store_episode(**good_episode(2, 5))
        assert_same(before, committed(buf))
        buf.store_episode(**good_episode(2, 1))  # what still fits is accepted
        assert buf.num_episodes == 3

def test_step_beyond_max_timesteps_is_refused_and_the_episode_keeps_its_steps(buffer):
    before = committed(buffer)
    with buffer.one_episode():
        for t in range(MAX_TIMESTEPS):
            buffer.store(**good_step(5, t))
        with raises(InvalidDataError, match=r"the episode must have at most max_timesteps=10 steps \(got one more\).*larger max_timesteps"):
            buffer.store(**good_step(5, MAX_TIMESTEPS))
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(MAX_TIMESTEPS))


@pytest.mark.parametrize("length", [MAX_TIMESTEPS + 1, 0])
def test_store_episode_length_out_of_bounds(buffer, length):
    before = committed(buffer)
    arrays = good_episode(5, max(length, 1))
    if length == 0:
        arrays = {name: value[:0] if name in FIELDS else value for name, value in arrays.items()}
    with raises(InvalidDataError, match=rf"an episode must have between 1 and max_timesteps=10 steps \(got {length}\)"):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("arrays, match", [
    pytest.param(dict(obs=np.zeros(3)), r"field 'obs' in store_episode must have shape \(T, \*\(3,\)\) with a time axis \(got \(3,\)\)", id="no-time-axis"),
    pytest.param(dict(obs=1.0), r"field 'obs' in store_episode must have shape \(T, \*\(3,\)\)", id="scalar"),
    pytest.param({**good_steps(5, range(3)), "reward": np.zeros(2)}, r"field 'reward' must have shape \(3,\) \(got \(2,\)\)", id="lengths-differ"),
    pytest.param(dict(task=1), r"store_episode needs at least one step field", id="meta-only"),
])
def test_store_episode_with_inconsistent_arrays(buffer, arrays, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("writer", ["batched_episode", "vector_writer"])
def test_batch_step_beyond_max_timesteps(buffer, writer):
    before = committed(buffer)

    def steps(store):
        for t in range(MAX_TIMESTEPS):
            store(**good_batch([5, 6], t))
        with raises(InvalidDataError, match=r"env 0's episode must have at most max_timesteps=10 steps \(got one more\)"):
            store(**good_batch([5, 6], MAX_TIMESTEPS), truncated=[True, True])

    if writer == "batched_episode":
        with buffer.batched_episode(2):
            steps(buffer.store_batch)
    else:
        vector = buffer.vector_writer(2)
        steps(vector.store)
        assert vector.lengths.tolist() == [MAX_TIMESTEPS] * 2
        vector.commit_all("truncated")
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(MAX_TIMESTEPS))
    assert_episode(episodes[3], 6, range(MAX_TIMESTEPS))


@pytest.mark.parametrize("num_envs", [0, -1, 1.5, True, "2"])
def test_vector_writer_bad_num_envs(buffer, num_envs):
    with raises(OptionError, match=rf"num_envs must be a positive int \(got {re.escape(repr(num_envs))}\)"):
        buffer.vector_writer(num_envs)
    with raises(OptionError, match=r"num_envs must be a positive int"):
        buffer.batched_episode(num_envs).__enter__()


@pytest.mark.parametrize("flags, match", [
    pytest.param(dict(terminated=[2, 0]), r"flag 'terminated' has dtype bool and holds only 0/1", id="flag-2"),
    pytest.param(dict(truncated=True), r"flag 'truncated' must have shape \(2,\) \(got \(\)\)", id="flag-scalar"),
    pytest.param(dict(terminated=[True, False, True]), r"flag 'terminated' must have shape \(2,\) \(got \(3,\)\)", id="flag-too-many"),
])
def test_vector_writer_bad_flags(buffer, flags, match):
    before = committed(buffer)
    writer = buffer.vector_writer(2)
    with raises(InvalidDataError, match=match):
        writer.store(**good_batch([5, 6], 0), **flags)
    assert writer.lengths.tolist() == [0, 0]
    assert_unchanged(buffer, before)


# ---- end= values -------------------------------------------------------------------------------------

BAD_ENDS = ["done", True, 1, "Terminated", ""]


@pytest.mark.parametrize("end", BAD_ENDS)
def test_store_episode_bad_end(buffer, end):
    before = committed(buffer)
    with raises(OptionError, match=rf"end must be 'terminated', 'truncated' or None \(got {re.escape(repr(end))}\)"):
        buffer.store_episode(**good_episode(5, 2), end=end)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("end", BAD_ENDS)
@pytest.mark.parametrize("how", ["set_episode_end", "episode.set_end"])
def test_bad_end_inside_an_episode_leaves_it_open(buffer, end, how):
    before = committed(buffer)
    with buffer.one_episode() as episode:
        buffer.store(**good_step(5, 0))
        setter = buffer.set_episode_end if how == "set_episode_end" else episode.set_end
        with raises(OptionError, match=r"end must be 'terminated', 'truncated' or None"):
            setter(end)
        buffer.store(**good_step(5, 1))
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert episodes[2]["end"] == 0 and not episodes[2]["final"]


# end= is an option (OptionError); final= holds the data written (InvalidDataError)
@pytest.mark.parametrize("call, error", [
    pytest.param(lambda b: b.advance_episode(end="done"), OptionError, id="advance_episode-bad-end"),
    pytest.param(lambda b: b.end_episode(end="done"), OptionError, id="end_episode-bad-end"),
    pytest.param(lambda b: b.end_episode(end="truncated", final=dict(bogus=1.0)), InvalidDataError,
                 id="end_episode-bad-final"),
    pytest.param(lambda b: b.advance_episode(end="truncated", final=dict(obs=np.zeros(4))), InvalidDataError,
                 id="advance_episode-bad-final"),
])
def test_bad_end_or_final_when_ending_keeps_the_episode_open(buffer, call, error):
    buffer.begin_episode()
    buffer.store(**good_step(5, 0))
    with raises(error, match=r"(end must be|'bogus'|'obs')"):
        call(buffer)
    buffer.store(**good_step(5, 1))
    buffer.end_episode()
    assert_episode(committed(buffer)[0][-1], 5, range(2))


def test_failed_set_end_changes_nothing(buffer):
    with buffer.one_episode() as episode:
        buffer.store(**good_step(5, 0))
        with raises(InvalidDataError, match=r"unknown field \['bogus'\]"):
            episode.set_end("terminated", final=dict(bogus=1.0))
    last = committed(buffer)[0][-1]
    assert last["end"] == 0 and not last["final"]

def test_vector_commit_all_bad_end_keeps_the_episodes(buffer):
    writer = buffer.vector_writer(2)
    writer.store(**good_batch([5, 6], 0))
    before = committed(buffer)
    with raises(OptionError, match=r"end must be 'terminated', 'truncated' or None \(got 'done'\)"):
        writer.commit_all("done")
    assert writer.lengths.tolist() == [1, 1]
    assert_same(before, committed(buffer))
    writer.commit_all("truncated")
    episodes, _ = committed(buffer)
    assert [episode["end"] for episode in episodes[2:]] == [2, 2]


# ---- update ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("indices, match", [
    pytest.param(6, r"episode indices must be in \[0, 6\) \(got 6\.\.6\)", id="slot-6"),
    pytest.param(-1, r"episode indices must be in \[0, 6\) \(got -1\.\.-1\)", id="slot--1"),
    pytest.param([0, 99], r"episode indices must be in \[0, 6\) \(got 0\.\.99\)", id="slot-99"),
    pytest.param(4, r"episode slot 4 holds no live episode", id="slot-not-live"),
    pytest.param([0, 3], r"episode slot 3 holds no live episode", id="one-slot-not-live"),
    pytest.param(0.5, r"episode indices must be an int or a 1-d array of ints \(got float64", id="float"),
    pytest.param("0", r"episode indices must be an int or a 1-d array of ints", id="str"),
    pytest.param(True, r"episode indices must be an int or a 1-d array of ints \(got bool", id="bool"),
    pytest.param([[0]], r"episode indices must be an int or a 1-d array of ints \(got int64 of shape \(1, 1\)\)", id="2-d"),
])
def test_update_bad_indices(buffer, indices, match):
    before = committed(buffer)
    with raises(OptionError, match=match):
        buffer.update(indices, reward=99.0)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("indices, data, match", [
    pytest.param([0], dict(reward=np.zeros((1, 4))), r"field 'reward' in update has T=4 steps but a selected episode is shorter \(shortest: 3 steps\)", id="too-many-steps"),
    pytest.param([0, 1], dict(obs=np.zeros((2, 4, 3))), r"field 'obs' in update has T=4 steps .*\(shortest: 3 steps\)", id="too-many-steps-for-shortest"),
    pytest.param([0, 1], dict(reward=np.zeros((3, 2))), r"field 'reward' in update must have shape \(2, T, \*\(\)\) \(got \(3, 2\)\)", id="wrong-count"),
    pytest.param([0, 1], dict(reward=np.zeros((2, 2, 2, 2))), r"field 'reward' in update must have shape \(2, T", id="too-many-axes"),
    pytest.param([0, 1], dict(task=[1, 2, 3]), r"meta field 'task' must have shape \(2,\) \(got \(3,\)\)", id="meta-wrong-count"),
    pytest.param([0], dict(), r"update needs at least one field to write", id="no-data"),
])
def test_update_bad_data(buffer, indices, data, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        buffer.update(indices, **data)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("data", [
    pytest.param(dict(reward=99.0, bogus=1.0), id="good-then-unknown"),
    pytest.param(dict(reward=99.0, action=2.5), id="good-then-lossy"),
    pytest.param(dict(task=99, weight="heavy"), id="good-meta-then-bad-meta"),
    pytest.param(dict(obs=np.ones(3), reward=np.zeros((2, 9))), id="good-then-too-many-steps"),
])
def test_failed_update_writes_nothing(buffer, data):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"'(bogus|action|weight|reward)'"):
        buffer.update([0, 1], **data)
    assert_unchanged(buffer, before)

def test_update_with_tensors_that_require_grad(buffer):
    buffer.update([0, 1], obs=torch.full((2, 3, 3), 4.0, requires_grad=True), weight=torch.tensor(2.0, requires_grad=True))
    episodes, _ = committed(buffer)
    for episode in episodes:
        np.testing.assert_array_equal(episode["obs"][:3], np.full((3, 3), 4.0, np.float32))
        assert episode["weight"] == 2.0
    np.testing.assert_array_equal(episodes[1]["obs"][3], good_step(1, 3)["obs"])  # the 4th step untouched


# ---- one rule for every scalar: stored exactly, or refused with InvalidDataError ---------------------

PROPERTY_FIELDS = dict(u8="uint8", i8="int8", i32="int32", u32="uint32", i64="int64", u64="uint64", b="bool",
                       f16="float16", f32="float32")


def fits(dtype: np.dtype, value) -> bool:
    """Whether a scalar can be stored in dtype without losing anything (floats may round, not overflow)."""
    if dtype.kind == "b":
        return value == 0 or value == 1
    if dtype.kind in "iu":
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                return False
            value = int(value)
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    with np.errstate(over="ignore"):
        if isinstance(value, int) and not isinstance(value, bool):  # ints must be held exactly
            return abs(value) < 2**64 and np.isfinite(dtype.type(value)) and int(dtype.type(value)) == value
        return not (math.isfinite(value) and not np.isfinite(dtype.type(value)))


scalars = st.one_of(
    st.integers(-2**70, 2**70),
    st.integers(-300, 300),
    st.sampled_from([0, 1, 255, 256, -129, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64]),
    st.floats(-2.0**70, 2.0**70),
    st.sampled_from([2.0**31, 2.0**32, 2.0**63, 2.0**64, -2.0**63, -2.0**63 - 2048.0]),
    st.integers(-2**62, 2**62).map(float),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.5, -0.0, 65504.0, 65520.0, 3.5e38, 3.5e39]),
)


@pytest.fixture
def scalar_buffer(tmp_path):
    buf = ReplayBuffer(tmp_path / "scalars", 4, 2, PROPERTY_FIELDS, circular=True)
    yield buf
    buf.close()


# the fixture's buffer is shared by the examples on purpose: every example must leave it consistent
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(PROPERTY_FIELDS)), value=scalars)
def test_scalar_is_stored_exactly_or_refused(scalar_buffer, name, value):
    buf, dtype = scalar_buffer, np.dtype(PROPERTY_FIELDS[name])
    before = committed(buf)
    step = {other: 0 for other in PROPERTY_FIELDS}
    step[name] = value
    buf.begin_episode()
    if fits(dtype, value):
        buf.store(**step)
        buf.end_episode()
        stored = committed(buf)[0][-1][name][0]
        expected = dtype.type(value) if dtype.kind in "fb" else int(value)
        assert stored == expected or (np.isnan(stored) and np.isnan(expected))
    else:
        with raises(InvalidDataError, match=rf"field '{name}'"):
            buf.store(**step)
        assert buf.end_episode() is None  # the episode is empty: nothing is committed
        assert_same(before, committed(buf))
