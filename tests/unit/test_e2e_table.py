"""docs/e2e.md's table is the rendering of the committed e2e results, and those results name every
translated test (tests/e2e carries the upstream names in `upstream("…")` markers)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.e2e import table


def upstream_markers(subset: str = "") -> dict[str, str]:
    """upstream name → test function, read from the e2e test modules' source (`subset`: only the
    functions that also carry that marker, e.g. "ipvs")."""
    found: dict[str, str] = {}
    for path in sorted(Path(table.ROOT, "tests", "e2e").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                marks = {ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1]: d
                         for d in node.decorator_list}
                deco = marks.get("upstream")
                if isinstance(deco, ast.Call) and (not subset or subset in marks):
                    found[ast.literal_eval(deco.args[0])] = f"{path.name}::{node.name}"
    return found


def test_the_page_is_the_rendering_of_the_committed_results() -> None:
    page = table.PAGE.read_text()
    assert page == table.render(page, table.load()), "run `python -m tests.e2e.table` after the e2e run"


def test_the_results_cover_every_translated_test_in_every_mode_it_runs_in() -> None:
    results = table.load()
    assert {name: row["test"] for name, row in results.items()} == upstream_markers()
    assert all(set(table.modes_of(row)) <= set(row) for row in results.values())


def test_the_vm_results_cover_the_ipvs_subset() -> None:
    results = table.load()
    assert {name for name, row in results.items() if "ipvs" in row} == set(upstream_markers("ipvs"))


def test_a_test_is_listed_once() -> None:
    translated = {f"{row['describe']} {name}" for name, row in table.load().items()}
    listed = [*table.NOT_YET, *(name for name, _ in table.NOT_EXPRESSIBLE)]
    assert len(listed) == len(set(listed))
    assert not translated & set(listed)


def test_a_failure_is_shown_as_one() -> None:
    page = table.render(f"x\n{table.BEGIN}\n{table.END}\n",
                        {"should x": {"test": "test_service.py::test_x", "describe": "Services",
                                     "iptables": "failed", "nftables": "passed", "iptables-dual-stack": "passed",
                                     "nftables-dual-stack": "passed"}})
    assert "| Services should x | `test_service.py::test_x` | **FAIL** | pass | pass | pass | — |" in page


def test_a_dual_stack_test_is_shown_in_its_mode_only() -> None:
    page = table.render(f"x\n{table.BEGIN}\n{table.END}\n",
                        {"should y": {"test": "test_dual_stack.py::test_y", "describe": table.DUAL_STACK_ONLY,
                                      "iptables-dual-stack": "passed", "nftables-dual-stack": "failed"}})
    assert f"| {table.DUAL_STACK_ONLY} should y | `test_dual_stack.py::test_y` | — | — | pass | **FAIL** | — |" in page


def test_the_vm_run_is_joined_by_upstream_name(tmp_path: Path) -> None:
    host, vm = tmp_path / "host.json", tmp_path / "vm.json"
    host.write_text('{"should x": {"test": "t.py::test_x", "describe": "Services", "iptables": "passed",'
                    ' "nftables": "passed"}}')
    vm.write_text('{"should x": {"test": "t.py::test_x", "describe": "Services", "ipvs": "failed"},'
                  ' "should y": {"test": "t.py::test_y", "describe": "Services", "ipvs": "passed"}}')
    assert table.load(host, vm) == {"should x": {"test": "t.py::test_x", "describe": "Services",
                                                 "iptables": "passed", "nftables": "passed", "ipvs": "failed"}}
    assert "| **FAIL** |" in table.table(table.load(host, vm))
