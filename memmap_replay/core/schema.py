"""Field specifications: parsing the user's shorthands, validating them, and their JSON form.

A field is described by a dtype, a per-step (or per-episode) shape and an optional default. The seed
package's shorthands are accepted::

    'float'                       -> float32, shape ()
    ('int', 2)                    -> int32,   shape (2,)
    ('float', (3, 16, 16), 0.)    -> float32, shape (3, 16, 16), default 0.0
    'uint8', ('float16', 4), ...  -> any numeric numpy dtype name

as well as ``FieldSpec`` objects and dicts ``{"dtype", "shape", "default", "codec", "level"}``: the dict form
also takes a lossless codec for a step field, ``dict(dtype='uint8', shape=(84, 84), codec='zstd', level=3)``
(``core/codecs.py``). ``meta.json`` holds the same dicts, with the codec as ``{"name": "zstd", "level": 3}``.
"""

from __future__ import annotations

import keyword
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, TypeGuard

import numpy as np

from ..errors import SchemaError
from .codecs import CodecSpec, codec_from_json, parse_codec

__all__ = ["FieldSpec", "Schema", "parse_field", "RESERVED_NAMES", "OBSERVATION_PREFIXES", "observation_like"]

# a step field named so is an observation (transitions and TorchRL's layout give it a next_<field>)
OBSERVATION_PREFIXES = ("obs", "state", "image", "pixel")


def observation_like(name: str) -> bool:
    """Whether a field is an observation by its name (``obs*``, ``state*``, ``image*``, ``pixel*``)."""
    return name.lower().startswith(OBSERVATION_PREFIXES)

# the seed package's short names; any other numpy numeric dtype name is accepted as well
_SHORT_DTYPES = {"float": "float32", "int": "int32", "bool": "bool", "uint8": "uint8"}
_ALLOWED_KINDS = "biufc"
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
# keyword arguments of the write API, and a key that get_all_data adds
RESERVED_NAMES = frozenset({"end", "final", "episode_lens"})
_MAX_ROW_BYTES = 1 << 31
_MAX_FLOAT_BYTES = {"f": 8, "c": 16}  # float128 / complex256 (long double) have no torch dtype


def _check_name(name: Any, kind: str) -> str:
    """A field name must be a short identifier-like string: it becomes a file name."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise SchemaError(
            f"{kind} name must be a letter followed by up to 63 letters, digits or underscores "
            f"(it becomes a file name) (got {name!r}); rename the field"
        )
    if name in RESERVED_NAMES or keyword.iskeyword(name):
        raise SchemaError(
            f"{kind} name {name!r} is reserved (reserved: {sorted(RESERVED_NAMES)} and Python keywords); "
            f"rename the field"
        )
    return name


def _parse_dtype(name: str, dtype: Any) -> np.dtype:
    if isinstance(dtype, str) and dtype in _SHORT_DTYPES:
        dtype = _SHORT_DTYPES[dtype]
    try:
        with warnings.catch_warnings():  # a deprecated alias (e.g. 'a') is refused, not let through
            warnings.simplefilter("error")
            parsed: np.dtype = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError, Warning) as error:  # numpy's parser raises all of these
        raise SchemaError(
            f"field {name!r} must have a numeric dtype such as 'float', 'int', 'bool', 'uint8' or "
            f"'float16' (got {dtype!r}: {error})"
        ) from None
    if parsed.kind not in _ALLOWED_KINDS or parsed.fields is not None or parsed.subdtype is not None:
        raise SchemaError(
            f"field {name!r} must have a numeric or bool dtype (got {parsed}); strings, objects and "
            f"structured dtypes cannot be stored"
        )
    if parsed.kind in "fc" and parsed.itemsize > _MAX_FLOAT_BYTES[parsed.kind]:
        raise SchemaError(
            f"field {name!r} must have a numeric dtype of at most 64-bit floats (128-bit complex) "
            f"(got {parsed}, numpy's long double, which torch cannot read); use 'float64' or 'complex128'"
        )
    if not parsed.isnative:
        parsed = parsed.newbyteorder("=")
    return parsed


def _parse_shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) for dim in shape
    ):
        raise SchemaError(f"field {name!r} must have a shape that is an int or a tuple of ints (got {shape!r})")
    dims = tuple(int(dim) for dim in shape)
    if any(dim < 1 for dim in dims):
        raise SchemaError(f"field {name!r} must have a shape of positive sizes (got {dims})")
    return dims


def _parse_default(name: str, dtype: np.dtype, default: Any) -> bool | int | float | complex | None:
    if default is None:
        return None
    if isinstance(default, np.generic):
        default = default.item()
    if not isinstance(default, (bool, int, float, complex)):
        raise SchemaError(f"field {name!r} must have a scalar default or None (got {default!r})")
    scalar: bool | int | float | complex = default
    if isinstance(default, complex) and dtype.kind != "c":
        raise SchemaError(f"field {name!r} of dtype {dtype} cannot have a complex default (got {default!r})")
    if isinstance(default, float) and not math.isfinite(default):
        raise SchemaError(f"field {name!r} must have a finite default (got {default!r}); use a sentinel value")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.array(default).astype(dtype).item()
    except OverflowError:
        cast = None
    if dtype.kind in "biu" or isinstance(default, (bool, int)):
        exact = cast is not None and cast == default
    else:  # a float default may round to the float dtype, as stored floats do
        exact = cast is not None and bool(np.isfinite(cast))
    if not exact:
        raise SchemaError(
            f"field {name!r} of dtype {dtype} cannot hold its default {default!r} "
            f"(it would become {cast!r}); pick a default the dtype can hold"
        )
    return scalar


@dataclass(frozen=True)
class FieldSpec:
    """One field: its name, numpy dtype, shape per row, default (None means zeros) and codec (None: raw)."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...] = ()
    default: bool | int | float | complex | None = None
    codec: CodecSpec | None = None

    @property
    def row_nbytes(self) -> int:
        return int(self.dtype.itemsize * math.prod(self.shape))

    def default_row(self) -> np.ndarray:
        return np.full(self.shape, 0 if self.default is None else self.default, dtype=self.dtype)

    def to_json(self) -> dict[str, Any]:
        default: bool | int | float | complex | list[float] | None = self.default
        if isinstance(default, complex):
            default = [default.real, default.imag]
        data: dict[str, Any] = {"dtype": self.dtype.name, "shape": list(self.shape), "default": default}
        if self.codec is not None:
            data["codec"] = self.codec.to_json()
        return data

    def describe(self) -> str:
        """In words, as messages name it: ``uint8 (84, 84) default None codec zstd-3``."""
        text = f"{self.dtype.name} {self.shape} default {self.default!r}"
        return text if self.codec is None else f"{text} codec {self.codec}"


def _is_json_complex(value: Any) -> TypeGuard[list[float]]:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(part, (int, float)) and not isinstance(part, bool) for part in value))


_DICT_KEYS = ("dtype", "shape", "default", "codec", "level")


def _parse_codec(name: str, info: Mapping[str, Any], kind: str, stored: bool) -> CodecSpec | None:
    if stored:  # meta.json's form: {"name", "level"}
        codec = codec_from_json(name, info.get("codec"))
    else:
        codec = parse_codec(name, info.get("codec"), info.get("level"))
    if codec is not None and kind != "field":
        raise SchemaError(f"{kind} {name!r} cannot have a codec (got {info.get('codec')!r}): only step fields are "
                          f"compressed (one value per episode is small); drop codec=")
    return codec


def parse_field(name: str, info: Any, *, kind: str = "field", stored: bool = False) -> FieldSpec:
    """Parse one field description (shorthand, dict or FieldSpec) into a FieldSpec. ``stored``: a dict of
    meta.json, whose keys this version does not know are ignored (as the format asks of readers); a user's dict
    with an unknown key is refused."""
    _check_name(name, kind)
    codec = None
    if isinstance(info, FieldSpec):
        codec = info.codec
        info = (info.dtype, info.shape, info.default)
    if isinstance(info, Mapping):
        unknown = sorted(map(str, set(info) - set(_DICT_KEYS)))
        if "dtype" not in info or (unknown and not stored):
            raise SchemaError(
                f"{kind} {name!r} as a dict must have the key 'dtype' and may have {list(_DICT_KEYS[1:])} "
                f"(got keys {sorted(map(str, info))}"
                f"{f'; unknown: {unknown}' if unknown and 'dtype' in info else ''})"
            )
        codec = _parse_codec(name, info, kind, stored)
        default = info.get("default")
        if _is_json_complex(default) and _parse_dtype(name, info["dtype"]).kind == "c":
            default = complex(*default)  # meta.json's form of a complex default: [real, imag]
        info = (info["dtype"], info.get("shape", ()), default)
    if isinstance(info, (str, np.dtype, type)):
        info = (info,)
    if not isinstance(info, (tuple, list)) or not 1 <= len(info) <= 3:
        raise SchemaError(
            f"field {name!r} must be a dtype name, (dtype, shape) or (dtype, shape, default) "
            f"(got {info!r}); for example ('float', (3, 16, 16), 0.)"
        )
    dtype = _parse_dtype(name, info[0])
    shape = _parse_shape(name, info[1]) if len(info) > 1 else ()
    default = _parse_default(name, dtype, info[2]) if len(info) > 2 else None
    spec = FieldSpec(name, dtype, shape, default, codec)
    if spec.row_nbytes > _MAX_ROW_BYTES:
        raise SchemaError(f"field {name!r} must take at most {_MAX_ROW_BYTES} bytes per row (got {spec.row_nbytes})")
    return spec


@dataclass(frozen=True)
class Schema:
    """The step fields (one row per timestep) and meta fields (one row per episode) of a store."""

    fields: Mapping[str, FieldSpec]
    meta_fields: Mapping[str, FieldSpec]

    @classmethod
    def parse(cls, fields: Any, meta_fields: Any = None, *, stored: bool = False) -> "Schema":
        if not isinstance(fields, Mapping) or not fields:
            raise SchemaError(
                f"fields must be a non-empty dict of name -> spec, e.g. dict(state=('float', 4)) (got {fields!r})"
            )
        if meta_fields is None:
            meta_fields = {}
        if not isinstance(meta_fields, Mapping):
            raise SchemaError(f"meta_fields must be a dict of name -> spec or None (got {meta_fields!r})")
        shared = set(fields) & set(meta_fields)
        if shared:
            raise SchemaError(f"fields and meta_fields must have distinct names (both have {sorted(shared)})")
        return cls(
            {name: parse_field(name, info, stored=stored) for name, info in fields.items()},
            {name: parse_field(name, info, kind="meta field", stored=stored) for name, info in meta_fields.items()},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fields": {name: spec.to_json() for name, spec in self.fields.items()},
            "meta_fields": {name: spec.to_json() for name, spec in self.meta_fields.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> "Schema":
        if not isinstance(data, Mapping) or not isinstance(data.get("fields"), Mapping):
            raise SchemaError(f"a schema must be a JSON object with 'fields' and 'meta_fields' (got {data!r})")
        return cls.parse(data["fields"], data.get("meta_fields") or {}, stored=True)

    @property
    def encoded(self) -> dict[str, FieldSpec]:
        """The step fields stored with a codec."""
        return {name: spec for name, spec in self.fields.items() if spec.codec is not None}

    def differences(self, other: "Schema") -> list[str]:
        """Plain-words list of what differs between two schemas (empty when they are equal)."""
        lines = []
        for label, mine, theirs in (("field", self.fields, other.fields),
                                    ("meta field", self.meta_fields, other.meta_fields)):
            for name in sorted(set(mine) | set(theirs)):
                a, b = mine.get(name), theirs.get(name)
                if a != b:
                    def describe(s: FieldSpec | None) -> str:
                        return "absent" if s is None else s.describe()
                    lines.append(f"{label} {name!r}: stored {describe(a)}, asked for {describe(b)}")
        return lines
