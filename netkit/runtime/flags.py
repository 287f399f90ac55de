"""`netkit run`'s command line: kube-proxy's flags (cmd/kube-proxy/app/options.go) plus netkit's own.

`FLAGS` is the compatibility table: every flag kube-proxy has, and what netkit does with it (a test
compares the names with kube-proxy's). Values are taken as text and converted here, so a bad value is
one `netkit: error: --flag: reason` line (exit 2). Go's syntax works: `--v=2`, `-v 2`, `--masquerade-all`,
`--masquerade-all=false`, durations like `30s`, comma-separated lists.

Unlike kube-proxy, flags given together with `--config` override the file's values (kube-proxy
ignores most flags then); only flags actually given change anything.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from ipaddress import ip_address
from typing import Any

from netkit.config import (
    DETECT_LOCAL_MODES,
    HEALTHZ_PORT,
    IPVS_SCHEDULERS,
    METRICS_PORT,
    MODES,
    Config,
    ConfigError,
    append_port,
    check_host_port,
    cluster_cidrs,
    node_port_addresses,
    parse_cidrs,
    parse_duration,
    parse_ips,
    parse_seconds,
)


class Arg(Enum):
    BOOL = "bool"  # --x, --x=true, --x=false
    VALUE = "value"  # --x V, --x=V
    LIST = "list"  # --x a,b (repeatable)


class Use(Enum):
    USED = "used"
    REPORTED = "reported"  # accepted; a warning at start says netkit does not act on it
    NOOP = "no-op"  # accepted; nothing to do (documented)
    REFUSED = "refused"  # an error: netkit cannot do what the flag asks


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without dashes
    arg: Arg
    use: Use
    help: str
    kube_proxy: bool = True  # a kube-proxy flag (else netkit's own)
    short: str = ""


def _kp(name: str, arg: Arg, use: Use, help: str, short: str = "") -> Flag:
    return Flag(name, arg, use, help, True, short)


def _nk(name: str, arg: Arg, help: str) -> Flag:
    return Flag(name, arg, Use.USED, help, False)


B, V, L = Arg.BOOL, Arg.VALUE, Arg.LIST
U, R, N, X = Use.USED, Use.REPORTED, Use.NOOP, Use.REFUSED
FLAGS: tuple[Flag, ...] = (
    _kp("config", V, U, "a KubeProxyConfiguration file"),
    _kp("write-config-to", V, U, "write the configuration (defaults, --config, flags) to this file, then exit"),
    _kp("cleanup", B, U, "remove every rule netkit wrote, then exit"),
    _kp("feature-gates", V, R, "netkit has no feature gates"),
    _kp("kubeconfig", V, U, "kubeconfig file (default: in-cluster config)"),
    _kp("master", V, U, "API server URL (overrides the kubeconfig's)"),
    _kp("kube-api-content-type", V, U, "content type of requests (netkit sends JSON)"),
    _kp("kube-api-burst", V, U, "burst of the client-side rate limit (default 10)"),
    _kp("kube-api-qps", V, U, "client-side rate limit, requests per second (default 5)"),
    _kp("hostname-override", V, U, "this node's name (default: the hostname)"),
    _kp("bind-address", V, U, "this node's primary IP (binds nothing, as in kube-proxy)"),
    _kp("healthz-bind-address", V, U, "/healthz and /livez, IP[:PORT] (default 0.0.0.0:10256; empty disables)"),
    _kp("metrics-bind-address", V, U, "/metrics, IP[:PORT] (default 127.0.0.1:10249; empty disables)"),
    _kp("bind-address-hard-fail", B, U, "exit when a health or metrics port cannot be bound"),
    _kp("profiling", B, R, "no /debug/pprof in netkit"),
    _kp("show-hidden-metrics-for-version", V, R, "netkit has no hidden metrics"),
    _kp("init-only", B, U, "set the node sysctls (as --apply-sysctls), then exit; refused with --netns"),
    _kp("proxy-mode", V, U, "iptables (default), ipvs or nftables"),
    _kp("iptables-masquerade-bit", V, U, "the SNAT mark bit, 0-31 (default 14)"),
    _kp("masquerade-all", B, U, "SNAT all traffic to service IPs"),
    _kp("iptables-localhost-nodeports", B, U, "NodePorts on 127.0.0.1 (netkit default: off)"),
    _kp("iptables-sync-period", V, U, "full-sync period in iptables and nftables modes (e.g. 30s)"),
    _kp("iptables-min-sync-period", V, U, "minimum interval between syncs in iptables and nftables modes"),
    _kp("ipvs-sync-period", V, U, "full-sync period in ipvs mode"),
    _kp("ipvs-min-sync-period", V, U, "minimum interval between syncs in ipvs mode"),
    _kp("ipvs-scheduler", V, U, "the IPVS scheduler (default rr)"),
    _kp("ipvs-exclude-cidrs", L, U, "IPVS virtual servers in these ranges are never removed"),
    _kp("ipvs-strict-arp", B, U, "arp_ignore=1, arp_announce=2 (with --apply-sysctls)"),
    _kp("ipvs-tcp-timeout", V, U, "IPVS TCP timeout (0: leave the kernel's)"),
    _kp("ipvs-tcpfin-timeout", V, U, "IPVS TCP FIN timeout (0: leave the kernel's)"),
    _kp("ipvs-udp-timeout", V, U, "IPVS UDP timeout (0: leave the kernel's)"),
    _kp("detect-local-mode", V, U, "ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None"),
    _kp("pod-bridge-interface", V, U, "the bridge for detect-local-mode BridgeInterface"),
    _kp("pod-interface-name-prefix", V, U, "the prefix for detect-local-mode InterfaceNamePrefix"),
    _kp("cluster-cidr", L, U, "the pod network, one CIDR per family (repeatable, commas allowed)"),
    _kp("nodeport-addresses", L, U, "NodePorts only on these CIDRs, or 'primary' (the Node's primary IPs)"),
    _kp("oom-score-adj", V, R, "netkit leaves its OOM score to the pod spec"),
    _kp("conntrack-max-per-core", V, U, "nf_conntrack_max per CPU (with --apply-sysctls; 0 leaves it)"),
    _kp("conntrack-min", V, U, "nf_conntrack_max at least (with --apply-sysctls)"),
    _kp("conntrack-tcp-timeout-established", V, U, "with --apply-sysctls (0 leaves it)"),
    _kp("conntrack-tcp-timeout-close-wait", V, U, "with --apply-sysctls (0 leaves it)"),
    _kp("conntrack-tcp-be-liberal", B, U,
        "iptables, ipvs: no INVALID drop rule; nf_conntrack_tcp_be_liberal=1 with --apply-sysctls"),
    _kp("conntrack-udp-timeout", V, U, "with --apply-sysctls (0 leaves it)"),
    _kp("conntrack-udp-timeout-stream", V, U, "with --apply-sysctls (0 leaves it)"),
    _kp("config-sync-period", V, N, "informer resync; netkit's periodic full sync covers it"),
    _kp("healthz-port", V, U, "deprecated in kube-proxy: the port of --healthz-bind-address (0 disables)"),
    _kp("metrics-port", V, U, "deprecated in kube-proxy: the port of --metrics-bind-address (0 disables)"),
    _kp("v", V, U, "log verbosity: 4 or more logs at debug level", short="v"),
    _kp("vmodule", V, R, "per-file verbosity is not supported"),
    _kp("logging-format", V, U, "text or json"),
    _kp("log-flush-frequency", V, N, "netkit writes every line at once"),
    _kp("log-json-info-buffer-size", V, N, "netkit does not buffer logs"),
    _kp("log-json-split-stream", B, N, "netkit writes every line to stderr"),
    _kp("log-text-info-buffer-size", V, N, "netkit does not buffer logs"),
    _kp("log-text-split-stream", B, N, "netkit writes every line to stderr"),
    _nk("node-name", V, "this node's name (as --hostname-override)"),
    _nk("node-ip", L, "an address of this node (repeatable); added to the Node object's addresses"),
    _nk("mode", V, "the dataplane: iptables (default), ipvs or nftables (as --proxy-mode)"),
    _nk("sync-period", V, "full-sync period of the active mode, a duration or seconds (default 30s)"),
    _nk("min-sync-period", V, "minimum interval between syncs of the active mode (default 1s)"),
    _nk("apply-sysctls", B, "set the conntrack (and IPVS ARP) sysctls as kube-proxy does; refused with --netns"),
    _nk("log-format", V, "json (default) or text"),
)
del B, V, L, U, R, N, X
BY_NAME = {f.name: f for f in FLAGS}
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}


def add_flags(p: argparse.ArgumentParser) -> None:
    """Every flag of the table, as text (converted by `apply_flags`); None when not given."""
    for f in FLAGS:
        names = [f"--{f.name}"] + ([f"-{f.short}"] if f.short else [])
        dest = _dest(f)
        if f.arg is Arg.BOOL:
            p.add_argument(*names, dest=dest, nargs="?", const="true", default=None, metavar="BOOL", help=f.help)
        elif f.arg is Arg.LIST:
            p.add_argument(*names, dest=dest, action="append", default=None, metavar="LIST", help=f.help)
        else:
            p.add_argument(*names, dest=dest, default=None, metavar="VALUE", help=f.help)


def _dest(f: Flag) -> str:
    return "flag_" + f.name.replace("-", "_")


def given(args: argparse.Namespace, name: str) -> Any:
    return getattr(args, _dest(BY_NAME[name]), None)


def parse_bool(text: str, what: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{what}: {text!r} is not a bool (true or false)")


def _int(text: str, what: str, lo: int | None = None, hi: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not an integer") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{what}: {value} must be within [{lo}, {hi}]" if hi is not None
                          else f"{what}: {value} must be at least {lo}")
    return value


def _choice(text: str, what: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise ConfigError(f"{what}: {text!r} is not one of {', '.join(c for c in choices if c)}")
    return text


def _duration(text: str, what: str) -> float:
    value = parse_duration(text, what)
    if value < 0:
        raise ConfigError(f"{what}: must be greater than or equal to 0")
    return value


def _duration_text(text: str, what: str) -> str:
    """A checked duration, kept as given (the field's text)."""
    _duration(text, what)
    return text


def _items(values: list[str]) -> list[str]:
    return [i.strip() for v in values for i in v.split(",") if i.strip()]


Apply = Callable[[Config, Any, str], dict[str, Any]]


def _attr(attr: str, conv: Callable[[str, str], Any]) -> Apply:
    return lambda cfg, text, what: {attr: conv(text, what)}


def _periods(kind: str, attr: str) -> Apply:
    """--iptables-*: every mode but ipvs; --ipvs-*: ipvs only (as kube-proxy's processV1Alpha1Flags)."""
    def apply(cfg: Config, text: str, what: str) -> dict[str, Any]:
        value = _duration(text, what)
        if (kind == "ipvs") != (cfg.mode == "ipvs"):
            return {}
        return {attr: value}
    return apply


def _hostname(cfg: Config, text: str, what: str) -> dict[str, Any]:
    name = text.strip().lower()
    if not name:
        raise ConfigError(f"{what}: empty hostname-override is invalid")
    return {"node_name": name}


def _bind(cfg: Config, text: str, what: str) -> dict[str, Any]:
    try:
        ip = ip_address(text)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a valid IP address") from None
    extra = () if ip.is_unspecified or ip in cfg.node_ips else (ip,)
    return {"bind_address": str(ip), "node_ips": cfg.node_ips + extra}


def _address(attr: str, port: int) -> Apply:
    def apply(cfg: Config, text: str, what: str) -> dict[str, Any]:
        return {attr: check_host_port(append_port(text, port), what) if text else ""}
    return apply


def _port_of(attr: str) -> Apply:
    def apply(cfg: Config, text: str, what: str) -> dict[str, Any]:
        port = _int(text, what, 0, 65535)
        if port == 0:
            return {attr: ""}
        host = getattr(cfg, attr).rpartition(":")[0] or "0.0.0.0"
        return {attr: f"{host}:{port}"}
    return apply


def _node_ports(cfg: Config, values: list[str], what: str) -> dict[str, Any]:
    if not _items(values):  # empty: unset (kube-proxy's default for the mode)
        return {"node_port_addresses": (), "node_port_primary": None}
    nets, primary = node_port_addresses(_items(values), what)
    return {"node_port_addresses": nets, "node_port_primary": primary}


def _clusters(cfg: Config, values: list[str], what: str) -> dict[str, Any]:
    try:
        return {"cluster_cidrs": cluster_cidrs(",".join(_items(values)))}
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _exclude(cfg: Config, values: list[str], what: str) -> dict[str, Any]:
    return {"ipvs_exclude_cidrs": parse_cidrs(_items(values), what)}


def _node_ips(cfg: Config, values: list[str], what: str) -> dict[str, Any]:
    ips = parse_ips(_items(values), what)
    return {"node_ips": cfg.node_ips + tuple(ip for ip in ips if ip not in cfg.node_ips)}


def _bool(attr: str) -> Apply:
    return _attr(attr, parse_bool)


def _mode(cfg: Config, text: str, what: str) -> dict[str, Any]:
    return {"mode": _choice(text or "iptables", what, MODES)}


def _sync(attr: str) -> Apply:
    def apply(cfg: Config, text: str, what: str) -> dict[str, Any]:
        value = parse_seconds(text, what)
        if value < 0 or (attr == "sync_period" and value == 0):
            raise ConfigError(f"{what}: must be greater than 0" if attr == "sync_period"
                              else f"{what}: must be greater than or equal to 0")
        return {attr: value}
    return apply


def _verbosity(cfg: Config, text: str, what: str) -> dict[str, Any]:
    return {"log_verbosity": _int(text, what, 0)}


def _log_format(cfg: Config, text: str, what: str) -> dict[str, Any]:
    return {"log_format": _choice(text, what, ("text", "json"))}


def _nonneg_int(attr: str) -> Apply:
    return _attr(attr, lambda t, w: _int(t, w, 0))


def _path(text: str, what: str) -> str:
    if not text:
        raise ConfigError(f"{what}: empty path")
    return text


def _qps(cfg: Config, text: str, what: str) -> dict[str, Any]:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a number") from None
    return {"api_qps": value}


def _feature_gates(text: str, what: str) -> dict[str, bool]:
    """component-base's --feature-gates: comma-separated NAME=BOOL."""
    gates = {}
    for item in _items([text]):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{what}: {item!r} is not NAME=true or NAME=false")
        gates[name.strip()] = parse_bool(value.strip(), f"{what}: {name.strip()}")
    return gates


def _kept(path: str, conv: Callable[[str, str], Any]) -> Apply:
    """A flag netkit does not act on: kept, so --write-config-to writes its field (kube-proxy's)."""
    def apply(cfg: Config, text: str, what: str) -> dict[str, Any]:
        kept = dict(cfg.kept)
        kept[path] = json.dumps(conv(text, what), sort_keys=True)
        return {"kept": tuple(sorted(kept.items()))}
    return apply


def _oom_score_adj(cfg: Config, text: str, what: str) -> dict[str, Any]:
    return {"oom_score_adj": _int(text, what, -1000, 1000)}


# Applied in this order: the mode first (period flags depend on it), the rest as listed.
APPLY: dict[str, Apply] = {
    "proxy-mode": _mode, "mode": _mode,
    "kubeconfig": _attr("kubeconfig", lambda t, w: t),
    "kube-api-content-type": _attr("api_content_type", lambda t, w: t),
    "kube-api-burst": _nonneg_int("api_burst"),
    "kube-api-qps": _qps,
    "hostname-override": _hostname, "node-name": _hostname,
    "bind-address": _bind,
    "healthz-bind-address": _address("healthz_bind_address", HEALTHZ_PORT),
    "metrics-bind-address": _address("metrics_bind_address", METRICS_PORT),
    "healthz-port": _port_of("healthz_bind_address"),
    "metrics-port": _port_of("metrics_bind_address"),
    "bind-address-hard-fail": _bool("bind_address_hard_fail"),
    "iptables-masquerade-bit": _attr("masquerade_bit", lambda t, w: _int(t, w, 0, 31)),
    "masquerade-all": _bool("masquerade_all"),
    "iptables-localhost-nodeports": _bool("localhost_nodeports"),
    "iptables-sync-period": _periods("iptables", "sync_period"),
    "iptables-min-sync-period": _periods("iptables", "min_sync_period"),
    "ipvs-sync-period": _periods("ipvs", "sync_period"),
    "ipvs-min-sync-period": _periods("ipvs", "min_sync_period"),
    "sync-period": _sync("sync_period"),
    "min-sync-period": _sync("min_sync_period"),
    "ipvs-scheduler": _attr("ipvs_scheduler", lambda t, w: _choice(t, w, IPVS_SCHEDULERS) or "rr"),
    "ipvs-exclude-cidrs": _exclude,
    "ipvs-strict-arp": _bool("ipvs_strict_arp"),
    "ipvs-tcp-timeout": _attr("ipvs_tcp_timeout", _duration),
    "ipvs-tcpfin-timeout": _attr("ipvs_tcp_fin_timeout", _duration),
    "ipvs-udp-timeout": _attr("ipvs_udp_timeout", _duration),
    "detect-local-mode": _attr("detect_local_mode", lambda t, w: _choice(t, w, DETECT_LOCAL_MODES)),
    "pod-bridge-interface": _attr("bridge_interface", lambda t, w: t),
    "pod-interface-name-prefix": _attr("interface_name_prefix", lambda t, w: t),
    "cluster-cidr": _clusters,
    "nodeport-addresses": _node_ports,
    "node-ip": _node_ips,
    "conntrack-max-per-core": _nonneg_int("conntrack_max_per_core"),
    "conntrack-min": _nonneg_int("conntrack_min"),
    "conntrack-tcp-timeout-established": _attr("conntrack_tcp_established_timeout", _duration),
    "conntrack-tcp-timeout-close-wait": _attr("conntrack_tcp_close_wait_timeout", _duration),
    "conntrack-tcp-be-liberal": _bool("conntrack_tcp_be_liberal"),
    "conntrack-udp-timeout": _attr("conntrack_udp_timeout", _duration),
    "conntrack-udp-timeout-stream": _attr("conntrack_udp_stream_timeout", _duration),
    "v": _verbosity,
    "feature-gates": _kept("featureGates", _feature_gates),
    "profiling": _kept("enableProfiling", parse_bool),
    "show-hidden-metrics-for-version": _kept("showHiddenMetricsForVersion", lambda t, w: t),
    "config-sync-period": _kept("configSyncPeriod", _duration_text),
    "log-flush-frequency": _kept("logging.flushFrequency", _duration_text),
    "oom-score-adj": _oom_score_adj,
    "logging-format": _log_format, "log-format": _log_format,
}
# Flags whose value is only checked (the daemon reads them from args): given here for validation.
CHECK: dict[str, Callable[[str, str], Any]] = {
    "cleanup": parse_bool, "apply-sysctls": parse_bool, "init-only": parse_bool, "write-config-to": _path,
    "log-json-split-stream": parse_bool, "log-text-split-stream": parse_bool,
}


@dataclass(frozen=True, slots=True)
class Applied:
    config: Config
    warnings: tuple[str, ...]


def apply_flags(cfg: Config, args: argparse.Namespace) -> Applied:
    """The flags given, applied over `cfg` (the file's values, or defaults), kube-proxy's checks."""
    warnings: list[str] = []
    order = ["proxy-mode", "mode"] + [f.name for f in FLAGS if f.name not in ("proxy-mode", "mode")]
    for name in order:
        flag = BY_NAME[name]
        value = given(args, name)
        if value is None:
            continue
        what = f"--{name}"
        if flag.use is Use.REFUSED and (flag.arg is not Arg.BOOL or parse_bool(value, what)):
            raise ConfigError(f"{what}: {flag.help}")
        if flag.use is Use.REPORTED:
            warnings.append(f"{what}: accepted, but netkit does not act on it: {flag.help}")
        if name in APPLY:
            cfg = replace(cfg, **APPLY[name](cfg, value, what))
        elif name in CHECK:
            CHECK[name](value, what)
    if cfg.min_sync_period > cfg.sync_period:
        raise ConfigError(f"--sync-period: {cfg.sync_period:g}s must be greater than or equal to "
                          f"the minimum sync period ({cfg.min_sync_period:g}s)")
    return Applied(cfg, tuple(warnings))


def flag_true(args: argparse.Namespace, name: str) -> bool:
    value = given(args, name)
    return value is not None and parse_bool(value, f"--{name}")
