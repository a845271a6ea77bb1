"""The error catalogue for ``core/convert.py``, value conversion for writes: values that do not fit their
field (shapes, lossy casts, ranges, NaN, non-numbers) on every write path, meta values that do not fit,
values that fit exactly, and one rule for every scalar: stored exactly, or refused.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import math
import warnings
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memmap_replay import InvalidDataError, ReplayBuffer

from catalogue import (raises, good_step, good_steps, good_episode, good_batch, committed, assert_same,
                       assert_unchanged, assert_no_open_episode, stack)


# ---- values that do not fit their field: every write path --------------------------------------------


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
    pytest.param("count", 2.5, r"'count' has dtype int64 and cannot hold 2\.5 without losing its fraction",
                 id="2.5-into-int"),
    pytest.param("small", np.float32(-1.5), r"'small' has dtype int32 and cannot hold -1\.5",
                 id="np.float32-fraction-into-int"),
    pytest.param("action", np.array([1.0, 2.5]), r"'action' has dtype int32 and cannot hold 2\.5",
                 id="float-array-with-fraction-into-int"),
    pytest.param("image", np.full((3, 64, 64), 0.9), r"'image' has dtype uint8 and cannot hold 0\.9",
                 id="0.9-into-uint8-image"),
    pytest.param("small", torch.tensor(1.5), r"'small' has dtype int32 and cannot hold 1\.5",
                 id="float-tensor-fraction-into-int"),
    pytest.param("reward", 1 + 2j, r"'reward' has dtype float32 and cannot hold complex", id="complex-into-float"),
    pytest.param("small", 3j, r"'small' has dtype int32 and cannot hold complex", id="complex-into-int"),
    pytest.param("reward", 16777217, r"'reward' has dtype float32", id="int-that-float32-rounds"),
    # out of range
    pytest.param("image", np.full((3, 64, 64), 300), r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)",
                 id="300-into-uint8"),
    pytest.param("image", np.full((3, 64, 64), -1), r"'image' has dtype uint8 whose range is \[0, 255\] \(got -1\)",
                 id="-1-into-uint8"),
    pytest.param("image", torch.full((3, 64, 64), 300),
                 r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)", id="300-tensor-into-uint8"),
    pytest.param("small", 2**40, r"'small' has dtype int32 whose range is \[-2147483648, 2147483647\] "
                                 r"\(got 1099511627776\)", id="2**40-into-int32"),
    pytest.param("small", np.uint64(2**63), r"'small' has dtype int32 whose range", id="uint64-into-int32"),
    pytest.param("count", 2**70, r"'count' must hold numbers .*too large for int64", id="2**70-into-int64"),
    pytest.param("reward", 1e39, r"'reward' has dtype float32 and 1e\+39 overflows it", id="1e39-into-float32"),
    pytest.param("obs", np.array([0.0, -1e39, 0.0]), r"'obs' has dtype float32 and -1e\+39 overflows it",
                 id="array-overflows-float32"),
    pytest.param("done", 2, r"'done' has dtype bool and holds only 0/1 or False/True \(got 2\)", id="2-into-bool"),
    pytest.param("done", 0.5, r"'done' has dtype bool and holds only 0/1 or False/True \(got 0\.5\)",
                 id="0.5-into-bool"),
    pytest.param("count", 2.0**63, r"'count' has dtype int64 whose range", id="2.0**63-into-int64"),
    pytest.param("small", np.float32(2**31), r"'small' has dtype int32 whose range", id="float32-2**31-into-int32"),
    # NaN and inf
    pytest.param("count", float("nan"), r"'count' has dtype int64 and cannot hold nan", id="nan-into-int"),
    pytest.param("count", float("inf"), r"'count' has dtype int64 and cannot hold inf", id="inf-into-int"),
    pytest.param("action", np.array([1.0, -np.inf]), r"'action' has dtype int32 and cannot hold -inf",
                 id="-inf-array-into-int"),
    pytest.param("image", np.full((3, 64, 64), np.nan), r"'image' has dtype uint8 and cannot hold nan",
                 id="nan-into-uint8"),
    pytest.param("done", float("nan"), r"'done' has dtype bool and holds only 0/1", id="nan-into-bool"),
    # strings, objects, None, tensors numpy cannot hold
    pytest.param("reward", "abc", r"'reward' must hold numbers \(got \w+ of dtype <U3: only numbers, bools and arrays",
                 id="str"),
    pytest.param("reward", b"x", r"'reward' must hold numbers", id="bytes"),
    pytest.param("reward", None, r"'reward' must hold numbers", id="None"),
    pytest.param("action", {"a": 1}, r"'action' must hold numbers", id="dict"),
    pytest.param("action", object(), r"'action' must hold numbers", id="object"),
    pytest.param("obs", [1, "a", 2], r"'obs' must hold numbers", id="list-with-str"),
    pytest.param("obs", torch.zeros(3, dtype=torch.bfloat16),
                 r"'obs' must be convertible to numpy \(got a torch\.bfloat16 tensor.*"
                 r"convert it with \.float\(\) first",
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
    pytest.param("image", 300, r"'image' has dtype uint8 whose range is \[0, 255\] \(got 300\)",
                 id="300-scalar-into-image"),
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
    pytest.param(lambda b: b.store_episode(**{**good_episode(5, 2), "obs": [[1, 2, 3], [3]]}),
                 id="store_episode-first-field"),
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
    pytest.param(dict(weight=1e39), r"meta field 'weight' has dtype float32 and 1e\+39 overflows",
                 id="1e39-into-float32"),
    pytest.param(dict(weight=np.zeros((2, 3))), r"meta field 'weight' must have shape \(.*\) \(got \(2, 3\)\)",
                 id="wrong-shape"),
])
def test_bad_meta_value_is_refused(buffer, write, meta, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        write(buffer, meta)
    assert_no_open_episode(buffer)
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


# ---- torch values numpy cannot take as they are (issue 30: a bare torch RuntimeError escaped store_batch) ------


def _nested(*lengths):
    with warnings.catch_warnings():  # (torch: nested tensors are a prototype)
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.ones(length) for length in lengths])


@pytest.mark.parametrize("value, match", [
    pytest.param(lambda: _nested(0, 3), r"'reward' .*must be convertible to numpy \(got a nested torch\.float32 "
                 r"tensor\); numpy cannot read a nested tensor.*torch\.stack", id="nested-0-and-3"),
    pytest.param(lambda: _nested(2, 2), r"numpy cannot read a nested tensor", id="nested-2-and-2"),
    pytest.param(lambda: torch.ones(2).to_sparse(),
                 r"got a sparse torch\.float32 tensor\); pass it dense: \.to_dense\(\)", id="sparse"),
    pytest.param(lambda: torch.ones(2, device="meta"), r"on device meta.*holds no data", id="meta-device"),
])
@pytest.mark.parametrize("flat", [False, True], ids=["batched_episode", "flat-0.2.3"])
def test_a_tensor_numpy_cannot_read_is_the_library_error_in_store_batch(buffer, value, match, flat):
    before = committed(buffer)
    batch = {**good_batch([5, 6], 0), "reward": value()}
    with raises(InvalidDataError, match=match):
        if flat:
            buffer.store_batch(**batch)
        else:
            with buffer.batched_episode(2):
                buffer.store_batch(**batch)
    assert_unchanged(buffer, before)
    assert_no_open_episode(buffer)


def test_a_list_of_tensors_is_read_tensor_by_tensor(buffer):
    """A list of tensors needing gradients: numpy's conversion raised torch's RuntimeError."""
    rewards = [torch.tensor(1.5, requires_grad=True), torch.tensor(2.5, requires_grad=True)]
    with buffer.batched_episode(2):
        buffer.store_batch(**{**good_batch([5, 6], 0), "reward": rewards})
    assert [episode["reward"].tolist() for episode in list(buffer.episodes())[-2:]] == [[1.5], [2.5]]
    ragged = [torch.ones(3), torch.ones(0)]
    with raises(InvalidDataError, match=r"'obs' .*must be an array of numbers \(got list.*one array or tensor"):
        buffer.store_batch(**{**good_batch([5, 6], 0), "obs": ragged})
