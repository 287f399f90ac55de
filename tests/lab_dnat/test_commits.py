"""Table commits while traffic flows: a Service flips between no endpoints and one, 300 other
Services loaded, new TCP connections the whole time — none may be stuck (a SYN that met the new
filter table but the old nat table left untranslated, and its retries stuck to that conntrack entry).

Each connection must be answered by the endpoint or refused at once; a timeout is a stuck
connection. In every mode (the iptables modes commit nat and filter separately; see
netkit/rules/iptables/commits.py).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.lab_dnat.dataplane import Dataplane

pytestmark = pytest.mark.netns

OTHERS = 300
FLIPS = 8  # each way
SENDERS = 3
FLIP_IP = "10.96.5.1"


def other_services(count: int) -> str:
    docs = []
    for i in range(count):
        docs.append(f"""apiVersion: v1
kind: Service
metadata: {{name: other-{i}, namespace: load}}
spec:
  clusterIP: 10.96.{10 + i // 250}.{i % 250 + 1}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: other-{i}-1, namespace: load, labels: {{kubernetes.io/service-name: other-{i}}}}}
addressType: IPv4
ports: [{{name: http, port: 8080}}]
endpoints:
- {{addresses: [10.244.1.12], nodeName: node-a}}
""")
    return "---\n".join(docs)


def flip_service(with_endpoint: bool) -> str:
    slice_ = """---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: flip-1, namespace: edge, labels: {kubernetes.io/service-name: flip}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.244.1.11], nodeName: node-a}
"""
    return f"""apiVersion: v1
kind: Service
metadata: {{name: flip, namespace: edge}}
spec:
  clusterIP: {FLIP_IP}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
{slice_ if with_endpoint else ""}"""


def test_flipping_endpoints_never_leaves_a_connection_stuck(dataplane: Dataplane, tmp_path: Path) -> None:
    others, flip = tmp_path / "others.yaml", tmp_path / "flip.yaml"
    others.write_text(other_services(OTHERS))
    flip.write_text(flip_service(False))
    dataplane.apply(others, flip)
    outcomes: Counter[str] = Counter()
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            reply = dataplane.lab.connect("client-a", FLIP_IP, 80, timeout=1.5)
            outcomes[reply.outcome.name] += 1

    senders = [threading.Thread(target=send) for _ in range(SENDERS)]
    for t in senders:
        t.start()
    try:
        for i in range(2 * FLIPS):
            flip.write_text(flip_service(i % 2 == 0))
            dataplane.apply(others, flip)
    finally:
        stop.set()
        for t in senders:
            t.join()
    assert outcomes["TIMEOUT"] == 0, f"{outcomes['TIMEOUT']} stuck connections: {dict(outcomes)}"
    assert outcomes["ANSWERED"] > 0 and outcomes["REFUSED"] > 0, dict(outcomes)
    assert set(outcomes) <= {"ANSWERED", "REFUSED"}, dict(outcomes)
