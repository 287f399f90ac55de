"""compile() of the IPVS backend: virtual servers, real servers, addresses, sets and the payload."""

from __future__ import annotations

import json
from dataclasses import replace
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from netkit.cli import main
from netkit.config import Config
from netkit.model import IPFamily, Protocol, build
from netkit.rules.iptables.ruleset import render as render_iptables
from netkit.rules.ipvs import names
from netkit.rules.ipvs.compile import SCHEDULER_ANNOTATION, compile
from netkit.rules.ipvs.plan import plan
from netkit.rules.ipvs.ruleset import RealServer, Ruleset, parse, render
from netkit.sources.manifests import load
from tests.unit.ipvs_states import sp, state

V4 = IPFamily.IPV4
CFG = Config(mode="ipvs", cluster_cidrs=(ip_network("10.244.0.0/16"),))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def by_addr(r, ip: str, port: int):  # type: ignore[no-untyped-def]
    return next(v for v in r.services if str(v.ip) == ip and v.port == port)


def test_cluster_ip_is_a_nat_virtual_server_with_one_real_server_per_endpoint() -> None:
    r = compile(state(sp("web", "10.96.0.10", 80, ("10.244.1.11", "10.244.2.11"))), CFG, V4)
    vs = by_addr(r, "10.96.0.10", 80)
    assert (vs.protocol, vs.scheduler, vs.persistent) == (Protocol.TCP, "rr", None)
    assert vs.reals == (RealServer(ip_address("10.244.1.11"), 8080), RealServer(ip_address("10.244.2.11"), 8080))
    assert r.addresses == {ip_address("10.96.0.10")}
    assert "add KUBE-CLUSTER-IP 10.96.0.10,tcp:80" in render(r)


def test_scheduler_from_config_and_from_the_kube_router_annotation() -> None:
    port = sp("web", "10.96.0.10", 80, ("10.244.1.11",))
    assert compile(state(port), replace(CFG, ipvs_scheduler="lc"), V4).services[0].scheduler == "lc"

    class Annotated:  # the model may carry annotations; compile only reads attributes
        def __init__(self, inner, annotations):  # type: ignore[no-untyped-def]
            self._inner, self.annotations = inner, annotations

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self._inner, name)

    st = state()
    st = replace(st, ports=(Annotated(port, ((SCHEDULER_ANNOTATION, "sh"),)),))  # type: ignore[arg-type]
    assert compile(st, CFG, V4).services[0].scheduler == "sh"
    st = replace(st, ports=(Annotated(port, ((SCHEDULER_ANNOTATION, "bogus"),)),))  # type: ignore[arg-type]
    assert compile(st, CFG, V4).services[0].scheduler == "rr"  # unknown: the configured one


def test_nodeport_gets_one_virtual_server_per_node_ip_and_node_port_addresses_narrow_them() -> None:
    st = replace(state(sp("web", "10.96.0.10", 80, ("10.244.1.11",), node_port=30080)),
                 node=replace(state().node, ips=(ip_address("192.0.2.10"), ip_address("198.51.100.7"))))
    r = compile(st, CFG, V4)
    assert {str(v.ip) for v in r.services if v.port == 30080} == {"192.0.2.10", "198.51.100.7"}
    assert ip_address("192.0.2.10") not in r.addresses  # node IPs are not put on kube-ipvs0
    narrow = compile(st, replace(CFG, node_port_addresses=(ip_network("192.0.2.0/24"),)), V4)
    assert {str(v.ip) for v in narrow.services if v.port == 30080} == {"192.0.2.10"}
    assert "add KUBE-NODE-PORT-TCP 30080" in render(r)


def test_client_ip_affinity_is_persistence() -> None:
    r = compile(state(sp("sticky", "10.96.0.13", 80, ("10.244.1.11",), affinity=600)), CFG, V4)
    assert r.services[0].persistent == 600
    assert "-A -t 10.96.0.13:80 -s rr -p 600" in render(r)


def test_service_without_endpoints_keeps_an_empty_virtual_server() -> None:
    r = compile(state(sp("web", "10.96.0.10", 80, ())), CFG, V4)
    assert r.services[0].reals == () and r.addresses == {ip_address("10.96.0.10")}
    assert "KUBE-IPVS-IPS" in payload(r) and "REJECT" in payload(r)


def test_service_without_endpoints_is_refused_in_filter_before_ipvs() -> None:
    """IPVS's own answer to an empty virtual server is an ICMP error, rate-limited per peer even for
    TCP (kubernetes#90810): the no-endpoints set makes filter refuse TCP with a reset, the rest with
    ICMP, before IPVS sees the packet; new connections only (draining ones carry on), and not the
    in-cluster traffic the eTP=Local fwmark virtual server serves."""
    empty = sp("web", "10.96.0.10", 80, (), node_port=30080)
    full = sp("api", "10.96.0.11", 80, ("10.244.1.11",))
    lb = sp("lb", "10.96.0.12", 80, ("10.244.2.11",), lb_ips=("198.51.100.100",), etp_local=True)
    r = compile(state(empty, full, lb), CFG, V4)
    no_eps = next(s for s in r.sets if s.name == names.NO_ENDPOINTS)
    assert no_eps.entries == {"10.96.0.10,tcp:80", "192.0.2.10,tcp:30080", "198.51.100.100,tcp:80"}
    rules = r.iptables.tables["filter"][names.IPVS_FILTER]
    mine = "-m mark ! --mark 0x4e4b0000/0xffff0000 -m set --match-set KUBE-NO-ENDPOINTS dst,dst"
    assert rules[:2] == (f"-p tcp -m conntrack --ctstate NEW {mine} -j REJECT --reject-with tcp-reset",
                         f"-m conntrack --ctstate NEW {mine} -j REJECT --reject-with icmp-port-unreachable")
    # ports of a service IP that no virtual server serves: TCP reset too
    assert rules[-2:] == (
        "-p tcp -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with tcp-reset",
        "-m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with "
        "icmp-port-unreachable")
    v6 = compile(state(replace(sp("web6", "fd00::10", 80, ()), family=IPFamily.IPV6)), CFG, IPFamily.IPV6)
    assert next(s for s in v6.sets if s.name == "KUBE-6-NO-ENDPOINTS").entries == {"fd00::10,tcp:80"}
    assert "icmp6-port-unreachable" in payload(v6)


def test_etp_local_uses_local_endpoints_outside_and_a_fwmark_service_inside() -> None:
    port = sp("lb", "10.96.0.12", 80, ("10.244.1.11", "10.244.2.11"), lb_ips=("198.51.100.100",),
              node_port=30081, local_eps=("10.244.1.11",), etp_local=True)
    r = compile(state(port), CFG, V4)
    assert [str(x.ip) for x in by_addr(r, "198.51.100.100", 80).reals] == ["10.244.1.11"]
    assert [str(x.ip) for x in by_addr(r, "192.0.2.10", 30081).reals] == ["10.244.1.11"]
    assert len(by_addr(r, "10.96.0.12", 80).reals) == 2  # internal traffic policy Cluster
    fw = next(v for v in r.services if v.fwmark)
    assert fw.fwmark & names.FWMARK_HIGH == names.FWMARK_BASE and len(fw.reals) == 2
    assert f"--set-xmark {fw.fwmark:#x}/0xffffffff" in payload(r)
    assert "-s 10.244.0.0/16 -d 198.51.100.100/32" in payload(r)
    # a mark does not move when other services come and go
    other = sp("aaa", "10.96.0.2", 80, ("10.244.1.11",), lb_ips=("198.51.100.1",), etp_local=True)
    again = compile(state(other, port), CFG, V4)
    assert fw.fwmark in {v.fwmark for v in again.services}


def test_etp_local_without_any_local_endpoint_has_an_empty_external_virtual_server() -> None:
    port = sp("lb", "10.96.0.12", 80, ("10.244.2.11",), lb_ips=("198.51.100.100",), etp_local=True)
    r = compile(state(port), CFG, V4)
    assert by_addr(r, "198.51.100.100", 80).reals == ()
    assert next(v for v in r.services if v.fwmark).reals  # in-cluster traffic still has somewhere to go


def test_lb_source_ranges_and_hairpin_sets() -> None:
    port = sp("lb", "10.96.0.12", 80, ("10.244.1.11",), lb_ips=("198.51.100.100",),
              source_ranges=("203.0.113.0/28",))
    text = render(compile(state(port), CFG, V4))
    assert "add KUBE-LOAD-BALANCER-FW 198.51.100.100,tcp:80" in text
    assert "add KUBE-LOAD-BALANCER-SOURCE-CIDR 198.51.100.100,tcp:80,203.0.113.0/28" in text
    assert "add KUBE-LOOP-BACK 10.244.1.11,tcp:8080,10.244.1.11" in text


def test_masquerade_rules_follow_the_config() -> None:
    port = state(sp("web", "10.96.0.10", 80, ("10.244.1.11",)))
    assert "! -s 10.244.0.0/16 -m comment" in payload(compile(port, CFG, V4))  # canonical: -s first
    assert "KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ" in payload(compile(port, replace(CFG, masquerade_all=True), V4))
    no_detector = payload(compile(port, replace(CFG, cluster_cidrs=()), V4))
    assert "KUBE-CLUSTER-IP dst,dst" not in no_detector.split("*nat")[1].split("KUBE-EXTERNAL-IP-LOCAL")[0]


def test_the_payload_is_written_exactly_when_it_changes() -> None:
    a = compile(state(sp("web", "10.96.0.10", 80, ("10.244.1.11",))), CFG, V4)
    b = compile(state(sp("web", "10.96.0.10", 80, ("10.244.1.12",))), CFG, V4)  # only sets/reals differ
    c = compile(state(sp("web", "10.96.0.10", 80, ("10.244.1.11",))), replace(CFG, masquerade_all=True), V4)
    assert plan(a, b).iptables is None
    p = plan(a, c).iptables
    assert p is not None and set(p.write) == {"nat"} and list(p.write["nat"]) == ["KUBE-SERVICES"] and not p.jumps


def payload(r: Ruleset) -> str:
    return render_iptables(r.iptables)


def test_ipv6_set_names_fit_ipset_limits() -> None:
    for base in names.SET_TYPES:
        assert len(names.set_name(base, IPFamily.IPV6)) <= 31
        assert names.is_ours(names.set_name(base, IPFamily.IPV6))


def test_render_parse_round_trip_over_the_examples() -> None:
    loaded = load([str(EXAMPLES)])
    st = build(loaded.objects, "node-a")
    for family in IPFamily:
        r = compile(st, CFG, family)
        assert parse(render(r)) == r


def test_compile_json_is_structured(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--mode", "ipvs", "-f", str(EXAMPLES), "--node-name", "node-a", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["families"]["IPv4"]
    assert "text" not in doc
    web = next(v for v in doc["virtual_servers"] if v["address"] == "10.96.0.10" and v["port"] == 80)
    assert web["scheduler"] == "rr" and web["comment"] == "default/web:http cluster IP"
    assert {r["address"] for r in web["real_servers"]} == {"10.244.1.11", "10.244.1.12", "10.244.2.11"}
    assert "10.96.0.10" in doc["addresses"]
    assert "10.96.0.10,tcp:80" in next(s for s in doc["ipsets"] if s["name"] == "KUBE-CLUSTER-IP")["entries"]
    jumps = doc["iptables"]["tables"]["nat"]["PREROUTING"]
    assert jumps == ['-m comment --comment "kubernetes service portals" -j KUBE-SERVICES']


def test_real_servers_come_in_the_kernel_dump_order() -> None:
    """The compiler keeps the model's endpoint order; a dump sorts real servers: they must agree."""
    r = compile(build(load([str(EXAMPLES)]).objects, "node-a"), CFG, V4)
    assert all(vs.reals == tuple(sorted(vs.reals)) for vs in r.services)


def test_a_host_sized_source_range_is_spelt_as_ipset_prints_it() -> None:
    """`ipset save` (and the dump) print a /32 or /128 range of a hash:…,net set without its prefix:
    spelt otherwise, every full sync would plan to add an entry the kernel already has."""
    port = sp("lb", "10.96.0.12", 80, ("10.244.1.11",), lb_ips=("198.51.100.100",),
              source_ranges=("203.0.113.7/32", "203.0.113.0/28"))
    text = render(compile(state(port), CFG, V4))
    assert "add KUBE-LOAD-BALANCER-SOURCE-CIDR 198.51.100.100,tcp:80,203.0.113.7\n" in text
    assert "add KUBE-LOAD-BALANCER-SOURCE-CIDR 198.51.100.100,tcp:80,203.0.113.0/28\n" in text
