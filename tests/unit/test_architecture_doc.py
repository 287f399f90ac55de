"""docs/architecture.md names every package of netkit/ and every module at netkit/'s top level, read
from the tree when the test runs: a package or top-level module added without a line on that page
fails here, with the names to add."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "architecture.md"


def parts_of_netkit() -> list[str]:
    """`netkit/<package>/` for each package (a directory with __init__.py, at any depth) and
    `netkit/<module>.py` for each top-level module but __init__.py."""
    top = ROOT / "netkit"
    packages = [f"{p.parent.relative_to(ROOT).as_posix()}/" for p in top.rglob("__init__.py") if p.parent != top]
    modules = [p.relative_to(ROOT).as_posix() for p in top.glob("*.py") if p.name != "__init__.py"]
    return sorted(packages + modules)


def named_on(text: str) -> set[str]:
    """Paths written in backticks: `netkit/dns/` (or `netkit/dns`), `netkit/config.py`."""
    return {m.rstrip("/") for m in re.findall(r"`(netkit/[\w/.]+)`", text)}


def test_the_tree_is_read() -> None:
    parts = parts_of_netkit()
    assert "netkit/rules/iptables/" in parts and "netkit/config.py" in parts and "netkit/__init__.py" not in parts


def test_the_page_names_every_package_and_top_level_module() -> None:
    named = named_on(PAGE.read_text())
    missing = [p for p in parts_of_netkit() if p.rstrip("/") not in named]
    assert not missing, (
        "docs/architecture.md does not name " + ", ".join(f"`{p}`" for p in missing)
        + ": add a row for each, in backticks as written here, with what it holds, to the table under"
          " 'Packages and modules' (docs/architecture.md#packages-and-modules)")


def test_a_missing_name_is_seen() -> None:
    assert named_on("`netkit/dns/` and `netkit/config.py`") == {"netkit/dns", "netkit/config.py"}
    assert "netkit/lab" not in named_on("`netkit/lab/cluster/`")
