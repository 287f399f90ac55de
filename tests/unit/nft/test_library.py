"""netkit.nft is a library of its own: it imports nothing from netkit.rules, and the iptables backend
imports nothing from the nftables backend (it looks iptables-nft's chains up through netkit.nft).
Read from the AST, so imports inside functions and under TYPE_CHECKING count."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_import_graph import ROOT, graph


def _offenders(inside: str, forbidden: str) -> list[str]:
    edges = graph()
    return sorted(f"{m} imports {t} (line {line})" for m, targets in edges.items()
                  if m == inside or m.startswith(inside + ".")
                  for t, line in targets.items() if t == forbidden or t.startswith(forbidden + "."))


def test_nft_imports_nothing_from_rules() -> None:
    assert _offenders("netkit.nft", "netkit.rules") == []


def test_iptables_mode_imports_nothing_from_the_nftables_backend() -> None:
    assert _offenders("netkit.rules.iptables", "netkit.rules.nftables") == []


def test_the_library_modules_are_where_the_package_docstring_says() -> None:
    """Every module of netkit/nft is named in the package's theory of operation."""
    package = ROOT / "netkit" / "nft"
    doc = (package / "__init__.py").read_text()
    missing = [p.stem for p in Path(package).glob("*.py") if p.stem != "__init__" and f"`{p.stem}`" not in doc]
    assert missing == []
