"""Traffic through a 3-node cluster, driven by kubectl: DNS names across nodes, NodePorts from
outside on every node, externalTrafficPolicy: Local with its health-check node port."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from netkit.lab.cluster import lifecycle, nodehttp
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome

from .conftest import Kubectl, answered_by, eventually, fresh, hit, in_pod, netns

pytestmark = pytest.mark.netns

DB = """apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  selector: {app: db}
  ports:
  - {name: pg, port: 5432, targetPort: 5432}
  - {name: pg-udp, port: 5432, targetPort: 5432, protocol: UDP}
"""
NODEPORT = """apiVersion: v1
kind: Service
metadata: {name: web-np}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"""
LOCAL = """apiVersion: v1
kind: Service
metadata: {name: db-lb}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: db}
  ports: [{name: pg, port: 5432, targetPort: 5432}]
"""


@pytest.fixture(scope="module")
def db(cluster: Record) -> Iterator[str]:
    """One `db` pod: the first replica of a deployment goes to node-1."""
    changed = lifecycle.scale(cluster.cluster_id, "db", 1, create=True)
    assert [p.node for p in changed.added] == ["node-1"]
    yield changed.added[0].name


def service(kubectl: Kubectl, name: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(kubectl("get", "service", name, "-o", "json"))
    return doc


def test_a_pod_on_node_3_reaches_a_pod_on_node_1_by_dns_name(cluster: Record, db: str, kubectl: Kubectl) -> None:
    kubectl.apply(DB)
    ip = service(kubectl, "db")["spec"]["clusterIP"]  # type: ignore[index]
    client = next(p for p in fresh(cluster).cluster.pods_on("node-3") if p.deploy == "web").name
    resolved = eventually(lambda: in_pod(cluster, client, ["getent", "hosts", "db"]).stdout, what="getent hosts db")
    assert resolved.split() == [ip, "db.default.svc.cluster.local"]
    # the real resolver again, inside a program that connects by name (search path, ndots, kube-dns)
    code = ("import socket; s = socket.create_connection(('db', 5432), timeout=3); "
            "print(s.recv(100).decode().split()[0])")
    reply = eventually(lambda: in_pod(cluster, client, [sys.executable, "-c", code]).stdout.strip(),
                       what="a connection to db by name")
    assert reply == db
    assert hit(cluster, client, ip, 5432, "udp").backend == db  # UDP through the Service too
    fqdn = in_pod(cluster, client, ["getent", "hosts", "kube-dns.kube-system.svc.cluster.local"]).stdout.split()
    assert fqdn[0] == "10.96.0.10"


def test_a_pod_reaches_the_api_through_the_kubernetes_service(cluster: Record) -> None:
    """default/kubernetes exists as in every cluster: 10.96.0.1:443 → node-1's address :6443 (the lab's
    API speaks plain HTTP there), by name from any pod."""
    client = next(p for p in fresh(cluster).cluster.pods_on("node-3") if p.deploy == "web").name
    resolved = eventually(lambda: in_pod(cluster, client, ["getent", "hosts", "kubernetes.default"]).stdout,
                          what="getent hosts kubernetes.default")
    assert resolved.split() == ["10.96.0.1", "kubernetes.default.svc.cluster.local"]
    code = ("import json, urllib.request; print(json.load(urllib.request.urlopen("
            "'http://kubernetes.default:443/version', timeout=3))['gitVersion'])")
    version = eventually(lambda: in_pod(cluster, client, [sys.executable, "-c", code]).stdout.strip(),
                         what="GET /version through the kubernetes Service")
    assert version.startswith("v1.32")


def test_a_nodeport_answers_from_outside_on_every_node(cluster: Record, kubectl: Kubectl) -> None:
    kubectl.apply(NODEPORT)
    node_port = service(kubectl, "web-np")["spec"]["ports"][0]["nodePort"]  # type: ignore[index]
    web = {p.name for p in fresh(cluster).cluster.pods_of("web")}
    for node in fresh(cluster).cluster.nodes:
        reply = eventually(lambda n=node: hit(cluster, "outside", str(n.ip), node_port).answered,  # type: ignore[misc]
                           what=f"NodePort on {node.name}")
        assert reply
        assert answered_by(cluster, "outside", str(node.ip), node_port, count=10) <= web
    # a second apply (a strategic merge patch): the port moves (and, matched by port number as the
    # API server does, gets a new nodePort)
    kubectl.apply(NODEPORT.replace("port: 80,", "port: 81,"))
    ports = service(kubectl, "web-np")["spec"]["ports"]  # type: ignore[index]
    assert [p["port"] for p in ports] == [81] and ports[0]["nodePort"]
    ip = service(kubectl, "web-np")["spec"]["clusterIP"]  # type: ignore[index]
    assert eventually(lambda: hit(cluster, "node-2", ip, 81).answered, what="the moved port")


def test_etp_local_health_check_answers_200_only_where_an_endpoint_is(cluster: Record, db: str,
                                                                      kubectl: Kubectl) -> None:
    kubectl.apply(LOCAL)
    spec = service(kubectl, "db-lb")["spec"]
    hc, node_port = spec["healthCheckNodePort"], spec["ports"][0]["nodePort"]  # type: ignore[index]
    outside = netns(cluster, "outside")
    nodes = fresh(cluster).cluster.nodes

    def health() -> dict[str, int]:
        out = {}
        for n in nodes:
            try:
                out[n.name] = nodehttp.get(outside, str(n.ip), hc, "/").status
            except OSError:
                out[n.name] = 0
        return out

    # the outside "load balancer" checks every node: only node-1 has the db pod
    assert eventually(lambda: health() == {"node-1": 200, "node-2": 503, "node-3": 503}, what="health checks")
    local = hit(cluster, "outside", str(nodes[0].ip), node_port)
    assert local.backend == db and str(local.source) == "192.0.2.1"  # the client's own address, kept
    assert hit(cluster, "outside", str(nodes[1].ip), node_port, timeout=0.5).outcome is not Outcome.ANSWERED
