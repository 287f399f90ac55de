"""kube-proxy's chain names: the worked examples from the reference must come out exactly."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from netkit.model import EndpointAddr, ObjectRef, Protocol, ServicePortName
from netkit.rules.iptables import names


@pytest.mark.parametrize("ns, svc, port, proto, expected", [
    ("ns1", "svc1", "p80", Protocol.TCP, "KUBE-SVC-XPGD46QRK7WJZT7O"),
    ("default", "kubernetes", "https", Protocol.TCP, "KUBE-SVC-NPX46M4PTMTKRN6Y"),
    ("kube-system", "kube-dns", "dns", Protocol.UDP, "KUBE-SVC-TCOU7JCQXEZGVUNU"),
    ("default", "hostnames", "", Protocol.TCP, "KUBE-SVC-YN5D6RYVEVZOH44Q"),
])
def test_service_chain_names(ns: str, svc: str, port: str, proto: Protocol, expected: str) -> None:
    assert names.service_chain("KUBE-SVC-", ServicePortName(ObjectRef(ns, svc), port), proto) == expected


def test_endpoint_chain_name() -> None:
    name = ServicePortName(ObjectRef("ns1", "svc1"), "p80")
    ep = EndpointAddr(ip_address("10.180.0.1"), 80)
    assert names.endpoint_chain(name, Protocol.TCP, ep) == "KUBE-SEP-SXIVWICOYRO3J4NJ"


def test_all_prefixes_share_the_hash_and_fit_the_kernel_limit() -> None:
    name = ServicePortName(ObjectRef("a" * 63, "b" * 63), "c" * 63)
    chains = [names.service_chain(p, name, Protocol.SCTP) for p in ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-")]
    assert len({c.split("-")[-1] for c in chains}) == 1
    assert all(len(c) <= names.MAX_CHAIN_NAME for c in chains)


def test_ipv6_endpoints_hash_with_brackets() -> None:
    name = ServicePortName(ObjectRef("ns1", "svc1"), "p80")
    ep = EndpointAddr(ip_address("fd00::1"), 80)
    assert str(ep) == "[fd00::1]:80"
    assert names.endpoint_chain(name, Protocol.TCP, ep) == "KUBE-SEP-" + names.hash16("ns1/svc1:p80tcp[fd00::1]:80")


def test_fast_hash_equals_the_reference_formula() -> None:
    import base64
    import hashlib
    for text in ("", "ns1/svc1:p80tcp", "x" * 500, "kube-system/kube-dns:dnsudp10.0.0.1:53"):
        want = base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:16]
        assert names.hash16(text) == want
