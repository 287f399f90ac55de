"""IPVS mode on a real kernel (inside the test VM), with real packets from a client namespace.

Each test programs the node namespace through the same path as `netkit apply --mode ipvs`:
compile → plan(kernel.dump(), desired) → kernel.apply, then sends TCP/UDP from the client.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import IPFamily, NodeState, Protocol
from netkit.rules.ipvs.compile import compile
from netkit.rules.ipvs.fake import FakeKernel
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.plan import plan
from netkit.rules.ipvs.ruleset import RealServer, Ruleset, VirtualServer
from tests.unit.ipvs_states import sp, state
from tests.vm.ipvslab import NODE_IP, POD_IPS, Lab, sh, wait_for

CONFIG = Config(mode="ipvs")
V4 = IPFamily.IPV4
TCP_BACKENDS = [f"{ip}:8080/tcp" for ip in POD_IPS]
UDP_BACKENDS = [f"{ip}:5353/udp" for ip in POD_IPS]


@pytest.fixture(scope="module")
def served(lab: Lab) -> Lab:
    lab.start_backends(TCP_BACKENDS + UDP_BACKENDS)
    return lab


@pytest.fixture
def kernel(served: Lab) -> Iterator[IPVSKernel]:
    k = IPVSKernel(V4, served.node)
    yield k
    k.cleanup()


def sync(k: IPVSKernel, desired: NodeState | Ruleset, config: Config = CONFIG) -> Ruleset:
    want = desired if isinstance(desired, Ruleset) else compile(desired, config, V4)
    k.apply(plan(k.dump(), want))
    return want


def reals(k: IPVSKernel, ip: str, port: int) -> dict[str, RealServer]:
    vs = next(v for v in k.dump().services if str(v.ip) == ip and v.port == port)
    return {str(r.ip): r for r in vs.reals}


def test_clusterip_and_nodeport_tcp_udp_round_robin(kernel: IPVSKernel, served: Lab) -> None:
    sync(kernel, state(sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080),
                       sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353)))
    tcp = served.tcp_hits("10.96.0.10", 80, 30)
    assert sorted(tcp.values()) == [10, 10, 10], tcp  # rr: exactly even
    assert set(tcp) == {f"{ip}:8080" for ip in POD_IPS}
    udp = served.udp_hits("10.96.0.53", 53, 9)
    assert sorted(udp.values()) == [3, 3, 3], udp
    nodeport = served.tcp_hits(NODE_IP, 30080, 6)
    assert sorted(nodeport.values()) == [2, 2, 2], nodeport


def test_weighted_scheduler_follows_weights(kernel: IPVSKernel, served: Lab) -> None:
    desired = compile(state(sp("web", "10.96.0.10", 80, POD_IPS[:2])), replace(CONFIG, ipvs_scheduler="wrr"), V4)
    weights = {POD_IPS[0]: 3, POD_IPS[1]: 1}
    vs = desired.services[0]
    weighted = replace(vs, reals=tuple(replace(r, weight=weights[str(r.ip)]) for r in vs.reals))
    sync(kernel, replace(desired, services=(weighted,)))
    hits = served.tcp_hits("10.96.0.10", 80, 40)
    assert hits == {f"{POD_IPS[0]}:8080": 30, f"{POD_IPS[1]}:8080": 10}, hits


def test_persistence_keeps_a_client_on_one_real_server(kernel: IPVSKernel, served: Lab) -> None:
    sync(kernel, state(sp("sticky", "10.96.0.13", 80, POD_IPS, affinity=600)))
    hits = served.tcp_hits("10.96.0.13", 80, 12)
    assert len(hits) == 1, hits
    dumped = kernel.dump().services[0]
    assert dumped.persistent == 600 and dumped.scheduler == "rr"


def test_removed_endpoint_drains_gracefully(kernel: IPVSKernel, served: Lab) -> None:
    sync(kernel, state(sp("web", "10.96.0.10", 80, POD_IPS)))
    conns = [served.connect("10.96.0.10", 80) for _ in range(3)]  # rr: one on each real server
    conn, victim = next((s, who) for s, who in conns if who.startswith(POD_IPS[0] + ":"))
    for s, _ in conns:
        if s is not conn:
            s.close()
    remaining = tuple(ip for ip in POD_IPS if ip != POD_IPS[0])
    sync(kernel, state(sp("web", "10.96.0.10", 80, remaining)))
    rs = reals(kernel, "10.96.0.10", 80)
    assert rs[POD_IPS[0]].weight == 0 and rs[POD_IPS[0]].active == 1  # draining, not gone
    conn.sendall(b"still there\n")
    assert conn.recv(100) == b"still there\n"  # the open connection keeps working
    assert POD_IPS[0] + ":8080" not in served.tcp_hits("10.96.0.10", 80, 6)  # new ones avoid it
    sync(kernel, state(sp("web", "10.96.0.10", 80, remaining)))
    assert POD_IPS[0] in reals(kernel, "10.96.0.10", 80)  # still connected: still there
    conn.close()
    assert wait_for(lambda: reals(kernel, "10.96.0.10", 80)[POD_IPS[0]].active == 0, timeout=10)
    sync(kernel, state(sp("web", "10.96.0.10", 80, remaining)))
    assert POD_IPS[0] not in reals(kernel, "10.96.0.10", 80)


def test_a_plan_from_memory_drains_a_connected_real_server_and_takes_it_back(kernel: IPVSKernel,
                                                                            served: Lab) -> None:
    # the daemon's partial syncs plan against what it committed, which has no connection counts
    before = sync(kernel, state(sp("web", "10.96.0.10", 80, POD_IPS)))
    conns = [served.connect("10.96.0.10", 80) for _ in range(3)]
    conn, _ = next((s, who) for s, who in conns if who.startswith(POD_IPS[0] + ":"))
    for s, _ in conns:
        if s is not conn:
            s.close()
    after = compile(state(sp("web", "10.96.0.10", 80, tuple(ip for ip in POD_IPS if ip != POD_IPS[0]))), CONFIG, V4)
    kernel.apply(plan(before, after))
    rs = reals(kernel, "10.96.0.10", 80)
    assert rs[POD_IPS[0]].weight == 0 and rs[POD_IPS[0]].active == 1  # draining, not gone
    conn.sendall(b"still there\n")
    assert conn.recv(100) == b"still there\n"
    kernel.apply(plan(after, before))  # the endpoint is back while it drains: set again, not added
    assert reals(kernel, "10.96.0.10", 80)[POD_IPS[0]].weight == 1
    conn.close()


def test_udp_real_server_is_removed_at_once(kernel: IPVSKernel, served: Lab) -> None:
    sync(kernel, state(sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353)))
    served.udp_hits("10.96.0.53", 53, 3)
    sync(kernel, state(sp("dns", "10.96.0.53", 53, POD_IPS[1:], proto=Protocol.UDP, target=5353)))
    assert POD_IPS[0] not in reals(kernel, "10.96.0.53", 53)


def test_service_losing_all_endpoints_rejects(kernel: IPVSKernel, served: Lab) -> None:
    sync(kernel, state(sp("web", "10.96.0.10", 80, POD_IPS),
                       sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353)))
    sync(kernel, state(sp("web", "10.96.0.10", 80, ()), sp("dns", "10.96.0.53", 53, (), proto=Protocol.UDP)))
    s = served.socket(socket.SOCK_STREAM)
    with pytest.raises(ConnectionRefusedError):  # refused at once, not a timeout
        s.connect(("10.96.0.10", 80))
    s.close()
    udp_is_refused(served, "10.96.0.53", 53)


def udp_is_refused(lab: Lab, ip: str, port: int) -> None:
    u = lab.socket(socket.SOCK_DGRAM)
    u.connect((ip, port))
    u.send(b"hi")
    with pytest.raises(ConnectionRefusedError):  # ICMP port unreachable
        u.recv(100)
    u.close()


def refused_in_a_row(lab: Lab, ip: str, port: int, n: int) -> float:
    """n TCP connects, each refused before its SYN is retried (the first retry comes after 1 s):
    a per-peer rate-limited ICMP answer would let all but the first few time out. Returns seconds."""
    start = time.monotonic()
    for i in range(n):
        s = lab.socket(socket.SOCK_STREAM)
        s.settimeout(0.9)
        try:
            with pytest.raises(ConnectionRefusedError):
                s.connect((ip, port))
        except BaseException as e:
            raise AssertionError(f"connect #{i + 1} to {ip}:{port} was not refused at once") from e
        finally:
            s.close()
    return time.monotonic() - start


def test_clients_of_a_service_without_endpoints_fail_fast_every_time(kernel: IPVSKernel, served: Lab) -> None:
    """kubernetes#90810: TCP gets a reset, never rate-limited, so 40 connects in a row are refused at
    once; a port of a service IP that no virtual server serves too. UDP gets ICMP port-unreachable."""
    sync(kernel, state(sp("web", "10.96.0.10", 80, ()), sp("dns", "10.96.0.53", 53, (), proto=Protocol.UDP)))
    took = refused_in_a_row(served, "10.96.0.10", 80, 40)
    print(f"40 refused connects to an endpoint-less service: {took:.3f} s")
    took = refused_in_a_row(served, "10.96.0.10", 81, 40)
    print(f"40 refused connects to an undefined port of a service IP: {took:.3f} s")
    udp_is_refused(served, "10.96.0.53", 53)


def test_timeouts_are_set_and_exclude_cidrs_keep_virtual_servers(served: Lab) -> None:
    """ipvs.tcpTimeout/tcpFinTimeout/udpTimeout as `ipvsadm --set`; a virtual server in
    ipvs.excludeCIDRs survives a sync that no longer wants it, one outside does not."""
    cfg = replace(CONFIG, ipvs_exclude_cidrs=(ip_network("10.96.100.0/24"),))
    k = IPVSKernel(V4, served.node, timeouts=(901.0, 121.0, 301.0))
    try:
        sync(k, state(sp("web", "10.96.0.10", 80, POD_IPS), sp("kept", "10.96.100.5", 80, POD_IPS)), cfg)
        shown = sh("ip", "netns", "exec", served.node, "ipvsadm", "-L", "--timeout")
        assert "(tcp tcpfin udp): 901 121 301" in shown, shown
        sync(k, state(sp("other", "10.96.0.20", 80, POD_IPS)), cfg)
        live = sh("ip", "netns", "exec", served.node, "ipvsadm", "-S", "-n")
        assert "10.96.100.5:80" in live and "10.96.0.10:80" not in live, live
    finally:
        k.cleanup()
        with contextlib.suppress(RuntimeError):  # kept, and no longer netkit's once its address went
            sh("ip", "netns", "exec", served.node, "ipvsadm", "-D", "-t", "10.96.100.5:80")
        sh("ip", "netns", "exec", served.node, "ipvsadm", "--set", "900", "120", "300")  # the kernel defaults


def test_apply_twice_is_a_noop(kernel: IPVSKernel) -> None:
    desired = state(sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080, external_ips=("198.51.100.10",)),
                    sp("sticky", "10.96.0.13", 80, POD_IPS[:1], affinity=600),
                    sp("lb", "10.96.0.12", 80, POD_IPS, lb_ips=("198.51.100.100",), node_port=30081,
                       source_ranges=("203.0.113.0/28",), local_eps=POD_IPS[:1], etp_local=True),
                    sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353))
    want = sync(kernel, desired)
    again = plan(kernel.dump(), want)
    assert again.empty, again
    sync(kernel, replace(desired, ports=(desired.ports[0], desired.ports[1], desired.ports[3])))  # no eTP=Local marks
    sync(kernel, desired)  # and back: a changed payload twice, the entry jumps must not pile up
    saved = sh("ip", "netns", "exec", kernel.netns, "iptables-save")
    assert saved.count('"kubernetes service portals" -j KUBE-SERVICES') == 2, saved  # PREROUTING, OUTPUT
    assert saved.count("-j KUBE-IPVS-INTERNAL") == 2, saved


def test_foreign_virtual_servers_survive_apply_and_cleanup(kernel: IPVSKernel, served: Lab) -> None:
    node = served.node
    sh("ip", "netns", "exec", node, "ipvsadm", "-A", "-t", "203.0.113.5:80", "-s", "wlc")
    sh("ip", "netns", "exec", node, "ipvsadm", "-A", "-t", f"{NODE_IP}:8000", "-s", "rr")
    sync(kernel, state(sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080)))
    sync(kernel, state(sp("other", "10.96.0.20", 80, POD_IPS[:1])))
    kernel.cleanup()
    listing = sh("ip", "netns", "exec", node, "ipvsadm", "-Ln")
    assert "203.0.113.5:80" in listing and f"{NODE_IP}:8000" in listing, listing
    assert "10.96.0." not in listing and "30080" not in listing, listing
    sh("ip", "netns", "exec", node, "ipvsadm", "-C")


def test_etp_local_does_not_black_hole_in_cluster_traffic(kernel: IPVSKernel, served: Lab) -> None:
    """kubernetes#75262: no local endpoint, yet the node itself reaches the LB IP through the
    cluster endpoints (fwmark service), while the LB IP's own virtual server has no real server."""
    sync(kernel, state(sp("lb", "10.96.0.12", 80, POD_IPS[:2], lb_ips=("198.51.100.100",), etp_local=True)))
    assert reals(kernel, "198.51.100.100", 80) == {}
    with served.entered(served.node):
        s = socket.create_connection(("198.51.100.100", 80), timeout=5)
        who = s.makefile().readline().strip()
        s.close()
    assert who in {f"{ip}:8080" for ip in POD_IPS[:2]}


def test_fake_kernel_refuses_what_the_kernel_refuses(kernel: IPVSKernel) -> None:
    base = compile(state(sp("web", "10.96.0.10", 80, POD_IPS)), CONFIG, V4)
    sync(kernel, base)
    fake = FakeKernel(V4)
    fake.apply(plan(fake.dump(), base))
    vs = base.services[0]
    bad_plans = {
        "unknown scheduler": plan(base, replace(base, services=(replace(vs, scheduler="nope"),))),
        "duplicate service": replace(plan(base, base), add_services=(vs,)),
        "missing real": replace(plan(base, base), del_reals=((vs, RealServer(vs.reals[0].ip, 9999)),)),
        "multicast real": replace(plan(base, base), add_reals=((vs, RealServer(ip_address("224.0.0.1"), 80)),)),
        "missing service": replace(plan(base, base), del_services=(VirtualServer(Protocol.TCP, vs.ip, 81),)),
    }
    for what, p in bad_plans.items():
        with pytest.raises(KernelError):
            fake.apply(p)
        with pytest.raises(KernelError, match="."):
            kernel.apply(p)
        assert plan(kernel.dump(), base).empty, what  # the refused change left the kernel as it was


def test_the_iptables_backend_choice_is_honoured(served: Lab) -> None:
    """kubernetes#71305: on a legacy node the payload must land in the legacy tables, not in nft."""
    k = IPVSKernel(V4, served.node, "legacy")
    try:
        want = sync(k, state(sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080)))
        legacy = sh("ip", "netns", "exec", served.node, "iptables-legacy-save")
        nft = sh("ip", "netns", "exec", served.node, "iptables-nft-save")
        assert ":KUBE-IPVS-FILTER" in legacy and "KUBE-IPVS-FILTER" not in nft, nft
        assert plan(k.dump(), want).empty
        assert len(served.tcp_hits(NODE_IP, 30080, 3)) == 3
    finally:
        k.cleanup()
    assert "KUBE-" not in sh("ip", "netns", "exec", served.node, "iptables-legacy-save")


def test_daemon_syncs_follow_one_change_at_a_time(served: Lab) -> None:
    """The daemon's path: a full sync, then incremental ones (the remembering compiler's hint, the
    in-memory committed state), each leaving the kernel exactly as a fresh dump-and-plan wants it."""
    from netkit.rules.ipvs import backend as BACKEND
    from netkit.runtime.syncer import Syncer

    syncer = Syncer(CONFIG, BACKEND, [V4], netns=served.node)
    ports = [sp("web", "10.96.0.10", 80, POD_IPS, node_port=30080),
             sp("dns", "10.96.0.53", 53, POD_IPS, proto=Protocol.UDP, target=5353)]
    kernel = syncer.kernels[V4]
    try:
        assert syncer.sync(state(*ports), full=True).error is None
        steps = [state(sp("web", "10.96.0.10", 80, POD_IPS[:2], node_port=30080), ports[1]),  # one endpoint less
                 state(sp("web", "10.96.0.10", 80, POD_IPS[:2], node_port=30080), ports[1],
                       sp("new", "10.96.0.20", 80, POD_IPS[2:])),  # a service more
                 state(ports[0])]  # a service less
        for st in steps:
            result = syncer.sync(st, full=False)
            assert result.error is None and result.changed
            assert plan(kernel.dump(), compile(st, CONFIG, V4)).empty
        assert sorted(served.tcp_hits("10.96.0.10", 80, 6).values()) == [2, 2, 2]
    finally:
        kernel.cleanup()


def test_cli_apply_then_diff_says_in_sync(served: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    """`netkit apply --mode ipvs` then `netkit diff`: in sync (exit 0), although a dump cannot name
    its virtual servers; then trace over the live rules answers like over the compiled ones."""
    from netkit.cli import main
    from tests.conftest import EXAMPLES

    args = ["-f", str(EXAMPLES), "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--mode", "ipvs",
            "--netns", served.node]
    try:
        assert main(["apply", *args, "--ip-family", "ipv4"]) == 0
        capsys.readouterr()
        assert main(["diff", *args, "--ip-family", "ipv4"]) == 0, capsys.readouterr().out
        assert main(["trace", *args, "--to", "10.96.0.53:53/udp", "--from", "10.244.1.50", "-o", "json"]) == 0
        out = capsys.readouterr().out
        assert '"10.244.1.11:5353"' in out and '"10.244.2.11:5353"' in out, out
    finally:
        IPVSKernel(V4, served.node).cleanup()
