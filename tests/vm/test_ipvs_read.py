"""Reading an IPVS-mode node back (inside the test VM): the sets over nfnetlink equal what `ipset save`
prints, and `dump_reusing` holds what equals the committed Ruleset as the committed objects while
reading what differs as it is (connection counts included)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from netkit.config import Config
from netkit.model import IPFamily, Protocol
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.compile import compile
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.plan import plan
from netkit.rules.ipvs.ruleset import Ruleset, parse_sets
from tests.unit.ipvs_states import sp, state
from tests.vm.ipvslab import POD_IPS, Lab, sh

V4 = IPFamily.IPV4
DESIRED = state(sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080, external_ips=("198.51.100.10",)),
                sp("lb", "10.96.0.12", 80, POD_IPS, lb_ips=("198.51.100.100",), node_port=30081,
                   source_ranges=("203.0.113.0/28", "192.0.2.7/32"), local_eps=POD_IPS[:1], etp_local=True),
                sp("empty", "10.96.0.14", 80, ()),
                sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353))


@pytest.fixture
def kernel(lab: Lab) -> Iterator[IPVSKernel]:
    k = IPVSKernel(V4, lab.node)
    yield k
    k.cleanup()


def committed(k: IPVSKernel) -> Ruleset:
    want = compile(DESIRED, Config(mode="ipvs"), V4)
    k.apply(plan(k.dump(), want))
    return want


def test_the_sets_read_over_netlink_are_what_ipset_save_prints(kernel: IPVSKernel) -> None:
    committed(kernel)
    saved = sh("ip", "netns", "exec", kernel.netns, "ipset", "save")
    ours = {n.set_name(b, V4) for b in n.SET_TYPES}
    want = {s.name: (s.type, set(s.entries)) for s in parse_sets(saved.splitlines(), V4, ours.__contains__)}
    got = {s.name: (s.type, set(s.entries)) for s in kernel.dump().sets}
    assert got == want and len(got) == len(n.SET_TYPES)
    assert any("192.0.2.7" in e for e in got["KUBE-LOAD-BALANCER-SOURCE-CIDR"][1])


def test_dump_reusing_shares_what_is_unchanged_and_reads_what_is_not(kernel: IPVSKernel, lab: Lab) -> None:
    want = committed(kernel)
    fresh = kernel.dump()
    live = kernel.dump_reusing(want)
    assert live == fresh and plan(live, want).empty
    assert live.services is want.services and live.addresses is want.addresses
    assert all(a is b for a, b in zip(live.sets, want.sets, strict=True))
    for table, chains in want.iptables.tables.items():
        for chain, rules in chains.items():
            assert live.iptables.rules(table, chain) is rules or not n.is_ipvs_chain(chain), (table, chain)
    # the kernel changes behind the daemon's back: one real server's weight, one set entry
    web = next(vs for vs in want.services if str(vs.ip) == "10.96.0.10" and vs.port == 80)
    sh("ip", "netns", "exec", kernel.netns, "ipvsadm", "-e", "-t", "10.96.0.10:80", "-r",
       f"{web.reals[0].ip}:{web.reals[0].port}", "-m", "-w", "5")
    sh("ip", "netns", "exec", kernel.netns, "ipset", "del", "KUBE-CLUSTER-IP", "10.96.0.53,udp:53")
    live = kernel.dump_reusing(want)
    assert live == kernel.dump()
    changed = live.service(web.key)
    assert changed is not None and changed is not web and changed.reals[0].weight == 5
    assert changed.reals[1:] == web.reals[1:]
    assert live.set("KUBE-CLUSTER-IP") is not want.set("KUBE-CLUSTER-IP")
    assert live.set("KUBE-LOOP-BACK") is want.set("KUBE-LOOP-BACK")
    others = [vs for vs in live.services if vs.key != web.key]
    assert all(vs is want.service(vs.key) for vs in others)
    p = plan(live, want)
    assert [(vs.key, r.weight) for vs, r in p.set_reals] == [(web.key, 1)]
    assert p.add_entries == (("KUBE-CLUSTER-IP", "10.96.0.53,udp:53"),)


def test_a_connected_real_server_is_read_with_its_counts(kernel: IPVSKernel, lab: Lab) -> None:
    lab.start_backends([f"{ip}:8080/tcp" for ip in POD_IPS])
    want = committed(kernel)
    conn, _ = lab.connect("10.96.0.10", 80)
    try:
        live = kernel.dump_reusing(want)
        vs = live.service(next(v.key for v in want.services if str(v.ip) == "10.96.0.10" and v.port == 80))
        assert vs is not None and sum(r.active for r in vs.reals) == 1
        assert vs is not want.service(vs.key)
    finally:
        conn.close()
