"""Every example in examples/ runs as a test, as a user would run it."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example, tmp_path):
    if example.name in ("record_gymnasium.py", "share_dataset.py", "offline_to_online.py"):
        pytest.importorskip("gymnasium")  # the [io] extra
    if example.name == "offline_to_online.py":
        pytest.importorskip("minari")
    if example.name == "ray_actor_learner.py":
        pytest.importorskip("ray")  # the [ray] extra
    result = subprocess.run([sys.executable, str(example), str(tmp_path / "data")], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "episodes:" in result.stdout


def test_there_are_examples():
    assert EXAMPLES
