"""coerce: exact casts pass, lossy ones raise InvalidDataError naming the field."""

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError
from memmap_replay.core.convert import coerce
from memmap_replay.core.schema import parse_field

U8 = parse_field("image", ("uint8", (2,)))
I32 = parse_field("count", "int")
F32 = parse_field("x", ("float", (2,)))
F16 = parse_field("h", "float16")
B = parse_field("done", "bool")
I64 = parse_field("big", "int64")


@pytest.mark.parametrize("spec, value, expected", [
    (U8, [1, 255], [1, 255]),
    (U8, np.array([2.0, 3.0]), [2, 3]),
    (I32, 2.0, 2),
    (I32, True, 1),
    (B, 1, True),
    (B, np.float32(0.0), False),
    (F32, np.array([1.5, 2.5], np.float64), [1.5, 2.5]),
    (F32, torch.ones(2, requires_grad=True), [1, 1]),
    (F32, 3.0, [3, 3]),  # a scalar fills the row
    (F16, 1e4, 1e4),
    (I64, 2**62, 2**62),
])
def test_exact_casts(spec, value, expected):
    out = coerce(spec, value)
    assert out.dtype == spec.dtype and out.shape == spec.shape
    np.testing.assert_array_equal(out, np.broadcast_to(expected, spec.shape))


@pytest.mark.parametrize("spec, value, match", [
    (I32, 2.5, "fraction"),
    (U8, [0.9, 1.0], "fraction"),
    (U8, [300, 1], r"range is \[0, 255\] \(got 300\)"),
    (U8, [-1, 1], r"got -1"),
    (I32, 2**40, "range"),
    (I64, 2**70, "too large"),
    (I32, float("nan"), "non-finite"),
    (I32, float("inf"), "non-finite"),
    (F16, 1e6, "overflows"),
    (F32, np.array([1e39, 0.0]), "overflows"),
    (B, 2, "0/1"),
    (I32, 1 + 2j, "complex"),
    (F32, np.ones(2, np.complex64), "complex"),
    (I32, "3", "numbers"),
    (I32, None, "numbers"),
    (I32, [[1], "a"], "array of numbers|numbers"),
    (U8, np.zeros((3,)), r"shape \(2,\) \(got \(3,\)\)"),
    (F32, torch.ones(2, dtype=torch.bfloat16), "convert it with .float"),
])
def test_lossy_or_bad_values(spec, value, match):
    with pytest.raises(InvalidDataError, match=match) as info:
        coerce(spec, value)
    assert repr(spec.name) in str(info.value)


def test_leading_axis_and_seed_singleton_leniency():
    out = coerce(parse_field("r", "float"), np.ones((5, 1)), (5,))
    assert out.shape == (5,)
    out = coerce(parse_field("r", ("float", 1)), np.ones(5), (5,))
    assert out.shape == (5, 1)
    with pytest.raises(InvalidDataError, match=r"shape \(5, 2\)"):
        coerce(F32, 1.0, (5,))  # no silent broadcast of a scalar over a time axis
