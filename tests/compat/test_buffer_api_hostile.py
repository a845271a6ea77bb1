"""Hostile input at the 0.2.3 methods (``compat/buffer_api.py``, ``compat/arrays.py``): any value as a
batch size, a timestep index, a slot, a field name or an index of ``data``. Each is accepted as a valid
value or refused with a library error, and a refused call changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from memmap_replay import BufferFullError, ReplayBuffer, ReplayError

from catalogue import fast, garbage

FIELDS = dict(reward="float", obs=("float", (2,)))


@pytest.fixture(scope="module")
def buf(tmp_path_factory):
    buffer = ReplayBuffer(tmp_path_factory.mktemp("hostile") / "s", 4, 5, FIELDS, dict(task="int"))
    buffer.store_episode(reward=np.arange(3.0), task=1)
    yield buffer
    buffer.close()


def snapshot(buffer):
    return [(len(e), e["reward"].tolist(), e["obs"].tolist(), int(e.meta["task"])) for e in buffer.episodes()]


@fast(60)
@given(value=garbage)
def test_any_batch_size_after_a_flat_batch(buf, value):
    before = snapshot(buf)
    buf.store_batch(reward=np.zeros(2))
    try:
        buf.advance_episode(batch_size=value)
    except BufferFullError:  # batch_size=4: refused by the store, the batch is kept (grow, then advance it)
        assert snapshot(buf) == before and buf.timestep_index == 1
    except ReplayError:
        assert snapshot(buf) == before and buf.timestep_index == 1  # refused at once: the batch is still open
        buf.advance_episode(batch_size=2)
    buf.reset_()
    buf.store_episode(reward=np.arange(3.0), task=1)


@fast(60)
@given(value=garbage)
def test_any_timestep_index(buf, value):
    buf.store(reward=1.0)
    try:
        buf.timestep_index = value
    except ReplayError:
        assert buf.timestep_index == 1
    buf.reset_()
    buf.store_episode(reward=np.arange(3.0), task=1)


@fast(80)
@given(slot=garbage, t=garbage, name=garbage, value=garbage)
def test_any_store_datapoint(buf, slot, t, name, value):
    before = snapshot(buf)
    for call in (lambda: buf.store_datapoint(slot, t, name, value),
                 lambda: buf.store_meta_datapoint(slot, name, value)):
        try:
            call()
        except ReplayError:
            assert snapshot(buf) == before


@fast(80)
@given(key=garbage)
def test_any_index_of_data(buf, key):
    for array in (buf.data["obs"], buf.meta_data["task"]):
        try:
            values = array[key]
        except (ReplayError, KeyError):
            continue
        assert isinstance(values, (np.ndarray, np.generic)) and values.dtype == array.dtype


@fast(40)
@given(name=garbage)
def test_any_name_of_data(buf, name):
    for mapping in (buf.data, buf.meta_data):
        if isinstance(name, str) and name in mapping:
            continue
        with pytest.raises(KeyError, match=r"is not a"):
            mapping[name]
