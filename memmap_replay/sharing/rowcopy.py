"""Rows of a raw step field copied from one store's file to another's as byte ranges, with ``os.copy_file_range``:
the kernel copies them without passing them through this process, and shares the blocks instead (a reflink) on
file systems that can (btrfs, XFS, ...). Where it is refused (an old kernel, two file systems, a special file), the
rows are read and written. Consecutive rows that stay consecutive are one range. Numpy only."""

from __future__ import annotations

import errno
import os
from typing import Iterable

from ..core import folderio
from ..core.format import NpyFile
from ..errors import CorruptStoreError

__all__ = ["RowCopier"]

_REFUSED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}
_PART = 64 << 20  # bytes per call (and per read, when copied by hand)


class RowCopier:
    """Copies runs of rows of raw fields from a source store's files into a target store's files. ``how`` says
    what happened: ``'copy_file_range'`` while every range went through it, ``'copied'`` once one was read and
    written by hand (or none was copied yet)."""

    def __init__(self) -> None:
        self.used_kernel = self.used_hand = False
        self._descriptors: dict[str, int] = {}

    @property
    def how(self) -> str:
        return "copy_file_range" if self.used_kernel and not self.used_hand else "copied"

    def copy(self, source: NpyFile, target: NpyFile, runs: Iterable[tuple[int, int, int]]) -> None:
        """Rows ``[src, src + count)`` of ``source`` to rows ``[dst, dst + count)`` of ``target``, for each
        ``(src, dst, count)`` of ``runs`` (merged where consecutive)."""
        size = source.spec.row_nbytes
        reader = self._open(source)
        writer = target._writer()
        for src, dst, count in _merged(runs):
            self._copy_bytes(reader, writer, source.offset + src * size, target.offset + dst * size, count * size,
                             source, target)

    def _open(self, source: NpyFile) -> int:
        key = str(source.path)
        if key not in self._descriptors:
            self._descriptors[key] = folderio.open_read(source.folder, source.path)
        return self._descriptors[key]

    def _copy_bytes(self, reader: int, writer: int, at: int, to: int, nbytes: int, source: NpyFile,
                    target: NpyFile) -> None:
        done = 0
        while done < nbytes:
            part = min(_PART, nbytes - done)
            got = 0
            if not self.used_hand:
                try:
                    got = os.copy_file_range(reader, writer, part, at + done, to + done)
                    self.used_kernel = self.used_kernel or got > 0
                except OSError as error:
                    if error.errno not in _REFUSED:
                        with folderio.errors_named(target.path, "copy rows into"):
                            raise
                    got = 0
            if got == 0:  # refused, or the source ends early: read and write (a short read is damage)
                with folderio.errors_named(source.path, "read"):
                    data = os.pread(reader, part, at + done)
                if len(data) < part:
                    raise CorruptStoreError(f"{source.path} is truncated: its rows are not all on disk (`python -m "
                                            f"memmap_replay verify` lists what is missing)")
                folderio.write_all(writer, data, to + done)
                self.used_hand = True
                got = part
            done += got

    def close(self) -> None:
        for descriptor in self._descriptors.values():
            os.close(descriptor)
        self._descriptors.clear()


def _merged(runs: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for src, dst, count in runs:
        if out and out[-1][0] + out[-1][2] == src and out[-1][1] + out[-1][2] == dst:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + count)
        else:
            out.append((src, dst, count))
    return out
