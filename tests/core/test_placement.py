"""Placement (core/placement.py): rows after the write head, back to row 0 in a ring; frames after the frames head,
back to byte 0 with the rows; evictions of every live episode whose rows or frames a new one overlaps."""

import numpy as np
import pytest

from memmap_replay import BufferFullError
from memmap_replay.core.format import Capacity, State
from memmap_replay.core.index import EpisodeTable
from memmap_replay.core.placement import place
from memmap_replay.core.store import PendingEpisode


class Frames:
    """A compressed field's files as place() reads them: each live episode's span of frames."""

    def __init__(self, spans):
        self.spans = spans  # first row -> (lo, hi)

    def span(self, first_rows, last_rows):
        lo, hi = zip(*(self.spans[int(row)] for row in first_rows))
        return np.array(lo), np.array(hi)


def table(ids, starts, lengths, max_episodes):
    ids = np.array(ids, np.int64)
    return EpisodeTable(ids, ids % max_episodes, np.array(starts, np.int64), np.array(lengths, np.int64),
                        np.zeros(len(ids), np.uint8), np.zeros(len(ids), bool))


def episode(length):
    return PendingEpisode({}, length)


def encoded(nbytes):
    return {"image": (np.array([nbytes]), np.zeros(nbytes, np.uint8))}


def test_rows_and_frames_go_after_the_heads():
    capacity, state = Capacity(8, 10, 40, True), State(0, 2, 20, 64, 2, {"image": {"head": 300, "bytes": 1024}})
    live = table([0, 1], [0, 10], [10, 10], 8)
    first, plan, heads = place(capacity, state, live, {"image": Frames({0: (0, 100), 10: (100, 300)})},
                               [episode(5), episode(5)], [encoded(50), encoded(70)])
    assert first == 0
    assert [(start, at) for start, _, at in plan] == [(20, {"image": 300}), (25, {"image": 350})]
    assert heads == {"image": 420}


def test_a_wrap_of_the_rows_puts_the_frames_at_byte_zero_and_evicts_by_either():
    capacity, state = Capacity(8, 10, 30, True), State(0, 3, 30, 64, 3, {"image": {"head": 60, "bytes": 1024}})
    live = table([0, 1, 2], [0, 10, 20], [10, 10, 10], 8)
    frames = Frames({0: (0, 20), 10: (20, 40), 20: (40, 60)})
    # rows 0..4 overlap episode 0 only; 45 bytes of frames overlap episodes 0, 1 and 2
    first, plan, heads = place(capacity, state, live, {"image": frames}, [episode(5)], [encoded(45)])
    assert plan[0][0] == 0 and plan[0][2] == {"image": 0} and first == 3 and heads == {"image": 45}
    # 15 bytes overlap episode 0 only, as the rows do
    first, _, _ = place(capacity, state, live, {"image": frames}, [episode(5)], [encoded(15)])
    assert first == 1


def test_a_store_that_is_not_a_ring_refuses_what_does_not_fit():
    capacity, state = Capacity(2, 10, 30, False), State(0, 2, 25, 64, 2)
    live = table([0, 1], [0, 10], [10, 15], 2)
    with pytest.raises(BufferFullError, match=r"does not fit in the 5 rows left of max_steps=30.*grow it in place"):
        place(capacity, state, live, {}, [episode(8)], [{}])
    with pytest.raises(BufferFullError, match=r"all 2 episode slots are used"):
        place(capacity, state, live, {}, [episode(3)], [{}])
