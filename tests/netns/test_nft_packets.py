"""Real packets through netkit's nftables table: a node namespace and two backend namespaces.

    client (node ns N) ── veth ── B1 10.244.1.11 (fd00:244:1::11)
                       └─ veth ── B2 10.244.2.11 (fd00:244:2::11)

Each backend runs a small TCP/UDP server on 8080 that answers "<name> <peer address>", so a test
sees which endpoint DNAT chose and whether the source was masqueraded. All namespaces are created
here with unique names and removed afterwards, also on failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import ip_network

import pytest

from netkit.config import Config
from netkit.model import IPFamily, Objects, build
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.nftables.plan import plan
from netkit.sources.manifests import decode_text
from tests.conftest import need_root_and, netns_name

MANIFESTS = """
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.0.2.10}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd00:96::10"]
  ipFamilies: [IPv4, IPv6]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080},
          {name: dns, protocol: UDP, port: 53, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: default}
spec:
  clusterIP: 10.96.0.13
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
"""

SLICES = """
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: SVC-v4, namespace: default, labels: {kubernetes.io/service-name: SVC}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}, {name: dns, protocol: UDP, port: 8080}]
endpoints: [{addresses: [10.244.1.11], nodeName: node-a}, {addresses: [10.244.2.11], nodeName: node-a}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: SVC-v6, namespace: default, labels: {kubernetes.io/service-name: SVC}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints: [{addresses: ["fd00:244:1::11"], nodeName: node-a}, {addresses: ["fd00:244:2::11"], nodeName: node-a}]
"""

SERVER = r"""
import socket, sys, threading
name = sys.argv[1]
def listen(family, kind):
    s = socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 8080))
    if kind == socket.SOCK_STREAM:
        s.listen(64)
    return s
def tcp(s):
    while True:
        c, peer = s.accept()
        c.sendall(f"{name} {peer[0]}\n".encode())
        c.close()
def udp(s):
    while True:
        data, peer = s.recvfrom(512)
        s.sendto(f"{name} {peer[0]}\n".encode(), peer)
socks = [(tcp, listen(socket.AF_INET, socket.SOCK_STREAM)), (tcp, listen(socket.AF_INET6, socket.SOCK_STREAM)),
         (udp, listen(socket.AF_INET, socket.SOCK_DGRAM))]
for serve, sock in socks:
    threading.Thread(target=serve, args=(sock,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""

CLIENT = r"""
import json, socket, sys
dst, port, count, src, proto = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
family = socket.AF_INET6 if ":" in dst else socket.AF_INET
out = []
for _ in range(count):
    s = socket.socket(family, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        if src != "-":
            s.bind((src, 0))
        if proto == "tcp":
            s.connect((dst, port))
            out.append(s.recv(200).decode().strip())
        else:
            s.sendto(b"q", (dst, port))
            out.append(s.recv(200).decode().strip())
    except ConnectionRefusedError:
        out.append("refused")
    except OSError as exc:
        out.append(f"error {exc.__class__.__name__}")
    finally:
        s.close()
print(json.dumps(out))
"""


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@pytest.fixture
def lab(netns: str) -> Iterator[dict[str, str]]:
    need_root_and("nft", "ip")
    backends = {"b1": netns_name("nkt-b1"), "b2": netns_name("nkt-b2")}
    servers: list[subprocess.Popen[str]] = []
    try:
        for i, (name, ns) in enumerate(backends.items(), start=1):
            sh("ip", "netns", "add", ns)
            _wire(netns, ns, i)
            servers.append(_serve(ns, name))
        sh("ip", "-n", netns, "addr", "add", "192.0.2.10/32", "dev", "lo")
        sh("ip", "-n", netns, "route", "add", "default", "dev", "veth-1")
        sh("ip", "-n", netns, "-6", "route", "add", "default", "dev", "veth-1")
        sh("ip", "netns", "exec", netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        yield {"node": netns, **backends}
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        for ns in backends.values():
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def _wire(node: str, backend: str, i: int) -> None:
    sh("ip", "-n", node, "link", "add", f"veth-{i}", "type", "veth", "peer", "name", "eth0", "netns", backend)
    sh("ip", "-n", node, "addr", "add", f"10.244.{i}.1/24", "dev", f"veth-{i}")
    sh("ip", "-n", node, "addr", "add", f"fd00:244:{i}::1/64", "dev", f"veth-{i}", "nodad")
    sh("ip", "-n", node, "link", "set", f"veth-{i}", "up")
    sh("ip", "-n", backend, "addr", "add", f"10.244.{i}.11/24", "dev", "eth0")
    sh("ip", "-n", backend, "addr", "add", f"fd00:244:{i}::11/64", "dev", "eth0", "nodad")
    for link in ("lo", "eth0"):
        sh("ip", "-n", backend, "link", "set", link, "up")
    sh("ip", "-n", backend, "route", "add", "default", "via", f"10.244.{i}.1")
    sh("ip", "-n", backend, "-6", "route", "add", "default", "via", f"fd00:244:{i}::1")


def _serve(ns: str, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, name],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def program(node: str, config: Config) -> None:
    text = MANIFESTS + "".join(SLICES.replace("SVC", svc) for svc in ("web", "sticky"))
    objs, problems = decode_text(text, "lab")
    assert not problems
    state = build(Objects.of(objs), "node-a")
    for family in IPFamily:
        desired = compile(state, config, family)
        NftKernel(desired.family, node).apply(plan(None, desired))
    time.sleep(0.05)  # veth carrier


def connect(ns: str, dst: str, port: int, count: int = 1, src: str = "-", proto: str = "tcp") -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, dst, str(port), str(count),
                          src, proto], capture_output=True, text=True, check=True, timeout=60).stdout
    return list(json.loads(out))


CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))


def test_cluster_ip_reaches_both_endpoints_and_undefined_ports_are_rejected(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    replies = connect(lab["node"], "10.96.0.10", 80, count=24)
    assert {r.split()[0] for r in replies} == {"b1", "b2"}, replies
    assert connect(lab["node"], "10.96.0.10", 81) == ["refused"], "clusterIP on an undefined port"
    assert connect(lab["node"], "10.96.0.20", 80) == ["refused"], "service without endpoints"
    assert {r.split()[0] for r in connect(lab["node"], "10.96.0.10", 53, count=12, proto="udp")} == {"b1", "b2"}


def test_ipv6_cluster_ip(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    replies = connect(lab["node"], "fd00:96::10", 80, count=16)
    assert {r.split()[0] for r in replies} == {"b1", "b2"}, replies


def test_without_netkit_the_cluster_ip_does_not_answer(lab: dict[str, str]) -> None:
    """The control: the answers above come from netkit's DNAT, not from the lab's wiring."""
    assert connect(lab["node"], "10.96.0.10", 80)[0].startswith("error")


def test_client_ip_affinity_sticks(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    replies = connect(lab["node"], "10.96.0.13", 80, count=12)
    assert len({r.split()[0] for r in replies}) == 1, replies
    assert "shop" not in nft_list(lab["node"])  # sanity: only the lab's services
    assert "10.244.1.1" in nft_list(lab["node"], "aff-") or "10.244.2.1" in nft_list(lab["node"], "aff-")


def nft_list(ns: str, prefix: str = "") -> str:
    text = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "table", "ip", "netkit"],
                          capture_output=True, text=True, check=True).stdout
    if not prefix:
        return text
    blocks = text.split("\tset ")
    return "".join(b for b in blocks if b.startswith(prefix))


def test_off_cluster_source_is_masqueraded_and_pod_source_is_not(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    for reply in connect(lab["node"], "10.96.0.10", 80, count=8, src="192.0.2.10"):
        name, peer = reply.split()
        assert peer == ("10.244.1.1" if name == "b1" else "10.244.2.1"), reply
    for reply in connect(lab["node"], "10.96.0.10", 80, count=8, src="10.244.1.1"):
        assert reply.split()[1] == "10.244.1.1", reply


def test_hairpin_a_backend_reaching_itself_through_its_service(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    replies = connect(lab["b1"], "10.96.0.10", 80, count=24)
    assert {r.split()[0] for r in replies} == {"b1", "b2"}, replies
    for reply in replies:
        name, peer = reply.split()
        # To itself the source must be masqueraded (else b1 would drop a packet from its own address);
        # to the other backend the pod's address is kept.
        assert peer == ("10.244.1.1" if name == "b1" else "10.244.1.11"), reply


def test_node_port_on_the_node_address(lab: dict[str, str]) -> None:
    program(lab["node"], CONFIG)
    replies = connect(lab["node"], "192.0.2.10", 30080, count=12)
    assert {r.split()[0] for r in replies} == {"b1", "b2"}, replies
    assert connect(lab["node"], "127.0.0.1", 30080)[0] == "refused", "no localhost NodePorts in nftables mode"
