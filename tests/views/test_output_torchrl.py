"""output='torchrl': TorchRL's nested layout, read by TorchRL's own losses and compared with its samplers."""

import sys

import numpy as np
import pytest
import torch

from memmap_replay import MissingExtraError, OptionError, ReplayBuffer
from memmap_replay.views import torchrl_layout
from memmap_replay.views.transitions import OBSERVATION_PREFIXES

REASON = "torchrl is the [torchrl] extra (pip install 'memmap-replay[torchrl]'); its tests run where it is"


@pytest.fixture
def torchrl():
    return pytest.importorskip("torchrl", reason=REASON)


def store(tmp_path, *, continuous=False, episodes=6, name="s"):
    """Episodes of 5.. steps, ends alternating truncated / terminated; obs (4,) float, a scalar int action
    (or a (2,) float one), a reward; obs[t] = 100 * episode + t (every entry) tells rows apart. Episodes 1 and
    3 (terminated) store a final observation (100 * episode + 50), episode 5 (terminated) none."""
    action = ("float", 2) if continuous else "int"
    buffer = ReplayBuffer(tmp_path / name, 10, 20, fields={"obs": ("float", 4), "action": action, "reward": "float"},
                          meta_fields={"task": "int"})
    rng = np.random.default_rng(0)
    for number in range(episodes):
        length = 5 + number
        obs = (100 * number + np.arange(length, dtype=np.float32))[:, None].repeat(4, 1)
        act = rng.uniform(-1, 1, (length, 2)) if continuous else rng.integers(0, 3, length)
        final = dict(obs=np.full(4, 100 * number + 50, np.float32)) if number in (1, 3) else None
        buffer.store_episode(obs=obs, action=act, reward=rng.normal(size=length), task=number % 2,
                             end="terminated" if number % 2 else "truncated", final=final)
    return buffer


def test_transitions_match_the_dict_output(torchrl, tmp_path):
    buffer = store(tmp_path)
    plain = list(buffer.dataloader(8, transitions=True, gamma=0.9, shuffle=True, seed=3))
    tds = list(buffer.dataloader(8, transitions=True, gamma=0.9, shuffle=True, seed=3, output="torchrl"))
    assert len(tds) == len(plain) > 1
    for batch, td in zip(plain, tds):
        size = len(batch["obs"])
        assert list(td.batch_size) == [size]
        assert torch.equal(td["obs"], batch["obs"]) and torch.equal(td["next", "obs"], batch["next_obs"])
        assert torch.equal(td["action"], batch["action"].long()) and td["action"].dtype == torch.int64
        assert td["next", "reward"].shape == (size, 1) and torch.equal(td["next", "reward"][:, 0], batch["reward"])
        for flag in ("terminated", "truncated", "done"):
            assert td["next", flag].shape == (size, 1) and td["next", flag].dtype == torch.bool
        assert torch.equal(td["next", "terminated"][:, 0], batch["terminated"])
        assert torch.equal(td["next", "truncated"][:, 0], batch["truncated"])
        assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
        assert torch.equal(td["discount"], batch["discount"]) and torch.equal(td["task"], batch["task"])
        # the next observation is the next step's (obs[t] = 100 * episode + t), unless the episode ended there
        going = ~(td["next", "done"][:, 0])
        assert torch.equal(td["next", "obs"][going], td["obs"][going] + 1)
    assert any(td["next", "done"].any() for td in tds)


def test_dqn_loss_on_a_discrete_store(torchrl, tmp_path):
    from torchrl.modules import MLP, QValueActor
    from torchrl.objectives import DQNLoss, SoftUpdate

    torch.manual_seed(0)
    actor = QValueActor(MLP(in_features=4, out_features=3, num_cells=[16]), in_keys=["obs"],
                        action_space="categorical")
    loss = DQNLoss(actor, action_space="categorical", delay_value=True)
    loss.make_value_estimator(gamma=0.9)
    updater = SoftUpdate(loss, eps=0.99)  # (a loss with target networks wants its updater)
    sampler = store(tmp_path).sampler("prioritized", transitions=True, seed=0)
    td = next(iter(sampler.dataloader(16, 1, output="torchrl")))
    assert td["priority_weight"].shape == (16,)
    out = loss(td)
    assert out["loss"].shape == () and torch.isfinite(out["loss"])
    out["loss"].backward()
    assert all(p.grad is not None for p in actor.parameters())
    assert td["td_error"].shape == (16, 1)  # what TorchRL's prioritized buffers take back as priorities
    sampler.update_priorities(td["_key"], td["td_error"][:, 0].numpy())
    updater.step()


def test_sac_loss_on_a_continuous_store(torchrl, tmp_path):
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(0)
    net = torch.nn.Sequential(MLP(in_features=4, out_features=4, num_cells=[16]), NormalParamExtractor())
    actor = ProbabilisticActor(TensorDictModule(net, in_keys=["obs"], out_keys=["loc", "scale"]),
                               in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=True)
    critic = ValueOperator(MLP(in_features=6, out_features=1, num_cells=[16]), in_keys=["obs", "action"])
    loss = SACLoss(actor, critic, target_entropy=-2.0)
    loss.make_value_estimator(gamma=0.99)
    SoftUpdate(loss, eps=0.99)
    td = next(iter(store(tmp_path, continuous=True).dataloader(16, transitions=True, shuffle=True, seed=0,
                                                                   output="torchrl")))
    assert td["action"].shape == (16, 2) and td["action"].dtype == torch.float32
    out = loss(td)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    assert torch.isfinite(total)
    total.backward()


def test_nstep_is_torchrls_multistep_layout(torchrl, tmp_path):
    buffer = store(tmp_path)
    options = dict(n_steps=3, gamma=0.5, shuffle=True, seed=2)
    for batch, td in zip(buffer.dataloader(8, **options), buffer.dataloader(8, output="torchrl", **options)):
        assert torch.equal(td["next", "reward"][:, 0], batch["n_step_return"])
        assert torch.equal(td["next", "reward_orig"][:, 0], batch["reward"])
        assert torch.equal(td["steps_to_next_obs"][:, 0], batch["n_step_lens"])
        assert torch.equal(td["next", "terminated"][:, 0], batch["terminal"])
        assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
        assert torch.equal(td["next", "obs"], batch["next_obs"])
        assert torch.equal(td["next_action"], batch["next_action"])  # not an observation: at the root, as named


def test_nstep_needs_gamma(torchrl, tmp_path):
    with pytest.raises(OptionError, match=r"output='torchrl' over an n-step view needs gamma="):
        next(iter(store(tmp_path).dataloader(4, n_steps=2, output="torchrl")))


def test_timesteps_nest_the_reward(torchrl, tmp_path):
    td = next(iter(store(tmp_path).dataloader(4, timestep_level=True, output="torchrl")))
    assert list(td.batch_size) == [4] and td["next", "reward"].shape == (4, 1)
    assert set(td["next"].keys()) == {"reward"}


def slice_sampler_batch(buffer, slices, length, seed=0):
    """TorchRL's own SliceSampler over a LazyTensorStorage holding the store's episodes as its collectors
    write them (("next", ...) per step, the last step's next obs the final observation, zeros if none),
    reshaped to [slices, length]; and the storage's rows."""
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    steps = []
    for number, episode in enumerate(buffer.dataset()):
        size = int(episode["_lens"])
        stored = buffer.episode(number).final
        final = torch.zeros(1, 4) if stored is None else torch.from_numpy(stored["obs"])[None]
        terminated = torch.zeros(size, 1, dtype=torch.bool)
        truncated = torch.zeros(size, 1, dtype=torch.bool)
        (terminated if number % 2 else truncated)[-1] = True
        steps.append(TensorDict({
            "obs": episode["obs"][:size], "action": episode["action"][:size].long(), "episode": torch.full(
                (size,), number), "task": episode["task"].expand(size),
            ("next", "obs"): torch.cat([episode["obs"][1:size], final]),
            ("next", "reward"): episode["reward"][:size, None], ("next", "terminated"): terminated,
            ("next", "truncated"): truncated, ("next", "done"): terminated | truncated}, batch_size=[size]))
    rows = torch.cat(steps)
    torch.manual_seed(seed)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(len(rows)), batch_size=slices * length,
                                sampler=SliceSampler(slice_len=length, traj_key="episode"))
    rb.extend(rows)
    return rb.sample().reshape(slices, length), rows


def test_a_window_is_slice_samplers_batch_reshaped(torchrl, tmp_path):
    buffer = store(tmp_path)
    T = 4
    theirs, rows = slice_sampler_batch(buffer, 64, T)
    loader = buffer.dataloader(8, window=T, shuffle=True, seed=0, output="torchrl")
    ours = next(iter(loader))
    assert list(ours.batch_size) == [8, T] and list(theirs.batch_size) == [64, T]
    # each of their slices, as our window at the same (episode, t): the loader's view, in our layout
    view = loader.dataset
    episode, index = theirs["episode"][:, 0].numpy(), theirs["index"][:, 0].reshape(-1).numpy()
    starts = np.cumsum([0] + [5 + n for n in range(5)])
    t = index - starts[episode]
    mine = torchrl_layout.to_torchrl(view.batch(view.positions.first_item[episode] + t), view)
    assert list(mine.batch_size) == [64, T]
    keys = {key for key in mine.keys(True, True) if key not in ("_is_first", "_is_last")}
    assert keys == {key for key in theirs.keys(True, True) if key not in ("episode", "index")}
    assert keys == {key for key in ours.keys(True, True) if key not in ("_is_first", "_is_last")}
    for key in keys:  # obs, action, task, ("next", obs / reward / done / terminated / truncated)
        assert mine[key].shape == theirs[key].shape and mine[key].dtype == theirs[key].dtype, key
        assert torch.equal(mine[key], theirs[key]), key
    # among them slices that end at a terminated end (with and without a final observation) and truncated ones
    ends = t + T == np.array([5 + n for n in range(6)])[episode]
    assert {1, 3, 5} <= set(episode[ends].tolist()) and set(episode[ends].tolist()) - {1, 3, 5}
    assert mine["next", "terminated"][ends, -1, 0].tolist() == (episode[ends] % 2 == 1).tolist()
    assert not mine["next", "terminated"][:, :-1].any() and not mine["next", "terminated"][~ends].any()
    assert mine["next", "truncated"][:, -1].all() and not mine["next", "truncated"][:, :-1].any()
    assert torch.equal(mine["next", "done"], mine["next", "terminated"] | mine["next", "truncated"])
    terminal_obs = mine["next", "obs"][ends, -1, 0].tolist()
    assert {150.0, 350.0, 0.0} <= set(terminal_obs)  # the final observations, and zeros where none is stored
    assert set(view.next_fields) == {"obs"} and view.episode_flags


def test_trajectories_and_time_major_windows(torchrl, tmp_path):
    buffer = store(tmp_path)
    td = next(iter(buffer.dataloader(3, output="torchrl")))  # episodes of 5, 6 and 7 steps
    assert list(td.batch_size) == [3, 7]
    assert td["collector", "mask"].sum(1).tolist() == [5, 6, 7]
    assert td["next", "truncated"][:, :, 0].nonzero().tolist() == [[0, 4], [1, 5], [2, 6]]
    assert td["next", "terminated"][:, :, 0].nonzero().tolist() == [[1, 5]]  # episode 1 terminated
    assert torch.equal(td["next", "done"], td["next", "terminated"] | td["next", "truncated"])
    assert torch.equal(td["next", "obs"][0, :4], td["obs"][0, 1:5])
    assert td["next", "obs"][1, 5].tolist() == [150.0] * 4  # the terminal step's next obs: the final observation
    assert td["next", "obs"][2, 6].tolist() == [0.0] * 4  # none stored: zeros
    assert not td["next", "obs"][0, 5:].any() and not td["next", "reward"][0, 5:].any()  # padding
    assert td["next", "reward"].shape == (3, 7, 1) and td["_lens"].shape == (3, 7)
    plain = next(iter(buffer.dataloader(2, window=4, output="torchrl")))
    major = next(iter(buffer.dataloader(2, window=4, time_major=True, output="torchrl")))
    assert list(plain.batch_size) == [2, 4] and list(major.batch_size) == [4, 2]
    assert torch.equal(major["next", "obs"], plain["next", "obs"].transpose(0, 1))
    assert torch.equal(major["next", "terminated"], plain["next", "terminated"].transpose(0, 1))
    assert torch.equal(major["task"], plain["task"].transpose(0, 1))


def test_partial_windows_mark_their_last_real_step(torchrl, tmp_path):
    buffer = store(tmp_path)
    loader = buffer.dataloader(64, window=6, allow_partial=True, output="torchrl")
    td = next(iter(loader))
    real = td["collector", "mask"].sum(1)
    last = td["next", "truncated"][:, :, 0].float().argmax(1)
    assert torch.equal(last, real - 1) and td["next", "truncated"].sum() == len(real)
    ends = td["_is_last"].any(1)  # windows that reach their episode's end
    assert torch.equal(td["next", "terminated"].any(1)[:, 0], ends & (td["task"][:, 0] == 1))


def test_explicit_options_are_kept(torchrl, tmp_path):
    buffer = store(tmp_path)
    td = next(iter(buffer.dataloader(2, window=3, next_fields=["obs", "action"], output="torchrl")))
    assert td["next", "obs"].shape == (2, 3, 4) and td["next_action"].shape == (2, 3)  # not an obs: at the root
    td = next(iter(buffer.dataloader(2, window=3, next_fields=[], output="torchrl")))
    assert "obs" not in td["next"].keys() and td["next", "terminated"].shape == (2, 3, 1)
    loader = buffer.dataloader(2, window=3, fields=["action", "reward"], output="torchrl")
    assert loader.dataset.next_fields == ()  # no observation field: nothing under "next" but reward and flags
    assert set(next(iter(loader))["next"].keys()) == {"reward", "terminated", "truncated", "done"}


def test_a_view_without_the_flags_is_refused(torchrl, tmp_path):
    sampler = store(tmp_path).sampler("sequence", window=4, seed=0)
    with pytest.raises(OptionError, match=r"output='torchrl' over windows and trajectories needs the episode "
                                          r"flags .* episode_flags=True and next_fields="):
        next(iter(sampler.dataloader(2, 1, output="torchrl")))


def test_every_dataloader_takes_it(torchrl, tmp_path):
    first, second = store(tmp_path, name="a"), store(tmp_path, name="b")
    sequences = first.sampler("sequence", window=4, seed=0, next_fields="obs", episode_flags=True)
    td = next(iter(sequences.dataloader(2, 1, output="torchrl")))
    assert list(td.batch_size) == [2, 4] and td["priority_weight"].shape == (2, 4)
    assert td["next", "obs"].shape == (2, 4, 4)
    from memmap_replay import ShardSet

    shards = ShardSet(folders=[first.folder, second.folder])
    td = next(iter(shards.dataloader(4, transitions=True, output="torchrl")))
    assert list(td.batch_size) == [4] and td["next", "done"].shape == (4, 1)
    td = next(iter(shards.dataloader(4, window=3, output="torchrl")))  # each shard's view gets the defaults
    assert list(td.batch_size) == [4, 3] and td["next", "obs"].shape == (4, 3, 4)
    from memmap_replay import ConcatReplayBuffer

    td = next(iter(ConcatReplayBuffer([first.folder, second.folder]).dataloader(2, output="torchrl")))
    assert td["next", "obs"].shape[-1] == 4 and td["next", "terminated"].dtype == torch.bool


def test_a_batch_of_its_own_converts(torchrl, tmp_path):
    sampler = store(tmp_path).sampler("uniform", transitions=True, seed=0)
    td = torchrl_layout.to_torchrl(sampler.batch(5), sampler.view)
    assert td["next", "obs"].shape == (5, 4)


def test_the_observation_prefixes_are_the_transitions_views(torchrl):
    assert torchrl_layout.OBSERVATION_PREFIXES == OBSERVATION_PREFIXES


def test_named_tuples_do_not_combine(tmp_path):
    with pytest.raises(OptionError, match=r"output='torchrl' and to_named_tuple=\('obs',\) cannot be combined"):
        store(tmp_path).dataloader(4, transitions=True, output="torchrl", to_named_tuple=("obs",))


def test_without_the_extra_the_error_names_it(tmp_path, monkeypatch):
    buffer = store(tmp_path)
    monkeypatch.setitem(sys.modules, "tensordict", None)  # import fails as if it were not installed
    with pytest.raises(MissingExtraError, match=r"output='torchrl' needs the package tensordict, which is not "
                                                r"installed: pip install 'memmap-replay\[torchrl\]'"):
        buffer.dataloader(4, transitions=True, output="torchrl")


@pytest.mark.parametrize("options", [dict(transitions=True, gamma=0.9), dict(n_steps=3, gamma=0.9),
                                     dict(window=4), dict(window=4, time_major=True),
                                     dict(window=6, allow_partial=True), dict()])
def test_the_unchecked_build_is_the_checked_constructors(torchrl, tmp_path, options):
    """Batches whose every entry fits are built without tensordict's per-key checks; the TensorDict is the one
    its checked constructor builds (taken with a device to move to), nested TensorDicts and batch sizes too."""
    tensordict = pytest.importorskip("tensordict")
    loader = store(tmp_path).dataloader(3, shuffle=True, seed=2, output="torchrl", **options)
    batch = loader.dataset.batch(np.arange(3))
    fast, checked = (torchrl_layout.to_torchrl(batch, loader.dataset, device=device) for device in (None, "cpu"))
    assert fast.device is None and checked.device == torch.device("cpu")
    assert fast.batch_size == checked.batch_size and type(fast) is type(checked)
    assert sorted(fast.keys(True, True), key=str) == sorted(checked.keys(True, True), key=str)
    for key in fast.keys(True):
        a, b = fast[key], checked[key]
        if isinstance(b, tensordict.TensorDictBase):
            assert isinstance(a, tensordict.TensorDictBase) and a.batch_size == b.batch_size, key
        else:
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    assert fast.clone().batch_size == fast.batch_size and (fast == checked).all()


def test_an_entry_that_does_not_fit_is_refused_by_tensordict(torchrl, tmp_path):
    buffer = store(tmp_path)
    for options, name, value in ((dict(window=4), "action", torch.zeros(3, 5)),  # (a transform's other shape)
                                 (dict(transitions=True), "extra", torch.zeros(2))):
        loader = buffer.dataloader(3, output="torchrl", **options)
        batch = loader.dataset.batch(np.arange(3))
        batch[name] = value
        with pytest.raises(RuntimeError, match="batch dimension mismatch"):
            torchrl_layout.to_torchrl(batch, loader.dataset)
