"""[sig-network] Services (test/e2e/network/service.go), translated one to one.

Each test names its upstream `ginkgo.It` in its docstring and its `upstream` marker; the steps
and the assertion are upstream's, polled for `POLL` seconds instead of upstream's minutes.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from tests.lab_cluster.conftest import Kubectl, eventually, hit, netns

from .conftest import (
    CLIENT_NODE,
    POLL,
    cluster_ip,
    connect_by_name,
    dig,
    get,
    hostnames,
    pods_of,
    service_down,
    service_up,
    start_serve_hostname,
)

pytestmark = pytest.mark.netns

DESCRIBE = "Services"  # the upstream SIGDescribe these tests belong to

AFFINITY = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: web}}
  sessionAffinity: {affinity}
  ports: [{{port: 80, targetPort: http}}]
"""
AFFINITY_CONFIRM = 15  # upstream's AffinityConfirmCount: this many answers from one pod means "sticky"


def affinity_holds(record: Record, pod: str, ip: str, sticky: bool) -> bool:
    """checkAffinity: `sticky` — the last 15 connections all reached one pod; not `sticky` — the
    connections reached more than one pod."""
    seen = hostnames(record, pod, ip, 80, AFFINITY_CONFIRM)
    if None in seen:
        return False
    return len(set(seen)) == 1 if sticky else len(set(seen)) > 1


@pytest.mark.upstream("should have session affinity work for service with type clusterIP [LinuxOnly] "
                      "[Conformance]")
def test_session_affinity_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should have session affinity work for service with type clusterIP [LinuxOnly]
    [Conformance]: a ClientIP Service over 6 pods sends every connection of the exec pod to one."""
    kubectl.apply(AFFINITY.format(name="affinity-clusterip", affinity="ClientIP"))
    ip = cluster_ip(kubectl, "affinity-clusterip")
    assert eventually(lambda: affinity_holds(cluster, exec_pod, ip, sticky=True), POLL, "affinity")


@pytest.mark.upstream("should be able to switch session affinity for service with type clusterIP [LinuxOnly] "
                      "[Conformance]")
def test_switch_session_affinity_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to switch session affinity for service with type clusterIP
    [LinuxOnly] [Conformance]: ClientIP sticks; switched to None it spreads; back to ClientIP it
    sticks again."""
    kubectl.apply(AFFINITY.format(name="affinity-clusterip-transition", affinity="ClientIP"))
    ip = cluster_ip(kubectl, "affinity-clusterip-transition")
    assert eventually(lambda: affinity_holds(cluster, exec_pod, ip, sticky=True), POLL, "affinity")
    kubectl("patch", "service", "affinity-clusterip-transition", "-p", '{"spec":{"sessionAffinity":"None"}}')
    assert eventually(lambda: affinity_holds(cluster, exec_pod, ip, sticky=False), POLL, "no affinity")
    kubectl("patch", "service", "affinity-clusterip-transition", "-p", '{"spec":{"sessionAffinity":"ClientIP"}}')
    assert eventually(lambda: affinity_holds(cluster, exec_pod, ip, sticky=True), POLL, "affinity again")


MULTIPORT = """apiVersion: v1
kind: Service
metadata: {name: multi-endpoint-test}
spec:
  selector: {app: multi}
  ports:
  - {name: portname1, port: 80, targetPort: http}
  - {name: portname2, port: 81, targetPort: 5432}
"""


def endpoint_ports(kubectl: Kubectl, service: str) -> dict[str, list[int]]:
    """validateEndpointsPorts' view: pod name → the endpoint ports of its slices."""
    slices = kubectl("get", "endpointslices", "-l", f"kubernetes.io/service-name={service}", "-o", "json")
    out: dict[str, list[int]] = {}
    for s in json.loads(slices)["items"]:
        for e in s.get("endpoints") or []:
            ref = (e.get("targetRef") or {}).get("name", "")
            out.setdefault(ref, []).extend(int(p["port"]) for p in s.get("ports") or [])
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.upstream("should serve multiport endpoints from pods [Conformance]")
def test_multiport_endpoints(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should serve multiport endpoints from pods [Conformance]: a Service with two named
    ports has no endpoints, then one pod's, then both pods', both ports reachable from a pod; then
    one, then none as the pods go.

    Lab gap: upstream gives pod1 only container port svc1 (100) and pod2 only svc2 (101); the lab's
    pods all carry the same ports (`http` = 8080, and 5432), so each pod is an endpoint of both
    Service ports and the expected ports are {8080, 5432} per pod."""
    kubectl.apply(MULTIPORT)
    ip = cluster_ip(kubectl, "multi-endpoint-test")
    both = [5432, 8080]
    assert eventually(lambda: endpoint_ports(kubectl, "multi-endpoint-test") == {}, POLL, "no endpoints")
    (pod1,) = start_serve_hostname(cluster, "multi", 1)
    assert eventually(lambda: endpoint_ports(kubectl, "multi-endpoint-test") == {pod1: both}, POLL, "pod1")
    pods = start_serve_hostname(cluster, "multi", 2)
    assert eventually(lambda: endpoint_ports(kubectl, "multi-endpoint-test") == dict.fromkeys(pods, both),
                      POLL, "both pods")
    for port in (80, 81):  # checkServiceReachability on each Service port
        assert eventually(lambda p=port: service_up(cluster, exec_pod, ip, p, pods), POLL,  # type: ignore[misc]
                          f"port {port} served by {sorted(pods)}")
    lifecycle.scale(cluster.cluster_id, "multi", 1)
    assert eventually(lambda: endpoint_ports(kubectl, "multi-endpoint-test")
                      == dict.fromkeys(pods_of(cluster, "multi"), both), POLL, "one pod left")
    lifecycle.scale(cluster.cluster_id, "multi", 0)
    assert eventually(lambda: endpoint_ports(kubectl, "multi-endpoint-test") == {}, POLL, "no endpoints again")


NO_PODS = """apiVersion: v1
kind: Service
metadata: {name: no-pods}
spec:
  selector: {nopods: nopods}
  ports: [{port: 80, targetPort: 80}]
"""


@pytest.mark.upstream("should be rejected when no endpoints exist")
def test_rejected_without_endpoints(cluster: Record, kubectl: Kubectl, exec_pod: str, proxy_mode: str) -> None:
    """Services should be rejected when no endpoints exist: `agnhost connect no-pods:80` from a pod
    fails with REFUSED (not a timeout).

    Deliberate difference, pinned: kube-proxy rejects with ICMP port-unreachable; netkit answers a
    TCP SYN with a TCP reset (ICMP for other protocols), which a client sees at once as the same
    ECONNREFUSED — agnhost's REFUSED — without depending on ICMP reaching it."""
    kubectl.apply(NO_PODS)
    assert eventually(lambda: connect_by_name(cluster, exec_pod, "no-pods", 80) == "REFUSED", POLL,
                      "no-pods:80 refused")
    node = netns(cluster, CLIENT_NODE)
    if proxy_mode == "iptables":
        rules = [r for r in node_rules(node, "iptables-save") if "default/no-pods" in r and "REJECT" in r]
        assert rules and all("--reject-with tcp-reset" in r for r in rules), rules
    else:
        assert "reject with tcp reset" in "\n".join(node_rules(node, "nft", "list", "ruleset"))


def node_rules(node: str, *argv: str) -> list[str]:
    proc = subprocess.run(["ip", "netns", "exec", node, *argv], capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.splitlines()


EXTERNAL_NAME = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: ExternalName
  externalName: {target}
"""
CLUSTER_IP = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: ClusterIP
  selector: {{app: {app}}}
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: {target}}}]
"""


def reachable(record: Record, pod: str, name: str, ip: str, pods: set[str]) -> bool:
    """CheckServiceReachability for a ClusterIP Service: by name and by ClusterIP on port 80."""
    return connect_by_name(record, pod, name, 80) in pods and hit(record, pod, ip, 80).backend in pods


@pytest.mark.upstream("should be able to change the type from ExternalName to ClusterIP [Conformance]")
def test_externalname_to_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to change the type from ExternalName to ClusterIP [Conformance]:
    ExternalName (no ClusterIP) → ClusterIP with port 80; two pods; reachable by name and by
    ClusterIP. Lab gap: targetPort is the pods' `http` (8080), not agnhost's 9376."""
    kubectl.apply(EXTERNAL_NAME.format(name="externalname-service", target="foo.example.com"))
    assert cluster_ip(kubectl, "externalname-service") == ""
    kubectl("replace", manifest=CLUSTER_IP.format(name="externalname-service", app="externalname", target="http"))
    ip = cluster_ip(kubectl, "externalname-service")
    assert ip
    pods = start_serve_hostname(cluster, "externalname", 2)
    assert eventually(lambda: reachable(cluster, exec_pod, "externalname-service", ip, pods), POLL, "reachable")


@pytest.mark.upstream("should be able to change the type from ClusterIP to ExternalName [Conformance]")
def test_clusterip_to_externalname(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to change the type from ClusterIP to ExternalName [Conformance]: a
    ClusterIP Service becomes an ExternalName for another Service's FQDN; its ClusterIP is cleared
    and its name resolves (a CNAME to that FQDN) to the other Service's address."""
    kubectl.apply(CLUSTER_IP.format(name="clusterip-service", app="clusterip", target="http"))
    assert cluster_ip(kubectl, "clusterip-service")
    kubectl.apply(CLUSTER_IP.format(name="externalsvc", app="web", target="http"))
    external_fqdn = "externalsvc.default.svc.cluster.local"
    kubectl("replace", manifest=EXTERNAL_NAME.format(name="clusterip-service", target=external_fqdn))
    assert get(kubectl, "service", "clusterip-service")["spec"].get("clusterIP", "") == ""
    target = cluster_ip(kubectl, "externalsvc")
    assert eventually(lambda: dig(cluster, exec_pod, "clusterip-service") == sorted([f"{external_fqdn}.", target]),
                      POLL, "clusterip-service → externalsvc")
    web = pods_of(cluster, "web")
    assert eventually(lambda: connect_by_name(cluster, exec_pod, "clusterip-service", 80) in web, POLL,
                      "reachable through the ExternalName")


def serve_hostname(name: str, app: str, labels: str = "") -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, labels: {{{labels}}}}}
spec:
  selector: {{app: {app}}}
  ports: [{{port: 9376, targetPort: http}}]
"""


def toggled_label_test(record: Record, kubectl: Kubectl, pod: str, prefix: str, label: str) -> None:
    """The shared body of the service-proxy-name and headless tests: a Service created with the
    label is never served; one created without it is served, stops when it gains the label and is
    served again when it loses it."""
    key = label.split(":")[0]
    kubectl.apply(serve_hostname(f"{prefix}-disabled", f"{prefix}-disabled", label))
    start_serve_hostname(record, f"{prefix}-disabled", 3)
    kubectl.apply(serve_hostname(f"{prefix}-toggled", f"{prefix}-toggled"))
    toggled_pods = start_serve_hostname(record, f"{prefix}-toggled", 3)
    disabled_ip, toggled_ip = cluster_ip(kubectl, f"{prefix}-disabled"), cluster_ip(kubectl, f"{prefix}-toggled")
    assert eventually(lambda: service_up(record, pod, toggled_ip, 9376, toggled_pods), POLL, "service up")
    assert service_down(record, pod, disabled_ip, 9376), f"{prefix}-disabled answered"
    kubectl("label", "service", f"{prefix}-toggled", label.replace(": ", "=").replace('""', ""))
    assert eventually(lambda: service_down(record, pod, toggled_ip, 9376), POLL, "service down after the label")
    kubectl("label", "service", f"{prefix}-toggled", f"{key}-")
    assert eventually(lambda: service_up(record, pod, toggled_ip, 9376, toggled_pods), POLL, "service up again")
    assert service_down(record, pod, disabled_ip, 9376), f"{prefix}-disabled answered"


@pytest.mark.upstream("should implement service.kubernetes.io/service-proxy-name")
def test_service_proxy_name(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should implement service.kubernetes.io/service-proxy-name: a Service labelled for
    another proxy (`foo-bar`) gets no rules; the label added to a served Service removes its
    rules, removed it brings them back."""
    toggled_label_test(cluster, kubectl, exec_pod, "service-proxy", "service.kubernetes.io/service-proxy-name: foo-bar")


@pytest.mark.upstream("should implement service.kubernetes.io/headless")
def test_headless_label(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should implement service.kubernetes.io/headless: the same with the
    `service.kubernetes.io/headless` label (empty value) on Services that do have a ClusterIP."""
    toggled_label_test(cluster, kubectl, exec_pod, "service-headless", 'service.kubernetes.io/headless: ""')
