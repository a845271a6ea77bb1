"""The same episodes in memmap-replay-buffer 0.2.3 (the real package, when installed) and here give the same
items: every key, dtype and value of each dataset, the collector's stored episodes, and the frame helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import memmap_replay

mrb = pytest.importorskip("memmap_replay_buffer", reason="memmap-replay-buffer 0.2.3, the reference")

FIELDS = dict(obs=("float", (2,)), reward="float", done="bool", action="int")
META = dict(task="int", expert="bool")
LENGTHS = (5, 3, 1, 6)


def fill(buffer) -> None:
    rng = np.random.default_rng(11)
    for number, length in enumerate(LENGTHS):
        buffer.store_episode(obs=rng.standard_normal((length, 2)).astype(np.float32),
                             reward=rng.standard_normal(length).astype(np.float32),
                             done=np.arange(length) == length - 1,
                             action=rng.integers(0, 5, length).astype(np.int32), task=number,
                             expert=bool(number % 2))


@pytest.fixture
def pair(tmp_path):
    theirs = mrb.ReplayBuffer(tmp_path / "theirs", 8, 8, FIELDS, meta_fields=META)
    ours = memmap_replay.ReplayBuffer(tmp_path / "ours", 8, 8, FIELDS, meta_fields=META)
    fill(theirs)
    fill(ours)
    yield theirs, ours
    ours.close()


def same_items(theirs, ours) -> None:
    assert len(theirs) == len(ours)
    for index in range(len(ours)):
        expected, got = theirs[index], ours[index]
        assert set(expected) == set(got), index
        for name, value in expected.items():
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, (index, name)
            assert torch.equal(got[name], value), (index, name)


@pytest.mark.parametrize("name, options", [
    ("ReplayDatasetTrajectory", dict(return_indices=True)),
    ("ReplayDatasetTrajectory", dict(slice_by_episode_len=False, fields=("obs", "done"))),
    ("ReplayDatasetTrajectory", dict(return_episode_lens=False, filter_meta=dict(expert=True))),
    ("ReplayDatasetTimestep", dict(return_indices=True, filter_fields=dict(done=False))),
    ("ReplayDatasetTimestep", dict(include_metadata=False, fieldname_map=dict(obs="state"))),
    ("ReplayDatasetNStep", dict(n_steps=3, sequence_fields=("reward", "action"), return_indices=True)),
    ("ReplayDatasetNStep", dict(n_steps=2, current_fields=("obs",), next_fields=("obs",),
                                fieldname_map=dict(next_obs="next_state"))),
    ("ReplayDatasetTimeWindow", dict(window_length=8, return_indices=True)),  # every start is 0
])
def test_each_dataset_gives_the_items_of_0_2_3(pair, name, options):
    theirs, ours = pair
    same_items(getattr(mrb, name)(theirs, **options), getattr(memmap_replay, name)(ours, **options))


def test_a_time_window_draws_only_starts_0_2_3_could_draw(pair):
    theirs, ours = pair
    dataset = memmap_replay.ReplayDatasetTimeWindow(ours, window_length=2, return_indices=True, seed=1)
    reference = mrb.ReplayDatasetTimeWindow(theirs, window_length=2, return_indices=True)
    for index in range(len(dataset)):
        for _ in range(5):
            got = dataset[index]
            start = got.pop("_start").item()
            expected = reference[index]
            while expected["_start"].item() != start:  # 0.2.3 draws from numpy's global generator
                expected = reference[index]
            del expected["_start"]
            assert set(got) == set(expected)
            assert all(torch.equal(got[key], expected[key]) for key in expected)


def test_the_collector_stores_what_0_2_3_stores(pair):
    theirs, ours = pair
    rng = np.random.default_rng(2)
    steps = [dict(obs=rng.standard_normal((3, 2)).astype(np.float32), action=rng.integers(0, 5, (3, 1)))
             for _ in range(4)]
    for buffer, collector_class in ((theirs, mrb.EpisodeCollector), (ours, memmap_replay.EpisodeCollector)):
        collector = collector_class(buffer, 3, fieldnames=("obs", "action"))
        for step in steps:
            collector.append(**step)
        collector.store(task=np.array([7, 8, 9]), expert=True)
    expected, got = theirs.get_all_data(), ours.get_all_data()
    for name in ("obs", "action", "task", "expert"):
        assert torch.equal(got[name][len(LENGTHS):], expected[name][len(LENGTHS):]), name


def test_the_frame_helpers_give_0_2_3_values():
    from memmap_replay_buffer import video

    rng = np.random.default_rng(4)
    floats = np.concatenate([rng.random(100), [0.5, 1.5, -0.2, 1.0]]).astype(np.float32)
    assert np.array_equal(memmap_replay.to_uint8(floats), video.to_uint8(floats))
    for frames in (rng.integers(0, 256, (7, 4, 6, 3), dtype=np.uint8), rng.random((5, 4, 6)).astype(np.float32)):
        for rows, columns in ((2, 3), (1, 8), (3, 1)):
            expected = video.frames_to_sheet(frames, rows, columns)
            got = memmap_replay.frames_to_sheet(frames, rows, columns)
            assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_concatenated_buffers_give_what_0_2_3_gives(tmp_path, pair):
    theirs, ours = pair
    other_theirs = mrb.ReplayBuffer(tmp_path / "theirs2", 3, 12, FIELDS, meta_fields=META)
    other_ours = memmap_replay.ReplayBuffer(tmp_path / "ours2", 3, 12, FIELDS, meta_fields=META)
    for buffer in (other_theirs, other_ours):
        buffer.store_episode(obs=np.ones((11, 2)), reward=np.ones(11), done=np.zeros(11, bool),
                             action=np.ones(11, np.int32), task=9, expert=False)
    expected = mrb.ConcatReplayBuffer([theirs.folder, other_theirs.folder])
    got = memmap_replay.ConcatReplayBuffer([ours.folder, other_ours.folder])
    assert (got.num_episodes, got.max_episodes, got.max_timesteps) == (
        expected.num_episodes, expected.max_episodes, expected.max_timesteps)
    same_items(expected.dataset(return_indices=True), got.dataset(return_indices=True))
    same_items(expected.dataset(n_steps=2), got.dataset(n_steps=2))
    for options in (dict(), dict(fields=("obs",)), dict(meta_fields=("task", "episode_lens"))):
        all_expected, all_got = expected.get_all_data(**options), got.get_all_data(**options)
        assert set(all_got) == set(all_expected), options
        for name, value in all_expected.items():
            # (episode_lens is int64 here, as ReplayBuffer.get_all_data gives it; 0.2.3's was int32)
            value = value.long() if name == "episode_lens" else value
            assert all_got[name].dtype == value.dtype and torch.equal(all_got[name], value), name
    other_ours.close()


def test_get_all_data_pads_with_each_field_s_default_as_0_2_3(tmp_path):
    fields = dict(reward=("float", (), -1.0), obs=("float", (2,), 0.5), action=("int", (), 7))
    theirs = mrb.ReplayBuffer(tmp_path / "theirs", 4, 6, fields)
    ours = memmap_replay.ReplayBuffer(tmp_path / "ours", 4, 6, fields)
    for buffer in (theirs, ours):
        for length in (4, 2):
            buffer.store_episode(reward=np.arange(length, dtype=np.float32), obs=np.zeros((length, 2), np.float32),
                                 action=np.zeros(length, np.int32))
    expected, got = theirs.get_all_data(), ours.get_all_data()
    for name in fields:
        assert got[name].dtype == expected[name].dtype and torch.equal(got[name], expected[name]), name
    assert got["reward"][1, 2:].tolist() == [-1.0, -1.0] and got["action"][1, 2:].tolist() == [7, 7]
    ours.close()


@pytest.mark.parametrize("call", [
    pytest.param(lambda b: b.episode_frames(len(LENGTHS), field="image"), id="episode_frames-past-the-end"),
    pytest.param(lambda b: b.episode_frames([0, 99], field="image"), id="episode_frames-several"),
    pytest.param(lambda b: b.store_datapoint(8, 0, "reward", 1.0), id="store_datapoint-past-max_episodes"),
    pytest.param(lambda b: b.store_datapoint(0, 8, "reward", 1.0), id="store_datapoint-past-max_timesteps"),
    pytest.param(lambda b: b.store_meta_datapoint(8, "task", 1), id="store_meta_datapoint-past-max_episodes"),
])
def test_an_index_past_the_end_says_out_of_range_as_0_2_3(tmp_path, call):
    """0.2.3's tests look for 'out of range' in these messages (ValueError there, OptionError, a ValueError, here)."""
    fields = {**FIELDS, "image": ("uint8", (2, 2, 3))}
    theirs = mrb.ReplayBuffer(tmp_path / "theirs", 8, 8, fields, meta_fields=META)
    ours = memmap_replay.ReplayBuffer(tmp_path / "ours", 8, 8, fields, meta_fields=META)
    for buffer in (theirs, ours):
        fill(buffer)
        with pytest.raises(ValueError, match="out of range"):
            call(buffer)
    ours.close()
