"""The rate limiter: Reverb's samples-per-insert rules, against a brute-force model, in one process, across
processes (a trace checked at every point) and around writers and samplers.

Nothing here is timed: threads and processes are checked for the order of events and for bounds.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import episode_arrays, reap
from memmap_replay import (InvalidDataError, NotAFolderError, ReplayBuffer, ReplayError,
                           StoreNotFoundError, UnsafeEntryError)
from memmap_replay.distributed.ratelimit import RATELIMIT_DIR, LimitedSampler, RateCounts, RateLimitedError, RateLimiter

PATIENCE = 60.0  # seconds a test waits for something that must happen (never asserted on)


class Model:
    """Reverb's SampleToInsertRatio in exact arithmetic, item counts kept as plain numbers."""

    def __init__(self, spi: Fraction, min_size: int, error_buffer):
        self.spi, self.min_size = spi, min_size
        if isinstance(error_buffer, tuple):
            self.low, self.high = (Fraction(value) for value in error_buffer)
        else:
            self.low, self.high = spi * min_size - Fraction(error_buffer), spi * min_size + Fraction(error_buffer)
        self.inserts = self.samples = self.deletes = 0

    def may_sample(self, n: int) -> bool:
        enough = self.inserts - self.deletes >= self.min_size
        return enough and self.inserts * self.spi - self.samples - n >= self.low

    def may_insert(self, n: int) -> bool:
        filling = self.inserts - self.deletes + n <= self.min_size
        return filling or (self.inserts + n) * self.spi - self.samples <= self.high


def wait_until(condition, what: str) -> None:
    """Wait (not a timed assertion: PATIENCE only keeps a broken run from hanging) until condition() holds."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.001)


# ---- the rules, against the model ---------------------------------------------------------------------

SPIS = [Fraction(1, 4), Fraction(1, 2), Fraction(1), Fraction(2), Fraction(7, 2)]  # exact in binary too


@st.composite
def limits(draw):
    spi = draw(st.sampled_from(SPIS))
    min_size = draw(st.integers(1, 6))
    width = 2 * max(1, spi) + draw(st.integers(0, 12))
    if draw(st.booleans()):
        return spi, min_size, width / 2
    low = spi * min_size - draw(st.integers(0, int(width)))
    return spi, min_size, (float(low), float(low + width))


OPS = st.lists(st.tuples(st.sampled_from(["insert", "sample", "remove"]), st.integers(1, 8)), max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=limits(), ops=OPS, shared=st.booleans())
def test_allowed_exactly_when_the_model_says(tmp_path_factory, limit, ops, shared):
    spi, min_size, error_buffer = limit
    folder = tmp_path_factory.mktemp("limiter") if shared else None
    buffer_option = tuple(error_buffer) if isinstance(error_buffer, tuple) else float(error_buffer)
    model = Model(spi, min_size, error_buffer)
    with RateLimiter(float(spi), error_buffer=buffer_option, min_size_to_sample=min_size, mode="raise",
                     folder=folder) as limiter:
        for op, n in ops:
            if op == "remove":
                n = min(n, model.inserts - model.deletes)
                limiter.removed(n)
                model.deletes += n
                continue
            may = model.may_sample(n) if op == "sample" else model.may_insert(n)
            assert (limiter.can_sample(n) if op == "sample" else limiter.can_insert(n)) == may
            call = limiter.await_sample if op == "sample" else limiter.await_insert
            if may:
                call(n)
                if op == "sample":
                    model.samples += n
                else:
                    model.inserts += n
            else:
                with pytest.raises((RateLimitedError, InvalidDataError), match="not allowed at once|never fits"):
                    call(n)
            assert limiter.counts == (model.inserts, model.samples, model.deletes)


def test_the_error_buffer_is_centred_on_the_minimum_size():
    limiter = RateLimiter(2.0, error_buffer=3, min_size_to_sample=5)
    assert (limiter.min_diff, limiter.max_diff) == (7.0, 13.0)
    assert RateLimiter(**limiter.config).config == limiter.config
    for _ in range(5):
        assert not limiter.can_sample()
        limiter.await_insert()  # filling up to min_size is free
    assert limiter.can_insert() and not limiter.can_insert(2)  # (5 + 2) * 2 - 0 > 13
    limiter.await_sample(3)  # 10 - 3 >= 7
    assert not limiter.can_sample() and limiter.counts == RateCounts(5, 3, 0)
    limiter.removed(1)
    assert limiter.counts.size == 4 and not limiter.can_sample()


def test_a_request_that_can_never_pass_is_refused_rather_than_waited_for():
    limiter = RateLimiter(1.0, error_buffer=2, min_size_to_sample=2)
    limiter.await_insert(2)  # filling up to min_size is free
    with pytest.raises(InvalidDataError, match="an insert of 5 never fits the error window"):
        limiter.await_insert(5)
    with pytest.raises(InvalidDataError, match="a sample of 7 never fits"):
        RateLimiter(1.0, error_buffer=2).await_sample(7)


# ---- one process: blocking, timeouts, raise mode ------------------------------------------------------

def released_in_order(limiter: RateLimiter, kind: str, blocked_call, release) -> list[str]:
    """Run blocked_call in a thread; once it waits, release() it; the order of what happened."""
    events = []
    thread = threading.Thread(target=lambda: (blocked_call(), events.append("went on")))
    thread.start()
    wait_until(lambda: limiter.blocked[kind] == 1, f"the {kind} to wait")
    events.append("released")
    release()
    thread.join(PATIENCE)
    return events


@pytest.mark.parametrize("shared", [False, True])
def test_a_blocked_sample_goes_on_once_a_thread_inserts(tmp_path, shared):
    limiter = RateLimiter(1.0, error_buffer=4, min_size_to_sample=3, folder=tmp_path if shared else None)
    events = released_in_order(limiter, "sample", lambda: limiter.await_sample(2, timeout=PATIENCE),
                               lambda: limiter.inserted(3))
    assert events == ["released", "went on"] and limiter.counts == (3, 2, 0)


def test_a_blocked_insert_goes_on_once_a_thread_samples():
    limiter = RateLimiter(1.0, error_buffer=2, min_size_to_sample=2)
    limiter.await_insert(4)  # diff 4 = max_diff
    events = released_in_order(limiter, "insert", limiter.await_insert, limiter.await_sample)
    assert events == ["released", "went on"] and limiter.counts == (5, 1, 0)


def test_timeout_and_raise_mode_raise_a_clear_error_and_count_nothing(tmp_path):
    limiter = RateLimiter(2.0, error_buffer=4, min_size_to_sample=3, folder=tmp_path, timeout=0.01)
    with pytest.raises(RateLimitedError, match=r"a sample of 1 was not allowed within timeout=0.01 s .*needs about 3 "
                                               r"more steps inserted") as caught:
        limiter.await_sample()
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, ReplayError)
    with pytest.raises(RateLimitedError, match="within timeout=0.0 s"):
        limiter.await_sample(timeout=0)
    eager = RateLimiter(2.0, error_buffer=4, min_size_to_sample=3, folder=tmp_path, mode="raise")
    eager.await_insert(3)
    eager.await_insert(2)  # diff 10 = max_diff
    with pytest.raises(RateLimitedError, match=r"an insert of 1 was not allowed at once \(mode='raise'\).*needs 2 more "
                                               r"sampled"):
        eager.await_insert(1, timeout=None)
    assert limiter.counts == eager.counts == (5, 0, 0)
    assert eager.blocked == {"insert": 1, "sample": 0}


# ---- many processes -----------------------------------------------------------------------------------

CHILD = r"""
import json, sys
import numpy as np
from memmap_replay.distributed.ratelimit import RateLimiter, RateLimitedError

config = json.loads(sys.argv[1])
limiter = RateLimiter.join(config["folder"], timeout=config["patience"])
rng = np.random.default_rng(config["seed"])
trace = []
if config["role"] == "insert":
    for n in config["sizes"]:
        limiter.await_insert(n)
        trace.append(["insert", n, *limiter.counts])
else:
    while True:
        n = int(rng.integers(1, config["largest"] + 1))
        try:
            limiter.await_sample(n, timeout=0.05)
            trace.append(["sample", n, *limiter.counts])
        except RateLimitedError:
            if limiter.counts.inserts == config["total"] and not limiter.can_sample(1):
                break
with open(config["trace"], "w") as file:
    json.dump(trace, file)
"""


def start(source: str, config: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", source, json.dumps(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def check_bounds(limiter: RateLimiter, inserts: int, samples: int) -> None:
    """What Reverb's rules keep true at every instant (nothing evicted): the window's top always, its bottom
    (and the minimum size) once anything was sampled."""
    diff = inserts * limiter.samples_per_insert - samples
    assert diff <= limiter.max_diff
    if samples:
        assert inserts >= limiter.min_size_to_sample and diff >= limiter.min_diff


def test_two_actors_and_a_learner_in_other_processes_keep_the_ratio(tmp_path):
    limiter = RateLimiter(2.0, error_buffer=6, min_size_to_sample=10, folder=tmp_path)  # window 12 >= 3 * 2 + 4
    rng = np.random.default_rng(7)
    sizes = [rng.integers(1, 4, 150).tolist() for _ in range(2)]  # inserts of 1..3 steps, samples of 1..4
    total = sum(map(sum, sizes))
    children = [start(CHILD, dict(folder=str(tmp_path), patience=PATIENCE, role="insert", sizes=sizes[k], seed=k,
                                  trace=str(tmp_path / f"actor{k}.json"))) for k in range(2)]
    children.append(start(CHILD, dict(folder=str(tmp_path), patience=PATIENCE, role="sample", largest=4, total=total,
                                      seed=2, trace=str(tmp_path / "learner.json"))))
    snapshots = []
    while any(child.poll() is None for child in children):
        snapshots.append(limiter.counts)  # each a consistent snapshot: taken under the lock
    for child in children:
        assert child.returncode == 0, reap(child, PATIENCE)
        reap(child, PATIENCE)
    traces = [json.loads((tmp_path / name).read_text()) for name in ("actor0.json", "actor1.json", "learner.json")]
    for inserts, samples, deletes in snapshots + [row[2:] for trace in traces for row in trace]:
        check_bounds(limiter, inserts, samples)
        assert deletes == 0
    final = limiter.counts
    assert final.inserts == total == sum(row[1] for trace in traces[:2] for row in trace)
    assert final.samples == sum(row[1] for row in traces[2])
    assert final.inserts * 2.0 - final.samples < limiter.min_diff + 1  # the learner drained what it could
    assert len(snapshots) > 1


HOLDER = r"""
import json, os, signal, sys, time
from memmap_replay.distributed.ratelimit import RateLimiter

config = json.loads(sys.argv[1])
limiter = RateLimiter.join(config["folder"])
limiter.await_insert(config["inserts"])
if config["how"] == "holding the lock":
    with limiter._cond, limiter._flock():
        print("ready", flush=True)
        time.sleep(600)
else:  # between a reservation and its commit
    with limiter.inserting(5):
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["holding the lock", "reserved"])
def test_a_participant_killed_leaves_its_counts_and_wedges_nobody(tmp_path, how):
    limiter = RateLimiter(1.0, error_buffer=10, min_size_to_sample=2, folder=tmp_path)
    child = start(HOLDER, dict(folder=str(tmp_path), inserts=3, how=how))
    events = []
    if how == "holding the lock":
        assert child.stdout.readline() == b"ready\n"
        reader = threading.Thread(target=lambda: events.append(("read", limiter.counts)))
        reader.start()  # blocks on the lock the child holds
        child.send_signal(signal.SIGKILL)
        events.append(("killed", None))
        reader.join(PATIENCE)
    reap(child, PATIENCE)
    assert child.returncode == -signal.SIGKILL
    if how == "holding the lock":
        assert [event for event, _ in events] == ["killed", "read"] and events[1][1] == (3, 0, 0)
    limiter.await_sample(2, timeout=PATIENCE)
    limiter.await_insert(1, timeout=PATIENCE)
    assert limiter.counts == ((4, 2, 0) if how == "holding the lock" else (9, 2, 0))  # a reservation stays counted


def test_a_forked_child_shares_the_counters_through_its_own_lock(tmp_path):
    limiter = RateLimiter(1.0, error_buffer=10, folder=tmp_path)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            limiter.await_insert(4)
            os._exit(0 if limiter._fd >= 0 else 3)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert limiter.counts == (4, 0, 0)


def test_shared_counters_persist_and_pickle_to_the_same_files(tmp_path):
    with RateLimiter(0.5, error_buffer=(-3, 3), unit="episodes", folder=tmp_path, name="actors") as limiter:
        limiter.await_insert(4)
        copy = pickle.loads(pickle.dumps(limiter))
        copy.await_sample(2)
        assert limiter.counts == copy.counts == (4, 2, 0)
        copy.close()
    joined = RateLimiter.join(tmp_path, "actors", mode="raise")
    assert joined.config == limiter.config and joined.counts == (4, 2, 0) and joined.mode == "raise"
    assert sorted(path.name for path in (tmp_path / RATELIMIT_DIR).iterdir()) == ["actors.json", "actors.lock",
                                                                                 "actors.npy"]
    assert np.load(tmp_path / RATELIMIT_DIR / "actors.npy").tolist() == [4, 2, 0]  # plain numpy reads it
    in_memory = RateLimiter(0.5, error_buffer=3)
    in_memory.inserted(3)
    assert pickle.loads(pickle.dumps(in_memory)).counts == (3, 0, 0)  # a copy of the counts


# ---- writers and samplers -----------------------------------------------------------------------------

@pytest.mark.parametrize("unit", ["steps", "episodes"])
def test_inserting_counts_what_a_ring_buffer_committed_and_evicted(tmp_path, unit):
    buffer = ReplayBuffer(tmp_path / "ring", 3, 10, fields=dict(obs=("float", (3,)), action=("int", 2), reward="float"),
                          circular=True)
    limiter = RateLimiter(1.0, error_buffer=1000, unit=unit, folder=buffer)
    lengths = [4, 7, 2, 9, 5, 3]
    for number, length in enumerate(lengths):
        with limiter.inserting(length if unit == "steps" else 1, buffer=buffer):
            buffer.store_episode(**episode_arrays(number, length))
        counts = limiter.counts
        assert counts.inserts == (sum(lengths[: number + 1]) if unit == "steps" else number + 1)
        assert counts.size == (buffer.num_steps if unit == "steps" else buffer.num_episodes)
    with pytest.raises(InvalidDataError, match="field"):  # a bad episode: nothing committed, nothing counted
        with limiter.inserting(buffer=buffer):
            buffer.store_episode(obs=np.zeros((3, 5)))
    assert limiter.counts == counts
    with limiter.inserting(buffer=buffer):  # n unknown: waits for room for one, counts what came
        with buffer.one_episode():
            for t in range(6):
                buffer.store(**{name: value[t] for name, value in episode_arrays(9, 6).items()})
    assert limiter.counts.inserts == counts.inserts + (6 if unit == "steps" else 1)
    buffer.close()


def test_inserting_without_a_buffer_takes_its_count_back_on_error():
    limiter = RateLimiter(1.0, error_buffer=10)
    with limiter.inserting(3):
        pass
    with pytest.raises(KeyError, match="boom"):
        with limiter.inserting(4):
            raise KeyError("boom")
    assert limiter.counts == (3, 0, 0)


class FailingSampler:
    def sample(self, batch_size):
        raise IndexError("no such position")


def test_a_wrapped_sampler_waits_counts_and_gives_back_a_failed_draw(make_buffer):
    buffer = make_buffer(circular=True)
    buffer.store_episode(**episode_arrays(0, 10))
    limiter = RateLimiter(1.0, error_buffer=20, min_size_to_sample=15, mode="raise")
    sampler = buffer.sampler("uniform", seed=0)
    wrapped = limiter.wrap_sampler(sampler)
    assert isinstance(wrapped, LimitedSampler) and wrapped.view is sampler.view
    with pytest.raises(RateLimitedError, match="a sample of 4 was not allowed"):
        wrapped.batch(4)
    assert sampler.draws == 0  # refused before the sampler drew
    with limiter.inserting(10, buffer=buffer):
        buffer.store_episode(**episode_arrays(1, 10))
    limiter.inserted(5)
    with pytest.raises(IndexError, match="no such position"):  # the limiter allowed it, the sampler failed
        limiter.wrap_sampler(FailingSampler()).sample(4)
    assert limiter.counts == (15, 0, 0)
    batch = wrapped.batch(4)
    assert len(batch["_key"]) == 4 and limiter.counts == (15, 4, 0)
    from memmap_replay import ReplayDataLoader

    loader = ReplayDataLoader(sampler.view, wrapped.batches(3, 2))
    assert [len(batch["_key"]) for batch in loader] == [3, 3] and limiter.counts.samples == 10
    assert wrapped.state_dict()["draws"] == sampler.draws == 3
    # the wrapper's own dataloader asks the limiter for every batch too (not the wrapped sampler's)
    assert [len(batch["_key"]) for batch in wrapped.dataloader(5, 1)] == [5] and limiter.counts.samples == 15
    unfilled = RateLimiter(1.0, error_buffer=20, min_size_to_sample=100, mode="raise").wrap_sampler(sampler)
    with pytest.raises(RateLimitedError, match="a sample of 5 was not allowed"):
        next(iter(unfilled.dataloader(5, 1)))


def test_importing_the_limiter_imports_no_torch():
    code = ("import sys, memmap_replay.distributed.ratelimit; "
            "assert 'torch' not in sys.modules and 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- bad options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, match", [
    (dict(samples_per_insert=0), r"samples_per_insert must be a finite number > 0 \(got 0\)"),
    (dict(samples_per_insert=True), "samples_per_insert must be a finite number"),
    (dict(min_size_to_sample=0), r"min_size_to_sample must be a positive int \(got 0\)"),
    (dict(error_buffer=0.5), r"window at least 2 \* max\(1, samples_per_insert\) = 2.0 wide \(got \[0.5, 1.5\]\)"),
    (dict(error_buffer=(1, 2, 3)), r"error_buffer must be a number or a \(low, high\) pair"),
    (dict(error_buffer=(5, 20)), r"low end must be at most samples_per_insert \* min_size_to_sample = 1.0 \(got 5.0\)"),
    (dict(error_buffer="big"), "error_buffer must be a finite number"),
    (dict(unit="frames"), "unit must be one of 'steps', 'episodes'"),
    (dict(mode="wait"), "mode must be one of 'block', 'raise'"),
    (dict(timeout=-1), r"timeout must be a finite number >= 0 \(got -1\)"),
    (dict(poll=0), r"poll must be a finite number in \(0, 60\]"),
    (dict(name="../x"), r"name must be 1 to 64 letters, digits, '_' or '-'"),
])
def test_bad_options_are_refused(options, match):
    options = dict(dict(samples_per_insert=1.0, error_buffer=4), **options)
    with pytest.raises(InvalidDataError, match=match):
        RateLimiter(options.pop("samples_per_insert"), **options)


def test_bad_calls_and_folders_are_refused(tmp_path):
    limiter = RateLimiter(1.0, error_buffer=4, folder=tmp_path)
    with pytest.raises(InvalidDataError, match=r"n must be a positive int \(got 0\)"):
        limiter.await_insert(0)
    with pytest.raises(InvalidDataError, match=r"removed\(1\) would remove more than was inserted"):
        limiter.removed(1)
    with pytest.raises(InvalidDataError, match="has other limits"):
        RateLimiter(2.0, error_buffer=4, folder=tmp_path)
    with pytest.raises(InvalidDataError, match=r"needs n= \(what the block inserts\) or buffer="):
        with limiter.inserting():
            pass
    with pytest.raises(InvalidDataError, match="wrap_sampler needs a sampler"):
        limiter.wrap_sampler([1, 2])
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        RateLimiter(1.0, error_buffer=4, folder=tmp_path / "nowhere")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotAFolderError, match="is not a folder"):
        RateLimiter(1.0, error_buffer=4, folder=tmp_path / "file")
    with pytest.raises(StoreNotFoundError, match="no rate limiter 'other'"):
        RateLimiter.join(tmp_path, "other")
    with pytest.raises(InvalidDataError, match="name must be 1 to 64 letters"):
        RateLimiter.join(tmp_path, "../default")
    limiter.close()
    with pytest.raises(InvalidDataError, match="was closed"):
        limiter.await_insert()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / RATELIMIT_DIR).write_text("a file where the counters' folder goes")
    with pytest.raises(UnsafeEntryError, match="cannot use .*taken/ratelimit: it is not a folder"):
        RateLimiter(1.0, error_buffer=4, folder=tmp_path / "taken")


def test_shared_counters_belong_to_the_store_overwrite_removes_them_and_verify_accepts_them(tmp_path):
    from memmap_replay.sharing import verify

    folder = tmp_path / "s"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=5, fields=dict(x="float")) as buffer:
        buffer.store_episode(x=np.ones(3))
        RateLimiter(2.0, min_size_to_sample=1, error_buffer=10, folder=folder).inserted(3)
    report = verify(folder)
    assert report.ok and not report.warnings, report
    ReplayBuffer(folder, max_episodes=4, max_timesteps=5, fields=dict(x="float"), overwrite=True).close()
    assert not (folder / RATELIMIT_DIR).exists()


def test_join_spells_out_the_options_a_joining_process_sets_itself():
    import inspect

    joined = inspect.signature(RateLimiter.join).parameters
    own = inspect.signature(RateLimiter.__init__).parameters
    assert not [p for p in joined.values() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    keywords = [name for name, p in joined.items() if p.kind is p.KEYWORD_ONLY]
    assert keywords == ["mode", "timeout", "poll"]
    assert all(joined[name].default == own[name].default for name in keywords)


def test_a_limited_dataloader_takes_no_batch_ahead_unless_told(make_buffer):
    buffer = make_buffer(circular=True)
    buffer.store_episode(**episode_arrays(0, 10))
    limiter = RateLimiter(1.0, error_buffer=100, min_size_to_sample=1, mode="raise")
    limiter.await_insert(10)
    wrapped = limiter.wrap_sampler(buffer.sampler("uniform", seed=0))
    loader = wrapped.dataloader(4, 3)
    assert loader.prefetch == 0 and wrapped.dataloader(4, 3, prefetch=0).prefetch == 0
    assert wrapped.dataloader(4, 3, prefetch=1).prefetch == 1
    next(iter(loader))
    assert limiter.counts.samples == 4  # the batch taken, and none ahead of it
