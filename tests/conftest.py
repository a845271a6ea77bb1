import gc
import os
import subprocess

import numpy as np
import pytest

from memmap_replay import ReplayBuffer

# the fixtures the error and hostile catalogues share (tests/catalogue.py), for their files beside each module
pytest.register_assert_rewrite("catalogue")
import catalogue  # noqa: E402

buffer, folder, fresh, new_folder, store = (catalogue.buffer, catalogue.folder, catalogue.fresh,
                                            catalogue.new_folder, catalogue.store)

SMALL_FIELDS = dict(obs=("float", (3,)), action=("int", 2), reward="float")
SMALL_META = dict(task_id="int")


KERNELS = ["numpy", "numba"]  # the sum tree's kernels (memmap_replay.samplers.kernels)
NO_NUMBA = "numba is not installed (pip install 'memmap-replay[fast]'): its compiled kernels are not tested"


def has_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def select_kernel(name: str) -> None:
    """Run sum trees on ``name``'s kernels until ``kernels.reset()``; skips the test when numba is missing."""
    from memmap_replay.samplers import kernels
    if name == "numba" and not has_numba():
        pytest.skip(NO_NUMBA)
    kernels.select(name)


@pytest.fixture(params=KERNELS)
def kernel(request):
    """Each sum tree kernel in turn (numba's skipped when it is not installed)."""
    from memmap_replay.samplers import kernels
    select_kernel(request.param)
    yield request.param
    kernels.reset()


REAL_FSYNC = os.fsync  # for tests that need pages on disk (cold reads: a dirty page is not evicted)


def fsync_checks_only(fd: int) -> None:
    """``os.fsync`` in this process during the tests: the descriptor is checked (a closed or bad one still
    raises), the disk is not waited for. No test observes durability in this process (a power cut is never
    simulated; SIGKILL tests kill other processes, and the page cache outlives them), while each fsync cost
    1-3 ms on 2 cores of a shared VM, some 15,000 of them in the fast lane. Children started with
    ``subprocess`` fsync for real; fault injection wraps whatever ``os.fsync`` is and still sees every call."""
    os.fstat(fd)


@pytest.fixture(autouse=True, scope="session")
def fsync_does_not_wait_for_the_disk():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", fsync_checks_only)
        yield


def pytest_collection_finish(session):
    """Freeze what collection made (torch, numpy, hypothesis, every test module and its parameters): the
    collector's full passes then walk only what the tests make, not a million objects each time."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def default_gathers():
    """The suite gathers as a user's process does by default (large gathers split over the library's threads,
    ``views.gather``), whatever the environment says."""
    import os

    os.environ.pop("MEMMAP_REPLAY_PARALLEL_GATHERS", None)
    yield


@pytest.fixture
def parallel(monkeypatch):
    """Parallel gathers for every gather size (``views.gather``) over 2 threads or more, counted, off until
    ``parallel.on()`` turns them on; ``parallel.copies`` counts the gathers split over the threads."""
    from memmap_replay.core import threads
    from memmap_replay.views import gather

    class Parallel:
        copies = 0

        def on(self):
            gather.set_parallel_gathers(True)

    state = Parallel()

    def counted(source, rows, out, count):
        state.copies += 1
        take_parts(source, rows, out, count)

    take_parts = gather.take_parts
    monkeypatch.setattr(gather, "take_parts", counted)
    monkeypatch.setattr(gather, "MIN_BYTES", 0)
    monkeypatch.setattr(gather._SETTINGS, "enabled", False)
    size = threads.set_threads(max(threads.get_threads(), 2))
    yield state
    threads.set_threads(size)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def make_buffer(tmp_path):
    """A factory of small buffers under tmp_path, closed at teardown."""
    made = []

    def make(name="buf", **kwargs):
        kwargs.setdefault("max_episodes", 10)
        kwargs.setdefault("max_timesteps", 20)
        kwargs.setdefault("fields", SMALL_FIELDS)
        kwargs.setdefault("meta_fields", SMALL_META)
        buffer = ReplayBuffer(tmp_path / name, **kwargs)
        made.append(buffer)
        return buffer

    yield make
    for buffer in made:
        buffer.close()


@pytest.fixture
def filled(make_buffer):
    """Six short episodes (5..10 steps), ends alternating truncated / terminated, task_id alternating (the
    loader tests' store; a module may define its own ``filled``)."""
    buffer = make_buffer(max_episodes=20)
    for number in range(6):
        buffer.store_episode(**episode_arrays(number, 5 + number), task_id=number % 2,
                             end="terminated" if number % 2 else "truncated")
    return buffer


@pytest.fixture
def three(make_buffer):
    """Episodes of every kind of end. A: 4 steps, terminated, no final row. B: 3 steps, truncated, final
    obs -2. C: 3 steps, end not recorded."""
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(1, 4), task_id=1, end="terminated")
    buffer.store_episode(**episode_arrays(2, 3), task_id=2, end="truncated", final=dict(obs=np.full(3, -2.0)))
    buffer.store_episode(**episode_arrays(3, 3), task_id=3)
    return buffer


def reap(process: subprocess.Popen, timeout: float) -> str:
    """Wait for a child process and return its stderr (closing the pipe: no ResourceWarning)."""
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return stderr.decode(errors="replace")


def episode_arrays(number, length):
    """Deterministic episode data: every value encodes (episode number, timestep)."""
    t = np.arange(length)
    base = number * 1000 + t
    return dict(
        obs=np.repeat(base[:, None], 3, axis=1).astype(np.float32),
        action=np.stack([base, -base], axis=1).astype(np.int32),
        reward=base.astype(np.float32),
    )


def chi_square_ok(counts, expected, z=3.09):
    """Chi-square goodness of fit at p = 0.001 (Wilson-Hilferty critical value, no scipy needed)."""
    statistic = ((counts - expected) ** 2 / expected).sum()
    df = len(counts) - 1
    critical = df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3
    return statistic < critical


def pytest_collection_modifyitems(config, items):
    """Mark the slow lane's tests (``tests/lanes.py``) ``slow``: ``-m "not slow"`` leaves them out."""
    from lanes import is_slow

    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
