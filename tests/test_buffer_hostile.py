"""Hostile input at the ReplayBuffer constructor (``buffer.py``): capacities and flags.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

13. capacities (max_episodes, max_timesteps, max_steps) of any non-int or non-positive value (generated)
14. capacities the format cannot hold, >= 2**62 (fixed: bare OverflowError and stray files, or an unopenable store)
15. ``circular`` given anything but a bool (generated)
16. ``overwrite`` / ``read_only`` / ``durable`` given strings or ints (fixed: overwrite='no' wipes the store)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from memmap_replay import OptionError, ReplayBuffer

from catalogue import (make_hostile_store as make, fast, fingerprint, live_lengths, assert_same_fingerprint,
                       files_under, raises, garbage)


# ---- a closed store, left as it was ------------------------------------------------------------------


@contextmanager
def unchanged_folder(folder: Path):
    """``unchanged`` for a closed store: the fingerprint, then a fresh read-only open reads it all."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    before = fingerprint(folder)
    yield
    assert_same_fingerprint(before, fingerprint(folder))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.get_all_data()["episode_lens"].tolist() == live_lengths(folder)


# ==== kinds 13-16: capacities and flags =====================================================================

capacity_values = st.one_of(garbage, st.integers(-2**40, 0), st.sampled_from([np.int64(0), np.float64(3), 3.0, "3"]))


@fast(60)
@given(key=st.sampled_from(["max_episodes", "max_timesteps", "max_steps"]), value=capacity_values)
def test_capacity_must_be_a_positive_int(new_folder, key, value):
    assume(not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1))
    folder = new_folder()
    options = dict(max_episodes=2, max_timesteps=3, fields=dict(x="float"))
    options[key] = value
    if key == "max_steps" and value is None:  # None is the default: max_episodes * (max_timesteps + 1)
        ReplayBuffer(folder, **options).close()
        return
    with raises(OptionError, match=rf"^{key} must be a positive int \(got {re.escape(repr(value))}\)"):
        ReplayBuffer(folder, **options)
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("value", [np.int64(3), np.uint8(3), np.int32(3)], ids=repr)
def test_capacity_takes_numpy_ints(new_folder, value):
    folder = new_folder()
    with ReplayBuffer(folder, max_episodes=value, max_timesteps=value, fields=dict(x="float")) as buffer:
        assert (buffer.max_episodes, buffer.max_timesteps) == (3, 3)
        assert type(buffer.max_episodes) is int
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.max_episodes == 3


@pytest.mark.parametrize("key, value", [
    pytest.param("max_episodes", 2**62, id="max_episodes-2**62"),
    pytest.param("max_episodes", 2**70, id="max_episodes-2**70"),
    pytest.param("max_timesteps", 2**62, id="max_timesteps-2**62"),
    pytest.param("max_steps", 2**63, id="max_steps-2**63"),
])
def test_capacity_beyond_the_format_is_refused_up_front(new_folder, key, value):
    folder = new_folder()
    options = dict(max_episodes=2, max_timesteps=3, fields=dict(x="float"))
    options[key] = value
    try:
        ReplayBuffer(folder, **options).close()
    except OptionError as error:
        assert key in str(error)
        assert files_under(folder.parent) == []
        return
    ReplayBuffer.from_folder(folder, read_only=True).close()  # accepted: it must then open


@fast(30)
@given(value=garbage)
def test_circular_must_be_a_bool(new_folder, value):
    assume(not isinstance(value, (bool, np.bool_)))  # numpy bools are flags too
    folder = new_folder()
    with raises(OptionError, match=rf"^circular must be True or False \(got {re.escape(repr(value))}\)"):
        ReplayBuffer(folder, 2, 3, dict(x="float"), circular=value)
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("option, value", [
    pytest.param("overwrite", "no", id="overwrite-'no'"),
    pytest.param("overwrite", 1, id="overwrite-1"),
    pytest.param("read_only", "no", id="read_only-'no'"),
    pytest.param("durable", "no", id="durable-'no'"),
])
def test_bool_options_refuse_non_bools_and_never_wipe(fresh, option, value):
    fresh.close()
    with unchanged_folder(fresh.folder):
        with raises(OptionError, match=rf"{option} must be True or False \(got {re.escape(repr(value))}\)"):
            make(fresh.folder, **{option: value}).close()
        with raises(OptionError, match=rf"{option} must be True or False"):
            (ReplayBuffer.from_folder(fresh.folder, **{option: value}) if option != "overwrite"
             else make(fresh.folder, overwrite=value)).close()
