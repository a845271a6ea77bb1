"""Hindsight relabelling: each strategy's goal steps, the ratio, the rewards, determinism, errors."""

import numpy as np
import pytest

from memmap_replay import HindsightView, InvalidDataError, ReplayBuffer

FIELDS = dict(obs=("float", 2), goal=("float", 2), achieved=("float", 2), reward="float")
DESIRED = 999.0


def reached(achieved, desired):
    """0 where the achieved goal is the desired one, else -1 (the usual sparse goal reward)."""
    return -(np.abs(achieved - desired).sum(axis=1) > 0.5).astype(np.float32)


def achieved_at(number, t):
    """The achieved goal of episode ``number`` at step t: (1000 * number + t, 0)."""
    return np.stack([1000.0 * number + np.asarray(t, dtype=float), np.zeros(np.shape(t))], axis=-1)


@pytest.fixture
def goals(tmp_path):
    """Episode 1: 6 steps, truncated, final row (t = 6). Episode 2: 4 steps, terminated, no final row."""
    buffer = ReplayBuffer(tmp_path / "her", 10, 10, fields=FIELDS)
    for number, length, end, final in ((1, 6, "truncated", True), (2, 4, "terminated", False)):
        extra = dict(final=dict(achieved=achieved_at(number, length))) if final else {}
        buffer.store_episode(obs=np.zeros((length, 2)), goal=np.full((length, 2), DESIRED),
                             reward=np.full(length, -1.0),
                             achieved=achieved_at(number, np.arange(length)), end=end, **extra)
    yield buffer
    buffer.close()


def relabel_all(buffer, strategy, **options):
    return HindsightView(buffer.episode_store, goal_field="goal", achieved_field="achieved", reward_fn=reached,
                         strategy=strategy, relabel_ratio=1.0, **options)


def goal_steps(view, items):
    batch = view.__getitems__(items)
    episode, t = view.positions.locate(np.asarray(items))
    number = view.table.ids[episode] + 1
    goal = batch["goal"].numpy()
    return batch, number, t, goal[:, 0] - 1000 * number


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_each_strategy_draws_goals_from_the_right_steps(goals, strategy):
    view = relabel_all(goals, strategy, relabel_seed=3)
    items = np.tile(np.arange(len(view)), 40)
    batch, number, t, step = goal_steps(view, items)
    last = np.where(number == 1, 6, 3)  # episode 1's final row is t = 6; episode 2 ends at its last step
    relabeled = batch["_relabeled"].numpy()
    # the terminated episode's last step has no stored next state: never relabelled
    assert (relabeled == ~((number == 2) & (t == 3))).all()
    step, t, last = step[relabeled], t[relabeled], last[relabeled]
    assert (batch["goal"].numpy()[relabeled, 1] == 0).all()
    if strategy == "future":
        assert ((step > t) & (step <= last)).all()
        assert set(step[t == 0]) == set(range(1, 7)) | set(range(1, 4))  # every later step occurs
    elif strategy == "final":
        assert (step == last).all()
    else:
        assert ((step >= 0) & (step <= last)).all() and (step < t).any() and (step > t).any()


def test_rewards_are_recomputed_and_the_store_is_unchanged(goals):
    view = relabel_all(goals, "future", relabel_seed=1, sequence_fields=("reward",), gamma=0.9)
    stored = np.array(goals.episode_store.step_array("goal"))
    batch = view.__getitems__(np.arange(len(view)))
    relabeled = batch["_relabeled"].numpy()
    expected = reached(batch["next_achieved"].numpy(), batch["goal"].numpy())
    np.testing.assert_array_equal(batch["reward"].numpy()[relabeled], expected[relabeled])
    assert (batch["reward"].numpy()[~relabeled] == -1).all()
    for name in ("seq_reward", "n_step_return"):  # every output that carries the reward agrees
        np.testing.assert_array_equal(batch[name].numpy().reshape(len(relabeled), -1)[:, 0], batch["reward"].numpy())
    assert (batch["next_goal"].numpy()[relabeled] == batch["goal"].numpy()[relabeled]).all()
    np.testing.assert_array_equal(goals.episode_store.step_array("goal"), stored)  # stored data never rewritten
    assert 0 in batch["reward"].numpy()  # the goal reached at t + 1 gives reward 0


def test_ratio_and_determinism(goals):
    view = HindsightView(goals.episode_store, goal_field="goal", achieved_field="achieved", reward_fn=reached,
                         relabel_ratio=0.25, relabel_seed=7)
    items = np.random.default_rng(0).integers(0, len(view), 4000)
    first = view.__getitems__(items)
    share = first["_relabeled"].numpy().mean()
    eligible = 1 - (1 / 9) * (1 / 1)  # one of the 9 positions (the terminated last step) is never relabelled
    assert abs(share - 0.25 * eligible) < 0.03
    again = view.__getitems__(items)
    assert all(np.array_equal(first[name].numpy(), again[name].numpy()) for name in first)
    other = HindsightView(goals.episode_store, goal_field="goal", achieved_field="achieved", reward_fn=reached,
                          relabel_ratio=0.25, relabel_seed=8).__getitems__(items)
    assert not np.array_equal(first["_relabeled"].numpy(), other["_relabeled"].numpy())


def test_through_the_buffer_and_a_sampler(goals):
    sampler = goals.sampler("uniform", seed=0, hindsight=dict(goal_field="goal", achieved_field="achieved",
                                                              reward_fn=reached, strategy="final"))
    batch = sampler.batch(64)
    assert batch["_relabeled"].any() and batch["_key"].shape == (64,)
    loader = goals.dataloader(4, shuffle=True, seed=0, hindsight=dict(goal_field="goal", achieved_field="achieved",
                                                                      reward_fn=reached))
    assert sum(len(b["reward"]) for b in loader) == len(loader.dataset)


@pytest.mark.parametrize("options, message", [
    (dict(goal_field="goals"), "goal_field='goals' is not a step field"),
    (dict(achieved_field="reward"), "must have the same shape"),
    (dict(strategy="past"), "strategy must be one of"),
    (dict(relabel_ratio=1.5), r"relabel_ratio must be a finite number in \[0, 1\]"),
    (dict(reward_fn="reached"), "reward_fn must be a function"),
    (dict(n_steps=3), "n_steps must be 1"),
    (dict(next_fields=("obs",)), "needs the next field 'achieved'"),
    (dict(relabel_seed=-1), "relabel_seed must be an int >= 0"),
])
def test_bad_options(goals, options, message):
    arguments = {**dict(goal_field="goal", achieved_field="achieved", reward_fn=reached), **options}
    with pytest.raises(InvalidDataError, match=message):
        HindsightView(goals.episode_store, **arguments)


def test_a_reward_function_of_the_wrong_shape(goals):
    view = HindsightView(goals.episode_store, goal_field="goal", achieved_field="achieved", relabel_ratio=1.0,
                         reward_fn=lambda achieved, desired: np.zeros((len(achieved), 2)))
    with pytest.raises(InvalidDataError, match="reward_fn must return"):
        view.__getitems__(np.arange(len(view)))
    with pytest.raises(InvalidDataError, match="drop timestep_level and window"):
        goals.dataset(timestep_level=True,
                      hindsight=dict(goal_field="goal", achieved_field="achieved", reward_fn=reached))


def test_the_old_seed_spelling_still_relabels_the_same_and_says_its_new_name(goals):
    items = np.arange(8)
    with pytest.warns(DeprecationWarning, match=r"seed= of a HindsightView is now spelled relabel_seed="):
        old = relabel_all(goals, "future", seed=5).__getitems__(items)
    new = relabel_all(goals, "future", relabel_seed=5).__getitems__(items)
    assert all(np.array_equal(old[name].numpy(), new[name].numpy()) for name in new)
    her = dict(goal_field="goal", achieved_field="achieved", reward_fn=reached, relabel_ratio=1.0)
    with pytest.warns(DeprecationWarning, match=r"seed= of hindsight= is now spelled relabel_seed="):
        goals.dataset(hindsight={**her, "seed": 5})
    with pytest.raises(InvalidDataError, match=r"hindsight= has both 'seed' and 'relabel_seed', one option"), \
            pytest.warns(DeprecationWarning):
        goals.dataset(hindsight={**her, "seed": 5, "relabel_seed": 5})
