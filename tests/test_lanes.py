"""The slow lane's list (``tests/lanes.py``) names tests that exist, and marks them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from lanes import SLOW_MODULES, SLOW_TESTS, is_slow

ROOT = Path(__file__).resolve().parents[1]


@functools.cache  # (both tests read every module named: parsed once)
def functions_of(path: Path) -> frozenset[str]:
    """The names of every function of a test module (none for a file that is not there)."""
    if not path.is_file():
        return frozenset()
    return frozenset(node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef))


def test_every_slow_module_and_test_exists():
    missing = [path for path in SLOW_MODULES if not (ROOT / path).is_file()]
    for nodeid in SLOW_TESTS:
        path, *_, name = nodeid.split("::")  # (a test of a class: path::Class::test)
        if name not in functions_of(ROOT / path):
            missing.append(nodeid)
    assert missing == [], f"tests/lanes.py names tests that are gone: {missing}"


def test_every_module_outside_the_slow_modules_keeps_a_fast_test():
    """The fast lane touches every module: a test module is slow whole (``SLOW_MODULES``), or keeps a test
    that ``SLOW_TESTS`` does not name."""
    all_slow = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in SLOW_MODULES:
            continue
        tests = {function for function in functions_of(path) if function.startswith("test_")}
        if tests and all(f"{name}::{test}" in SLOW_TESTS for test in tests):
            all_slow.append(name)
    assert all_slow == [], f"every test of these modules is slow: keep one fast, or list the module whole: {all_slow}"


def test_slow_is_a_registered_marker_and_the_lanes_split_by_node_id(pytestconfig):
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))
    assert is_slow("tests/test_live.py::test_anything[param]")
    assert is_slow("tests/core/test_grow.py::test_a_grow_killed_at_any_step_leaves_every_episode[7-3-options2-True]")
    assert not is_slow("tests/core/test_grow.py::test_grow_keeps_every_episode")

