"""Recording gymnasium envs (memmap_replay.recording) on real envs: what is stored equals what an
independent rollout with the same seeds and actions produces, step for step, with ends, final
observations, infos, reset seeds and the dataset card; fields are named as memmap_replay.interop names
them, so that a recording exports to Minari as it is. Also VectorEpisodeWriter.commit_all(final=...)."""

import json

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.sharing.card import read_card, space_to_json  # noqa: E402
from memmap_replay.errors import (EpisodeStateError, InvalidDataError, OptionError, ReadOnlyError,  # noqa: E402
                                  SchemaError, SchemaMismatchError)
from memmap_replay.core.format import END_NAMES  # noqa: E402
from memmap_replay.recording import RecordEpisodes, RecordVectorEpisodes, gymnasium_fields  # noqa: E402


class DictEnv(gymnasium.Env):
    """A Dict observation with a nested Dict, a Tuple action, info keys (``dist``: the norm of the
    observation's ``pos``, at reset too; ``bonus``: only every third step), both ends, and (``reuse``) an
    observation array the env changes in place at every step."""

    metadata = {}

    def __init__(self, horizon=12, reuse=True):
        self.observation_space = spaces.Dict({"pos": spaces.Box(-50, 50, (2,), np.float32),
                                              "goal_id": spaces.Discrete(3),
                                              "sensors": spaces.Dict({"flags": spaces.MultiBinary(2)})})
        self.action_space = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)))
        self.horizon, self.reuse = horizon, reuse
        self.pos = np.zeros(2, np.float32)  # handed out at every step, changed in place

    def obs(self):
        return {"pos": self.pos if self.reuse else self.pos.copy(), "goal_id": self.goal,
                "sensors": {"flags": (self.pos > 0).astype(np.int8)}}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos[:] = self.np_random.uniform(-1, 1, 2)
        self.goal, self.t = int(self.np_random.integers(3)), 0
        return self.obs(), {"dist": float(np.linalg.norm(self.pos))}

    def step(self, action):
        kind, push = action
        self.pos += np.asarray(push, np.float32) * (kind + 1)
        self.t += 1
        dist = float(np.linalg.norm(self.pos))
        info = {"dist": dist, **({"bonus": float(self.t)} if self.t % 3 == 0 else {})}
        return self.obs(), -dist, dist > 4.0, self.t >= self.horizon, info


class FailingEnv(gymnasium.Wrapper):
    """Raises at the given step count (counted over the env's life)."""

    def __init__(self, env, fail_at):
        super().__init__(env)
        self.fail_at, self.steps = fail_at, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("the simulator crashed")
        return self.env.step(action)


def dict_env_fields(obs):
    return {"observation__pos": obs["pos"], "observation__goal_id": obs["goal_id"],
            "observation__sensors__flags": obs["sensors"]["flags"]}


def plain_fields(obs):
    return {"observation": obs}


def action_fields(action):
    if isinstance(action, tuple):
        return {"action__0": action[0], "action__1": action[1]}
    return {"action": action}


# ---- independent rollouts -----------------------------------------------------------------------------


def copied(obs):
    return {key: copied(value) for key, value in obs.items()} if isinstance(obs, dict) else np.array(obs)


def new_episode(obs, info, seed, to_fields):
    """``infos``: the info that came with each observation (the reset's, then each step's)."""
    return {"rows": [to_fields(copied(obs))], "infos": [dict(info)], "actions": [], "rewards": [], "seed": seed,
            "end": None}


def add_step(episode, action, obs, reward, info, to_fields):
    episode["actions"].append(action_fields(action))
    episode["rewards"].append(reward)
    episode["infos"].append(dict(info))
    episode["rows"].append(to_fields(copied(obs)))


def play(env, seeds, actions=None, *, to_fields=plain_fields, cut=None):
    """Episodes from a plain env: reset(seed) for each seed, steps until the end (or ``cut`` steps, then
    the episode counts as cut); actions sampled from the env's seeded action space, or replayed."""
    env.action_space.seed(7)
    episodes, used = [], []
    for k, seed in enumerate(seeds):
        obs, info = env.reset(seed=seed)
        episode, taken = new_episode(obs, info, seed, to_fields), []
        while True:
            action = env.action_space.sample() if actions is None else actions[k][len(taken)]
            taken.append(action)
            obs, reward, terminated, truncated, info = env.step(action)
            add_step(episode, action, obs, reward, info, to_fields)
            if terminated or truncated:
                episode["end"] = "terminated" if terminated else "truncated"
                break
            if cut is not None and len(taken) == cut:
                break
        episodes.append(episode)
        used.append(taken)
    return episodes, used


def stored(folder):
    """Every committed episode of the store, oldest first: rows (final row included), end, seed."""
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    store, table = buffer.episode_store, buffer.episode_store.live_table()
    out = []
    for k in range(len(table)):
        start, length, final = int(table.start[k]), int(table.length[k]), bool(table.final[k])
        rows = {name: np.asarray(store.step_array(name)[start:start + length + final]) for name in buffer.fieldnames}
        meta = {name: store.meta_array(name)[table.slots[k]].item() for name in buffer.meta_fieldnames}
        out.append({"rows": rows, "length": length, "final": final, "end": END_NAMES[int(table.end[k])], **meta})
    buffer.close()
    return out


def assert_same(stored_episodes, played):
    assert len(stored_episodes) == len(played)
    for got, want in zip(stored_episodes, played):
        length = len(want["actions"])
        assert got["length"] == length and got["end"] == want["end"]
        assert got["seed"] == (-1 if want["seed"] is None else want["seed"])
        assert got["final"]  # every recorded episode keeps the observation after its last action
        for name in want["rows"][0]:
            expected = np.stack([np.asarray(row[name]) for row in want["rows"]])
            np.testing.assert_array_equal(got["rows"][name], expected, err_msg=name)
        for name in want["actions"][0]:
            np.testing.assert_array_equal(got["rows"][name][:length], np.stack([a[name] for a in want["actions"]]))
        np.testing.assert_array_equal(got["rows"]["reward"][:length], np.array(want["rewards"], dtype=np.float64))


# ---- one env ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id, seeds", [("CartPole-v1", [3, None, 11]), ("FrozenLake-v1", [0, 1, None, 2])])
def test_single_env_matches_an_independent_rollout(tmp_path, env_id, seeds):
    recorder = RecordEpisodes(gymnasium.make(env_id), tmp_path / "data")
    recorded, actions = play(recorder, seeds)
    recorder.close()
    replayed, _ = play(gymnasium.make(env_id), seeds, actions)
    assert_same(stored(tmp_path / "data"), replayed)
    assert [e["end"] for e in replayed] == [e["end"] for e in recorded]
    if env_id == "FrozenLake-v1":  # Discrete observations are int64 scalars
        buffer = ReplayBuffer.from_folder(tmp_path / "data", read_only=True)
        assert buffer.schema.fields["observation"].dtype == np.int64 and buffer.schema.fields["observation"].shape == ()


def test_pendulum_truncates_and_bootstraps_from_its_final_observation(tmp_path):
    make = lambda: gymnasium.make("Pendulum-v1", max_episode_steps=30)  # noqa: E731
    recorder = RecordEpisodes(make(), tmp_path / "data")
    _, actions = play(recorder, [5, 6])
    recorder.close()
    replayed, _ = play(make(), [5, 6], actions)
    episodes = stored(tmp_path / "data")
    assert_same(episodes, replayed)
    assert [e["end"] for e in episodes] == ["truncated", "truncated"]
    transitions = ReplayBuffer.from_folder(tmp_path / "data", read_only=True).dataset(n_steps=1, gamma=0.5)
    batch = transitions.__getitems__([29, 59])  # the last step of each episode
    np.testing.assert_array_equal(batch["next_observation"].numpy(),
                                  np.stack([e["rows"]["observation"][-1] for e in episodes]))
    assert batch["bootstrap_discount"].tolist() == [0.5, 0.5] and not batch["terminal"].any()


def test_terminated_episode_does_not_bootstrap(tmp_path):
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
    play(recorder, [0])
    recorder.close()
    transitions = ReplayBuffer.from_folder(tmp_path / "data", read_only=True).dataset(n_steps=1, gamma=0.9)
    last = transitions.__getitems__([len(transitions) - 1])
    assert last["terminal"].tolist() == [True] and last["bootstrap_discount"].tolist() == [0.0]


def test_dict_observations_tuple_actions_and_info_fields(tmp_path):
    info_fields = {"dist": "float64", "bonus": ("float32", (), -1.0)}
    recorder = RecordEpisodes(DictEnv(), tmp_path / "data", max_timesteps=12, info_fields=info_fields)
    assert set(recorder.buffer.fieldnames) == {"observation__pos", "observation__goal_id",
                                               "observation__sensors__flags", "action__0", "action__1", "reward",
                                               "info__dist", "info__bonus"}
    recorded, actions = play(recorder, [1, 2, 3], to_fields=dict_env_fields)
    recorder.close()
    replayed, _ = play(DictEnv(), [1, 2, 3], actions, to_fields=dict_env_fields)
    episodes = stored(tmp_path / "data")
    assert_same(episodes, replayed)  # the in-place observation array was copied at every step
    assert {e["end"] for e in episodes} == {"terminated", "truncated"} or len(episodes) == 3
    for got, want in zip(episodes, replayed):  # row t: the info that came with observation t, final row too
        rows = got["rows"]
        np.testing.assert_array_equal(rows["info__dist"], [info["dist"] for info in want["infos"]])
        np.testing.assert_allclose(rows["info__dist"], np.linalg.norm(rows["observation__pos"], axis=1), rtol=1e-6)
        bonus = [info.get("bonus", -1.0) for info in want["infos"]]  # absent key -> the field's default
        np.testing.assert_array_equal(rows["info__bonus"], np.array(bonus, np.float32))
        assert bonus[0] == -1.0 and bonus[3] == 3.0  # the reset's info has none; step 3 gives it
    assert recorder.buffer.schema.fields["observation__sensors__flags"].dtype == np.int8


def test_reset_in_the_middle_commits_a_cut_episode_with_its_last_observation(tmp_path):
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
    recorded, actions = play(recorder, [4, 5], cut=3)
    recorder.close()
    replayed, _ = play(gymnasium.make("CartPole-v1"), [4, 5], actions, cut=3)
    episodes = stored(tmp_path / "data")
    assert_same(episodes, replayed)
    assert [e["end"] for e in episodes] == [None, None] and [e["length"] for e in episodes] == [3, 3]


def test_partial_discard_drops_cut_episodes(tmp_path):
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data", partial="discard")
    play(recorder, [4], cut=2)
    recorder.reset(seed=1)  # cuts the first episode: dropped
    play(recorder, [8])  # a whole episode: kept
    recorder.reset()
    recorder.step(0)
    recorder.close()  # cuts the last one: dropped
    assert [e["seed"] for e in stored(tmp_path / "data")] == [8]


def test_an_exception_discards_the_episode_and_step_then_needs_a_reset(tmp_path):
    recorder = RecordEpisodes(FailingEnv(gymnasium.make("CartPole-v1"), fail_at=4), tmp_path / "data")
    recorder.reset(seed=0)
    for _ in range(3):
        recorder.step(0)
    with pytest.raises(RuntimeError, match="simulator crashed"):
        recorder.step(0)
    with pytest.raises(EpisodeStateError, match=r"discarded after RuntimeError; call reset\(\) first"):
        recorder.step(0)
    play(recorder, [9])
    recorder.close()
    assert [e["seed"] for e in stored(tmp_path / "data")] == [9]


def test_an_exception_in_a_with_block_discards_the_episode(tmp_path):
    with pytest.raises(KeyError, match="policy"):
        with RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data") as recorder:
            play(recorder, [1])
            recorder.reset(seed=2)
            recorder.step(1)
            raise KeyError("policy")
    assert [e["seed"] for e in stored(tmp_path / "data")] == [1]


def test_step_before_reset_and_after_an_end_is_refused(tmp_path):
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
    with pytest.raises(EpisodeStateError, match=r"reset\(\) was never called"):
        recorder.step(0)
    play(recorder, [0])
    with pytest.raises(EpisodeStateError, match=r"the episode ended \(terminated\)"):
        recorder.step(0)
    recorder.close()


def test_card_records_spec_spaces_provenance_and_seeds_across_recordings(tmp_path):
    for seeds in ([1, None], [2]):
        recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
        play(recorder, seeds)
        recorder.close()
    card = read_card(tmp_path / "data")
    env = gymnasium.make("CartPole-v1")
    assert card.env_spec == json.loads(env.spec.to_json())
    assert card.observation_space == space_to_json(env.observation_space)
    assert card.action_space == space_to_json(env.action_space)
    assert [record["kind"] for record in card.provenance] == ["gymnasium", "gymnasium"]
    assert card.provenance[0]["source"] == "CartPole-v1" and card.provenance[0]["recorder"] == "RecordEpisodes"
    assert card.provenance[0]["fields"]["observation"] == "observation"
    assert card.seeds == {"meta_field": "seed", "reset": [1, 2]}
    assert [e["seed"] for e in stored(tmp_path / "data")] == [1, -1, 2]
    assert "CartPole-v1" in (tmp_path / "data" / "README.md").read_text()


def test_card_false_writes_no_card_and_a_given_buffer_stays_open(tmp_path):
    fields, meta_fields = gymnasium_fields(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), fields={"reward": "float32"})
    buffer = ReplayBuffer(tmp_path / "data", 10, 600, fields, meta_fields)
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), buffer, card=False)
    play(recorder, [0])
    recorder.close()
    assert buffer.num_episodes == 1 and buffer.schema.fields["reward"].dtype == np.float32  # still open
    assert not (tmp_path / "data" / "card.json").exists()


@pytest.mark.filterwarnings("ignore:.*CartPole-v0 is out of date:DeprecationWarning")  # v0: another id, on purpose
def test_appending_to_an_existing_store_of_another_env_is_refused(tmp_path):
    RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data").close()
    with pytest.raises(SchemaMismatchError, match=r"field 'observation' must be float32\[3\].*it is float32\[4\]"):
        RecordEpisodes(gymnasium.make("Pendulum-v1"), tmp_path / "data")
    with pytest.raises(SchemaMismatchError, match="holds episodes of 'CartPole-v1'.*not of 'CartPole-v0'"):
        RecordEpisodes(gymnasium.make("CartPole-v0"), tmp_path / "data")
    with pytest.raises(SchemaMismatchError, match=r"at most max_timesteps=500 steps and the env's may have 900\. "
                                                 r"Grow it first: buffer.grow\(max_timesteps=900\) takes the env's"):
        RecordEpisodes(gymnasium.make("CartPole-v1", max_episode_steps=900), tmp_path / "data")
    recorder = RecordEpisodes(gymnasium.make("Pendulum-v1"), tmp_path / "data", overwrite=True)
    assert recorder.buffer.schema.fields["observation"].shape == (3,)
    recorder.close()
    card = read_card(tmp_path / "data")  # the card starts afresh with the new store
    assert card.env_spec["id"] == "Pendulum-v1" and len(card.provenance) == 1 and card.seeds is None


def test_field_mapping_of_every_supported_space():
    observation = spaces.Dict({"image": spaces.Box(0, 255, (3, 4), np.uint8), "level": spaces.Discrete(5, start=2),
                               "keys_held": spaces.MultiBinary((2, 3)), "dials": spaces.MultiDiscrete([3, 4]),
                               "arm": spaces.Tuple((spaces.Box(-1, 1, (2,)),
                                                    spaces.Dict({"grip": spaces.Discrete(2)})))})
    fields, meta_fields = gymnasium_fields(observation, spaces.Tuple((spaces.Discrete(2), spaces.Box(-1, 1))),
                                           info_fields={"x_pos": ("float32", 2)}, fields={"reward": "float32"})
    assert fields == {"observation__arm__0": ("float32", (2,)), "observation__arm__1__grip": ("int64", ()),
                      "observation__dials": ("int64", (2,)), "observation__image": ("uint8", (3, 4)),
                      "observation__keys_held": ("int8", (2, 3)), "observation__level": ("int64", ()),
                      "action__0": ("int64", ()), "action__1": ("float32", (1,)), "info__x_pos": ("float32", 2),
                      "reward": "float32"}
    assert meta_fields == {"seed": ("int64", (), -1)}
    assert gymnasium_fields(spaces.Box(-1, 1, (), np.float64), spaces.Discrete(3), seed_field=None) == (
        {"observation": ("float64", ()), "action": ("int64", ()), "reward": "float64"}, {})


def test_field_names_are_interops_and_give_the_space_back():
    """interop's own reading of the names (leaf_paths, space_for) gives back the recorded space."""
    from memmap_replay.interop.spaces import space_for
    from memmap_replay.core.schema import Schema

    observation = spaces.Dict({"a": spaces.Tuple((spaces.Discrete(3), spaces.Dict({"b": spaces.Box(0, 1, (2,))}))),
                               "c": spaces.MultiBinary(4)})
    schema = Schema.parse(*gymnasium_fields(observation, spaces.Box(-1, 1, (3,))))
    for prefix, space in (("observation", observation), ("action", spaces.Box(-1, 1, (3,)))):
        names = [name for name in schema.fields if name == prefix or name.startswith(prefix + "__")]
        notes = []
        got, _ = space_for(names, prefix, schema.fields, space_to_json(space), notes)
        assert got == space and notes == []


@pytest.mark.parametrize("space, match", [
    (spaces.Text(5), r"observation space must be a Box.*got Text"),
    (spaces.Graph(spaces.Box(0, 1, (2,)), None), r"observation space must be a Box.*got Graph"),
    (spaces.Sequence(spaces.Discrete(2)), r"observation space must be a Box.*got Sequence"),
    (spaces.Tuple((spaces.Discrete(2), spaces.Dict({"a": spaces.Text(3)}))),
     r"observation space\[1\]\[a\] must be a Box"),
    (spaces.Dict({}), "must have at least one Box"),
    (spaces.Dict({"a-b": spaces.Discrete(2)}), r"space\['a-b'\] cannot become the field 'observation__a-b'.*rename"),
    (spaces.Dict({"a__b": spaces.Discrete(2)}), r"observation\[a__b\] would not come back from their names"),
    (spaces.Dict({"a__b": spaces.Discrete(2), "a": spaces.Dict({"b": spaces.Discrete(2)})}),
     "two entries that would both be stored as field .observation__a__b."),
    (spaces.Dict({"k" * 70: spaces.Discrete(2)}), "up to 63 letters"),
])
def test_unsupported_spaces_are_refused(space, match):
    with pytest.raises(SchemaError, match=match):
        gymnasium_fields(space, spaces.Discrete(2))


def test_bad_options_are_refused(tmp_path):
    make = lambda: gymnasium.make("CartPole-v1")  # noqa: E731
    with pytest.raises(InvalidDataError, match="partial must be one of 'commit', 'discard'"):
        RecordEpisodes(make(), tmp_path / "a", partial="keep")
    with pytest.raises(SchemaError, match=r"fields must be a dict that overrides specs of the derived fields"):
        RecordEpisodes(make(), tmp_path / "a", fields={"obs": "float"})
    with pytest.raises(InvalidDataError, match="info_fields must be a dict of info key -> field spec"):
        RecordEpisodes(make(), tmp_path / "a", info_fields=["x"])
    with pytest.raises(SchemaError, match="info_fields\\['x-y'\\] cannot become the field 'info__x-y'"):
        RecordEpisodes(make(), tmp_path / "a", info_fields={"x-y": "float64"})
    with pytest.raises(OptionError, match=r"max_timesteps is needed.*pass max_timesteps="):
        RecordEpisodes(DictEnv(), tmp_path / "a")
    with pytest.raises(SchemaMismatchError, match="meta field 'seed' must be int64.*it is missing.*seed_field=None"):
        RecordEpisodes(make(), ReplayBuffer(tmp_path / "b", 5, 600, *gymnasium_fields(
            make().observation_space, make().action_space, seed_field=None)))
    assert not (tmp_path / "a" / "meta.json").exists()
    with pytest.raises(ReadOnlyError, match="record episodes"):
        RecordEpisodes(make(), ReplayBuffer.from_folder(tmp_path / "b", read_only=True))
    with pytest.raises(InvalidDataError, match="overwrite=True needs a folder, not a ReplayBuffer"):
        RecordEpisodes(make(), ReplayBuffer.from_folder(tmp_path / "b"), overwrite=True)


# ---- vector envs --------------------------------------------------------------------------------------


def vector_replay(make, n, seeds, actions, mode, resets=None):
    """The episodes n independent envs give for the vector env's actions, in the order the recorder
    commits them: ``resets`` maps a step to the (seeds, mask) of a reset(options={'reset_mask'}) after it."""
    envs = [make() for _ in range(n)]
    current, waiting, done = [None] * n, [False] * n, []
    for i in range(n):
        current[i] = new_episode(*envs[i].reset(seed=seeds[i]), seeds[i], plain_fields)
    for t, step_actions in enumerate(actions):
        for i in range(n):
            if waiting[i] and mode == AutoresetMode.NEXT_STEP:
                current[i], waiting[i] = new_episode(*envs[i].reset(), None, plain_fields), False
                continue
            if waiting[i]:
                continue
            obs, reward, terminated, truncated, info = envs[i].step(step_actions[i])
            add_step(current[i], step_actions[i], obs, reward, info, plain_fields)
            if terminated or truncated:
                current[i]["end"] = "terminated" if terminated else "truncated"
                done.append(current[i])
                waiting[i] = True
                if mode == AutoresetMode.SAME_STEP:
                    current[i], waiting[i] = new_episode(*envs[i].reset(), None, plain_fields), False
        for i, seed in (resets or {}).get(t, {}).items():
            current[i], waiting[i] = new_episode(*envs[i].reset(seed=seed), seed, plain_fields), False
    return done + [episode for episode in current if episode["actions"] and episode["end"] is None]  # cut at close


def record_vector(envs, folder, seed, steps, *, reset_masks=False):
    recorder = RecordVectorEpisodes(envs, folder)
    rng = np.random.default_rng(0)
    recorder.reset(seed=seed)
    actions, resets = [], {}
    for t in range(steps):
        actions.append(rng.integers(0, 2, size=envs.num_envs))
        _, _, terminated, truncated, _ = recorder.step(actions[-1])
        ended = terminated | truncated
        if reset_masks and ended.any():  # DISABLED: reset the envs that ended, each with its own seed
            seeds = [100 + t if e else None for e in ended]
            recorder.reset(seed=seeds, options={"reset_mask": ended})
            resets[t] = {i: 100 + t for i in np.flatnonzero(ended)}
    recorder.close()
    return actions, resets


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_matches_independent_envs(tmp_path, mode):
    make = lambda: gymnasium.make("CartPole-v1", max_episode_steps=15)  # noqa: E731
    envs = SyncVectorEnv([make] * 3, autoreset_mode=mode)
    actions, _ = record_vector(envs, tmp_path / "data", 20, 60)
    episodes = stored(tmp_path / "data")
    assert_same(episodes, vector_replay(make, 3, [20, 21, 22], actions, mode))
    assert {e["end"] for e in episodes} == {"terminated", "truncated", None}
    assert sum(e["seed"] >= 0 for e in episodes) == 3  # the first episode of each env
    card = read_card(tmp_path / "data")
    assert card.provenance[-1]["autoreset_mode"] == mode.value and card.provenance[-1]["num_envs"] == 3
    assert card.seeds["reset"] == [20] and card.env_spec["id"] == "CartPole-v1"


def test_vector_env_with_autoreset_disabled_and_reset_masks(tmp_path):
    make = lambda: gymnasium.make("CartPole-v1", max_episode_steps=15)  # noqa: E731
    envs = SyncVectorEnv([make] * 2, autoreset_mode=AutoresetMode.DISABLED)
    actions, resets = record_vector(envs, tmp_path / "data", 30, 50, reset_masks=True)
    episodes = stored(tmp_path / "data")
    assert_same(episodes, vector_replay(make, 2, [30, 31], actions, AutoresetMode.DISABLED, resets))
    assert len(resets) >= 2 and all(e["seed"] >= 30 for e in episodes)


def test_async_vector_env_records_as_the_sync_one(tmp_path):
    make = lambda: gymnasium.make("CartPole-v1", max_episode_steps=10)  # noqa: E731
    actions, _ = record_vector(gymnasium.vector.AsyncVectorEnv([make] * 2), tmp_path / "data", 40, 25)
    assert_same(stored(tmp_path / "data"), vector_replay(make, 2, [40, 41], actions, AutoresetMode.NEXT_STEP))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_dict_observations_info_and_a_reset_mask_cut(tmp_path, mode):
    # no reuse: SyncVectorEnv keeps SAME_STEP's final observation as the env gave it, and the reset changes it
    envs = SyncVectorEnv([lambda: DictEnv(horizon=5, reuse=False)] * 2, autoreset_mode=mode)
    recorder = RecordVectorEpisodes(envs, tmp_path / "data", info_fields={"bonus": "float64", "dist": "float64"},
                                    max_timesteps=5)
    recorder.reset(seed=[3, None])
    for _ in range(7):  # both envs truncate at step 5 (nothing terminates this slowly)
        recorder.step((np.array([0, 0]), np.full((2, 2), 0.25, np.float32)))
    recorder.reset(options={"reset_mask": np.array([True, False])})  # cuts env 0's episode
    recorder.close()  # cuts env 1's episode
    episodes = stored(tmp_path / "data")
    after = 1 if mode == AutoresetMode.NEXT_STEP else 2  # NEXT_STEP spends step 6 on the autoreset
    assert [(e["end"], e["length"], e["seed"]) for e in episodes] == [
        ("truncated", 5, 3), ("truncated", 5, -1), (None, after, -1), (None, after, -1)]
    for episode in episodes:
        rows = episode["rows"]
        assert rows["observation__pos"].shape == (episode["length"] + 1, 2)
        assert rows["observation__goal_id"].dtype == np.int64
        # row t: the info that came with observation t: the reset's (also an autoreset's) at row 0, the last
        # step's in the final row (SAME_STEP: info['final_info']), the current one for a cut episode
        np.testing.assert_allclose(rows["info__dist"], np.linalg.norm(rows["observation__pos"], axis=1), rtol=1e-6)
    np.testing.assert_array_equal(episodes[0]["rows"]["info__bonus"], [0, 0, 0, 3, 0, 0])  # 0: the key was absent


def test_vector_exception_discards_episodes_in_progress(tmp_path):
    envs = SyncVectorEnv([lambda: FailingEnv(gymnasium.make("CartPole-v1"), fail_at=5)] * 2)
    recorder = RecordVectorEpisodes(envs, tmp_path / "data")
    recorder.reset(seed=0)
    for _ in range(4):
        recorder.step(np.array([0, 1]))
    with pytest.raises(RuntimeError, match="simulator crashed"):
        recorder.step(np.array([0, 1]))
    with pytest.raises(EpisodeStateError, match=r"an exception discarded them; call reset\(\) first"):
        recorder.step(np.array([0, 1]))
    recorder.close()
    assert stored(tmp_path / "data") == []


def test_native_vector_env_keeps_its_seed_on_the_card_only(tmp_path):
    envs = gymnasium.make_vec("CartPole-v1", 2)  # CartPoleVectorEnv: one generator for all envs
    recorder = RecordVectorEpisodes(envs, tmp_path / "data", partial="discard")
    recorder.reset(seed=5)
    for _ in range(40):
        recorder.step(np.array([0, 0]))
    recorder.close()
    episodes = stored(tmp_path / "data")
    assert episodes and all(e["seed"] == -1 and e["end"] == "terminated" for e in episodes)
    assert read_card(tmp_path / "data").seeds["reset"] == [5]


def test_vector_refusals(tmp_path):
    envs = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2)
    recorder = RecordVectorEpisodes(envs, tmp_path / "data")
    with pytest.raises(EpisodeStateError, match=r"reset\(\) was never called"):
        recorder.step(np.array([0, 0]))
    recorder.reset(seed=0)
    with pytest.raises(InvalidDataError, match=r"reset_mask'\] must be a bool array of shape \(2,\)"):
        recorder.reset(options={"reset_mask": [True, False]})
    recorder.close()
    envs = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2)
    envs.metadata = {**envs.metadata, "autoreset_mode": "Sometimes"}
    with pytest.raises(InvalidDataError, match="autoreset_mode must be NEXT_STEP, SAME_STEP or DISABLED"):
        RecordVectorEpisodes(envs, tmp_path / "other")


# ---- a recording exports to Minari as it is ------------------------------------------------------------


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    pytest.importorskip("minari")
    pytest.importorskip("h5py")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def test_recorded_cartpole_exports_to_minari_with_no_field_arguments(tmp_path, minari_root):
    import minari

    from memmap_replay.interop import export_minari

    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
    recorded, _ = play(recorder, [1, 2, 3])
    recorder.close()
    report = export_minari(tmp_path / "data", "cartpole/recorded-v0")
    assert report.episodes == 3 and report.notes == []  # the card's spaces fit the fields as they are
    dataset = minari.load_dataset("cartpole/recorded-v0")
    env = gymnasium.make("CartPole-v1")
    assert dataset.observation_space == env.observation_space and dataset.action_space == env.action_space
    assert dataset.spec.env_spec.id == "CartPole-v1" and dataset.total_episodes == 3
    attrs = list(dataset.storage.get_episode_metadata(dataset.episode_indices))
    for episode, attr, want in zip(dataset.iterate_episodes(), attrs, recorded):
        np.testing.assert_array_equal(episode.observations, np.stack([row["observation"] for row in want["rows"]]))
        np.testing.assert_array_equal(episode.actions, [action["action"] for action in want["actions"]])
        np.testing.assert_array_equal(episode.rewards, want["rewards"])
        assert episode.terminations[-1] == (want["end"] == "terminated")
        assert episode.truncations[-1] == (want["end"] == "truncated")
        assert not (episode.terminations[:-1].any() or episode.truncations[:-1].any())
        assert attr["seed"] == want["seed"]


@pytest.mark.filterwarnings("ignore:.*env_spec is None:UserWarning")  # DictEnv is not registered
def test_recorded_dict_env_exports_to_minari_with_its_spaces_and_infos(tmp_path, minari_root):
    """Nested Dict observations and Tuple actions come back as the env's spaces; infos as Minari keeps them
    (T + 1 rows: the reset's info, then each step's)."""
    import minari

    from memmap_replay.interop import export_minari

    recorder = RecordEpisodes(DictEnv(), tmp_path / "data", max_timesteps=12,
                              info_fields={"dist": "float64", "bonus": ("float32", (), -1.0)})
    recorded, _ = play(recorder, [4, 5], to_fields=dict_env_fields)
    recorder.close()
    report = export_minari(tmp_path / "data", "shapes/recorded-v0")
    assert report.notes == [] and report.fields["info__dist"] == "infos/dist"
    dataset = minari.load_dataset("shapes/recorded-v0")
    assert dataset.observation_space == DictEnv().observation_space
    assert dataset.action_space == DictEnv().action_space
    for episode, want in zip(dataset.iterate_episodes(), recorded):
        observations = episode.observations
        np.testing.assert_array_equal(observations["pos"], np.stack([row["observation__pos"] for row in want["rows"]]))
        np.testing.assert_array_equal(observations["goal_id"], [row["observation__goal_id"] for row in want["rows"]])
        np.testing.assert_array_equal(observations["sensors"]["flags"],
                                      np.stack([row["observation__sensors__flags"] for row in want["rows"]]))
        kinds, pushes = episode.actions
        np.testing.assert_array_equal(kinds, [action["action__0"] for action in want["actions"]])
        np.testing.assert_array_equal(pushes, np.stack([action["action__1"] for action in want["actions"]]))
        np.testing.assert_array_equal(episode.infos["dist"], [info["dist"] for info in want["infos"]])
        np.testing.assert_array_equal(episode.infos["bonus"], [info.get("bonus", -1.0) for info in want["infos"]])


def test_an_unseeded_recorded_episode_exports_without_a_seed(tmp_path, minari_root):
    import minari

    from memmap_replay.interop import export_minari

    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), tmp_path / "data")
    play(recorder, [None])
    recorder.close()
    export_minari(tmp_path / "data", "cartpole/unseeded-v0")
    dataset = minari.load_dataset("cartpole/unseeded-v0")
    assert list(dataset.storage.get_episode_metadata(dataset.episode_indices))[0].get("seed") is None


def test_recorded_vector_episodes_export_to_minari(tmp_path, minari_root):
    """Episodes of a vector env, the ones cut at close too (neither terminated nor truncated in Minari)."""
    import minari

    from memmap_replay.interop import export_minari

    make = lambda: gymnasium.make("CartPole-v1", max_episode_steps=15)  # noqa: E731
    actions, _ = record_vector(SyncVectorEnv([make] * 2), tmp_path / "data", 50, 40)
    export_minari(tmp_path / "data", "cartpole/vector-v0")
    dataset = minari.load_dataset("cartpole/vector-v0")
    played = vector_replay(make, 2, [50, 51], actions, AutoresetMode.NEXT_STEP)
    assert dataset.total_episodes == len(played) and {e["end"] for e in played} >= {None, "truncated"}
    for episode, want in zip(dataset.iterate_episodes(), played):
        np.testing.assert_array_equal(episode.observations, np.stack([row["observation"] for row in want["rows"]]))
        np.testing.assert_array_equal(episode.actions, [action["action"] for action in want["actions"]])
        assert (episode.terminations[-1], episode.truncations[-1]) == (want["end"] == "terminated",
                                                                      want["end"] == "truncated")


# ---- VectorEpisodeWriter.commit_all(final=...) -----------------------------------------------------------


@pytest.fixture
def writer(tmp_path):
    buffer = ReplayBuffer(tmp_path / "store", 20, 10, {"obs": ("float32", (2,)), "x": "int64"}, {"task": "int64"})
    writer = buffer.vector_writer(3, task=[7, 8, 9])
    for t in range(2):  # envs 0 and 1 take two steps, env 2 one
        writer.store(obs=np.full((3, 2), t, np.float32), x=[t, t, t], active=[True, True, t == 0])
    yield buffer, writer
    buffer.close()


def episodes_of(buffer):
    store = buffer.episode_store
    table = store.live_table()
    out = []
    for k in range(len(table)):
        start, length, final = int(table.start[k]), int(table.length[k]), bool(table.final[k])
        obs, x = (np.asarray(store.step_array(name)[start:start + length + final]) for name in ("obs", "x"))
        out.append((length, END_NAMES[int(table.end[k])], obs[length].tolist() if final else None,
                    int(store.meta_array("task")[table.slots[k]])))
        assert x[-1] == (0 if final else length - 1)  # a field that final does not give takes its default
    return out


def test_commit_all_with_final_rows_per_env(writer):
    buffer, writer = writer
    final = {"obs": np.array([[10, 11], [20, 21], [30, 31]], np.float32)}
    assert len(writer.commit_all("truncated", envs=[2, 0, 2], final=final)) == 2  # env 2 named twice: once
    assert episodes_of(buffer) == [(2, "truncated", [10, 11], 7), (1, "truncated", [30, 31], 9)]
    assert writer.lengths.tolist() == [0, 2, 0]
    writer.commit_all(final=final)  # env 1 only: the others have no step
    assert episodes_of(buffer)[-1] == (2, None, [20, 21], 8)


def test_commit_all_final_with_none_for_envs_without_one(writer):
    buffer, writer = writer
    writer.commit_all(final={"obs": [None, np.array([1, 2], np.float32), None]})
    assert episodes_of(buffer) == [(2, None, None, 7), (2, None, [1.0, 2.0], 8), (1, None, None, 9)]


@pytest.mark.parametrize("final, match", [
    ({"obs": [None, [1, 2], None], "x": [3, 4, 5]}, r"final 'obs' is None for env 0, which ended, while final 'x'"),
    ({"nope": np.zeros((3, 2))}, r"unknown field \['nope'\]"),
    ({"obs": np.zeros((2, 2))}, r"field 'obs' must have shape \(3, 2\) \(got \(2, 2\)\)"),
    ([np.zeros((3, 2))], "final must be a dict"),
])
def test_commit_all_bad_final_changes_nothing(writer, final, match):
    buffer, writer = writer
    with pytest.raises(InvalidDataError, match=match):
        writer.commit_all(final=final)
    assert buffer.num_episodes == 0 and writer.lengths.tolist() == [2, 2, 1]


def test_a_buffer_that_splits_records_episodes_longer_than_its_max_timesteps(tmp_path):
    buffer = ReplayBuffer(tmp_path / "data", 50, 8, dict(observation=("float", (4,)), action="int", reward="float"),
                          dict(seed="int"), long_episodes="split")
    recorder = RecordEpisodes(gymnasium.make("CartPole-v1"), buffer)  # its episodes may have 500 steps
    played, _ = play(recorder, [3])
    recorder.close()
    whole, observations = buffer.episode(0, join_segments=True), [row["observation"] for row in played[0]["rows"]]
    assert len(whole) == len(played[0]["rewards"]) > 8 and whole.end == played[0]["end"] == "terminated"
    np.testing.assert_array_equal(whole.observations("observation"), observations)  # with the final observation
    np.testing.assert_array_equal(whole["reward"], played[0]["rewards"])
    assert buffer.num_episodes == -(-len(whole) // 8) and buffer.episode(1).continues == 0


def test_both_recorders_spell_out_the_recorders_options():
    import inspect

    from memmap_replay.recording.recorder import RECORDER_OPTIONS, Recorder

    own = {name: p for name, p in inspect.signature(Recorder.__init__).parameters.items() if name in RECORDER_OPTIONS}
    for wrapper in (RecordEpisodes, RecordVectorEpisodes):
        parameters = inspect.signature(wrapper.__init__).parameters
        assert not [p for p in parameters.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)], wrapper
        spelled = {name: p for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
        assert [(p.name, p.default, p.annotation) for p in spelled.values()] == \
            [(p.name, p.default, p.annotation) for p in own.values()], wrapper


def test_both_recorders_document_the_options_in_the_same_words():
    def options_section(cls) -> str:  # the Parameters section after the env's entry
        doc = cls.__doc__
        return doc[doc.index("buffer_or_folder :"):doc.index("Examples")]

    assert options_section(RecordEpisodes) == options_section(RecordVectorEpisodes)
