"""Readers across a grow made by another store object (as by a writer in another process): a view made
before the grow never returns rows of one episode with the meta of another; it refuses the batch with
``SampleExpiredError`` naming the grow (``SchemaMismatchError`` for longer episodes, whose keys change),
and a sampler's ``batch()`` draws again from the new table.

Each episode's rows name it (``eid``, ``t``) and so does its meta value (``tag``). A hook runs the writer
at the worst instant: after the view gathered the rows and before it read the meta and checked. Every
scenario overwrites what the view read (the ring evicts it, or the slot its meta was in is reused), so a
batch returned unrefused would hold wrong meta or stale rows.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from memmap_replay import MixedSampler, ReplayBuffer, SampleExpiredError, SchemaMismatchError, ShardSet, shard_folder
from memmap_replay.distributed.shards import SHARD_STRIDE

FIELDS = dict(obs=("float", (2,)), goal=("float", (2,)), reward="float", eid="int64", t="int32")
META = dict(tag="int64")
LENGTH = 6


def write(buffer, count):
    """Commit ``count`` episodes of LENGTH steps whose every row and meta value name the episode id."""
    for _ in range(count):
        eid = buffer.episode_store.meta.state.next_episode
        t = np.arange(LENGTH)
        buffer.store_episode(end="terminated", tag=eid, eid=np.full(LENGTH, eid), t=t.astype(np.int32),
                             obs=np.stack([np.full(LENGTH, eid), t], axis=1).astype(np.float32),
                             goal=np.zeros((LENGTH, 2), np.float32), reward=np.zeros(LENGTH, np.float32))


def flat_to_ring(folder):
    """A flat store the writer turns into a ring, then fills: every episode the view holds is evicted."""
    writer = ReplayBuffer(folder, max_episodes=8, max_timesteps=16, max_steps=64, fields=FIELDS, meta_fields=META)
    write(writer, 8)

    def grow():
        writer.grow(circular=True)
        write(writer, 12)
    return writer, grow


def cleared_flat(folder):
    """A flat store cleared twice (ids 16..18 live in slots 0..2); the grow to 11 slots moves them to 5..7,
    and episode 22 then takes slot 0, where the view reads episode 16's meta. No row is overwritten."""
    writer = ReplayBuffer(folder, max_episodes=8, max_timesteps=16, max_steps=400, fields=FIELDS, meta_fields=META)
    for _ in range(2):
        write(writer, 8)
        writer.clear()
    write(writer, 3)

    def grow():
        writer.grow(max_episodes=11)
        write(writer, 5)
    return writer, grow


def grown_ring(folder):
    """A ring whose ids passed max_episodes, grown to 11 slots (two commits: the slots overlap), then filled."""
    writer = ReplayBuffer(folder, max_episodes=8, max_timesteps=16, max_steps=64, fields=FIELDS, meta_fields=META,
                          circular=True)
    write(writer, 20)

    def grow():
        writer.grow(max_episodes=11, max_steps=80)
        write(writer, 14)
    return writer, grow


def longer_episodes(folder):
    """max_timesteps grows: keys (episode id * max_timesteps + t) of the old view mean other steps now."""
    writer = ReplayBuffer(folder, max_episodes=8, max_timesteps=16, max_steps=64, fields=FIELDS, meta_fields=META)
    write(writer, 4)

    def grow():
        writer.grow(max_timesteps=32, max_steps=128)
        write(writer, 2)
    return writer, grow


SCENARIOS = {"flat_to_ring": flat_to_ring, "cleared_flat": cleared_flat, "grown_ring": grown_ring}
REFUSED = {"flat_to_ring": (SampleExpiredError, "was grown"), "cleared_flat": (SampleExpiredError, "was grown"),
           "grown_ring": (SampleExpiredError, "was grown"), "longer_episodes": (SchemaMismatchError, "max_timesteps")}

VIEWS = {
    "trajectory": dict(),
    "timestep": dict(timestep_level=True),
    "window": dict(window=3),
    "nstep": dict(n_steps=3),
    "transitions": dict(transitions=True, observation_fields=("obs",)),
    "hindsight": dict(hindsight=dict(goal_field="goal", achieved_field="obs",
                                     reward_fn=lambda achieved, goal: np.zeros(len(goal), np.float32))),
}


def grow_during_the_gather(view, grow):
    """Run ``grow`` once, right after the view's next gather of step rows (before its meta read and check)."""
    gather, grown = view.gather, []

    def gather_then_grow(episode, t):
        batch = gather(episode, t)
        if not grown:
            grown.append(True)
            grow()
        return batch

    view.gather = gather_then_grow
    return grown


def rows_and_meta_agree(batch, ids=None):
    """Every row's eid (and the key's episode, when given) is the batch's meta tag for that row."""
    eid, tag = batch["eid"].numpy(), batch["tag"].numpy()
    eid = eid.reshape(len(tag), -1)
    wrong = (eid != tag[:, None]).any(axis=1)
    if ids is not None:
        wrong |= ids != tag
    return int(wrong.sum())


@pytest.mark.parametrize("view_kind", sorted(VIEWS))
@pytest.mark.parametrize("scenario", [*SCENARIOS, "longer_episodes"])
def test_a_view_made_before_a_grow_refuses_the_batch_read_across_it(tmp_path, scenario, view_kind):
    make = {**SCENARIOS, "longer_episodes": longer_episodes}[scenario]
    writer, grow = make(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        view = reader.dataset(**VIEWS[view_kind])
        items = np.arange(len(view))
        good = view.__getitems__(items)  # before the grow: every row and meta value name one episode
        assert rows_and_meta_agree(good) == 0
        grown = grow_during_the_gather(view, grow)
        error, match = REFUSED[scenario]
        with pytest.raises(error, match=match):
            view.__getitems__(items)
        assert grown
        with pytest.raises(error, match=match):  # and on: the view's snapshot is of the old geometry
            view.__getitems__(items[:1])


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "sequence"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_sampler_draws_again_from_the_grown_store(tmp_path, scenario, kind):
    writer, grow = SCENARIOS[scenario](tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        options = dict(window=3) if kind == "sequence" else dict(timestep_level=True)
        sampler = reader.sampler(kind, seed=1, **options)
        grown = grow_during_the_gather(sampler.view, grow)
        batch = sampler.batch(64)
        assert grown
        ids, t = np.divmod(batch["_key"].numpy(), sampler.view.key_stride)
        assert rows_and_meta_agree(batch, ids) == 0
        state = writer.episode_store.meta.state
        assert ids.min() >= state.first_episode and ids.max() < state.next_episode
        first = batch["t"].numpy().reshape(len(ids), -1)[:, 0]
        np.testing.assert_array_equal(first, t)


def test_a_view_made_before_clear_refuses_rows_written_after_it(tmp_path):
    """A flat store's clear() frees its rows and slots: the next episodes overwrite both."""
    with ReplayBuffer(tmp_path / "store", max_episodes=8, max_timesteps=16, max_steps=64, fields=FIELDS,
                      meta_fields=META) as writer, \
            ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        write(writer, 4)
        reader.refresh()
        view = reader.dataset(timestep_level=True)

        def clear_and_write():
            writer.clear()
            write(writer, 4)

        grow_during_the_gather(view, clear_and_write)
        with pytest.raises(SampleExpiredError, match="clear"):
            view.__getitems__(np.arange(len(view)))


def test_the_writers_own_view_refuses_a_batch_read_across_its_grow(tmp_path):
    """A view over the writer's own store object (a reader thread beside the writer): the same refusal."""
    writer, grow = cleared_flat(tmp_path / "store")
    with writer:
        view = writer.dataset(timestep_level=True)
        grow_during_the_gather(view, grow)
        with pytest.raises(SampleExpiredError, match="was grown"):
            view.__getitems__(np.arange(len(view)))
        view.refresh()
        batch = view.__getitems__(np.arange(len(view)))
        assert rows_and_meta_agree(batch) == 0


def refresh_during_the_gather(view, writer):
    """As another thread sharing the view (a sampler following the store, a DataLoader's gather thread): the
    writer commits and the view takes the new snapshot while this batch's rows are read, once."""
    def commit_and_refresh():
        write(writer, 3)  # the ring evicts the oldest episodes: every table position now names another one
        view.refresh()
    return grow_during_the_gather(view, commit_and_refresh)


def test_a_sample_read_while_another_thread_refreshes_the_view_is_read_again(tmp_path):
    writer, _ = grown_ring(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        sampler = reader.sampler("uniform", seed=3, timestep_level=True)
        sample = sampler.sample(64)
        live = sample.keys // sampler.view.key_stride >= sampler.view.table.ids[0] + 3  # not evicted by the hook
        sample.keys, sample.episode, sample.t = sample.keys[live], sample.episode[live], sample.t[live]
        refreshed = refresh_during_the_gather(sampler.view, writer)
        batch = sampler.view.__getitems__(sample)
        assert refreshed
        ids, t = np.divmod(batch["_key"].numpy(), sampler.view.key_stride)
        assert rows_and_meta_agree(batch, ids) == 0
        np.testing.assert_array_equal(batch["t"].numpy(), t)


def test_an_index_batch_read_while_another_thread_refreshes_the_view_is_refused(tmp_path):
    writer, _ = grown_ring(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        view = reader.dataset(timestep_level=True)
        items = np.arange(len(view) // 2, len(view))  # the newest episodes: live after the hook's commits
        refresh_during_the_gather(view, writer)
        with pytest.raises(SampleExpiredError, match="newer snapshot"):
            view.__getitems__(items)


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_sharded_sampler_draws_again_when_a_shard_is_grown(tmp_path, kind):
    root = tmp_path / "shards"
    writer, grow = cleared_flat(shard_folder(root, 0))
    with writer:
        write_shard = ReplayBuffer(shard_folder(root, 1), max_episodes=8, max_timesteps=16, max_steps=400,
                                   fields=FIELDS, meta_fields=META)
        with write_shard:
            write(write_shard, 3)
        shards = ShardSet(root)
        try:
            sampler = shards.sampler(kind, seed=2, timestep_level=True)
            grown = grow_during_the_gather(sampler.samplers[0].view, grow)
            for _ in range(4):  # until a batch draws from the grown shard
                batch = sampler.batch(32)
                keys = batch["_key"].numpy() // SHARD_STRIDE
                assert rows_and_meta_agree(batch, keys // 16) == 0
            assert grown
        finally:
            shards.close()


def test_a_mixed_sampler_draws_again_from_a_grown_source(tmp_path):
    writer, grow = cleared_flat(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        first, second = reader.sampler("uniform", seed=1, timestep_level=True), reader.sampler("prioritized", seed=2)
        mixed = MixedSampler({first: 1.0, second: 1.0}, seed=3)
        grown = grow_during_the_gather(first.view, grow)
        batch = mixed.batch(32)
        assert grown
        ids = batch["_key"].numpy() // 16
        assert rows_and_meta_agree(batch, ids) == 0
        assert ids.min() >= writer.episode_store.meta.state.first_episode


def test_a_gather_thread_refreshing_the_view_waits_for_the_sampler_following_it(tmp_path):
    """A sampler's loader with gather threads: a thread refreshes the shared view (its batch names episodes
    the snapshot does not know yet) while the sampler in the main thread takes in the last change. The
    sampler's sync and draw see one snapshot: the thread's refresh waits for them. Here the thread is held
    halfway through its refresh (table taken, positions not yet) for as long as the sampler lets it."""
    writer, _ = grown_ring(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        sampler = reader.sampler("prioritized", seed=4, follow="disk", timestep_level=True)
        view, changed, build, threads, halfway = sampler.view, sampler._changed, sampler.view.build, [], []
        inside, proceed, main = threading.Event(), threading.Event(), threading.current_thread()

        def build_held_in_the_thread():
            if threading.current_thread() is not main:
                inside.set()
                proceed.wait(10)
            build()

        def changed_while_a_gather_thread_refreshes(old_table, old_positions):
            try:
                if not threads:
                    write(writer, 2)
                    threads.append(threading.Thread(target=view.refresh))
                    threads[0].start()
                    inside.wait(1.0)  # (with the view's lock the thread waits for it instead, and never gets there)
                halfway.append(bool(view._generation & 1))  # is a snapshot being taken while the sampler reads it?
                return changed(old_table, old_positions)
            finally:
                proceed.set()

        view.build, sampler._changed = build_held_in_the_thread, changed_while_a_gather_thread_refreshes
        write(writer, 1)
        batch = sampler.batch(64)  # follows the writer: _changed runs, and the thread with it
        threads[0].join(10)
        assert not threads[0].is_alive() and halfway and not any(halfway)
        assert rows_and_meta_agree(batch, batch["_key"].numpy() // view.key_stride) == 0
        batch = sampler.batch(64)
        assert rows_and_meta_agree(batch, batch["_key"].numpy() // view.key_stride) == 0


def test_a_snapshot_taken_while_another_thread_refreshes_the_store_is_of_one_meta_json(tmp_path):
    """Views and their gather threads share the reader's store object: a thread that refreshes it (a check
    after a gather) while a view takes its snapshot must not hand the view the old table with the grown
    capacity and stamp (every later check would then pass, with other episodes' meta). The thread's refresh
    waits for the snapshot; the view's next batch is refused for the grow."""
    writer, grow = cleared_flat(tmp_path / "store")
    with writer, ReplayBuffer.from_folder(tmp_path / "store", read_only=True) as reader:
        view = reader.dataset(timestep_level=True)
        store, threads = reader.episode_store, []
        live_table = store.live_table

        def live_table_then_another_thread_refreshes(**options):
            table = live_table(**options)
            if not threads:
                grow()
                threads.append(threading.Thread(target=store.refresh))
                threads[0].start()
                threads[0].join(0.5)  # (it waits for the store's lock this snapshot holds; without one it ran)
            return table

        write(writer, 1)  # something new for the view to take
        store.live_table = live_table_then_another_thread_refreshes
        view.refresh(reread=True)
        threads[0].join(10)
        store.live_table = live_table
        try:
            batch = view.__getitems__(np.arange(len(view)))
        except SampleExpiredError as error:
            assert "was grown" in str(error)
            return
        assert rows_and_meta_agree(batch) == 0
