"""`netkit lab cluster flows`: the live connections through the cluster DNS Service, read on the
node a pod sends its queries from, against the objects the cluster's API server holds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import dns.message
import pytest

from netkit.lab.cluster.plan import APP_DEPLOY
from netkit.lab.cluster.state import Record
from netkit.netns import socket_in

from .conftest import fresh, netns

pytestmark = pytest.mark.netns
QUERIES = 12


@pytest.fixture
def queries(cluster: Record) -> Iterator[tuple[str, list[socket.socket]]]:
    """A pod of the app sends one DNS query to the cluster DNS from each of QUERIES sockets."""
    c = fresh(cluster).cluster
    pod = next(p for p in c.pods if p.deploy == APP_DEPLOY)
    socks = [socket_in(netns(cluster, pod.name), socket.AF_INET, socket.SOCK_DGRAM) for _ in range(QUERIES)]
    query = dns.message.make_query("kube-dns.kube-system.svc.cluster.local", "A").to_wire()
    try:
        for s in socks:
            answered(s, query)
        yield pod.node, socks
    finally:
        for s in socks:
            s.close()


def answered(s: socket.socket, query: bytes, bound: float = 60.0) -> None:
    """Send `query` from `s` until the cluster DNS answers it (the same socket: one flow): on a loaded
    machine the DNS pods may not serve yet when the cluster is up, and a query rejected for want of
    endpoints leaves no flow to count."""
    s.settimeout(2.0)
    deadline = time.monotonic() + bound
    while True:
        s.sendto(query, ("10.96.0.10", 53))
        try:
            s.recv(4096)
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
        except ConnectionRefusedError:  # the ICMP of a REJECT for a Service without endpoints
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def test_flows_on_the_node_the_queries_leave(cluster: Record, queries: tuple[str, list[socket.socket]]) -> None:
    node, _ = queries
    done = subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", "flows", "--cluster", cluster.cluster_id,
                           "--node", node, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    services = {f"{s['namespace']}/{s['name']}:{s['protocol']}": s for s in json.loads(done.stdout)["services"]}
    dns = services["kube-system/kube-dns:udp"]
    assert dns["flows"] >= QUERIES and dns["stale"] == 0
    dns_pods = {str(p.ip) for p in fresh(cluster).cluster.pods if p.namespace == "kube-system"}
    assert {e["ip"] for e in dns["endpoints"]} <= dns_pods
    assert sum(e["predicted"] for e in dns["endpoints"]) == pytest.approx(1.0)  # trace: every query lands
