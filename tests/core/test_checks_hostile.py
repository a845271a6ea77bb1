"""Hostile input at the checks ``EpisodeStore.open`` makes (``core/checks.py``): folder paths and other
programs' folders.

Kinds of malformed input covered here (numbered across the hostile catalogue; "fixed" marks kinds the library
once mishandled):

17. folder paths of the wrong type (int, None, float, list, bytes, dict)
18. folder paths with a NUL byte, a too-long component, an uncreatable parent (fixed: bare errors), and the
    empty path (fixed: silently the current directory, whose own meta/ and steps/ are then deleted)
19. folder paths that are special files: a FIFO, a character device, a symlink to a file, a dangling symlink
20. ``from_folder`` on another program's folder (unrelated files, no ``meta.json``)
23. creating a store in another program's folder that has ``meta/`` and ``steps/`` of its own, and
    ``overwrite=True`` on another program's ``meta.json`` (fixed: data loss)

The store, ``raises``, ``unchanged`` and the strategies every hostile test shares: ``tests/catalogue.py``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from memmap_replay import (NotAFolderError, OptionError, ReadOnlyError, ReplayBuffer, ReplayError,
                           SchemaError, StoreNotFoundError)

from catalogue import files_under, snapshot, raises


# ==== kinds 17-20, 23: folder paths and other programs' folders =============================================


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
    pytest.param(lambda base: "/proc/memmap_replay_nowhere/store", id="uncreatable-parent",
                 marks=[pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")]),
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


@pytest.mark.parametrize("read_only", [True, False])
def test_from_folder_on_another_programs_folder(new_folder, read_only):
    folder = other_program_folder(new_folder().parent)
    before = snapshot(folder)
    with raises(StoreNotFoundError, match=rf"no store at {re.escape(str(folder))}: the folder holds no meta\.json"):
        ReplayBuffer.from_folder(folder, read_only=read_only)
    assert snapshot(folder) == before


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
