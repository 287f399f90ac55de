"""The pure core does no IO: model, compilers, planners, tracers and the DNS resolver import no
process, socket, event-loop or Kubernetes-client module (house style: IO only at the edges)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PURE = [
    "netkit/model/types.py", "netkit/model/k8s.py", "netkit/model/state.py", "netkit/config.py",
    "netkit/config_encode.py", "netkit/sources/kubeconfig.py",
    "netkit/model/conntrack.py", "netkit/model/lookup.py", "netkit/rules/summary.py", "netkit/rules/tracing.py",
    "netkit/rules/iptables/names.py", "netkit/rules/iptables/compile.py", "netkit/rules/iptables/ruleset.py",
    "netkit/rules/iptables/plan.py", "netkit/rules/iptables/trace.py", "netkit/rules/iptables/summary.py",
    "netkit/rules/nftables/names.py", "netkit/rules/nftables/compile.py", "netkit/rules/nftables/layout.py",
    "netkit/rules/nftables/plan.py",
    "netkit/rules/nftables/trace.py", "netkit/nft/render.py", "netkit/nft/parse.py", "netkit/nft/parse_listing.py",
    "netkit/nft/ruleset.py", "netkit/nft/rule.py", "netkit/nft/transaction.py", "netkit/change.py",
    "netkit/rules/ipvs/compile.py", "netkit/rules/ipvs/plan.py", "netkit/rules/ipvs/ruleset.py",
    "netkit/dns/names.py", "netkit/dns/view.py", "netkit/dns/resolver.py", "netkit/dns/wire.py",
    "netkit/dns/engine.py", "netkit/dns/metrics.py", "netkit/dns/cache.py", "netkit/dns/loadbalance.py",
]
FORBIDDEN = {"subprocess", "socket", "asyncio", "aiohttp", "kubernetes", "pyroute2", "watchfiles", "netkit.netns"}


def top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    imported = top_level_imports(ROOT / module)
    bad = {m for m in imported if m in FORBIDDEN or m.split(".")[0] in FORBIDDEN}
    assert not bad, f"{module} imports {sorted(bad)}"
