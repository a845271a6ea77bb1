"""Minari round trips keep the meta fields as they were: seeds come in as the recorder's int64 (-1: none), an
exported store's schema (dtypes, defaults, the seed field) comes back, ``episode_id`` only when Minari's ids
are not the episodes' numbers; and an imported store takes recorded episodes once grown as the message says.
MINARI_DATASETS_PATH points into tmp_path; nothing is downloaded."""

from __future__ import annotations

import re

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
minari = pytest.importorskip("minari")
pytest.importorskip("h5py")

from minari.data_collector import EpisodeBuffer  # noqa: E402

from memmap_replay import BufferFullError, InvalidDataError, OptionError, ReplayBuffer, SchemaMismatchError  # noqa: E402
from memmap_replay.interop import export_minari, import_minari  # noqa: E402
from memmap_replay.recording import RecordEpisodes, gymnasium_fields  # noqa: E402


@pytest.fixture
def root(tmp_path, monkeypatch):
    path = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def run(env, episodes: int, seeds: list, steps: int = 400) -> None:
    env.action_space.seed(0)
    for number in range(episodes):
        env.reset(seed=seeds[number])
        for _ in range(steps):
            if any(env.step(env.action_space.sample())[2:4]):
                break


def recorded(folder, seeds: list) -> ReplayBuffer:
    """A store recorded from CartPole, with a meta field of its own (int32, default 7) beside the seed."""
    env = gym.make("CartPole-v1")
    fields, meta = gymnasium_fields(env.observation_space, env.action_space)
    buffer = ReplayBuffer(folder, 20, 500, fields, {**meta, "task": ("int32", (), 7)})
    with RecordEpisodes(env, buffer) as recorder:
        run(recorder, len(seeds), seeds)
    return buffer


def meta_of(folder) -> tuple[dict, dict]:
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        slots = store.live_table().slots
        return buffer.schema.to_json(), {name: np.array(store.meta_array(name)[slots])
                                         for name in buffer.schema.meta_fields}


def test_a_store_round_trips_through_minari_with_its_meta_fields(root, tmp_path):
    recorded(tmp_path / "store", [3, None, 5]).close()
    schema, meta = meta_of(tmp_path / "store")
    export_minari(tmp_path / "store", "cartpole/recorded-v0")
    attrs = list(minari.load_dataset("cartpole/recorded-v0").storage.get_episode_metadata([0, 1, 2]))
    assert [attr.get("seed") for attr in attrs] == [3, None, 5]  # Minari's own: no seed for the episode without
    report = import_minari("cartpole/recorded-v0", tmp_path / "back")
    back_schema, back_meta = meta_of(tmp_path / "back")
    assert back_schema == schema  # dtypes, shapes, defaults and order: seed int64 default -1, task int32 default 7
    assert list(back_meta) == ["seed", "task"]  # no episode_id (the ids are the numbers), no seeded
    assert back_meta["seed"].tolist() == [3, -1, 5] and back_meta["seed"].dtype == np.int64
    assert back_meta["task"].tolist() == [7, 7, 7] and back_meta["task"].dtype == np.int32
    assert not any("seed" in note for note in report.notes)


def test_a_seed_field_with_no_seed_comes_back(root, tmp_path):
    recorded(tmp_path / "store", [None, None]).close()
    export_minari(tmp_path / "store", "cartpole/unseeded-v0")
    import_minari("cartpole/unseeded-v0", tmp_path / "back")
    schema, meta = meta_of(tmp_path / "back")
    assert schema["meta_fields"]["seed"] == {"dtype": "int64", "shape": [], "default": -1}
    assert meta["seed"].tolist() == [-1, -1]


def create(dataset_id: str, buffers: list) -> None:
    minari.create_dataset_from_buffers(dataset_id, buffers, env="CartPole-v1", eval_env="CartPole-v1",
                                       algorithm_name="random",
                                       author="T", author_email="t@example.org", code_permalink="https://example.org",
                                       description="test")


def rollout(env, seed) -> EpisodeBuffer:
    obs, _ = env.reset(seed=0)
    observations, actions, rewards = [obs], [], []
    for _ in range(5):
        action = env.action_space.sample()
        obs, reward, *_ = env.step(action)
        observations.append(obs), actions.append(action), rewards.append(reward)
    ends = np.arange(5) == 4
    return EpisodeBuffer(seed=seed, observations=np.array(observations), actions=np.array(actions),
                         rewards=np.array(rewards), terminations=np.zeros(5, bool), truncations=ends)


def test_a_dataset_of_other_seeds_and_ids(root, tmp_path):
    env = gym.make("CartPole-v1")
    create("cartpole/plain-v0", [rollout(env, 4), rollout(env, None)])
    import_minari("cartpole/plain-v0", tmp_path / "plain")
    schema, meta = meta_of(tmp_path / "plain")
    assert list(schema["meta_fields"]) == ["seed"] and meta["seed"].tolist() == [4, -1]
    # seeds past int64 (gymnasium takes any int >= 0): uint64 with 'seeded', and a note says so
    create("cartpole/huge-v0", [rollout(env, 2**63 + 1), rollout(env, None)])
    report = import_minari("cartpole/huge-v0", tmp_path / "huge")
    schema, meta = meta_of(tmp_path / "huge")
    assert {name: spec["dtype"] for name, spec in schema["meta_fields"].items()} == {"seed": "uint64",
                                                                                     "seeded": "bool"}
    assert meta["seed"].tolist() == [2**63 + 1, 0] and meta["seeded"].tolist() == [True, False]
    assert any("do not all fit in [0, 2**63)" in note for note in report.notes)
    # a subset's ids are not its episodes' numbers: episode_id keeps them
    subset = minari.load_dataset("cartpole/plain-v0").filter_episodes(lambda episode: episode.id == 1)
    import_minari(subset, tmp_path / "subset")
    assert meta_of(tmp_path / "subset")[1]["episode_id"].tolist() == [1]


def test_an_imported_store_takes_recorded_episodes_once_grown_as_the_message_says(root, tmp_path):
    env = gym.make("CartPole-v1")
    create("cartpole/small-v0", [rollout(env, seed) for seed in range(3)])
    import_minari("cartpole/small-v0", tmp_path / "store")  # sized to its data: 3 episodes of 5 steps
    with pytest.raises(SchemaMismatchError, match=r"all its 3 episode slots are used; 0 of its max_steps=18 rows are "
                                                  r"left.*Grow it first: buffer.grow\(max_episodes=4, max_steps=519, "
                                                  r"max_timesteps=500\) makes room for one more episode"):
        RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "store")
    with pytest.raises(OptionError, match=r"circular=True sizes a store the recorder creates.*buffer.grow\(circular"):
        RecordEpisodes(gym.make("CartPole-v1"), tmp_path / "store", circular=True)
    with ReplayBuffer.from_folder(tmp_path / "store") as buffer:
        buffer.grow(max_episodes=4, max_steps=519, max_timesteps=500)  # the numbers the message named
        with RecordEpisodes(gym.make("CartPole-v1"), buffer) as recorder:
            run(recorder, 1, [11])
        assert len(buffer) == 4
        with pytest.raises(BufferFullError, match=r"all its 4 episode slots are used.*buffer.grow\(max_episodes=5, "
                                                  r"max_steps=\d+\)"):
            RecordEpisodes(gym.make("CartPole-v1"), buffer)
        buffer.grow(max_episodes=6, max_steps=2000, circular=True)  # a ring: record while training, no end
        with RecordEpisodes(gym.make("CartPole-v1"), buffer) as recorder:
            run(recorder, 5, [20, 21, 22, 23, 24])
        assert len(buffer) == 6
    schema, meta = meta_of(tmp_path / "store")
    assert meta["seed"].tolist()[-2:] == [23, 24]


def test_a_full_store_names_the_grow_that_takes_the_commit(tmp_path):
    with ReplayBuffer(tmp_path / "rows", 5, 10, {"x": "float"}, max_steps=25) as buffer:
        buffer.store_episode(x=np.zeros(10))
        buffer.store_episode(x=np.zeros(10))
        with pytest.raises(BufferFullError, match=re.escape("buffer.grow(max_steps=30) makes room for this commit")):
            buffer.store_episode(x=np.zeros(10))  # 10 rows, 5 left of 25
        with pytest.raises(InvalidDataError, match=re.escape("buffer.grow(max_timesteps=12)")):
            buffer.store_episode(x=np.zeros(12))
        buffer.grow(max_steps=30)
        buffer.store_episode(x=np.zeros(10))
    with ReplayBuffer(tmp_path / "slots", 2, 10, {"x": "float"}) as buffer:
        buffer.store_episode(x=np.zeros(10))
        buffer.store_episode(x=np.zeros(10))
        with pytest.raises(BufferFullError, match=re.escape("buffer.grow(max_episodes=3, max_steps=25) makes room")):
            buffer.store_episode(x=np.zeros(5))  # slots and rows (2 left of 22) both short: both named
        buffer.grow(max_episodes=3, max_steps=25)
        buffer.store_episode(x=np.zeros(5))
