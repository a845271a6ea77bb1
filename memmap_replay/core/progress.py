"""Progress bars of long commands (imports, exports, rewrites, edits): tqdm on stderr, drawn only when asked.

A bar that is not drawn is no tqdm at all: creating a tqdm takes its class-wide lock, a ``multiprocessing`` lock
shared with every process forked after tqdm's first use; a forked process killed while holding it (SIGKILL in the
middle of making a bar) would leave every later bar of the parent waiting forever. So the library's calls take that
lock only when a bar is drawn.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar", "NoBar"]


class NoBar:
    """A bar that draws nothing (tqdm's methods the library calls, doing nothing)."""

    def __init__(self, total: int = 0) -> None:
        self.total, self.n = total, 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "NoBar":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass


def progress_bar(total: int, desc: str, enabled: bool, *, unit: str = "step", unit_scale: bool = True,
                 leave: bool = False) -> Any:
    """A tqdm bar of ``total`` ``unit``s on stderr when ``enabled`` (it goes away when done unless ``leave``), else a
    ``NoBar``."""
    if not enabled:
        return NoBar(total)
    from tqdm import tqdm  # noqa: PLC0415 - only where bars are drawn

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=sys.stderr, leave=leave)
