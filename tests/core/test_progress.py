"""Progress bars (core/progress.py): a bar that is not drawn is no tqdm, so the library's calls never take tqdm's
class-wide lock, a multiprocessing lock shared with forked processes: one killed while holding it (SIGKILL while it
made a bar, as the kill sweeps do) left every later call of the parent that made a bar, drawn or not, waiting
forever."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

import numpy as np
import pytest
import tqdm.std

from memmap_replay import ReplayBuffer, merge, pack, returns_to_go, split, verify, write_manifest
from memmap_replay.core.progress import NoBar, progress_bar


def make(folder) -> None:
    rng = np.random.default_rng(0)
    with ReplayBuffer(folder, 20, 30, fields=dict(obs=("float", 3), reward="float")) as buffer:
        for _ in range(6):
            buffer.store_episode(obs=rng.standard_normal((10, 3)), reward=rng.random(10))
        buffer.delete_episodes([1])


def every_verb(tmp_path) -> None:
    make(tmp_path / "a")
    merge(tmp_path / "m", tmp_path / "a", tmp_path / "a")
    split(tmp_path / "a", {"x": 0.5, "y": 0.5}, out=tmp_path / "s", seed=0)
    with ReplayBuffer.from_folder(tmp_path / "a") as buffer:
        buffer.add_field("rtg", returns_to_go())
        buffer.compact()
    write_manifest(tmp_path / "a")
    assert verify(tmp_path / "a", checksums=True).ok
    pack(tmp_path / "a", tmp_path / "a.tar")


def test_a_bar_not_drawn_is_no_tqdm():
    bar = progress_bar(10, "x", False)
    assert isinstance(bar, NoBar)
    with bar:
        bar.update(3)
    assert bar.n == 3


def test_the_verbs_never_take_tqdms_lock_without_a_bar(tmp_path, monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("tqdm's lock was taken for a bar that is not drawn")
    monkeypatch.setattr(tqdm.std.TqdmDefaultWriteLock, "acquire", refuse)
    every_verb(tmp_path)


def test_a_child_killed_holding_tqdms_lock_blocks_nothing(tmp_path):
    lock = tqdm.std.tqdm.get_lock()  # (made now: forked children share it)
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        lock.acquire()
        os.write(ready_write, b"x")
        signal.pause()
        os._exit(0)
    os.read(ready_read, 1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    errors: list[BaseException] = []
    def run() -> None:
        try:
            every_verb(tmp_path)
        except BaseException as error:  # (reported below)
            errors.append(error)
    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        worker.join(timeout=120)
        if worker.is_alive():
            pytest.fail("a library call waited for tqdm's lock, which a killed child held")
        assert not errors, errors
    finally:
        # (fresh locks for the tests after this one: the killed child's stays held)
        tqdm.std.TqdmDefaultWriteLock.mp_lock = multiprocessing.RLock()
        tqdm.std.tqdm.set_lock(tqdm.std.TqdmDefaultWriteLock())
