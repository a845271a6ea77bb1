"""verify on compressed fields (sharing/verify_encoded.py): a healthy 2.0 store (a wrapped ring too) is clean; each
kind of damage to ``state.frames``, the index file, the frames file or a frame is reported naming the file, the
field and the rows (the first few, the rest counted), and a reader refuses what verify calls damage; without the
codec's package verify warns that the frames were not decoded and checks the rest."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import CorruptStoreError, ReplayBuffer, UnsupportedFormatError, verify
from memmap_replay.cli import main
from memmap_replay.core.codecs import frame_bound

from compressed_stores import episode, images, make_compressed_store

ROW_BYTES = 16 * 16 * 3
MAX_FRAME = frame_bound(ROW_BYTES)  # the most bytes a frame of one row takes
# rows of the store: episode 0 rows 0-2, episode 1 rows 3-6 and its final row 7, episode 2 rows 8-12, 3 rows 13-18
ROWS = 19


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return make_compressed_store(tmp_path_factory.mktemp("compressed") / "store")


@pytest.fixture
def folder(template, tmp_path):
    return Path(shutil.copytree(template, tmp_path / "store"))


def index_of(folder: Path) -> np.ndarray:
    return np.load(folder / "steps/image.index.npy", mmap_mode="r+")


def frames_of(folder: Path) -> np.ndarray:
    return np.load(folder / "steps/image.frames.npy", mmap_mode="r+")


def edit_meta(change):
    def mutate(folder):
        data = json.loads((folder / "meta.json").read_text())
        change(data)
        (folder / "meta.json").write_text(json.dumps(data))
    return mutate


def set_frames(**values):
    return edit_meta(lambda data: data["state"]["frames"]["image"].update(values))


def flip_frames(*rows):
    """One byte in the middle of each row's frame, flipped."""
    def mutate(folder):
        index, frames = index_of(folder), frames_of(folder)
        for row in rows:
            offset, length = index[row]
            frames[offset + length // 2] ^= 0xFF
        frames.flush()
    return mutate


def set_entry(row, offset=None, length=None, shift=0):
    def mutate(folder):
        index = index_of(folder)
        index[row, 0] = index[row, 0] + shift if offset is None else offset
        if length is not None:
            index[row, 1] = length
        index.flush()
    return mutate


def move_episode_1_onto_episode_0(folder):
    index = index_of(folder)
    index[3:8, 0] -= index[3, 0] - index[0, 0]
    index.flush()


def cut(name, keep):
    return lambda folder: os.truncate(folder / name, keep)


def bytes_past_the_file(folder):
    size = len(frames_of(folder))
    edit_meta(lambda data: data["state"]["frames"]["image"].update(bytes=2 * size))(folder)


def raw_store_with_frames(folder):
    edit_meta(lambda data: data["state"].update(frames={"image": {"head": 0, "bytes": 0}}))(folder)


INDEX, FRAMES = "steps/image.index.npy", "steps/image.frames.npy"
# (mutate, the file the report names, what it says, the reader's error reading every episode (None: it reads))
DAMAGE = [
    pytest.param(flip_frames(5), FRAMES, r"field 'image', row 5 \(live episode 1\): its frame \(offset \d+, length "
                 r"\d+\) does not decode \(.+\); reading it raises CorruptStoreError", r"field 'image', row 5",
                 id="flipped-byte"),
    pytest.param(flip_frames(7), FRAMES, r"row 7 \(live episode 1\): its frame .* does not decode",
                 r"field 'image', row 7", id="flipped-final-row"),
    pytest.param(set_entry(4, offset=10**6), INDEX, r"field 'image', row 4 \(live episode 1\): its index entry "
                 r"\(offset 1000000, length \d+\) must lie inside the \d+ committed bytes of frames \(state\.frames "
                 rf"in meta\.json\) with a length of 1 \.\. {MAX_FRAME}", r"field 'image', row 4",
                 id="offset-out-of-bounds"),
    pytest.param(set_entry(4, offset=-3), INDEX, r"row 4 .*\(offset -3,", r"field 'image', row 4",
                 id="negative-offset"),
    pytest.param(set_entry(10, length=MAX_FRAME + 1), INDEX, r"row 10 \(live episode 2\): its index entry \(offset "
                 rf"\d+, length {MAX_FRAME + 1}\)", r"field 'image', row 10", id="length-over-a-frame"),
    pytest.param(set_entry(10, length=0), INDEX, r"row 10 \(live episode 2\): its index entry \(offset \d+, "
                 r"length 0\)", None, id="length-zero"),
    pytest.param(set_entry(9, shift=1), INDEX, r"row 9 \(live episode 2\): its frame starts at byte \d+ \(expected "
                 r"\d+, right after row 8's: an episode's frames are contiguous\)", r"field 'image', row 9",
                 id="frames-not-contiguous"),
    pytest.param(move_episode_1_onto_episode_0, INDEX, r"field 'image': live episodes 0 \(bytes 0 \.\. \d+ of "
                 r"frames\) and 1 \(bytes 0 \.\. \d+\) overlap", r"field 'image', row [3-7]", id="episodes-overlap"),
    pytest.param(set_frames(head=5), "meta.json", r"state\.frames\.image\.head is 5 \(expected \d+ or more, after "
                 r"the frames of the newest live episode 3, or 0\); a writer would overwrite live frames", None,
                 id="head-inside-live-frames"),
    pytest.param(set_frames(head=7, bytes=3), "meta.json", r"'state\.frames\.image' must have 0 <= head <= bytes "
                 r"< 2\*\*62 \(found head 7, bytes 3\)", r"state\.frames\['image'\] integers 0 <= head <= bytes",
                 id="head-past-bytes"),
    pytest.param(set_frames(head="0"), "meta.json", r"'state\.frames\.image' must hold integers 'head' and 'bytes' "
                 r"\(found \{'head': '0'", r"state\.frames\['image'\] integers", id="head-not-an-integer"),
    pytest.param(edit_meta(lambda data: data["state"]["frames"].update(action={"head": 0, "bytes": 0})), "meta.json",
                 r"'state\.frames' has entries for \['action'\], which are not compressed fields", r"state\.frames an "
                 r"entry per compressed field", id="entry-of-a-raw-field"),
    pytest.param(edit_meta(lambda data: data["state"].pop("frames")), "meta.json", r"'state\.frames' is missing "
                 r"\(expected an entry per compressed field \['image'\]", r"state\.frames\['image'\] integers",
                 id="no-state-frames"),
    pytest.param(edit_meta(lambda data: data["state"].update(frames=[1])), "meta.json", r"'state\.frames' must be a "
                 r"JSON object with an entry per compressed field \['image'\]", r"state\.frames an entry",
                 id="state-frames-not-an-object"),
    pytest.param(edit_meta(lambda data: data.update(version="1.1")), "meta.json", r"declares version '1\.1' but has "
                 r"compressed fields \['image'\], a 2\.0 feature", r"declares version '1\.1' but has compressed fields",
                 id="version-1-with-a-codec"),
    pytest.param(cut(FRAMES, 300), FRAMES, r"truncated: 300 bytes on disk", r"image\.frames\.npy is truncated",
                 id="frames-file-truncated"),
    pytest.param(bytes_past_the_file, FRAMES, r"too short: its header declares \d+ rows \(expected at least \d+, "
                 r"state\.frames\.image\.bytes in meta\.json\)", r"image\.frames\.npy is truncated",
                 id="frames-file-short-of-the-bytes"),
    pytest.param(cut(INDEX, 200), INDEX, r"truncated: 200 bytes on disk", r"image\.index\.npy is truncated",
                 id="index-file-truncated"),
    pytest.param(lambda folder: np.save(folder / INDEX, np.zeros((ROWS, 3), np.int64)), INDEX,
                 r"holds int64 rows of shape \(3,\) \(expected int64 rows of shape \(2,\)\)",
                 r"image\.index\.npy must hold int64 rows of shape \(2,\)", id="index-of-another-shape"),
]


@pytest.mark.parametrize("mutate, where, what, refused", DAMAGE)
def test_damage_is_reported_naming_the_file_field_and_row(folder, mutate, where, what, refused):
    mutate(folder)
    report = verify(folder)
    assert not report.ok, report
    assert any(line.startswith(f"{where}: ") and re.search(what, line) for line in report.problems), report
    if refused is None:  # the reader reads (zeros for a length-0 row; a wrong or missing head harms a writer only)
        read_every_live_row(folder)
        return
    with pytest.raises((CorruptStoreError, UnsupportedFormatError), match=refused):
        read_every_live_row(folder)


def read_every_live_row(folder: Path) -> None:
    """Every field's live rows, final-observation rows included, read (decoded) as the library reads them."""
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        table = store.live_table()
        rows = np.concatenate([np.arange(start, start + length + final) for start, length, final in
                               zip(table.start, table.length, table.final.astype(int))])
        for name in store.schema.fields:
            store.step_array(name)[rows]


def test_a_compressed_store_verifies_clean(folder):
    report = verify(folder)
    assert report.ok and report.warnings == [], report
    assert report.checked["frames"] == ROWS and report.checked["live_rows"] == ROWS
    assert f"{ROWS} decoded frames" in str(report)
    assert json.loads((folder / "meta.json").read_text())["version"] == "2.0"


def test_a_wrapped_ring_of_compressed_episodes_verifies_clean(tmp_path):
    """No false alarm: a ring that wrapped many times (frames back to byte 0 with the rows, final rows, episodes
    evicted for their frames), verified every ten episodes."""
    rng = np.random.default_rng(7)
    with ReplayBuffer(tmp_path / "ring", max_episodes=5, max_timesteps=6, max_steps=20, circular=True,
                      fields=dict(image=dict(dtype="uint8", shape=(16, 16, 3), codec="zstd"))) as buffer:
        for number in range(60):
            length = int(rng.integers(1, 7))
            final = dict(image=images(rng, 1)[0]) if rng.random() < 0.3 and length < 6 else None
            buffer.store_episode(image=episode(rng, length)["image"], final=final)
            if number % 10 == 9:
                report = verify(buffer.folder)
                rows = buffer.num_steps + int(buffer.episode_store.live_table().final.sum())
                assert report.ok and not report.warnings, report
                assert report.checked["frames"] == report.checked["live_rows"] == rows


def test_the_first_damaged_rows_are_listed_and_the_rest_counted(folder):
    flip_frames(*range(ROWS))(folder)
    set_entry(0, length=0)(folder)
    report = verify(folder)
    decode = [line for line in report.problems if line.startswith(FRAMES)]
    assert len(decode) == 6 and decode[-1] == f"{FRAMES}: and {ROWS - 1 - 5} more live rows like these", report
    assert [int(re.search(r"row (\d+)", line).group(1)) for line in decode[:5]] == [1, 2, 3, 4, 5]
    assert [line for line in report.problems if line.startswith(INDEX)] == [
        f"{INDEX}: field 'image', row 0 (live episode 0): its index entry (offset 0, length 0) must lie inside the "
        f"{len(frames_of(folder))} committed bytes of frames (state.frames in meta.json) with a length of 1 .. "
        f"{MAX_FRAME}"]


def test_state_frames_in_a_store_without_compressed_fields(tmp_path):
    with ReplayBuffer(tmp_path / "raw", max_episodes=3, max_timesteps=4, fields=dict(x="float")) as buffer:
        buffer.store_episode(x=np.ones(3, np.float32))
    edit_meta(lambda data: data["state"].update(frames={"x": {"head": 0, "bytes": 0}}))(tmp_path / "raw")
    report = verify(tmp_path / "raw")
    assert report.problems == ["meta.json: 'state.frames' must be absent or empty in a store without compressed "
                               "fields (found {'x': {'head': 0, 'bytes': 0}}); a reader refuses it"], report
    with pytest.raises(CorruptStoreError, match=r"state\.frames an entry per compressed field of \[\]"):
        ReplayBuffer.from_folder(tmp_path / "raw", read_only=True)


def test_without_the_codec_package_the_frames_are_not_decoded(folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails as if it were not installed
    report = verify(folder)
    assert report.ok and report.checked["frames"] == 0, report
    assert report.warnings == [
        f"{FRAMES}: its frames were not decoded: a field with codec='zstd' needs the package zstandard, which is not "
        f"installed: pip install 'memmap-replay[zstd]' (the index entries and their bounds were checked)"]
    set_entry(4, offset=10**6)(folder)  # the index is still checked
    flip_frames(5)(folder)  # (not seen: not decoded)
    report = verify(folder)
    assert [line.split(":")[0] for line in report.problems] == [INDEX] and len(report.warnings) == 1, report


def test_the_command_reports_damaged_frames(folder, capsys):
    assert main(["verify", str(folder)]) == 0
    assert f"{ROWS} decoded frames" in capsys.readouterr().out
    flip_frames(2)(folder)
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED: 1 problem" in out and "steps/image.frames.npy: field 'image', row 2 (live episode 0)" in out
