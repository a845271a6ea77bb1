"""The error catalogue for ``views/dataset.py``, the views: an index that is not an int alike, for a
store's views and for a ConcatView of shards.

The store every test starts from, ``raises`` and the checks that nothing changed: ``tests/catalogue.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from memmap_replay import IndexTypeError

from catalogue import raises


@pytest.mark.parametrize("item", [True, np.True_, 0.0, "0", None], ids=repr)
def test_every_view_kind_refuses_an_index_that_is_not_an_int_alike(buffer, item):
    # one check for a store's views and a ConcatView of shards (they had drifted: ConcatView[True] was item 1)
    from memmap_replay.distributed.shards import ConcatView
    view = buffer.dataset(timestep_level=True)
    for indexed in (view, ConcatView([view, view])):
        with raises(IndexTypeError, match=rf"^a view is indexed by an int \(got {type(item).__name__}\); use "
                                          rf"__getitems__ for a batch"):
            indexed[item]
    assert ConcatView([view, view])[-1]["reward"] == view[-1]["reward"]
