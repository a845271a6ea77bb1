"""Exports of a store with compressed fields decode them: Minari, D4RL (.npz and .hdf5) and memmap-replay-buffer
exports of a compressed store hold exactly what the same exports of the same store stored raw hold."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zstandard")

from memmap_replay import (ReplayBuffer, export_d4rl, export_memmap_replay_buffer,  # noqa: E402
                           export_minari)

SHAPE = (8, 8, 3)


def fields(codec: str | None) -> dict:
    image = dict(dtype="uint8", shape=SHAPE, codec=codec) if codec else ("uint8", SHAPE)
    return dict(observation=image, action=("float", 2), reward="float", frame=image)


def make_store(folder, codec: str | None, *, finals: bool = True) -> None:
    """The same episodes, stored raw (codec None) or compressed: compressible images, final observations."""
    rng = np.random.default_rng(7)
    with ReplayBuffer(folder, 6, 12, fields=fields(codec), meta_fields=dict(task="int")) as buffer:
        for number in range(5):
            length = int(rng.integers(2, 12))
            image = np.repeat(rng.integers(0, 4, (length, 1, 8, 3), dtype=np.uint8), 8, axis=1)
            final = dict(observation=image[0] + 1) if finals else None
            buffer.store_episode(observation=image, frame=image[::-1].copy(),
                                 action=rng.standard_normal((length, 2)).astype(np.float32),
                                 reward=rng.standard_normal(length).astype(np.float32), task=number,
                                 end=("terminated", "truncated")[number % 2], final=final)


@pytest.fixture
def stores(tmp_path):
    make_store(tmp_path / "raw", None)
    make_store(tmp_path / "zstd", "zstd")
    return tmp_path / "raw", tmp_path / "zstd"


def test_minari_export_decodes(stores, tmp_path, monkeypatch):
    minari = pytest.importorskip("minari")
    pytest.importorskip("h5py")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    raw, zstd = stores
    export_minari(raw, "tests/raw-v0")
    export_minari(zstd, "tests/zstd-v0")
    a, b = minari.load_dataset("tests/raw-v0"), minari.load_dataset("tests/zstd-v0")
    assert a.total_episodes == b.total_episodes == 5
    for x, y in zip(a.iterate_episodes(), b.iterate_episodes()):
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(x, key), getattr(y, key)) and getattr(x, key).dtype == getattr(y, key).dtype
        assert x.infos.keys() == y.infos.keys() and np.array_equal(x.infos["frame"], y.infos["frame"])


@pytest.mark.parametrize("suffix", [".npz", ".hdf5"])
def test_d4rl_export_decodes(stores, tmp_path, suffix):
    raw, zstd = stores
    export_d4rl(raw, tmp_path / f"raw{suffix}")
    export_d4rl(zstd, tmp_path / f"zstd{suffix}")
    if suffix == ".npz":
        with np.load(tmp_path / "raw.npz") as a, np.load(tmp_path / "zstd.npz") as b:
            arrays = [(key, a[key], b[key]) for key in a.files if not key.startswith("metadata")]
    else:
        h5py = pytest.importorskip("h5py")
        with h5py.File(tmp_path / "raw.hdf5", "r") as a, h5py.File(tmp_path / "zstd.hdf5", "r") as b:
            keys = []
            a.visit(lambda key: keys.append(key) if isinstance(a[key], h5py.Dataset) else None)
            arrays = [(key, a[key][()], b[key][()]) for key in keys if not key.startswith("metadata")]
    names = {key for key, _, _ in arrays}
    assert {"observations", "next_observations", "infos/frame"} <= names
    for key, x, y in arrays:
        assert x.dtype == y.dtype and np.array_equal(x, y), key


def test_memmap_replay_buffer_export_decodes(stores, tmp_path):
    raw, zstd = stores
    export_memmap_replay_buffer(raw, tmp_path / "raw_mrb", lossy=True)
    export_memmap_replay_buffer(zstd, tmp_path / "zstd_mrb", lossy=True)
    for name in ("observation", "frame", "action", "reward"):
        a = np.load(tmp_path / "raw_mrb" / f"{name}.data.npy")
        b = np.load(tmp_path / "zstd_mrb" / f"{name}.data.npy")
        assert np.array_equal(a, b) and a.dtype == b.dtype, name
