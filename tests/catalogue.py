"""What the error and hostile catalogues share: their stores, fixtures, checks and strategies.

The catalogues sit beside the module whose entry points they test: ``tests/core/test_schema_errors.py``
and ``tests/core/test_schema_hostile.py`` for ``core/schema.py``, ``tests/views/test_loader_hostile.py``
for ``views/loader.py``, ``tests/test_buffer_errors.py`` for the ReplayBuffer facade, and so on;
``tests/test_errors.py`` keeps the error hierarchy itself. The fixtures here reach those files through
``tests/conftest.py``; the rest they import by name (``from catalogue import ...``).

The error catalogue (``test_*_errors.py``): bad input gets the library's error with a clear message, and
leaves the store exactly as it was. Every expected error is checked for its exact class, the library base
class ``ReplayError`` and the matching builtin (see ``raises``). After every failed write the committed
episodes (data, lengths, end codes) and the bytes of ``meta.json`` are compared with what they were before,
and the store must still accept a good episode; after every failed open every file of the folder is
compared byte for byte. Its tests start from ``make_errors_store`` and the ``buffer`` / ``folder`` fixtures.

The hostile catalogue (``test_*_hostile.py``): hostile input, thrown at every public entry point: the
library's error, a message that names what was wrong, and a store left exactly as it was. Each test takes
a fingerprint of the store folder before the hostile call and compares it after (``unchanged``): the bytes
of ``meta.json`` (its state and counters), the list of every file and folder in the store folder (no stray
files, no ``meta.json.tmp``, no ``priorities/`` from a refused sampler), and the bytes of every store file,
read directly (not through the library): they hold every live episode's rows (with its final row), its
episode-table entries and its meta values. The store must then still be readable through the library, with
the live episodes' lengths that ``meta.json`` and ``episodes/length.npy`` give when read with plain numpy.
Expected errors are checked for their class, the ``ReplayError`` base and the matching builtin (or
``IndexError``/``TypeError`` where the torch ``Dataset`` protocol asks for them), and every
``pytest.raises`` has ``match=``. Every property is derandomized (``derandomize=True``, no example
database), so runs are deterministic whatever ``--hypothesis-seed``.

Malformed values are generated with hypothesis where a space of them makes sense (names, dtypes, shapes,
defaults, arrays of any dtype and shape, options of any type, JSON states); cases that once found a library
bug are kept as minimal reproductions (the ``*_CASES`` lists). The error catalogue holds the earlier
fixed-list battery; the kinds of malformed input here (84, numbered across the hostile files, each file's
docstring listing its own) are the ones it does not cover, or covers with a few fixed values where the
hostile files generate them. Its tests start from the ``store`` (one per test module, never changed),
``fresh`` and ``new_folder`` fixtures.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from memmap_replay import (BufferFullError, CorruptStoreError, DiskFullError, EpisodeStateError, InvalidDataError,
                           MissingExtraError, NotAFolderError, RateLimitedError, ReadOnlyError, ReplayBuffer,
                           ReplayError, SampleExpiredError, SchemaError, SchemaMismatchError, ShardUnavailableError,
                           StoreLockedError, StoreNotFoundError, UnsupportedFormatError)
from memmap_replay.errors import (ArgumentError, DTypeError, IndexRangeError, IndexTypeError, MissingFileError,
                                  OptionError, StoreIOError, UnsafeEntryError)

# ==== both catalogues: the error each test expects ==========================================================

# each error and the builtin it must also be
BUILTIN = {
    SchemaError: ValueError,
    SchemaMismatchError: ValueError,
    InvalidDataError: ValueError,
    OptionError: ValueError,
    IndexTypeError: TypeError,
    ArgumentError: TypeError,
    IndexRangeError: IndexError,
    DTypeError: TypeError,
    BufferFullError: ValueError,
    EpisodeStateError: RuntimeError,
    ReadOnlyError: PermissionError,
    StoreNotFoundError: FileNotFoundError,
    NotAFolderError: NotADirectoryError,
    StoreLockedError: BlockingIOError,
    CorruptStoreError: OSError,
    UnsupportedFormatError: ValueError,
    SampleExpiredError: LookupError,
    DiskFullError: OSError,
    MissingExtraError: ImportError,
    RateLimitedError: TimeoutError,
    ShardUnavailableError: TimeoutError,
    UnsafeEntryError: OSError,
    MissingFileError: FileNotFoundError,
    StoreIOError: OSError,
}


@contextmanager
def raises(error, match: str):
    """``pytest.raises`` that also checks the exact class (one of them, for a tuple), ReplayError and the
    matching builtin."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    with pytest.raises(error, match=match) as info:
        yield info
    errors = error if isinstance(error, tuple) else (error,)
    assert type(info.value) in errors, \
        f"expected exactly {' or '.join(e.__name__ for e in errors)}, got {type(info.value).__name__}"
    assert isinstance(info.value, ReplayError)
    assert isinstance(info.value, BUILTIN[type(info.value)])


# ==== the error catalogue: the store every test starts from =================================================

ERRORS_FIELDS = dict(
    obs=("float", (3,)),
    action=("int", 2),
    reward="float",
    image=("uint8", (3, 64, 64)),
    done="bool",
    count="int64",
    small="int32",
)
ERRORS_META = dict(task="int", weight="float")
ERRORS_MAX_EPISODES, ERRORS_MAX_TIMESTEPS = 6, 10


def good_step(e: int, t: int) -> dict:
    """Step t of episode e: every value encodes (e, t); Python scalars for scalar fields (the fast path)."""
    return dict(
        obs=np.array([e, t, e + t], dtype=np.float32),
        action=np.array([e, -t], dtype=np.int32),
        reward=float(10 * e + t),
        image=np.full((3, 64, 64), (16 * e + t) % 256, dtype=np.uint8),
        done=t % 2 == 0,
        count=1000 * e + t,
        small=-(100 * e + t),
    )


def good_steps(e: int, ts) -> dict:
    steps = [good_step(e, t) for t in ts]
    return {name: np.stack([np.asarray(step[name]) for step in steps]) for name in ERRORS_FIELDS}


def good_episode(e: int, length: int) -> dict:
    """A whole episode for store_episode: (T, ...) arrays and its meta values."""
    return dict(good_steps(e, range(length)), task=e, weight=e / 4)


def good_batch(es, t: int) -> dict:
    """Step t of episodes es, stacked along a leading batch axis (store_batch / vector writer)."""
    steps = [good_step(e, t) for e in es]
    return {name: np.stack([np.asarray(step[name]) for step in steps]) for name in ERRORS_FIELDS}


def make_errors_store(folder, **kwargs) -> ReplayBuffer:
    options = dict(max_episodes=ERRORS_MAX_EPISODES, max_timesteps=ERRORS_MAX_TIMESTEPS, fields=ERRORS_FIELDS,
                   meta_fields=ERRORS_META)
    options.update(kwargs)
    return ReplayBuffer(folder, **options)


@pytest.fixture
def buffer(tmp_path):
    """A writable store holding episode 0 (3 steps) and episode 1 (4 steps, terminated)."""
    buf = make_errors_store(tmp_path / "store")
    buf.store_episode(**good_episode(0, 3))
    buf.store_episode(**good_episode(1, 4), end="terminated")
    yield buf
    buf.close()


@pytest.fixture
def folder(tmp_path):
    """The folder of a closed store holding episodes 0 (3 steps) and 1 (4 steps)."""
    with make_errors_store(tmp_path / "store") as buf:
        buf.store_episode(**good_episode(0, 3))
        buf.store_episode(**good_episode(1, 4), end="terminated")
    return tmp_path / "store"


def stack(value, k: int):
    """k copies of one row along a new leading axis (tensors stay tensors, anything else becomes a list)."""
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0).expand(k, *value.shape)
    return [value] * k


def nested_one_episode(b):
    with b.one_episode():
        pass


def assert_no_open_episode(buffer):
    """No episode was left open: a new one can begin (and ends empty, storing nothing)."""
    buffer.begin_episode()
    assert buffer.end_episode() is None


# ---- reading back what is committed ------------------------------------------------------------------


def committed(buffer):
    """The committed episodes oldest first (numpy copies, trimmed to their length), and meta.json's bytes."""
    table = buffer.episode_store.live_table()
    data = buffer.get_all_data()
    episodes = []
    for i, length in enumerate(table.length.tolist()):
        episode = {"length": length, "end": int(table.end[i]), "final": bool(table.final[i])}
        for name in buffer.fieldnames:
            episode[name] = data[name][i, :length].numpy().copy()
        for name in buffer.meta_fieldnames:
            episode[name] = data[name][i].numpy().copy()
        episodes.append(episode)
    return episodes, (buffer.folder / "meta.json").read_bytes()


def assert_same(before, after):
    (episodes_a, meta_a), (episodes_b, meta_b) = before, after
    assert len(episodes_a) == len(episodes_b)
    for a, b in zip(episodes_a, episodes_b):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert meta_a == meta_b, "meta.json changed"


def assert_episode(episode, e: int, ts):
    """A committed episode holds exactly the good steps ts of episode e."""
    expected = good_steps(e, ts)
    assert episode["length"] == len(ts)
    for name in ERRORS_FIELDS:
        np.testing.assert_array_equal(episode[name], expected[name].astype(episode[name].dtype), err_msg=name)


def assert_unchanged(buffer, before):
    """Nothing committed changed, and the store still takes (and returns) a good episode."""
    assert_same(before, committed(buffer))
    count = buffer.num_episodes
    buffer.store_episode(**good_episode(7, 2))
    assert buffer.num_episodes == count + 1
    last = committed(buffer)[0][-1]
    assert_episode(last, 7, range(2))
    assert last["task"] == 7 and last["weight"] == 7 / 4


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file of a store folder (but the lock file), byte for byte."""
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != "writer.lock"}


# ==== the hostile catalogue: settings, the store, fingerprints, strategies ==================================

# ---- settings: every property is deterministic and small enough for its file to run in well under a minute


def fast(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


# ---- the store ---------------------------------------------------------------------------------------

HOSTILE_FIELDS = dict(obs=("float", (3,)), action=("int", 2), reward="float", goal=("float", (2,)),
                      achieved=("float", (2,)), image=("uint8", (2, 4, 4)), done="bool", count="int64")
HOSTILE_META = dict(task="int", weight="float")
HOSTILE_MAX_EPISODES, HOSTILE_MAX_TIMESTEPS = 8, 6


def episode(e: int, length: int) -> dict:
    """Episode e's steps: every value encodes (e, t)."""
    t = np.arange(length)
    return dict(
        obs=np.stack([t, t + e, np.full(length, e)], 1).astype(np.float32),
        action=np.stack([t, -t - e], 1).astype(np.int32),
        reward=(10 * e + t).astype(np.float32),
        goal=np.full((length, 2), -e, np.float32),
        achieved=np.stack([t, t + e], 1).astype(np.float32),
        image=np.broadcast_to(((16 * e + t) % 256).astype(np.uint8)[:, None, None, None], (length, 2, 4, 4)).copy(),
        done=t == length - 1,
        count=(1000 * e + t).astype(np.int64),
    )


def step(e: int, t: int) -> dict:
    return {name: values[t] for name, values in episode(e, t + 1).items()}


def batch_step(envs, t: int) -> dict:
    return {name: np.stack([step(e, t)[name] for e in envs]) for name in HOSTILE_FIELDS}


def store_three_episodes(buf: ReplayBuffer) -> None:
    """Episode 0 (3 steps, no end), 1 (5 steps, terminated), 2 (4 steps, truncated, with a final row)."""
    buf.store_episode(**episode(0, 3), task=0, weight=0.0)
    buf.store_episode(**episode(1, 5), task=1, weight=0.5, end="terminated")
    buf.store_episode(**episode(2, 4), task=2, weight=1.0, end="truncated",
                      final=dict(obs=[9.0, 9.0, 9.0], achieved=[9.0, 9.0]))


def make_hostile_store(folder, **options) -> ReplayBuffer:
    options = {"max_episodes": HOSTILE_MAX_EPISODES, "max_timesteps": HOSTILE_MAX_TIMESTEPS,
               "fields": HOSTILE_FIELDS, "meta_fields": HOSTILE_META, **options}
    return ReplayBuffer(folder, **options)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One writable store shared by the module: no hostile call may ever change it."""
    buf = make_hostile_store(tmp_path_factory.mktemp("hostile") / "store")
    store_three_episodes(buf)
    yield buf
    buf.close()


@pytest.fixture
def fresh(tmp_path):
    """A store of its own, for calls that may damage it (the known bugs)."""
    buf = make_hostile_store(tmp_path / "fresh")
    store_three_episodes(buf)
    yield buf
    buf.close()


@pytest.fixture(scope="module")
def new_folder(tmp_path_factory):
    """A path that does not exist yet, in a parent folder of its own (to see files made beside it)."""
    base = tmp_path_factory.mktemp("new")
    counter = itertools.count()

    def folder() -> Path:
        parent = base / f"p{next(counter)}"
        parent.mkdir()
        return parent / "store"

    return folder


# ---- fingerprints ------------------------------------------------------------------------------------


def fingerprint(folder: Path):
    """meta.json's bytes, every path in the folder, and the bytes of every file of the store.

    The files hold every live episode's rows (with its final row), its episode-table entries and its meta
    values, so comparing them byte for byte compares those (and finds writes to dead rows too). Sampler
    priorities (``priorities/*``, sampler state, not committed data) and the empty lock file are listed, not
    compared."""
    folder = Path(folder)
    paths, contents = [], {}
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            paths.append(os.path.normpath(os.path.join(rel, name)))
        if rel.split(os.sep)[0] == "priorities":
            continue
        for name in files:
            if name != "writer.lock":
                with open(os.path.join(root, name), "rb") as file:
                    contents[os.path.normpath(os.path.join(rel, name))] = file.read()
    return contents.get("meta.json"), sorted(paths), contents


def live_lengths(folder: Path) -> list[int]:
    """The live episodes' lengths, read from meta.json and episodes/ with plain numpy (not the library)."""
    meta = json.loads((Path(folder) / "meta.json").read_bytes())
    lengths = np.load(Path(folder) / "episodes" / "length.npy")
    slots = meta["capacity"]["max_episodes"]
    return [int(lengths[i % slots]) for i in range(meta["state"]["first_episode"], meta["state"]["next_episode"])]


def assert_same_fingerprint(before, after):
    """No file appeared or vanished, and neither meta.json nor any store file changed."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    assert after[1] == before[1], f"files appeared or vanished: {sorted(set(after[1]) ^ set(before[1]))}"
    assert after[0] == before[0], "meta.json changed"
    changed = sorted(name for name in before[2] if before[2][name] != after[2].get(name))
    assert not changed, f"store files changed: {changed}"


@contextmanager
def unchanged(buf: ReplayBuffer):
    """The block must leave the store exactly as it was, and readable."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    before = fingerprint(buf.folder)
    yield
    assert_same_fingerprint(before, fingerprint(buf.folder))
    assert buf.get_all_data()["episode_lens"].tolist() == live_lengths(buf.folder)  # still readable


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


# ---- what a value is -----------------------------------------------------------------------------------


def is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def hashable(value) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False


def valid_unit(low=0.0, high=1.0):
    return lambda v: is_real(v) and math.isfinite(float(v)) and low <= float(v) and (high is None or float(v) <= high)


def element_fits(target: np.dtype, source: np.dtype, value) -> bool:
    """Whether one value of ``source`` dtype must go into ``target`` (README: exact, floats may round)."""
    t, s = target.kind, source.kind
    if s == "b":
        return True
    if s == "c" and t != "c":
        return False
    if t == "b":
        return value == 0 or value == 1
    with np.errstate(all="ignore"):
        if t in "iu":
            info = np.iinfo(target)
            if s == "f":
                value = float(value)
                return (math.isfinite(value) and value.is_integer()
                        and info.min <= value < 2.0 ** (info.bits - (t == "i")))
            return info.min <= int(value) <= info.max
        cast = target.type(value)
        if s in "iu":
            return bool(np.isfinite(cast)) and int(cast.real) == int(value)
        finite_in = np.isfinite(value)
        return bool(not finite_in or np.all(np.isfinite(cast)))


def legal_row(spec_shape: tuple, shape: tuple) -> bool:
    return shape in (spec_shape, ()) or (spec_shape == () and shape == (1,)) or (spec_shape == (1,) and shape == ())


# ---- strategies --------------------------------------------------------------------------------------

ODD_OBJECTS = [np.nan, np.inf, -np.inf, np.float32(0.5), np.int64(-1), np.bool_(True), np.array([1, 2]),
               np.zeros((2, 2)), torch.tensor(1.0), torch.tensor([1, 2]), slice(None), Ellipsis, "nan", "1", "True",
               [], {}, set(), frozenset({1}), (), object(), type, print, 1 + 2j, b"x", bytearray(b"1")]

garbage = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(max_magnitude=1e6), st.text(max_size=8), st.binary(max_size=4),
    st.lists(st.integers(-3, 9), max_size=3), st.tuples(st.text(max_size=3)),
    st.dictionaries(st.text(max_size=3), st.integers(-2, 2), max_size=2), st.sampled_from(ODD_OBJECTS),
)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)

# names with path tricks and awkward characters (field names, priorities names)
PATH_TRICKS = ["../x", "a/b", ".", "..", "", "/abs", "a\\b", "a\x00b", "obs\n", "\nobs", " obs", "obs ", "é", "ﬁle",
               "Ａ", "x" * 65, "a" * 63 + "\u0301", "obs.npy", "meta.json", "~", "$HOME", "*", "a:b", "𝔞", "\u202eobs",
               "obs\t", "_x", "1x", "x١", "end", "final", "episode_lens", "class", "None", "lambda", "a" * 64 + "\n"]

# arrays numpy holds that are not numbers (store values, batched values)
NON_NUMERIC = [np.array(["a", "b"]), np.array([b"x"]), np.array([None, 1], dtype=object),
               np.array([1, 2], dtype=object),
               np.array(["2020-01-01"], dtype="M8[D]"), np.array([1], dtype="m8[s]"), np.zeros(2, dtype="V2"),
               np.array(3, dtype=object), np.zeros(2, dtype=[("a", "f4")])]


# ---- hindsight (the views and the hindsight files) ------------------------------------------------------


def reward_of_achievement(achieved, goal):
    return -(np.abs(achieved - goal).sum(axis=-1) > 0.5).astype(np.float32)


HER = dict(goal_field="goal", achieved_field="achieved", reward_fn=reward_of_achievement)
