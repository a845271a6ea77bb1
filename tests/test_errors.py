"""The error hierarchy (``errors.py``): each error is a ``ReplayError`` and the matching builtin, and is
exported and documented.

The error catalogue (bad input at each entry point, the store left exactly as it was) sits beside the
module whose entry points it tests (``tests/core/test_*_errors.py``, ``tests/views/test_*_errors.py``,
``tests/test_buffer_errors.py``); what its files share is in ``tests/catalogue.py``.
"""

from __future__ import annotations

import pytest

import memmap_replay
from memmap_replay import (IndexTypeError, InvalidDataError, OptionError, ReplayError, SchemaError,
                           SchemaMismatchError)
from memmap_replay import errors as errors_module

from catalogue import BUILTIN


# ---- the hierarchy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("error, builtin", BUILTIN.items(), ids=[error.__name__ for error in BUILTIN])
def test_each_error_is_a_replay_error_and_its_builtin(error, builtin):
    assert issubclass(error, ReplayError)
    assert issubclass(error, builtin)
    assert issubclass(ReplayError, Exception) and not issubclass(ReplayError, (ValueError, OSError))

def test_schema_mismatch_is_a_schema_error():
    assert issubclass(SchemaMismatchError, SchemaError)


def test_option_error_is_an_invalid_data_error_and_not_a_schema_error():
    # code that caught InvalidDataError for a bad option before OptionError existed still catches it
    assert issubclass(OptionError, InvalidDataError) and not issubclass(OptionError, SchemaError)
    assert issubclass(IndexTypeError, OptionError) and issubclass(IndexTypeError, TypeError)


@pytest.mark.parametrize("name", errors_module.__all__)
def test_every_error_is_exported_and_documented(name):
    error = getattr(errors_module, name)
    assert getattr(memmap_replay, name) is error
    assert name in memmap_replay.__all__
    assert error.__doc__ and error.__doc__.strip()
    assert error is ReplayError or error in BUILTIN
