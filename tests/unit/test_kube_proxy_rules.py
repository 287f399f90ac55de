"""Rules that must match kube-proxy's own.

Each test states a fact from kube-proxy's source or its proxier tests (pkg/proxy/...): the order it
lists endpoints in, how it reads addresses, the chains it writes for localhost NodePorts, ...
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address

import pytest

from netkit.config import Config, node_port_addresses, parse_cidrs, parse_ips
from netkit.model import EndpointAddr, IPFamily, ObjectRef, Protocol, ServicePortName, ServicePortState, build
from netkit.model.state import categorize
from netkit.nft.ruleset import Ruleset as NftRuleset
from netkit.rules.iptables.compile import compile as compile_iptables
from netkit.rules.iptables.names import NFACCT_COUNTERS
from netkit.rules.iptables.ruleset import Ruleset
from netkit.rules.nftables.compile import compile as compile_nft
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


# --- NodePorts: localhost, nodePortAddresses, KUBE-FIREWALL (kube-proxy's TestNodePorts) ------------
# kube-proxy's test conventions: node IPs 192.168.0.2 (primary) and 192.168.1.2, 2001:db8::1 and
# 2001:db8:1::2; svc1 ns1 p80 NodePort 3001.

NODE_IPS = parse_ips(["192.168.0.2", "192.168.1.2", "2001:db8::1", "2001:db8:1::2"], "test")
NODEPORT_SVC = f.service("svc1", "ns1", ip=["172.30.0.41", "fd00:172:30::41"], type="NodePort",
                         ipFamilies=["IPv4", "IPv6"],
                         ports=[{"name": "p80", "port": 80, "nodePort": 3001, "protocol": "TCP"}])
NODEPORT_EPS = [f.slice_("svc1", "ns1", [f.endpoint("10.180.0.1")], ports=[{"name": "p80", "port": 80}]),
                f.slice_("svc1", "ns1", [f.endpoint("fd00:10:180::1")], name="svc1-v6",
                         ports=[{"name": "p80", "port": 80}], address_type="IPv6")]
GUARD = ('! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" '
         "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")


def _iptables(family: IPFamily, **changes: object) -> Ruleset:
    config = replace(BASE, node_ips=NODE_IPS, **changes)  # type: ignore[arg-type]
    state = build(f.objects(NODEPORT_SVC, *NODEPORT_EPS), config.node_name, config.node_ips)
    return compile_iptables(state, config, family)


def _tail(rs: Ruleset) -> list[str]:
    return [r for r in rs.rules("nat", "KUBE-SERVICES") if "-j KUBE-NODEPORTS" in r]


def _npa(*items: str) -> dict[str, object]:
    nets, primary = node_port_addresses(list(items), "test")
    return {"node_port_addresses": nets, "node_port_primary": primary}


def test_localhost_nodeports_on_writes_kube_firewall_jumped_to_first() -> None:
    rs = _iptables(IPFamily.IPV4, localhost_nodeports=True)
    assert _tail(rs) == ['-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in '
                         'this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS']
    assert rs.rules("filter", "KUBE-FIREWALL") == (GUARD,)
    for builtin in ("INPUT", "OUTPUT"):
        assert rs.rules("filter", builtin)[0] == "-j KUBE-FIREWALL"
    assert "-j KUBE-FIREWALL" not in rs.rules("filter", "FORWARD")


def test_localhost_nodeports_off_no_firewall_and_loopback_excluded() -> None:
    rs = _iptables(IPFamily.IPV4, localhost_nodeports=False)
    assert _tail(rs)[0].startswith("! -d 127.0.0.0/8 ")
    assert "KUBE-FIREWALL" not in rs.chains("filter")
    assert not any("KUBE-FIREWALL" in r for c in ("INPUT", "OUTPUT") for r in rs.rules("filter", c))


def test_localhost_in_nodeport_addresses_needs_localhost_nodeports() -> None:
    off = _iptables(IPFamily.IPV4, localhost_nodeports=False, **_npa("192.168.0.0/24", "127.0.0.1/32"))
    assert [r.split()[1] for r in _tail(off)] == ["192.168.0.2/32"]
    assert "KUBE-FIREWALL" not in off.chains("filter")
    on = _iptables(IPFamily.IPV4, localhost_nodeports=True, **_npa("192.168.0.0/24", "127.0.0.0/8"))
    assert [r.split()[1] for r in _tail(on)] == ["192.168.0.2/32", "127.0.0.1/32"]
    assert on.rules("filter", "KUBE-FIREWALL") == (GUARD,)
    # nodePortAddresses without loopback: kube-proxy turns localhost NodePorts off, no guard.
    narrowed = _iptables(IPFamily.IPV4, localhost_nodeports=True, **_npa("192.168.0.0/24"))
    assert "KUBE-FIREWALL" not in narrowed.chains("filter")


def test_nodeport_addresses_count_per_family() -> None:
    cidrs = _npa("192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64")
    assert [r.split()[1] for r in _tail(_iptables(IPFamily.IPV4, **cidrs))] == ["192.168.0.2/32", "192.168.1.2/32"]
    assert [r.split()[1] for r in _tail(_iptables(IPFamily.IPV6, **cidrs))] == ["2001:db8::1/128"]
    # No CIDR of a family: that family accepts NodePorts on every address (kube-proxy adds ::/0).
    only4 = _iptables(IPFamily.IPV6, **_npa("192.168.0.0/24"))
    assert _tail(only4)[0].startswith("! -d ::1/128 ") and "--dst-type LOCAL" in _tail(only4)[0]
    # ::1 in nodePortAddresses: IPv6 has no localhost NodePorts.
    assert _tail(_iptables(IPFamily.IPV6, localhost_nodeports=True, **_npa("::1/128"))) == []


def test_nodeport_addresses_primary_is_the_first_node_ip_of_the_family() -> None:
    rs4 = _iptables(IPFamily.IPV4, **_npa("primary"))
    rs6 = _iptables(IPFamily.IPV6, **_npa("primary"))
    assert [r.split()[1] for r in _tail(rs4)] == ["192.168.0.2/32"]
    assert [r.split()[1] for r in _tail(rs6)] == ["2001:db8::1/128"]


def test_tcp_be_liberal_drops_the_invalid_drop_rule() -> None:
    """kube-proxy's TestDropInvalidRule (iptables mode)."""
    assert _iptables(IPFamily.IPV4).rules("filter", "KUBE-FORWARD")[0] == "-m conntrack --ctstate INVALID -j DROP"
    liberal = _iptables(IPFamily.IPV4, conntrack_tcp_be_liberal=True).rules("filter", "KUBE-FORWARD")
    assert not any("INVALID" in r for r in liberal)


@pytest.mark.parametrize("liberal", [False, True])
def test_nftables_mode_drops_no_invalid_packets(liberal: bool) -> None:
    """kube-proxy's nftables mode installs no `ct state invalid drop` (kubernetes#122663), whatever
    tcpBeLiberal says: nowhere in the table, not only not in filter-forward."""
    for family in IPFamily:
        ruleset = _nft(family, mode="nftables", conntrack_tcp_be_liberal=liberal)
        rules = [r for chain in ruleset.chain_map().values() for r in chain.rules]
        assert rules and not any("invalid" in r for r in rules)
        assert ruleset.chain_map()["filter-forward"].rules == (
            "ct state new jump service-endpoints-check", "ct state new jump cluster-ips-check")


def _nft(family: IPFamily, **changes: object) -> NftRuleset:
    config = replace(BASE, node_ips=NODE_IPS, **changes)  # type: ignore[arg-type]
    state = build(f.objects(NODEPORT_SVC, *NODEPORT_EPS), config.node_name, config.node_ips)
    return compile_nft(state, config, family)


def _nft_nodeport_ips(rs: NftRuleset) -> set[str] | None:
    found = rs.set_map().get("nodeport-ips")
    return None if found is None else {e.key for e in found.elements}


def test_nftables_nodeport_addresses_primary_cidrs_and_loopback() -> None:
    # Unset in nftables mode: kube-proxy's default 'primary'.
    assert _nft_nodeport_ips(_nft(IPFamily.IPV4, mode="nftables")) == {"192.168.0.2"}
    assert _nft_nodeport_ips(_nft(IPFamily.IPV6, mode="nftables")) == {"2001:db8::1"}
    services = _nft(IPFamily.IPV4, mode="nftables").chain_map()["services"].rules
    assert any(r.startswith("ip daddr @nodeport-ips ") for r in services)
    # Loopback CIDRs select nothing: nftables mode has no localhost NodePorts.
    lo = _npa("192.168.1.0/24", "127.0.0.0/8")
    assert _nft_nodeport_ips(_nft(IPFamily.IPV4, mode="nftables", **lo)) == {"192.168.1.2"}
    # 'all': every local address but loopback.
    every = _nft(IPFamily.IPV4, mode="nftables", **_npa("all"))
    assert _nft_nodeport_ips(every) is None
    assert any("ip daddr != 127.0.0.0/8 fib daddr type local" in r for r in every.chain_map()["services"].rules)


# --- topology: hints.forNodes (trafficDistribution PreferSameNode), pkg/proxy/topology.go ----------


def _hinted(ip: str, nodes: tuple[str, ...] = (), zones: tuple[str, ...] = (), ready: bool = True) -> EndpointAddr:
    return EndpointAddr(ip_address(ip), 80, ready=ready, serving=ready, hint_nodes=nodes, hint_zones=zones)


def _cluster(endpoints: list[EndpointAddr], zone: str | None = "zone-a", node: str = "node-a") -> list[str]:
    port = ServicePortState(ServicePortName(ObjectRef("ns1", "svc1"), "p80"), IPFamily.IPV4, Protocol.TCP,
                            ip_address("172.30.0.41"), 80)
    cluster, _, _ = categorize(endpoints, port, zone, node)
    return [str(e.ip) for e in cluster]


def test_node_hints_narrow_to_this_nodes_endpoints() -> None:
    eps = [_hinted("10.1.2.3", ("node-a",), ("zone-a",)), _hinted("10.1.2.4", ("node-b",), ("zone-a",)),
           _hinted("10.1.2.5", ("node-c",), ("zone-b",)), _hinted("10.1.2.6", ("node-a",), ("zone-b",))]
    assert _cluster(eps) == ["10.1.2.3", "10.1.2.6"]


def test_node_hints_ignored_unless_every_ready_endpoint_has_one_then_zone_hints_apply() -> None:
    eps = [_hinted("10.1.2.3", ("node-a",), ("zone-a",)), _hinted("10.1.2.4", (), ("zone-a",)),
           _hinted("10.1.2.5", ("node-c",), ("zone-b",)), _hinted("10.1.2.7", (), (), ready=False)]
    assert _cluster(eps) == ["10.1.2.3", "10.1.2.4"]
    # No endpoint hinted for this node: zone hints.
    eps = [_hinted("10.1.2.3", ("node-b",), ("zone-a",)), _hinted("10.1.2.4", ("node-c",), ("zone-b",))]
    assert _cluster(eps) == ["10.1.2.3"]
    # Neither applies: every ready endpoint.
    eps = [_hinted("10.1.2.3", ("node-b",)), _hinted("10.1.2.4", ("node-c",), ("zone-b",))]
    assert _cluster(eps) == ["10.1.2.3", "10.1.2.4"]


def test_for_nodes_read_from_the_endpointslice_and_used_in_rules() -> None:
    svc = f.service("svc1", "ns1", ip="172.30.0.41", trafficDistribution="PreferSameNode",
                    ports=[{"name": "p80", "port": 80, "protocol": "TCP"}])
    eps = f.slice_("svc1", "ns1", [
        f.endpoint("10.180.0.1", node="node-a", hints={"forNodes": [{"name": "node-a"}],
                                                       "forZones": [{"name": "zone-a"}]}),
        f.endpoint("10.180.0.2", node="node-b", hints={"forNodes": [{"name": "node-b"}],
                                                       "forZones": [{"name": "zone-a"}]})],
        ports=[{"name": "p80", "port": 80}])
    assert _svc_jumps(BASE, IPFamily.IPV4, svc, eps, f.node("node-a")) == ["10.180.0.1:80"]
    assert _svc_jumps(replace(BASE, node_name="node-b"), IPFamily.IPV4, svc, eps, f.node("node-b")) == [
        "10.180.0.2:80"]


INVALID = "-m conntrack --ctstate INVALID -m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP"


def test_nfacct_counters_in_kube_proxys_rules_only_when_they_exist() -> None:
    counted = _iptables(IPFamily.IPV4, localhost_nodeports=True, nfacct_counters=NFACCT_COUNTERS)
    assert counted.rules("filter", "KUBE-FORWARD")[0] == INVALID  # iptables-save's spelling: two spaces
    nodeports = counted.rules("nat", "KUBE-NODEPORTS")
    localhost = [r for r in nodeports if "nfacct" in r]
    assert localhost and all(r.startswith("-d 127.0.0.0/8 -p ") and
                             "-m nfacct --nfacct-name  localhost_nps_accepted_pkts -j KUBE-EXT-" in r
                             for r in localhost)
    for r in localhost:  # each right before the NodePort's normal rule, same port and target
        normal = nodeports[nodeports.index(r) + 1]
        assert normal == r.replace("-d 127.0.0.0/8 ", "").replace(
            "-m nfacct --nfacct-name  localhost_nps_accepted_pkts ", "")
    plain = _iptables(IPFamily.IPV4, localhost_nodeports=True)
    assert not any("nfacct" in r for t in ("filter", "nat") for rules in plain.chains(t).values() for r in rules)
    # Only the counter that exists; localhost NodePorts off or IPv6: no localhost counting (kube-proxy).
    only_invalid = _iptables(IPFamily.IPV4, localhost_nodeports=True,
                             nfacct_counters=("ct_state_invalid_dropped_pkts",))
    assert not any("nfacct" in r for r in only_invalid.rules("nat", "KUBE-NODEPORTS"))
    for family, on in ((IPFamily.IPV4, False), (IPFamily.IPV6, True)):
        rs = _iptables(family, localhost_nodeports=on, nfacct_counters=NFACCT_COUNTERS)
        assert not any("nfacct" in r for r in rs.rules("nat", "KUBE-NODEPORTS"))
        assert "--nfacct-name  ct_state_invalid_dropped_pkts" in rs.rules("filter", "KUBE-FORWARD")[0]
    liberal = _iptables(IPFamily.IPV4, conntrack_tcp_be_liberal=True, nfacct_counters=NFACCT_COUNTERS)
    assert not any("INVALID" in r for r in liberal.rules("filter", "KUBE-FORWARD"))
