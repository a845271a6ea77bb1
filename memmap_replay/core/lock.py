"""The writer lock: one writer per folder, held as an exclusive OS lock that dies with its process."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from types import ModuleType

from . import folderio
from ..errors import StoreLockedError

fcntl: ModuleType | None  # None where the OS has no flock
try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["WriterLock"]

_HELD: "weakref.WeakSet[WriterLock]" = weakref.WeakSet()


def _forget_in_child() -> None:
    """A forked child inherits the lock's descriptor; it drops its copy (the parent keeps the lock)."""
    for lock in list(_HELD):
        lock.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class WriterLock:
    """``flock(LOCK_EX | LOCK_NB)`` on a lock file; the kernel releases it if the process dies."""

    inherited = False

    def __init__(self, path: Path, *, folder: Path | None = None):
        """Lock ``path``, a file inside ``folder`` (by default its own folder), opened without following links."""
        self.path = Path(path)
        self.fd = folderio.open_write(self.path.parent if folder is None else folder, self.path,
                                      os.O_RDWR | os.O_CREAT, doing="lock")
        if fcntl is None:  # pragma: no cover
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = -1
            raise StoreLockedError(
                f"{self.path.parent} is being written by another buffer, in this or another process "
                f"(it holds {self.path.name}); a folder has one writer at a time: close() the other "
                f"writer first, or open this one with read_only=True to read"
            ) from None
        _HELD.add(self)

    def forget(self) -> None:
        """In a forked child: close the inherited descriptor without touching the parent's lock."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.inherited = True

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = -1
