"""Health: kube-proxy's /healthz and /livez, and per-service health check node ports.

- /healthz and /livez (default 0.0.0.0:10256): 200 while no sync has been queued for longer than
  2 × syncPeriod without completing, else 503; JSON `{"lastUpdated", "currentTime", "nodeEligible"}`.
  /healthz also reports 503 when this node is being deleted (kube-proxy's "node eligible" check; the
  daemon sets `node_eligible`); /livez ignores that.
- For every externalTrafficPolicy=Local load balancer, a server on its healthCheckNodePort answers
  200 when this node has at least one local ready endpoint and 503 otherwise, with kube-proxy's JSON
  body and the `X-Load-Balancing-Endpoint-Weight` header, so cloud load balancers send traffic only to
  nodes that can serve it. Servers are opened and closed as services come and go.

Sockets are created inside the daemon's network namespace (`--netns`) when it has one.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from netkit.model import NodeState
from netkit.netns import socket_in


@dataclass
class ProxyHealth:
    sync_period: float
    clock: Callable[[], float] = time.time
    last_updated: float = 0.0
    queued_since: float | None = None
    node_eligible: bool = True

    def queued(self) -> None:
        if self.queued_since is None:
            self.queued_since = self.clock()

    def updated(self) -> None:
        self.last_updated = self.clock()
        self.queued_since = None

    def healthy(self) -> bool:
        if self.queued_since is None:
            return True
        return self.clock() - self.queued_since < 2 * self.sync_period

    def body(self) -> dict[str, object]:
        now = self.clock()
        return {"lastUpdated": _iso(self.last_updated), "currentTime": _iso(now), "nodeEligible": self.node_eligible}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else ""


def make_listener(address: str, netns: str | None) -> socket.socket:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket_in(netns, family, socket.SOCK_STREAM) if netns else socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def proxy_health_app(health: ProxyHealth) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        ok = health.healthy() and health.node_eligible
        return web.json_response(health.body(), status=200 if ok else 503)

    async def livez(_: web.Request) -> web.Response:
        return web.json_response(health.body(), status=200 if health.healthy() else 503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    return app


@dataclass(frozen=True, slots=True)
class ServiceHealth:
    namespace: str
    name: str
    local_endpoints: int

    def body(self) -> str:
        return json.dumps({"service": {"namespace": self.namespace, "name": self.name},
                           "localEndpoints": self.local_endpoints,
                           "serviceProxyHealthy": True})


def service_health(state: NodeState) -> dict[int, ServiceHealth]:
    """healthCheckNodePort → what its server reports (pure; one port per service)."""
    out: dict[int, ServiceHealth] = {}
    for p in state.ports:
        if p.health_check_node_port:
            prev = out.get(p.health_check_node_port)
            count = len([e for e in p.local_endpoints if e.ready])
            if prev is None or count > prev.local_endpoints:
                out[p.health_check_node_port] = ServiceHealth(p.name.ref.namespace, p.name.ref.name, count)
    return out


class ServiceHealthServers:
    """One small HTTP server per healthCheckNodePort, reconciled after every sync."""

    def __init__(self, netns: str | None = None, bind_host: str = "0.0.0.0") -> None:
        self.netns = netns
        self.bind_host = bind_host
        self.current: dict[int, ServiceHealth] = {}
        self._runners: dict[int, web.AppRunner] = {}

    async def update(self, wanted: dict[int, ServiceHealth]) -> None:
        self.current = wanted
        for port in list(self._runners):
            if port not in wanted:
                await self._runners.pop(port).cleanup()
        for port in wanted:
            if port not in self._runners:
                self._runners[port] = await self._start(port)

    async def _start(self, port: int) -> web.AppRunner:
        async def handle(_: web.Request) -> web.Response:
            info = self.current.get(port)
            count = info.local_endpoints if info else 0
            return web.Response(text=info.body() if info else "{}", content_type="application/json",
                                status=200 if count > 0 else 503,
                                headers={"X-Load-Balancing-Endpoint-Weight": str(count)})

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, make_listener(f"{self.bind_host}:{port}", self.netns))
        await site.start()
        return runner

    async def close(self) -> None:
        await self.update({})
