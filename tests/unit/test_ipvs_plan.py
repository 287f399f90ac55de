"""plan() of the IPVS backend, applied to the fake kernel: only the difference, graceful
termination, foreign virtual servers untouched, and what the kernel refuses."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import IPFamily, Protocol
from netkit.rules.ipvs.compile import compile
from netkit.rules.ipvs.fake import FakeKernel
from netkit.rules.ipvs.plan import plan, render_plan
from netkit.rules.ipvs.ruleset import VirtualServer
from tests.unit.ipvs_states import sp, state

V4 = IPFamily.IPV4
CFG = Config(mode="ipvs")
EPS = ("10.244.1.11", "10.244.1.12", "10.244.1.13")


def web(eps=EPS, **kw):  # type: ignore[no-untyped-def]
    return compile(state(sp("web", "10.96.0.10", 80, eps, **kw)), CFG, V4)


def synced(desired) -> FakeKernel:  # type: ignore[no-untyped-def]
    k = FakeKernel(V4)
    k.apply(plan(k.dump(), desired))
    return k


def real_ips(k: FakeKernel) -> dict[str, int]:
    vs = next(v for v in k.dump().services if str(v.ip) == "10.96.0.10")
    return {str(r.ip): r.weight for r in vs.reals}


def test_plan_then_apply_reaches_the_desired_state_and_a_second_plan_is_empty() -> None:
    desired = compile(state(sp("web", "10.96.0.10", 80, EPS, node_port=30080, external_ips=("198.51.100.10",)),
                            sp("dns", "10.96.0.53", 53, EPS, proto=Protocol.UDP)), CFG, V4)
    k = synced(desired)
    dumped = k.dump()
    assert dumped.services == desired.services and dumped.sets == desired.sets
    assert dumped.addresses == desired.addresses
    assert plan(dumped, desired).empty


def test_only_the_difference_is_planned() -> None:
    k = synced(web())
    p = plan(k.dump(), web(EPS + ("10.244.1.14",)))
    assert [str(r.ip) for _, r in p.add_reals] == ["10.244.1.14"]
    assert not p.add_services and not p.del_services and not p.iptables and not p.create_sets
    assert p.add_entries == (("KUBE-LOOP-BACK", "10.244.1.14,tcp:8080,10.244.1.14"),)


def test_scheduler_and_persistence_change_in_place() -> None:
    k = synced(web())
    p = plan(k.dump(), web(affinity=600))
    assert [s.persistent for s in p.set_services] == [600] and not p.del_services and not p.add_services
    k.apply(p)
    assert k.dump().services[0].persistent == 600


def test_removed_tcp_real_server_drains_then_goes() -> None:
    k = synced(web())
    vs = k.dump().services[0]
    k.set_connections(vs.key, (ip_address(EPS[0]), 8080), active=1, inactive=2)
    p = plan(k.dump(), web(EPS[1:]))
    assert [(str(r.ip), r.weight) for _, r in p.set_reals] == [(EPS[0], 0)] and not p.del_reals
    assert p.draining == 1 and "draining" in render_plan(p)
    k.apply(p)
    assert real_ips(k)[EPS[0]] == 0
    assert plan(k.dump(), web(EPS[1:])).set_reals == ()  # still connected: nothing to do
    k.set_connections(vs.key, (ip_address(EPS[0]), 8080), active=0, inactive=2)  # TIME_WAIT only
    p = plan(k.dump(), web(EPS[1:]))
    assert [str(r.ip) for _, r in p.del_reals] == [EPS[0]]
    k.apply(p)
    assert EPS[0] not in real_ips(k)


def test_draining_real_server_that_comes_back_gets_its_weight_again() -> None:
    k = synced(web())
    vs = k.dump().services[0]
    k.set_connections(vs.key, (ip_address(EPS[0]), 8080), active=3)
    k.apply(plan(k.dump(), web(EPS[1:])))
    k.apply(plan(k.dump(), web()))
    assert real_ips(k)[EPS[0]] == 1


def test_removed_tcp_real_server_without_connections_goes_at_once() -> None:
    k = synced(web())
    p = plan(k.dump(), web(EPS[1:]))
    assert [str(r.ip) for _, r in p.del_reals] == [EPS[0]] and not p.set_reals


def test_udp_real_servers_go_at_once_even_with_connections() -> None:
    def dns(eps):  # type: ignore[no-untyped-def]
        return compile(state(sp("dns", "10.96.0.53", 53, eps, proto=Protocol.UDP)), CFG, V4)
    k = synced(dns(EPS))
    vs = k.dump().services[0]
    k.set_connections(vs.key, (ip_address(EPS[0]), 8080), active=5)
    p = plan(k.dump(), dns(EPS[1:]))
    assert [str(r.ip) for _, r in p.del_reals] == [EPS[0]] and p.draining == 0


def test_removed_service_is_deleted_with_its_address_and_set_entries() -> None:
    k = synced(compile(state(sp("web", "10.96.0.10", 80, EPS), sp("old", "10.96.0.20", 80, EPS)), CFG, V4))
    p = plan(k.dump(), web())
    assert [str(s.ip) for s in p.del_services] == ["10.96.0.20"]
    assert [str(a) for a in p.del_addresses] == ["10.96.0.20"]
    assert ("KUBE-CLUSTER-IP", "10.96.0.20,tcp:80") in p.del_entries


def test_foreign_virtual_servers_are_never_read_planned_or_cleaned() -> None:
    k = FakeKernel(V4)
    foreign = (VirtualServer(Protocol.TCP, ip_address("203.0.113.5"), 80, "wlc"),
               VirtualServer(Protocol.TCP, ip_address("192.0.2.10"), 8000),  # a node IP, not a NodePort
               VirtualServer(Protocol.TCP, None, 0, fwmark=7))
    for vs in foreign:
        k.add_foreign(vs)
    k.apply(plan(k.dump(), web(node_port=30080)))
    assert all(v.key not in {f.key for f in foreign} for v in k.dump().services)
    k.apply(plan(k.dump(), compile(state(), CFG, V4)))
    k.cleanup()
    assert {v.key for v in k.state.services} == {f.key for f in foreign}


def test_fake_refuses_what_the_kernel_refuses_and_changes_nothing() -> None:
    k = synced(web())
    before = k.state
    good = web()
    vs = good.services[0]
    bad = {
        "unknown scheduler": plan(good, replace(good, services=(replace(vs, scheduler="nope"),))),
        "duplicate service": replace(plan(good, good), add_services=(vs,)),
        "multicast real server": replace(plan(good, good),
                                        add_reals=((vs, replace(vs.reals[0], ip=ip_address("224.0.0.1"))),)),
        "destroy a set in use": replace(plan(good, good), destroy_sets=("KUBE-CLUSTER-IP",)),
        "entry of the other family": replace(plan(good, good), add_entries=(("KUBE-CLUSTER-IP", "fd00::1,tcp:80"),)),
        "missing address": replace(plan(good, good), del_addresses=(ip_address("10.96.0.99"),)),
    }
    for what, p in bad.items():
        with pytest.raises(KernelError):
            k.apply(p)
        assert k.state == before, what  # all or nothing


def test_the_payload_is_planned_chain_by_chain_and_jumps_are_inserted() -> None:
    from netkit.config import parse_cidrs
    from netkit.rules.ipvs.plan import describe

    first = synced(web())  # a fresh kernel: every chain written, every entry jump inserted
    (applied,) = first.applied
    assert applied.iptables is not None
    assert len(applied.iptables.jumps) == 11 and applied.counts()["iptables_chains_written"] == 11
    masq_all = compile(state(sp("web", "10.96.0.10", 80, EPS)), replace(CFG, cluster_cidrs=parse_cidrs(
        ["10.244.0.0/16"], "t")), V4)
    p = plan(first.dump(), masq_all)  # another config: one chain differs, the jumps are in place
    assert p.iptables is not None and not p.iptables.jumps
    assert {c for chains in p.iptables.write.values() for c in chains} == {"KUBE-SERVICES"}
    text = describe(p)
    assert "+++ desired nat KUBE-SERVICES" in text and "+-A KUBE-SERVICES ! -s 10.244.0.0/16" in text
    assert "iptables-restore --noflush <<EOF" in render_plan(p)


def test_virtual_servers_in_exclude_cidrs_are_never_deleted() -> None:
    """ipvs.excludeCIDRs as kube-proxy's cleanLegacyService: a virtual server no longer wanted whose
    address is in one stays (with its real servers); the others go as usual."""
    cfg = replace(CFG, ipvs_exclude_cidrs=(ip_network("10.96.100.0/24"),))
    both = compile(state(sp("web", "10.96.0.10", 80, EPS), sp("kept", "10.96.100.5", 80, EPS)), cfg, V4)
    k = synced(both)
    neither = compile(state(sp("other", "10.96.0.20", 80, EPS)), cfg, V4)
    p = plan(k.dump(), neither)
    assert [str(v.ip) for v in p.del_services] == ["10.96.0.10"]
    k.apply(p)
    left = {str(v.ip): len(v.reals) for v in k.state.services}
    assert left == {"10.96.0.20": 3, "10.96.100.5": 3}
    assert [str(v.ip) for v in plan(k.dump(), compile(state(), CFG, V4)).del_services] == ["10.96.0.20"]
