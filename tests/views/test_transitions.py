"""One-step transitions (``transitions=True``, ``TransitionView``): values at every kind of episode end, the
fields it reads (only those it returns), the observation rule, samplers and DataLoaders over it, errors."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import memmap_replay
from memmap_replay import OptionError, ReplayBuffer, TransitionView
from memmap_replay.views.kinds import NStepView

from conftest import episode_arrays

STRIDE = 20  # the buffers' max_timesteps: keys are episode id * STRIDE + t
# (number, length, end, final obs or None): every kind of end
EPISODES = [(1, 4, "terminated", None), (2, 3, "truncated", -2.0), (3, 3, None, None), (4, 2, "terminated", -4.0),
            (5, 2, "truncated", None)]
# transitions per episode: all steps but the last where the end is unknown (no end, or truncated without final)
COUNTS = [4, 3, 2, 2, 1]


@pytest.fixture
def ends(make_buffer):
    buffer = make_buffer(max_timesteps=STRIDE)
    for number, length, end, final in EPISODES:
        buffer.store_episode(**episode_arrays(number, length), task_id=number, end=end,
                             final=None if final is None else dict(obs=np.full(3, final)))
    return buffer


def expected_transitions(gamma=None):
    """What the transitions of ``EPISODES`` hold, row by row, built by hand."""
    rows = dict(obs=[], next_obs=[], reward=[], action=[], terminated=[], truncated=[], discount=[], task_id=[])
    for (number, length, end, final), count in zip(EPISODES, COUNTS):
        for t in range(count):
            value = number * 1000 + t
            last = t == length - 1
            if not last:
                following = value + 1
            else:  # the stored final observation, or zeros after a terminated end without one
                following = final if final is not None else 0.0
            rows["obs"].append([value] * 3)
            rows["next_obs"].append([following] * 3)
            rows["reward"].append(value)
            rows["action"].append([value, -value])
            rows["terminated"].append(last and end == "terminated")
            rows["truncated"].append(last and end == "truncated")
            rows["discount"].append(0.0 if last and end == "terminated" else gamma)
            rows["task_id"].append(number)
    return rows


def everything(view):
    return view.__getitems__(np.arange(len(view)))


# ---- values ----------------------------------------------------------------------------------------------------

def test_values_at_terminated_truncated_and_unknown_ends(ends):
    view = ends.dataset(transitions=True, gamma=0.9)
    assert isinstance(view, TransitionView) and len(view) == sum(COUNTS)
    batch = everything(view)
    expected = expected_transitions(0.9)
    assert sorted(batch) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(batch[name].numpy(), np.array(values), rtol=0, atol=1e-6, err_msg=name)
    assert batch["obs"].dtype == batch["next_obs"].dtype == torch.float32
    assert batch["terminated"].dtype == batch["truncated"].dtype == torch.bool
    assert batch["discount"].dtype == torch.float32 and batch["discount"].shape == (sum(COUNTS),)
    assert batch["action"].dtype == torch.int32 and batch["action"].shape == (sum(COUNTS), 2)


RANDOM_EPISODES = st.lists(st.tuples(st.integers(1, 7), st.sampled_from(["terminated", "truncated", None]),
                                     st.booleans()), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(episodes=RANDOM_EPISODES, gamma=st.sampled_from([None, 0.5, 1.0]), ring=st.booleans())
def test_matches_a_step_by_step_reference(tmp_path_factory, episodes, gamma, ring):
    """Every transition of random stores (ends, final rows, a wrapping ring) against a plain loop."""
    buffer = ReplayBuffer(tmp_path_factory.mktemp("transitions"), 4 if ring else 10, 8, circular=ring,
                          fields=dict(obs=("float", (2,)), action="int", reward="float"))
    try:
        stored = []
        for number, (length, end, has_final) in enumerate(episodes, start=1):
            arrays = episode_arrays(number, length)
            final = dict(obs=np.full(2, -number, dtype=np.float32)) if has_final else None
            buffer.store_episode(obs=arrays["obs"][:, :2], action=arrays["action"][:, 0], reward=arrays["reward"],
                                 end=end, final=final)
            stored.append((number, length, end, has_final))
        expected = []
        for number, length, end, has_final in stored[len(stored) - buffer.num_episodes:]:
            for t in range(length if end == "terminated" or has_final else length - 1):
                last = t == length - 1
                following = number * 1000 + t + 1 if not last else -number if has_final else 0
                discount = 0.0 if last and end == "terminated" else gamma
                expected.append((number * 1000 + t, following, last and end == "terminated",
                                 last and end == "truncated", discount))
        view = TransitionView(buffer.episode_store, gamma=gamma)
        assert len(view) == len(expected)
        if not expected:
            return
        items = np.random.default_rng(0).permutation(len(view))
        batch = view.__getitems__(items)
        got = {name: value.numpy()[np.argsort(items)] for name, value in batch.items()}
        reward, following, terminated, truncated, discount = (np.array(column) for column in zip(*expected))
        np.testing.assert_array_equal(got["reward"], reward)
        np.testing.assert_array_equal(got["action"], reward)
        np.testing.assert_array_equal(got["obs"][:, 0], reward)
        np.testing.assert_array_equal(got["next_obs"][:, 0], following)
        np.testing.assert_array_equal(got["terminated"], terminated)
        np.testing.assert_array_equal(got["truncated"], truncated)
        if gamma is None:
            assert "discount" not in got
        else:
            np.testing.assert_allclose(got["discount"], discount.astype(np.float32), rtol=0)
    finally:
        buffer.close()


def test_the_n_step_rules_exactly(ends):
    """next_obs, the flags and the discount are NStepView's with n_steps=1 (bootstrap_discount, terminal)."""
    transitions = everything(ends.dataset(transitions=True, gamma=0.5))
    nstep = everything(NStepView(ends.episode_store, 1, gamma=0.5))
    assert len(transitions["obs"]) == len(nstep["obs"])
    for name in ("obs", "next_obs", "action", "reward", "task_id"):
        torch.testing.assert_close(transitions[name], nstep[name], rtol=0, atol=0)
    torch.testing.assert_close(transitions["discount"], nstep["bootstrap_discount"], rtol=0, atol=0)
    torch.testing.assert_close(transitions["terminated"], nstep["terminal"], rtol=0, atol=0)


def test_without_gamma_there_is_no_discount(ends):
    batch = ends.dataset(transitions=True, meta_fields=()).__getitems__([0, 3])
    assert sorted(batch) == ["action", "next_obs", "obs", "reward", "terminated", "truncated"]
    assert batch["terminated"].tolist() == [False, True]


def test_frame_stacked_observations(ends):
    view = TransitionView(ends.episode_store, frame_stack=2, stack_fields=("obs",), stack_pad="zero", meta_fields=())
    batch = everything(view)
    assert batch["obs"].shape == batch["next_obs"].shape == (sum(COUNTS), 2, 3)
    first, last_of_a = batch["obs"][0, :, 0].tolist(), batch["next_obs"][3, :, 0].tolist()
    assert first == [0, 1000] and batch["next_obs"][0, :, 0].tolist() == [1000, 1001]
    assert batch["obs"][3, :, 0].tolist() == [1002, 1003] and last_of_a == [0, 0]  # terminated, no final: zeros
    assert batch["next_obs"][6, :, 0].tolist() == [2002, -2]  # truncated: the stored final observation
    assert batch["reward"].shape == (sum(COUNTS),)  # only the stack_fields are stacked


def test_fields_filters_and_renames(ends):
    view = ends.dataset(transitions=True, gamma=0.9, fields=("obs", "reward"), filter_meta=dict(task_id=4),
                        fieldname_map=dict(discount="gamma_t", next_obs="obs2"), return_indices=True)
    batch = everything(view)
    assert sorted(batch) == ["_index", "_t", "gamma_t", "obs", "obs2", "reward", "task_id", "terminated", "truncated"]
    assert batch["obs2"][:, 0].tolist() == [4001, -4] and batch["gamma_t"].tolist() == pytest.approx([0.9, 0.0])
    assert batch["_t"].tolist() == [0, 1]
    only = ends.dataset(transitions=True, filter_fields=dict(reward=2001.0))
    assert len(only) == 1 and only[0]["next_obs"].tolist() == [2002] * 3


# ---- what it reads ---------------------------------------------------------------------------------------------

@pytest.fixture
def reads(monkeypatch):
    """Every (field, rows) a view's gathers read."""
    seen = []
    original = NStepView.values_of

    def values_of(self, name, rows):
        seen.append((name, np.array(rows)))
        return original(self, name, rows)

    monkeypatch.setattr(NStepView, "values_of", values_of)
    return seen


def test_reads_only_the_fields_it_returns(make_buffer, reads):
    buffer = make_buffer(fields=dict(obs=("float", 3), action=("int", 2), reward="float", info=("float", 16)))
    for number, length in ((1, 4), (2, 3)):
        buffer.store_episode(**episode_arrays(number, length), info=np.zeros((length, 16)), end="terminated")
    view = buffer.dataset(transitions=True, gamma=0.9, fields=("obs", "action", "reward"), meta_fields=())
    assert view.read_fields() == ("obs", "action", "reward")
    items = np.array([0, 3, 5])
    rows = view.table.start[view.positions.locate(items)[0]] + view.positions.locate(items)[1]
    batch = view.__getitems__(items)
    assert sorted(name for name, _ in reads) == ["action", "obs", "reward"]  # one gather per field
    read = dict(reads)
    np.testing.assert_array_equal(read["action"], rows)  # no next_action, no next_reward: rows at t only
    np.testing.assert_array_equal(read["reward"], rows)
    # obs at t and t + 1 in one gather; after a terminated end without a final row: t again, zeroed
    np.testing.assert_array_equal(read["obs"], np.concatenate((rows, [rows[0] + 1, rows[1], rows[2] + 1])))
    assert "next_action" not in batch and "next_reward" not in batch and "info" not in batch
    # the n-step view with n_steps=1 and no field lists reads (and returns) next_action, next_reward, info
    reads.clear()
    nstep = NStepView(buffer.episode_store, 1, meta_fields=())
    assert {"next_action", "next_reward", "next_info"} <= set(nstep.__getitems__(items))
    assert sorted({name for name, _ in reads}) == ["action", "info", "obs", "reward"]


def test_default_reads_every_field_and_observations_twice(ends, reads):
    view = ends.dataset(transitions=True, meta_fields=())
    assert view.read_fields() == ("obs", "action", "reward")
    view.__getitems__(np.arange(len(view)))
    sizes = {name: rows.size for name, rows in reads}
    assert sizes == dict(obs=2 * len(view), action=len(view), reward=len(view))


# ---- which fields are observations ----------------------------------------------------------------------------

@pytest.mark.parametrize("names, observed", [
    (("observation", "action", "reward"), ("observation",)),
    (("observation__pos", "observation__vel", "action", "reward", "info__x"), ("observation__pos", "observation__vel")),
    (("pixels", "proprio_state", "action", "reward"), ("pixels",)),
    (("image", "State", "goal", "act", "rew"), ("image", "State")),
    (("states", "obs_stack", "done", "reward"), ("states", "obs_stack")),
])
def test_observations_by_name(make_buffer, names, observed):
    buffer = make_buffer(fields={name: "float" for name in names}, meta_fields={})
    buffer.store_episode(**{name: np.arange(3.0) for name in names}, end="terminated")
    view = buffer.dataset(transitions=True)
    assert view.observation_fields == observed
    assert sorted(view[0]) == sorted([*names, *(f"next_{name}" for name in observed), "terminated", "truncated"])


def test_an_unnamed_store_says_how_to_name_the_observations(make_buffer):
    buffer = make_buffer(fields=dict(x=("float", 2), a="int", r="float"), meta_fields={})
    buffer.store_episode(x=np.zeros((3, 2)), a=np.zeros(3), r=np.zeros(3), end="truncated", final=dict(x=[1, 1]))
    with pytest.raises(OptionError, match=r"none of the fields \['x', 'a', 'r'\] has a name starting with 'obs', "
                                          r"'state', 'image' or 'pixel'; name them with observation_fields=, e\.g\. "
                                          r"buffer\.dataset\(transitions=True, observation_fields=\('x',\)\)"):
        buffer.dataset(transitions=True)
    batch = everything(buffer.dataset(transitions=True, observation_fields="x"))
    assert batch["next_x"].tolist() == [[0, 0], [0, 0], [1, 1]] and batch["truncated"].tolist() == [False, False, True]
    assert "next_a" not in batch and "next_r" not in batch


def test_observation_fields_may_name_any_field(ends):
    batch = ends.dataset(transitions=True, observation_fields=("obs", "reward"))[0]
    assert batch["next_reward"].item() == 1001 and batch["next_obs"].tolist() == [1001] * 3


# ---- samplers and loaders ---------------------------------------------------------------------------------------

def check_rows(batch):
    """Each row of a batch is its own key's transition (``expected_transitions`` by (episode id, t))."""
    expected = expected_transitions(0.9)
    where = {}
    item = 0
    for episode_id, count in enumerate(COUNTS):
        for t in range(count):
            where[episode_id * STRIDE + t] = item
            item += 1
    index = [where[key] for key in batch["_key"].tolist()]
    for name in ("obs", "next_obs", "reward", "terminated", "truncated", "discount"):
        np.testing.assert_allclose(batch[name].numpy(), np.array(expected[name])[index], atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_samplers_over_transitions(ends, kind):
    sampler = ends.sampler(kind, transitions=True, gamma=0.9, seed=3)
    try:
        assert isinstance(sampler.view, TransitionView) and sampler.view.kind == "transitions"
        keys = set()
        for _ in range(20):
            batch = sampler.batch(8)
            check_rows(batch)
            keys.update(batch["_key"].tolist())
            if kind == "prioritized":
                assert batch["_weight"].shape == (8,)
                sampler.update_priorities(batch["_key"].numpy(), np.full(8, 2.0))
        assert len(keys) == sum(COUNTS)  # every transition is drawn, and nothing else
        loader = sampler.dataloader(4, num_batches=3, num_workers=2)
        for batch in loader:
            check_rows(batch)
    finally:
        if hasattr(sampler, "close"):
            sampler.close()


def test_the_default_sampler_stays_single_steps(ends):
    assert type(ends.sampler("uniform", transitions=False).view).__name__ == "TimestepView"


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_dataloader_with_two_workers(ends, workers):
    loader = ends.dataloader(3, transitions=True, gamma=0.9, shuffle=True, seed=1, num_workers=2, workers=workers)
    batches = list(loader)
    assert len(batches) == -(-sum(COUNTS) // 3)
    merged = {name: torch.cat([batch[name] for batch in batches]) for name in batches[0]}
    order = np.argsort(merged["reward"].numpy(), kind="stable")
    expected = expected_transitions(0.9)
    for name, values in expected.items():
        np.testing.assert_allclose(merged[name].numpy()[order], np.array(values), atol=1e-6, err_msg=name)
    again = list(ends.dataloader(3, transitions=True, gamma=0.9, shuffle=True, seed=1))
    for first, second in zip(batches, again):
        assert torch.equal(first["reward"], second["reward"])


# ---- errors ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, match", [
    (dict(transitions=True, n_steps=2), r"choose one of n_steps, timestep_level, window and transitions \(got "
                                        r"\['n_steps', 'transitions'\]\)"),
    (dict(transitions=True, window=2), r"choose one of .* \(got \['window', 'transitions'\]\)"),
    (dict(transitions="yes"), r"transitions must be"),
    (dict(transitions=True, return_mask=True), r"return_mask applies to trajectories"),
    (dict(transitions=True, hindsight=dict(goal_field="obs")), r"hindsight relabels one-step transitions: drop "
                                                                r"timestep_level and window, and transitions .*"
                                                                r"\(got \['transitions'\]\)"),
    (dict(transitions=True, current_fields=("obs",)), r"a transitions view takes fields= and observation_fields=, "
                                                      r"not \['current_fields'\]: it returns the fields at t and "
                                                      r"next_<observation> at t \+ 1; for n-step transitions use "
                                                      r"n_steps= \(NStepView\) instead"),
    (dict(transitions=True, sequence_fields=("reward",), reward_field="action"),
     r"not \['sequence_fields', 'reward_field'\]"),
    (dict(transitions=True, stack_feilds=("obs",)), r"unknown keyword \['stack_feilds'\] for ReplayBuffer.dataset "
                                                    r".*; did you mean 'stack_fields'"),
    (dict(transitions=True, observation_field="obs"), r"unknown keyword \['observation_field'\].*did you mean "
                                                      r"'observation_fields'"),
    (dict(transitions=True, gamma=1.5), r"gamma must be .*1.*\(got 1\.5\)"),
    (dict(transitions=True, observation_fields=()), r"observation_fields must name at least one of the fields "
                                                   r"\['obs', 'action', 'reward'\] \(got \(\)\)"),
    (dict(transitions=True, observation_fields="obz"), r"unknown field \['obz'\].*did you mean 'obs'"),
    (dict(transitions=True, fields=("action", "reward"), observation_fields="obs"),
     r"observation_fields \['obs'\] must be among the fields the view returns, \['action', 'reward'\]: add "
     r"them to fields=, or leave fields unset"),
    (dict(transitions=True, fields=("action", "reward")), r"none of the fields \['action', 'reward'\] has a name"),
    (dict(transitions=True, fields=()), r"fields must name at least one step field \(got \(\)\)"),
    (dict(transitions=True, frame_stack=0), r"frame_stack must be"),
])
def test_bad_options(ends, options, match):
    with pytest.raises(OptionError, match=match):
        ends.dataset(**options)


def test_direct_construction_refuses_n_step_options(ends):
    with pytest.raises(OptionError, match=r"takes fields= and observation_fields=, not \['current_fields'\].*"
                                          r"use n_steps= \(NStepView\)"):
        TransitionView(ends.episode_store, current_fields=("obs",))
    with pytest.raises(OptionError, match=r"a view reads an EpisodeStore \(got .*\); pass buffer\.episode_store"):
        TransitionView(ends)


def test_a_stored_flag_field_clashes_by_name(make_buffer):
    buffer = make_buffer(fields=dict(obs="float", terminated="bool"), meta_fields={})
    buffer.store_episode(obs=np.zeros(3), terminated=np.zeros(3, bool), end="terminated")
    with pytest.raises(OptionError, match=r"would output \['terminated'\] twice.*select fewer fields"):
        buffer.dataset(transitions=True)
    assert "terminated" in buffer.dataset(transitions=True, fields="obs")[0]


def test_a_store_too_short_for_any_transition_says_so(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(1, 1), task_id=1)  # one step, end unknown: no transition
    with pytest.raises(OptionError, match=r"the TransitionView has no items: .* none give a transition"):
        buffer.dataset(transitions=True)
    assert len(buffer.dataset(transitions=True, allow_empty=True)) == 0


# ---- exports and docs ------------------------------------------------------------------------------------------

def test_exported_like_the_other_views():
    from memmap_replay import views

    assert memmap_replay.TransitionView is views.TransitionView is TransitionView
    assert "TransitionView" in memmap_replay.__all__ and "TransitionView" in views.__all__


def test_options_of_other_views_list_only_what_a_transitions_view_takes(ends):
    with pytest.raises(OptionError, match=r"\['episode_flags'\] do not apply to a TransitionView") as caught:
        ends.dataset(transitions=True, episode_flags=True)
    assert "observation_fields" in str(caught.value)
    assert not {"current_fields", "next_fields", "sequence_fields", "reward_field"} & set(re.findall(r"'(\w+)'",
                                                                                                  str(caught.value)))


def test_shards_read_transitions_as_one_store(ends):
    from memmap_replay import ShardSet

    shards = ShardSet(folders=[ends.folder])
    try:
        batch = everything(shards.dataset(transitions=True, gamma=0.9))
        expected = expected_transitions(0.9)
        for name in ("obs", "next_obs", "terminated", "truncated", "discount"):
            np.testing.assert_allclose(batch[name].numpy(), np.array(expected[name]), atol=1e-6, err_msg=name)
        assert sorted(shards.sampler("uniform", transitions=True, seed=0).batch(4)) == \
            ["_key", "action", "next_obs", "obs", "reward", "task_id", "terminated", "truncated"]
    finally:
        shards.close()
