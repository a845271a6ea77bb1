"""Minari datasets <-> stores, on datasets written by minari itself from real gymnasium rollouts: every value
comes in exactly (the T + 1 observations as T steps plus the final row), goes back out so that minari's own
reader gives the same values, dtypes, seeds, infos, episode attributes and metadata, and mistakes get clear
errors. MINARI_DATASETS_PATH points into tmp_path; nothing is downloaded.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
minari = pytest.importorskip("minari")
pytest.importorskip("h5py")

from minari.data_collector import EpisodeBuffer  # noqa: E402

from memmap_replay import InvalidDataError, OptionError, ReplayBuffer, SchemaError, StoreNotFoundError  # noqa: E402
from memmap_replay.interop import TargetExistsError, export_minari, import_minari  # noqa: E402


@pytest.fixture
def root(tmp_path, monkeypatch):
    path = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def stack(values: list):
    """Per-step values (arrays, or dicts / tuples of them) as one value of stacked arrays."""
    if isinstance(values[0], dict):
        return {key: stack([value[key] for value in values]) for key in values[0]}
    if isinstance(values[0], tuple):
        return tuple(stack([value[i] for value in values]) for i in range(len(values[0])))
    return np.array(values)


def rollouts(env, episodes: int, seed: int, max_steps: int, infos: bool = False) -> list:
    """Real episodes of ``env`` (random actions, seeded) as minari EpisodeBuffers; an episode cut at
    ``max_steps`` is marked truncated, as DataCollector does."""
    buffers = []
    env.action_space.seed(seed)
    for number in range(episodes):
        obs, info = env.reset(seed=seed + number)
        observations, actions, rewards, terms, truncs, seen = [obs], [], [], [], [], [info]
        while True:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, info = env.step(action)
            observations.append(obs), actions.append(action), rewards.append(reward), seen.append(info)
            terms.append(terminated), truncs.append(truncated or (len(rewards) == max_steps and not terminated))
            if terms[-1] or truncs[-1]:
                break
        buffers.append(EpisodeBuffer(seed=seed + number, observations=stack(observations), actions=stack(actions),
                                     rewards=np.array(rewards), terminations=np.array(terms),
                                     truncations=np.array(truncs), infos=stack(seen) if infos else None))
    return buffers


def cartpole_dataset(dataset_id: str = "cartpole/random-v0", episodes: int = 5, seed: int = 0):
    env = gym.make("CartPole-v1")
    return minari.create_dataset_from_buffers(
        dataset_id, rollouts(env, episodes, seed, max_steps=15), env="CartPole-v1", eval_env="CartPole-v1",
        algorithm_name="random", author="A. Tester", author_email="a@example.org",
        code_permalink="https://example.org/code", description="random CartPole", ref_min_score=10.0,
        ref_max_score=500.0, num_episodes_average_score=3)


class ShapesEnv(gym.Env):
    """A small real environment with a Dict observation: a uint8 image, and a Tuple of a Box and a Discrete;
    its infos hold a number and a nested dict."""

    observation_space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, (48, 48, 3), np.uint8),
        "state": gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(5)))})
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.t = self.np_random.uniform(-1, 1, 2).astype(np.float32), 0
        return self.observe(), self.info()

    def step(self, action):
        self.position = np.clip(self.position + 0.3 * action, -1, 1).astype(np.float32)
        self.t += 1
        done = bool(np.abs(self.position).max() >= 1)
        return self.observe(), float(-np.abs(self.position).sum()), done, False, self.info()

    def observe(self):
        image = self.np_random.integers(0, 256, (48, 48, 3), dtype=np.uint8)
        return {"image": image, "state": (self.position.copy(), int(self.t % 5))}

    def info(self):
        return {"t": np.int64(self.t), "extra": {"speed": np.float32(self.t * 0.5)}}


def shapes_dataset(dataset_id: str = "shapes/random-v0", jpeg: bool = False):
    env = ShapesEnv()
    with warnings.catch_warnings():
        # minari warns that an environment without a registered spec has no env_spec / eval_env: expected here
        warnings.filterwarnings("ignore", message=r".*(env_spec is None|`eval_env` is set to None)",
                                category=UserWarning)
        return minari.create_dataset_from_buffers(
            dataset_id, rollouts(env, 4, 7, max_steps=12, infos=True), observation_space=env.observation_space,
            action_space=env.action_space, algorithm_name="random", author={"A", "B"}, author_email="ab@example.org",
            code_permalink="https://example.org", description="shapes", jpeg_encoding=jpeg)


def store_episodes(folder: Path) -> list:
    """The store's episodes as (steps, final, end code, meta), read through the episode table."""
    buffer = ReplayBuffer.from_folder(folder, read_only=True)
    store = buffer.episode_store
    table = store.live_table()
    out = []
    for number in range(len(table)):
        start, length, slot = int(table.start[number]), int(table.length[number]), int(table.slots[number])
        steps = {name: np.array(store.step_array(name)[start:start + length]) for name in store.schema.fields}
        final = ({name: np.array(store.step_array(name)[start + length]) for name in store.schema.fields}
                 if table.final[number] else None)
        meta = {name: np.array(store.meta_array(name)[slot]) for name in store.schema.meta_fields}
        out.append((steps, final, int(table.end[number]), meta))
    buffer.close()
    return out


def assert_same(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes(), what


def assert_same_tree(a, b, what=""):
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (what, a.keys(), getattr(b, "keys", list)())
        for key in a:
            assert_same_tree(a[key], b[key], f"{what}[{key}]")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), what
        for number, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, f"{what}[{number}]")
    else:
        assert_same(a, b, what)


def assert_same_datasets(a, b) -> None:
    assert a.total_episodes == b.total_episodes and a.total_steps == b.total_steps
    for x, y in zip(a.iterate_episodes(), b.iterate_episodes()):
        for key in ("observations", "actions", "rewards", "terminations", "truncations", "infos"):
            assert_same_tree(getattr(x, key) or {} if key == "infos" else getattr(x, key),
                             getattr(y, key) or {} if key == "infos" else getattr(y, key), f"episode {x.id} {key}")
    for x, y in zip(a.storage.get_episode_metadata(a.episode_indices),
                    b.storage.get_episode_metadata(b.episode_indices)):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), (x, y)


# ---- CartPole: a Box observation, a Discrete action --------------------------------------------------------------


def test_cartpole_imports_exactly(root, tmp_path):
    dataset = cartpole_dataset()
    report = import_minari("cartpole/random-v0", tmp_path / "store")
    assert (report.episodes, report.steps) == (dataset.total_episodes, dataset.total_steps)
    stored = store_episodes(tmp_path / "store")
    for number, ((steps, final, end, meta), episode, attrs) in enumerate(zip(
            stored, dataset.iterate_episodes(), dataset.storage.get_episode_metadata(dataset.episode_indices))):
        assert_same(steps["observation"], episode.observations[:-1])
        assert_same(final["observation"], episode.observations[-1])  # the T + 1-th observation: the final row
        assert_same(steps["action"], episode.actions)
        assert_same(steps["reward"], episode.rewards)
        assert end == (1 if episode.terminations[-1] else 2 if episode.truncations[-1] else 0)
        assert episode.id == number and meta["seed"] == attrs["seed"] and meta["seed"].dtype == np.int64
        assert set(meta) == {"seed"}  # ids 0, 1, 2, ... are the episodes' numbers: no episode_id; no 'seeded'
    assert {end for _, _, end, _ in stored} == {1, 2}  # both kinds of end are in the data
    card = json.loads((tmp_path / "store" / "card.json").read_text())
    assert card["name"] == "cartpole/random-v0" and card["author"] == "A. Tester"
    assert card["env_spec"]["id"] == "CartPole-v1" and card["action_space"]["type"] == "Discrete"
    assert card["observation_space"]["shape"] == [4]
    assert (card["ref_min_score"], card["ref_max_score"], card["num_episodes_average_score"]) == (10.0, 500.0, 3)
    assert card["code_url"] == "https://example.org/code" and card["algorithm"] == "random"
    assert card["provenance"][-1]["kind"] == "minari" and card["provenance"][-1]["source"] == "cartpole/random-v0"


def test_cartpole_round_trip_reads_the_same_with_minari(root, tmp_path):
    dataset = cartpole_dataset()
    import_minari("cartpole/random-v0", tmp_path / "store")
    report = export_minari(tmp_path / "store", "cartpole/back-v0")
    assert report.episodes == dataset.total_episodes
    back = minari.load_dataset("cartpole/back-v0")
    assert_same_datasets(dataset, back)
    assert back.spec.env_spec == dataset.spec.env_spec
    assert back.observation_space == dataset.observation_space and back.action_space == dataset.action_space
    metadata = back.storage.metadata
    assert metadata["author"] == {"A. Tester"} and metadata["description"] == "random CartPole"
    assert metadata["ref_max_score"] == 500.0 and metadata["algorithm_name"] == "random"
    assert metadata["memmap_replay"]["card"]["provenance"][-1]["kind"] == "memmap_replay"
    assert "cartpole/back-v0" in minari.list_local_datasets()
    import_minari("cartpole/back-v0", tmp_path / "again")  # the card rides along
    card = json.loads((tmp_path / "again" / "card.json").read_text())
    assert [record["kind"] for record in card["provenance"]] == ["minari", "memmap_replay", "minari"]


def test_data_collector_dataset(root, tmp_path):
    pytest.importorskip("jax")  # minari's DataCollector needs jax (minari[create])
    with warnings.catch_warnings():
        # DataCollector leaves its TemporaryDirectory objects to the garbage collector, which warns; collected here
        warnings.filterwarnings("ignore", message="Implicitly cleaning up <TemporaryDirectory",
                                category=ResourceWarning)
        env = minari.DataCollector(gym.make("CartPole-v1"), record_infos=True)
        for seed in range(3):
            env.reset(seed=seed)
            for _ in range(200):
                if any(env.step(env.action_space.sample())[2:4]):
                    break
        dataset = env.create_dataset("cartpole/collected-v0", algorithm_name="random", author="T",
                                     author_email="t@example.org", code_permalink="https://example.org",
                                     description="collected", eval_env="CartPole-v1")
        env.close()
        del env
        gc.collect()
    import_minari("cartpole/collected-v0", tmp_path / "store")
    steps, final, _, meta = store_episodes(tmp_path / "store")[0]
    episode = dataset[0]
    assert_same(steps["observation"], episode.observations[:-1])
    assert_same(final["observation"], episode.observations[-1])
    assert "rewards_sum" in meta  # DataCollector's episode statistics come in as meta fields
    export_minari(tmp_path / "store", "cartpole/collected-back-v0")
    assert_same_datasets(dataset, minari.load_dataset("cartpole/collected-back-v0"))


# ---- Dict / Tuple observations, images, infos --------------------------------------------------------------------


def test_dict_tuple_image_observations_and_infos_round_trip(root, tmp_path):
    dataset = shapes_dataset()
    report = import_minari("shapes/random-v0", tmp_path / "store")
    assert set(report.fields) >= {"observation__image", "observation__state__0", "observation__state__1", "action",
                                  "reward", "info__t", "info__extra__speed"}
    for (steps, final, _, _), episode in zip(store_episodes(tmp_path / "store"), dataset.iterate_episodes()):
        assert_same(steps["observation__image"], episode.observations["image"][:-1])
        assert_same(final["observation__image"], episode.observations["image"][-1])
        assert_same(steps["observation__state__1"], episode.observations["state"][1][:-1])
        assert_same(steps["info__extra__speed"], episode.infos["extra"]["speed"][:-1])  # T + 1 infos: reset first
        assert_same(final["info__t"], episode.infos["t"][-1])
    export_minari(tmp_path / "store", "shapes/back-v0")
    back = minari.load_dataset("shapes/back-v0")
    assert_same_datasets(dataset, back)
    assert back.observation_space == dataset.observation_space
    assert back.storage.metadata["author"] == {"A", "B"}
    assert back.storage.metadata["jpeg_encoding"] is False  # exported images stay exact


def test_jpeg_encoded_images_come_in_as_minari_decodes_them(root, tmp_path):
    dataset = shapes_dataset("shapes/jpeg-v0", jpeg=True)
    report = import_minari("shapes/jpeg-v0", tmp_path / "store")
    assert any("JPEG-encoded" in note for note in report.notes)
    steps, final, _, _ = store_episodes(tmp_path / "store")[0]
    assert_same(steps["observation__image"], dataset[0].observations["image"][:-1])


def test_a_dataset_folder_or_object_and_a_subset(root, tmp_path):
    dataset = cartpole_dataset()
    import_minari(root / "cartpole" / "random-v0", tmp_path / "from_folder")
    subset = dataset.filter_episodes(lambda episode: episode.id % 2 == 0)
    report = import_minari(subset, tmp_path / "subset")
    assert report.episodes == 3
    ids = [int(meta["episode_id"]) for _, _, _, meta in store_episodes(tmp_path / "subset")]
    assert ids == [0, 2, 4]
    card = json.loads((tmp_path / "subset" / "card.json").read_text())
    assert card["provenance"][-1]["episode_indices"] == [0, 2, 4]


def test_terminated_and_truncated_at_once_round_trips(root, tmp_path):
    env = gym.make("CartPole-v1")
    buffers = rollouts(env, 3, 1, max_steps=10)
    both = buffers[1]
    both.terminations[-1], both.truncations[-1] = True, True
    minari.create_dataset_from_buffers("cartpole/both-v0", buffers, env="CartPole-v1", eval_env="CartPole-v1",
                                       algorithm_name="a", author="a", author_email="a", code_permalink="a",
                                       description="a")
    import_minari("cartpole/both-v0", tmp_path / "store")
    stored = store_episodes(tmp_path / "store")
    assert stored[1][2] == 1 and bool(stored[1][3]["also_truncated"]) and not stored[0][3]["also_truncated"]
    export_minari(tmp_path / "store", "cartpole/both-back-v0")
    assert_same_datasets(minari.load_dataset("cartpole/both-v0"), minari.load_dataset("cartpole/both-back-v0"))


# ---- a store of our own ------------------------------------------------------------------------------------------


def test_a_plain_store_exports_with_field_choices(root, tmp_path):
    rng = np.random.default_rng(5)
    with ReplayBuffer(tmp_path / "store", 4, 10, fields=dict(image=("uint8", (3, 8, 8)), action=("float", 6),
                      reward="float", done="bool"), meta_fields=dict(task_id="int")) as buffer:
        for task in range(3):
            length = int(rng.integers(2, 10))
            buffer.store_episode(image=rng.integers(0, 256, (length, 3, 8, 8), dtype=np.uint8),
                                 action=rng.standard_normal((length, 6)), reward=rng.standard_normal(length),
                                 done=np.arange(length) == length - 1, task_id=task,
                                 end="terminated" if task else None)
    with pytest.raises(SchemaError, match=r"no field 'observation' .* pass observation=NAME"):
        export_minari(tmp_path / "store", "plain/images-v0")
    with pytest.raises(InvalidDataError, match=r"episode 0 of .* has no final observation.*missing_final='repeat'"):
        export_minari(tmp_path / "store", "plain/images-v0", observation="image")
    assert not (root / "plain" / "images-v0").exists()
    report = export_minari(tmp_path / "store", "plain/images-v0", observation="image", missing_final="repeat")
    assert report.fields["done"] == "infos/done" and report.fields["task_id"] == "episode attribute task_id"
    back = minari.load_dataset("plain/images-v0")
    stored = store_episodes(tmp_path / "store")
    for (steps, _, end, meta), episode, attrs in zip(stored, back.iterate_episodes(),
                                                     back.storage.get_episode_metadata(back.episode_indices)):
        assert_same(episode.observations[:-1], steps["image"])
        assert_same(episode.observations[-1], steps["image"][-1])  # repeated, as asked
        assert_same(episode.infos["done"], steps["done"])
        assert_same(attrs["task_id"], meta["task_id"])
        assert bool(episode.terminations[-1]) == (end == 1) and not episode.truncations.any()
    pair = export_minari(tmp_path / "store", "plain/pair-v0", observation=["image", "done"], missing_final="zeros")
    assert pair.fields["image"] == "observations"
    assert isinstance(minari.load_dataset("plain/pair-v0").observation_space, gym.spaces.Dict)


# ---- mistakes ----------------------------------------------------------------------------------------------------


def test_mistakes_get_clear_errors(root, tmp_path):
    with pytest.raises(StoreNotFoundError, match=r"no local Minari dataset 'nothing/here-v0'.*never downloaded"):
        import_minari("nothing/here-v0", tmp_path / "store")
    cartpole_dataset()
    import_minari("cartpole/random-v0", tmp_path / "store")
    with pytest.raises(TargetExistsError, match=r"already exists; pass overwrite=True"):
        import_minari("cartpole/random-v0", tmp_path / "store")
    import_minari("cartpole/random-v0", tmp_path / "store", overwrite=True)
    with pytest.raises(OptionError, match=r"dataset_id must look like 'namespace/name-vN'"):
        export_minari(tmp_path / "store", "no version")
    with pytest.raises(TargetExistsError, match=r"random-v0 already exists"):
        export_minari(tmp_path / "store", "cartpole/random-v0")
    with pytest.raises(OptionError, match=r"missing_final must be one of"):
        export_minari(tmp_path / "store", "cartpole/x-v0", missing_final="guess")
    with pytest.raises(StoreNotFoundError, match=r"no store at"):
        export_minari(tmp_path / "nowhere", "cartpole/x-v0")


def test_a_termination_before_the_last_step_is_refused(root, tmp_path):
    buffers = rollouts(gym.make("CartPole-v1"), 2, 3, max_steps=6)
    buffers[0].terminations[1] = True
    minari.create_dataset_from_buffers("cartpole/bad-v0", buffers, env="CartPole-v1", eval_env="CartPole-v1",
                                       algorithm_name="a", author="a", author_email="a", code_permalink="a",
                                       description="a")
    with pytest.raises(InvalidDataError, match=r"episode 0 of cartpole/bad-v0 is terminated or truncated at step 1"):
        import_minari("cartpole/bad-v0", tmp_path / "store")
    assert not (tmp_path / "store").exists() and not list(tmp_path.glob(".store*"))


def test_the_commands(root, tmp_path):
    cartpole_dataset()
    def run(*args):
        return subprocess.run([sys.executable, "-m", "memmap_replay", *args], capture_output=True, text=True,
                                           cwd=tmp_path, timeout=120)
    done = run("import", "cartpole/random-v0", "store", "--datasets-path", str(root))
    assert done.returncode == 0, done.stderr
    assert "import minari: cartpole/random-v0 -> store" in done.stdout
    done = run("export", "store", "cartpole/cli-v0", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["episodes"] == 5
    assert_same_datasets(minari.load_dataset("cartpole/random-v0"), minari.load_dataset("cartpole/cli-v0"))
    done = run("export", "store", "cartpole/cli-v0")
    assert done.returncode == 2 and "--overwrite" in done.stderr and "Traceback" not in done.stderr


def test_an_imported_dataset_takes_online_episodes(root, tmp_path):
    dataset = cartpole_dataset()
    longest = max(len(episode.rewards) for episode in dataset.iterate_episodes())
    with pytest.raises(OptionError, match=rf"max_timesteps must hold the dataset's {longest} steps in its longest "
                                          rf"episode \(got 1\)"):
        import_minari("cartpole/random-v0", tmp_path / "refused", max_timesteps=1)
    import_minari("cartpole/random-v0", tmp_path / "store", max_episodes=12, max_timesteps=600, circular=True)
    offline = store_episodes(tmp_path / "store")
    rng = np.random.default_rng(5)
    with ReplayBuffer.from_folder(tmp_path / "store") as buffer:
        assert (buffer.max_episodes, buffer.max_timesteps, buffer.circular) == (12, 600, True)
        fields = {name: spec for name, spec in buffer.schema.fields.items()}
        for _ in range(7):
            length = int(rng.integers(5, 600))
            buffer.store_episode(**{name: np.zeros((length, *spec.shape), spec.dtype) for name, spec in fields.items()},
                                 end="terminated")
        assert len(buffer) == 12
    for (steps, final, end, meta), (steps2, final2, end2, meta2) in zip(offline, store_episodes(tmp_path / "store")):
        assert_same(steps["observation"], steps2["observation"])
        assert end == end2
