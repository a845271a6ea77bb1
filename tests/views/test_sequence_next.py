"""next_fields on windows and trajectories (views/next_steps.py): next_<field> at each step's next state t + 1,
the final observation after an episode's last step, zeros where it has none, against plain numpy."""

import numpy as np
import pytest
import torch

from memmap_replay import OptionError, ReplayBuffer
from memmap_replay.views.kinds import TrajectoryView, WindowView

from compressed_stores import make_compressed_store


def fill(buffer, rng, lengths, *, offset=0):
    """Episodes of ``lengths`` steps with random obs (3,) and rewards; ends cycle terminated with a final
    observation, terminated without one, truncated with one, and truncated without. Returns each episode's
    (obs, final obs or None, end) as stored."""
    episodes = []
    for number, length in enumerate(lengths, offset):
        obs = rng.normal(size=(length, 3)).astype(np.float32)
        end = "terminated" if number % 4 < 2 else "truncated"
        final = rng.normal(size=3).astype(np.float32) if number % 2 == 0 else None
        buffer.store_episode(obs=obs, reward=rng.normal(size=length), end=end,
                             final=None if final is None else dict(obs=final))
        episodes.append((obs, final, end))
    return episodes


def make(tmp_path, lengths=(4, 7, 5, 9, 6, 8), **options):
    buffer = ReplayBuffer(tmp_path / "s", 10, 12, fields={"obs": ("float", 3), "reward": "float"}, **options)
    return buffer, fill(buffer, np.random.default_rng(0), lengths)


def following(obs, final, steps):
    """numpy's reference: obs at steps + 1, the final observation (or zeros) past the last step, zeros beyond."""
    length = len(obs)
    table = np.concatenate((obs, (np.zeros_like(obs[:1]) if final is None else final[None]),
                            np.zeros((max(steps) + 2, obs.shape[1]), obs.dtype)))
    nxt = np.asarray(steps) + 1
    return np.where((nxt <= length)[:, None], table[np.minimum(nxt, len(table) - 1)], 0)


def live(buffer, episodes):
    """The stored episodes still live, oldest first (a ring evicts the oldest)."""
    return episodes[len(episodes) - buffer.num_episodes:]


def test_windows_read_the_next_state(tmp_path):
    buffer, episodes = make(tmp_path)
    view = buffer.dataset(window=3, next_fields=["obs"], episode_flags=True)
    assert view.output_names()[:3] == ["obs", "reward", "next_obs"] and "next_obs" in view.sequence_outputs()
    assert view.read_fields() == ("obs", "reward")
    batch = view.batch(np.arange(len(view)))
    item = 0
    for obs, final, end in episodes:
        for t in range(len(obs) - 2):
            steps = np.arange(t, t + 3)
            assert np.array_equal(batch["obs"][item].numpy(), obs[steps])
            assert np.array_equal(batch["next_obs"][item].numpy(), following(obs, final, steps))
            assert bool(batch["_is_terminal"][item, -1]) == (t == len(obs) - 3 and end == "terminated")
            item += 1
    assert item == len(view)
    # the final observation (episode 0) and a missing one (episode 1: zeros) are read at the last window's end
    last = view.positions.cumulative - 1
    assert np.array_equal(batch["next_obs"][last[0], -1].numpy(), episodes[0][1])
    assert not batch["next_obs"][last[1], -1].any()


def test_next_fields_only_and_time_major(tmp_path):
    buffer, episodes = make(tmp_path)
    plain = buffer.dataset(window=4, next_fields="obs", fields=["reward"])
    major = buffer.dataset(window=4, next_fields="obs", fields=["reward"], time_major=True)
    assert plain.read_fields() == ("reward", "obs")
    items = np.array([0, 3, len(plain) - 1])
    batch, flipped = plain.batch(items), major.batch(items)
    assert set(batch) == {"reward", "next_obs"}
    assert flipped["next_obs"].shape == (4, 3, 3)
    assert torch.equal(flipped["next_obs"], batch["next_obs"].transpose(0, 1))
    obs, final, _ = episodes[-1]
    assert np.array_equal(batch["next_obs"][-1].numpy(), following(obs, final, np.arange(len(obs) - 4, len(obs))))


def test_partial_windows_and_trajectories_pad_with_zeros(tmp_path):
    buffer, episodes = make(tmp_path)
    partial = buffer.dataset(window=6, allow_partial=True, next_fields=["obs"])
    batch = partial.batch(np.arange(len(partial)))
    item = 0
    for obs, final, _ in episodes:
        for t in range(len(obs)):
            steps = np.arange(t, t + 6)
            expected = following(obs, final, steps)
            expected[steps >= len(obs)] = 0
            assert np.array_equal(batch["next_obs"][item].numpy(), expected)
            assert int(batch["_lens"][item]) == min(6, len(obs) - t)
            item += 1
    trajectories = buffer.dataset(next_fields=["obs"], return_mask=True)
    batch = trajectories.batch(np.arange(len(episodes)))
    longest = max(len(obs) for obs, _, _ in episodes)
    assert batch["next_obs"].shape == (len(episodes), longest, 3)
    for row, (obs, final, _) in enumerate(episodes):
        steps = np.arange(longest)
        expected = following(obs, final, steps)
        expected[steps >= len(obs)] = 0
        assert np.array_equal(batch["next_obs"][row].numpy(), expected)
    assert trajectories.read_fields() == ("obs", "reward")


def test_zero_one_style_trajectories_pad_with_the_default(tmp_path):
    buffer = ReplayBuffer(tmp_path / "d", 4, 6, fields={"obs": dict(dtype="float", shape=(), default=-1.0)})
    buffer.store_episode(obs=np.arange(3.0), end="terminated")  # no final observation
    buffer.store_episode(obs=np.arange(4.0), end="truncated", final=dict(obs=np.float32(9)))
    batch = buffer.dataset(slice_by_episode_len=False, next_fields="obs").batch([0, 1])
    assert batch["obs"][0].tolist() == [0, 1, 2, -1, -1, -1]
    assert batch["next_obs"][0].tolist() == [1, 2, 0, -1, -1, -1]  # missing final: zeros; padding: the default
    assert batch["next_obs"][1].tolist() == [1, 2, 3, 9, -1, -1]


def test_row_ranges_reach_the_next_row(tmp_path):
    buffer, _ = make(tmp_path)
    window = buffer.dataset(window=3, next_fields="obs")
    start, length, final = window.table.start, window.table.length, window.table.final
    episode, t = np.arange(len(start)), length - 3  # each episode's last window
    lo, hi = window.row_ranges(episode, t)
    assert np.array_equal(lo, start + t) and np.array_equal(hi, start + length + final)
    lo, hi = buffer.dataset(window=3).row_ranges(episode, t)  # without next fields: the window's rows
    assert np.array_equal(hi, start + length)
    lo, hi = buffer.dataset(next_fields="obs").row_ranges(episode, t)
    assert np.array_equal(lo, start) and np.array_equal(hi, start + length + final)


def test_a_ring_reads_the_live_episodes_final_rows(tmp_path):
    rng = np.random.default_rng(1)
    buffer = ReplayBuffer(tmp_path / "r", 4, 8, fields={"obs": ("float", 3), "reward": "float"}, max_steps=24,
                          circular=True)
    episodes = []
    for round_ in range(4):  # wraps the rows and the slots several times
        episodes += fill(buffer, rng, rng.integers(3, 9, 4), offset=4 * round_)
        window = buffer.dataset(window=3, next_fields="obs")
        batch = window.batch(np.arange(len(window)))
        item = 0
        for obs, final, _ in live(buffer, episodes):
            for t in range(len(obs) - 2):
                assert np.array_equal(batch["next_obs"][item].numpy(), following(obs, final, np.arange(t, t + 3)))
                item += 1
        assert item == len(window)


def test_a_compressed_field(tmp_path):
    pytest.importorskip("zstandard", reason="compressed fields are the [zstd] extra")
    folder = make_compressed_store(tmp_path / "c")  # episode 1 (of 4 steps, terminated) has a final image
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    data = {name: np.asarray(value) for name, value in buffer.get_all_data().items()}
    final = np.asarray(buffer.episode(1).final["image"])
    for fields in (None, ["action"]):  # image read for both outputs (one decode), and for next_image only
        view = buffer.dataset(window=2, next_fields="image", fields=fields)
        batch = view.batch(np.arange(len(view)))
        item = 0
        for number, length in enumerate(data["episode_lens"]):
            frames = data["image"][number, :length]
            for t in range(length - 1):
                expected = np.concatenate((frames, final[None] if number == 1 else np.zeros_like(frames[:1])))
                assert np.array_equal(batch["next_image"][item].numpy(), expected[t + 1:t + 3])
                if fields is None:
                    assert np.array_equal(batch["image"][item].numpy(), frames[t:t + 2])
                item += 1
    buffer.close()


def test_renamed_and_refused(tmp_path):
    buffer, _ = make(tmp_path)
    view = buffer.dataset(window=2, next_fields="obs", fieldname_map={"next_obs": "following"})
    assert "following" in view.batch([0]) and "following" in view.sequence_outputs()
    with pytest.raises(OptionError, match=r"unknown field \['nope'\]: the store's fields are \['obs', 'reward'\]"):
        buffer.dataset(window=2, next_fields=["nope"])
    with pytest.raises(OptionError, match=r"unknown field \['nope'\]"):
        TrajectoryView(buffer.episode_store, next_fields="nope")
    with pytest.raises(OptionError, match=r"\['next_fields'\] do not apply to a TimestepView"):
        buffer.dataset(timestep_level=True, next_fields="obs")
    with pytest.raises(OptionError, match=r"would output \['next_obs'\] twice"):
        WindowView(buffer.episode_store, 2, next_fields="obs", fieldname_map={"obs": "next_obs"})


def test_the_next_rows_are_read_under_the_writers_check(tmp_path):
    """The next rows are read in the view's gather: a ring writer evicting the batch's episodes while it is
    gathered makes the batch refused (the seqlock), never torn next observations."""
    from memmap_replay import SampleExpiredError

    rng = np.random.default_rng(2)
    fields = {"obs": ("float", 3), "reward": "float"}
    with ReplayBuffer(tmp_path / "w", 4, 8, fields=fields, max_steps=40, circular=True) as writer, \
            ReplayBuffer.from_folder(tmp_path / "w", read_only=True) as reader:
        fill(writer, rng, [6, 6, 6, 6])
        reader.refresh()
        view = reader.dataset(window=3, next_fields="obs")
        gather = view.gather

        def gather_while_the_writer_evicts(episode, t):
            batch = gather(episode, t)
            fill(writer, rng, [8, 8, 8, 8])
            return batch

        view.gather = gather_while_the_writer_evicts
        with pytest.raises(SampleExpiredError, match="evicted by the ring writer"):
            view.batch(np.arange(len(view)))


def shares(batch, name):
    """Whether ``name`` and ``next_<name>`` are views of one read (the fused path), one step apart."""
    return np.shares_memory(batch[name].numpy(), batch[f"next_{name}"].numpy())


def two_gathers(view, items):
    """The view's batch through the reference path: each of field and next field its own gather."""
    view._shareable = lambda *args: False
    try:
        return view.batch(items)
    finally:
        del view._shareable


@pytest.mark.parametrize("options, fused", [
    (dict(window=3), "all"),  # whole windows: the two always agree where they overlap
    (dict(window=3, time_major=True), "all"),
    (dict(window=6, allow_partial=True), "some"),  # padding after a stored final observation: two gathers
    (dict(window=6, allow_partial=True, time_major=True), "some"),
    (dict(return_mask=True), "some"),  # trajectories: shorter episodes with a final observation pad after it
    (dict(slice_by_episode_len=False), "none"),  # padded with the field's default
])
def test_a_field_read_now_and_next_is_one_read(tmp_path, options, fused):
    """obs and next_obs come from one read of L + 1 rows (two views sharing L - 1 steps) where the two agree at
    every shared step, and equal the two-gather reference in every case (padding, time-major, missing finals)."""
    buffer, episodes = make(tmp_path)
    view = buffer.dataset(next_fields=["obs"], episode_flags=True, **options)
    every = np.arange(len(view))
    rng = np.random.default_rng(3)
    batches = [every, every[::-1], rng.choice(every, 5), every[every % 4 == 1]]
    if "window" in options:  # and windows that end inside their episodes
        episode, t = view.positions.locate(every)
        batches.append(every[t + options["window"] < view.table.length[episode]])
    for items in batches:
        batch, reference = view.batch(items), two_gathers(view, items)
        assert list(batch) == list(reference)
        for name in batch:
            assert batch[name].shape == reference[name].shape, name
            assert torch.equal(batch[name], reference[name]), name
        assert not shares(reference, "obs")
    taken = [shares(view.batch(items), "obs") for items in batches]
    assert {"all": all(taken), "some": any(taken) and not all(taken), "none": not any(taken)}[fused], taken
    if options == dict(window=3):
        batch = view.batch(every)
        assert torch.equal(batch["obs"][:, 1:], batch["next_obs"][:, :-1])
        assert batch["next_obs"].data_ptr() - batch["obs"].data_ptr() == batch["obs"][0, 0].nbytes  # a step on


def test_the_fused_read_keeps_what_a_partial_window_needs(tmp_path):
    """Partial windows whose episodes end inside them without a stored final observation pad with zeros at
    both outputs, so they still share one read; one ending before a stored final observation does not."""
    buffer, episodes = make(tmp_path)
    view = buffer.dataset(window=6, allow_partial=True, next_fields=["obs"])
    firsts = view.positions.first_item
    last_of = lambda number: firsts[number] + len(episodes[number][0]) - 1  # noqa: E731 (a window of one step)
    without_final, with_final = last_of(1), last_of(0)  # episode 1 stores no final observation, 0 does
    batch = view.batch([without_final, firsts[1]])  # (episode 1's first window ends inside it)
    assert shares(batch, "obs") and not batch["next_obs"][0].any() and not batch["obs"][0, 1:].any()
    batch = view.batch([with_final, firsts[1]])
    assert not shares(batch, "obs")
    assert np.array_equal(batch["next_obs"][0, 0].numpy(), episodes[0][1]) and not batch["obs"][0, 1:].any()


def test_transforms_and_worker_slots_get_their_own_memory(tmp_path):
    """A transform may change the batch in place, and a worker's slot packs contiguous tensors: both get
    field and next field in memory of their own (the same values)."""
    from memmap_replay.views.pool import set_output_target

    buffer, _ = make(tmp_path)
    items = np.arange(8)
    plain = buffer.dataset(window=3, next_fields=["obs"]).batch(items)

    def shift(batch):
        batch["obs"].add_(1)  # in place, as the transform contract allows
        return batch

    changed = buffer.dataset(window=3, next_fields=["obs"], transform=shift).batch(items)
    assert torch.equal(changed["obs"], plain["obs"] + 1) and torch.equal(changed["next_obs"], plain["next_obs"])
    assert not shares(changed, "obs") and changed["next_obs"].is_contiguous()
    view = buffer.dataset(window=3, next_fields=["obs"])
    set_output_target(lambda shape, dtype: np.empty(shape, dtype))  # (as a worker's slot: the outputs go there)
    try:
        batch = view.batch(items)
    finally:
        set_output_target(None)
    assert not shares(batch, "obs") and batch["obs"].is_contiguous() and batch["next_obs"].is_contiguous()
    assert torch.equal(batch["obs"], plain["obs"]) and torch.equal(batch["next_obs"], plain["next_obs"])


@pytest.mark.parametrize("workers", ["processes", "threads"])
def test_fused_batches_through_workers(tmp_path, workers):
    """Batches of the fused read through worker processes (shared-memory slots) and gather threads equal
    the main process's."""
    buffer, _ = make(tmp_path)
    options = dict(window=3, next_fields=["obs"], episode_flags=True, shuffle=True, seed=1)
    here = list(buffer.dataloader(4, **options))
    there = list(buffer.dataloader(4, num_workers=2, workers=workers, **options))
    assert len(here) == len(there) > 1
    for mine, theirs in zip(here, there):
        assert set(mine) == set(theirs)
        assert all(torch.equal(mine[name], theirs[name]) for name in mine)
