"""[sig-network] Conntrack (test/e2e/network/conntrack.go), translated one to one: a UDP client
keeps sending from one source port while the Service's only server pod is replaced; its
datagrams must reach the new pod (the stale conntrack entry to the old one cleared). And a TCP
client of a Service must not be reset by a segment conntrack finds INVALID (the boom-server,
`boom.py`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from netkit.lab.nsenter import write_sysctls
from netkit.netns import socket_in
from tests.lab_cluster.conftest import Kubectl, eventually, fresh, netns

from . import boom
from .conftest import POLL, cluster_ip, dig, get, node_of, pod_ip, start_serve_hostname, web_pod_on
from .test_service import endpoint_ports

pytestmark = pytest.mark.netns

DESCRIBE = "Conntrack"  # the upstream SIGDescribe these tests belong to

SOURCE_PORT = 12345  # upstream's client: `nc -u -w 5 -p 12345 IP PORT`, once a second


def udp_service(name: str, kind: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: {kind}
  selector: {{app: {name}}}
  ports: [{{port: 80, protocol: UDP, targetPort: 8080}}]
"""


@contextmanager
def udp_client(record: Record, pod: str, ip: str, port: int) -> Iterator[list[str]]:
    """The upstream client pod's loop: every second a datagram to ip:port from SOURCE_PORT; yields
    the list of the pods that answered, growing as answers come."""
    heard: list[str] = []
    stop = threading.Event()
    sock = socket_in(netns(record, pod), socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", SOURCE_PORT))
    sock.settimeout(1.0)

    def loop() -> None:
        while not stop.is_set():
            try:
                sock.sendto(b"hostname\n", (ip, port))
                data, _ = sock.recvfrom(200)
                heard.append(data.decode().split()[0])
                stop.wait(1.0)
            except OSError:  # no answer yet (a timeout), or ICMP port unreachable: try again
                pass

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield heard
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def cycle_server_pod(record: Record, kubectl: Kubectl, client: str, name: str, kind: str) -> None:
    """The shared body: the client sends to the ClusterIP (or to the server node's address at the
    node port); backend1 answers it; backend2 created and backend1 deleted, backend2 answers."""
    kubectl.apply(udp_service(name, kind))
    with_client = (cluster_ip(kubectl, name), 80)
    (backend1,) = start_serve_hostname(record, name, 1)
    if kind == "NodePort":
        server_node = str(fresh(record).cluster.node(node_of(record, backend1)).ip)
        with_client = (server_node, int(get(kubectl, "service", name)["spec"]["ports"][0]["nodePort"]))
    with udp_client(record, client, *with_client) as heard:
        assert eventually(lambda: endpoint_ports(kubectl, name) == {backend1: [8080]}, POLL, "backend1's endpoint")
        assert eventually(lambda: backend1 in heard, POLL, f"the client hears {backend1}")
        (backend2,) = start_serve_hostname(record, name, 2) - {backend1}
        lifecycle.delete(record.cluster_id, [backend1])
        assert eventually(lambda: endpoint_ports(kubectl, name) == {backend2: [8080]}, POLL, "backend2's endpoint")
        assert eventually(lambda: backend2 in heard, POLL, f"the client hears {backend2}")


@pytest.mark.upstream("should be able to preserve UDP traffic when server pod cycles for a ClusterIP service")
@pytest.mark.ipvs
def test_udp_clusterip_server_pod_cycles(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Conntrack should be able to preserve UDP traffic when server pod cycles for a ClusterIP
    service: from one source port, to the ClusterIP, across the replacement of its pod."""
    cycle_server_pod(cluster, kubectl, exec_pod, "svc-udp", "ClusterIP")


@pytest.mark.upstream("should be able to preserve UDP traffic when server pod cycles for a NodePort service")
def test_udp_nodeport_server_pod_cycles(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort
    service: the same to the first server pod's node at the node port. Lab gap: upstream puts both
    server pods on that node; the lab places backend2 on another, reached through it."""
    cycle_server_pod(cluster, kubectl, exec_pod, "svc-udp-nodeport", "NodePort")


BOOM_SERVICE = """apiVersion: v1
kind: Service
metadata: {name: boom-server}
spec:
  selector: {app: boom-server}
  ports: [{protocol: TCP, port: 9000}]
"""
BE_LIBERAL = "net/netfilter/nf_conntrack_tcp_be_liberal"


@contextmanager
def tcp_be_liberal(record: Record, on: bool) -> Iterator[None]:
    """nf_conntrack_tcp_be_liberal=1 on every node while the block runs (`on`), as upstream's
    nftables jobs run kube-proxy (conntrack.tcpBeLiberal: true, which kube-proxy writes there):
    kube-proxy's nftables mode, as netkit's, installs no INVALID drop (kubernetes#122663) and
    leaves this case to that sysctl."""
    nodes = [n.netns for n in fresh(record).cluster.nodes] if on else []
    for ns in nodes:
        write_sysctls(ns, {BE_LIBERAL: "1"})
    try:
        yield
    finally:
        for ns in nodes:
            write_sysctls(ns, {BE_LIBERAL: "0"})


@pytest.mark.upstream("should drop INVALID conntrack entries [Privileged]")
def test_drop_invalid_conntrack_entries(cluster: Record, kubectl: Kubectl, proxy_mode: str) -> None:
    """Conntrack should drop INVALID conntrack entries [Privileged]: the boom-server on one node
    behind the ClusterIP Service boom-server:9000, a client on another connecting every 2 s; for
    a minute the server never sees a reset (its out-of-window segments dropped, not delivered
    without the reverse DNAT), and it did send them ("connection established"). In nftables mode
    the nodes run with nf_conntrack_tcp_be_liberal=1, as upstream's nftables CI does. Lab addition
    (boom.py): a second bad segment, ahead of the window, which Linux ≥ 6.1 still finds INVALID."""
    (server,) = start_serve_hostname(cluster, "boom-server", 1)
    kubectl.apply(BOOM_SERVICE)
    client = next(web_pod_on(cluster, n.name) for n in fresh(cluster).cluster.nodes
                  if n.name != node_of(cluster, server))
    ip = cluster_ip(kubectl, "boom-server")
    assert eventually(lambda: endpoint_ports(kubectl, "boom-server") == {server: [boom.PORT]}, POLL, "the endpoint")
    assert dig(cluster, client, "boom-server") == [ip]  # nc boom-server: the name is the ClusterIP
    with (tcp_be_liberal(cluster, proxy_mode == "nftables"), boom.boom_server(netns(cluster, server),
                                                                            pod_ip(cluster, server)) as srv,
          boom.startup_script(netns(cluster, client), ip)):
        deadline = time.monotonic() + 60  # PollImmediate(5 s, 1 min) for "ERROR" in the server's log
        while time.monotonic() < deadline and not any("ERROR" in line for line in srv.logs):
            time.sleep(5)
    assert not any("ERROR" in line for line in srv.logs), f"boom-server pod received a RST from the client: {srv.logs}"
    assert "connection established" in srv.logs, "boom-server pod did not send any bad packet to the client"
