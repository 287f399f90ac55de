"""The tracer over compiled rules answers every packet-flow case of tests/flows.py."""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path

import pytest

from netkit.config import Config, parse_cidrs, parse_ips
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.trace import Packet, endpoints, trace
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, ROOT
from tests.flows import EDGE_FLOWS, FLOWS, NODE_A, Flow

EDGE = ROOT / "tests" / "golden" / "inputs" / "edge-cases.yaml"
CONFIG = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"),
                node_ips=parse_ips([NODE_A, "2001:db8:2::10"], "t"))


def outcomes_for(flow: Flow, paths: list[Path]):  # type: ignore[no-untyped-def]
    host, _, port = flow.dst.rpartition(":")
    dst = ip_address(host.strip("[]"))
    family = IPFamily.of(dst)
    state = build(load([str(EXAMPLES / "00-node.yaml"), *map(str, paths)]).objects, "node-a", CONFIG.node_ips)
    rules = compile(state, CONFIG, family)
    pkt = Packet(ip_address(flow.src), dst, int(port), flow.proto, local_addresses=state.node.ips)
    return trace(rules, pkt)


def check(flow: Flow, paths: list[Path]) -> None:
    outcomes = outcomes_for(flow, paths)
    assert sum(o.probability for o in outcomes) == pytest.approx(1.0)
    if flow.verdict != "accept":
        assert [o.verdict for o in outcomes] == [flow.verdict]
        assert outcomes[0].reason is not None
        return
    assert all(o.verdict == "accept" for o in outcomes)
    got = endpoints(outcomes)
    assert got.keys() == flow.endpoints.keys()
    for dest, p in flow.endpoints.items():
        assert got[dest] == pytest.approx(p, abs=1e-6)
    if flow.masquerade is not None:
        assert all(o.masquerade is flow.masquerade for o in outcomes)


@pytest.mark.parametrize("flow", FLOWS, ids=[f.name for f in FLOWS])
def test_example_flows(flow: Flow) -> None:
    check(flow, [EXAMPLES])


@pytest.mark.parametrize("flow", EDGE_FLOWS, ids=[f.name for f in EDGE_FLOWS])
def test_edge_flows(flow: Flow) -> None:
    check(flow, [EDGE])


def test_hairpin_masquerades_only_the_self_pick() -> None:
    (flow,) = [f for f in FLOWS if f.name.startswith("hairpin")]
    by_dest = {o.destination: o.masquerade for o in outcomes_for(flow, [EXAMPLES])}
    assert by_dest == {"10.244.1.11:8080": True, "10.244.2.11:8080": False}


def test_steps_explain_the_walk() -> None:
    (flow,) = [f for f in FLOWS if f.name.startswith("LB IP from an allowed")]
    (o,) = outcomes_for(flow, [EXAMPLES])
    chains = [s.chain for s in o.steps if s.table == "nat"]
    assert chains[0] == "PREROUTING" and chains[1] == "KUBE-SERVICES"
    assert [c[:8] for c in chains[2:6]] == ["KUBE-FW-", "KUBE-EXT", "KUBE-SVL", "KUBE-SEP"]
