"""The floor plan holds: rooms import only rooms below them, never in a circle, and the numpy rooms import
no torch (DESIGN.md section 2: core <- samplers <- views <- distributed/sharing <- compat <- the buffer facade <-
interop and Ray shards <- recording (it names fields as the Minari importer does) <- cli)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memmap_replay"
# room -> rank: a module may import its own room and rooms of a lower rank only
# (compat: memmap-replay-buffer 0.2.3's names and ReplayBuffer methods (a mixin of the buffer facade), between
# the rooms they build on and the buffer, which uses them; compat.h5, a ReplayBuffer subclass, above the buffer)
RANKS = {"errors": 0, "_version": 0, "_forks": 0, "core": 1, "samplers": 2, "views": 3, "sharing": 4, "distributed": 4,
         "compat": 4.5, "buffer": 5, "compat.h5": 5.5, "interop": 6, "distributed.ray": 6, "recording": 7, "cli": 8,
         "__init__": 9, "__main__": 9}


def room(module: str) -> str:
    """The room of a module path inside the package ('core.store' -> 'core')."""
    parts = module.split(".")
    if parts[:2] == ["distributed", "ray"]:
        return "distributed.ray"
    if parts[:2] == ["compat", "h5"]:
        return "compat.h5"
    return parts[0]


def imports(path: Path) -> set[str]:
    """Every package module ``path`` imports (at the top or inside functions), relative to the package."""
    module = path.relative_to(PACKAGE).with_suffix("").parts
    package = module[:-1] if module[-1] != "__init__" else module[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - (node.level - 1)])
            target = base + (node.module.split(".") if node.module else [])
            for alias in node.names if not node.module else [None]:
                found.add(".".join(target + ([alias.name] if alias else [])))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memmap_replay."):
            found.add(node.module.removeprefix("memmap_replay."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("memmap_replay.") for a in node.names
                         if a.name.startswith("memmap_replay."))
    return {name for name in found if name and room(name) in RANKS}


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_room_imports_only_rooms_below_it(path):
    here = room(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    upward = sorted(name for name in imports(path)
                    if RANKS[room(name)] > RANKS[here] or (RANKS[room(name)] == RANKS[here] and room(name) != here))
    assert not upward, f"{path.relative_to(PACKAGE)} ({here}) imports from rooms above or beside it: {upward}"


@pytest.mark.parametrize("module", ["memmap_replay", "memmap_replay.core", "memmap_replay.samplers",
                                    "memmap_replay.sharing", "memmap_replay.distributed.ratelimit"])
def test_numpy_rooms_import_without_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", f"importing {module} imported torch"


def test_the_rank_table_knows_every_room():
    rooms = {room(".".join(p.relative_to(PACKAGE).with_suffix("").parts)) for p in MODULES}
    assert rooms <= set(RANKS), f"rooms without a rank in this test: {sorted(rooms - set(RANKS))}"


def test_the_linter_passes():
    pytest.importorskip("ruff", reason="ruff is in the [test] extra")
    root = PACKAGE.parent
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(root)], capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
