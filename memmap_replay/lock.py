"""The writer lock: one writer per folder, held as an exclusive OS lock that dies with its process."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import StoreLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["WriterLock"]


class WriterLock:
    """``flock(LOCK_EX | LOCK_NB)`` on a lock file; the kernel releases it if the process dies."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = -1
