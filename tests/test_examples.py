"""Every example in examples/ runs as a test, as a user would run it."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
# examples a test of their own runs, checking more than that they run (each is run once)
RUN_ELSEWHERE = {"ddp_shards.py": "tests/distributed/test_ddp.py::test_example_trains_with_two_ranks"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example, tmp_path):
    if example.name in RUN_ELSEWHERE:
        pytest.skip(f"run (and its results checked) by {RUN_ELSEWHERE[example.name]}")
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
    root = Path(__file__).parent.parent
    for name, test in RUN_ELSEWHERE.items():  # the test that runs it is still there and names the example
        path, function = test.split("::")
        source = (root / path).read_text()
        assert f"def {function}(" in source and name in source, test
