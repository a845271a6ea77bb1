"""A new store built in a hidden folder beside its target and moved onto it when complete (imports, exports,
merges and splits), so that a kill at any instant leaves either no target (or the old one) or a complete one; a
hidden folder a killed run left is removed by the next run that builds the same target. And the room a new
store is given: sized to its data unless ``max_episodes``/``max_steps``/``max_timesteps``/``circular`` ask for
more. Numpy only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from ..core import folderio
from ..core.options import flag, positive_int
from ..errors import OptionError

__all__ = ["temporary_sibling", "remove", "place", "check_room"]


def temporary_sibling(target: Path, what: str, suffix: str = "") -> Path:
    """A hidden path beside ``target`` to build into, removed first if a crashed run left it."""
    tmp = target.parent / f".{target.name}.{what}-{os.getpid()}{suffix}"
    remove(tmp)
    return tmp


def remove(path: Path) -> None:
    """Remove a file, a link (never its target) or a folder tree; absent is fine. Errors name the path."""
    with folderio.errors_named(path, "remove"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def place(tmp: Path, target: Path) -> None:
    """Move the finished ``tmp`` onto ``target``: an old target is moved aside first and removed after."""
    old = None
    with folderio.errors_named(target, "replace"):
        if target.exists() and not (target.is_dir() and not any(target.iterdir())):
            old = temporary_sibling(target, "old")
            os.replace(target, old)
        elif target.is_dir():
            target.rmdir()
        try:
            os.replace(tmp, target)
        except OSError:
            if old is not None:  # put the old target back: a failed export or import leaves it as it was
                try:
                    os.replace(old, target)
                except OSError:
                    pass  # (the old target stays beside it, under its hidden name)
            raise
    if old is not None:
        remove(old)


_ROOM = ("max_episodes", "max_steps", "max_timesteps", "circular")


def check_room(room: Mapping[str, Any] | None, *, episodes: int, max_timesteps: int, rows: int) -> dict:
    """An import's ``max_episodes``/``max_steps``/``max_timesteps``/``circular`` (None: as the dataset needs):
    room for episodes stored after the import; each must hold the dataset. Returns the options to grow by."""
    room = {key: value for key, value in (room or {}).items() if value is not None}
    needed = {"max_episodes": (max(1, episodes), "episodes"),
              "max_timesteps": (max(1, max_timesteps), "steps in its longest episode"),
              "max_steps": (max(rows, max_timesteps + 1), "rows (steps plus final observations)")}
    for key, value in room.items():
        if key == "circular":
            flag(value, "circular")
            continue
        positive_int(value, key)
        if value < needed[key][0]:
            raise OptionError(f"{key} must hold the dataset's {needed[key][0]} {needed[key][1]} (got {value}); "
                              f"leave it out to size the store to the dataset, or pass at least {needed[key][0]}")
    if room.get("circular") is False:
        del room["circular"]
    return room
