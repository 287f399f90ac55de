"""`netkit dns`: serve cluster DNS from the Kubernetes API (or from manifest files), like CoreDNS.

Sources. Without `-f`, the server watches the API like `netkit run` does (`--kubeconfig FILE`,
`--master URL`, in-cluster config when neither), with the same reflectors and store
(netkit.sources.kube) but CoreDNS's watches: every Service and EndpointSlice, the Namespaces, and Pods
only for `--pods verified`. With `-f`, the files are read like `kubectl -f` and followed
(netkit.sources.files); an unreadable file keeps its last good objects. Either way names in the zone
get SERVFAIL (with the SOA) until the source's first complete list; then every change rebuilds the
view (on a worker thread, at most every REBUILD_INTERVAL, changes in between coalescing) and swaps it
in whole, independently of anything else (no rule sync to wait for).

Upstreams come from `--upstream` or else the node's resolv.conf (kubeadm: `forward . /etc/resolv.conf`);
any that is this server itself is refused, and a probe at start drops any that forwards back to us.
`--stub-domain` sends a domain to its own upstreams. `/metrics`, `/health` and `/ready` are served on
CoreDNS's ports (netkit.dns.endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from ipaddress import ip_address
from typing import Any

from aiohttp import web

from netkit.cli.filters import parse_selector
from netkit.dns.cache import CAPACITY, MAX_TTL, SERVFAIL_TTL, ForwardCache
from netkit.dns.config import DnsConfig, cache_options, corefile_digest, flags_config, load, plugins_enabled
from netkit.dns.corefile import read_file
from netkit.dns.endpoints import health_app, metrics_app, parse_http_address, ready_app, serve
from netkit.dns.engine import Engine
from netkit.dns.hosts import HostsOptions, HostsTable
from netkit.dns.hosts import parse as hosts_parse
from netkit.dns.memory import limit_arenas, trim
from netkit.dns.metrics import DnsMetrics
from netkit.dns.names import Name, name_from_text, name_to_text
from netkit.dns.scope import scoped
from netkit.dns.server import DnsServer
from netkit.dns.store import ClusterStore
from netkit.dns.upstream import (
    DEFAULT_TIMEOUT,
    HEALTH_CHECK,
    MAX_CONCURRENT,
    MAX_FAILS,
    Address,
    Forwarder,
    Policy,
    Router,
    parse_address,
    parse_stub_domain,
    resolv_conf_search,
    resolv_conf_upstreams,
)
from netkit.dns.view import MAX_TTL as MAX_RECORD_TTL
from netkit.dns.view import Options, PodMode, View, Views
from netkit.errors import NetkitError, listening
from netkit.model import Objects
from netkit.model.types import IPAddress
from netkit.sources.store import Store

_REPORTED: set[str] = set()  # invalid objects already reported
log = logging.getLogger("netkit.dns")
REBUILD_INTERVAL = 0.2  # seconds between the starts of two view builds at most


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dns", help="serve cluster DNS (UDP and TCP) from the API or from manifests",
                       description="Serve the Kubernetes DNS schema 1.1.0 for the Services, EndpointSlices, "
                                   "Namespaces and Pods of the cluster (or of manifests), like CoreDNS.")
    p.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="PATH",
                   help="serve these manifest files or directories (repeatable) instead of the API")
    g = p.add_argument_group("Kubernetes API (without -f; default: in-cluster config)")
    g.add_argument("--kubeconfig", metavar="FILE", default="", help="kubeconfig file")
    g.add_argument("--master", metavar="URL", default="", help="API server URL (overrides the kubeconfig's)")
    g.add_argument("--context", metavar="NAME", default="", help="kubeconfig context")
    p.add_argument("--conf", metavar="COREFILE", default="",
                   help="read the configuration from this Corefile, as CoreDNS's -conf (its plugins in place of "
                        "the flags below; see docs/dns.md for what netkit supports)")
    p.add_argument("--listen", default="127.0.0.1:5353", metavar="IP:PORT",
                   help="address for both UDP and TCP (default 127.0.0.1:5353)")
    p.add_argument("--zone", default="cluster.local", help="cluster domain (default cluster.local)")
    p.add_argument("--ttl", type=int, default=30, help=f"record TTL in seconds, 0..{MAX_RECORD_TTL} (default 30)")
    p.add_argument("--pods", choices=[m.value for m in PodMode], default=PodMode.INSECURE.value,
                   help="pod records a-b-c-d.<ns>.pod.<zone> (default insecure, as kubeadm's Corefile)")
    p.add_argument("--autopath", action="store_true",
                   help="walk a pod's search path server-side, as CoreDNS's `autopath @kubernetes` "
                        "(needs --pods verified; the search domains after the cluster's come from --resolv-conf)")
    p.add_argument("--loadbalance", choices=["round_robin", "off"], default="round_robin",
                   help="shuffle the A/AAAA records of each answer, as CoreDNS's loadbalance (default round_robin)")
    g = p.add_argument_group("forwarding (CoreDNS's forward)")
    g.add_argument("--upstream", action="append", default=[], metavar="IP[:PORT]",
                   help="resolver for names outside the zone (repeatable; default: resolv.conf's)")
    g.add_argument("--resolv-conf", default="/etc/resolv.conf", metavar="FILE",
                   help="where to find upstreams when --upstream is not given")
    g.add_argument("--upstream-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long to wait for each upstream (default {DEFAULT_TIMEOUT})")
    g.add_argument("--policy", choices=[x.value for x in Policy], default=Policy.RANDOM.value,
                   help="order in which upstreams are tried (default random)")
    g.add_argument("--max-concurrent", type=int, default=MAX_CONCURRENT, metavar="N",
                   help=f"queries in flight to the upstreams before REFUSED (default {MAX_CONCURRENT}; 0: no limit)")
    g.add_argument("--health-check", type=float, default=HEALTH_CHECK, metavar="SECONDS",
                   help=f"probe interval of a failing upstream (default {HEALTH_CHECK}; 0: no probes)")
    g.add_argument("--max-fails", type=int, default=MAX_FAILS, metavar="N",
                   help=f"failed probes after which an upstream is down (default {MAX_FAILS})")
    g.add_argument("--stub-domain", action="append", default=[], metavar="DOMAIN=IP[:PORT][,IP…]",
                   help="send names in DOMAIN to these resolvers (repeatable)")
    g.add_argument("--cache-ttl", type=int, default=MAX_TTL, metavar="SECONDS",
                   help=f"cache upstream answers for at most this long (default {MAX_TTL}, as `cache 30`; 0: off)")
    g.add_argument("--cache-size", type=int, default=2 * CAPACITY, metavar="N",
                   help=f"upstream answers kept at most (default {2 * CAPACITY})")
    g.add_argument("--cache-servfail", default=f"{SERVFAIL_TTL:g}s", metavar="DURATION",
                   help="keep an upstream's SERVFAIL this long (CoreDNS's `servfail`: default 5s, at most 5m; 0: not)")
    g.add_argument("--cache-prefetch", metavar="'AMOUNT [DURATION] [PERCENTAGE%%]'", default="",
                   help="refresh an answer asked AMOUNT times (no gap of DURATION, default 1m) when its TTL "
                        "falls to PERCENTAGE (default 10%%) of what it was (the cache's `prefetch`)")
    g.add_argument("--cache-serve-stale", metavar="'[DURATION] [immediate|verify]'", nargs="?", const=" ",
                   default="", help="serve an expired answer up to DURATION (default 1h) when the upstream "
                                    "fails (the cache's `serve_stale`; default mode immediate)")
    g.add_argument("--cache-keepttl", action="store_true", help="serve cached answers with the TTL they came with")
    g = p.add_argument_group("observability (CoreDNS's prometheus, health, ready, log)")
    g.add_argument("--metrics-listen", default=":9153", metavar="[IP]:PORT",
                   help="/metrics (default :9153; empty disables)")
    g.add_argument("--health-listen", default=":8080", metavar="[IP]:PORT",
                   help="/health (default :8080; empty disables)")
    g.add_argument("--ready-listen", default=":8181", metavar="[IP]:PORT",
                   help="/ready: 503 until synced, then 200 (default :8181; empty disables)")
    g.add_argument("--log-queries", action="store_true", help="log every query in CoreDNS's log format (slow)")
    g.add_argument("--lameduck", default="0", metavar="DURATION",
                   help="on SIGTERM keep answering this long with /ready at 503 (health's lameduck; default 0)")
    g = p.add_argument_group("TCP (RFC 7766)")
    g.add_argument("--tcp-idle-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="close a TCP connection idle this long (default 10)")
    g.add_argument("--tcp-max-connections", type=int, default=256, metavar="N",
                   help="open TCP connections at most; a new one evicts the longest idle (default 256)")
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                   help="event loop (auto: uvloop when installed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    flags = flags_config(args)
    config = load(args.conf, flags) if args.conf else flags
    if "-" in config.files:
        raise NetkitError("netkit dns reads files it can watch; '-' (stdin) is not supported")
    _http_addresses(config)  # a bad address is an error before anything starts
    limit_arenas()
    with asyncio.Runner(loop_factory=_loop_factory(config.loop)) as runner:
        return runner.run(_serve(config, flags))


def _http_addresses(config: DnsConfig) -> dict[str, tuple[str | None, int] | None]:
    return {flag: parse_http_address(getattr(config, flag.removeprefix("--").replace("-", "_")), flag)
            for flag in ("--metrics-listen", "--health-listen", "--ready-listen")}


def _options(config: DnsConfig) -> Options:
    try:
        return Options(zone=name_from_text(config.zone), ttl=config.ttl, pods=PodMode(config.pods),
                       loadbalance=config.loadbalance, local_ips=_local_ips(config.listen), autopath=config.autopath,
                       endpoint_pod_names=config.endpoint_pod_names,
                       autopath_search=resolv_conf_search(config.resolv_conf) if config.autopath else ())
    except ValueError as exc:
        raise NetkitError(str(exc)) from exc


def _local_ips(listen: str) -> tuple[IPAddress, ...]:
    """The server's own addresses, for the apex NS (CoreDNS's nsAddrs): the listening address when it
    is one, and POD_IP when the pod's spec sets it from the downward API)."""
    found = [os.environ.get("POD_IP", "")]
    with contextlib.suppress(ValueError, NetkitError):
        found.append(parse_address(listen).host)
    out: list[IPAddress] = []
    for text in found:
        with contextlib.suppress(ValueError):
            addr = ip_address(text)
            if not (addr.is_unspecified or addr.is_loopback):
                out.append(addr)
    return tuple(dict.fromkeys(out))


def _upstreams(config: DnsConfig) -> list[Address]:
    if config.upstreams:
        return [parse_address(u) for u in config.upstreams]
    return resolv_conf_upstreams(config.resolv_conf) if config.resolv_conf else []


def _router(config: DnsConfig, metrics: DnsMetrics) -> Router:
    def forwarder(upstreams: list[Address]) -> Forwarder:
        return Forwarder(upstreams, config.upstream_timeout, policy=Policy(config.policy),
                         max_concurrent=config.max_concurrent, health_check=config.health_check,
                         max_fails=config.max_fails, counters=metrics.proxy)

    stubs: dict[Name, Forwarder] = {}
    for text in config.stub_domains:
        name, ups = parse_stub_domain(text)
        stubs[name] = forwarder(ups)
    return Router(forwarder(_upstreams(config)), stubs)


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise NetkitError("--loop uvloop: the uvloop package is not installed") from None
        return None
    return uvloop.new_event_loop


def _server_label(listen: Address) -> str:
    """CoreDNS's `server` label: dns://<bind>:<port>."""
    host = "" if listen.host in ("0.0.0.0", "::") else (f"[{listen.host}]" if ":" in listen.host else listen.host)
    return f"dns://{host}:{listen.port}"


class _Source:
    """The store and the task that fills it (the API's watches or the files). It outlives a reload
    whose Corefile keeps the same source, so a reload costs no relist."""

    def __init__(self, config: DnsConfig) -> None:
        self.key = _source_key(config)
        self.synced = False
        self.ahead: View | None = None  # built for the next configuration by a reload; its server takes it
        self.store: Store | ClusterStore
        if config.files:
            from netkit.sources.files import FileSource
            self.store = Store()
            source: Any = FileSource(list(config.files), self.store)
        else:
            from netkit.dns.decode import decode, decode_unlabelled
            from netkit.sources.kube import ApiSettings, KubeSource  # the API client: only when used
            self.store = ClusterStore()  # the reflectors' objects, reduced to what answers read
            source = KubeSource(ApiSettings(config.kubeconfig, config.master, config.context), self.store,
                                pods=config.pods == PodMode.VERIFIED.value, dns=True,
                                decode=decode if config.labels else decode_unlabelled)
        self.feed: asyncio.Task[None] = asyncio.create_task(source.run(), name="source")

    async def first_sync(self, stop: asyncio.Event) -> bool:
        """Wait for the first complete list; False when stopped first."""
        if not self.synced:
            if (await _first_of(self.feed, synced=self.store.wait_synced(), stop=stop.wait()))[0] == "stop":
                return False
            _report(self.store)
            if self.key[0] and any(p.kind == "?" for p in self.store.problems.values()):
                raise NetkitError("cannot read the manifests (see above)")
            self.synced = True
        return True

    async def close(self) -> None:
        self.feed.cancel()
        await asyncio.gather(self.feed, return_exceptions=True)


def _source_key(config: DnsConfig) -> tuple[Any, ...]:
    return (config.files, config.kubeconfig, config.master, config.context, config.pods == PodMode.VERIFIED.value,
            bool(config.labels))  # the objects keep their labels only for the `labels` option


async def _serve(config: DnsConfig, flags: DnsConfig) -> int:
    """Serve `config`; with `reload`, a changed Corefile that reads well replaces it (the source stays
    when the new one watches the same, and the new server starts with a view built beforehand, so
    the zone's names are answered throughout), one that does not is logged and the old one keeps
    serving; so is one that cannot start (a port in use): the old one starts again."""
    stop = _stop_event()
    source: _Source | None = None
    metrics: DnsMetrics | None = None
    running: DnsConfig | None = None  # the configuration a reload replaces, until the new one starts
    try:
        while True:
            if source is None or source.key != _source_key(config):
                if source is not None:
                    await source.close()
                source = _Source(config)
            label = _server_label(parse_address(config.listen))
            plugins = plugins_enabled(config)
            if metrics is None or (metrics.server, metrics.plugins) != (label, plugins):
                failed = metrics.reload_failed if metrics is not None else 0
                metrics = DnsMetrics(label, plugins=plugins)  # else the counters go on, as CoreDNS's do
                metrics.reload_failed = failed
            metrics.reload_digest = config.conf_digest if config.reload > 0 else ""
            try:
                outcome = await _run(config, flags, source, stop, metrics)
            except _CannotStart as exc:
                if running is None:
                    raise NetkitError(str(exc)) from None
                metrics.reload_failed += 1
                _say(f"[ERROR] plugin/reload: {exc}; starting the previous Corefile again")
                config, running, source.ahead = running, None, None
                continue
            if outcome is None:
                return 0
            _say(f"reloading {config.conf}")
            running, (config, source.ahead) = config, outcome
            del outcome  # the view is the next server's: no reference here outlives its swap
    finally:
        if source is not None:
            await source.close()


class _CannotStart(NetkitError):
    """The server's sockets cannot be opened (a port in use, an address not on this host)."""


async def _run(config: DnsConfig, flags: DnsConfig, source: _Source, stop: asyncio.Event,
               metrics: DnsMetrics) -> tuple[DnsConfig, View | None] | None:
    """One configuration's server until SIGTERM (None: after the lameduck) or a new Corefile (returned
    with its view when the source stays). `source.ahead`: a view already built for this configuration.

    The server's engine holds the only reference to the view it answers from: a view kept in a
    variable here would stay alive beside every later one (at 10,000 Services and 50,000 Pods,
    ~50 MiB more resident after the first change)."""
    options, http = _options(config), _http_addresses(config)
    listen = parse_address(config.listen)
    cache = ForwardCache(metrics, cache_options(config))
    engine = Engine(options, metrics=metrics)
    views = Views(options)  # a rebuild reuses what did not change
    engine.rewrite = config.rewrite
    server = DnsServer(engine, listen, _router(config, metrics),
                       tcp_idle=config.tcp_idle_timeout, max_tcp=max(1, config.tcp_max_connections), cache=cache,
                       query_log=_print if config.log_queries else None)
    try:
        with listening("--listen", str(listen)):  # in use, not on this host: one line (netkit.errors)
            addr = await server.start()  # SERVFAIL until the first complete view below
    except (NetkitError, OSError) as exc:
        raise _CannotStart(str(exc)) from None
    if source.ahead is not None:
        server.set_view(source.ahead)
        source.ahead = None
    runners: list[web.AppRunner] = []
    tasks: list[asyncio.Task[Any]] = []
    if config.hosts is not None:
        stamp, table = _read_hosts(config.hosts, None)
        _use_hosts(server.engine, metrics, config.hosts, stamp, table or hosts_parse("", config.hosts))
        if config.hosts.reload > 0:
            tasks.append(asyncio.create_task(_reload_hosts(server.engine, metrics, config.hosts, stamp)))
    draining = asyncio.Event()
    try:
        apps: dict[str, Callable[[], web.Application]] = {
            "--metrics-listen": lambda: metrics_app(metrics), "--health-listen": health_app,
            "--ready-listen": lambda: ready_app(lambda: server.engine.view is not None and not draining.is_set())}
        for flag, address in http.items():
            if address is not None:
                try:
                    runners.append(await serve(apps[flag](), address, flag))
                except NetkitError as exc:
                    raise _CannotStart(str(exc)) from None
        reloads: asyncio.Queue[DnsConfig] = asyncio.Queue(1)
        if config.conf and config.reload > 0:
            tasks.append(asyncio.create_task(_watch(config, flags, reloads, metrics)))
        if not await source.first_sync(stop):
            return None
        if server.engine.view is None:
            await _install(server, source.store, config, views)
        _say(f"serving {name_to_text(options.zone)} on {addr} (UDP and TCP), "
             f"{_services(server)} services, upstreams: {', '.join(map(str, server.forwarder.usable)) or 'none'}")
        if config.loop_check:
            tasks.append(asyncio.create_task(_check_loops(server)))
        while True:
            event, value = await _first_of(source.feed, changed=source.store.changed.wait(), stop=stop.wait(),
                                    reload=reloads.get())
            if event == "stop":
                await _lameduck(config.lameduck, draining)
                return None
            if event == "reload":
                following: DnsConfig = value
                if _source_key(following) != source.key:
                    return following, None
                source.store.take_changes()
                ahead = await asyncio.to_thread(_build, source.store.objects(), following)
                return following, ahead
            started = time.monotonic()
            _report(source.store)
            await _install(server, source.store, config, views)
            # Changes that arrive meanwhile coalesce into the next view (a view of 10,000 services
            # takes ~0.1 s to build), so a churning cluster costs DNS at most a fraction of its time.
            await asyncio.sleep(max(0.0, REBUILD_INTERVAL - (time.monotonic() - started)))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in runners:
            await r.cleanup()
        await server.close()


async def _install(server: DnsServer, store: Store | ClusterStore, config: DnsConfig, views: Views) -> None:
    """Build the view from the store's snapshot on a worker thread (the loop keeps answering), then
    swap it in."""
    store.take_changes()
    server.set_view(await asyncio.to_thread(_build, store.objects(), config, views))
    trim()  # the view replaced and the lists' pages are garbage now: give their pages back


def _services(server: DnsServer) -> int:
    return len(server.engine.view.services) if server.engine.view is not None else 0


def _build(objects: Objects, config: DnsConfig, views: Views | None = None) -> View:
    """The view of what the configuration exposes (the kubernetes plugin's namespaces, labels, noendpoints);
    `views`: the builder of the views before it (else one of its own)."""
    shown = scoped(objects, frozenset(config.namespaces), parse_selector(config.labels) if config.labels else (),
                   endpoints=not config.noendpoints)
    return (views or Views(_options(config))).build(shown, int(time.time()))


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _first_of(feed: asyncio.Task[None], **waits: Coroutine[Any, Any, Any]) -> tuple[str, Any]:
    """The name and result of the wait that finishes first; the source's error if it failed."""
    futures = {name: asyncio.ensure_future(w) for name, w in waits.items()}
    done, _ = await asyncio.wait([*futures.values(), feed], return_when=asyncio.FIRST_COMPLETED)
    for f in futures.values():
        f.cancel()
    if feed in done:
        feed.result()  # raises what stopped the source (a missing file, no API configuration, …)
        raise NetkitError("the source stopped")
    name = next(n for n, f in futures.items() if f in done)
    return name, futures[name].result()


async def _lameduck(seconds: float, draining: asyncio.Event) -> None:
    """CoreDNS's `health { lameduck }`: /ready stops answering 200 while queries are still answered,
    so the Service's endpoints drop this pod before it stops."""
    if seconds > 0:
        draining.set()
        _say(f"lameduck: answering for {seconds:g}s more, /ready now 503")
        await asyncio.sleep(seconds)


async def _watch(config: DnsConfig, flags: DnsConfig, reloads: asyncio.Queue[DnsConfig], metrics: DnsMetrics) -> None:
    """CoreDNS's `reload`: read the Corefile every interval (± jitter); a new one that reads well is put
    in `reloads`; one that does not is logged (once per change) and the old configuration stays."""
    digest = config.conf_digest
    rng = random.Random()
    while True:
        await asyncio.sleep(config.reload + rng.uniform(-config.reload_jitter, config.reload_jitter))
        try:
            text = await asyncio.to_thread(read_file, config.conf)
        except OSError as exc:
            _say(f"[ERROR] plugin/reload: cannot read {config.conf}: {exc.strerror or exc}")
            continue
        now = corefile_digest(text)
        if now == digest:
            continue
        digest = now
        try:
            following = await asyncio.to_thread(load, config.conf, flags)
        except NetkitError as exc:
            metrics.reload_failed += 1  # coredns_reload_failed_total
            _say(f"[ERROR] plugin/reload: Corefile changed but reload failed: {exc}; keeping the running one")
            continue
        if following == config:
            continue
        await reloads.put(following)
        return


def _report(store: Store | ClusterStore) -> None:
    """Say each invalid object once, not again on every change of the cluster."""
    for problem in map(str, store.problems.values()):
        if problem not in _REPORTED:
            _REPORTED.add(problem)
            _say(f"invalid object left out: {problem}")


def _read_hosts(options: HostsOptions, stamp: tuple[int, int] | None) -> tuple[tuple[int, int], HostsTable | None]:
    """The hosts plugin's table when the file's size or mtime changed since `stamp` (as CoreDNS), else
    None; a file that cannot be read keeps what was read before (the inline entries at first)."""
    try:
        info = os.stat(options.path)
        if (info.st_mtime_ns, info.st_size) == stamp:
            return stamp, None
        return (info.st_mtime_ns, info.st_size), hosts_parse(read_file(options.path), options)
    except OSError as exc:
        if stamp is not None:
            return stamp, None
        log.warning("hosts: %s: %s", options.path, exc.strerror or exc)
        return (-1, -1), hosts_parse("", options)


async def _reload_hosts(engine: Engine, metrics: DnsMetrics, options: HostsOptions, stamp: tuple[int, int]) -> None:
    while True:
        await asyncio.sleep(options.reload)
        stamp, table = await asyncio.to_thread(_read_hosts, options, stamp)
        if table is not None:
            _use_hosts(engine, metrics, options, stamp, table)


def _use_hosts(engine: Engine, metrics: DnsMetrics, options: HostsOptions, stamp: tuple[int, int],
               table: HostsTable) -> None:
    """Serve `table`; CoreDNS's hosts gauges: its entries (addresses per name, file and inline), and
    the file's modification time (0 while it could not be read)."""
    engine.set_hosts(options, table)
    metrics.hosts = (sum(map(len, table.by_name.values())), max(0, stamp[0]) / 1e9)


async def _check_loops(server: DnsServer) -> None:
    for up in await server.check_loops():
        _say(f"upstream {up} forwards back to this server: not using it")


def _say(*lines: str) -> None:
    for line in lines:
        print(f"netkit dns: {line}", file=sys.stderr, flush=True)


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
