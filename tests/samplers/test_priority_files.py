"""A prioritized sampler's files in the folder (samplers/priority_files.py) across a grow of the store:
the priorities set before ``buffer.grow(...)`` are the ones a sampler opened afterwards starts from (a
writable buffer's sampler remaps the files in the folder, a read-only reader's remaps them in memory and
writes nothing), new episodes enter at the largest priority, and a sampler left open across the grow
follows it (or, after a ``max_timesteps`` grow, says what to do and lets go of its files).

Priorities are recorded by (episode id, t): keys change with a ``max_timesteps`` grow (their stride is
``max_timesteps``), the rows of a live episode never do.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from memmap_replay import InvalidDataError, ReplayBuffer, SchemaMismatchError, StoreLockedError
from memmap_replay.core import folderio
from memmap_replay.core.index import position_rows

from conftest import episode_arrays

ALPHA = 0.5
STRIDE = 8  # max_timesteps of every buffer before its grow

RING = dict(circular=True, max_episodes=5, max_steps=30, count=8)  # ids passed max_episodes, rows wrapped
GROWS = {
    "max_timesteps": (dict(), dict(max_timesteps=12)),
    "max_episodes": (dict(), dict(max_episodes=12)),  # max_steps follows (room for the added episodes)
    "max_episodes-ring-moves": (RING, dict(max_episodes=7)),  # slots move, through an intermediate count
    "max_episodes-ring-doubles": (RING, dict(max_episodes=10)),  # slots move, in one commit
    "max_steps": (dict(), dict(max_steps=200)),
    "max_steps-ring": (RING, dict(max_steps=90)),
    "circular": (dict(), dict(circular=True)),
    "everything": (RING, dict(max_episodes=9, max_timesteps=10, max_steps=120)),
}


def length_of(number: int) -> int:
    return 3 + number % 5  # 3 .. 7 steps: every episode fits max_timesteps=8


def store(buffer: ReplayBuffer, numbers) -> None:
    for number in numbers:
        buffer.store_episode(**episode_arrays(number + 1, length_of(number)), task_id=number, end="terminated")


def filled(make_buffer, *, circular=False, max_episodes=6, max_steps=None, count=4) -> ReplayBuffer:
    buffer = make_buffer("grown", max_episodes=max_episodes, max_timesteps=STRIDE, max_steps=max_steps,
                         circular=circular)
    store(buffer, range(count))
    return buffer


def positions(sampler) -> dict[tuple[int, int], int]:
    """(episode id, t) -> store row of every position of the sampler's view (as it is now)."""
    view = sampler.view
    table = view.table
    rows, episode = position_rows(view.positions, table, np.ones(len(table), dtype=bool))
    t = rows - table.start[episode]
    return dict(zip(zip(table.ids[episode].tolist(), t.tolist()), rows.tolist()))


def priorities_of(sampler) -> dict[tuple[int, int], float]:
    """(episode id, t) -> the raw priority the sampler's tree holds for every position of its view."""
    return {where: float(sampler.tree.leaves[row]) ** (1 / sampler.alpha) for where, row in positions(sampler).items()}


def set_priorities(sampler, rng) -> dict[tuple[int, int], float]:
    """Distinct priorities on every position, through batches' ``_key`` (every position drawn); returns
    them by (episode id, t)."""
    keys = np.zeros(0, dtype=np.int64)
    for _ in range(40):  # (seeded: the same draws every run)
        keys = np.union1d(keys, sampler.batch(256)["_key"].numpy())
        if len(keys) == len(sampler.view):
            break
    ids, t = np.divmod(keys, sampler.view.key_stride)
    assert set(zip(ids.tolist(), t.tolist())) == set(positions(sampler))  # every position drawn
    raw = 0.5 + 0.25 * rng.permutation(len(keys))
    assert sampler.update_priorities(keys, raw) == len(keys)
    return dict(zip(zip(ids.tolist(), t.tolist()), raw.tolist()))


def assert_priorities(sampler, expected: dict, *, new_ids=(), largest: float | None = None) -> None:
    """Each live position holds the priority set for it; positions of ``new_ids`` the largest one set
    (``largest``: when some of those set are gone from ``expected``)."""
    got = priorities_of(sampler)
    largest = max(expected.values()) if largest is None else largest
    assert sampler.max_priority == pytest.approx(largest)
    for (episode_id, t), priority in got.items():
        want = largest if episode_id in new_ids else expected[(episode_id, t)]
        assert priority == pytest.approx(want), (episode_id, t)
    assert {episode_id for episode_id, _ in got} - set(new_ids) <= {episode_id for episode_id, _ in expected}


def live_ids(buffer: ReplayBuffer) -> list[int]:
    return buffer.episode_store.live_table().ids.tolist()


def folder_snapshot(folder):
    """Every entry under ``folder``: its bytes (files) and its mtime (ns)."""
    return {path.relative_to(folder): (path.read_bytes() if path.is_file() else None, path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*"))}


def grown_with_priorities(make_buffer, rng, made: dict, grow: dict):
    """A buffer, priorities set on every position by a writable sampler (then closed), then grown and closed."""
    buffer = filled(make_buffer, **made)
    sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    expected = set_priorities(sampler, rng)
    sampler.close()
    table = buffer.episode_store.live_table()
    slots = dict(zip(table.ids.tolist(), table.slots.tolist()))
    buffer.grow(**grow)
    table = buffer.episode_store.live_table()
    moved = any(slots[i] != s for i, s in zip(table.ids.tolist(), table.slots.tolist()))
    buffer.close()
    return buffer.folder, expected, moved


# ---- a sampler opened after the grow -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(GROWS))
def test_a_read_only_reader_starts_from_the_priorities_set_before_a_grow_and_writes_nothing(make_buffer, rng, name):
    made, grow = GROWS[name]
    folder, expected, moved = grown_with_priorities(make_buffer, rng, made, grow)
    assert moved == name.startswith("max_episodes-ring") or name == "everything"  # the slot moves are tested
    before = folder_snapshot(folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        sampler = reader.sampler("prioritized", alpha=ALPHA, seed=0)
        assert sampler.files is None
        assert_priorities(sampler, expected)
        batch = sampler.sample(8)
        assert sampler.update_priorities(batch.keys, np.full(8, 3.0)) == 8  # in memory
        sampler.close()
    assert folder_snapshot(folder) == before  # byte-identical, mtimes unchanged


@pytest.mark.parametrize("name", list(GROWS))
def test_a_writable_sampler_takes_the_priorities_set_before_a_grow_remapped(make_buffer, rng, name):
    made, grow = GROWS[name]
    folder, expected, _ = grown_with_priorities(make_buffer, rng, made, grow)
    with ReplayBuffer.from_folder(folder) as buffer:
        capacity = buffer.episode_store.capacity
        sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
        assert_priorities(sampler, expected)
        directory = folder / "priorities"
        assert np.load(directory / "steps.npy").shape == (capacity.max_steps + 1,)  # the files are of the new size
        assert np.load(directory / "steps.owner.npy").shape == (capacity.max_episodes,)
        assert json.loads((directory / "steps.json").read_text())["key_stride"] == capacity.max_timesteps
        assert not [entry for entry in os.listdir(directory) if entry.endswith(".tmp")]
        first_new = buffer.episode_store.meta.state.next_episode
        store(buffer, range(100, 106 if name == "max_episodes" else 102))  # into new slots and rows
        new_ids = range(first_new, buffer.episode_store.meta.state.next_episode)
        sampler.sample(4)  # takes in the new episodes
        live, largest = set(live_ids(buffer)), max(expected.values())
        expected = {where: priority for where, priority in expected.items() if where[0] in live}
        assert_priorities(sampler, expected, new_ids=new_ids, largest=largest)  # new ones at the largest
        sampler.close()
        again = buffer.sampler("prioritized", alpha=ALPHA, seed=0)  # the files as remapped, kept
        assert_priorities(again, expected, new_ids=new_ids, largest=largest)
        again.close()
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # a reader of the remapped files
        sampler = reader.sampler("prioritized", alpha=ALPHA, seed=0)
        assert_priorities(sampler, expected, new_ids=new_ids, largest=largest)
        sampler.close()


def test_a_window_view_keeps_its_priorities_across_a_grow_that_moves_slots(make_buffer, rng):
    buffer = filled(make_buffer, **RING)
    sampler = buffer.sampler("sequence", window=3, alpha=ALPHA, seed=0)
    expected = set_priorities(sampler, rng)
    sampler.close()
    buffer.grow(max_episodes=7, max_timesteps=9)
    again = buffer.sampler("sequence", window=3, alpha=ALPHA, seed=0)
    assert_priorities(again, expected)
    again.close()


def test_priorities_of_another_view_are_still_refused_after_a_grow(make_buffer, rng):
    folder, _, _ = grown_with_priorities(make_buffer, rng, dict(), dict(max_timesteps=12, max_episodes=8))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        with pytest.raises(InvalidDataError, match="belong to another view .* pass another name=, or persist=False"):
            reader.sampler("prioritized", window=3, name="steps")
    with ReplayBuffer.from_folder(folder) as buffer:
        with pytest.raises(InvalidDataError, match=r"belong to another view .* pass another name= \(or delete"):
            buffer.sampler("prioritized", window=3, name="steps")


def _truncated(path):
    os.truncate(path, path.stat().st_size - 8)


def _longer_than_capacity(path):
    np.save(path, np.ones(10_000))


def _owner_of_floats(path):
    np.save(path, np.zeros(5, np.float32))


def _garbage(path):
    path.write_bytes(b"garbage" * 9)


DAMAGES = {
    "values-truncated": ("steps.npy", _truncated),
    "values-longer-than-the-capacity": ("steps.npy", _longer_than_capacity),
    "values-garbage": ("steps.npy", _garbage),
    "owner-truncated": ("steps.owner.npy", _truncated),
    "owner-of-floats": ("steps.owner.npy", _owner_of_floats),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_files_of_a_grown_store_count_as_none(make_buffer, rng, damage):
    folder, _, _ = grown_with_priorities(make_buffer, rng, RING, dict(max_episodes=7))
    file, spoil = DAMAGES[damage]
    spoil(folder / "priorities" / file)
    before = folder_snapshot(folder)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        sampler = reader.sampler("prioritized", alpha=ALPHA, seed=0)
        leaves = np.array(list(priorities_of(sampler).values()))
        # as if there were none (the largest priority may survive a damaged owner file)
        assert np.allclose(leaves, leaves[0]) and (damage.startswith("owner") or leaves[0] == pytest.approx(1.0))
        sampler.close()
    assert folder_snapshot(folder) == before
    with ReplayBuffer.from_folder(folder) as buffer:
        sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
        leaves = np.array(list(priorities_of(sampler).values()))
        assert np.allclose(leaves, leaves[0]) and (damage.startswith("owner") or leaves[0] == pytest.approx(1.0))
        sampler.close()


def test_a_remap_killed_between_its_files_is_finished_by_the_next_sampler(make_buffer, rng, monkeypatch):
    folder, expected, _ = grown_with_priorities(make_buffer, rng, RING, dict(max_episodes=7))
    real = folderio.write_atomic

    def killed_at_the_owner_file(folder_, path, *args, **kwargs):
        if str(path).endswith(".owner.npy"):
            raise KeyboardInterrupt  # as a kill after the values file was replaced, before the owner file
        return real(folder_, path, *args, **kwargs)

    monkeypatch.setattr(folderio, "write_atomic", killed_at_the_owner_file)
    with ReplayBuffer.from_folder(folder) as buffer:
        with pytest.raises(KeyboardInterrupt):
            buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    monkeypatch.setattr(folderio, "write_atomic", real)
    stray = folder / "priorities" / "steps.npy.123.0badcafe.tmp"  # what a kill in the middle of a write leaves
    stray.write_bytes(b"half")
    with ReplayBuffer.from_folder(folder) as buffer:
        sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
        assert_priorities(sampler, expected)
        sampler.close()
    assert not stray.exists()


# ---- a sampler left open across the grow ---------------------------------------------------------------------


OPEN_GROWS = {
    "max_episodes": (dict(), dict(max_episodes=12), 8),  # new episodes in new slots and past the old rows
    "max_episodes-ring-moves": (RING, dict(max_episodes=7), 6),
    "max_steps-ring": (RING, dict(max_steps=90), 12),
    "circular": (dict(), dict(circular=True), 6),
}


@pytest.mark.parametrize("name", list(OPEN_GROWS))
def test_an_open_sampler_follows_a_grow_of_its_buffer(make_buffer, rng, name):
    made, grow, more = OPEN_GROWS[name]
    buffer = filled(make_buffer, **made)
    sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    old_rows = buffer.episode_store.capacity.max_steps
    expected = set_priorities(sampler, rng)
    buffer.grow(**grow)
    sampler.sample(4)
    assert_priorities(sampler, expected)  # kept, with slots moved
    first_new = buffer.episode_store.meta.state.next_episode
    store(buffer, range(100, 100 + more))
    new_ids = range(first_new, buffer.episode_store.meta.state.next_episode)
    sampler.sample(4)
    live, largest = set(live_ids(buffer)), max(expected.values())
    expected = {where: priority for where, priority in expected.items() if where[0] in live}
    assert_priorities(sampler, expected, new_ids=new_ids, largest=largest)
    if name != "circular":
        assert max(positions(sampler).values()) >= old_rows  # rows the files did not have before the grow
    later = set_priorities(sampler, rng)  # updates after the grow, on every position, persisted
    sampler.close()
    again = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    assert_priorities(again, later, largest=max(largest, *later.values()))
    again.close()


def test_a_sampler_made_while_the_one_open_across_a_grow_holds_the_priorities_is_told_to_close_it(make_buffer, rng):
    buffer = filled(make_buffer)
    sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    expected = set_priorities(sampler, rng)
    buffer.grow(max_timesteps=12, max_episodes=8)
    with pytest.raises(StoreLockedError, match="another sampler .* keeps the priorities 'steps' .* close it first"):
        buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    sampler.close()
    again = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    assert_priorities(again, expected)
    again.close()


def test_an_open_sampler_lets_go_of_its_priorities_after_a_max_timesteps_grow(make_buffer, rng):
    buffer = filled(make_buffer)
    sampler = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    expected = set_priorities(sampler, rng)
    buffer.grow(max_timesteps=12)
    with pytest.raises(SchemaMismatchError, match=r"grown to max_timesteps=12 .* this sampler let go of its "
                                                  r"priorities .* buffer\.sampler\("):
        sampler.sample(4)
    with pytest.raises(SchemaMismatchError, match="grown to max_timesteps=12"):
        sampler.update_priorities(np.array([0]), np.array([1.0]))
    again = buffer.sampler("prioritized", alpha=ALPHA, seed=0)  # not refused: the old one let go
    assert_priorities(again, expected)
    again.close()


def test_a_read_only_reader_following_the_writer_keeps_its_priorities_across_a_grow(make_buffer, rng):
    buffer = filled(make_buffer, **RING)
    writer = buffer.sampler("prioritized", alpha=ALPHA, seed=0)
    expected = set_priorities(writer, rng)
    writer.close()
    reader = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    sampler = reader.sampler("prioritized", alpha=ALPHA, seed=0, follow="disk")
    assert_priorities(sampler, expected)
    buffer.grow(max_episodes=7, max_steps=90)
    first_new = buffer.episode_store.meta.state.next_episode
    store(buffer, range(100, 112))
    new_ids = range(first_new, buffer.episode_store.meta.state.next_episode)
    sampler.sample(4)
    live, largest = set(live_ids(buffer)), max(expected.values())
    expected = {where: priority for where, priority in expected.items() if where[0] in live}
    assert_priorities(sampler, expected, new_ids=new_ids, largest=largest)
    assert max(positions(sampler).values()) >= 30  # rows past the old max_steps
    sampler.close()
    reader.close()
