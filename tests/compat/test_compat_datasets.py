"""memmap-replay-buffer 0.2.3's datasets (compat/datasets.py): its constructors, keys, shapes and padding."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from memmap_replay import (OptionError, ReplayDataset, ReplayDatasetNStep, ReplayDatasetTimestep,
                           ReplayDatasetTimeWindow, ReplayDatasetTrajectory)
from memmap_replay.compat.datasets import dataset_of

FIELDS = dict(obs=("float", (2,)), reward="float", done="bool")


@pytest.fixture
def buffer(make_buffer):
    """Episode 0: 5 steps (expert), episode 1: 3 steps, episode 2: 1 step (expert); obs = [episode, t]."""
    buffer = make_buffer(fields=FIELDS, meta_fields=dict(is_expert="bool"), max_timesteps=8)
    for number, length, expert in ((0, 5, True), (1, 3, False), (2, 1, True)):
        t = np.arange(length, dtype=np.float32)
        buffer.store_episode(obs=np.stack([np.full(length, number, np.float32), t], axis=1), reward=10 * number + t,
                             done=t == length - 1, is_expert=expert)
    return buffer


def test_trajectory_items_hold_the_episode_its_meta_and_length(buffer):
    dataset = ReplayDatasetTrajectory(buffer, return_indices=True)
    assert ReplayDataset is ReplayDatasetTrajectory and len(dataset) == 3
    item = dataset[1]
    assert set(item) == {"obs", "reward", "done", "is_expert", "_lens", "_index"}
    assert item["obs"].shape == (3, 2) and item["_lens"].item() == 3 and item["_index"].item() == 1
    assert torch.equal(item["reward"], torch.tensor([10.0, 11.0, 12.0])) and not item["is_expert"]


def test_trajectory_without_slicing_gives_max_timesteps_rows_zero_past_the_end(buffer):
    item = ReplayDatasetTrajectory(buffer, fields=("reward",), slice_by_episode_len=False)[1]
    assert item["reward"].shape == (8,) and torch.equal(item["reward"][3:], torch.zeros(5))
    assert item["_lens"].item() == 3


def test_trajectory_options_as_0_2_3_takes_them(buffer):
    assert "_lens" not in ReplayDatasetTrajectory(buffer, return_episode_lens=False)[0]
    assert set(ReplayDatasetTrajectory(buffer, include_metadata=False)[0]) == {"obs", "reward", "done", "_lens"}
    assert len(ReplayDatasetTrajectory(buffer, filter_meta=dict(is_expert=True))) == 2
    assert len(ReplayDatasetTrajectory(buffer, min_episode_len=3)) == 2
    assert "state" in ReplayDatasetTrajectory(buffer, fieldname_map=dict(obs="state"))[0]
    batch = ReplayDatasetTrajectory(buffer).__getitems__([0, 1])
    assert batch["obs"].shape == (2, 5, 2) and torch.equal(batch["_lens"], torch.tensor([5, 3]))


def test_trajectory_refuses_what_0_2_3_refused(buffer):
    with pytest.raises(OptionError, match="filter_fields applies to single steps"):
        ReplayDatasetTrajectory(buffer, filter_fields=dict(done=False))
    with pytest.raises(OptionError, match="return_episode_lens=False needs slice_by_episode_len=True"):
        ReplayDatasetTrajectory(buffer, slice_by_episode_len=False, return_episode_lens=False)
    with pytest.raises(OptionError, match="include_metadata must be True or False"):
        ReplayDatasetTrajectory(buffer, include_metadata="yes")


def test_timestep_items_and_their_indices(buffer):
    dataset = ReplayDatasetTimestep(buffer, fields=("obs",), return_indices=True, include_metadata=False)
    assert len(dataset) == 9
    item = dataset[6]
    assert set(item) == {"obs", "_indices"} and torch.equal(item["_indices"], torch.tensor([1, 1]))
    assert torch.equal(item["obs"], torch.tensor([1.0, 1.0]))
    assert len(ReplayDatasetTimestep(buffer, filter_fields=dict(done=True))) == 3


def test_n_step_items_as_0_2_3_gives_them(buffer):
    dataset = ReplayDatasetNStep(buffer, 3, current_fields=("obs",), next_fields=("obs",),
                                 sequence_fields=("reward",), return_indices=True)
    assert len(dataset) == 6  # episode 0: t = 0..3, episode 1: t = 0, 1; episode 2 (1 step) has none
    first, last = dataset[0], dataset[3]
    assert torch.equal(first["next_obs"], torch.tensor([0.0, 3.0])) and first["n_step_lens"].item() == 3
    assert torch.equal(last["next_obs"], torch.tensor([0.0, 4.0])) and last["n_step_lens"].item() == 1
    assert torch.equal(last["seq_reward"], torch.tensor([3.0, 0.0, 0.0]))
    assert torch.equal(last["_indices"], torch.tensor([0, 3])) and "is_expert" in last


def test_a_time_window_per_episode_at_a_random_start_padded_when_short(buffer):
    dataset = ReplayDatasetTimeWindow(buffer, window_length=4, return_indices=True, seed=7)
    assert len(dataset) == 3
    starts = set()
    for _ in range(20):
        item = dataset[0]
        start = item["_start"].item()
        starts.add(start)
        assert item["obs"].shape == (4, 2) and item["_lens"].item() == 4
        assert torch.equal(item["obs"][:, 1], torch.arange(start, start + 4, dtype=torch.float32))
        assert item["_reaches_episode_end"].item() == (start == 1)
    assert starts == {0, 1}
    short = dataset[1]
    assert short["_start"].item() == 0 and short["_lens"].item() == 3 and short["_reaches_episode_end"]
    assert torch.equal(short["reward"], torch.tensor([10.0, 11.0, 12.0, 0.0])) and "_mask" not in short


def test_a_seeded_time_window_draws_the_same_starts(buffer):
    def starts():
        dataset = ReplayDatasetTimeWindow(buffer, window_length=2, return_indices=True, seed=3)
        return [dataset[0]["_start"].item() for _ in range(10)]

    assert starts() == starts()


def test_datasets_take_a_folder_and_pickle_as_paths(buffer):
    dataset = ReplayDatasetTimestep(str(buffer.folder))
    copy = pickle.loads(pickle.dumps(dataset))
    assert torch.equal(copy[4]["obs"], dataset[4]["obs"])
    with pytest.raises(OptionError, match="reads a ReplayBuffer"):
        ReplayDatasetTimestep(np.zeros(3))


def test_dataset_of_switches_as_0_2_3_dataset_does(buffer, make_buffer):
    assert isinstance(dataset_of(buffer), ReplayDatasetTrajectory)
    assert isinstance(dataset_of(buffer, timestep_level=True), ReplayDatasetTimestep)
    assert isinstance(dataset_of(buffer, n_steps=2), ReplayDatasetNStep)
    with pytest.raises(OptionError, match="choose one of n_steps and timestep_level"):
        dataset_of(buffer, n_steps=2, timestep_level=True)
    with pytest.raises(OptionError, match="is empty"):
        dataset_of(make_buffer("empty"))


def test_a_compat_dataset_feeds_the_buffer_dataloader(buffer):
    loader = buffer.dataloader(batch_size=2, dataset=ReplayDatasetTrajectory(buffer, fields=("reward",)))
    batches = list(loader)
    assert [batch["reward"].shape for batch in batches] == [(2, 5), (1, 1)]
