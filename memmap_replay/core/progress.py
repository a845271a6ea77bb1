"""Progress bars of long commands (imports, exports, rewrites): tqdm on stderr, drawn only when asked."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: int, desc: str, enabled: bool, *, unit: str = "step") -> Any:
    """A tqdm bar of ``total`` ``unit``s (a bar that draws nothing unless ``enabled``); it goes away when done."""
    from tqdm import tqdm  # noqa: PLC0415 - only where bars may be drawn

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled, file=sys.stderr,
                leave=False)
