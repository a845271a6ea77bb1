"""Codecs of compressed fields: a lossless codec per field, named in the schema. Numpy only.

A compressed field's rows are stored one encoded frame per row (``core/encoded.py``). The one codec here is
zstd (``codec="zstd"``, level 3 by default): every frame carries its content size and a checksum of its
content, so a damaged frame is an error, never other bytes. A frame is decoded straight into the batch's
memory, with the GIL released (through zstandard's cffi binding, when cffi is installed; else through its C
binding and one copy), and never past the row's size: a frame that claims more (a decompression bomb) is an
error before anything is written.

The codec package is an extra: ``pip install 'memmap-replay[zstd]'`` (zstandard and cffi). A store whose
fields need it is refused without it, with that command in the message.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import MissingExtraError, SchemaError, UnsupportedFormatError
from .extras import require_extra

__all__ = ["CodecSpec", "FrameError", "ZstdFrames", "parse_codec", "codec_from_json", "frames_of", "frame_bound",
           "require_codecs", "CODEC_NAMES"]

CODEC_NAMES = ("zstd",)
DEFAULT_LEVEL = 3
_CHECKSUM_FLAG = 0x04  # Content_Checksum_flag of a zstd frame header's descriptor (the byte after the magic)
_LEVELS = range(-7, 23)  # zstd's fast levels (-7..-1), its default (0 means 3) and levels 1..22


def frame_bound(row_nbytes: int) -> int:
    """The most bytes a zstd frame of one row takes (zstd's ZSTD_COMPRESSBOUND, plus the frame's checksum): a row
    that does not compress is stored in zstd's raw blocks, a few bytes more than the row."""
    small = ((128 << 10) - row_nbytes) >> 11 if row_nbytes < (128 << 10) else 0
    return row_nbytes + (row_nbytes >> 8) + small + 4


class FrameError(Exception):
    """A frame that does not decode to exactly one row (the column names the field and the row)."""


@dataclass(frozen=True)
class CodecSpec:
    """A field's codec: its name and compression level."""

    name: str = "zstd"
    level: int = DEFAULT_LEVEL

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level}

    def __str__(self) -> str:
        """As messages, ``info`` and the card name it: ``zstd-3``."""
        return f"{self.name}-{self.level}"


def _level(field: str, level: Any) -> int:
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or int(level) not in _LEVELS:
        raise SchemaError(f"field {field!r} must have a zstd level from {_LEVELS.start} to {_LEVELS.stop - 1} "
                          f"(got {level!r}); 3 is the default, 1 the fastest of the usual levels, 19 and up the "
                          f"smallest and slowest")
    return int(level)


def parse_codec(field: str, codec: Any, level: Any = None) -> CodecSpec | None:
    """A field's codec as a user gives it: None or "raw" (no codec), or a codec name, with an optional level."""
    if codec is None or codec == "raw":
        if level is not None:
            raise SchemaError(f"field {field!r} has a level ({level!r}) but no codec; add codec='zstd', or drop level")
        return None
    if codec not in CODEC_NAMES:
        raise SchemaError(f"field {field!r} must have a codec of {list(CODEC_NAMES)} or None (got {codec!r}); codecs "
                          f"are lossless, e.g. dict(dtype='uint8', shape=(84, 84), codec='zstd')")
    return CodecSpec(codec, DEFAULT_LEVEL if level is None else _level(field, level))


def codec_from_json(field: str, data: Any) -> CodecSpec | None:
    """A codec as meta.json holds it: null, or {"name": ..., "level": ...} (other keys ignored)."""
    if data is None:
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
        raise SchemaError(f"field {field!r} has a malformed codec in meta.json (got {data!r}); it must be an object "
                          f"with a name, e.g. {{\"name\": \"zstd\", \"level\": 3}}")
    if data["name"] not in CODEC_NAMES:
        raise UnsupportedFormatError(f"field {field!r} is stored with the codec {data['name']!r}, which this "
                                     f"memmap_replay does not know (it knows {list(CODEC_NAMES)}); upgrade "
                                     f"memmap_replay to read it")
    return CodecSpec(data["name"], _level(field, data.get("level", DEFAULT_LEVEL)))


class ZstdFrames:
    """Encode and decode rows of ``row_nbytes`` bytes as zstd frames (with content size and checksum).
    Contexts are per thread (zstd's are not shared between threads)."""

    def __init__(self, level: int, row_nbytes: int) -> None:
        self.zstd = require_extra("zstandard", "zstd", "a field with codec='zstd'")
        self.level, self.row_nbytes = level, row_nbytes
        try:  # the cffi binding decodes into a given buffer
            from zstandard import _cffi  # type: ignore[attr-defined]  # (the package's own binding, untyped)
            self._ffi, self._lib = _cffi.ffi, _cffi.lib
        except ImportError:  # (no cffi: the C binding, and one copy per frame)
            self._ffi = self._lib = None
        self._local = threading.local()

    def _contexts(self) -> threading.local:
        local = self._local
        if not hasattr(local, "compressor"):
            local.compressor = self.zstd.ZstdCompressor(level=self.level, write_checksum=True, write_content_size=True)
            local.decompressor = self.zstd.ZstdDecompressor()
            local.dctx = None if self._lib is None else self._ffi.gc(self._lib.ZSTD_createDCtx(),
                                                                    self._lib.ZSTD_freeDCtx)
        return local

    def encode(self, row: np.ndarray) -> bytes:
        """One row (C-contiguous) as a frame."""
        encoded: bytes = self._contexts().compressor.compress(row)
        return encoded

    def decode_into(self, frame: np.ndarray, out: np.ndarray) -> None:
        """Decode ``frame`` (uint8) into ``out`` (C-contiguous and writable, ``row_nbytes`` bytes)."""
        local, size = self._contexts(), self.row_nbytes
        if len(frame) < 6 or not frame[4] & _CHECKSUM_FLAG:  # (the frame header's descriptor byte)
            raise FrameError("it does not carry a checksum of its content (every frame the library writes does)")
        if self._lib is not None:
            lib, ffi = self._lib, self._ffi
            source = ffi.from_buffer(frame)
            claimed = lib.ZSTD_getFrameContentSize(source, len(frame))
            if claimed != size:
                raise FrameError(f"its header claims {claimed} bytes (or none), not the row's {size}")
            if lib.ZSTD_findFrameCompressedSize(source, len(frame)) != len(frame):
                raise FrameError("it is not exactly one frame (bytes of another follow, or it is cut short)")
            written = lib.ZSTD_decompressDCtx(local.dctx, ffi.from_buffer(out, require_writable=True), size,
                                              source, len(frame))
            if lib.ZSTD_isError(written):
                raise FrameError(self._ffi.string(lib.ZSTD_getErrorName(written)).decode("ascii", "replace"))
            if written != size:
                raise FrameError(f"it decodes to {written} bytes, not the row's {size}")
            return
        try:
            claimed = self.zstd.frame_content_size(frame)  # checked before zstandard allocates what it claims
            if claimed != size:
                raise FrameError(f"its header claims {claimed} bytes, not the row's {size}")
            stream = local.decompressor.decompressobj()
            data = stream.decompress(frame)
        except self.zstd.ZstdError as error:
            raise FrameError(str(error)) from None
        if len(data) != size or not stream.eof or stream.unused_data:
            raise FrameError(f"it decodes to {len(data)} bytes{'' if stream.eof else ' and is cut short'}"
                             f"{', followed by other bytes' if stream.unused_data else ''}, not to one row of {size}")
        out.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)


def frames_of(codec: CodecSpec, row_nbytes: int) -> ZstdFrames:
    """The encoder/decoder of a field's codec (MissingExtraError without the codec's package)."""
    if codec.name != "zstd":  # pragma: no cover - CodecSpec names are checked when parsed
        raise MissingExtraError(f"no codec {codec.name!r}")
    return ZstdFrames(codec.level, row_nbytes)


def require_codecs(schema: Any) -> None:
    """Raise MissingExtraError, naming the pip extra, if a compressed field of ``schema`` needs a package this
    environment lacks (a buffer refuses to open or create such a store, rather than fail at its first read)."""
    for spec in schema.fields.values():
        if spec.codec is not None:
            require_extra("zstandard", "zstd", f"the field {spec.name!r}, compressed with {spec.codec.name}")
