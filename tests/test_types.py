"""mypy over the package, as pyproject.toml configures it ([tool.mypy]: strict on core/ and samplers/, mypy's
default mode on the rest, checked as Python 3.10), finds nothing.

mypy reads the types the optional extras ship (numba, ray, gymnasium): without one of them installed its
findings differ, so the test skips and names what to install (CI installs every extra). A cold run takes
tens of seconds (mypy's cache, ``.mypy_cache``, makes the next ones a few): it is in the slow lane.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the extras whose own types mypy reads where the package imports them: module -> extra
TYPED_EXTRAS = {"numba": "fast", "ray": "ray", "gymnasium": "io"}


def test_mypy_finds_nothing():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[test]'")
    missing = [f"{module} (the [{extra}] extra)" for module, extra in TYPED_EXTRAS.items()
               if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"mypy reads the types of {', '.join(missing)}, not installed here: install the extras "
                    f"(pip install -e '.[test,io,ray,fast]'), as CI does")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"python -m mypy found:\n{result.stdout}{result.stderr}"
