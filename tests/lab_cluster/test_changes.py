"""Changes under traffic: a rolling scale with zero failed connections, a node drained, a node's
daemon killed and restarted by the control plane (rules kept meanwhile, then following the API)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from netkit.lab.cluster import lifecycle, state
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome, Reply

from .conftest import Kubectl, answered_by, eventually, fresh, hit

pytestmark = pytest.mark.netns

WEB = """apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  clusterIP: {ip}
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"""


class Traffic:
    """Sequential connections from a pod to a Service on a background thread, every reply kept.
    Each has 3 s, so a SYN lost once (sent again after 1 s) does not count as a failure; a SYN DNATed
    to a pod that is gone is sent again through the same conntrack entry and still fails."""

    def __init__(self, record: Record, where: str, dst: str, port: int) -> None:
        self.replies: list[Reply] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(record, where, dst, port), daemon=True)

    def run(self, record: Record, where: str, dst: str, port: int) -> None:
        while not self.stop.is_set():
            self.replies.append(hit(record, where, dst, port, timeout=3.0))

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    @property
    def failed(self) -> list[Reply]:
        return [r for r in self.replies if r.outcome is not Outcome.ANSWERED]


@pytest.fixture
def web(cluster: Record, kubectl: Kubectl) -> Iterator[str]:
    """A ClusterIP Service over the web pods, from a fresh address per test."""
    n = int.from_bytes(os.urandom(1), "big") % 200 + 20
    ip = f"10.96.1.{n}"
    kubectl.apply(WEB.format(name=f"web{n}", ip=ip))
    eventually(lambda: hit(cluster, "node-1", ip, 80).answered, what="the Service to answer")
    yield ip
    kubectl("delete", "service", f"web{n}")


def client_pod(record: Record, node: str) -> str:
    """A pod no test removes: the DNS pod's namespace is a fine client too."""
    return next(p.name for p in fresh(record).cluster.pods_on(node) if p.deploy == "coredns")


def test_a_rolling_scale_fails_no_connection(cluster: Record, web: str) -> None:
    cid = cluster.cluster_id
    with Traffic(cluster, client_pod(cluster, "node-1"), web, 80) as traffic:
        for replicas in (6, 2, 5, 1, 3):
            lifecycle.scale(cid, "web", replicas)
            pods = {p.name for p in fresh(cluster).cluster.pods_of("web")}
            assert len(pods) == replicas
            eventually(lambda p=pods: answered_by(cluster, "node-1", web, 80, count=20) <= p,  # type: ignore[misc]
                       what=f"only {sorted(pods)} answering")
    assert len(traffic.replies) > 50
    assert traffic.failed == []
    assert len({r.backend for r in traffic.replies}) > 3  # it did go round old and new pods


def test_a_drained_node_keeps_no_pods_and_the_service_keeps_answering(cluster: Record, web: str,
                                                                      kubectl: Kubectl) -> None:
    cid = cluster.cluster_id
    with Traffic(cluster, client_pod(cluster, "node-1"), web, 80) as traffic:
        changed = lifecycle.drain(cid, "node-3")
    c = fresh(cluster).cluster
    assert c.pods_on("node-3") == () and {p.node for p in changed.removed} == {"node-3"}
    assert all(p.node != "node-3" for p in changed.added)
    assert traffic.failed == []
    web_pods = {p.name for p in c.pods_of("web")}
    assert answered_by(cluster, "node-2", web, 80) <= web_pods
    node = json.loads(kubectl("get", "node", "node-3", "-o", "json"))
    assert node["spec"]["unschedulable"] is True
    lifecycle.scale(cid, "web", len(c.pods_of("web")) + 2)
    assert fresh(cluster).cluster.pods_on("node-3") == ()


def test_a_killed_daemon_is_restarted_and_rules_stay_meanwhile(cluster: Record, web: str, kubectl: Kubectl) -> None:
    status = state.cluster_dir(cluster.cluster_id) / "status.json"

    def daemon(node: str) -> dict[str, int]:
        info: dict[str, int] = json.loads(status.read_text())["daemons"][node]
        return info

    before = daemon("node-2")
    os.kill(before["pid"], signal.SIGKILL)
    assert hit(cluster, "node-2", web, 80).answered  # the rules outlive the daemon
    after = eventually(lambda: daemon("node-2")["pid"] not in (0, before["pid"]) and daemon("node-2"),
                       what="the daemon restarted")
    assert after["restarts"] == before["restarts"] + 1
    # the new daemon follows the API: a Service created now answers on node-2
    kubectl.apply(WEB.format(name="after-restart", ip="10.96.2.2"))
    assert eventually(lambda: hit(cluster, "node-2", "10.96.2.2", 80).answered, what="the new Service on node-2")
    kubectl("delete", "service", "after-restart")
    assert eventually(lambda: hit(cluster, "node-2", "10.96.2.2", 80, timeout=0.5).outcome is not Outcome.ANSWERED,
                      what="the deleted Service to stop answering")
