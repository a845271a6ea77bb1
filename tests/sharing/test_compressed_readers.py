"""Everything that reads a store's rows decodes compressed fields: a store with compressed fields gives exactly
what the same store stored raw gives through contact sheets and videos, the viewer's API, ``buffer.data``,
``get_all_data``, ``Episode``, ``episode_frames`` and 0.2.3's video helpers; writing a committed row of a
compressed field in place is refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zstandard")

from memmap_replay import (ReadOnlyError, ReplayBuffer, contact_sheet, frames_to_sheet,  # noqa: E402
                           write_video)
from memmap_replay.compat.video import episode_frames  # noqa: E402

SHAPE = (16, 16, 3)


def make_store(folder, codec: str | None) -> ReplayBuffer:
    """The same episodes, stored raw (codec None) or compressed: compressible images, some final rows."""
    image = dict(dtype="uint8", shape=SHAPE, codec=codec) if codec else ("uint8", SHAPE)
    stack = dict(dtype="uint8", shape=(4, 8, 8), codec=codec) if codec else ("uint8", (4, 8, 8))
    buffer = ReplayBuffer(folder, 6, 12, fields=dict(image=image, stack=stack, reward="float"),
                          meta_fields=dict(task="int"))
    rng = np.random.default_rng(3)
    for number in range(4):
        length = int(rng.integers(3, 12))
        pixels = np.repeat(rng.integers(0, 200, (length, 1, 16, 3), dtype=np.uint8), 16, axis=1)
        buffer.store_episode(image=pixels, stack=pixels[:, :4, :8, 0].reshape(length, 4, 8, 1).repeat(8, axis=3),
                             reward=rng.standard_normal(length).astype(np.float32), task=number,
                             final=dict(image=pixels[-1] // 2) if number % 2 else None)
    return buffer


@pytest.fixture
def buffers(tmp_path):
    raw, zstd = make_store(tmp_path / "raw", None), make_store(tmp_path / "zstd", "zstd")
    assert zstd.schema.fields["image"].codec is not None and raw.schema.fields["image"].codec is None
    yield raw, zstd
    raw.close()
    zstd.close()


def same(a, b) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def test_buffer_data_get_all_data_and_episodes_decode(buffers):
    raw, zstd = buffers
    for key in (np.s_[:], np.s_[1], np.s_[2, 3], np.s_[[0, 3], 1:4], np.s_[..., 0]):
        same(raw.data["image"][key], zstd.data["image"][key])
    same(raw.data["stack"][:, :2], zstd.data["stack"][:, :2])
    a, b = raw.get_all_data(), zstd.get_all_data()
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and bool((a[name] == b[name]).all()), name
    for x, y in zip(raw.episodes(), zstd.episodes()):
        same(x["image"], y["image"])
        same(x.observations("image") if x.final else x["stack"], y.observations("image") if y.final else y["stack"])
    for x, y in zip(raw.sample_episodes(3, seed=1), zstd.sample_episodes(3, seed=1)):
        same(x["stack"], y["stack"])


def test_episode_frames_and_0_2_3_helpers_decode(buffers):
    raw, zstd = buffers
    same(raw.episode_frames(1, "image"), zstd.episode_frames(1, "image"))
    same(raw.episode_frames([0, 2], "stack"), zstd.episode_frames([0, 2], "stack"))
    same(episode_frames(raw.episode_store, [1, 3], "image"), episode_frames(zstd.episode_store, [1, 3], "image"))
    same(frames_to_sheet(raw.episode_frames(2, "image")), frames_to_sheet(zstd.episode_frames(2, "image")))


def test_contact_sheets_and_videos_decode(buffers, tmp_path):
    pytest.importorskip("PIL")
    raw, zstd = buffers
    for field, options in (("image", {}), ("stack", dict(stack="tile"))):
        a = contact_sheet(raw, field, columns=4, **options)
        b = contact_sheet(zstd, field, columns=4, **options)
        same(a.image, b.image)
    write_video(raw, "image", tmp_path / "raw.gif", episode=1)
    write_video(zstd, "image", tmp_path / "zstd.gif", episode=1)
    assert (tmp_path / "raw.gif").read_bytes() == (tmp_path / "zstd.gif").read_bytes()


def test_the_viewer_api_decodes(buffers):
    pytest.importorskip("PIL")
    from memmap_replay.sharing.viewer.api import StoreApi

    raw, zstd = buffers
    a, b = StoreApi(raw.folder), StoreApi(zstd.folder)
    try:
        ids = raw.episode_store.live_table().ids.tolist()
        for episode_id in ids:
            x, y = a.episode(episode_id), b.episode(episode_id)
            assert x.pop("store") != y.pop("store") and x == y  # (two stores: their ids differ)
            for field in ("image", "stack"):
                assert a.frame(field, episode_id, 0) == b.frame(field, episode_id, 0)
        assert a.frame("stack", ids[1], 2, stack="tile") == b.frame("stack", ids[1], 2, stack="tile")
    finally:
        a.close()
        b.close()


def test_writing_a_committed_row_of_a_compressed_field_is_refused(buffers):
    _, zstd = buffers
    before = zstd.data["image"][0, 0]
    with pytest.raises(ReadOnlyError, match=r"field 'image' is compressed .* cannot be changed in place"):
        zstd.store_datapoint(0, 0, "image", np.zeros(SHAPE, np.uint8))
    same(zstd.data["image"][0, 0], before)
    zstd.store_datapoint(0, 0, "reward", 5.0)  # a raw field of the same store still takes it
    assert zstd.data["reward"][0, 0] == 5.0
