"""The ``compress`` and ``decompress`` commands: rewrites in place and into a new folder, their reports, refusals
and exit codes (through ``cli.main``; ``sharing/test_recode.py`` tests the rewrite itself)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.cli import EXIT_OK, EXIT_USAGE, main

pytest.importorskip("zstandard")


def make_store(folder) -> np.ndarray:
    images = np.repeat(np.arange(30, dtype=np.uint8).reshape(3, 10, 1, 1, 1), 16, axis=2).repeat(16, axis=3)
    with ReplayBuffer(folder, 5, 12, fields=dict(image=("uint8", (16, 16, 1)), reward="float")) as buffer:
        for episode in images:
            buffer.store_episode(image=episode, reward=np.zeros(10, np.float32))
    return images


def stored(folder) -> np.ndarray:
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return np.stack([episode["image"] for episode in buffer.episodes()])


def codec_of(folder, field="image"):
    return json.loads((folder / "meta.json").read_text())["schema"]["fields"][field].get("codec")


def test_compress_and_decompress_in_place(tmp_path, capsys):
    folder = tmp_path / "s"
    images = make_store(folder)
    assert main(["compress", str(folder), "--level", "5"]) == EXIT_OK
    out = capsys.readouterr().out
    assert re.search(r"compress: .* \(in place\), 3 episodes, 30 rows\n  image: raw -> zstd-5, .*x smaller than raw",
                     out)
    assert codec_of(folder) == {"name": "zstd", "level": 5} and np.array_equal(stored(folder), images)
    assert main(["compress", str(folder), "--field", "image", "--level", "5"]) == EXIT_OK
    assert "nothing changed" in capsys.readouterr().out
    assert main(["decompress", str(folder), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["changed"] and report["fields"]["image"]["after"] == "raw"
    assert codec_of(folder) is None and np.array_equal(stored(folder), images)


def test_into_a_new_folder(tmp_path, capsys):
    folder = tmp_path / "s"
    images = make_store(folder)
    meta = (folder / "meta.json").read_bytes()
    assert main(["compress", str(folder), "--field", "image", "--field", "reward", "--out", str(tmp_path / "new"),
                 "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(tmp_path / "new") and set(report["fields"]) == {"image", "reward"}
    assert (folder / "meta.json").read_bytes() == meta
    assert codec_of(tmp_path / "new", "reward") == {"name": "zstd", "level": 3}
    assert np.array_equal(stored(tmp_path / "new"), images)
    assert main(["compress", str(tmp_path / "new"), "--level", "19", "--out", str(tmp_path / "newer")]) == EXIT_OK
    assert "zstd-3 -> zstd-19" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["compress", "{s}", "--level", "99"], r"field 'image' must have a zstd level from -7 to 22 \(got 99\)"),
    (["compress", "{s}", "--field", "nope"], r"fields has unknown names \['nope'\]"),
    (["compress", "{s}", "--out", "{s}"], r"out must be a new folder"),
    (["decompress", "{s}/absent"], r"no store at .*absent"),
])
def test_refusals(tmp_path, capsys, args, message):
    folder = tmp_path / "s"
    make_store(folder)
    meta = (folder / "meta.json").read_bytes()
    assert main([arg.format(s=folder) for arg in args]) == EXIT_USAGE
    assert re.search(message, capsys.readouterr().err)
    assert (folder / "meta.json").read_bytes() == meta


def test_a_new_level_in_place_is_refused_and_a_writer_blocks(tmp_path, capsys):
    folder = tmp_path / "s"
    make_store(folder)
    assert main(["compress", str(folder)]) == EXIT_OK
    capsys.readouterr()
    assert main(["compress", str(folder), "--level", "9"]) == EXIT_USAGE
    assert re.search(r"stored zstd-3 already: .*--out NEW", capsys.readouterr().err)
    with ReplayBuffer.from_folder(folder) as writer:
        writer.store_episode(image=np.zeros((2, 16, 16, 1), np.uint8), reward=np.zeros(2, np.float32))
        assert main(["decompress", str(folder)]) == EXIT_USAGE
        assert "memmap-replay decompress: error:" in capsys.readouterr().err
    assert codec_of(folder) == {"name": "zstd", "level": 3}
