"""NodeState's endpoint selection, as a table: each row is a situation and the endpoints chosen.

Columns: the endpoints (ip, node, conditions, hints), the service's policies, and the expected
cluster endpoints, local endpoints and whether the service has any usable endpoint.
"""

from __future__ import annotations

from typing import Any

import pytest

from netkit.model import IPFamily, Traffic, Verdict, build
from tests.factories import endpoint, node, objects, service, slice_

A, B = "node-a", "node-b"
READY: dict[str, Any] = {}
NOT_READY = {"ready": False}
TERMINATING = {"ready": False, "serving": True, "terminating": True}
TERM_NOT_SERVING = {"ready": False, "serving": False, "terminating": True}

CASES = [
    # name, endpoints [(ip, node, conds, extra)], service spec, cluster, local, has_any
    ("all ready", [("10.0.0.1", A, READY), ("10.0.0.2", B, READY)], {}, ["10.0.0.1", "10.0.0.2"], [], True),
    ("not ready left out", [("10.0.0.1", A, READY), ("10.0.0.2", B, NOT_READY)], {}, ["10.0.0.1"], [], True),
    ("terminating only when none ready", [("10.0.0.1", A, TERMINATING), ("10.0.0.2", B, READY)], {},
     ["10.0.0.2"], [], True),
    ("fallback to serving terminating", [("10.0.0.1", A, TERMINATING), ("10.0.0.2", B, TERM_NOT_SERVING)], {},
     ["10.0.0.1"], [], True),
    ("nothing usable", [("10.0.0.1", A, NOT_READY), ("10.0.0.2", B, TERM_NOT_SERVING)], {}, [], [], False),
    ("no endpoints", [], {}, [], [], False),
    ("iTP local picks local ready", [("10.0.0.1", A, READY), ("10.0.0.2", B, READY)],
     {"internalTrafficPolicy": "Local"}, [], ["10.0.0.1"], True),
    ("iTP local without local endpoint", [("10.0.0.2", B, READY)], {"internalTrafficPolicy": "Local"},
     [], [], True),
    ("iTP local falls back to local terminating", [("10.0.0.1", A, TERMINATING), ("10.0.0.2", B, READY)],
     {"internalTrafficPolicy": "Local"}, [], ["10.0.0.1"], True),
    ("eTP local keeps cluster list for short-circuit", [("10.0.0.1", A, READY), ("10.0.0.2", B, READY)],
     {"type": "NodePort", "externalTrafficPolicy": "Local",
      "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}, ["10.0.0.1", "10.0.0.2"], ["10.0.0.1"], True),
    ("eTP local on ClusterIP without external access is ignored", [("10.0.0.1", A, READY)],
     {"externalTrafficPolicy": "Local"}, ["10.0.0.1"], [], True),
]


@pytest.mark.parametrize("name, eps, spec, cluster, local, has_any", CASES, ids=[c[0] for c in CASES])
def test_selection(name: str, eps: list[tuple[str, str, dict[str, Any]]], spec: dict[str, Any],
                   cluster: list[str], local: list[str], has_any: bool) -> None:
    objs = objects(node(), service(**spec), slice_(endpoints=[endpoint(ip, n, **c) for ip, n, c in eps]))
    (port,) = build(objs, "node-a").ports
    assert [str(e.ip) for e in port.cluster_endpoints] == cluster
    assert [str(e.ip) for e in port.local_endpoints] == local
    assert port.has_endpoints is has_any


def hinted(ip: str, node_name: str, *zones: str) -> dict[str, Any]:
    return endpoint(ip, node_name, hints={"forZones": [{"name": z} for z in zones]})


@pytest.mark.parametrize("eps, expected", [
    ([hinted("10.0.0.1", A, "zone-a"), hinted("10.0.0.2", B, "zone-b")], ["10.0.0.1"]),
    ([hinted("10.0.0.1", A, "zone-a"), endpoint("10.0.0.2", B)], ["10.0.0.1", "10.0.0.2"]),  # one lacks a hint
    ([hinted("10.0.0.1", A, "zone-c"), hinted("10.0.0.2", B, "zone-b")], ["10.0.0.1", "10.0.0.2"]),  # none for us
], ids=["hints used", "a hint missing", "no hint for this zone"])
def test_topology_hints(eps: list[dict[str, Any]], expected: list[str]) -> None:
    (port,) = build(objects(node(zone="zone-a"), service(), slice_(endpoints=eps)), "node-a").ports
    assert [str(e.ip) for e in port.cluster_endpoints] == expected


def test_slices_merge_and_deduplicate_keeping_non_terminating() -> None:
    objs = objects(
        service(),
        slice_(name="web-1", endpoints=[endpoint("10.0.0.1", A, **TERMINATING), endpoint("10.0.0.2", B)]),
        slice_(name="web-2", endpoints=[endpoint("10.0.0.1", A), endpoint("10.0.0.3", B)]),
    )
    (port,) = build(objs, "node-a").ports
    assert [(str(e.ip), e.terminating) for e in port.endpoints] == [
        ("10.0.0.1", False), ("10.0.0.2", False), ("10.0.0.3", False)]


def test_named_target_port_resolves_through_slice_port_of_same_name() -> None:
    objs = objects(
        service(ports=[{"name": "http", "port": 80, "targetPort": "web"},
                       {"name": "metrics", "port": 9090, "targetPort": "metrics"}]),
        slice_(ports=[{"name": "http", "port": 8080}, {"name": "metrics", "port": 9100}],
               endpoints=[endpoint("10.0.0.1")]),
    )
    by_name = {p.name.port: p for p in build(objs).ports}
    assert by_name["http"].endpoints[0].port == 8080
    assert by_name["metrics"].endpoints[0].port == 9100


def test_only_first_address_and_matching_family_and_protocol() -> None:
    objs = objects(
        service(ip=["10.96.0.10", "fd00:96::10"],
                ports=[{"name": "dns", "port": 53, "protocol": "UDP"}]),
        slice_(ports=[{"name": "dns", "port": 5353, "protocol": "UDP"}],
               endpoints=[{"addresses": ["10.0.0.1", "10.0.0.9"]}]),
        slice_(name="v6", ports=[{"name": "dns", "port": 5353, "protocol": "TCP"}],  # wrong protocol
               endpoints=[{"addresses": ["fd00::1"]}], address_type="IPv6"),
    )
    state = build(objs)
    (v4,) = state.family(IPFamily.IPV4)
    (v6,) = state.family(IPFamily.IPV6)
    assert [str(e) for e in v4.endpoints] == ["10.0.0.1:5353"]
    assert v6.endpoints == () and not v6.has_endpoints


def test_unproxied_services_have_no_state() -> None:
    objs = objects(service("headless", ip="None"),
                   service("other", labels={"service.kubernetes.io/service-proxy-name": "x"}),
                   {"kind": "Service", "metadata": {"name": "ext"},
                    "spec": {"type": "ExternalName", "externalName": "example.com"}})
    assert build(objs).ports == ()


def test_equal_inputs_give_equal_states() -> None:
    docs = [node(), service(), slice_(endpoints=[endpoint("10.0.0.2"), endpoint("10.0.0.1")])]
    assert build(objects(*docs), "node-a") == build(objects(*reversed(docs)), "node-a")


def test_a_service_given_twice_counts_once_and_the_last_wins() -> None:
    objs = objects(service(ip="10.96.0.10"), service(ip="10.96.0.20"), slice_(endpoints=[endpoint("10.0.0.1")]))
    (port,) = build(objs).ports
    assert str(port.cluster_ip) == "10.96.0.20"


def traffic_of(svc_spec: dict[str, object], eps: list[dict[str, object]]) -> tuple[Traffic, Traffic]:
    state = build(objects(node(), service("web", **svc_spec), slice_("web", endpoints=eps)), "node-a")
    (port,) = state.ports
    return port.internal, port.external


NODEPORT_LOCAL = {"type": "NodePort", "externalTrafficPolicy": "Local",
                  "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]}


@pytest.mark.parametrize(("spec", "eps", "internal", "external"), [
    # no endpoint anywhere: both kinds are rejected
    ({}, [], (0, False, Verdict.REJECT), (0, False, Verdict.REJECT)),
    # cluster policies: every ready endpoint
    ({}, [endpoint("10.244.1.1"), endpoint("10.244.2.1", "node-a")], (2, False, None), (2, False, None)),
    # eTP=Local without an endpoint on this node: external traffic drops, internal goes anywhere
    (NODEPORT_LOCAL, [endpoint("10.244.1.1")], (1, False, None), (0, True, Verdict.DROP)),
    # eTP=Local with one here: external traffic uses only it
    (NODEPORT_LOCAL, [endpoint("10.244.1.1"), endpoint("10.244.2.1", "node-a")], (2, False, None), (1, True, None)),
    # iTP=Local: internal traffic uses this node's endpoints, none here drops
    ({"internalTrafficPolicy": "Local"}, [endpoint("10.244.1.1")], (0, True, Verdict.DROP), (0, False, None)),
    # not ready but serving and terminating: the fallback endpoints are used
    ({}, [endpoint("10.244.1.1", ready=False, serving=True, terminating=True)], (1, False, None), (1, False, None)),
])
def test_the_model_decides_where_each_kind_of_traffic_goes(
        spec: dict[str, object], eps: list[dict[str, object]],
        internal: tuple[int, bool, Verdict | None], external: tuple[int, bool, Verdict | None]) -> None:
    got_internal, got_external = traffic_of(spec, eps)
    assert (len(got_internal.endpoints), got_internal.local, got_internal.verdict) == internal
    if spec.get("type") == "NodePort":
        assert (len(got_external.endpoints), got_external.local, got_external.verdict) == external


def test_traffic_distribution_acts_through_the_hints_only() -> None:
    """As kube-proxy's topology code: trafficDistribution itself changes nothing on the node; the
    EndpointSlice controller's hints do (PreferClose → hints.forZones)."""
    eps = [endpoint("10.244.1.1", "node-a", zone="zone-a"), endpoint("10.244.2.1", "node-b", zone="zone-b")]
    hinted = [dict(e, hints={"forZones": [{"name": e["zone"]}]}) for e in eps]

    def cluster(spec: dict[str, Any], endpoints: list[dict[str, Any]]) -> list[str]:
        state = build(objects(node(), service(**spec), slice_(endpoints=endpoints)), "node-a")
        return [str(e.ip) for e in state.ports[0].cluster_endpoints]

    prefer = {"trafficDistribution": "PreferClose"}
    assert cluster(prefer, eps) == cluster({}, eps) == ["10.244.1.1", "10.244.2.1"]
    assert cluster(prefer, hinted) == cluster({}, hinted) == ["10.244.1.1"]


@pytest.mark.parametrize("etp", ["Cluster", "Local"])
@pytest.mark.parametrize("itp", ["Cluster", "Local"])
@pytest.mark.parametrize("stype", ["ClusterIP", "NodePort", "LoadBalancer"])
def test_each_port_is_categorized_by_its_own_traffic_needs(etp: str, itp: str, stype: str) -> None:
    """NodeState decides a port's endpoint lists from what the port itself needs (its family's
    external and load-balancer IPs: a dual-stack Service with an IPv4 external IP only is
    externally reachable in IPv4 alone): the lists equal `categorize` of the built port."""
    from netkit.model.state import categorize
    spec: dict[str, object] = {"type": stype, "externalTrafficPolicy": etp, "internalTrafficPolicy": itp,
                               "ipFamilies": ["IPv4", "IPv6"], "externalIPs": ["203.0.113.7"]}
    if stype == "ClusterIP":
        spec.pop("externalTrafficPolicy")
    ports = [{"name": "http", "port": 80, "targetPort": 8080, **({"nodePort": 30080} if stype != "ClusterIP" else {})}]
    objs = objects(
        node(), service(ip=["10.96.0.10", "fd00::10"], ports=ports, **spec),
        slice_(endpoints=[endpoint("10.0.0.1", "node-a"), endpoint("10.0.0.2", "node-b"),
                          endpoint("10.0.0.3", "node-a", ready=False, serving=True, terminating=True)]),
        slice_(name="web-v6", address_type="IPv6",
               endpoints=[endpoint("fd00::1", "node-a"), endpoint("fd00::2", "node-b")]))
    built = build(objs, "node-a").ports
    assert {p.family for p in built} == {IPFamily.IPV4, IPFamily.IPV6}
    for p in built:
        assert (p.cluster_endpoints, p.local_endpoints, p.has_endpoints) == categorize(p.endpoints, p, "zone-a",
                                                                                        "node-a"), p.family
