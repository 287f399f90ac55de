"""End to end with real traffic: the daemon programs the lab's node A from the test API server, and
connections from a pod on node A (client-a) go through the service.

- TCP: create with kubectl → connections spread over the endpoints; scale down → only the one left;
  no endpoints → refused at once (REJECT); service deleted → no rule at all (the packet leaves by the
  node's default route and the connection times out).
- UDP: a client keeps one socket (one source port). The endpoint its flow was DNATed to is removed;
  the stale conntrack entry is deleted, so the next datagram from the same port reaches the other
  endpoint. With conntrack cleanup off (the control) the datagram still reaches the removed pod —
  which is what makes the first case meaningful (the lab's pods keep serving after removal).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from netkit.lab import Lab, Outcome, running
from netkit.netns import socket_in
from tests.conftest import need_root_and

from .conftest import eventually, run
from .e2e import running_daemon, web_service, web_slice, with_ports

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")

WEB_A1, WEB_A2, WEB_B1 = "10.244.1.11", "10.244.1.12", "10.244.2.11"
NAMES = {WEB_A1: "web-a1", WEB_A2: "web-a2", WEB_B1: "web-b1"}
UDP_KEY = "default/dns:http/udp"
# Connections that must be answered get 5 s: a SYN lost once is sent again after 1 s and after 3 s,
# and a loaded CI machine (two xdist workers, lab clusters starting) can hold the pod servers' one
# process off the CPU for a while. One of 60 connections timed out at 2 s in one CI run.
ANSWER_TIMEOUT = 5.0


@pytest.fixture
def lab() -> Iterator[Lab]:
    need_root_and("ip")
    with running() as built:
        yield built


def test_tcp_through_the_service_follows_kubectl(lab: Lab, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(lab.node_a.netns, tmp_path) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", web_service() + "---\n" + web_slice([WEB_A1, WEB_A2, WEB_B1]))
            await r.converge(lambda s: len(s.get("default/web:http/tcp", ())) == 3, what="web with 3 endpoints")
            replies = await asyncio.to_thread(lab.connect_many, "client-a", "10.96.0.10", 80, count=60,
                                             timeout=ANSWER_TIMEOUT)
            seen = Counter(reply.backend for reply in replies)
            assert set(seen) == {"web-a1", "web-a2", "web-b1"}, (seen, [r for r in replies if not r.answered])

            await r.kubectl.apply_text("replace", web_slice([WEB_B1]))
            await r.converge(lambda s: s.get("default/web:http/tcp") == with_ports([WEB_B1]), what="scaled to 1")
            replies = await asyncio.to_thread(lab.connect_many, "client-a", "10.96.0.10", 80, count=10,
                                             timeout=ANSWER_TIMEOUT)
            assert {reply.backend for reply in replies} == {"web-b1"}, [r for r in replies if not r.answered]

            await r.kubectl.apply_text("replace", web_slice([]))
            await r.converge(lambda s: s.get("default/web:http/tcp") == (), what="no endpoints")
            reply = await asyncio.to_thread(lab.connect, "client-a", "10.96.0.10", 80, timeout=2.0)
            assert reply.outcome is Outcome.REFUSED and reply.seconds < 1.0, reply

            await r.kubectl("delete", "service", "web")
            await r.converge(lambda s: "default/web:http/tcp" not in s, what="no rules")
            reply = await asyncio.to_thread(lab.connect, "client-a", "10.96.0.10", 80, timeout=0.5)
            assert reply.outcome is Outcome.TIMEOUT, reply

    run(scenario())


def _ask(sock: socket.socket) -> str:
    sock.sendto(b"hello\n", ("10.96.0.53", 53))
    data, _ = sock.recvfrom(512)
    return data.decode().split()[0]


@pytest.mark.parametrize("cleanup", [True, False], ids=["conntrack-cleanup", "control-without-cleanup"])
def test_udp_client_survives_an_endpoint_change(lab: Lab, tmp_path: Path, cleanup: bool) -> None:
    async def scenario() -> None:
        async with running_daemon(lab.node_a.netns, tmp_path, conntrack=cleanup) as r:
            assert r.kubectl is not None
            both = [WEB_A1, WEB_B1]
            await r.kubectl.apply_text("create", web_service("10.96.0.53", "UDP", "dns", 53, 5353) + "---\n"
                                       + web_slice(both, "UDP", "dns", "dns-1", 5353))
            await r.converge(lambda s: s.get(UDP_KEY) == with_ports(both, 5353), what="dns with 2 endpoints")
            sock = socket_in(lab.netns("client-a"), socket.AF_INET, socket.SOCK_DGRAM)
            sock.settimeout(2.0)
            try:
                first = await asyncio.to_thread(_ask, sock)
                assert first in ("web-a1", "web-b1")
                assert await asyncio.to_thread(_ask, sock) == first  # one flow, one endpoint
                used = WEB_A1 if first == "web-a1" else WEB_B1
                left = WEB_B1 if used == WEB_A1 else WEB_A1
                await r.kubectl.apply_text("replace", web_slice([left], "UDP", "dns", "dns-1", 5353))
                await r.converge(lambda s: s.get(UDP_KEY) == with_ports([left], 5353), what="endpoint removed")
                await eventually(r.daemon.settled, what="conntrack cleanup")  # on its own thread, after the sync
                after = await asyncio.to_thread(_ask, sock)
            finally:
                sock.close()
            if cleanup:
                assert after == NAMES[left], "the stale entry was deleted: the flow moved to the endpoint left"
                assert r.daemon.last_result is not None
            else:
                assert after == first, "without cleanup the stale entry keeps the flow on the removed pod"

    run(scenario())
