"""The slow lane's list (``tests/lanes.py``) names tests that exist, and marks them."""

from __future__ import annotations

import ast
from pathlib import Path

from lanes import SLOW_MODULES, SLOW_TESTS, is_slow

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_module_and_test_exists():
    missing = [path for path in SLOW_MODULES if not (ROOT / path).is_file()]
    for nodeid in SLOW_TESTS:
        path, name = nodeid.split("::")
        tree = ast.parse((ROOT / path).read_text()) if (ROOT / path).is_file() else None
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)} if tree else set()
        if name not in names:
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
        tests = {node.name for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
        if tests and all(f"{name}::{test}" in SLOW_TESTS for test in tests):
            all_slow.append(name)
    assert all_slow == [], f"every test of these modules is slow: keep one fast, or list the module whole: {all_slow}"


def test_slow_is_a_registered_marker_and_the_lanes_split_by_node_id(pytestconfig):
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))
    assert is_slow("tests/test_live.py::test_anything[param]")
    assert is_slow("tests/core/test_grow.py::test_a_grow_killed_at_any_step_leaves_every_episode[7-3-options2-True]")
    assert not is_slow("tests/core/test_grow.py::test_grow_keeps_every_episode")

