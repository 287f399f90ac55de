"""[sig-network] Networking (test/e2e/network/networking.go), translated one to one.

The "Granular Checks: Services" use upstream's NetworkingTestConfig (`netconfig.py`: netserver pods
answering as agnhost netexec, a NodePort and a ClientIP Service over them), dialled on the ClusterIP
and the first node's address; in the dual-stack modes on the primary family, as upstream's
single-stack config there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from netkit.lab.cluster.state import Record
from tests.lab_cluster.conftest import Kubectl, fresh

from .conftest import http_get
from .netconfig import (
    HTTP_PORT,
    UDP_PORT,
    Networking,
    affinity_check,
    dial_echo,
    networking_config,
    service_checks,
    update_endpoints,
    update_node_port,
)

pytestmark = pytest.mark.netns

DESCRIBE = "Networking"  # the upstream SIGDescribe these tests belong to

def self_url(record: Record, node: str, port: int, path: str) -> str:
    """GetSelfURL: `curl -i http://localhost:PORT/PATH` from a host-network pod on the node — here
    the node's own namespace, where `netkit run` listens."""
    return http_get(record, node, f"http://localhost:{port}{path}")


@pytest.mark.upstream("should check kube-proxy urls")
def test_kube_proxy_urls(cluster: Record, proxy_mode: str) -> None:
    """Networking should check kube-proxy urls: on a node, the proxy's healthz port (10256) answers
    /healthz with 200 OK and a body with lastUpdated, and its status port (10249) answers
    /proxyMode with 200 — and, as kube-proxy's does, with the mode."""
    node = fresh(cluster).cluster.nodes[0].name
    healthz = self_url(cluster, node, 10256, "/healthz")
    assert healthz.startswith("200 OK") and "lastUpdated" in healthz, healthz
    answer = self_url(cluster, node, 10249, "/proxyMode")
    assert answer.split("\n")[:2] == ["200 OK", proxy_mode], answer


# --- Granular Checks: Services ----------------------------------------------------------------------

@pytest.fixture(scope="session")
def networking(cluster: Record, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Networking]:
    """NewNetworkingTestConfig(f, false, false), built once for the tests that only dial (upstream
    builds one per test); its Services prefixed `nettest-` (one namespace: the dual-stack tests'
    configuration has the upstream names)."""
    yield networking_config(cluster, Kubectl(cluster, tmp_path_factory.mktemp("kubectl")), "nettest", "nettest-")


@pytest.mark.upstream("Granular Checks: Services should function for pod-Service: http")
def test_pod_service_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should function for pod-Service: http: from the test
    pod to the ClusterIP:80 and to the node's address at the node port, every netserver answers."""
    service_checks(cluster, exec_pod, "http", networking)


@pytest.mark.upstream("Granular Checks: Services should function for pod-Service: udp")
def test_pod_service_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should function for pod-Service: udp: the same over
    UDP (port 90 and its node port)."""
    service_checks(cluster, exec_pod, "udp", networking)


@pytest.mark.upstream("Granular Checks: Services should function for node-Service: http")
def test_node_service_http(cluster: Record, networking: Networking) -> None:
    """Networking Granular Checks: Services should function for node-Service: http: from a node
    (the host network)."""
    service_checks(cluster, fresh(cluster).cluster.nodes[0].name, "http", networking)


@pytest.mark.upstream("Granular Checks: Services should function for node-Service: udp")
def test_node_service_udp(cluster: Record, networking: Networking) -> None:
    """Networking Granular Checks: Services should function for node-Service: udp."""
    service_checks(cluster, fresh(cluster).cluster.nodes[0].name, "udp", networking)


@pytest.mark.upstream("Granular Checks: Services should function for endpoint-Service: http")
def test_endpoint_service_http(cluster: Record, networking: Networking) -> None:
    """Networking Granular Checks: Services should function for endpoint-Service: http: from an
    endpoint pod itself (reaching itself through the Service: hairpin)."""
    service_checks(cluster, sorted(networking.endpoints)[0], "http", networking)


@pytest.mark.upstream("Granular Checks: Services should function for endpoint-Service: udp")
def test_endpoint_service_udp(cluster: Record, networking: Networking) -> None:
    """Networking Granular Checks: Services should function for endpoint-Service: udp."""
    service_checks(cluster, sorted(networking.endpoints)[0], "udp", networking)


@pytest.mark.upstream("Granular Checks: Services should update endpoints: http")
def test_update_endpoints_http(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Networking Granular Checks: Services should update endpoints: http: after a netserver pod is
    deleted, only the others answer on the ClusterIP."""
    update_endpoints(cluster, kubectl, exec_pod, "http", "nettest-update-http")


@pytest.mark.upstream("Granular Checks: Services should update endpoints: udp")
def test_update_endpoints_udp(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """Networking Granular Checks: Services should update endpoints: udp."""
    update_endpoints(cluster, kubectl, exec_pod, "udp", "nettest-update-udp")


@pytest.mark.upstream("Granular Checks: Services should update nodePort: http [Slow]")
def test_update_node_port_http(cluster: Record, kubectl: Kubectl) -> None:
    """Networking Granular Checks: Services should update nodePort: http [Slow]: from a node, every
    netserver answers at the node's address and the node port; after the NodePort Service is
    deleted, nothing answers there."""
    update_node_port(cluster, kubectl, "http", "nettest-nodeport-http")


@pytest.mark.upstream("Granular Checks: Services should update nodePort: udp [Slow]")
def test_update_node_port_udp(cluster: Record, kubectl: Kubectl) -> None:
    """Networking Granular Checks: Services should update nodePort: udp [Slow]."""
    update_node_port(cluster, kubectl, "udp", "nettest-nodeport-udp")


@pytest.mark.upstream("Granular Checks: Services "
                      "should function for client IP based session affinity: http [LinuxOnly]")
def test_session_affinity_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should function for client IP based session affinity:
    http [LinuxOnly]: every connection of the test pod to the session-affinity Service reaches one pod."""
    affinity_check(cluster, exec_pod, "http", networking)


@pytest.mark.upstream("Granular Checks: Services "
                      "should function for client IP based session affinity: udp [LinuxOnly]")
def test_session_affinity_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should function for client IP based session affinity:
    udp [LinuxOnly]."""
    affinity_check(cluster, exec_pod, "udp", networking)


@pytest.mark.upstream("Granular Checks: Services should be able to handle large requests: http")
def test_large_requests_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should be able to handle large requests: http:
    netexec's `/echo?msg=` through the ClusterIP:80 returns a 2000-byte message."""
    dial_echo(cluster, exec_pod, "http", networking.cluster_ips[0], HTTP_PORT, "42" * 1000)


@pytest.mark.upstream("Granular Checks: Services should be able to handle large requests: udp")
def test_large_requests_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """Networking Granular Checks: Services should be able to handle large requests: udp:
    netexec's UDP `echo` through the ClusterIP:90 returns a 2000-byte message."""
    dial_echo(cluster, exec_pod, "udp", networking.cluster_ips[0], UDP_PORT, "n" + "o" * 1999)
