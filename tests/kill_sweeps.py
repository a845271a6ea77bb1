"""Pieces of the kill sweeps of edits (tests/sharing/test_*_kill.py): a forked writer that says when it is open, and
reaping it with a limit (not a timing assertion: a child that hangs fails the test instead of hanging it)."""

from __future__ import annotations

import os
import signal
import time
import traceback
from pathlib import Path
from typing import Callable

import pytest

from memmap_replay import ReplayBuffer

WAIT_LIMIT = 60.0  # seconds a child may take before the test gives up


def fork_writer(folder: Path, work: Callable[[ReplayBuffer], object]) -> int:
    """Fork a child that opens a writer of ``folder``, says so, then runs ``work(buffer)``; its pid, once the writer
    is open (so that the kill instants fall within the work). The child exits 0 when the work is done, 1 (after
    printing the traceback) when it failed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        code = 1
        try:
            os.close(read)
            with ReplayBuffer.from_folder(folder) as buffer:
                os.write(write, b"o")
                work(buffer)
            code = 0
        except BaseException:
            traceback.print_exc()  # (and exit 1: the sweep fails)
        finally:
            os._exit(code)
    os.close(write)
    os.read(read, 1)
    os.close(read)
    return pid


def reap(pid: int, limit: float = WAIT_LIMIT) -> int:
    """The wait status of child ``pid``; the test fails (the child killed) if it has not ended within ``limit`` s."""
    deadline = time.monotonic() + limit
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the child {pid} did not end within {limit} s")
        time.sleep(0.002)
    return done[1]
