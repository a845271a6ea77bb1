"""SumTree: sums and minima against brute force, proportional draws (chi-square), edge cases; each test
with each kernel (numpy, and numba's compiled one when it is installed)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memmap_replay import InvalidDataError
from memmap_replay.samplers.sumtree import SumTree

from conftest import chi_square_ok

pytestmark = pytest.mark.usefixtures("kernel")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(capacity=st.integers(1, 3000), seed=st.integers(0, 2**32 - 1),
       rounds=st.integers(1, 5), top=st.sampled_from([1, 2, 8, 64, None]))
def test_matches_brute_force(capacity, seed, rounds, top):
    rng = np.random.default_rng(seed)
    tree, leaves = SumTree(capacity, top=top), np.zeros(capacity)
    for _ in range(rounds):
        idx = rng.integers(0, capacity, size=rng.integers(1, 300))
        idx = np.unique(idx)  # the brute force below assumes one value per index
        values = rng.random(len(idx)) * (rng.random(len(idx)) > 0.2)
        tree.update(idx, values)
        leaves[idx] = values
        assert tree.total == pytest.approx(leaves.sum(), rel=1e-12, abs=1e-12)
        positive = leaves[leaves > 0]
        assert tree.min == (positive.min() if positive.size else np.inf)
        if leaves.sum() > 0:
            # find() returns the leaf whose prefix interval holds each value, never a zero leaf
            probes = rng.random(200) * leaves.sum()
            expected = np.searchsorted(np.cumsum(leaves), probes, side="right")
            got = tree.find(probes)
            assert (leaves[got] > 0).all()
            np.testing.assert_array_equal(got, expected)


def test_draws_are_proportional_chi_square():
    rng = np.random.default_rng(0)
    priorities = rng.random(50) ** 2 + 0.01
    priorities[[3, 17]] = 0.0
    tree = SumTree(50, top=4)
    tree.update(np.arange(50), priorities)
    draws = np.concatenate([tree.sample(256, rng) for _ in range(400)])
    for top in (1, 64):  # the values returned with the draws are the drawn leaves' priorities
        deep = SumTree(50, top=top)
        deep.update(np.arange(50), priorities)
        rows, values = deep.sample_with_values(512, rng)
        np.testing.assert_array_equal(values, priorities[rows])
    counts = np.bincount(draws, minlength=50)
    assert counts[3] == counts[17] == 0
    nonzero = priorities > 0
    expected = priorities[nonzero] / priorities.sum() * len(draws)
    assert chi_square_ok(counts[nonzero], expected)
    skewed = expected.copy()
    skewed[:5] *= 1.3
    skewed *= expected.sum() / skewed.sum()
    assert not chi_square_ok(counts[nonzero], skewed)  # the test can fail


def test_stratified_and_edge_values():
    tree = SumTree(4)
    tree.update([0, 1, 2, 3], [1.0, 0.0, 1.0, 1.0])
    assert tree.find([0.0, 0.999, 1.0, 2.999, 3.0, 5.0]).tolist() == [0, 0, 2, 3, 3, 3]
    draws = tree.sample(3, np.random.default_rng(1))
    assert draws.tolist() == [0, 2, 3]  # one draw per equal slice of the total


def test_load_leaves_rebuilds_and_errors():
    tree = SumTree(100)
    tree.load_leaves(np.arange(100, dtype=float))
    assert tree.total == sum(range(100)) and tree.min == 1.0
    for top in (1, 4, 128):  # any flat top level gives the same tree
        small = SumTree(100, top=top)
        small.load_leaves(np.arange(100, dtype=float))
        assert small.total == tree.total and small.min == 1.0
        np.testing.assert_array_equal(small.find(np.arange(0, 4950, 7.5)), tree.find(np.arange(0, 4950, 7.5)))
    with pytest.raises(InvalidDataError, match="top must be a power of two"):
        SumTree(100, top=3)
    with pytest.raises(InvalidDataError, match="every priority is 0"):
        SumTree(5).sample(2, np.random.default_rng(0))
    with pytest.raises(InvalidDataError, match=r"leaf indices must be in \[0, 100\)"):
        tree.update([100], [1.0])
    with pytest.raises(InvalidDataError, match="finite and >= 0"):
        tree.update([1], [np.nan])
    with pytest.raises(InvalidDataError, match="capacity must be a positive int"):
        SumTree(0)
