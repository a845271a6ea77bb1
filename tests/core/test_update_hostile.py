"""Hostile input at ``core/update.py`` (``buffer.update``): indices and values.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

42. ``update`` indices of every kind: negative, out of range, not live, floats, NaN, bools, strings, complex,
    None inside lists, sets, dicts, 2-d, ints beyond int64 (generated)
43. ``update`` with a slice of step 0 or with non-int bounds (fixed: bare errors)
44. ``update`` with uint64 indices >= 2**63, or an empty list (fixed: misleading messages)
45. ``update`` values of any shape for step and meta fields (generated)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memmap_replay import InvalidDataError, OptionError

from catalogue import fast, unchanged, raises


# ==== kinds 42-45: update ===================================================================================

update_indices = st.one_of(
    st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
    st.complex_numbers(max_magnitude=9),
    st.lists(st.integers(-3, 12), min_size=1, max_size=4), st.lists(st.floats(-1, 9), min_size=1, max_size=3),
    st.lists(st.booleans(), min_size=1, max_size=3), st.sampled_from([None, [None], [[0]], [[0, 1]], np.array([[1]]),
                                                                      object(), {0}, {0: 1}, [1, "a"], np.array([0.0]),
                                                                      torch.tensor([0.5])]),
    st.integers(2**63, 2**70).map(lambda n: [n]),
)


def legal_indices(indices, live) -> bool:
    if indices is None:
        return True
    try:
        array = np.asarray(indices)
    except Exception:
        return False
    if array.dtype.kind not in "iu" or array.ndim > 1:
        return False
    array = np.atleast_1d(array)
    return array.size > 0 and all(int(i) in live for i in array.tolist())


@fast(120)
@given(indices=update_indices)
def test_update_indices_of_every_kind(store, indices):
    live = set(store.live_episodes.tolist())
    assume(not legal_indices(indices, live))
    assume(not (isinstance(indices, list) and indices and type(indices[0]) is int
                and indices[0] >= 2**63))  # a case below
    with unchanged(store), raises(OptionError, match=r"^episode (indices must be (an int or a 1-d array of ints|in "
                                                     r"\[0, 8\))|slot \d+ holds no live episode)"):
        store.update(indices, reward=99.0)


UPDATE_CASES = [
    pytest.param(slice(None, None, 0), r"episode indices.*slice", id="slice-step-0"),
    pytest.param(slice("a"), r"episode indices.*slice", id="slice-str-bound"),
    pytest.param(np.array([2**63], np.uint64), r"episode indices must be in \[0, 8\) \(got 9223372036854775808",
                 id="uint64-2**63"),
    pytest.param([2**63], r"episode indices must be in \[0, 8\) \(got 9223372036854775808", id="int-2**63"),
    pytest.param([], r"update needs at least one episode|episode indices .*empty", id="empty-list"),
]


@pytest.mark.parametrize("indices, match", UPDATE_CASES)
def test_update_indices_the_library_mishandles(store, indices, match):
    with unchanged(store), raises(OptionError, match=match):
        store.update(indices, reward=99.0)


@fast(50)
@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
       name=st.sampled_from(["reward", "obs", "task", "weight"]))
def test_update_values_of_any_shape(store, shape, name):
    indices = [0, 1]  # slots 0 (3 steps) and 1 (5 steps)
    spec = store.schema.fields.get(name) or store.schema.meta_fields[name]
    if name in store.schema.fields:  # one value for every step, or (episodes, T <= shortest, *shape)
        legal = shape in (spec.shape, ()) or (len(shape) == 2 + len(spec.shape) and shape[0] == 2 and shape[1] <= 3
                                               and shape[2:] == spec.shape)
    else:  # one value for all, or one per episode
        legal = shape in ((), (2,))
    assume(not legal)
    with unchanged(store), raises(InvalidDataError, match=rf"^(meta )?field '{name}'.* (must have "
                                                          rf"shape|has T=\d+ steps)"):
        store.update(indices, **{name: np.zeros(shape)})
