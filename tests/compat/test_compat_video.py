"""memmap-replay-buffer 0.2.3's frame helpers (compat/video.py): to_uint8, frames_to_sheet,
trajectory_to_video, and a store's frames numbered by buffer row."""

from __future__ import annotations

import numpy as np
import pytest

from memmap_replay import (DTypeError, IndexRangeError, InvalidDataError, OptionError, frames_to_sheet, to_uint8,
                           trajectory_to_video)
from memmap_replay.compat.video import default_image_field, episode_frames, image_fields

imageio = pytest.importorskip("imageio.v2", reason="the [video] extra")


def test_to_uint8_keeps_uint8_and_scales_floats_from_0_1():
    frames = np.arange(6, dtype=np.uint8)
    assert to_uint8(frames) is frames
    assert to_uint8(np.array([0.0, 0.5, 1.0, 2.0, -1.0, np.nan], dtype=np.float32)).tolist() == [0, 128, 255, 255, 0, 0]
    with pytest.raises(DTypeError, match="got dtype int32"):
        to_uint8(np.zeros(3, dtype=np.int32))


def test_frames_to_sheet_spaces_frames_evenly_in_a_grid():
    frames = np.arange(7, dtype=np.uint8)[:, None, None, None] * np.ones((1, 4, 6, 3), dtype=np.uint8)
    sheet = frames_to_sheet(frames, rows=2, columns=3)
    assert sheet.shape == (8, 18, 3) and sheet.dtype == np.uint8
    # frames 0, 1, 2 / 3, 4, 6 (linspace(0, 6, 6) truncated), read row by row
    assert [int(sheet[row * 4, column * 6, 0]) for row in range(2) for column in range(3)] == [0, 1, 2, 3, 4, 6]
    assert frames_to_sheet(np.zeros((5, 4, 6)), rows=1, columns=5).shape == (4, 30, 3)
    with pytest.raises(InvalidDataError, match=r"shape \(T, H, W\) or \(T, H, W, C\)"):
        frames_to_sheet(np.zeros((4, 6)))
    with pytest.raises(OptionError, match="rows must be a positive int"):
        frames_to_sheet(frames, rows=0)


def read_video(path) -> np.ndarray:
    """Every frame of a video file (T, H, W, 3)."""
    if str(path).endswith(".gif"):
        return np.asarray(imageio.mimread(path))[..., :3]
    with imageio.get_reader(path, format="FFMPEG") as reader:
        return np.stack([reader.get_data(t) for t in range(reader.count_frames())])


# imageio's ffmpeg reader leaves a pipe for the garbage collector when it closes; that ResourceWarning is not
# about the code under test
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("shape, suffix", [((5, 16, 12, 3), ".mp4"), ((4, 3, 16, 12), ".mp4"), ((4, 16, 12), ".gif")])
def test_trajectory_to_video_writes_every_frame_channels_last(tmp_path, shape, suffix):
    pytest.importorskip("imageio_ffmpeg", reason="the [video] extra")
    rng = np.random.default_rng(3)
    frames = rng.random(shape).astype(np.float32) if len(shape) == 3 else rng.integers(0, 256, shape, dtype=np.uint8)
    path = trajectory_to_video(frames, tmp_path / f"out{suffix}", fps=10)
    assert path == tmp_path / f"out{suffix}" and path.stat().st_size > 0
    assert read_video(path).shape == (shape[0], 16, 12, 3)


def test_trajectory_to_video_refuses_bad_frames(tmp_path):
    with pytest.raises(DTypeError, match="to_uint8 takes uint8 frames"):
        trajectory_to_video(np.zeros((2, 4, 4), dtype=np.int64), tmp_path / "x.gif")
    with pytest.raises(OptionError, match="fps must be"):
        trajectory_to_video(np.zeros((2, 4, 4), dtype=np.uint8), tmp_path / "x.gif", fps=0)


@pytest.fixture
def images(make_buffer):
    buffer = make_buffer(fields=dict(image=("uint8", (8, 8, 3)), action="int"), meta_fields=None, max_episodes=3,
                         circular=True)
    for number, length in enumerate((5, 3, 2, 4)):  # the fourth evicts the first, into row 0
        buffer.store_episode(image=np.full((length, 8, 8, 3), number, np.uint8), action=np.zeros(length, np.int32))
    return buffer


def test_episode_frames_are_numbered_by_buffer_row(images):
    store = images.episode_store
    assert image_fields(store) == ["image"] and default_image_field(store) == "image"
    assert episode_frames(store, 0).shape == (4, 8, 8, 3) and episode_frames(store, 0)[0, 0, 0, 0] == 3
    both = episode_frames(store, [1, 0], field="image")
    assert both.shape == (7, 8, 8, 3) and both[0, 0, 0, 0] == 1 and both[-1, 0, 0, 0] == 3
    with pytest.raises(IndexRangeError, match="episode_index 3 out of range"):
        episode_frames(store, [0, 3])
    with pytest.raises(OptionError, match="at least one episode"):
        episode_frames(store, [])
    with pytest.raises(OptionError, match="invalid field name 'nope'"):
        episode_frames(store, 0, field="nope")


def test_the_image_field_must_be_named_when_there_are_several_or_none(make_buffer):
    several = make_buffer("several", fields=dict(image=("uint8", (8, 8, 3)), latent=("float", (4, 4))),
                          meta_fields=None)
    assert image_fields(several.episode_store) == ["image", "latent"]
    with pytest.raises(OptionError, match="multiple image-like fields"):
        default_image_field(several.episode_store)
    with pytest.raises(OptionError, match="no image-like field"):
        default_image_field(make_buffer("none").episode_store)
