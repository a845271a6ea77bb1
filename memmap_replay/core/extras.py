"""Optional packages: imported when a call needs one, else an error naming the pip extra that brings it."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import MissingExtraError

__all__ = ["require_extra"]


def require_extra(module: str, extra: str, what: str, *, package: str | None = None) -> Any:
    """Import ``module`` (of the pip ``package``, default its top-level name), or ``MissingExtraError``:
    ``<what> needs the package <package>, which is not installed: pip install 'memmap-replay[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = package or module.split(".")[0]
        raise MissingExtraError(f"{what} needs the package {package}, which is not installed: "
                                f"pip install 'memmap-replay[{extra}]'") from None
