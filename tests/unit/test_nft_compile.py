"""nftables compile: goldens per example (compared after normalising order) and layout properties.

Regenerate the goldens with `NETKIT_UPDATE_GOLDENS=1 pytest tests/unit/test_nft_compile.py` and
review the diff: they are the readable record of what netkit writes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from netkit.config import Config
from netkit.model import (
    EndpointAddr,
    IPFamily,
    NodeState,
    ObjectRef,
    Protocol,
    ServicePortName,
    ServicePortState,
    build,
)
from netkit.nft.parse import parse
from netkit.nft.render import render
from netkit.nft.ruleset import Ruleset
from netkit.rules.nftables import backend, names
from netkit.rules.nftables import layout as compile_module
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.layout import SHARDS, SLOTS, STRIDE, endpoint_slots
from netkit.sources.manifests import load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden" / "nftables"
NODE = str(EXAMPLES / "00-node.yaml")
CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
UPDATE = bool(os.environ.get("NETKIT_UPDATE_GOLDENS"))


def state_of(*paths: str) -> NodeState:
    return build(load([NODE, *paths]).objects, "node-a")


def example_files() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "00-node.yaml")


@pytest.mark.parametrize("family", list(IPFamily), ids=lambda f: f.value)
@pytest.mark.parametrize("example", example_files())
def test_golden(example: str, family: IPFamily) -> None:
    compiled = compile(state_of(str(EXAMPLES / example)), CONFIG, family)
    golden = GOLDEN / f"{Path(example).stem}.{family.value}.nft"
    if UPDATE:
        golden.write_text(render(compiled))
    assert golden.exists(), f"no golden {golden.name}: run with NETKIT_UPDATE_GOLDENS=1"
    # parse() normalises order (sets and chains by name, elements as a set).
    assert compiled == parse(golden.read_text())


def ipv4(*paths: str, config: Config = CONFIG) -> Ruleset:
    return compile(state_of(*(str(EXAMPLES / p) for p in paths)), config, IPFamily.IPV4)


def chain(rs: Ruleset, prefix: str, label: str) -> tuple[str, ...]:
    (found,) = [c for c in rs.chains if c.name.startswith(prefix) and c.name.endswith(label)]
    return found.rules


def elements(rs: Ruleset, name: str) -> dict[str, str | None]:
    return {e.key: e.value for e in rs.set_map()[name].elements}


def test_clusterip_dispatch_is_one_map_element_and_one_dnat_rule() -> None:
    rs = ipv4("10-web-clusterip.yaml")
    svc = names.service_object("svc", next(p for p in state_of(str(EXAMPLES / "10-web-clusterip.yaml")).ports))
    assert elements(rs, "service-ips") == {"10.96.0.10 . tcp . 80": f"goto {svc}"}
    slot = endpoint_slots(state_of(str(EXAMPLES / "10-web-clusterip.yaml")).ports)[svc]
    shard, offset = names.endpoint_shard("tcp", slot % SHARDS), slot * STRIDE
    assert rs.chain_map()[svc].rules == (
        "ip daddr 10.96.0.10 th dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
        f"meta l4proto tcp dnat ip to numgen random mod 3 offset {offset} map @{shard}",
    )
    endpoint_map = rs.set_map()[shard]
    assert endpoint_map.key_type == ("integer",) and endpoint_map.value_type == "ipv4_addr . inet_service"
    assert elements(rs, shard) == {str(offset): "10.244.1.11 . 8080", str(offset + 1): "10.244.1.12 . 8080",
                                   str(offset + 2): "10.244.2.11 . 8080"}
    assert not [c for c in rs.chains if "10.244" in c.name], "no chain per endpoint"
    assert [s.name for s in rs.sets if s.name.startswith(("svc-", "endpoints-"))] == [shard], "no map per service"


def service_port(i: int) -> ServicePortState:
    eps = tuple(EndpointAddr(ip_address("10.244.0.0") + 2 * i + k, 8080) for k in range(2))
    return ServicePortState(ServicePortName(ObjectRef("ns", f"svc-{i}"), "http"), IPFamily.IPV4, Protocol.TCP,
                            ip_address("10.96.0.0") + i, 80, endpoints=eps, cluster_endpoints=eps, has_endpoints=True)


def test_endpoint_slots_are_stable_and_distinct() -> None:
    """Every endpoint chain gets its own key range; adding services moves no other service's slot
    unless it collides (checked here over 2,000 ports, in and out of order)."""
    ports = [service_port(i) for i in range(2000)]
    slots = endpoint_slots(ports)
    assert len(set(slots.values())) == len(slots) == 2000
    assert all(0 <= s < SLOTS for s in slots.values())
    assert endpoint_slots(reversed(ports)) == slots
    fewer = endpoint_slots(ports[:1000])
    moved = [k for k, v in fewer.items() if slots[k] != v]
    assert len(moved) <= 5  # only hash collisions with the 1,000 added names move a slot


def test_a_port_with_more_endpoints_than_a_stride_gets_its_own_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_module, "STRIDE", 2)
    rs = ipv4("10-web-clusterip.yaml")
    svc = names.service_object("svc", next(p for p in state_of(str(EXAMPLES / "10-web-clusterip.yaml")).ports))
    assert rs.chain_map()[svc].rules[-1] == f"meta l4proto tcp dnat ip to numgen random mod 3 map @{svc}"
    assert elements(rs, svc) == {"0": "10.244.1.11 . 8080", "1": "10.244.1.12 . 8080", "2": "10.244.2.11 . 8080"}
    assert not [s for s in rs.sets if s.name.startswith("endpoints-")]


def test_masquerade_all_and_no_detector() -> None:
    rs = ipv4("10-web-clusterip.yaml", config=replace(CONFIG, masquerade_all=True))
    assert chain(rs, "svc-", "web/tcp/http")[0] == "ip daddr 10.96.0.10 th dport 80 jump mark-for-masquerade"
    rs = ipv4("10-web-clusterip.yaml", config=Config())
    assert chain(rs, "svc-", "web/tcp/http")[0].startswith("meta l4proto tcp dnat")


def test_nodeport_masquerades_external_traffic() -> None:
    rs = ipv4("20-web-nodeport.yaml")
    ext = chain(rs, "ext-", "web-nodeport/tcp/http")
    assert ext[0] == "jump mark-for-masquerade" and ext[1].startswith("goto svc-")
    (ext_name,) = [c.name for c in rs.chains if c.name.startswith("ext-")]
    assert elements(rs, "service-nodeports") == {"tcp . 30080": f"goto {ext_name}"}


def test_local_policy_loadbalancer_with_source_ranges_and_health_check() -> None:
    rs = ipv4("30-web-loadbalancer.yaml")
    ext = chain(rs, "ext-", "web-lb/tcp/http")
    assert ext[0].startswith("ip saddr 10.244.0.0/16 goto svc-")
    assert ext[1:3] == ("fib saddr type local jump mark-for-masquerade", ext[2])
    assert ext[-1].startswith("goto local-")
    assert chain(rs, "local-", "web-lb/tcp/http") == ("meta l4proto tcp dnat ip to 10.244.1.12:8080",)
    assert chain(rs, "fw-", "web-lb/tcp/http") == ("ip saddr != 203.0.113.0/28 drop",)
    assert list(elements(rs, "firewall-ips")) == ["198.51.100.100 . tcp . 80"]
    assert list(elements(rs, "health-check-nodeports")) == ["32000"]


def test_affinity_uses_dynamic_sets_not_endpoint_chains() -> None:
    rs = ipv4("40-sticky-affinity.yaml")
    aff = [s for s in rs.sets if s.name.startswith("aff-")]
    assert len(aff) == 3 and all(s.dynamic and s.timeout == 600 for s in aff)
    rules = chain(rs, "svc-", "sticky/tcp/http")
    assert sum(r.startswith("ip saddr @aff-") for r in rules) == 3
    assert rules[-3].startswith("numgen random mod 3 0 update @aff-")
    assert rules[-1].startswith("update @aff-"), "the last choice needs no random match"


def test_udp_and_tcp_share_an_ip() -> None:
    rs = ipv4("50-dns-udp.yaml")
    assert set(elements(rs, "service-ips")) == {"10.96.0.53 . tcp . 53", "10.96.0.53 . udp . 53"}
    assert "meta l4proto udp dnat ip to numgen random mod 2" in chain(rs, "svc-", "kube-dns/udp/dns")[1]


def test_headless_and_externalname_write_nothing_per_service() -> None:
    empty = ipv4()
    assert ipv4("60-headless.yaml", "70-externalname.yaml") == empty


def test_dual_stack_has_one_table_per_family() -> None:
    state = state_of(str(EXAMPLES / "80-dual-stack.yaml"))
    v6 = compile(state, CONFIG, IPFamily.IPV6)
    assert v6.family == "ip6"
    assert elements(v6, "cluster-ips") == {"fd00:96::14": None}
    rule = chain(v6, "svc-", "dual/tcp/http")[1]
    assert "dnat ip6 to numgen random mod 2 offset " in rule and " map @endpoints-tcp-" in rule
    offset = rule.split(" offset ")[1].split()[0]
    assert elements(v6, rule.split("@")[1])[offset] == "fd00:244:0:1::11 . 8080"


def test_without_endpoints_reject_or_drop() -> None:
    state = state_of(str(EXAMPLES / "30-web-loadbalancer.yaml"))
    (p,) = state.ports
    none = replace(p, endpoints=(), cluster_endpoints=(), local_endpoints=(), has_endpoints=False)
    rs = compile(replace(state, ports=(none,)), CONFIG, IPFamily.IPV4)
    assert elements(rs, "no-endpoint-services") == {
        "10.96.0.12 . tcp . 80": "goto reject-chain", "198.51.100.100 . tcp . 80": "goto reject-chain"}
    assert elements(rs, "no-endpoint-nodeports") == {"tcp . 30081": "goto reject-chain"}
    assert not elements(rs, "service-ips") and not [c for c in rs.chains if c.name.startswith("svc-")]
    # eTP=Local with endpoints only elsewhere: external traffic is dropped, internal still served.
    remote = tuple(e for e in p.cluster_endpoints if not e.local)
    elsewhere = replace(p, local_endpoints=(), cluster_endpoints=remote, has_endpoints=True)
    rs = compile(replace(state, ports=(elsewhere,)), CONFIG, IPFamily.IPV4)
    assert elements(rs, "no-endpoint-services") == {"198.51.100.100 . tcp . 80": "drop"}
    assert elements(rs, "no-endpoint-nodeports") == {"tcp . 30081": "drop"}
    assert set(elements(rs, "service-ips")) == {"10.96.0.12 . tcp . 80", "198.51.100.100 . tcp . 80"}
    assert not chain(rs, "ext-", "web-lb/tcp/http")[-1].startswith("goto local-")


def test_internal_policy_local_without_local_endpoints_drops_cluster_ip() -> None:
    state = state_of(str(EXAMPLES / "20-web-nodeport.yaml"))
    (p,) = state.ports
    p = replace(p, internal_policy_local=True, local_endpoints=())
    rs = compile(replace(state, ports=(p,)), CONFIG, IPFamily.IPV4)
    assert elements(rs, "no-endpoint-services") == {"10.96.0.11 . tcp . 80": "drop"}
    assert "10.96.0.11" in elements(rs, "cluster-ips")


def test_node_port_addresses_restrict_nodeports_to_a_set() -> None:
    rs = ipv4("20-web-nodeport.yaml", config=replace(CONFIG, node_port_addresses=(ip_network("192.0.2.0/24"),)))
    assert elements(rs, "nodeport-ips") == {"192.0.2.10": None}
    assert chain(rs, "services", "services")[1].startswith("ip daddr @nodeport-ips ")


def test_source_ranges_admit_lb_ips_when_a_range_holds_the_node() -> None:
    state = state_of(str(EXAMPLES / "30-web-loadbalancer.yaml"))
    (p,) = state.ports
    p = replace(p, source_ranges=(ip_network("192.0.2.0/24"), ip_network("192.0.2.128/25"), ip_network("10.1.0.0/16")))
    rs = compile(replace(state, ports=(p,)), CONFIG, IPFamily.IPV4)
    assert chain(rs, "fw-", "web-lb/tcp/http") == ("ip saddr != { 10.1.0.0/16, 192.0.2.0/24, 198.51.100.100 } drop",)


def test_hairpin_set_holds_each_reachable_endpoint_once() -> None:
    rs = ipv4("10-web-clusterip.yaml", "20-web-nodeport.yaml")
    ips = ("10.244.1.11", "10.244.1.12", "10.244.2.11")
    assert set(elements(rs, "hairpin-endpoints")) == {f"{ip} . {ip}" for ip in ips}


def test_interface_detector_is_quoted_and_validated() -> None:
    cfg = replace(CONFIG, detect_local_mode="InterfaceNamePrefix", interface_name_prefix="veth")
    rules = chain(ipv4("10-web-clusterip.yaml", config=cfg), "svc-", "web/tcp/http")
    assert 'iifname != "veth*" jump mark-for-masquerade' in rules[0]
    with pytest.raises(Exception, match="not a valid interface name"):
        ipv4("10-web-clusterip.yaml", config=replace(cfg, interface_name_prefix='x" drop'))


def test_names_map_back_to_service_ports() -> None:
    for p in state_of(*(str(EXAMPLES / f) for f in example_files())).ports:
        label = f"{p.name}/{p.protocol.lower}"
        for kind in ("svc", "ext", "fw", "local"):
            assert names.split(names.service_object(kind, p)) == (kind, label)
    assert names.split("services") is None and names.split("filter-input") is None


def test_summarize_reads_endpoints_back() -> None:
    rs = ipv4("10-web-clusterip.yaml", "30-web-loadbalancer.yaml", "40-sticky-affinity.yaml")
    summary = backend.summarize(rs)
    assert summary["default/web:http/tcp"] == ("10.244.1.11:8080", "10.244.1.12:8080", "10.244.2.11:8080")
    assert summary["default/web-lb:http/tcp"] == ("10.244.1.12:8080", "10.244.2.11:8080")
    assert summary["shop/sticky:http/tcp"] == ("10.244.1.11:8080", "10.244.1.12:8080", "10.244.2.11:8080")


def test_node_ip_for_unrelated_family_is_ignored() -> None:
    assert ip_address("2001:db8:2::10") in state_of().node.ips
    assert "nodeport-ips" not in ipv4().set_map()


def shared_address_docs(*names: str) -> list[dict[str, object]]:
    """Services claiming 198.51.100.7:80 as an externalIP, each with one endpoint."""
    from tests.factories import endpoint, service, slice_

    return [d for i, name in enumerate(names)
            for d in (service(name, ip=f"10.96.0.{i + 1}", externalIPs=["198.51.100.7"]),
                      slice_(name, endpoints=[endpoint(f"10.244.0.{i + 1}")]))]


def service_ips_of(desired: Ruleset) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for s in desired.sets:
        if s.name == "service-ips":
            for e in s.elements:
                found.setdefault(e.key, []).append(e.value or "")
    return found


def test_two_services_sharing_an_external_ip_and_port_give_one_map_key() -> None:
    """Kubernetes accepts two Services with the same externalIP:port (kubernetes#69599). Two
    `198.51.100.7 . tcp . 80 : goto ...` elements are refused by the kernel (File exists), and every
    later sync would fail: the port first in namespace/name order takes the key, as its
    KUBE-SERVICES rule comes first in iptables mode."""
    from netkit.model import build
    from tests.factories import node, objects

    for order in (("alpha", "beta"), ("beta", "alpha")):
        desired = compile(build(objects(node(), *shared_address_docs(*order)), "node-a"), CONFIG, IPFamily.IPV4)
        claims = service_ips_of(desired)["198.51.100.7 . tcp . 80"]
        assert len(claims) == 1 and "default/alpha/" in claims[0], claims


def test_the_shared_key_follows_its_winner_through_the_remembering_compiler() -> None:
    """The winner goes: the next claim takes the key; it comes back: it takes it again. Each result
    equals a fresh compile, and each plan applies on the fake kernel, which refuses a second value
    for a key as the kernel does."""
    from netkit.model import build
    from netkit.rules.nftables.compile import Compiler
    from netkit.rules.nftables.fake import FakeKernel
    from netkit.rules.nftables.plan import plan
    from tests.factories import node, objects

    steps = [("alpha", "beta", "gamma"), ("beta", "gamma"), ("gamma",), ("alpha", "gamma"), ("alpha", "beta", "gamma")]
    winners = ["alpha", "beta", "gamma", "alpha", "alpha"]
    compiler, kernel = Compiler(CONFIG, IPFamily.IPV4), FakeKernel("ip")
    for present, winner in zip(steps, winners, strict=True):
        state = build(objects(node(), *shared_address_docs(*present)), "node-a")
        desired = compiler.compile(state)
        assert desired == compile(state, CONFIG, IPFamily.IPV4)
        claims = service_ips_of(desired)["198.51.100.7 . tcp . 80"]
        assert len(claims) == 1 and f"default/{winner}/" in claims[0], (present, claims)
        kernel.apply(plan(kernel.dump(), desired))
        assert plan(kernel.dump(), desired).empty
