"""Health as kube-proxy's (pkg/proxy/healthcheck, and its healthcheck_test.go cases): per-family
health with a 2 x syncPeriod timeout, lastUpdated before the first sync, node eligibility on
/healthz only, kube-proxy's JSON bodies and headers, and health check node ports that report the
proxy's real health, listen on both families and on nodePortAddresses."""

from __future__ import annotations

import asyncio
import json
import socket
from ipaddress import ip_address, ip_network

import aiohttp
import pytest
from aiohttp import web

from netkit.model import IPFamily, build
from netkit.model.types import Node
from netkit.runtime.health import (
    ProxyHealth,
    ServiceHealth,
    ServiceHealthServers,
    go_time,
    listen_hosts,
    make_listener,
    node_eligible,
    proxy_health_app,
    service_health,
)
from tests.factories import endpoint, node, objects, service, slice_

V4, V6 = IPFamily.IPV4, IPFamily.IPV6


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_go_time_is_rfc3339_with_trimmed_nanoseconds() -> None:
    assert go_time(None) == "0001-01-01T00:00:00Z"
    assert go_time(1_700_000_000.0) == "2023-11-14T22:13:20Z"
    assert go_time(1_700_000_000.25) == "2023-11-14T22:13:20.25Z"


def test_health_per_family_with_kube_proxys_timeout() -> None:
    clock = Clock()
    h = ProxyHealth(timeout=60, families=(V4, V6), clock=clock)
    assert h.healthy() and h.status()[1] == {}  # nothing known yet: healthy while starting
    h.started()
    assert h.status() == (True, {V4: True, V6: True})
    h.queued([V4])
    clock.now += 59
    assert h.healthy()
    h.queued([V4])  # a later change does not move the oldest queued time
    clock.now += 1
    assert h.status() == (False, {V4: False, V6: True})
    h.updated([V6])
    assert not h.healthy()  # the IPv4 proxier is still late
    h.updated([V4])
    assert h.healthy()


def test_bodies_are_kube_proxys() -> None:
    clock = Clock()
    h = ProxyHealth(timeout=60, families=(V4,), clock=clock)
    h.started()
    started = clock.now
    clock.now += 5
    code, doc = h.body(healthz=True)
    assert code == 200 and doc == {"lastUpdated": go_time(clock.now), "currentTime": go_time(clock.now),
                                   "nodeEligible": True, "healthy": True,
                                   "status": {"IPv4": {"lastUpdated": go_time(started), "healthy": True}}}
    h.queued()
    clock.now += 61
    code, doc = h.body(healthz=False)
    assert code == 503 and "nodeEligible" not in doc and doc["lastUpdated"] == go_time(started)
    assert doc["healthy"] is False and doc["status"] == {"IPv4": {"lastUpdated": go_time(started), "healthy": False}}


def test_node_eligibility() -> None:
    assert node_eligible(None, seen=False)  # no Node yet (or a manifest directory without one)
    assert not node_eligible(None, seen=True)  # the Node was deleted
    assert node_eligible(Node("node-a"), seen=True)
    assert not node_eligible(Node("node-a", deleting=True), seen=True)
    assert not node_eligible(Node("node-a", taints=("ToBeDeletedByClusterAutoscaler",)), seen=True)
    assert node_eligible(Node("node-a", taints=("node.kubernetes.io/unschedulable",)), seen=True)


async def _get(url: str) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, dict(resp.headers), await resp.text()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_and_livez_over_http() -> None:
    clock = Clock()
    counted: list[tuple[str, int]] = []
    h = ProxyHealth(timeout=2, families=(V4,), clock=clock, counts=lambda e, c: counted.append((e, c)))
    h.started()

    async def main() -> None:
        runner = web.AppRunner(proxy_health_app(h))
        await runner.setup()
        port = _port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            base = f"http://127.0.0.1:{port}"
            status, headers, _ = await _get(base + "/healthz")
            assert status == 200 and headers["Content-Type"].startswith("application/json")
            assert headers["X-Content-Type-Options"] == "nosniff"
            h.queued()
            clock.now += 2.5
            status, _, body = await _get(base + "/healthz")
            assert status == 503
            assert set(json.loads(body)) == {"lastUpdated", "currentTime", "nodeEligible", "healthy", "status"}
            assert (await _get(base + "/livez"))[0] == 503
            h.updated()
            h.node_eligible = False  # the node is being deleted: /healthz fails, /livez does not
            status, _, body = await _get(base + "/healthz")
            assert status == 503 and json.loads(body)["nodeEligible"] is False and json.loads(body)["healthy"]
            assert (await _get(base + "/livez"))[0] == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert counted == [("healthz", 200), ("healthz", 503), ("livez", 503), ("healthz", 503), ("livez", 200)]


def lb_state(local: list[str], remote: list[str], hc_port: int):  # type: ignore[no-untyped-def]
    eps = [endpoint(ip, node="node-a") for ip in local] + [endpoint(ip, node="node-b") for ip in remote]
    docs = [node(), service("lb", ip="10.96.0.30", type="LoadBalancer", externalTrafficPolicy="Local",
                            healthCheckNodePort=hc_port,
                            ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]),
            slice_("lb", endpoints=eps)]
    return build(objects(*docs), "node-a", ())


def test_service_health_counts_local_ready_endpoints() -> None:
    assert service_health(lb_state(["10.244.1.1", "10.244.1.2"], ["10.244.2.1"], 32000)) == {
        ("default", "lb"): ServiceHealth("default", "lb", 32000, 2)}
    assert service_health(lb_state([], ["10.244.2.1"], 32000)) == {
        ("default", "lb"): ServiceHealth("default", "lb", 32000, 0)}


def test_service_body_is_kube_proxys_byte_for_byte() -> None:
    assert ServiceHealth("ns", "lb", 1, 2).body(True) == (
        '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "lb"\n\t},\n'
        '\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}')


def test_service_health_servers_answer_like_kube_proxy() -> None:
    port = _port()
    clock = Clock()
    proxy = ProxyHealth(timeout=60, families=(V4,), clock=clock)
    proxy.started()

    async def main() -> None:
        servers = ServiceHealthServers(None, "127.0.0.1", proxy)
        try:
            await servers.update(service_health(lb_state(["10.244.1.1", "10.244.1.2"], [], port)))
            status, headers, body = await _get(f"http://127.0.0.1:{port}/healthz")
            assert status == 200
            assert headers["X-Load-Balancing-Endpoint-Weight"] == "2"
            assert json.loads(body) == {"service": {"namespace": "default", "name": "lb"},
                                        "localEndpoints": 2, "serviceProxyHealthy": True}
            proxy.queued()
            clock.now += 61  # the proxy is stalled: the LB must stop sending here, endpoints or not
            status, headers, body = await _get(f"http://127.0.0.1:{port}/")
            assert status == 503 and json.loads(body)["serviceProxyHealthy"] is False
            assert headers["X-Load-Balancing-Endpoint-Weight"] == "2"
            proxy.updated()
            await servers.update(service_health(lb_state([], ["10.244.2.1"], port)))
            status, headers, body = await _get(f"http://127.0.0.1:{port}/")
            assert status == 503 and headers["X-Load-Balancing-Endpoint-Weight"] == "0"
            assert json.loads(body)["localEndpoints"] == 0
            await servers.update({})  # the service went away: its port closes
            with pytest.raises(aiohttp.ClientConnectionError):
                await _get(f"http://127.0.0.1:{port}/")
        finally:
            await servers.close()

    asyncio.run(main())


def test_a_busy_health_check_port_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    port = _port()
    wanted = service_health(lb_state(["10.244.1.1"], [], port))

    async def main() -> None:
        servers = ServiceHealthServers(None, "127.0.0.1")
        blocker = make_listener(f"127.0.0.1:{port}", None)
        try:
            await servers.update(wanted)  # no exception: logged
            assert "failed to start healthcheck default/lb" in caplog.text
            blocker.close()
            await servers.update(wanted)  # the next sync opens it
            assert (await _get(f"http://127.0.0.1:{port}/"))[0] == 200
        finally:
            blocker.close()
            await servers.close()

    asyncio.run(main())


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="needs IPv6 on the loopback interface (::1)")
def test_the_wildcard_address_serves_both_families() -> None:
    port = _port()
    sock = make_listener(f"0.0.0.0:{port}", None)
    try:
        sock.setblocking(True)
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family, socket.SOCK_STREAM) as c:
                c.settimeout(2)
                c.connect((host, port))
    finally:
        sock.close()


def test_health_check_ports_listen_on_the_node_ips_nodeportaddresses_allow() -> None:
    ips = (ip_address("192.0.2.10"), ip_address("198.51.100.7"), ip_address("2001:db8::10"))
    assert listen_hosts(ips, (), ()) == ("0.0.0.0",)
    assert listen_hosts(ips, (ip_network("192.0.2.0/24"),), ()) == ("192.0.2.10",)
    assert listen_hosts(ips, (ip_network("2001:db8::/64"),), (ip_address("198.51.100.7"),)) == (
        "[2001:db8::10]", "198.51.100.7")
    assert listen_hosts(ips, (ip_network("203.0.113.0/24"),), ()) == ("0.0.0.0",)  # none match: all, logged
