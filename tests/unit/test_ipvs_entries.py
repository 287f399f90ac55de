"""The typed ipset entry reader (netkit.rules.ipvs.entries): every set type IPVS mode uses, IPv4 and
IPv6, read into a SetEntry and printed back in `ipset save`'s spelling; what it refuses; the typed
view a set keeps (IPSet.typed) and what reads it (keep, ownership)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.model import IPFamily, Protocol
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.entries import TYPES, EntryError, SetEntry, parse_entry
from netkit.rules.ipvs.plan import owned
from netkit.rules.ipvs.ruleset import IPSet, VirtualServer, parse_sets, render_sets

A4, B4 = IPv4Address("10.96.0.10"), IPv4Address("10.244.1.5")
A6, B6 = IPv6Address("fd00::10"), IPv6Address("fd00:1::5")
TCP, UDP, SCTP = Protocol.TCP, Protocol.UDP, Protocol.SCTP

# (set type, text as `ipset save` prints it, the entry)
CASES = [
    ("hash:ip", "10.96.0.10", SetEntry(ip=A4)),
    ("hash:ip", "fd00::10", SetEntry(ip=A6)),
    ("hash:net", "10.0.0.0/8", SetEntry(net=IPv4Network("10.0.0.0/8"))),
    ("hash:net", "203.0.113.7", SetEntry(net=IPv4Network("203.0.113.7/32"))),  # host-sized: no /32
    ("hash:net", "fd00:1::/64", SetEntry(net=IPv6Network("fd00:1::/64"))),
    ("hash:net", "fd00::7", SetEntry(net=IPv6Network("fd00::7/128"))),
    ("hash:ip,port", "10.96.0.10,tcp:80", SetEntry(A4, TCP, 80)),
    ("hash:ip,port", "10.96.0.10,udp:53", SetEntry(A4, UDP, 53)),
    ("hash:ip,port", "10.96.0.10,sctp:9", SetEntry(A4, SCTP, 9)),
    ("hash:ip,port", "fd00::10,tcp:443", SetEntry(A6, TCP, 443)),
    ("hash:ip,port,ip", "10.244.1.5,tcp:8080,10.244.1.5", SetEntry(B4, TCP, 8080, ip2=B4)),
    ("hash:ip,port,ip", "fd00:1::5,udp:53,fd00:1::5", SetEntry(B6, UDP, 53, ip2=B6)),
    ("hash:ip,port,net", "10.96.0.10,tcp:80,203.0.113.0/24", SetEntry(A4, TCP, 80, net=IPv4Network("203.0.113.0/24"))),
    ("hash:ip,port,net", "10.96.0.10,tcp:80,203.0.113.9", SetEntry(A4, TCP, 80, net=IPv4Network("203.0.113.9/32"))),
    ("hash:ip,port,net", "fd00::10,tcp:80,2001:db8::/32", SetEntry(A6, TCP, 80, net=IPv6Network("2001:db8::/32"))),
    ("bitmap:port", "30080", SetEntry(port=30080)),
    ("bitmap:port", "0", SetEntry(port=0)),
]


@pytest.mark.parametrize(("set_type", "text", "entry"), CASES, ids=[f"{t} {x}" for t, x, _ in CASES])
def test_each_spelling_reads_and_prints_back(set_type: str, text: str, entry: SetEntry) -> None:
    assert parse_entry(set_type, text) == entry
    assert str(entry) == text


def test_every_type_kube_proxy_and_netkit_use_is_read() -> None:
    assert {t for t, _ in n.SET_TYPES.values()} <= set(TYPES)
    assert set(TYPES) == {t for t, _, _ in CASES}


@pytest.mark.parametrize(("set_type", "text"), [
    ("hash:ip,port", "10.96.0.10,icmp:8"),  # a protocol kube-proxy never writes
    ("hash:ip,port", "10.96.0.10,tcp:70000"),
    ("hash:ip,port", "10.96.0.10,tcp:-1"),
    ("hash:ip,port", "10.96.0.10"),  # too few parts
    ("hash:ip,port,ip", "10.96.0.10,tcp:80"),
    ("hash:ip", "10.96.0.300"),
    ("hash:ip", "web"),
    ("hash:net", "10.0.0.0/33"),
    ("bitmap:port", "tcp:80"),
    ("list:set", "KUBE-X"),
])
def test_what_is_not_an_entry_is_refused(set_type: str, text: str) -> None:
    with pytest.raises(EntryError):
        parse_entry(set_type, text)


v4 = st.integers(0, 2**32 - 1).map(IPv4Address)
v6 = st.integers(0, 2**128 - 1).map(IPv6Address)
ports = st.integers(0, 65535)
protos = st.sampled_from(list(Protocol))


@st.composite
def typed_entries(draw: st.DrawFn) -> tuple[str, SetEntry]:
    ip = draw(st.one_of(v4, v6))
    prefix = draw(st.integers(0, ip.max_prefixlen))
    net = ip_network(f"{ip}/{prefix}", strict=False)
    set_type = draw(st.sampled_from(TYPES))
    entry = {
        "hash:ip": SetEntry(ip=ip), "hash:net": SetEntry(net=net), "bitmap:port": SetEntry(port=draw(ports)),
        "hash:ip,port": SetEntry(ip, draw(protos), draw(ports)),
        "hash:ip,port,ip": SetEntry(ip, draw(protos), draw(ports), ip2=ip),
        "hash:ip,port,net": SetEntry(ip, draw(protos), draw(ports), net=net),
    }[set_type]
    return set_type, entry


@settings(max_examples=300, deadline=None)
@given(typed_entries())
def test_print_then_read_is_the_same_entry(case: tuple[str, SetEntry]) -> None:
    set_type, entry = case
    text = str(entry)
    assert parse_entry(set_type, text) == entry
    assert str(parse_entry(set_type, text)) == text


def test_a_set_reads_its_entries_once_and_leaves_out_what_it_cannot_read() -> None:
    s = IPSet("KUBE-CLUSTER-IP", "hash:ip,port", IPFamily.IPV4,
              frozenset({"10.96.0.10,tcp:80", "10.96.0.11,icmp:8"}))
    assert s.typed() == {SetEntry(A4, TCP, 80)}
    assert s.typed() is s.typed()
    assert len(s.entries) == 2  # the text keeps it: a plan still sees (and deletes) it


def test_sets_read_from_ipset_save_carry_their_typed_entries() -> None:
    text = render_sets((IPSet("KUBE-6-LOOP-BACK", "hash:ip,port,ip", IPFamily.IPV6,
                              frozenset({"fd00:1::5,tcp:8080,fd00:1::5"})),
                        IPSet("KUBE-NODE-PORT-TCP", "bitmap:port", IPFamily.IPV6, frozenset({"30080"}))))
    loop, nodeports = parse_sets(text.splitlines(), IPFamily.IPV6)
    assert loop.typed() == {SetEntry(B6, TCP, 8080, ip2=B6)} and nodeports.typed() == {SetEntry(port=30080)}


def test_ownership_of_a_node_port_virtual_server_comes_from_the_typed_bitmap() -> None:
    sets = (IPSet("KUBE-NODE-PORT-TCP", "bitmap:port", IPFamily.IPV4, frozenset({"30080"})),)
    node = ip_address("192.0.2.10")
    mine = VirtualServer(TCP, node, 30080)
    theirs = VirtualServer(TCP, node, 30081)
    udp = VirtualServer(UDP, node, 30080)
    assert owned((mine, theirs, udp), frozenset(), sets) == (mine,)


def test_keep_carries_the_live_entries_that_name_a_kept_virtual_server_or_its_endpoints() -> None:
    from netkit.rules.ipvs.keep import keep
    from netkit.rules.ipvs.ruleset import RealServer, Ruleset

    v4 = IPFamily.IPV4
    web = VirtualServer(TCP, A4, 80, reals=(RealServer(ip_address("10.244.1.7"), 8080),),
                        comment="default/web:http cluster IP")
    api = VirtualServer(TCP, ip_address("10.96.0.11"), 80, reals=(RealServer(B4, 8080),))
    other = "10.96.0.12,tcp:80"

    def sets(cluster: set[str], loop: set[str], cidr: set[str]) -> tuple[IPSet, ...]:
        return (IPSet("KUBE-CLUSTER-IP", "hash:ip,port", v4, frozenset(cluster)),
                IPSet("KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net", v4, frozenset(cidr)),
                IPSet("KUBE-LOOP-BACK", "hash:ip,port,ip", v4, frozenset(loop)))

    live = Ruleset(v4, (web, api), sets=sets({"10.96.0.10,tcp:80", "10.96.0.11,tcp:80", other},
                                             {"10.244.1.5,tcp:8080,10.244.1.5", "10.244.1.9,tcp:80,10.244.1.9"},
                                             {"10.96.0.11,tcp:80,203.0.113.0/24", "10.96.0.12,tcp:80,203.0.113.9"}))
    desired = Ruleset(v4, (web,), sets=sets({"10.96.0.10,tcp:80"}, set(), set()))
    got = {s.name: set(s.entries) for s in keep(live, desired, ["default/api"]).sets}
    assert got == {"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80", "10.96.0.11,tcp:80"},
                   "KUBE-LOAD-BALANCER-SOURCE-CIDR": {"10.96.0.11,tcp:80,203.0.113.0/24"},
                   "KUBE-LOOP-BACK": {"10.244.1.5,tcp:8080,10.244.1.5"}}
