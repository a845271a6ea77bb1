"""The runnable examples in the docstrings of the main entry points (numpydoc ``Examples`` sections) run as
written, each in a fresh empty working folder, and every main entry point has one."""

from __future__ import annotations

import doctest
import inspect

import pytest

import memmap_replay
from memmap_replay import RateLimiter, ShardSet
from memmap_replay.buffer import ReplayBuffer  # (the native facade; memmap_replay.ReplayBuffer adds 0.2.3's names)

MAIN = {
    "ReplayBuffer": ReplayBuffer,
    "ReplayBuffer.from_folder": ReplayBuffer.from_folder,
    "ReplayBuffer.one_episode": ReplayBuffer.one_episode,
    "ReplayBuffer.store_episode": ReplayBuffer.store_episode,
    "ReplayBuffer.dataset": ReplayBuffer.dataset,
    "ReplayBuffer.dataloader": ReplayBuffer.dataloader,
    "ReplayBuffer.sampler": ReplayBuffer.sampler,
    "ShardSet": ShardSet,
    "RateLimiter": RateLimiter,
}


def _examples(obj: object, name: str) -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=False)
    return [test for test in finder.find(obj, name, globs={"memmap_replay": memmap_replay}) if test.examples]


@pytest.mark.parametrize("name", sorted(MAIN))
def test_a_main_entry_point_has_a_numpydoc_example_that_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    obj = MAIN[name]
    assert "\nExamples\n--------\n" in (inspect.getdoc(obj) or ""), f"{name} has no numpydoc Examples section"
    tests = _examples(obj, name)
    assert tests, f"{name} has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"{name}'s example failed (see the output above)"
