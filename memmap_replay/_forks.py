"""Whether this process was forked from one that had torch loaded (``views.gather`` reads it: torch's CPU
threads are an OpenMP pool, which hangs in a child forked after its parent ran it).

Imported with the package (``import memmap_replay``), so every fork after that is seen, whether or not the
parent had loaded the torch side of the library yet. Numpy and the standard library only.
"""

from __future__ import annotations

import os
import sys

__all__ = ["FORKS"]


class _Forks:
    torch_parent = False  # forked from a process that had imported torch (its OpenMP pool may have run)


FORKS = _Forks()


def _forked_child() -> None:
    if "torch" in sys.modules:  # (the child's modules are the parent's at the fork)
        FORKS.torch_parent = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
