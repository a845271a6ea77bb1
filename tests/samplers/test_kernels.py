"""The sum tree's kernels: numba's compiled ones give what the numpy code gives (the same trees, the same
draws, the same keys and weights for the same seed), MEMMAP_REPLAY_KERNELS chooses at the first use,
importing never imports numba nor compiles, and no writable cache directory breaks nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memmap_replay import InvalidDataError, OptionError
from memmap_replay.samplers import kernels
from memmap_replay.samplers.sumtree import SumTree

from conftest import NO_NUMBA, episode_arrays, has_numba

HAS_NUMBA = has_numba()
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason=NO_NUMBA)
PACKAGE = Path(__file__).resolve().parents[2] / "memmap_replay"


@pytest.fixture(autouse=True)
def forget_the_choice():
    yield
    kernels.reset()


def run_python(code: str, **environment: str) -> str:
    """``code`` in a fresh interpreter (warnings as errors, this checkout first on the path); its stdout."""
    env = {name: value for name, value in os.environ.items() if name != "MEMMAP_REPLAY_KERNELS"}
    env.update(PYTHONPATH=os.pathsep.join([str(PACKAGE.parent), *filter(None, [os.environ.get("PYTHONPATH")])]),
               **environment)
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def tree_history(kernel: str, capacity: int, top: int | None, seed: int) -> list[np.ndarray]:
    """Everything a tree hands out and holds through seeded updates (repeated indices, zeros), draws,
    weights and finds, on ``kernel``'s kernels."""
    kernels.select(kernel)
    rng = np.random.default_rng(seed)
    tree = SumTree(capacity, top=top)
    history = []
    for _ in range(6):
        count = int(rng.integers(1, 2 * capacity + 2))
        tree.update(rng.integers(0, capacity, count), rng.random(count) * (rng.random(count) > 0.3))
        if tree.total > 0:
            rows, found = tree.sample_with_values(int(rng.integers(1, 300)), rng)
            history += [rows, found, tree.weights(found, 0.4),
                        tree.find(rng.uniform(-0.1, 1.1, 50) * tree.total)]
        history += [tree.sums.copy(), tree.mins.copy()]
    return history


@needs_numba
@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 5000), top=st.sampled_from([1, 2, 16, None]), seed=st.integers(0, 2**32 - 1))
def test_both_kernels_give_the_same_trees_and_draws(capacity, top, seed):
    numpy, numba = (tree_history(kernel, capacity, top, seed) for kernel in ("numpy", "numba"))
    assert len(numpy) == len(numba)
    for a, b in zip(numpy, numba):
        np.testing.assert_array_equal(a, b)  # bit for bit: the same operations in the same order


@needs_numba
def test_both_kernels_find_odd_values_alike():
    found = []
    for kernel in ("numpy", "numba"):
        kernels.select(kernel)
        tree = SumTree(6, top=2)
        tree.update(np.arange(6), [1.0, 0.0, 2.0, 0.0, 3.0, 0.0])
        found.append(tree.find([np.nan, np.inf, -np.inf, -1.0, 0.0, 1.0, 6.0, 1e300]).tolist())
    assert found[0] == found[1] and found[0][4:] == [0, 2, 4, 4]
    assert all(leaf in (0, 2, 4) for leaf in found[0])  # never a leaf of priority 0


@needs_numba
@pytest.mark.parametrize("kind", ["prioritized", "sequence"])
def test_samplers_draw_the_same_keys_and_weights_with_either_kernel(make_buffer, kind):
    """Same seed, same updates: the same keys, bit for bit, and the same weights to a float32 ulp (numba's
    scalar pow may differ from numpy's SIMD one in the float64's last bit: see sumtree_numba.weights_into)."""
    def history(kernel, name):
        kernels.select(kernel)
        sampler = buffer.sampler(kind, seed=3, alpha=0.7, beta=0.5, name=name, **options)
        rng = np.random.default_rng(9)
        drawn = []
        for _ in range(25):
            sample = sampler.sample(32)
            drawn += [sample.keys, sample.weights]
            sampler.update_priorities(sample.keys, rng.uniform(0.01, 5.0, 32))
        sampler.close()
        return drawn

    options = dict(window=3) if kind == "sequence" else {}
    buffer = make_buffer(max_episodes=12, max_timesteps=20)
    for number in range(10):
        buffer.store_episode(**episode_arrays(number, 5 + number), task_id=number, end="terminated")
    numpy, numba = history("numpy", "a"), history("numba", "b")
    for keys, other in zip(numpy[::2], numba[::2]):
        np.testing.assert_array_equal(keys, other)
    for weights, other in zip(numpy[1::2], numba[1::2]):
        np.testing.assert_allclose(weights, other, rtol=2.0 ** -23, atol=0)


def test_a_leaf_no_position_owns_is_cleared_and_never_drawn(make_buffer):
    """A broken invariant (a positive leaf at a row that is no window start) never reaches a batch: the
    draws that land on it are found, the leaf cleared, and the batch drawn again; alike with either kernel."""
    buffer = make_buffer(max_episodes=4, max_timesteps=20)
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 10), task_id=number, end="terminated")
    drawn = []
    for kernel in ["numpy", "numba"] if HAS_NUMBA else ["numpy"]:
        kernels.select(kernel)
        sampler = buffer.sampler("sequence", window=4, seed=2, persist=False, name=kernel)
        row = 1 * 10 + 8  # episode 1's row t = 8: past its last window start (t = 6)
        sampler.tree.update([row], [1e6])
        keys = sampler.sample(16).keys
        assert sampler.tree.leaves[row] == 0
        assert ((keys % sampler.view.key_stride) <= 6).all()
        drawn.append(keys.tolist())
        sampler.close()
    assert all(keys == drawn[0] for keys in drawn)


def test_a_bad_choice_is_refused(monkeypatch):
    monkeypatch.setenv("MEMMAP_REPLAY_KERNELS", "fortran")
    kernels.reset()
    with pytest.raises(OptionError, match="MEMMAP_REPLAY_KERNELS must be one of auto, numba, numpy"):
        SumTree(4).update([0], [1.0])
    with pytest.raises(OptionError, match="the argument must be one of auto, numba, numpy"):
        kernels.select("c++")
    monkeypatch.setenv("MEMMAP_REPLAY_KERNELS", " NumPy ")
    kernels.reset()
    assert kernels.name() == "numpy"


DRAW = """
import os, sys
import numpy as np
import memmap_replay
from memmap_replay.samplers import kernels
from memmap_replay.samplers.sumtree import SumTree
print(sys.modules.get('numba') is not None, 'memmap_replay.samplers.sumtree_numba' in sys.modules)
{before}
tree = SumTree(100)
tree.update(np.arange(100), np.ones(100))
tree.sample(8, np.random.default_rng(0))
print(kernels.name(), sys.modules.get('numba') is not None)
"""


def test_importing_never_imports_numba_and_the_variable_is_read_at_first_use():
    chosen = "numba True" if HAS_NUMBA else "numpy False"
    assert run_python(DRAW.format(before="")) == f"False False\n{chosen}"
    # read at the first use, not at import
    before = "os.environ['MEMMAP_REPLAY_KERNELS'] = 'numpy'"
    assert run_python(DRAW.format(before=before)) == "False False\nnumpy False"
    assert run_python(DRAW.format(before=""), MEMMAP_REPLAY_KERNELS="numpy") == "False False\nnumpy False"
    assert run_python("import sys, memmap_replay; from memmap_replay import ReplayBuffer, PrioritizedSampler; "
                      "print(sys.modules.get('numba') is not None)") == "False"


def test_without_numba_numpy_runs_them_and_asking_for_numba_says_how():
    block = "sys.modules['numba'] = None  # numba's import fails, as when it is not installed"
    assert run_python(DRAW.format(before=block)) == "False False\nnumpy False"
    code = ("import sys\nsys.modules['numba'] = None\nfrom memmap_replay.samplers import kernels\n"
            "try:\n    kernels.select('numba')\nexcept ValueError as error:\n    print(type(error).__name__, error)")
    out = run_python(code)
    assert out.startswith("OptionError the argument asks for numba's compiled kernels") and "memmap-replay[fast]" in out


@needs_numba
def test_no_writable_cache_directory_breaks_nothing(tmp_path):
    """numba's cache has nowhere to go (the package's __pycache__, NUMBA_CACHE_DIR and the user's cache
    directory are all files, not folders: unwritable even for root): the kernels compile anyway, every
    process, and no warning escapes (the interpreter runs with -W error)."""
    copy = tmp_path / "site"
    shutil.copytree(PACKAGE, copy / "memmap_replay", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "memmap_replay" / "samplers" / "__pycache__").write_text("not a folder")
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    code = DRAW.format(before="").replace("import os, sys", f"import os, sys; sys.path.insert(0, {str(copy)!r})")
    out = run_python(code, NUMBA_CACHE_DIR=str(blocked / "numba"), XDG_CACHE_HOME=str(blocked),
                     HOME=str(blocked), PYTHONDONTWRITEBYTECODE="1")
    assert out == "False False\nnumba True"
    missing = tmp_path / "missing" / "cache"  # a missing cache directory: numba makes it
    assert run_python(code, NUMBA_CACHE_DIR=str(missing)) == "False False\nnumba True"
    assert any(missing.rglob("*.nbi"))


@pytest.mark.parametrize("kernel", ["numpy", pytest.param("numba", marks=needs_numba)])
def test_a_key_of_no_position_is_refused_after_the_table_changed(make_buffer, kernel):
    # the compiled update must check keys against the table as synced, as numpy's way does (it had checked
    # them against the counts of the table before the sync, and set another episode's leaf)
    kernels.select(kernel)
    buffer = make_buffer(max_episodes=4, circular=True)
    for number, length in enumerate([10, 3, 3, 3]):
        buffer.store_episode(**episode_arrays(number, length), task_id=number, end="terminated")
    sampler = buffer.sampler("prioritized", seed=0, persist=False)
    sampler.sample(8)
    buffer.store_episode(**episode_arrays(4, 3), task_id=4, end="terminated")  # evicts episode 0
    stride = sampler.view.key_stride
    with pytest.raises(InvalidDataError, match=r"keys must come from this sampler's batches"):
        sampler.update_priorities(np.array([1 * stride + 5], dtype=np.int64), np.array([1000.0]))


@pytest.mark.parametrize("kernel", ["numpy", pytest.param("numba", marks=needs_numba)])
def test_set_leaves_refuses_indices_out_of_range_and_takes_other_dtypes(kernel):
    kernels.select(kernel)
    tree = SumTree(4)
    with pytest.raises(InvalidDataError, match=r"leaf indices must be in \[0, 4\) \(got 1\.\.6\)"):
        tree.set_leaves(np.array([1, 6]), np.array([1.0, 2.0]))
    assert tree.total == 0
    tree.set_leaves(np.array([0, 3], dtype=np.int32), np.array([1.0, 5.0], dtype=np.float32))
    assert tree.total == 6.0
    assert tree.sample(0, np.random.default_rng(0)).shape == (0,)
