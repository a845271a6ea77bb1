"""Codecs (core/codecs.py): a field's codec as users give it and as meta.json holds it; zstd frames decode to
exactly one row, through either binding, and anything else is a FrameError (never more bytes than a row)."""

import numpy as np
import pytest

from memmap_replay import MissingExtraError, SchemaError, UnsupportedFormatError
from memmap_replay.core import codecs
from memmap_replay.core.codecs import CodecSpec, FrameError, codec_from_json, parse_codec

zstandard = pytest.importorskip("zstandard", reason="the zstd codec needs the zstd extra")


def test_a_codec_as_users_give_it():
    assert parse_codec("image", None) is None and parse_codec("image", "raw") is None
    assert parse_codec("image", "zstd") == CodecSpec("zstd", 3)
    assert parse_codec("image", "zstd", 19) == CodecSpec("zstd", 19)
    assert parse_codec("image", "zstd", -5).to_json() == {"name": "zstd", "level": -5}


@pytest.mark.parametrize("codec, level, match", [
    ("lz4", None, r"field 'image' must have a codec of \['zstd'\] or None \(got 'lz4'\)"),
    ("zstd", 23, r"field 'image' must have a zstd level from -7 to 22 \(got 23\)"),
    ("zstd", 2.0, r"must have a zstd level .*\(got 2\.0\)"),
    ("zstd", True, r"must have a zstd level .*\(got True\)"),
    (None, 3, r"field 'image' has a level \(3\) but no codec; add codec='zstd'"),
])
def test_a_codec_users_get_wrong_is_refused(codec, level, match):
    with pytest.raises(SchemaError, match=match):
        parse_codec("image", codec, level)


def test_a_codec_as_meta_json_holds_it():
    assert codec_from_json("image", None) is None
    assert codec_from_json("image", {"name": "zstd", "level": 9, "future": 1}) == CodecSpec("zstd", 9)
    with pytest.raises(UnsupportedFormatError, match=r"stored with the codec 'brotli'.*upgrade memmap_replay"):
        codec_from_json("image", {"name": "brotli"})
    with pytest.raises(SchemaError, match=r"malformed codec in meta.json"):
        codec_from_json("image", "zstd")


@pytest.fixture(params=["cffi", "c"])
def frames(request):
    made = codecs.ZstdFrames(3, 4096)
    if request.param == "c":
        made._lib = made._ffi = None
    elif made._lib is None:
        pytest.skip("zstandard's cffi binding needs cffi: pip install 'memmap-replay[zstd]'")
    return made


def test_a_row_round_trips_in_place(frames):
    row = np.tile(np.arange(256, dtype=np.uint8), 16)
    frame = np.frombuffer(frames.encode(row), np.uint8)
    assert len(frame) < 400
    out = np.zeros(4096, np.uint8)
    frames.decode_into(frame, out)
    np.testing.assert_array_equal(out, row)


def damaged(frames):
    row = np.tile(np.arange(256, dtype=np.uint8), 16)
    frame = bytearray(frames.encode(row))
    flipped = frame.copy()
    flipped[len(flipped) // 2] ^= 0xFF
    bigger = zstandard.ZstdCompressor(write_content_size=True).compress(np.zeros(1 << 24, np.uint8))
    smaller = zstandard.ZstdCompressor(write_content_size=True).compress(np.zeros(100, np.uint8))
    unchecked = zstandard.ZstdCompressor(write_checksum=False, write_content_size=True).compress(row)
    unsized = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress(row)
    return {"flipped": bytes(flipped), "cut": bytes(frame[:-5]), "two frames": bytes(frame + frame),
            "trailing": bytes(frame) + b"junk", "16 MB claimed": bigger, "too short": smaller, "empty": b"",
            "not zstd": b"\x00" * 40, "no checksum": unchecked, "no content size": unsized}


@pytest.mark.parametrize("kind", ["flipped", "cut", "two frames", "trailing", "16 MB claimed", "too short", "empty",
                                  "not zstd", "no checksum", "no content size"])
def test_a_damaged_frame_is_a_frame_error_and_writes_at_most_a_row(frames, kind):
    out = np.zeros(4096 + 64, np.uint8)
    with pytest.raises(FrameError, match=r"."):
        frames.decode_into(np.frombuffer(damaged(frames)[kind], np.uint8), out[:4096])
    assert not out[4096:].any()


def test_without_zstandard_the_error_names_the_extra(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'memmap-replay\[zstd\]'"):
        codecs.ZstdFrames(3, 10)
