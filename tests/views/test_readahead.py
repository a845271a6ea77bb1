"""Readahead (views/readahead.py): the advice reaches the kernel, auto mode skips cached batches, and
failures to advise never fail a read."""

import os
import sys
import time

import numpy as np
import pytest

from memmap_replay.errors import OptionError
from memmap_replay.views import readahead as ra
from memmap_replay.views.readahead import Readahead, readahead_mode

from conftest import REAL_FSYNC

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page-cache residency is read "
                                                                        "with Linux's mincore")
ROW = (3, 64, 64)  # 12 KiB rows, not page-aligned in the file (the .npy header comes first)


def mapped_file(tmp_path, rows: int = 512) -> tuple[np.ndarray, int]:
    """A .npy of ``rows`` rows written, synced and evicted from the page cache; (its map, its fd)."""
    path = tmp_path / "rows.npy"
    data = np.random.default_rng(3).integers(0, 255, (rows, *ROW), dtype=np.uint8)
    np.save(path, data)
    fd = os.open(path, os.O_RDONLY)
    REAL_FSYNC(fd)  # (the tests' os.fsync does not wait for the disk: conftest.py)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return np.load(path, mmap_mode="r").view(np.ndarray), fd


def resident(array: np.ndarray, rows) -> bool:
    kernel = ra._kernel()
    return all(Readahead._cached(kernel, [array], [], np.array([row]), np.array([row + 1])) for row in rows)


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@linux
@pytest.mark.parametrize("batched", [True, False], ids=["process_madvise", "madvise per range"])
def test_advice_brings_exactly_the_batch_rows_into_the_page_cache(tmp_path, batched, monkeypatch):
    array, fd = mapped_file(tmp_path)
    try:
        kernel = ra._kernel()
        monkeypatch.setattr(kernel, "batched", batched and kernel.batched)
        rows = np.array([3, 100, 101, 400])
        far = [200, 300, 500]
        if resident(array, rows):
            pytest.skip("the page cache kept the file's pages (eviction is not honoured here)")
        assert Readahead("always").batch([array], rows, rows + 1)
        assert wait_until(lambda: resident(array, rows))
        assert not resident(array, far)  # only the advised ranges (and no readahead around them)
    finally:
        os.close(fd)


@linux
def test_auto_mode_advises_a_cold_batch_and_skips_cached_ones_probing_less_and_less(tmp_path):
    array, fd = mapped_file(tmp_path)
    try:
        rows = np.arange(0, 256, 8)
        readahead = Readahead("auto")
        if resident(array, rows):
            pytest.skip("the page cache kept the file's pages (eviction is not honoured here)")
        assert readahead.batch([array], rows, rows + 1) and readahead.advised == 1
        assert wait_until(lambda: resident(array, rows))
        probes = []
        for _ in range(20):  # as a view does for each batch
            probed = readahead.due()
            if probed:
                assert not readahead.batch([array], rows, rows + 1)
            probes.append(probed)
        assert readahead.skipped == 20 and readahead.advised == 1
        # a probe, then 1, 2, 4, 8 quiet batches between probes (up to 64)
        assert [i for i, probed in enumerate(probes) if probed] == [0, 2, 5, 10, 19]
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold again: the next probe advises
        while not readahead.due():
            pass
        if not resident(array, rows):
            assert readahead.batch([array], rows, rows + 1) and readahead._quiet_next == 1
    finally:
        os.close(fd)


def test_off_never_advises_and_ranges_are_clipped_to_the_map(tmp_path):
    array, fd = mapped_file(tmp_path, rows=16)
    try:
        assert not Readahead("off").batch([array], np.array([0]), np.array([1]))
        # ranges past the end, empty and reversed ones: advised where they overlap the map, never an error
        readahead = Readahead("always")
        assert readahead.batch([array], np.array([-5, 10, 15, 30, 7]), np.array([2, 10, 40, 50, 3]))
        assert not readahead.batch([array], np.array([], dtype=np.int64), np.array([], dtype=np.int64))
        assert not readahead.batch([array[:0]], np.array([0]), np.array([1]))
    finally:
        os.close(fd)


def test_a_failing_system_call_is_ignored(tmp_path, monkeypatch):
    array, fd = mapped_file(tmp_path, rows=16)
    try:
        kernel = ra._kernel()
        monkeypatch.setattr(kernel, "batched", False)
        monkeypatch.setattr(kernel, "libc", type("NoLibc", (), {"madvise": staticmethod(lambda *a: -1),
                                                               "mincore": staticmethod(lambda *a: -1)})())
        assert Readahead("always").batch([array], np.array([0, 5]), np.array([1, 6]))
        assert not Readahead("auto").batch([array], np.array([0, 5]), np.array([1, 6]))  # cannot tell: cached
    finally:
        os.close(fd)


def test_merged_ranges_join_overlapping_and_close_ones():
    gap = ra.MERGE_GAP
    starts = np.array([0, 100, 50, 10_000 + gap, 10_000], dtype=np.uint64)
    ends = np.array([60, 200, 80, 10_100 + gap, 10_050], dtype=np.uint64)
    merged_starts, lengths = ra._merged(starts, ends)
    assert merged_starts.tolist() == [0, 10_000 + gap] or merged_starts.tolist() == [0]
    assert int(merged_starts[0] + lengths[0]) >= 200
    far = ra._merged(np.array([0, 10 * gap], dtype=np.uint64), np.array([1, 10 * gap + 1], dtype=np.uint64))
    assert far[0].tolist() == [0, 10 * gap] and far[1].tolist() == [1, 1]


@pytest.mark.parametrize("value, mode", [("auto", "auto"), (True, "auto"), ("always", "always"), ("off", "off"),
                                         (False, "off")])
def test_readahead_modes(value, mode):
    assert readahead_mode(value) == mode


@pytest.mark.parametrize("value", ["on", 1, 0, "AUTO", ["auto"]])
def test_readahead_mode_must_be_one_of_the_modes(value):
    with pytest.raises(OptionError, match=r"readahead must be one of \('auto', 'always', 'off'\), True or False"):
        readahead_mode(value)


def test_a_slow_gather_ends_a_quiet_spell():
    readahead = Readahead("auto")
    readahead._quiet, readahead._quiet_next = 8, 16  # as after a few all-cached probes
    readahead.timed(0.0003)
    readahead.timed(0.0004)  # a little slower: noise
    assert readahead._quiet == 8
    readahead.timed(0.01)  # pages were read from the disk: probe the next batch
    assert readahead._quiet == 0 and readahead._quiet_next == 1 and readahead.due()
