"""Compressed fields (core/encoded.py): bit-exact reads in every view, sampler and loader mode; frames placed
and evicted with the rows (a ring keeps within its bytes); damage named by field and row; a frame overwritten
while it is read is an expired sample, not damage."""

import json
import os

import numpy as np
import pytest

pytest.importorskip("zstandard", reason="compressed fields need the zstd extra: pip install 'memmap-replay[zstd]'")

from memmap_replay import CorruptStoreError, ReplayBuffer, SampleExpiredError, SchemaMismatchError  # noqa: E402
from memmap_replay.core import format as fmt  # noqa: E402
from memmap_replay.core.codecs import ZstdFrames  # noqa: E402

SHAPE = (12, 10, 3)


def frames_of(number, length, rng=None):
    """Compressible images: a flat color per episode, a moving dot, and some noise in one corner."""
    rng = rng or np.random.default_rng(number)
    images = np.full((length, *SHAPE), number % 251, dtype=np.uint8)
    t = np.arange(length)
    images[t, t % SHAPE[0], (3 * t) % SHAPE[1]] = 255
    images[:, :2, :2] = rng.integers(0, 256, size=(length, 2, 2, 3), dtype=np.uint8)
    return images


def fields(codec):
    image = dict(dtype="uint8", shape=SHAPE) | (dict(codec="zstd") if codec else {})
    return dict(image=image, action=("int", ()), reward="float")


def fill(folder, codec, *, episodes=12, circular=True, max_episodes=8, max_steps=None, lengths=None):
    buffer = ReplayBuffer(folder, max_episodes=max_episodes, max_timesteps=40, fields=fields(codec),
                          meta_fields=dict(task_id="int"), circular=circular, max_steps=max_steps, overwrite=True)
    lengths = lengths if lengths is not None else [5 + (7 * number) % 30 for number in range(episodes)]
    for number, length in enumerate(lengths):
        buffer.store_episode(image=frames_of(number, length), action=np.arange(length) + 100 * number,
                             reward=np.full(length, number, np.float32), task_id=number)
    return buffer


@pytest.fixture
def pair(tmp_path):
    raw, packed = fill(tmp_path / "raw", False), fill(tmp_path / "zstd", True)
    yield raw, packed
    raw.close()
    packed.close()


def same(a, b):
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)


def test_the_store_is_version_2_and_its_field_is_frames_plus_an_index(pair):
    _, packed = pair
    meta = json.loads((packed.folder / "meta.json").read_text())
    assert meta["version"] == "2.0"
    assert meta["schema"]["fields"]["image"]["codec"] == {"name": "zstd", "level": 3}
    assert set(meta["state"]["frames"]) == {"image"}
    names = sorted(os.listdir(packed.folder / "steps"))
    assert names == ["action.npy", "image.frames.npy", "image.index.npy", "reward.npy"]
    frames = np.load(packed.folder / "steps" / "image.frames.npy", mmap_mode="r")
    index = np.load(packed.folder / "steps" / "image.index.npy", mmap_mode="r")
    table = packed.episode_store.live_table()
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(table.start, table.length)])
    assert index[rows, 1].sum() * 3 < len(rows) * np.prod(SHAPE)  # at least 3x smaller
    assert (index[rows, 0] + index[rows, 1] <= len(frames)).all()


@pytest.mark.parametrize("options", [
    dict(), dict(timestep_level=True), dict(window=6), dict(window=6, allow_partial=True, return_mask=True),
    dict(frame_stack=4, timestep_level=True), dict(frame_stack=3, stack_pad="repeat", timestep_level=True),
    dict(transitions=True),
    dict(n_steps=3), dict(n_steps=3, gamma=0.9),
], ids=str)
def test_every_view_reads_exactly_the_raw_bytes(pair, options):
    raw, packed = pair
    a, b = raw.dataset(**options), packed.dataset(**options)
    assert len(a) == len(b)
    items = list(range(0, len(a), max(1, len(a) // 40)))
    same(a.__getitems__(items), b.__getitems__(items))


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "sequence"])
def test_every_sampler_draws_exactly_the_raw_bytes(pair, kind):
    raw, packed = pair
    options = dict(seed=3, kind=kind) | (dict(window=5) if kind == "sequence" else {})
    a, b = raw.sampler(**options), packed.sampler(**options)
    for _ in range(3):
        same(a.batch(16), b.batch(16))


@pytest.mark.parametrize("workers, output", [("threads", "dict"), ("processes", "dict"), ("threads", "tensordict")])
def test_loaders_in_threads_and_processes_read_exactly_the_raw_bytes(pair, workers, output):
    if output == "tensordict":
        pytest.importorskip("tensordict", reason="output='tensordict' needs the tensordict extra")
    raw, packed = pair
    options = dict(batch_size=8, timestep_level=True, shuffle=False, workers=workers, num_workers=2, output=output)
    for a, b in zip(raw.dataloader(**options), packed.dataloader(**options), strict=True):
        same(dict(a.items()), dict(b.items()))


def test_episodes_and_arrays_decode(pair):
    raw, packed = pair
    for a, b in zip(raw.episodes(), packed.episodes(), strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
    column = packed.episode_store.step_array("image")
    plain = raw.episode_store.step_array("image")
    np.testing.assert_array_equal(column[3:40:3], plain[3:40:3])
    np.testing.assert_array_equal(column[[5, 1, 5]], plain[[5, 1, 5]])
    np.testing.assert_array_equal(column[7], plain[7])
    np.testing.assert_array_equal(column[-1], plain[len(column) - 1])
    np.testing.assert_array_equal(column[2, 1:3], plain[2, 1:3])
    with pytest.raises(IndexError, match="out of bounds"):
        column[len(column)]


def test_a_row_that_does_not_compress_is_still_a_checked_frame_a_few_bytes_longer(tmp_path):
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(tmp_path / "noise", max_episodes=4, max_timesteps=20, fields=fields(True))
    images = rng.integers(0, 256, size=(10, *SHAPE), dtype=np.uint8)  # noise: zstd cannot shrink it
    buffer.store_episode(image=images, action=np.arange(10), reward=np.zeros(10))
    index = np.load(tmp_path / "noise" / "steps" / "image.index.npy")
    assert (index[:10, 1] > images[0].nbytes).all() and (index[:10, 1] < images[0].nbytes + 32).all()
    np.testing.assert_array_equal(buffer.episodes()[0]["image"], images)


def test_a_window_decodes_each_distinct_frame_once(pair, monkeypatch):
    _, packed = pair
    calls = []
    original = ZstdFrames.decode_into
    monkeypatch.setattr(ZstdFrames, "decode_into",
                        lambda self, frame, out: (calls.append(1), original(self, frame, out)))
    view = packed.dataset(window=8)
    batch = view.__getitems__([0, 1, 2])  # overlapping windows of consecutive starts
    rows = view.table.start[0] + np.arange(10)  # starts 0, 1, 2 of episode 0: rows 0..9
    assert batch["image"].shape[:2] == (3, 8) and len(calls) == len(rows)


def test_a_ring_keeps_its_frames_within_one_lap_of_rows(tmp_path):
    buffer = ReplayBuffer(tmp_path / "ring", max_episodes=50, max_timesteps=40, max_steps=400, circular=True,
                          fields=fields(True), meta_fields=dict(task_id="int"))
    noise = np.random.default_rng(0).integers(0, 256, size=(35, *SHAPE), dtype=np.uint8)  # ~370 B a row
    for number in range(110):
        buffer.store_episode(image=noise, action=np.arange(35), reward=np.zeros(35), task_id=number)
    written = 110 * 35 * noise[0].nbytes
    size = os.path.getsize(tmp_path / "ring" / "steps" / "image.frames.npy")
    # a lap of 400 rows is 150 KB: the file stays at its first 1 MiB; frames that never wrapped would need 1.4 MB
    assert written > 1.3 * (1 << 20) and size <= (1 << 20) + 4096
    for episode in buffer.episodes():
        np.testing.assert_array_equal(episode["image"], noise)


def check_live(buffer):
    """Every live episode decodes to exactly what was stored for its number."""
    store = buffer.episode_store
    table = store.live_table()
    numbers = store.meta_array("task_id")[table.slots]
    column = store.step_array("image")
    for number, start, length in zip(numbers, table.start, table.length):
        np.testing.assert_array_equal(column[start:start + length], frames_of(int(number), int(length)))


def test_an_episode_whose_frames_overlap_older_ones_evicts_them_even_where_its_rows_do_not(tmp_path):
    buffer = ReplayBuffer(tmp_path / "ring", max_episodes=20, max_timesteps=40, max_steps=100, circular=True,
                          fields=fields(True), meta_fields=dict(task_id="int"))
    for number in range(10):  # ten compressible episodes of 10 rows: rows 0..99, a few hundred bytes of frames
        buffer.store_episode(image=frames_of(number, 10), action=np.arange(10), reward=np.zeros(10), task_id=number)
    noise = np.random.default_rng(1).integers(0, 256, size=(5, *SHAPE), dtype=np.uint8)  # ~370 bytes a row
    buffer.store_episode(image=noise, action=np.arange(5), reward=np.zeros(5), task_id=99)  # rows 0..4 after a wrap
    table = buffer.episode_store.live_table()
    # its rows overlap episode 0 only; its 1,800 bytes of frames overlap several: those are gone too
    assert table.ids[0] > 1
    np.testing.assert_array_equal(buffer.episodes()[-1]["image"], noise)
    live = buffer.episodes()
    for episode in live[:-1]:
        np.testing.assert_array_equal(episode["image"], frames_of(int(episode.meta["task_id"]), 10))


def test_a_flipped_byte_is_an_error_naming_the_field_and_row(tmp_path):
    buffer = fill(tmp_path / "s", True, circular=False, episodes=2, max_episodes=4)
    index = np.load(tmp_path / "s" / "steps" / "image.index.npy")
    offset, length = index[3]
    path = tmp_path / "s" / "steps" / "image.frames.npy"
    header = fmt.read_npy_header(path)[0]
    with open(path, "r+b") as file:
        file.seek(header + int(offset) + int(length) // 2)
        byte = file.read(1)[0]
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte ^ 0x5A]))
    reader = ReplayBuffer.from_folder(tmp_path / "s", read_only=True)
    with pytest.raises(CorruptStoreError, match=r"field 'image', row 3: its frame does not decode"):
        reader.dataset(timestep_level=True).__getitems__([3])
    buffer.close()


def test_a_frame_the_ring_overwrote_while_a_reader_read_it_is_an_expired_sample(tmp_path):
    writer = fill(tmp_path / "ring", True, episodes=8, max_episodes=8, max_steps=400)
    reader = ReplayBuffer.from_folder(tmp_path / "ring", read_only=True)
    view = reader.dataset(timestep_level=True)
    old = list(range(0, 30))  # rows of the oldest episodes, in the reader's snapshot
    for number in range(8, 30):  # the ring laps: those rows and frames now hold other episodes
        writer.store_episode(image=np.random.default_rng(number).integers(0, 256, size=(30, *SHAPE), dtype=np.uint8),
                             action=np.arange(30), reward=np.zeros(30), task_id=number)
    with pytest.raises(SampleExpiredError, match="evicted"):
        view.__getitems__(old)
    reader.close()
    writer.close()


def test_a_store_reopened_for_writing_goes_on_placing_frames_after_the_last(tmp_path):
    fill(tmp_path / "s", True, episodes=5, circular=False).close()
    again = ReplayBuffer.from_folder(tmp_path / "s")
    again.store_episode(image=frames_of(5, 9), action=np.arange(9), reward=np.zeros(9), task_id=5)
    check_live(again)
    index = np.load(tmp_path / "s" / "steps" / "image.index.npy", mmap_mode="r")
    table = again.episode_store.live_table()
    rows = np.concatenate([np.arange(s, s + n) for s, n in zip(table.start, table.length)])
    assert (index[rows[1:], 0] == index[rows[:-1], 0] + index[rows[:-1], 1]).all()  # back to back, in order
    again.close()


def test_clear_starts_the_frames_again_at_byte_zero(tmp_path):
    buffer = fill(tmp_path / "s", True, episodes=3, circular=False)
    buffer.clear()
    buffer.store_episode(image=frames_of(7, 6), action=np.arange(6), reward=np.zeros(6), task_id=7)
    index = np.load(tmp_path / "s" / "steps" / "image.index.npy", mmap_mode="r")
    assert index[0, 0] == 0
    check_live(buffer)


def test_reopening_with_the_field_asked_for_raw_takes_the_stored_codec(tmp_path):
    fill(tmp_path / "s", True, episodes=2, circular=False).close()
    again = ReplayBuffer(tmp_path / "s", max_episodes=8, max_timesteps=40, fields=fields(False),
                         meta_fields=dict(task_id="int"))
    assert again.episode_store.schema.fields["image"].codec is not None
    again.store_episode(image=frames_of(2, 6), action=np.arange(6), reward=np.zeros(6), task_id=2)
    check_live(again)
    again.close()
    other = dict(fields(True), image=dict(dtype="uint8", shape=SHAPE, codec="zstd", level=9))
    with pytest.raises(SchemaMismatchError, match=r"field 'image': stored uint8 \(12, 10, 3\) default None codec "
                                                  r"zstd-3, asked for .* codec zstd-9"):
        ReplayBuffer(tmp_path / "s", max_episodes=8, max_timesteps=40, fields=other, meta_fields=dict(task_id="int"))


def test_a_version_2_store_keeps_its_segment_links(tmp_path):
    buffer = ReplayBuffer(tmp_path / "s", max_episodes=8, max_timesteps=4, fields=fields(True),
                          long_episodes="split")
    buffer.store_episode(image=frames_of(0, 10), action=np.arange(10), reward=np.zeros(10))
    buffer.close()
    again = ReplayBuffer.from_folder(tmp_path / "s", read_only=True)
    table = again.episode_store.live_table()
    assert again.episode_store.links(table).tolist() == [-1, 0, 1]
    np.testing.assert_array_equal(np.concatenate([part["image"] for part in again.episodes()]), frames_of(0, 10))
    again.close()


def test_a_meta_json_without_the_frames_state_of_a_compressed_field_is_refused(tmp_path):
    fill(tmp_path / "s", True, episodes=3, circular=False).close()
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    del meta["state"]["frames"]["image"]
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptStoreError, match=r"state.frames\['image'\] integers 0 <= head <= bytes"):
        ReplayBuffer.from_folder(tmp_path / "s")


def test_take_into_an_out_that_cannot_hold_the_rows_is_refused(pair):
    _, packed = pair
    column = packed.episode_store.step_array("image")
    rows = np.array([1, 2])
    good = np.empty((2, *SHAPE), np.uint8)
    np.testing.assert_array_equal(column.take(rows, out=good), column[rows])
    for out in (np.empty((2, *SHAPE), np.int16), np.empty((3, *SHAPE), np.uint8),
                np.empty((2, *SHAPE[::-1]), np.uint8).transpose(0, 3, 2, 1)):
        with pytest.raises(ValueError, match=r"out must be a writable C-contiguous uint8 array of shape \(2, 12, "
                                             r"10, 3\).*pass out=np.empty"):
            column.take(rows, out=out)
    with pytest.raises(ValueError, match=r"taken along axis 0 with mode 'clip' \(got axis=1"):
        column.take(rows, axis=1)


def test_one_value_of_a_scalar_compressed_field_is_a_numpy_scalar(tmp_path):
    buffer = ReplayBuffer(tmp_path / "s", max_episodes=2, max_timesteps=8,
                          fields=dict(x=dict(dtype="float32", shape=(), codec="zstd")))
    buffer.store_episode(x=np.arange(5, dtype=np.float32))
    column = buffer.episode_store.step_array("x")
    assert column[3] == 3.0 and np.ndim(column[3]) == 0 and isinstance(column[3], np.floating)
    np.testing.assert_array_equal(column[1:4], [1.0, 2.0, 3.0])
    buffer.close()
