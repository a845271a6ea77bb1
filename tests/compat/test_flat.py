"""``FlatBatch`` (``compat/flat.py``): 0.2.3's parallel episodes staged a timestep at a time."""

from __future__ import annotations

import numpy as np
import pytest

from memmap_replay import InvalidDataError
from memmap_replay.core.schema import Schema
from memmap_replay.compat.flat import FlatBatch

SCHEMA = Schema.parse(dict(x=("float", (2,), 0.5), n="int"), dict(task=("int", (), 3)))


def test_the_batch_widens_and_grows_with_defaults_where_nothing_was_written():
    batch = FlatBatch(SCHEMA, max_timesteps=300)
    batch.store(dict(n=[1]))
    batch.store(dict(n=[2, 3, 4]))
    for _ in range(280):  # past the first row allocation
        batch.store(dict(x=np.ones((2, 2))))
    batch.store_meta(dict(task=[7, 8]))
    assert (batch.width, batch.length) == (3, 282)
    first, second, third = batch.episodes(3)
    assert first.length == 282 and first.meta["task"] == 7 and third.meta["task"] == 3
    assert third.rows["n"][0][:2].tolist() == [0, 4] and third.rows["x"][0][2].tolist() == [0.5, 0.5]
    assert second.rows["x"][0][281].tolist() == [1.0, 1.0]


def test_set_length_rewinds_to_defaults_and_extends():
    batch = FlatBatch(SCHEMA, max_timesteps=5, length=2)
    batch.store(dict(n=[9, 9]))
    batch.set_length(1)
    batch.set_length(4)
    (episode, _) = batch.episodes(2)
    assert episode.rows["n"][0].tolist() == [0, 0, 0, 0]
    with pytest.raises(InvalidDataError, match=r"timestep_index must be at most max_timesteps=5 \(got 6\)"):
        batch.set_length(6)


def test_more_episodes_than_written_hold_defaults_and_none_without_steps():
    batch = FlatBatch(SCHEMA, max_timesteps=5)
    batch.store_meta(dict(task=[1]))
    assert batch.episodes(2) == []
    batch.store(dict(n=[5]))
    assert [e.rows["n"][0].tolist() for e in batch.episodes(2)] == [[5], [0]]
