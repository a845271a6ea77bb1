"""Parallel gathers (views.gather): numpy's take split over the library's threads, the same bytes as one take
(rows past the end included), on by default, in a forked child and a DataLoader's worker processes too, serial in a
loader's gather threads, with one thread and below MIN_BYTES; a compressed field's column takes its rows itself."""

import multiprocessing
import os
import pickle

import numpy as np
import pytest
import torch

import memmap_replay
from memmap_replay import OptionError
from memmap_replay.core import threads
from memmap_replay.views import gather
from memmap_replay.views.pool import OutputPool

from conftest import episode_arrays

DTYPES = ("uint8", "bool", "int16", ">i4", "float32", "float64", "complex64", "u1,f4,(2,)i2", "M8[s]")
SHAPES = ((), (3,), (2, 3, 5), (0,))
ROWS = (np.array([4, 0, 4, 1]), np.arange(40)[::-1], np.array([[3, 39, 0], [7, 7, 7]]), np.array([-5, 2, 40, 99]),
        np.arange(200) % 43, np.array([], np.int64), np.array([[12]]), np.arange(40, dtype=np.int32))


def expected_take(source, rows):
    return np.take(source, rows, axis=0, mode="clip")


@pytest.mark.parametrize("size", [2, 3, 5])
def test_split_gathers_are_numpys_take(parallel, size, tmp_path):
    parallel.on()
    threads.set_threads(size)
    rng = np.random.default_rng(size)
    for number, (dtype, shape) in enumerate((dtype, shape) for dtype in DTYPES for shape in SHAPES):
        raw = rng.integers(0, 256, (40, *shape, np.dtype(dtype).itemsize), dtype=np.uint8)
        path = tmp_path / f"{number}.npy"
        np.save(path, raw.view(dtype).reshape(40, *shape))
        for source in (np.load(path), np.load(path, mmap_mode="r")):  # in RAM, a read-only memory map
            for rows in ROWS:
                out = np.empty(rows.shape + source.shape[1:], source.dtype)
                got = gather.take(source, rows, out)
                assert got is out
                expected = expected_take(source, rows)  # (random bytes: NaNs too, so the bytes are compared)
                assert got.dtype == expected.dtype and got.shape == expected.shape
                assert got.tobytes() == expected.tobytes(), f"{dtype} {shape} {rows}"
    assert parallel.copies > 0


def test_gathers_split_only_when_they_may(parallel):
    source = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
    rows = np.random.default_rng(0).integers(-3, 70, 50)
    expected = expected_take(source, rows)

    def copied(out=None, **kwargs):
        before = parallel.copies
        out = np.empty((50, 4), np.float32) if out is None else out
        np.testing.assert_array_equal(gather.take(source, rows, out), expected)
        return parallel.copies - before

    assert copied() == 0  # parallel gathers off (the fixture's start)
    parallel.on()
    assert copied() == 1
    with threads.serial():  # a loader's gather thread
        assert copied() == 0
    assert copied(np.empty((4, 50), np.float32).T) == 0  # an output that is not C-contiguous: one take
    threads.set_threads(1)  # (the fixture puts it back)
    assert copied() == 0
    threads.set_threads(4)
    # 50 rows of 16 bytes (800 in all): split from MIN_BYTES, into parts of a quarter of it or more
    for count, min_bytes, parts in ((50, 0, 4), (50, 400, 4), (50, 800, 3), (50, 801, 1), (1, 0, 1)):
        gather.MIN_BYTES = min_bytes  # (the fixture puts it back)
        assert gather.parts(source, count, np.empty((count, 4), np.float32)) == parts
    objects = np.array([object()] * 8)
    assert gather.parts(objects, 8, np.empty(8, object)) == 1  # Python objects: numpy holds the GIL
    np.testing.assert_array_equal(gather.take(objects, np.array([1, 9]), np.empty(2, object)), objects[[1, 7]])


def test_default_sizes_split_a_batch_of_images_and_leave_small_fields_alone(monkeypatch):
    monkeypatch.setattr(gather._SETTINGS, "enabled", None)
    monkeypatch.delenv(gather.ENVIRONMENT, raising=False)
    previous = threads.set_threads(4)
    try:
        images = np.zeros((1000, 3, 64, 64), np.uint8)
        assert gather.parts(images, 256, np.empty((256, 3, 64, 64), np.uint8)) == 4  # 3 MB: on by default
        assert gather.parts(images, 128, np.empty((128, 3, 64, 64), np.uint8)) == 1  # 1.5 MiB: below 2 MiB
        assert gather.parts(images, 192, np.empty((192, 3, 64, 64), np.uint8)) == 4  # 2.25 MiB: parts of 512 KiB+
        states = np.zeros((100_000, 17), np.float32)  # a window batch of vector states (272 KiB): one take
        assert gather.parts(states, 4096, np.empty((4096, 17), np.float32)) == 1
        rewards = np.zeros(1000, np.float32)
        assert gather.parts(rewards, 256, np.empty(256, np.float32)) == 1
    finally:
        threads.set_threads(previous)


def test_a_read_only_output_is_refused_as_numpy_refuses_it(parallel):
    parallel.on()
    source = np.arange(30, dtype=np.float32).reshape(10, 3)
    out = np.zeros((2, 3), np.float32)
    out.flags.writeable = False  # (a user's output target handing out read-only memory)
    with pytest.raises(ValueError, match="read-only"):
        gather.take(source, np.array([1, 2]), out)
    assert not out.any() and parallel.copies == 0


def test_output_pool_takes_raw_and_compressed_fields(make_buffer, parallel):
    pytest.importorskip("zstandard")
    parallel.on()
    buffer = make_buffer(max_episodes=4, max_timesteps=30, fields=dict(
        image=dict(dtype="uint8", shape=(4, 6), codec="zstd"), action=("float32", (3,))))
    rng = np.random.default_rng(3)
    images = rng.integers(0, 4, (30, 4, 6), dtype=np.uint8)
    actions = rng.random((30, 3), dtype=np.float32)
    buffer.store_episode(image=images, action=actions)
    column = buffer.episode_store.step_array("image")
    assert not isinstance(column, np.ndarray)  # an EncodedColumn: it decodes, never a raw take
    pool = OutputPool()
    for rows in (np.array([3, 29, 0, 3]), np.array([[5, 17], [1, 2]]), np.arange(30)[::-1]):
        before = parallel.copies
        np.testing.assert_array_equal(pool.take(column, rows), images[rows])
        assert parallel.copies == before
        np.testing.assert_array_equal(pool.take(buffer.episode_store.step_array("action"), rows), actions[rows])
        assert parallel.copies == before + 1
    batch = buffer.dataset(timestep_level=True).__getitems__(np.arange(30))
    np.testing.assert_array_equal(batch["image"].numpy(), images)
    np.testing.assert_array_equal(batch["action"].numpy(), actions)


def test_set_parallel_gathers_returns_the_previous_setting(monkeypatch):
    monkeypatch.setattr(gather._SETTINGS, "enabled", None)
    monkeypatch.delenv(gather.ENVIRONMENT, raising=False)
    assert memmap_replay.get_parallel_gathers() is True  # on by default
    assert memmap_replay.set_parallel_gathers(False) is True
    assert memmap_replay.set_parallel_gathers(np.True_) is False and memmap_replay.get_parallel_gathers()
    with pytest.raises(OptionError, match=r"set_parallel_gathers takes True or False \(got 'yes'\)"):
        memmap_replay.set_parallel_gathers("yes")
    for value, expected in (("1", True), ("On", True), ("", True), ("0", False), (" no ", False), ("OFF", False)):
        monkeypatch.setattr(gather._SETTINGS, "enabled", None)  # the environment is read at the first gather
        monkeypatch.setenv(gather.ENVIRONMENT, value)
        assert memmap_replay.get_parallel_gathers() is expected
    monkeypatch.setattr(gather._SETTINGS, "enabled", None)
    monkeypatch.setenv(gather.ENVIRONMENT, "2")
    with pytest.raises(OptionError,
                       match=r"MEMMAP_REPLAY_PARALLEL_GATHERS must be one of 1, on, .* \(got '2'\); set it to 0"):
        memmap_replay.get_parallel_gathers()
    assert memmap_replay.set_parallel_gathers(False) is True  # code decides over a bad variable (the default)
    assert memmap_replay.get_parallel_gathers() is False


def test_a_refreshed_view_gathers_from_its_new_maps(make_buffer, parallel):
    buffer = make_buffer(max_episodes=1, max_timesteps=8)
    buffer.store_episode(**episode_arrays(0, 8), task_id=0)
    parallel.on()
    view = buffer.dataset(timestep_level=True)
    view.__getitems__(np.arange(8))
    for number in range(1, 4):
        buffer.grow(max_episodes=number + 1, max_steps=8 * (number + 1))  # the step files grow: mapped again
        buffer.store_episode(**episode_arrays(number, 8), task_id=number)
        assert view.refresh()
        batch = view.__getitems__(np.arange(len(view)))
        np.testing.assert_array_equal(batch["obs"][:, 0].numpy() // 1000, np.repeat(np.arange(number + 1), 8))
    assert parallel.copies > 0
    assert pickle.loads(pickle.dumps(view))._sources == {}  # a pickled view carries no map


def test_a_loaders_gather_threads_gather_serially(make_buffer, parallel):
    buffer = make_buffer(max_episodes=20)
    for number in range(6):
        buffer.store_episode(**episode_arrays(number, 8), task_id=number)
    parallel.on()
    loader = buffer.dataloader(4, timestep_level=True, shuffle=False, num_workers=2, workers="threads")
    threaded = list(loader)
    assert parallel.copies == 0
    for batch, alone in zip(threaded, buffer.dataloader(4, timestep_level=True, shuffle=False)):
        torch.testing.assert_close(batch["obs"], alone["obs"], rtol=0, atol=0)
    assert parallel.copies > 0  # the loop without workers split its gathers


def gather_in_child(view, items, parallel, queue):
    try:
        before = parallel.copies
        got = view.__getitems__(items)["image"].numpy()
        queue.put((parallel.copies - before, got.sum(dtype=np.int64), got.shape))
    except BaseException as error:
        queue.put(repr(error))


@pytest.fixture
def images(make_buffer):
    buffer = make_buffer(max_episodes=4, max_timesteps=300, fields=dict(image=("uint8", (3, 16, 16))))
    rng = np.random.default_rng(0)
    for _ in range(2):
        buffer.store_episode(image=rng.integers(0, 255, (300, 3, 16, 16), dtype=np.uint8))
    return buffer


def test_a_child_forked_after_its_parent_gathered_in_parallel_gathers_too(images, parallel):
    parallel.on()
    view = images.dataset(timestep_level=True)
    items = np.random.default_rng(1).integers(0, len(view), 256)
    expected = view.__getitems__(items)["image"].numpy()  # the parent's threads start
    assert parallel.copies == 1 and threads.THREADS._pid == os.getpid()
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    child = fork.Process(target=gather_in_child, args=(view, items, parallel, queue), daemon=True)
    child.start()
    try:
        result = queue.get(timeout=60)  # (a hang would end here, not in the test run's time limit)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert result == (1, expected.sum(dtype=np.int64), expected.shape)  # split over the child's own threads
    assert child.exitcode == 0


def test_a_dataloaders_worker_processes_gather_after_the_parent_did(images, parallel):
    parallel.on()
    loader = images.dataloader(64, timestep_level=True, shuffle=False)
    alone = [batch["image"] for batch in loader]  # the parent's gathers: split
    assert parallel.copies == len(alone)
    workers = images.dataloader(64, timestep_level=True, shuffle=False, num_workers=2, workers="processes",
                                multiprocessing_context="fork", timeout=60)
    for batch, expected in zip(workers, alone, strict=True):
        torch.testing.assert_close(batch["image"], expected, rtol=0, atol=0)
