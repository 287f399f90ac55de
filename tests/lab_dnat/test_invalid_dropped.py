"""kube-proxy's `kubeproxy_iptables_ct_state_invalid_dropped_packets_total`, on real packets through
the real daemon: `netkit run` programs the lab's node A (iptables mode, both backends), creates the
nfacct counter `ct_state_invalid_dropped_pkts`, and KUBE-FORWARD's first rule
(`-m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP`)
counts what conntrack cannot track. The external client sends a pod on node A TCP segments with SYN
and FIN both set — a flag combination conntrack's TCP tracker refuses (nf_conntrack_proto_tcp.c's
tcp_valid_flags), so the packet has no conntrack entry and its state is INVALID — across node A's
forward path. /metrics must count exactly those, the pod must not see them, and an ordinary
connection over the same path must count nothing.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence

import pytest

from netkit import nfacct
from netkit.lab import Lab, running
from netkit.lab.fork import collect, start_in
from netkit.lab.probe import open_sniffer, watch
from netkit.model import IPFamily
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.names import CT_STATE_INVALID_DROPPED
from tests.conftest import EXAMPLES, ROOT, need_root_and
from tests.daemon.e2e import free_port

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


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
        return str(reply.read().decode())


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


def daemon(lab: Lab, backend: str, port: int) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "netkit", "run", "-f", str(EXAMPLES), "--netns", lab.node_a.netns,
            "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--ip-family", "ipv4",
            "--iptables-backend", backend, "--metrics-bind-address", f"127.0.0.1:{port}",
            "--healthz-bind-address", "", "--no-conntrack", "--log-format", "text"]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_invalid_forwarded_packets_are_dropped_and_counted(backend: str) -> None:
    need_root_and("ip", f"iptables-{backend}-restore")
    with running() as lab:
        _, failed = nfacct.ensure_counters(lab.node_a.netns, (CT_STATE_INVALID_DROPPED,))
        if failed:
            pytest.skip(f"needs nfnetlink_acct (the kernel's nfacct): {failed[CT_STATE_INVALID_DROPPED]}")
        port = free_port()
        proc = daemon(lab, backend, port)
        try:
            _check(lab, backend, port)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        assert proc.returncode == 0, err


def _check(lab: Lab, backend: str, port: int) -> None:
    kernel = IptablesKernel(IPFamily.IPV4, lab.node_a.netns, backend)

    def synced() -> bool | None:
        rules = kernel.dump().rules("filter", "KUBE-FORWARD")
        return True if rules and "--nfacct-name  ct_state_invalid_dropped_pkts" in rules[0] else None

    wait_for("the daemon's rules with the counting INVALID drop", synced)
    assert wait_for("/metrics", lambda: counted(scrape(port))) == 0.0
    # The path forwards: an ordinary connection from the client reaches the pod and counts nothing.
    reply = lab.connect("client", POD_IP, lab.ports[0])
    assert reply.answered and reply.backend == POD, reply
    assert counted(scrape(port)) == 0.0
    tokens = random.sample(range(1, 2**31), SEGMENTS)
    sniffer = {POD: open_sniffer(lab.pod(POD).netns, "eth0")}
    try:
        assert collect(start_in(lab.netns("client"), send_syn_fin, POD_IP, lab.ports[0], tokens)) == SEGMENTS
        seen = watch(sniffer, set(tokens), timeout=0.5, settle=0.0)
    finally:
        sniffer[POD].close()
    assert all(not sightings for sightings in seen.values()), seen  # dropped on node A
    assert nfacct.read(CT_STATE_INVALID_DROPPED, lab.node_a.netns) == SEGMENTS
    assert counted(scrape(port)) == float(SEGMENTS)
