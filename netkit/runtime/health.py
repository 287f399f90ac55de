"""Health: kube-proxy's /healthz and /livez, and per-service health check node ports
(pkg/proxy/healthcheck: proxy_health.go, service_health.go).

- Per IP family: `updated(family)` after a successful sync, `queued(family)` when a change is waiting.
  A family is unhealthy when a change has been queued for `timeout` (2 x syncPeriod) without a sync.
  `started()` sets lastUpdated before the first sync, as kube-proxy's SyncLoop does, and nothing is
  queued until every source has synced (kube-proxy's proxier is not "initialized" before).
- /healthz: 503 when unhealthy or the node is not eligible (a deletionTimestamp, or the
  `ToBeDeletedByClusterAutoscaler` taint); /livez ignores eligibility. Both answer kube-proxy's JSON:
  `{"lastUpdated", "currentTime", "nodeEligible" (healthz only), "healthy", "status": {family: ...}}`
  with RFC 3339 times, lastUpdated = now when healthy; headers Content-Type and X-Content-Type-Options.
- For each `externalTrafficPolicy: Local` service, a server on its healthCheckNodePort answers 200 when
  the node has a local ready endpoint *and* the proxy is healthy, else 503, with kube-proxy's body
  (`serviceProxyHealthy` is the proxy's real health) and `X-Load-Balancing-Endpoint-Weight`. They
  listen on the node IPs matching nodePortAddresses, or on every address of both families.
- Listeners: `0.0.0.0` (or `::`, or no host) listens on both families, as Go does.

Sockets are created inside the daemon's network namespace (`--netns`) when it has one.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from netkit.model import IPFamily, NodeInfo, NodeState
from netkit.model.state import PortChanges
from netkit.model.types import IPAddress, IPNetwork, Node
from netkit.netns import socket_in

log = logging.getLogger("netkit.health")
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
FAMILY_NAMES = {IPFamily.IPV4: "IPv4", IPFamily.IPV6: "IPv6"}


def go_time(t: float | None) -> str:
    """Go's time.Time in JSON (RFC 3339 with nanoseconds, trailing zeros trimmed; zero time for None)."""
    if t is None:
        return "0001-01-01T00:00:00Z"
    whole = int(t)
    nanos = int(round((t - whole) * 1e9))
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{nanos:09d}".rstrip("0")
    return f"{text}.{frac}Z" if frac else f"{text}Z"


def node_eligible(node: Node | None, seen: bool) -> bool:
    """kube-proxy's NodeEligible: not being deleted, not tainted for deletion. A Node never seen (a
    manifest directory without one, or before the first list) counts as eligible; one seen and then
    gone does not."""
    if node is None:
        return not seen
    return not node.deleting and TO_BE_DELETED_TAINT not in node.taints


@dataclass
class ProxyHealth:
    timeout: float  # kube-proxy: 2 x syncPeriod
    families: tuple[IPFamily, ...] = (IPFamily.IPV4, IPFamily.IPV6)
    clock: Callable[[], float] = time.time
    last_updated: dict[IPFamily, float] = field(default_factory=dict)
    oldest_queued: dict[IPFamily, float] = field(default_factory=dict)
    node_eligible: bool = True
    counts: Callable[[str, int], None] | None = None  # (endpoint, HTTP code): the *_total metrics

    def started(self) -> None:
        for f in self.families:
            self.last_updated[f] = self.clock()

    def queued(self, families: Iterable[IPFamily] | None = None) -> None:
        now = self.clock()
        for f in self.families if families is None else families:
            self.oldest_queued.setdefault(f, now)

    def updated(self, families: Iterable[IPFamily] | None = None) -> None:
        now = self.clock()
        for f in self.families if families is None else families:
            self.oldest_queued.pop(f, None)
            self.last_updated[f] = now

    def status(self) -> tuple[bool, dict[IPFamily, bool]]:
        now = self.clock()
        per = {f: not (f in self.oldest_queued and now - self.oldest_queued[f] >= self.timeout)
               for f in self.last_updated}
        return all(per.values()), per

    def healthy(self) -> bool:
        return self.status()[0]

    def body(self, *, healthz: bool) -> tuple[int, dict[str, object]]:
        healthy, per = self.status()
        now = self.clock()
        ok = healthy and (self.node_eligible or not healthz)
        doc: dict[str, object] = {"lastUpdated": go_time(now if ok else max(self.last_updated.values(), default=None)),
                                  "currentTime": go_time(now)}
        if healthz:
            doc["nodeEligible"] = self.node_eligible
        doc["healthy"] = healthy
        if per:
            doc["status"] = {FAMILY_NAMES[f]: {"lastUpdated": go_time(self.last_updated[f]), "healthy": per[f]}
                             for f in sorted(per, key=lambda f: FAMILY_NAMES[f])}
        code = 200 if ok else 503
        if self.counts is not None:
            self.counts("healthz" if healthz else "livez", code)
        return code, doc


_HEADERS = {"X-Content-Type-Options": "nosniff"}


def proxy_health_app(health: ProxyHealth) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        code, doc = health.body(healthz=True)
        return web.json_response(doc, status=code, headers=_HEADERS)

    async def livez(_: web.Request) -> web.Response:
        code, doc = health.body(healthz=False)
        return web.json_response(doc, status=code, headers=_HEADERS)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    return app


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def make_listener(address: str, netns: str | None) -> socket.socket:
    """A listening socket for IP:PORT; a wildcard host (0.0.0.0, ::, empty) serves both families."""
    host, port = split_address(address)
    wildcard = host in ("", "0.0.0.0", "::")
    if wildcard:
        try:
            return _listen(socket.AF_INET6, "::", port, netns, v6only=False)
        except OSError as exc:
            if exc.errno not in (97, 99):  # EAFNOSUPPORT, EADDRNOTAVAIL: no IPv6 here
                raise
        return _listen(socket.AF_INET, "0.0.0.0", port, netns)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return _listen(family, host, port, netns, v6only=True)


def _listen(family: int, host: str, port: int, netns: str | None, v6only: bool = True) -> socket.socket:
    sock = socket_in(netns, family, socket.SOCK_STREAM) if netns else socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(frozen=True, slots=True)
class ServiceHealth:
    namespace: str
    name: str
    port: int
    local_endpoints: int

    def body(self, proxy_healthy: bool) -> str:
        """kube-proxy's body, byte for byte (a tab-indented JSON object)."""
        healthy = str(proxy_healthy).lower()
        return (f'{{\n\t"service": {{\n\t\t"namespace": "{self.namespace}",\n\t\t"name": "{self.name}"\n\t}},\n'
                f'\t"localEndpoints": {self.local_endpoints},\n\t"serviceProxyHealthy": {healthy}\n}}')


def service_health(state: NodeState) -> dict[tuple[str, str], ServiceHealth]:
    """(namespace, name) → its health check port and local ready endpoints (pure; kube-proxy counts
    the service's local endpoints across its ports)."""
    out: dict[tuple[str, str], ServiceHealth] = {}
    for p in state.ports:
        if p.health_check_node_port:
            key = (p.name.ref.namespace, p.name.ref.name)
            count = len([e for e in p.local_endpoints if e.ready])
            prev = out.get(key)
            if prev is None or count > prev.local_endpoints:
                out[key] = ServiceHealth(key[0], key[1], p.health_check_node_port, count)
    return out


def service_health_since(previous: Mapping[tuple[str, str], ServiceHealth],
                         changes: PortChanges) -> dict[tuple[str, str], ServiceHealth]:
    """`service_health` of the new state from that of the state `changes` started from: the
    Services whose ports went or came are counted again from the ports that came (a Service's
    ports come together), every other entry is kept."""
    out = dict(previous)
    for p in (*changes.gone, *changes.came):
        out.pop((p.name.ref.namespace, p.name.ref.name), None)
    out.update(service_health(NodeState(NodeInfo(), changes.came)))
    return out


def listen_hosts(node_ips: Sequence[IPAddress], addresses: Sequence[IPNetwork],
                 primary: Sequence[IPAddress]) -> tuple[str, ...]:
    """Where health check ports listen: every address ("0.0.0.0", both families) unless
    nodePortAddresses narrows them to the node IPs it matches (kube-proxy's GetNodeIPs)."""
    if not addresses and not primary:
        return ("0.0.0.0",)
    mine = [ip for ip in node_ips if any(ip.version == net.version and ip in net for net in addresses)]
    mine += [ip for ip in primary if ip not in mine]
    if not mine:
        log.error("no node IP matches nodePortAddresses; health check ports listen on every address")
        return ("0.0.0.0",)
    return tuple(f"[{ip}]" if ip.version == 6 else str(ip) for ip in mine)


class ServiceHealthServers:
    """One HTTP server per service with a healthCheckNodePort (on every listen host), reconciled
    after every sync. A port that cannot be opened is logged and tried again at the next sync."""

    def __init__(self, netns: str | None = None, bind_host: str = "0.0.0.0",
                 proxy: ProxyHealth | None = None) -> None:
        self.netns = netns
        self.hosts: tuple[str, ...] = (bind_host,)
        self.proxy = proxy
        self.current: dict[tuple[str, str], ServiceHealth] = {}
        self._runners: dict[tuple[str, str], tuple[int, list[web.AppRunner]]] = {}

    async def update(self, wanted: Mapping[tuple[str, str], ServiceHealth], hosts: Sequence[str] | None = None) -> None:
        if hosts is not None and tuple(hosts) != self.hosts:
            self.hosts = tuple(hosts)
            for key in list(self._runners):
                await self._close(key)
        self.current = dict(wanted)
        for key, (port, _) in list(self._runners.items()):
            if key not in wanted or wanted[key].port != port:
                await self._close(key)
        for key, info in wanted.items():
            if key not in self._runners:
                await self._open(key, info.port)

    async def _close(self, key: tuple[str, str]) -> None:
        _, runners = self._runners.pop(key)
        for r in runners:
            await r.cleanup()

    async def _open(self, key: tuple[str, str], port: int) -> None:
        runners: list[web.AppRunner] = []
        try:
            for host in self.hosts:
                runners.append(await self._start(key, f"{host}:{port}"))
        except OSError as exc:
            log.error("failed to start healthcheck %s/%s on port %d: %s", key[0], key[1], port, exc.strerror or exc)
            for r in runners:
                await r.cleanup()
            return
        self._runners[key] = (port, runners)

    async def _start(self, key: tuple[str, str], address: str) -> web.AppRunner:
        async def handle(_: web.Request) -> web.Response:
            info = self.current.get(key)
            if info is None:
                return web.Response(status=503)
            healthy = self.proxy.healthy() if self.proxy is not None else True
            ok = info.local_endpoints != 0 and healthy
            return web.Response(text=info.body(healthy), content_type="application/json", status=200 if ok else 503,
                                headers={**_HEADERS, "X-Load-Balancing-Endpoint-Weight": str(info.local_endpoints)})

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.SockSite(runner, make_listener(address, self.netns)).start()
        except OSError:
            await runner.cleanup()
            raise
        return runner

    async def close(self) -> None:
        await self.update({})
