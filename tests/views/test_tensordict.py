"""output='tensordict': TensorDict batches of batch size [B] (single items) or [B, T] (sequences)."""

import sys

import numpy as np
import pytest
import torch

from memmap_replay import MissingExtraError, OptionError
from memmap_replay.views.loader import BatchIndexSampler, ReplayDataLoader


REASON = "tensordict is the [tensordict] extra (pip install 'memmap-replay[tensordict]'); its tests run where it is"


@pytest.fixture
def tensordict():
    return pytest.importorskip("tensordict", reason=REASON)


# view options, and the batch size of a dict batch of n items (T: the longest episode of the batch)
KINDS = {
    "timestep": (dict(timestep_level=True), lambda n, b: [n]),
    "timestep-stacked": (dict(timestep_level=True, frame_stack=2, stack_fields=("obs",)), lambda n, b: [n]),
    "nstep": (dict(n_steps=3, gamma=0.9, sequence_fields=("reward",), return_indices=True), lambda n, b: [n]),
    "window": (dict(window=4), lambda n, b: [n, 4]),
    "window-time-major": (dict(window=4, time_major=True), lambda n, b: [4, n]),
    "window-partial": (dict(window=4, allow_partial=True, return_indices=True), lambda n, b: [n, 4]),
    "trajectory": (dict(return_mask=True), lambda n, b: [n, int(b["_lens"].max())]),
}
PER_STEP = {"obs", "action", "reward", "_mask"}


def per_item(td, name, options):
    """A TensorDict entry as the dict has it: per-sequence entries of a sequence view taken back from T."""
    if td.batch_dims == 1 or name in PER_STEP:
        return td[name]
    return td[name][0] if options.get("time_major") else td[name][:, 0]


@pytest.mark.parametrize("kind", KINDS)
def test_batch_size_and_values_match_the_dict_output(tensordict, filled, kind):
    options, size = KINDS[kind]
    plain = list(filled.dataloader(4, shuffle=True, seed=1, **options))
    tds = list(filled.dataloader(4, shuffle=True, seed=1, output="tensordict", **options))
    assert len(tds) == len(plain) > 1
    for batch, td in zip(plain, tds):
        assert isinstance(td, tensordict.TensorDict)
        assert list(td.batch_size) == size(len(batch["task_id"]), batch)
        assert set(td.keys()) == set(batch)
        for name, value in batch.items():
            assert torch.equal(per_item(td, name, options), value), name


def test_sequence_views_repeat_per_sequence_outputs_along_t_without_copies(tensordict, filled):
    td = next(iter(filled.dataloader(3, output="tensordict")))  # trajectories of 5, 6 and 7 steps
    assert list(td.batch_size) == [3, 7]
    assert td["_lens"].tolist() == [[5] * 7, [6] * 7, [7] * 7]
    assert td["_lens"].stride() == (1, 0)  # an expanded view
    assert td["task_id"][:, 0].tolist() == [0, 1, 0]
    assert td["obs"].shape == (3, 7, 3)


def test_timestep_and_nstep_views_keep_batch_size_b(tensordict, filled):
    td = next(iter(filled.dataloader(4, n_steps=2, sequence_fields=("action",), output="tensordict")))
    assert list(td.batch_size) == [4]
    assert td["seq_action"].shape == (4, 2, 2)  # the n steps are a feature dimension here
    assert td["next_obs"].shape == (4, 3)


def test_a_trajectory_view_without_per_step_fields_is_b(tensordict, filled):
    td = next(iter(filled.dataloader(3, fields=(), output="tensordict")))
    assert list(td.batch_size) == [3]
    assert td["_lens"].tolist() == [5, 6, 7]


def test_renamed_fields_are_still_per_step(tensordict, filled):
    td = next(iter(filled.dataloader(2, window=3, fieldname_map={"obs": "observation", "task_id": "task"},
                                     output="tensordict")))
    assert list(td.batch_size) == [2, 3]
    assert td["observation"].shape == (2, 3, 3)
    assert td["task"].shape == (2, 3)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_workers_give_the_same_tensordicts(tensordict, filled, num_workers):
    inline = list(filled.dataloader(4, window=3, seed=2, shuffle=True))
    tds = list(filled.dataloader(4, window=3, seed=2, shuffle=True, num_workers=num_workers, output="tensordict"))
    assert len(tds) == len(inline)
    for batch, td in zip(inline, tds):
        assert list(td.batch_size) == [len(batch["obs"]), 3]
        assert torch.equal(td["obs"], batch["obs"])
        assert torch.equal(td["task_id"][:, 0], batch["task_id"])


def test_device_is_the_tensordicts_device(tensordict, filled):
    td = next(iter(filled.dataloader(4, timestep_level=True, device="cpu", output="tensordict")))
    assert td.device == torch.device("cpu")
    assert list(td.batch_size) == [4]


def test_samplers_dataloaders_take_output(tensordict, filled):
    sampler = filled.sampler("prioritized", seed=0)
    td = next(iter(sampler.dataloader(4, num_batches=1, output="tensordict")))
    assert list(td.batch_size) == [4]
    assert td["_key"].shape == (4,) and td["_weight"].shape == (4,)
    sequences = filled.sampler("sequence", window=3, seed=0)
    td = next(iter(sequences.dataloader(2, num_batches=1, output="tensordict")))
    assert list(td.batch_size) == [2, 3]
    assert td["_key"].shape == (2, 3)


# ---- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["tuple", "TensorDict", None, 1, ["dict"]])
def test_output_must_be_dict_or_tensordict(filled, output):
    with pytest.raises(OptionError, match=r"output must be one of 'dict', 'tensordict', 'torchrl' \(got "):
        filled.dataloader(4, timestep_level=True, output=output)


def test_output_is_checked_by_the_samplers_dataloader_and_the_loader(filled):
    with pytest.raises(OptionError, match=r"output must be one of 'dict', 'tensordict', 'torchrl' \(got 'td'\)"):
        filled.sampler("uniform", seed=0).dataloader(4, num_batches=1, output="td")
    view = filled.dataset(timestep_level=True)
    with pytest.raises(OptionError, match=r"output must be one of 'dict', 'tensordict', 'torchrl' \(got 'td'\)"):
        ReplayDataLoader(view, BatchIndexSampler(len(view), 4), output="td")


def test_tensordict_and_named_tuples_do_not_combine(filled):
    with pytest.raises(OptionError, match=r"output='tensordict' and to_named_tuple=\('obs',\) cannot be combined"):
        filled.dataloader(4, timestep_level=True, output="tensordict", to_named_tuple=("obs",))


def test_without_the_extra_the_error_names_it(filled, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensordict", None)  # import fails as if it were not installed
    with pytest.raises(MissingExtraError, match=r"output='tensordict' needs the package tensordict, which is not "
                                                r"installed: pip install 'memmap-replay\[tensordict\]'") as caught:
        filled.dataloader(4, timestep_level=True, output="tensordict")
    assert isinstance(caught.value, ImportError)
    assert np.array_equal(next(iter(filled.dataloader(2, timestep_level=True)))["reward"].numpy(), [0, 1])
