"""Writers and readers of a live ring store whose every row is checked: shared by benchmarks/stress.py and
tests/test_live.py.

Every value written is a pure function of (global episode number, t) (``Live.step_values``), and every row
carries a checksum of its other fields (``check``). So a reader verifies each row it is handed against the
(episode id, t) its batch says the row is; each row is one of ``KINDS``:

- *good*: every field equals ``step_values`` of that (episode, t), t is inside the episode, and the meta
  field ``tag`` names the same episode;
- *stale*: a whole row (its checksum and its ``eid``/``t`` fields agree) of another (episode, t) than the
  batch says: rows of an evicted episode that a newer one overwrote;
- *torn*: fields of two different writes in one row (they disagree with each other);
- *wrong meta*: the step fields are right but ``tag`` belongs to another episode (its slot was reused).

A user subclasses ``Live`` with its store's shape (``MAX_T``, ``RING``, ``FIELDS``, ``payload`` ...), makes
one instance at module level and hands its bound methods (``writer_main``, ``sampler_reader``,
``view_reader``) to worker processes: they pickle as (the instance, the method's name), and the instance as
its class, so a worker process must be able to import the user's module.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from memmap_replay import (BufferFullError, InvalidDataError, OptionError, RateLimiter, ReplayBuffer,
                           SampleExpiredError, SchemaMismatchError)
from memmap_replay.views.loader import BatchIndexSampler

KINDS = ("good", "stale", "torn", "wrong_meta")
NSTEP = 3  # the n of an n-step reader
SHARD_BITS = 20  # a writer's global episode number: shard << SHARD_BITS | episode id
CHECK_WEIGHTS = np.random.default_rng(20240601).integers(1, 1 << 20, size=4096, dtype=np.int64)


def mix(values):
    """A deterministic scramble of int64 keys into [0, 2**23) (exact in float32)."""
    values = np.asarray(values, dtype=np.int64)
    return ((values * 2654435761 + 12345) ^ (values >> 7)) % (1 << 23)


class Live:
    """What the writers write and how readers check it; subclasses set the class attributes and ``payload``."""

    MAX_T: int  # max_timesteps: the key stride (key = episode id * MAX_T + t)
    MIN_LENGTH: int  # episodes are MIN_LENGTH..MAX_T steps long
    RING: dict  # the ring store's capacity
    FIELDS: dict  # step fields: payload's, eid (int64), t (int32) and check (int64)
    META = dict(tag="int64")
    CHECKED: tuple  # the fields the checksum covers
    LIFETIME: float  # no worker outlives this
    FIRST_WAIT: float  # how long a reader waits for the first committed episode
    STEPWISE_EVERY: int  # a writer writes step by step every STEPWISE_EVERY-th episode id, else whole episodes
    SEED_STRIDE: int  # a view reader's epoch seed: seed * SEED_STRIDE + epoch
    WINDOW = 3  # the windows of a sequence reader

    def payload(self, h, gid) -> dict:
        """The fields other than eid, t and check of rows with scrambled keys ``h`` of episodes ``gid``."""
        raise NotImplementedError

    # ---- what a writer writes: a pure function of (global episode number, t) --------------------------------

    def episode_length(self, gid):
        """Deterministic length in [MIN_LENGTH, MAX_T] of global episode number gid."""
        return self.MIN_LENGTH + (int(gid) * 2654435761 + 97) % (self.MAX_T - self.MIN_LENGTH + 1)

    def checksum(self, rows):
        """Per row, a weighted sum of every byte of the CHECKED fields (rows: dict of (B, ...) arrays)."""
        count = len(rows["eid"])
        data = np.concatenate([np.ascontiguousarray(rows[name]).reshape(count, -1).view(np.uint8)
                               for name in self.CHECKED], axis=1).astype(np.int64)
        return (data * CHECK_WEIGHTS[:data.shape[1]]).sum(axis=1)

    def step_values(self, gid, t):
        """Every field of rows (gid, t) (arrays of the same shape (B,)), as they are written."""
        gid, t = np.asarray(gid, dtype=np.int64), np.asarray(t, dtype=np.int64)
        rows = self.payload(mix(gid * self.MAX_T + t), gid)
        rows.update(eid=gid.copy(), t=t.astype(np.int32))
        rows["check"] = self.checksum(rows)
        return rows

    def episode_rows(self, gid):
        length = self.episode_length(gid)
        return self.step_values(np.full(length, gid), np.arange(length))

    # ---- checking what a reader got ------------------------------------------------------------------------

    def classify(self, got, gid, t, tag):
        """Per row, an index into KINDS. got: dict of (B, ...) numpy arrays; gid, t, tag: (B,) the global
        episode and step the batch says each row is, and the meta field the batch carries for it."""
        want = self.step_values(gid, t)
        right = t < np.array([self.episode_length(g) for g in gid], dtype=np.int64)
        for name in self.FIELDS:
            right &= (got[name] == want[name]).reshape(len(gid), -1).all(axis=1)
        own = self.step_values(got["eid"], got["t"])  # what the row says it is
        whole = np.ones(len(gid), dtype=bool)
        for name in self.FIELDS:
            whole &= (got[name] == own[name]).reshape(len(gid), -1).all(axis=1)
        return np.where(right, np.where(tag == gid, 0, 3), np.where(whole, 1, 2))

    def check(self, tally, got, gid, t, tag):
        """Classify a batch's rows and count them in ``tally``."""
        tally.add(self.classify(got, gid, t, tag), got, gid, t, tag)

    def numpy_batch(self, batch, window=None):
        """A batch's fields and ``tag`` as numpy; windows (B, L, ...) flattened to rows (B * L, ...)."""
        got = {name: batch[name].numpy() for name in (*self.FIELDS, "tag")}
        if window is not None:
            got = {name: value.reshape(-1, *value.shape[2:]) for name, value in got.items()}
            got["tag"] = np.repeat(batch["tag"].numpy(), window)
        return got

    def live_episodes(self, store, shard=0):
        """Per live episode of an open store: (id, global number, length, tag, its rows {field: array}, what
        was written for it)."""
        table, tags = store.live_table(), store.meta_array("tag")
        for episode_id, slot, start, length in zip(table.ids, table.slots, table.start, table.length):
            gid = shard << SHARD_BITS | int(episode_id)
            rows = {name: store.step_array(name)[start:start + length] for name in self.FIELDS}
            yield episode_id, gid, length, tags[slot], rows, self.episode_rows(gid)

    # ---- workers -------------------------------------------------------------------------------------------

    def writer_main(self, folder, stop_file, log_path, shard=0, create=False):
        """Write episodes (whole, and step by step) into a ring as fast as it can until ``stop_file`` appears;
        log each committed episode id after its commit returned (one unbuffered write per line)."""
        deadline = time.monotonic() + self.LIFETIME
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if create:
            buffer = ReplayBuffer(folder, fields=self.FIELDS, meta_fields=self.META, **self.RING)
        else:
            buffer = ReplayBuffer.from_folder(folder)
        store = buffer.episode_store
        os.write(log, b"open %d\n" % store.meta.state.next_episode)
        while not stopped(stop_file, deadline):
            episode_id = store.meta.state.next_episode
            gid = shard << SHARD_BITS | episode_id
            rows = self.episode_rows(gid)
            if episode_id % self.STEPWISE_EVERY:
                buffer.store_episode(end="terminated", tag=gid, **rows)
            else:
                with buffer.one_episode(tag=gid):
                    for t in range(len(rows["eid"])):
                        buffer.store(**{name: value[t] for name, value in rows.items()})
            if store.meta.state.next_episode != episode_id + 1:
                raise AssertionError(f"episode {episode_id} did not get that id")
            os.write(log, b"done %d\n" % episode_id)
        buffer.close()

    @staticmethod
    def draw(sampler, batch_size, tally):
        """One batch, counting the redraws an eviction caused; None when every redraw expired too (counted, no
        row returned)."""
        before = tally.expired
        try:
            batch = sampler.batch(batch_size)
        except SampleExpiredError:
            tally.failed += 1
            return None
        tally.redrawn += tally.expired > before
        return batch

    def sampler_reader(self, folder, stop_file, result, seed, batch_size=64):
        """A uniform sampler with refresh() before each draw; every batch checked."""
        deadline = time.monotonic() + self.LIFETIME
        tally = Tally()
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            wait_for_episodes(buffer, time.monotonic() + self.FIRST_WAIT)
            tally.first_ids = [buffer.episode_store.meta.state.first_episode]
            sampler = buffer.sampler("uniform", seed=seed)
            counting(sampler.view, tally)
            while not stopped(stop_file, deadline):
                sampler.refresh()
                batch = self.draw(sampler, batch_size, tally)
                if batch is None:
                    continue
                ids, t = np.divmod(batch["_key"].numpy(), self.MAX_T)
                self.check(tally, self.numpy_batch(batch), ids, t, batch["tag"].numpy())
                if tally.batches == 1:
                    ready(result)
            buffer.refresh()
            tally.last_ids = [buffer.episode_store.meta.state.first_episode]
        tally.save(result)

    def prioritized_reader(self, folder, stop_file, result, seed, kind="prioritized", batch_size=64):
        """A sampler of ``kind`` following the writer by itself (``follow="disk"``, no refresh() of ours) whose
        every batch is checked and then handed back to ``update_priorities`` with its own ``_key``:

        - "prioritized": single steps; "nstep": ``n_steps=3`` (the rows at t and the next rows at t + 3 checked);
        - "sequence": prioritized windows of ``WINDOW`` steps (one priority per window);
        - "limited": prioritized single steps behind an in-memory ``RateLimiter`` (``wrap_sampler``);
        - "uniform": the uniform sampler, following the writer by itself (no priorities).

        An update refused (``InvalidDataError`` for the batch's own keys) is counted in ``refused``; any other
        error ends the reader with its traceback."""
        deadline = time.monotonic() + self.LIFETIME
        tally = Tally()
        rng = np.random.default_rng([seed, 7])
        window = self.WINDOW if kind == "sequence" else None
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            wait_for_episodes(buffer, time.monotonic() + self.FIRST_WAIT)
            tally.first_ids = [buffer.episode_store.meta.state.first_episode]
            options = dict(seed=seed, follow="disk")
            if kind == "nstep":
                options.update(n_steps=NSTEP)
            if kind == "sequence":
                options.update(window=window)
            sampler = buffer.sampler({"limited": "prioritized", "nstep": "prioritized"}.get(kind, kind), **options)
            counting(sampler.view, tally)
            limiter = None
            if kind == "limited":
                limiter = RateLimiter(1.0, error_buffer=1 << 40)
                sampler = limiter.wrap_sampler(sampler)
            while not stopped(stop_file, deadline):
                if limiter is not None:
                    limiter.inserted(batch_size)  # as an actor would: room for one more batch
                batch = self.draw(sampler, batch_size, tally)
                if batch is None:
                    continue
                keys = batch["_key"].numpy()
                ids, t = np.divmod(keys, self.MAX_T)
                tags = batch["tag"].numpy()
                if window is not None:
                    self.check(tally, self.numpy_batch(batch, window), np.repeat(ids, window),
                               (t[:, None] + np.arange(window)).reshape(-1), np.repeat(tags, window))
                elif kind == "nstep":  # and the next rows, where the 3 steps stay inside the episode (else zeros)
                    lengths = np.array([self.episode_length(i) for i in ids], dtype=np.int64)
                    inside = (batch["n_step_lens"].numpy() == NSTEP) & (t + NSTEP < lengths)
                    got = {name: np.concatenate([batch[name].numpy(), batch[f"next_{name}"].numpy()[inside]])
                           for name in self.FIELDS}
                    self.check(tally, got, np.concatenate([ids, ids[inside]]), np.concatenate([t, t[inside] + NSTEP]),
                               np.concatenate([tags, tags[inside]]))
                else:
                    self.check(tally, self.numpy_batch(batch), ids, t, tags)
                if kind != "uniform":
                    try:
                        tally.updated += sampler.update_priorities(batch["_key"], rng.random(len(keys)) + 1e-3)
                    except InvalidDataError as error:  # the batch's own keys must never be refused
                        tally.refused += 1
                        tally.refusals = (tally.refusals + [str(error)[:200]])[:4]
                    tally.dropped = sampler.dropped
                if tally.batches == 1:
                    ready(result)
            buffer.refresh()
            tally.last_ids = [buffer.episode_store.meta.state.first_episode]
        tally.save(result)

    def view_reader(self, folder, stop_file, result, seed, batch_size=32, window=3):
        """A plain window view read through a BatchIndexSampler; on SampleExpiredError, refresh and build the
        view again (what the README tells a DataLoader user to do)."""
        deadline = time.monotonic() + self.LIFETIME
        tally = Tally()
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            wait_for_episodes(buffer, time.monotonic() + self.FIRST_WAIT)
            tally.first_ids = [buffer.episode_store.meta.state.first_episode]
            epoch = 0
            while not stopped(stop_file, deadline):
                buffer.refresh()
                view = buffer.dataset(window=window)
                epoch += 1
                for items in BatchIndexSampler(len(view), batch_size, shuffle=True,
                                               seed=seed * self.SEED_STRIDE + epoch):
                    if stopped(stop_file, deadline):
                        break
                    try:
                        batch = view.__getitems__(items)
                    except SampleExpiredError:
                        tally.expired += 1
                        tally.redrawn += 1
                        break
                    episode, start = view.positions.locate(items)
                    ids = np.repeat(view.table.ids[episode], window)
                    t = (start[:, None] + np.arange(window)).reshape(-1)
                    self.check(tally, self.numpy_batch(batch, window), ids, t, np.repeat(batch["tag"].numpy(), window))
                    if tally.batches == 1:
                        ready(result)
            buffer.refresh()
            tally.last_ids = [buffer.episode_store.meta.state.first_episode]
        tally.save(result)

    # ---- a writer that grows the store under readers, and readers through DataLoaders -------------------

    GROW_SCENARIOS = ("to_ring", "cleared", "ring")
    MOST_EPISODES = 40  # grows stop here (then the writer only writes, or clears)

    def grow_writer_main(self, folder, stop_file, log_path, scenario, seed=0, every=25):
        """Write episodes and change the store's geometry under the readers, until ``stop_file`` appears:

        - "to_ring": the store starts flat; once full, wait for ``<stop_file>.reading`` (a reader is in an
          epoch over it), grow it into a ring, then grow ``max_episodes`` every ``every`` episodes;
        - "cleared": the store is flat; when full it is cleared (so ids pass ``max_episodes``) or, every
          other time, grown (moving live episodes to new slots that the next episodes leave behind);
        - "ring": a ring grown every ``every`` episodes (its ids passed ``max_episodes``: slots move).

        Logs each committed episode ("done ID") and each change ("grow" or "clear"); after the first change
        and a full store's worth of episodes after it, touches ``<stop_file>.changed``."""
        deadline = time.monotonic() + self.LIFETIME
        rng = np.random.default_rng(seed)
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        buffer = ReplayBuffer.from_folder(folder)
        store = buffer.episode_store
        os.write(log, b"open %d\n" % store.meta.state.next_episode)
        changes, since = 0, 0  # geometry changes made; episodes committed since the first one

        def change(kind, **grow):
            nonlocal changes
            if kind == "clear":
                buffer.clear()
            else:
                buffer.grow(**grow)
            os.write(log, f"{kind} {changes}\n".encode())
            changes += 1

        def larger():
            capacity = store.capacity
            more = int(rng.integers(1, 4))
            if capacity.max_episodes + more > self.MOST_EPISODES:
                return None
            return dict(max_episodes=capacity.max_episodes + more, max_steps=capacity.max_steps + more * self.MAX_T)

        while not stopped(stop_file, deadline):
            gid = store.meta.state.next_episode
            try:
                buffer.store_episode(end="terminated", tag=gid, **self.episode_rows(gid))
            except BufferFullError:
                if scenario == "to_ring":
                    while not os.path.exists(f"{stop_file}.reading") and not stopped(stop_file, deadline):
                        time.sleep(0.001)
                    change("grow", circular=True)
                elif scenario == "cleared":
                    grow = larger() if changes % 2 else None
                    change("grow", **grow) if grow else change("clear")
                else:
                    raise
                continue
            os.write(log, b"done %d\n" % gid)
            since += changes > 0
            if since == self.RING["max_episodes"] + 1:
                Path(f"{stop_file}.changed").touch()
            if scenario in ("to_ring", "ring") and store.capacity.circular and gid % every == 0:
                grow = larger()
                if grow:
                    change("grow", **grow)
        buffer.close()

    LOADER_KINDS = ("timestep", "window", "nstep", "sampler")

    def loader_reader(self, folder, stop_file, result, seed, kind="timestep", workers="threads", batch_size=4):
        """DataLoader epochs (``num_workers=2`` of ``workers``) over a view made before each epoch, while a
        writer grows the store: every row checked against the (episode, t) its batch says, through
        ``return_indices`` (the slot, mapped to the epoch's episode ids) or a sampler's ``_key``. A refusal
        (``SampleExpiredError``, or ``SchemaMismatchError`` for longer episodes) is counted and the next epoch
        begins over a new view. The first epoch waits, after its first batch, until the writer has changed
        the store and written over what the epoch's view holds (``<stop_file>.changed``)."""
        deadline = time.monotonic() + self.LIFETIME
        tally = Tally()
        window = {"window": self.WINDOW, "nstep": NSTEP}.get(kind)
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            wait_for_episodes(buffer, time.monotonic() + self.FIRST_WAIT, 4)  # a first epoch of several batches
            tally.first_ids = [buffer.episode_store.meta.state.first_episode]
            epoch = 0
            while not stopped(stop_file, deadline):
                buffer.refresh()
                epoch += 1
                try:
                    loader, ids_of = self._epoch_loader(buffer, kind, batch_size, seed * self.SEED_STRIDE + epoch,
                                                        window, num_workers=2, workers=workers)
                except (OptionError, InvalidDataError) as error:  # no items: the writer just cleared the store
                    if "no items" not in str(error):
                        raise
                    continue
                try:
                    for batch in loader:
                        if kind == "sampler":
                            ids, t = np.divmod(batch["_key"].numpy(), self.MAX_T)
                            got = self.numpy_batch(batch)
                        else:
                            ids = np.array([ids_of[slot] for slot in batch["_index"].numpy().tolist()], np.int64)
                            t = batch["_t"].numpy().astype(np.int64)
                            got = self.numpy_batch(batch, window if kind == "window" else None)
                        tags = batch["tag"].numpy()
                        if kind == "window":
                            ids, t, tags = (np.repeat(ids, window), (t[:, None] + np.arange(window)).reshape(-1),
                                            np.repeat(tags, window))
                        self.check(tally, got, ids, t, tags)
                        if tally.batches == 1:
                            ready(result)
                            Path(f"{stop_file}.reading").touch()
                            while not os.path.exists(f"{stop_file}.changed") and not stopped(stop_file, deadline):
                                time.sleep(0.001)
                        if stopped(stop_file, deadline):
                            break
                except (SampleExpiredError, SchemaMismatchError) as error:
                    tally.expired += 1
                    tally.redrawn += 1
                    tally.refusals = (tally.refusals + [str(error)[:160]])[:4]
                except InvalidDataError as error:  # a sampler over a store the writer just cleared
                    if "nothing to sample" not in str(error):
                        raise
                del loader
            buffer.refresh()
            tally.last_ids = [buffer.episode_store.meta.state.first_episode]
        tally.save(result)

    def _epoch_loader(self, buffer, kind, batch_size, seed, window, **loader_options):
        """(a DataLoader of ``kind`` over the buffer's live episodes, {slot: episode id} of its view)."""
        if kind == "sampler":
            sampler = buffer.sampler("prioritized", seed=seed, follow="disk")
            return sampler.dataloader(batch_size, 64, **loader_options), None
        options = dict(timestep_level=True) if kind == "timestep" else \
            dict(window=window) if kind == "window" else dict(n_steps=NSTEP)
        loader = buffer.dataloader(batch_size, shuffle=True, seed=seed, return_indices=True, **options,
                                   **loader_options)
        view = loader.dataset
        return loader, dict(zip(view.table.slots.tolist(), view.table.ids.tolist()))


class Tally:
    """A reader's counts, saved as JSON for the process that started it."""

    def __init__(self):
        self.batches = self.rows = 0
        self.stale = self.torn = self.wrong_meta = 0
        self.wrong_batches = 0  # batches with any wrong row
        self.expired = 0  # SampleExpiredError raised by a view
        self.redrawn = 0  # batches drawn again (or views built again) after it
        self.failed = 0  # sampler.batch() calls that raised it after all their redraws
        self.updated = 0  # priority updates applied (prioritized readers)
        self.dropped = 0  # ... dropped, their episode evicted since the draw (the sampler's ``dropped``)
        self.refused = 0  # update_priorities calls that refused the batch's own keys (must be 0)
        self.refusals = []  # the first few of their messages
        self.first_ids = None  # per store: the oldest live episode id when reading began
        self.last_ids = None  # ... and when it ended: the evictions in between happened while reading
        self.examples = []

    def add(self, kind, got, gid, t, tag):
        """Count a batch's rows of each kind (``kind``: Live.classify of them)."""
        self.batches += 1
        self.rows += len(kind)
        self.stale += int((kind == 1).sum())
        self.torn += int((kind == 2).sum())
        self.wrong_meta += int((kind == 3).sum())
        self.wrong_batches += bool(kind.any())
        for i in np.flatnonzero(kind)[:max(0, 4 - len(self.examples))]:
            self.examples.append(dict(kind=KINDS[kind[i]], episode=int(gid[i]), t=int(t[i]), row_eid=int(got["eid"][i]),
                                      row_t=int(got["t"][i]), tag=int(tag[i])))

    @property
    def wrong(self):
        return self.stale + self.torn + self.wrong_meta

    def save(self, path):
        Path(path).write_text(json.dumps(vars(self)))

    @classmethod
    def load(cls, path):
        tally = cls()
        vars(tally).update(json.loads(Path(path).read_text()))
        return tally

    def merge(self, other):
        for name, value in vars(other).items():
            if name == "examples":
                self.examples = (self.examples + value)[:6]
            elif name == "refusals":
                self.refusals = (self.refusals + value)[:4]
            elif name not in ("first_ids", "last_ids"):
                setattr(self, name, getattr(self, name) + value)

    def __repr__(self):
        return (f"{self.batches} batches, {self.rows} rows: {self.stale} stale, {self.torn} torn, {self.wrong_meta} "
                f"wrong meta; {self.expired} SampleExpiredError, {self.redrawn} redrawn, {self.failed} failed; "
                f"{self.updated} priority updates applied, {self.dropped} dropped, {self.refused} refused "
                f"{self.refusals}; "
                f"oldest id {self.first_ids} -> {self.last_ids}; e.g. {self.examples}")


def read_log(path):
    """(the next id when the writer opened the store, the ids it committed in order); a line cut short by
    a kill is ignored."""
    opened, done = None, []
    text = Path(path).read_text() if Path(path).exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        kind, value = line.split()
        if kind == "open":
            opened = int(value)
        elif kind == "done":  # (a growing writer also logs its "grow" and "clear" changes)
            done.append(int(value))
    return opened, done


def stopped(stop_file, deadline):
    return os.path.exists(stop_file) or time.monotonic() > deadline


def counting(view, tally):
    """Count every SampleExpiredError the view raises (a sampler's batch() redraws after it)."""
    getitems = view.__getitems__

    def wrapped(items):
        try:
            return getitems(items)
        except SampleExpiredError:
            tally.expired += 1
            raise

    view.__getitems__ = wrapped


def ready(result):
    """Mark that a reader checked its first batch: its starter counts the reading time from then."""
    Path(f"{result}.ready").touch()


def wait_for_episodes(buffer, deadline, count=1):
    while buffer.num_episodes < count:
        if time.monotonic() > deadline:
            raise TimeoutError("no writer committed an episode")
        time.sleep(0.001)
        buffer.refresh()
