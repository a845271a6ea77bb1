"""memmap-replay-buffer 0.2.3's ReplayBufferH5PY (compat/h5.py): its arguments and extras, stored in this
project's format in the folder given."""

from __future__ import annotations

import numpy as np
import pytest

from memmap_replay import (InvalidDataError, OptionError, ReadOnlyError, ReplayBuffer, ReplayBufferH5PY,
                           UnsupportedFormatError)

FIELDS = dict(obs=("float", (4,)))


def test_it_takes_0_2_3_arguments_and_is_a_store_in_the_folder(tmp_path):
    buffer = ReplayBufferH5PY(tmp_path / "h5", 5, 10, FIELDS, h5py_compression="gzip", h5py_compression_opts=4)
    buffer.store_episode(obs=np.ones((3, 4)))
    assert isinstance(buffer, ReplayBuffer) and (tmp_path / "h5" / "meta.json").is_file()
    assert not (tmp_path / "h5" / "data.h5").exists() and buffer.h5py_compression == "gzip"
    buffer.file.flush()
    buffer.file.close()
    reopened = ReplayBufferH5PY.from_folder(tmp_path / "h5", read_only=True)
    assert isinstance(reopened, ReplayBufferH5PY) and reopened.num_episodes == 1
    assert ReplayBuffer.from_folder(tmp_path / "h5").num_episodes == 1


def test_reopening_never_wipes_unless_overwrite(tmp_path):
    first = ReplayBufferH5PY(tmp_path, 5, 10, FIELDS)
    first.store_episode(obs=np.ones((2, 4)))
    first.close()
    assert ReplayBufferH5PY(tmp_path, 5, 10, FIELDS).num_episodes == 1


def test_a_folder_holding_0_2_3_data_h5_is_refused_with_the_conversion(tmp_path):
    (tmp_path / "data.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(UnsupportedFormatError, match="memmap-replay import"):
        ReplayBufferH5PY(tmp_path, 5, 10, FIELDS)
    with pytest.raises(UnsupportedFormatError, match="written by memmap-replay-buffer's ReplayBufferH5PY"):
        ReplayBufferH5PY.from_folder(tmp_path)
    with pytest.raises(OptionError, match="h5py_compression must be None or a filter name"):
        ReplayBufferH5PY(tmp_path / "other", 5, 10, FIELDS, h5py_compression=4)


def test_the_buffered_storer_stores_flush_freq_episodes_at_a_time(tmp_path):
    buffer = ReplayBufferH5PY(tmp_path, 10, 5, FIELDS, meta_fields=dict(score="float"))
    storer = buffer.get_buffered_storer(flush_freq=3)
    rng = np.random.default_rng(0)
    episodes = [(rng.standard_normal((5, 4)).astype(np.float32), int(rng.integers(1, 6))) for _ in range(4)]
    counts = []
    for number, (obs, length) in enumerate(episodes):
        storer(obs=obs, episode_lens=length, score=float(number))
        counts.append(buffer.num_episodes)
    assert counts == [0, 0, 3, 3]
    storer(force_flush=True)
    assert buffer.num_episodes == 4
    assert buffer.episode_lens[:4].tolist() == [length for _, length in episodes]
    data = buffer.get_all_data()
    for number, (obs, length) in enumerate(episodes):
        assert np.array_equal(data["obs"][number, :length].numpy(), obs[:length])
    assert data["score"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_buffered_storer_refuses_bad_episodes_before_storing_any(tmp_path):
    buffer = ReplayBufferH5PY(tmp_path, 10, 5, FIELDS)
    storer = buffer.get_buffered_storer(flush_freq=2)
    with pytest.raises(InvalidDataError, match="unknown field"):
        storer(action=np.zeros(3))
    storer(obs=np.zeros((2, 4)))
    with pytest.raises(InvalidDataError, match="must hold the same fields"):
        storer(obs=np.zeros((2, 4)), episode_lens=1)
    with pytest.raises(InvalidDataError, match="obs"):
        storer(obs=np.zeros((2, 3)))
    assert buffer.num_episodes == 0
    storer(obs=np.ones((3, 4)))  # the refused ones were not kept
    assert buffer.episode_lens[:2].tolist() == [2, 3]
    with pytest.raises(OptionError, match="flush_freq must be a positive int"):
        buffer.get_buffered_storer(0)
    buffer.close()
    reader = ReplayBufferH5PY.from_folder(tmp_path, read_only=True)
    with pytest.raises(ReadOnlyError, match="read-only"):
        reader.get_buffered_storer(1)(obs=np.zeros((2, 4)))
