"""Hostile input, thrown at every public entry point: the library's error, a message that names what was
wrong, and a store left exactly as it was.

Each test takes a fingerprint of the store folder before the hostile call and compares it after: the bytes
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
defaults, arrays of any dtype and shape, options of any type, JSON states); cases that once
found a library bug are kept as minimal reproductions (the ``*_CASES`` lists). ``tests/test_errors.py`` holds the earlier fixed-list battery; the kinds here are
the ones it does not cover (or covers with a few fixed values, where this file generates them).

Kinds of malformed input covered (84; "fixed" marks kinds the library once mishandled):

Construction and opening
 1. field and meta field names of arbitrary text: path tricks (``../x``, ``a/b``, ``.``, ``..``, ``''``, ``/abs``,
    ``a\\b``), NUL, newline, tab, bidi marks, non-ASCII letters and digits, 65+ characters (generated)
 2. field names of other types (int, None, bytes, float, tuple) (generated)
 3. reserved names and Python keywords, as field and as meta field names
 4. legal names that are awkward file names (``con``, ``nul``, ``aux``, ``lpt1``, names differing only in case,
    ``steps``, ``meta``, ``priorities``, 64 characters): must round-trip, not be refused or collide
 5. dtype specs of arbitrary text (generated)
 6. dtype specs of arbitrary objects: numpy, python and torch types, structured, subarray, datetime, str,
    object and void dtypes, non-native byte order, bare / tuple / dict spec forms (generated)
 7. dtype strings numpy rejects with a ValueError, SyntaxError or DeprecationWarning (fixed)
 8. dtypes numpy stores but torch cannot read: longdouble, clongdouble (fixed)
 9. shape specs of arbitrary objects: negative, zero, huge, floats, bools, strings, None, arrays, ranges,
    40 dimensions (generated)
10. defaults of arbitrary objects: NaN, inf, huge ints, complex, strings, lists, arrays, tensors, against
    every numeric dtype (generated)
11. a 2-list default in a dict spec (fixed: read as a complex number, misleading message)
12. ``fields`` / ``meta_fields`` containers that are not dicts (generated)
13. capacities (max_episodes, max_timesteps, max_steps) of any non-int or non-positive value (generated)
14. capacities the format cannot hold, >= 2**62 (fixed: bare OverflowError and stray files, or an unopenable store)
15. ``circular`` given anything but a bool (generated)
16. ``overwrite`` / ``read_only`` / ``durable`` given strings or ints (fixed: overwrite='no' wipes the store)
17. folder paths of the wrong type (int, None, float, list, bytes, dict)
18. folder paths with a NUL byte, a too-long component, an uncreatable parent (fixed: bare errors), and the
    empty path (fixed: silently the current directory, whose own meta/ and steps/ are then deleted)
19. folder paths that are special files: a FIFO, a character device, a symlink to a file, a dangling symlink
20. ``from_folder`` on another program's folder (unrelated files, no ``meta.json``)
21. a folder whose ``meta.json`` is arbitrary JSON or arbitrary bytes (generated)
22. a ``meta.json`` holding an integer too long for Python's int parser (found here; fixed meanwhile)
23. creating a store in another program's folder that has ``meta/`` and ``steps/`` of its own, and
    ``overwrite=True`` on another program's ``meta.json`` (fixed: data loss)

Writing
24. ``store`` values: arrays of any dtype (every numeric dtype, bool, datetime, timedelta, str, bytes, object,
    void, structured), any shape, any values (NaN, inf, extremes): stored exactly or refused (generated)
25. ``store_batch`` / vector writer values of any dtype and shape (generated)
26. integers float64 / complex128 cannot hold exactly, e.g. 2**53 + 1 (fixed: rounded silently)
27. float64 values that overflow a complex64 field (fixed: stored as inf)
28. ``store_episode`` with a time axis of 10**9 steps (a broadcast view: must not allocate)
29. ``store_episode`` with ragged time axes across fields (generated)
30. ``store_episode`` with one NaN / inf / fraction / out-of-range value at a random (t, ...) position (generated)
31. ``end=`` of any other value at every entry point: store_episode, set_episode_end, EpisodeMeta.set_end,
    end_episode, advance_episode, commit_all (generated)
32. ``end=`` given as a numpy array (fixed: bare TypeError)
33. ``final=`` that is not a mapping: int, str, list, array (fixed)
34. ``final=`` rows of the wrong shape (generated)
35. meta values of any type and shape for one_episode / begin_episode / batched_episode (generated)
36. vector writer ``terminated`` / ``truncated`` / ``active`` of any dtype, shape and value (generated)
37. vector writer gymnasium ``final`` object arrays with wrong counts, strings, wrong shapes, meta fields
38. vector writer ``final`` holding None for an env that did end (fixed: a zero final observation is stored)
39. a huge ``num_envs`` (fixed: bare MemoryError / ValueError)
40. ``commit_all`` / ``discard`` ``envs=`` of any value (generated)
41. vector writer ``set_meta`` values of any type and shape (generated)

update / get_all_data
42. ``update`` indices of every kind: negative, out of range, not live, floats, NaN, bools, strings, complex,
    None inside lists, sets, dicts, 2-d, ints beyond int64 (generated)
43. ``update`` with a slice of step 0 or with non-int bounds (fixed: bare errors)
44. ``update`` with uint64 indices >= 2**63, or an empty list (fixed: misleading messages)
45. ``update`` values of any shape for step and meta fields (generated)
46. ``get_all_data`` with unknown names of any type (generated)
47. ``get_all_data`` with one name as a str, or a non-iterable (fixed: "unknown field 'o'")
48. ``get_all_data(device=...)`` with a dtype, a float, an unknown string, an absent accelerator (fixed)

Views and loaders
49. every ``dataset()`` option given a value of the wrong type or range (generated, 20 options)
50. ``dataset()`` unknown keywords, for every kind of view (generated)
51. ``filter_meta`` / ``filter_fields`` that are not dicts, name unknown or non-scalar fields, hold
    non-numeric values, or match nothing (generated)
52. filters given as arrays, falsy non-dicts or with int keys; ``stack_pad`` arrays; an unhashable
    ``reward_field`` (fixed)
53. ``fieldname_map`` that is not a dict, renames nothing, maps to empty or clashing names (generated)
54. ``dataloader()`` options: batch_size, shuffle, drop_last, seed, num_workers, to_named_tuple,
    dataset_kwargs (generated)
55. ``to_named_tuple`` with Python keywords (fixed: bare ValueError)
56. ``dataloader(dataset=...)`` that is not a view, ``device=`` garbage, ``non_blocking=`` non-bool,
    ``generator=`` non-generator (fixed)
57. torch DataLoader options passed through with bad values (timeout, prefetch_factor, persistent_workers,
    multiprocessing_context): torch's own ValueError naming the option
58. public view classes built from a ReplayBuffer, a path or None instead of an EpisodeStore (fixed)
59. ``BatchIndexSampler`` batch_size / shuffle / seed of any value (generated), and sizes that are
    negative, str, float, None or beyond an index (fixed)
60. view ``__getitems__`` with out-of-range ints, 2-d arrays and scalars (generated, 5 kinds of view)
61. view ``__getitems__`` with floats, bools, numeric strings (fixed: silently read other items)
62. view ``__getitems__`` with None, slices, complex, NaN, ints beyond int64, uint64 (fixed: bare or
    misleading errors)
63. view ``__getitem__`` with anything but an int (generated)
64. view ``__getitem__`` out of range on either side (generated)
65. view ``__getitem__`` with ints beyond int64 (fixed: OverflowError)
66. ``Sample`` objects with negative, float, str, uint64, 2-d, bool or never-existing keys, or weights of
    the wrong length or type (fixed)

Samplers
67. ``buffer.sampler(kind)`` with any kind (generated)
68. every sampler option (seed, replacement, follow, rank, world_size, alpha, beta, beta_final,
    beta_steps, persist, eta) given a value of the wrong type or range (generated)
69. sampler numbers beyond int64, and ``follow`` given arrays or tensors (fixed)
70. prioritized ``name=`` of any ASCII text: refused, or files only ``priorities/<name>.*`` (generated)
71. a non-ASCII ``name=`` too long for the file system (fixed: blamed on read-only, stray folder)
72. ``sample`` / ``batch`` / ``batches`` / ``dataloader`` / ``buffer.sample`` sizes, ``num_batches`` and
    ``drop_last`` of any value (generated)
73. ``sampler.dataloader(num_workers=-1)`` (fixed: torch's error, not the library's)
74. ``update_priorities`` priorities of any dtype and shape, NaN, inf, negative (generated)
75. ``update_priorities`` keys of the wrong dtype, shape or sign (generated)
76. SequenceSampler step priorities and masks of the wrong shape, dtype or first step (generated)
77. ``update_priorities`` with keys of episodes that never existed, uint64 keys, and huge finite
    priorities that overflow the sum tree (fixed)
78. ``load_state_dict`` with damaged states: non-dicts, wrong types, damaged or missing rng, missing keys,
    JSON garbage at every level (generated)
79. ``load_state_dict`` damage the library lets through, raises bare, or half-applies (fixed)

Hindsight
80. every ``hindsight=`` option (strategy, relabel_ratio, seed, reward_fn, goal_field, achieved_field,
    n_steps) given a value of the wrong type (generated)
81. ``hindsight=`` dicts missing keys, with unhashable field names, or arrays for strategy / n_steps (fixed)
82. a ``reward_fn`` returning the wrong shape or dtype (generated)
83. a ``reward_fn`` returning a tensor that requires grad, bfloat16, a ragged list, or 1e300 (fixed)
84. a ``reward_fn`` returning values the reward field cannot hold: 0.5, 300, NaN into int8 (fixed)
"""

from __future__ import annotations

import copy
import itertools
import json
import keyword
import math
import os
import re
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import memmap_replay
from memmap_replay import (BufferFullError, CorruptStoreError, EpisodeStateError, IndexTypeError, InvalidDataError,
                           NotAFolderError, OptionError, ReadOnlyError, ReplayBuffer, ReplayError, Sample, SampleExpiredError,
                           SchemaError, SchemaMismatchError, StoreLockedError, StoreNotFoundError,
                           UnsupportedFormatError)

# ---- settings: every property is deterministic and small enough for the file to run in well under a minute


def fast(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


# ---- the store ---------------------------------------------------------------------------------------

FIELDS = dict(obs=("float", (3,)), action=("int", 2), reward="float", goal=("float", (2,)),
              achieved=("float", (2,)), image=("uint8", (2, 4, 4)), done="bool", count="int64")
META = dict(task="int", weight="float")
MAX_EPISODES, MAX_TIMESTEPS = 8, 6
TABLE = ("start", "length", "end", "final", "id")

BUILTIN = {
    SchemaError: ValueError, SchemaMismatchError: ValueError, InvalidDataError: ValueError, OptionError: ValueError,
    IndexTypeError: TypeError,
    BufferFullError: ValueError, EpisodeStateError: RuntimeError, ReadOnlyError: PermissionError,
    StoreNotFoundError: FileNotFoundError, NotAFolderError: NotADirectoryError, StoreLockedError: BlockingIOError,
    CorruptStoreError: OSError, UnsupportedFormatError: ValueError, SampleExpiredError: LookupError,
}


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
    return {name: np.stack([step(e, t)[name] for e in envs]) for name in FIELDS}


def fill(buf: ReplayBuffer) -> None:
    """Episode 0 (3 steps, no end), 1 (5 steps, terminated), 2 (4 steps, truncated, with a final row)."""
    buf.store_episode(**episode(0, 3), task=0, weight=0.0)
    buf.store_episode(**episode(1, 5), task=1, weight=0.5, end="terminated")
    buf.store_episode(**episode(2, 4), task=2, weight=1.0, end="truncated",
                      final=dict(obs=[9.0, 9.0, 9.0], achieved=[9.0, 9.0]))


def make(folder, **options) -> ReplayBuffer:
    options = {"max_episodes": MAX_EPISODES, "max_timesteps": MAX_TIMESTEPS, "fields": FIELDS,
               "meta_fields": META, **options}
    return ReplayBuffer(folder, **options)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One writable store shared by the module: no hostile call may ever change it."""
    buf = make(tmp_path_factory.mktemp("hostile") / "store")
    fill(buf)
    yield buf
    buf.close()


@pytest.fixture
def fresh(tmp_path):
    """A store of its own, for calls that may damage it (the known bugs)."""
    buf = make(tmp_path / "fresh")
    fill(buf)
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


@pytest.fixture(scope="module")
def samplers(store):
    made = dict(uniform=store.sampler("uniform", seed=0),
                epoch=store.sampler("uniform", seed=0, replacement=False),
                prioritized=store.sampler("prioritized", seed=0, persist=False),
                nstep=store.sampler("prioritized", n_steps=2, gamma=0.9, seed=0, persist=False),
                sequence=store.sampler("sequence", window=2, seed=0, persist=False))
    yield made
    for sampler in made.values():
        getattr(sampler, "close", lambda: None)()


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


@contextmanager
def unchanged(buf: ReplayBuffer):
    """The block must leave the store exactly as it was, and readable."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    before = fingerprint(buf.folder)
    yield
    after = fingerprint(buf.folder)
    assert after[1] == before[1], f"files appeared or vanished: {sorted(set(after[1]) ^ set(before[1]))}"
    assert after[0] == before[0], "meta.json changed"
    changed = sorted(name for name in before[2] if before[2][name] != after[2].get(name))
    assert not changed, f"store files changed: {changed}"
    assert buf.get_all_data()["episode_lens"].tolist() == live_lengths(buf.folder)  # still readable


@contextmanager
def unchanged_folder(folder: Path):
    """``unchanged`` for a closed store: the fingerprint, then a fresh read-only open reads it all."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    before = fingerprint(folder)
    yield
    after = fingerprint(folder)
    assert after[1] == before[1], f"files appeared or vanished: {sorted(set(after[1]) ^ set(before[1]))}"
    assert after[0] == before[0], "meta.json changed"
    changed = sorted(name for name in before[2] if before[2][name] != after[2].get(name))
    assert not changed, f"store files changed: {changed}"
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.get_all_data()["episode_lens"].tolist() == live_lengths(folder)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))


@contextmanager
def raises(error, match: str):
    """``pytest.raises`` that also checks the exact class, ReplayError and the matching builtin."""
    __tracebackhide__ = True  # helpers stay out of tracebacks
    with pytest.raises(error, match=match) as info:
        yield info
    errors = error if isinstance(error, tuple) else (error,)
    assert type(info.value) in errors, f"expected exactly {errors}, got {type(info.value).__name__}"
    if type(info.value) in BUILTIN:
        assert isinstance(info.value, ReplayError)
        assert isinstance(info.value, BUILTIN[type(info.value)])


@contextmanager
def discarded(buf: ReplayBuffer):
    """An open episode (one_episode) that is discarded, never committed, whatever happens inside."""
    __tracebackhide__ = True  # helpers stay out of tracebacks

    class Discard(Exception):
        pass

    try:
        with buf.one_episode() as handle:
            yield handle
            raise Discard
    except Discard:
        pass


@contextmanager
def discarded_batch(buf: ReplayBuffer, n: int = 2):
    __tracebackhide__ = True  # helpers stay out of tracebacks
    class Discard(Exception):
        pass

    try:
        with buf.batched_episode(n) as writer:
            yield writer
            raise Discard
    except Discard:
        pass


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

# ==== kinds 1-4: names ======================================================================================

NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
RESERVED = {"end", "final", "episode_lens"}
PATH_TRICKS = ["../x", "a/b", ".", "..", "", "/abs", "a\\b", "a\x00b", "obs\n", "\nobs", " obs", "obs ", "é", "ﬁle",
               "Ａ", "x" * 65, "a" * 63 + "\u0301", "obs.npy", "meta.json", "~", "$HOME", "*", "a:b", "𝔞", "\u202eobs",
               "obs\t", "_x", "1x", "x١", "end", "final", "episode_lens", "class", "None", "lambda", "a" * 64 + "\n"]

names = st.one_of(
    st.sampled_from(PATH_TRICKS), st.text(max_size=70), st.from_regex(r"[A-Za-z][A-Za-z0-9_]{58,68}", fullmatch=True),
    st.sampled_from(sorted(keyword.kwlist)), st.integers(-5, 5), st.none(), st.binary(max_size=3),
    st.tuples(st.text(max_size=2)), st.floats(allow_nan=False),
)


def valid_name(name) -> bool:
    return (isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None and name not in RESERVED
            and not keyword.iskeyword(name))


@fast(70)
@given(name=names, where=st.sampled_from(["fields", "meta_fields"]))
def test_any_field_name_becomes_a_file_inside_the_store_or_is_refused(new_folder, name, where):
    folder = new_folder()
    base = "qq_base_field"
    assume(name != base)
    fields, meta_fields = ({name: "float"}, None) if where == "fields" else ({base: "float"}, {name: "int"})
    if not valid_name(name):
        kind = "field" if where == "fields" else "meta field"
        with raises(SchemaError, match=rf"^{kind} name .*{re.escape(repr(name))}"):
            ReplayBuffer(folder, 2, 3, fields, meta_fields)
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, fields, meta_fields) as buf:
        values = np.array([1.5, -2.0])
        if where == "fields":
            buf.store_episode(**{name: values})
        else:
            buf.store_episode(**{base: values, name: 7})
    assert all(path == "store" or path.startswith("store/") for path in files_under(folder.parent))  # nothing beside it
    sub = "steps" if where == "fields" else "meta"
    assert (folder / sub / f"{name}.npy").is_file()
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        data = reader.get_all_data()
        if where == "fields":
            assert data[name][0].tolist() == [1.5, -2.0]
        else:
            assert data[name].tolist() == [7]


AWKWARD_NAMES = ["con", "nul", "aux", "prn", "lpt1", "com1", "CON", "obs", "OBS", "Obs", "a" * 64, "steps", "meta",
                 "episodes", "priorities", "writer", "lock", "npy", "json"]


def test_legal_but_awkward_names_round_trip_without_colliding(tmp_path):
    fields = {name: ("int64", (), 0) for name in AWKWARD_NAMES}
    meta_fields = {name + "_m": "int" for name in AWKWARD_NAMES[:6]}
    with ReplayBuffer(tmp_path / "awkward", 2, 3, fields, meta_fields) as buf:
        buf.store_episode(**{name: np.arange(2) + i for i, name in enumerate(AWKWARD_NAMES)},
                          **{name: i for i, name in enumerate(meta_fields)})
    with ReplayBuffer.from_folder(tmp_path / "awkward", read_only=True) as reader:
        data = reader.get_all_data()
        for i, name in enumerate(AWKWARD_NAMES):
            assert data[name][0].tolist() == [i, i + 1], name
        for i, name in enumerate(meta_fields):
            assert data[name].tolist() == [i]
    assert sorted(os.listdir(tmp_path / "awkward" / "steps")) == sorted(f"{name}.npy" for name in AWKWARD_NAMES)


# ==== kinds 5-12: field specs ===============================================================================


def numpy_parse(spec):
    """('ok', dtype) / ('type-error', None) / ('other', error) for np.dtype(spec), warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return "ok", np.dtype(spec)
        except TypeError:
            return "type-error", None
        except BaseException as error:  # ValueError, SyntaxError, DeprecationWarning...
            return "other", error


def handled_dtype_spec(spec) -> bool:
    """Specs the library handles today (the others are the cases below)."""
    if isinstance(spec, str) and spec in ("float", "int", "bool", "uint8"):
        return True
    outcome, dtype = numpy_parse(spec)
    if outcome == "other":
        return False
    return not (outcome == "ok" and dtype.kind in "fc" and dtype.itemsize > {"f": 8, "c": 16}[dtype.kind])


DTYPE_OBJECTS = [
    np.float16, np.float32, np.float64, np.int8, np.uint16, np.int64, np.uint64, np.bool_, np.complex64,
    np.complex128, int, float, bool, complex, str, bytes, object, list, dict, type(None),
    np.dtype(">f8"), np.dtype("<i2"), np.dtype("=u4"), np.dtype("|b1"), np.dtype([("a", "f4"), ("b", "i4")]),
    np.dtype(("f4", (2,))), np.dtype("M8[ns]"), np.dtype("m8[s]"), np.dtype("O"), np.dtype("U4"), np.dtype("S3"),
    np.dtype("V2"), torch.float32, torch.int64, torch.bool, "float", "int", "bool", "uint8", "Float", "INT",
    "float32 ", " int", "f4", "<f4", "i8", "?", "e", "p", "P", "c8", "datetime64", "str", "object", "U", "S", "V8",
    "f4,i4", "(2,)f4", "2f4", "()i4", "notadtype", "", "torch.float32", None, 3, 3.5, ["float"], {"float": 1},
]
dtype_specs = st.one_of(st.sampled_from(DTYPE_OBJECTS), st.text(max_size=6)).filter(handled_dtype_spec)


@fast(60)
@given(spec=dtype_specs, wrap=st.sampled_from(["bare", "tuple", "dict"]))
def test_any_dtype_spec_is_refused_up_front_or_works_end_to_end(new_folder, spec, wrap):
    folder = new_folder()
    info = {"bare": spec, "tuple": (spec, (2,)), "dict": {"dtype": spec, "shape": [2]}}[wrap]
    try:
        buf = ReplayBuffer(folder, 2, 3, dict(x=info))
    except SchemaError as error:
        assert re.search(r"^field 'x' must (have a numeric|be a dtype name)", str(error)), str(error)
        assert isinstance(error, ReplayError) and isinstance(error, ValueError)
        assert files_under(folder.parent) == []
        return
    with buf:
        dtype = buf.schema.fields["x"].dtype
        assert dtype.kind in "biufc" and dtype.isnative, dtype
        row = buf.schema.fields["x"].default_row()
        buf.store_episode(x=np.stack([row, row]))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # readable back, through torch too
        data = reader.get_all_data()
        assert data["x"].shape[:2] == (1, 2)
        assert not data["x"].numpy().any()


DTYPE_CASES = [
    pytest.param(",", id="comma-SyntaxError"),
    pytest.param("(-1,)i4", id="negative-subarray-ValueError"),
    pytest.param("0\x7f", id="digit-junk-ValueError"),
    pytest.param("a", id="deprecated-alias"),
]


@pytest.mark.parametrize("spec", DTYPE_CASES)
def test_dtype_strings_numpy_rejects_oddly_are_refused_with_schema_error(new_folder, spec):
    folder = new_folder()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with raises(SchemaError, match=r"^field 'x' must have a numeric"):
            ReplayBuffer(folder, 2, 3, dict(x=spec))
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("spec", [
    pytest.param("float128", id="float128"), pytest.param("complex256", id="complex256"),
    pytest.param("g", id="g-longdouble"), pytest.param(np.longdouble, id="np.longdouble"),
])
def test_dtypes_torch_cannot_read_are_refused_up_front(new_folder, spec):
    folder = new_folder()
    try:
        with ReplayBuffer(folder, 2, 3, dict(x=spec)) as buf:
            buf.store_episode(x=np.zeros(2))
            buf.get_all_data()
    except SchemaError as error:
        assert "'x'" in str(error)
        return
    raise AssertionError("accepted: it must be refused, or readable")


shapes = st.one_of(
    st.integers(-3, 5), st.sampled_from([2**32, 2**40, 2**62, 2**70, -2**70]),
    st.lists(st.integers(-2, 4), max_size=4), st.lists(st.integers(-2, 4), max_size=4).map(tuple),
    st.tuples(st.integers(1, 3), st.sampled_from([2**31, 2**40])), st.floats(allow_nan=True), st.text(max_size=3),
    st.none(), st.booleans(), st.tuples(st.booleans()), st.tuples(st.floats(0, 4)),
    st.sampled_from([np.array([2, 3]), np.int8(3), np.uint64(2), range(3), [[2]], {2: 3}, (None,), ("2",),
                     (2, "3"), torch.tensor(2), (np.int64(2), np.int32(1)), (1,) * 40, (2,) * 40]),
)


def legal_shape(shape) -> tuple | None:
    """The shape the library must accept it as, or None if it must refuse it."""
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(is_int(dim) for dim in shape):
        return None
    shape = tuple(int(dim) for dim in shape)
    if any(dim < 1 for dim in shape) or math.prod(shape) * 4 > 2**31:
        return None
    return shape


@fast(60)
@given(shape=shapes)
def test_any_shape_spec_is_a_positive_int_tuple_or_refused(new_folder, shape):
    folder = new_folder()
    legal = legal_shape(shape)
    if legal is None:
        with raises(SchemaError, match=r"^field 'x' must (have a shape|take at most \d+ bytes per row)"):
            ReplayBuffer(folder, 2, 3, dict(x=("float32", shape)))
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, dict(x=("float32", shape))) as buf:
        assert buf.schema.fields["x"].shape == legal
        buf.store_episode(x=np.ones((1, *legal)))
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.get_all_data()["x"].shape == (1, 1, *legal)


defaults = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63 - 1, 255, 256, -129]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([65504.0, 65520.0, 3.5e38, 3.5e39, -0.0, 0.5]),
    st.complex_numbers(allow_nan=True, allow_infinity=True), st.text(max_size=3), st.lists(st.floats(), max_size=3),
    st.sampled_from([np.float32(np.nan), np.int64(5), np.uint64(2**64 - 1), np.array(1.0), torch.tensor(1.0),
                     np.bool_(True), np.float16(65504), np.float64(1e39), b"0", Ellipsis, (1,), {0: 1}]),
)
DEFAULT_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int64", "uint64", "bool", "complex64"]


def default_fits(dtype: np.dtype, default) -> bool:
    """Whether the library must accept ``default`` for ``dtype`` (README: stored exactly, floats may round)."""
    if default is None:
        return True
    if isinstance(default, np.generic):
        default = default.item()
    if isinstance(default, list) or not isinstance(default, (bool, int, float, complex)):
        return False
    if isinstance(default, complex):
        if dtype.kind != "c":
            return False
        with np.errstate(all="ignore"):
            return math.isfinite(default.real) and math.isfinite(default.imag) and \
                bool(np.isfinite(np.array(default).astype(dtype)))
    if isinstance(default, float) and not math.isfinite(default):
        return False
    if dtype.kind == "b":
        return default in (0, 1)
    if dtype.kind in "iu":
        if isinstance(default, float) and not default.is_integer():
            return False
        info = np.iinfo(dtype)
        return info.min <= default <= info.max
    with np.errstate(over="ignore"):
        cast = np.array(default).astype(dtype)
    if isinstance(default, (bool, int)):  # an int default must be held exactly
        return bool(np.isfinite(cast)) and int(cast.real) == default
    return bool(np.isfinite(cast))


@fast(80)
@given(dtype=st.sampled_from(DEFAULT_DTYPES), default=defaults)
def test_any_default_is_held_exactly_or_refused(new_folder, dtype, default):
    folder = new_folder()
    dtype = np.dtype(dtype)
    if not default_fits(dtype, default):
        with raises(SchemaError, match=r"^field 'x' (must have a (scalar|finite) default|of dtype \w+ cannot)"):
            ReplayBuffer(folder, 2, 3, dict(base="float", x=(dtype.name, (), default)))
        assert files_under(folder.parent) == []
        return
    with ReplayBuffer(folder, 2, 3, dict(base="float", x=(dtype.name, (), default))) as buf:
        buf.store_episode(base=[0.0])  # x takes its default
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:  # the default survives meta.json
        stored = reader.get_all_data()["x"].numpy()[0, 0]
        value = 0 if default is None else default.item() if isinstance(default, np.generic) else default
        expected = np.array(value).astype(dtype)
        assert stored == expected, (stored, expected)
        if dtype.kind in "iub":
            assert int(stored) == value


def test_list_default_in_a_dict_spec_is_refused_as_a_list(new_folder):
    folder = new_folder()
    with raises(SchemaError, match=r"field 'x' must have a scalar default or None \(got \[1, 2\]\)"):
        ReplayBuffer(folder, 2, 3, dict(x={"dtype": "float", "default": [1, 2]}))


@fast(40)
@given(fields=garbage, meta_fields=garbage)
def test_fields_and_meta_fields_must_be_dicts(new_folder, fields, meta_fields):
    from collections.abc import Mapping
    assume(not (isinstance(fields, Mapping) and fields) or not (meta_fields is None or isinstance(meta_fields, Mapping)))
    folder = new_folder()
    if fields is None:
        match = r"^fields are required to create a store"
    elif not isinstance(fields, Mapping) or not fields:
        match = r"^fields must be a non-empty dict of name -> spec.*\(got "
    else:
        match = r"^meta_fields must be a dict of name -> spec or None \(got "
    with raises(SchemaError, match=match):
        ReplayBuffer(folder, 2, 3, fields, meta_fields)
    assert files_under(folder.parent) == []


# ==== kinds 13-16: capacities and flags =====================================================================

capacity_values = st.one_of(garbage, st.integers(-2**40, 0), st.sampled_from([np.int64(0), np.float64(3), 3.0, "3"]))


@fast(60)
@given(key=st.sampled_from(["max_episodes", "max_timesteps", "max_steps"]), value=capacity_values)
def test_capacity_must_be_a_positive_int(new_folder, key, value):
    assume(not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1))
    folder = new_folder()
    options = dict(max_episodes=2, max_timesteps=3, fields=dict(x="float"))
    options[key] = value
    if key == "max_steps" and value is None:  # None is the default: max_episodes * (max_timesteps + 1)
        ReplayBuffer(folder, **options).close()
        return
    with raises(OptionError, match=rf"^{key} must be a positive int \(got {re.escape(repr(value))}\)"):
        ReplayBuffer(folder, **options)
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("value", [np.int64(3), np.uint8(3), np.int32(3)], ids=repr)
def test_capacity_takes_numpy_ints(new_folder, value):
    folder = new_folder()
    with ReplayBuffer(folder, max_episodes=value, max_timesteps=value, fields=dict(x="float")) as buffer:
        assert (buffer.max_episodes, buffer.max_timesteps) == (3, 3)
        assert type(buffer.max_episodes) is int
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.max_episodes == 3


@pytest.mark.parametrize("key, value", [
    pytest.param("max_episodes", 2**62, id="max_episodes-2**62"),
    pytest.param("max_episodes", 2**70, id="max_episodes-2**70"),
    pytest.param("max_timesteps", 2**62, id="max_timesteps-2**62"),
    pytest.param("max_steps", 2**63, id="max_steps-2**63"),
])
def test_capacity_beyond_the_format_is_refused_up_front(new_folder, key, value):
    folder = new_folder()
    options = dict(max_episodes=2, max_timesteps=3, fields=dict(x="float"))
    options[key] = value
    try:
        ReplayBuffer(folder, **options).close()
    except OptionError as error:
        assert key in str(error)
        assert files_under(folder.parent) == []
        return
    ReplayBuffer.from_folder(folder, read_only=True).close()  # accepted: it must then open


@fast(30)
@given(value=garbage)
def test_circular_must_be_a_bool(new_folder, value):
    assume(not isinstance(value, (bool, np.bool_)))  # numpy bools are flags too
    folder = new_folder()
    with raises(OptionError, match=rf"^circular must be True or False \(got {re.escape(repr(value))}\)"):
        ReplayBuffer(folder, 2, 3, dict(x="float"), circular=value)
    assert files_under(folder.parent) == []


@pytest.mark.parametrize("option, value", [
    pytest.param("overwrite", "no", id="overwrite-'no'"),
    pytest.param("overwrite", 1, id="overwrite-1"),
    pytest.param("read_only", "no", id="read_only-'no'"),
    pytest.param("durable", "no", id="durable-'no'"),
])
def test_bool_options_refuse_non_bools_and_never_wipe(fresh, option, value):
    fresh.close()
    with unchanged_folder(fresh.folder):
        with raises(OptionError, match=rf"{option} must be True or False \(got {re.escape(repr(value))}\)"):
            make(fresh.folder, **{option: value}).close()
        with raises(OptionError, match=rf"{option} must be True or False"):
            (ReplayBuffer.from_folder(fresh.folder, **{option: value}) if option != "overwrite"
             else make(fresh.folder, overwrite=value)).close()


# ==== kinds 17-23: folder paths and foreign folders =========================================================


@pytest.mark.parametrize("kind", ["int", "None", "float", "list", "bytes", "dict"])
@pytest.mark.parametrize("opener", ["create", "from_folder", "read_only"])
def test_folder_of_the_wrong_type(tmp_path, monkeypatch, kind, opener):
    monkeypatch.chdir(tmp_path)  # whatever a wrong type might be taken for, it stays in tmp_path
    folder = {"int": 3, "None": None, "float": 1.5, "list": ["a"], "bytes": os.fsencode(tmp_path / "b"),
              "dict": {"a": 1}}[kind]
    call = {"create": lambda: ReplayBuffer(folder, 2, 3, dict(x="float")),
            "from_folder": lambda: ReplayBuffer.from_folder(folder),
            "read_only": lambda: ReplayBuffer.from_folder(folder, read_only=True)}[opener]
    with pytest.raises(TypeError, match=r"(str|PathLike).*(not|got).*(int|NoneType|float|list|bytes|dict)"):
        call()
    assert files_under(tmp_path) == []


PATH_CASES = [
    pytest.param(lambda base: str(base) + "/a\x00b", id="NUL-byte"),
    pytest.param(lambda base: "", id="empty-path"),
    pytest.param(lambda base: base / ("x" * 300), id="component-too-long"),
    pytest.param(lambda base: "/proc/memmap_replay_nowhere/store", id="uncreatable-parent", marks=[pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")]),
]


@pytest.mark.parametrize("path", PATH_CASES)
def test_folder_that_cannot_be_a_store_gets_a_library_error(new_folder, path, monkeypatch):
    base = new_folder().parent
    monkeypatch.chdir(base)  # '' must not reach the directory the tests run in
    with raises((StoreNotFoundError, NotAFolderError, ReadOnlyError, SchemaError, OptionError),
                match=r"(folder|path|store)"):
        ReplayBuffer(path(base), 2, 3, dict(x="float"))
    assert files_under(base) == []


def special_file(kind: str, base: Path) -> Path:
    target = base / "target"
    if kind == "fifo":
        os.mkfifo(target)
        return target
    if kind == "char-device":
        return Path("/dev/null")
    if kind == "symlink-to-file":
        target.write_bytes(b"precious")
    link = base / "link"
    link.symlink_to(target)
    return link


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX special files")
@pytest.mark.parametrize("kind", ["fifo", "char-device", "symlink-to-file", "dangling-symlink"])
@pytest.mark.parametrize("opener", ["create", "from_folder", "read_only"])
def test_folder_that_is_a_special_file(new_folder, kind, opener):
    base = new_folder().parent
    path = special_file(kind, base)
    files = files_under(base)
    call = {"create": lambda: ReplayBuffer(path, 2, 3, dict(x="float")),
            "from_folder": lambda: ReplayBuffer.from_folder(path),
            "read_only": lambda: ReplayBuffer.from_folder(path, read_only=True)}[opener]
    if kind == "dangling-symlink" and opener != "create":
        error, match = StoreNotFoundError, r"no store at .*link: the folder does not exist"
    else:
        error, match = NotAFolderError, rf"{re.escape(str(path))} (must be a folder|cannot be created)"
    with raises(error, match=match):
        call()
    assert files_under(base) == files
    if kind == "symlink-to-file":
        assert (base / "target").read_bytes() == b"precious"


def other_program_folder(base: Path) -> Path:
    folder = base / "other"
    (folder / "data").mkdir(parents=True)
    (folder / "README.md").write_text("not a store")
    (folder / "data" / "table.csv").write_text("a,b\n1,2\n")
    (folder / "config.json").write_text('{"format": "memmap_replay"}')
    return folder


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in folder.rglob("*")}


@pytest.mark.parametrize("read_only", [True, False])
def test_from_folder_on_another_programs_folder(new_folder, read_only):
    folder = other_program_folder(new_folder().parent)
    before = snapshot(folder)
    with raises(StoreNotFoundError, match=rf"no store at {re.escape(str(folder))}: the folder holds no meta\.json"):
        ReplayBuffer.from_folder(folder, read_only=read_only)
    assert snapshot(folder) == before


meta_json_contents = st.one_of(
    json_values.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(["format", "version", "schema", "capacity", "state", "store_id", "x"]),
                    json_values, max_size=6).map(lambda d: json.dumps({"format": "memmap_replay", **d}).encode()),
    st.dictionaries(st.sampled_from(["schema", "capacity", "state", "store_id"]), json_values, max_size=4).map(
        lambda d: json.dumps({"format": "memmap_replay", "version": "1.0", **d}).encode()),
    st.binary(max_size=40),
)


@fast(60)
@given(content=meta_json_contents, opener=st.sampled_from(["from_folder", "read_only", "create"]))
def test_folder_with_a_foreign_meta_json_is_refused_and_untouched(new_folder, content, opener):
    folder = new_folder()
    folder.mkdir()
    (folder / "meta.json").write_bytes(content)
    (folder / "notes.txt").write_text("mine")
    before = snapshot(folder)
    call = {"create": lambda: ReplayBuffer(folder, 2, 3, dict(x="float")),
            "from_folder": lambda: ReplayBuffer.from_folder(folder),
            "read_only": lambda: ReplayBuffer.from_folder(folder, read_only=True)}[opener]
    with raises((UnsupportedFormatError, CorruptStoreError, SchemaMismatchError), match=r"(meta\.json|\.npy)"):
        call()
    assert snapshot(folder) == before


def test_meta_json_with_an_integer_too_long_to_parse(new_folder):
    """Found by this battery (a bare ValueError 'Exceeds the limit (4300 digits)'), fixed in format.read_meta."""
    folder = new_folder()
    folder.mkdir()
    (folder / "meta.json").write_text('{"format": "memmap_replay", "version": "1.0", "n": ' + "9" * 5000 + "}")
    with raises(CorruptStoreError, match=r"meta\.json"):
        ReplayBuffer.from_folder(folder, read_only=True)


@pytest.mark.parametrize("overwrite", [
    pytest.param(False, id="no-overwrite"),
    pytest.param(True, id="overwrite"),
])
def test_creating_a_store_in_another_programs_folder_deletes_nothing(new_folder, overwrite):
    folder = new_folder()
    (folder / "meta").mkdir(parents=True)
    (folder / "steps").mkdir()
    (folder / "meta" / "thesis.tex").write_text("precious")
    (folder / "steps" / "notes.txt").write_text("precious")
    try:
        ReplayBuffer(folder, 2, 3, dict(x="float"), overwrite=overwrite).close()
    except ReplayError as error:
        assert "meta" in str(error) or "steps" in str(error)
    assert (folder / "meta" / "thesis.tex").read_text() == "precious"
    assert (folder / "steps" / "notes.txt").read_text() == "precious"


def test_overwrite_never_replaces_another_programs_meta_json(new_folder):
    folder = new_folder()
    folder.mkdir()
    (folder / "meta.json").write_text('{"name": "webapp", "version": "3.1"}')
    try:
        ReplayBuffer(folder, 2, 3, dict(x="float"), overwrite=True).close()
    except ReplayError as error:
        assert "meta.json" in str(error)
    assert json.loads((folder / "meta.json").read_text()) == {"name": "webapp", "version": "3.1"}


# ==== kinds 24-35: step values, ends, finals, meta values ===================================================

SCRATCH_FIELDS = dict(u8=("uint8", (2,)), i8="int8", i64="int64", u64="uint64", b="bool", f16="float16",
                      f32=("float32", (2,)), f64="float64", c128="complex128")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A ring store that accepted values may be committed to."""
    buf = ReplayBuffer(tmp_path_factory.mktemp("scratch") / "store", 4, 2, SCRATCH_FIELDS, circular=True)
    yield buf
    buf.close()


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
                return math.isfinite(value) and value.is_integer() and info.min <= value < 2.0 ** (info.bits - (t == "i"))
            return info.min <= int(value) <= info.max
        cast = target.type(value)
        if s in "iu":
            return bool(np.isfinite(cast)) and int(cast.real) == int(value)
        finite_in = np.isfinite(value)
        return bool(not finite_in or np.all(np.isfinite(cast)))


def legal_row(spec_shape: tuple, shape: tuple) -> bool:
    return shape in (spec_shape, ()) or (spec_shape == () and shape == (1,)) or (spec_shape == (1,) and shape == ())


NON_NUMERIC = [np.array(["a", "b"]), np.array([b"x"]), np.array([None, 1], dtype=object), np.array([1, 2], dtype=object),
               np.array(["2020-01-01"], dtype="M8[D]"), np.array([1], dtype="m8[s]"), np.zeros(2, dtype="V2"),
               np.array(3, dtype=object), np.zeros(2, dtype=[("a", "f4")])]
value_arrays = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(endianness="="),
                               hnp.floating_dtypes(endianness="=", sizes=(16, 32, 64)), hnp.boolean_dtypes(),
                               hnp.complex_number_dtypes(endianness="="),
                               st.sampled_from([np.dtype(">i4"), np.dtype(">f8")])),
               shape=st.one_of(st.sampled_from([(), (1,), (2,), (3,), (2, 1), (1, 2), (0,), (2, 2)]),
                               hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))),
    st.sampled_from(NON_NUMERIC),
)


def fitted(spec_shape: tuple, value: np.ndarray) -> np.ndarray:
    """``value`` as the row it must become (a scalar fills the row; a trailing 1 may be added or dropped)."""
    if value.shape == spec_shape:
        return value
    if spec_shape == () and value.shape == (1,):
        return value[0]
    return np.broadcast_to(value, spec_shape)


def wide_float_rounds(target: np.dtype, value: np.ndarray) -> bool:
    """An integer numpy deems 'safe' to cast to float64/complex128 that does not survive it (see the cases below)."""
    if value.dtype.kind not in "iu" or target.kind not in "fc" or not np.can_cast(value.dtype, target, "safe"):
        return False
    with np.errstate(all="ignore"):
        return any(int(target.type(x).real) != int(x) for x in value.reshape(-1).tolist())


@fast(200)
@given(name=st.sampled_from(sorted(SCRATCH_FIELDS)), value=value_arrays)
def test_any_array_is_stored_exactly_or_refused(scratch, name, value):
    spec = scratch.schema.fields[name]
    assume(not wide_float_rounds(spec.dtype, value))
    fits = (value.dtype.kind in "biufc" and legal_row(spec.shape, value.shape)
            and all(element_fits(spec.dtype, value.dtype, x) for x in value.reshape(-1)))
    step_values = {other: 0 for other in SCRATCH_FIELDS}
    step_values[name] = value
    if not fits:
        with unchanged(scratch):
            with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                with scratch.one_episode():
                    scratch.store(**step_values)
        return
    with scratch.one_episode():
        scratch.store(**step_values)
    stored = scratch.get_all_data()[name].numpy()[-1, 0]
    expected = fitted(spec.shape, value)
    if spec.dtype.kind in "iub":  # exactly the same numbers (compared as Python numbers: no rounding)
        assert np.asarray(stored).reshape(-1).tolist() == np.asarray(expected).reshape(-1).tolist()
    else:
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(stored, np.asarray(expected).astype(spec.dtype))


@pytest.mark.parametrize("field, value", [
    pytest.param("f64", np.array([2**53 + 1]), id="int64-2**53+1-into-float64"),
    pytest.param("f64", np.array([2**64 - 1], np.uint64), id="uint64-max-into-float64"),
    pytest.param("c128", np.array([2**63 - 1]), id="int64-max-into-complex128"),
])
def test_integers_a_wide_float_cannot_hold_are_refused(tmp_path, field, value):
    with ReplayBuffer(tmp_path / "wide", 2, 2, dict(f64="float64", c128="complex128")) as buf:
        with unchanged(buf), raises(InvalidDataError, match=rf"field '{field}' has dtype \w+ and cannot hold \d+ exactly"):
            buf.store_episode(**{field: value})


def test_float64_that_overflows_complex64_is_refused(tmp_path):
    with ReplayBuffer(tmp_path / "c64", 2, 3, dict(z="complex64")) as buf:
        with unchanged(buf), raises(InvalidDataError, match=r"field 'z' has dtype complex64 and 1e\+39 overflows"):
            buf.store_episode(z=np.array([1e39]))


def test_store_episode_with_a_billion_steps_is_refused_without_allocating(store):
    huge = {name: np.broadcast_to(values[0], (10**9, *values.shape[1:])) for name, values in episode(5, 1).items()}
    with unchanged(store), raises(InvalidDataError, match=r"between 1 and max_timesteps=6 steps \(got 1000000000\)"):
        store.store_episode(**huge)


@fast(30)
@given(lengths=st.lists(st.integers(0, 7), min_size=2, max_size=4), fields=st.permutations(sorted(FIELDS)))
def test_store_episode_with_ragged_time_axes(store, lengths, fields):
    assume(len(set(lengths)) > 1)
    arrays = {}
    for name, length in zip(fields, lengths):
        arrays[name] = np.zeros((length, *store.schema.fields[name].shape), store.schema.fields[name].dtype)
    with unchanged(store), raises(InvalidDataError, match=rf"(field '({'|'.join(fields)})' must have shape|"
                                                          r"between 1 and max_timesteps)"):
        store.store_episode(**arrays)


POISON = {"action": [np.nan, np.inf, -np.inf, 0.5, 2.0**31, -2.0**31 - 1], "count": [np.nan, 2.0**63, 1.5],
          "image": [256, -1, 0.5, np.nan], "done": [2, -1, 0.5, np.nan]}


@fast(40)
@given(data=st.data(), name=st.sampled_from(sorted(POISON)), length=st.integers(1, MAX_TIMESTEPS))
def test_one_bad_value_anywhere_in_an_episode_refuses_all_of_it(store, data, name, length):
    arrays = episode(6, length)
    spec = store.schema.fields[name]
    bad = data.draw(st.sampled_from(POISON[name]))
    values = arrays[name].astype(np.float64 if not isinstance(bad, int) else np.int64)
    where = tuple(data.draw(st.integers(0, n - 1)) for n in values.shape)
    values[where] = bad
    arrays[name] = values
    with unchanged(store), raises(InvalidDataError, match=rf"^field '{name}' has dtype {spec.dtype}"):
        store.store_episode(**arrays, task=6)


@fast(60)
@given(end=st.one_of(garbage, st.sampled_from(["Terminated", "TRUNCATED", "terminated ", "done", "timeout", "None"])),
       how=st.sampled_from(["store_episode", "set_episode_end", "episode.set_end", "end_episode", "advance_episode",
                            "commit_all"]))
def test_end_of_any_other_value_at_every_entry_point(store, end, how):
    assume(end is not None and not (isinstance(end, str) and end in ("terminated", "truncated")))
    assume(not isinstance(end, (np.ndarray, torch.Tensor)))  # arrays: see END_CASES
    match = r"^end must be 'terminated', 'truncated' or None \(got "
    with unchanged(store):
        if how == "store_episode":
            with raises(OptionError, match=match):
                store.store_episode(**episode(6, 2), end=end)
        elif how == "commit_all":
            writer = store.vector_writer(2)
            writer.store(**batch_step([6, 7], 0))
            with raises(OptionError, match=match):
                writer.commit_all(end)
            assert writer.lengths.tolist() == [1, 1]  # the episodes stay open
            writer.discard()
        else:
            with discarded(store) as handle:  # a refused end leaves the episode open: it is discarded here
                store.store(**step(6, 0))
                setter = {"set_episode_end": store.set_episode_end, "episode.set_end": handle.set_end,
                          "end_episode": store.end_episode, "advance_episode": store.advance_episode}[how]
                with raises(OptionError, match=match):
                    setter(end)
                store.store(**step(6, 1))  # still open


END_CASES = [
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end=np.array("terminated")), id="store_episode-0d-array"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end=np.array(["terminated"])), id="store_episode-1d-array"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=3), id="final-int"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=["obs"]), id="final-list"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final="obs"), id="final-str"),
    pytest.param(lambda b: b.store_episode(**episode(6, 2), end="truncated", final=np.zeros(3)), id="final-array"),
]


@pytest.mark.parametrize("call", END_CASES)
def test_end_and_final_of_the_wrong_type(store, call):
    with unchanged(store), raises((OptionError, InvalidDataError), match=r"^(end must be|final must be a dict)") as info:
        call(store)
    # end= is an option (OptionError); final= holds the data written (InvalidDataError)
    assert isinstance(info.value, OptionError) == str(info.value).startswith("end must be")


@pytest.mark.parametrize("final", [
    pytest.param(3, id="int"),
    pytest.param("obs", id="str"),
])
@pytest.mark.parametrize("how", ["set_episode_end", "episode.set_end", "end_episode"])
def test_final_that_is_not_a_dict_inside_an_episode(store, final, how):
    with unchanged(store):
        with discarded(store) as handle:  # one_episode opens the episode end_episode would commit
            store.store(**step(6, 0))
            setter = {"set_episode_end": store.set_episode_end, "episode.set_end": handle.set_end,
                      "end_episode": store.end_episode}[how]
            with raises(InvalidDataError, match=r"^final must be a dict"):
                setter("truncated", final=final)


final_rows = hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))


@fast(30)
@given(row=final_rows, name=st.sampled_from(["obs", "achieved", "image"]))
def test_final_rows_of_the_wrong_shape(store, row, name):
    spec = store.schema.fields[name]
    assume(not legal_row(spec.shape, row.shape))
    with unchanged(store), raises(InvalidDataError, match=rf"^field '{name}' must have shape"):
        store.store_episode(**episode(6, 2), end="truncated", final={name: row})
    with unchanged(store):
        with discarded(store) as handle:
            store.store(**step(6, 0))
            with raises(InvalidDataError, match=rf"^field '{name}' must have shape"):
                handle.set_end("truncated", final={name: row})


@fast(40)
@given(value=garbage, name=st.sampled_from(["task", "weight"]), how=st.sampled_from(["one_episode", "begin_episode", "batched_episode"]))
def test_meta_values_of_any_type(store, value, name, how):
    try:
        array = np.asarray(value)
    except Exception:
        array = None
    shapes = ((), (2,)) if how == "batched_episode" else ((), (1,))  # batched: one value for all, or one per env
    if array is not None and array.dtype.kind in "biufc" and array.shape in shapes:
        assume(not all(element_fits(store.schema.meta_fields[name].dtype, array.dtype, x) for x in array.reshape(-1)))
    call = {"one_episode": lambda: store.one_episode(**{name: value}).__enter__(),
            "begin_episode": lambda: store.begin_episode(**{name: value}),
            "batched_episode": lambda: store.batched_episode(2, **{name: value}).__enter__()}[how]
    with unchanged(store), raises(InvalidDataError, match=rf"^meta field '{name}' (must|has dtype)"):
        call()
    with raises(EpisodeStateError, match=r"store\(\) needs an open episode"):  # none was left open
        store.store(**step(6, 0))


# ==== kinds 25, 36-41: batched writers ======================================================================

flag_arrays = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.boolean_dtypes(), hnp.integer_dtypes(), hnp.floating_dtypes(), hnp.complex_number_dtypes()),
               shape=st.sampled_from([(), (1,), (2,), (3,), (2, 1), (1, 2), (2, 2), (0,)])),
    st.sampled_from([["True", "False"], [None, None], {0: True}, "yes", [True, None], torch.tensor([2, 0]), object()]),
)


def legal_flags(value) -> bool:
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return False
    if value.shape not in ((2,), (2, 1)):
        return False
    return all(element_fits(np.dtype(bool), value.dtype, x) for x in value.reshape(-1))


@fast(60)
@given(flag=st.sampled_from(["terminated", "truncated", "active"]), value=flag_arrays)
def test_vector_writer_flags_of_any_dtype_shape_and_value(store, flag, value):
    assume(not legal_flags(value))
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    with unchanged(store), raises(InvalidDataError, match=rf"^flag '{flag}' (must|has dtype)"):
        writer.store(**batch_step([6, 7], 1), **{flag: value})
    assert writer.lengths.tolist() == [1, 1]  # the refused step left nothing staged
    writer.discard()


batch_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.integer_dtypes(), hnp.floating_dtypes(), hnp.boolean_dtypes(), hnp.complex_number_dtypes()),
               shape=st.one_of(st.sampled_from([(), (2,), (1,), (3,), (2, 1), (2, 3), (2, 2), (3, 3), (1, 2), (2, 2, 4, 4),
                                                (2, 4, 4), (2, 2, 4, 4, 1)]), hnp.array_shapes(max_dims=4, max_side=4))),
    st.sampled_from(NON_NUMERIC),
)


@fast(60)
@given(name=st.sampled_from(sorted(FIELDS)), value=batch_values, how=st.sampled_from(["store_batch", "vector_writer"]))
def test_batched_step_values_of_any_dtype_and_shape(store, name, value, how):
    spec = store.schema.fields[name]
    legal = value.shape == (2, *spec.shape) or (spec.shape == () and value.shape == (2, 1)) \
        or (spec.shape == (1,) and value.shape == (2,))
    fits = value.dtype.kind in "biufc" and legal and all(element_fits(spec.dtype, value.dtype, x) for x in value.reshape(-1))
    assume(not fits)
    steps = {**batch_step([6, 7], 1), name: value}
    with unchanged(store):
        if how == "store_batch":
            with discarded_batch(store) as writer:
                store.store_batch(**batch_step([6, 7], 0))
                with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                    store.store_batch(**steps)
                assert writer.lengths.tolist() == [1, 1]
        else:
            writer = store.vector_writer(2)
            writer.store(**batch_step([6, 7], 0))
            with raises(InvalidDataError, match=rf"^field '{name}' (must|has dtype)"):
                writer.store(**steps, truncated=[True, True])
            assert writer.lengths.tolist() == [1, 1]
            writer.discard()


BAD_FINALS = [
    pytest.param(dict(obs=[None]), r"final 'obs' must have one entry per env \(2\) \(got 1\)", id="one-entry-for-two-envs"),
    pytest.param(dict(obs=[None, None, None]), r"final 'obs' must have one entry per env \(2\) \(got 3\)",
                 id="three-entries-for-two-envs"),
    pytest.param(dict(obs=[None, "x"]), r"field 'obs' must hold numbers", id="str-entry"),
    pytest.param(dict(obs=[None, np.zeros(4)]), r"field 'obs' must have shape \(3,\) \(got \(4,\)\)", id="entry-too-long"),
    pytest.param(dict(obs=np.array([None, np.zeros((3, 1))], dtype=object)), r"field 'obs' must have shape \(3,\)",
                 id="object-array-entry-2d"),
    pytest.param(dict(obs=np.zeros((3, 3))), r"field 'obs' must have shape \(2, 3\) \(got \(3, 3\)\)", id="rows-for-three-envs"),
    pytest.param(dict(action=[None, [0.5, 1.0]]), r"field 'action' has dtype int32 and cannot hold 0\.5", id="fraction-into-int"),
    pytest.param(dict(action=[[np.nan, 1.0], None]), r"field 'action' has dtype int32 and cannot hold nan", id="nan-into-int"),
    pytest.param(dict(task=[1, 2]), r"unknown field \['task'\]", id="meta-field"),
    pytest.param("obs", r"final must be a dict of field -> values per env \(got str\)", id="str"),
    pytest.param([None, None], r"final must be a dict of field -> values per env \(got list\)", id="list"),
]


@pytest.mark.parametrize("final, match", BAD_FINALS)
def test_vector_writer_gymnasium_finals_of_the_wrong_form(store, final, match):
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    with unchanged(store), raises(InvalidDataError, match=match):
        writer.store(**batch_step([6, 7], 1), truncated=[True, True], final=final)
    assert writer.lengths.tolist() == [1, 1]
    writer.discard()


def test_vector_writer_none_final_for_an_env_that_ended(fresh):
    writer = fresh.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    final = dict(obs=np.array([None, np.full(3, 7.0, np.float32)], dtype=object))
    try:
        writer.store(**batch_step([6, 7], 1), truncated=[True, True], final=final)
    except InvalidDataError as error:
        assert "final" in str(error) and "obs" in str(error)
        return
    table = fresh.episode_store.live_table()
    assert table.final.tolist()[-2:] == [False, True], "env 0 ended without a final observation"


@pytest.mark.parametrize("n", [
    pytest.param(2**48, id="2**48"),
    pytest.param(2**62, id="2**62"),
])
@pytest.mark.parametrize("how", ["vector_writer", "batched_episode"])
def test_huge_num_envs(store, n, how):
    call = store.vector_writer if how == "vector_writer" else lambda k: store.batched_episode(k).__enter__()
    with unchanged(store), raises(OptionError, match=r"num_envs"):
        call(n)


@fast(40)
@given(envs=st.one_of(garbage, st.integers(-2**70, 2**70), st.lists(st.integers(-3, 5), min_size=1, max_size=3)))
def test_commit_all_and_discard_envs_of_any_value(store, envs):
    assume(envs is not None)  # None: every env
    array = None
    try:
        array = np.asarray(envs)
    except Exception:
        pass
    if array is not None and array.dtype.kind in "iu" and array.ndim <= 1:
        assume(array.size and (array.min() < 0 or array.max() >= 2) and array.max() < 2**63)
    writer = store.vector_writer(2)
    writer.store(**batch_step([6, 7], 0))
    for call in (writer.commit_all, writer.discard):
        with unchanged(store), raises(OptionError, match=r"^envs must (be an int or a 1-d array of ints|be in \[0, 2\))"):
            call(envs=envs)
        assert writer.lengths.tolist() == [1, 1]
    writer.discard()


@fast(30)
@given(value=st.one_of(garbage, hnp.arrays(np.float64, st.sampled_from([(3,), (1, 2), (2, 2), (2, 1, 1)]))),
       name=st.sampled_from(["task", "weight"]))
def test_vector_writer_set_meta_of_any_value(store, value, name):
    array = None
    try:
        array = np.asarray(value)
    except Exception:
        pass
    dtype = store.schema.meta_fields[name].dtype
    if array is not None and array.dtype.kind in "biuf" and array.shape in ((), (2,)):
        assume(not all(element_fits(dtype, array.dtype, x) for x in array.reshape(-1)))
    writer = store.vector_writer(2, task=3)
    with unchanged(store), raises(InvalidDataError, match=rf"^meta field '{name}' (must|has dtype)"):
        writer.set_meta(**{name: value})
    assert writer.meta["task"].tolist() == [3, 3]  # unchanged


# ==== kinds 42-45: update ===================================================================================

update_indices = st.one_of(
    st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3), st.complex_numbers(max_magnitude=9),
    st.lists(st.integers(-3, 12), min_size=1, max_size=4), st.lists(st.floats(-1, 9), min_size=1, max_size=3),
    st.lists(st.booleans(), min_size=1, max_size=3), st.sampled_from([None, [None], [[0]], [[0, 1]], np.array([[1]]),
                                                                      object(), {0}, {0: 1}, [1, "a"], np.array([0.0]), torch.tensor([0.5])]),
    st.integers(2**63, 2**70).map(lambda n: [n]),
)


def legal_indices(indices, live) -> bool:
    if indices is None:
        return True
    try:
        array = np.asarray(indices)
    except Exception:
        return False
    if array.dtype.kind not in "iu" or array.ndim > 1:
        return False
    array = np.atleast_1d(array)
    return array.size > 0 and all(int(i) in live for i in array.tolist())


@fast(120)
@given(indices=update_indices)
def test_update_indices_of_every_kind(store, indices):
    live = set(store.live_episodes.tolist())
    assume(not legal_indices(indices, live))
    assume(not (isinstance(indices, list) and indices and type(indices[0]) is int and indices[0] >= 2**63))  # a case below
    with unchanged(store), raises(OptionError, match=r"^episode (indices must be (an int or a 1-d array of ints|in \[0, 8\))"
                                                          r"|slot \d+ holds no live episode)"):
        store.update(indices, reward=99.0)


UPDATE_CASES = [
    pytest.param(slice(None, None, 0), r"episode indices.*slice", id="slice-step-0"),
    pytest.param(slice("a"), r"episode indices.*slice", id="slice-str-bound"),
    pytest.param(np.array([2**63], np.uint64), r"episode indices must be in \[0, 8\) \(got 9223372036854775808",
                 id="uint64-2**63"),
    pytest.param([2**63], r"episode indices must be in \[0, 8\) \(got 9223372036854775808", id="int-2**63"),
    pytest.param([], r"update needs at least one episode|episode indices .*empty", id="empty-list"),
]


@pytest.mark.parametrize("indices, match", UPDATE_CASES)
def test_update_indices_the_library_mishandles(store, indices, match):
    with unchanged(store), raises(OptionError, match=match):
        store.update(indices, reward=99.0)


@fast(50)
@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6), name=st.sampled_from(["reward", "obs", "task", "weight"]))
def test_update_values_of_any_shape(store, shape, name):
    indices = [0, 1]  # slots 0 (3 steps) and 1 (5 steps)
    spec = store.schema.fields.get(name) or store.schema.meta_fields[name]
    if name in store.schema.fields:  # one value for every step, or (episodes, T <= shortest, *shape)
        legal = shape in (spec.shape, ()) or (len(shape) == 2 + len(spec.shape) and shape[0] == 2 and shape[1] <= 3
                                               and shape[2:] == spec.shape)
    else:  # one value for all, or one per episode
        legal = shape in ((), (2,))
    assume(not legal)
    with unchanged(store), raises(InvalidDataError, match=rf"^(meta )?field '{name}'.* (must have shape|has T=\d+ steps)"):
        store.update(indices, **{name: np.zeros(shape)})


# ==== kinds 46-48: get_all_data =============================================================================


@fast(40)
@given(names=st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), min_size=1, max_size=3),
       where=st.sampled_from(["fields", "meta_fields"]))
def test_get_all_data_with_unknown_names(store, names, where):
    allowed = set(FIELDS) if where == "fields" else set(META) | {"episode_lens"}
    assume(any(name not in allowed for name in names))
    with unchanged(store), raises(OptionError, match=r"^unknown (meta )?field "):
        store.get_all_data(**{where: tuple(names)})


@pytest.mark.parametrize("kwargs", [
    pytest.param(dict(fields="obs"), id="fields-one-str"),
    pytest.param(dict(meta_fields="task"), id="meta_fields-one-str"),
    pytest.param(dict(fields=3), id="fields-int"),
    pytest.param(dict(meta_fields=5.0), id="meta_fields-float"),
])
def test_get_all_data_names_given_in_the_wrong_form(store, kwargs):
    with unchanged(store):
        try:
            data = store.get_all_data(**kwargs)
        except InvalidDataError as error:
            assert re.search(r"must be a name or a tuple of names", str(error)), str(error)
            return
        name = next(iter(kwargs.values()))
        assert isinstance(name, str) and set(data) == {name}  # one name as a str, as the views take it


@pytest.mark.parametrize("device", [
    pytest.param(torch.float64, id="a-dtype"),
    pytest.param(3.5, id="float"),
    pytest.param("nope", id="unknown-str"),
    pytest.param("cuda:0" if not torch.cuda.is_available() else "cuda:99", id="absent-accelerator"),
])
def test_get_all_data_device_garbage(store, device):
    with unchanged(store), raises(OptionError, match=r"device"):
        store.get_all_data(device=device)


# ==== kinds 49-57: dataset / dataloader options =============================================================


def positive_at_most(limit):
    return lambda value: is_int(value) and 1 <= value <= limit


def valid_gamma(value) -> bool:
    return value is None or (is_real(value) and 0.0 <= float(value) <= 1.0)


def valid_names_of(known):
    def check(value):
        if isinstance(value, str):
            return value in known
        return isinstance(value, (tuple, list)) and all(isinstance(n, str) and n in known for n in value)
    return check


DATASET_OPTIONS = {
    # option: (other options, valid(value), the start of the message)
    "n_steps": ({}, lambda v: v is None or positive_at_most(MAX_TIMESTEPS)(v), r"n_steps must be "),
    "window": ({}, lambda v: v is None or positive_at_most(5)(v), r"(window must be |the WindowView has no items)"),
    "frame_stack": (dict(timestep_level=True), positive_at_most(MAX_TIMESTEPS), r"frame_stack must be "),
    "timestep_level": ({}, is_bool, r"timestep_level must be True or False"),
    "return_mask": ({}, is_bool, r"return_mask must be True or False"),
    "return_indices": ({}, is_bool, r"return_indices must be True or False"),
    "include_metadata": ({}, is_bool, r"include_metadata must be True or False"),
    "allow_partial": (dict(window=2), is_bool, r"allow_partial must be True or False"),
    "time_major": (dict(window=2), is_bool, r"time_major must be True or False"),
    "gamma": (dict(n_steps=2), valid_gamma, r"gamma must be a finite number in \[0, 1\]"),
    "stack_pad": (dict(timestep_level=True, frame_stack=2), lambda v: isinstance(v, str) and v in ("repeat", "zero"),
                  r"stack_pad must be one of"),
    "stack_fields": (dict(timestep_level=True, frame_stack=2), lambda v: v is None or valid_names_of(FIELDS)(v),
                     r"(fields must be a name or a tuple of names|unknown field|frame_stack needs stack_fields)"),
    "fields": ({}, lambda v: v is None or valid_names_of(FIELDS)(v), r"(fields must be a name|unknown field)"),
    "meta_fields": ({}, lambda v: v is None or valid_names_of(META)(v), r"(meta fields must be a name|unknown meta field)"),
    "current_fields": (dict(n_steps=2), lambda v: v is None or valid_names_of(FIELDS)(v), r"(fields must be a name|unknown field)"),
    "next_fields": (dict(n_steps=2), lambda v: v is None or valid_names_of(FIELDS)(v), r"(fields must be a name|unknown field)"),
    "reward_field": (dict(n_steps=2, gamma=0.9), lambda v: isinstance(v, str) and v in ("reward", "done", "count"),
                     r"gamma needs a scalar reward field"),
    "fieldname_map": ({}, lambda v: v is None or v == {}, r"(fieldname_map (must|renames)|would output \[.*\] twice)"),
    "filter_fields": (dict(timestep_level=True), lambda v: v is None or v == {},
                      r"(filter_fields must be a dict|filter_fields takes scalar|filter_fields value|unknown field|has no items)"),
    "filter_meta": ({}, lambda v: v is None or v == {}, r"(filter_meta must be a dict|filter_meta value|unknown meta field|has no items)"),
}
option_values = st.one_of(garbage, st.integers(-3, 9), st.sampled_from(
    [2**70, np.int64(0), np.float64(0.5), "repeat ", "obs", ("obs", 3), ["nope"], ("obs", "obs2"), {"obs": 1},
     {"obs": ""}, {"nope": "x"}, {"obs": "action"}, {"task": "a"}, {"task": [1, 2]}, {"reward": "a"}, {"obs": 1},
     {"reward": None}, {3: 1}, {"task": 99}, {"reward": 12345.0}]))


def falsy_non_dict(value) -> bool:
    from collections.abc import Mapping
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return True
    try:
        return not isinstance(value, Mapping) and not value
    except Exception:
        return True


@fast(250)
@given(option=st.sampled_from(sorted(DATASET_OPTIONS)), value=option_values)
def test_every_dataset_option_refuses_values_of_the_wrong_type_or_range(store, option, value):
    others, valid, match = DATASET_OPTIONS[option]
    assume(not valid(value))
    # the cases below: arrays or falsy non-dicts as filters, arrays for `in` checks, unhashable field names,
    # non-str filter keys
    if option in ("filter_meta", "filter_fields"):
        assume(not falsy_non_dict(value))
        assume(not (isinstance(value, dict) and any(not isinstance(key, str) for key in value)))
    if option == "stack_pad":
        assume(not isinstance(value, (np.ndarray, torch.Tensor)))
    if option == "reward_field":
        assume(hashable(value))
    with unchanged(store), raises(OptionError, match=match):
        store.dataset(**others, **{option: value})


FILTER_CASES = [
    pytest.param(dict(filter_meta={3: 1}), id="filter_meta-int-key"),
    pytest.param(dict(timestep_level=True, filter_fields={3: 1}), id="filter_fields-int-key"),
    pytest.param(dict(n_steps=2, gamma=0.9, reward_field=["reward"]), id="reward_field-list"),
    pytest.param(dict(filter_meta=np.array([1, 2])), id="filter_meta-array"),
    pytest.param(dict(filter_meta=0), id="filter_meta-0"),
    pytest.param(dict(timestep_level=True, filter_fields=""), id="filter_fields-empty-str"),
    pytest.param(dict(timestep_level=True, frame_stack=2, stack_pad=np.array(["repeat", "zero"])), id="stack_pad-array"),
]


@pytest.mark.parametrize("kwargs", FILTER_CASES)
def test_dataset_options_the_library_mishandles(store, kwargs):
    with unchanged(store), raises(OptionError, match=r"^(filter_meta|filter_fields|stack_pad|gamma needs)"):
        store.dataset(**kwargs)


@fast(30)
@given(name=st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True),
       kind=st.sampled_from([{}, dict(timestep_level=True), dict(window=2), dict(n_steps=2)]))
def test_dataset_unknown_keywords(store, name, kind):
    known = {"n_steps", "timestep_level", "window", "fields", "meta_fields", "filter_meta", "fieldname_map",
             "return_indices", "return_mask", "filter_fields", "frame_stack", "stack_fields", "stack_pad",
             "allow_partial", "time_major", "current_fields", "next_fields", "sequence_fields", "gamma",
             "reward_field", "include_metadata", "hindsight"}
    assume(name not in known)
    with unchanged(store), raises(OptionError, match=rf"^unknown keyword \['{name}'\] for a \w+View; it takes \["):
        store.dataset(**kind, **{name: 1})


TRAJECTORY_OUTPUTS = set(FIELDS) | set(META) | {"_lens"}


def valid_named_tuple(value) -> bool:
    if value is None:
        return True
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not all(isinstance(name, str) for name in names):
        return False
    stripped = [name.lstrip("_") for name in names]
    return (len(set(stripped)) == len(stripped) and all(name.isidentifier() for name in stripped)
            and all(name in TRAJECTORY_OUTPUTS for name in names))


LOADER_OPTIONS = {
    "batch_size": (lambda v: is_int(v) and v >= 1, r"batch_size must be a positive int"),
    "shuffle": (is_bool, r"shuffle must be True or False"),
    "drop_last": (is_bool, r"drop_last must be True or False"),
    "seed": (lambda v: v is None or is_int(v), r"seed must be an int or None"),
    "num_workers": (lambda v: is_int(v) and v >= 0, r"num_workers must be an int >= 0"),
    "to_named_tuple": (lambda v: valid_named_tuple(v),
                       r"to_named_tuple (must be a tuple of names|names must be distinct identifiers|names \[.*\] are not in the batch)"),
    "dataset_kwargs": (lambda v: v is None or v == {}, r"(dataset_kwargs must be a dict|unknown keyword)"),
}


@fast(80)
@given(option=st.sampled_from(sorted(LOADER_OPTIONS)), value=st.one_of(garbage, st.sampled_from(
    [("obs", "obs"), ("a b",), ("nope",), ("_lens", "lens"), ("obs", 3), "1abc", ("_",), {"bogus": 1}, -1, 0, 2**70])))
def test_every_dataloader_option_refuses_values_of_the_wrong_type(store, option, value):
    valid, match = LOADER_OPTIONS[option]
    assume(not valid(value))
    if option == "to_named_tuple":
        names = (value,) if isinstance(value, str) else value
        if isinstance(names, (tuple, list)) and all(isinstance(n, str) for n in names):
            assume(not any(keyword.iskeyword(n.lstrip("_")) for n in names))  # a case below
    kwargs = {"batch_size": 2, option: value} if option != "batch_size" else {"batch_size": value}
    batch_size = kwargs.pop("batch_size")
    with unchanged(store), raises(OptionError, match=match):
        next(iter(store.dataloader(batch_size, **kwargs)))


LOADER_CASES = [
    pytest.param(dict(to_named_tuple=("class",)), r"to_named_tuple", id="named-tuple-keyword"),
    pytest.param(dict(to_named_tuple=("_None",)), r"to_named_tuple", id="named-tuple-keyword-after-underscore"),
    pytest.param(dict(dataset=3), r"dataset must be", id="dataset-not-a-view"),
    pytest.param(dict(device="nope"), r"device", id="device-unknown"),
    pytest.param(dict(device=3.5), r"device", id="device-float"),
    pytest.param(dict(non_blocking="no"), r"non_blocking must be True or False", id="non_blocking-str"),
    pytest.param(dict(shuffle=True, generator=3), r"generator", id="generator-int"),
]


@pytest.mark.parametrize("kwargs, match", LOADER_CASES)
def test_dataloader_options_the_library_mishandles(store, kwargs, match):
    with unchanged(store), raises(OptionError, match=match):
        next(iter(store.dataloader(2, **kwargs)))


@pytest.mark.parametrize("kwargs, match", [
    (dict(timeout=-1), r"timeout option should be non-negative"),
    (dict(prefetch_factor=2), r"prefetch_factor option could only be specified in multiprocessing"),
    (dict(persistent_workers=True), r"persistent_workers option needs num_workers > 0"),
    (dict(num_workers=1, multiprocessing_context="nope"), r"multiprocessing_context option should specify a valid start method"),
])
def test_torch_dataloader_options_get_torchs_own_errors(store, kwargs, match):
    """README: DataLoader's own options are passed through: torch checks them (ValueError naming the option)."""
    with unchanged(store), pytest.raises(ValueError, match=match):
        store.dataloader(2, **kwargs)


# ==== kinds 58-66: view classes and indexing ================================================================

VIEW_KINDS = {"trajectory": {}, "timestep": dict(timestep_level=True), "window": dict(window=2),
              "nstep": dict(n_steps=2, gamma=0.9), "stacked": dict(timestep_level=True, frame_stack=3)}


@pytest.fixture(scope="module")
def views(store):
    return {name: store.dataset(**options) for name, options in VIEW_KINDS.items()}


out_of_range_items = st.one_of(
    st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=4),
    hnp.arrays(np.int64, st.sampled_from([(), (1, 1), (2, 3), (1, 2, 1)]), elements=st.integers(-3, 3)),
    st.integers(-5, 5),
)


@fast(60)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), items=out_of_range_items)
def test_view_getitems_refuses_out_of_range_and_non_1d_items(store, views, kind, items):
    view = views[kind]
    array = np.asarray(items)
    size = len(view)
    assume(array.ndim != 1 or array.min() < -size or array.max() >= size)
    with unchanged(store), pytest.raises(IndexError, match=r"^item indices must (be a 1-d array|be in \[0, \d+\))"):
        view.__getitems__(items)


GETITEMS_CASES = [
    pytest.param([0.5], id="float"),
    pytest.param(np.array([1.9]), id="float-array"),
    pytest.param([True, False], id="bools"),
    pytest.param(["0"], id="numeric-str"),
    pytest.param([None], id="None"),
    pytest.param(None, id="None-batch"),
    pytest.param(slice(0, 2), id="slice"),
    pytest.param([float("nan")], id="nan"),
    pytest.param([2**63], id="int-2**63"),
    pytest.param(np.array([2**63], np.uint64), id="uint64-2**63"),
    pytest.param([1 + 0j], id="complex"),
]


@pytest.mark.parametrize("items", GETITEMS_CASES)
def test_view_getitems_refuses_indices_that_are_not_ints(store, views, items):
    with unchanged(store), pytest.raises((IndexError, TypeError), match=r"^item ind(ex|ices) must be .*(int|\[0, \d+\)).*"
                                                                        r"\(got (?!-)"):
        views["timestep"].__getitems__(items)


@fast(50)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), item=st.one_of(
    st.floats(), st.text(max_size=2), st.none(), st.lists(st.integers(0, 2), max_size=2), st.sampled_from(
        [slice(0, 1), np.float64(0), torch.tensor(0), np.array([0]), (0,), {0: 1}, 1j, b"0"])))
def test_view_getitem_takes_only_an_int(store, views, kind, item):
    with unchanged(store), pytest.raises(TypeError, match=rf"^a view is indexed by an int \(got {re.escape(type(item).__name__)}\)"):
        views[kind][item]


@fast(30)
@given(kind=st.sampled_from(sorted(VIEW_KINDS)), offset=st.integers(0, 2**62), side=st.sampled_from([-1, 1]))
def test_view_getitem_out_of_range(store, views, kind, offset, side):
    view = views[kind]
    item = len(view) + offset if side > 0 else -len(view) - 1 - offset
    with unchanged(store), pytest.raises(IndexError, match=rf"^item indices must be in \[0, {len(view)}\)"):
        view[item]


@pytest.mark.parametrize("item", [
    pytest.param(2**63, id="2**63"),
    pytest.param(np.uint64(2**63), id="np.uint64-2**63"),
    pytest.param(2**70, id="2**70"),
])
def test_view_getitem_beyond_int64(store, views, item):
    with unchanged(store), pytest.raises(IndexError, match=r"^item indices must be in \[0, \d+\)"):
        views["timestep"][item]


SAMPLE_CASES = [
    pytest.param(Sample(np.array([-1])), r"keys must be >= 0", id="negative-key"),
    pytest.param(Sample(np.array([0.5])), r"keys must be", id="float-keys"),
    pytest.param(Sample(np.array(["a"])), r"keys must be", id="str-keys"),
    pytest.param(Sample(np.array([0], np.uint64)), r"keys must be", id="uint64-keys"),
    pytest.param(Sample(np.array([0, 1]), np.ones(3, np.float32)), r"weights", id="weights-too-many"),
    pytest.param(Sample(np.array([0]), "x"), r"weights", id="weights-str"),
    pytest.param(Sample(np.array([10**9])), r"^(?!.*filter_meta).*(never|not in the buffer|does not hold)", id="never-existed"),
    pytest.param(Sample(np.array([[0]])), r"keys must be", id="2-d-keys"),
    pytest.param(Sample(np.array([True])), r"keys must be", id="bool-keys"),
]


@pytest.mark.parametrize("sample, match", SAMPLE_CASES)
def test_view_refuses_hostile_sample_objects(store, views, sample, match):
    with unchanged(store), raises((InvalidDataError, SampleExpiredError), match=match):
        batch = views["timestep"].__getitems__(sample)
        assert len(batch["_key"]) == len(batch.get("_weight", batch["_key"]))


@pytest.mark.parametrize("cls", ["TrajectoryView", "TimestepView", "HindsightView"])
@pytest.mark.parametrize("given_store", [
    pytest.param("buffer", id="a-ReplayBuffer"),
    pytest.param("path", id="a-path"),
    pytest.param("None", id="None"),
])
def test_view_classes_given_something_else_than_a_store(store, cls, given_store):
    thing = {"buffer": store, "path": str(store.folder), "None": None}[given_store]
    options = dict(goal_field="goal", achieved_field="achieved", reward_fn=reward_of_achievement) if cls == "HindsightView" else {}
    with unchanged(store), raises(OptionError, match=r"(EpisodeStore|store|dataset)"):
        getattr(memmap_replay, cls)(thing, **options)


@fast(40)
@given(batch_size=garbage, shuffle=st.one_of(st.booleans(), garbage), seed=st.one_of(st.none(), st.integers(), garbage))
def test_batch_index_sampler_options(batch_size, shuffle, seed):
    ok = (is_int(batch_size) and batch_size >= 1, is_bool(shuffle), seed is None or is_int(seed))
    assume(not all(ok))
    with raises(OptionError, match=r"^(batch_size must be a positive int|shuffle must be True or False|"
                                        r"seed must be an int or None)"):
        memmap_replay.BatchIndexSampler(10, batch_size, shuffle=shuffle, seed=seed)


@pytest.mark.parametrize("size", [
    pytest.param(-1, id="negative"),
    pytest.param("10", id="str"),
    pytest.param(10.5, id="float"),
    pytest.param(None, id="None"),
    pytest.param(2**70, id="2**70"),
])
def test_batch_index_sampler_size(size):
    with raises(OptionError, match=r"^size must be an int"):
        sampler = memmap_replay.BatchIndexSampler(size, 2, shuffle=True)
        len(sampler)
        list(itertools.islice(sampler, 1))


# ==== kinds 67-79: samplers =================================================================================


@fast(30)
@given(kind=st.one_of(st.text(max_size=12), garbage))
def test_sampler_kind_of_any_value(store, kind):
    assume(kind not in ("uniform", "prioritized", "sequence") if isinstance(kind, str) else True)
    with unchanged(store), raises(OptionError, match=r"^kind must be one of \['prioritized', 'sequence', 'uniform'\] \(got "):
        store.sampler(kind)


def valid_unit(low=0.0, high=1.0):
    return lambda v: is_real(v) and math.isfinite(float(v)) and low <= float(v) and (high is None or float(v) <= high)


SAMPLER_OPTIONS = {
    # (kind, other options, valid(value), message)
    "seed": ("uniform", {}, lambda v: v is None or (is_int(v) and v >= 0), r"seed must be an int >= 0 or None"),
    "replacement": ("uniform", {}, is_bool, r"replacement must be True or False"),
    "follow": ("uniform", {}, lambda v: is_bool(v) or (isinstance(v, str) and v == "disk"), r"follow must be"),
    "rank": ("uniform", dict(world_size=2), lambda v: v is None or (is_int(v) and 0 <= v < 2), r"rank must be"),
    "world_size": ("uniform", {}, lambda v: v is None or (is_int(v) and v >= 1), r"(world_size must be|rank must be below)"),
    "alpha": ("prioritized", dict(persist=False), valid_unit(high=None), r"alpha must be a finite number >= 0\.0"),
    "beta": ("prioritized", dict(persist=False), valid_unit(), r"beta must be a finite number in \[0\.0, 1\.0\]"),
    "beta_final": ("prioritized", dict(persist=False), valid_unit(), r"beta_final must be a finite number in \[0\.0, 1\.0\]"),
    "beta_steps": ("prioritized", dict(persist=False), lambda v: is_int(v) and v >= 0, r"beta_steps must be an int >= 0"),
    "persist": ("prioritized", {}, lambda v: v is None or is_bool(v), r"persist must be True or False"),
    "eta": ("sequence", dict(window=2, persist=False), valid_unit(), r"eta must be a finite number in \[0\.0, 1\.0\]"),
}


@fast(200)
@given(option=st.sampled_from(sorted(SAMPLER_OPTIONS)), value=st.one_of(garbage, st.sampled_from(
    [-1, 2, 1.5, np.float64(np.nan), np.inf, 2**70, "0.5", np.int64(-1), np.float32(2.0)])))
def test_every_sampler_option_refuses_values_of_the_wrong_type_or_range(store, option, value):
    kind, others, valid, match = SAMPLER_OPTIONS[option]
    assume(not valid(value))
    if option == "follow":  # cases below: arrays and tensors
        assume(not isinstance(value, (np.ndarray, torch.Tensor)))
    if option in ("alpha", "beta", "beta_final", "eta"):  # a case below: ints beyond int64
        assume(not (isinstance(value, int) and not -2**63 <= value < 2**64))
    with unchanged(store), raises(OptionError, match=match):
        store.sampler(kind, **others, **{option: value})


def valid_priorities_name(name) -> bool:
    if name is None:  # the default: the view's kind
        return True
    return isinstance(name, str) and bool(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)) and bool(set(name) - {"_", "-"})


@fast(50)
@given(name=st.one_of(st.sampled_from([n for n in PATH_TRICKS if n.isascii()] + ["-", "--", "_", "a-b", "A_1", "x" * 64]),
                      st.text(alphabet=st.characters(codec="ascii"), max_size=70), st.integers(), st.none()))
def test_priorities_name_of_any_ascii_text_stays_inside_priorities(store, name):
    if not valid_priorities_name(name):
        with unchanged(store), raises(OptionError, match=r"^name must be letters, digits, '_' or '-' \(at most 64\), "
                                                              rf"a file name \(got {re.escape(repr(name))}\)"):
            store.sampler("prioritized", name=name)
        return
    meta_bytes, paths, contents = fingerprint(store.folder)
    sampler = store.sampler("prioritized", name=name)
    try:
        after = fingerprint(store.folder)
        assert after[0] == meta_bytes and after[2] == contents
        added = set(after[1]) - set(paths)
        stem = sampler.name
        assert added <= {"priorities", *(f"priorities/{stem}{suffix}" for suffix in (".npy", ".owner.npy", ".json", ".lock"))}
    finally:
        sampler.close()


def test_priorities_name_too_long_for_the_file_system(fresh):
    with unchanged(fresh), raises(OptionError, match=r"^name must be"):
        fresh.sampler("prioritized", name="𝔞" * 64)


@fast(60)
@given(which=st.sampled_from(["uniform", "epoch", "prioritized", "sequence"]),
       call=st.sampled_from(["sample", "batch", "batches", "dataloader", "buffer.sample"]),
       size=st.one_of(garbage, st.integers(-2**70, 0)))
def test_sampler_batch_sizes_of_any_value(store, samplers, which, call, size):
    assume(not (is_int(size) and size >= 1))
    sampler = samplers[which]
    before = sampler.state_dict()
    action = {"sample": lambda: sampler.sample(size), "batch": lambda: sampler.batch(size),
              "batches": lambda: sampler.batches(size), "dataloader": lambda: sampler.dataloader(size),
              "buffer.sample": lambda: store.sample(size, sampler=sampler)}[call]
    with unchanged(store), raises(OptionError, match=rf"^batch_size must be a positive int \(got {re.escape(repr(size))}\)"):
        action()
    assert sampler.state_dict() == before


@fast(40)
@given(which=st.sampled_from(["uniform", "epoch", "prioritized"]), num_batches=garbage,
       drop_last=st.one_of(st.booleans(), garbage))
def test_sampler_batches_counts_and_flags(store, samplers, which, num_batches, drop_last):
    num_ok = num_batches is None or (is_int(num_batches) and num_batches >= 0)
    assume(not num_ok or not is_bool(drop_last))
    for call in (lambda: samplers[which].batches(2, num_batches, drop_last=drop_last),
                 lambda: samplers[which].dataloader(2, num_batches, drop_last=drop_last)):
        with unchanged(store), raises(OptionError, match=r"^(num_batches must be an int >= 0 or None|drop_last must be True or False)"):
            call()


@pytest.mark.parametrize("option, value", [
    pytest.param("alpha", 2**70, id="alpha-2**70"), pytest.param("beta", -2**63 - 1, id="beta--2**63-1"),
    pytest.param("eta", 2**64, id="eta-2**64"),
])
def test_sampler_numbers_beyond_int64(store, option, value):
    options = dict(window=2) if option == "eta" else {}
    with unchanged(store), raises(OptionError, match=rf"^{option} must be a finite number .*an int beyond int64"):
        store.sampler("sequence" if option == "eta" else "prioritized", persist=False, **options, **{option: value})


@pytest.mark.parametrize("follow", [
    pytest.param(np.array([True, False]), id="array"),
    pytest.param(torch.tensor(1.0), id="tensor"),
    pytest.param(np.int64(1), id="np.int64"),
])
def test_sampler_follow_of_array_types(store, follow):
    with unchanged(store), raises(OptionError, match=r"^follow must be True, False or 'disk'"):
        store.sampler("uniform", follow=follow)


def test_sampler_dataloader_num_workers_negative(store, samplers):
    with unchanged(store), raises(OptionError, match=r"^num_workers must be an int >= 0"):
        samplers["uniform"].dataloader(2, num_batches=1, num_workers=-1)


def tree_state(sampler):
    return sampler.tree.leaves.copy(), sampler.max_priority, sampler.dropped, sampler.state_dict()


def assert_same_tree(before, after):
    np.testing.assert_array_equal(before[0], after[0])
    assert before[1:] == after[1:]


priority_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.floating_dtypes(sizes=(16, 32, 64)), hnp.integer_dtypes(), hnp.complex_number_dtypes(),
                               st.just(np.dtype("U2")), st.just(np.dtype("M8[s]"))),
               shape=st.sampled_from([(4,), (3,), (5,), (), (4, 1), (1, 4), (0,)])),
    st.sampled_from([None, "abc", [None] * 4, [1, "a", 2, 3], {"a": 1}, object()]),
)


@fast(80)
@given(which=st.sampled_from(["prioritized", "nstep", "sequence"]), priorities=priority_values)
def test_update_priorities_refuses_bad_priorities_and_changes_nothing(store, samplers, which, priorities):
    sampler = samplers[which]
    keys = sampler.sample(4).keys
    try:
        array = np.asarray(priorities)
    except Exception:
        array = None
    if array is not None and array.dtype.kind in "biuf" and array.shape == (4,):
        with np.errstate(all="ignore"):
            assume(not (np.isfinite(array).all() and (array >= 0).all()))
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(step )?priorities must (be|be finite and >= 0)"):
        sampler.update_priorities(keys, priorities)
    assert_same_tree(before, tree_state(sampler))


key_values = st.one_of(
    hnp.arrays(dtype=st.one_of(hnp.floating_dtypes(), hnp.boolean_dtypes(), st.just(np.dtype("U2"))), shape=st.just((4,))),
    hnp.arrays(np.int64, st.sampled_from([(1, 4), (4, 1), ()]), elements=st.integers(0, 10)),
    hnp.arrays(np.int64, (4,), elements=st.integers(-2**62, -1)),
    st.sampled_from([None, "abcd", [None] * 4, [0.5] * 4, object()]),
)


@fast(50)
@given(which=st.sampled_from(["prioritized", "nstep", "sequence"]), keys=key_values)
def test_update_priorities_refuses_bad_keys_and_changes_nothing(store, samplers, which, keys):
    sampler = samplers[which]
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(keys must be (a 1-d int array|>= 0)|priorities must be)"):
        sampler.update_priorities(keys, np.ones(4))
    assert_same_tree(before, tree_state(sampler))


@fast(40)
@given(shape=st.sampled_from([(4, 3), (4, 1), (3, 2), (2, 4), (4, 2, 1)]), mask_shape=st.sampled_from([None, (4, 2), (2, 4), (4, 3)]),
       mask_dtype=st.sampled_from([bool, np.int8, np.float32]), first=st.booleans())
def test_sequence_step_priorities_and_masks_of_the_wrong_shape(store, samplers, shape, mask_shape, mask_dtype, first):
    sampler = samplers["sequence"]
    keys = sampler.sample(4).keys
    mask = None
    if mask_shape is not None:
        mask = np.ones(mask_shape, dtype=mask_dtype)
        mask[:, 0] = first
    legal_priorities = shape == (4, 2)
    legal_mask = mask is None or (mask.shape == (4, 2) and mask.dtype == bool and first)
    assume(not (legal_priorities and legal_mask))
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=r"^(step priorities must be|mask must be the batch's '_mask'|"
                                                          r"priorities must be \d+ numbers|mask= goes with step priorities)"):
        sampler.update_priorities(keys, np.ones(shape), mask=mask)
    assert_same_tree(before, tree_state(sampler))


PRIORITY_CASES = [
    pytest.param(lambda keys: (keys + 10**6, np.ones(4)), r"keys must come from this sampler's batches", id="never-existed"),
    pytest.param(lambda keys: (np.full(4, 2**63, np.uint64), np.ones(4)), r"keys must", id="uint64-keys"),
    pytest.param(lambda keys: (keys, np.full(4, 1e308)), r"priorities must be", id="huge-finite-priorities"),
]


@pytest.mark.parametrize("make_args, match", PRIORITY_CASES)
def test_update_priorities_inputs_the_library_mishandles(store, make_args, match):
    sampler = store.sampler("prioritized", seed=0, persist=False, alpha=1.0)
    keys = sampler.sample(4).keys
    before = tree_state(sampler)
    with unchanged(store), raises(InvalidDataError, match=match):
        sampler.update_priorities(*make_args(keys))
    assert_same_tree(before, tree_state(sampler))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(set(sampler.sample(64).keys.tolist())) > 1


STATE_KEYS = {"uniform": ["type", "seed", "rank", "rng", "draws"],
              "epoch": ["type", "seed", "rank", "rng", "draws", "epochs", "cursor", "in_epoch", "epoch_ids"],
              "prioritized": ["type", "seed", "rank", "rng", "draws", "max_priority", "dropped"]}


@fast(120)
@given(which=st.sampled_from(sorted(STATE_KEYS)), damage=st.sampled_from(["replace-all", "type", "rng", "drop-key", "rng-key"]),
       value=json_values, data=st.data())
def test_load_state_dict_with_damaged_states(store, samplers, which, damage, value, data):
    sampler = samplers[which]
    good = sampler.state_dict()
    state = copy.deepcopy(good)
    if damage == "replace-all":
        assume(not isinstance(value, dict))
        state = value
        match = rf"^this is a {type(sampler).__name__}'s state_dict\(\)\? it holds a"
    elif damage == "type":
        assume(value != good["type"])
        state["type"] = value
        match = rf"^this is a {type(sampler).__name__}'s state_dict\(\)\? it holds a"
    elif damage == "rng":
        assume(not isinstance(value, dict))
        state["rng"] = value
        match = r"^a damaged sampler state_dict \(.*\); save it again with state_dict\(\)"
    elif damage == "drop-key":
        key = data.draw(st.sampled_from(["rng", "draws", "seed"]))
        del state[key]
        match = r"^a damaged sampler state_dict \(KeyError"
    else:
        key = data.draw(st.sampled_from(["bit_generator", "state"]))
        assume(value != state["rng"][key])
        assume(not (key == "state" and isinstance(value, dict)))  # a dict of other ints: see STATE_CASES
        state["rng"][key] = value
        match = r"^a damaged sampler state_dict \(.*\); save it again with state_dict\(\)"
    with unchanged(store), raises(InvalidDataError, match=match):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == good


def rng_state_negative(state):
    state["rng"]["state"]["state"] = -1


STATE_CASES = [
    pytest.param("uniform", rng_state_negative, id="rng-state-negative"),
    pytest.param("uniform", lambda s: s.update(draws=float("inf")), id="draws-inf"),
    pytest.param("uniform", lambda s: s.update(draws=-5), id="draws-negative"),
    pytest.param("uniform", lambda s: s.update(draws=2.7), id="draws-fraction"),
    pytest.param("epoch", lambda s: s.update(seed=-3), id="seed-negative"),
    pytest.param("epoch", lambda s: s.update(epochs="x"), id="epochs-str"),
    pytest.param("epoch", lambda s: s.update(cursor="x"), id="cursor-str"),
    pytest.param("epoch", lambda s: s.update(epoch_ids=None), id="epoch_ids-None"),
    pytest.param("prioritized", lambda s: s.update(max_priority=float("nan")), id="max_priority-nan"),
    pytest.param("prioritized", lambda s: s.update(max_priority=-1.0), id="max_priority-negative"),
    pytest.param("prioritized", lambda s: s.update(max_priority="x"), id="max_priority-str"),
    pytest.param("prioritized", lambda s: s.update(dropped="x"), id="dropped-str"),
]


@pytest.mark.parametrize("which, damage", STATE_CASES)
def test_load_state_dict_damage_the_library_mishandles(store, which, damage):
    options = dict(uniform=dict(), epoch=dict(replacement=False), prioritized=dict(persist=False))[which]
    kind = "prioritized" if which == "prioritized" else "uniform"
    sampler = store.sampler(kind, seed=0, **options)
    sampler.batch(2)
    good = sampler.state_dict()
    state = copy.deepcopy(good)
    damage(state)
    with unchanged(store), raises(InvalidDataError, match=r"^a damaged sampler state_dict"):
        sampler.load_state_dict(state)
        sampler.batch(2)
    assert sampler.state_dict() == good


def test_a_refused_load_state_dict_leaves_the_sampler_as_it_was(store):
    sampler = store.sampler("uniform", seed=0)
    before = sampler.state_dict()
    later = store.sampler("uniform", seed=5)
    later.batch(3)
    state = later.state_dict()
    state["seed"] = "x"
    with raises(InvalidDataError, match=r"^a damaged sampler state_dict"):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before


# ==== kinds 80-84: hindsight ================================================================================


def reward_of_achievement(achieved, goal):
    return -(np.abs(achieved - goal).sum(axis=-1) > 0.5).astype(np.float32)


HER = dict(goal_field="goal", achieved_field="achieved", reward_fn=reward_of_achievement)
HINDSIGHT_OPTIONS = {
    "strategy": (lambda v: isinstance(v, str) and v in ("future", "final", "episode"), r"strategy must be one of"),
    "relabel_ratio": (valid_unit(), r"relabel_ratio must be a finite number in \[0, 1\]"),
    "seed": (lambda v: is_int(v) and v >= 0, r"seed must be an int >= 0"),
    "reward_fn": (callable, r"reward_fn must be a function"),
    "goal_field": (lambda v: v in ("goal", "achieved") if isinstance(v, str) else False,
                   r"(goal_field=.* is not a step field|must have the same shape)"),
    "achieved_field": (lambda v: v in ("goal", "achieved") if isinstance(v, str) else False,
                       r"(achieved_field=.* is not a step field|must have the same shape)"),
    "n_steps": (lambda v: not isinstance(v, (np.ndarray, torch.Tensor)) and v == 1,
                r"hindsight relabelling works on one-step transitions"),
}


@fast(70)
@given(option=st.sampled_from(sorted(HINDSIGHT_OPTIONS)), value=st.one_of(garbage, st.sampled_from(
    ["obs", "reward", "image", "Future", -1, 1.5, np.nan, np.inf, 2, "goal "])))
def test_every_hindsight_option_refuses_values_of_the_wrong_type(store, option, value):
    valid, match = HINDSIGHT_OPTIONS[option]
    assume(not valid(value))
    if option in ("goal_field", "achieved_field"):
        assume(hashable(value))  # see HINDSIGHT_CASES
    if option in ("strategy", "n_steps"):
        assume(not isinstance(value, np.ndarray))
    with unchanged(store), raises(OptionError, match=match):
        store.dataset(hindsight={**HER, option: value})
    with unchanged(store), raises(OptionError, match=match):
        store.sampler("uniform", hindsight={**HER, option: value})


HINDSIGHT_CASES = [
    pytest.param(dict(goal_field="goal", achieved_field="achieved"), id="no-reward_fn"),
    pytest.param({}, id="empty-dict"),
    pytest.param({**HER, "goal_field": ["goal"]}, id="goal_field-list"),
    pytest.param({**HER, "strategy": np.array(["future", "final"])}, id="strategy-array"),
    pytest.param({**HER, "n_steps": np.array([1, 2])}, id="n_steps-array"),
]


@pytest.mark.parametrize("hindsight", HINDSIGHT_CASES)
def test_hindsight_options_the_library_mishandles(store, hindsight):
    with unchanged(store), raises(OptionError, match=r"(goal_field|achieved_field|reward_fn|strategy|n_steps)"):
        store.dataset(hindsight=hindsight)


RETURN_DTYPES = [np.float32, np.float64, np.int8, np.int64, bool, np.complex64, "U1", object, "M8[s]"]
RETURN_SHAPES = ["k", "k-1", "k+1", "()", "(k,1)", "(1,k)", "(k,2)", "(0,)"]


@fast(50)
@given(dtype=st.sampled_from(RETURN_DTYPES), shape=st.sampled_from(RETURN_SHAPES), how=st.sampled_from(["getitems", "sampler"]))
def test_reward_fn_returning_garbage(store, dtype, shape, how):
    dtype = np.dtype(dtype)
    assume(not (shape == "k" and dtype.kind in "biuf"))

    def garbage_reward(achieved, goal):
        k = len(achieved)
        size = {"k": (k,), "k-1": (k - 1,), "k+1": (k + 1,), "()": (), "(k,1)": (k, 1), "(1,k)": (1, k),
                "(k,2)": (k, 2), "(0,)": (0,)}[shape]
        return np.zeros(size, dtype=dtype)

    hindsight = {**HER, "reward_fn": garbage_reward, "relabel_ratio": 1.0}
    with unchanged(store), raises(InvalidDataError, match=r"^reward_fn must return \d+ numbers, one per row, for a batch "
                                                          r"of \d+ goals \(got "):
        if how == "getitems":
            store.dataset(hindsight=hindsight).__getitems__(np.arange(6))
        else:
            store.sampler("uniform", seed=0, hindsight=hindsight).batch(6)


REWARD_CASES = [
    pytest.param(lambda a, g: torch.full((len(a),), -1.0, requires_grad=True), None, id="tensor-requires-grad"),
    pytest.param(lambda a, g: torch.zeros(len(a), dtype=torch.bfloat16), r"bfloat16|convert", id="bfloat16"),
    pytest.param(lambda a, g: [[1.0], [1.0, 2.0]] + [[0.0]] * (len(a) - 2), r"reward_fn must return", id="ragged"),
    pytest.param(lambda a, g: np.full(len(a), 1e300), r"(reward_fn|'reward')", id="1e300-into-float32"),
]


@pytest.mark.parametrize("reward_fn, match", REWARD_CASES)
def test_reward_fn_returns_the_library_mishandles(store, reward_fn, match):
    view = store.dataset(hindsight={**HER, "reward_fn": reward_fn, "relabel_ratio": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with unchanged(store):
            if match is None:  # must be taken like any tensor
                batch = view.__getitems__(np.arange(6))
                assert (batch["reward"][batch["_relabeled"]] == -1.0).all()
                return
            with raises(InvalidDataError, match=match):
                view.__getitems__(np.arange(6))


@pytest.mark.parametrize("value, dtype", [
    pytest.param(0.5, "int8", id="0.5-into-int8"),
    pytest.param(300, "int8", id="300-into-int8"),
    pytest.param(np.nan, "int8", id="nan-into-int8"),
])
def test_reward_fn_values_that_do_not_fit_the_reward_field(tmp_path, value, dtype):
    with ReplayBuffer(tmp_path / "her", 2, 4, dict(goal=("float", 2), achieved=("float", 2), reward=dtype)) as buf:
        buf.store_episode(goal=np.zeros((3, 2)), achieved=np.ones((3, 2)), reward=np.zeros(3))
        view = buf.dataset(hindsight=dict(goal_field="goal", achieved_field="achieved", relabel_ratio=1.0,
                                          reward_fn=lambda a, g: np.full(len(a), value)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with unchanged(buf), raises(InvalidDataError, match=r"(reward_fn|'reward')"):
                view.__getitems__(np.arange(2))
