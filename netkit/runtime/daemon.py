"""`netkit run`: the node daemon. One asyncio process:

    source (API reflectors or manifest files) ─► Store ─► changes ─► Runner.request()
                                                   │
                        Runner (min/max interval) ─┴─► NodeState ─► Syncer.sync (worker thread)
                                                                    ├─► kernel rules
                                                                    ├─► UDP ports that changed ─► CleanupWorker
                                                                    │     (own thread: conntrack over netlink)
                                                                    └─► health check node ports
    Store ─► changes ─► DNS view (--dns-listen): rebuilt on every change, never waiting for a rule sync
    /healthz /livez (ProxyHealth)      /metrics (kube-proxy's names)

Nothing is written until every source has completed its first list (a restart never flushes working
rules, an API outage never empties them: the store keeps the last known objects while reflectors
back off). After each sync the UDP service ports it changed (all of them after a start) go to the
conntrack worker, which checks the kernel's entries against their serving endpoints on its own thread.
SIGTERM and SIGINT stop the daemon and leave the rules in place; `--cleanup` removes them.
Constructing a Daemon does no IO; `run()` starts everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web

from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.model.conntrack import frontends, ports_to_check
from netkit.model.state import StateBuilder
from netkit.model.types import LAST_CHANGE_TRIGGER_TIME, EndpointSlice
from netkit.rules.backend import Backend
from netkit.runtime.conntrack import CleanupWorker, ConntrackCleaner, Reconciled
from netkit.runtime.health import ProxyHealth, ServiceHealthServers, make_listener, proxy_health_app, service_health
from netkit.runtime.metrics import Metrics
from netkit.runtime.runner import Runner
from netkit.runtime.syncer import Syncer, SyncResult
from netkit.sources.store import Change, Store

log = logging.getLogger("netkit.daemon")


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    config: Config
    families: tuple[IPFamily, ...] = (IPFamily.IPV4, IPFamily.IPV6)
    netns: str | None = None
    files: tuple[str, ...] = ()  # manifest source; empty: the Kubernetes API
    allow_empty: bool = False  # a manifest root without Services means no Services (else: kept as it was)
    api: Any = None  # netkit.sources.kube.ApiSettings
    healthz_address: str | None = "0.0.0.0:10256"
    metrics_address: str | None = "127.0.0.1:10249"
    health_check_host: str = "0.0.0.0"
    dns_listen: str | None = None
    dns_upstreams: tuple[str, ...] = ()
    conntrack: bool = True
    reflector_options: Any = None  # netkit.sources.reflector.ReflectorOptions; None: client-go's timings


class Daemon:
    def __init__(self, options: DaemonOptions, backend: Backend) -> None:
        cfg = options.config
        self.options = options
        self.store = Store()
        self.metrics = Metrics()
        self.health = ProxyHealth(cfg.sync_period)
        self.syncer = Syncer(cfg, backend, options.families, netns=options.netns)
        self.conntrack = CleanupWorker(ConntrackCleaner(options.netns), self._cleaned) if options.conntrack else None
        self.runner = Runner(self._sync, min_interval=cfg.min_sync_period, max_interval=cfg.sync_period)
        self.service_health = ServiceHealthServers(options.netns, options.health_check_host)
        self.state_builder = StateBuilder()  # unchanged services come back as the same objects
        self.state: NodeState | None = None
        self.last_result: SyncResult | None = None
        self.synced = asyncio.Event()  # set after the first successful sync
        self._syncing = False
        self._trigger_times: list[float] = []
        self._dns: Any = None
        self._dns_dirty = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        source = self._source()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        http = await self._start_http()
        if self.conntrack is not None:
            self.conntrack.start()
        tasks = [asyncio.create_task(source.run(), name="source"),
                 asyncio.create_task(self._follow_changes(), name="changes"),
                 asyncio.create_task(self._start_runner(), name="runner"),
                 *([asyncio.create_task(self._follow_dns(), name="dns")] if self.options.dns_listen else [])]
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stopper and t.exception():
                    raise t.exception()  # type: ignore[misc]
            ended = [t.get_name() for t in done if t is not stopper]
            if ended:  # the source, change follower and runner loop forever: an end is a bug
                log.error("stopping: task ended unexpectedly", extra={"tasks": ended})
            log.info("stopping; rules stay in place")
        finally:
            for t in [*tasks, stopper]:
                t.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
            for runner in http:
                await runner.cleanup()
            await self.service_health.close()
            if self.conntrack is not None:
                await asyncio.to_thread(self.conntrack.stop)
            if self._dns is not None:
                await self._dns.close()

    def _source(self) -> Any:
        if self.options.files:
            from netkit.sources.files import FileSource
            return FileSource(self.options.files, self.store, allow_empty=self.options.allow_empty)
        from netkit.sources.kube import ApiSettings, KubeSource
        return KubeSource(self.options.api or ApiSettings(), self.store, node_name=self.options.config.node_name,
                          pods=bool(self.options.dns_listen), options=self.options.reflector_options)

    async def _start_http(self) -> list[web.AppRunner]:
        runners = []
        if self.options.healthz_address:
            runners.append(await _serve(proxy_health_app(self.health), self.options.healthz_address, None))
        if self.options.metrics_address:
            app = web.Application()

            async def metrics(_: web.Request) -> web.Response:
                return web.Response(body=self.metrics.render(), content_type="text/plain")

            app.router.add_get("/metrics", metrics)
            runners.append(await _serve(app, self.options.metrics_address, None))
        if self.options.dns_listen:
            await self._start_dns()
        return runners

    async def _start_dns(self) -> None:
        from netkit.dns.engine import Engine
        from netkit.dns.server import DnsServer
        from netkit.dns.upstream import Forwarder, parse_address
        from netkit.dns.view import Options

        options = Options()
        self._dns_options = options
        upstreams = [parse_address(u) for u in self.options.dns_upstreams]
        self._dns = DnsServer(Engine(options), parse_address(self.options.dns_listen or ""), Forwarder(upstreams))
        await self._dns.start()  # answers SERVFAIL until the first complete view is installed

    async def _start_runner(self) -> None:
        await self.store.wait_synced()
        log.info("all sources synced; first sync")
        self.health.queued()
        self.runner.request()
        await self.runner.run()

    # --- changes and syncs -----------------------------------------------------------------------

    async def _follow_changes(self) -> None:
        while True:
            changes = await self.store.wait_changes()
            self._dns_dirty.set()
            self._count(changes)
            self.health.queued()
            self.metrics.last_queued.set(time.time())
            if self.store.all_synced:
                self.runner.request()

    async def _follow_dns(self) -> None:
        """The DNS view follows the store itself: a held xtables lock or a slow sync never keeps a
        changed ClusterIP stale in DNS. Changes that arrive while a view is built coalesce."""
        from netkit.dns.view import build as build_view

        await self.store.wait_synced()
        while True:
            self._dns_dirty.clear()
            if self._dns is not None:
                self._dns.set_view(build_view(self.store.objects(), self._dns_options, serial=int(time.time())))
            await self._dns_dirty.wait()

    def _count(self, changes: dict[Any, Change]) -> None:
        for change in changes.values():
            kind = change.key.kind
            if kind == "Service":
                self.metrics.service_changes.inc()
            elif kind == "EndpointSlice":
                self.metrics.endpoint_changes.inc()
                trigger = _trigger_time(change.after)
                if trigger is not None:
                    self._trigger_times.append(trigger)
        self.metrics.service_changes_pending.set(0)

    def settled(self) -> bool:
        """Nothing pending: no change waiting for a sync, no sync running, no conntrack cleanup
        queued or running (tests wait for this)."""
        return (not self._syncing and not self.store.changed.is_set() and not self.runner.requested
                and (self.conntrack is None or self.conntrack.idle()))

    async def _sync(self, full: bool) -> bool:
        self._syncing = True
        try:
            return await self._sync_once(full)
        finally:
            self._syncing = False

    async def _sync_once(self, full: bool) -> bool:
        objects = self.store.objects()
        cfg = self.options.config
        state = self.state_builder.build(objects, cfg.node_name, cfg.node_ips)
        pending, self._trigger_times = self._trigger_times, []
        result = await asyncio.to_thread(self.syncer.sync, state, full=full)
        self.last_result = result
        self._observe(result, pending)
        if result.error:
            self.metrics.restore_failures.inc()
            self._trigger_times = pending + self._trigger_times  # measured once the change lands
            return False
        if self.conntrack is not None:
            # checked against the kernel, not against memory: after a start every UDP port is checked
            self.conntrack.submit(frontends(ports_to_check(self.state, state)))
        self.state = state
        if result.full:
            # The objects of a synced state live long and hold no cycles: keep the cyclic GC from
            # walking hundreds of thousands of them on every later sync (a 0.2 s pause at 10k services).
            gc.freeze()
        self.health.updated()
        await self.service_health.update(service_health(state))
        self.synced.set()
        log.info("sync done", extra={"full": result.full, "seconds": round(result.seconds, 4),
                                     "chains": result.chains_written})
        return True

    def _cleaned(self, result: Reconciled) -> None:
        """The conntrack worker's report (called on its thread)."""
        if result.deleted:
            self.metrics.conntrack_flushed.inc(result.deleted)
        log.log(logging.INFO if result.deleted else logging.DEBUG, "conntrack cleanup done",
                extra={"flows_read": result.flows, "flows_deleted": result.deleted,
                       "seconds": round(result.seconds, 4)})

    def _observe(self, result: SyncResult, triggers: Sequence[float]) -> None:
        m = self.metrics
        m.sync_duration.observe(result.seconds)
        (m.full_sync_duration if result.full else m.partial_sync_duration).observe(result.seconds)
        if not result.error:
            now = time.time()
            m.last_sync.set(now)
            for t in triggers:
                m.network_programming.observe(max(0.0, now - t))
        m.endpoint_changes_pending.set(self.store.pending)

    def cleanup(self) -> None:
        """`run --cleanup`: every mode's rules, as kube-proxy --cleanup (netkit.rules.cleanup)."""
        from netkit.rules import cleanup
        cleanup.execute([cleanup.survey(cleanup.MODES, f, self.options.netns) for f in self.options.families])


async def _serve(app: web.Application, address: str, netns: str | None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, make_listener(address, netns)).start()
    return runner


def _trigger_time(obj: Any) -> float | None:
    if not isinstance(obj, EndpointSlice):
        return None
    text = dict(obj.annotations).get(LAST_CHANGE_TRIGGER_TIME)
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
