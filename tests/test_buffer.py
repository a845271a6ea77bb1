"""ReplayBuffer: the seed package's API and its deliberate differences."""

from pathlib import Path

import numpy as np
import pytest
import torch

import memmap_replay
from memmap_replay import InvalidDataError, ReadOnlyError, ReplayBuffer

from conftest import SMALL_FIELDS, SMALL_META, episode_arrays


def test_seed_readme_writing_half(tmp_path):
    buffer = ReplayBuffer(tmp_path / "replay_data", max_episodes=1000, max_timesteps=500,
                          fields=dict(state=("float", (3, 16, 16), 0.0), action=("int", 2), reward="float"),
                          meta_fields=dict(task_id="int"), circular=True, overwrite=True)
    for _ in range(4):
        with buffer.one_episode(task_id=1):
            for _ in range(100):
                buffer.store(state=torch.randn(3, 16, 16), action=torch.randint(0, 4, (2,)).numpy(), reward=1.0)
    rehydrated = ReplayBuffer.from_folder(tmp_path / "replay_data", read_only=True)
    assert rehydrated.num_episodes == 4
    rehydrated.close()
    buffer.close()


def test_reopen_appends_and_never_wipes(tmp_path):
    kwargs = dict(max_episodes=10, max_timesteps=20, fields=SMALL_FIELDS, meta_fields=SMALL_META)
    buffer = ReplayBuffer(tmp_path / "b", **kwargs)
    buffer.store_episode(**episode_arrays(0, 5), task_id=0)
    buffer.close()
    buffer = ReplayBuffer(tmp_path / "b", **kwargs)  # same arguments: opens, keeps the episode
    assert buffer.num_episodes == 1
    buffer.store_episode(**episode_arrays(1, 5), task_id=1)
    buffer.close()
    buffer = ReplayBuffer(tmp_path / "b", **kwargs, overwrite=True)
    assert buffer.num_episodes == 0
    buffer.close()


def test_overwrite_removes_only_the_stores_own_files(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    buffer = ReplayBuffer(tmp_path, max_episodes=2, max_timesteps=5, fields=dict(x="float"), overwrite=True)
    buffer.close()
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_episode_lens_index_len_and_num_steps(make_buffer):
    buffer = make_buffer(max_episodes=3, circular=True)
    assert buffer.episode_index == 0 and len(buffer) == 0
    for number, length in enumerate([4, 6, 8, 3]):
        buffer.store_episode(**episode_arrays(number, length), task_id=number)
    assert buffer.episode_lens.tolist() == [3, 6, 8]  # slot 0 now holds the 4th episode
    assert buffer.live_episodes.tolist() == [1, 2, 0]
    assert len(buffer) == buffer.num_episodes == 3
    assert buffer.num_steps == 17 and buffer.episode_index == 1


def test_get_all_data_pads_and_selects(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 2), task_id=0)
    buffer.store_episode(**episode_arrays(1, 4), task_id=1)
    data = buffer.get_all_data()
    assert set(data) == {"obs", "action", "reward", "task_id", "episode_lens"}
    assert data["obs"].shape == (2, 4, 3) and data["obs"].dtype == torch.float32
    assert data["reward"][0].tolist() == [0, 1, 0, 0]  # padded with zeros
    only = buffer.get_all_data(fields=("reward",))  # every meta field still, and episode_lens always
    assert set(only) == {"reward", "task_id", "episode_lens"}
    assert only["episode_lens"].tolist() == [2, 4]
    meta_only = buffer.get_all_data(meta_fields=("task_id",))  # fields=None: every step field whatever meta_fields
    assert set(meta_only) == {"obs", "action", "reward", "task_id", "episode_lens"}
    assert set(buffer.get_all_data(fields="reward", meta_fields=())) == {"reward", "episode_lens"}
    assert set(buffer.get_all_data(fields=(), meta_fields=())) == {"episode_lens"}
    empty = make_buffer("empty")
    assert set(empty.get_all_data(fields=("reward",))) == {"reward", "task_id", "episode_lens"}


def test_update_steps_and_meta(make_buffer):
    buffer = make_buffer()
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 5), task_id=number)
    buffer.update([0, 2], reward=np.ones((2, 3), np.float32), task_id=[7, 8])
    data = buffer.get_all_data()
    assert data["reward"][0].tolist() == [1, 1, 1, 3, 4]
    assert data["reward"][1].tolist() == [1000, 1001, 1002, 1003, 1004]
    assert data["task_id"].tolist() == [7, 1, 8]
    buffer.update(None, reward=0.5)  # one value broadcast over every step of every episode
    assert (buffer.get_all_data()["reward"] == 0.5).all()
    buffer.update(1, obs=[[1.0, 2.0, 3.0]])  # one index: (T, *shape) without the episode axis
    assert buffer.get_all_data()["obs"][1, 0].tolist() == [1, 2, 3]
    with pytest.raises(InvalidDataError, match="shorter"):
        buffer.update([0], reward=np.ones((1, 6)))


def test_read_only_can_read_not_write(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=0)
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert reader.read_only and reader.num_episodes == 1
    with pytest.raises(ReadOnlyError, match="read-only"):
        reader.store_episode(**episode_arrays(1, 5))
    with pytest.raises(ReadOnlyError, match="read-only"):
        with reader.one_episode():
            pass
    reader.flush()  # a no-op on a reader
    reader.close()


def test_context_manager_closes_and_releases_lock(tmp_path):
    with ReplayBuffer(tmp_path / "c", max_episodes=2, max_timesteps=5, fields=dict(x="float")) as buffer:
        buffer.store_episode(x=[1.0, 2.0])
        buffer.flush()
    with ReplayBuffer.from_folder(tmp_path / "c") as again:
        assert again.num_episodes == 1
        assert "1 episodes" in repr(again)


def test_public_api_is_explicit():
    assert sorted(memmap_replay.__all__) == sorted(set(memmap_replay.__all__))
    # the torch side and the optional extras are lazy attributes (module __getattr__): each still resolves
    lazy = memmap_replay._LAZY
    assert memmap_replay._EXTRAS <= set(lazy) and not memmap_replay._EXTRAS & set(memmap_replay.__all__)
    assert set(lazy) - memmap_replay._EXTRAS <= set(memmap_replay.__all__)
    for name in memmap_replay.__all__:
        assert getattr(memmap_replay, name) is not None
    for name, module in lazy.items():
        if name not in memmap_replay._EXTRAS:  # recording needs gymnasium, tested in test_recording
            assert getattr(memmap_replay, name) is getattr(__import__(f"memmap_replay.{module}", fromlist=[name]), name)
    listed = set(dir(memmap_replay))
    assert set(memmap_replay.__all__) | set(lazy) <= listed
    # nothing public outside __all__ but submodules (and the optional extras' names, listed by dir())
    exported = {name for name in listed | set(vars(memmap_replay)) if not name.startswith("_")}
    package = Path(memmap_replay.__file__).parent
    modules = {path.stem for path in package.glob("*.py")} | {path.parent.name
                                                              for path in package.glob("*/__init__.py")}
    # verify and pack are modules and the functions they export (the function wins the package attribute)
    assert callable(memmap_replay.sharing.verify) and callable(memmap_replay.sharing.pack)
    assert exported - (modules - set(memmap_replay.__all__)) - memmap_replay._EXTRAS == set(memmap_replay.__all__)


def test_update_with_one_index_and_slices_seed_style(make_buffer):
    buffer = make_buffer(max_episodes=5)
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 5), task_id=number)
    buffer.update(0, reward=np.zeros(5))  # (T,) without the episode axis
    buffer.update(1, action=np.ones((5, 2)), task_id=9)
    buffer.update(2, reward=0.5)
    buffer.update(slice(None), task_id=3)  # empty slots in the slice are skipped
    data = buffer.get_all_data()
    assert data["reward"][0].tolist() == [0] * 5 and data["reward"][2].tolist() == [0.5] * 5
    assert data["action"][1].tolist() == [[1, 1]] * 5
    assert data["task_id"].tolist() == [3, 3, 3]


# ---- the native facade (memmap_replay.buffer.ReplayBuffer; memmap_replay.ReplayBuffer adds 0.2.3's methods) ----


@pytest.fixture
def native(tmp_path):
    from memmap_replay.buffer import ReplayBuffer as Native

    buffer = Native(tmp_path / "native", max_episodes=6, max_timesteps=5, fields=dict(obs="float", action="int"),
                    meta_fields=dict(task="int"))
    yield buffer
    buffer.close()


def test_the_native_buffer_writes_every_way_but_the_flat_loop(native):
    with native.one_episode(task=1):
        native.store(obs=1.0, action=1)
    native.begin_episode(task=2)
    native.store(obs=2.0, action=2)
    native.end_episode("terminated")
    with native.batched_episode(2, task=[3, 4]):
        native.store_batch(obs=np.array([3.0, 4.0]), action=np.array([3, 4]))
        native.store_meta_batch(task=np.array([5, 6]))
    native.store_episode(obs=np.arange(2.0), action=np.arange(2), task=7)
    native.update(0, obs=9.0)
    assert native.grow(max_episodes=8) is native
    episodes = native.episodes()
    assert [float(episode["obs"][0]) for episode in episodes] == [9.0, 2.0, 3.0, 4.0, 0.0]
    assert [int(episode.meta["task"]) for episode in episodes] == [1, 2, 5, 6, 7]
    assert [episode.end for episode in episodes][:2] == [None, "terminated"]


def test_the_native_buffer_refuses_the_flat_loop_and_writes_nothing(native):
    from memmap_replay import EpisodeStateError

    with pytest.raises(EpisodeStateError, match=r"store\(\) needs an open episode: `with buffer\.one_episode\(\)"):
        native.store(obs=1.0)
    with pytest.raises(EpisodeStateError, match=r"store_batch\(\) needs an open batched_episode block"):
        native.store_batch(obs=np.zeros(2))
    with pytest.raises(EpisodeStateError, match=r"store_meta_batch\(\) needs an open batched_episode block"):
        native.store_meta_batch(task=np.zeros(2, dtype=int))
    with native.batched_episode(2):
        with pytest.raises(EpisodeStateError, match=r"store\(\) needs an open episode of its own.*store_batch"):
            native.store(obs=1.0)
        native.store_batch(obs=np.zeros(2), action=np.zeros(2, dtype=int))
    native.begin_episode()
    for action in (lambda: native.update(0, obs=1.0), lambda: native.grow(max_episodes=9), native.clear):
        with pytest.raises(EpisodeStateError, match=r"while an episode is open.*or call end_episode\(\)\) first"):
            action()
    assert native.end_episode() is None  # (an episode of no step is not stored)
    assert native.num_episodes == 2 and native.max_episodes == 6
    assert not hasattr(native, "advance_episode") and not hasattr(native, "flush_every_store_step")


def test_the_native_constructor_has_no_0_2_3_keywords(tmp_path):
    from memmap_replay.buffer import ReplayBuffer as Native

    with pytest.raises(TypeError, match="flush_every_store_step"):
        Native(tmp_path / "s", 2, 3, dict(obs="float"), flush_every_store_step=1)
    assert not (tmp_path / "s").exists()
