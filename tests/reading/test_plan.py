"""Composing a read: the options not at their defaults, split by owner into one frozen plan; an old spelling
is taken for one release with a DeprecationWarning that names the new one; the table's checks run before
anything is built."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from memmap_replay import OptionError, ReplayBuffer
from memmap_replay.reading import build
from memmap_replay.reading.plan import compose
from memmap_replay.reading.table import DATALOADER, SAMPLER, options_of


@pytest.fixture
def buffer(tmp_path):
    buffer = ReplayBuffer(tmp_path / "store", max_episodes=4, max_timesteps=10,
                          fields={"obs": ("float", 2), "reward": "float"})
    rng = np.random.default_rng(0)
    buffer.store_episode(obs=rng.random((6, 2)), reward=rng.random(6), end="terminated")
    yield buffer
    buffer.close()


def test_a_plan_holds_the_options_not_at_their_defaults_by_owner():
    everything = {option.name: option.default for option in options_of(DATALOADER)}
    plan = compose(DATALOADER, {**everything, "window": 3, "shuffle": True, "seed": 1, "num_workers": 2,
                                "return_indices": True})
    assert dict(plan.view) == {"window": 3, "return_indices": True}
    assert dict(plan.sampler) == {"shuffle": True, "seed": 1}
    assert dict(plan.loader) == {"num_workers": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.view = {}
    with pytest.raises(TypeError):
        plan.loader["device"] = "cpu"


def test_an_array_is_never_compared_with_a_default():
    plan = compose(DATALOADER, {"filter_meta": {"task": np.array([1, 2])}, "sequence_fields": ()})
    assert list(plan.view) == ["filter_meta"]


def test_the_old_spelling_of_draw_ahead_still_draws_ahead_and_names_its_new_name(buffer):
    with pytest.warns(DeprecationWarning, match=r"prefetch= of ReplayBuffer.sampler is now spelled draw_ahead="):
        sampler = buffer.sampler("uniform", seed=0, prefetch=2)
    assert sampler.draw_ahead == 2
    same = buffer.sampler("uniform", seed=0, draw_ahead=2)
    assert np.array_equal(sampler.batch(3)["_key"], same.batch(3)["_key"])
    with pytest.raises(OptionError, match=r"prefetch= and draw_ahead= are one option.*pass draw_ahead= only"), \
            pytest.warns(DeprecationWarning):
        buffer.sampler("uniform", prefetch=1, draw_ahead=2)
    with pytest.warns(DeprecationWarning, match=r"prefetch= of a UniformSampler is now spelled draw_ahead="):
        type(sampler)(sampler.view, prefetch=1)


def test_a_refused_option_builds_nothing(buffer, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a view was built for a refused call")

    monkeypatch.setattr(build, "build_view", never)
    for options, match in [(dict(device="nowhere"), "device must be a torch device"),
                           (dict(prefetch=-1), "prefetch must be an int >= 0"),
                           (dict(workers="fibers"), "workers must be one of"),
                           (dict(output="list"), "output must be one of"),
                           (dict(drop_last="yes"), "drop_last must be True or False")]:
        with pytest.raises(OptionError, match=match):
            buffer.dataloader(2, timestep_level=True, **options)
    with pytest.raises(OptionError, match="alpha must be a finite number >= 0"):
        buffer.sampler("prioritized", alpha=-1)


def test_an_option_of_another_kind_is_refused_with_what_this_kind_takes(buffer):
    with pytest.raises(OptionError, match=r"\['alpha'\] do not apply to a 'uniform' sampler; its options are "
                                          r"\[.*'replacement'.*\]"):
        buffer.sampler("uniform", alpha=0.5)
    with pytest.raises(OptionError, match=r"\['order'\] do not apply to a 'prioritized' sampler"):
        buffer.sampler("prioritized", order="blocks")
    with pytest.raises(OptionError, match=r"\['time_major'\] do not apply to a dataloader over a TrajectoryView"):
        buffer.dataloader(2, time_major=True)


def test_a_positional_mistake_is_the_librarys_error(buffer):
    with pytest.raises(OptionError, match=r"ReplayBuffer.dataset: .*positional"):
        buffer.dataset(True)
    with pytest.raises(OptionError, match=r"unknown keyword \['kindd'\] for ReplayBuffer.sampler .*did you mean "
                                          r"'kind'\?"):
        buffer.sampler(kindd="uniform")


def test_sampler_options_of_a_sampler_entry_all_reach_the_sampler(buffer):
    sampler = buffer.sampler("prioritized", seed=3, alpha=0.7, beta=0.5, beta_final=0.9, beta_steps=10,
                             name="mine", persist=False, draw_ahead=1, follow=False, rank=0, world_size=1)
    assert (sampler.alpha, sampler.name, sampler.draw_ahead, sampler.follow) == (0.7, "mine", 1, False)
    assert compose(SAMPLER, {"eta": 0.5}).sampler == {"eta": 0.5}


def test_an_old_spelling_warns_at_the_users_line(buffer):
    with pytest.warns(DeprecationWarning) as caught:
        buffer.sampler("uniform", prefetch=1)
    assert [record.filename for record in caught] == [__file__]
    her = dict(goal_field="obs", achieved_field="obs", reward_fn=_reached, seed=1)
    with pytest.warns(DeprecationWarning) as caught:
        buffer.dataset(hindsight=her)
    assert [record.filename for record in caught] == [__file__]


def _reached(achieved, desired):
    return np.zeros(len(achieved), dtype=np.float32)


def test_timestep_level_false_gives_a_sampler_whole_trajectories(buffer):
    from memmap_replay.views.kinds import TimestepView, TrajectoryView

    assert type(buffer.sampler("uniform").view) is TimestepView
    assert type(buffer.sampler("uniform", timestep_level=False).view) is TrajectoryView
    assert type(buffer.dataset(timestep_level=False)) is TrajectoryView
    assert type(buffer.dataset(timestep_level=None)) is TrajectoryView
    view = buffer.dataset(window=2)
    assert buffer.sampler("uniform", view=view).view is view


def test_an_argument_mistake_is_also_a_type_error(buffer):
    from memmap_replay import ArgumentError

    for call in (lambda: buffer.dataloader(), lambda: buffer.dataset(3), lambda: buffer.dataloader(4, bogus=1)):
        with pytest.raises(TypeError, match=r"ReplayBuffer\.data") as caught:
            call()
        assert isinstance(caught.value, ArgumentError) and isinstance(caught.value, OptionError)


def test_a_transform_given_in_dataset_kwargs_reaches_the_batches(buffer):
    def doubled(batch):
        return {**batch, "obs": batch["obs"] * 2}

    for key in ("transform", "collate_fn"):
        loader = buffer.dataloader(6, timestep_level=True, dataset_kwargs={key: doubled})
        plain = buffer.dataloader(6, timestep_level=True)
        assert torch.equal(next(iter(loader))["obs"], 2 * next(iter(plain))["obs"])
