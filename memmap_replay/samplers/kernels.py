"""Which code runs the sum tree's hot paths: numba's compiled kernels or numpy.

The compiled kernels: ``sumtree_numba`` (the tree's draws and updates) and ``positions_numba`` (the
prioritized sampler's key arithmetic around them); ``compiled()`` hands out their functions.

With numba installed (``pip install memmap-replay[fast]``) the compiled kernels run, else numpy's; both
give the same draws for the same seed. The environment variable ``MEMMAP_REPLAY_KERNELS`` chooses:
``auto`` (the default: numba when it imports), ``numba`` (numba or an ``OptionError`` saying how to get it)
or ``numpy`` (the numpy code, numba never imported). It is read once, at the first use of a sum tree, not
at import: ``import memmap_replay`` never imports numba, and the kernels are compiled (or loaded from
numba's on-disk cache) by the first sum tree that draws or updates.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from ..errors import OptionError

__all__ = ["ENVIRONMENT", "compiled", "name", "select", "reset"]

ENVIRONMENT = "MEMMAP_REPLAY_KERNELS"
CHOICES = ("auto", "numba", "numpy")

_compiled: SimpleNamespace | None = None  # the compiled kernels' functions when numba runs them
_name: str | None = None  # "numba" or "numpy" once chosen
load_seconds: float | None = None  # how long the first use took to import numba and compile or load the kernels
reason = ""  # why numpy runs them ('' when numba does)


def compiled() -> SimpleNamespace | None:
    """The compiled kernels, or None when numpy runs them (chosen at the first call, from the environment)."""
    if _name is None:
        select()
    return _compiled


def name() -> str:
    """'numba' or 'numpy': which code runs the kernels (choosing them if nothing did yet)."""
    return select() if _name is None else _name


def select(choice: str | None = None) -> str:
    """Choose the kernels now: 'auto', 'numba' or 'numpy'; None: ``MEMMAP_REPLAY_KERNELS`` (default 'auto').
    Returns the name of the kernels chosen. Trees made before keep working: both kernels read and write
    the same arrays."""
    global _compiled, _name, load_seconds, reason
    origin = "the argument"
    if choice is None:
        choice, origin = os.environ.get(ENVIRONMENT, "auto").strip().lower() or "auto", ENVIRONMENT
    if choice not in CHOICES:
        raise OptionError(f"{origin} must be one of {', '.join(CHOICES)} (got {choice!r}); unset it to use numba "
                          f"when it is installed")
    if choice == "numpy":
        _compiled, _name, reason = None, "numpy", f"{origin} chose numpy"
        return _name
    start = time.perf_counter()
    try:
        from . import positions_numba, sumtree_numba
    except Exception as error:  # no numba, or one that cannot compile here: numpy runs the kernels
        if choice == "numba":
            fix = ("pip install 'memmap-replay[fast]'" if isinstance(error, ImportError) and "numba" in str(error)
                   else "numba is there but its kernels did not compile or load: delete numba's cache of them "
                        "(__pycache__/*.nbi and *.nbc beside memmap_replay/samplers, or in NUMBA_CACHE_DIR)")
            raise OptionError(f"{origin} asks for numba's compiled kernels, but they do not load ({error!r}); "
                              f"{fix}, or set {ENVIRONMENT}=numpy") from error
        _compiled, _name, reason = None, "numpy", f"numba does not load ({type(error).__name__}: {error})"
        return _name
    if load_seconds is None:  # the first load: numba's import, and the compile or the cache's load
        load_seconds = time.perf_counter() - start
    functions = {name: getattr(module, name) for module in (sumtree_numba, positions_numba) for name in module.__all__}
    _compiled, _name, reason = SimpleNamespace(**functions), "numba", ""
    return _name


def reset() -> None:
    """Forget the choice: the next use reads ``MEMMAP_REPLAY_KERNELS`` again."""
    global _compiled, _name
    _compiled, _name = None, None
