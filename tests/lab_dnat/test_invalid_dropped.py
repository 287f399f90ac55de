"""kube-proxy's `kubeproxy_iptables_ct_state_invalid_dropped_packets_total`, on real packets through
the real daemon: `netkit run` programs the lab's node A (iptables mode, both backends), creates the
nfacct counter `ct_state_invalid_dropped_pkts`, and KUBE-FORWARD's first rule
(`-m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`)
counts what conntrack cannot track. The external client sends a pod on node A TCP segments with SYN
and FIN both set — a flag combination conntrack's TCP tracker refuses (nf_conntrack_proto_tcp.c's
tcp_valid_flags), so the packet has no conntrack entry and its state is INVALID — across node A's
forward path. /metrics must count exactly those, the pod must not see them, and an ordinary
connection over the same path must count nothing. In nftables mode, as kube-proxy's, nothing drops
them: every one reaches the pod.
"""

from __future__ import annotations

import random
import select
import signal
import socket
import subprocess
import time
from collections.abc import Sequence

import pytest

from netkit import nfacct
from netkit.lab import Lab, running
from netkit.lab.fork import collect, start_in
from netkit.lab.probe import PACKET_OUTGOING, open_sniffer, parse_l3
from netkit.model import IPFamily
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.names import CT_STATE_INVALID_DROPPED
from netkit.rules.nftables.kernel import NftKernel
from tests.conftest import EXAMPLES, ROOT, need_root_and
from tests.daemon.e2e import METRICS, get_in, netkit_in

pytestmark = pytest.mark.netns
METRIC = "kubeproxy_iptables_ct_state_invalid_dropped_packets_total"
POD, POD_IP = "web-a1", "10.244.1.11"  # on node A (netkit/lab/plan.py)
SEGMENTS = 3


def send_syn_fin(dst: str, dport: int, seqs: Sequence[int]) -> int:
    """In the forked child, inside the client's namespace: Scapy imported only here (netkit/lab/probe.py)."""
    from scapy.layers.inet import IP, TCP
    from scapy.supersocket import L3RawSocket

    sock = L3RawSocket()  # type: ignore[no-untyped-call]
    try:
        for seq in seqs:
            sock.send(IP(dst=dst) / TCP(sport=random.randint(20000, 60000), dport=dport, flags="SF", seq=seq))
    finally:
        sock.close()
    return len(seqs)


def scrape(lab: Lab) -> str:
    """The daemon's /metrics, served inside node A (where it runs)."""
    return get_in(lab.node_a.netns, METRICS, "/metrics")[1]


def counted(page: str) -> float | None:
    for line in page.splitlines():
        if line.startswith(METRIC + " "):
            return float(line.split()[1])
    return None


def wait_for(what: str, check, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except OSError:
            value = None
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def daemon(lab: Lab, backend: str, mode: str = "iptables") -> subprocess.Popen[str]:
    """`netkit run` inside node A (its metrics port there is the test's own), programming node A."""
    argv = netkit_in(lab.node_a.netns, "run", "-f", str(EXAMPLES), "--netns", lab.node_a.netns,
                     "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--ip-family", "ipv4",
                     "--proxy-mode", mode, "--iptables-backend", backend, "--metrics-bind-address", METRICS,
                     "--healthz-bind-address", "", "--no-conntrack", "--log-format", "text")
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, err


def syn_fin_reaching_the_pod(lab: Lab, timeout: float) -> set[int]:
    """Send SEGMENTS SYN+FIN segments (INVALID to conntrack) from the client to the pod on node A:
    the sequence numbers of those the pod's interface received within `timeout` seconds (the lab's
    probe sniffer recognises pure SYNs only: these are matched here by flags and sequence number)."""
    tokens = set(random.sample(range(1, 2**31), SEGMENTS))
    sniffer = open_sniffer(lab.pod(POD).netns, "eth0")
    seen: set[int] = set()
    try:
        assert collect(start_in(lab.netns("client"), send_syn_fin, POD_IP, lab.ports[0], sorted(tokens))) == SEGMENTS
        deadline = time.monotonic() + timeout
        while seen != tokens and (left := deadline - time.monotonic()) > 0:
            if select.select([sniffer], [], [], left)[0]:
                seen |= {seq for seq in _syn_fin_seqs(sniffer) if seq in tokens}
    finally:
        sniffer.close()
    return seen


def _syn_fin_seqs(sock: socket.socket) -> list[int]:
    out = []
    while True:
        try:
            data, addr = sock.recvfrom(65535)
        except BlockingIOError:
            return out
        packet = parse_l3(addr[1], data) if addr[2] != PACKET_OUTGOING else None
        if packet and packet.proto == 6 and len(packet.l4) >= 14 and packet.l4[13] & 0x3F == 0x03:
            out.append(int.from_bytes(packet.l4[4:8], "big"))


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_invalid_forwarded_packets_are_dropped_and_counted(backend: str) -> None:
    need_root_and("ip", f"iptables-{backend}-restore")
    with running() as lab:
        _, failed = nfacct.ensure_counters(lab.node_a.netns, (CT_STATE_INVALID_DROPPED,))
        if failed:
            pytest.skip(f"needs nfnetlink_acct (the kernel's nfacct): {failed[CT_STATE_INVALID_DROPPED]}")
        proc = daemon(lab, backend)
        try:
            _check(lab, backend)
        finally:
            stop(proc)


def test_nftables_mode_forwards_invalid_packets_as_kube_proxys() -> None:
    """kube-proxy's nftables mode drops nothing conntrack finds INVALID (kubernetes#122663; the fix it
    leaves to conntrack.tcpBeLiberal): the segments iptables mode drops above reach the pod."""
    need_root_and("ip", "nft")
    with running() as lab:
        proc = daemon(lab, "legacy", mode="nftables")
        try:
            kernel = NftKernel("ip", lab.node_a.netns, transport="cli")
            wait_for("the daemon's nftables table", lambda: True if kernel.dump() is not None else None)
            reply = lab.connect("client", POD_IP, lab.ports[0])
            assert reply.answered and reply.backend == POD, reply
            assert len(syn_fin_reaching_the_pod(lab, timeout=5.0)) == SEGMENTS  # every one forwarded
        finally:
            stop(proc)


def _check(lab: Lab, backend: str) -> None:
    kernel = IptablesKernel(IPFamily.IPV4, lab.node_a.netns, backend)

    def synced() -> bool | None:
        rules = kernel.dump().rules("filter", "KUBE-FORWARD")
        return True if rules and "--nfacct-name  ct_state_invalid_dropped_pkts" in rules[0] else None

    wait_for("the daemon's rules with the counting INVALID drop", synced)
    assert wait_for("/metrics", lambda: counted(scrape(lab))) == 0.0
    # The path forwards: an ordinary connection from the client reaches the pod and counts nothing.
    reply = lab.connect("client", POD_IP, lab.ports[0])
    assert reply.answered and reply.backend == POD, reply
    assert counted(scrape(lab)) == 0.0
    assert syn_fin_reaching_the_pod(lab, timeout=0.5) == set()  # dropped on node A
    assert nfacct.read(CT_STATE_INVALID_DROPPED, lab.node_a.netns) == SEGMENTS
    assert counted(scrape(lab)) == float(SEGMENTS)
