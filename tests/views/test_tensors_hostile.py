"""Hostile input at ``views/tensors.py`` (``get_all_data``): names and devices.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

46. ``get_all_data`` with unknown names of any type (generated)
47. ``get_all_data`` with one name as a str, or a non-iterable (fixed: "unknown field 'o'")
48. ``get_all_data(device=...)`` with a dtype, a float, an unknown string, an absent accelerator (fixed)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from memmap_replay import InvalidDataError, OptionError

from catalogue import HOSTILE_FIELDS as FIELDS, HOSTILE_META as META, fast, unchanged, raises


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
        assert isinstance(name, str) and name in data and "episode_lens" in data  # one name as a str, as the views


@pytest.mark.parametrize("device", [
    pytest.param(torch.float64, id="a-dtype"),
    pytest.param(3.5, id="float"),
    pytest.param("nope", id="unknown-str"),
    pytest.param("cuda:0" if not torch.cuda.is_available() else "cuda:99", id="absent-accelerator"),
])
def test_get_all_data_device_garbage(store, device):
    with unchanged(store), raises(OptionError, match=r"device"):
        store.get_all_data(device=device)
