"""Hostile input at ``views/loader.py``: ``dataloader()`` options and ``BatchIndexSampler``.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

54. ``dataloader()`` options: batch_size, shuffle, drop_last, seed, num_workers, to_named_tuple,
    dataset_kwargs (generated)
55. ``to_named_tuple`` with Python keywords (fixed: bare ValueError)
56. ``dataloader(dataset=...)`` that is not a view, ``device=`` garbage, ``non_blocking=`` non-bool,
    ``generator=`` non-generator (fixed)
57. torch DataLoader options passed through with bad values (timeout, prefetch_factor, persistent_workers,
    multiprocessing_context): torch's own ValueError naming the option
59. ``BatchIndexSampler`` batch_size / shuffle / seed of any value (generated), and sizes that are
    negative, str, float, None or beyond an index (fixed)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import itertools
import keyword

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import memmap_replay
from memmap_replay import OptionError

from catalogue import (HOSTILE_FIELDS as FIELDS, HOSTILE_META as META, fast, unchanged, raises, is_int,
                       is_bool, garbage)


# ==== kinds 54-57: dataloader options =======================================================================

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
    "shuffle": (lambda v: is_bool(v) or (isinstance(v, str) and v == "blocks"),
                r"shuffle must be True, False or 'blocks'"),
    "drop_last": (is_bool, r"drop_last must be True or False"),
    "seed": (lambda v: v is None or is_int(v), r"seed must be an int or None"),
    "num_workers": (lambda v: is_int(v) and v >= 0, r"num_workers must be an int >= 0"),
    "to_named_tuple": (lambda v: valid_named_tuple(v),
                       r"to_named_tuple (must be a tuple of output names, e.g. \(.obs., .action.\)|names must be "
                       r"distinct identifiers|names \[.*\] are not in the batch)"),
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
    (dict(num_workers=1, multiprocessing_context="nope"), r"multiprocessing_context option should "
                                                          r"specify a valid start method"),
])
def test_torch_dataloader_options_get_torchs_own_errors(store, kwargs, match):
    """README: DataLoader's own options are passed through: torch checks them (ValueError naming the option)."""
    with unchanged(store), pytest.raises(ValueError, match=match):
        store.dataloader(2, **kwargs)


# ==== kind 59: BatchIndexSampler ============================================================================


@fast(40)
@given(batch_size=garbage, shuffle=st.one_of(st.booleans(), garbage), seed=st.one_of(st.none(), st.integers(), garbage))
def test_batch_index_sampler_options(batch_size, shuffle, seed):
    ok = (is_int(batch_size) and batch_size >= 1, is_bool(shuffle), seed is None or is_int(seed))
    assume(not all(ok))
    with raises(OptionError, match=r"^(batch_size must be a positive int|shuffle must be True, False or .blocks.|"
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
