"""stale_udp_flows as a table: exactly kube-proxy's cases, nothing more."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest

from netkit.model import NodeState, build
from netkit.runtime.conntrack import Flush, stale_udp_flows
from tests.factories import endpoint, node, objects, service, slice_

UDP = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]
TCP = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "TCP"}]
NODEPORT_UDP = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP", "nodePort": 30053}]


def state(ips: list[str], ports: list[dict[str, Any]] = UDP, **spec: Any) -> NodeState:
    proto = ports[0]["protocol"]
    docs = [node(), service("dns", ip="10.96.0.53", ports=ports, **spec)]
    if ips:
        docs.append(slice_("dns", endpoints=[endpoint(ip) for ip in ips],
                           ports=[{"name": "dns", "port": 5353, "protocol": proto}]))
    return build(objects(*docs), "node-a", ())


def F(dst: str | None, port: int, ep: str | None = None) -> Flush:  # noqa: N802 - a table constructor
    return Flush(ip_address(dst) if dst else None, port, (ip_address(ep), 5353) if ep else None)


CASES = [
    ("first sync after a start: nothing", None, state(["10.244.1.1"]), set()),
    ("0 → 1 endpoint: flows to the service IP", state([]), state(["10.244.1.1"]), {F("10.96.0.53", 53)}),
    ("0 → 2 endpoints, nodePort: service IP and nodePort", state([], NODEPORT_UDP, type="NodePort"),
     state(["10.244.1.1", "10.244.1.2"], NODEPORT_UDP, type="NodePort"),
     {F("10.96.0.53", 53), F(None, 30053)}),
    ("0 → 1, externalIP too", state([], externalIPs=["198.51.100.7"]),
     state(["10.244.1.1"], externalIPs=["198.51.100.7"]), {F("10.96.0.53", 53), F("198.51.100.7", 53)}),
    ("endpoint removed: flows DNATed to it", state(["10.244.1.1", "10.244.1.2"]), state(["10.244.1.2"]),
     {F("10.96.0.53", 53, "10.244.1.1")}),
    ("endpoint removed, nodePort: also via the nodePort", state(["10.244.1.1", "10.244.1.2"], NODEPORT_UDP,
     type="NodePort"), state(["10.244.1.2"], NODEPORT_UDP, type="NodePort"),
     {F("10.96.0.53", 53, "10.244.1.1"), F(None, 30053, "10.244.1.1")}),
    ("endpoint added to a working service: nothing", state(["10.244.1.1"]), state(["10.244.1.1", "10.244.1.2"]),
     set()),
    ("service deleted: flows to its endpoints", state(["10.244.1.1"]), build(objects(node()), "node-a", ()),
     {F("10.96.0.53", 53, "10.244.1.1")}),
    ("1 → 0 endpoints: flows to the endpoint that went", state(["10.244.1.1"]), state([]),
     {F("10.96.0.53", 53, "10.244.1.1")}),
    ("no change: nothing", state(["10.244.1.1"]), state(["10.244.1.1"]), set()),
    ("TCP 0 → 1: nothing", state([], TCP), state(["10.244.1.1"], TCP), set()),
    ("TCP endpoint removed: nothing", state(["10.244.1.1", "10.244.1.2"], TCP), state(["10.244.1.2"], TCP), set()),
]


@pytest.mark.parametrize("old, new, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_stale_udp_flows(old: NodeState | None, new: NodeState, expected: set[Flush]) -> None:
    assert set(stale_udp_flows(old, new)) == expected


def test_flush_reads_like_a_log_line() -> None:
    assert str(F("10.96.0.53", 53, "10.244.1.1")) == "10.96.0.53:53 → 10.244.1.1:5353"
    assert str(F(None, 30053)) == "*:30053 (nodePort)"
