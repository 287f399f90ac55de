"""The lab's address plan against the bundled examples, and the wiring's invariants. Pure: no root."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

import pytest
import yaml

from netkit.lab import wiring
from netkit.lab.plan import (
    EXTERNAL_NET4,
    SERVICE_CIDR4,
    SERVICE_CIDR6,
    UPLINK_GW4,
    layout,
)
from tests.conftest import EXAMPLES

LAY = layout("abc123")


def documents(kind: str) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == kind]
    return docs


def test_every_endpoint_in_the_examples_is_a_lab_pod_on_the_right_node() -> None:
    pods = {str(a): p for p in LAY.pods for a in (p.ipv4, p.ipv6)}
    for sl in documents("EndpointSlice"):
        for ep in sl["endpoints"]:
            for address in ep["addresses"]:
                assert str(ip_address(address)) in pods, f"{address} ({sl['metadata']['name']}) has no pod"
                assert pods[str(ip_address(address))].node == ep.get("nodeName", pods[address].node)


def test_named_pods_match_the_examples_target_refs() -> None:
    by_address = {str(p.ipv4): p.name for p in LAY.pods}
    for sl in documents("EndpointSlice"):
        for ep in sl["endpoints"]:
            ref = ep.get("targetRef", {}).get("name") or ep.get("hostname")
            if ref:
                assert by_address[ep["addresses"][0]] == ref


def test_every_endpoint_port_in_the_examples_is_served() -> None:
    ports = {p["port"] for sl in documents("EndpointSlice") for p in sl["ports"]}
    assert ports <= set(LAY.ports)


def test_node_a_is_the_examples_node() -> None:
    (node,) = documents("Node")
    addresses = {a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"}
    assert addresses == {str(LAY.nodes[0].ipv4), str(LAY.nodes[0].ipv6)}


def test_service_addresses_are_outside_every_lab_network() -> None:
    for svc in documents("Service"):
        for ip in svc["spec"].get("clusterIPs") or [svc["spec"].get("clusterIP")]:
            if ip and ip != "None":
                assert ip_address(ip) in (SERVICE_CIDR4 if ":" not in ip else SERVICE_CIDR6)


def test_client_has_addresses_inside_and_outside_the_source_range() -> None:
    ranges = [ip_network(r) for s in documents("Service") for r in s["spec"].get("loadBalancerSourceRanges", [])]
    assert ranges
    assert any(a in r for r in ranges for a in LAY.client.ipv4)
    assert any(all(a not in r for r in ranges) for a in LAY.client.ipv4)
    assert all(a in EXTERNAL_NET4 for a in LAY.client.ipv4)
    assert LAY.client.allowed in ranges[0] and LAY.client.denied not in ranges[0]


def test_namespace_names_are_unique_and_prefixed_by_the_lab_id() -> None:
    assert len(set(LAY.namespaces)) == len(LAY.namespaces)
    assert all(ns.startswith("nkabc123-") for ns in LAY.namespaces)
    assert not set(LAY.namespaces) & set(layout("abc124").namespaces)


def test_interface_names_fit_ifnamsiz() -> None:
    lines = [ln for b in wiring.link_batches(LAY).values() for ln in b]
    names = [w for ln in lines for i, w in enumerate(ln.split()) if i and ln.split()[i - 1] in ("add", "name")]
    assert names and all(len(n) <= 15 for n in names)


def test_every_bridge_port_has_hairpin_on() -> None:
    for node in LAY.nodes:
        lines = wiring.link_batches(LAY)[node.netns]
        for pod in LAY.pods_on(node.name):
            assert f"link set {wiring.port_name(pod)} type bridge_slave hairpin on" in lines


def test_node_a_routes_the_service_cidr_and_has_a_default_route() -> None:
    routes = wiring.route_batches(LAY)[LAY.nodes[0].netns]
    node_ip = LAY.nodes[0].ipv4
    assert f"route add default via {UPLINK_GW4} dev uplink src {node_ip}" in routes
    assert f"route add {SERVICE_CIDR4} via {UPLINK_GW4} dev uplink src {node_ip}" in routes
    assert any(r.startswith(f"route add {SERVICE_CIDR6} ") for r in routes)


@pytest.mark.parametrize("key", ["net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables",
                                 "net/ipv6/conf/all/forwarding"])
def test_nodes_forward_and_pods_do_not(key: str) -> None:
    table = wiring.sysctls(LAY)
    assert all(table[n.netns][key] == "1" for n in LAY.nodes)
    assert all(key not in table[p.netns] for p in LAY.pods)


def test_sysctls_only_name_lab_namespaces() -> None:
    assert set(wiring.sysctls(LAY)) == set(LAY.namespaces)
