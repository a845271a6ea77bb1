"""The seed package's README example runs unchanged (only the import changed): ../shared/checks/."""

import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parent.parent.parent / "shared" / "checks" / "seed_readme_example.py"


@pytest.mark.skipif(not CHECK.exists(), reason="../shared/checks is not beside this checkout")
def test_seed_readme_example_passes():
    result = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "1 passed, 0 failed" in result.stdout
