"""netkit's import graph, read from the AST: no module imports itself through others.

Every import counts: at module level, inside functions (an import deferred to call time is still a
dependency) and under `if TYPE_CHECKING:` (a cycle kept only for the type checker still means two
modules that cannot be read one without the other). `from pkg import name` is an edge to the
submodule `pkg.name` when there is one, else to `pkg`; importing a submodule is not counted as
importing its package's `__init__` (a package that re-exports its submodules would otherwise be in a
cycle with each of them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "netkit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(module: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import statement of `module` that names a netkit module."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            prefix = ".".join([*base, node.module] if node.module else base)
            for a in node.names:
                name = f"{prefix}.{a.name}"
                yield (name if name in known else prefix), node.lineno


def graph() -> dict[str, dict[str, int]]:
    """module → {netkit module it imports: the line of the first such import}."""
    known = modules()
    out: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges: dict[str, int] = {}
        for target, line in imported(name, path, known):
            if target in known and target != name:
                edges.setdefault(target, line)
        out[name] = edges
    return out


def cycles(edges: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def describe(component: list[str], edges: Mapping[str, Mapping[str, int]]) -> str:
    inside = set(component)
    return "\n".join(f"  {a} imports {b} (line {line})" for a in component
                     for b, line in sorted(edges[a].items()) if b in inside)


def test_no_module_of_netkit_imports_itself_through_others() -> None:
    edges = graph()
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(describe(c, edges) for c in found)


def test_the_reader_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    """A cycle hidden in a function body or under TYPE_CHECKING is found, and named with its lines."""
    source = tmp_path / "a.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from netkit.x import b\n"
                      "def f():\n    from . import c\n    import netkit.d\n")
    known = {m: source for m in ("netkit.x.a", "netkit.x.b", "netkit.x.c", "netkit.d")}
    assert sorted(imported("netkit.x.a", source, known)) == [("netkit.d", 6), ("netkit.x.b", 3), ("netkit.x.c", 5),
                                                            ("typing", 1)]
    edges = {"a": {"b": 3}, "b": {"c": 2}, "c": {"a": 5}, "d": {"a": 4}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert "a imports b (line 3)" in describe(["a", "b", "c"], edges)
