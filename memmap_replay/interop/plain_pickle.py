"""Reading a pickle that may only hold plain data, never running code: the one place a pickle is read.

memmap-replay-buffer 0.2.x keeps its config as a pickled dict (``metadata.pkl``). A pickle is a program
for a small stack machine, and its instructions ``GLOBAL``/``STACK_GLOBAL`` (look up any importable
name), ``REDUCE``/``NEWOBJ``/``BUILD``/``INST``/``OBJ`` (call it) and ``PERSID``/``EXT*`` (outside lookups)
are how a hostile file runs code. ``load_plain(data, path)`` reads one in two independent steps:

1. every instruction is listed with ``pickletools.genops`` (which parses, never executes) and checked
   against ``ALLOWED``: plain containers (dict, list, tuple, set, frozenset) and scalars (str, bytes, int,
   float, bool, None), plus the bookkeeping instructions (memo, marks, frames); and ``torch.Size`` (the
   global ``torch.Size`` and the REDUCE/NEWOBJ that build it), which 0.2.3 accepted as a shape;
2. only then is it loaded, by an ``Unpickler`` whose ``persistent_load`` refuses everything and whose
   ``find_class`` refuses every name but ``torch.Size``, for which it gives a stand-in that turns a tuple of
   ints into that tuple (torch is never imported), so even an instruction missed by step 1 could not
   reach a callable.

Anything else is ``UnsafeEntryError`` naming the file and the first refused instruction; a malformed
pickle is ``CorruptStoreError``. The caller caps the file's size before (a few MB of instructions build
at most that many objects: the memo holds references, never copies).
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any

from ..errors import CorruptStoreError, UnsafeEntryError

__all__ = ["load_plain", "dump_plain", "ALLOWED"]

ALLOWED = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "NONE", "NEWTRUE", "NEWFALSE",
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "STRING", "BINSTRING", "SHORT_BINSTRING",
    "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_LIST", "LIST", "APPEND", "APPENDS",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_SET", "ADDITEMS", "FROZENSET",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET", "BINGET", "LONG_BINGET",
})
_PLAIN = (dict, list, tuple, set, frozenset, str, bytes, int, float, bool, type(None))


_SIZE_OPS = frozenset({"GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ"})  # torch.Size((2, 3)), and nothing else
_MAX_DIMS = 64


class _TorchSize:
    """Stands for ``torch.Size`` (never imported): called with a tuple of ints, it returns that tuple."""

    def __new__(cls, dims: Any = ()):
        if (not isinstance(dims, (tuple, list)) or len(dims) > _MAX_DIMS
                or not all(type(dim) is int and 0 <= dim < 1 << 63 for dim in dims)):
            raise ValueError(f"torch.Size must be given a tuple of up to {_MAX_DIMS} integers >= 0 "
                             f"(got {type(dims).__name__})")
        return tuple(dims)


class _NoObjects(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("torch", "Size"):
            return _TorchSize
        raise pickle.UnpicklingError(f"the global {module}.{name}")

    def persistent_load(self, pid: Any):
        raise pickle.UnpicklingError("a persistent id")


def load_plain(data: bytes, path: Any) -> Any:
    """The plain value pickled in ``data`` (read from ``path``, named in errors); see the module docstring."""
    texts = ["", ""]  # the last two strings pushed: the names STACK_GLOBAL would look up
    size = False  # a torch.Size was named: REDUCE/NEWOBJ may build it (the loader builds a tuple, nothing else)
    try:
        for opcode, argument, position in pickletools.genops(data):
            if isinstance(argument, str):
                texts = [texts[1], argument]
            if opcode.name in _SIZE_OPS and (argument == "torch Size" or size and opcode.name in ("REDUCE", "NEWOBJ")
                                             or opcode.name == "STACK_GLOBAL" and texts == ["torch", "Size"]):
                size = True
                continue
            if opcode.name not in ALLOWED:
                what = (f" {argument!r:.120}" if argument is not None else
                        f" {texts[0]!r:.60}.{texts[1]!r:.60}" if opcode.name == "STACK_GLOBAL" else "")
                raise UnsafeEntryError(
                    f"{path} asks to run {opcode.name}{what} (byte {position}), which memmap_replay never does: it "
                    f"reads only plain containers and scalars (dict, list, tuple, str, int, float, bool, None) and "
                    f"torch.Size from a pickle, never other objects or code. Either the file was altered, or the "
                    f"buffer was created with other objects in its config (such as numpy integers as shapes or in "
                    f"extra keywords). To fix, if you trust who wrote it: load metadata.pkl with pickle, replace "
                    f"those values by plain ones (int(...), tuple(...)), save it again; else do not unpickle it")
    except UnsafeEntryError:
        raise
    except Exception as error:  # (a stranger's bytes: every way genops can fail)
        raise CorruptStoreError(f"{path} is not a readable pickle ({type(error).__name__}: {error})"[:400]) from None
    try:
        return _NoObjects(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        raise UnsafeEntryError(
            f"{path} asks to load {error}, which memmap_replay never does (plain data only)") from None
    except Exception as error:
        raise CorruptStoreError(f"{path} is not a readable pickle ({type(error).__name__}: {error})"[:400]) from None


def dump_plain(value: Any) -> bytes:
    """``value`` pickled (protocol 4, as memmap-replay-buffer writes), after checking it is plain data all the
    way down (so that ``load_plain`` reads it back)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) not in _PLAIN:
            raise TypeError(f"only plain containers and scalars may be pickled (got {type(item).__name__})")
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            pending.extend(item)
    return pickle.dumps(value, protocol=4)
