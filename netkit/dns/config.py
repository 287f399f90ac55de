"""The configuration of `netkit dns`, one frozen value built either from the flags or from a Corefile
(CoreDNS's `-conf`): whichever way it is written, the server runs from a `DnsConfig`.

`COMPATIBILITY` is the table of CoreDNS plugins and options netkit knows: for each, whether netkit
does it (and which field it sets, with CoreDNS's default) or refuses it. A Corefile that asks for
anything netkit does not do is refused with one line naming the file, line and column
(`FILE:LINE:COL: plugin: option: not supported by netkit`), never silently ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from ipaddress import ip_address
from typing import Any

from netkit.cli.filters import parse_selector
from netkit.config import parse_duration
from netkit.dns.cache import (
    CAPACITY,
    MAX_SERVFAIL_TTL,
    MAX_TTL,
    MIN_TTL,
    PREFETCH_DURATION,
    PREFETCH_PERCENTAGE,
    SERVFAIL_TTL,
    CacheOptions,
    parse_option,
)
from netkit.dns.corefile import CorefileError, Directive, ServerBlock, Token, parse, read_file
from netkit.dns.hosts import DEFAULT_PATH, DEFAULT_RELOAD, DEFAULT_TTL, HostsOptions, parse_line
from netkit.dns.names import Name, name_from_text
from netkit.dns.rewrite import NameRule, RewriteError, name_rule
from netkit.dns.upstream import DEFAULT_TIMEOUT, HEALTH_CHECK, MAX_CONCURRENT, MAX_FAILS
from netkit.errors import NetkitError


@dataclass(frozen=True)
class DnsConfig:
    """Everything `netkit dns` runs from. The defaults are the flags' defaults."""

    # the source
    files: tuple[str, ...] = ()
    kubeconfig: str = ""
    master: str = ""
    context: str = ""
    # the server
    listen: str = "127.0.0.1:5353"
    zone: str = "cluster.local"
    ttl: int = 30
    pods: str = "insecure"
    loadbalance: bool = True
    # forwarding
    upstreams: tuple[str, ...] = ()  # empty: the nameservers of resolv_conf (none when that is empty too)
    resolv_conf: str = "/etc/resolv.conf"
    upstream_timeout: float = DEFAULT_TIMEOUT
    policy: str = "random"
    max_concurrent: int = MAX_CONCURRENT
    health_check: float = HEALTH_CHECK
    max_fails: int = MAX_FAILS
    stub_domains: tuple[str, ...] = ()  # DOMAIN=IP[:PORT][,IP…]
    loop_check: bool = True
    # the cache of upstream answers
    cache_ttl: int = MAX_TTL
    cache_min_ttl: int = MIN_TTL
    cache_size: int = 2 * CAPACITY
    cache_servfail: float = SERVFAIL_TTL
    cache_prefetch: int = 0  # the cache's `prefetch AMOUNT [DURATION] [PERCENTAGE%]`; 0: off
    cache_prefetch_duration: float = PREFETCH_DURATION
    cache_prefetch_percentage: int = PREFETCH_PERCENTAGE
    cache_serve_stale: float = 0.0  # the cache's `serve_stale [DURATION] [REFRESH_MODE]`; 0: off
    cache_serve_stale_verify: bool = False
    cache_keepttl: bool = False
    autopath: bool = False  # `autopath @kubernetes`
    # observability and lifecycle
    metrics_listen: str = ":9153"
    health_listen: str = ":8080"
    ready_listen: str = ":8181"
    log_queries: bool = False
    lameduck: float = 0.0
    reload: float = 0.0  # seconds between checks of the Corefile; 0: never
    reload_jitter: float = 0.0
    namespaces: tuple[str, ...] = ()  # kubernetes `namespaces`: only these (empty: all)
    labels: str = ""  # kubernetes `labels`: a label selector for Services and EndpointSlices
    noendpoints: bool = False  # kubernetes `noendpoints`
    endpoint_pod_names: bool = False  # kubernetes `endpoint_pod_names`
    hosts: HostsOptions | None = None  # the `hosts` plugin (None: off)
    rewrite: tuple[NameRule, ...] = ()  # the `rewrite name` rules, in order
    conf: str = ""  # the Corefile this came from
    conf_digest: str = ""  # its SHA-512, for reload
    # TCP and the event loop (flags only)
    tcp_idle_timeout: float = 10.0
    tcp_max_connections: int = 256
    loop: str = "auto"


DEFAULTS = DnsConfig()
FLAGS_ONLY = ("files", "upstream_timeout", "tcp_idle_timeout", "tcp_max_connections", "loop")
# With --conf, what the pod's environment gives CoreDNS: its in-cluster API configuration (when the
# kubernetes plugin names no kubeconfig or endpoint) and the file read for /etc/resolv.conf.
STAND_INS = ("kubeconfig", "master", "context", "resolv_conf")
POD_RESOLV_CONF = "/etc/resolv.conf"
FROM_COREFILE_ONLY = ("reload", "reload_jitter", "conf", "conf_digest", "loop_check", "namespaces", "labels",
                      "noendpoints", "endpoint_pod_names", "hosts", "rewrite")


def flag_of(field: str) -> str:
    return {"stub_domains": "--stub-domain", "upstreams": "--upstream", "log_queries": "--log-queries",
            "files": "-f", "cache_prefetch_duration": "--cache-prefetch",
            "cache_prefetch_percentage": "--cache-prefetch", "cache_serve_stale_verify": "--cache-serve-stale",
            }.get(field, "--" + field.replace("_", "-"))


def from_args(args: Any) -> DnsConfig:
    """The flags of `netkit dns`, or with `--conf` the Corefile plus the flags it does not cover."""
    config = flags_config(args)
    return load(args.conf, config) if args.conf else config


def flags_config(args: Any) -> DnsConfig:
    """The flags alone; with `--conf`, the ones a Corefile does not set (the others are refused)."""
    servfail = _servfail(args.cache_servfail)
    config = DnsConfig(
        files=tuple(args.files), kubeconfig=args.kubeconfig, master=args.master, context=args.context,
        listen=args.listen, zone=args.zone, ttl=args.ttl, pods=args.pods, loadbalance=args.loadbalance != "off",
        upstreams=tuple(args.upstream), resolv_conf=args.resolv_conf, upstream_timeout=args.upstream_timeout,
        policy=args.policy, max_concurrent=args.max_concurrent, health_check=args.health_check,
        max_fails=args.max_fails, stub_domains=tuple(args.stub_domain), cache_ttl=args.cache_ttl,
        cache_size=args.cache_size, cache_servfail=servfail, metrics_listen=args.metrics_listen,
        health_listen=args.health_listen, ready_listen=args.ready_listen, log_queries=args.log_queries,
        lameduck=_seconds(args.lameduck, "--lameduck"), tcp_idle_timeout=args.tcp_idle_timeout,
        tcp_max_connections=args.tcp_max_connections, loop=args.loop, autopath=args.autopath,
        **_cache_flags(args))
    given = [f.name for f in fields(DnsConfig) if f.name not in FLAGS_ONLY + STAND_INS
             and getattr(config, f.name) != getattr(DEFAULTS, f.name)]
    if args.conf and given:
        raise NetkitError(f"{flag_of(given[0])}: cannot be combined with --conf (the Corefile sets it)")
    return config


def _cache_flags(args: Any) -> dict[str, Any]:
    """--cache-prefetch, --cache-serve-stale, --cache-keepttl: each one line of the cache block."""
    options = CacheOptions()
    for option, text in (("prefetch", args.cache_prefetch), ("serve_stale", args.cache_serve_stale),
                         ("keepttl", " " if args.cache_keepttl else "")):
        if text:
            try:
                options = parse_option(options, option, text.split())
            except ValueError as exc:
                raise NetkitError(f"--cache-{option.replace('_', '-')}: {exc}") from None
    return _from_cache_options(options)


def _from_cache_options(o: CacheOptions) -> dict[str, Any]:
    return {"cache_prefetch": o.prefetch, "cache_prefetch_duration": o.prefetch_duration,
            "cache_prefetch_percentage": o.prefetch_percentage, "cache_serve_stale": o.serve_stale,
            "cache_serve_stale_verify": o.serve_stale_verify, "cache_keepttl": o.keepttl}


def cache_options(config: DnsConfig) -> CacheOptions:
    """The cache's options (netkit.dns.cache) from a configuration: `cache_ttl` is `cache TTL`,
    `cache_size` both types' capacities together."""
    per_type = max(0, config.cache_size) // 2
    return CacheOptions(
        enabled=config.cache_ttl > 0, success_capacity=per_type, denial_capacity=per_type,
        success_ttl=max(0, config.cache_ttl), denial_ttl=max(0, config.cache_ttl), success_minttl=config.cache_min_ttl,
        denial_minttl=config.cache_min_ttl, servfail=config.cache_servfail, prefetch=config.cache_prefetch,
        prefetch_duration=config.cache_prefetch_duration, prefetch_percentage=config.cache_prefetch_percentage,
        serve_stale=config.cache_serve_stale, serve_stale_verify=config.cache_serve_stale_verify,
        keepttl=config.cache_keepttl)


def load(path: str, flags: DnsConfig = DEFAULTS, env: Mapping[str, str] | None = None) -> DnsConfig:
    """The configuration a Corefile describes; the flags-only fields come from `flags`."""
    try:
        text = read_file(path)
    except OSError as exc:
        raise NetkitError(f"--conf {path}: cannot read: {exc.strerror or exc}") from None
    try:
        return replace(from_corefile(parse(text, path, env), flags, path), conf_digest=corefile_digest(text))
    except CorefileError as exc:
        raise NetkitError(str(exc)) from None


def corefile_digest(text: str) -> str:
    return hashlib.sha512(text.encode()).hexdigest()


def _servfail(text: str) -> float:
    """--cache-servfail: a duration (5s, 1m) or seconds, checked as CoreDNS's cache setup checks it."""
    try:
        seconds = _seconds(text, "--cache-servfail")
        if seconds < 0:
            raise ValueError("invalid negative ttl for servfail")
        if seconds > MAX_SERVFAIL_TTL:
            raise ValueError("caching SERVFAIL responses over 5 minutes is not permitted")
    except (ValueError, NetkitError) as exc:
        raise NetkitError(f"--cache-servfail: {str(exc).removeprefix('--cache-servfail: ')}") from None
    return seconds


def _seconds(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        return parse_duration(text, what)


# --- the compatibility table -----------------------------------------------------------------------


@dataclass(frozen=True)
class Support:
    plugin: str
    option: str  # "" for the plugin's own arguments
    field: str  # the DnsConfig field it sets; "" when netkit refuses it (or it changes nothing)
    default: str  # CoreDNS's default
    supported: bool = True
    note: str = ""


_NO = False
COMPATIBILITY: tuple[Support, ...] = (
    Support("bind", "", "listen", "every address", note="one IP address"),
    Support("errors", "", "", "no error log", note="netkit logs errors always"),
    Support("errors", "stacktrace", "", "off", _NO),
    Support("errors", "consolidate", "", "none", _NO),
    Support("health", "", "health_listen", ":8080"),
    Support("health", "lameduck", "lameduck", "0s"),
    Support("ready", "", "ready_listen", ":8181"),
    Support("prometheus", "", "metrics_listen", "localhost:9153"),
    Support("kubernetes", "", "zone", "the server block's zones", note="one cluster zone; in-addr.arpa and "
            "ip6.arpa only with fallthrough"),
    Support("kubernetes", "endpoint", "master", "in-cluster config"),
    Support("kubernetes", "kubeconfig", "kubeconfig", "in-cluster config"),
    Support("kubernetes", "pods", "pods", "disabled"),
    Support("kubernetes", "ttl", "ttl", "5"),
    Support("kubernetes", "fallthrough", "", "none", note="in-addr.arpa and ip6.arpa: names netkit does not "
            "know go to forward"),
    Support("kubernetes", "namespaces", "namespaces", "all"),
    Support("kubernetes", "labels", "labels", "all"),
    Support("kubernetes", "namespace_labels", "", "all", _NO),
    Support("kubernetes", "endpoint_pod_names", "endpoint_pod_names", "off"),
    Support("kubernetes", "noendpoints", "noendpoints", "off"),
    Support("kubernetes", "tls", "", "none", _NO),
    Support("kubernetes", "ignore", "", "none", _NO),
    Support("kubernetes", "multicluster", "", "none", _NO),
    Support("kubernetes", "startup_timeout", "", "5s", _NO),
    Support("kubernetes", "apiserver_qps", "", "0", _NO),
    Support("kubernetes", "apiserver_burst", "", "0", _NO),
    Support("kubernetes", "apiserver_max_inflight", "", "0", _NO),
    Support("forward", "", "upstreams", "none", note="FROM is the block's zone; TO: addresses or one "
            "resolv.conf"),
    Support("forward", "policy", "policy", "random"),
    Support("forward", "health_check", "health_check", "0.5s", note="no_rec and domain refused"),
    Support("forward", "max_fails", "max_fails", "2"),
    Support("forward", "max_concurrent", "max_concurrent", "unlimited"),
    Support("forward", "prefer_udp", "", "the client's protocol", note="netkit always asks over UDP first"),
    Support("forward", "expire", "", "10s", note="netkit keeps no upstream connections"),
    Support("forward", "except", "", "none", _NO),
    Support("forward", "force_tcp", "", "off", _NO),
    Support("forward", "tls", "", "none", _NO),
    Support("forward", "tls_servername", "", "none", _NO),
    Support("forward", "next", "", "none", _NO),
    Support("forward", "failover", "", "none", _NO),
    Support("forward", "failfast_all_unhealthy_upstreams", "", "off", _NO),
    Support("cache", "", "cache_ttl", "3600"),
    Support("cache", "success", "cache_size", "9984 3600 5", note="one TTL for success and denial"),
    Support("cache", "denial", "cache_size", "9984 3600 5", note="one TTL for success and denial"),
    Support("cache", "servfail", "cache_servfail", "5s"),
    Support("cache", "disable", "", "none", note="the cluster zone only: netkit never caches cluster "
            "answers past a change"),
    Support("cache", "prefetch", "cache_prefetch", "off; AMOUNT 1m 10%"),
    Support("cache", "serve_stale", "cache_serve_stale", "off; 1h immediate"),
    Support("cache", "keepttl", "cache_keepttl", "off"),
    Support("loop", "", "loop_check", "off"),
    Support("reload", "", "reload", "30s 15s"),
    Support("loadbalance", "", "loadbalance", "off", note="round_robin"),
    Support("log", "", "log_queries", "off", note="the default format, every name"),
    Support("hosts", "", "hosts", "/etc/hosts, the server block's zones", note="inline entries too"),
    Support("hosts", "ttl", "hosts", "3600"),
    Support("hosts", "no_reverse", "hosts", "PTR records on"),
    Support("hosts", "reload", "hosts", "5s"),
    Support("hosts", "fallthrough", "hosts", "none"),
    Support("rewrite", "", "rewrite", "", note="the name field: exact, prefix, suffix, substring, regex; "
            "answer auto, name, value"),
    Support("autopath", "", "autopath", "off", note="@kubernetes with pods verified"),
)
_TABLE = {(s.plugin, s.option): s for s in COMPATIBILITY}


def plugins_enabled(config: DnsConfig) -> tuple[str, ...]:
    """The CoreDNS plugins a configuration amounts to (coredns_plugin_enabled), sorted."""
    on = {"errors": True, "kubernetes": True, "health": bool(config.health_listen),
          "ready": bool(config.ready_listen), "prometheus": bool(config.metrics_listen),
          "forward": bool(config.upstreams or config.resolv_conf), "cache": config.cache_ttl > 0,
          "loop": config.loop_check, "reload": config.reload > 0, "loadbalance": config.loadbalance,
          "log": config.log_queries, "autopath": config.autopath,
          "hosts": config.hosts is not None, "rewrite": bool(config.rewrite)}
    return tuple(sorted(name for name, yes in on.items() if yes))

# What a Corefile's absence of a plugin means (the plugin is off), as opposed to the flags' defaults.
_COREFILE_BASE = {
    "ttl": 5, "pods": "disabled", "loadbalance": False, "upstreams": (), "resolv_conf": "",
    "max_concurrent": 0, "loop_check": False, "cache_ttl": 0, "cache_size": 0, "metrics_listen": "",
    "health_listen": "", "ready_listen": "", "log_queries": False, "lameduck": 0.0, "listen": "",
}
_REVERSE = ("in-addr.arpa", "ip6.arpa")


def _fail(tok: Token, plugin: str, option: str, reason: str) -> CorefileError:
    return CorefileError(tok, f"{plugin}: {option + ': ' if option else ''}{reason}")


def _unsupported(tok: Token, plugin: str, option: str = "") -> CorefileError:
    return _fail(tok, plugin, option, "not supported by netkit")


def _check_known(d: Directive) -> None:
    """The plugin and its block's options are ones netkit does; anything else is one error line."""
    plugin = d.name.text
    top = _TABLE.get((plugin, ""))
    if top is None or not top.supported:
        if top is None and not any(s.plugin == plugin for s in COMPATIBILITY):
            raise _fail(d.name, plugin, "", "unknown plugin (not supported by netkit)")
        raise _unsupported(d.name, plugin)
    for opt in d.block:
        if plugin == "hosts" and _is_address(opt.name.text.partition("%")[0]):
            continue  # an inline hosts(5) line
        if plugin == "rewrite":
            continue  # a rule's lines, read by _rewrite
        row = _TABLE.get((plugin, opt.name.text))
        if row is None:
            raise _fail(opt.name, plugin, opt.name.text, "unknown property (not supported by netkit)")
        if not row.supported:
            raise _unsupported(opt.name, plugin, opt.name.text)


class _Builder:
    """Walks one server block's plugins into the fields of a DnsConfig."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.out = dict(base)
        self.seen: dict[str, Directive] = {}
        self.cache_ttls: dict[str, tuple[int, int]] = {}

    def plugin(self, d: Directive, zone: str) -> None:
        _check_known(d)
        name = d.name.text
        if name in self.seen and name != "rewrite":
            raise _fail(d.name, name, "", "this plugin can only be used once per server block")
        self.seen[name] = d
        handler: Callable[[Directive, str], None] = getattr(self, "_" + name)
        handler(d, zone)

    # -- the plugins ---------------------------------------------------------------------------------

    def _bind(self, d: Directive, _: str) -> None:
        host = _one(d, "bind", "an IP address")
        try:
            ip_address(host.text)
        except ValueError:
            raise _fail(host, "bind", "", f"{host.text!r}: only an IP address is supported by netkit") from None
        self.out["bind"] = host.text

    def _errors(self, d: Directive, _: str) -> None:
        _no_args(d, "errors")

    def _health(self, d: Directive, _: str) -> None:
        self.out["health_listen"] = _http(d, "health", ":8080")
        for opt in d.block:
            arg = _one(opt, "health", "a duration", option="lameduck")
            seconds = _duration(arg, "health", "lameduck")
            if seconds < 0:
                raise _fail(arg, "health", "lameduck", f"lameduck duration must be positive: {arg.text}")
            self.out["lameduck"] = seconds

    def _ready(self, d: Directive, _: str) -> None:
        self.out["ready_listen"] = _http(d, "ready", ":8181")

    def _prometheus(self, d: Directive, _: str) -> None:
        self.out["metrics_listen"] = _http(d, "prometheus", "localhost:9153")

    def _kubernetes(self, d: Directive, zone: str) -> None:
        zones = [_zone(t, "kubernetes") for t in d.args] or [zone]
        cluster = [z for z in zones if z not in _REVERSE]
        if len(cluster) != 1 or cluster[0] == ".":
            raise _fail(d.args[0] if d.args else d.name, "kubernetes", "",
                        "one cluster zone (and in-addr.arpa, ip6.arpa) is supported by netkit")
        self.out["zone"] = cluster[0]
        falls: list[str] = []
        for opt in d.block:
            option = opt.name.text
            if option == "pods":
                mode = _one(opt, "kubernetes", "disabled, insecure or verified", option="pods")
                if mode.text not in ("disabled", "insecure", "verified"):
                    raise _fail(mode, "kubernetes", "pods", f"invalid value for pods: {mode.text}, must be one "
                                "of: disabled, verified, insecure")
                self.out["pods"] = mode.text
            elif option == "ttl":
                arg = _one(opt, "kubernetes", "seconds", option="ttl")
                value = _int(arg, "kubernetes", "ttl")
                if not 0 <= value <= 3600:
                    raise _fail(arg, "kubernetes", "ttl", f"ttl must be in range [0, 3600]: {value}")
                self.out["ttl"] = value
            elif option == "endpoint":
                self.out["master"] = _one(opt, "kubernetes", "one URL", option="endpoint").text
            elif option == "kubeconfig":
                if not 1 <= len(opt.args) <= 2:
                    raise _fail(opt.name, "kubernetes", "kubeconfig", "expected FILE [CONTEXT]")
                self.out["kubeconfig"] = opt.args[0].text
                self.out["context"] = opt.args[1].text if len(opt.args) == 2 else ""
            elif option == "namespaces":
                if not opt.args:
                    raise _fail(opt.name, "kubernetes", "namespaces", "expected at least one namespace")
                self.out["namespaces"] = tuple(t.text for t in opt.args)
            elif option == "labels":
                text = " ".join(t.text for t in opt.args)
                try:
                    if not opt.args or not parse_selector(text):
                        raise NetkitError("an empty selector")
                except NetkitError:
                    raise _fail(opt.args[0] if opt.args else opt.name, "kubernetes", "labels",
                                f"unable to parse label selector {text!r}") from None
                self.out["labels"] = text
            elif option in ("noendpoints", "endpoint_pod_names"):
                _no_args(opt, "kubernetes", option)
                self.out[option] = True
            elif option == "fallthrough":
                falls = [_zone(t, "kubernetes") for t in opt.args]
                if not falls or any(z not in _REVERSE for z in falls):
                    raise _fail(opt.args[0] if opt.args else opt.name, "kubernetes", "fallthrough",
                                "only in-addr.arpa and ip6.arpa are supported by netkit (NXDOMAIN in the "
                                "cluster zone is final)")
        for z, tok in zip(zones, d.args, strict=False):
            if z in _REVERSE and z not in falls:
                raise _fail(tok, "kubernetes", "", f"{z} without fallthrough {z}: not supported by netkit "
                            "(it forwards the reverse names it does not know)")

    def _forward(self, d: Directive, zone: str) -> None:
        if len(d.args) < 2:
            raise _fail(d.name, "forward", "", "expected FROM TO...")
        source = _zone(d.args[0], "forward")
        if source not in (".", zone):
            raise _fail(d.args[0], "forward", "", f"FROM {source} other than the server block's zone: "
                        "not supported by netkit")
        ups, files = [], []
        for tok in d.args[1:]:
            text = tok.text.removeprefix("dns://")
            if "://" in text:
                raise _fail(tok, "forward", "", f"{tok.text}: only dns:// is supported by netkit")
            if _is_address(text):
                ups.append(text)
            else:
                files.append(tok)
        if files and (ups or len(files) > 1):
            raise _fail(files[0], "forward", "", "one resolv.conf, alone, is supported by netkit")
        if len(ups) > 15:
            raise _fail(d.args[16], "forward", "", "more than 15 TO addresses")
        self.out["upstreams"] = tuple(ups)
        self.out["resolv_conf"] = files[0].text if files else ""
        self.out["max_concurrent"] = 0
        for opt in d.block:
            self._forward_option(opt)

    def _forward_option(self, opt: Directive) -> None:
        option = opt.name.text
        if option == "policy":
            arg = _one(opt, "forward", "random, round_robin or sequential", option="policy")
            if arg.text not in ("random", "round_robin", "sequential"):
                raise _fail(arg, "forward", "policy", f"unknown policy '{arg.text}'")
            self.out["policy"] = arg.text
        elif option == "health_check":
            if not opt.args:
                raise _fail(opt.name, "forward", "health_check", "expected a duration")
            if len(opt.args) > 1:
                raise _unsupported(opt.args[1], "forward", f"health_check {opt.args[1].text}")
            value = _duration(opt.args[0], "forward", "health_check")
            if value < 0:
                raise _fail(opt.args[0], "forward", "health_check", "health_check can't be negative")
            self.out["health_check"] = value
        elif option == "max_fails":
            value = _int(_one(opt, "forward", "a number", option="max_fails"), "forward", "max_fails")
            if value < 0:
                raise _fail(opt.args[0], "forward", "max_fails", "max_fails can't be negative")
            self.out["max_fails"] = value
        elif option == "max_concurrent":
            value = _int(_one(opt, "forward", "a number", option="max_concurrent"), "forward", "max_concurrent")
            if value < 0:
                raise _fail(opt.args[0], "forward", "max_concurrent", "max_concurrent can't be negative")
            self.out["max_concurrent"] = value
        elif option == "expire":
            arg = _one(opt, "forward", "a duration", option="expire")
            if _duration(arg, "forward", "expire") < 0:
                raise _fail(arg, "forward", "expire", "expire can't be negative")
        elif option == "prefer_udp":
            _no_args(opt, "forward", "prefer_udp")

    def _cache(self, d: Directive, zone: str) -> None:
        ttl = MAX_CACHE = 3600
        if d.args:
            ttl = _int(d.args[0], "cache", "")
            if ttl <= 0:
                raise _fail(d.args[0], "cache", "", f"cache TTL can not be zero or negative: {ttl}")
            for extra in d.args[1:]:
                if _zone(extra, "cache") not in (".", zone):
                    raise _fail(extra, "cache", "", "zones other than the server block's: not supported by netkit")
        capacity = {"success": CAPACITY, "denial": CAPACITY}
        ttls = {"success": (ttl, MIN_TTL), "denial": (ttl, MIN_TTL)}
        for opt in d.block:
            option = opt.name.text
            if option in ("success", "denial"):
                if not 1 <= len(opt.args) <= 3:
                    raise _fail(opt.name, "cache", option, "expected CAPACITY [TTL] [MINTTL]")
                capacity[option] = _int(opt.args[0], "cache", option)
                top = _int(opt.args[1], "cache", option) if len(opt.args) > 1 else ttl
                low = _int(opt.args[2], "cache", option) if len(opt.args) > 2 else MIN_TTL
                if capacity[option] < 0 or top <= 0 or low < 0:
                    raise _fail(opt.args[0], "cache", option, "capacity and TTLs must be positive")
                ttls[option] = (top, low)
            elif option == "servfail":
                arg = _one(opt, "cache", "a duration", option="servfail")
                value = _duration(arg, "cache", "servfail")
                if value < 0:
                    raise _fail(arg, "cache", "servfail", "invalid negative ttl for servfail")
                if value > MAX_SERVFAIL_TTL:
                    raise _fail(arg, "cache", "servfail", "caching SERVFAIL responses over 5 minutes is not permitted")
                self.out["cache_servfail"] = value
            elif option == "disable":
                self._cache_disable(opt)
            elif option in ("prefetch", "serve_stale", "keepttl"):
                try:
                    parsed = parse_option(CacheOptions(), option, [a.text for a in opt.args])
                except ValueError as exc:
                    raise _fail(opt.args[0] if opt.args else opt.name, "cache", option, str(exc)) from None
                self.out.update({k: v for k, v in _from_cache_options(parsed).items()
                                 if k.startswith(f"cache_{option}")})
        if ttls["success"] != ttls["denial"]:
            row = next(o for o in d.block if o.name.text in ("success", "denial"))
            raise _fail(row.name, "cache", row.name.text, "different TTLs for success and denial: not supported "
                        "by netkit")
        self.out["cache_ttl"], self.out["cache_min_ttl"] = min(ttls["success"][0], MAX_CACHE), ttls["success"][1]
        self.out["cache_size"] = capacity["success"] + capacity["denial"]

    def _cache_disable(self, opt: Directive) -> None:
        if not opt.args or opt.args[0].text not in ("success", "denial"):
            raise _fail(opt.name, "cache", "disable", "expected success or denial, then zones")
        cluster = self.out.get("zone", "")
        if len(opt.args) < 2:
            raise _unsupported(opt.args[0], "cache", "disable for every zone")
        for tok in opt.args[1:]:
            if _zone(tok, "cache") != cluster:
                raise _fail(tok, "cache", "disable", "zones other than the kubernetes zone: not supported by netkit")

    def _autopath(self, d: Directive, zone: str) -> None:
        if d.block:
            raise _fail(d.block[0].name, "autopath", "", "a block: not supported by netkit")
        if not d.args or d.args[-1].text != "@kubernetes":
            raise _fail(d.args[-1] if d.args else d.name, "autopath", "", "only @kubernetes is supported by netkit")
        for extra in d.args[:-1]:
            if _zone(extra, "autopath") not in (".", zone):
                raise _fail(extra, "autopath", "", "zones other than the server block's: not supported by netkit")
        if self.out.get("pods") != "verified":
            raise _fail(d.args[-1], "autopath", "", "@kubernetes needs the kubernetes plugin's pods verified")
        self.out["autopath"] = True

    def _hosts(self, d: Directive, zone: str) -> None:
        path = d.args[0].text if d.args else DEFAULT_PATH
        zones = tuple(_origin(t, "hosts") for t in d.args[1:]) or (_origin_text(zone),)
        ttl, reverse, reload, fall, inline = DEFAULT_TTL, True, DEFAULT_RELOAD, None, []
        for opt in d.block:
            option = opt.name.text
            if option == "ttl":
                ttl = _int(_one(opt, "hosts", "a number of seconds", option="ttl"), "hosts", "ttl")
                if not 0 < ttl <= 65535:
                    raise _fail(opt.args[0], "hosts", "ttl", "ttl provided is invalid")
            elif option == "no_reverse":
                _no_args(opt, "hosts", "no_reverse")
                reverse = False
            elif option == "reload":
                arg = _one(opt, "hosts", "a duration (zero seconds to disable)", option="reload")
                reload = _duration(arg, "hosts", "reload")
                if reload < 0:
                    raise _fail(arg, "hosts", "reload", f"invalid negative duration for reload '{arg.text}'")
            elif option == "fallthrough":
                fall = tuple(_origin(t, "hosts") for t in opt.args) or ((),)
            else:
                inline.append(self._hosts_line(opt))
        self.out["hosts"] = HostsOptions(path, zones, "\n".join(inline), ttl, reverse, reload, fall)

    @staticmethod
    def _hosts_line(opt: Directive) -> str:
        line = " ".join(t.text for t in (opt.name, *opt.args))
        try:
            parse_line(line)
        except ValueError as exc:
            raise _fail(opt.name, "hosts", "", str(exc)) from None
        return line

    def _rewrite(self, d: Directive, _: str) -> None:
        """`rewrite [continue|stop] name …`, or its `{}` form: `name …` then `answer …` lines."""
        words = list(d.args)
        stop = True
        if words and words[0].text in ("continue", "stop"):
            stop = words.pop(0).text == "stop"
        if d.has_block:
            if words:
                raise _fail(words[0], "rewrite", "", "expected '{' after continue or stop")
            words = [t for line in d.block for t in (line.name, *line.args)]
        if not words:
            raise _fail(d.name, "rewrite", "", "expected a FIELD and its arguments")
        if words[0].text != "name":
            raise _unsupported(words[0], "rewrite", words[0].text)
        try:
            rule = name_rule([t.text for t in words[1:]], stop)
        except RewriteError as exc:
            raise _fail(words[0], "rewrite", "name", str(exc)) from None
        self.out["rewrite"] = (*self.out.get("rewrite", ()), rule)

    def _loop(self, d: Directive, _: str) -> None:
        _no_args(d, "loop")
        self.out["loop_check"] = True

    def _reload(self, d: Directive, _: str) -> None:
        if len(d.args) > 2:
            raise _fail(d.args[2], "reload", "", "expected [INTERVAL] [JITTER]")
        interval = _duration(d.args[0], "reload", "") if d.args else 30.0
        jitter = _duration(d.args[1], "reload", "") if len(d.args) > 1 else 15.0
        if interval < 2:
            raise _fail(d.args[0], "reload", "", "interval value must be greater or equal to 2s")
        if len(d.args) > 1 and jitter < 1:
            raise _fail(d.args[1], "reload", "", "jitter value must be greater or equal to 1s")
        self.out["reload"], self.out["reload_jitter"] = interval, min(jitter, interval / 2)

    def _loadbalance(self, d: Directive, _: str) -> None:
        if d.args and d.args[0].text != "round_robin":
            raise _unsupported(d.args[0], "loadbalance", d.args[0].text)
        if len(d.args) > 1 or d.block:
            raise _fail(d.args[1] if len(d.args) > 1 else d.block[0].name, "loadbalance", "", "unexpected argument")
        self.out["loadbalance"] = True

    def _log(self, d: Directive, _: str) -> None:
        if d.args and [t.text for t in d.args] != ["."]:
            raise _unsupported(d.args[0], "log", "names and formats")
        if d.has_block:
            raise _unsupported(d.block[0].name if d.block else d.name, "log", "classes")
        self.out["log_queries"] = True


def from_corefile(blocks: list[ServerBlock], flags: DnsConfig, path: str) -> DnsConfig:
    """The DnsConfig of parsed server blocks: the cluster's block (the one with `kubernetes`, zone
    `.`) sets the server; every other block on its port is a stub domain (`forward` only)."""
    keyed = [(b, [_key(k) for k in b.keys]) for b in blocks]
    main = [(b, keys) for b, keys in keyed if any(d.name.text == "kubernetes" for d in b.directives)]
    if len(main) != 1:
        raise CorefileError(blocks[0].keys[0] if blocks and len(main) > 1 else None,
                            "netkit serves one server block with the kubernetes plugin", path)
    block, keys = main[0]
    if len(keys) != 1 or keys[0][0] != ".":
        raise _fail(block.keys[0], "server block", "", "the kubernetes block's key must be the root zone "
                    "'.' (other zones as server blocks of their own)")
    port = keys[0][1]
    build = _Builder({**{f.name: getattr(flags, f.name) for f in fields(DnsConfig)}, **_COREFILE_BASE,
                      "conf": path})
    for d in sorted(block.directives, key=lambda d: d.name.text != "kubernetes"):  # the zone first
        build.plugin(d, ".")
    out = build.out
    stubs = []
    for other, other_keys in keyed:
        if other is block:
            continue
        stubs += _stub(other, other_keys, port, out)
    if out["resolv_conf"] == POD_RESOLV_CONF:
        out["resolv_conf"] = flags.resolv_conf
    host = out.pop("bind", "::")  # no bind: both families, as CoreDNS
    out["listen"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    out["stub_domains"] = tuple(stubs)
    return replace(flags, **{k: v for k, v in out.items() if k in _FIELDS})


_FIELDS = {f.name for f in fields(DnsConfig)}


def _stub(block: ServerBlock, keys: list[tuple[str, int]], port: int, main: dict[str, Any]) -> list[str]:
    """A server block for other zones: a stub domain, when it only forwards (with the cluster block's
    cache and log) on the same port."""
    for tok, (_, p) in zip(block.keys, keys, strict=True):
        if p != port:
            raise _fail(tok, "server block", "", f"port {p} besides {port}: netkit serves one port")
    ups: tuple[str, ...] = ()
    for d in block.directives:
        _check_known(d)
        name = d.name.text
        if name in ("errors", "loop"):
            continue
        if name in ("cache", "log"):
            probe = _Builder(main)
            probe.plugin(d, keys[0][0])
            if any(probe.out[k] != main[k] for k in ("cache_ttl", "cache_min_ttl", "cache_size", "cache_servfail",
                                                      "cache_prefetch", "cache_serve_stale", "cache_keepttl",
                                                      "log_queries")):
                raise _fail(d.name, name, "", "settings other than the cluster block's: not supported by netkit")
            continue
        if name != "forward":
            raise _fail(d.name, name, "", "in a server block without kubernetes: not supported by netkit")
        if d.block:
            raise _unsupported(d.block[0].name, "forward", f"{d.block[0].name.text} in a stub domain's block")
        probe = _Builder(main)
        probe.plugin(d, keys[0][0])
        if probe.out["resolv_conf"]:
            raise _fail(d.args[1], "forward", "", "a resolv.conf for a stub domain: not supported by netkit")
        ups = probe.out["upstreams"]
    if not ups:
        raise _fail(block.keys[0], "server block", "", "a block without kubernetes must forward")
    return [f"{zone}={','.join(ups)}" for zone, _ in keys]


# --- small readers ---------------------------------------------------------------------------------


def _key(tok: Token) -> tuple[str, int]:
    """A server block key: [dns://]ZONE[:PORT] → (zone in lower case with no final dot, port)."""
    text = tok.text
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme != "dns":
            raise _fail(tok, "server block", "", f"{scheme}:// is not supported by netkit")
    zone, sep, port = text.rpartition(":") if ":" in text else (text, "", "")
    if sep and not port.isdigit():
        raise _fail(tok, "server block", "", f"invalid port {port!r}")
    if "/" in zone:
        raise _fail(tok, "server block", "", "a CIDR zone is not supported by netkit")
    return _zone(replace(tok, text=zone), "server block"), int(port) if sep else 53


def _zone(tok: Token, plugin: str) -> str:
    text = tok.text.lower()
    if text in (".", ""):
        return "."
    if "/" in text:
        raise _unsupported(tok, plugin, f"CIDR zone {tok.text}")
    return text.removesuffix(".")


def _origin(tok: Token, plugin: str) -> Name:
    return _origin_text(_zone(tok, plugin))


def _origin_text(zone: str) -> Name:
    return () if zone == "." else name_from_text(zone)


def _one(d: Directive, plugin: str, what: str, *, option: str = "") -> Token:
    if len(d.args) != 1:
        raise _fail(d.args[1] if len(d.args) > 1 else d.name, plugin, option, f"expected {what}")
    return d.args[0]


def _no_args(d: Directive, plugin: str, option: str = "") -> None:
    if d.args or d.block:
        tok = d.args[0] if d.args else d.block[0].name
        raise _fail(tok, plugin, option, f"unexpected {tok.text!r}")


def _http(d: Directive, plugin: str, default: str) -> str:
    if len(d.args) > 1:
        raise _fail(d.args[1], plugin, "", "expected one address")
    text = d.args[0].text if d.args else default
    host, _, port = text.rpartition(":")
    if host == "localhost":
        text = f"127.0.0.1:{port}"
    return text


def _int(tok: Token, plugin: str, option: str) -> int:
    try:
        return int(tok.text)
    except ValueError:
        raise _fail(tok, plugin, option, f"{tok.text!r} is not a number") from None


def _duration(tok: Token, plugin: str, option: str) -> float:
    try:
        return parse_duration(tok.text, "duration")
    except NetkitError:
        raise _fail(tok, plugin, option, f"{tok.text!r} is not a duration like 5s or 1m") from None


def _is_address(text: str) -> bool:
    host = text
    if text.startswith("["):
        host = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        host = text.partition(":")[0]
    with contextlib.suppress(ValueError):
        ip_address(host)
        return True
    return False
