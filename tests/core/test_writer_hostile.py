"""Hostile input at ``core/writer.py``, the episode writers: whole episodes, ``end=``, ``final=``, meta
values and the batched and vector writers.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

25. ``store_batch`` / vector writer values of any dtype and shape (generated)
28. ``store_episode`` with a time axis of 10**9 steps (a broadcast view: must not allocate)
29. ``store_episode`` with ragged time axes across fields (generated)
30. ``store_episode`` with one NaN / inf / fraction / out-of-range value at a random (t, ...) position (generated)
31. ``end=`` of any other value at every entry point: store_episode, set_episode_end, EpisodeMeta.set_end,
    end_episode, advance_episode, commit_all (generated)
32. ``end=`` given as a numpy array (fixed: bare TypeError)
33. ``final=`` that is not a mapping: int, str, list, array (fixed)
34. ``final=`` rows of the wrong shape (generated)
35. meta values of any type and shape for one_episode / begin_episode / batched_episode (generated)
36. vector writer ``terminated`` / ``truncated`` / ``active`` of any dtype, shape and value (generated)
37. vector writer gymnasium ``final`` object arrays with wrong counts, strings, wrong shapes, meta fields
38. vector writer ``final`` holding None for an env that did end (fixed: a zero final observation is stored)
39. a huge ``num_envs`` (fixed: bare MemoryError / ValueError)
40. ``commit_all`` / ``discard`` ``envs=`` of any value (generated)
41. vector writer ``set_meta`` values of any type and shape (generated)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memmap_replay import InvalidDataError, OptionError, ReplayBuffer

from catalogue import (HOSTILE_FIELDS as FIELDS, HOSTILE_MAX_TIMESTEPS as MAX_TIMESTEPS, fast, episode, step,
                       batch_step, unchanged, raises, garbage, element_fits, legal_row, NON_NUMERIC)


# ---- episodes that are never committed ---------------------------------------------------------------


@contextmanager
def discarded(buf: ReplayBuffer):
    """An open episode (one_episode) that is discarded, never committed, whatever happens inside."""
    __tracebackhide__ = True  # helpers stay out of tracebacks

    class Discard(Exception):
        pass

    try:
        with buf.one_episode() as handle:
            yield handle
            raise Discard
    except Discard:
        pass


@contextmanager
def discarded_batch(buf: ReplayBuffer, n: int = 2):
    __tracebackhide__ = True  # helpers stay out of tracebacks
    class Discard(Exception):
        pass

    try:
        with buf.batched_episode(n) as writer:
            yield writer
            raise Discard
    except Discard:
        pass


# ==== kinds 28-35: whole episodes, ends, finals, meta values ================================================


def test_store_episode_with_a_billion_steps_is_refused_without_allocating(store):
    huge = {name: np.broadcast_to(values[0], (10**9, *values.shape[1:])) for name, values in episode(5, 1).items()}
    with unchanged(store), raises(InvalidDataError, match=r"between 1 and max_timesteps=6 steps \(got 1000000000\)"):
        store.store_episode(**huge)


@fast(30)
@given(lengths=st.lists(st.integers(0, 7), min_size=2, max_size=4), fields=st.permutations(sorted(FIELDS)))
def test_store_episode_with_ragged_time_axes(store, lengths, fields):
    assume(len(set(lengths)) > 1)
    arrays = {}
    for name, length in zip(fields, lengths):
        arrays[name] = np.zeros((length, *store.schema.fields[name].shape), store.schema.fields[name].dtype)
    with unchanged(store), raises(InvalidDataError, match=rf"(field '({'|'.join(fields)})' must have shape|"
                                                          r"between 1 and max_timesteps)"):
        store.store_episode(**arrays)


POISON = {"action": [np.nan, np.inf, -np.inf, 0.5, 2.0**31, -2.0**31 - 1], "count": [np.nan, 2.0**63, 1.5],
          "image": [256, -1, 0.5, np.nan], "done": [2, -1, 0.5, np.nan]}


@fast(40)
@given(data=st.data(), name=st.sampled_from(sorted(POISON)), length=st.integers(1, MAX_TIMESTEPS))
def test_one_bad_value_anywhere_in_an_episode_refuses_all_of_it(store, data, name, length):
    arrays = episode(6, length)
    spec = store.schema.fields[name]
    bad = data.draw(st.sampled_from(POISON[name]))
    values = arrays[name].astype(np.float64 if not isinstance(bad, int) else np.int64)
    where = tuple(data.draw(st.integers(0, n - 1)) for n in values.shape)
    values[where] = bad
    arrays[name] = values
    with unchanged(store), raises(InvalidDataError, match=rf"^field '{name}' has dtype {spec.dtype}"):
        store.store_episode(**arrays, task=6)


@fast(60)
@given(end=st.one_of(garbage, st.sampled_from(["Terminated", "TRUNCATED", "terminated ", "done", "timeout", "None"])),
       how=st.sampled_from(["store_episode", "set_episode_end", "episode.set_end", "end_episode", "advance_episode",
                            "commit_all"]))
def test_end_of_any_other_value_at_every_entry_point(store, end, how):
    assume(end is not None and not (isinstance(end, str) and end in ("terminated", "truncated")))
    assume(not isinstance(end, (np.ndarray, torch.Tensor)))  # arrays: see END_CASES
    # an int given to advance_episode is 0.2.3's batch_size (tests/compat/test_buffer_api.py)
    assume(how != "advance_episode" or isinstance(end, bool) or not isinstance(end, int))
    match = r"^end must be 'terminated', 'truncated' or None \(got "
    with unchanged(store):
        if how == "store_episode":
            with raises(OptionError, match=match):
                store.store_episode(**episode(6, 2), end=end)
        elif how == "commit_all":
            writer = store.vector_writer(2)
            writer.store(**batch_step([6, 7], 0))
            with raises(OptionError, match=match):
                writer.commit_all(end)
            assert writer.lengths.tolist() == [1, 1]  # the episodes stay open
            writer.discard()
        else:
            with discarded(store) as handle:  # a refused end leaves the episode open: it is discarded here
                store.store(**step(6, 0))
                setter = {"set_episode_end": store.set_episode_end, "episode.set_end": handle.set_end,
                          "end_episode": store.end_episode, "advance_episode": store.advance_episode}[how]
                # (advance_episode's positional value may also be 0.2.3's batch_size: a non-str names both)
                with raises(OptionError, match=match if how != "advance_episode" else
                            r"^(end must be |advance_episode takes end=)'terminated', 'truncated' or None.* \(got "):
                    setter(end)
                store.store(**step(6, 1))  # still open


END_CASES = [
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end=np.array("terminated")), id="store_episode-0d-array"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end=np.array(["terminated"])), id="store_episode-1d-array"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=3), id="final-int"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=["obs"]), id="final-list"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final="obs"), id="final-str"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=np.zeros(3)), id="final-array"),
]


@pytest.mark.parametrize("call", END_CASES)
def test_end_and_final_of_the_wrong_type(store, call):
    with unchanged(store), raises((OptionError, InvalidDataError),
                                  match=r"^(end must be|final must be a dict)") as info:
        call(store)
    # end= is an option (OptionError); final= holds the data written (InvalidDataError)
    assert isinstance(info.value, OptionError) == str(info.value).startswith("end must be")


@pytest.mark.parametrize("final", [
    pytest.param(3, id="int"),
    pytest.param("obs", id="str"),
])
@pytest.mark.parametrize("how", ["set_episode_end", "episode.set_end", "end_episode"])
def test_final_that_is_not_a_dict_inside_an_episode(store, final, how):
    with unchanged(store):
        with discarded(store) as handle:  # one_episode opens the episode end_episode would commit
            store.store(**step(6, 0))
            setter = {"set_episode_end": store.set_episode_end, "episode.set_end": handle.set_end,
                      "end_episode": store.end_episode}[how]
            with raises(InvalidDataError, match=r"^final must be a dict"):
                setter("truncated", final=final)


final_rows = hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))


@fast(30)
@given(row=final_rows, name=st.sampled_from(["obs", "achieved", "image"]))
def test_final_rows_of_the_wrong_shape(store, row, name):
    spec = store.schema.fields[name]
    assume(not legal_row(spec.shape, row.shape))
    with unchanged(store), raises(InvalidDataError, match=rf"^field '{name}' must have shape"):
        store.store_episode(**episode(6, 2), end="truncated", final={name: row})
    with unchanged(store):
        with discarded(store) as handle:
            store.store(**step(6, 0))
            with raises(InvalidDataError, match=rf"^field '{name}' must have shape"):
                handle.set_end("truncated", final={name: row})


@fast(40)
@given(value=garbage, name=st.sampled_from(["task", "weight"]),
       how=st.sampled_from(["one_episode", "begin_episode", "batched_episode"]))
def test_meta_values_of_any_type(store, value, name, how):
    try:
        array = np.asarray(value)
    except Exception:
        array = None
    shapes = ((), (2,)) if how == "batched_episode" else ((), (1,))  # batched: one value for all, or one per env
    if array is not None and array.dtype.kind in "biufc" and array.shape in shapes:
        assume(not all(element_fits(store.schema.meta_fields[name].dtype, array.dtype, x) for x in array.reshape(-1)))
    call = {"one_episode": lambda: store.one_episode(**{name: value}).__enter__(),
            "begin_episode": lambda: store.begin_episode(**{name: value}),
            "batched_episode": lambda: store.batched_episode(2, **{name: value}).__enter__()}[how]
    with unchanged(store), raises(InvalidDataError, match=rf"^meta field '{name}' (must|has dtype)"):
        call()
    store.begin_episode()  # none was left open
    assert store.end_episode() is None


# ==== kinds 25, 36-41: batched writers ======================================================================

flag_arrays = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.boolean_dtypes(), hnp.integer_dtypes(), hnp.floating_dtypes(),
                               hnp.complex_number_dtypes()),
               shape=st.sampled_from([(), (1,), (2,), (3,), (2, 1), (1, 2), (2, 2), (0,)])),
    st.sampled_from([["True", "False"], [None, None], {0: True}, "yes", [True, None], torch.tensor([2, 0]), object()]),
)


def legal_flags(value) -> bool:
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return False
    if value.shape not in ((2,), (2, 1)):
        return False
    return all(element_fits(np.dtype(bool), value.dtype, x) for x in value.reshape(-1))


@fast(60)
@given(flag=st.sampled_from(["terminated", "truncated", "active"]), value=flag_arrays)
def test_vector_writer_flags_of_any_dtype_shape_and_value(store, flag, value):
    assume(not legal_flags(value))
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    with unchanged(store), raises(InvalidDataError, match=rf"^flag '{flag}' (must|has dtype)"):
        writer.store(**batch_step([6, 7], 1), **{flag: value})
    assert writer.lengths.tolist() == [1, 1]  # the refused step left nothing staged
    writer.discard()


batch_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.integer_dtypes(), hnp.floating_dtypes(), hnp.boolean_dtypes(),
                               hnp.complex_number_dtypes()),
               shape=st.one_of(st.sampled_from([(), (2,), (1,), (3,), (2, 1), (2, 3), (2, 2), (3, 3), (1, 2),
                                                (2, 2, 4, 4),
                                                (2, 4, 4), (2, 2, 4, 4, 1)]),
                               hnp.array_shapes(max_dims=4, max_side=4))),
    st.sampled_from(NON_NUMERIC),
)


@fast(60)
@given(name=st.sampled_from(sorted(FIELDS)), value=batch_values, how=st.sampled_from(["store_batch", "vector_writer"]))
def test_batched_step_values_of_any_dtype_and_shape(store, name, value, how):
    spec = store.schema.fields[name]
    legal = value.shape == (2, *spec.shape) or (spec.shape == () and value.shape == (2, 1)) \
        or (spec.shape == (1,) and value.shape == (2,))
    fits = value.dtype.kind in "biufc" and legal and all(element_fits(spec.dtype, value.dtype, x)
                                                         for x in value.reshape(-1))
    assume(not fits)
    steps = {**batch_step([6, 7], 1), name: value}
    with unchanged(store):
        if how == "store_batch":
            with discarded_batch(store) as writer:
                store.store_batch(**batch_step([6, 7], 0))
                with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                    store.store_batch(**steps)
                assert writer.lengths.tolist() == [1, 1]
        else:
            writer = store.vector_writer(2)
            writer.store(**batch_step([6, 7], 0))
            with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                writer.store(**steps, truncated=[True, True])
            assert writer.lengths.tolist() == [1, 1]
            writer.discard()


BAD_FINALS = [
    pytest.param(dict(obs=[None]), r"final 'obs' must have one entry per env \(2\) \(got 1\)",
                 id="one-entry-for-two-envs"),
    pytest.param(dict(obs=[None, None, None]), r"final 'obs' must have one entry per env \(2\) \(got 3\)",
                 id="three-entries-for-two-envs"),
    pytest.param(dict(obs=[None, "x"]), r"field 'obs' must hold numbers", id="str-entry"),
    pytest.param(dict(obs=[None, np.zeros(4)]), r"field 'obs' must have shape \(3,\) \(got \(4,\)\)",
                 id="entry-too-long"),
    pytest.param(dict(obs=np.array([None, np.zeros((3, 1))], dtype=object)), r"field 'obs' must have shape \(3,\)",
                 id="object-array-entry-2d"),
    pytest.param(dict(obs=np.zeros((3, 3))), r"field 'obs' must have shape \(2, 3\) \(got \(3, 3\)\)",
                 id="rows-for-three-envs"),
    pytest.param(dict(action=[None, [0.5, 1.0]]), r"field 'action' has dtype int32 and cannot hold 0\.5",
                 id="fraction-into-int"),
    pytest.param(dict(action=[[np.nan, 1.0], None]), r"field 'action' has dtype int32 and cannot hold nan",
                 id="nan-into-int"),
    pytest.param(dict(task=[1, 2]), r"unknown field \['task'\]", id="meta-field"),
    pytest.param("obs", r"final must be a dict of field -> values per env \(got str\)", id="str"),
    pytest.param([None, None], r"final must be a dict of field -> values per env \(got list\)", id="list"),
]


@pytest.mark.parametrize("final, match", BAD_FINALS)
def test_vector_writer_gymnasium_finals_of_the_wrong_form(store, final, match):
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    with unchanged(store), raises(InvalidDataError, match=match):
        writer.store(**batch_step([6, 7], 1), truncated=[True, True], final=final)
    assert writer.lengths.tolist() == [1, 1]
    writer.discard()


def test_vector_writer_none_final_for_an_env_that_ended(fresh):
    writer = fresh.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    final = dict(obs=np.array([None, np.full(3, 7.0, np.float32)], dtype=object))
    try:
        writer.store(**batch_step([6, 7], 1), truncated=[True, True], final=final)
    except InvalidDataError as error:
        assert "final" in str(error) and "obs" in str(error)
        return
    table = fresh.episode_store.live_table()
    assert table.final.tolist()[-2:] == [False, True], "env 0 ended without a final observation"


@pytest.mark.parametrize("n", [
    pytest.param(2**48, id="2**48"),
    pytest.param(2**62, id="2**62"),
])
@pytest.mark.parametrize("how", ["vector_writer", "batched_episode"])
def test_huge_num_envs(store, n, how):
    call = store.vector_writer if how == "vector_writer" else lambda k: store.batched_episode(k).__enter__()
    with unchanged(store), raises(OptionError, match=r"num_envs"):
        call(n)


@fast(40)
@given(envs=st.one_of(garbage, st.integers(-2**70, 2**70), st.lists(st.integers(-3, 5), min_size=1, max_size=3)))
def test_commit_all_and_discard_envs_of_any_value(store, envs):
    assume(envs is not None)  # None: every env
    array = None
    try:
        array = np.asarray(envs)
    except Exception:
        pass
    if array is not None and array.dtype.kind in "iu" and array.ndim <= 1:
        assume(array.size and (array.min() < 0 or array.max() >= 2) and array.max() < 2**63)
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    for call in (writer.commit_all, writer.discard):
        with unchanged(store), raises(OptionError,
                                      match=r"^envs must (be an int or a 1-d array of ints|be in \[0, 2\))"):
            call(envs=envs)
        assert writer.lengths.tolist() == [1, 1]
    writer.discard()


@fast(30)
@given(value=st.one_of(garbage, hnp.arrays(np.float64, st.sampled_from([(3,), (1, 2), (2, 2), (2, 1, 1)]))),
       name=st.sampled_from(["task", "weight"]))
def test_vector_writer_set_meta_of_any_value(store, value, name):
    array = None
    try:
        array = np.asarray(value)
    except Exception:
        pass
    dtype = store.schema.meta_fields[name].dtype
    if array is not None and array.dtype.kind in "biuf" and array.shape in ((), (2,)):
        assume(not all(element_fits(dtype, array.dtype, x) for x in array.reshape(-1)))
    writer = store.vector_writer(2, task=3)
    with unchanged(store), raises(InvalidDataError, match=rf"^meta field '{name}' (must|has dtype)"):
        writer.set_meta(**{name: value})
    assert writer.meta["task"].tolist() == [3, 3]  # unchanged
