"""The reading room: every read option declared once (``table``), a call's options composed into one frozen
plan (``plan``), the view, sampler and DataLoader built from it (``build``), and the typed entry points
generated from the table (``entries``, written by ``generate``). Above the views and samplers rooms, below
the facades that offer the entry points (``ReplayBuffer``, ``ShardSet``, ``ConcatReplayBuffer``).

Importing this package imports no torch (the facades' module imports ``entries``); its names load on use."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["OPTIONS", "BY_NAME", "Option", "ReadPlan", "compose", "options_of", "options_markdown"]

_HOMES = {"OPTIONS": "table", "BY_NAME": "table", "Option": "table", "options_of": "table", "ReadPlan": "plan",
          "compose": "plan", "options_markdown": "reference"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
