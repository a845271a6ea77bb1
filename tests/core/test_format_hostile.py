"""Hostile input at ``core/format.py``: a ``meta.json`` that is not the format's.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

21. a folder whose ``meta.json`` is arbitrary JSON or arbitrary bytes (generated)
22. a ``meta.json`` holding an integer too long for Python's int parser (found here; fixed meanwhile)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from memmap_replay import CorruptStoreError, ReplayBuffer, SchemaMismatchError, UnsupportedFormatError

from catalogue import fast, snapshot, raises, json_values


# ==== kinds 21-22: a meta.json that is not the format's =====================================================

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
