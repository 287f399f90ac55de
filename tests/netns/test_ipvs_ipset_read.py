"""The ipset reader over nfnetlink (netkit.rules.ipvs.ipset) against the real kernel in a fresh network
namespace: every set type IPVS mode uses, IPv4 and IPv6, read back exactly as `ipset save` prints
it (this host has ipset, not IPVS; tests/vm reads the sets of a whole IPVS-mode node the same way)."""

from __future__ import annotations

import pytest

from netkit.model import IPFamily
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.entries import parse_entry
from netkit.rules.ipvs.ipset import IPSetNetlink
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.ruleset import parse_sets
from tests.conftest import need_root_and, netns_sh

V4, V6 = IPFamily.IPV4, IPFamily.IPV6
SETS = {  # name → (type, family, entries as given to `ipset add`)
    "KUBE-CLUSTER-IP": ("hash:ip,port", "inet", ["10.96.0.10,tcp:80", "10.96.0.11,udp:53", "10.96.0.12,sctp:9"]),
    "KUBE-LOOP-BACK": ("hash:ip,port,ip", "inet", ["10.244.1.5,tcp:8080,10.244.1.5", "10.244.1.6,udp:53,10.244.1.6"]),
    "KUBE-LOAD-BALANCER-SOURCE-CIDR": ("hash:ip,port,net", "inet",
                                       ["198.51.100.1,tcp:80,203.0.113.0/24", "198.51.100.1,tcp:80,203.0.113.200/32",
                                        "198.51.100.2,tcp:443,0.0.0.0/1"]),
    "KUBE-IPVS-IPS": ("hash:ip", "inet", ["10.96.0.10", "10.96.0.11"]),
    "NK-TEST-NETS": ("hash:net", "inet", ["10.0.0.0/8", "203.0.113.7/32", "192.0.2.128/25"]),
    "KUBE-NODE-PORT-TCP": ("bitmap:port", "", ["30080", "0", "65535"]),
    "KUBE-6-CLUSTER-IP": ("hash:ip,port", "inet6", ["fd00::10,tcp:80", "fd00::11,udp:53"]),
    "KUBE-6-LOOP-BACK": ("hash:ip,port,ip", "inet6", ["fd00:1::5,tcp:8080,fd00:1::5"]),
    "KUBE-6-LOAD-BALANCER-SRC-CIDR": ("hash:ip,port,net", "inet6",
                                      ["2001:db8::1,tcp:80,2001:db8:1::/48", "2001:db8::1,tcp:80,2001:db8:2::9/128"]),
    "KUBE-6-IPVS-IPS": ("hash:ip", "inet6", ["fd00::10"]),
    "NK-TEST-6-NETS": ("hash:net", "inet6", ["fd00:2::/64", "fd00:3::1/128"]),
    "KUBE-6-NODE-PORT-TCP": ("bitmap:port", "", ["30080"]),
}


def _fill(netns: str, extra: list[str] | None = None) -> None:
    lines = []
    for name, (typ, fam, entries) in SETS.items():
        opts = "range 0-65535" if typ.startswith("bitmap") else f"family {fam}"
        lines.append(f"create {name} {typ} {opts}")
        lines += [f"add {name} {e}" for e in entries]
    netns_sh(netns, "ipset", "restore", input="\n".join([*lines, *(extra or [])]) + "\n")


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("ipset")


def test_every_set_type_reads_as_ipset_save_prints_it(netns: str) -> None:
    _fill(netns)
    saved = parse_sets(netns_sh(netns, "ipset", "save").splitlines(), V4)
    saved6 = parse_sets(netns_sh(netns, "ipset", "save").splitlines(), V6)
    with IPSetNetlink(netns) as nl:
        got = {s.name: (s.type, s.entries) for s in nl.sets([*SETS, "KUBE-NOT-THERE"])}
    assert set(got) == set(SETS)  # the missing one is simply not there
    want = {s.name: (s.type, s.entries) for s in (*saved, *saved6)}
    assert got == want
    assert got["NK-TEST-NETS"][1] == {"10.0.0.0/8", "203.0.113.7", "192.0.2.128/25"}  # a /32 without its prefix
    for name, (typ, entries) in got.items():
        assert {str(parse_entry(typ, e)) for e in entries} == entries, name


def test_a_large_set_spans_many_messages(netns: str) -> None:
    many = [f"add KUBE-LOOP-BACK 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255},tcp:{8000 + i % 7},10.0.0.1"
            for i in range(20_000)]
    _fill(netns, many)
    with IPSetNetlink(netns) as nl:
        (loop,) = nl.sets(["KUBE-LOOP-BACK"])
    assert len(loop.entries) == 20_002 and "10.0.78.31,tcp:8000,10.0.0.1" in loop.entries


@pytest.mark.parametrize("family", [V4, V6])
def test_the_kernel_edge_reads_only_netkits_sets_of_its_family(netns: str, family: IPFamily) -> None:
    _fill(netns)
    netns_sh(netns, "ipset", "create", "SOMEONE-ELSE", "hash:ip")
    sets = IPVSKernel(family, netns)._sets()
    names = {s.name for s in sets}
    assert names == {name for name in SETS if n.is_ours(name) and (name.startswith("KUBE-6-") == (family is V6))}
    assert all(s.family is family for s in sets)
