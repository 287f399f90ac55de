"""The iptables compiler: whole-ruleset goldens, and the rules that decide where traffic goes.

Goldens live in tests/golden/iptables/; they are compared after sorting chains by name (chain order
carries no meaning, rule order within a chain does). Regenerate them with NETKIT_UPDATE_GOLDENS=1.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from netkit.config import Config, parse_cidrs, parse_ips
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.names import NFACCT_COUNTERS
from netkit.rules.iptables.ruleset import Ruleset, parse, render
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden" / "iptables"
EDGE = ROOT / "tests" / "golden" / "inputs" / "edge-cases.yaml"
BASE = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "test"))

GOLDEN_CASES = {
    "examples-ipv4": ([EXAMPLES], BASE, IPFamily.IPV4),
    "examples-ipv6": ([EXAMPLES], BASE, IPFamily.IPV6),
    "examples-masquerade-all": ([EXAMPLES], replace(BASE, masquerade_all=True, cluster_cidrs=()), IPFamily.IPV4),
    "examples-large-cluster": ([EXAMPLES], replace(BASE, large_cluster_endpoints=5), IPFamily.IPV4),
    "examples-nodeport-addresses": ([EXAMPLES], replace(
        BASE, node_port_addresses=parse_cidrs(["192.0.2.0/24"], "t"),
        node_ips=parse_ips(["192.0.2.10", "192.0.2.99"], "t")), IPFamily.IPV4),
    "edge-cases": ([EDGE], BASE, IPFamily.IPV4),
    # kube-proxy's TestNodePorts "localhost-nodeports enabled": the KUBE-FIREWALL guard and its jumps.
    "examples-localhost-nodeports": ([EXAMPLES], replace(
        BASE, localhost_nodeports=True, node_port_addresses=parse_cidrs(["192.0.2.0/24", "127.0.0.0/8"], "t"),
        node_ips=parse_ips(["192.0.2.10", "198.51.100.7"], "t")), IPFamily.IPV4),
    # kube-proxy's nfacct counters exist: the INVALID drop counts, each localhost NodePort counts first.
    "examples-nfacct": ([EXAMPLES], replace(
        BASE, localhost_nodeports=True, nfacct_counters=NFACCT_COUNTERS), IPFamily.IPV4),
}


def compiled(paths: list[Path], config: Config, family: IPFamily) -> Ruleset:
    loaded = load([str(p) for p in paths])
    assert loaded.problems == ()
    return compile(build(loaded.objects, config.node_name, config.node_ips), config, family)


def normalised(text: str) -> str:
    """Chains sorted by name in each table; rules keep their order."""
    out = []
    for block in text.split("COMMIT"):
        lines = [ln for ln in block.strip().splitlines() if ln]
        if not lines:
            continue
        decls = sorted(ln for ln in lines if ln.startswith(":"))
        chains: dict[str, list[str]] = {}
        for ln in lines:
            if ln.startswith("-A "):
                chains.setdefault(ln.split()[1], []).append(ln)
        out += [lines[0], *decls, *(r for c in sorted(chains) for r in chains[c]), "COMMIT"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden(case: str) -> None:
    paths, config, family = GOLDEN_CASES[case]
    text = normalised(render(compiled(paths, config, family)))
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("NETKIT_UPDATE_GOLDENS"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with NETKIT_UPDATE_GOLDENS=1"
    assert text == path.read_text()


def rules_of(rs: Ruleset, table: str, chain_prefix: str) -> list[str]:
    return [r for c, rules in rs.chains(table).items() if c.startswith(chain_prefix) for r in rules]


def test_probabilities_give_each_endpoint_an_equal_share() -> None:
    rs = compiled([EXAMPLES], BASE, IPFamily.IPV4)
    web = [r for r in rules_of(rs, "nat", "KUBE-SVC-") if "default/web:http ->" in r]
    assert [r.split("--probability ")[1].split()[0] if "--probability" in r else "last" for r in web] == [
        "0.33333333349", "0.50000000000", "last"]


def test_services_without_usable_endpoints_reject_or_drop() -> None:
    rs = compiled([EDGE], BASE, IPFamily.IPV4)
    svc = rs.rules("filter", "KUBE-SERVICES")
    ext = rs.rules("filter", "KUBE-EXTERNAL-SERVICES")
    assert any("10.96.1.1/32" in r and "has no endpoints" in r and "-j REJECT" in r for r in svc)
    assert any("198.51.100.20/32" in r and "-j REJECT" in r for r in ext)
    assert any("--dport 30100" in r and "--dst-type LOCAL" in r and "-j REJECT" in r for r in ext)
    # iTP=Local without a local endpoint: the clusterIP drops, it does not reject.
    assert any("10.96.1.2/32" in r and "has no local endpoints" in r and r.endswith("-j DROP") for r in svc)
    # eTP=Local without a local endpoint: external traffic drops; the clusterIP still works.
    assert any("198.51.100.101/32" in r and "-j DROP" in r for r in ext)
    assert any("--dport 30101" in r and "-j DROP" in r for r in ext)
    assert any("10.96.1.3/32" in r for r in rs.rules("nat", "KUBE-SERVICES"))
    # No nat chains for a service with no endpoints at all.
    assert not any("edge/empty" in r for c, rules in rs.chains("nat").items() if c != "KUBE-SERVICES"
                   for r in rules)
    # Health check node port always accepted.
    assert any("--dport 32100" in r and "-j ACCEPT" in r for r in rs.rules("filter", "KUBE-NODEPORTS"))


def test_terminating_fallback_and_sctp() -> None:
    rs = compiled([EDGE], BASE, IPFamily.IPV4)
    dnat = [r for r in rules_of(rs, "nat", "KUBE-SEP-") if "edge/rolling" in r and "DNAT" in r]
    assert dnat == ['-p sctp -m comment --comment "edge/rolling:sctp" -m sctp -j DNAT '
                    '--to-destination 10.244.1.40:9000']


def test_etp_local_ext_chain_short_circuits_pods_and_node() -> None:
    rs = compiled([EXAMPLES], BASE, IPFamily.IPV4)
    (ext,) = [rules for c, rules in rs.chains("nat").items() if c.startswith("KUBE-EXT-") and
              any("web-lb" in r for r in rules)]
    assert ext[0].startswith("-s 10.244.0.0/16 ") and "pod traffic" in ext[0] and "-j KUBE-SVC-" in ext[0]
    assert "--src-type LOCAL -j KUBE-MARK-MASQ" in ext[1]
    assert "--src-type LOCAL -j KUBE-SVC-" in ext[2]
    assert ext[3].startswith("-j KUBE-SVL-")


def test_no_local_detector_means_no_clusterip_masquerade() -> None:
    rs = compiled([EXAMPLES], replace(BASE, cluster_cidrs=()), IPFamily.IPV4)
    assert not any("cluster IP" in r and "KUBE-MARK-MASQ" in r for r in rules_of(rs, "nat", "KUBE-SVC-"))


def test_bridge_detector_uses_interface_match() -> None:
    cfg = replace(BASE, detect_local_mode="BridgeInterface", bridge_interface="cbr0")
    rs = compiled([EXAMPLES], cfg, IPFamily.IPV4)
    masq = [r for r in rules_of(rs, "nat", "KUBE-SVC-") if "KUBE-MARK-MASQ" in r]
    assert masq and all(r.startswith("-d ") and " ! -i cbr0 -p " in r for r in masq)


def test_round_trip_of_every_golden() -> None:
    for paths, config, family in GOLDEN_CASES.values():
        rs = compiled(paths, config, family)
        assert parse(render(rs), family) == rs


def test_large_cluster_mode_drops_endpoint_comments_only() -> None:
    rs = compiled([EXAMPLES], replace(BASE, large_cluster_endpoints=5), IPFamily.IPV4)
    assert not any("comment" in r for r in rules_of(rs, "nat", "KUBE-SEP-"))
    assert all("-m comment" in r for r in rs.rules("nat", "KUBE-SERVICES"))
