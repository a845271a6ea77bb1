"""Parallel gathers (views.gather): torch's index_select over torch's threads, the same bytes as numpy's take,
serial where it must be (a forked child, a loader's gather threads, rows out of range, a dtype torch lacks)."""

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import memmap_replay
from memmap_replay import OptionError
from memmap_replay.views import gather
from memmap_replay.views.pool import OutputPool

from conftest import episode_arrays

ROOT = Path(__file__).resolve().parents[2]


def test_source_tensor_shares_a_read_only_map_without_a_warning(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(24, dtype=np.float32).reshape(6, 4))
    source = np.load(path, mmap_mode="r")
    tensor = gather.source_tensor(source)  # (warnings are errors in the tests)
    assert tensor is not None and tensor.data_ptr() == source.ctypes.data and tensor.shape == (6, 4)
    for unusable in (np.zeros((4, 2), ">f4"), np.array(["ab", "cd"]), np.zeros((3, 2), "u1,f4"), np.zeros((0, 3)),
                     np.float32(1.0).reshape(())):
        assert gather.source_tensor(unusable) is None  # a byte order, a dtype torch lacks, nothing to gather


def test_parallel_take_copies_rows_or_leaves_them_to_numpy(monkeypatch):
    monkeypatch.setattr(gather, "MIN_BYTES", 0)
    source = np.random.default_rng(0).random((50, 3, 4)).astype(np.float32)
    tensor = gather.source_tensor(source)
    rows = np.array([[4, 0, 49], [7, 7, 1]])
    out = np.empty((2, 3, 3, 4), np.float32)
    assert gather.parallel_take(tensor, rows, out)
    np.testing.assert_array_equal(out, source[rows])
    assert gather.parallel_take(tensor, rows.astype(np.int32), out)  # any int dtype
    for outside in (np.array([1, 50]), np.array([-1, 2])):  # numpy's 'clip' reads these (the last row, the first)
        assert not gather.parallel_take(tensor, outside, np.empty((2, 3, 4), np.float32))
    assert not gather.parallel_take(tensor, np.array([1, 2]), np.empty((3, 4, 2), np.float32).transpose(2, 0, 1)[:2])
    monkeypatch.setattr(gather, "MIN_BYTES", 10_000)  # small gathers stay numpy's
    assert not gather.parallel_take(tensor, rows, out)


def test_output_pool_takes_the_same_bytes_either_way(monkeypatch):
    monkeypatch.setattr(gather, "MIN_BYTES", 0)
    source = np.arange(40 * 6, dtype=np.int64).reshape(40, 6)
    pool = OutputPool()
    for rows in (np.array([3, 39, 0]), np.array([5, 40, 41]), np.array([-2, 1])):  # the last two: clipped by numpy
        np.testing.assert_array_equal(pool.take(source, rows, gather.source_tensor(source)),
                                      np.take(source, rows, axis=0, mode="clip"))


def test_set_parallel_gathers_returns_the_previous_setting(monkeypatch):
    monkeypatch.setattr(gather._SETTINGS, "enabled", None)
    monkeypatch.delenv(gather.ENVIRONMENT, raising=False)
    assert memmap_replay.get_parallel_gathers() is False  # off by default
    assert memmap_replay.set_parallel_gathers(True) is False
    assert memmap_replay.set_parallel_gathers(False) is True and not memmap_replay.get_parallel_gathers()
    with pytest.raises(OptionError, match=r"set_parallel_gathers takes True or False \(got 'yes'\)"):
        memmap_replay.set_parallel_gathers("yes")
    for value, expected in (("1", True), ("On", True), ("0", False), ("", False), (" no ", False)):
        monkeypatch.setattr(gather._SETTINGS, "enabled", None)  # the environment is read at the first gather
        monkeypatch.setenv(gather.ENVIRONMENT, value)
        assert memmap_replay.get_parallel_gathers() is expected
    monkeypatch.setattr(gather._SETTINGS, "enabled", None)
    monkeypatch.setenv(gather.ENVIRONMENT, "2")
    with pytest.raises(OptionError,
                       match=r"MEMMAP_REPLAY_PARALLEL_GATHERS must be one of 1, on, .* \(got '2'\); set it"):
        memmap_replay.get_parallel_gathers()
    assert memmap_replay.set_parallel_gathers(False) is False  # code decides over a bad variable
    assert memmap_replay.get_parallel_gathers() is False


def test_a_read_only_output_or_an_old_dlpack_never_gets_written_wrongly(monkeypatch, tmp_path):
    monkeypatch.setattr(gather, "MIN_BYTES", 0)
    source = np.arange(30, dtype=np.float32).reshape(10, 3)
    out = np.zeros((2, 3), np.float32)
    out.flags.writeable = False  # (a user's output target handing out read-only memory: numpy refuses it)
    assert not gather.parallel_take(gather.source_tensor(source), np.array([1, 2]), out) and not out.any()

    def old_dlpack(array):
        raise BufferError("Cannot export readonly array since signalling readonly is unsupported by DLPack")

    path = tmp_path / "a.npy"
    np.save(path, source)
    mapped = np.load(path, mmap_mode="r")
    monkeypatch.setattr(gather.torch, "from_dlpack", old_dlpack)
    tensor = gather.source_tensor(mapped)  # torch.from_numpy then, its read-only warning silenced
    assert tensor is not None and tensor.data_ptr() == mapped.ctypes.data


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
        for name, tensor in view._tensors.items():
            assert tensor.data_ptr() == view._sources[name].ctypes.data  # the current map's, not an old one's


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
    assert parallel.copies > 0  # the loop without workers copied with torch


FORKED = textwrap.dedent("""
    import multiprocessing, sys
    import numpy as np, torch
    import memmap_replay
    from memmap_replay import OptionError, ReplayBuffer
    from memmap_replay.views import pool

    copies = []
    take = pool.parallel_take
    pool.parallel_take = lambda *args: copies.append(take(*args)) or copies[-1]
    torch.set_num_threads(2)
    buffer = ReplayBuffer(sys.argv[1], max_episodes=4, max_timesteps=600, fields=dict(image=("uint8", (3, 64, 64))))
    rng = np.random.default_rng(0)
    for _ in range(2):
        buffer.store_episode(image=rng.integers(0, 255, (500, 3, 64, 64), dtype=np.uint8))
    view = buffer.dataset(timestep_level=True)
    items = rng.integers(0, len(view), 256)
    memmap_replay.set_parallel_gathers(True)
    expected = view.__getitems__(items)["image"]  # 3 MB: torch's threads (OpenMP) copy it, and start
    assert copies == [True], copies

    def child(queue):
        try:
            refused = ""
            try:
                memmap_replay.set_parallel_gathers(True)
            except OptionError as error:
                refused = str(error)
            got = view.__getitems__(items)["image"]  # serial: torch's pool would hang here (so would torch.equal)
            same = bool(np.array_equal(got.numpy(), expected.numpy()))
            queue.put((memmap_replay.get_parallel_gathers(), refused, same, copies))
        except BaseException as error:
            queue.put(repr(error))

    queue = multiprocessing.get_context("fork").Queue()
    process = multiprocessing.get_context("fork").Process(target=child, args=(queue,), daemon=True)
    process.start()
    print(queue.get(timeout=60))
    process.join(timeout=60)
""")


def printed(tmp_path, text: str, count: int) -> list:
    """The last ``count`` lines a script printed (Python literals), run in a fresh interpreter with a store
    folder under ``tmp_path`` as its argument; a fail if it or a child it forked hangs."""
    script = tmp_path / "script.py"
    script.write_text(text)
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "store")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        stdout, stderr = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the script or its forked child hung")
    assert process.returncode == 0, stderr.decode()
    return [ast.literal_eval(line) for line in stdout.decode().strip().splitlines()[-count:]]


def test_a_forked_child_gathers_serially_and_never_hangs(tmp_path):
    [(enabled, refused, same, copies)] = printed(tmp_path, FORKED, 1)
    assert enabled is False and same is True and copies == [True]  # the child's gather: numpy's (no copy counted)
    assert "forked from one that had imported torch" in refused and "'spawn' method" in refused


FORKED_BEFORE_VIEWS = textwrap.dedent("""
    import multiprocessing, os, sys
    import numpy as np
    from memmap_replay import ReplayBuffer

    def marked(queue):
        from memmap_replay._forks import FORKS
        queue.put(FORKS.torch_parent)

    def child(queue):
        try:
            import memmap_replay
            view = buffer.dataset(timestep_level=True)  # the torch side, imported after the fork
            got = view.__getitems__(np.arange(256))["image"]  # serial: torch's pool would hang here
            queue.put((memmap_replay.get_parallel_gathers(), bool((got.numpy() == 7).all())))
        except BaseException as error:
            queue.put(repr(error))

    buffer = ReplayBuffer(sys.argv[1], max_episodes=4, max_timesteps=600, fields=dict(image=("uint8", (3, 64, 64))))
    buffer.store_episode(image=np.full((500, 3, 64, 64), 7, np.uint8))
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    assert "torch" not in sys.modules
    fork.Process(target=marked, args=(queue,), daemon=True).start()
    print(queue.get(timeout=60))  # no torch in the parent: no mark
    import torch
    torch.set_num_threads(2)
    torch.rand(4_000_000).sum()  # the parent's OpenMP pool runs (the library's views never loaded here)
    os.environ["MEMMAP_REPLAY_PARALLEL_GATHERS"] = "1"
    fork.Process(target=child, args=(queue,), daemon=True).start()
    print(queue.get(timeout=60))
""")


def test_a_child_forked_before_the_views_were_loaded_is_marked_too(tmp_path):
    without_torch, (enabled, same) = printed(tmp_path, FORKED_BEFORE_VIEWS, 2)
    assert without_torch is False and enabled is False and same is True
