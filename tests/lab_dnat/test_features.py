"""Service behaviour over time and across many clients, which one packet-flow case cannot show.

- ClientIP affinity: many clients (distinct source addresses) each stick to one endpoint, and their
  choices spread as trace's probabilities say.
- An endpoint removed from its EndpointSlice: after apply, new connections never reach it (and trace
  over the live rules no longer predicts it), while a TCP connection opened before keeps talking to
  the very same pod.
"""

from __future__ import annotations

import shutil
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml

from netkit.lab import Outcome, assert_spread
from netkit.rules.tracing import endpoints
from tests.conftest import EXAMPLES
from tests.flows import POD_A, Flow
from tests.lab_dnat.dataplane import ALPHA, Dataplane, sticky

pytestmark = pytest.mark.netns

STICKY_EXTERNAL_IP = "198.51.100.10"  # examples/40-sticky-affinity.yaml
# Extra client addresses on the client's /24, clear of the lab's own (.5-.7, .100, .101).
CLIENTS = [IPv4Address("203.0.113.110") + i for i in range(90)]


def add_client_addresses(dp: Dataplane, addresses: list[IPv4Address]) -> None:
    """More source addresses on the lab's client (inside the client's namespace only)."""
    batch = "".join(f"addr add {a}/24 dev eth0\n" for a in addresses)
    dp.lab.exec("client", ["ip", "-batch", "-"], input=batch)


def test_client_ip_affinity_sticks_per_client_and_spreads_across_clients(dataplane: Dataplane) -> None:
    dataplane.apply(EXAMPLES)
    add_client_addresses(dataplane, CLIENTS)
    predicted = dataplane.predict(str(CLIENTS[0]), STICKY_EXTERNAL_IP, 80)
    assert sticky(predicted), "trace should walk the affinity rule (-m recent --set / update @aff-…)"
    odds = {dataplane.pod_at(d): p for d, p in endpoints(predicted).items()}
    assert len(odds) == 3
    first: list[str | None] = []
    for client in CLIENTS:
        replies = dataplane.lab.connect_many("client", STICKY_EXTERNAL_IP, 80, src=str(client), count=3)
        backends = {r.backend for r in replies}
        assert len(backends) == 1 and all(r.answered for r in replies), f"{client} got {backends}"
        first.append(replies[0].backend)
    # 90 clients over 3 endpoints: "all on one" (p ~ 1e-39) or "one never" (p ~ 1e-10) cannot pass
    assert_spread(first, odds, alpha=ALPHA)


def without_endpoint(tmp: Path, address: str) -> Path:
    """A copy of examples/ whose `web` EndpointSlice lacks `address`."""
    out = tmp / "examples"
    shutil.copytree(EXAMPLES, out)
    path = out / "10-web-clusterip.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        if doc["kind"] == "EndpointSlice":
            doc["endpoints"] = [e for e in doc["endpoints"] if address not in e["addresses"]]
    path.write_text(yaml.safe_dump_all(docs))
    return out


def test_removed_endpoint_gets_no_new_connections_but_an_open_one_keeps_working(
        dataplane: Dataplane, tmp_path: Path) -> None:
    lab = dataplane.lab
    dataplane.apply(EXAMPLES)
    with lab.stream("client-a", "10.96.0.10", 80) as conn:
        assert conn.greeting.answered
        gone = conn.greeting.backend
        assert gone is not None
        address = str(lab.pod(gone).ipv4)
        dataplane.apply(without_endpoint(tmp_path, address))

        remaining = {f"{p.ipv4}:8080": 0.5 for p in lab.pods if p.name in {"web-a1", "web-a2", "web-b1"} - {gone}}
        flow = Flow("clusterIP after an endpoint was removed", POD_A, "10.96.0.10:80", endpoints=remaining,
                    masquerade=False)
        dataplane.expect_kernel_agrees(flow)  # trace, 240 connections and 12 probes: never `gone`

        for _ in range(3):
            again = conn.ask()
            assert again.outcome is Outcome.ANSWERED, f"the open connection broke: {again.outcome.name}"
            assert again.backend == gone and again.source == conn.greeting.source

