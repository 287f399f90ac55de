"""[sig-network] Services (test/e2e/network/service.go), translated one to one.

Each test names its upstream `ginkgo.It` in its docstring and its `upstream` marker; the steps
and the assertion are upstream's, polled for `POLL` seconds instead of upstream's minutes.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from netkit.lab import sockets
from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome
from tests.lab_cluster.conftest import Kubectl, eventually, fresh, hit, netns

from .conftest import (
    CLIENT_NODE,
    POLL,
    cluster_ip,
    connect_by_name,
    dig,
    get,
    hostnames,
    http_get,
    node_ips,
    node_of,
    pod_ip,
    pods_of,
    service_down,
    service_reachable,
    service_up,
    start_serve_hostname,
    web_pod_on,
)

pytestmark = pytest.mark.netns

DESCRIBE = "Services"  # the upstream SIGDescribe these tests belong to

AFFINITY = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: {type}
  selector: {{app: web}}
  sessionAffinity: {affinity}
  ports: [{{port: 80, targetPort: http}}]
"""
AFFINITY_TIMEOUT = """  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {timeout}}}}}
"""
AFFINITY_CONFIRM = 15  # upstream's AffinityConfirmCount: this many answers from one pod means "sticky"
SESSION_AFFINITY_TIMEOUT = 15  # upstream's svcSessionAffinityTimeout, seconds


def affinity_service(kubectl: Kubectl, name: str, kind: str = "ClusterIP", affinity: str = "ClientIP",
                     timeout: int = 0) -> None:
    manifest = AFFINITY.format(name=name, type=kind, affinity=affinity)
    kubectl.apply(manifest + (AFFINITY_TIMEOUT.format(timeout=timeout) if timeout else ""))


def affinity_target(record: Record, kubectl: Kubectl, name: str, kind: str) -> tuple[str, int]:
    """Where execAffinityTest connects: the ClusterIP on port 80, or for a NodePort Service the
    first node's InternalIP on the node port."""
    if kind == "NodePort":
        return node_ips(record)[0], int(get(kubectl, "service", name)["spec"]["ports"][0]["nodePort"])
    return cluster_ip(kubectl, name), 80


def affinity_holds(record: Record, pod: str, ip: str, sticky: bool, port: int = 80) -> bool:
    """checkAffinity: `sticky` — the last 15 connections all reached one pod; not `sticky` — the
    connections reached more than one pod."""
    seen = hostnames(record, pod, ip, port, AFFINITY_CONFIRM)
    if None in seen:
        return False
    return len(set(seen)) == 1 if sticky else len(set(seen)) > 1


def affinity_reachable(record: Record, kubectl: Kubectl, pod: str, name: str, kind: str) -> tuple[str, int]:
    """The affinity tests' first steps: the Service is reachable (jig.CheckServiceReachability);
    returns where they connect."""
    ip, port = affinity_target(record, kubectl, name, kind)
    node_ports = [port] if kind == "NodePort" else []
    web = pods_of(record, "web")
    assert eventually(lambda: service_reachable(record, pod, name, cluster_ip(kubectl, name), [(80, "tcp")], web,
                                                node_ports), POLL, "reachable")
    return ip, port


def affinity_test(record: Record, kubectl: Kubectl, pod: str, name: str, kind: str) -> None:
    """execAffinityTestForNonLBService: ClientIP affinity holds."""
    affinity_service(kubectl, name, kind)
    ip, port = affinity_reachable(record, kubectl, pod, name, kind)
    assert eventually(lambda: affinity_holds(record, pod, ip, True, port), POLL, "affinity")


def affinity_transition_test(record: Record, kubectl: Kubectl, pod: str, name: str, kind: str) -> None:
    """execAffinityTestForNonLBServiceWithTransition: ClientIP sticks; switched to None it
    spreads; back to ClientIP it sticks again."""
    affinity_service(kubectl, name, kind)
    ip, port = affinity_reachable(record, kubectl, pod, name, kind)
    assert eventually(lambda: affinity_holds(record, pod, ip, True, port), POLL, "affinity")
    kubectl("patch", "service", name, "-p", '{"spec":{"sessionAffinity":"None"}}')
    assert eventually(lambda: affinity_holds(record, pod, ip, False, port), POLL, "no affinity")
    kubectl("patch", "service", name, "-p", '{"spec":{"sessionAffinity":"ClientIP"}}')
    assert eventually(lambda: affinity_holds(record, pod, ip, True, port), POLL, "affinity again")


def affinity_timeout_test(record: Record, kubectl: Kubectl, pod: str, name: str, kind: str) -> None:
    """execAffinityTestForSessionAffinityTimeout: sticky within the timeout; then, with the
    timeout and 5 s waited out between connections, up to 10 connections reach more than one pod."""
    affinity_service(kubectl, name, kind, timeout=SESSION_AFFINITY_TIMEOUT)
    ip, port = affinity_reachable(record, kubectl, pod, name, kind)
    assert eventually(lambda: affinity_holds(record, pod, ip, True, port), POLL, "affinity")
    hosts: set[str] = set()
    for _ in range(10):
        backend = hit(record, pod, ip, port).backend
        if backend is not None:
            hosts.add(backend)
            if len(hosts) > 1:
                return
            time.sleep(SESSION_AFFINITY_TIMEOUT + 5)  # upstream's wait: the timeout and 5 s more
    raise AssertionError(f"Session is sticky after reaching the timeout: {sorted(hosts)}")


@pytest.mark.upstream("should have session affinity work for service with type clusterIP [LinuxOnly] "
                      "[Conformance]")
@pytest.mark.ipvs
def test_session_affinity_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should have session affinity work for service with type clusterIP [LinuxOnly]
    [Conformance]: a ClientIP Service over the `web` pods sends every connection of the exec pod
    to one."""
    affinity_test(cluster, kubectl, exec_pod, "affinity-clusterip", "ClusterIP")


@pytest.mark.upstream("should be able to switch session affinity for service with type clusterIP [LinuxOnly] "
                      "[Conformance]")
@pytest.mark.ipvs
def test_switch_session_affinity_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to switch session affinity for service with type clusterIP
    [LinuxOnly] [Conformance]: ClientIP sticks; switched to None it spreads; back to ClientIP it
    sticks again."""
    affinity_transition_test(cluster, kubectl, exec_pod, "affinity-clusterip-transition", "ClusterIP")


@pytest.mark.upstream("should have session affinity timeout work for service with type clusterIP [LinuxOnly] "
                      "[Conformance]")
def test_session_affinity_timeout_clusterip(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should have session affinity timeout work for service with type clusterIP
    [LinuxOnly] [Conformance]: ClientIP with timeoutSeconds 15 sticks; connections 15 s apart
    reach another pod."""
    affinity_timeout_test(cluster, kubectl, exec_pod, "affinity-clusterip-timeout", "ClusterIP")


@pytest.mark.upstream("should have session affinity work for NodePort service [LinuxOnly] [Conformance]")
@pytest.mark.ipvs
def test_session_affinity_nodeport(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]:
    the same through the first node's address and the node port."""
    affinity_test(cluster, kubectl, exec_pod, "affinity-nodeport", "NodePort")


@pytest.mark.upstream("should be able to switch session affinity for NodePort service [LinuxOnly] "
                      "[Conformance]")
def test_switch_session_affinity_nodeport(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to switch session affinity for NodePort service [LinuxOnly]
    [Conformance]: ClientIP, None, ClientIP through the first node's node port."""
    affinity_transition_test(cluster, kubectl, exec_pod, "affinity-nodeport-transition", "NodePort")


@pytest.mark.upstream("should have session affinity timeout work for NodePort service [LinuxOnly] "
                      "[Conformance]")
def test_session_affinity_timeout_nodeport(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should have session affinity timeout work for NodePort service [LinuxOnly]
    [Conformance]: timeoutSeconds 15 through the first node's node port."""
    affinity_timeout_test(cluster, kubectl, exec_pod, "affinity-nodeport-timeout", "NodePort")


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


NODE_PORT = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: NodePort
  selector: {{app: {app}}}
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: http}}]
"""


def node_port_of(kubectl: Kubectl, name: str) -> int:
    return int(get(kubectl, "service", name)["spec"]["ports"][0].get("nodePort", 0))


@pytest.mark.upstream("should be able to create a functioning NodePort service [Conformance]")
@pytest.mark.ipvs
def test_functioning_nodeport(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to create a functioning NodePort service [Conformance]: a NodePort
    Service over two pods answers by name, by ClusterIP and on every node's address at its node
    port, from a pod."""
    kubectl.apply(NODE_PORT.format(name="nodeport-test", app="nodeport-test"))
    ip, node_port = cluster_ip(kubectl, "nodeport-test"), node_port_of(kubectl, "nodeport-test")
    assert node_port
    pods = start_serve_hostname(cluster, "nodeport-test", 2)
    assert eventually(lambda: service_reachable(cluster, exec_pod, "nodeport-test", ip, [(80, "tcp")], pods,
                                                [node_port]), POLL, "reachable")


@pytest.mark.upstream("should be able to change the type from ExternalName to NodePort [Conformance]")
def test_externalname_to_nodeport(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to change the type from ExternalName to NodePort [Conformance]:
    ExternalName → NodePort with port 80; two pods; reachable by name, ClusterIP and every node's
    node port. Lab gap: targetPort is the pods' `http` (8080), not agnhost's 9376."""
    kubectl.apply(EXTERNAL_NAME.format(name="externalname-nodeport", target="foo.example.com"))
    assert cluster_ip(kubectl, "externalname-nodeport") == ""
    kubectl("replace", manifest=NODE_PORT.format(name="externalname-nodeport", app="externalname-nodeport"))
    ip, node_port = cluster_ip(kubectl, "externalname-nodeport"), node_port_of(kubectl, "externalname-nodeport")
    assert ip and node_port
    pods = start_serve_hostname(cluster, "externalname-nodeport", 2)
    assert eventually(lambda: service_reachable(cluster, exec_pod, "externalname-nodeport", ip, [(80, "tcp")], pods,
                                                [node_port]), POLL, "reachable")


@pytest.mark.upstream("should be able to change the type from NodePort to ExternalName [Conformance]")
def test_nodeport_to_externalname(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to change the type from NodePort to ExternalName [Conformance]: a
    NodePort Service becomes an ExternalName for another Service's FQDN; its ClusterIP and node
    port are cleared, its name resolves to the other Service and reaches its pods."""
    kubectl.apply(NODE_PORT.format(name="nodeport-service", app="nodeport-service"))
    node_port = node_port_of(kubectl, "nodeport-service")
    assert cluster_ip(kubectl, "nodeport-service") and node_port
    kubectl.apply(CLUSTER_IP.format(name="externalsvc", app="web", target="http"))
    external_fqdn = "externalsvc.default.svc.cluster.local"
    kubectl("replace", manifest=EXTERNAL_NAME.format(name="nodeport-service", target=external_fqdn))
    spec = get(kubectl, "service", "nodeport-service")["spec"]
    assert spec.get("clusterIP", "") == "" and not any(p.get("nodePort") for p in spec.get("ports") or [])
    target = cluster_ip(kubectl, "externalsvc")
    assert eventually(lambda: dig(cluster, exec_pod, "nodeport-service") == sorted([f"{external_fqdn}.", target]),
                      POLL, "nodeport-service → externalsvc")
    web = pods_of(cluster, "web")
    assert eventually(lambda: connect_by_name(cluster, exec_pod, "nodeport-service", 80) in web, POLL,
                      "reachable through the ExternalName")
    assert hit(cluster, exec_pod, node_ips(cluster)[0], node_port, timeout=1.0).outcome is not Outcome.ANSWERED


def basic_endpoint(port: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: endpoint-test2}}
spec:
  selector: {{app: endpoint-test2}}
  ports: [{{port: 80, targetPort: {port}}}]
"""


@pytest.mark.upstream("should serve a basic endpoint from pods [Conformance]")
def test_basic_endpoint(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should serve a basic endpoint from pods [Conformance]: no endpoints; pod1's; pod1's
    and pod2's, both reached through the Service; pod1 deleted, pod2's; pod2 deleted, none.
    Lab gap: the target port is the pods' 8080, not 80."""
    kubectl.apply(basic_endpoint("8080"))
    ip = cluster_ip(kubectl, "endpoint-test2")
    assert eventually(lambda: endpoint_ports(kubectl, "endpoint-test2") == {}, POLL, "no endpoints")
    (pod1,) = start_serve_hostname(cluster, "endpoint-test2", 1)
    assert eventually(lambda: endpoint_ports(kubectl, "endpoint-test2") == {pod1: [8080]}, POLL, "pod1")
    pods = start_serve_hostname(cluster, "endpoint-test2", 2)
    (pod2,) = pods - {pod1}
    assert eventually(lambda: endpoint_ports(kubectl, "endpoint-test2") == dict.fromkeys(pods, [8080]), POLL, "both")
    assert eventually(lambda: service_reachable(cluster, exec_pod, "endpoint-test2", ip, [(80, "tcp")], pods),
                      POLL, "the Service forwards to both pods")
    lifecycle.delete(cluster.cluster_id, [pod1])
    assert eventually(lambda: endpoint_ports(kubectl, "endpoint-test2") == {pod2: [8080]}, POLL, "pod2 only")
    lifecycle.delete(cluster.cluster_id, [pod2])
    assert eventually(lambda: endpoint_ports(kubectl, "endpoint-test2") == {}, POLL, "no endpoints again")


@pytest.mark.upstream("should be able to up and down services")
@pytest.mark.ipvs
def test_up_and_down_services(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be able to up and down services: service1 and service2 (3 pods each) up;
    service1 stopped (pods and Service deleted) is down while service2 stays up; service3 gets
    another ClusterIP and both are up."""
    started = {}
    for name in ("up-down-1", "up-down-2"):
        kubectl.apply(serve_hostname(name, name))
        started[name] = (start_serve_hostname(cluster, name, 3), cluster_ip(kubectl, name))
    for name, (pods, ip) in started.items():
        assert eventually(lambda p=pods, i=ip: service_up(cluster, exec_pod, i, 9376, p), POLL,  # type: ignore[misc]
                          f"{name} up")
    lifecycle.scale(cluster.cluster_id, "up-down-1", 0)  # StopServeHostnameService
    kubectl("delete", "service", "up-down-1")
    pods2, ip2 = started["up-down-2"]
    assert eventually(lambda: service_down(cluster, exec_pod, started["up-down-1"][1], 9376), POLL, "service1 down")
    assert eventually(lambda: service_up(cluster, exec_pod, ip2, 9376, pods2), POLL, "service2 still up")
    kubectl.apply(serve_hostname("up-down-3", "up-down-3"))
    pods3, ip3 = start_serve_hostname(cluster, "up-down-3", 3), cluster_ip(kubectl, "up-down-3")
    assert ip3 != ip2, f"service IPs conflict: {ip2}"
    assert eventually(lambda: service_up(cluster, exec_pod, ip2, 9376, pods2), POLL, "service2 still up")
    assert eventually(lambda: service_up(cluster, exec_pod, ip3, 9376, pods3), POLL, "service3 up")


@pytest.mark.upstream("should work after the service has been recreated")
def test_recreated_service(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should work after the service has been recreated: one pod behind the Service; up;
    the Service deleted, down; created again (a new ClusterIP), up."""
    manifest = serve_hostname("service-deletion", "service-deletion")
    kubectl.apply(manifest)
    pods, ip = start_serve_hostname(cluster, "service-deletion", 1), cluster_ip(kubectl, "service-deletion")
    assert eventually(lambda: service_up(cluster, exec_pod, ip, 9376, pods), POLL, "up")
    kubectl("delete", "service", "service-deletion")
    assert eventually(lambda: service_down(cluster, exec_pod, ip, 9376), POLL, "down")
    kubectl("create", manifest=manifest)
    ip = cluster_ip(kubectl, "service-deletion")
    assert eventually(lambda: service_up(cluster, exec_pod, ip, 9376, pods), POLL, "up again")


EDIT_PORT = """apiVersion: v1
kind: Service
metadata: {name: edit-port-test}
spec:
  selector: {app: edit-port-test}
  ports:
"""
EDIT_PORT1 = "  - {name: portname1, port: 80, protocol: TCP, targetPort: 8080}\n"
EDIT_PORT2 = "  - {name: portname2, port: 81, protocol: UDP, targetPort: 5432}\n"


@pytest.mark.upstream("should be updated after adding or deleting ports")
def test_adding_and_deleting_ports(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should be updated after adding or deleting ports: port 80/TCP served; 81/UDP added,
    both endpoint ports listed and both reachable; 80 deleted, only 81's.

    Lab gap: upstream's target ports are the pod's named ports svc1 (100/TCP) and svc2 (101/UDP);
    the lab's pods serve 8080/TCP and 5432/UDP, named here by number."""
    kubectl("create", manifest=EDIT_PORT + EDIT_PORT1)
    ip = cluster_ip(kubectl, "edit-port-test")
    assert eventually(lambda: endpoint_ports(kubectl, "edit-port-test") == {}, POLL, "no endpoints")
    (pod,) = start_serve_hostname(cluster, "edit-port-test", 1)
    assert eventually(lambda: endpoint_ports(kubectl, "edit-port-test") == {pod: [8080]}, POLL, "port 1")
    assert eventually(lambda: service_reachable(cluster, exec_pod, "edit-port-test", ip, [(80, "tcp")], {pod}),
                      POLL, "port 80")
    kubectl("replace", manifest=EDIT_PORT + EDIT_PORT1 + EDIT_PORT2)
    assert eventually(lambda: endpoint_ports(kubectl, "edit-port-test") == {pod: [5432, 8080]}, POLL, "ports 1, 2")
    assert eventually(lambda: service_reachable(cluster, exec_pod, "edit-port-test", ip, [(80, "tcp"), (81, "udp")],
                                                {pod}), POLL, "ports 80 and 81")
    kubectl("replace", manifest=EDIT_PORT + EDIT_PORT2)
    assert eventually(lambda: endpoint_ports(kubectl, "edit-port-test") == {pod: [5432]}, POLL, "port 2")
    assert eventually(lambda: service_reachable(cluster, exec_pod, "edit-port-test", ip, [(81, "udp")], {pod}),
                      POLL, "port 81")


def tcp_service(name: str, port: int, extra: str = "") -> str:
    """jig.CreateTCPServiceWithPort: selector app=NAME, one TCP port to the pods' `http`."""
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: {port}, protocol: TCP, targetPort: http}}]
{extra}"""


@pytest.mark.upstream("should allow pods to hairpin back to themselves through services")
@pytest.mark.ipvs
def test_hairpin(cluster: Record, kubectl: Kubectl) -> None:
    """Services should allow pods to hairpin back to themselves through services: the Service's
    only pod reaches itself through it, by name and by ClusterIP."""
    kubectl.apply(tcp_service("hairpin-test", 8080))
    ip = cluster_ip(kubectl, "hairpin-test")
    (pod,) = start_serve_hostname(cluster, "hairpin-test", 1)
    assert eventually(lambda: service_reachable(cluster, pod, "hairpin-test", ip, [(8080, "tcp")], {pod}),
                      POLL, "the pod reaches itself")


@pytest.mark.upstream("should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]")
@pytest.mark.ipvs
def test_source_pod_ip_preserved(cluster: Record, kubectl: Kubectl) -> None:
    """Services should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]: the
    echo server behind the ClusterIP sees each client pod's own address, from a pod on every node
    (upstream's pause pods, one per node, up to 3)."""
    kubectl.apply(tcp_service("sourceip-test", 8080))
    ip = cluster_ip(kubectl, "sourceip-test")
    (server,) = start_serve_hostname(cluster, "sourceip-test", 1)
    assert eventually(lambda: endpoint_ports(kubectl, "sourceip-test") == {server: [8080]}, POLL, "endpoint")
    for node in [n.name for n in fresh(cluster).cluster.nodes][:3]:
        client = web_pod_on(cluster, node)
        reply = eventually(lambda c=client: (r := hit(cluster, c, ip, 8080)).backend == server and r,  # type: ignore[misc]
                           POLL, f"{server} from {client}")
        assert str(reply.source) == pod_ip(cluster, client), (client, reply.text)


@pytest.mark.upstream("should respect internalTrafficPolicy=Local Pod to Pod")
def test_internal_traffic_policy_local(cluster: Record, kubectl: Kubectl) -> None:
    """Services should respect internalTrafficPolicy=Local Pod to Pod: one server pod on node0;
    5 times, a pod on node0 reaches it through the ClusterIP and a pod on node1 fails to."""
    kubectl.apply(tcp_service("svc-itp", 80, "  internalTrafficPolicy: Local\n"))
    ip = cluster_ip(kubectl, "svc-itp")
    (server,) = start_serve_hostname(cluster, "svc-itp", 1)
    node0 = node_of(cluster, server)
    node1 = next(n.name for n in fresh(cluster).cluster.nodes if n.name != node0)
    pause0, pause1 = web_pod_on(cluster, node0), web_pod_on(cluster, node1)
    assert eventually(lambda: hit(cluster, pause0, ip, 80).backend == server, POLL, "local pod reaches it")
    for _ in range(5):
        assert hit(cluster, pause0, ip, 80).backend == server
        assert hit(cluster, pause1, ip, 80, timeout=2.0).outcome is not Outcome.ANSWERED


ETP_LOCAL_LB = """apiVersion: v1
kind: Service
metadata: {name: external-local-update}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: external-local-update}
  ports: [{name: http, port: 80, protocol: TCP, targetPort: http}]
"""


def node_port_answers(record: Record, exec_node: str, node_ip: str, port: int, preserved: bool) -> bool:
    """checkOneNodePort, answered: from the host-network exec pod, bound to its node's address, the
    node port answers (and with eTP Local the server saw that address)."""
    src = str(fresh(record).cluster.node(exec_node).ip)
    reply = sockets.connect(netns(record, exec_node), node_ip, port, src=src, timeout=3.0)
    return reply.backend is not None and (not preserved or str(reply.source) == src)


def node_port_silent(record: Record, exec_node: str, node_ip: str, port: int) -> bool:
    src = str(fresh(record).cluster.node(exec_node).ip)
    return sockets.connect(netns(record, exec_node), node_ip, port, src=src, timeout=3.0).backend is None


def health_check(record: Record, exec_node: str, node_ip: str, port: int) -> str:
    """checkOneHealthCheck's `curl -i http://NODE:HCPORT/`: the status line, or "" when nothing
    answers."""
    first = http_get(record, exec_node, f"http://{node_ip}:{port}/").split("\n")[0]
    return "" if first.startswith("ERROR") else first


def etp_checks(record: Record, exec_node: str, ips: dict[str, str], ports: tuple[int, int], local: bool) -> bool:
    """One round of the test's checks over the endpoint node, the exec pod's node and the third
    node: health checks 200/503/503 (eTP Local) or none answering (Cluster); the node port
    answering on the first two and not on the third (Local) or on all three (Cluster)."""
    node_port, hc_port = ports
    if local:
        statuses = [health_check(record, exec_node, ips[k], hc_port) for k in ("endpoint", "exec", "third")]
        return (statuses == ["200 OK", "503 Service Unavailable", "503 Service Unavailable"]
                and node_port_answers(record, exec_node, ips["endpoint"], node_port, preserved=True)
                and node_port_answers(record, exec_node, ips["exec"], node_port, preserved=True)
                and node_port_silent(record, exec_node, ips["third"], node_port))
    return (all(health_check(record, exec_node, ips[k], hc_port) == "" for k in ips)
            and all(node_port_answers(record, exec_node, ips[k], node_port, preserved=False) for k in ips))


@pytest.mark.upstream("should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy "
                      "changes")
def test_nodeport_and_health_check_node_port_on_etp_change(cluster: Record, kubectl: Kubectl) -> None:
    """Services should implement NodePort and HealthCheckNodePort correctly when
    ExternalTrafficPolicy changes: a LoadBalancer Service (no cloud: only the proxy's part) with
    eTP Local and one pod. From a host-network exec pod on another node: the health check node
    port says 200 on the endpoint's node and 503 on the others; the node port answers on the
    endpoint's node and on the exec pod's own node (short circuit), keeping the client address,
    and not on the third. Changed to Cluster: the health check node port is released and answers
    nowhere, the node port everywhere. Back to Local with the same health check node port: as at
    first."""
    kubectl.apply(ETP_LOCAL_LB)
    spec = get(kubectl, "service", "external-local-update")["spec"]
    ports = (int(spec["ports"][0]["nodePort"]), int(spec["healthCheckNodePort"]))
    (pod,) = start_serve_hostname(cluster, "external-local-update", 1)
    nodes = {n.name: str(n.ip) for n in fresh(cluster).cluster.nodes}
    endpoint_node = node_of(cluster, pod)
    exec_node, third = [n for n in nodes if n != endpoint_node][:2]
    ips = {"endpoint": nodes[endpoint_node], "exec": nodes[exec_node], "third": nodes[third]}
    assert eventually(lambda: etp_checks(cluster, exec_node, ips, ports, local=True), POLL, "eTP Local")
    kubectl("patch", "service", "external-local-update", "-p", '{"spec":{"externalTrafficPolicy":"Cluster"}}')
    assert not get(kubectl, "service", "external-local-update")["spec"].get("healthCheckNodePort"), \
        "Service HealthCheck NodePort still present"
    assert eventually(lambda: etp_checks(cluster, exec_node, ips, ports, local=False), POLL, "eTP Cluster")
    kubectl("patch", "service", "external-local-update", "-p",
            json.dumps({"spec": {"externalTrafficPolicy": "Local", "healthCheckNodePort": ports[1]}}))
    assert eventually(lambda: etp_checks(cluster, exec_node, ips, ports, local=True), POLL, "eTP Local again")


def pod_is_ready(kubectl: Kubectl, pod: str) -> bool:
    conditions = get(kubectl, "pod", pod).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def unready_service(name: str, publish: bool) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: NodePort
  publishNotReadyAddresses: {str(publish).lower()}
  selector: {{app: {name}}}
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: http}}]
"""


def terminating_unready(record: Record, kubectl: Kubectl, name: str, publish: bool
                        ) -> tuple[str, str, list[tuple[str, int]]]:
    """The shared first steps: a NodePort Service (publishNotReadyAddresses as given) over one
    webserver pod on node0; a pause pod on node1; the webserver deleted with a long grace period
    (the lab holds it terminating, still serving) and waited for until it is no longer Ready.
    Returns (webserver, pause pod, [ClusterIP:80, node0:nodePort, node1:nodePort])."""
    kubectl.apply(unready_service(name, publish))
    (server,) = start_serve_hostname(record, name, 1)
    assert eventually(lambda: endpoint_ports(kubectl, name) == {server: [8080]}, POLL, "endpoint")
    node0 = node_of(record, server)
    node1 = next(n for n in fresh(record).cluster.nodes if n.name != node0)
    pause1 = web_pod_on(record, node1.name)
    lifecycle.delete(record.cluster_id, [server], hold=True)
    assert eventually(lambda: not pod_is_ready(kubectl, server), POLL, f"{server} not ready")
    node_port = node_port_of(kubectl, name)
    targets = [(cluster_ip(kubectl, name), 80), (str(fresh(record).cluster.node(node0).ip), node_port),
               (str(node1.ip), node_port)]
    return server, pause1, targets


@pytest.mark.upstream("should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses "
                      "is true")
def test_terminating_unready_endpoints_published(cluster: Record, kubectl: Kubectl) -> None:
    """Services should be able to connect to terminating and unready endpoints if
    PublishNotReadyAddresses is true: after its deletion the webserver, terminating and not
    Ready, still answers the pause pod on the other node through the ClusterIP and both nodes'
    node port, 5 rounds 5 s apart."""
    server, pause1, targets = terminating_unready(cluster, kubectl, "svc-tolerate-unready", publish=True)
    for _ in range(5):
        for ip, port in targets:
            assert eventually(lambda i=ip, p=port: hit(cluster, pause1, i, p).backend == server,  # type: ignore[misc]
                              POLL, f"{server} through {ip}:{port}")
        time.sleep(5)
    lifecycle.delete(cluster.cluster_id, [server])  # "Remove pods immediately"


@pytest.mark.upstream("should not be able to connect to terminating and unready endpoints if "
                      "PublishNotReadyAddresses is false")
def test_terminating_unready_endpoints_not_published(cluster: Record, kubectl: Kubectl) -> None:
    """Services should not be able to connect to terminating and unready endpoints if
    PublishNotReadyAddresses is false: once both nodes stop sending to the deleted webserver
    (terminating, not Ready), the ClusterIP and both node ports fail from the pause pod, 5 rounds
    5 s apart."""
    server, pause1, targets = terminating_unready(cluster, kubectl, "svc-not-tolerate-unready", publish=False)
    for ip, port in targets[1:]:
        assert eventually(lambda i=ip, p=port: hit(cluster, pause1, i, p, timeout=5.0).backend is None,  # type: ignore[misc]
                          POLL, f"{ip}:{port} no longer served")
    for _ in range(5):
        assert all(hit(cluster, pause1, ip, port, timeout=5.0).backend is None for ip, port in targets)
        time.sleep(5)
    lifecycle.delete(cluster.cluster_id, [server])


@pytest.mark.upstream("should create endpoints for unready pods")
def test_endpoints_for_unready_pods(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Services should create endpoints for unready pods: a pod whose readiness probe never passes
    is reached by the Service's name while publishNotReadyAddresses is true; scaled away (held
    terminating by its grace period), it is unreachable once publishNotReadyAddresses is false and
    reachable again once it is true."""
    name, fqdn = "tolerate-unready", "tolerate-unready.default.svc.cluster.local"
    lifecycle.scale(cluster.cluster_id, name, 1, create=True, unready=True)
    (pod,) = pods_of(cluster, name)
    kubectl.apply(tcp_service(name, 80, "  publishNotReadyAddresses: true\n"))
    assert not pod_is_ready(kubectl, pod)
    assert eventually(lambda: connect_by_name(cluster, exec_pod, fqdn, 80) == pod, POLL, "unready endpoint")
    lifecycle.delete(cluster.cluster_id, [pod], hold=True)  # scaling the deployment to zero
    kubectl("patch", "service", name, "-p", '{"spec":{"publishNotReadyAddresses":false}}')
    assert eventually(lambda: connect_by_name(cluster, exec_pod, fqdn, 80) != pod, POLL, "unreachable")
    kubectl("patch", "service", name, "-p", '{"spec":{"publishNotReadyAddresses":true}}')
    assert eventually(lambda: connect_by_name(cluster, exec_pod, fqdn, 80) == pod, POLL, "terminating pod reachable")
    lifecycle.delete(cluster.cluster_id, [pod])  # "Remove pods immediately"
