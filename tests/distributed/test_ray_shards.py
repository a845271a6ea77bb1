"""Shard actors on a local Ray cluster, and a learner's sharded sampler across them.

Two shard actors hold episodes whose every value encodes (shard, episode number, t):
``obs = shard * 10**6 + number * 1000 + t``, so each row of a batch is checked against its key. A single
local store holding the same episodes with the same priorities is the reference the sharded draws and
weights must match. Rate limited shards are checked by their counters: ordering and bounds, not timing.
The last tests kill shard actors (restarted, and one for good).
"""

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memmap_replay.errors import OptionError

ray = pytest.importorskip("ray")

from memmap_replay import InvalidDataError, RateLimitedError, RateLimiter, ReplayBuffer  # noqa: E402
from memmap_replay.distributed import (RayShardedSampler, Refused, ShardServer, ShardUnavailableError,  # noqa: E402
                                       call_shard, create_shard)
from memmap_replay.distributed.shards import SHARD_STRIDE  # noqa: E402

from conftest import chi_square_ok  # noqa: E402

STRIDE = 16  # max_timesteps of every shard: the key stride
FIELDS = dict(obs="float", reward="float")
LENGTHS = ([3, 9, 5, 12, 7, 4], [6, 2, 10, 8, 11, 5, 3, 9])  # episode lengths of shard 0 and shard 1
ALPHA, BETA = 0.6, 0.7
LIMITS = dict(samples_per_insert=2.0, error_buffer=40, min_size_to_sample=16)  # window [32 - 40, 32 + 40]


def values(shard, number, length):
    return shard * 10**6 + number * 1000 + np.arange(length, dtype=np.float64)


def positions(lengths=LENGTHS):
    """Every (shard, number, t) of the shards, in the reference store's order: shard 0's, then shard 1's."""
    return [(shard, number, t) for shard, shard_lengths in enumerate(lengths)
            for number, length in enumerate(shard_lengths) for t in range(length)]


def sharded_key(shard, number, t):
    return (number * STRIDE + t) * SHARD_STRIDE + shard


def priority(shard, number, t):
    return 0.5 + (shard * 7 + number * 3 + t) % 5  # 0.5 .. 4.5


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shards(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    actors = [create_shard(root / f"shard-{shard}", 100, STRIDE, FIELDS, alpha=ALPHA) for shard in range(2)]
    for shard, shard_lengths in enumerate(LENGTHS):
        for number, length in enumerate(shard_lengths):
            episode = dict(obs=values(shard, number, length), reward=values(shard, number, length))
            call_shard(actors[shard], "add_episode", ray.put(episode), end="terminated")
    return actors


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One local store with every shard's episodes, and a prioritized sampler with the same priorities."""
    buffer = ReplayBuffer(tmp_path_factory.mktemp("one") / "store", 100, STRIDE, FIELDS)
    for shard, shard_lengths in enumerate(LENGTHS):
        for number, length in enumerate(shard_lengths):
            buffer.store_episode(obs=values(shard, number, length), reward=values(shard, number, length))
    sampler = buffer.sampler("prioritized", alpha=ALPHA, beta=BETA, persist=False, seed=0)
    every = positions()
    offsets = np.cumsum([0, len(LENGTHS[0])])
    keys = np.array([(offsets[shard] + number) * STRIDE + t for shard, number, t in every])
    sampler.update_priorities(keys, np.array([priority(*where) for where in every]))
    table = sampler.view.table
    rows = table.start[keys // STRIDE] + keys % STRIDE  # episode ids are the table's positions here
    probability = sampler.tree.leaves[rows] / sampler.tree.total
    weights = (sampler.tree.min / sampler.tree.leaves[rows]) ** BETA  # what the store's own draws weigh
    yield dict(probability=probability, weights=weights,
               index={sharded_key(*where): i for i, where in enumerate(every)})
    buffer.close()


def set_priorities(sampler, priority_of=priority, lengths=LENGTHS):
    every = positions(lengths)
    sampler.update_priorities(np.array([sharded_key(*where) for where in every]),
                              np.array([priority_of(*where) for where in every]))
    sampler.wait()


def check_rows(batch):
    """Each row holds what its writer wrote at the key's (shard, episode, t)."""
    keys = batch["_key"].numpy()
    shard, local = keys % SHARD_STRIDE, keys // SHARD_STRIDE
    number, t = np.divmod(local, STRIDE)
    np.testing.assert_array_equal(batch["obs"].numpy(), shard * 10**6 + number * 1000 + t)


def counts_of(keys, index):
    return np.bincount([index[int(key)] for key in keys], minlength=len(index))


def test_prioritized_draws_and_weights_match_one_store(shards, reference):
    sampler = RayShardedSampler(shards, seed=1, beta=BETA)
    set_priorities(sampler)
    drawn, batch = [], None
    for _ in range(120):
        batch = sampler.batch(256)
        check_rows(batch)
        drawn.append(batch["_key"].numpy())
    counts = counts_of(np.concatenate(drawn), reference["index"])
    expected = reference["probability"] * counts.sum()
    assert chi_square_ok(counts, expected)  # each position as often as the single store draws it
    skewed = reference["probability"] ** (0.45 / ALPHA)  # alpha 0.45 instead of 0.6: the test can fail
    assert not chi_square_ok(counts, skewed / skewed.sum() * counts.sum())
    where = [reference["index"][int(key)] for key in batch["_key"].numpy()]
    np.testing.assert_allclose(batch["_weight"].numpy(), reference["weights"][where], rtol=1e-6)
    sampler.close()


def test_uniform_draws_every_position_alike(shards, reference):
    sampler = RayShardedSampler(shards, "uniform", seed=2)
    batches = [sampler.batch(256) for _ in range(60)]
    assert "_weight" not in batches[0]
    for batch in batches[:3]:
        check_rows(batch)
    counts = counts_of(np.concatenate([batch["_key"].numpy() for batch in batches]), reference["index"])
    assert chi_square_ok(counts, np.full(len(counts), counts.sum() / len(counts)))
    skewed = np.where(np.arange(len(counts)) < sum(LENGTHS[0]), 1.3, 1.0)  # shard 0 30% heavier: rejected
    assert not chi_square_ok(counts, skewed / skewed.sum() * counts.sum())
    sampler.close()


def test_actors_gathering_give_the_batches_of_a_local_gather(shards):
    near = RayShardedSampler(shards, seed=3, draw_ahead=0)
    far = RayShardedSampler(shards, seed=3, draw_ahead=0, local=False)  # the path of a learner on another node
    assert [view is not None for view in near.views] == [True, True] and far.views == [None, None]
    set_priorities(near)
    for _ in range(3):
        a, b = near.batch(64), far.batch(64)
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())
    sample = near.sample(32)  # keys and weights only, as ShardedSampler.sample gives them
    assert len(sample) == 32 and sample.weights.dtype == np.float32
    near.close()
    far.close()


def test_info_stats_and_checkpoint(shards):
    info = ray.get(shards[1].info.remote())
    assert (info["episodes"], info["steps"]) == (len(LENGTHS[1]), sum(LENGTHS[1]))
    assert info["node_id"] == ray.get_runtime_context().get_node_id() and info["folder"].endswith("shard-1")
    assert info["samplers"]["uniform"]["positions"] == sum(LENGTHS[1])
    stats = ray.get(shards[1].stats.remote())
    assert stats["episodes_counted"] == len(LENGTHS[1]) and "obs" in stats["fields"]
    durable = ray.get(shards[1].checkpoint.remote())
    assert durable["next_episode"] == len(LENGTHS[1]) and durable["priorities"][0].endswith("steps.npy")


def test_prefetching_keeps_requests_in_flight_and_draws_the_same(shards):
    eager = RayShardedSampler(shards, seed=4, draw_ahead=3)
    plain = RayShardedSampler(shards, seed=4, draw_ahead=0)
    set_priorities(plain)
    first = eager.batch(32)
    assert eager.in_flight == 3 and plain.in_flight == 0
    keys = [first["_key"].numpy()] + [eager.batch(32)["_key"].numpy() for _ in range(4)]
    again = [plain.batch(32)["_key"].numpy() for _ in range(5)]
    for a, b in zip(keys, again):  # each request's draws are seeded by (seed, its number, shard)
        np.testing.assert_array_equal(a, b)
    eager.batch(16)  # another batch size: the requests sent ahead are dropped
    assert eager.in_flight == 3
    other = RayShardedSampler(shards, seed=5, draw_ahead=0)
    assert not np.array_equal(other.batch(32)["_key"].numpy(), again[0])
    second = RayShardedSampler(shards, seed=4, draw_ahead=0, rank=1, world_size=2)  # another learner of one job
    assert not np.array_equal(second.batch(32)["_key"].numpy(), again[0])
    state = plain.state_dict()
    drawn = plain.batch(32)["_key"].numpy()
    plain.load_state_dict(state)
    np.testing.assert_array_equal(plain.batch(32)["_key"].numpy(), drawn)
    with pytest.raises(InvalidDataError, match="RayShardedSampler's state_dict"):
        plain.load_state_dict({"type": "ShardedSampler"})
    for sampler in (eager, plain, other, second):
        sampler.close()


def test_priority_updates_reach_their_shard_and_errors_surface_later(shards):
    sampler = RayShardedSampler(shards, seed=6)
    set_priorities(sampler, lambda shard, number, t: 1.0)
    before = [info["samplers"]["prioritized"]["mass"] for info in sampler.info()]
    assert before == [float(sum(LENGTHS[0])), float(sum(LENGTHS[1]))]
    set_priorities(sampler, lambda shard, number, t: 5.0 if shard == 1 else 1.0)
    after = [info["samplers"]["prioritized"] for info in sampler.info()]
    assert after[0]["mass"] == before[0]  # shard 0 untouched
    np.testing.assert_allclose(after[1]["mass"], sum(LENGTHS[1]) * 5.0 ** ALPHA)
    assert after[1]["max_priority"] == 5.0 and after[1]["min_priority"] == pytest.approx(5.0)
    never = sharded_key(0, 99, 0)  # shard 0, an episode it never committed
    assert sampler.update_priorities(np.array([never]), np.array([1.0])) == 1  # sent, not waited for
    with pytest.raises(InvalidDataError, match="never committed"):
        sampler.wait()
    sampler.update_priorities(np.array([never]), np.array([1.0]))
    with pytest.raises(InvalidDataError, match="never committed"):
        for _ in range(200):  # the next draws raise it once the shard has answered
            sampler.batch(8)
    sampler.close()


def test_piggybacked_updates_ride_on_the_next_request(shards):
    sampler = RayShardedSampler(shards, seed=6, draw_ahead=1, piggyback=True)
    set_priorities(sampler, lambda shard, number, t: 2.0)  # wait() sends what is held
    assert [info["samplers"]["prioritized"]["mass"] for info in sampler.info()] == pytest.approx(
        [sum(LENGTHS[0]) * 2.0 ** ALPHA, sum(LENGTHS[1]) * 2.0 ** ALPHA])
    batch = sampler.batch(64)
    sampler.update_priorities(batch["_key"], np.full(64, 2.0))
    assert sum(len(keys) for held in sampler.updates.held for keys, _ in held) == 64  # held, not sent
    applied = sampler.updates.applied
    sampler.batch(64)  # its request carries them; the answers of the next say they were applied
    sampler.batch(64)
    assert not any(sampler.updates.held) and sampler.updates.applied == applied + 64
    sampler.update_priorities(np.array([sharded_key(0, 99, 0)]), np.array([1.0]))
    with pytest.raises(InvalidDataError, match="never committed"):
        for _ in range(3):
            sampler.batch(64)
    sampler.close()


def test_bad_inputs(shards, tmp_path):
    with pytest.raises(InvalidDataError, match="non-empty list of shard actors"):
        RayShardedSampler([])
    with pytest.raises(InvalidDataError, match="Ray actor handles"):
        RayShardedSampler(["shard-0"])
    with pytest.raises(InvalidDataError, match="kind must be one of"):
        RayShardedSampler(shards, "greedy")
    with pytest.raises(InvalidDataError, match="draw_ahead must be an int >= 0"):
        RayShardedSampler(shards, draw_ahead=-1)
    with pytest.raises(InvalidDataError, match="local must be None, True or False"):
        RayShardedSampler(shards, local="yes")
    with pytest.raises(InvalidDataError, match="distinct shards"):
        RayShardedSampler([shards[0], shards[0]])
    sampler = RayShardedSampler(shards, seed=0, draw_ahead=0)
    with pytest.raises(InvalidDataError, match="batch_size must be a positive int"):
        sampler.batch(0)
    keys = sampler.batch(4)["_key"]
    with pytest.raises(InvalidDataError, match="priorities one per key"):
        sampler.update_priorities(keys, np.ones(3))
    with pytest.raises(InvalidDataError, match="finite and >= 0"):
        sampler.update_priorities(keys, -np.ones(4))
    with pytest.raises(InvalidDataError, match="shard 7 of 2"):
        sampler.update_priorities(keys * 0 + 7, np.ones(4))
    with pytest.raises(InvalidDataError, match="keeps no priorities"):
        RayShardedSampler(shards, "uniform").update_priorities(keys, np.ones(4))
    with pytest.raises(InvalidDataError, match="episode must be a dict"):  # the actor's error, as it raised it
        call_shard(shards[0], "add_episode", [1.0, 2.0])
    with pytest.raises(InvalidDataError, match="unknown"):
        call_shard(shards[0], "add_episode", dict(obs=np.zeros(3), speed=np.zeros(3)))
    broken = create_shard(tmp_path / "broken", 10, STRIDE, FIELDS, view=dict(speed=1))  # its constructor raises
    with pytest.raises(ShardUnavailableError, match="could not start.*unknown keyword \\['speed'\\]"):
        RayShardedSampler([broken])
    with pytest.raises(InvalidDataError, match="node_id must be the id of a live node"):
        create_shard(tmp_path / "elsewhere", 10, STRIDE, FIELDS, node_id="no-such-node")
    with pytest.raises(InvalidDataError, match="view must be a dict"):
        ShardServer(tmp_path / "s", 10, STRIDE, FIELDS, view="steps")
    with pytest.raises(InvalidDataError, match="each of kinds must be one of"):
        ShardServer(tmp_path / "s", 10, STRIDE, FIELDS, kinds=("greedy",))
    sampler.close()


def test_draws_evicted_before_they_are_read_are_drawn_again_by_their_shard(cluster, tmp_path):
    ring = create_shard(tmp_path / "ring", 4, STRIDE, FIELDS, circular=True)
    def add(number):
        return call_shard(ring, "add_episode", dict(obs=values(0, number, 6), reward=np.zeros(6)))
    for number in range(4):
        add(number)
    sampler = RayShardedSampler([ring], seed=9, draw_ahead=1)
    check_rows(sampler.batch(64))  # and one request sent ahead, drawn from episodes 0..3
    add(4), add(5)  # the ring evicts episodes 0 and 1 before this process reads the request's rows
    batch = sampler.batch(64)
    check_rows(batch)
    episodes = batch["_key"].numpy() // SHARD_STRIDE // STRIDE
    assert 0 < sampler.redrawn < 64 and (episodes >= 2).all()  # only the evicted draws were made again
    assert batch["_weight"].shape == (64,)
    for number in range(6, 10):
        add(number)  # now every episode of the next request is gone
    before = sampler.redrawn
    check_rows(sampler.batch(64))
    assert sampler.redrawn == before + 64
    sampler.close()


def test_draws_removed_before_they_are_read_are_drawn_again_by_their_shard(cluster, tmp_path):
    """Episodes removed by delete_episodes keep their ids below the first live one's: the draws of them (and
    only those) are drawn again (they were taken for live, read, refused, and all 64 drawn again)."""
    shard = create_shard(tmp_path / "edited", 8, STRIDE, FIELDS)
    for number in range(4):
        call_shard(shard, "add_episode", dict(obs=values(0, number, 6), reward=np.zeros(6)))
    sampler = RayShardedSampler([shard], seed=9, draw_ahead=1)
    check_rows(sampler.batch(64))  # and one request sent ahead, drawn from episodes 0..3
    assert ray.get(shard.__ray_call__.remote(lambda server: server.buffer.delete_episodes([0, 2]))) == 2
    batch = sampler.batch(64)
    check_rows(batch)
    episodes = batch["_key"].numpy() // SHARD_STRIDE // STRIDE
    assert 0 < sampler.redrawn < 64 and set(episodes.tolist()) <= {1, 3}
    sampler.close()


# ---- the sampler contract (tests/samplers/test_samplers.py::TestSamplerContract), as it applies here -------


@pytest.fixture(params=["prioritized", "uniform"])
def make_ray(request, shards):
    """make(**options): a RayShardedSampler of this kind over the two shards (closed at teardown)."""
    made = []

    def make(**options):
        sampler = RayShardedSampler(shards, request.param, **{"seed": 11, "beta": BETA, **options})
        made.append(sampler)
        return sampler

    make.kind = request.param
    yield make
    for sampler in made:
        sampler.close()


def keys_of(samples):
    return [sample.keys.tolist() for sample in samples]


class TestRaySamplerContract:
    """The parts of the sampler contract a sampler across shard actors keeps. The shards hold their episodes
    for the whole module (no ring, no evictions); following writers and evictions are covered above."""

    def test_draws_are_live_valid_positions(self, make_ray):
        from memmap_replay.distributed.shards import ShardSample
        from memmap_replay.samplers import Sampler

        sampler = make_ray()
        assert isinstance(sampler, Sampler)
        valid = {sharded_key(*where) for where in positions()}
        seen = set()
        for _ in range(30):
            sample = sampler.sample(7)
            assert isinstance(sample, ShardSample) and len(sample) == 7
            assert sample.keys.dtype == np.int64 and sample.keys.shape == (7,)
            if make_ray.kind == "uniform":
                assert sample.weights is None
            else:
                assert sample.weights.dtype == np.float32 and sample.weights.shape == (7,)
                assert ((sample.weights > 0) & (sample.weights <= 1)).all()
            assert set(sample.keys.tolist()) <= valid
            seen.update(sample.keys.tolist())
        assert len(seen) > len(valid) // 2  # the draws spread over the positions (both shards)
        assert {int(key) % SHARD_STRIDE for key in seen} == {0, 1}
        batch = sampler.batch(9)
        check_rows(batch)  # gathered values are what was written at each key
        assert batch["_key"].numpy().dtype == np.int64 and set(batch["_key"].tolist()) <= valid
        assert ("_weight" in batch) == (make_ray.kind == "prioritized")

    def test_sample_has_the_requested_size(self, make_ray):
        sampler = make_ray()
        assert sum(map(sum, LENGTHS)) % 7 != 0
        assert [len(sampler.sample(7)) for _ in range(12)] == [7] * 12
        assert [len(sampler.batch(size)["_key"]) for size in (1, 5, 64)] == [1, 5, 64]

    @pytest.mark.parametrize("draw_ahead", [0, 2])
    def test_seeded(self, make_ray, draw_ahead):
        def draws(sampler):
            return keys_of(sampler.sample(6) for _ in range(5))
        first, again = draws(make_ray(draw_ahead=draw_ahead)), draws(make_ray(draw_ahead=draw_ahead))
        assert first == again
        assert first != draws(make_ray(draw_ahead=draw_ahead, seed=12))

    @pytest.mark.parametrize("draw_ahead", [0, 2])
    def test_state_dict_round_trip(self, make_ray, draw_ahead):
        sampler = make_ray(draw_ahead=draw_ahead)
        for _ in range(3):
            sampler.sample(5)
        state = json.loads(json.dumps(sampler.state_dict()))  # plain JSON-able values
        expected = [sampler.sample(5) for _ in range(6)]
        restored = make_ray(draw_ahead=draw_ahead, seed=999)
        restored.load_state_dict(state)
        got = [restored.sample(5) for _ in range(6)]
        # requests sent ahead are not part of the state (its docstring): a loaded state draws from the
        # original's next unsent request on, so the draws of the `draw_ahead` requests in flight are skipped
        expected = expected[draw_ahead:]
        assert keys_of(got[:len(expected)]) == keys_of(expected)
        if make_ray.kind == "prioritized":
            assert [s.weights.tolist() for s in got[:len(expected)]] == [s.weights.tolist() for s in expected]

    def test_batch_sample_and_batches_are_one_stream(self, make_ray):
        twin = make_ray(draw_ahead=0)
        expected = keys_of(twin.sample(4) for _ in range(5))
        batches = make_ray(draw_ahead=0).batches(4, 5)
        assert len(batches) == 5 and keys_of(batches) == expected
        sampler = make_ray(draw_ahead=0)
        gathered = [sampler.batch(4) for _ in range(5)]
        assert [batch["_key"].tolist() for batch in gathered] == expected
        for batch in gathered:
            check_rows(batch)

    def test_refresh_is_a_no_op_and_dataloader_says_why_it_does_not_apply(self, make_ray):
        sampler = make_ray(draw_ahead=0)
        assert sampler.refresh() is False  # the shards follow their writers; nothing to re-read here
        with pytest.raises(OptionError, match=r"RayShardedSampler has no dataloader\(\).*sampler.batch"):
            sampler.dataloader(4)


# ---- rate limits ------------------------------------------------------------------------------------


def limiter_of(shard):
    return call_shard(shard, "info")["rate_limiter"]


def check_window(limiter):
    """Inserts * samples_per_insert - samples stays within the window (from below once sampling began)."""
    low, high = limiter["error_buffer"]
    counts = limiter["counts"]
    diff = counts["inserts"] * limiter["samples_per_insert"] - counts["samples"]
    assert diff <= high and (counts["samples"] == 0 or diff >= low), limiter


def add(shard, number, length=8, **options):
    return call_shard(shard, "add_episode", dict(obs=values(0, number, length), reward=np.zeros(length)), **options)


def held_back(shard, side, run):
    """``run()`` in a thread, returned (as a future) once the shard has refused it at least once."""
    before = limiter_of(shard)["refused"][side]
    pool = ThreadPoolExecutor(1)
    future = pool.submit(run)
    pool.shutdown(wait=False)
    while limiter_of(shard)["refused"][side] == before and not future.done():
        pass
    return future


@ray.remote
class RefusesThenStalls:
    """Refuses the first call (a rate limiter's answer), then takes ``stall`` seconds to answer."""

    def __init__(self, stall: float):
        self.stall, self.calls = stall, 0

    def add_episode(self):
        self.calls += 1
        if self.calls == 1:
            return Refused("its rate limiter does not allow it now: learners are behind", {}, {})
        time.sleep(self.stall)
        return "inserted"

    def count(self):
        return self.calls


def test_a_deadline_passing_on_a_call_sent_again_after_a_refusal_is_a_rate_limit(cluster):
    from memmap_replay.distributed.ray.calls import ShardCall

    actor = RefusesThenStalls.remote(1.5)  # answers the call sent again at 1.5 s: after the first deadline
    assert ray.get(actor.count.remote()) == 0  # started (a start slower than the timeout is "no answer")
    call = ShardCall(actor, "add_episode", timeout=1.0)
    with pytest.raises(RateLimitedError, match=r"did not allow add_episode\(\) within timeout=1 s: "
                                               r".*learners are behind"):
        call.result()  # alive and refusing, not "its actor died"
    # the next result() waits for the call in flight (a deadline of its own: 2 s), it sends no third one
    assert call.result() == "inserted" and ray.get(actor.count.remote()) == 2


def test_a_rate_limited_shard_holds_writers_and_learners_to_the_ratio(cluster, tmp_path):
    shard = create_shard(tmp_path / "limited", 100, STRIDE, FIELDS, rate_limiter=LIMITS)
    sampler = RayShardedSampler([shard], "uniform", seed=0, draw_ahead=0, rate_limit="raise")
    with pytest.raises(RateLimitedError, match="no shard holds a position"):
        sampler.batch(8)
    with pytest.raises(RateLimitedError, match="did not allow add_episode.*'raise'.*learners are behind"):
        for number in range(100):
            add(shard, number, rate_limit="raise")
    assert number == 4 and limiter_of(shard)["counts"] == dict(inserts=32, samples=0, deletes=0)  # 64 - 0 <= 72
    with pytest.raises(RateLimitedError, match="did not allow sample.*writers are behind"):
        for drawn in range(100):
            check_rows(sampler.batch(8))
    assert drawn == 9 and limiter_of(shard)["counts"]["samples"] == 72  # 64 - 72 >= -8
    blocking = RayShardedSampler([shard], "uniform", seed=1, draw_ahead=0)
    learner = held_back(shard, "sample", lambda: blocking.batch(8))  # the writers lag: the learner waits
    assert not learner.done() and limiter_of(shard)["counts"]["samples"] == 72
    add(shard, 4)  # 80 - 72 - 8 >= -8
    check_rows(learner.result(timeout=30))
    writer = held_back(shard, "insert", lambda: [add(shard, number) for number in range(5, 10)])  # learners lag
    assert not writer.done() and limiter_of(shard)["counts"]["inserts"] == 72  # 9 waits: (72 + 8) * 2 - 80 > 72
    check_rows(blocking.batch(8))
    writer.result(timeout=30)
    with pytest.raises(RateLimitedError, match="within timeout=0.2 s.*learners are behind"):
        add(shard, 10, timeout=0.2)  # (80 + 8) * 2 - 88 > 72: waits, then gives up
    # both sides at once, each waiting for the other: every snapshot within the window
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(lambda: [add(shard, number) for number in range(10, 30)])  # 240 steps in all
        for _ in range(40):  # 88 + 40 * 8 = 408 = 240 * 2 - 72 samples: the last insert's due
            check_rows(blocking.batch(8))
            check_window(limiter_of(shard))
        writer.result(timeout=30)
    assert limiter_of(shard)["counts"] == dict(inserts=240, samples=408, deletes=0)
    sampler.close()
    blocking.close()


def test_a_refused_request_is_kept_and_nothing_drawn_is_lost(cluster, tmp_path):
    shards = [create_shard(tmp_path / f"s{index}", 100, STRIDE, FIELDS, rate_limiter=LIMITS) for index in range(2)]
    for number in range(4):
        for shard in shards:
            add(shard, number)
    sampler = RayShardedSampler(shards, seed=3, draw_ahead=2, rate_limit="raise", piggyback=True)
    delivered = 0
    with pytest.raises(RateLimitedError, match="shard [01] of 2 did not allow sample"):
        for _ in range(100):
            batch = sampler.batch(16)
            sampler.update_priorities(batch["_key"], np.full(16, 2.0))  # carried by refused requests too
            delivered += 16
    for shard in shards:
        add(shard, 4)
    sampler.batch(16)  # the refused request, asked again: what the other shard drew for it is kept
    delivered += 16
    limiters = [limiter_of(shard) for shard in shards]
    samples = sum(limiter["counts"]["samples"] for limiter in limiters)
    assert delivered <= samples <= delivered + 2 * 16  # beyond it: only the two requests sent ahead
    for limiter in limiters:
        check_window(limiter)
    sampler.close()
    assert sampler.updates.applied == delivered - 16  # every update carried, refused or not, landed once


def test_rate_limiter_options_and_counts_in_one_process(tmp_path):
    ring = ShardServer(tmp_path / "ring", 3, STRIDE, FIELDS, circular=True,
                       rate_limiter=dict(samples_per_insert=1.0, error_buffer=100, unit="steps"))
    for number in range(5):
        assert ring.add_episode(dict(obs=values(0, number, 4), reward=np.zeros(4))) == number
    assert ring.info()["rate_limiter"]["counts"] == dict(inserts=20, samples=0, deletes=8)  # 2 evicted
    refused = ring.add_episode(dict(obs=np.zeros(200), reward=np.zeros(200)))
    with pytest.raises(InvalidDataError, match="never fits the error window"):
        ring.sample(300, "uniform")
    assert isinstance(ring.sample(4, "uniform", seed=0, limited=False), dict)
    assert ring.info()["rate_limiter"]["counts"]["samples"] == 0
    ring.close()
    assert isinstance(refused, Refused) and "insert of 200 steps" in refused.message
    reopened = ShardServer(tmp_path / "ring", rate_limiter=dict(samples_per_insert=2.0, error_buffer=10))
    # in memory, counting begins anew: the 12 steps held as inserted, and sampled on target (12 * 2 - 2)
    assert reopened.info()["rate_limiter"]["counts"] == dict(inserts=12, samples=22, deletes=0)
    reopened.close()
    common = RateLimiter(2.0, error_buffer=40, min_size_to_sample=16, folder=tmp_path)  # one for both shards
    pair = [ShardServer(tmp_path / name, 10, STRIDE, FIELDS, rate_limiter=common) for name in "ab"]
    for server in pair:
        server.add_episode(dict(obs=np.zeros(8), reward=np.zeros(8)))
    assert [server.info()["rate_limiter"]["counts"]["inserts"]
            for server in pair] == [16, 16] == [common.counts.inserts] * 2
    for server in pair:
        server.close()
    common.close()
    with pytest.raises(InvalidDataError, match="rate_limiter must be None, a RateLimiter or a dict"):
        create_shard(tmp_path / "bad", 10, STRIDE, FIELDS, rate_limiter="fast")
    with pytest.raises(InvalidDataError, match="unknown keys \\['ratio'\\]"):
        ShardServer(tmp_path / "bad", 10, STRIDE, FIELDS, rate_limiter=dict(LIMITS, ratio=2))
    with pytest.raises(InvalidDataError, match="error_buffer must leave a window"):
        ShardServer(tmp_path / "bad", 10, STRIDE, FIELDS, rate_limiter=dict(LIMITS, error_buffer=1))


def test_importing_the_library_imports_no_ray():
    code = "import memmap_replay, sys; assert 'ray' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the tests below kill shard actors: they come last ---------------------------------------------


def test_a_killed_shard_comes_back_with_every_episode_and_priority(shards):
    lengths = (LENGTHS[0] + [5], LENGTHS[1])
    call_shard(shards[0], "add_episode", dict(obs=values(0, len(LENGTHS[0]), 5), reward=np.zeros(5)))
    sampler = RayShardedSampler(shards, seed=7, draw_ahead=2)
    set_priorities(sampler, lengths=lengths)
    durable = ray.get(shards[0].checkpoint.remote())
    assert durable["episodes"] == len(lengths[0]) and durable["priorities"]
    first = sampler.info()[0]
    def changed(shard, number, t):
        return 3.0 + t % 2  # sent without waiting, then the actor is killed
    every = [where for where in positions(lengths) if where[0] == 0]
    sampler.update_priorities(np.array([sharded_key(*where) for where in every]),
                              np.array([changed(*where) for where in every]))
    ray.kill(shards[0], no_restart=False)
    for _ in range(5):  # requests in flight fail with the actor; they are sent again once it is back
        check_rows(sampler.batch(64))
    sampler.wait()
    info = sampler.info()[0]
    assert info["pid"] != first["pid"]  # a new process, reopened from the folder
    assert (info["episodes"], info["steps"]) == (first["episodes"], first["steps"])
    expected = sum(changed(*where) ** ALPHA for where in every)
    np.testing.assert_allclose(info["samplers"]["prioritized"]["mass"], expected)
    sampler.close()


def test_a_shard_that_never_comes_back_gives_a_clear_error(shards):
    sampler = RayShardedSampler(shards, seed=8, draw_ahead=0, timeout=1.0)
    ray.kill(shards[1], no_restart=True)
    with pytest.raises(ShardUnavailableError, match="shard 1 of 2 did not answer sample"):
        for _ in range(1000):  # (the kill takes effect a moment later: draws until then are answered)
            sampler.batch(64)


def test_a_restarted_shard_keeps_its_rate_limiter_counts_when_they_are_in_its_folder(cluster, tmp_path):
    shard = create_shard(tmp_path / "shared", 100, STRIDE, FIELDS, rate_limiter=dict(LIMITS, shared=True))
    for number in range(4):
        add(shard, number)
    call_shard(shard, "sample", 24, "uniform")
    before = call_shard(shard, "info")
    assert before["rate_limiter"]["counts"] == dict(inserts=32, samples=24, deletes=0)
    assert before["rate_limiter"]["folder"] == str(tmp_path / "shared")
    ray.kill(shard, no_restart=False)
    for _ in range(1000):  # (the kill takes effect a moment later; calls meanwhile wait for the restart)
        after = call_shard(shard, "info")
        if after["pid"] != before["pid"]:
            break
    assert after["pid"] != before["pid"] and after["rate_limiter"]["counts"] == before["rate_limiter"]["counts"]
