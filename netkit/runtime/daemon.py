"""`netkit run`: the node daemon. One asyncio process:

    source (API reflectors or manifest files) ─► Store ─► changes ─► Runner.request()
                                                   │
                        Runner (min/max interval) ─┴─► NodeState ─► Syncer.sync (worker thread)
                                                                    ├─► kernel rules
                                                                    ├─► UDP ports that changed ─► CleanupWorker
                                                                    │     (own thread: conntrack over netlink)
                                                                    └─► health check node ports
    Store ─► changes ─► DNS view (--dns-listen): rebuilt on every change, never waiting for a rule sync
    /healthz /livez (ProxyHealth)      /metrics (kube-proxy's names), /proxyMode (the mode)

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netkit import nfacct
from netkit.cli.inputs import unknown_node
from netkit.config import Config
from netkit.errors import NetkitError, listening
from netkit.model import IPFamily, NodeState
from netkit.model.conntrack import to_check
from netkit.model.state import StateBuilder
from netkit.model.types import LAST_CHANGE_TRIGGER_TIME, EndpointSlice, Node
from netkit.rules.backend import Backend, P, R, RuleCounts
from netkit.rules.registry import with_backend
from netkit.runtime.conntrack import CleanupWorker, ConntrackCleaner, Reconciled
from netkit.runtime.health import (
    ProxyHealth,
    ServiceHealthServers,
    listen_hosts,
    make_listener,
    node_eligible,
    proxy_health_app,
    service_health,
    service_health_since,
)
from netkit.runtime.metrics import Metrics
from netkit.runtime.runner import Runner
from netkit.runtime.syncer import SyncEngine, Syncer, SyncResult
from netkit.sources.store import Change, Source, Store

if TYPE_CHECKING:  # imported where used: the API client and the DNS server load only when needed
    from netkit.dns.server import DnsServer
    from netkit.dns.view import Options as DnsOptions
    from netkit.sources.kube import ApiSettings
    from netkit.sources.reflector import ReflectorOptions

# `--dns-listen`'s pod records (netkit.dns.view.PodMode): off, since kube-proxy's watches bring no
# Namespaces to check pod names against (`netkit dns` defaults to kubeadm's `pods insecure`)
DNS_PODS = "disabled"

log = logging.getLogger("netkit.daemon")

# the rule gauges after one plan, given the totals before it (None: count them in full)
RuleCounter = Callable[[Mapping[str, int] | None], RuleCounts | None]


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    config: Config
    families: tuple[IPFamily, ...] = (IPFamily.IPV4, IPFamily.IPV6)
    netns: str | None = None
    files: tuple[str, ...] = ()  # manifest source; empty: the Kubernetes API
    allow_empty: bool = False  # a manifest root without Services means no Services (else: kept as it was)
    handle_signals: bool = True  # SIGTERM/SIGINT stop the daemon (off when embedded, e.g. in a benchmark)
    api: ApiSettings | None = None  # None: in-cluster config or the default kubeconfig
    healthz_address: str | None = "0.0.0.0:10256"
    metrics_address: str | None = "127.0.0.1:10249"
    health_check_host: str = "0.0.0.0"
    dns_listen: str | None = None
    dns_upstreams: tuple[str, ...] = ()
    conntrack: bool = True
    bind_hard_fail: bool = False  # a health/metrics port that cannot be bound stops the daemon
    bind_retry: float = 5.0  # else it is logged and tried again this often (kube-proxy: 5 s)
    node_name_defaulted: bool = False  # the node name is the hostname (for the unknown-node warning)
    # iptables mode: create kube-proxy's nfacct counters in the rules' namespace at start; the rules
    # count into those that exist and the metrics read them (kube-proxy's NewProxier / syncProxyRules)
    nfacct: bool = False
    reflector_options: ReflectorOptions | None = None  # None: client-go's timings


def _nfacct_counters(netns: str | None) -> tuple[str, ...]:
    made, failed = nfacct.ensure_counters(netns)
    for name, why in failed.items():
        log.error("failed to create nfacct counter; the corresponding metric will not be updated",
                  extra={"counter": name, "error": why})
    return made


class Daemon:
    @staticmethod
    def for_mode(options: DaemonOptions) -> Daemon:
        """The daemon of the backend `options.config.mode` names."""

        def build(backend: Backend[R, P]) -> Daemon:
            return Daemon(options, backend)

        return with_backend(options.config.mode, build)

    def __init__(self, options: DaemonOptions, backend: Backend[R, P]) -> None:
        if options.nfacct:
            options = replace(options, config=replace(options.config, nfacct_counters=_nfacct_counters(options.netns)))
        cfg = options.config
        self.options = options
        self.store = Store()
        self.metrics = Metrics(cfg.mode, options.families)
        self.metrics.nfacct(cfg.nfacct_counters, lambda counter: nfacct.read(counter, options.netns))
        self.health = ProxyHealth(2 * cfg.sync_period, options.families, counts=self.metrics.count_probe)

        self._plans: list[tuple[IPFamily, RuleCounter]] = []  # the plans of the last sync, ready to count

        def record(family: IPFamily, base: R, desired: R, plan: P) -> None:
            """The syncer's on_plan (called on its thread): what each sync planned, read by _observe_rules."""
            self._plans.append((family, partial(backend.rule_counts, base, plan, desired)))

        def make_syncer(config: Config) -> SyncEngine:  # again once the Node's podCIDRs are known
            return Syncer(config, backend, self.options.families, netns=self.options.netns, on_plan=record)

        self._make_syncer = make_syncer
        # what the mode's kernel edge writes (an iptables backend "auto": detected when asked), for the leftovers
        self._writes: Callable[[IPFamily], frozenset[str]] = \
            lambda family: backend.kernel(cfg, family, options.netns).writes
        self.syncer = make_syncer(cfg)
        self.conntrack = CleanupWorker(ConntrackCleaner(options.netns), self._cleaned) if options.conntrack else None
        self.runner = Runner(self._sync, min_interval=cfg.min_sync_period, max_interval=cfg.sync_period)
        self.service_health = ServiceHealthServers(options.netns, options.health_check_host, self.health)
        self.state_builder = StateBuilder()  # unchanged services come back as the same objects
        self.state: NodeState | None = None
        self.last_result: SyncResult | None = None
        self.synced = asyncio.Event()  # set after the first successful sync
        # kube-proxy's trackerStartTime: a trigger time before the daemon started is no latency of
        # its own (a restarted daemon reads every slice again, changed hours ago)
        self._started = time.time()
        self._syncing = False
        self._gc_paused = False
        self._trigger_times: list[float] = []
        self._pending: dict[str, set[Any]] = {"Service": set(), "EndpointSlice": set()}
        self._rule_totals: dict[IPFamily, dict[str, int]] = {}
        self._node_seen = False
        self._node_changed = asyncio.Event()
        self._http_tasks: list[asyncio.Task[None]] = []
        self.serving: dict[str, str] = {}  # "healthz"/"metrics"/"dns" → HOST:PORT bound (port 0: the one chosen)
        self._dns: DnsServer | None = None
        self._dns_options: DnsOptions | None = None
        self._dns_dirty = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        source = self._source()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT) if self.options.handle_signals else ():
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        self._pause_gc()
        self.health.started()  # lastUpdated before the first sync, as kube-proxy's SyncLoop
        for f in self.options.families:  # kube-proxy synthesizes a queued time while informers sync
            self.metrics.family("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", f).set(time.time())
        http = await self._start_http()
        if self.conntrack is not None:
            self.conntrack.start()
        tasks = [asyncio.create_task(source.run(), name="source"),
                 asyncio.create_task(self._follow_changes(), name="changes"),
                 asyncio.create_task(self._start_runner(), name="runner"), *self._http_tasks,
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
            self._resume_gc()

    def _pause_gc(self) -> None:
        """Pause the cyclic garbage collector until the first sync has been tried. The start builds
        millions of objects that live on (the lists decoded, NodeState, the compiled rules) and no
        cycles worth collecting; with the collector on, its passes over that growing heap took about
        half the CPU of decoding the lists at 10,000 Services (bench/coldstart.py)."""
        self._gc_paused = gc.isenabled()
        gc.disable()

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def _source(self) -> Source:
        if self.options.files:
            from netkit.sources.files import FileSource
            return FileSource(self.options.files, self.store, allow_empty=self.options.allow_empty)
        from netkit.sources.kube import ApiSettings, KubeSource
        return KubeSource(self.options.api or ApiSettings(), self.store, node_name=self.options.config.node_name,
                          pods=self._dns_needs_pods(), options=self.options.reflector_options)

    def _dns_needs_pods(self) -> bool:
        """Pods are watched only for verified pod records (CoreDNS's `pods verified`); `--dns-listen`
        serves pod records disabled, so the DaemonSet's ClusterRole needs no Pod access."""
        if not self.options.dns_listen:
            return False
        from netkit.dns.view import PodMode
        return PodMode(DNS_PODS) is PodMode.VERIFIED

    async def _start_http(self) -> list[web.AppRunner]:
        """/healthz+/livez and /metrics. A port that cannot be bound is logged and tried again every
        `bind_retry` seconds (kube-proxy's behaviour), or stops the daemon with bind_hard_fail."""
        runners: list[web.AppRunner] = []
        servers = []
        if self.options.healthz_address:
            servers.append(("healthz", proxy_health_app(self.health), self.options.healthz_address))
        if self.options.metrics_address:
            app = web.Application()

            async def metrics(_: web.Request) -> web.Response:
                return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8",
                                    headers={"X-Content-Type-Options": "nosniff"})

            async def proxy_mode(_: web.Request) -> web.Response:  # kube-proxy's serveMetrics: the mode, no newline
                return web.Response(text=self.options.config.mode, content_type="text/plain", charset="utf-8",
                                    headers={"X-Content-Type-Options": "nosniff"})

            app.router.add_get("/metrics", metrics)
            app.router.add_get("/proxyMode", proxy_mode)
            servers.append(("metrics", app, self.options.metrics_address))
        for name, app, address in servers:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            if not await self._bind(name, runner, address):
                self._http_tasks.append(asyncio.create_task(self._bind_later(name, runner, address),
                                                            name=f"bind-{name}"))
        if self.options.dns_listen:
            await self._start_dns()
        return runners

    async def _bind(self, name: str, runner: web.AppRunner, address: str) -> bool:
        try:
            sock = make_listener(address, None)
        except OSError as exc:
            if self.options.bind_hard_fail:
                raise NetkitError(f"{name} server: cannot listen on {address}: {exc.strerror or exc}") from None
            log.error("failed to start the %s server on %s: %s; retrying in %gs", name, address,
                      exc.strerror or exc, self.options.bind_retry)
            return False
        await web.SockSite(runner, sock).start()
        self.serving[name] = _host_port(*sock.getsockname()[:2])
        log.info("serving %s on %s", name, self.serving[name])
        return True

    async def _bind_later(self, name: str, runner: web.AppRunner, address: str) -> None:
        while True:
            await asyncio.sleep(self.options.bind_retry)
            if await self._bind(name, runner, address):
                await asyncio.Event().wait()  # serving; the daemon's lifetime ends this task

    async def _start_dns(self) -> None:
        from netkit.dns.engine import Engine
        from netkit.dns.server import DnsServer
        from netkit.dns.upstream import Forwarder, parse_address, resolv_conf_upstreams
        from netkit.dns.view import Options, PodMode

        options = Options(pods=PodMode(DNS_PODS))  # kube-proxy's watches have no Namespaces to check pod names against
        self._dns_options = options
        # without --dns-upstream: the node's resolvers, as kubeadm's `forward . /etc/resolv.conf`
        upstreams = [parse_address(u) for u in self.options.dns_upstreams] or resolv_conf_upstreams()
        with listening("--dns-listen", self.options.dns_listen or ""):  # one line naming it (netkit.errors)
            self._dns = DnsServer(Engine(options), parse_address(self.options.dns_listen or "", listen=True),
                                  Forwarder(upstreams))
            bound = await self._dns.start()  # answers SERVFAIL until the first complete view is installed
        self.serving["dns"] = _host_port(bound.host, bound.port)
        log.info("serving dns on %s", self.serving["dns"])

    async def _start_runner(self) -> None:
        await self.store.wait_synced()
        self._warn_unknown_node()
        if self.options.config.detect_local_mode == "NodeCIDR":
            await self._wait_for_pod_cidrs()
        log.info("all sources synced; first sync")
        self.runner.request()
        await self.runner.run()

    def _warn_unknown_node(self) -> None:
        """Once, after the first full list: as the one-shot commands, a node name that no Node and no
        endpoint's nodeName uses (a typo, or a hostname unlike the Node's name) makes no endpoint local."""
        said = unknown_node(self.options.config.node_name, self.store.objects(),
                            defaulted=self.options.node_name_defaulted)
        if said:
            log.warning(said, extra={"node": self.options.config.node_name})

    async def _wait_for_pod_cidrs(self) -> None:
        """detectLocalMode NodeCIDR: like kube-proxy, wait for this Node's podCIDRs, then use them."""
        while True:
            node = self._my_node()
            if node is not None and node.pod_cidrs:
                break
            log.info("waiting for the Node's spec.podCIDRs (detectLocalMode NodeCIDR)",
                     extra={"node": self.options.config.node_name})
            self._node_changed.clear()
            await self._node_changed.wait()
        cfg = replace(self.options.config, node_cidrs=node.pod_cidrs)
        self.options = replace(self.options, config=cfg)
        self.syncer = self._make_syncer(cfg)
        log.info("local traffic is from the node's podCIDRs", extra={"pod_cidrs": [str(c) for c in node.pod_cidrs]})

    def _my_node(self) -> Node | None:
        name = self.options.config.node_name
        return next((n for n in self.store.objects().nodes if n.name == name), None)

    # --- changes and syncs -----------------------------------------------------------------------

    async def _follow_changes(self) -> None:
        while True:
            changes = await self.store.wait_changes()
            self._dns_dirty.set()
            self._count(changes)
            if any(c.key.kind == "Node" for c in changes.values()):
                self._node_update()
            if self.store.all_synced:  # kube-proxy queues nothing before its proxier is initialized
                self.health.queued()
                for g in self.metrics.each_family("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"):
                    g.set(time.time())
                self.runner.request()

    async def _follow_dns(self) -> None:
        """The DNS view follows the store itself: a held xtables lock or a slow sync never keeps a
        changed ClusterIP stale in DNS. Changes that arrive while a view is built coalesce."""
        from netkit.dns.view import build as build_view

        await self.store.wait_synced()
        while True:
            self._dns_dirty.clear()
            if self._dns is not None and self._dns_options is not None:
                view = await asyncio.to_thread(build_view, self.store.objects(), self._dns_options, int(time.time()))
                self._dns.set_view(view)
            await self._dns_dirty.wait()

    def _node_update(self) -> None:
        node = self._my_node()
        self._node_seen = self._node_seen or node is not None
        eligible = node_eligible(node, self._node_seen)
        if eligible != self.health.node_eligible:
            log.warning("node eligibility changed", extra={"eligible": eligible,
                                                            "node": self.options.config.node_name})
        self.health.node_eligible = eligible
        if node is not None and self.state is not None and self.options.config.detect_local_mode == "NodeCIDR" \
                and node.pod_cidrs and node.pod_cidrs != self.options.config.node_cidrs:
            log.error("the Node's podCIDRs changed; restart netkit to use them (kube-proxy exits)",
                      extra={"old": [str(c) for c in self.options.config.node_cidrs],
                             "new": [str(c) for c in node.pod_cidrs]})
        self._node_changed.set()

    def _count(self, changes: dict[Any, Change]) -> None:
        m = self.metrics
        for change in changes.values():
            kind = change.key.kind
            if kind == "Service":
                m.plain("kubeproxy_sync_proxy_rules_service_changes_total").inc()
                self._pending["Service"].add(change.key)
            elif kind == "EndpointSlice":
                m.plain("kubeproxy_sync_proxy_rules_endpoint_changes_total").inc()
                self._pending["EndpointSlice"].add(change.key)
                trigger = _trigger_time(change.after)
                if trigger is not None and trigger >= self._started:
                    self._trigger_times.append(trigger)
        self._set_pending()

    def _set_pending(self) -> None:
        """kube-proxy's *_changes_pending: objects changed since the last sync took them."""
        self.metrics.plain("kubeproxy_sync_proxy_rules_service_changes_pending").set(len(self._pending["Service"]))
        self.metrics.plain("kubeproxy_sync_proxy_rules_endpoint_changes_pending").set(
            len(self._pending["EndpointSlice"]))

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
        snapshot = time.time()  # every change queued before is in `objects` (netkit.lab.cluster.programmed)
        objects = self.store.objects()
        cfg = self.options.config
        state = self.state_builder.build(objects, cfg.node_name, cfg.node_ips)
        pending, self._trigger_times = self._trigger_times, []
        taken = {k: set(v) for k, v in self._pending.items()}
        for v in self._pending.values():
            v.clear()
        self._set_pending()
        self._plans = []
        result = await asyncio.to_thread(self.syncer.sync, state, full=full)
        self.last_result = result
        self._observe(result, pending)
        if result.full and not result.error:
            # The objects of a synced state live long and hold no cycles: keep the cyclic GC from
            # walking hundreds of thousands of them on every later sync (a 0.2 s pause at 10k services).
            gc.freeze()
        self._resume_gc()
        if result.error:
            self._failed(result)
            self._trigger_times = pending + self._trigger_times  # measured once the change lands
            for k, v in taken.items():
                self._pending[k] |= v
            self._set_pending()
            return False
        self._observe_rules(result, state)
        self.metrics.plain("netkit_sync_proxy_rules_last_snapshot_timestamp_seconds").set(snapshot)
        if self.conntrack is not None:
            # checked against the kernel, not against memory: after a start, and on every full sync,
            # every UDP port is checked (kube-proxy checks them all on every sync); the frontends that
            # went since the last sync are checked with no endpoint
            self.conntrack.submit(to_check(self.state, state, every_port=result.full))
        previous, self.state = self.state, state
        self.health.updated()
        changes = state.changes
        wanted = service_health_since(self.service_health.current, changes) \
            if changes is not None and changes.applies_to(previous) else service_health(state)
        await self.service_health.update(wanted, self._health_hosts(state))
        if not self.synced.is_set():
            await asyncio.to_thread(self._remove_leftovers)
        self.synced.set()
        log.info("sync done", extra={"full": result.full, "seconds": round(result.seconds, 4),
                                     "chains": result.chains_written})
        return True

    def _health_hosts(self, state: NodeState) -> tuple[str, ...]:
        cfg = self.options.config
        if not cfg.node_port_addresses and not cfg.primary_node_ports:
            return (self.options.health_check_host,)
        primary = [ip for f in self.options.families
                   for ip in [next((i for i in state.node.ips if IPFamily.of(i) is f), None)] if ip is not None]
        return listen_hosts(state.node.ips, cfg.node_port_addresses, primary if cfg.primary_node_ports else ())

    def _failed(self, result: SyncResult) -> None:
        m, fams = self.metrics, self.options.families
        if self.options.config.mode == "nftables":
            for c in m.each_family("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", fams):
                c.inc()
            return
        for c in m.each_family("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", fams):
            c.inc()
        if not result.full:
            for c in m.each_family("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", fams):
                c.inc()

    def _observe_rules(self, result: SyncResult, state: NodeState) -> None:
        self.metrics.no_local_endpoints(state)
        plans, self._plans = self._plans, []
        for f, count in plans:  # a full count on full syncs, else by the plan
            counts = count(None if result.full or f not in self._rule_totals else self._rule_totals[f])
            if counts is None:
                continue  # the iptables rule gauges exist in iptables mode only
            self._rule_totals[f] = dict(counts.total)
            self.metrics.iptables_rules(f, counts.total, counts.last)

    def _cleaned(self, result: Reconciled) -> None:
        """The conntrack worker's report (called on its thread)."""
        if result.deleted:
            self.metrics.plain("netkit_conntrack_udp_flows_deleted_total").inc(result.deleted)
        self.metrics.conntrack_reconciled(result.versions)
        log.log(logging.INFO if result.deleted else logging.DEBUG, "conntrack cleanup done",
                extra={"flows_read": result.flows, "flows_deleted": result.deleted,
                       "seconds": round(result.seconds, 4)})

    def _observe(self, result: SyncResult, triggers: Sequence[float]) -> None:
        m = self.metrics
        for h in m.each_family("kubeproxy_sync_proxy_rules_duration_seconds"):
            h.observe(result.seconds)
        kind = "full" if result.full else "partial"
        for h in m.each_family(f"kubeproxy_sync_{kind}_proxy_rules_duration_seconds"):
            h.observe(result.seconds)
        if not result.error:
            now = time.time()
            for g in m.each_family("kubeproxy_sync_proxy_rules_last_timestamp_seconds"):
                g.set(now)
            for t in triggers:
                for h in m.each_family("kubeproxy_network_programming_duration_seconds"):
                    h.observe(max(0.0, now - t))

    def _remove_leftovers(self) -> None:
        """After the first sync: remove what other modes left (as kube-proxy does when it starts), so
        that two dataplanes never both see traffic. A foreign reference to them keeps them (warned)."""
        from netkit.errors import NetkitError
        from netkit.rules import cleanup
        cfg, netns = self.options.config, self.options.netns
        for family in self.options.families:
            try:
                # what the mode now writes (an iptables backend "auto": detected from the canary just written)
                surveys = cleanup.leftovers(cfg.mode, family, netns, writes=self._writes(family))
                if any(not s.empty for s in surveys):
                    cleanup.execute(surveys)
                    log.info("removed what other modes left", extra={
                        "family": family.value, "removed": [d for s in surveys for d in s.describe()]})
            except NetkitError as exc:
                log.warning("other modes' rules kept: %s", exc, extra={"family": family.value})

    def cleanup(self) -> None:
        """`run --cleanup`: every mode's rules, as kube-proxy --cleanup (netkit.rules.cleanup)."""
        from netkit.rules import cleanup
        cleanup.execute([cleanup.survey(cleanup.MODES, f, self.options.netns) for f in self.options.families])


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
