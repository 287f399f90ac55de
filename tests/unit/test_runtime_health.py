"""Health semantics (kube-proxy's): /healthz and /livez turn 503 when a queued sync has not completed
within 2 × syncPeriod; per-service health check node ports answer 200/503 with kube-proxy's JSON body
and X-Load-Balancing-Endpoint-Weight. Also: every metric kube-proxy dashboards use is present."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
from aiohttp import web

from netkit.model import build
from netkit.runtime.health import ProxyHealth, ServiceHealth, ServiceHealthServers, proxy_health_app, service_health
from netkit.runtime.metrics import Metrics
from tests.factories import endpoint, node, objects, service, slice_


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_healthy_until_a_queued_sync_is_older_than_twice_the_sync_period() -> None:
    clock = Clock()
    h = ProxyHealth(sync_period=30, clock=clock)
    assert h.healthy()  # nothing queued
    h.queued()
    clock.now += 59
    assert h.healthy()
    h.queued()  # a later change does not move the oldest queued time
    clock.now += 1.5
    assert not h.healthy()
    h.updated()
    assert h.healthy()
    assert h.body()["lastUpdated"] and h.body()["nodeEligible"] is True


async def _get(url: str) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return resp.status, dict(resp.headers), await resp.text()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_and_livez_over_http() -> None:
    clock = Clock()
    h = ProxyHealth(sync_period=1, clock=clock)

    async def main() -> None:
        runner = web.AppRunner(proxy_health_app(h))
        await runner.setup()
        port = _port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            base = f"http://127.0.0.1:{port}"
            assert (await _get(base + "/healthz"))[0] == 200
            h.queued()
            clock.now += 2.5
            status, _, body = await _get(base + "/healthz")
            assert status == 503 and set(json.loads(body)) == {"lastUpdated", "currentTime", "nodeEligible"}
            assert (await _get(base + "/livez"))[0] == 503
            h.updated()
            h.node_eligible = False  # the node is being deleted: /healthz fails, /livez does not
            assert (await _get(base + "/healthz"))[0] == 503
            assert (await _get(base + "/livez"))[0] == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())


def lb_state(local: list[str], remote: list[str], hc_port: int):  # type: ignore[no-untyped-def]
    eps = [endpoint(ip, node="node-a") for ip in local] + [endpoint(ip, node="node-b") for ip in remote]
    docs = [node(), service("lb", ip="10.96.0.30", type="LoadBalancer", externalTrafficPolicy="Local",
                            healthCheckNodePort=hc_port,
                            ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]),
            slice_("lb", endpoints=eps)]
    return build(objects(*docs), "node-a", ())


def test_service_health_counts_local_ready_endpoints() -> None:
    assert service_health(lb_state(["10.244.1.1", "10.244.1.2"], ["10.244.2.1"], 32000)) == {
        32000: ServiceHealth("default", "lb", 2)}
    assert service_health(lb_state([], ["10.244.2.1"], 32000)) == {32000: ServiceHealth("default", "lb", 0)}


def test_service_health_servers_answer_like_kube_proxy() -> None:
    port = _port()

    async def main() -> None:
        servers = ServiceHealthServers(None, "127.0.0.1")
        try:
            await servers.update(service_health(lb_state(["10.244.1.1", "10.244.1.2"], [], port)))
            status, headers, body = await _get(f"http://127.0.0.1:{port}/healthz")
            assert status == 200
            assert headers["X-Load-Balancing-Endpoint-Weight"] == "2"
            assert json.loads(body) == {"service": {"namespace": "default", "name": "lb"},
                                        "localEndpoints": 2, "serviceProxyHealthy": True}
            await servers.update(service_health(lb_state([], ["10.244.2.1"], port)))
            status, headers, body = await _get(f"http://127.0.0.1:{port}/")
            assert status == 503 and headers["X-Load-Balancing-Endpoint-Weight"] == "0"
            assert json.loads(body)["localEndpoints"] == 0
            await servers.update({})  # the service went away: its port closes
            try:
                await _get(f"http://127.0.0.1:{port}/")
                raise AssertionError("the health port should be closed")
            except aiohttp.ClientConnectionError:
                pass
        finally:
            await servers.close()

    asyncio.run(main())


def test_metrics_carry_kube_proxys_names() -> None:
    m = Metrics()
    m.sync_duration.observe(0.01)
    m.network_programming.observe(0.5)
    text = m.render().decode()
    for name in ("kubeproxy_sync_proxy_rules_duration_seconds_bucket",
                 "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
                 "kubeproxy_sync_partial_proxy_rules_duration_seconds_count",
                 "kubeproxy_network_programming_duration_seconds_bucket",
                 "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                 "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                 "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                 "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                 "kubeproxy_sync_proxy_rules_service_changes_pending",
                 "kubeproxy_sync_proxy_rules_endpoint_changes_total",
                 "kubeproxy_sync_proxy_rules_service_changes_total"):
        assert name in text, name
    assert Metrics().render() != b""  # each Metrics has its own registry: two can coexist
