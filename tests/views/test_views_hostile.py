"""Hostile input at the views (``views/dataset.py``, ``views/kinds.py``): ``dataset()`` options, view
classes built from something else than a store, and indexing.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

49. every ``dataset()`` option given a value of the wrong type or range (generated, 20 options)
50. ``dataset()`` unknown keywords, for every kind of view (generated)
51. ``filter_meta`` / ``filter_fields`` that are not dicts, name unknown or non-scalar fields, hold
    non-numeric values, or match nothing (generated)
52. filters given as arrays, falsy non-dicts or with int keys; ``stack_pad`` arrays; an unhashable
    ``reward_field`` (fixed)
53. ``fieldname_map`` that is not a dict, renames nothing, maps to empty or clashing names (generated)
58. public view classes built from a ReplayBuffer, a path or None instead of an EpisodeStore (fixed)
60. view ``__getitems__`` with out-of-range ints, 2-d arrays and scalars (generated, 5 kinds of view)
61. view ``__getitems__`` with floats, bools, numeric strings (fixed: silently read other items)
62. view ``__getitems__`` with None, slices, complex, NaN, ints beyond int64, uint64 (fixed: bare or
    misleading errors)
63. view ``__getitem__`` with anything but an int (generated)
64. view ``__getitem__`` out of range on either side (generated)
65. view ``__getitem__`` with ints beyond int64 (fixed: OverflowError)
66. ``Sample`` objects with negative, float, str, uint64, 2-d, bool or never-existing keys, or weights of
    the wrong length or type (fixed)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import memmap_replay
from memmap_replay import ArgumentError, InvalidDataError, OptionError, Sample, SampleExpiredError
from memmap_replay.reading.table import BY_NAME

from catalogue import (HOSTILE_FIELDS as FIELDS, HOSTILE_META as META, HOSTILE_MAX_TIMESTEPS as MAX_TIMESTEPS,
                       fast, unchanged, raises, is_int, is_real, is_bool, hashable, garbage,
                       reward_of_achievement)


# ==== kinds 49-53: dataset options ==========================================================================


def positive_at_most(limit):
    return lambda value: is_int(value) and 1 <= value <= limit


def valid_gamma(value) -> bool:
    return value is None or (is_real(value) and 0.0 <= float(value) <= 1.0)


def valid_names_of(known):
    def check(value):
        if isinstance(value, str):
            return value in known
        return isinstance(value, (tuple, list)) and all(isinstance(n, str) and n in known for n in value)
    return check


DATASET_OPTIONS = {
    # option: (other options, valid(value), the start of the message)
    "n_steps": ({}, lambda v: v is None or positive_at_most(MAX_TIMESTEPS)(v), r"n_steps must be "),
    "window": ({}, lambda v: v is None or positive_at_most(5)(v), r"(window must be |the WindowView has no items)"),
    "frame_stack": (dict(timestep_level=True), positive_at_most(MAX_TIMESTEPS), r"frame_stack must be "),
    "timestep_level": ({}, lambda v: v is None or is_bool(v), r"timestep_level must be True or False"),
    "return_mask": ({}, is_bool, r"return_mask must be True or False"),
    "return_indices": ({}, is_bool, r"return_indices must be True or False"),
    "include_metadata": ({}, is_bool, r"include_metadata must be True or False"),
    "allow_partial": (dict(window=2), is_bool, r"allow_partial must be True or False"),
    "time_major": (dict(window=2), is_bool, r"time_major must be True or False"),
    "gamma": (dict(n_steps=2), valid_gamma, r"gamma must be a finite number in \[0, 1\]"),
    "stack_pad": (dict(timestep_level=True, frame_stack=2), lambda v: isinstance(v, str) and v in ("repeat", "zero"),
                  r"stack_pad must be one of"),
    "stack_fields": (dict(timestep_level=True, frame_stack=2), lambda v: v is None or valid_names_of(FIELDS)(v),
                     r"(fields must be a name or a tuple of names|unknown field|frame_stack needs stack_fields)"),
    "fields": ({}, lambda v: v is None or valid_names_of(FIELDS)(v), r"(fields must be a name|unknown field)"),
    "meta_fields": ({}, lambda v: v is None or valid_names_of(META)(v),
                    r"(meta fields must be a name|unknown meta field)"),
    "current_fields": (dict(n_steps=2), lambda v: v is None or valid_names_of(FIELDS)(v),
                       r"(fields must be a name|unknown field)"),
    "next_fields": (dict(n_steps=2), lambda v: v is None or valid_names_of(FIELDS)(v),
                    r"(fields must be a name|unknown field)"),
    "reward_field": (dict(n_steps=2, gamma=0.9), lambda v: isinstance(v, str) and v in ("reward", "done", "count"),
                     r"gamma needs a scalar reward field"),
    "fieldname_map": ({}, lambda v: v is None or v == {}, r"(fieldname_map (must|renames)|would output \[.*\] twice)"),
    "filter_fields": (dict(timestep_level=True), lambda v: v is None or v == {},
                      r"(filter_fields must be a dict|filter_fields takes scalar|filter_fields "
                      r"value|unknown field|has no items)"),
    "filter_meta": ({}, lambda v: v is None or v == {}, r"(filter_meta must be a dict|filter_meta "
                                                        r"value|unknown meta field|has no items)"),
}

option_values = st.one_of(garbage, st.integers(-3, 9), st.sampled_from(
    [2**70, np.int64(0), np.float64(0.5), "repeat ", "obs", ("obs", 3), ["nope"], ("obs", "obs2"), {"obs": 1},
     {"obs": ""}, {"nope": "x"}, {"obs": "action"}, {"task": "a"}, {"task": [1, 2]}, {"reward": "a"}, {"obs": 1},
     {"reward": None}, {3: 1}, {"task": 99}, {"reward": 12345.0}]))


def falsy_non_dict(value) -> bool:
    from collections.abc import Mapping
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return True
    try:
        return not isinstance(value, Mapping) and not value
    except Exception:
        return True


@fast(250)
@given(option=st.sampled_from(sorted(DATASET_OPTIONS)), value=option_values)
def test_every_dataset_option_refuses_values_of_the_wrong_type_or_range(store, option, value):
    others, valid, match = DATASET_OPTIONS[option]
    assume(not valid(value))
    # the cases below: arrays or falsy non-dicts as filters, arrays for `in` checks, unhashable field names,
    # non-str filter keys
    if option in ("filter_meta", "filter_fields"):
        assume(not falsy_non_dict(value))
        assume(not (isinstance(value, dict) and any(not isinstance(key, str) for key in value)))
    if option == "stack_pad":
        assume(not isinstance(value, (np.ndarray, torch.Tensor)))
    if option == "reward_field":
        assume(hashable(value))
    with unchanged(store), raises(OptionError, match=match):
        store.dataset(**others, **{option: value})


FILTER_CASES = [
    pytest.param(dict(filter_meta={3: 1}), id="filter_meta-int-key"),
    pytest.param(dict(timestep_level=True, filter_fields={3: 1}), id="filter_fields-int-key"),
    pytest.param(dict(n_steps=2, gamma=0.9, reward_field=["reward"]), id="reward_field-list"),
    pytest.param(dict(filter_meta=np.array([1, 2])), id="filter_meta-array"),
    pytest.param(dict(filter_meta=0), id="filter_meta-0"),
    pytest.param(dict(timestep_level=True, filter_fields=""), id="filter_fields-empty-str"),
    pytest.param(dict(timestep_level=True, frame_stack=2, stack_pad=np.array(["repeat", "zero"])),
                 id="stack_pad-array"),
]


@pytest.mark.parametrize("kwargs", FILTER_CASES)
def test_dataset_options_the_library_mishandles(store, kwargs):
    with unchanged(store), raises(OptionError, match=r"^(filter_meta|filter_fields|stack_pad|gamma needs)"):
        store.dataset(**kwargs)


@fast(30)
@given(name=st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
       kind=st.sampled_from([{}, dict(timestep_level=True), dict(window=2), dict(n_steps=2)]))
def test_dataset_unknown_keywords(store, name, kind):
    assume(name not in BY_NAME["dataset"])  # the option table's view options (reading/table.py)
    with unchanged(store), raises(ArgumentError, match=rf"^unknown keyword \['{name}'\] for ReplayBuffer.dataset "
                                                     rf"\(help\(ReplayBuffer.dataset\) lists its options\)"):
        store.dataset(**kind, **{name: 1})


# ==== kinds 58, 60-66: view classes and indexing ============================================================

VIEW_KINDS = {"trajectory": {}, "timestep": dict(timestep_level=True), "window": dict(window=2),
              "nstep": dict(n_steps=2, gamma=0.9), "stacked": dict(timestep_level=True, frame_stack=3)}


@pytest.fixture(scope="module")
def views(store):
    return {name: store.dataset(**options) for name, options in VIEW_KINDS.items()}


out_of_range_items = st.one_of(
    st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=4),
    hnp.arrays(np.int64, st.sampled_from([(), (1, 1), (2, 3), (1, 2, 1)]), elements=st.integers(-3, 3)),
    st.integers(-5, 5),
)


@fast(60)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), items=out_of_range_items)
def test_view_getitems_refuses_out_of_range_and_non_1d_items(store, views, kind, items):
    view = views[kind]
    array = np.asarray(items)
    size = len(view)
    assume(array.ndim != 1 or array.min() < -size or array.max() >= size)
    with unchanged(store), pytest.raises(IndexError, match=r"^item indices must (be a 1-d array|be in \[0, \d+\))"):
        view.__getitems__(items)


GETITEMS_CASES = [
    pytest.param([0.5], id="float"),
    pytest.param(np.array([1.9]), id="float-array"),
    pytest.param([True, False], id="bools"),
    pytest.param(["0"], id="numeric-str"),
    pytest.param([None], id="None"),
    pytest.param(None, id="None-batch"),
    pytest.param(slice(0, 2), id="slice"),
    pytest.param([float("nan")], id="nan"),
    pytest.param([2**63], id="int-2**63"),
    pytest.param(np.array([2**63], np.uint64), id="uint64-2**63"),
    pytest.param([1 + 0j], id="complex"),
]


@pytest.mark.parametrize("items", GETITEMS_CASES)
def test_view_getitems_refuses_indices_that_are_not_ints(store, views, items):
    with unchanged(store), pytest.raises((IndexError, TypeError), match=r"^item ind(ex|ices) must be "
                                                                        r".*(int|\[0, \d+\)).*\(got (?!-)"):
        views["timestep"].__getitems__(items)


@fast(50)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), item=st.one_of(
    st.floats(), st.text(max_size=2), st.none(), st.lists(st.integers(0, 2), max_size=2), st.sampled_from(
        [slice(0, 1), np.float64(0), torch.tensor(0), np.array([0]), (0,), {0: 1}, 1j, b"0"])))
def test_view_getitem_takes_only_an_int(store, views, kind, item):
    with unchanged(store), pytest.raises(TypeError, match=rf"^a view is indexed by an int \(got "
                                                          rf"{re.escape(type(item).__name__)}\)"):
        views[kind][item]


@fast(30)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), offset=st.integers(0, 2**62), side=st.sampled_from([-1, 1]))
def test_view_getitem_out_of_range(store, views, kind, offset, side):
    view = views[kind]
    item = len(view) + offset if side > 0 else -len(view) - 1 - offset
    with unchanged(store), pytest.raises(IndexError, match=rf"^item indices must be in \[0, {len(view)}\)"):
        view[item]


@pytest.mark.parametrize("item", [
    pytest.param(2**63, id="2**63"),
    pytest.param(np.uint64(2**63), id="np.uint64-2**63"),
    pytest.param(2**70, id="2**70"),
])
def test_view_getitem_beyond_int64(store, views, item):
    with unchanged(store), pytest.raises(IndexError, match=r"^item indices must be in \[0, \d+\)"):
        views["timestep"][item]


SAMPLE_CASES = [
    pytest.param(Sample(np.array([-1])), r"keys must be >= 0", id="negative-key"),
    pytest.param(Sample(np.array([0.5])), r"keys must be", id="float-keys"),
    pytest.param(Sample(np.array(["a"])), r"keys must be", id="str-keys"),
    pytest.param(Sample(np.array([0], np.uint64)), r"keys must be", id="uint64-keys"),
    pytest.param(Sample(np.array([0, 1]), np.ones(3, np.float32)), r"weights", id="weights-too-many"),
    pytest.param(Sample(np.array([0]), "x"), r"weights", id="weights-str"),
    pytest.param(Sample(np.array([10**9])), r"^(?!.*filter_meta).*(never|not in the buffer|does not hold)",
                 id="never-existed"),
    pytest.param(Sample(np.array([[0]])), r"keys must be", id="2-d-keys"),
    pytest.param(Sample(np.array([True])), r"keys must be", id="bool-keys"),
]


@pytest.mark.parametrize("sample, match", SAMPLE_CASES)
def test_view_refuses_hostile_sample_objects(store, views, sample, match):
    with unchanged(store), raises((InvalidDataError, SampleExpiredError), match=match):
        batch = views["timestep"].__getitems__(sample)
        assert len(batch["_key"]) == len(batch.get("_weight", batch["_key"]))


@pytest.mark.parametrize("cls", ["TrajectoryView", "TimestepView", "HindsightView"])
@pytest.mark.parametrize("given_store", [
    pytest.param("buffer", id="a-ReplayBuffer"),
    pytest.param("path", id="a-path"),
    pytest.param("None", id="None"),
])
def test_view_classes_given_something_else_than_a_store(store, cls, given_store):
    thing = {"buffer": store, "path": str(store.folder), "None": None}[given_store]
    options = dict(goal_field="goal", achieved_field="achieved",
                   reward_fn=reward_of_achievement) if cls == "HindsightView" else {}
    with unchanged(store), raises(OptionError, match=r"(EpisodeStore|store|dataset)"):
        getattr(memmap_replay, cls)(thing, **options)
