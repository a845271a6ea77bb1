"""memmap-replay-buffer 0.2.3's ConcatReplayBuffer (compat/concat.py), on a ShardSet."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memmap_replay import ConcatReplayBuffer, InvalidDataError, OptionError, ReadOnlyError, StoreNotFoundError

FIELDS = dict(state=("float", (2,)), action="int")
META = dict(score="float")


@pytest.fixture
def folders(make_buffer):
    """a: one episode of 5 steps; empty: none; b: episodes of 8 and 3 steps (longer max_timesteps)."""
    a = make_buffer("a", fields=FIELDS, meta_fields=META, max_episodes=2, max_timesteps=10)
    empty = make_buffer("empty", fields=FIELDS, meta_fields=META, max_episodes=2, max_timesteps=10)
    b = make_buffer("b", fields=FIELDS, meta_fields=META, max_episodes=3, max_timesteps=12)
    for buffer, length, score in ((a, 5, 1.0), (b, 8, 2.0), (b, 3, 3.0)):
        t = np.arange(length, dtype=np.float32)
        buffer.store_episode(state=np.stack([t, t], axis=1) * score, action=np.full(length, int(score)), score=score)
    return [a.folder, empty.folder, b.folder]


def test_counts_and_capacities_add_up(folders):
    concat = ConcatReplayBuffer(folders)
    assert (concat.num_episodes, len(concat), concat.max_episodes, concat.max_timesteps) == (3, 3, 7, 12)
    assert concat.fieldnames == ("state", "action") and concat.meta_fieldnames == ("score",)
    assert concat.read_only


def test_dataset_runs_through_the_folders_in_order(folders):
    dataset = ConcatReplayBuffer(folders).dataset()
    assert len(dataset) == 3
    assert [dataset[i]["_lens"].item() for i in range(3)] == [5, 8, 3]
    assert [dataset[i]["score"].item() for i in range(3)] == [1.0, 2.0, 3.0]
    assert dataset[0]["state"].shape == (5, 2) and torch.equal(dataset[0]["state"][-1], torch.tensor([4.0, 4.0]))


def test_dataloader_pads_each_batch_to_its_longest_episode_across_folders(folders):
    batches = list(ConcatReplayBuffer(folders).dataloader(batch_size=2, return_mask=True))
    assert [batch["state"].shape for batch in batches] == [(2, 8, 2), (1, 3, 2)]
    first = batches[0]
    assert torch.equal(first["state"][0, 5:], torch.zeros(3, 2)) and first["_mask"][0].sum().item() == 5
    named = next(iter(ConcatReplayBuffer(folders).dataloader(batch_size=3, timestep_level=True,
                                                             to_named_tuple=("state", "score"))))
    assert named.state.shape == (3, 2)


def test_get_all_data_pads_to_the_longest_episode(folders):
    data = ConcatReplayBuffer(folders).get_all_data()
    assert set(data) == {"state", "action", "score", "episode_lens"}
    assert data["state"].shape == (3, 8, 2) and data["action"].shape == (3, 8)
    assert torch.equal(data["episode_lens"], torch.tensor([5, 8, 3]))
    assert torch.equal(data["action"][0, 5:], torch.zeros(3, dtype=data["action"].dtype))
    only = ConcatReplayBuffer(folders).get_all_data(fields=("action",))
    assert set(only) == {"action"}


def test_writes_are_refused(folders):
    concat = ConcatReplayBuffer(folders)
    concat.flush()  # nothing to write
    for write in (concat.clear, concat.store_episode, concat.store, concat.update, concat.advance_episode):
        with pytest.raises(ReadOnlyError, match=f"read-only: it cannot {write.__name__}"):
            write()


def test_bad_folder_lists_are_refused(folders, make_buffer, tmp_path):
    with pytest.raises(OptionError, match="at least one store folder"):
        ConcatReplayBuffer([])
    with pytest.raises(StoreNotFoundError, match="missing"):
        ConcatReplayBuffer([tmp_path / "missing"])
    other = make_buffer("other", fields=dict(state=("float", (3,))))
    with pytest.raises(InvalidDataError, match="same fields"):
        ConcatReplayBuffer([folders[0], other.folder])
    with pytest.raises(OptionError, match="are empty"):
        ConcatReplayBuffer([folders[1]]).dataset()


def test_a_dataloaders_transform_runs_once_on_the_whole_batch_across_folders(folders):
    sizes = []

    def counted(batch):
        sizes.append(len(batch["state"]))
        return batch

    batch = next(iter(ConcatReplayBuffer(folders).dataloader(batch_size=16, timestep_level=True, transform=counted)))
    assert sizes == [16] and len(batch["state"]) == 16  # one call with the rows of both folders


def test_options_memmap_replay_buffer_had_not_are_refused_by_name(folders):
    for options in (dict(window=2), dict(transitions=True), dict(allow_empty=True)):
        with pytest.raises(OptionError, match=r"ConcatReplayBuffer.dataset makes memmap-replay-buffer's datasets"):
            ConcatReplayBuffer(folders).dataset(**options)


def test_get_all_data_pads_with_the_field_default_within_and_across_folders(make_buffer):
    fields = dict(reward=("float", (), -1.0))
    short = make_buffer("short", fields=fields, meta_fields={}, max_episodes=2, max_timesteps=10)
    long = make_buffer("long", fields=fields, meta_fields={}, max_episodes=2, max_timesteps=10)
    short.store_episode(reward=np.zeros(2))
    short.store_episode(reward=np.zeros(3))
    long.store_episode(reward=np.zeros(5))
    reward = ConcatReplayBuffer([short.folder, long.folder]).get_all_data()["reward"]
    assert reward.shape == (3, 5)
    assert reward[0].tolist() == [0.0, 0.0, -1.0, -1.0, -1.0]  # past its end, and past its folder's longest
    assert reward[1].tolist() == [0.0, 0.0, 0.0, -1.0, -1.0]
