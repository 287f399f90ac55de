"""docs/e2e.md's table is the rendering of the committed e2e results, and those results name every
translated test (tests/e2e carries the upstream names in `upstream("…")` markers)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.e2e import table


def upstream_markers() -> dict[str, str]:
    """upstream name → test function, read from the e2e test modules' source."""
    found: dict[str, str] = {}
    for path in sorted(Path(table.ROOT, "tests", "e2e").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for deco in node.decorator_list:
                    if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                            and deco.func.attr == "upstream"):
                        found[ast.literal_eval(deco.args[0])] = f"{path.name}::{node.name}"
    return found


def test_the_page_is_the_rendering_of_the_committed_results() -> None:
    page = table.PAGE.read_text()
    assert page == table.render(page, table.load()), "run `python -m tests.e2e.table` after the e2e run"


def test_the_results_cover_every_translated_test_in_every_mode_it_runs_in() -> None:
    results = table.load()
    assert {name: row["test"] for name, row in results.items()} == upstream_markers()
    assert all(set(table.modes_of(row)) <= set(row) for row in results.values())


def test_a_test_is_listed_once() -> None:
    translated = {f"{row['describe']} {name}" for name, row in table.load().items()}
    listed = [*table.NOT_YET, *(name for name, _ in table.NOT_EXPRESSIBLE)]
    assert len(listed) == len(set(listed))
    assert not translated & set(listed)


def test_a_failure_is_shown_as_one() -> None:
    page = table.render(f"x\n{table.BEGIN}\n{table.END}\n",
                        {"should x": {"test": "test_service.py::test_x", "describe": "Services",
                                     "iptables": "failed", "nftables": "passed", "dual-stack": "passed"}})
    assert "| Services should x | `test_service.py::test_x` | **FAIL** | pass | pass |" in page


def test_a_dual_stack_test_is_shown_in_its_mode_only() -> None:
    page = table.render(f"x\n{table.BEGIN}\n{table.END}\n",
                        {"should y": {"test": "test_dual_stack.py::test_y", "describe": table.DUAL_STACK_ONLY,
                                      "dual-stack": "passed"}})
    assert f"| {table.DUAL_STACK_ONLY} should y | `test_dual_stack.py::test_y` | — | — | pass |" in page
