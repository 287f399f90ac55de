"""`netkit lab cluster up --mode ipvs` on a kernel with IPVS (inside the test VM): a 2-node cluster,
`netkit run --mode ipvs` on both nodes as `deploy/` runs it, a Service applied with kubectl, a pod on
node-2 reaching the pods of both nodes by ClusterIP and by DNS name, the NodePort from outside on
both nodes, and `down` leaving nothing. One test (a cluster takes a while to start under TCG).

The VM's /etc is the host's, read-only: pods' resolv.conf files go to /etc/netns/<netns>/, so the
fixture mounts a tmpfs there (the VM's own mount, gone when it powers off)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netkit.lab.cluster import build, lifecycle, state
from netkit.lab.cluster.state import Record
from tests.conftest import ETC_NETNS
from tests.lab_cluster.conftest import Kubectl, answered_by, eventually, fresh, hit, in_pod

WEB = """apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http, nodePort: 30080}
"""


@pytest.fixture(scope="module")
def cluster(writable_etc_netns: None) -> Iterator[Record]:
    for tool in ("ip", "ipvsadm", "ipset", "iptables-restore", "kubectl"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    started = time.monotonic()
    record = lifecycle.up(2, "ipvs", 1, timeout=900, dns_pods=1)  # 1 DNS pod: each process costs ~40 s of TCG CPU
    print(f"2-node ipvs cluster up in {time.monotonic() - started:.1f} s")
    try:
        yield record
    finally:
        lifecycle.down(record.cluster_id)


def left_of(cid: str) -> dict[str, object]:
    return {"namespaces": build.leftovers(cid), "processes": lifecycle.processes(str(state.cluster_dir(cid))),
            "record": state.cluster_dir(cid).exists(),
            "etc": sorted(p.name for p in ETC_NETNS.glob(f"{state.NETNS_PREFIX}{cid}-*"))}


def test_ipvs_cluster_carries_clusterip_dns_and_nodeport_and_down_leaves_nothing(cluster: Record,
                                                                                tmp_path: Path) -> None:
    c = fresh(cluster).cluster
    client = next(p.name for p in c.pods_on("node-2") if p.deploy == "web")
    kubectl = Kubectl(cluster, tmp_path)
    kubectl.apply(WEB)
    ip = kubectl("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}").strip()
    web = {p.name for p in c.pods_of("web")}
    assert {p.node for p in c.pods_of("web")} == {"node-1", "node-2"}
    # ClusterIP from a pod on node-2: IPVS rr sends it to the pod on node-1 as well as its own node's
    eventually(lambda: hit(cluster, client, ip, 80).answered, timeout=30, what="the ClusterIP to answer")
    assert answered_by(cluster, client, ip, 80, count=10) == web
    ipvs = subprocess.run(["ip", "netns", "exec", c.node("node-2").netns, "ipvsadm", "-Ln"], capture_output=True,
                          text=True, check=True).stdout
    assert f"TCP  {ip}:80 rr" in ipvs, ipvs
    # the DNS name, through the pod's resolv.conf, kube-dns and IPVS again (10.96.0.10 is a virtual server)
    resolved = eventually(lambda: in_pod(cluster, client, ["getent", "hosts", "web"], timeout=30).stdout,
                          timeout=30, what="getent hosts web")
    assert resolved.split() == [ip, "web.default.svc.cluster.local"]
    code = ("import socket; s = socket.create_connection(('web', 80), timeout=5); "
            "print(s.recv(100).decode().split()[0])")
    replies = {in_pod(cluster, client, [sys.executable, "-c", code], timeout=60).stdout.strip() for _ in range(4)}
    assert replies == web, replies
    # the NodePort from outside, on both nodes (IPVS on the node IP, masqueraded to the pods)
    for node in c.nodes:
        assert answered_by(cluster, "outside", str(node.ip), 30080, count=6) == web, node.name
    cid = cluster.cluster_id
    lifecycle.down(cid)
    assert left_of(cid) == {"namespaces": [], "processes": [], "record": False, "etc": []}
