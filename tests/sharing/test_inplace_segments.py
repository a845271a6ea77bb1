"""Edits of segments of split episodes (``long_episodes="split"``, ``_links_cut`` in ``sharing/inplace.py``): deleting
a segment truncates the one it continued (keeping its final observation) and makes the one continuing it start an
episode; trimming a segment's head truncates its predecessor, trimming its tail unlinks its successor; joined
episodes follow, ``verify`` is clean, and compact keeps it all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, verify

LIMIT = 4  # max_timesteps: an episode of 10 steps is segments of 4, 4 and 2 (ids 0, 1, 2)


def make(folder: Path) -> ReplayBuffer:
    buffer = ReplayBuffer(folder, 16, LIMIT, fields=dict(obs="float"), long_episodes="split")
    buffer.store_episode(obs=np.arange(10, dtype=np.float32), end="terminated")  # segments 0, 1, 2
    buffer.store_episode(obs=np.arange(100, 103, dtype=np.float32), end="terminated")  # 3
    return buffer


def table(buffer: ReplayBuffer) -> dict[int, tuple]:
    """Each live segment: (its obs, end, final obs or None, continues)."""
    return {item.id: (item["obs"].tolist(), item.end, None if item.final is None else float(item.final["obs"]),
                      item.continues) for item in buffer.episodes()}


def joined(buffer: ReplayBuffer) -> list[tuple]:
    return [(item.id, item["obs"].tolist(), item.end) for item in buffer.episodes(join_segments=True)]


def test_the_segments_as_stored(tmp_path):
    with make(tmp_path / "s") as buffer:
        assert table(buffer) == {0: ([0, 1, 2, 3], None, 4.0, None), 1: ([4, 5, 6, 7], None, 8.0, 0),
                                 2: ([8, 9], "terminated", None, 1), 3: ([100, 101, 102], "terminated", None, None)}
        assert joined(buffer) == [(0, list(range(10)), "terminated"), (3, [100, 101, 102], "terminated")]


EDITS = {
    "delete the middle segment": (
        lambda buffer: buffer.delete_episodes([1]),
        {0: ([0, 1, 2, 3], "truncated", 4.0, None), 2: ([8, 9], "terminated", None, None)},
        [(0, [0, 1, 2, 3], "truncated"), (2, [8, 9], "terminated")]),
    "delete the first segment": (
        lambda buffer: buffer.delete_episodes([0]),
        {1: ([4, 5, 6, 7], None, 8.0, None), 2: ([8, 9], "terminated", None, 1)},
        [(1, [4, 5, 6, 7, 8, 9], "terminated")]),
    "delete the last segment": (
        lambda buffer: buffer.delete_episodes([2]),
        {0: ([0, 1, 2, 3], None, 4.0, None), 1: ([4, 5, 6, 7], "truncated", 8.0, 0)},
        [(0, [0, 1, 2, 3, 4, 5, 6, 7], "truncated")]),
    "trim the middle segment's head": (
        lambda buffer: buffer.trim(1, start=1),
        {0: ([0, 1, 2, 3], "truncated", 4.0, None), 1: ([5, 6, 7], None, 8.0, None),
         2: ([8, 9], "terminated", None, 1)},
        [(0, [0, 1, 2, 3], "truncated"), (1, [5, 6, 7, 8, 9], "terminated")]),
    "trim the middle segment's tail": (
        lambda buffer: buffer.trim(1, stop=2),
        {0: ([0, 1, 2, 3], None, 4.0, None), 1: ([4, 5], "truncated", 6.0, 0), 2: ([8, 9], "terminated", None, None)},
        [(0, [0, 1, 2, 3, 4, 5], "truncated"), (2, [8, 9], "terminated")]),
    "trim the first segment's tail": (
        lambda buffer: buffer.trim(0, stop=-1),
        {0: ([0, 1, 2], "truncated", 3.0, None), 1: ([4, 5, 6, 7], None, 8.0, None),
         2: ([8, 9], "terminated", None, 1)},
        [(0, [0, 1, 2], "truncated"), (1, [4, 5, 6, 7, 8, 9], "terminated")]),
    "trim the last segment's head": (
        lambda buffer: buffer.trim(2, start=1),
        {0: ([0, 1, 2, 3], None, 4.0, None), 1: ([4, 5, 6, 7], "truncated", 8.0, 0),
         2: ([9], "terminated", None, None)},
        [(0, [0, 1, 2, 3, 4, 5, 6, 7], "truncated"), (2, [9], "terminated")]),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_an_edit_of_a_segment_cuts_its_links(tmp_path, case):
    edit, segments, episodes = EDITS[case]
    folder = tmp_path / "s"
    unchanged = {3: ([100, 101, 102], "terminated", None, None)}
    with make(folder) as buffer:
        edit(buffer)
        assert table(buffer) == {**segments, **unchanged}
        assert joined(buffer) == [*episodes, (3, [100, 101, 102], "terminated")]
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert table(reader) == {**segments, **unchanged}
        assert joined(reader) == [*episodes, (3, [100, 101, 102], "terminated")]
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.compact()
        assert table(buffer) == {**segments, **unchanged}
        assert joined(buffer) == [*episodes, (3, [100, 101, 102], "terminated")]


@pytest.mark.parametrize("case", sorted(EDITS))
def test_verify_is_clean_after_an_edit_of_a_segment(tmp_path, case):
    folder = tmp_path / "s"
    with make(folder) as buffer:
        EDITS[case][0](buffer)
    report = verify(folder)
    assert report.ok, report
