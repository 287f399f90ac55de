"""The tracers over compiled rules answer every packet-flow case of tests/flows.py, for both the
iptables and the nftables backend (tests/nft_flows.py lists where nftables means to differ)."""

from __future__ import annotations

import json
from ipaddress import ip_address
from pathlib import Path

import pytest

from netkit.cli import main
from netkit.config import Config, parse_cidrs, parse_ips
from netkit.model import IPFamily, build
from netkit.rules.registry import backend
from netkit.rules.tracing import Outcome, Packet, endpoints
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, ROOT
from tests.flows import EDGE_FLOWS, FLOWS, NODE_A, POD_A, Flow
from tests.nft_flows import TRACE_MODES, expected

EDGE = ROOT / "tests" / "golden" / "inputs" / "edge-cases.yaml"
CONFIG = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"),
                node_ips=parse_ips([NODE_A, "2001:db8:2::10"], "t"))


def outcomes_for(flow: Flow, paths: list[Path], mode: str = "iptables") -> list[Outcome]:
    host, _, port = flow.dst.rpartition(":")
    dst = ip_address(host.strip("[]"))
    family = IPFamily.of(dst)
    state = build(load([str(EXAMPLES / "00-node.yaml"), *map(str, paths)]).objects, "node-a", CONFIG.node_ips)
    be = backend(mode)
    rules = be.compile(state, CONFIG, family)
    pkt = Packet(ip_address(flow.src), dst, int(port), flow.proto, local_addresses=state.node.ips)
    return be.trace(rules, pkt)  # type: ignore[attr-defined, no-any-return]


def check(flow: Flow, paths: list[Path], mode: str = "iptables") -> None:
    outcomes = outcomes_for(flow, paths, mode)
    flow = expected(flow, mode)
    assert not [u for o in outcomes for u in o.unknown], "the tracer did not understand a rule"
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


@pytest.mark.parametrize("mode", TRACE_MODES)
@pytest.mark.parametrize("flow", FLOWS, ids=[f.name for f in FLOWS])
def test_example_flows(flow: Flow, mode: str) -> None:
    check(flow, [EXAMPLES], mode)


@pytest.mark.parametrize("mode", TRACE_MODES)
@pytest.mark.parametrize("flow", EDGE_FLOWS, ids=[f.name for f in EDGE_FLOWS])
def test_edge_flows(flow: Flow, mode: str) -> None:
    check(flow, [EDGE], mode)


@pytest.mark.parametrize("mode", TRACE_MODES)
def test_hairpin_masquerades_only_the_self_pick(mode: str) -> None:
    (flow,) = [f for f in FLOWS if f.name.startswith("hairpin")]
    by_dest = {o.destination: o.masquerade for o in outcomes_for(flow, [EXAMPLES], mode)}
    assert by_dest == {"10.244.1.11:8080": True, "10.244.2.11:8080": False}


def test_steps_explain_the_walk() -> None:
    (flow,) = [f for f in FLOWS if f.name.startswith("LB IP from an allowed")]
    (o,) = outcomes_for(flow, [EXAMPLES])
    chains = [s.chain for s in o.steps if s.table == "nat"]
    assert chains[0] == "PREROUTING" and chains[1] == "KUBE-SERVICES"
    assert [c[:8] for c in chains[2:6]] == ["KUBE-FW-", "KUBE-EXT", "KUBE-SVL", "KUBE-SEP"]


def test_nftables_steps_explain_the_walk() -> None:
    (flow,) = [f for f in FLOWS if f.name.startswith("LB IP from an allowed")]
    (o,) = outcomes_for(flow, [EXAMPLES], "nftables")
    chains = [s.chain for s in o.steps]
    # the source-range check (fw-…) lets the allowed client through without a rule matching
    assert chains[:4] == ["filter-prerouting", "firewall-check", "nat-prerouting", "services"]
    assert [c.split("-")[0] for c in chains[4:]] == ["ext", "local", "filter", "filter", "nat", "masquerading"]
    assert o.reason is not None and o.reason.chain.startswith("local-") and " dnat " in o.reason.rule
    assert {s.table for s in o.steps} == {"ip netkit"}


def test_nftables_affinity_walk_records_the_client() -> None:
    """The first connection to an affinity service misses every endpoint's set and takes the random
    cascade, whose chosen rule records the client (`update @aff-…`)."""
    (flow,) = [f for f in FLOWS if f.name.startswith("ClientIP affinity")]
    outcomes = outcomes_for(flow, [EXAMPLES], "nftables")
    assert len(outcomes) == 3
    for o in outcomes:
        assert o.reason is not None and o.reason.rule.startswith(("numgen random mod", "update @aff-"))
        assert " update @aff-" in f" {o.reason.rule}"


def test_nftables_reads_a_hand_edit_it_does_not_know_as_unknown() -> None:
    from netkit.nft.ruleset import Chain, Ruleset

    state = build(load([str(EXAMPLES)]).objects, "node-a", CONFIG.node_ips)
    rules = backend("nftables").compile(state, CONFIG, IPFamily.IPV4)
    chains = [Chain(c.name, ("meta skuid 0 drop", *c.rules), c.hook) if c.name == "services" else c
              for c in rules.chains]
    edited = Ruleset(rules.family, rules.table, rules.sets, tuple(chains))
    outcomes = backend("nftables").trace(  # type: ignore[attr-defined]
        edited, Packet(ip_address(POD_A), ip_address("10.96.0.10"), 80, local_addresses=state.node.ips))
    assert endpoints(outcomes).keys() == {"10.244.1.11:8080", "10.244.1.12:8080", "10.244.2.11:8080"}
    assert all(any("skuid" in u for u in o.unknown) for o in outcomes)


@pytest.mark.parametrize("mode", TRACE_MODES)
def test_trace_command_in_both_modes(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["trace", "-f", str(EXAMPLES), "--mode", mode, "--node-name", "node-a",
            "--cluster-cidr", "10.244.0.0/16", "--to", "10.96.0.53:53/udp", "--from", POD_A, "-o", "json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["endpoints"] == pytest.approx({"10.244.1.11:5353": 0.5, "10.244.2.11:5353": 0.5})


def test_ipvs_trace_sends_no_new_connection_to_a_draining_real_server() -> None:
    """A live dump during a partial sync holds a removed TCP endpoint at weight 0 while its
    connections drain (ipvs/plan.py): rr/wrr give it no new connection, so the tracer must not."""
    from dataclasses import replace

    from netkit.rules.ipvs.ruleset import Ruleset as IPVSRuleset

    state = build(load([str(EXAMPLES)]).objects, "node-a")
    rules: IPVSRuleset = backend("ipvs").compile(state, CONFIG, IPFamily.IPV4)
    vs = next(v for v in rules.services if str(v.key) == "tcp 10.96.0.10:80")
    drained = replace(vs, reals=(replace(vs.reals[0], weight=0), *vs.reals[1:]))
    live = replace(rules, services=tuple(drained if v is vs else v for v in rules.services))
    pkt = Packet(ip_address("10.244.1.50"), ip_address("10.96.0.10"), 80, "tcp", local_addresses=state.node.ips)
    got = {o.destination: o.probability for o in backend("ipvs").trace(live, pkt)}
    assert f"{vs.reals[0].ip}:{vs.reals[0].port}" not in got and len(got) == len(vs.reals) - 1
    assert sum(got.values()) == pytest.approx(1.0)
