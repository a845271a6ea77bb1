"""Hostile input at ``core/convert.py``, value conversion for writes: arrays of any dtype, shape and value.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

24. ``store`` values: arrays of any dtype (every numeric dtype, bool, datetime, timedelta, str, bytes, object,
    void, structured), any shape, any values (NaN, inf, extremes): stored exactly or refused (generated)
26. integers float64 / complex128 cannot hold exactly, e.g. 2**53 + 1 (fixed: rounded silently)
27. float64 values that overflow a complex64 field (fixed: stored as inf)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memmap_replay import InvalidDataError, ReplayBuffer

from catalogue import fast, unchanged, raises, element_fits, legal_row, NON_NUMERIC


# ==== kinds 24, 26-27: step values ==========================================================================

SCRATCH_FIELDS = dict(u8=("uint8", (2,)), i8="int8", i64="int64", u64="uint64", b="bool", f16="float16",
                      f32=("float32", (2,)), f64="float64", c128="complex128")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A ring store that accepted values may be committed to."""
    buf = ReplayBuffer(tmp_path_factory.mktemp("scratch") / "store", 4, 2, SCRATCH_FIELDS, circular=True)
    yield buf
    buf.close()

value_arrays = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(endianness="="),
                               hnp.floating_dtypes(endianness="=", sizes=(16, 32, 64)), hnp.boolean_dtypes(),
                               hnp.complex_number_dtypes(endianness="="),
                               st.sampled_from([np.dtype(">i4"), np.dtype(">f8")])),
               shape=st.one_of(st.sampled_from([(), (1,), (2,), (3,), (2, 1), (1, 2), (0,), (2, 2)]),
                               hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))),
    st.sampled_from(NON_NUMERIC),
)


def fitted(spec_shape: tuple, value: np.ndarray) -> np.ndarray:
    """``value`` as the row it must become (a scalar fills the row; a trailing 1 may be added or dropped)."""
    if value.shape == spec_shape:
        return value
    if spec_shape == () and value.shape == (1,):
        return value[0]
    return np.broadcast_to(value, spec_shape)


def wide_float_rounds(target: np.dtype, value: np.ndarray) -> bool:
    """An integer numpy deems 'safe' to cast to float64/complex128 that does not survive it (see the cases below)."""
    if value.dtype.kind not in "iu" or target.kind not in "fc" or not np.can_cast(value.dtype, target, "safe"):
        return False
    with np.errstate(all="ignore"):
        return any(int(target.type(x).real) != int(x) for x in value.reshape(-1).tolist())


@fast(200)
@given(name=st.sampled_from(sorted(SCRATCH_FIELDS)), value=value_arrays)
def test_any_array_is_stored_exactly_or_refused(scratch, name, value):
    spec = scratch.schema.fields[name]
    assume(not wide_float_rounds(spec.dtype, value))
    fits = (value.dtype.kind in "biufc" and legal_row(spec.shape, value.shape)
            and all(element_fits(spec.dtype, value.dtype, x) for x in value.reshape(-1)))
    step_values = {other: 0 for other in SCRATCH_FIELDS}
    step_values[name] = value
    if not fits:
        with unchanged(scratch):
            with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                with scratch.one_episode():
                    scratch.store(**step_values)
        return
    with scratch.one_episode():
        scratch.store(**step_values)
    stored = scratch.get_all_data()[name].numpy()[-1, 0]
    expected = fitted(spec.shape, value)
    if spec.dtype.kind in "iub":  # exactly the same numbers (compared as Python numbers: no rounding)
        assert np.asarray(stored).reshape(-1).tolist() == np.asarray(expected).reshape(-1).tolist()
    else:
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(stored, np.asarray(expected).astype(spec.dtype))


@pytest.mark.parametrize("field, value", [
    pytest.param("f64", np.array([2**53 + 1]), id="int64-2**53+1-into-float64"),
    pytest.param("f64", np.array([2**64 - 1], np.uint64), id="uint64-max-into-float64"),
    pytest.param("c128", np.array([2**63 - 1]), id="int64-max-into-complex128"),
])
def test_integers_a_wide_float_cannot_hold_are_refused(tmp_path, field, value):
    with ReplayBuffer(tmp_path / "wide", 2, 2, dict(f64="float64", c128="complex128")) as buf:
        with unchanged(buf), raises(InvalidDataError, match=rf"field '{field}' has dtype \w+ and "
                                                            rf"cannot hold \d+ exactly"):
            buf.store_episode(**{field: value})


def test_float64_that_overflows_complex64_is_refused(tmp_path):
    with ReplayBuffer(tmp_path / "c64", 2, 3, dict(z="complex64")) as buf:
        with unchanged(buf), raises(InvalidDataError, match=r"field 'z' has dtype complex64 and 1e\+39 overflows"):
            buf.store_episode(z=np.array([1e39]))
