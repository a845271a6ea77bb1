"""memmap-replay-buffer 0.2.3's frame helpers: ``to_uint8``, ``frames_to_sheet``, ``trajectory_to_video``,
and what its ``inspect-replay-buffer`` command reads (``image_fields``, ``episode_frames``).

Plain arrays in, as there: ``frames`` is (T, H, W, C) or (T, H, W) (and (T, C, H, W) for a video), uint8
or float in [0, 1]. Values become pixels through ``sharing.images`` (clipped, NaN as 0); a video is
written by imageio (``pip install 'memmap-replay[video]'``). For a store's image field with labels,
frame stacks and bounded memory, use ``memmap_replay.contact_sheet`` / ``write_video`` instead.

Episodes here are numbered as 0.2.3 numbers them: by the buffer row (slot) holding the episode, in
``[0, num_episodes)``; a slot with no live episode is an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.extras import require_extra
from ..core.options import integer, number, short
from ..core.store import EpisodeStore
from ..errors import DTypeError, IndexRangeError, InvalidDataError, OptionError
from ..sharing.images import channels_last
from ..sharing.images import to_uint8 as _pixels

__all__ = ["to_uint8", "frames_to_sheet", "trajectory_to_video", "image_fields", "default_image_field",
           "episode_frames"]

_CHANNELS = (1, 3, 4)
_FFMPEG_SUFFIXES = (".mp4", ".mkv", ".mov")


def to_uint8(frames: Any) -> np.ndarray:
    """``frames`` as uint8: uint8 as it is, floats in [0, 1] scaled to 0..255 (clipped, rounded to the
    nearest, NaN as 0); any other dtype is a ``DTypeError`` (a TypeError)."""
    frames = np.asarray(frames)
    if frames.dtype == np.uint8:
        return frames
    if frames.dtype.kind != "f":
        raise DTypeError(f"to_uint8 takes uint8 frames or float frames in [0, 1] (got dtype {frames.dtype}); "
                         f"scale other values to [0, 1] first, e.g. frames / frames.max()")
    return _pixels(frames, (0.0, 1.0))


def _frames(frames: Any, what: str) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim not in (3, 4) or 0 in frames.shape:
        raise InvalidDataError(f"{what} takes frames of shape (T, H, W) or (T, H, W, C) with T >= 1 "
                               f"(got shape {frames.shape})")
    return frames


def frames_to_sheet(frames: Any, rows: int = 2, columns: int = 5) -> np.ndarray:
    """``rows * columns`` frames, evenly spaced from the first to the last (repeated when there are fewer),
    in a grid (rows * H, columns * W, C) of the frames' dtype; (T, H, W) frames become 3 gray channels."""
    frames = _frames(frames, "frames_to_sheet")
    rows, columns = integer(rows, "rows", low=1), integer(columns, "columns", low=1)
    if frames.ndim == 3:
        frames = np.repeat(channels_last(frames, "HW"), 3, axis=-1)
    picked = frames[np.linspace(0, len(frames) - 1, rows * columns).astype(np.int64)]
    _, height, width, channels = picked.shape
    return picked.reshape(rows, columns, height, width, channels).swapaxes(1, 2).reshape(
        rows * height, columns * width, channels)


def trajectory_to_video(frames: Any, path: str | os.PathLike, fps: int = 30, **kwargs: Any) -> Path:
    """Write ``frames`` as a video or animated image, its format from the suffix (``.mp4`` needs
    imageio-ffmpeg, ``.gif`` pillow); returns the path. Frames are (T, H, W, C), (T, C, H, W) (C in 1, 3, 4:
    moved last) or (T, H, W) (gray), uint8 or float in [0, 1]. ``kwargs`` go to ``imageio.mimwrite``."""
    frames = to_uint8(_frames(frames, "trajectory_to_video"))
    rate = number(fps, "fps", low=0, high=1000, low_open=True)
    if frames.ndim == 3:
        frames = np.repeat(channels_last(frames, "HW"), 3, axis=-1)
    elif frames.shape[1] in _CHANNELS and frames.shape[-1] not in _CHANNELS:
        frames = channels_last(frames, "CHW")
    path = Path(path)
    if path.suffix.lower() == ".gif":
        kwargs.setdefault("duration", 1000.0 / rate)
    else:
        kwargs.setdefault("fps", rate)
        if path.suffix.lower() in _FFMPEG_SUFFIXES:
            kwargs.setdefault("macro_block_size", None)  # no resizing to multiples of 16
    imageio = require_extra("imageio", "video", "trajectory_to_video")
    imageio.mimwrite(str(path), np.ascontiguousarray(frames), **kwargs)
    return path


# ---- a store's frames, numbered by slot as 0.2.3 numbers them ------------------------------------------


def image_fields(store: EpisodeStore) -> list[str]:
    """The step fields that look like images (two or more dimensions), in declaration order."""
    return [name for name, spec in store.schema.fields.items() if len(spec.shape) >= 2]


def default_image_field(store: EpisodeStore) -> str:
    """The store's only image-like field; an error naming them when there are none or several."""
    candidates = image_fields(store)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise OptionError(f"no image-like field (of two or more dimensions) among {list(store.schema.fields)}; "
                          f"pass field= explicitly")
    raise OptionError(f"multiple image-like fields {candidates}; pass field= (one of them) explicitly")


def episode_frames(store: EpisodeStore, episode_index: int | Sequence[int] = 0, field: str | None = None) -> np.ndarray:
    """The rows of ``field`` (default: the only image-like field) of the episodes in buffer rows (slots)
    ``episode_index`` (one, or several concatenated in time), as a numpy copy."""
    if field is None:
        field = default_image_field(store)
    if not isinstance(field, str) or field not in store.schema.fields:
        raise OptionError(f"invalid field name {short(field)}: field must be one of {list(store.schema.fields)}")
    if isinstance(episode_index, (int, np.integer)) and not isinstance(episode_index, (bool, np.bool_)):
        indices = [int(episode_index)]
    elif isinstance(episode_index, (list, tuple, np.ndarray)):
        indices = [integer(index, "episode_index") for index in episode_index]
    else:
        raise OptionError(f"episode_index must be an int or a list of ints (got {short(episode_index)})")
    if not indices:
        raise OptionError("episode_index must name at least one episode (got an empty list)")
    table = store.live_table()
    array = store.step_array(field)
    chunks = []
    for index in indices:
        position = np.flatnonzero(table.slots == index)
        if not 0 <= index < store.num_episodes or not len(position):
            raise IndexRangeError(f"episode_index {index} out of range: the buffer has {store.num_episodes} episodes "
                                  f"in rows {sorted(table.slots.tolist())}")
        start = int(table.start[position[0]])
        chunks.append(np.array(array[start:start + int(table.length[position[0]])]))
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
