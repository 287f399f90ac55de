"""Dual-stack and IPv6-only clusters (`up --ip-family dual|ipv6`): a RequireDualStack Service carried
over both families — each ClusterIP, each node address of its NodePort, and by DNS name through the
pod's resolver (A and AAAA) — kube-dns on both families, and an IPv6-only cluster carrying a Service
and refusing what kube-apiserver refuses there."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome
from tests.conftest import need_root_and
from tests.lab_cluster.conftest import UP_TIMEOUT, Kubectl, eventually, fresh, hit, in_pod, need_kubectl

pytestmark = pytest.mark.netns

SERVICE = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  type: NodePort
  ipFamilyPolicy: {policy}
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: http}}]
"""

# connect by name with only one family's addresses, as a program asking getaddrinfo for AF_INET(6) does
CONNECT = """import socket, sys
family = socket.AF_INET6 if sys.argv[2] == "6" else socket.AF_INET
addr = socket.getaddrinfo(sys.argv[1], 80, family, socket.SOCK_STREAM)[0][4]
with socket.create_connection(addr[:2], timeout=3) as s:
    print(s.recv(200).decode().split()[0], addr[0])
"""


def up(ip_family: str) -> Iterator[Record]:
    need_root_and("ip", "iptables-restore")
    record = lifecycle.up(2, "iptables", 1, timeout=float(UP_TIMEOUT), dns_pods=1, ip_family=ip_family)
    try:
        yield record
    finally:
        lifecycle.down(record.cluster_id)


@pytest.fixture(scope="module")
def dual() -> Iterator[Record]:
    yield from up("dual")


@pytest.fixture(scope="module")
def ipv6() -> Iterator[Record]:
    yield from up("ipv6")


def kubectl_for(record: Record, tmp_path: Path) -> Kubectl:
    need_kubectl()
    return Kubectl(record, tmp_path)


def spec_of(kubectl: Kubectl, name: str, namespace: str = "default") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(kubectl("get", "service", name, "-n", namespace, "-o", "json"))["spec"]
    return doc


def answered_by(record: Record, where: str, dst: str, port: int, count: int = 20) -> set[str | None]:
    """The pods answering `count` connections (None: one was not answered)."""
    replies = [hit(record, where, dst, port) for _ in range(count)]
    return {r.backend if r.outcome is Outcome.ANSWERED else None for r in replies}


def by_name(record: Record, pod: str, name: str, family: str) -> tuple[str, str]:
    """(answering pod, address connected to), resolved by the pod's resolver to one family only."""
    def attempt() -> tuple[str, str] | None:
        proc = in_pod(record, pod, [sys.executable, "-c", CONNECT, name, family])
        return tuple(proc.stdout.split()) if proc.returncode == 0 else None
    result: tuple[str, str] = eventually(attempt, what=f"{name} over IPv{family} from {pod}")
    return result


def test_a_require_dual_stack_service_is_carried_over_both_families(dual: Record, tmp_path: Path) -> None:
    cluster, kubectl = dual, kubectl_for(dual, tmp_path)
    kubectl.apply(SERVICE.format(name="both", policy="RequireDualStack"))
    spec = spec_of(kubectl, "both")
    assert spec["ipFamilies"] == ["IPv4", "IPv6"]
    v4, v6 = spec["clusterIPs"]
    assert ":" not in v4 and v6.startswith("fd00:96::")
    node_port = spec["ports"][0]["nodePort"]
    c = fresh(cluster).cluster
    web = {p.name for p in c.pods_of("web")}
    client = c.pods_of("web")[-1].name  # on node-2: the other pod is across nodes
    for ip in (v4, v6):
        assert eventually(lambda ip=ip: answered_by(cluster, client, ip, 80, count=20) == web,
                          what=f"both pods over {ip}")
    for node in c.nodes:
        for ip in c.node_ips(node):
            reply = eventually(lambda ip=ip: hit(cluster, "outside", str(ip), node_port).answered,
                               what=f"NodePort on {ip}")
            assert reply
    for family, address in (("4", v4), ("6", v6)):
        backend, connected = by_name(cluster, client, "both", family)
        assert backend in web and connected == address
    traced = lab_cluster(cluster, "trace", client, "--to", f"[{v6}]:80")  # from the pod's IPv6 address
    assert traced.returncode == 0 and traced.stdout.startswith(f"{c.pod(client).ip6} → [{v6}]:80/tcp"), traced
    assert all(f"[{p.ip6}]:8080 50.0%" in traced.stdout for p in c.pods_of("web")), traced.stdout
    (row,) = json.loads(lab_cluster(cluster, "status", "-o", "json").stdout)
    assert row["ip_family"] == "dual" and row["nodes"][0]["ips"] == ["192.0.2.11", "2001:db8:2::11"]
    assert next(s for s in row["services"] if s["name"] == "default/both")["clusterIPs"] == [v4, v6]


def answered(dig_short: str) -> str:
    """`dig +short`'s answer, or "" while it reports an error instead (";; …" lines)."""
    lines = [line for line in dig_short.strip().splitlines() if line and not line.startswith(";;")]
    return "\n".join(lines)


def lab_cluster(record: Record, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", *args, "-c", record.cluster_id],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("family", ["dual", "ipv6"])
def test_kube_dns_answers_on_every_family_of_the_cluster(family: str, request: pytest.FixtureRequest,
                                                         tmp_path: Path) -> None:
    cluster: Record = request.getfixturevalue(family)
    kubectl = kubectl_for(cluster, tmp_path)
    c = fresh(cluster).cluster
    spec = spec_of(kubectl, "kube-dns", "kube-system")
    assert spec["clusterIPs"] == [str(ip) for ip in c.dns_ips]
    assert spec["ipFamilyPolicy"] == ("PreferDualStack" if c.ip_family == "dual" else "SingleStack")
    client = c.pods_of("web")[-1].name
    for dns in c.dns_ips:  # each address of kube-dns answers the cluster's names
        rtype = "AAAA" if c.ip_family == "ipv6" else "A"  # default/kubernetes: the primary family only
        argv = ["dig", "+short", "+time=2", f"@{dns}", "kubernetes.default.svc.cluster.local", rtype]
        # until it answers: dig prints ";; communications error …" on stdout while the node's rules
        # for kube-dns's address are not written yet (a busy machine), which is not an answer
        answer = eventually(lambda argv=argv: answered(in_pod(cluster, client, argv).stdout),
                            what=f"kube-dns on {dns}")
        assert answer == str(c.service_cidrs[0].network_address + 1)


def test_an_ipv6_cluster_carries_a_service_and_refuses_require_dual_stack(ipv6: Record, tmp_path: Path) -> None:
    cluster, kubectl = ipv6, kubectl_for(ipv6, tmp_path)
    manifest = tmp_path / "refused.yaml"
    manifest.write_text(SERVICE.format(name="refused", policy="RequireDualStack"))
    proc = subprocess.run([*kubectl.base, "apply", "-f", str(manifest)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert ('The Service "refused" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": '
            "this cluster is not configured for dual-stack services") in proc.stderr
    kubectl.apply(SERVICE.format(name="six", policy="PreferDualStack"))
    spec = spec_of(kubectl, "six")
    assert spec["ipFamilies"] == ["IPv6"] and spec["ipFamilyPolicy"] == "PreferDualStack"
    (v6,) = spec["clusterIPs"]
    c = fresh(cluster).cluster
    web = {p.name for p in c.pods_of("web")}
    client = c.pods_of("web")[-1].name
    assert eventually(lambda: answered_by(cluster, client, v6, 80, count=20) == web, what="both pods over IPv6")
    backend, connected = by_name(cluster, client, "six", "6")
    assert backend in web and connected == v6
    node_port = spec["ports"][0]["nodePort"]
    for node in c.nodes:
        (ip,) = c.node_ips(node)
        assert eventually(lambda ip=ip: hit(cluster, "outside", str(ip), node_port).answered,
                          what=f"NodePort on {ip}")
    assert in_pod(cluster, client, ["getent", "ahostsv4", "six"]).stdout == ""  # no A record for it
