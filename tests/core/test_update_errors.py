"""The error catalogue for ``core/update.py`` (``buffer.update``): unknown names, bad indices and bad data
write nothing.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memmap_replay import InvalidDataError, OptionError

from catalogue import raises, good_step, committed, assert_unchanged


# ---- update ------------------------------------------------------------------------------------------


def test_update_unknown_name_lists_fields_and_meta_fields(buffer):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"unknown field 'bogus': the store's fields are \[.*'obs'.*\] and meta fields "
                                        r"\['task', 'weight'\]"):
        buffer.update(0, bogus=1)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("indices, match", [
    pytest.param(6, r"episode indices must be in \[0, 6\) \(got 6\.\.6\)", id="slot-6"),
    pytest.param(-1, r"episode indices must be in \[0, 6\) \(got -1\.\.-1\)", id="slot--1"),
    pytest.param([0, 99], r"episode indices must be in \[0, 6\) \(got 0\.\.99\)", id="slot-99"),
    pytest.param(4, r"episode slot 4 holds no live episode", id="slot-not-live"),
    pytest.param([0, 3], r"episode slot 3 holds no live episode", id="one-slot-not-live"),
    pytest.param(0.5, r"episode indices must be an int or a 1-d array of ints \(got float64", id="float"),
    pytest.param("0", r"episode indices must be an int or a 1-d array of ints", id="str"),
    pytest.param(True, r"episode indices must be an int or a 1-d array of ints \(got bool", id="bool"),
    pytest.param([[0]], r"episode indices must be an int or a 1-d array of ints \(got int64 of shape \(1, 1\)\)",
                 id="2-d"),
])
def test_update_bad_indices(buffer, indices, match):
    before = committed(buffer)
    with raises(OptionError, match=match):
        buffer.update(indices, reward=99.0)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("indices, data, match", [
    pytest.param([0], dict(reward=np.zeros((1, 4))), r"field 'reward' in update has T=4 steps but a selected episode "
                                                     r"is shorter \(shortest: 3 steps\)", id="too-many-steps"),
    pytest.param([0, 1], dict(obs=np.zeros((2, 4, 3))), r"field 'obs' in update has T=4 steps .*\(shortest: 3 steps\)",
                 id="too-many-steps-for-shortest"),
    pytest.param(0, dict(reward=np.zeros(11)), r"field 'reward' in update has T=11 steps, more than max_timesteps=10$",
                 id="past-max_timesteps"),
    pytest.param([0, 1], dict(reward=np.zeros((3, 2))), r"field 'reward' in update must have shape \(2, T, "
                                                        r"\*\(\)\) \(got \(3, 2\)\)", id="wrong-count"),
    pytest.param([0, 1], dict(reward=np.zeros((2, 2, 2, 2))), r"field 'reward' in update must have shape \(2, T",
                 id="too-many-axes"),
    pytest.param([0, 1], dict(task=[1, 2, 3]), r"meta field 'task' must have shape \(2,\) \(got \(3,\)\)",
                 id="meta-wrong-count"),
    pytest.param([0], dict(), r"update needs at least one field to write", id="no-data"),
])
def test_update_bad_data(buffer, indices, data, match):
    before = committed(buffer)
    with raises(InvalidDataError, match=match):
        buffer.update(indices, **data)
    assert_unchanged(buffer, before)


@pytest.mark.parametrize("data", [
    pytest.param(dict(reward=99.0, bogus=1.0), id="good-then-unknown"),
    pytest.param(dict(reward=99.0, action=2.5), id="good-then-lossy"),
    pytest.param(dict(task=99, weight="heavy"), id="good-meta-then-bad-meta"),
    pytest.param(dict(obs=np.ones(3), reward=np.zeros((2, 9))), id="good-then-too-many-steps"),
])
def test_failed_update_writes_nothing(buffer, data):
    before = committed(buffer)
    with raises(InvalidDataError, match=r"'(bogus|action|weight|reward)'"):
        buffer.update([0, 1], **data)
    assert_unchanged(buffer, before)

def test_update_with_tensors_that_require_grad(buffer):
    buffer.update([0, 1], obs=torch.full((2, 3, 3), 4.0, requires_grad=True),
                  weight=torch.tensor(2.0, requires_grad=True))
    episodes, _ = committed(buffer)
    for episode in episodes:
        np.testing.assert_array_equal(episode["obs"][:3], np.full((3, 3), 4.0, np.float32))
        assert episode["weight"] == 2.0
    np.testing.assert_array_equal(episodes[1]["obs"][3], good_step(1, 3)["obs"])  # the 4th step untouched
