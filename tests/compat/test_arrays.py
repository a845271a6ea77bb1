"""``buffer.data`` / ``buffer.meta_data`` (``compat/arrays.py``): 0.2.3's per-field arrays read by
(episode slot, step), checked against a dense model of them built from the stored episodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmap_replay import IndexRangeError, IndexTypeError, ReadOnlyError, ReplayBuffer

FIELDS = dict(state=("float", (2,), -1.0), action="int")
META = dict(task=("int", (), 9))
MAX_EPISODES, MAX_TIMESTEPS = 4, 5


def dense(buffer, name, meta=False):
    """The 0.2.3 array of a field: defaults everywhere, the live episodes at their slots."""
    spec = (buffer.schema.meta_fields if meta else buffer.schema.fields)[name]
    shape = (MAX_EPISODES,) + (() if meta else (MAX_TIMESTEPS,)) + spec.shape
    out = np.empty(shape, spec.dtype)
    out[...] = spec.default_row()
    for episode in buffer.episodes():
        if meta:
            out[episode.slot] = episode.meta[name]
        else:
            out[episode.slot, : len(episode)] = episode[name]
    return out


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """A ring of 4 slots after 6 episodes: slots 0 and 1 hold the newest two, slot 3 a 5-step one."""
    buffer = ReplayBuffer(tmp_path_factory.mktemp("ring") / "s", MAX_EPISODES, MAX_TIMESTEPS, FIELDS, META,
                          circular=True)
    rng = np.random.default_rng(3)
    for number, length in enumerate((2, 3, 1, 5, 4, 2)):
        buffer.store_episode(state=rng.standard_normal((length, 2)), action=np.arange(length) + 10 * number,
                             task=number)
    yield buffer
    buffer.close()


def test_shapes_and_dtypes_are_0_2_3_s(ring):
    assert ring.data["state"].shape == (4, 5, 2) and ring.data["state"].dtype == np.float32
    assert ring.data["action"].ndim == 2 and len(ring.data["action"]) == 4
    assert ring.meta_data["task"].shape == (4,)
    assert list(ring.data) == ["state", "action"] and list(ring.meta_data) == ["task", "episode_lens"]


@pytest.mark.parametrize("key", [
    0, 3, -1, (1, 2), (3, slice(None, 4)), slice(1, 3), (slice(None), 0), np.array([3, 0]), [2, 2, 1],
    ([0, 3], [1, 4]), (slice(None, None, -1), slice(1, None, 2)), (Ellipsis, 0), (0, Ellipsis),
    np.array([True, False, False, True]), (np.int64(3), np.int32(4)),
], ids=repr)
def test_reads_equal_the_dense_array(ring, key):
    for name in ring.data:
        np.testing.assert_array_equal(ring.data[name][key], dense(ring, name)[key], err_msg=f"{name}[{key!r}]")


@settings(max_examples=40, deadline=None)
@given(slot=st.integers(-4, 3), start=st.one_of(st.none(), st.integers(-6, 6)),
       stop=st.one_of(st.none(), st.integers(-6, 6)), step=st.sampled_from([None, 1, 2, -1, -2]))
def test_any_slot_and_step_slice_equals_the_dense_array(ring, slot, start, stop, step):
    key = (slot, slice(start, stop, step))
    np.testing.assert_array_equal(ring.data["state"][key], dense(ring, "state")[key])


def test_meta_data_and_episode_lens_by_slot(ring):
    np.testing.assert_array_equal(ring.meta_data["task"][:], dense(ring, "task", meta=True))
    assert ring.meta_data["task"][:].tolist() == [4, 5, 2, 3]
    assert ring.meta_data["episode_lens"][:].tolist() == ring.episode_lens.tolist() == [4, 2, 1, 5]
    np.testing.assert_array_equal(np.asarray(ring.meta_data["task"]), dense(ring, "task", meta=True))


def test_asarray_is_the_whole_dense_array(ring):
    np.testing.assert_array_equal(np.asarray(ring.data["state"]), dense(ring, "state"))
    assert np.asarray(ring.data["action"], dtype=np.float64).dtype == np.float64


def test_slots_without_an_episode_read_as_the_default(tmp_path):
    with ReplayBuffer(tmp_path / "s", MAX_EPISODES, MAX_TIMESTEPS, FIELDS, META) as buffer:
        buffer.store_episode(action=[1, 2])
        assert buffer.data["state"][2].tolist() == [[-1.0, -1.0]] * 5
        assert buffer.data["action"][0].tolist() == [1, 2, 0, 0, 0]
        assert buffer.meta_data["task"][:].tolist() == [9, 9, 9, 9]


def test_the_open_episode_shows_at_the_slot_it_will_take(tmp_path):
    with ReplayBuffer(tmp_path / "s", MAX_EPISODES, MAX_TIMESTEPS, FIELDS, META) as buffer:
        buffer.store_episode(action=[1, 2])
        buffer.store(action=7)
        buffer.store_meta_datapoint(1, "task", 4)
        assert buffer.data["action"][1].tolist() == [7, 0, 0, 0, 0] and buffer.meta_data["task"][1] == 4
        assert buffer.meta_data["episode_lens"][:].tolist() == [2, 0, 0, 0]  # committed episodes only
        buffer.advance_episode()
        with buffer.batched_episode(2, task=[5, 6]):
            buffer.store_batch(action=[8, 9])
            assert buffer.data["action"][2:, 0].tolist() == [8, 9]
            assert buffer.meta_data["task"][2:].tolist() == [5, 6]


@pytest.mark.parametrize("where", ["data", "meta_data"])
def test_writes_are_refused_and_point_to_update(ring, where):
    name = "state" if where == "data" else "task"
    with pytest.raises(ReadOnlyError, match=rf"buffer.{where}\['{name}'\] is a read-only view.*buffer.update\(slots"):
        getattr(ring, where)[name][0] = 1
    with pytest.raises(ReadOnlyError, match=rf"buffer.{where}\['{name}'\] is a read-only view"):
        getattr(ring, where)[name] = np.zeros(3)


def test_unknown_names_and_bad_indices(ring):
    with pytest.raises(KeyError,
                       match=r"'stat' is not a step field of the store; its fields are \['action', 'state'\]"):
        ring.data["stat"]
    with pytest.raises(KeyError, match=r"'state' is not a meta field"):
        ring.meta_data["state"]
    assert "state" in ring.data and "task" not in ring.data and ring.data.get("nope") is None
    with pytest.raises(IndexRangeError, match=r"index 4 is out of bounds.*slots are 0..3, steps 0..4"):
        ring.data["state"][4]
    with pytest.raises(IndexRangeError, match=r"out of bounds"):
        ring.data["state"][0, 5]
    with pytest.raises(IndexTypeError, match=r"only integers"):
        ring.data["state"][0.5]
    assert ring.data["state"][1, 1, 0] == dense(ring, "state")[1, 1, 0]
    with pytest.raises(IndexTypeError, match=r"too many indices"):
        ring.data["action"][1, 1, 0]
    with pytest.raises(IndexTypeError, match=r"no new axes"):
        ring.data["state"][None]


def test_after_advance_episode_a_ring_slot_shows_its_episode_until_the_next_step(tmp_path):
    with ReplayBuffer(tmp_path / "s", 2, MAX_TIMESTEPS, FIELDS, META, circular=True) as buffer:
        for number in range(2):
            buffer.store(action=number)
            buffer.advance_episode()
        assert buffer.episode_index == 0 and buffer.data["action"][0, 0] == 0  # still the oldest episode
        buffer.store(action=5)
        assert buffer.data["action"][0, 0] == 5  # the open episode, as 0.2.3 shows it
