"""Long episodes as linked segments (``long_episodes='split'``): every writer cuts an episode that passes
max_timesteps into segments linked through ``episodes/continues.npy``; the episode API shows the links and
joins them on request; views never cross a cut; a 1.0 store (no links) reads and upgrades; a kill mid-episode
keeps the committed segments."""

import json
import re
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from memmap_replay import (BufferFullError, InvalidDataError, OptionError, ReplayBuffer, TransitionView, WindowView,
                           verify)
from memmap_replay.core import format as fmt

FIELDS = dict(obs="float", reward="float")


def make(tmp_path, name="buf", **options):
    options.setdefault("max_episodes", 20)
    options.setdefault("max_timesteps", 4)
    return ReplayBuffer(tmp_path / name, fields=FIELDS, meta_fields=dict(task="int"), long_episodes="split", **options)


def record(buffer, steps, *, task=1, end=None, first=0.0):
    with buffer.one_episode(task=task):
        for t in range(steps):
            buffer.store(obs=first + t, reward=10.0 * t)
        if end:
            buffer.set_episode_end(end)


def links(buffer):
    return [(e.id, e.continues, e.continued_by) for e in buffer.episodes()]


def test_a_long_episode_becomes_linked_segments(tmp_path):
    buffer = make(tmp_path)
    record(buffer, 10, task=7, end="terminated")
    assert list(buffer.episode_lens[:3]) == [4, 4, 2]
    assert links(buffer) == [(0, None, 1), (1, 0, 2), (2, 1, None)]
    first, second, last = buffer.episodes()
    # a cut segment ends unspecified; its final row is the next segment's first step
    assert (first.end, second.end, last.end) == (None, None, "terminated")
    assert first.final["obs"] == second["obs"][0] == 4.0 and second.final["obs"] == last["obs"][0] == 8.0
    assert last.final is None and all(e.meta["task"] == 7 for e in (first, second, last))
    whole = buffer.episode(0, join_segments=True)
    np.testing.assert_array_equal(whole["obs"], np.arange(10.0))
    np.testing.assert_array_equal(whole["reward"], 10.0 * np.arange(10))
    assert (whole.id, len(whole), whole.end, whole.final, whole.continues) == (0, 10, "terminated", None, None)
    joined = buffer.episodes(join_segments=True)
    assert len(joined) == 1 and list(joined.lengths) == [10] and list(joined.ends) == ["terminated"]


def test_an_episode_of_exactly_max_timesteps_is_one_segment(tmp_path):
    buffer = make(tmp_path)
    record(buffer, 4)
    assert buffer.num_episodes == 1 and links(buffer) == [(0, None, None)]


def test_the_default_refuses_and_says_how_to_split(tmp_path):
    buffer = ReplayBuffer(tmp_path / "b", 5, 3, FIELDS)
    with pytest.raises(InvalidDataError, match=r"at most max_timesteps=3 steps .*long_episodes='split'"):
        with buffer.one_episode():
            for t in range(4):
                buffer.store(obs=t)
    assert buffer.num_episodes == 0  # the episode was discarded whole, as before
    with pytest.raises(OptionError, match=r"long_episodes must be one of 'error', 'split' \(got 'cut'\)"):
        ReplayBuffer(tmp_path / "c", 5, 3, FIELDS, long_episodes="cut")


def test_store_episode_splits_in_one_commit(tmp_path):
    buffer = make(tmp_path)
    commits = json.loads((buffer.folder / "meta.json").read_text())["state"]["commits"]
    slot = buffer.store_episode(obs=np.arange(9.0), reward=np.ones(9), task=3, end="truncated",
                                final=dict(obs=99.0))
    assert json.loads((buffer.folder / "meta.json").read_text())["state"]["commits"] == commits + 1
    assert slot == 2 and list(buffer.episode_lens[:3]) == [4, 4, 1]
    assert links(buffer) == [(0, None, 1), (1, 0, 2), (2, 1, None)]
    whole = buffer.episode(-1, join_segments=True)
    np.testing.assert_array_equal(whole.observations("obs"), [*range(9), 99.0])
    assert whole.end == "truncated" and whole.truncated and whole.meta["task"] == 3
    with pytest.raises(InvalidDataError, match=r"between 1 and max_timesteps=4 steps \(got 5\); grow "
                                               r".*long_episodes=.split."):
        ReplayBuffer(tmp_path / "plain", 5, 4, FIELDS).store_episode(obs=np.arange(5.0))


def test_vector_envs_split_on_their_own(tmp_path):
    buffer = make(tmp_path, max_timesteps=3)
    writer = buffer.vector_writer(2)
    for t in range(7):  # env 0 ends at its 7th step, the same step as its second cut; env 1 runs on
        writer.store(obs=[t, 100 + t], reward=[0, 0], terminated=[t == 6, False])
    writer.commit_all("truncated")
    joined = buffer.episodes(join_segments=True)
    assert list(joined.lengths) == [7, 7] and list(joined.ends) == ["terminated", "truncated"]
    np.testing.assert_array_equal(joined[0]["obs"], np.arange(7.0))
    np.testing.assert_array_equal(joined[1]["obs"], 100 + np.arange(7.0))
    segments = buffer.episodes()
    assert [len(e) for e in segments] == [3, 3, 3, 3, 1, 1]  # the two envs' segments interleave
    by_env = {int(e["obs"][0] >= 100): [] for e in segments}
    for e in segments:
        by_env[int(e["obs"][0] >= 100)].append(e)
    for chain in by_env.values():
        assert chain[0].continues is None and chain[-1].continued_by is None
        assert [e.continues for e in chain[1:]] == [e.id for e in chain[:-1]]
    # a discarded episode's committed segments stay; the next episode of that env starts unlinked
    writer.store(obs=[0, 0], reward=[0, 0])
    for t in range(3):
        writer.store(obs=[t, 0], reward=[0, 0])
    writer.discard()
    writer.store(obs=[5, 5], reward=[0, 0], terminated=[True, True])
    assert [e.continues for e in buffer.episodes()[-4:]] == [None, None, None, None]


def test_views_never_cross_a_cut(tmp_path):
    buffer = make(tmp_path)
    record(buffer, 10, end="terminated")
    windows = WindowView(buffer.episode_store, 3, fields=["obs"])
    batch = windows.__getitems__(list(range(len(windows))))
    steps = batch["obs"].numpy()
    # every window lies inside one segment: segments hold steps 0-3, 4-7, 8-9
    assert all(len({int(v) // 4 for v in row}) == 1 for row in steps), steps
    transitions = TransitionView(buffer.episode_store, gamma=0.9, observation_fields=["obs"])
    batch = transitions.__getitems__(list(range(len(transitions))))
    # at a cut the next observation is the final row (the next segment's first step), bootstrapped
    np.testing.assert_array_equal(batch["obs"].numpy(), np.arange(10.0))
    np.testing.assert_array_equal(batch["next_obs"].numpy()[:9], np.arange(1.0, 10.0))
    assert not batch["terminated"][:-1].any() and batch["terminated"][-1]
    np.testing.assert_allclose(batch["discount"].numpy(), [0.9] * 9 + [0.0])


def test_a_ring_that_evicted_the_first_segment(tmp_path):
    buffer = make(tmp_path, max_episodes=3, circular=True)
    record(buffer, 13, end="terminated")  # four segments, three slots
    assert links(buffer) == [(1, 0, 2), (2, 1, 3), (3, 2, None)]
    whole = buffer.episode(0, join_segments=True)
    assert whole.id == 1 and whole.continues == 0 and len(whole) == 9  # its start (id 0) was evicted
    np.testing.assert_array_equal(whole["obs"], np.arange(4.0, 13.0))


def test_a_reader_sees_the_links_and_they_survive_a_grow(tmp_path):
    buffer = make(tmp_path, max_episodes=4)
    record(buffer, 9)
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert links(reader) == links(buffer) == [(0, None, 1), (1, 0, 2), (2, 1, None)]
    buffer.grow(max_episodes=7)
    record(buffer, 5)
    assert links(buffer)[3:] == [(3, None, 4), (4, 3, None)]
    reader.refresh()
    assert links(reader) == links(buffer)
    assert verify(buffer.folder).ok


def downgrade(folder, stale=None):
    """The store as a 1.0 writer leaves it: meta.json says 1.0, and continues.npy is gone or stale."""
    meta = json.loads((folder / "meta.json").read_text())
    meta["version"] = "1.0"
    (folder / "meta.json").write_text(json.dumps(meta))
    path = folder / fmt.EPISODES_DIR / "continues.npy"
    if stale is None:
        path.unlink()
    else:
        values = np.load(path, mmap_mode="r+")
        values[:] = stale
        values.flush()


@pytest.mark.parametrize("stale", [None, 2])
def test_a_1_0_store_reads_without_links_and_a_writer_upgrades_it(tmp_path, stale):
    buffer = make(tmp_path)
    record(buffer, 9)
    buffer.close()
    downgrade(tmp_path / "buf", stale)
    reader = ReplayBuffer.from_folder(tmp_path / "buf", read_only=True)
    assert links(reader) == [(0, None, None), (1, None, None), (2, None, None)]
    assert verify(tmp_path / "buf").ok
    writer = ReplayBuffer.from_folder(tmp_path / "buf", long_episodes="split")
    record(writer, 6)
    assert json.loads((tmp_path / "buf" / "meta.json").read_text())["version"] == fmt.PLAIN_VERSION
    # the old episodes' links stay unknown (the stale values are gone); the new episode's are there
    assert links(writer) == [(0, None, None), (1, None, None), (2, None, None), (3, None, 4), (4, 3, None)]
    reader.refresh()
    assert links(reader) == links(writer)
    assert verify(tmp_path / "buf").ok



def test_a_kill_mid_episode_keeps_the_committed_segments(tmp_path):
    folder = tmp_path / "killed"
    make(tmp_path, "killed").close()
    child = textwrap.dedent(f"""
        import os, signal
        from memmap_replay import ReplayBuffer
        buffer = ReplayBuffer.from_folder({str(folder)!r}, long_episodes="split")
        with buffer.one_episode(task=2):
            for t in range(11):
                buffer.store(obs=t, reward=0.0)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    reopened = ReplayBuffer.from_folder(folder, long_episodes="split")
    # steps 0-7 committed as two segments; the open third segment (8-10) died with the process
    assert links(reopened) == [(0, None, 1), (1, 0, None)]
    whole = reopened.episode(0, join_segments=True)
    np.testing.assert_array_equal(whole["obs"], np.arange(8.0))
    assert whole.final["obs"] == 8.0 and whole.end is None  # it is known to go on
    record(reopened, 2)
    assert links(reopened)[-1] == (2, None, None) and verify(folder).ok


@pytest.mark.parametrize("value, message", [
    (2, r"holds 2 \(expected 0 for none, or 1 \+ the id of an earlier episode: at most 0\)"),
    (-5, r"holds -5 \(expected 0 for none"),
])
def test_verify_reports_a_link_to_a_later_or_no_episode(tmp_path, value, message):
    buffer = make(tmp_path)
    record(buffer, 6)
    buffer.close()
    values = np.load(tmp_path / "buf" / fmt.EPISODES_DIR / "continues.npy", mmap_mode="r+")
    values[0] = value
    values.flush()
    report = verify(tmp_path / "buf")
    assert not report.ok and any(re.search(message, p) for p in report.problems), report


def test_verify_reports_forks_and_links_to_ended_episodes(tmp_path):
    buffer = make(tmp_path)
    record(buffer, 2, end="terminated")  # 0
    record(buffer, 6)                    # 1, 2 (2 continues 1)
    buffer.close()
    values = np.load(tmp_path / "buf" / fmt.EPISODES_DIR / "continues.npy", mmap_mode="r+")
    values[0] = 0
    values[1] = 1  # episode 1 "continues" the terminated episode 0
    values.flush()
    report = verify(tmp_path / "buf")
    assert any("live episode 1 (slot 1) continues episode 0, which was not cut at max_timesteps" in p
               for p in report.problems), report
    values[1], values[2] = 0, 2  # a fork: episode 2 continues 1... and so does another
    values[0] = 0
    values.flush()
    assert verify(tmp_path / "buf").ok
    buffer = ReplayBuffer.from_folder(tmp_path / "buf", long_episodes="split")
    record(buffer, 1)  # episode 3
    buffer.close()
    values = np.load(tmp_path / "buf" / fmt.EPISODES_DIR / "continues.npy", mmap_mode="r+")
    values[3] = 2
    values.flush()
    report = verify(tmp_path / "buf")
    assert any("episodes [2, 3] all continue episode 1" in p for p in report.problems), report


def test_a_cut_after_the_staging_rows_doubled_keeps_every_value(tmp_path):
    # 256 * 2**k steps: the cut's final row grows the staging arrays; later steps must go into the new ones
    buffer = make(tmp_path, max_timesteps=256)
    record(buffer, 700)
    whole = buffer.episode(0, join_segments=True)
    np.testing.assert_array_equal(whole["obs"], np.arange(700.0))
    assert [len(e) for e in buffer.episodes()] == [256, 256, 188]


def test_a_reader_open_across_a_1_0_writer_drops_the_stale_links(tmp_path):
    buffer = make(tmp_path)
    record(buffer, 6)
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert links(reader)[1] == (1, 0, None)
    buffer.close()
    downgrade(buffer.folder, stale=[3, 4, 1] + [0] * 17)  # a 1.0 writer left false values behind
    reader.refresh()
    assert links(reader) == [(0, None, None), (1, None, None)]
    writer = ReplayBuffer.from_folder(buffer.folder, long_episodes="split")
    record(writer, 5)
    reader.refresh()
    assert links(reader) == links(writer) == [(0, None, None), (1, None, None), (2, None, 3), (3, 2, None)]


def test_meta_values_per_segment_and_filters_on_joined_episodes(tmp_path):
    buffer = make(tmp_path)
    with buffer.one_episode(task=0) as episode:
        for t in range(9):
            buffer.store(obs=t)
        episode["task"] = 5  # set at the end: only the last segment has it
    assert [e.meta["task"] for e in buffer.episodes()] == [0, 0, 5]
    joined = buffer.episodes(join_segments=True, filter_meta=dict(task=5))
    assert len(joined) == 1 and list(joined.lengths) == [9] and joined[0].meta["task"] == 5
    assert len(buffer.episodes(join_segments=True, filter_meta=dict(task=0))) == 0


def test_split_store_episode_that_cannot_fit_says_so(tmp_path):
    buffer = ReplayBuffer(tmp_path / "b", 5, 3, FIELDS, max_steps=6, long_episodes="split")
    with pytest.raises(BufferFullError, match=r"an episode of 7 steps is stored as 3 linked segments of at most "
                                              r"max_timesteps=3 steps, needing 9 rows and 3 episode slots at once"):
        buffer.store_episode(obs=np.arange(7.0))
    assert buffer.num_episodes == 0


def test_exports_say_when_they_write_segments_as_episodes(tmp_path):
    from memmap_replay import export_d4rl
    pytest.importorskip("h5py")
    buffer = ReplayBuffer(tmp_path / "b", 10, 4, dict(observation="float", action="float", reward="float"),
                          long_episodes="split")
    with buffer.one_episode():
        for t in range(6):
            buffer.store(observation=t, action=0.0, reward=1.0)
    report = export_d4rl(buffer.folder, tmp_path / "out.hdf5")
    assert any("1 episode(s) continue an earlier segment of a longer episode" in note for note in report.notes), report


def test_store_batch_outside_batched_episode_splits_its_episodes(tmp_path):
    buffer = make(tmp_path, max_timesteps=3)
    buffer.store_meta_batch(task=[5, 6])
    for t in range(7):
        buffer.store_batch(obs=np.array([t, 10.0 + t]), reward=np.ones(2))
    assert buffer.timestep_index == 7
    assert buffer.advance_episode(batch_size=2) == [2, 5]  # each episode's last segment
    assert list(buffer.episode_lens[:6]) == [3, 3, 1, 3, 3, 1]
    episodes = buffer.episodes(join_segments=True)
    assert [e["obs"].tolist() for e in episodes] == [[*range(7)], [10.0 + t for t in range(7)]]
    assert [int(e.meta["task"]) for e in episodes] == [5, 6]


def test_the_h5_buffered_storer_splits_long_episodes(tmp_path):
    from memmap_replay import ReplayBufferH5PY

    buffer = ReplayBufferH5PY(tmp_path / "h5", 8, 3, fields=FIELDS, meta_fields=dict(task="int"), long_episodes="split")
    storer = buffer.get_buffered_storer(flush_freq=2)
    storer(obs=np.arange(5.0), reward=np.ones(5), task=1)
    assert buffer.num_episodes == 0  # kept until flush_freq episodes (not segments) wait
    storer(obs=np.arange(2.0), reward=np.ones(2), task=2)
    assert list(buffer.episode_lens[:3]) == [3, 2, 2]
    episodes = buffer.episodes(join_segments=True)
    assert [e["obs"].tolist() for e in episodes] == [[*range(5)], [0.0, 1.0]]
    with pytest.raises(InvalidDataError, match=r"between 1 and max_timesteps=3 steps \(got 5\)"):
        ReplayBufferH5PY(tmp_path / "plain", 8, 3, fields=FIELDS).get_buffered_storer(1)(obs=np.arange(5.0))
