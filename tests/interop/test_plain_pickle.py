"""The plain-data unpickler: plain containers and scalars load, in every pickle protocol; anything that would
look up a global, call something or reach outside the pickle is refused before anything is loaded; garbage
is a clear error; the one pickle we write holds plain values only."""

from __future__ import annotations

import os
import pickle
import pickletools
import subprocess
import sys

import pytest

from memmap_replay import CorruptStoreError, UnsafeEntryError
from memmap_replay.interop.plain_pickle import ALLOWED, dump_plain, load_plain

PLAIN = {"max_episodes": 3, "fields": {"obs": ("float", (3, 64, 64), 0.5), "a": "int", "b": ("bool", 2)},
         "meta_fields": {}, "circular": True, "big": 2**80, "neg": -(2**40), "none": None, "list": [1, 2.5, "x"],
         "empty": (), "unicode": "é☃", "float": -1e-300}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_values_load_in_every_protocol(protocol):
    data = pickle.dumps(PLAIN, protocol=protocol)
    assert load_plain(data, "config.pkl") == PLAIN


@pytest.mark.parametrize("protocol", [4, 5])
def test_sets_and_bytes_load_where_the_protocol_has_instructions_for_them(protocol):
    value = {"bytes": b"\x00\x01", "set": {1, 2}, "frozen": frozenset({"a"})}
    assert load_plain(pickle.dumps(value, protocol=protocol), "config.pkl") == value


def test_shared_references_load_as_shared():
    inner = [1, 2]
    value = load_plain(pickle.dumps({"a": inner, "b": inner}, protocol=4), "x.pkl")
    assert value["a"] is value["b"]


class _Runs:
    """An object whose unpickling would run os.system (the classic hostile pickle)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path, protocol):
    marker = tmp_path / "ran"
    data = pickle.dumps({"max_episodes": 1, "fields": _Runs(marker)}, protocol=protocol)
    with pytest.raises(UnsafeEntryError, match=r"config\.pkl asks to run (GLOBAL|STACK_GLOBAL).*never does"):
        load_plain(data, "config.pkl")
    assert not marker.exists()


@pytest.mark.parametrize("data, opcode", [
    (b"cos\nsystem\n(S'echo hi'\ntR.", "GLOBAL"),  # protocol 0 by hand
    (b"(cos\nsystem\nS'echo hi'\no.", "INST|GLOBAL"),
    (b"(ios\nsystem\nS'echo'\n.", "INST"),
    (b"\x80\x02\x82\x01.", "EXT1"),  # the extension registry
    (b"\x80\x02\x83\x01\x00.", "EXT2"),
    (b"Pid\n.", "PERSID"),
    (b"\x80\x02N\x51.", "BINPERSID"),
    (b"\x80\x02}N\x62.", "BUILD"),
    (b"\x80\x05\x97.", "NEXT_BUFFER"),
])
def test_every_instruction_that_reaches_outside_is_refused(data, opcode):
    with pytest.raises(UnsafeEntryError, match=rf"x\.pkl asks to run ({opcode})"):
        load_plain(data, "x.pkl")


def test_objects_of_other_packages_are_refused(tmp_path):
    np = pytest.importorskip("numpy")
    with pytest.raises(UnsafeEntryError, match=r"asks to run .*numpy"):
        load_plain(pickle.dumps({"fields": np.float32(1.0)}, protocol=4), tmp_path / "m.pkl")


def test_the_allowed_instructions_build_no_objects():
    # the list is of data instructions only: none of them looks up or calls anything
    assert not ALLOWED & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1",
                          "EXT2", "EXT4", "PERSID", "BINPERSID", "NEXT_BUFFER", "READONLY_BUFFER", "BYTEARRAY8"}
    assert ALLOWED <= {opcode.name for opcode in pickletools.opcodes}


def test_a_torch_size_loads_as_a_tuple_without_importing_torch(tmp_path):
    """In every protocol, all in one process (a process each cost seconds)."""
    torch = pytest.importorskip("torch")
    protocols = range(pickle.HIGHEST_PROTOCOL + 1)
    for protocol in protocols:
        (tmp_path / f"m{protocol}.pkl").write_bytes(
            pickle.dumps({"x": ("float", torch.Size([2, 3])), "y": torch.Size([])}, protocol=protocol))
    code = ("import sys; from memmap_replay.interop.plain_pickle import load_plain; "
            f"values = [load_plain(open({str(tmp_path)!r} + f'/m{{p}}.pkl', 'rb').read(), 'm.pkl') "
            f"for p in {list(protocols)!r}]; "
            "assert 'torch' not in sys.modules; print('\\n'.join(map(repr, values)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [repr({"x": ("float", (2, 3)), "y": ()})] * len(protocols)


@pytest.mark.parametrize("data, match", [
    (b"ctorch\nSize\n(S'x'\ntR.", r"torch\.Size must be given a tuple of up to 64 integers >= 0 \(got str\)"),
    (b"ctorch\nSize\n((I-1\nttR.", r"torch\.Size must be given a tuple"),
    (b"ctorch\nSize\n(lp0\n(I1\ntRtR.", r"is not a readable pickle \(TypeError"),  # REDUCE of a list
    (b"(lp0\n(I1\ntR.", r"s\.pkl asks to run REDUCE \(byte 10\)"),  # no torch.Size named: nothing to build
])
def test_a_torch_size_of_anything_but_ints_is_a_clear_error(data, match):
    with pytest.raises((CorruptStoreError, UnsafeEntryError), match=match):
        load_plain(data, "s.pkl")


def test_a_refused_object_is_named_with_how_to_fix(tmp_path):
    np = pytest.importorskip("numpy")
    with pytest.raises(UnsafeEntryError,
                       match=r"m\.pkl asks to run STACK_GLOBAL 'numpy.*'\.'scalar' \(byte \d+\), which "
                       r"memmap_replay never does.*Either the file was altered, or the buffer was created with other "
                       r"objects in its config.*replace those values by plain ones.*save it again"):
        load_plain(pickle.dumps({"fields": {"x": ("float", (np.int64(3),))}}, protocol=4), tmp_path / "m.pkl")


@pytest.mark.parametrize("data", [b"", b"garbage", b"\x80\x04\x95", pickle.dumps([1, 2], protocol=4)[:-1], b"(l."[:2]])
def test_garbage_is_a_clear_error(data):
    with pytest.raises(CorruptStoreError, match=r"g\.pkl is not a readable pickle"):
        load_plain(data, "g.pkl")


def test_dump_plain_writes_what_load_plain_reads_and_refuses_objects():
    value = {"fields": {"obs": ("float", (3,), 1.5)}, "circular": False}
    data = dump_plain(value)
    assert pickle.loads(data) == value == load_plain(data, "m.pkl")
    assert data[:2] == b"\x80\x04"  # protocol 4, as memmap-replay-buffer writes
    with pytest.raises(TypeError, match="only plain containers and scalars"):
        dump_plain({"x": object()})
