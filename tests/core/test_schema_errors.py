"""The error catalogue for ``core/schema.py``: bad field specs, names, defaults and capacities are refused
before anything touches the disk.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import keyword
import re

import pytest

from memmap_replay import OptionError, ReplayBuffer, Schema, SchemaError

from catalogue import (ERRORS_FIELDS as FIELDS, ERRORS_MAX_EPISODES as MAX_EPISODES,
                       ERRORS_MAX_TIMESTEPS as MAX_TIMESTEPS, make_errors_store as make, raises, files_of)


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
    *[pytest.param(one_field(("float", shape)), r"field 'x' must have a shape that is an int or a tuple of ints",
                   id=f"shape-{shape!r}")
      for shape in [2.5, (2.0, 3), "3", (3, None), (True,), [[3]], None]],
    *[pytest.param(one_field(("float", shape)), r"field 'x' must have a shape of positive sizes", id=f"shape-{shape!r}")
      for shape in [0, (3, 0), (-1,), (4, -2)]],
    pytest.param(one_field(("uint8", (2**16, 2**16))), r"field 'x' must take at most 2147483648 bytes per row",
                 id="row-too-large"),
    # spec forms
    *[pytest.param(one_field(spec), r"field 'x' must be a dtype name, \(dtype, shape\) or \(dtype, shape, default\)",
                   id=f"spec-{spec!r}")
      for spec in [3, None, (), ("float", 3, 0.0, "extra")]],
    pytest.param(one_field({"shape": [3]}), r"field 'x' as a dict must have the key 'dtype'",
                 id="spec-dict-without-dtype"),
    # names
    *[pytest.param(one_field("float", name), rf"field name must be a letter .*\(got {re.escape(repr(name))}\)",
                   id=f"name-{name!r}")
      for name in ["../x", "a/b", "", "has space", "1abc", "_x", "a.b", "a-b", "x" * 65, "é"]],
    pytest.param(dict(fields={3: "float"}), r"field name must be a letter .*\(got 3\)", id="name-int"),
    pytest.param(one_field("float", "obs\n"), r"field name must be a letter .*\(got 'obs\\n'\)",
                 id="name-trailing-newline"),
    *[pytest.param(one_field("float", name), rf"field name '{name}' is reserved", id=f"reserved-{name}")
      for name in ["end", "final", "episode_lens", "class", "lambda", "None", "True"]],
    pytest.param(dict(fields=dict(obs="float"), meta_fields={"../m": "int"}), r"meta field name must be a letter",
                 id="meta-name-path"),
    pytest.param(dict(fields=dict(obs="float"), meta_fields={"end": "int"}), r"meta field name 'end' is reserved",
                 id="meta-name-reserved"),
    # defaults
    pytest.param(one_field(("uint8", (), 300)), r"field 'x' of dtype uint8 cannot hold its default 300 "
                                                r"\(it would become 44\)", id="default-300-uint8"),
    pytest.param(one_field(("uint8", (), -1)), r"field 'x' of dtype uint8 cannot hold its default -1",
                 id="default--1-uint8"),
    pytest.param(one_field(("int", (), 0.5)), r"field 'x' of dtype int32 cannot hold its default 0\.5",
                 id="default-0.5-int"),
    pytest.param(one_field(("int", (), 2**40)), r"field 'x' of dtype int32 cannot hold its default 1099511627776",
                 id="default-2**40-int32"),
    pytest.param(one_field(("bool", (), 2)), r"field 'x' of dtype bool cannot hold its default 2", id="default-2-bool"),
    pytest.param(one_field(("float", (), float("nan"))), r"field 'x' must have a finite default \(got nan\)",
                 id="default-nan"),
    pytest.param(one_field(("float", (), float("-inf"))), r"field 'x' must have a finite default \(got -inf\)",
                 id="default-inf"),
    pytest.param(one_field(("float", (), "zero")), r"field 'x' must have a scalar default or None \(got 'zero'\)",
                 id="default-str"),
    pytest.param(one_field(("float", (), [0.0])), r"field 'x' must have a scalar default or None", id="default-list"),
    pytest.param(one_field(("int", (), 1j)), r"field 'x' of dtype int32 cannot have a complex default",
                 id="default-complex-for-int"),
    pytest.param(one_field(("float", (), 1e39)), r"field 'x' of dtype float32 cannot hold its default 1e\+39",
                 id="default-1e39-float32"),
    pytest.param(one_field(("int64", (), 2**70)), r"field 'x' of dtype int64 cannot hold its default",
                 id="default-2**70-int64"),
    pytest.param(one_field(("uint64", (), 2**64)), r"field 'x' of dtype uint64 cannot hold its default",
                 id="default-2**64-uint64"),
    # the schema as a whole
    pytest.param(dict(fields={}), r"fields must be a non-empty dict", id="fields-empty"),
    pytest.param(dict(fields=["obs"]), r"fields must be a non-empty dict", id="fields-list"),
    pytest.param(dict(fields=None), r"fields are required to create a store", id="fields-None"),
    pytest.param(dict(fields=dict(obs="float"), meta_fields=["task"]), r"meta_fields must be a dict",
                 id="meta_fields-list"),
    pytest.param(dict(fields=dict(obs="float", task="int"), meta_fields=dict(task="int")),
                 r"fields and meta_fields must have distinct names \(both have \['task'\]\)", id="overlapping-names"),
    # capacity
    *[pytest.param(dict(fields=FIELDS, **{key: value}), rf"{key} must be a positive int \(got "
                                                        rf"{re.escape(repr(value))}\)", id=f"{key}-{value!r}")
      for key in ["max_episodes", "max_timesteps"] for value in [0, -1, 1.5, "10", True, None]],
    pytest.param(dict(fields=FIELDS, max_steps=0), r"max_steps must be a positive int \(got 0\)", id="max_steps-0"),
    pytest.param(dict(fields=FIELDS, max_steps=10), r"max_steps must be at least max_timesteps \+ 1 = 11 \(got 10\)",
                 id="max_steps-too-small"),
    pytest.param(dict(fields=FIELDS, circular="yes"), r"circular must be True or False \(got 'yes'\)",
                 id="circular-str"),
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
