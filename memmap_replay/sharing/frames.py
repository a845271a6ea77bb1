"""Look at the episodes of an image field: a contact sheet (PNG) or a video (mp4 or GIF).

``contact_sheet(folder, "obs", out="sheet.png")`` draws a grid of frames, one episode per row (a long
episode wraps onto more rows), each frame labelled with its episode and step; each episode shows its
first step, its last step and its final observation when one is stored (``sheet_steps``).
``write_video(folder, "obs", "episode.mp4", episode=-1)`` writes one episode as a video (its steps, then
its final observation when stored), reading it in chunks of about 16 MB (bounded memory). Both take a
folder, a ``ReplayBuffer`` or an ``EpisodeStore``; a folder is opened read-only (no writer lock, so this
works while a writer appends).

Episodes are numbered as ``get_all_data()`` returns them: 0 is the oldest live episode, -1 the newest.

Images: which shapes are image fields (``image_layout``, ``layout=`` overrides the guess), how a frame
stack is shown (its newest frame, or ``stack='tile'``) and how values become pixels (``value_range=``)
are in ``memmap_replay.images``; ``image_layout`` and ``LAYOUTS`` are importable from here as well.

Pillow writes PNG and GIF, imageio-ffmpeg writes mp4: ``pip install 'memmap-replay[video]'``.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..core import format as fmt
from ..core.progress import progress_bar
from .checksums import check_new_path
from ..errors import InvalidDataError, MissingExtraError, OptionError, SampleExpiredError
from ..core.extras import require_extra
from ..core.folderio import errors_named
from .images import LAYOUTS, STACK_MODES, FrameFormat, image_layout, peak, resolve_range
from ..core.options import flag, integer, number
from ..core.store import EpisodeStore

__all__ = ["contact_sheet", "write_video", "sheet_steps", "image_layout", "FramesWritten", "MissingExtraError",
           "LAYOUTS", "STACK_MODES"]

_VIDEO_SUFFIXES = (".mp4", ".gif")
_SHEET_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}
_SHEET_EPISODES = 16            # episodes=None shows at most this many, spread from the oldest to the newest
_MAX_SHEET_PIXELS = 50_000_000  # below pillow's decompression-bomb limit (89 M pixels)
_CHUNK_BYTES = 16 << 20         # a video reads (and converts) about this much memory's worth of rows at a time
_GAP, _LABEL_HEIGHT = 2, 12
_BACKGROUND, _LABEL_COLOUR = 24, (235, 235, 235)


def _need(module: str, package: str, what: str):
    """Import an optional package, or say which extra brings it."""
    return require_extra(module, "video", what, package=package)


@dataclass
class FramesWritten:
    """What ``contact_sheet`` or ``write_video`` made. ``tiles`` (sheets): one row per frame shown,
    (episode, step, x, y) with (x, y) the top-left pixel of the frame itself (below its label)."""

    path: Path | None
    frames: int
    width: int
    height: int
    episodes: tuple[int, ...]
    fps: float | None = None
    tiles: np.ndarray | None = field(default=None, repr=False)
    image: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {"path": None if self.path is None else str(self.path), "frames": self.frames, "width": self.width,
                "height": self.height, "episodes": list(self.episodes), "fps": self.fps}


# ---- the store: opening, episodes, output paths ------------------------------------------------------


@contextmanager
def _opened(source: Any) -> Iterator[EpisodeStore]:
    """The store of a folder (opened read-only, closed after), a ReplayBuffer or an EpisodeStore."""
    store = getattr(source, "episode_store", source)  # a ReplayBuffer (the facade above this room) has one
    if isinstance(store, EpisodeStore):
        yield store
    else:
        store = EpisodeStore.open(source, "r")
        try:
            yield store
        finally:
            store.close()


def _image_field(store: EpisodeStore, name: Any):
    fields = store.schema.fields
    if not isinstance(name, str) or name not in fields:
        meta = " (it is a per-episode meta field)" if name in store.schema.meta_fields else ""
        raise OptionError(f"field must be a step field of the store at {store.folder}{meta}: its step fields "
                               f"are {sorted(fields)} (got {name!r})")
    return fields[name]


def _pick_episodes(store: EpisodeStore, episodes: Any) -> list[int]:
    """Positions in the live table (oldest first) of an int, a slice, or a sequence of ints and slices."""
    count = store.num_episodes
    if count == 0:
        raise InvalidDataError(f"the store at {store.folder} holds no episodes: nothing to show")
    if episodes is None:
        if count <= _SHEET_EPISODES:
            return list(range(count))
        return sorted(set(np.linspace(0, count - 1, _SHEET_EPISODES).round().astype(int).tolist()))
    items = episodes if isinstance(episodes, (list, tuple, range, np.ndarray)) else [episodes]
    picked: list[int] = []
    for item in items:
        if isinstance(item, slice):
            picked.extend(range(count)[item])
            continue
        number = integer(item, "an episode", low=None)
        if not -count <= number < count:
            raise OptionError(f"episode {number} is out of range: the store at {store.folder} holds {count} "
                                   f"episodes, 0 (the oldest) to {count - 1}, or -1 (the newest) to {-count}")
        picked.append(number % count)
    if not picked:
        raise OptionError(f"episodes selects no episode (got {episodes!r}); the store holds {count}")
    return picked


def _output_path(out: Any, suffixes: tuple[str, ...], what: str) -> Path:
    """``out`` checked before anything is read: a known suffix, in an existing folder we may write."""
    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise OptionError(f"out must be a file path ending in {', '.join(suffixes)} (got {out!r})")
    path = Path(out)
    if path.suffix.lower() not in suffixes:
        raise OptionError(f"{what} must be written to a file ending in {', '.join(suffixes)} (got {str(path)!r})")
    parent = path.parent
    if path.is_dir():
        problem = "is a folder"
    elif not parent.is_dir():
        problem = f"is in {parent}, which {'is not a folder' if parent.exists() else 'does not exist'}"
    elif not os.access(parent, os.W_OK):
        problem = f"is in {parent}, which this user may not write"
    else:
        check_new_path(path, f"{what} (out)")
        return path
    raise OptionError(f"cannot write {what} to {path}: the path {problem}; choose another output path")


@contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` (same suffix) that replaces it on success, else is removed."""
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        with errors_named(path, "write"):  # a full disk, no permission, ...: the library's error, naming the file
            yield temporary
            os.replace(temporary, path)
    finally:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass  # (an error on its way out must not be hidden by the clean-up's)


def _check_still_live(store: EpisodeStore, ids: np.ndarray) -> None:
    """A ring writer (or ``clear()`` and new episodes) may overwrite episodes while they are read: refuse
    frames read from one no longer live. A writer commits that in meta.json before it overwrites a row."""
    if len(ids) and store.meta_stamp() != store.read_stamp and \
            fmt.read_meta(store.folder).state.first_episode > ids.min():
        raise SampleExpiredError(f"episode id {int(ids.min())} was evicted by the ring writer of {store.folder} (or "
                                 f"dropped by clear()) while its frames were read; run again to show live episodes")


def _progress_bar(total: int, unit: str, enabled: bool):
    return progress_bar(total, "", enabled, unit=unit, unit_scale=False)


# ---- contact sheets ----------------------------------------------------------------------------------


def contact_sheet(source: Any, field: str, *, episodes: Any = None, every: int | None = None, columns: int = 8,
                  out: str | os.PathLike | None = None, layout: str | None = None, stack: str = "last",
                  scale: int | None = None, value_range: Any = None, labels: bool = True,
                  progress: bool = False) -> FramesWritten:
    """A grid of frames of an image field: each episode starts a row, wrapping after ``columns``. It shows
    ``columns`` frames spread from the episode's first step to its last, the last frame being its final
    observation when one is stored (``every=None``: one episode fills one row), or with ``every=N`` steps
    0, N, 2N, ..., then the last step and the final observation (``sheet_steps`` says which). A final
    observation is labelled 'ep E final' and is step ``length`` in ``tiles``.

    ``episodes``: an index, a slice, or a list of indices and slices (0 the oldest, -1 the newest);
    None: all, or 16 spread from the oldest to the newest when there are more. ``out``: a file path
    (.png, or another image suffix pillow writes), written atomically; None: only ``image``, the pixels
    (height, width, 3) uint8, is returned. ``labels`` draws 'ep E t T' above each frame (pillow).
    """
    columns = integer(columns, "columns", low=1, high=1000)
    every = None if every is None else integer(every, "every", low=1)
    path = None if out is None else _output_path(out, tuple(_SHEET_FORMATS), "a contact sheet")
    if flag(labels, "labels") or path is not None:
        _need("PIL.Image", "pillow", "a contact sheet")  # said before anything is read
    with _opened(source) as store:
        spec = _image_field(store, field)
        form = FrameFormat.of(spec, layout, stack, scale)
        table = store.live_table()
        picked = _pick_episodes(store, episodes)
        steps = [sheet_steps(int(table.length[p]), bool(table.final[p]), columns=columns, every=every)
                 for p in picked]
        label_height = _LABEL_HEIGHT if labels else 0
        tiles = _sheet_tiles(picked, steps, columns, form, label_height)
        width, height = _sheet_size(tiles, min(columns, max(map(len, steps))), form, label_height)
        array, raw = store.step_array(spec.name), []
        with _progress_bar(len(steps), "episode", progress) as bar:
            for start, t in zip(table.start[picked], steps):  # one gather per episode
                raw.append(array[start + t])
                bar.update(1)
        _check_still_live(store, table.ids[picked])
    value_range = resolve_range(spec.dtype, value_range, lambda: max(peak(rows) for rows in raw))
    canvas = np.full((height, width, 3), _BACKGROUND, np.uint8)
    placed = 0
    lengths = dict(zip(picked, table.length[picked].tolist()))
    for rows in raw:  # one episode at a time: its pixels, then into the canvas
        for frame, (episode, t, x, y) in zip(form.pixels(rows, value_range), tiles[placed:placed + len(rows)]):
            canvas[y:y + form.height, x:x + form.width] = frame
            if labels:
                text = f"ep {episode}  final" if t == lengths[episode] else f"ep {episode}  t {t}"
                canvas[y - _LABEL_HEIGHT:y, x:x + form.width] = _label_strip(text, form.width)
        placed += len(rows)
    if path is not None:
        _save_image(canvas, path)
    return FramesWritten(path, len(tiles), width, height, tuple(picked), tiles=tiles, image=canvas)


def sheet_steps(length: int, final: bool, *, columns: int, every: int | None = None) -> np.ndarray:
    """The rows of one episode a contact sheet shows (``length`` steps, plus row ``length``, the final
    observation, when ``final``): always its first step, its last step and its final observation.

    ``every=None``: ``columns`` rows (fewer when the episode has fewer), the steps spread evenly from the
    first to the last, then the final observation, so one episode fills one row. ``every=N``: steps 0, N,
    2N, ..., then the last step and the final observation when those are not among them."""
    if length <= 0:
        return np.arange(0)
    if every is None:
        shown = min(columns, length + final)
        steps = np.floor(np.linspace(0, length - 1, max(1, shown - final)) + 0.5).astype(np.int64)
        tail = [length] if final and shown >= 2 else []
    else:
        steps = np.arange(0, length, every, dtype=np.int64)
        tail = ([length - 1] if steps[-1] != length - 1 else []) + ([length] if final else [])
    return np.unique(np.concatenate([steps, np.asarray(tail, np.int64)]))


def _sheet_tiles(picked: list[int], steps: list[np.ndarray], columns: int, form: FrameFormat,
                label_height: int) -> np.ndarray:
    """(episode, t, x, y) per frame: each episode starts a new row of the grid."""
    counts = [len(s) for s in steps]
    first_row = np.cumsum([0] + [max(1, math.ceil(n / columns)) for n in counts[:-1]])
    episode, t = np.repeat(picked, counts), np.concatenate(steps)
    order = np.concatenate([np.arange(n) for n in counts])
    row = np.repeat(first_row, counts) + order // columns
    x = _GAP + (order % columns) * (form.width + _GAP)
    y = _GAP + row * (form.height + label_height + _GAP) + label_height
    return np.stack([episode, t, x, y], axis=1).astype(np.int64)


def _sheet_size(tiles: np.ndarray, columns: int, form: FrameFormat, label_height: int) -> tuple[int, int]:
    """(width, height) of a sheet ``columns`` frames wide; refused when it would be too large."""
    if not len(tiles):
        raise InvalidDataError("the episodes chosen have no steps: nothing to show")
    width = _GAP + columns * (form.width + _GAP)
    height = int(tiles[:, 3].max()) + form.height + _GAP
    if width * height > _MAX_SHEET_PIXELS:
        raise OptionError(
            f"the contact sheet would be {width} x {height} pixels ({len(tiles)} frames), more than "
            f"{_MAX_SHEET_PIXELS:,}; choose fewer episodes, a larger every, or a smaller scale")
    return width, height


def _label_strip(text: str, width: int) -> np.ndarray:
    image = _need("PIL.Image", "pillow", "labels")
    draw = _need("PIL.ImageDraw", "pillow", "labels")
    strip = image.new("RGB", (width, _LABEL_HEIGHT), (_BACKGROUND,) * 3)
    draw.Draw(strip).text((1, 0), text, fill=_LABEL_COLOUR)
    return np.asarray(strip)


def _save_image(pixels: np.ndarray, path: Path) -> None:
    image = _need("PIL.Image", "pillow", "a contact sheet")
    with _replacing(path) as temporary:
        image.fromarray(pixels).save(temporary, format=_SHEET_FORMATS[path.suffix.lower()])


# ---- videos ------------------------------------------------------------------------------------------


def write_video(source: Any, field: str, out: str | os.PathLike, *, episode: int = 0, fps: float = 30,
                layout: str | None = None, stack: str = "last", scale: int | None = None,
                value_range: Any = None, progress: bool = False) -> FramesWritten:
    """One episode of an image field as a video: ``out`` ending in .mp4 (H.264, imageio-ffmpeg; odd sizes
    are padded by one black pixel) or .gif (pillow; a looping GIF whose delays are whole hundredths of a
    second, identical consecutive frames merged into one longer frame). ``episode``: 0 the oldest, -1
    the newest. Every step is a frame, then the final observation when one is stored (``frames`` counts
    it). The episode is read and encoded in chunks; a GIF keeps its frames in memory as palette
    images (one byte a pixel) until it is written. The file is replaced atomically when it is complete."""
    path = _output_path(out, _VIDEO_SUFFIXES, "a video")
    fps = number(fps, "fps", low=0, high=1000, low_open=True)
    encode = _video_encoder(path)  # a missing package is said before anything is read
    with _opened(source) as store:
        spec = _image_field(store, field)
        form = FrameFormat.of(spec, layout, stack, scale)
        table = store.live_table()
        position = _pick_episodes(store, [episode])[0]
        start, length = int(table.start[position]), int(table.length[position])
        stop = start + length + int(bool(table.final[position])) if length else start  # the final observation too
        if stop <= start:
            raise InvalidDataError(f"episode {position} of the store at {store.folder} has no steps: nothing to show")
        array = store.step_array(spec.name)
        chunk = _chunk_rows(spec, form)
        value_range = resolve_range(spec.dtype, value_range,
                                    lambda: max(peak(array[at:min(at + chunk, stop)])
                                                for at in range(start, stop, chunk)))

        def frames() -> Iterator[np.ndarray]:
            with _progress_bar(stop - start, "frame", progress) as bar:
                for at in range(start, stop, chunk):
                    rows = array[at:min(at + chunk, stop)]
                    yield form.pixels(rows, value_range)
                    bar.update(len(rows))

        with _replacing(path) as temporary:
            width, height = encode(temporary, frames(), fps, (form.width, form.height))
            _check_still_live(store, table.ids[[position]])
    return FramesWritten(path, stop - start, width, height, (position,), fps=fps)


def _chunk_rows(spec, form: FrameFormat) -> int:
    """Rows a video reads at a time: about _CHUNK_BYTES of memory for a row's stored bytes, its float32
    copy while converted and its enlarged RGB pixels (twice: ``repeat`` makes one copy per axis)."""
    return max(1, _CHUNK_BYTES // (spec.row_nbytes + 4 * math.prod(spec.shape) + 6 * form.height * form.width))


def _video_encoder(path: Path):
    """The function writing ``path``'s kind of video, once the packages it needs are known to be there."""
    if path.suffix.lower() == ".gif":
        _need("PIL.Image", "pillow", "writing a GIF")
        return _write_gif
    _need("imageio_ffmpeg", "imageio-ffmpeg", "writing an mp4")
    return _write_mp4


def _write_mp4(path: Path, chunks: Iterator[np.ndarray], fps: float, size: tuple[int, int]) -> tuple[int, int]:
    """Send each chunk of frames to ffmpeg in one write; returns the video's (width, height)."""
    ffmpeg = _need("imageio_ffmpeg", "imageio-ffmpeg", "writing an mp4")
    width, height = size[0] + size[0] % 2, size[1] + size[1] % 2  # H.264 in yuv420p needs even sizes
    pad = ((0, 0), (0, height - size[1]), (0, width - size[0]), (0, 0))
    writer = ffmpeg.write_frames(str(path), (width, height), fps=fps, codec="libx264", pix_fmt_out="yuv420p",
                                 macro_block_size=1, ffmpeg_log_level="error")
    writer.send(None)
    try:
        for frames in chunks:
            writer.send(np.ascontiguousarray(np.pad(frames, pad)) if (width, height) != size else frames)
    finally:
        writer.close()
    return width, height


def _write_gif(path: Path, chunks: Iterator[np.ndarray], fps: float, size: tuple[int, int]) -> tuple[int, int]:
    image = _need("PIL.Image", "pillow", "writing a GIF")
    # a palette per frame by fast octree: 40 times faster than pillow's default median cut, as exact
    # (up to 256 colours a frame are kept exactly)
    pictures = (image.fromarray(frame).quantize(256, method=image.Quantize.FASTOCTREE, dither=image.Dither.NONE)
                for frames in chunks for frame in frames)
    first = next(pictures)
    first.save(path, format="GIF", save_all=True, append_images=pictures, duration=max(10, round(1000 / fps)),
               loop=0)
    return size
