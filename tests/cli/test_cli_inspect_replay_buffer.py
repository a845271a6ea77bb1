"""``inspect-replay-buffer`` (cli/inspect_replay_buffer.py): memmap-replay-buffer 0.2.3's command and flags, as
``memmap_replay.inspect_replay_buffer(argv)`` and as a ``memmap-replay`` subcommand."""

from __future__ import annotations

import os

import numpy as np
import pytest

from memmap_replay import inspect_replay_buffer
from memmap_replay.cli import EXIT_OK, EXIT_USAGE, main

imageio = pytest.importorskip("imageio.v2", reason="the [video] extra")
pytest.importorskip("imageio_ffmpeg", reason="the [video] extra")
# imageio's ffmpeg reader leaves a pipe for the garbage collector when it closes; that ResourceWarning is not
# about the code under test
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def frames_of(path) -> int:
    with imageio.get_reader(path, format="FFMPEG") as reader:
        return reader.count_frames()


@pytest.fixture
def cameras(make_buffer):
    """Two image fields; episodes of 5 and 3 steps."""
    buffer = make_buffer(fields=dict(image=("uint8", (8, 8, 3)), wrist=("uint8", (8, 4, 3)), action="int"),
                         meta_fields=None, max_timesteps=6)
    rng = np.random.default_rng(0)
    for length in (5, 3):
        buffer.store_episode(image=rng.integers(0, 256, (length, 8, 8, 3), dtype=np.uint8),
                             wrist=rng.integers(0, 256, (length, 8, 4, 3), dtype=np.uint8),
                             action=np.zeros(length, np.int32))
    return buffer


def test_one_field_one_episode_with_a_sheet(cameras, tmp_path, capsys):
    out, sheet = tmp_path / "one.mp4", tmp_path / "one.png"
    inspect_replay_buffer([str(cameras.folder), "--episode", "1", "--field", "image", "--fps", "5", "--output",
                           str(out), "--sheet", str(sheet), "--rows", "2", "--columns", "3"])
    assert frames_of(out) == 3 and imageio.imread(sheet).shape == (16, 24, 3)
    assert capsys.readouterr().out.count("wrote ") == 2


def test_several_fields_and_episodes_get_one_file_each(cameras, tmp_path):
    inspect_replay_buffer([str(cameras.folder), "-e", "0,1", "-o", str(tmp_path / "multi.mp4"), "--scale", "2"])
    assert frames_of(tmp_path / "multi.image.mp4") == 8 and frames_of(tmp_path / "multi.wrist.mp4") == 8
    with imageio.get_reader(tmp_path / "multi.wrist.mp4", format="FFMPEG") as reader:
        assert reader.get_data(0).shape == (4, 2, 3)


def test_the_default_output_is_named_after_the_folder(cameras, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inspect_replay_buffer([str(cameras.folder), "-f", "image", "-e", "0,1"])
    assert frames_of(tmp_path / f"{cameras.folder.name}-episode-0-1.mp4") == 8


@pytest.mark.parametrize("arguments, message", [
    (["--episode", "0,x"], "invalid episode list"),
    (["--episode", ""], "expected at least one episode index"),
    (["--episode", "9"], "episode_index 9 out of range"),
    (["--field", "image,nonexistent"], "invalid field name 'nonexistent'"),
    (["--field", ""], "expected at least one field name"),
    (["--scale", "0"], "--scale must be at least 1"),
    (["--serve"], "replaced by the viewer, 'memmap-replay view FOLDER'"),
])
def test_usage_errors_exit_through_argparse(cameras, arguments, message, capsys):
    with pytest.raises(SystemExit, match="2"):
        inspect_replay_buffer([str(cameras.folder), *arguments])
    assert message in capsys.readouterr().err


def test_a_folder_of_0_2_3_is_pointed_to_the_import(tmp_path, capsys):
    (tmp_path / "metadata.pkl").write_bytes(b"")
    with pytest.raises(SystemExit, match="2"):
        inspect_replay_buffer([str(tmp_path)])
    assert "convert it first with 'memmap-replay import'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        inspect_replay_buffer([str(tmp_path / "missing")])


def test_the_subcommand_returns_exit_codes(cameras, tmp_path, capsys):
    out = tmp_path / "sub.mp4"
    assert main(["inspect-replay-buffer", str(cameras.folder), "-f", "wrist", "-o", str(out)]) == EXIT_OK
    assert frames_of(out) == 5
    assert main(["inspect-replay-buffer", str(cameras.folder), "-e", "7"]) == EXIT_USAGE
    assert "memmap-replay inspect-replay-buffer: error: episode_index 7 out of range" in capsys.readouterr().err
    assert not any(name.endswith(".mp4") for name in os.listdir(cameras.folder))
