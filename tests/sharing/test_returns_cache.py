"""The returns cache (``stats/returns.npy``, ``sharing/returns_cache.py``) in a hostile state: a file of the wrong
dtype, a header claiming more rows than the file holds (up to rows whose bytes overflow), keys that do not match,
NaN or inf values, an empty file, a folder, a FIFO or a link out of the store in its place. None of them makes
``verify``, ``buffer.stats()`` or the card's README summary wrong or raise anything but a library error: the returns
they give are the ones summed from the reward rows, before a writer opens and after it wrote and edited."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, ReplayError, update_card, verify
from memmap_replay.core.format import npy_header

RECORDS = np.dtype([("key", "<i8"), ("value", "<f8")])
MAX_EPISODES = 16


def make_store(folder: Path, seed: int = 0) -> list[np.ndarray]:
    """A closed store of 9 episodes of random lengths; returns each one's rewards."""
    rng = np.random.default_rng(seed)
    rewards = []
    with ReplayBuffer(folder, MAX_EPISODES, 12, fields=dict(obs=("float", 2), reward="float")) as buffer:
        for number in range(9):
            length = int(rng.integers(1, 13))
            rewards.append((rng.standard_normal(length) * 3).astype(np.float32))
            final = dict(obs=np.ones(2, np.float32)) if number % 3 == 0 else None
            buffer.store_episode(obs=rng.standard_normal((length, 2)).astype(np.float32), reward=rewards[-1],
                                 end=("terminated", "truncated")[number % 2], final=final)
    assert (folder / "stats" / "returns.npy").is_file()  # (the writer kept the cache)
    return rewards


def hostile(kind: str, path: Path, outside: Path) -> None:
    """Put a hostile ``kind`` of file at ``path`` (the cache, as the writer left it, gives its entries)."""
    good = np.load(path)
    lying = good.copy()
    lying["value"] += 1000.0  # (right keys, wrong values: taken, they would show)
    path.unlink()
    if kind == "dtype":
        np.save(path, good["value"])
    elif kind == "big_endian":
        np.save(path, lying.astype([("key", ">i8"), ("value", ">f8")]))
    elif kind.startswith("rows_"):
        path.write_bytes(npy_header(RECORDS, (int(kind[5:]),)) + lying.tobytes())
    elif kind == "keys":
        lying["key"] = np.where(lying["key"] > 0, lying["key"] + 1, 7)
        np.save(path, lying)
    elif kind in ("nan", "inf"):
        good["value"] = np.nan if kind == "nan" else np.inf
        np.save(path, good)
    elif kind == "short_header":
        path.write_bytes(npy_header(RECORDS, (MAX_EPISODES,))[:20])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link_out":
        np.save(outside, lying)
        path.symlink_to(outside)
    else:
        raise AssertionError(kind)


KINDS = ["dtype", "big_endian", f"rows_{MAX_EPISODES + 1}", "rows_1000", f"rows_{2 ** 31}", f"rows_{2 ** 59}",
         f"rows_{2 ** 60}", f"rows_{2 ** 63 - 1}", "keys", "nan", "inf", "short_header", "empty", "folder", "fifo",
         "link_out"]


def summary(returns: list[float]) -> dict:
    values = np.asarray(returns, dtype=np.float64)
    return dict(min=values.min(), max=values.max(), mean=values.mean(), std=values.std())


def assert_summary(got: dict, returns: list[float]) -> None:
    want = summary(returns)
    assert got.keys() >= want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (key, got, want)


def readme_returns(folder: Path) -> str:
    lines = [line for line in (folder / "README.md").read_text().splitlines() if line.startswith("| Episode return")]
    assert len(lines) == 1, lines
    return lines[0]


def readme_line(returns: list[float]) -> str:
    want = summary(returns)
    return (f"| Episode return (sum of `reward`) | mean {want['mean']:.6g}, std {want['std']:.6g}, "
            f"min {want['min']:.6g}, max {want['max']:.6g} |")


@pytest.fixture
def no_hang():
    """A blocking open (of a FIFO) fails the test instead of hanging it."""
    def hung(*_):
        raise AssertionError("blocked for 30 s (a FIFO opened?)")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_cache_never_makes_the_returns_wrong(tmp_path, kind, no_hang):
    folder, outside = tmp_path / "s", tmp_path / "outside.npy"
    rewards = make_store(folder)
    returns = [float(row.astype(np.float64).sum()) for row in rewards]
    hostile(kind, folder / "stats" / "returns.npy", outside)
    outside_bytes = outside.read_bytes() if outside.exists() else None
    try:
        report = verify(folder)
    except ReplayError:  # (a library error is allowed; none of these raises one today)
        report = None
    if report is not None and kind in ("fifo", "link_out"):  # refused without opening or following it
        assert not report.ok and all("stats/returns.npy" in line for line in report.problems), report
    elif report is not None:  # a damaged cache is a cache miss, nothing more
        assert report.ok, report
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert_summary(reader.stats().episodes["return"], returns)
    update_card(folder, description="a store with a hostile returns cache")
    assert readme_returns(folder) == readme_line(returns)
    with ReplayBuffer.from_folder(folder) as writer:  # the writer's side: starts the cache afresh, or leaves it
        assert_summary(writer.stats().episodes["return"], returns)
        rewards.append(np.arange(3, dtype=np.float32))
        writer.store_episode(obs=np.zeros((3, 2), np.float32), reward=rewards[-1])
        returns.append(3.0)
        assert writer.trim(2, stop=1) == 1
        returns[2] = float(rewards[2][0])
        assert writer.delete_episodes(4) == 1
        del returns[4]
        assert_summary(writer.stats().episodes["return"], returns)
    assert readme_returns(folder) == readme_line(returns)  # (rendered at the edits' provenance records)
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert_summary(reader.stats().episodes["return"], returns)
    if outside_bytes is not None:
        assert outside.read_bytes() == outside_bytes  # (never written through the link)
    report = verify(folder)  # (the writer replaced a FIFO or a link by a cache of its own)
    assert report.ok and not report.warnings, report
