"""No function in netkit/ is longer than 80 lines (from `def` or its first decorator to its last
line, docstring included): a longer one is split into named pieces, each saying what it does.

Functions still over the limit are named in LONG, each with the reason it waits; the list only
shrinks (a name in it whose function got short or went away fails the test, so it is kept exact)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

LIMIT = 80

# "path::Qualified.name" → why it is still long. Empty it; do not add to it.
LONG: dict[str, str] = {}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _lengths() -> dict[str, int]:
    out = {}
    for path in sorted((ROOT / "netkit").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for name, fn in _functions(ast.parse(path.read_text(), str(path))):
            first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            out[f"{where}::{name}"] = (fn.end_lineno or fn.lineno) - first + 1
    return out


def test_no_function_is_over_the_limit() -> None:
    over = {name: n for name, n in _lengths().items() if n > LIMIT and name not in LONG}
    assert not over, (f"functions over {LIMIT} lines (split them into named pieces): "
                      + "; ".join(f"{name} ({n} lines)" for name, n in sorted(over.items())))


def test_the_allowlist_names_only_long_functions() -> None:
    lengths = _lengths()
    stale = sorted(name for name in LONG if lengths.get(name, 0) <= LIMIT)
    assert not stale, f"now within {LIMIT} lines or gone: remove from LONG in {Path(__file__).name}: {stale}"


def test_the_measure_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    tree = ast.parse(f"class C:\n  @staticmethod\n  def f():\n{body}\n")
    (name, fn), = _functions(tree)
    assert name == "C.f" and fn.end_lineno is not None and fn.end_lineno - fn.decorator_list[0].lineno + 1 == LIMIT + 2
