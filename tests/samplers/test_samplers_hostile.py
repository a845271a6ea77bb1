"""Hostile input at the samplers (``samplers/``): kinds, options, batch sizes, priorities and states.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

67. ``buffer.sampler(kind)`` with any kind (generated)
68. every sampler option (seed, replacement, follow, rank, world_size, alpha, beta, beta_final,
    beta_steps, persist, eta) given a value of the wrong type or range (generated)
69. sampler numbers beyond int64, and ``follow`` given arrays or tensors (fixed)
70. prioritized ``name=`` of any ASCII text: refused, or files only ``priorities/<name>.*`` (generated)
71. a non-ASCII ``name=`` too long for the file system (fixed: blamed on read-only, stray folder)
72. ``sample`` / ``batch`` / ``batches`` / ``dataloader`` / ``buffer.sample`` sizes, ``num_batches`` and
    ``drop_last`` of any value (generated)
73. ``sampler.dataloader(num_workers=-1)`` (fixed: torch's error, not the library's)
74. ``update_priorities`` priorities of any dtype and shape, NaN, inf, negative (generated)
75. ``update_priorities`` keys of the wrong dtype, shape or sign (generated)
76. SequenceSampler step priorities and masks of the wrong shape, dtype or first step (generated)
77. ``update_priorities`` with keys of episodes that never existed, uint64 keys, and huge finite
    priorities that overflow the sum tree (fixed)
78. ``load_state_dict`` with damaged states: non-dicts, wrong types, damaged or missing rng, missing keys,
    JSON garbage at every level (generated)
79. ``load_state_dict`` damage the library lets through, raises bare, or half-applies (fixed)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memmap_replay import InvalidDataError, OptionError

from catalogue import (fast, fingerprint, unchanged, raises, is_int, is_bool, garbage, json_values,
                       PATH_TRICKS, valid_unit)


# ==== kinds 67-79: samplers =================================================================================


@pytest.fixture(scope="module")
def samplers(store):
    made = dict(uniform=store.sampler("uniform", seed=0),
                epoch=store.sampler("uniform", seed=0, replacement=False),
                prioritized=store.sampler("prioritized", seed=0, persist=False),
                nstep=store.sampler("prioritized", n_steps=2, gamma=0.9, seed=0, persist=False),
                sequence=store.sampler("sequence", window=2, seed=0, persist=False))
    yield made
    for sampler in made.values():
        getattr(sampler, "close", lambda: None)()


@fast(30)
@given(kind=st.one_of(st.text(max_size=12), garbage))
def test_sampler_kind_of_any_value(store, kind):
    assume(kind not in ("uniform", "prioritized", "sequence") if isinstance(kind, str) else True)
    with unchanged(store), raises(OptionError, match=r"^kind must be one of \['prioritized', "
                                                     r"'sequence', 'uniform'\] \(got "):
        store.sampler(kind)


SAMPLER_OPTIONS = {
    # (kind, other options, valid(value), message)
    "seed": ("uniform", {}, lambda v: v is None or (is_int(v) and v >= 0), r"seed must be an int >= 0 or None"),
    "replacement": ("uniform", {}, is_bool, r"replacement must be True or False"),
    "follow": ("uniform", {}, lambda v: is_bool(v) or (isinstance(v, str) and v == "disk"), r"follow must be"),
    "rank": ("uniform", dict(world_size=2), lambda v: v is None or (is_int(v) and 0 <= v < 2), r"rank must be"),
    "world_size": ("uniform", {}, lambda v: v is None or (is_int(v) and v >= 1),
                   r"(world_size must be|rank must be below)"),
    "alpha": ("prioritized", dict(persist=False), valid_unit(high=None), r"alpha must be a finite number >= 0\.0"),
    "beta": ("prioritized", dict(persist=False), valid_unit(), r"beta must be a finite number in \[0\.0, 1\.0\]"),
    "beta_final": ("prioritized", dict(persist=False), valid_unit(), r"beta_final must be a finite "
                                                                     r"number in \[0\.0, 1\.0\]"),
    "beta_steps": ("prioritized", dict(persist=False), lambda v: is_int(v) and v >= 0,
                   r"beta_steps must be an int >= 0"),
    "persist": ("prioritized", {}, lambda v: v is None or is_bool(v), r"persist must be True or False"),
    "eta": ("sequence", dict(window=2, persist=False), valid_unit(), r"eta must be a finite number in \[0\.0, 1\.0\]"),
}


@fast(200)
@given(option=st.sampled_from(sorted(SAMPLER_OPTIONS)), value=st.one_of(garbage, st.sampled_from(
    [-1, 2, 1.5, np.float64(np.nan), np.inf, 2**70, "0.5", np.int64(-1), np.float32(2.0)])))
def test_every_sampler_option_refuses_values_of_the_wrong_type_or_range(store, option, value):
    kind, others, valid, match = SAMPLER_OPTIONS[option]
    assume(not valid(value))
    if option == "follow":  # cases below: arrays and tensors
        assume(not isinstance(value, (np.ndarray, torch.Tensor)))
    if option in ("alpha", "beta", "beta_final", "eta"):  # a case below: ints beyond int64
        assume(not (isinstance(value, int) and not -2**63 <= value < 2**64))
    with unchanged(store), raises(OptionError, match=match):
        store.sampler(kind, **others, **{option: value})


def valid_priorities_name(name) -> bool:
    if name is None:  # the default: the view's kind
        return True
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)) and bool(set(name) - {"_", "-"})


@fast(50)
@given(name=st.one_of(st.sampled_from([n for n in PATH_TRICKS if n.isascii()]
                                      + ["-", "--", "_", "a-b", "A_1", "x" * 64]),
                      st.text(alphabet=st.characters(codec="ascii"), max_size=70), st.integers(), st.none()))
def test_priorities_name_of_any_ascii_text_stays_inside_priorities(store, name):
    if not valid_priorities_name(name):
        with unchanged(store), raises(OptionError, match=r"^name must be letters, digits, '_' or '-' \(at most 64\), "
                                                              rf"a file name \(got {re.escape(repr(name))}\)"):
            store.sampler("prioritized", name=name)
        return
    meta_bytes, paths, contents = fingerprint(store.folder)
    sampler = store.sampler("prioritized", name=name)
    try:
        after = fingerprint(store.folder)
        assert after[0] == meta_bytes and after[2] == contents
        added = set(after[1]) - set(paths)
        stem = sampler.name
        assert added <= {"priorities",
                         *(f"priorities/{stem}{suffix}" for suffix in (".npy", ".owner.npy", ".json", ".lock"))}
    finally:
        sampler.close()


def test_priorities_name_too_long_for_the_file_system(fresh):
    with unchanged(fresh), raises(OptionError, match=r"^name must be"):
        fresh.sampler("prioritized", name="𝔞" * 64)


@fast(60)
@given(which=st.sampled_from(["uniform", "epoch", "prioritized", "sequence"]),
       call=st.sampled_from(["sample", "batch", "batches", "dataloader", "buffer.sample"]),
       size=st.one_of(garbage, st.integers(-2**70, 0)))
def test_sampler_batch_sizes_of_any_value(store, samplers, which, call, size):
    assume(not (is_int(size) and size >= 1))
    sampler = samplers[which]
    before = sampler.state_dict()
    action = {"sample": lambda: sampler.sample(size), "batch": lambda: sampler.batch(size),
              "batches": lambda: sampler.batches(size), "dataloader": lambda: sampler.dataloader(size),
              "buffer.sample": lambda: store.sample(size, sampler=sampler)}[call]
    with unchanged(store), raises(OptionError, match=rf"^batch_size must be a positive int \(got "
                                                     rf"{re.escape(repr(size))}\)"):
        action()
    assert sampler.state_dict() == before


@fast(40)
@given(which=st.sampled_from(["uniform", "epoch", "prioritized"]), num_batches=garbage,
       drop_last=st.one_of(st.booleans(), garbage))
def test_sampler_batches_counts_and_flags(store, samplers, which, num_batches, drop_last):
    num_ok = num_batches is None or (is_int(num_batches) and num_batches >= 0)
    assume(not num_ok or not is_bool(drop_last))
    for call in (lambda: samplers[which].batches(2, num_batches, drop_last=drop_last),
                 lambda: samplers[which].dataloader(2, num_batches, drop_last=drop_last)):
        with unchanged(store), raises(OptionError, match=r"^(num_batches must be an int >= 0 or None|drop_last "
                                                         r"must be True or False)"):
            call()


@pytest.mark.parametrize("option, value", [
    pytest.param("alpha", 2**70, id="alpha-2**70"), pytest.param("beta", -2**63 - 1, id="beta--2**63-1"),
    pytest.param("eta", 2**64, id="eta-2**64"),
])
def test_sampler_numbers_beyond_int64(store, option, value):
    options = dict(window=2) if option == "eta" else {}
    with unchanged(store), raises(OptionError, match=rf"^{option} must be a finite number .*an int beyond int64"):
        store.sampler("sequence" if option == "eta" else "prioritized", persist=False, **options, **{option: value})


@pytest.mark.parametrize("follow", [
    pytest.param(np.array([True, False]), id="array"),
    pytest.param(torch.tensor(1.0), id="tensor"),
    pytest.param(np.int64(1), id="np.int64"),
])
def test_sampler_follow_of_array_types(store, follow):
    with unchanged(store), raises(OptionError, match=r"^follow must be True, False or 'disk'"):
        store.sampler("uniform", follow=follow)


def test_sampler_dataloader_num_workers_negative(store, samplers):
    with unchanged(store), raises(OptionError, match=r"^num_workers must be an int >= 0"):
        samplers["uniform"].dataloader(2, num_batches=1, num_workers=-1)


def tree_state(sampler):
    return sampler.tree.leaves.copy(), sampler.max_priority, sampler.dropped, sampler.state_dict()


def assert_same_tree(before, after):
    np.testing.assert_array_equal(before[0], after[0])
    assert before[1:] == after[1:]


priority_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.floating_dtypes(sizes=(16, 32, 64)), hnp.integer_dtypes(),
                               hnp.complex_number_dtypes(), st.just(np.dtype("U2")), st.just(np.dtype("M8[s]"))),
               shape=st.sampled_from([(4,), (3,), (5,), (), (4, 1), (1, 4), (0,)])),
    st.sampled_from([None, "abc", [None] * 4, [1, "a", 2, 3], {"a": 1}, object()]),
)


@fast(80)
@given(which=st.sampled_from(["prioritized", "nstep", "sequence"]), priorities=priority_values)
def test_update_priorities_refuses_bad_priorities_and_changes_nothing(store, samplers, which, priorities):
    sampler = samplers[which]
    keys = sampler.sample(4).keys
    try:
        array = np.asarray(priorities)
    except Exception:
        array = None
    if array is not None and array.dtype.kind in "biuf" and array.shape == (4,):
        with np.errstate(all="ignore"):
            assume(not (np.isfinite(array).all() and (array >= 0).all()))
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(step )?priorities must (be|be finite and >= 0)"):
        sampler.update_priorities(keys, priorities)
    assert_same_tree(before, tree_state(sampler))


key_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.floating_dtypes(), hnp.boolean_dtypes(), st.just(np.dtype("U2"))),
               shape=st.just((4,))),
    hnp.arrays(np.int64, st.sampled_from([(1, 4), (4, 1), ()]), elements=st.integers(0, 10)),
    hnp.arrays(np.int64, (4,), elements=st.integers(-2**62, -1)),
    st.sampled_from([None, "abcd", [None] * 4, [0.5] * 4, object()]),
)


@fast(50)
@given(which=st.sampled_from(["prioritized", "nstep", "sequence"]), keys=key_values)
def test_update_priorities_refuses_bad_keys_and_changes_nothing(store, samplers, which, keys):
    sampler = samplers[which]
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(keys must be (a 1-d int array|>= 0)|priorities must be)"):
        sampler.update_priorities(keys, np.ones(4))
    assert_same_tree(before, tree_state(sampler))


@fast(40)
@given(shape=st.sampled_from([(4, 3), (4, 1), (3, 2), (2, 4), (4, 2, 1)]),
       mask_shape=st.sampled_from([None, (4, 2), (2, 4), (4, 3)]),
       mask_dtype=st.sampled_from([bool, np.int8, np.float32]), first=st.booleans())
def test_sequence_step_priorities_and_masks_of_the_wrong_shape(store, samplers, shape, mask_shape, mask_dtype, first):
    sampler = samplers["sequence"]
    keys = sampler.sample(4).keys
    mask = None
    if mask_shape is not None:
        mask = np.ones(mask_shape, dtype=mask_dtype)
        mask[:, 0] = first
    legal_priorities = shape == (4, 2)
    legal_mask = mask is None or (mask.shape == (4, 2) and mask.dtype == bool and first)
    assume(not (legal_priorities and legal_mask))
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(step priorities must be|mask must be the batch's "
                                                          r"'_mask'|priorities must be \d+ numbers|mask= goes "
                                                          r"with step priorities)"):
        sampler.update_priorities(keys, np.ones(shape), mask=mask)
    assert_same_tree(before, tree_state(sampler))


PRIORITY_CASES = [
    pytest.param(lambda keys: (keys + 10**6, np.ones(4)), r"keys must come from this sampler's batches",
                 id="never-existed"),
    pytest.param(lambda keys: (np.full(4, 2**63, np.uint64), np.ones(4)), r"keys must", id="uint64-keys"),
    pytest.param(lambda keys: (keys, np.full(4, 1e308)), r"priorities must be", id="huge-finite-priorities"),
]


@pytest.mark.parametrize("make_args, match", PRIORITY_CASES)
def test_update_priorities_inputs_the_library_mishandles(store, make_args, match):
    sampler = store.sampler("prioritized", seed=0, persist=False, alpha=1.0)
    keys = sampler.sample(4).keys
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=match):
        sampler.update_priorities(*make_args(keys))
    assert_same_tree(before, tree_state(sampler))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(set(sampler.sample(64).keys.tolist())) > 1


STATE_KEYS = {"uniform": ["type", "seed", "rank", "rng", "draws"],
              "epoch": ["type", "seed", "rank", "rng", "draws", "epochs", "cursor", "in_epoch", "epoch_ids"],
              "prioritized": ["type", "seed", "rank", "rng", "draws", "max_priority", "dropped"]}


@fast(120)
@given(which=st.sampled_from(sorted(STATE_KEYS)),
       damage=st.sampled_from(["replace-all", "type", "rng", "drop-key", "rng-key"]), value=json_values, data=st.data())
def test_load_state_dict_with_damaged_states(store, samplers, which, damage, value, data):
    sampler = samplers[which]
    good = sampler.state_dict()
    state = copy.deepcopy(good)
    if damage == "replace-all":
        assume(not isinstance(value, dict))
        state = value
        match = rf"^this is a {type(sampler).__name__}'s state_dict\(\)\? it holds a"
    elif damage == "type":
        assume(value != good["type"])
        state["type"] = value
        match = rf"^this is a {type(sampler).__name__}'s state_dict\(\)\? it holds a"
    elif damage == "rng":
        assume(not isinstance(value, dict))
        state["rng"] = value
        match = r"^a damaged sampler state_dict \(.*\); save it again with state_dict\(\)"
    elif damage == "drop-key":
        key = data.draw(st.sampled_from(["rng", "draws", "seed"]))
        del state[key]
        match = r"^a damaged sampler state_dict \(KeyError"
    else:
        key = data.draw(st.sampled_from(["bit_generator", "state"]))
        assume(value != state["rng"][key])
        assume(not (key == "state" and isinstance(value, dict)))  # a dict of other ints: see STATE_CASES
        state["rng"][key] = value
        match = r"^a damaged sampler state_dict \(.*\); save it again with state_dict\(\)"
    with unchanged(store), raises(InvalidDataError, match=match):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == good


def rng_state_negative(state):
    state["rng"]["state"]["state"] = -1


STATE_CASES = [
    pytest.param("uniform", rng_state_negative, id="rng-state-negative"),
    pytest.param("uniform", lambda s: s.update(draws=float("inf")), id="draws-inf"),
    pytest.param("uniform", lambda s: s.update(draws=-5), id="draws-negative"),
    pytest.param("uniform", lambda s: s.update(draws=2.7), id="draws-fraction"),
    pytest.param("epoch", lambda s: s.update(seed=-3), id="seed-negative"),
    pytest.param("epoch", lambda s: s.update(epochs="x"), id="epochs-str"),
    pytest.param("epoch", lambda s: s.update(cursor="x"), id="cursor-str"),
    pytest.param("epoch", lambda s: s.update(epoch_ids=None), id="epoch_ids-None"),
    pytest.param("prioritized", lambda s: s.update(max_priority=float("nan")), id="max_priority-nan"),
    pytest.param("prioritized", lambda s: s.update(max_priority=-1.0), id="max_priority-negative"),
    pytest.param("prioritized", lambda s: s.update(max_priority="x"), id="max_priority-str"),
    pytest.param("prioritized", lambda s: s.update(dropped="x"), id="dropped-str"),
]


@pytest.mark.parametrize("which, damage", STATE_CASES)
def test_load_state_dict_damage_the_library_mishandles(store, which, damage):
    options = dict(uniform=dict(), epoch=dict(replacement=False), prioritized=dict(persist=False))[which]
    kind = "prioritized" if which == "prioritized" else "uniform"
    sampler = store.sampler(kind, seed=0, **options)
    sampler.batch(2)
    good = sampler.state_dict()
    state = copy.deepcopy(good)
    damage(state)
    with unchanged(store), raises(InvalidDataError, match=r"^a damaged sampler state_dict"):
        sampler.load_state_dict(state)
        sampler.batch(2)
    assert sampler.state_dict() == good


def test_a_refused_load_state_dict_leaves_the_sampler_as_it_was(store):
    sampler = store.sampler("uniform", seed=0)
    before = sampler.state_dict()
    later = store.sampler("uniform", seed=5)
    later.batch(3)
    state = later.state_dict()
    state["seed"] = "x"
    with raises(InvalidDataError, match=r"^a damaged sampler state_dict"):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before
