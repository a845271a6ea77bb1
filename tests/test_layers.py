"""The floor plan holds: rooms import only rooms below them, modules never in a circle, and the numpy rooms import
no torch (DESIGN.md section 2: core <- samplers <- views <- reading <- distributed/sharing <- the buffer facade <-
interop and Ray shards <- recording (it names fields as the Minari importer does) <- compat <- cli)."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memmap_replay"
# room -> rank: a module may import its own room and rooms of a lower rank only
# (compat: memmap-replay-buffer 0.2.3's names, its ReplayBuffer a subclass of the buffer facade's, on top of every
# room of the library; only the command line, which hosts 0.2.3's inspect-replay-buffer command, and the package's
# __init__, which exports compat's ReplayBuffer as memmap_replay.ReplayBuffer, stand above it)
RANKS = {"errors": 0, "_version": 0, "core": 1, "samplers": 2, "views": 3,
         "reading": 3.5, "sharing": 4, "distributed": 4,
         "buffer": 5, "interop": 6, "distributed.ray": 6, "recording": 7, "compat": 7.5, "cli": 8,
         "__init__": 9, "__main__": 9}


def room(module: str) -> str:
    """The room of a module path inside the package ('core.store' -> 'core')."""
    parts = module.split(".")
    if parts[:2] == ["distributed", "ray"]:
        return "distributed.ray"
    return parts[0]


def type_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports that never run."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test).split("."):
            found.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return found


@functools.cache  # (each module is parsed once: the graph tests walk every module again and again)
def imports(path: Path, *, run_only: bool = False) -> frozenset[str]:
    """Every package module ``path`` imports (at the top or inside functions), relative to the package;
    ``run_only``: leave out the imports under ``if TYPE_CHECKING:``, which only a type checker reads."""
    module = path.relative_to(PACKAGE).with_suffix("").parts
    package = module[:-1] if module[-1] != "__init__" else module[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    skipped = type_only(tree) if run_only else set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
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
    return frozenset(name for name in found if name and room(name) in RANKS)


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


def module_name(path: Path) -> str:
    """A module's name inside the package ('core.store'; a package's __init__.py is the package: 'reading', but
    the package's own is '__init__')."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def resolve(name: str) -> str | None:
    """The package module an imported name is ('views.loader'; 'cli.EXIT_OK', a name inside cli/__init__.py,
    is 'cli')."""
    parts = name.split(".")
    while parts:
        path = PACKAGE.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts)
        parts = parts[:-1]
    return None


def import_graph(*, run_only: bool = True) -> dict[str, set[str]]:
    """module -> the package modules it imports (the rank test's walk: at the top or inside functions; with
    ``run_only``, without the type checker's ``if TYPE_CHECKING:`` imports)."""
    graph = {}
    for path in MODULES:
        name = module_name(path)
        graph[name] = {resolve(imported) for imported in imports(path, run_only=run_only)} - {None, name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk meets, each as its modules in import order, the first repeated at the end."""
    found, state, stack = [], {}, []

    def walk(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                found.append(stack[stack.index(imported):] + [imported])
            elif imported not in state:
                walk(imported)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return found


def test_no_module_imports_itself_through_others():
    # (an import under ``if TYPE_CHECKING:`` never runs, so it closes no circle: core.checks and core.grow
    # annotate the EpisodeStore that core.store, which imports them, passes them)
    found = circles(import_graph())
    assert not found, "import circles (each: a module, what it imports, ..., back to it):\n" + "\n".join(
        " -> ".join(circle) for circle in found)


def test_the_circle_check_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}
    assert circles(graph) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert "core.store" in import_graph()["buffer"] and "buffer" in import_graph()["compat.buffer_api"]
    assert "views.dataset" in import_graph(run_only=False)["__init__"]  # (under if _typing.TYPE_CHECKING:)
    assert "views.dataset" not in import_graph()["__init__"]


def test_the_native_buffer_knows_nothing_of_compat():
    graph = import_graph()
    below, todo = set(), ["buffer"]
    while todo:
        module = todo.pop()
        for imported in graph[module] - below:
            below.add(imported)
            todo.append(imported)
    assert not {module for module in below if room(module) == "compat"}, sorted(below)


def test_the_rank_table_knows_every_room():
    rooms = {room(".".join(p.relative_to(PACKAGE).with_suffix("").parts)) for p in MODULES}
    assert rooms <= set(RANKS), f"rooms without a rank in this test: {sorted(rooms - set(RANKS))}"


def test_the_linter_passes():
    pytest.importorskip("ruff", reason="ruff is in the [test] extra")
    root = PACKAGE.parent
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(root)], capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
