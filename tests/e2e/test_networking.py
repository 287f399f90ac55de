"""[sig-network] Networking (test/e2e/network/networking.go), translated one to one."""

from __future__ import annotations

import pytest

from netkit.lab.cluster.state import Record
from tests.lab_cluster.conftest import fresh

from .conftest import http_get

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
