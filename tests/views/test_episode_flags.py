"""episode_flags=True on trajectory and window views: Dreamer's _is_first, _is_last and _is_terminal per step,
on episodes of known ends (terminated, truncated, not recorded), with padding, time-major, renames, a ring."""

import numpy as np
import pytest
import torch

from memmap_replay import OptionError
from memmap_replay.views.kinds import TrajectoryView, WindowView

from conftest import episode_arrays

FLAGS = ("_is_first", "_is_last", "_is_terminal")


def flags(batch):
    return [batch[name].int().tolist() for name in FLAGS]


def test_trajectory_flags_by_end_and_padding(three):
    view = TrajectoryView(three.episode_store, episode_flags=True, return_mask=True)
    batch = view.__getitems__([0, 1, 2])
    for name in FLAGS:
        assert batch[name].dtype == torch.bool and batch[name].shape == (3, 4)
    first, last, terminal = flags(batch)
    assert first == [[1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    assert last == [[0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 1, 0]]  # padded steps (t = 3 of B and C) are False
    assert terminal == [[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]  # only the terminated episode
    assert not (batch["_is_last"] & ~batch["_mask"]).any()
    assert set(FLAGS) <= set(view.sequence_outputs())
    assert not set(FLAGS) & set(TrajectoryView(three.episode_store).__getitems__([0]))  # off by default


def test_window_flags_strict_partial_and_time_major(three):
    strict = three.dataset(window=2, episode_flags=True)
    batch = strict.__getitems__(np.arange(len(strict)))  # A: t = 0, 1, 2; B: 0, 1; C: 0, 1
    first, last, terminal = flags(batch)
    assert first == [[1, 0], [0, 0], [0, 0], [1, 0], [0, 0], [1, 0], [0, 0]]
    assert last == [[0, 0], [0, 0], [0, 1], [0, 0], [0, 1], [0, 0], [0, 1]]
    assert terminal == [[0, 0], [0, 0], [0, 1], [0, 0], [0, 0], [0, 0], [0, 0]]
    partial = WindowView(three.episode_store, 3, allow_partial=True, time_major=True, episode_flags=True)
    batch = partial.__getitems__([3, 6, 8])  # A at t = 3, B at t = 2, C at t = 1
    assert batch["_is_last"].shape == (3, 3)  # (L, B)
    first, last, terminal = flags(batch)
    assert first == [[0, 0, 0]] * 3
    assert last == [[1, 1, 0], [0, 0, 1], [0, 0, 0]]
    assert terminal == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert not (batch["_is_last"] & ~batch["_mask"]).any()


def test_flags_through_the_dataloader_and_renames(three):
    loader = three.dataloader(3, episode_flags=True, fieldname_map=dict(_is_first="is_first",
                                                                          _is_terminal="is_terminal"))
    batch = next(iter(loader))
    assert {"is_first", "_is_last", "is_terminal"} <= set(batch) and "_is_first" not in batch
    assert batch["is_terminal"].sum().item() == 1 and batch["is_first"][:, 0].all()


def test_flag_option_errors(three):
    with pytest.raises(OptionError, match=r"episode_flags must be True or False \(got 'yes'\)"):
        three.dataset(episode_flags="yes")
    with pytest.raises(OptionError, match=r"episode_flags must be True or False \(got 1\)"):
        WindowView(three.episode_store, 2, episode_flags=1)
    with pytest.raises(OptionError, match=r"\['episode_flags'\] do not apply to a TimestepView"):
        three.dataset(timestep_level=True, episode_flags=True)
    with pytest.raises(OptionError, match=r"\['episode_flags'\] do not apply to a NStepView"):
        three.dataset(n_steps=2, episode_flags=True)


def test_flags_follow_the_ring(make_buffer):
    buffer = make_buffer(max_episodes=2, max_timesteps=5, max_steps=12, circular=True)
    buffer.store_episode(**episode_arrays(0, 3), task_id=0, end="terminated")
    buffer.store_episode(**episode_arrays(1, 4), task_id=1, end="truncated")
    view = buffer.dataset(episode_flags=True)
    assert view.__getitems__([0, 1])["_is_terminal"].any(1).tolist() == [True, False]
    buffer.store_episode(**episode_arrays(2, 2), task_id=2, end="terminated")  # evicts episode 0
    assert view.refresh() is True
    batch = view.__getitems__([0, 1])
    assert batch["task_id"].tolist() == [1, 2]
    assert batch["_is_terminal"].int().tolist() == [[0, 0, 0, 0], [0, 1, 0, 0]]
    assert batch["_is_last"].int().tolist() == [[0, 0, 0, 1], [0, 1, 0, 0]]


def test_flags_agree_with_the_episodes_read_back(make_buffer):
    """Random lengths and ends in a ring: each trajectory's flags are the episode's terminations at its last
    step, and windows' flags are the trajectory's flags at the window's steps."""
    rng = np.random.default_rng(16)
    buffer = make_buffer(max_episodes=6, max_timesteps=7, max_steps=40, circular=True)
    for number in range(15):
        end = rng.choice(["terminated", "truncated", "none"])
        buffer.store_episode(**episode_arrays(number, int(rng.integers(1, 8))), task_id=number,
                             end=None if end == "none" else str(end))
    episodes = list(buffer.iterate_episodes())
    trajectories = buffer.dataset(episode_flags=True, return_mask=True)
    batch = trajectories.__getitems__(np.arange(len(trajectories)))
    for row, episode in enumerate(episodes):
        steps = len(episode)
        assert batch["task_id"][row].item() == episode.meta["task_id"]
        assert batch["_is_terminal"][row, :steps].numpy().tolist() == episode.terminations.tolist()
        assert batch["_is_last"][row, :steps].numpy().tolist() == [False] * (steps - 1) + [True]
        assert batch["_is_first"][row].sum().item() == 1 and not batch["_is_last"][row, steps:].any()
    windows = buffer.dataset(window=3, allow_partial=True, episode_flags=True, return_indices=True)
    items = rng.permutation(len(windows))[:20]
    sampled = windows.__getitems__(items)
    positions = {slot: row for row, slot in enumerate(trajectories.table.slots.tolist())}
    for i in range(len(items)):
        row, t = positions[sampled["_index"][i].item()], sampled["_t"][i].item()
        inside = sampled["_mask"][i]
        for name in FLAGS:
            expected = batch[name][row, t:t + 3]
            within = inside[:len(expected)]
            assert sampled[name][i, :len(expected)][within].tolist() == expected[within].tolist()
            assert not sampled[name][i][~inside].any()
