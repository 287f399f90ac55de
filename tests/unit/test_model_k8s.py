"""Decoding Kubernetes objects: valid shapes become netkit values, invalid ones a precise Problem."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.errors import InvalidObject
from netkit.model import from_k8s, list_items
from netkit.model.types import EndpointSlice, Protocol, Service, ServiceType, TrafficPolicy
from tests.factories import endpoint, service, slice_


def decode_one(doc: dict[str, Any]) -> Any:
    objs = from_k8s(doc, "f.yaml")
    assert len(objs) == 1
    return objs[0]


def test_service_fields_decode() -> None:
    svc = decode_one(service(
        "lb", "shop", ["10.96.0.12", "fd00:96::12"], type="LoadBalancer",
        ports=[{"name": "http", "port": 80, "targetPort": "web", "nodePort": 30081, "protocol": "TCP"},
               {"name": "dns", "port": 53, "protocol": "UDP"}],
        externalIPs=["198.51.100.10"], loadBalancerSourceRanges=["203.0.113.0/28"],
        sessionAffinity="ClientIP", externalTrafficPolicy="Local", internalTrafficPolicy="Local",
        healthCheckNodePort=32000, status={"loadBalancer": {"ingress": [{"ip": "198.51.100.100"}]}}))
    assert isinstance(svc, Service)
    assert svc.type is ServiceType.LOAD_BALANCER
    assert svc.cluster_ips == (ip_address("10.96.0.12"), ip_address("fd00:96::12"))
    assert [p.target_port for p in svc.ports] == ["web", 53]
    assert svc.ports[1].protocol is Protocol.UDP
    assert svc.load_balancer_ips == (ip_address("198.51.100.100"),)
    assert svc.load_balancer_source_ranges == (ip_network("203.0.113.0/28"),)
    assert svc.session_affinity_timeout == 10800
    assert svc.external_traffic_policy is TrafficPolicy.LOCAL
    assert svc.health_check_node_port == 32000
    assert svc.proxied


def test_headless_and_externalname_are_not_proxied() -> None:
    headless = decode_one(service(ip="None"))
    assert headless.headless and not headless.proxied
    ext = decode_one({"kind": "Service", "metadata": {"name": "x"},
                      "spec": {"type": "ExternalName", "externalName": "Example.COM."}})
    assert ext.external_name == "example.com" and not ext.proxied
    other = decode_one(service(labels={"service.kubernetes.io/service-proxy-name": "other"}))
    assert not other.proxied


@pytest.mark.parametrize("doc, field, reason", [
    (service(ip="10.96.0.300"), "spec.clusterIPs[0]", "not a valid IP address"),
    (service(ports=[{"name": "http", "port": 70000}]), "spec.ports[0].port", "out of range"),
    (service(ports=[{"name": "http", "port": 80, "protocol": "ICMP"}]), "spec.ports[0].protocol", "not one of"),
    (service(ports=[{"name": "http"}]), "spec.ports[0].port", "required"),
    (service(name="Web_1"), "metadata.name", "DNS label"),
    (service(name='web"; -j ACCEPT'), "metadata.name", "DNS label"),
    (service(ports=[{"name": "ht\ntp", "port": 80}]), "spec.ports[0].name", "DNS label"),
    (service(ns="bad ns"), "metadata.namespace", "DNS label"),
    (service(ports=[{"name": "a", "port": 80}, {"port": 81}]), "spec.ports[1].name", "required"),
    (service(externalIPs=["nope"]), "spec.externalIPs[0]", "not a valid IP"),
    (service(loadBalancerSourceRanges=["10.0.0.0/33"]), "spec.loadBalancerSourceRanges[0]", "not a valid CIDR"),
    (service(sessionAffinity="Cookie"), "spec.sessionAffinity", "not one of"),
    (service(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 90000}}),
     "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "out of range"),
    (service(externalTrafficPolicy="Nearest"), "spec.externalTrafficPolicy", "not one of"),
    (service(ports=[{"name": "http", "port": 80, "targetPort": "bad name"}]), "spec.ports[0].targetPort",
     "IANA service name"),
    ({"kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": 80}]}}, "spec.clusterIP", "not set"),
    (slice_(endpoints=[endpoint("10.244.1.300")]), "endpoints[0].addresses[0]", "not a valid IP"),
    (slice_(endpoints=[endpoint("fd00::1")]), "endpoints[0].addresses[0]", "not an IPv4 address"),
    (slice_(endpoints=[endpoint("10.0.0.1", ready="yes")]), "endpoints[0].conditions.ready", "true or false"),
    (slice_(ports=[{"name": "http", "port": 0}]), "ports[0].port", "out of range"),
    ({**slice_(), "metadata": {"name": "s", "labels": {}}},
     "metadata.labels[kubernetes.io/service-name]", "missing"),
    ({**slice_(), "addressType": "IPX"}, "addressType", "not one of"),
])
def test_invalid_objects_name_the_field(doc: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidObject) as err:
        from_k8s(doc, "f.yaml#3")
    problem = err.value.problem
    assert problem.source == "f.yaml#3"
    assert problem.field == field
    assert reason in problem.reason
    assert problem.kind == doc["kind"]
    assert "\n" not in str(problem)


def test_endpoint_conditions_default_like_kubernetes() -> None:
    s = decode_one(slice_(endpoints=[endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False),
                                     endpoint("10.0.0.3", ready=False, serving=True, terminating=True)]))
    assert isinstance(s, EndpointSlice)
    e1, e2, e3 = s.endpoints
    assert (e1.ready, e1.serving, e1.terminating) == (True, True, False)
    assert (e2.ready, e2.serving, e2.terminating) == (False, False, False)  # serving unset = ready
    assert (e3.ready, e3.serving, e3.terminating) == (False, True, True)


def test_legacy_endpoints_become_slices_per_family() -> None:
    objs = from_k8s({
        "kind": "Endpoints", "metadata": {"name": "web", "namespace": "default"},
        "subsets": [{"addresses": [{"ip": "10.0.0.1", "nodeName": "n1"}, {"ip": "fd00::1"}],
                     "notReadyAddresses": [{"ip": "10.0.0.2"}],
                     "ports": [{"name": "http", "port": 8080}]}]}, "f")
    assert [s.address_type.value for s in objs] == ["IPv4", "IPv6"]
    v4 = objs[0]
    assert v4.service_name == "web" and v4.from_legacy_endpoints
    assert [(str(e.addresses[0]), e.ready) for e in v4.endpoints] == [("10.0.0.1", True), ("10.0.0.2", False)]
    assert v4.ports[0].port == 8080


def test_unknown_kinds_are_ignored_and_lists_expand() -> None:
    assert from_k8s({"kind": "Deployment", "metadata": {"name": "x"}}) == []
    items = list(list_items({"kind": "List", "items": [service(), {"kind": "ConfigMap"}]}))
    assert len(items) == 2
    typed = list(list_items({"kind": "ServiceList", "items": [{"metadata": {"name": "a"}}]}))
    assert typed[0]["kind"] == "Service"


@pytest.mark.parametrize("text", ["10.0.0.1", "0.0.0.0", "255.255.255.255", "1.2.3", "1.2.3.4.5", "01.2.3.4",
                                  "1.2.3.256", "1.2.3.-1", "1.2.3. 4", "١.2.3.4", "1.2.3.4 ", "fd00::1", "", "a.b.c.d",
                                  "1.2.3.4\x00", "1.2.3.4\n", "0x1.2.3.4", "1.2.3.04", "1.2.3.4/32", "1.2.3.",
                                  "1.2.3.4.", "1..3.4", "+1.2.3.4", "1_0.2.3.4", " 1.2.3.4", "00.1.2.3", "1.2.3.4\t",
                                  "255.255.255.256", "9.99.199.249"])
def test_the_fast_ipv4_reader_accepts_exactly_what_ipaddress_accepts(text: str) -> None:
    from ipaddress import ip_address

    from netkit.model.k8s import ipv4_fast
    try:
        expected = ip_address(text)
    except ValueError:
        expected = None
    got = ipv4_fast(text)
    assert got == (expected if expected is not None and expected.version == 4 else None)




@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789.-+_ x", max_size=17) | st.builds(
    lambda parts: ".".join(parts), st.lists(st.integers(0, 300).map(str) | st.text("0123456789", max_size=4),
                                            min_size=3, max_size=5)))
def test_the_fast_ipv4_reader_agrees_with_ipaddress_on_any_text(text: str) -> None:
    test_the_fast_ipv4_reader_accepts_exactly_what_ipaddress_accepts(text)

@pytest.mark.parametrize("text", ["10.0.0.1", "0.0.0.0", "255.255.255.255", "192.0.2.10"])
def test_an_address_read_fast_behaves_as_the_plain_one(text: str) -> None:
    """ipv4_fast keeps the text it read (str() is not computed again): the same str, repr, format,
    equality, hash, order and network membership as ip_address's; a copy or pickle is a plain one."""
    import copy
    import pickle
    from ipaddress import IPv4Address, ip_address, ip_network

    from netkit.model.k8s import ipv4_fast
    fast, plain = ipv4_fast(text), ip_address(text)
    assert fast is not None and isinstance(fast, IPv4Address)
    assert (str(fast), repr(fast), f"{fast}", f"{fast!s}", format(fast, "b")) == \
        (str(plain), repr(plain), f"{plain}", f"{plain!s}", format(plain, "b"))
    assert fast == plain and plain == fast and hash(fast) == hash(plain) and not fast < plain
    assert {fast: 1}[plain] == 1 and (fast in ip_network("0.0.0.0/0")) and int(fast) == int(plain)
    assert ip_network(fast) == ip_network(plain) and fast + 0 == plain and fast.packed == plain.packed
    assert str(fast - 0) == text and (str(fast - 1) == str(plain - 1) if int(plain) else True)
    for again in (copy.copy(fast), copy.deepcopy(fast), pickle.loads(pickle.dumps(fast))):
        assert type(again) is IPv4Address and again == plain

_ENDPOINTS = [
    {"addresses": ["10.0.0.1"]},
    {"addresses": ["10.0.0.1", "10.0.0.2"], "nodeName": "n1", "zone": "z", "hostname": "web-0",
     "conditions": {"ready": False, "serving": True, "terminating": True},
     "targetRef": {"kind": "Pod", "namespace": "ns", "name": "web-0"}},
    {"addresses": ["10.0.0.1"], "conditions": {}, "nodeName": "", "zone": "", "hostname": "",
     "targetRef": {"kind": "Service", "name": "x"}},
    {"addresses": ["10.0.0.1"], "conditions": {"ready": None, "serving": False}},
    {"addresses": ["10.0.0.1"], "hints": {"forZones": [{"name": "z"}]}},
    {"addresses": ["172.30.0.041"]},  # leading zeros: the full reader's ParseIPSloppy
]
_BAD_ENDPOINTS = [
    ({"addresses": []}, "endpoints[0].addresses: must hold at least one address"),
    ({"addresses": ["10.0.0.256"]}, "endpoints[0].addresses[0]: '10.0.0.256' is not a valid IP address"),
    ({"addresses": ["fd00::1"]}, "endpoints[0].addresses[0]: fd00::1 is not an IPv4 address"),
    ({"addresses": [7]}, "endpoints[0].addresses[0]: expected a string, got int 7"),
    ({"addresses": ["10.0.0.1"], "conditions": {"ready": 1}},
     "endpoints[0].conditions.ready: expected true or false, got int 1"),
    ({"addresses": ["10.0.0.1"], "conditions": {"terminating": 0}},
     "endpoints[0].conditions.terminating: expected true or false, got int 0"),
    ({"addresses": ["10.0.0.1"], "nodeName": 5}, "endpoints[0].nodeName: expected a string, got int 5"),
    ({"addresses": ["10.0.0.1"], "hostname": "Web_0"}, "endpoints[0].hostname: 'Web_0' is not a DNS label"),
    ({"addresses": ["10.0.0.1"], "targetRef": "pod"}, "endpoints[0].targetRef: expected an object"),
    ({"addresses": "10.0.0.1"}, "endpoints[0].addresses: expected a list"),
]


def _slice_with(endpoint: object) -> dict[str, object]:
    return {"kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [endpoint],
            "metadata": {"name": "s-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "s"}}}


@pytest.mark.parametrize("endpoint", _ENDPOINTS)
def test_the_plain_endpoint_reader_reads_what_the_full_reader_reads(endpoint: dict[str, object]) -> None:
    from netkit.model.k8s import _endpoint, _plain_endpoint, _Reader
    from netkit.model.types import AddressType

    full = _endpoint(_Reader("f", "EndpointSlice", _slice_with(endpoint)), endpoint, "endpoints[0]", AddressType.IPV4)
    plain = _plain_endpoint(endpoint, AddressType.IPV4)
    assert plain is None or plain == full
    [decoded] = from_k8s(_slice_with(endpoint), "f")
    assert isinstance(decoded, EndpointSlice) and decoded.endpoints == (full,)


@pytest.mark.parametrize(("endpoint", "reason"), _BAD_ENDPOINTS)
def test_an_unusual_endpoint_is_judged_by_the_full_reader_with_its_path(endpoint: dict[str, object],
                                                                       reason: str) -> None:
    with pytest.raises(InvalidObject) as exc:
        from_k8s(_slice_with(endpoint), "f.yaml:3")
    assert reason in str(exc.value)


def test_an_address_given_as_a_str_subclass_is_read_plainly() -> None:
    from ipaddress import IPv4Address

    from netkit.model.k8s import ipv4_fast

    class Text(str):
        pass

    assert ipv4_fast(Text("10.0.0.1")) is None  # ip_address reads it: nothing of the subclass is kept
    [svc] = from_k8s(service(ip=Text("10.96.0.10")), "f")
    assert isinstance(svc, Service) and type(str(svc.cluster_ips[0])) is str
    assert svc.cluster_ips[0] == IPv4Address("10.96.0.10")
