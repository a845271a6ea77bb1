"""Schema: the seed's shorthands, numpy dtype names, validation and the JSON round trip."""

import numpy as np
import pytest

from memmap_replay import FieldSpec, Schema, SchemaError
from memmap_replay.core.schema import parse_field


@pytest.mark.parametrize("info, dtype, shape, default", [
    ("float", np.float32, (), None),
    ("int", np.int32, (), None),
    ("bool", np.bool_, (), None),
    ("uint8", np.uint8, (), None),
    (("int", 2), np.int32, (2,), None),
    (("float", (3, 16, 16), 0.0), np.float32, (3, 16, 16), 0.0),
    (("float16", [4]), np.float16, (4,), None),
    (("int64", (), -5), np.int64, (), -5),
    ("complex64", np.complex64, (), None),
    (np.dtype(">f8"), np.float64, (), None),
    ({"dtype": "uint8", "shape": [2, 2], "default": 3}, np.uint8, (2, 2), 3),
    (FieldSpec("x", np.dtype("int16"), (5,), 1), np.int16, (5,), 1),
])
def test_shorthands(info, dtype, shape, default):
    spec = parse_field("x", info)
    assert spec.dtype == np.dtype(dtype) and spec.dtype.isnative
    assert spec.shape == shape and spec.default == default


@pytest.mark.parametrize("info, match", [
    ("str", "numeric"), ("object", "numeric"), ("datetime64[s]", "numeric"), ("nonsense", "numeric dtype"),
    (("float", (0, 3)), "positive"), (("float", (-1,)), "positive"), (("float", "3"), "shape"),
    (("float", (2.0,)), "shape"), (("float", True), "shape"), (("uint8", (), 300), "cannot hold"),
    (("int", (), 0.5), "cannot hold"), (("float", (), float("nan")), "finite"), (("float", (), "0"), "scalar"),
    (("float", (), 1, 2), "dtype name"), ({"type": "float"}, "keys"), (3, "dtype name"),
])
def test_bad_specs(info, match):
    with pytest.raises(SchemaError, match=match):
        parse_field("x", info)


@pytest.mark.parametrize("name", ["../x", "a/b", "", "has space", "1abc", "_private", "end", "final",
                                  "episode_lens", "class", "x" * 65, 3, None])
def test_bad_names(name):
    with pytest.raises(SchemaError, match="name"):
        parse_field(name, "float")


def test_schema_json_round_trip_and_differences():
    schema = Schema.parse(dict(a=("float", (3,), 0.5), b=("complex64", 2, 1 + 2j)), dict(t="int"))
    again = Schema.from_json(schema.to_json())
    assert again == schema
    other = Schema.parse(dict(a=("float", (4,), 0.5), b=("complex64", 2, 1 + 2j)), dict())
    lines = schema.differences(other)
    assert any("field 'a'" in line and "(3,)" in line and "(4,)" in line for line in lines)
    assert any("meta field 't'" in line and "absent" in line for line in lines)


def test_fields_and_meta_fields_must_be_distinct_and_present():
    with pytest.raises(SchemaError, match="distinct"):
        Schema.parse(dict(a="float"), dict(a="int"))
    with pytest.raises(SchemaError, match="non-empty"):
        Schema.parse({})
    with pytest.raises(SchemaError, match="meta_fields must be"):
        Schema.parse(dict(a="float"), ["b"])


def test_a_field_dict_takes_a_codec_and_meta_json_keeps_it():
    from memmap_replay.core.codecs import CodecSpec
    schema = Schema.parse(dict(image=dict(dtype="uint8", shape=(8, 8), codec="zstd", level=5), action=("int", ())))
    assert schema.fields["image"].codec == CodecSpec("zstd", 5) and schema.fields["action"].codec is None
    assert list(schema.encoded) == ["image"]
    stored = schema.to_json()
    assert stored["fields"]["image"]["codec"] == {"name": "zstd", "level": 5}
    assert "codec" not in stored["fields"]["action"]  # a raw field's JSON is as it was before codecs
    assert Schema.from_json(stored) == schema
    stored["fields"]["image"]["future_key"] = 1  # a newer writer's key: ignored when read
    assert Schema.from_json(stored) == schema
    raw = Schema.parse(dict(image=dict(dtype="uint8", shape=(8, 8)), action=("int", ())))
    assert any("codec zstd-5" in line for line in raw.differences(schema))
    assert parse_field("image", schema.fields["image"]).codec == CodecSpec("zstd", 5)  # a FieldSpec keeps it


@pytest.mark.parametrize("info, kind, match", [
    (dict(dtype="uint8", shape=(2,), codec="zstd", bogus=1), "field",
     r"field 'x' as a dict must have the key 'dtype' and may have \['shape', 'default', 'codec', 'level'\] "
     r"\(got keys \['bogus', 'codec', 'dtype', 'shape'\]; unknown: \['bogus'\]\)"),
    (dict(dtype="uint8", shap=(2,)), "field", r"unknown: \['shap'\]"),
    (dict(dtype="int", codec="zstd"), "meta field", r"meta field 'x' cannot have a codec \(got 'zstd'\)"),
])
def test_a_field_dict_with_a_key_it_does_not_take_is_refused(info, kind, match):
    with pytest.raises(SchemaError, match=match):
        parse_field("x", info, kind=kind)
