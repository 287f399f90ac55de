"""Rules that must match kube-proxy's own (issue #10, "Rules that differ from kube-proxy's").

Each test states a fact from kube-proxy's source or its proxier tests (pkg/proxy/...): the order it
lists endpoints in, how it reads addresses, the chains it writes for localhost NodePorts, ...
"""

from __future__ import annotations

import pytest

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile as compile_iptables
from tests import factories as f

BASE = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "test"))


def _svc_jumps(config: Config, family: IPFamily, *docs: dict[str, object]) -> list[str]:
    rs = compile_iptables(build(f.objects(*docs), config.node_name, config.node_ips), config, family)
    (svc,) = [rules for c, rules in rs.chains("nat").items() if c.startswith("KUBE-SVC-")]
    return [r.split("--comment ")[1].split('"')[1].split(" -> ")[1] for r in svc if " -> " in r]


def test_endpoints_in_kube_proxys_string_order() -> None:
    """pkg/proxy/endpointslicecache.go sorts each service port's endpoints by their "IP:port" string
    (byEndpoint): 10.180.0.10:8080 before 10.180.0.1:8080 ("0" < ":") and 10.180.0.2:8080, and
    [fd00::10] before [fd00::2]."""
    eps = [f.endpoint(ip) for ip in ("10.180.0.2", "10.180.0.10", "10.180.0.1", "10.180.1.0")]
    got = _svc_jumps(BASE, IPFamily.IPV4, f.service(), f.slice_(endpoints=eps))
    assert got == ["10.180.0.10:8080", "10.180.0.1:8080", "10.180.0.2:8080", "10.180.1.0:8080"]
    eps6 = [f.endpoint(ip) for ip in ("fd00::2", "fd00::10", "fd00::1:0")]
    got6 = _svc_jumps(BASE, IPFamily.IPV6, f.service(ip="fd00:96::10"),
                      f.slice_(endpoints=eps6, address_type="IPv6"))
    assert got6 == ["[fd00::10]:8080", "[fd00::1:0]:8080", "[fd00::2]:8080"]


def test_addresses_with_leading_zeros_read_as_kube_proxy_does() -> None:
    """Older apiservers stored `172.30.0.041`; kube-proxy reads every address and CIDR with
    k8s.io/utils/net ParseIPSloppy / ParseCIDRSloppy (leading zeros stripped, decimal), so the Service
    is served on 172.30.0.41 rather than dropped."""
    svc = f.service(ip="172.30.0.041", type="LoadBalancer", externalIPs=["192.168.099.011"],
                    loadBalancerSourceRanges=["203.0.113.000/025"],
                    ports=[{"name": "p80", "port": 80, "nodePort": 3001, "protocol": "TCP"}],
                    status={"loadBalancer": {"ingress": [{"ip": "001.002.003.004"}]}})
    eps = f.slice_(endpoints=[f.endpoint("10.180.000.001")], ports=[{"name": "p80", "port": 80}])
    objs = f.objects(svc, eps)
    (port,) = build(objs, "node-a").family(IPFamily.IPV4)
    assert str(port.cluster_ip) == "172.30.0.41"
    assert [str(ip) for ip in port.external_ips] == ["192.168.99.11"]
    assert [str(ip) for ip in port.load_balancer_ips] == ["1.2.3.4"]
    assert [str(c) for c in port.source_ranges] == ["203.0.113.0/25"]
    assert [str(e) for e in port.endpoints] == ["10.180.0.1:80"]
    rs = compile_iptables(build(objs, "node-a"), BASE, IPFamily.IPV4)
    assert any(r.startswith("-d 172.30.0.41/32 ") for r in rs.rules("nat", "KUBE-SERVICES"))


def test_sloppy_parsing_keeps_what_is_still_invalid_invalid() -> None:
    from netkit.model.k8s import parse_cidr_sloppy, parse_ip_sloppy
    assert str(parse_ip_sloppy("::ffff:1.2.3.004")) == "::ffff:102:304"
    assert str(parse_ip_sloppy("fd00::1")) == "fd00::1"
    for bad in ("1.2.3.0256", "1.2.3", "01.2.3.4.5", "1.2.3.-4", "0x1.2.3.4"):
        with pytest.raises(ValueError):
            parse_ip_sloppy(bad)
    with pytest.raises(ValueError):
        parse_cidr_sloppy("1.2.3.0/033")
