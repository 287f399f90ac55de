"""[sig-network] [Feature:IPv6DualStack] (test/e2e/network/dual_stack.go), translated one to one,
run on the dual-stack clusters only (iptables and nftables mode, 3 nodes, IPv4 primary).

The "Granular Checks: Services Secondary IP Family" tests use upstream's NetworkingTestConfig with
EnableDualStack (`netconfig.py`: netserver pods answering as agnhost netexec, the NodePort and
session-affinity Services RequireDualStack), dialled on their secondary ClusterIP and a node's
secondary address. `DialFromContainer` succeeds when the answers are exactly the endpoints'
hostnames (netexec's `/hostname`, UDP `hostname`), or the echoed message. One configuration serves
the tests that only dial (upstream builds one per test: the same pods and Services, built once here
to keep the suite's time); the two that delete a netserver pod get their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from ipaddress import ip_address
from typing import Any

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from tests.lab_cluster.conftest import Kubectl, eventually, fresh, hit

from .conftest import DUAL_STACK_MODES, POLL, get, pods_of, start_serve_hostname
from .netconfig import (
    HTTP_PORT,
    UDP_PORT,
    Networking,
    affinity_check,
    dial_echo,
    networking_config,
    service_checks,
    update_endpoints,
)

DESCRIBE = "[Feature:IPv6DualStack]"  # the upstream SIGDescribe these tests belong to

pytestmark = [pytest.mark.netns,
              pytest.mark.parametrize("mode", DUAL_STACK_MODES, indirect=True, scope="session")]


def is_v4(ip: str) -> bool:
    return ip_address(ip).version == 4


@pytest.mark.upstream("should have ipv4 and ipv6 internal node ip")
def test_internal_node_ips(kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should have ipv4 and ipv6 internal node ip: every node has two
    InternalIP addresses, of different families."""
    for node in json.loads(kubectl("get", "nodes", "-o", "json"))["items"]:
        internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert len(internal) == 2 and is_v4(internal[0]) != is_v4(internal[1]), (node["metadata"]["name"], internal)


@pytest.mark.upstream("should create pod, add ipv6 and ipv4 ip to pod ips")
def test_pod_ips(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create pod, add ipv6 and ipv4 ip to pod ips: a new pod has a
    podIP, two podIPs of different families, the first equal to podIP; then it is deleted."""
    (pod,) = start_serve_hostname(cluster, "pod-dualstack-ips", 1)
    status = get(kubectl, "pod", pod)["status"]
    ips = [p["ip"] for p in status["podIPs"]]
    assert status["podIP"] and len(ips) == 2 and status["podIP"] == ips[0] and is_v4(ips[0]) != is_v4(ips[1])
    lifecycle.scale(cluster.cluster_id, "pod-dualstack-ips", 0)
    assert not pods_of(cluster, "pod-dualstack-ips")


@pytest.mark.upstream("should be able to reach pod on ipv4 and ipv6 ip")
def test_reach_pod_on_both_families(cluster: Record) -> None:
    """[Feature:IPv6DualStack] should be able to reach pod on ipv4 and ipv6 ip: a server and a
    client deployment with one pod per node; every client reaches every server on both of its
    addresses (assertNetworkConnectivity). Lab gap: the servers' port is `http` (8080), where
    agnhost's test-webserver serves 80."""
    nodes = len(fresh(cluster).cluster.nodes)
    servers = start_serve_hostname(cluster, "dualstack-server", nodes)
    clients = start_serve_hostname(cluster, "dualstack-client", nodes)
    c = fresh(cluster).cluster
    assert {p.node for p in c.pods_of("dualstack-server")} == {n.name for n in c.nodes}  # the anti-affinity
    targets = [(p.name, str(ip)) for p in c.pods_of("dualstack-server") for ip in c.pod_ips(p)]
    assert len(targets) == 2 * len(servers)
    for client in sorted(clients):
        for server, ip in targets:
            assert hit(cluster, client, ip, 8080).backend == server, f"{client} → {server} at {ip}"


def service_manifest(name: str, policy: str | None, families: list[str] | None) -> str:
    """createService: a NodePort Service over the pods labelled for it, ports 53/TCP and 53/UDP."""
    lines = [f"  ipFamilyPolicy: {policy}"] if policy else []
    lines += [f"  ipFamilies: [{', '.join(families)}]"] if families else []
    extra = "\n".join(lines) + ("\n" if lines else "")
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: NodePort
  selector: {{app: {name}}}
{extra}  ports: [{{name: tcp-port, port: 53, protocol: TCP}}, {{name: udp-port, port: 53, protocol: UDP}}]
"""


def slices_of(kubectl: Kubectl, service: str) -> list[dict[str, Any]]:
    out = kubectl("get", "endpointslices", "-l", f"kubernetes.io/service-name={service}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def endpoints_of_family(kubectl: Kubectl, service: str, family: str) -> set[str] | None:
    """validateEndpointsBelongToIPFamily, over EndpointSlices (the lab writes no Endpoints objects):
    the addresses of the service's `family` slice, None while any address is not of its slice's type."""
    found: set[str] = set()
    for s in slices_of(kubectl, service):
        addresses = [a for e in s.get("endpoints") or [] for a in e["addresses"]]
        if any(is_v4(a) != (s["addressType"] == "IPv4") for a in addresses):
            return None
        if s["addressType"] == family:
            found |= set(addresses)
    return found


def create_and_validate(cluster: Record, kubectl: Kubectl, name: str, policy: str | None,
                        families: list[str] | None, expected_policy: str, expected: list[str]) -> None:
    """The shared steps of the service tests: two pods, the Service, validateNumOfServicePorts,
    validateServiceAndClusterIPFamily, and the endpoints of the primary family."""
    start_serve_hostname(cluster, name, 2)
    kubectl.apply(service_manifest(name, policy, families))
    spec = get(kubectl, "service", name)["spec"]
    assert len(spec["ports"]) == 2
    assert spec["ipFamilies"] == expected and spec["ipFamilyPolicy"] == expected_policy
    assert len(spec["clusterIPs"]) == len(expected)
    assert all(is_v4(ip) == (fam == "IPv4") for ip, fam in zip(spec["clusterIPs"], expected, strict=True))
    pod_ips = {str(ip) for p in fresh(cluster).cluster.pods_of(name) for ip in fresh(cluster).cluster.pod_ips(p)}
    want = {ip for ip in pod_ips if is_v4(ip) == (expected[0] == "IPv4")}
    assert eventually(lambda: endpoints_of_family(kubectl, name, expected[0]) == want, POLL, "the endpoints")


@pytest.mark.upstream("should create a single stack service with cluster ip from primary service range")
def test_single_stack_service_from_primary_range(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create a single stack service with cluster ip from primary
    service range: no policy, no families → SingleStack, [IPv4] (the primary), one IPv4 ClusterIP,
    endpoints of IPv4."""
    create_and_validate(cluster, kubectl, "defaultclusterip", None, None, "SingleStack", ["IPv4"])


@pytest.mark.upstream("should create service with ipv4 cluster ip")
def test_service_with_ipv4_cluster_ip(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create service with ipv4 cluster ip: ipFamilies [IPv4] →
    SingleStack, one IPv4 ClusterIP, endpoints of IPv4."""
    create_and_validate(cluster, kubectl, "ipv4clusterip", None, ["IPv4"], "SingleStack", ["IPv4"])


@pytest.mark.upstream("should create service with ipv6 cluster ip")
def test_service_with_ipv6_cluster_ip(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create service with ipv6 cluster ip: ipFamilies [IPv6] →
    SingleStack, one IPv6 ClusterIP, endpoints of IPv6."""
    create_and_validate(cluster, kubectl, "ipv6clusterip", None, ["IPv6"], "SingleStack", ["IPv6"])


@pytest.mark.upstream("should create service with ipv4,v6 cluster ip")
def test_service_with_ipv4_ipv6_cluster_ips(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create service with ipv4,v6 cluster ip: RequireDualStack,
    [IPv4, IPv6] → an IPv4 and an IPv6 ClusterIP in that order, endpoints of IPv4."""
    create_and_validate(cluster, kubectl, "ipv4ipv6clusterip", "RequireDualStack", ["IPv4", "IPv6"],
                        "RequireDualStack", ["IPv4", "IPv6"])


@pytest.mark.upstream("should create service with ipv6,v4 cluster ip")
def test_service_with_ipv6_ipv4_cluster_ips(cluster: Record, kubectl: Kubectl) -> None:
    """[Feature:IPv6DualStack] should create service with ipv6,v4 cluster ip: RequireDualStack,
    [IPv6, IPv4] → an IPv6 and an IPv4 ClusterIP in that order, endpoints of IPv6."""
    create_and_validate(cluster, kubectl, "ipv6ipv4clusterip", "RequireDualStack", ["IPv6", "IPv4"],
                        "RequireDualStack", ["IPv6", "IPv4"])


# --- Granular Checks: Services Secondary IP Family -------------------------------------------------

@pytest.fixture(scope="session")
def networking(cluster: Record, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Networking]:
    yield networking_config(cluster, Kubectl(cluster, tmp_path_factory.mktemp("kubectl")), "netserver", dual=True)


def secondary_checks(record: Record, where: str, proto: str, net: Networking) -> None:
    service_checks(record, where, proto, net, family=1)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: http")
def test_pod_service_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should
    function for pod-Service: http: from the test pod to the secondary ClusterIP:80 and to a node's
    secondary address:NodePort, every netserver answers."""
    secondary_checks(cluster, exec_pod, "http", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: udp")
def test_pod_service_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for pod-Service: udp: the same
    over UDP (port 90 and its node port)."""
    secondary_checks(cluster, exec_pod, "udp", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should function for node-Service: http")
def test_node_service_http(cluster: Record, networking: Networking) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for node-Service: http: from a
    node (the host network) to the secondary ClusterIP and the secondary node address:NodePort."""
    secondary_checks(cluster, "node-1", "http", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] should function for node-Service: udp")
def test_node_service_udp(cluster: Record, networking: Networking) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for node-Service: udp."""
    secondary_checks(cluster, "node-1", "udp", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should function for endpoint-Service: http")
def test_endpoint_service_http(cluster: Record, networking: Networking) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for endpoint-Service: http: from
    an endpoint pod itself (reaching itself through the Service: hairpin) to both targets."""
    secondary_checks(cluster, sorted(networking.endpoints)[0], "http", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should function for endpoint-Service: udp")
def test_endpoint_service_udp(cluster: Record, networking: Networking) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for endpoint-Service: udp."""
    secondary_checks(cluster, sorted(networking.endpoints)[0], "udp", networking)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] should update endpoints: http")
def test_update_endpoints_http(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should update endpoints: http: after a netserver
    pod is deleted, only the others answer on the secondary ClusterIP."""
    update_endpoints(cluster, kubectl, exec_pod, "http", "netserver-update-http", family=1)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] should update endpoints: udp")
def test_update_endpoints_udp(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should update endpoints: udp."""
    update_endpoints(cluster, kubectl, exec_pod, "udp", "netserver-update-udp", family=1)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should function for client IP based session affinity: http [LinuxOnly]")
def test_session_affinity_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for client IP based session
    affinity: http [LinuxOnly]: the session-affinity Service's secondary ClusterIP sends every
    connection of the test pod to one endpoint."""
    affinity_check(cluster, exec_pod, "http", networking, family=1)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should function for client IP based session affinity: udp [LinuxOnly]")
def test_session_affinity_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should function for client IP based session
    affinity: udp [LinuxOnly]."""
    affinity_check(cluster, exec_pod, "udp", networking, family=1)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should be able to handle large requests: http")
def test_large_requests_http(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should be able to handle large requests: http:
    netexec's `/echo?msg=` through the secondary ClusterIP:80 returns a 2000-byte message."""
    dial_echo(cluster, exec_pod, "http", networking.cluster_ips[1], HTTP_PORT, "42" * 1000)


@pytest.mark.upstream("Granular Checks: Services Secondary IP Family [LinuxOnly] "
                      "should be able to handle large requests: udp")
def test_large_requests_udp(cluster: Record, networking: Networking, exec_pod: str) -> None:
    """[Feature:IPv6DualStack] Granular Checks: ... should be able to handle large requests: udp:
    netexec's UDP `echo` through the secondary ClusterIP:90 returns a 2000-byte message."""
    dial_echo(cluster, exec_pod, "udp", networking.cluster_ips[1], UDP_PORT, "n" + "o" * 1999)
