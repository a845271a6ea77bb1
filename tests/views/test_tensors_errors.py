"""The error catalogue for ``views/tensors.py`` (``get_all_data``): unknown field names.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

from memmap_replay import OptionError

from catalogue import make_errors_store as make, raises


@pytest.mark.parametrize("kwargs", [dict(fields=("bogus",)), dict(meta_fields=("bogus",))], ids=["field", "meta_field"])
def test_get_all_data_unknown_name(buffer, kwargs):
    with raises(OptionError, match=r"unknown (meta )?field 'bogus'"):
        buffer.get_all_data(**kwargs)


def test_get_all_data_unknown_name_on_empty_store(tmp_path):
    with make(tmp_path / "empty") as buf:
        with raises(OptionError, match=r"unknown field 'bogus'"):
            buf.get_all_data(fields=("bogus",))
