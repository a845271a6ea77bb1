"""Hostile input at ``core/schema.py``'s entry points: field names, dtypes, shapes, defaults and the
``fields``/``meta_fields`` containers.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

 1. field and meta field names of arbitrary text: path tricks (``../x``, ``a/b``, ``.``, ``..``, ``''``, ``/abs``,
    ``a\\b``), NUL, newline, tab, bidi marks, non-ASCII letters and digits, 65+ characters (generated)
 2. field names of other types (int, None, bytes, float, tuple) (generated)
 3. reserved names and Python keywords, as field and as meta field names
 4. legal names that are awkward file names (``con``, ``nul``, ``aux``, ``lpt1``, names differing only in case,
    ``steps``, ``meta``, ``priorities``, 64 characters): must round-trip, not be refused or collide
 5. dtype specs of arbitrary text (generated)
 6. dtype specs of arbitrary objects: numpy, python and torch types, structured, subarray, datetime, str,
    object and void dtypes, non-native byte order, bare / tuple / dict spec forms (generated)
 7. dtype strings numpy rejects with a ValueError, SyntaxError or DeprecationWarning (fixed)
 8. dtypes numpy stores but torch cannot read: longdouble, clongdouble (fixed)
 9. shape specs of arbitrary objects: negative, zero, huge, floats, bools, strings, None, arrays, ranges,
    40 dimensions (generated)
10. defaults of arbitrary objects: NaN, inf, huge ints, complex, strings, lists, arrays, tensors, against
    every numeric dtype (generated)
11. a 2-list default in a dict spec (fixed: read as a complex number, misleading message)
12. ``fields`` / ``meta_fields`` containers that are not dicts (generated)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import keyword
import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from memmap_replay import ReplayBuffer, ReplayError, SchemaError

from catalogue import fast, files_under, raises, is_int, garbage, PATH_TRICKS


# ==== kinds 1-4: names ======================================================================================

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

RESERVED = {"end", "final", "episode_lens"}

names = st.one_of(
    st.sampled_from(PATH_TRICKS), st.text(max_size=70), st.from_regex(r"[A-Za-z][A-Za-z0-9_]{58,68}", fullmatch=True),
    st.sampled_from(sorted(keyword.kwlist)), st.integers(-5, 5), st.none(), st.binary(max_size=3),
    st.tuples(st.text(max_size=2)), st.floats(allow_nan=False),
)


def valid_name(name) -> bool:
    return (isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None and name not in RESERVED
            and not keyword.iskeyword(name))


@fast(70)
@given(name=names, where=st.sampled_from(["fields", "meta_fields"]))
def test_any_field_name_becomes_a_file_inside_the_store_or_is_refused(new_folder, name, where):
    folder = new_folder()
    base = "qq_base_field"
    assume(name != base)
    fields, meta_fields = ({name: "float"}, None) if where == "fields" else ({base: "float"}, {name: "int"})
    if not valid_name(name):
        kind = "field" if where == "fields" else "meta field"
        with raises(SchemaError, match=rf"^{kind} name .*{re.escape(repr(name))}"):
            ReplayBuffer(folder, 2, 3, fields, meta_fields)
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, fields, meta_fields) as buf:
        values = np.array([1.5, -2.0])
        if where == "fields":
            buf.store_episode(**{name: values})
        else:
            buf.store_episode(**{base: values, name: 7})
    assert all(path == "store" or path.startswith("store/") for path in files_under(folder.parent))  # nothing beside it
    sub = "steps" if where == "fields" else "meta"
    assert (folder / sub / f"{name}.npy").is_file()
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        data = reader.get_all_data()
        if where == "fields":
            assert data[name][0].tolist() == [1.5, -2.0]
        else:
            assert data[name].tolist() == [7]


AWKWARD_NAMES = ["con", "nul", "aux", "prn", "lpt1", "com1", "CON", "obs", "OBS", "Obs", "a" * 64, "steps", "meta",
                 "episodes", "priorities", "writer", "lock", "npy", "json"]


def test_legal_but_awkward_names_round_trip_without_colliding(tmp_path):
    fields = {name: ("int64", (), 0) for name in AWKWARD_NAMES}
    meta_fields = {name + "_m": "int" for name in AWKWARD_NAMES[:6]}
    with ReplayBuffer(tmp_path / "awkward", 2, 3, fields, meta_fields) as buf:
        buf.store_episode(**{name: np.arange(2) + i for i, name in enumerate(AWKWARD_NAMES)},
                          **{name: i for i, name in enumerate(meta_fields)})
    with ReplayBuffer.from_folder(tmp_path / "awkward", read_only=True) as reader:
        data = reader.get_all_data()
        for i, name in enumerate(AWKWARD_NAMES):
            assert data[name][0].tolist() == [i, i + 1], name
        for i, name in enumerate(meta_fields):
            assert data[name].tolist() == [i]
    assert sorted(os.listdir(tmp_path / "awkward" / "steps")) == sorted(f"{name}.npy" for name in AWKWARD_NAMES)


# ==== kinds 5-12: field specs ===============================================================================


def numpy_parse(spec):
    """('ok', dtype) / ('type-error', None) / ('other', error) for np.dtype(spec), warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return "ok", np.dtype(spec)
        except TypeError:
            return "type-error", None
        except BaseException as error:  # ValueError, SyntaxError, DeprecationWarning...
            return "other", error


def handled_dtype_spec(spec) -> bool:
    """Specs the library handles today (the others are the cases below)."""
    if isinstance(spec, str) and spec in ("float", "int", "bool", "uint8"):
        return True
    outcome, dtype = numpy_parse(spec)
    if outcome == "other":
        return False
    return not (outcome == "ok" and dtype.kind in "fc" and dtype.itemsize > {"f": 8, "c": 16}[dtype.kind])


DTYPE_OBJECTS = [
    np.float16, np.float32, np.float64, np.int8, np.uint16, np.int64, np.uint64, np.bool_, np.complex64,
    np.complex128, int, float, bool, complex, str, bytes, object, list, dict, type(None),
    np.dtype(">f8"), np.dtype("<i2"), np.dtype("=u4"), np.dtype("|b1"), np.dtype([("a", "f4"), ("b", "i4")]),
    np.dtype(("f4", (2,))), np.dtype("M8[ns]"), np.dtype("m8[s]"), np.dtype("O"), np.dtype("U4"), np.dtype("S3"),
    np.dtype("V2"), torch.float32, torch.int64, torch.bool, "float", "int", "bool", "uint8", "Float", "INT",
    "float32 ", " int", "f4", "<f4", "i8", "?", "e", "p", "P", "c8", "datetime64", "str", "object", "U", "S", "V8",
    "f4,i4", "(2,)f4", "2f4", "()i4", "notadtype", "", "torch.float32", None, 3, 3.5, ["float"], {"float": 1},
]

dtype_specs = st.one_of(st.sampled_from(DTYPE_OBJECTS), st.text(max_size=6)).filter(handled_dtype_spec)


@fast(60)
@given(spec=dtype_specs, wrap=st.sampled_from(["bare", "tuple", "dict"]))
def test_any_dtype_spec_is_refused_up_front_or_works_end_to_end(new_folder, spec, wrap):
    folder = new_folder()
    info = {"bare": spec, "tuple": (spec, (2,)), "dict": {"dtype": spec, "shape": [2]}}[wrap]
    try:
        buf = ReplayBuffer(folder, 2, 3, dict(x=info))
    except SchemaError as error:
        assert re.search(r"^field 'x' must (have a numeric|be a dtype name)", str(error)), str(error)
        assert isinstance(error, ReplayError) and isinstance(error, ValueError)
        assert files_under(folder.parent) == []
        return
    with buf:
        dtype = buf.schema.fields["x"].dtype
        assert dtype.kind in "biufc" and dtype.isnative, dtype
        row = buf.schema.fields["x"].default_row()
        buf.store_episode(x=np.stack([row, row]))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # readable back, through torch too
        data = reader.get_all_data()
        assert data["x"].shape[:2] == (1, 2)
        assert not data["x"].numpy().any()


DTYPE_CASES = [
    pytest.param(",", id="comma-SyntaxError"),
    pytest.param("(-1,)i4", id="negative-subarray-ValueError"),
    pytest.param("0\x7f", id="digit-junk-ValueError"),
    pytest.param("a", id="deprecated-alias"),
]


@pytest.mark.parametrize("spec", DTYPE_CASES)
def test_dtype_strings_numpy_rejects_oddly_are_refused_with_schema_error(new_folder, spec):
    folder = new_folder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with raises(SchemaError, match=r"^field 'x' must have a numeric"):
            ReplayBuffer(folder, 2, 3, dict(x=spec))
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("spec", [
    pytest.param("float128", id="float128"), pytest.param("complex256", id="complex256"),
    pytest.param("g", id="g-longdouble"), pytest.param(np.longdouble, id="np.longdouble"),
])
def test_dtypes_torch_cannot_read_are_refused_up_front(new_folder, spec):
    folder = new_folder()
    try:
        with ReplayBuffer(folder, 2, 3, dict(x=spec)) as buf:
            buf.store_episode(x=np.zeros(2))
            buf.get_all_data()
    except SchemaError as error:
        assert "'x'" in str(error)
        return
    raise AssertionError("accepted: it must be refused, or readable")


shapes = st.one_of(
    st.integers(-3, 5), st.sampled_from([2**32, 2**40, 2**62, 2**70, -2**70]),
    st.lists(st.integers(-2, 4), max_size=4), st.lists(st.integers(-2, 4), max_size=4).map(tuple),
    st.tuples(st.integers(1, 3), st.sampled_from([2**31, 2**40])), st.floats(allow_nan=True), st.text(max_size=3),
    st.none(), st.booleans(), st.tuples(st.booleans()), st.tuples(st.floats(0, 4)),
    st.sampled_from([np.array([2, 3]), np.int8(3), np.uint64(2), range(3), [[2]], {2: 3}, (None,), ("2",),
                     (2, "3"), torch.tensor(2), (np.int64(2), np.int32(1)), (1,) * 40, (2,) * 40]),
)


def legal_shape(shape) -> tuple | None:
    """The shape the library must accept it as, or None if it must refuse it."""
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(is_int(dim) for dim in shape):
        return None
    shape = tuple(int(dim) for dim in shape)
    if any(dim < 1 for dim in shape) or math.prod(shape) * 4 > 2**31:
        return None
    return shape


@fast(60)
@given(shape=shapes)
def test_any_shape_spec_is_a_positive_int_tuple_or_refused(new_folder, shape):
    folder = new_folder()
    legal = legal_shape(shape)
    if legal is None:
        with raises(SchemaError, match=r"^field 'x' must (have a shape|take at most \d+ bytes per row)"):
            ReplayBuffer(folder, 2, 3, dict(x=("float32", shape)))
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, dict(x=("float32", shape))) as buf:
        assert buf.schema.fields["x"].shape == legal
        buf.store_episode(x=np.ones((1, *legal)))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.get_all_data()["x"].shape == (1, 1, *legal)


defaults = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63 - 1, 255, 256, -129]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([65504.0, 65520.0, 3.5e38, 3.5e39, -0.0, 0.5]),
    st.complex_numbers(allow_nan=True, allow_infinity=True), st.text(max_size=3), st.lists(st.floats(), max_size=3),
    st.sampled_from([np.float32(np.nan), np.int64(5), np.uint64(2**64 - 1), np.array(1.0), torch.tensor(1.0),
                     np.bool_(True), np.float16(65504), np.float64(1e39), b"0", Ellipsis, (1,), {0: 1}]),
)

DEFAULT_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int64", "uint64", "bool", "complex64"]


def default_fits(dtype: np.dtype, default) -> bool:
    """Whether the library must accept ``default`` for ``dtype`` (README: stored exactly, floats may round)."""
    if default is None:
        return True
    if isinstance(default, np.generic):
        default = default.item()
    if isinstance(default, list) or not isinstance(default, (bool, int, float, complex)):
        return False
    if isinstance(default, complex):
        if dtype.kind != "c":
            return False
        with np.errstate(all="ignore"):
            return math.isfinite(default.real) and math.isfinite(default.imag) and \
                bool(np.isfinite(np.array(default).astype(dtype)))
    if isinstance(default, float) and not math.isfinite(default):
        return False
    if dtype.kind == "b":
        return default in (0, 1)
    if dtype.kind in "iu":
        if isinstance(default, float) and not default.is_integer():
            return False
        info = np.iinfo(dtype)
        return info.min <= default <= info.max
    with np.errstate(over="ignore"):
        cast = np.array(default).astype(dtype)
    if isinstance(default, (bool, int)):  # an int default must be held exactly
        return bool(np.isfinite(cast)) and int(cast.real) == default
    return bool(np.isfinite(cast))


@fast(80)
@given(dtype=st.sampled_from(DEFAULT_DTYPES), default=defaults)
def test_any_default_is_held_exactly_or_refused(new_folder, dtype, default):
    folder = new_folder()
    dtype = np.dtype(dtype)
    if not default_fits(dtype, default):
        with raises(SchemaError, match=r"^field 'x' (must have a (scalar|finite) default|of dtype \w+ cannot)"):
            ReplayBuffer(folder, 2, 3, dict(base="float", x=(dtype.name, (), default)))
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, dict(base="float", x=(dtype.name, (), default))) as buf:
        buf.store_episode(base=[0.0])  # x takes its default
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # the default survives meta.json
        stored = reader.get_all_data()["x"].numpy()[0, 0]
        value = 0 if default is None else default.item() if isinstance(default, np.generic) else default
        expected = np.array(value).astype(dtype)
        assert stored == expected, (stored, expected)
        if dtype.kind in "iub":
            assert int(stored) == value


def test_list_default_in_a_dict_spec_is_refused_as_a_list(new_folder):
    folder = new_folder()
    with raises(SchemaError, match=r"field 'x' must have a scalar default or None \(got \[1, 2\]\)"):
        ReplayBuffer(folder, 2, 3, dict(x={"dtype": "float", "default": [1, 2]}))


@fast(40)
@given(fields=garbage, meta_fields=garbage)
def test_fields_and_meta_fields_must_be_dicts(new_folder, fields, meta_fields):
    from collections.abc import Mapping
    assume(not (isinstance(fields, Mapping) and fields)
           or not (meta_fields is None or isinstance(meta_fields, Mapping)))
    folder = new_folder()
    if fields is None:
        match = r"^fields are required to create a store"
    elif not isinstance(fields, Mapping) or not fields:
        match = r"^fields must be a non-empty dict of name -> spec.*\(got "
    else:
        match = r"^meta_fields must be a dict of name -> spec or None \(got "
    with raises(SchemaError, match=match):
        ReplayBuffer(folder, 2, 3, fields, meta_fields)
    assert files_under(folder.parent) == []
