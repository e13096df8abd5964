"""The package's modules import one way: no module reaches, through any chain of imports (at the top,
inside a function or for type checking only), back to itself; the rooms (solver/'s folders) import one
way too; the solvers read only their table, never an engine; and solver/ itself holds only the entry
point and what every room shares."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # parsed once per process, for the checks that read it
def imports() -> dict[str, set[str]]:
    """Each module of solver/ -> the modules of solver/ it imports anywhere in its text."""
    paths = {module_name(p): p for p in (ROOT / "solver").rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    target = child if child in paths else node.module
                    if target in paths:
                        graph[name].add(target)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names if alias.name in paths)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    assert cycles(imports()) == []


def test_the_check_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]


#: What may lie loose in solver/: the entry point and what every room shares.
TOP_LEVEL = {
    "solver",
    "solver.__main__",
    "solver.errors",
    "solver.exitcodes",
    "solver.interrupt",
    "solver.units",
}

#: What the solvers may import besides each other: the integer scales and Ctrl-C.
SOLVER_READS = {"solver.problem.scales", "solver.interrupt"}


def room(module: str) -> str:
    """The folder of solver/ a module lives in (``solver.files.config`` -> ``files``), or its own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between rooms: an arrow where any module of one imports any of the other."""
    out: dict[str, set[str]] = {room(m): set() for m in graph}
    for a, targets in graph.items():
        out[room(a)].update(room(b) for b in targets if room(b) != room(a))
    return out


def test_rooms_import_one_way():
    assert cycles(rooms(imports())) == []


def test_only_the_entry_point_and_shared_modules_lie_loose():
    loose = {module_name(p) for p in (ROOT / "solver").glob("*.py")}
    assert loose <= TOP_LEVEL


def test_solvers_import_no_engine():
    """Every solver reads the integer table alone: no engine, rig file or plan builder behind it."""
    outside = {
        b
        for a, targets in imports().items()
        if room(a) == "solvers"
        for b in targets
        if room(b) != "solvers" and b not in SOLVER_READS
    }
    assert outside == set()


def test_the_room_check_sees_a_circle_between_folders():
    graph = {
        "solver.a.x": {"solver.b.y"},
        "solver.b.y": {"solver.b.z"},
        "solver.b.z": {"solver.a.w"},
        "solver.a.w": set(),
    }
    assert cycles(rooms(graph)) == [["a", "b"]]
