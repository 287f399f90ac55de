"""Rules that must match kube-proxy's own (issue #10, "Rules that differ from kube-proxy's").

Each test states a fact from kube-proxy's source or its proxier tests (pkg/proxy/...): the order it
lists endpoints in, how it reads addresses, the chains it writes for localhost NodePorts, ...
"""

from __future__ import annotations

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
