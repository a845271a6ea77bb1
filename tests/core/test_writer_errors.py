"""The error catalogue for ``core/writer.py``, the episode writers: unknown field and meta field names on
every write path, a failed step inside an open episode, episodes longer than max_timesteps, the vector
writer's ``num_envs`` and flags, ``end=`` values.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, OptionError

from catalogue import (ERRORS_FIELDS as FIELDS, ERRORS_MAX_TIMESTEPS as MAX_TIMESTEPS, raises, good_step,
                       good_steps, good_episode, good_batch, committed, assert_same, assert_episode,
                       assert_unchanged, assert_no_open_episode, stack)


# ---- unknown fields ----------------------------------------------------------------------------------


def in_one_episode(b, action):
    with b.one_episode():
        b.store(**good_step(5, 0))
        action()


def in_batched_episode(b, action):
    with b.batched_episode(2):
        b.store_batch(**good_batch([5, 6], 0))
        action()


UNKNOWN_FIELD_WRITES = {
    "store": lambda b: in_one_episode(b, lambda: b.store(**good_step(5, 1), bogus=1.0)),
    "store-unknown-first": lambda b: in_one_episode(b, lambda: b.store(bogus=1.0, **good_step(5, 1))),
    "store_episode": lambda b: b.store_episode(**good_steps(5, range(2)), bogus=np.zeros(2)),
    "store_batch": lambda b: in_batched_episode(b, lambda: b.store_batch(**good_batch([5, 6], 1), bogus=np.zeros(2))),
    "vector_writer.store": lambda b: b.vector_writer(2).store(**good_batch([5, 6], 0), bogus=np.zeros(2),
                                                              truncated=[True, True]),
    "update": lambda b: b.update([0, 1], bogus=1.0),
    "set_end-final": lambda b: in_one_episode(b, lambda: b.set_episode_end("truncated", final=dict(bogus=1.0))),
    "vector-final": lambda b: b.vector_writer(2).store(**good_batch([5, 6], 0), final=dict(bogus=np.zeros(2)),
                                                       truncated=[True, True]),
}


@pytest.mark.parametrize("write", UNKNOWN_FIELD_WRITES.values(), ids=UNKNOWN_FIELD_WRITES.keys())
def test_unknown_field_is_refused_and_named(buffer, write):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown (meta )?field.*'bogus'") as info:
        write(buffer)
    assert "obs" in str(info.value) or "task" in str(info.value)  # it lists what the store has
    assert_unchanged(buffer, before)


def set_episode_meta_inside(b):
    with b.one_episode() as episode:
        b.store(**good_step(5, 0))
        episode["bogus"] = 1


UNKNOWN_META_WRITES = {
    "one_episode": lambda b: b.one_episode(bogus=1).__enter__(),
    "begin_episode": lambda b: b.begin_episode(bogus=1),
    "store_episode": lambda b: b.store_episode(**good_episode(5, 2), bogus=1),
    "batched_episode": lambda b: b.batched_episode(2, bogus=1).__enter__(),
    "vector_writer": lambda b: b.vector_writer(2, bogus=1),
    "vector_writer.set_meta": lambda b: b.vector_writer(2).set_meta(bogus=1),
    "episode-dict": set_episode_meta_inside,
}


@pytest.mark.parametrize("write", UNKNOWN_META_WRITES.values(), ids=UNKNOWN_META_WRITES.keys())
def test_unknown_meta_field_is_refused_and_named(buffer, write):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown (meta )?field \['bogus'\]: the store's .*meta fields (are "
                                        r")?\['task', 'weight'\]"):
        write(buffer)
    # no episode was left open by the failed call
    assert_no_open_episode(buffer)
    assert_unchanged(buffer, before)


def test_store_episode_typo_in_step_field_lists_the_step_fields(buffer):
    arrays = good_episode(5, 2)
    arrays["rewrd"] = arrays.pop("reward")
    before = committed(buffer)
    with raises(InvalidDataError, match=r"'rewrd'.*'reward'"):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


# ---- a failed step inside an open episode ------------------------------------------------------------

BAD_STEPS = [
    pytest.param(dict(bogus=1.0), id="unknown-field"),
    pytest.param(dict(image=np.zeros((64, 64, 3), np.uint8)), id="wrong-shape"),
    pytest.param(dict(count=2.5), id="lossy"),
    pytest.param(dict(image=np.full((3, 64, 64), 300)), id="out-of-range"),
    pytest.param(dict(small=float("nan")), id="nan-into-int"),
    pytest.param(dict(reward=None), id="None"),
    pytest.param(dict(obs=torch.zeros(3, dtype=torch.bfloat16)), id="bfloat16"),
]

BAD_STEP_MATCH = r"'(bogus|image|count|small|reward|obs)'"


def bad_step(t, bad):
    """Good values for every field first (so a partial write would show), the bad one last."""
    step = good_step(5, t)
    for name in bad:
        step.pop(name, None)
    step.update(bad)
    return step


@pytest.mark.parametrize("bad", BAD_STEPS)
@pytest.mark.parametrize("opener", ["one_episode", "begin_episode"])
def test_failed_step_is_not_stored_and_the_episode_continues(buffer, bad, opener):
    before = committed(buffer)

    def steps():
        buffer.store(**good_step(5, 0))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            buffer.store(**bad_step(1, bad))
        buffer.store(**good_step(5, 1))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            buffer.store(**bad_step(2, bad))  # the last call before the commit fails: no trace either

    if opener == "one_episode":
        with buffer.one_episode(task=5, weight=1.25):
            steps()
    else:
        buffer.begin_episode(task=5, weight=1.25)
        steps()
        buffer.end_episode()
    episodes, _ = committed(buffer)
    assert len(episodes) == 3
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert episodes[2]["task"] == 5 and episodes[2]["weight"] == 1.25


@pytest.mark.parametrize("bad", BAD_STEPS)
@pytest.mark.parametrize("writer", ["batched_episode", "vector_writer"])
def test_failed_batch_step_is_not_stored_and_the_episodes_continue(buffer, bad, writer):
    before = committed(buffer)

    def bad_batch(t):
        batch = good_batch([5, 6], t)
        for name, value in bad.items():
            batch.pop(name, None)
            batch[name] = stack(value, 2)
        return batch

    def steps(store):
        store(**good_batch([5, 6], 0))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            store(**bad_batch(1))
        store(**good_batch([5, 6], 1))
        with raises(InvalidDataError, match=BAD_STEP_MATCH):
            store(**bad_batch(2), truncated=[True, True])

    if writer == "batched_episode":
        with buffer.batched_episode(2):
            steps(buffer.store_batch)
    else:
        vector = buffer.vector_writer(2)
        steps(vector.store)
        assert vector.lengths.tolist() == [2, 2]
        vector.commit_all()
    episodes, _ = committed(buffer)
    assert len(episodes) == 4
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert_episode(episodes[3], 6, range(2))

def test_step_that_leaves_out_fields_takes_their_defaults_after_a_failed_step(buffer):
    with buffer.one_episode():
        with raises(InvalidDataError, match=r"'count' has dtype int64 and cannot hold 2\.5"):
            buffer.store(**{**good_step(5, 0), "count": 2.5})  # every other field reached the staging row
        buffer.store(obs=np.ones(3), reward=1.0)
    last = committed(buffer)[0][-1]
    assert last["length"] == 1 and last["count"].tolist() == [0] and last["small"].tolist() == [0]
    assert last["image"].max() == 0 and last["obs"].tolist() == [[1.0, 1.0, 1.0]]

# ---- too-long episodes, inconsistent arrays, the vector writer's num_envs and flags ------------------


def test_step_beyond_max_timesteps_is_refused_and_the_episode_keeps_its_steps(buffer):
    before = committed(buffer)
    with buffer.one_episode():
        for t in range(MAX_TIMESTEPS):
            buffer.store(**good_step(5, t))
        with raises(InvalidDataError, match=r"the episode must have at most max_timesteps=10 steps \(got one "
                                            r"more\).*larger max_timesteps"):
            buffer.store(**good_step(5, MAX_TIMESTEPS))
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(MAX_TIMESTEPS))


@pytest.mark.parametrize("length", [MAX_TIMESTEPS + 1, 0])
def test_store_episode_length_out_of_bounds(buffer, length):
    before = committed(buffer)
    arrays = good_episode(5, max(length, 1))
    if length == 0:
        arrays = {name: value[:0] if name in FIELDS else value for name, value in arrays.items()}
    with raises(InvalidDataError, match=rf"an episode must have between 1 and max_timesteps=10 steps \(got {length}\)"):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("arrays, match", [
    pytest.param(dict(obs=np.zeros(3)), r"field 'obs' in store_episode must have shape \(T, \*\(3,\)\) with a "
                                        r"time axis \(got \(3,\)\)", id="no-time-axis"),
    pytest.param(dict(obs=1.0), r"field 'obs' in store_episode must have shape \(T, \*\(3,\)\)", id="scalar"),
    pytest.param({**good_steps(5, range(3)), "reward": np.zeros(2)}, r"field 'reward' must have shape "
                                                                     r"\(3,\) \(got \(2,\)\)", id="lengths-differ"),
    pytest.param(dict(task=1), r"store_episode needs at least one step field", id="meta-only"),
])
def test_store_episode_with_inconsistent_arrays(buffer, arrays, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        buffer.store_episode(**arrays)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("writer", ["batched_episode", "vector_writer"])
def test_batch_step_beyond_max_timesteps(buffer, writer):
    before = committed(buffer)

    def steps(store):
        for t in range(MAX_TIMESTEPS):
            store(**good_batch([5, 6], t))
        with raises(InvalidDataError,
                    match=r"env 0's episode must have at most max_timesteps=10 steps \(got one more\)"):
            store(**good_batch([5, 6], MAX_TIMESTEPS), truncated=[True, True])

    if writer == "batched_episode":
        with buffer.batched_episode(2):
            steps(buffer.store_batch)
    else:
        vector = buffer.vector_writer(2)
        steps(vector.store)
        assert vector.lengths.tolist() == [MAX_TIMESTEPS] * 2
        vector.commit_all("truncated")
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(MAX_TIMESTEPS))
    assert_episode(episodes[3], 6, range(MAX_TIMESTEPS))


@pytest.mark.parametrize("num_envs", [0, -1, 1.5, True, "2"])
def test_vector_writer_bad_num_envs(buffer, num_envs):
    with raises(OptionError, match=rf"num_envs must be a positive int \(got {re.escape(repr(num_envs))}\)"):
        buffer.vector_writer(num_envs)
    with raises(OptionError, match=r"num_envs must be a positive int"):
        buffer.batched_episode(num_envs).__enter__()


@pytest.mark.parametrize("flags, match", [
    pytest.param(dict(terminated=[2, 0]), r"flag 'terminated' has dtype bool and holds only 0/1", id="flag-2"),
    pytest.param(dict(truncated=True), r"flag 'truncated' must have shape \(2,\) \(got \(\)\)", id="flag-scalar"),
    pytest.param(dict(terminated=[True, False, True]), r"flag 'terminated' must have shape \(2,\) \(got \(3,\)\)",
                 id="flag-too-many"),
])
def test_vector_writer_bad_flags(buffer, flags, match):
    before = committed(buffer)
    writer = buffer.vector_writer(2)
    with raises(InvalidDataError, match=match):
        writer.store(**good_batch([5, 6], 0), **flags)
    assert writer.lengths.tolist() == [0, 0]
    assert_unchanged(buffer, before)


# ---- end= values -------------------------------------------------------------------------------------

BAD_ENDS = ["done", True, 1, "Terminated", ""]


@pytest.mark.parametrize("end", BAD_ENDS)
def test_store_episode_bad_end(buffer, end):
    before = committed(buffer)
    with raises(OptionError, match=rf"end must be 'terminated', 'truncated' or None \(got {re.escape(repr(end))}\)"):
        buffer.store_episode(**good_episode(5, 2), end=end)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("end", BAD_ENDS)
@pytest.mark.parametrize("how", ["set_episode_end", "episode.set_end"])
def test_bad_end_inside_an_episode_leaves_it_open(buffer, end, how):
    before = committed(buffer)
    with buffer.one_episode() as episode:
        buffer.store(**good_step(5, 0))
        setter = buffer.set_episode_end if how == "set_episode_end" else episode.set_end
        with raises(OptionError, match=r"end must be 'terminated', 'truncated' or None"):
            setter(end)
        buffer.store(**good_step(5, 1))
    episodes, _ = committed(buffer)
    assert_same((episodes[:2], b""), (before[0], b""))
    assert_episode(episodes[2], 5, range(2))
    assert episodes[2]["end"] == 0 and not episodes[2]["final"]


# end= is an option (OptionError); final= holds the data written (InvalidDataError)
@pytest.mark.parametrize("call, error", [
    pytest.param(lambda b: b.advance_episode(end="done"), OptionError, id="advance_episode-bad-end"),
    pytest.param(lambda b: b.end_episode(end="done"), OptionError, id="end_episode-bad-end"),
    pytest.param(lambda b: b.end_episode(end="truncated", final=dict(bogus=1.0)), InvalidDataError,
                 id="end_episode-bad-final"),
    pytest.param(lambda b: b.advance_episode(end="truncated", final=dict(obs=np.zeros(4))), InvalidDataError,
                 id="advance_episode-bad-final"),
])
def test_bad_end_or_final_when_ending_keeps_the_episode_open(buffer, call, error):
    buffer.begin_episode()
    buffer.store(**good_step(5, 0))
    with raises(error, match=r"(end must be|'bogus'|'obs')"):
        call(buffer)
    buffer.store(**good_step(5, 1))
    buffer.end_episode()
    assert_episode(committed(buffer)[0][-1], 5, range(2))


def test_failed_set_end_changes_nothing(buffer):
    with buffer.one_episode() as episode:
        buffer.store(**good_step(5, 0))
        with raises(InvalidDataError, match=r"unknown field \['bogus'\]"):
            episode.set_end("terminated", final=dict(bogus=1.0))
    last = committed(buffer)[0][-1]
    assert last["end"] == 0 and not last["final"]

def test_vector_commit_all_bad_end_keeps_the_episodes(buffer):
    writer = buffer.vector_writer(2)
    writer.store(**good_batch([5, 6], 0))
    before = committed(buffer)
    with raises(OptionError, match=r"end must be 'terminated', 'truncated' or None \(got 'done'\)"):
        writer.commit_all("done")
    assert writer.lengths.tolist() == [1, 1]
    assert_same(before, committed(buffer))
    writer.commit_all("truncated")
    episodes, _ = committed(buffer)
    assert [episode["end"] for episode in episodes[2:]] == [2, 2]
