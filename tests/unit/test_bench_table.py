"""docs/benchmarks.md's figures table is bench/table.py's rendering of bench/results/*.json, so the
page cannot drift from the figures the benchmarks wrote; every benchmark writes those files."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "bench"
# not benchmarks themselves
HELPERS = {"charts.py", "installed.py", "diff_floor.py", "results.py", "table.py", "backend_ns.py"}


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the scripts import each other by file name, as run from bench/
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_the_page_shows_the_committed_results() -> None:
    table = _load("table")
    page = table.PAGE.read_text()
    assert table.render_page(page) == page, (
        "docs/benchmarks.md's table differs from bench/results/*.json: run "
        "`.venv/bin/python bench/table.py --write` and commit the page with the JSON")


@pytest.mark.parametrize("path", sorted((BENCH / "results").glob("*.json")), ids=lambda p: p.name)
def test_each_result_names_the_command_that_reproduces_it(path: Path) -> None:
    doc = json.loads(path.read_text())
    script = shlex.split(doc["command"])[0]
    assert script.startswith("bench/") and (ROOT / script).is_file(), doc["command"]
    assert doc["figures"] and all(f["what"] for f in doc["figures"])
    assert all(f["value"] is not None or f["ratio"] is not None for f in doc["figures"]), "a figure with no number"


def test_every_benchmark_writes_json() -> None:
    scripts = [p.name for p in BENCH.glob("*.py") if p.name not in HELPERS]
    silent = sorted(s for s in scripts if "results.parse_args(" not in (BENCH / s).read_text()
                    or "results.write(" not in (BENCH / s).read_text())
    assert scripts and not silent, f"benchmarks without --json (bench/results.py's parse_args and write): {silent}"


def test_a_changed_figure_changes_the_page(tmp_path: Path) -> None:
    table = _load("table")
    results = _load("results")
    (tmp_path / "x.json").write_text(json.dumps(results.document(
        "bench/x.py", "a workload", [results.Figure.measured("a figure", 0.5, "s", 2.0, "≤ 1×")])))
    table.RESULTS = tmp_path
    page = f"intro\n{table.BEGIN}\nold\n{table.END}\noutro\n"
    rendered = table.render_page(page)
    assert "| `bench/x.py` | a figure | **0.5 s** | 2 s | **0.25×** | ≤ 1× |" in rendered
    assert rendered.startswith("intro\n") and rendered.endswith(f"{table.END}\noutro\n") and "old" not in rendered


def test_the_json_option_strips_itself_from_the_command() -> None:
    results = _load("results")
    assert results.command_line("/x/bench/sync.py", ["--json", "out.json", "--services", "200"]) == \
        "bench/sync.py --services 200"
    assert results.command_line("bench/dns.py", ["--json=-"]) == "bench/dns.py"
