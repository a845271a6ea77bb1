"""A training loop killed with SIGKILL mid-epoch resumes from its last saved training state with exactly the
batches a run without the kill gives: uniform draws, prioritized draws with their updates, a mixed uniform +
prioritized sampler, and a block-shuffled epoch loader (the loops: tests/resume_loops.py). Each run is killed
twice, at seeded points, and resumed each time; the killed children are forked from this process."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from resume_loops import ORDERS, SAVE_EVERY, copy_stores, file_log, make_stores, read_log, train

TOTAL = 90


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    make_stores(root)
    return root


def _killed_at(root, order: str, log_path, steps: int, *, resume: bool) -> None:
    """Run the loop in a forked child and SIGKILL it once its log holds ``steps`` more batches."""
    before = len([entry for entry in read_log(log_path) if "step" in entry])
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            train(root, order, 10 * TOTAL, file_log(log_path), resume=resume, pace=lambda: time.sleep(0.002))
            code = 0
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 120  # (a child that hangs fails the test instead of blocking it)
        while len([entry for entry in read_log(log_path) if "step" in entry]) < before + steps:
            assert time.monotonic() < deadline, "the training child made no progress"
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                pytest.fail("the training child ended before it was killed")
            time.sleep(0.001)
    finally:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("order", ORDERS)
def test_a_loop_killed_mid_epoch_resumes_exactly(stores, tmp_path, order):
    reference: list[dict] = []
    train(copy_stores(stores, tmp_path / "reference"), order, TOTAL, reference.append)
    expected = {entry["step"]: entry["reward"] for entry in reference if "step" in entry}
    root = copy_stores(stores, tmp_path / "run")
    rng = np.random.default_rng(sum(map(ord, order)))
    log_path = tmp_path / "killed.log"
    first, second = (int(steps) for steps in rng.integers(SAVE_EVERY + 1, 30, size=2))
    _killed_at(root, order, log_path, first, resume=False)
    _killed_at(root, order, log_path, second, resume=True)
    killed = [entry for entry in read_log(log_path) if "step" in entry]
    assert all(entry["reward"] == expected[entry["step"]] for entry in killed)
    resumed: list[dict] = []
    start = train(root, order, TOTAL, resumed.append, resume=True)
    # the resumed run starts at its last save: before the last batch the killed run logged (the kill lost the
    # batches after the save), or right after it (the kill came between a save and the next batch)
    assert 0 < start <= max(entry["step"] for entry in killed) + 1
    assert {entry["step"]: entry["reward"] for entry in resumed if "step" in entry} == {
        step: expected[step] for step in range(start, TOTAL)}
