"""Hostile input at ``views/hindsight.py``: ``hindsight=`` options and ``reward_fn`` results.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

80. every ``hindsight=`` option (strategy, relabel_ratio, seed, reward_fn, goal_field, achieved_field,
    n_steps) given a value of the wrong type (generated)
81. ``hindsight=`` dicts missing keys, with unhashable field names, or arrays for strategy / n_steps (fixed)
82. a ``reward_fn`` returning the wrong shape or dtype (generated)
83. a ``reward_fn`` returning a tensor that requires grad, bfloat16, a ragged list, or 1e300 (fixed)
84. a ``reward_fn`` returning values the reward field cannot hold: 0.5, 300, NaN into int8 (fixed)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from memmap_replay import InvalidDataError, OptionError, ReplayBuffer

from catalogue import fast, unchanged, raises, is_int, hashable, garbage, valid_unit, HER


# ==== kinds 80-84: hindsight ================================================================================

HINDSIGHT_OPTIONS = {
    "strategy": (lambda v: isinstance(v, str) and v in ("future", "final", "episode"), r"strategy must be one of"),
    "relabel_ratio": (valid_unit(), r"relabel_ratio must be a finite number in \[0, 1\]"),
    "relabel_seed": (lambda v: is_int(v) and v >= 0, r"relabel_seed must be an int >= 0"),
    "reward_fn": (callable, r"reward_fn must be a function"),
    "goal_field": (lambda v: v in ("goal", "achieved") if isinstance(v, str) else False,
                   r"(goal_field=.* is not a step field|must have the same shape)"),
    "achieved_field": (lambda v: v in ("goal", "achieved") if isinstance(v, str) else False,
                       r"(achieved_field=.* is not a step field|must have the same shape)"),
    "n_steps": (lambda v: not isinstance(v, (np.ndarray, torch.Tensor)) and v == 1,
                r"hindsight relabelling works on one-step transitions"),
}


@fast(70)
@given(option=st.sampled_from(sorted(HINDSIGHT_OPTIONS)), value=st.one_of(garbage, st.sampled_from(
    ["obs", "reward", "image", "Future", -1, 1.5, np.nan, np.inf, 2, "goal "])))
def test_every_hindsight_option_refuses_values_of_the_wrong_type(store, option, value):
    valid, match = HINDSIGHT_OPTIONS[option]
    assume(not valid(value))
    if option in ("goal_field", "achieved_field"):
        assume(hashable(value))  # see HINDSIGHT_CASES
    if option in ("strategy", "n_steps"):
        assume(not isinstance(value, np.ndarray))
    with unchanged(store), raises(OptionError, match=match):
        store.dataset(hindsight={**HER, option: value})
    with unchanged(store), raises(OptionError, match=match):
        store.sampler("uniform", hindsight={**HER, option: value})


HINDSIGHT_CASES = [
    pytest.param(dict(goal_field="goal", achieved_field="achieved"), id="no-reward_fn"),
    pytest.param({}, id="empty-dict"),
    pytest.param({**HER, "goal_field": ["goal"]}, id="goal_field-list"),
    pytest.param({**HER, "strategy": np.array(["future", "final"])}, id="strategy-array"),
    pytest.param({**HER, "n_steps": np.array([1, 2])}, id="n_steps-array"),
]


@pytest.mark.parametrize("hindsight", HINDSIGHT_CASES)
def test_hindsight_options_the_library_mishandles(store, hindsight):
    with unchanged(store), raises(OptionError, match=r"(goal_field|achieved_field|reward_fn|strategy|n_steps)"):
        store.dataset(hindsight=hindsight)


RETURN_DTYPES = [np.float32, np.float64, np.int8, np.int64, bool, np.complex64, "U1", object, "M8[s]"]

RETURN_SHAPES = ["k", "k-1", "k+1", "()", "(k,1)", "(1,k)", "(k,2)", "(0,)"]


@fast(50)
@given(dtype=st.sampled_from(RETURN_DTYPES), shape=st.sampled_from(RETURN_SHAPES),
       how=st.sampled_from(["getitems", "sampler"]))
def test_reward_fn_returning_garbage(store, dtype, shape, how):
    dtype = np.dtype(dtype)
    assume(not (shape == "k" and dtype.kind in "biuf"))

    def garbage_reward(achieved, goal):
        k = len(achieved)
        size = {"k": (k,), "k-1": (k - 1,), "k+1": (k + 1,), "()": (), "(k,1)": (k, 1), "(1,k)": (1, k),
                "(k,2)": (k, 2), "(0,)": (0,)}[shape]
        return np.zeros(size, dtype=dtype)

    hindsight = {**HER, "reward_fn": garbage_reward, "relabel_ratio": 1.0}
    with unchanged(store), raises(InvalidDataError, match=r"^reward_fn must return \d+ numbers, one per row, for a "
                                                          r"batch of \d+ goals \(got "):
        if how == "getitems":
            store.dataset(hindsight=hindsight).__getitems__(np.arange(6))
        else:
            store.sampler("uniform", seed=0, hindsight=hindsight).batch(6)


REWARD_CASES = [
    pytest.param(lambda a, g: torch.full((len(a),), -1.0, requires_grad=True), None, id="tensor-requires-grad"),
    pytest.param(lambda a, g: torch.zeros(len(a), dtype=torch.bfloat16), r"bfloat16|convert", id="bfloat16"),
    pytest.param(lambda a, g: [[1.0], [1.0, 2.0]] + [[0.0]] * (len(a) - 2), r"reward_fn must return", id="ragged"),
    pytest.param(lambda a, g: np.full(len(a), 1e300), r"(reward_fn|'reward')", id="1e300-into-float32"),
]


@pytest.mark.parametrize("reward_fn, match", REWARD_CASES)
def test_reward_fn_returns_the_library_mishandles(store, reward_fn, match):
    view = store.dataset(hindsight={**HER, "reward_fn": reward_fn, "relabel_ratio": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with unchanged(store):
            if match is None:  # must be taken like any tensor
                batch = view.__getitems__(np.arange(6))
                assert (batch["reward"][batch["_relabeled"]] == -1.0).all()
                return
            with raises(InvalidDataError, match=match):
                view.__getitems__(np.arange(6))


@pytest.mark.parametrize("value, dtype", [
    pytest.param(0.5, "int8", id="0.5-into-int8"),
    pytest.param(300, "int8", id="300-into-int8"),
    pytest.param(np.nan, "int8", id="nan-into-int8"),
])
def test_reward_fn_values_that_do_not_fit_the_reward_field(tmp_path, value, dtype):
    with ReplayBuffer(tmp_path / "her", 2, 4, dict(goal=("float", 2), achieved=("float", 2), reward=dtype)) as buf:
        buf.store_episode(goal=np.zeros((3, 2)), achieved=np.ones((3, 2)), reward=np.zeros(3))
        view = buf.dataset(hindsight=dict(goal_field="goal", achieved_field="achieved", relabel_ratio=1.0,
                                          reward_fn=lambda a, g: np.full(len(a), value)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with unchanged(buf), raises(InvalidDataError, match=r"(reward_fn|'reward')"):
                view.__getitems__(np.arange(2))
