"""Upstream's NetworkingTestConfig (test/e2e/framework/network/utils.go) and its dials, for the
"Granular Checks" of networking.go and dual_stack.go.

NewNetworkingTestConfig: netserver pods (agnhost netexec, one per node), a NodePort Service
`node-port-service` and a ClientIP `session-affinity-service` over them (http 80 → netexec's HTTP
port 8083, udp 90 → its UDP port 8081; RequireDualStack with EnableDualStack). Every lab pod serves
netexec there (netkit/lab/cluster/netexec.py). `DialFromContainer` asks netexec's `/dial` in the test
pod to send `request` (an HTTP path, or a UDP datagram) to the target `tries` times; here the test
sends it from inside the pod's namespace, one request a try, each with netexec's 5 s timeout.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from ipaddress import ip_address

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from netkit.netns import socket_in
from tests.lab_cluster.conftest import Kubectl, eventually, fresh, netns

from .conftest import POLL, get, pods_of, start_serve_hostname

HTTP_PORT, UDP_PORT = 80, 90  # e2enetwork.ClusterHTTPPort, ClusterUDPPort
ENDPOINT_HTTP_PORT, ENDPOINT_UDP_PORT = 8083, 8081  # e2enetwork.EndpointHTTPPort, EndpointUDPPort
DIAL_TIMEOUT = 5.0  # netexec's dialHTTP / dialUDP
NODE_DIAL_TIMEOUT = 1.0  # DialFromNode's `nc -w 1`, `curl --connect-timeout 1`
UNANSWERED_TRIES = 10  # "should update nodePort": the deleted node port does not answer 10 tries
SESSION_AFFINITY_CHECKS = 10  # e2enetwork.SessionAffinityChecks


def services(prefix: str, app: str, dual: bool) -> str:
    """NetworkingTestConfig's NodePort and session-affinity Services."""
    family = "  ipFamilyPolicy: RequireDualStack\n" if dual else ""
    docs = []
    for name, affinity in ((f"{prefix}node-port-service", "None"), (f"{prefix}session-affinity-service", "ClientIP")):
        docs.append(f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: NodePort
{family}  sessionAffinity: {affinity}
  selector: {{app: {app}}}
  ports:
  - {{name: http, port: {HTTP_PORT}, protocol: TCP, targetPort: {ENDPOINT_HTTP_PORT}}}
  - {{name: udp, port: {UDP_PORT}, protocol: UDP, targetPort: {ENDPOINT_UDP_PORT}}}
""")
    return "---\n".join(docs)


@dataclass(frozen=True)
class Networking:
    """What NetworkingTestConfig gives a test: the endpoint pods, the Services' ClusterIPs (every
    family, primary first), every family's address of the first node, and the node ports."""

    app: str
    endpoints: frozenset[str]
    cluster_ips: tuple[str, ...]
    affinity_ips: tuple[str, ...]
    node_ips: tuple[str, ...]
    node_http_port: int
    node_udp_port: int


def networking_config(record: Record, kubectl: Kubectl, app: str, prefix: str = "", dual: bool = False) -> Networking:
    nodes = len(fresh(record).cluster.nodes)
    pods = start_serve_hostname(record, app, nodes)  # one netserver per node
    kubectl.apply(services(prefix, app, dual))
    spec = get(kubectl, "service", f"{prefix}node-port-service")["spec"]
    affinity = get(kubectl, "service", f"{prefix}session-affinity-service")["spec"]
    ports = {p["name"]: p["nodePort"] for p in spec["ports"]}
    c = fresh(record).cluster
    return Networking(app, frozenset(pods), tuple(spec["clusterIPs"]), tuple(affinity["clusterIPs"]),
                      tuple(str(ip) for ip in c.node_ips(c.nodes[0])), ports["http"], ports["udp"])


def family(ip: str) -> int:
    return socket.AF_INET6 if ip_address(ip).version == 6 else socket.AF_INET


def dial_http(record: Record, where: str, ip: str, port: int, path: str,
              timeout: float = DIAL_TIMEOUT) -> str | None:
    """netexec's dialHTTP: GET http://ip:port/path from `where`; the body, None on an error."""
    try:
        with socket_in(netns(record, where), family(ip), socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect((ip, port))
            sock.sendall(f"GET /{path} HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    except OSError:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    return body.decode(errors="replace") if head.startswith(b"HTTP/1.1 200") else None


def dial_udp(record: Record, where: str, ip: str, port: int, request: str,
             timeout: float = DIAL_TIMEOUT) -> str | None:
    """netexec's dialUDP: `request` as one datagram; the answer (up to 2048 bytes), None without one."""
    try:
        with socket_in(netns(record, where), family(ip), socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.connect((ip, port))
            sock.send(request.encode())
            return sock.recv(2048).decode(errors="replace") or None
    except OSError:
        return None


def dial(record: Record, where: str, proto: str, ip: str, port: int, request: str, tries: int,
         timeout: float = DIAL_TIMEOUT) -> set[str]:
    """The answers to `tries` dials (a failed dial answers nothing, as upstream's /dial)."""
    send = dial_http if proto == "http" else dial_udp
    return {r for r in (send(record, where, ip, port, request, timeout) for _ in range(tries)) if r is not None}


def dials_to(record: Record, where: str, proto: str, ip: str, port: int, expected: frozenset[str],
             request: str = "hostname") -> None:
    """DialFromContainer(maxTries, minTries 0): within the poll bound, the answers to one round of
    dials are exactly `expected` (the endpoints' hostnames, or an echoed message)."""
    tries = 10 * len(expected) if request == "hostname" else 1
    assert eventually(lambda: dial(record, where, proto, ip, port, request, tries) == expected, POLL,
                      f"{proto} {ip}:{port} from {where} answered with {sorted(expected)[:3]}")


def dial_echo(record: Record, where: str, proto: str, ip: str, port: int, message: str) -> None:
    """DialEchoFromTestContainer: netexec echoes `message` back (HTTP `echo?msg=`, UDP `echo `)."""
    request = f"echo?msg={message}" if proto == "http" else f"echo {message}"
    dials_to(record, where, proto, ip, port, frozenset({message}), request)


def service_checks(record: Record, where: str, proto: str, net: Networking, family: int = 0) -> None:
    """The pod-, node- and endpoint-Service checks from `where`: the ClusterIP of `family` (0: the
    primary, 1: the secondary) and the first node's address of that family at the node port, every
    endpoint answering."""
    port, node_port = (HTTP_PORT, net.node_http_port) if proto == "http" else (UDP_PORT, net.node_udp_port)
    dials_to(record, where, proto, net.cluster_ips[family], port, net.endpoints)
    dials_to(record, where, proto, net.node_ips[family], node_port, net.endpoints)


def update_endpoints(record: Record, kubectl: Kubectl, exec_pod: str, proto: str, app: str, family: int = 0) -> None:
    """"should update endpoints": a configuration of its own (`app`, its Services prefixed `app-`);
    every netserver answers on the ClusterIP of `family`; one deleted (DeleteNetProxyPod), exactly
    the others answer."""
    net = networking_config(record, kubectl, app, prefix=f"{app}-", dual=family == 1)
    port = HTTP_PORT if proto == "http" else UDP_PORT
    dials_to(record, exec_pod, proto, net.cluster_ips[family], port, net.endpoints)
    lifecycle.scale(record.cluster_id, app, len(net.endpoints) - 1)
    remaining = frozenset(pods_of(record, app))
    assert len(remaining) == len(net.endpoints) - 1
    dials_to(record, exec_pod, proto, net.cluster_ips[family], port, remaining)


def update_node_port(record: Record, kubectl: Kubectl, proto: str, app: str) -> None:
    """"should update nodePort": a configuration of its own (`app`, its Services prefixed `app-`);
    DialFromNode (from the first node's host network) to that node's address at the node port:
    every netserver answers; the NodePort Service deleted (DeleteNodePortService), within the poll
    bound (upstream sleeps 15 s) 10 dials there are answered by nothing."""
    net = networking_config(record, kubectl, app, prefix=f"{app}-")
    node, ip = fresh(record).cluster.nodes[0].name, net.node_ips[0]
    port = net.node_http_port if proto == "http" else net.node_udp_port
    dials_to(record, node, proto, ip, port, net.endpoints)
    kubectl("delete", "service", f"{app}-node-port-service")
    assert eventually(lambda: not dial(record, node, proto, ip, port, "hostname", UNANSWERED_TRIES, NODE_DIAL_TIMEOUT),
                      POLL, f"{proto} {ip}:{port} answering nothing after the Service's deletion")


def affinity_check(record: Record, pod: str, proto: str, net: Networking, family: int = 0) -> None:
    """GetEndpointsFromTestContainer(SessionAffinityChecks) on the session-affinity Service's
    ClusterIP of `family`: exactly one pod answers."""
    port = HTTP_PORT if proto == "http" else UDP_PORT
    ip = net.affinity_ips[family]
    assert eventually(lambda: len(dial(record, pod, proto, ip, port, "hostname", SESSION_AFFINITY_CHECKS)) == 1,
                      POLL, f"{proto} affinity on {ip}")
    assert len(dial(record, pod, proto, ip, port, "hostname", SESSION_AFFINITY_CHECKS)) == 1
