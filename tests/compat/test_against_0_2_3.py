"""Differential test: the same 0.2.3 program (its flat loop, flat batches, single values by slot, updates)
run on memmap-replay-buffer 0.2.3 itself and on this library leaves the same values in ``data``,
``meta_data``, ``episode_lens``, ``num_episodes`` and ``episode_index``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memmap_replay import ReplayBuffer

reference = pytest.importorskip("memmap_replay_buffer", reason="the reference package (memmap-replay-buffer 0.2.3)")

FIELDS = dict(obs=("float", (2,)), action="int", done="bool")
META = dict(task="int")
MAX_EPISODES, MAX_TIMESTEPS = 4, 6

steps = st.integers(1, MAX_TIMESTEPS)
episode = st.tuples(st.just("episode"), steps, st.booleans(), st.integers(0, 99))
batch = st.tuples(st.just("batch"), steps, st.integers(1, 3), st.integers(0, 99))
update = st.tuples(st.just("update"), st.integers(0, MAX_EPISODES - 1), st.integers(0, 99), st.integers(0, 99))
programs = st.lists(st.one_of(episode, batch, update), min_size=1, max_size=8)


def run(buffer, program) -> None:
    for op, *args in program:
        if op == "episode":  # the flat loop, meta given during the episode
            length, with_meta, value = args
            for t in range(length):
                buffer.store(obs=np.array([value, t], np.float32), action=value + t, done=t == length - 1)
                if with_meta and t == 0:
                    buffer.store_meta_datapoint(buffer.episode_index, "task", value)
            buffer.advance_episode()
        elif op == "batch":  # store_batch outside batched_episode, then advance_episode(batch_size)
            length, width, value = args
            buffer.store_meta_batch(task=np.arange(width) + value)
            for t in range(length):
                # every field given: 0.2.3 leaves an evicted episode's values in fields a batch does not write to,
                # in slots past the first of the batch (it re-initialises only the first); here they hold defaults
                buffer.store_batch(obs=np.full((width, 2), value + t, np.float32), action=np.arange(width) * t,
                                   done=np.full(width, t == length - 1))
            buffer.advance_episode(batch_size=width)
        else:  # a stored episode rewritten: update (0.2.3's forms) and single values
            slot, value, t = args
            length = int(buffer.episode_lens[slot])
            if length > 0:
                buffer.update(slot, obs=np.full((length, 2), value, np.float32))
                buffer.update(np.array([slot]), action=np.arange(length)[None] + value, task=[value + 1])
                buffer.store_meta_datapoint(slot, "task", value)
                buffer.store_datapoint(slot, t % length, "action", value)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(program=[("batch", 5, 3, 0), ("batch", 5, 3, 0), ("batch", 6, 2, 0), ("batch", 6, 2, 0)])  # a wrap
@given(program=programs)
def test_the_same_program_leaves_the_same_arrays(tmp_path_factory, program):
    folder = tmp_path_factory.mktemp("diff")
    theirs = reference.ReplayBuffer(folder / "theirs", MAX_EPISODES, MAX_TIMESTEPS, FIELDS, META, circular=True)
    # a ring of flat rows loses up to one episode's rows where it wraps: with that much more room it holds
    # max_episodes episodes whenever 0.2.3's fixed slots do (docs/memmap-replay-buffer.md, circular)
    ours = ReplayBuffer(folder / "ours", MAX_EPISODES, MAX_TIMESTEPS, FIELDS, META, circular=True,
                        max_steps=(MAX_EPISODES + 1) * (MAX_TIMESTEPS + 1))
    try:
        run(theirs, program)
        run(ours, program)
        assert ours.num_episodes == theirs.num_episodes and ours.episode_index == theirs.episode_index
        lens = np.asarray(theirs.episode_lens)
        assert ours.episode_lens.tolist() == lens.tolist()
        live = lens > 0
        # the steps of the episodes (past an episode's end 0.2.3 may keep an evicted episode's values, and in
        # slots it never wrote zeros; here both hold the field default)
        stepped = np.arange(MAX_TIMESTEPS)[None, :] < lens[:, None]
        for name in FIELDS:
            np.testing.assert_array_equal(np.asarray(ours.data[name])[stepped], np.asarray(theirs.data[name])[stepped],
                                          err_msg=name)
        np.testing.assert_array_equal(np.asarray(ours.meta_data["task"])[live],
                                      np.asarray(theirs.meta_data["task"])[live])
    finally:
        ours.close()
