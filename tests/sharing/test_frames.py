"""Contact sheets and videos of image fields (memmap_replay.sharing.frames, ``frames`` and ``video`` commands).

One store holds the same picture, ``picture(e, t)``, in every layout and dtype an image field may have;
each test reads back what was written (pillow for PNG and GIF, imageio for mp4) and compares pixels.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import InvalidDataError, NotAFolderError, ReplayBuffer, SampleExpiredError, StoreNotFoundError
from memmap_replay.sharing import frames as frames_module
from memmap_replay.cli import main
from memmap_replay.sharing.frames import MissingExtraError, contact_sheet, image_layout, write_video
from memmap_replay.core.store import EpisodeStore

Image = pytest.importorskip("PIL.Image")

H, W, K = 6, 8, 4
LENGTHS = (5, 9, 12)
BACKGROUND = frames_module._BACKGROUND


def picture(e: int, t: int) -> np.ndarray:
    """(H, W, 3) uint8, different per episode and step, never symmetric (a transposed read shows)."""
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([x * 30 + e * 5, y * 40 + t, np.full((H, W), 200 - 10 * e - t)], axis=-1).astype(np.uint8)


# field -> (spec, stored row of picture p, the RGB picture it shows)
LAYOUT_FIELDS = {
    "hwc": (("uint8", (H, W, 3)), lambda p: p, lambda p: p),
    "chw": (("uint8", (3, H, W)), lambda p: p.transpose(2, 0, 1), lambda p: p),
    "chw01": (("float32", (3, H, W)), lambda p: p.transpose(2, 0, 1) / 255, lambda p: p),
    "hwc255": (("float64", (H, W, 3)), lambda p: p.astype(float), lambda p: p),
    "gray": (("uint8", (H, W)), lambda p: p[..., 1], lambda p: gray(p[..., 1])),
    "gray01": (("float16", (1, H, W)), lambda p: p[None, ..., 1] / 255, lambda p: gray(p[..., 1])),
    "hw1": (("uint8", (H, W, 1)), lambda p: p[..., 1:2], lambda p: gray(p[..., 1])),
    "rgba": (("uint8", (H, W, 4)), lambda p: np.concatenate([p, np.full((H, W, 1), 7, np.uint8)], -1), lambda p: p),
    "stack": (("uint8", (K, H, W)), lambda p: np.stack([p[..., 1] + j for j in range(K)]),
              lambda p: gray(p[..., 1] + K - 1)),
    "stack_rgb": (("uint8", (2, H, W, 3)), lambda p: np.stack([p // 2, p]), lambda p: p),
    "stack_chw": (("float32", (2, 3, H, W)), lambda p: np.stack([p // 2, p]).transpose(0, 3, 1, 2) / 255,
                  lambda p: p),
    "mask": (("bool", (H, W)), lambda p: p[..., 0] > 100, lambda p: gray(np.where(p[..., 0] > 100, 255, 0))),
    "odd": (("uint8", (5, 7)), lambda p: p[:5, :7, 1], lambda p: gray(p[:5, :7, 1])),
}


def gray(values: np.ndarray) -> np.ndarray:
    return np.repeat(values.astype(np.uint8)[..., None], 3, axis=-1)


def enlarge(rgb: np.ndarray, scale: int) -> np.ndarray:
    return rgb.repeat(scale, axis=0).repeat(scale, axis=1)


def make_store(folder: Path, lengths=LENGTHS, **kwargs) -> Path:
    fields = {name: spec for name, (spec, _, _) in LAYOUT_FIELDS.items()}
    with ReplayBuffer(folder, max_episodes=kwargs.pop("max_episodes", 8), max_timesteps=20,
                      fields=dict(fields, action=("float32", (2,))), meta_fields=dict(goal=("uint8", (H, W))),
                      **kwargs) as buffer:
        for e, length in enumerate(lengths):
            pictures = [picture(e, t) for t in range(length)]
            rows = {name: np.stack([store(p) for p in pictures]) for name, (_, store, _) in LAYOUT_FIELDS.items()}
            buffer.store_episode(**rows, action=np.zeros((length, 2)), goal=np.zeros((H, W)))
    return folder


def shows(field: str, e: int, t: int) -> np.ndarray:
    return LAYOUT_FIELDS[field][2](picture(e, t))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("frames") / "store")


def read_png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


# ---- layouts ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, layout", [
    ((64, 64), "HW"), ((64, 64, 3), "HWC"), ((64, 64, 1), "HWC"), ((84, 84, 4), "HWC"), ((3, 64, 64), "CHW"),
    ((1, 64, 64), "CHW"), ((4, 84, 84), "KHW"), ((8, 32, 32), "KHW"), ((4, 64, 64, 3), "KHWC"),
    ((4, 3, 64, 64), "KCHW"), ((3, 3, 3), "HWC"),
])
def test_layout_is_guessed_from_the_shape(shape, layout):
    assert image_layout(shape) == layout


@pytest.mark.parametrize("shape", [(), (6,), (2, 5, 5, 5), (1, 2, 3, 4, 5), (0, 8), (3, 0, 8)])
def test_shapes_that_are_no_image_are_refused(shape):
    with pytest.raises(InvalidDataError,
                       match=rf"field 'obs' has shape {re.escape(str(shape))}, which is not an image"):
        image_layout(shape, field="obs")


@pytest.mark.parametrize("shape, layout, why", [
    ((64, 64, 3), "HW", r"'HW' needs 2 axes"), ((64, 64, 5), "HWC", r"C in 1, 3, 4"), ((64, 64), "XY", r"one of"),
])
def test_a_layout_that_does_not_fit_is_refused(shape, layout, why):
    with pytest.raises(InvalidDataError, match=why):
        image_layout(shape, layout)


# ---- contact sheets ------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", sorted(LAYOUT_FIELDS))
def test_sheet_shows_every_layout_and_dtype(folder, tmp_path, field):
    out = tmp_path / "sheet.png"
    written = contact_sheet(folder, field, out=out, every=4, scale=2)
    pixels = read_png(out)
    assert pixels.shape == (written.height, written.width, 3)
    np.testing.assert_array_equal(pixels, written.image)
    expected_steps = [t for length in LENGTHS for t in sorted({*range(0, length, 4), length - 1})]
    assert written.tiles[:, 1].tolist() == expected_steps and written.frames == len(expected_steps)
    frame_h, frame_w = LAYOUT_FIELDS[field][0][1][-2:] if field == "odd" else (H, W)
    for e, t, x, y in written.tiles:
        np.testing.assert_array_equal(pixels[y:y + 2 * frame_h, x:x + 2 * frame_w], enlarge(shows(field, e, t), 2),
                                      err_msg=f"{field}: episode {e} step {t}")
        label = pixels[y - frames_module._LABEL_HEIGHT:y, x:x + 2 * frame_w]
        assert (label != BACKGROUND).any(), "a label is drawn above each frame"


def test_sheet_geometry_is_a_grid_of_episodes(folder, tmp_path):
    """Without labels, frame (row r, column c) starts at (_GAP + c (w + _GAP), _GAP + r (h + _GAP)); each
    episode starts a new row and wraps after ``columns`` frames."""
    written = contact_sheet(folder, "hwc", episodes=[2, 0], every=3, columns=3, scale=1, labels=False,
                            out=tmp_path / "grid.png")
    gap = frames_module._GAP
    def cell(r, c):
        return (gap + c * (W + gap), gap + r * (H + gap))
    expected = [(2, 0, *cell(0, 0)), (2, 3, *cell(0, 1)), (2, 6, *cell(0, 2)), (2, 9, *cell(1, 0)),
                (2, 11, *cell(1, 1)), (0, 0, *cell(2, 0)), (0, 3, *cell(2, 1)), (0, 4, *cell(2, 2))]
    assert written.tiles.tolist() == [list(row) for row in expected]
    assert (written.width, written.height) == (gap + 3 * (W + gap), gap + 3 * (H + gap))
    pixels = read_png(tmp_path / "grid.png")
    assert (pixels[:gap] == BACKGROUND).all() and (pixels[:, :gap] == BACKGROUND).all()
    x, y = cell(1, 2)
    assert (pixels[y:y + H, x:x + W] == BACKGROUND).all(), "the rest of an episode's last row stays empty"
    np.testing.assert_array_equal(pixels[cell(1, 0)[1]:, cell(1, 0)[0]:][:H, :W], picture(2, 9))
    np.testing.assert_array_equal(pixels[cell(1, 1)[1]:, cell(1, 1)[0]:][:H, :W], picture(2, 11))


def test_sheet_default_shows_each_episode_on_one_row_enlarged(folder):
    written = contact_sheet(folder, "gray", columns=4)
    assert written.path is None and written.episodes == (0, 1, 2)
    per_episode = [written.tiles[written.tiles[:, 0] == e] for e in range(3)]
    assert [p[:, 1].tolist() for p in per_episode] == [[0, 1, 3, 4], [0, 3, 5, 8], [0, 4, 7, 11]], \
        "columns frames, from the first step to the last"
    assert all(len(set(p[:, 3])) == 1 for p in per_episode), "one row per episode"
    scale = -(-64 // H)
    assert written.image.shape[1] == frames_module._GAP + 4 * (W * scale + frames_module._GAP)


def test_sheet_tiles_a_frame_stack_oldest_first(folder):
    written = contact_sheet(folder, "stack", episodes=1, every=5, stack="tile", scale=1, labels=False)
    e, t, x, y = written.tiles[1]
    shown = written.image[y:y + H, x:x + K * W]
    np.testing.assert_array_equal(shown, np.concatenate([gray(picture(e, t)[..., 1] + j) for j in range(K)], axis=1))


@pytest.mark.parametrize("length, final, columns, every, steps", [
    (18, False, 8, None, [0, 2, 5, 7, 10, 12, 15, 17]),   # the help's 8 frames, the last step among them
    (18, True, 8, None, [0, 3, 6, 9, 11, 14, 17, 18]),    # 7 steps spread, then the final observation
    (5, True, 8, None, [0, 1, 2, 3, 4, 5]),               # a short episode shows every row
    (3, False, 8, None, [0, 1, 2]),
    (1, True, 8, None, [0, 1]),
    (18, True, 1, None, [0]),                             # one column: the first step
    (18, True, 2, None, [0, 18]),
    (18, False, 8, 5, [0, 5, 10, 15, 17]),                # every N, then the last step ...
    (18, True, 8, 5, [0, 5, 10, 15, 17, 18]),             # ... and the final observation
    (16, False, 8, 5, [0, 5, 10, 15]),                    # the last step already shown
    (0, False, 8, None, []),
])
def test_sheet_steps_include_the_last_step_and_the_final_observation(length, final, columns, every, steps):
    assert frames_module.sheet_steps(length, final, columns=columns, every=every).tolist() == steps


@pytest.fixture(scope="module")
def final_folder(tmp_path_factory):
    """Episodes of 18 and 4 steps stored with their final observation (picture t = length), and one of 6 without."""
    folder = tmp_path_factory.mktemp("final") / "store"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=20, fields=dict(obs=("uint8", (H, W, 3)))) as buffer:
        for e, (length, end) in enumerate([(18, "terminated"), (4, "truncated"), (6, None)]):
            final = None if end is None else dict(obs=picture(e, length))
            buffer.store_episode(obs=np.stack([picture(e, t) for t in range(length)]), end=end, final=final)
    return folder


def test_sheet_of_an_episode_shows_its_last_step_and_final_observation(final_folder, monkeypatch):
    labels = []
    label_strip = frames_module._label_strip
    monkeypatch.setattr(frames_module, "_label_strip", lambda text, width: labels.append(text)
                        or label_strip(text, width))
    written = contact_sheet(final_folder, "obs", scale=1)
    per_episode = {e: written.tiles[written.tiles[:, 0] == e] for e in range(3)}
    assert per_episode[0][:, 1].tolist() == [0, 3, 6, 9, 11, 14, 17, 18], "8 frames, as the help says"
    assert per_episode[1][:, 1].tolist() == [0, 1, 2, 3, 4]
    assert per_episode[2][:, 1].tolist() == [0, 1, 2, 3, 4, 5], "no final row stored: up to the last step"
    for e, t, x, y in per_episode[0][-2:]:
        np.testing.assert_array_equal(written.image[y:y + H, x:x + W], picture(e, t))
    assert labels[6:8] == ["ep 0  t 17", "ep 0  final"] and labels[12] == "ep 1  final"
    assert labels[-1] == "ep 2  t 5"


def test_a_video_ends_with_the_final_observation(final_folder, tmp_path, monkeypatch):
    monkeypatch.setattr(frames_module, "_chunk_rows", lambda spec, form: 7)  # 19 rows: chunks of 7, 7 and 5
    out = tmp_path / "final.gif"
    written = write_video(final_folder, "obs", out, episode=0, scale=1)
    assert written.frames == 19
    with Image.open(out) as gif:
        assert gif.n_frames == 19
        for t in (0, 17, 18):
            gif.seek(t)
            np.testing.assert_array_equal(np.asarray(gif.convert("RGB")), picture(0, t))
    assert write_video(final_folder, "obs", tmp_path / "none.gif", episode=2, scale=1).frames == 6


@pytest.mark.parametrize("episodes, picked", [
    (-1, (2,)), ([0, -1], (0, 2)), (slice(1, None), (1, 2)), ([slice(None, None, 2), 1], (0, 2, 1)),
    (np.array([2, 1]), (2, 1)), (range(2), (0, 1)),
])
def test_sheet_episode_selection(folder, episodes, picked):
    assert contact_sheet(folder, "hwc", episodes=episodes, labels=False).episodes == picked


def test_sheet_of_many_episodes_spreads_sixteen_of_them(tmp_path):
    folder = make_store(tmp_path / "many", lengths=(2,) * 40, max_episodes=40)
    written = contact_sheet(folder, "gray", labels=False, scale=1)
    assert len(written.episodes) == 16 and written.episodes[0] == 0 and written.episodes[-1] == 39


def test_value_range_maps_low_high_to_black_white(folder):
    written = contact_sheet(folder, "hwc255", episodes=0, every=10, scale=1, labels=False, value_range=(50, 177.5))
    e, t, x, y = written.tiles[0]
    expected = np.clip((picture(e, t).astype(float) - 50) * 2, 0, 255)  # 255 / 127.5 = 2: exact
    np.testing.assert_array_equal(written.image[y:y + H, x:x + W], expected)


def test_float_values_above_one_are_read_as_0_255_and_clipped(tmp_path):
    with ReplayBuffer(tmp_path / "f", max_episodes=2, max_timesteps=4, fields=dict(img=("float32", (2, 2)))) as buffer:
        buffer.store_episode(img=np.array([[[0.5, 2.0], [300.0, np.nan]]] * 2))
    written = contact_sheet(tmp_path / "f", "img", scale=1, labels=False)
    x, y = written.tiles[0, 2:]
    assert written.image[y:y + 2, x:x + 2, 0].tolist() == [[0, 2], [255, 0]]


def test_a_buffer_and_a_store_are_accepted(folder, tmp_path):
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        from_buffer = contact_sheet(buffer, "hwc", labels=False).image
    store = EpisodeStore.open(folder, "r")
    try:
        np.testing.assert_array_equal(contact_sheet(store, "hwc", labels=False).image, from_buffer)
    finally:
        store.close()


def test_a_stale_store_shows_the_live_episodes_never_an_evicted_ones_rows(tmp_path):
    folder = make_store(tmp_path / "ring", lengths=(3, 3), max_episodes=2, circular=True)
    stale = EpisodeStore.open(folder, "r")  # its meta.json is read before the writer evicts episode 0
    try:
        with ReplayBuffer.from_folder(folder) as writer:
            writer.store_episode(**{name: np.stack([store(picture(9, t)) for t in range(3)])
                                    for name, (_, store, _) in LAYOUT_FIELDS.items()},
                                 action=np.zeros((3, 2)), goal=np.zeros((H, W)))
        shown = contact_sheet(stale, "hwc", episodes=[0, 1], labels=False).image  # the table catches up
        assert stale.num_episodes == 2 and stale.live_table().ids.tolist() == [1, 2]
        with ReplayBuffer.from_folder(folder, read_only=True) as fresh:
            np.testing.assert_array_equal(shown, contact_sheet(fresh, "hwc", episodes=[0, 1], labels=False).image)
    finally:
        stale.close()


def write_while_rows_are_read(stale, monkeypatch, *, clear=False):
    """At ``stale``'s next read of a step field (after its table was read), a writer (that first clears the
    store, with ``clear``) commits a new episode, which the ring or the cleared rows put over the oldest."""
    read_rows = stale.step_array

    def writing(name):
        with ReplayBuffer.from_folder(stale.folder) as writer:
            if clear:
                writer.clear()
            writer.store_episode(**{key: np.stack([store(picture(9, t)) for t in range(3)])
                                    for key, (_, store, _) in LAYOUT_FIELDS.items()},
                                 action=np.zeros((3, 2)), goal=np.zeros((H, W)))
        monkeypatch.setattr(stale, "step_array", read_rows)
        return read_rows(name)

    monkeypatch.setattr(stale, "step_array", writing)


def test_frames_of_an_episode_the_ring_evicted_while_they_were_read_are_refused(tmp_path, monkeypatch):
    folder = make_store(tmp_path / "ring", lengths=(3, 3), max_episodes=2, circular=True)
    stale = EpisodeStore.open(folder, "r")
    try:
        write_while_rows_are_read(stale, monkeypatch)  # the writer evicts episode 0 after the table was read
        with pytest.raises(SampleExpiredError, match=r"episode id 0 was evicted .* run again"):
            contact_sheet(stale, "hwc", episodes=0)
        stale.close()
        stale = EpisodeStore.open(folder, "r")
        write_while_rows_are_read(stale, monkeypatch)
        with pytest.raises(SampleExpiredError, match=r"episode id 1 was evicted"):
            write_video(stale, "hwc", tmp_path / "v.gif", episode=0)
        assert not (tmp_path / "v.gif").exists()
    finally:
        stale.close()


# ---- videos ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["hwc", "chw01", "stack", "gray01"])
def test_gif_holds_each_step_of_the_episode(folder, tmp_path, monkeypatch, field):
    monkeypatch.setattr(frames_module, "_chunk_rows", lambda spec, form: 4)  # 9 steps: chunks of 4, 4 and 1
    out = tmp_path / "episode.gif"
    written = write_video(folder, field, out, episode=1, fps=20, scale=3)
    assert (written.frames, written.width, written.height, written.episodes) == (9, 3 * W, 3 * H, (1,))
    with Image.open(out) as gif:
        assert gif.n_frames == LENGTHS[1] and gif.size == (3 * W, 3 * H)
        assert gif.info["duration"] == 50 and gif.info["loop"] == 0
        for t in (0, 4, 8):
            gif.seek(t)
            np.testing.assert_array_equal(np.asarray(gif.convert("RGB")), enlarge(shows(field, 1, t), 3))


# imageio's ffmpeg *reader* (the test's own decoder, not the library) sometimes leaves its pipes to the garbage
# collector when it closes; that ResourceWarning is not about the code under test
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_mp4_holds_each_step_and_pads_odd_sizes(folder, tmp_path, monkeypatch):
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")
    monkeypatch.setattr(frames_module, "_chunk_rows", lambda spec, form: 5)  # 12 steps: chunks of 5, 5 and 2
    out = tmp_path / "episode.mp4"
    written = write_video(folder, "odd", out, episode=-1, fps=10, scale=9)
    assert (written.frames, written.width, written.height, written.fps) == (12, 64, 46, 10.0)
    with imageio.get_reader(out, format="FFMPEG") as reader:
        frames = np.stack([reader.get_data(t) for t in range(reader.count_frames())])
    assert frames.shape == (LENGTHS[2], 46, 64, 3)
    for t in (0, 11):
        error = np.abs(frames[t, :45, :63].astype(int) - enlarge(shows("odd", 2, t), 9)).mean()
        assert error < 6, f"step {t} decodes to the stored picture (lossy codec): mean error {error:.1f}"


def test_a_long_episode_is_encoded_in_bounded_memory(tmp_path, monkeypatch, rng):
    pytest.importorskip("imageio_ffmpeg")
    steps, scale = 400, 16
    with ReplayBuffer(tmp_path / "long", max_episodes=1, max_timesteps=steps,
                      fields=dict(obs=("float32", (H, W, 3)))) as buffer:
        buffer.store_episode(obs=rng.random((steps, H, W, 3), dtype=np.float32))
    monkeypatch.setattr(frames_module, "_CHUNK_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        written = write_video(tmp_path / "long", "obs", tmp_path / "long.mp4", scale=scale)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    whole = steps * written.width * written.height * 3
    assert written.frames == steps and whole > 14 << 20
    assert peak < 3 << 20, f"{peak / 2**20:.1f} MB allocated at the peak for a {whole / 2**20:.0f} MB video"


def test_a_video_replaces_the_output_only_when_complete(folder, tmp_path):
    out = tmp_path / "v.gif"
    out.write_bytes(b"old")
    write_video(folder, "hwc", out, episode=0)
    assert out.read_bytes()[:3] == b"GIF" and sorted(p.name for p in tmp_path.iterdir()) == ["v.gif"]


# ---- refusals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, match", [
    (lambda f, o: contact_sheet(f, "action", out=o), InvalidDataError, r"field 'action' has shape \(2,\), "
                                                                       r"which is not an image"),
    (lambda f, o: contact_sheet(f, "nope", out=o), InvalidDataError, r"step field .* \['action', .*\] \(got 'nope'\)"),
    (lambda f, o: contact_sheet(f, "goal", out=o), InvalidDataError, r"it is a per-episode meta field"),
    (lambda f, o: contact_sheet(f, "hwc", episodes=3, out=o), InvalidDataError,
     r"episode 3 is out of range: .* 3 episodes"),
    (lambda f, o: contact_sheet(f, "hwc", episodes=[-4], out=o), InvalidDataError, r"episode -4 is out of range"),
    (lambda f, o: contact_sheet(f, "hwc", episodes="0", out=o), InvalidDataError, r"an episode must be an int"),
    (lambda f, o: contact_sheet(f, "hwc", episodes=slice(5, 9), out=o), InvalidDataError, r"selects no episode"),
    (lambda f, o: contact_sheet(f, "hwc", every=0, out=o), InvalidDataError, r"every must be a positive int"),
    (lambda f, o: contact_sheet(f, "hwc", columns=0, out=o), InvalidDataError,
     r"columns must be an int in \[1, 1000\]"),
    (lambda f, o: contact_sheet(f, "hwc", scale=0, out=o), InvalidDataError, r"scale must be an int in \[1, 16\]"),
    (lambda f, o: contact_sheet(f, "hwc", stack="first", out=o), InvalidDataError,
     r"stack must be one of 'last', 'tile'"),
    (lambda f, o: contact_sheet(f, "hwc", layout="CHW", out=o), InvalidDataError, r"layout 'CHW' does not fit"),
    (lambda f, o: contact_sheet(f, "hwc", value_range=(1, 1), out=o), InvalidDataError, r"high > low"),
    (lambda f, o: contact_sheet(f, "hwc", value_range=5, out=o), InvalidDataError, r"value_range must be a pair"),
    (lambda f, o: contact_sheet(f, "hwc", labels=1, out=o), InvalidDataError, r"labels must be True or False"),
    (lambda f, o: contact_sheet(f, "hwc", out=o.with_suffix(".xyz")), InvalidDataError, r"ending in .*\.png"),
    (lambda f, o: contact_sheet(f, "hwc", out=o.parent / "no" / "s.png"), InvalidDataError, r"which does not exist"),
    (lambda f, o: contact_sheet(f / "meta.json", "hwc", out=o), NotAFolderError, r"must be a folder \(got a file\)"),
    (lambda f, o: contact_sheet(f.parent / "absent", "hwc", out=o), StoreNotFoundError, r"no store at"),
    (lambda f, o: write_video(f, "hwc", o.with_suffix(".avi")), InvalidDataError, r"ending in \.mp4, \.gif"),
    (lambda f, o: write_video(f, "hwc", o.with_suffix(".gif"), fps=0), InvalidDataError,
     r"fps must be a finite number in \(0, 1000\]"),
    (lambda f, o: write_video(f, "hwc", o.with_suffix(".gif"), episode=7), InvalidDataError,
     r"episode 7 is out of range"),
    (lambda f, o: write_video(f, "action", o.with_suffix(".mp4")), InvalidDataError, r"'action' has shape \(2,\)"),
])
def test_refusals(folder, tmp_path, call, error, match):
    with pytest.raises(error, match=match):
        call(folder, tmp_path / "s.png")
    assert list(tmp_path.iterdir()) == [], "nothing is written"


def test_output_paths_that_cannot_be_written_are_refused(folder, tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidDataError, match=r"cannot write a video to .*: the path is in .*file, "
                                               r"which is not a folder"):
        write_video(folder, "hwc", tmp_path / "file" / "v.gif")
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(InvalidDataError, match=r"cannot write a contact sheet to .*folder.png: the path is a folder"):
        contact_sheet(folder, "hwc", out=tmp_path / "folder.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.png"]
    store = Path(folder)  # was written among the store's own files
    with pytest.raises(InvalidDataError, match=r"a contact sheet \(out\) .*sheet\.png must be outside the store at "):
        contact_sheet(folder, "hwc", out=store / "sheet.png")
    (tmp_path / "link.gif").symlink_to(tmp_path / "file")  # os.replace would put the video where the link was
    with pytest.raises(NotAFolderError, match=r"a video \(out\) .*link\.gif must not be a symbolic link"):
        write_video(folder, "hwc", tmp_path / "link.gif")
    assert not (store / "sheet.png").exists() and (tmp_path / "file").read_text() == ""


def test_an_empty_store_and_a_too_large_sheet_are_refused(folder, tmp_path, monkeypatch):
    ReplayBuffer(tmp_path / "empty", max_episodes=2, max_timesteps=2, fields=dict(img=("uint8", (4, 4)))).close()
    with pytest.raises(InvalidDataError, match=r"holds no episodes: nothing to show"):
        contact_sheet(tmp_path / "empty", "img")
    monkeypatch.setattr(frames_module, "_MAX_SHEET_PIXELS", 10_000)
    with pytest.raises(InvalidDataError, match=r"would be \d+ x \d+ pixels .* choose fewer episodes"):
        contact_sheet(folder, "hwc")


@pytest.mark.parametrize("module, call, match", [
    ("PIL", lambda f, o: contact_sheet(f, "hwc", out=o), r"a contact sheet needs the package pillow"),
    ("PIL", lambda f, o: write_video(f, "hwc", o.with_suffix(".gif")), r"writing a GIF needs the package pillow"),
    ("imageio_ffmpeg", lambda f, o: write_video(f, "hwc", o.with_suffix(".mp4")), r"needs the package imageio-ffmpeg"),
])
def test_a_missing_package_names_the_extra(folder, tmp_path, monkeypatch, module, call, match):
    for name in [name for name in sys.modules if name == module or name.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(MissingExtraError, match=rf"{match}, which is not installed: pip install "
                                                rf"'memmap-replay\[video\]'"):
        call(folder, tmp_path / "s.png")
    assert isinstance(MissingExtraError("x"), ImportError)


# ---- the command line ----------------------------------------------------------------------------------


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_cli_as_a_user_runs_it(folder, tmp_path):
    """Each command in its own process (in parallel: each start imports torch)."""
    damaged = make_store(tmp_path / "damaged", lengths=(2,))
    with open(damaged / "steps" / "hwc.npy", "r+b") as file:
        file.truncate(200)
    cases = {
        "sheet": (("frames", folder, "hwc", tmp_path / "s.png", "--episodes", "0,-1", "--every", "3"), 0),
        "mp4": (("video", folder, "chw01", tmp_path / "v.mp4", "--episode", "-1", "--fps", "12"), 0),
        "gif": (("video", folder, "stack", tmp_path / "v.gif", "--episode", "1", "--json", "--scale", "2"), 0),
        "not_image": (("frames", folder, "action", tmp_path / "x.png"), 2),
        "damaged": (("video", damaged, "hwc", tmp_path / "x.gif"), 1),
        "bad_every": (("frames", folder, "hwc", tmp_path / "x.png", "--every", "0"), 2),
    }
    with ThreadPoolExecutor(3) as pool:
        done = dict(zip(cases, pool.map(lambda case: run_cli(*case[0]), cases.values())))
    for name, (_, code) in cases.items():
        assert done[name].returncode == code, (name, done[name].stderr)
        assert "Traceback" not in done[name].stderr, name
    assert done["sheet"].stdout == f"wrote {tmp_path / 's.png'}: 2 episodes, 8 frames, 452 x 162 pixels\n"
    assert done["sheet"].stderr == ""  # no progress bar when stderr is not a terminal
    assert read_png(tmp_path / "s.png").shape == (162, 452, 3)
    assert done["mp4"].stdout == f"wrote {tmp_path / 'v.mp4'}: episode 2, 12 frames at 12 fps, 88 x 66 pixels\n"
    assert json.loads(done["gif"].stdout) == {"path": str(tmp_path / "v.gif"), "frames": 9, "width": 16, "height": 12,
                                              "episodes": [1], "fps": 30.0}
    with Image.open(tmp_path / "v.gif") as gif:
        assert gif.n_frames == LENGTHS[1]
    assert done["not_image"].stderr.startswith(
        "python -m memmap_replay frames: error: field 'action' has shape (2,), which is not an image")
    assert "hwc.npy is truncated" in done["damaged"].stderr and "verify" in done["damaged"].stderr
    assert "argument --every: must be a whole number of at least 1 (got '0')" in done["bad_every"].stderr
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.gif").exists()


@pytest.mark.parametrize("args, code, message", [
    (("frames", "--help"), 0, "python -m memmap_replay frames replay_data obs sheet.png --episodes 0,5,-1"),
    (("video", "--help"), 0, "python -m memmap_replay video replay_data obs last.gif --episode -1 --fps 15"),
    (("video", "{folder}", "nope", "{tmp}/x.gif"), 2, "video: error: field must be a step field of the store"),
    (("video", "{folder}", "hwc", "{tmp}/x.gif", "--episode", "3"), 2, "episode 3 is out of range"),
    (("video", "{folder}", "hwc", "{tmp}/x.gif", "--fps", "nan"), 2, "fps must be a finite number"),
    (("frames", "{folder}", "hwc", "{tmp}/no/x.png"), 2, "no, which does not exist; choose another output path"),
    (("video", "{folder}", "hwc", "{tmp}/x.avi"), 2, "ending in .mp4, .gif"),
    (("frames", "{tmp}/absent", "hwc", "{tmp}/x.png"), 2, "frames: error: no store at"),
    (("frames", "{folder}", "hwc", "{tmp}/x.png", "--episodes", "1:x"), 2, "argument --episodes: must be episode"),
    (("frames", "{folder}", "hwc", "{tmp}/x.png", "--episodes", "::0"), 2, "argument --episodes: must be episode"),
    (("video", "{folder}", "hwc", "{tmp}/x.gif", "--layout", "WH"), 2, "argument --layout: invalid choice: 'WH'"),
    (("video", "{folder}", "hwc"), 2, "the following arguments are required: OUT.mp4|gif"),
    (("video", "{folder}", "hwc", "{tmp}/x.gif", "--episode", "one"), 2, "argument --episode: invalid int value"),
])
def test_cli_usage_and_refusals(folder, tmp_path, capsys, args, code, message):
    """The parser and the error paths, in this process (the subprocess test above covers the start)."""
    argv = [arg.format(folder=folder, tmp=tmp_path) for arg in args]
    try:
        returned = main(argv, "python -m memmap_replay")
    except SystemExit as exit:  # argparse: --help and usage errors
        returned = exit.code
    captured = capsys.readouterr()
    assert returned == code
    assert message in (captured.out if code == 0 else captured.err)
    assert list(tmp_path.iterdir()) == []


def test_cli_without_pillow_names_the_extra(folder, tmp_path, capsys, monkeypatch):
    for name in [name for name in sys.modules if name == "PIL" or name.startswith("PIL.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert main(["frames", str(folder), "hwc", str(tmp_path / "s.png")], "python -m memmap_replay") == 2
    assert capsys.readouterr().err == ("python -m memmap_replay frames: error: a contact sheet needs the package "
                                       "pillow, which is not installed: pip install 'memmap-replay[video]'\n")


def test_progress_bars_go_to_stderr_when_asked(folder, tmp_path, capsys):
    write_video(folder, "hwc", tmp_path / "v.gif", episode=1, progress=True)
    contact_sheet(folder, "hwc", progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "0/9 [" in captured.err and "frame/s" in captured.err and "0/3 [" in captured.err
    write_video(folder, "hwc", tmp_path / "v.gif", episode=1)
    assert capsys.readouterr().err == ""


def test_frames_of_a_flat_store_cleared_while_they_were_read_are_refused(tmp_path, monkeypatch):
    """clear() frees a flat store's rows: the next episode overwrites them while a reader reads its frames."""
    folder = make_store(tmp_path / "flat", lengths=(3, 3), max_episodes=4)
    stale = EpisodeStore.open(folder, "r")
    try:
        write_while_rows_are_read(stale, monkeypatch, clear=True)  # a new episode over row 0 while it is read
        with pytest.raises(SampleExpiredError, match=r"episode id 0 was evicted .*clear\(\)"):
            contact_sheet(stale, "hwc", episodes=0)
    finally:
        stale.close()
