"""The library's worker threads (core/threads.py): every task runs, errors reach the caller after all tasks are
done, a forked child makes threads of its own, and serial() keeps a thread's work in it."""

import os
import threading

import pytest

from memmap_replay import OptionError
from memmap_replay.core import threads
from memmap_replay.core.threads import THREADS, WorkerThreads, serial, set_threads, split


@pytest.fixture
def pool():
    made = WorkerThreads()
    made.resize(3)
    return made


def test_every_task_runs_once_and_the_caller_runs_the_first(pool):
    ran = []
    lock = threading.Lock()

    def task(number):
        with lock:
            ran.append((number, threading.current_thread() is threading.main_thread()))

    pool.run([lambda number=number: task(number) for number in range(20)])
    assert sorted(number for number, _ in ran) == list(range(20))
    assert (0, True) in ran


def test_the_first_error_is_raised_after_every_task_is_done(pool):
    done = []

    def slow_ok():
        threading.Event().wait(0.05)
        done.append(1)

    def fail():
        raise ValueError("task failed")

    with pytest.raises(ValueError, match="task failed"):
        pool.run([fail, slow_ok, slow_ok])
    assert len(done) == 2


def test_a_forked_child_runs_tasks_on_threads_of_its_own(pool):
    pool.run([lambda: None] * 4)  # the parent's threads exist now
    pid = os.fork()
    if pid == 0:  # the child: its parent's threads do not exist here
        try:
            out = []
            pool.run([lambda number=number: out.append(number) for number in range(6)])
            os._exit(0 if sorted(out) == list(range(6)) else 1)
        finally:
            os._exit(2)
    for _ in range(200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        threading.Event().wait(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung running tasks")
    assert os.waitstatus_to_exitcode(status) == 0


def test_serial_keeps_the_tasks_in_the_calling_thread(pool):
    seen = set()
    with serial():
        assert pool.parts(1000, 1) == 1
        pool.run([lambda: seen.add(threading.get_ident())] * 5)
    assert seen == {threading.get_ident()}
    assert pool.parts(1000, 1) == 3 and pool.parts(10, 4) == 2 and pool.parts(3, 4) == 1


def test_split_covers_the_range_in_near_equal_parts():
    parts = split(10, 3)
    assert [(part.start, part.stop) for part in parts] == [(0, 3), (3, 6), (6, 10)]
    assert split(2, 5) == [slice(0, 1), slice(1, 2)]


def test_set_threads_takes_a_count_and_returns_the_previous():
    before = set_threads(2)
    try:
        assert THREADS.size == 2
        with pytest.raises(OptionError, match=r"set_threads takes a number of threads from 1 to 256 \(got 0\)"):
            set_threads(0)
        with pytest.raises(OptionError, match=r"\(got True\)"):
            set_threads(True)
    finally:
        set_threads(before)


@pytest.mark.parametrize("value", ["0", "many", "300"])
def test_a_bad_environment_variable_is_an_error_that_names_it(monkeypatch, value):
    monkeypatch.setenv(threads.ENVIRONMENT, value)
    with pytest.raises(OptionError, match=rf"MEMMAP_REPLAY_THREADS must be a number of threads from 1 to 256 "
                                          rf"\(got '{value}'\)"):
        WorkerThreads().size
    monkeypatch.setenv(threads.ENVIRONMENT, "3")
    assert WorkerThreads().size == 3
