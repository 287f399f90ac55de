"""The HTTP side of `netkit dns`, on CoreDNS's ports: `/metrics` (:9153), `/health` (:8080), `/ready` (:8181).

- `/metrics`: the server's CoreDNS metrics (netkit.dns.metrics) and the process collector
  (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …), Prometheus text format.
- `/health`: 200 `OK` while the process serves (CoreDNS's `health` plugin).
- `/ready`: 503 until the first complete view from the source is installed, then 200 `OK`
  (CoreDNS's `ready` plugin; its 503 body names the plugins not ready yet: `kubernetes`).

An address is `IP:PORT`, `[IPv6]:PORT` or `:PORT` (every address, as CoreDNS writes it); empty
disables the endpoint. A port that cannot be bound is a one-line error naming the flag.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from netkit.dns.metrics import DnsMetrics
from netkit.errors import NetkitError


class _Collector:
    def __init__(self, metrics: DnsMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Any:
        return self.metrics.collect()


def registry(metrics: DnsMetrics) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(metrics))
    ProcessCollector(registry=reg)
    return reg


def metrics_app(metrics: DnsMetrics) -> web.Application:
    reg = registry(metrics)

    async def handle(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(reg), headers={"Content-Type": "text/plain; version=0.0.4"})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app


def health_app() -> web.Application:
    async def handle(_: web.Request) -> web.Response:
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_get("/health", handle)
    return app


def ready_app(ready: Callable[[], bool]) -> web.Application:
    async def handle(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="OK")
        return web.Response(status=503, text="kubernetes")

    app = web.Application()
    app.router.add_get("/ready", handle)
    return app


def parse_http_address(text: str, flag: str) -> tuple[str | None, int] | None:
    """':9153' → (None, 9153) (every address); '127.0.0.1:9153'; '[::1]:9153'; '' → None (disabled)."""
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise NetkitError(f"{flag} {text}: expected [IP]:PORT")
    host = host.removeprefix("[").removesuffix("]")
    if host:
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        except OSError:
            raise NetkitError(f"{flag} {text}: {host!r} is not an IP address") from None
    return (host or None), int(port)


async def serve(app: web.Application, address: tuple[str | None, int], flag: str) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host=address[0], port=address[1], reuse_address=True).start()
    except OSError as exc:
        await runner.cleanup()
        where = f"{address[0] or ''}:{address[1]}"
        raise NetkitError(f"{flag} {where}: cannot listen: {exc.strerror or exc}") from None
    return runner
