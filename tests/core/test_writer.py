"""Episode writers: per-step, whole-episode, batched (seed style) and vectorized (gymnasium style)."""

import numpy as np
import pytest
import torch

from memmap_replay import EpisodeStateError, InvalidDataError, ReplayBuffer

from conftest import episode_arrays


def stored_episodes(buffer):
    """[(task_id, {field: rows}, end code, final obs or None)] of the live episodes, oldest first."""
    store = buffer.episode_store
    table = store.live_table()
    out = []
    for slot, start, length, end, final in zip(table.slots, table.start, table.length, table.end, table.final):
        rows = {name: np.array(store.step_array(name)[start:start + length]) for name in buffer.fieldnames}
        final_obs = np.array(store.step_array("obs")[start + length]) if final else None
        out.append((int(store.meta_array("task_id")[slot]), rows, int(end), final_obs))
    return out


def test_per_step_matches_whole_episode(make_buffer):
    a, b = make_buffer("a"), make_buffer("b")
    arrays = episode_arrays(7, 9)
    with a.one_episode(task_id=7):
        for t in range(9):
            a.store(obs=torch.from_numpy(arrays["obs"][t]), action=arrays["action"][t].tolist(),
                    reward=float(arrays["reward"][t]))
    b.store_episode(**arrays, task_id=7)
    (ta, ra, _, _), (tb, rb, _, _) = stored_episodes(a)[0], stored_episodes(b)[0]
    assert ta == tb == 7
    for name in ra:
        np.testing.assert_array_equal(ra[name], rb[name])
        np.testing.assert_array_equal(ra[name], arrays[name])


def test_missing_fields_take_defaults(make_buffer):
    buffer = make_buffer(fields=dict(obs=("float", 3, 0.5), action=("int", 2, 7), reward="float"))
    with buffer.one_episode(task_id=1):
        buffer.store(obs=np.zeros(3, np.float32))
        buffer.store(action=[1, 2])
    _, rows, _, _ = stored_episodes(buffer)[0]
    np.testing.assert_array_equal(rows["obs"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    np.testing.assert_array_equal(rows["action"], [[7, 7], [1, 2]])
    np.testing.assert_array_equal(rows["reward"], [0, 0])


def test_meta_filled_inside_the_block_and_end(make_buffer):
    buffer = make_buffer()
    with buffer.one_episode() as episode:
        buffer.store(reward=1.0)
        episode["task_id"] = 42
        episode.set_end("truncated", final=dict(obs=[9.0, 9.0, 9.0]))
    task, _, end, final = stored_episodes(buffer)[0]
    assert task == 42 and end == 2
    np.testing.assert_array_equal(final, [9, 9, 9])


def test_exception_discards_episode_and_empty_episode_stores_nothing(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 3), task_id=0)
    with pytest.raises(RuntimeError, match="boom"):
        with buffer.one_episode(task_id=1):
            buffer.store(reward=1.0)
            raise RuntimeError("boom")
    with buffer.one_episode(task_id=2):
        pass
    assert [e[0] for e in stored_episodes(buffer)] == [0]
    with buffer.one_episode(task_id=3):
        buffer.store(reward=3.0)
    assert [e[0] for e in stored_episodes(buffer)] == [0, 3]


def test_flat_loop_with_begin_and_advance(make_buffer):
    buffer = make_buffer()
    buffer.begin_episode(task_id=5)
    for t in range(10):
        buffer.store(reward=float(t))
        if t in (3, 6):
            buffer.advance_episode(end="terminated")
    buffer.end_episode(end="truncated")
    episodes = stored_episodes(buffer)
    assert [len(e[1]["reward"]) for e in episodes] == [4, 3, 3]
    assert [e[2] for e in episodes] == [1, 1, 2]
    assert [e[0] for e in episodes] == [5, 0, 0]  # advance_episode opens the next with default meta
    with pytest.raises(EpisodeStateError, match="begin_episode"):
        buffer.end_episode()


def test_batched_episode_seed_style(make_buffer, rng):
    buffer = make_buffer()
    with buffer.batched_episode(3, task_id=np.array([1, 2, 3])):
        for t in range(4):
            buffer.store_batch(reward=np.arange(3, dtype=np.float32) + 10 * t, obs=rng.standard_normal((3, 3)))
    episodes = stored_episodes(buffer)
    assert [e[0] for e in episodes] == [1, 2, 3]
    np.testing.assert_array_equal(episodes[1][1]["reward"], [1, 11, 21, 31])


def test_vector_writer_commits_each_env_on_its_own_flag(make_buffer, rng):
    buffer = make_buffer(max_episodes=20, circular=True)
    writer = buffer.vector_writer(3, task_id=[10, 20, 30])
    ends = {0: [2, 5], 1: [6], 2: [0, 1, 2, 7]}  # steps at which each env's episode ends
    expected = {env: [] for env in range(3)}
    current = {env: [] for env in range(3)}
    for t in range(8):
        reward = np.array([100 * env + t for env in range(3)], dtype=np.float32)
        terminated = np.array([t in ends[env] and env != 1 for env in range(3)])
        truncated = np.array([t in ends[env] and env == 1 for env in range(3)])
        final = dict(obs=np.full((3, 3), t, np.float32))
        committed = writer.store(reward=reward, terminated=terminated, truncated=truncated, final=final)
        assert len(committed) == int((terminated | truncated).sum())
        for env in range(3):
            current[env].append(reward[env])
            if terminated[env] or truncated[env]:
                expected[env].append(current[env])
                current[env] = []
    assert writer.lengths.tolist() == [2, 1, 0]
    episodes = stored_episodes(buffer)
    got = {env: [e[1]["reward"].tolist() for e in episodes if e[0] == 10 * (env + 1)] for env in range(3)}
    assert got == {env: [list(map(float, ep)) for ep in expected[env]] for env in range(3)}
    assert {e[2] for e in episodes if e[0] == 20} == {2}
    assert all(e[3] is not None for e in episodes)


def test_vector_writer_stores_flags_in_same_named_fields(make_buffer):
    buffer = make_buffer(fields=dict(obs=("float", 3), terminated="bool", truncated="bool"))
    writer = buffer.vector_writer(2)
    writer.store(obs=np.zeros((2, 3)), terminated=[False, True])
    writer.store(obs=np.zeros((2, 3)), truncated=[True, False])
    store = buffer.episode_store
    table = store.live_table()
    flags = [store.step_array("terminated")[s:s + n].tolist() for s, n in zip(table.start, table.length)]
    assert flags == [[True], [False, False]]


def test_vector_writer_meta_and_errors(make_buffer):
    buffer = make_buffer(max_timesteps=2)
    writer = buffer.vector_writer(2, task_id=5)
    writer.set_meta(task_id=[7, 8])
    with pytest.raises(InvalidDataError, match=r"shape \(2,\)"):
        writer.store(reward=np.zeros(3))
    writer.store(reward=[1.0, 2.0])
    writer.store(reward=[1.0, 2.0], terminated=[True, False])
    with pytest.raises(InvalidDataError, match="env 1's episode must have at most max_timesteps=2"):
        writer.store(reward=[1.0, 2.0])
    assert [e[0] for e in stored_episodes(buffer)] == [7]
    writer.discard()
    assert writer.lengths.tolist() == [0, 0]


def test_vector_writer_many_envs_vectorized(tmp_path, rng):
    buffer = ReplayBuffer(tmp_path / "v", max_episodes=2000, max_timesteps=200,
                          fields=dict(obs=("uint8", (4, 4)), reward="float"))
    writer = buffer.vector_writer(64)
    committed = 0
    for t in range(200):
        done = rng.random(64) < 0.1
        committed += len(writer.store(obs=rng.integers(0, 255, (64, 4, 4), dtype=np.uint8),
                                      reward=rng.standard_normal(64), terminated=done))
    assert buffer.num_episodes == committed
    assert buffer.num_steps + int(writer.lengths.sum()) == 200 * 64
    buffer.close()


def test_vector_writer_gymnasium_autoreset_forms(make_buffer):
    """NEXT_STEP autoreset: the step after a done is a reset step, skipped with active=False.
    SAME_STEP: final observations come as an object array with None where no env ended."""
    buffer = make_buffer()
    writer = buffer.vector_writer(2, task_id=[1, 2])
    final = np.array([None, np.full(3, -7.0, np.float32)], dtype=object)
    writer.store(reward=[1.0, 2.0])
    writer.store(reward=[1.5, 2.5], truncated=[False, True], final=dict(obs=final))
    writer.store(reward=[1.75, 99.0], active=[True, False])  # env 1 resets: nothing stored for it
    writer.store(reward=[1.875, 3.0], terminated=[True, False])
    episodes = stored_episodes(buffer)
    assert [(e[0], e[1]["reward"].tolist(), e[2]) for e in episodes] == [(2, [2.0, 2.5], 2),
                                                                         (1, [1.0, 1.5, 1.75, 1.875], 1)]
    np.testing.assert_array_equal(episodes[0][3], [-7, -7, -7])
    assert writer.lengths.tolist() == [0, 1]
    writer.commit_all(envs=[1])
    assert stored_episodes(buffer)[-1][1]["reward"].tolist() == [3.0]
    writer.store(reward=[5.0, 6.0])
    writer.discard(envs=[0])
    assert writer.lengths.tolist() == [0, 1]


def test_vector_writer_same_step_final_obs_when_every_env_ended(make_buffer):
    """SAME_STEP: gymnasium's info["final_obs"] stays an object array when every env ended (no None in it)."""
    buffer = make_buffer()
    writer = buffer.vector_writer(2)
    final = np.empty(2, dtype=object)
    final[:] = [np.full(3, -7.0, np.float32), np.full(3, -8.0, np.float32)]
    writer.store(reward=[1.0, 2.0], truncated=[True, True], final=dict(obs=final))
    episodes = stored_episodes(buffer)
    assert [e[1]["reward"].tolist() for e in episodes] == [[1.0], [2.0]]
    np.testing.assert_array_equal([e[3] for e in episodes], [[-7] * 3, [-8] * 3])


def test_staging_grows_with_the_episode_not_with_capacity(tmp_path):
    buffer = ReplayBuffer(tmp_path / "long", max_episodes=2, max_timesteps=100_000, fields=dict(x=("uint8", (64, 64))))
    writer = buffer.vector_writer(32)  # 32 x 100,001 x 4 KiB would be 13 GB if reserved up front
    assert writer.staging.rows < 1000
    with buffer.one_episode():
        for t in range(700):  # grows past the first allocation, keeps earlier steps
            buffer.store(x=np.full((64, 64), t % 256, np.uint8))
    values = buffer.get_all_data()["x"][0, :, 0, 0]
    assert values.tolist() == [t % 256 for t in range(700)]
    buffer.close()
