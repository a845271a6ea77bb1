"""Views: shapes and values pinned on small hand-built episodes, ends, padding, masks, frame stacks."""

import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memmap_replay import InvalidDataError, ReplayBuffer, SampleExpiredError
from memmap_replay.views.hindsight import HindsightView
from memmap_replay.views.kinds import NStepView, TimestepView, TrajectoryView, WindowView

from conftest import episode_arrays


def everything(view):
    return view.__getitems__(np.arange(len(view)))


def test_trajectory_pads_masks_and_lengths(three):
    view = TrajectoryView(three.episode_store, return_mask=True)
    assert len(view) == 3
    batch = view.__getitems__([0, 1])
    assert batch["obs"].shape == (2, 4, 3) and batch["action"].shape == (2, 4, 2) and batch["reward"].shape == (2, 4)
    assert batch["reward"].tolist() == [[1000, 1001, 1002, 1003], [2000, 2001, 2002, 0]]
    assert batch["_lens"].tolist() == [4, 3]
    assert batch["_mask"].tolist() == [[True] * 4, [True, True, True, False]]
    assert batch["task_id"].tolist() == [1, 2]
    single = view[2]
    assert single["reward"].tolist() == [3000, 3001, 3002] and single["_lens"].item() == 3


def test_timestep_view_covers_every_step_once(three):
    view = TimestepView(three.episode_store)
    batch = everything(view)
    assert len(view) == 10
    assert batch["reward"].tolist() == [1000, 1001, 1002, 1003, 2000, 2001, 2002, 3000, 3001, 3002]
    assert batch["obs"].shape == (10, 3) and batch["action"][5].tolist() == [2001, -2001]
    assert batch["task_id"].tolist() == [1] * 4 + [2] * 3 + [3] * 3


@pytest.mark.parametrize("pad, expected", [
    ("repeat", [[1000, 1000, 1000], [1000, 1000, 1001], [1000, 1001, 1002], [1001, 1002, 1003]]),
    ("zero", [[0, 0, 1000], [0, 1000, 1001], [1000, 1001, 1002], [1001, 1002, 1003]]),
])
def test_frame_stack_at_episode_start(three, pad, expected):
    view = TimestepView(three.episode_store, frame_stack=3, stack_fields=("obs",), stack_pad=pad)
    batch = view.__getitems__([0, 1, 2, 3, 4])
    assert batch["obs"].shape == (5, 3, 3)  # (B, k, *shape), oldest frame first
    assert batch["obs"][:4, :, 0].tolist() == expected
    first_of_b = [[2000, 2000, 2000]] if pad == "repeat" else [[0, 0, 2000]]
    assert batch["obs"][4:, :, 0].tolist() == first_of_b  # never reaches into the previous episode
    assert batch["reward"].shape == (5,)  # unstacked fields stay single


def test_window_view_never_crosses_an_end(three):
    view = WindowView(three.episode_store, 2)
    batch = everything(view)
    assert len(view) == 3 + 2 + 2
    starts = batch["reward"][:, 0].tolist()
    assert starts == [1000, 1001, 1002, 2000, 2001, 3000, 3001]
    assert (batch["reward"][:, 1] - batch["reward"][:, 0]).tolist() == [1] * 7
    assert batch["obs"].shape == (7, 2, 3)
    assert set(batch) == {"obs", "action", "reward", "task_id"}


def test_window_view_partial_and_time_major(three):
    view = WindowView(three.episode_store, 3, allow_partial=True, time_major=True)
    assert len(view) == 10
    batch = view.__getitems__([3, 6])  # A at t=3 (1 step left), B at t=2 (1 step left)
    assert batch["obs"].shape == (3, 2, 3)  # (L, B, ...)
    assert batch["reward"].tolist() == [[1003, 2002], [0, 0], [0, 0]]
    assert batch["_lens"].tolist() == [1, 1]
    assert batch["_mask"].tolist() == [[True, True], [False, False], [False, False]]
    strict = WindowView(three.episode_store, 4)
    assert len(strict) == 1  # only A is long enough


def test_nstep_items_and_terminal_vs_truncated(three):
    view = NStepView(three.episode_store, 2, sequence_fields=("reward",), gamma=0.5)
    # A terminated: t = 0..3; B truncated with a final row: t = 0..2; C end unknown, no final: t = 0..1
    assert len(view) == 4 + 3 + 2
    batch = everything(view)
    assert batch["reward"].tolist() == [1000, 1001, 1002, 1003, 2000, 2001, 2002, 3000, 3001]
    assert batch["n_step_lens"].tolist() == [2, 2, 2, 1, 2, 2, 1, 2, 1]
    assert batch["next_reward"].tolist() == [1002, 1003, 0, 0, 2002, 0, 0, 3002, 3002]
    assert batch["next_obs"][:, 0].tolist() == [1002, 1003, 0, 0, 2002, -2, -2, 3002, 3002]
    assert batch["seq_reward"].tolist()[3] == [1003, 0] and batch["seq_reward"].tolist()[0] == [1000, 1001]
    assert batch["terminal"].tolist() == [False, False, True, True, False, False, False, False, False]
    assert batch["bootstrap_discount"].tolist() == [0.25, 0.25, 0, 0, 0.25, 0.25, 0.5, 0.25, 0.5]
    np.testing.assert_allclose(batch["n_step_return"].numpy(),
                               [1000 + 500.5, 1001 + 501, 1002 + 501.5, 1003, 2000 + 1000.5, 2001 + 1001, 2002,
                                3000 + 1500.5, 3001])


def test_nstep_seed_semantics_without_end_information(make_buffer):
    """Episodes stored with the seed package's API (no end info): no transition starts at the last step."""
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(1, 4), task_id=1)
    view = NStepView(buffer.episode_store, 5, current_fields=("reward",), next_fields=("reward",),
                     sequence_fields=("action",))
    batch = everything(view)
    assert batch["reward"].tolist() == [1000, 1001, 1002]
    assert batch["n_step_lens"].tolist() == [3, 2, 1] and batch["next_reward"].tolist() == [1003] * 3
    assert batch["seq_action"].shape == (3, 5, 2) and batch["seq_action"][2, 1:].abs().sum() == 0


def test_nstep_frame_stacked_next_state(three):
    view = NStepView(three.episode_store, 1, current_fields=("obs",), next_fields=("obs",), frame_stack=2,
                     stack_fields=("obs",))
    batch = view.__getitems__([0, 4])  # A t=0, B t=0
    assert batch["obs"][:, :, 0].tolist() == [[1000, 1000], [2000, 2000]]
    assert batch["next_obs"][:, :, 0].tolist() == [[1000, 1001], [2000, 2001]]
    last = view.__getitems__([3, 6])  # A t=3 (terminal: next is zeros), B t=2 (next is the final row)
    assert last["next_obs"][:, :, 0].tolist() == [[0, 0], [2002, -2]]


EPISODES = st.lists(st.tuples(st.integers(1, 7), st.sampled_from(["terminated", "truncated", None]), st.booleans()),
                    min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episodes=EPISODES, n=st.integers(1, 5), gamma=st.sampled_from([None, 0.5, 1.0]), ring=st.booleans())
def test_nstep_matches_a_step_by_step_reference(tmp_path_factory, episodes, n, gamma, ring):
    """Every transition of random stores (ends, final rows, a wrapping ring) against a plain loop."""
    folder = tmp_path_factory.mktemp("nstep")
    buffer = ReplayBuffer(folder, 4 if ring else 10, 8, fields=dict(obs=("float", (2,)), reward="float"),
                          circular=ring, overwrite=True)
    stored = []
    for number, (length, end, has_final) in enumerate(episodes, start=1):
        arrays = episode_arrays(number, length)
        final = dict(obs=np.full(2, -number, dtype=np.float32)) if has_final else None
        buffer.store_episode(obs=arrays["obs"][:, :2], reward=arrays["reward"], end=end, final=final)
        stored.append((arrays["reward"], end, has_final))
    live = stored[len(stored) - buffer.num_episodes:]
    expected = []
    for rewards, end, has_final in live:
        length = len(rewards)
        reach = length if end == "terminated" or has_final else length - 1
        for t in range(reach):
            actual = min(n, reach - t)
            at_end = t + actual == length
            terminal = at_end and end == "terminated"
            if at_end:
                next_obs = -rewards[0] // 1000 if has_final else 0.0
            else:
                next_obs = rewards[t + actual]
            chunk = [rewards[t + k] if k < actual else 0.0 for k in range(n)]
            g = 1.0 if gamma is None else gamma
            expected.append((rewards[t], next_obs, actual, chunk, sum(r * g ** k for k, r in enumerate(chunk)),
                             0.0 if terminal else g ** actual, terminal))
    view = NStepView(buffer.episode_store, n, current_fields=("reward",), next_fields=("obs",),
                     sequence_fields=("reward",), gamma=gamma)
    assert len(view) == len(expected)
    if not expected:
        return
    batch = view.__getitems__(np.random.default_rng(0).permutation(len(view)))
    order = np.argsort(np.random.default_rng(0).permutation(len(view)))
    got = {name: value.numpy()[order] for name, value in batch.items()}
    reward, next_obs, actual, chunk, ret, bootstrap, terminal = (np.array(column) for column in zip(*expected))
    np.testing.assert_array_equal(got["reward"], reward)
    np.testing.assert_array_equal(got["next_obs"][:, 0], next_obs)
    np.testing.assert_array_equal(got["n_step_lens"], actual)
    np.testing.assert_array_equal(got["seq_reward"], chunk)
    if gamma is not None:
        np.testing.assert_allclose(got["n_step_return"], ret, rtol=1e-6)
        np.testing.assert_allclose(got["bootstrap_discount"], bootstrap, rtol=1e-6)
        np.testing.assert_array_equal(got["terminal"], terminal)
    buffer.close()


def test_filters_fields_and_names(three):
    view = TimestepView(three.episode_store, filter_meta=dict(task_id=2), fields=("reward",), meta_fields=(),
                        fieldname_map={"reward": "r"}, return_indices=True)
    batch = everything(view)
    assert set(batch) == {"r", "_index", "_t"}
    assert batch["r"].tolist() == [2000, 2001, 2002] and batch["_t"].tolist() == [0, 1, 2]
    filtered = TimestepView(three.episode_store, filter_fields=dict(reward=3001.0))
    assert everything(filtered)["reward"].tolist() == [3001]
    with pytest.raises(InvalidDataError, match="scalar fields only"):
        TimestepView(three.episode_store, filter_fields=dict(obs=1.0))
    with pytest.raises(InvalidDataError, match=r"unknown field \['nope'\]"):
        TimestepView(three.episode_store, fields=("nope",))
    with pytest.raises(InvalidDataError, match="gamma needs a scalar reward field"):
        NStepView(three.episode_store, 2, gamma=0.9, reward_field="obs")


def test_index_errors_and_reading_never_writes(three):
    view = TimestepView(three.episode_store)
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        view.__getitems__([10])
    assert view[-1]["reward"].item() == 3002
    before = {p: p.stat().st_mtime_ns for p in three.folder.rglob("*") if p.is_file()}
    everything(view)
    everything(NStepView(three.episode_store, 3, gamma=0.9))
    assert {p: p.stat().st_mtime_ns for p in three.folder.rglob("*") if p.is_file()} == before


def test_views_are_a_snapshot_and_tensors_are_writable(three):
    view = TimestepView(three.episode_store)
    three.store_episode(**episode_arrays(4, 2), task_id=4)
    assert len(view) == 10
    batch = everything(view)
    batch["reward"] += 1  # owned memory, not a read-only map
    assert isinstance(batch["reward"], torch.Tensor)


def test_pooled_outputs_are_never_reused_while_held(three):
    view = TimestepView(three.episode_store)
    held = view.__getitems__(np.arange(5))
    expected = held["obs"].clone()
    for _ in range(20):  # more batches of the same size, which reuse freed buffers
        view.__getitems__(np.arange(5, 10))
    assert torch.equal(held["obs"], expected)
    first = view.__getitems__(np.arange(5))["obs"].data_ptr()
    again = view.__getitems__(np.arange(5))["obs"].data_ptr()  # the first batch is gone: memory comes back
    assert first == again


def test_output_names_never_silently_collide(make_buffer):
    buffer = make_buffer(fields=dict(obs=("float", 3), next_obs=("float", 3), reward="float"),
                         meta_fields=dict(terminal="bool"))
    buffer.store_episode(obs=np.zeros((4, 3)), next_obs=np.ones((4, 3)), reward=np.zeros(4), end="terminated")
    with pytest.raises(InvalidDataError, match=r"output \['next_obs'\] twice"):
        NStepView(buffer.episode_store, 2)
    with pytest.raises(InvalidDataError, match=r"output \['terminal'\] twice"):
        NStepView(buffer.episode_store, 2, current_fields=("obs",), next_fields=("obs",), gamma=0.9)
    with pytest.raises(InvalidDataError, match=r"output \['next_obs'\] twice"):  # renaming cannot tell them apart
        NStepView(buffer.episode_store, 2, current_fields=("obs", "next_obs"), next_fields=("obs",),
                  fieldname_map={"next_obs": "stored_next"}, meta_fields=())
    view = NStepView(buffer.episode_store, 2, current_fields=("obs", "next_obs"), next_fields=("reward",),
                     fieldname_map={"next_obs": "stored_next"}, meta_fields=())
    assert view[0]["stored_next"].tolist() == [1, 1, 1]  # the stored field, renamed
    with pytest.raises(InvalidDataError, match="does not output"):
        TimestepView(buffer.episode_store, fieldname_map={"rewrd": "r"})


# ---- the contract every view keeps -------------------------------------------------------------------------

VIEW_KINDS = {
    "trajectory": dict(),
    "timestep": dict(timestep_level=True),
    "frame-stack": dict(timestep_level=True, frame_stack=2, stack_fields=["obs"]),
    "window": dict(window=3),
    "partial-window": dict(window=3, allow_partial=True),
    "flagged-trajectory": dict(episode_flags=True, return_mask=True),
    "flagged-window": dict(window=3, allow_partial=True, episode_flags=True),
    "nstep": dict(n_steps=2, gamma=0.9),
    "transitions": dict(transitions=True, gamma=0.9),
    "stacked-transitions": dict(transitions=True, frame_stack=2, stack_fields=["obs"], stack_pad="zero"),
    "concat": dict(timestep_level=True),
    "hindsight": dict(hindsight=dict(goal_field="goal", achieved_field="obs", strategy="future", relabel_ratio=0.5,
                                     relabel_seed=5)),
}
HINDSIGHT_FIELDS = dict(obs=("float", (3,)), goal=("float", (3,)), action=("int", 2), reward="float")


def goal_reached(achieved, desired):
    """0 where the achieved goal is the desired one, else -1 (module level: a hindsight view pickles it)."""
    return -(np.abs(achieved - desired).sum(axis=1) > 0.5).astype(np.float32)


def check_hindsight_rows(batch: dict) -> None:
    """Each row of a hindsight batch (over ``contract_episode`` data, every value number * 1000 + t) is its own
    item's: unrelabelled, the stored goal and reward; relabelled, a goal achieved later in the row's episode
    and the reward ``goal_reached`` gives it."""
    obs, goal = batch["obs"][:, 0].numpy(), batch["goal"].numpy()
    reward, relabeled = batch["reward"].numpy(), batch["_relabeled"].numpy()
    np.testing.assert_array_equal(goal[relabeled], batch["next_goal"].numpy()[relabeled])
    assert (goal[~relabeled] == -1).all() and (reward[~relabeled] == obs[~relabeled]).all()
    step = goal[relabeled, 0]
    assert ((step > obs[relabeled]) & (step // 1000 == obs[relabeled] // 1000)).all()
    expected = goal_reached(batch["next_obs"].numpy(), goal)
    np.testing.assert_array_equal(reward[relabeled], expected[relabeled])


def contract_episode(kind, number, length):
    """The arrays of one episode of the contract's buffer; a hindsight buffer also has a desired goal."""
    arrays = episode_arrays(number, length)
    if kind == "hindsight":
        arrays["goal"] = np.full((length, 3), -1.0, dtype=np.float32)  # never reached: relabelling shows
    return arrays


@pytest.fixture(params=list(VIEW_KINDS))
def any_view(request, make_buffer):
    """(buffer, make(), store(number, length)): a fresh view of this kind over a buffer of three episodes,
    and how to store one more."""
    from memmap_replay import ShardSet

    kind = request.param
    extra = dict(fields=HINDSIGHT_FIELDS) if kind == "hindsight" else {}
    buffer = make_buffer("view-contract", max_episodes=8, max_timesteps=8, max_steps=64, **extra)

    def store(number, length):
        buffer.store_episode(**contract_episode(kind, number, length), task_id=number, end="terminated")

    for number, length in enumerate([5, 3, 6], start=1):
        store(number, length)
    options = VIEW_KINDS[kind]
    if kind == "hindsight":
        options = dict(hindsight=dict(options["hindsight"], reward_fn=goal_reached))
    opened = []

    def make():
        if request.param == "concat":
            shards = ShardSet(folders=[buffer.folder])
            opened.append(shards)
            return shards.dataset(**options)
        return buffer.dataset(**options)

    yield buffer, make, store
    for shards in opened:
        shards.close()


def same_batch(first: dict, second: dict) -> None:
    assert sorted(first) == sorted(second)
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)


class TestViewContract:
    def test_indexing_is_the_batch_of_one_item(self, any_view):
        _, make, _ = any_view
        view = make()
        size = len(view)
        assert size > 0
        for item in (0, size - 1, -1, np.int64(1)):
            one = view.__getitems__(np.array([int(item) % size]))
            same_batch(view[item], {name: value[0] for name, value in one.items()})
        with pytest.raises(IndexError, match=r"item indices must be in \[0, "):
            view[size]
        with pytest.raises(TypeError, match="a view is indexed by an int"):
            view[True]
        with pytest.raises(TypeError, match="a view is indexed by an int"):
            view[0.0]

    def test_getitems_gathers_in_the_order_asked(self, any_view):
        _, make, _ = any_view
        view = make()
        items = np.random.default_rng(3).permutation(len(view))[:9]
        batch, backwards = view.__getitems__(items), view.__getitems__(items[::-1])
        assert sorted(batch) == sorted(backwards)
        relabelled = set()
        if isinstance(view, HindsightView):
            # Relabelling is seeded by the batch's own (episode, t) pairs, in order: the same batch relabels
            # the same way, a reordered one is another batch (and repeated items draw different goals). So the
            # relabelled outputs are pinned row by row against their own item, and the rest follow the order.
            relabelled = {"goal", "next_goal", "reward", "_relabeled"}
            same_batch(view.__getitems__(items), batch)
            for gathered in (batch, backwards):
                check_hindsight_rows(gathered)
            assert batch["_relabeled"].any() and not batch["_relabeled"].all()
        for name, value in batch.items():
            if name in relabelled:
                continue
            if value.ndim and value.shape[0] == len(items):
                torch.testing.assert_close(value.flip(0), backwards[name], rtol=0, atol=0)
        with pytest.raises(IndexError, match="item indices"):
            view.__getitems__([len(view)])

    def test_pickles_as_a_folder_and_gathers_the_same(self, any_view):
        _, make, _ = any_view
        view = make()
        items = np.arange(len(view))[::2]
        expected = view.__getitems__(items)
        copy = pickle.loads(pickle.dumps(view))
        same_batch(copy.__getitems__(items), expected)

    def test_readahead_and_prefetch_never_change_a_batch(self, any_view):
        _, make, _ = any_view
        items = np.random.default_rng(5).permutation(len(make()))[:7]
        expected = make().__getitems__(items)
        for mode in ("always", "auto", "off"):
            view = make()
            if not hasattr(view, "readahead"):  # a ConcatView: its shards' views advise their own rows
                continue
            view.readahead.mode = mode
            view.prefetch(items)
            same_batch(view.__getitems__(items), expected)
            view.prefetch(np.array([len(view) + 5]))  # a batch that will fail its gather: no error here
            assert view.advise(np.zeros(0, np.int64), np.zeros(0, np.int64)) is False
        if hasattr(view, "row_ranges"):  # every row the batch reads lies in its ranges (what readahead advises)
            episode, t = view.positions.locate(items)
            lo, hi = view.row_ranges(episode, t)
            start, end = view.table.start[episode], view.table.start[episode] + view.table.length[episode]
            assert (lo >= start).all() and (lo <= start + t).all() and (hi > start + t).all() and (hi <= end + 8).all()

    def test_parallel_gathers_never_change_a_batch(self, any_view, parallel):
        _, make, _ = any_view
        items = np.random.default_rng(7).permutation(len(make()))[:7]
        expected = make().__getitems__(items)
        parallel.on()
        view = make()
        same_batch(view.__getitems__(items), expected)
        assert parallel.copies > 0  # split over the library's threads
        same_batch(pickle.loads(pickle.dumps(view)).__getitems__(items), expected)

    def test_refresh_takes_in_new_episodes(self, any_view):
        _, make, store = any_view
        view = make()
        before = len(view)
        store(9, 7)
        assert view.refresh() is True
        assert len(view) > before and view.refresh() is False
        same_batch(view.__getitems__([len(view) - 1]), make().__getitems__([len(view) - 1]))


# ---- memmap-replay-buffer 0.2.3's dataset keywords --------------------------------------------------------


def test_trajectory_slice_by_episode_len_false_gives_max_timesteps_rows_with_defaults(make_buffer):
    buffer = make_buffer(max_timesteps=6, fields=dict(reward=("float", (), -1.0), obs=("float", (2,))))
    buffer.store_episode(reward=np.arange(3.0), obs=np.ones((3, 2)))
    buffer.store_episode(reward=np.arange(2.0) + 10, obs=np.ones((2, 2)))
    whole = buffer.dataset(slice_by_episode_len=False)
    assert whole[0]["reward"].tolist() == [0, 1, 2, -1, -1, -1] and whole[0]["_lens"].item() == 3
    batch = next(iter(buffer.dataloader(2, slice_by_episode_len=False)))
    assert batch["obs"].shape == (2, 6, 2) and batch["obs"][1, 2:].eq(0).all()
    assert batch["reward"][1].tolist() == [10, 11, -1, -1, -1, -1]
    assert buffer.dataset()[0]["reward"].tolist() == [0, 1, 2]


def test_trajectory_return_episode_lens(three):
    assert "_lens" in three.dataset(return_episode_lens=True)[0]
    assert "_lens" not in three.dataset(return_episode_lens=False)[0]
    with pytest.raises(InvalidDataError, match=r"return_episode_lens=False needs slice_by_episode_len=True"):
        three.dataset(slice_by_episode_len=False, return_episode_lens=False)
    with pytest.raises(InvalidDataError, match=r"slice_by_episode_len must be True or False \(got 'no'\)"):
        three.dataset(slice_by_episode_len="no")


@pytest.mark.parametrize("options", [dict(), dict(timestep_level=True), dict(window=2), dict(n_steps=2)], ids=repr)
def test_min_episode_len_keeps_the_longer_episodes(three, options):
    view = three.dataset(min_episode_len=4, **options)
    assert set(view.table.length.tolist()) == {4} and len(view) < len(three.dataset(**options))
    assert view.position_spec()["min_episode_len"] == 4
    with pytest.raises(InvalidDataError, match=r"min_episode_len must be a positive int \(got 0\)"):
        three.dataset(min_episode_len=0, **options)


# ---- edits in place: delete_episodes and trim -----------------------------------------------------------


def test_a_view_refreshes_across_an_edit_and_leaves_removed_episodes_out(filled):
    view = TrajectoryView(filled.episode_store)
    assert len(view) == 6
    filled.delete_episodes([1, 4])
    filled.trim(2, stop=3)
    assert view.refresh() is True and view.table.ids.tolist() == [0, 2, 3, 5]  # (it kept the old snapshot)
    batch = everything(view)
    assert batch["_lens"].tolist() == [5, 3, 8, 10] and batch["task_id"].tolist() == [0, 0, 1, 1]
    assert batch["reward"][1, :3].tolist() == [2000, 2001, 2002]


def test_a_sampler_draws_no_removed_episode_and_a_draw_made_before_the_delete_is_drawn_again(filled):
    sampler = filled.sampler("uniform", timestep_level=True, seed=3)
    stale = sampler.sample(64)
    assert 1 in set((stale.keys // filled.max_timesteps).tolist())
    filled.delete_episodes([0, 1, 2])
    episodes = sampler.batch(256)["reward"].numpy() // 1000
    assert set(episodes.tolist()) == {3, 4, 5}
    view = sampler.view
    with pytest.raises(SampleExpiredError,
                       match=r"no longer in the buffer \(delete_episodes removed it since the draw\); draw again"):
        view.__getitems__(stale)
