"""memmap-replay-buffer 0.2.3's ReplayBuffer methods (``compat/buffer_api.py``), from its documented
behaviour: the flat loop, store_batch outside batched_episode, single values by slot, timestep_index,
reset_, the constructor's 0.2.3 keywords, the image helpers and create_collector."""

from __future__ import annotations

import numpy as np
import pytest

import memmap_replay
from memmap_replay import (BufferFullError, EpisodeStateError, InvalidDataError, OptionError, ReadOnlyError,
                           ReplayBuffer, SchemaMismatchError, StoreNotFoundError, NotAFolderError)

FIELDS = dict(state=("float", (2,)), action="int", reward=("float", (), -1.0))
META = dict(task="int", score="float")


@pytest.fixture
def buf(tmp_path):
    buffer = ReplayBuffer(tmp_path / "store", max_episodes=5, max_timesteps=6, fields=FIELDS, meta_fields=META)
    yield buffer
    buffer.close()


def stored(buffer):
    """(lengths, reward rows, task values) of the live episodes, oldest first."""
    episodes = list(buffer.episodes())
    return [len(e) for e in episodes], [e["reward"].tolist() for e in episodes], [int(e.meta["task"]) for e in episodes]


# ---- the flat loop ---------------------------------------------------------------------------------------


def test_store_with_no_episode_open_starts_one_and_advance_episode_commits_it(buf):
    assert buf.is_new_episode and buf.timestep_index == 0
    for number, length in enumerate((3, 2)):
        for t in range(length):
            buf.store(state=[number, t], action=t, reward=10.0 * number + t)
            assert buf.timestep_index == t + 1 and not buf.is_new_episode
        assert buf.num_episodes == number and len(buf) == number  # committed only
        assert buf.advance_episode() == number
        assert buf.episode_index == number + 1 and buf.is_new_episode
    assert stored(buf) == ([3, 2], [[0.0, 1.0, 2.0], [10.0, 11.0]], [0, 0])


def test_meta_of_the_open_episode_goes_in_with_store_meta_datapoint(buf):
    buf.store(reward=1.0)
    buf.store_meta_datapoint(buf.episode_index, "task", 7)
    assert buf.meta_data["task"][buf.episode_index] == 7  # shown at the slot it will take
    buf.store(reward=2.0)
    buf.advance_episode(end="terminated")
    assert stored(buf)[2] == [7] and buf.ends.tolist() == ["terminated"]


def test_the_open_episode_is_in_ram_only(buf):
    buf.store(reward=1.0)
    reader = ReplayBuffer.from_folder(buf.folder, read_only=True)
    assert reader.num_episodes == 0
    buf.advance_episode()
    reader.refresh()
    assert reader.num_episodes == 1
    reader.close()


def test_close_discards_the_open_episode(tmp_path):
    buffer = ReplayBuffer(tmp_path / "s", max_episodes=5, max_timesteps=6, fields=FIELDS)
    buffer.store(reward=1.0)
    buffer.advance_episode()
    buffer.store(reward=2.0)
    buffer.close()
    with ReplayBuffer.from_folder(tmp_path / "s") as again:
        assert again.num_episodes == 1 and again.episode_lens.tolist() == [1, 0, 0, 0, 0]


def test_advance_episode_with_nothing_stored_stores_nothing(buf):
    assert buf.advance_episode() is None and buf.advance_episode(3) is None
    buf.store(reward=1.0)
    buf.advance_episode()
    assert buf.advance_episode() is None and buf.advance_episode(batch_size=2) is None and buf.num_episodes == 1
    buf.store_meta_datapoint(buf.episode_index, "task", 4)  # given before the first step: kept for the episode
    assert buf.advance_episode() is None
    buf.store(reward=2.0)
    buf.advance_episode()
    assert stored(buf)[2] == [0, 4]


def test_after_advance_episode_the_other_calls_work_as_when_idle(buf):
    buf.store(reward=1.0)
    buf.advance_episode()
    buf.update(0, reward=5.0)  # the next episode is not open until something is written to it
    with buf.one_episode(task=3):
        buf.store(reward=2.0)
    buf.store_episode(reward=np.zeros(2))
    assert stored(buf) == ([1, 1, 2], [[5.0], [2.0], [0.0, 0.0]], [0, 3, 0])


def test_a_flat_episode_with_steps_must_be_advanced_before_another_kind_of_write(buf):
    buf.store(reward=1.0)
    with pytest.raises(EpisodeStateError, match=r"cannot begin an episode while an episode is open.*advance_episode"):
        buf.begin_episode()
    with pytest.raises(EpisodeStateError, match=r"cannot store_batch outside batched_episode while an episode is open"):
        buf.store_batch(reward=np.ones(2))
    buf.advance_episode()
    assert buf.num_episodes == 1


@pytest.mark.parametrize("open_flat, width", [(lambda b: b.store(reward=3.0), 1),
                                               (lambda b: b.store_batch(reward=np.ones(2)), 2)],
                         ids=["store", "store_batch"])
def test_update_of_stored_episodes_while_the_flat_loop_has_one_open(buf, open_flat, width):
    buf.store_episode(reward=np.arange(3.0))
    open_flat(buf)
    buf.update(reward=np.full((1, 3), 7.0))  # every stored episode; the open one is left as it is
    assert stored(buf)[1] == [[7.0, 7.0, 7.0]] and buf.timestep_index == 1
    buf.advance_episode(batch_size=width)
    with pytest.raises(EpisodeStateError, match=r"cannot update while an episode is open"):
        with buf.one_episode():
            buf.update(0, reward=1.0)


def test_end_episode_commits_a_flat_episode_too(buf):
    buf.store(reward=1.0)
    assert buf.end_episode(end="truncated") == 0
    with pytest.raises(EpisodeStateError, match=r"no episode is open"):
        buf.end_episode()


@pytest.mark.parametrize("batch_size", [2, 5])
def test_advance_episode_of_a_store_episode_takes_batch_size_one(buf, batch_size):
    buf.store(reward=1.0)
    with pytest.raises(OptionError,
                       match=rf"batch_size must be 1 for the episode store\(\) wrote \(got {batch_size}\)"):
        buf.advance_episode(batch_size)
    assert buf.advance_episode(1) == 0


def test_batch_size_given_twice_is_refused(buf):
    buf.store(reward=1.0)
    with pytest.raises(OptionError, match=r"batch_size given twice"):
        buf.advance_episode(1, batch_size=1)


# ---- timestep_index and episode_index --------------------------------------------------------------------


def test_timestep_index_rewinds_or_extends_the_open_episode_with_defaults(buf):
    for t in range(4):
        buf.store(reward=float(t))
    buf.timestep_index = 2
    buf.store(reward=9.0)
    buf.timestep_index = 5
    buf.advance_episode()
    assert stored(buf)[1] == [[0.0, 1.0, 9.0, -1.0, -1.0]]


def test_timestep_index_set_before_the_first_step(buf):
    buf.timestep_index = 2
    assert buf.timestep_index == 2 and not buf.is_new_episode
    buf.store(reward=5.0)
    buf.advance_episode()
    assert stored(buf)[1] == [[-1.0, -1.0, 5.0]]


@pytest.mark.parametrize("value", [-1, 7, 1.5, "2"])
def test_timestep_index_out_of_range_is_refused(buf, value):
    with pytest.raises(OptionError, match=r"timestep_index must be (an int|at most 6)"):
        buf.timestep_index = value


def test_episode_index_cannot_be_set(buf):
    with pytest.raises(EpisodeStateError, match=r"episode_index cannot be set \(got 3\).*update\(slot"):
        buf.episode_index = 3


# ---- store_batch outside batched_episode (0.2.3's flat batch) --------------------------------------------


def test_store_batch_then_advance_episode_batch_size(buf):
    buf.store_meta_batch(task=[1, 2, 3])
    for t in range(2):
        buf.store_batch(reward=np.arange(3) + 10.0 * t, action=[t, t, t])
    assert buf.timestep_index == 2 and buf.num_episodes == 0
    assert buf.advance_episode(batch_size=3) == [0, 1, 2]
    assert stored(buf) == ([2, 2, 2], [[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]], [1, 2, 3])
    assert buf.is_new_episode and buf.episode_index == 3


def test_a_batch_wider_than_the_room_left_stores_batch_size_episodes(buf):
    buf.store_batch(reward=np.zeros(3))
    buf.advance_episode(3)
    buf.store_batch(reward=np.ones(4))  # 0.2.3: two slots left, the batch is cut to them
    assert buf.advance_episode(2) == [3, 4]
    with pytest.raises(BufferFullError, match=r"all 5 episode slots are used"):
        buf.store_batch(reward=np.ones(1))


def test_batch_size_beyond_the_episode_slots_is_refused(buf):
    buf.store_batch(reward=np.zeros(2))
    with pytest.raises(OptionError, match=r"batch_size must be at most 5 \(got 6\)"):
        buf.advance_episode(6)
    assert buf.advance_episode(2) == [0, 1]


def test_advance_episode_without_batch_size_after_a_batch_is_refused(buf):
    buf.store_batch(reward=np.zeros(3))
    with pytest.raises(OptionError, match=r"needs batch_size=3"):
        buf.advance_episode()
    assert buf.advance_episode(batch_size=3) == [0, 1, 2]


def test_episodes_of_the_batch_not_written_to_hold_defaults(buf):
    buf.store_meta_batch(task=[1, 2, 3])
    buf.store_batch(reward=np.array([4.0, 5.0]))
    buf.advance_episode(batch_size=3)
    assert stored(buf) == ([1, 1, 1], [[4.0], [5.0], [-1.0]], [1, 2, 3])


def test_a_batch_with_only_meta_values_stores_nothing(buf):
    buf.store_meta_batch(task=[1, 2, 3])
    assert buf.advance_episode(batch_size=3) == [] and buf.num_episodes == 0


def test_timestep_index_set_before_store_batch(buf):
    buf.timestep_index = 2
    buf.store_batch(reward=np.zeros(2))
    buf.advance_episode(2)
    assert stored(buf)[1] == [[-1.0, -1.0, 0.0]] * 2


@pytest.mark.parametrize("call, error, match", [
    (lambda b: b.store_batch(), InvalidDataError, r"store_batch needs at least one field"),
    (lambda b: b.store_meta_batch(), InvalidDataError, r"store_meta_batch needs at least one meta field"),
    (lambda b: b.store_batch(reward=np.ones(3), action=np.ones(2)), InvalidDataError,
     r"same batch size: field 'action' has 2, the ones before 3"),
    (lambda b: b.store_batch(bogus=np.ones(3)), InvalidDataError, r"unknown field \['bogus'\]"),
    (lambda b: b.store_meta_batch(bogus=np.ones(3)), InvalidDataError, r"unknown meta field \['bogus'\]"),
    (lambda b: b.store_batch(reward=1.0), InvalidDataError, r"field 'reward' in store_batch must have "
                                                            r"a leading batch axis"),
    (lambda b: b.store_batch(state=np.ones((2, 3))), InvalidDataError, r"field 'state' must have shape"),
])
def test_bad_store_batch_is_refused_and_leaves_no_batch_open(buf, call, error, match):
    with pytest.raises(error, match=match):
        call(buf)
    buf.clear()  # no phantom batch blocks clear(), one_episode or store()
    with buf.one_episode(task=1):
        buf.store(reward=1.0)
    buf.store(reward=2.0)
    buf.advance_episode()
    assert stored(buf) == ([1, 1], [[1.0], [2.0]], [1, 0])


@pytest.mark.parametrize("value", [2.5, np.float32(1.0), [2]])
def test_advance_episode_with_a_value_neither_end_nor_batch_size_names_both(buf, value):
    buf.store(reward=1.0)
    with pytest.raises(OptionError, match=r"advance_episode takes end='terminated', 'truncated' or None, or "
                       r"batch_size, an int >= 1 \(0\.2\.3's advance_episode\(batch_size\)\) \(got "):
        buf.advance_episode(value)
    assert buf.timestep_index == 1 and buf.advance_episode() == 0


def test_store_meta_batch_of_one_then_store_writes_that_episode_as_0_2_3(buf):
    buf.store_meta_batch(task=[3], score=[0.5])
    for t in range(2):
        buf.store(reward=float(t))
    assert buf.advance_episode() == 0
    assert stored(buf) == ([2], [[0.0, 1.0]], [3]) and float(next(iter(buf.episodes())).meta["score"]) == 0.5
    buf.store_meta_batch(task=[1, 2])  # several episodes: their own loop (store_batch) writes them
    with pytest.raises(EpisodeStateError, match=r"store\(\) cannot start an episode while store_batch's episodes"):
        buf.store(reward=1.0)


def test_store_batch_past_max_timesteps_is_refused(buf):
    for _ in range(6):
        buf.store_batch(reward=np.zeros(2))
    with pytest.raises(InvalidDataError, match=r"at most max_timesteps=6 steps"):
        buf.store_batch(reward=np.zeros(2))
    assert buf.advance_episode(2) == [0, 1]


def test_store_while_a_batch_is_open_is_refused(buf):
    buf.store_batch(reward=np.zeros(2))
    with pytest.raises(EpisodeStateError, match=r"store\(\) cannot start an episode while "
                                                r"store_batch's episodes are open"):
        buf.store(reward=1.0)


def test_a_full_store_refuses_the_commit_and_keeps_the_batch_for_a_grow(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=3, max_timesteps=4, fields=FIELDS, meta_fields=META) as buffer:
        buffer.store_episode(reward=np.zeros(1))
        buffer.store_batch(reward=np.full(3, 2.0))
        with pytest.raises(BufferFullError, match=r"buffer is full.*grow.*The open episodes \(3 of 1 steps\) are "
                           r"kept: after growing the buffer, advance_episode\(3\) stores them"):
            buffer.advance_episode(3)
        assert buffer.num_episodes == 1 and buffer.timestep_index == 1  # as 0.2.3: their steps are still there
        buffer.grow(max_episodes=4)
        assert buffer.advance_episode(3) == [1, 2, 3] and stored(buffer)[1] == [[0.0], [2.0], [2.0], [2.0]]


def test_a_full_store_keeps_the_flat_episode_for_a_grow(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=1, max_timesteps=5, fields=FIELDS, meta_fields=META) as buffer:
        buffer.store(reward=1.0)
        buffer.advance_episode()
        for t in range(3):
            buffer.store(reward=float(t))
        with pytest.raises(BufferFullError, match=r"buffer is full.*The open episode \(3 steps\) is kept: after "
                           r"growing the buffer, advance_episode\(\) stores it"):
            buffer.advance_episode()
        assert buffer.timestep_index == 3 and buffer.num_episodes == 1
        buffer.grow(max_episodes=3)
        assert buffer.advance_episode() == 1 and stored(buffer)[1] == [[1.0], [0.0, 1.0, 2.0]]
        with buffer.one_episode():  # any other open episode must still end before a grow
            buffer.store(reward=1.0)
            with pytest.raises(EpisodeStateError, match="cannot grow the store while an episode is open"):
                buffer.grow(max_episodes=4)


# ---- single values by slot --------------------------------------------------------------------------------


def test_store_datapoint_rewrites_a_stored_step_in_place(buf):
    buf.store_episode(reward=np.arange(3.0), task=4)
    buf.store_datapoint(0, 1, "reward", 9.0)
    buf.store_meta_datapoint(0, "score", 2.5)
    buf.store_batch_datapoint(np.array([0]), 2, "state", np.array([[7.0, 8.0]]))
    buf.store_batch_meta_datapoint([0], "task", [6])
    episode = buf.episode(0)
    assert episode["reward"].tolist() == [0.0, 9.0, 2.0] and episode["state"][2].tolist() == [7.0, 8.0]
    assert episode.meta["score"] == 2.5 and episode.meta["task"] == 6


def test_store_meta_datapoint_after_the_episode_keeps_its_steps(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=1, max_timesteps=10, fields=FIELDS, meta_fields=META,
                      circular=True) as buffer:
        with buffer.one_episode():
            for _ in range(5):
                buffer.store(reward=1.0)
        buffer.store_meta_datapoint(0, "score", 5.0)
        assert stored(buffer)[1] == [[1.0] * 5] and buffer.meta_data["score"][0] == 5.0


def test_store_datapoint_into_the_open_episode(buf):
    buf.store(reward=1.0)
    buf.store(reward=2.0)
    buf.store_datapoint(buf.episode_index, 0, "reward", 5.0)
    buf.advance_episode()
    assert stored(buf)[1] == [[5.0, 2.0]]


def test_store_datapoint_into_a_flat_batch(buf):
    buf.store_batch(reward=np.zeros(2))
    buf.store_datapoint(1, 0, "reward", 3.0)
    buf.store_meta_datapoint(1, "task", 8)
    buf.advance_episode(2)
    assert stored(buf)[1:] == ([[0.0], [3.0]], [0, 8])


@pytest.mark.parametrize("call, error, match", [
    (lambda b: b.store_datapoint(3, 0, "reward", 1.0), OptionError, r"slot 3 holds no episode"),
    (lambda b: b.store_datapoint(0, 3, "reward", 1.0), OptionError,
     r"timestep_index 3 is out of range: it must be below the episode's 3 steps at slot 0"),
    (lambda b: b.store_datapoint(5, 0, "reward", 1.0), OptionError,
     r"episode_index 5 is out of range: it must be a slot in \[0, 5\)"),
    (lambda b: b.store_datapoint(-1, 0, "reward", 1.0), OptionError, r"episode_index -1 is out of range"),
    (lambda b: b.store_datapoint(0, 0, "rewrd", 1.0), InvalidDataError,
     r"unknown field 'rewrd'.*did you mean 'reward'"),
    (lambda b: b.store_meta_datapoint(0, "reward", 1.0), InvalidDataError, r"unknown meta field 'reward'"),
    (lambda b: b.store_datapoint(0, 0, "state", np.ones(3)), InvalidDataError, r"field 'state' must have shape"),
    (lambda b: b.store_batch_datapoint([0, 0], 0, "reward", [1.0]), InvalidDataError,
     r"one value per episode index \(2\)"),
])
def test_bad_single_values_are_refused_and_change_nothing(buf, call, error, match):
    buf.store_episode(reward=np.arange(3.0))
    with pytest.raises(error, match=match):
        call(buf)
    assert stored(buf)[1] == [[0.0, 1.0, 2.0]]


def test_single_values_on_a_read_only_buffer_are_refused(buf):
    buf.store_episode(reward=np.arange(3.0))
    with ReplayBuffer.from_folder(buf.folder, read_only=True) as reader:
        with pytest.raises(ReadOnlyError, match=r"cannot store_datapoint.*open it with read_only=False"):
            reader.store_datapoint(0, 0, "reward", 1.0)
        with pytest.raises(ReadOnlyError, match=r"cannot store: .* read-only"):
            reader.store(reward=1.0)
        with pytest.raises(ReadOnlyError, match=r"cannot store_batch"):
            reader.store_batch(reward=np.zeros(2))
        with pytest.raises(ReadOnlyError, match=r"cannot set timestep_index"):
            reader.timestep_index = 1
        with pytest.raises(ReadOnlyError, match=r"cannot reset_"):
            reader.reset_()
        assert reader.data["reward"][0, :3].tolist() == [0.0, 1.0, 2.0] and reader.timestep_index == 0


# ---- reset_ and the constructor ----------------------------------------------------------------------------


def test_reset_drops_every_episode_and_the_open_one(buf):
    buf.store_episode(reward=np.arange(3.0))
    buf.store(reward=1.0)
    buf.reset_()
    assert buf.num_episodes == 0 and buf.is_new_episode
    buf.store(reward=2.0)
    buf.advance_episode()
    assert stored(buf)[1] == [[2.0]]


@pytest.mark.parametrize("every", [0, 1, 100])
def test_flush_every_store_step_is_accepted(tmp_path, every):
    with ReplayBuffer(tmp_path / "s", 2, 3, FIELDS, flush_every_store_step=every) as buffer:
        buffer.store(reward=1.0)
        assert buffer.flush_every_store_step == every


def test_flush_every_store_step_below_zero_is_refused(tmp_path):
    with pytest.raises(OptionError, match=r"flush_every_store_step must be an int >= 0 \(got -1\)"):
        ReplayBuffer(tmp_path / "s", 2, 3, FIELDS, flush_every_store_step=-1)
    assert not (tmp_path / "s").exists()


def test_extra_config_is_refused_by_name(tmp_path):
    with pytest.raises(OptionError, match=r"unknown keyword \['env_name'\] for ReplayBuffer.*update_card"):
        ReplayBuffer(tmp_path / "s", 2, 3, FIELDS, env_name="Pong")
    with pytest.raises(OptionError, match=r"did you mean 'meta_fields'"):
        ReplayBuffer(tmp_path / "s", 2, 3, FIELDS, meta_field=META)


def test_reopening_with_the_0_2_3_default_keeps_the_data(tmp_path):
    with ReplayBuffer(tmp_path / "s", 5, 6, FIELDS) as buffer:  # 0.2.3's overwrite=True default wiped it
        buffer.store_episode(reward=np.arange(3.0))
    with ReplayBuffer(tmp_path / "s", 5, 6, FIELDS) as again:
        assert again.num_episodes == 1
    with ReplayBuffer(tmp_path / "s", 5, 6, FIELDS, overwrite=True) as wiped:
        assert wiped.num_episodes == 0


def test_reopening_with_another_config_names_it(tmp_path):
    ReplayBuffer(tmp_path / "s", 5, 6, FIELDS).close()
    with pytest.raises(SchemaMismatchError, match=r"created with a different config:\n  max_episodes: "
                                                  r"stored 5, asked for 9"):
        ReplayBuffer(tmp_path / "s", 9, 6, FIELDS)


def test_description_attributes(buf):
    assert buf.shapes == dict(state=(2,), action=(), reward=())
    assert buf.dtypes == dict(state=np.float32, action=np.int32, reward=np.float32)
    assert buf.defaults == dict(state=None, action=None, reward=-1.0)
    assert buf.meta_shapes == dict(task=(), score=()) and buf.meta_dtypes["score"] is np.float32
    assert buf.meta_defaults == dict(task=None, score=None)
    assert buf.memory_namedtuple._fields == ("state", "action", "reward")
    assert buf.internal_meta_fieldnames == {"episode_lens"} and buf.flush_every_store_step == 1


# ---- images ------------------------------------------------------------------------------------------------


@pytest.fixture
def images(tmp_path):
    fields = dict(action="int", frame=("uint8", (8, 8, 3)), depth=("float", (4, 4)))
    buffer = ReplayBuffer(tmp_path / "img", max_episodes=4, max_timesteps=5, fields=fields)
    rng = np.random.default_rng(7)
    for length in (3, 2):
        buffer.store_episode(frame=rng.integers(0, 256, (length, 8, 8, 3), dtype=np.uint8),
                             depth=rng.random((length, 4, 4)))
    yield buffer
    buffer.close()


def test_image_fields_in_declaration_order(images, buf):
    assert images.image_fields() == ["frame", "depth"]
    assert buf.image_fields() == []
    with pytest.raises(OptionError, match=r"field must be given: the store has several image-like fields .*: "
                                          r"\['frame', 'depth'\]"):
        images.default_image_field()
    with pytest.raises(OptionError, match=r"field must be given: the store has no image-like fields"):
        buf.default_image_field()


def test_episode_frames_by_slot(images):
    first, second = images.episode(0)["frame"], images.episode(1)["frame"]
    np.testing.assert_array_equal(images.episode_frames(1, field="frame"), second)
    np.testing.assert_array_equal(images.episode_frames([0, 1], field="frame"), np.concatenate([first, second]))
    with pytest.raises(OptionError, match=r"episode_index 2 is out of range: it holds no stored episode"):
        images.episode_frames(2, field="frame")
    with pytest.raises(OptionError, match=r"unknown field 'frames'"):
        images.episode_frames(0, field="frames")


def test_save_video_writes_the_slot_s_episode(images, tmp_path):
    pytest.importorskip("PIL")
    path = images.save_video(tmp_path / "ep.gif", episode_index=1, field="frame", fps=10)
    assert path == tmp_path / "ep.gif" and path.stat().st_size > 0
    from PIL import Image
    with Image.open(path) as gif:
        assert gif.n_frames == 2  # the episode at slot 1 has 2 steps


def test_create_collector(buf):
    if not hasattr(memmap_replay, "EpisodeCollector"):
        with pytest.raises(OptionError, match=r"create_collector needs memmap_replay.EpisodeCollector"):
            buf.create_collector(2)
        return
    collector = buf.create_collector(2)
    assert collector.num_groups == 2 and buf.create_rollout_collector(3).num_groups == 3


@pytest.mark.parametrize("open_it", [
    lambda folder: ReplayBuffer.from_folder(folder),
    lambda folder: ReplayBuffer(folder, 5, 6, FIELDS),
    lambda folder: ReplayBuffer(folder, 5, 6, FIELDS, overwrite=True),
], ids=["from_folder", "constructor", "overwrite"])
def test_a_folder_0_2_3_wrote_is_neither_opened_nor_built_over(tmp_path, open_it):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "metadata.pkl").write_bytes(b"never read")
    (folder / "state.data.npy").write_bytes(b"its arrays")
    with pytest.raises((StoreNotFoundError, NotAFolderError), match=r"memmap-replay-buffer 0\.2\.x "
                                                                    r".*`memmap-replay import"):
        open_it(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["metadata.pkl", "state.data.npy"]


def test_read_only_on_a_missing_or_empty_folder_creates_nothing(tmp_path):
    with pytest.raises(StoreNotFoundError, match=r"no store at"):
        ReplayBuffer(tmp_path / "missing", 5, 6, FIELDS, read_only=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"no store at"):
        ReplayBuffer.from_folder(tmp_path / "empty", read_only=True)
    assert not (tmp_path / "missing").exists() and not any((tmp_path / "empty").iterdir())


# ---- the layer: 0.2.3's ReplayBuffer is a subclass of the native one ----------------------------------------


def test_the_0_2_3_buffer_is_the_native_one_plus_its_methods():
    from memmap_replay.buffer import ReplayBuffer as Native

    assert ReplayBuffer is memmap_replay.compat.ReplayBuffer and issubclass(ReplayBuffer, Native)
    assert ReplayBuffer is not Native and memmap_replay.ReplayBufferH5PY.__mro__[1] is ReplayBuffer
    legacy = ("advance_episode", "store_datapoint", "store_meta_datapoint", "store_batch_datapoint",
              "store_batch_meta_datapoint", "timestep_index", "is_new_episode", "reset_", "data", "meta_data",
              "episode_index", "shapes", "meta_defaults", "memory_namedtuple", "image_fields", "episode_frames",
              "save_video", "create_collector", "flush_every_store_step")
    assert [name for name in legacy if not hasattr(ReplayBuffer, name)] == []
    assert [name for name in legacy if hasattr(Native, name)] == []


def test_the_0_2_3_constructor_takes_the_native_options_and_flush_every_store_step():
    import inspect

    from memmap_replay.buffer import ReplayBuffer as Native

    native = list(inspect.signature(Native).parameters.values())
    ours = list(inspect.signature(ReplayBuffer).parameters.values())
    assert ours[:-3] == native[:-1]  # every native option, in its place, with its default
    assert [(p.name, p.default) for p in ours[-3:]] == [("flush_every_store_step", 1), ("_store", None),
                                                          ("extra_config", inspect.Parameter.empty)]


def test_from_folder_gives_the_class_it_is_called_on(buf):
    from memmap_replay.buffer import ReplayBuffer as Native

    buf.store_episode(reward=np.arange(3.0), task=1)
    buf.close()
    with ReplayBuffer.from_folder(buf.folder) as again:
        assert type(again) is ReplayBuffer and again.data["reward"][0, :3].tolist() == [0.0, 1.0, 2.0]
    with Native.from_folder(buf.folder, read_only=True) as native:
        assert type(native) is Native and native.num_episodes == 1


@pytest.mark.parametrize("name", [[], {}, None, 3])
def test_store_datapoint_with_a_name_that_is_no_string_names_the_fields(buf, name):
    buf.store_episode(reward=np.arange(3.0), task=1)
    with pytest.raises(InvalidDataError, match=r"unknown field .*: the store's fields are \['action', 'reward', "):
        buf.store_datapoint(0, 0, name, 1.0)
    with pytest.raises(InvalidDataError, match=r"unknown meta field .*: the store's meta fields are "):
        buf.store_meta_datapoint(0, name, 1.0)


def test_removed_episodes_hold_their_slots_so_a_flat_batch_is_refused_at_once(buf):
    """Removed episodes keep their slots until evicted: a full flat store with some removed is still full."""
    for n in range(5):
        buf.store_episode(reward=np.full(2, float(n)), action=np.zeros(2))
    buf.delete_episodes([1, 3])
    assert buf.num_episodes == 3 and buf.meta_data["episode_lens"][:].tolist() == [2, 0, 2, 0, 2]
    with pytest.raises(BufferFullError, match=r"all 5 episode slots are used \(2 by removed episodes\)"):
        buf.store_batch(reward=np.ones(1))
    assert buf.timestep_index == 0  # (nothing was opened)
