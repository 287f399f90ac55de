"""Configuration: one frozen value passed down, built from flags and/or a KubeProxyConfiguration.

`load_kube_proxy_configuration(text, source)` decodes kube-proxy's own file
(`kubeproxy.config.k8s.io/v1alpha1`, kind `KubeProxyConfiguration`) the way kube-proxy does:

- every field of v1alpha1 is in `KPC_FIELDS` with its type, kube-proxy's default and what netkit
  does with it (the table docs/daemon.md shows; a test compares its paths with kube-proxy's types);
- types are strict (`"false"` for a bool is an error, as in kube-proxy's decoder);
- a zero or null value gets kube-proxy's default (`DEFAULTS`: a null `masqueradeBit` is 14, `0s`
  periods are 30 s / 1 s, an empty mode is iptables, ...);
- syncPeriod, minSyncPeriod, masqueradeAll and masqueradeBit come from the active mode's section
  (`iptables:` for iptables and ipvs, `nftables:` for nftables; the periods from `ipvs:` in ipvs mode);
- every unknown field is named with its full path as a warning, not an error (kube-proxy's lenient
  fallback), and so are settings of sections the active mode does not read;
- kube-proxy's validation rules; a violation is one `ConfigError` naming FILE:LINE and the field.

Flags given on the command line override the file (netkit/runtime/command.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network
from typing import Any

import yaml

from netkit import yamlload
from netkit.errors import NetkitError
from netkit.model.types import IPAddress, IPFamily, IPNetwork

MODES = ("iptables", "ipvs", "nftables")
DETECT_LOCAL_MODES = ("ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", "None")
IPVS_SCHEDULERS = ("", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh")
PROTOBUF = "application/vnd.kubernetes.protobuf"
HEALTHZ_PORT = 10256
METRICS_PORT = 10249
API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"


class ConfigError(NetkitError):
    pass


@dataclass(frozen=True, slots=True)
class Config:
    mode: str = "iptables"
    iptables_backend: str = "auto"  # auto | legacy | nft
    node_name: str = ""
    node_ips: tuple[IPAddress, ...] = ()
    cluster_cidrs: tuple[IPNetwork, ...] = ()
    node_cidrs: tuple[IPNetwork, ...] = ()  # the node's podCIDRs, for detectLocalMode NodeCIDR
    detect_local_mode: str = "ClusterCIDR"
    bridge_interface: str = ""
    interface_name_prefix: str = ""
    masquerade_all: bool = False
    masquerade_bit: int = 14
    masquerade_random_fully: bool = True  # iptables >= 1.6.2 and kernel >= 5.0 have it
    node_port_addresses: tuple[IPNetwork, ...] = ()  # empty: every local address
    # nodePortAddresses "primary": also the Node's primary IPs; None: unset, kube-proxy's default for
    # the mode (nftables: primary; iptables, ipvs: every address). Read it through `primary_node_ports`.
    node_port_primary: bool | None = None
    # kube-proxy defaults to True and sets route_localnet=1 on the node; netkit leaves the node's
    # sysctls alone, so localhost NodePorts are off unless the configuration turns them on.
    localhost_nodeports: bool = False
    conntrack_tcp_be_liberal: bool = False
    # kube-proxy's nfacct counters (netkit.nfacct.COUNTERS) that exist in the rules' network namespace:
    # the daemon creates them at start and sets this; the iptables rules count into those listed only.
    nfacct_counters: tuple[str, ...] = ()
    conntrack_max_per_core: int = 32768
    conntrack_min: int = 131072
    conntrack_tcp_established_timeout: float = 86400.0
    conntrack_tcp_close_wait_timeout: float = 3600.0
    conntrack_udp_timeout: float = 0.0
    conntrack_udp_stream_timeout: float = 0.0
    large_cluster_endpoints: int = 1000
    min_sync_period: float = 1.0
    sync_period: float = 30.0
    ipvs_scheduler: str = "rr"
    ipvs_strict_arp: bool = False
    ipvs_exclude_cidrs: tuple[IPNetwork, ...] = ()
    ipvs_tcp_timeout: float = 0.0  # 0: leave the kernel's value
    ipvs_tcp_fin_timeout: float = 0.0
    ipvs_udp_timeout: float = 0.0
    bind_address: str = "0.0.0.0"  # kube-proxy's "primary node IP" override (binds nothing)
    healthz_bind_address: str = "0.0.0.0:10256"
    metrics_bind_address: str = "127.0.0.1:10249"
    bind_address_hard_fail: bool = False
    kubeconfig: str = ""  # clientConnection.kubeconfig
    api_qps: float = 5.0
    api_burst: int = 10
    api_content_type: str = PROTOBUF
    oom_score_adj: int = -999
    log_verbosity: int = 0
    log_format: str = ""  # "", "text" or "json" (logging.format)
    # Fields netkit does not act on, as the file gave them (path, JSON text): written back unchanged
    # by --write-config-to (netkit/config_encode.py).
    kept: tuple[tuple[str, str], ...] = ()
    ignored: tuple[str, ...] = field(default=())  # unknown KubeProxyConfiguration fields, by full path
    warnings: tuple[str, ...] = field(default=())  # everything reported at start (unknown, unused, ...)

    @property
    def primary_node_ports(self) -> bool:
        """NodePorts (and health check node ports) on the Node's primary IPs."""
        if self.node_port_primary is None:
            return self.mode == "nftables" and not self.node_port_addresses
        return self.node_port_primary

    @property
    def masquerade_mark(self) -> str:
        return f"{1 << self.masquerade_bit:#x}"

    def local_match(self, family: IPFamily, negate: bool = False) -> str | None:
        """The iptables match for "traffic from a pod on this cluster" (kube-proxy's LocalTrafficDetector),
        or None when no detector is configured for this family."""
        bang = "! " if negate else ""
        if self.detect_local_mode in ("ClusterCIDR", "NodeCIDR"):
            cidrs = self.cluster_cidrs if self.detect_local_mode == "ClusterCIDR" else self.node_cidrs
            mine = [c for c in cidrs if IPFamily.of(c) is family]
            return f"{bang}-s {mine[0]}" if mine else None
        if self.detect_local_mode == "BridgeInterface" and self.bridge_interface:
            return f"{bang}-i {self.bridge_interface}"
        if self.detect_local_mode == "InterfaceNamePrefix" and self.interface_name_prefix:
            return f"{bang}-i {self.interface_name_prefix}+"
        return None


# --- Go durations ----------------------------------------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: Any, what: str) -> float:
    """Go's time.ParseDuration, in seconds: "30s", "1m30s", "500ms", "1h0m0s", "0"; a sign is allowed."""
    if not isinstance(text, str):
        raise ConfigError(f"{what}: expected a duration string like 30s, got {_describe(text)}")
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s[1:] if s[:1] in "+-" and s else s
    if s == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise ConfigError(f"{what}: {text!r} is not a duration like 1s, 30s, 1m30s or 500ms")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s:
        raise ConfigError(f"{what}: {text!r} is not a duration like 1s, 30s, 1m30s or 500ms")
    return sign * total


def parse_seconds(text: str, what: str) -> float:
    """A command-line period: a Go duration (30s, 1m) or plain seconds (30, 0.5)."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text, what)


# --- the field table -------------------------------------------------------------------------------


class Kind(Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    DURATION = "duration"
    STRINGS = "[]string"
    BOOLMAP = "map[string]bool"
    OBJECT = "object"
    ANY = "any"  # decoded by kube-proxy's logging library; netkit only checks the shape loosely


class Use(Enum):
    USED = "used"  # changes what netkit does
    REPORTED = "reported"  # accepted; netkit reports at start that it does not act on a set value
    NOOP = "no-op"  # accepted; nothing to do in netkit (documented why)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    path: str
    kind: Kind
    default: str  # kube-proxy's default after defaulting, as kube-proxy writes it
    use: Use
    netkit: str  # what netkit does with it (docs/daemon.md's table)


def _f(path: str, kind: Kind, default: str, use: Use, netkit: str) -> FieldSpec:
    return FieldSpec(path, kind, default, use, netkit)


U, R, N = Use.USED, Use.REPORTED, Use.NOOP
K = Kind
KPC_FIELDS: tuple[FieldSpec, ...] = (
    _f("apiVersion", K.STRING, API_VERSION, U, "must be kubeproxy.config.k8s.io/v1alpha1"),
    _f("kind", K.STRING, "KubeProxyConfiguration", U, "must be KubeProxyConfiguration"),
    _f("featureGates", K.BOOLMAP, "{}", R, "reported when set: netkit has no feature gates"),
    _f("clientConnection", K.OBJECT, "", N, "section"),
    _f("clientConnection.kubeconfig", K.STRING, '""', U, "the kubeconfig used to reach the API (as --kubeconfig)"),
    _f("clientConnection.acceptContentTypes", K.STRING, '""', R, "reported when set: netkit reads JSON"),
    _f("clientConnection.contentType", K.STRING, PROTOBUF, R,
       "reported when set to anything but JSON or protobuf: netkit sends only GETs, in JSON"),
    _f("clientConnection.qps", K.FLOAT, "5", U, "client-side rate limit of API requests"),
    _f("clientConnection.burst", K.INT, "10", U, "burst of that rate limit"),
    _f("logging", K.OBJECT, "", N, "section"),
    _f("logging.format", K.STRING, "text", U, "text or json log lines (as --log-format)"),
    _f("logging.flushFrequency", K.ANY, "5s", N, "netkit writes each line at once"),
    _f("logging.verbosity", K.INT, "0", U, "4 or more logs at debug level (as -v)"),
    _f("logging.vmodule", K.ANY, "null", R, "reported when set"),
    _f("logging.options", K.ANY, "{}", N, "klog buffer options; netkit does not buffer"),
    _f("hostnameOverride", K.STRING, '""', U, "the node name (as --hostname-override; lowercased)"),
    _f("bindAddress", K.STRING, "0.0.0.0", U,
       "a specific IP is the node's primary IP (added to the Node's addresses); binds nothing"),
    _f("healthzBindAddress", K.STRING, "0.0.0.0:10256", U, "/healthz and /livez; without a port: 10256"),
    _f("metricsBindAddress", K.STRING, "127.0.0.1:10249", U, "/metrics; without a port: 10249"),
    _f("bindAddressHardFail", K.BOOL, "false", U, "a health or metrics port that cannot be bound is fatal"),
    _f("enableProfiling", K.BOOL, "false", R, "reported when true: no /debug/pprof"),
    _f("showHiddenMetricsForVersion", K.STRING, '""', R, "reported when set: no hidden metrics"),
    _f("mode", K.STRING, "iptables", U, "iptables, ipvs or nftables"),
    _f("iptables", K.OBJECT, "", N, "section (also read in ipvs mode)"),
    _f("iptables.masqueradeBit", K.INT, "14", U, "the SNAT mark bit (iptables and ipvs modes)"),
    _f("iptables.masqueradeAll", K.BOOL, "false", U, "SNAT all traffic to service IPs (iptables and ipvs modes)"),
    _f("iptables.localhostNodePorts", K.BOOL, "true", U,
       "NodePorts on 127.0.0.1 only when explicitly true (netkit default false: it sets no route_localnet)"),
    _f("iptables.snatNodeInternalIP", K.BOOL, "false", R, "reported when true: SNAT uses the egress address"),
    _f("iptables.syncPeriod", K.DURATION, "30s", U, "full-sync period in iptables mode"),
    _f("iptables.minSyncPeriod", K.DURATION, "1s", U, "minimum interval between syncs in iptables mode"),
    _f("ipvs", K.OBJECT, "", N, "section"),
    _f("ipvs.syncPeriod", K.DURATION, "30s", U, "full-sync period in ipvs mode"),
    _f("ipvs.minSyncPeriod", K.DURATION, "0s", U, "minimum interval between syncs in ipvs mode"),
    _f("ipvs.scheduler", K.STRING, "rr", U, "the IPVS scheduler"),
    _f("ipvs.excludeCIDRs", K.STRINGS, "null", U,
       "IPVS virtual servers in these ranges are never deleted by a sync"),
    _f("ipvs.strictARP", K.BOOL, "false", U, "arp_ignore=1 / arp_announce=2 (with --apply-sysctls)"),
    _f("ipvs.tcpTimeout", K.DURATION, "0s", U, "IPVS TCP timeout, set once at start (0: leave the kernel's)"),
    _f("ipvs.tcpFinTimeout", K.DURATION, "0s", U, "IPVS TCP FIN timeout, set once at start (0: leave the kernel's)"),
    _f("ipvs.udpTimeout", K.DURATION, "0s", U, "IPVS UDP timeout, set once at start (0: leave the kernel's)"),
    _f("nftables", K.OBJECT, "", N, "section"),
    _f("nftables.masqueradeBit", K.INT, "14", U, "the SNAT mark bit in nftables mode"),
    _f("nftables.masqueradeAll", K.BOOL, "false", U, "SNAT all traffic to service IPs in nftables mode"),
    _f("nftables.syncPeriod", K.DURATION, "30s", U, "full-sync period in nftables mode"),
    _f("nftables.minSyncPeriod", K.DURATION, "1s", U, "minimum interval between syncs in nftables mode"),
    _f("winkernel", K.OBJECT, "", N, "section (Windows only)"),
    _f("winkernel.networkName", K.STRING, '""', R, "Windows only: reported when set"),
    _f("winkernel.sourceVip", K.STRING, '""', R, "Windows only: reported when set"),
    _f("winkernel.enableDSR", K.BOOL, "false", R, "Windows only: reported when set"),
    _f("winkernel.rootHnsEndpointName", K.STRING, '""', R, "Windows only: reported when set"),
    _f("winkernel.forwardHealthCheckVip", K.BOOL, "false", R, "Windows only: reported when set"),
    _f("detectLocalMode", K.STRING, "ClusterCIDR", U, "how pod traffic is told apart (NodeCIDR: the Node's podCIDRs)"),
    _f("detectLocal", K.OBJECT, "", N, "section"),
    _f("detectLocal.bridgeInterface", K.STRING, '""', U, "detectLocalMode BridgeInterface"),
    _f("detectLocal.interfaceNamePrefix", K.STRING, '""', U, "detectLocalMode InterfaceNamePrefix"),
    _f("clusterCIDR", K.STRING, '""', U, "the pod network, one CIDR per family, comma-separated"),
    _f("nodePortAddresses", K.STRINGS, "null", U,
       "CIDRs (loopback included), 'primary' (the Node's primary IPs), 'localhost', 'all'; "
       "unset: 'primary' in nftables mode, every address otherwise"),
    _f("oomScoreAdj", K.INT, "-999", R, "reported: netkit leaves its OOM score to the pod spec"),
    _f("conntrack", K.OBJECT, "", N, "section"),
    _f("conntrack.maxPerCore", K.INT, "32768", U,
       "nf_conntrack_max = max(maxPerCore x CPUs, min) with --apply-sysctls"),
    _f("conntrack.min", K.INT, "131072", U, "see maxPerCore"),
    _f("conntrack.tcpEstablishedTimeout", K.DURATION, "24h0m0s", U,
       "nf_conntrack_tcp_timeout_established with --apply-sysctls"),
    _f("conntrack.tcpCloseWaitTimeout", K.DURATION, "1h0m0s", U,
       "nf_conntrack_tcp_timeout_close_wait with --apply-sysctls"),
    _f("conntrack.tcpBeLiberal", K.BOOL, "false", U,
       "iptables, ipvs: no INVALID drop rule; nf_conntrack_tcp_be_liberal=1 with --apply-sysctls"),
    _f("conntrack.udpTimeout", K.DURATION, "0s", U, "nf_conntrack_udp_timeout with --apply-sysctls (0: leave)"),
    _f("conntrack.udpStreamTimeout", K.DURATION, "0s", U,
       "nf_conntrack_udp_timeout_stream with --apply-sysctls (0: leave)"),
    _f("configSyncPeriod", K.DURATION, "15m0s", N, "informer resync; netkit's periodic full sync covers it"),
    _f("portRange", K.STRING, '""', R, "unused by kube-proxy too; reported when set"),
    _f("windowsRunAsService", K.BOOL, "false", R, "Windows only: reported when set"),
)
del U, R, N, K
_BY_PATH = {f.path: f for f in KPC_FIELDS}

# kube-proxy's defaults for zero/null values (SetDefaults_KubeProxyConfiguration and the platform
# defaults), in the decoded representation (durations in seconds).
DEFAULTS: Mapping[str, Any] = {
    "bindAddress": "0.0.0.0",
    "oomScoreAdj": -999,
    "iptables.masqueradeBit": 14,
    "iptables.localhostNodePorts": True,
    "iptables.syncPeriod": 30.0,
    "iptables.minSyncPeriod": 1.0,
    "ipvs.syncPeriod": 30.0,
    "nftables.masqueradeBit": 14,
    "nftables.syncPeriod": 30.0,
    "nftables.minSyncPeriod": 1.0,
    "conntrack.maxPerCore": 32768,
    "conntrack.min": 131072,
    "conntrack.tcpEstablishedTimeout": 86400.0,
    "conntrack.tcpCloseWaitTimeout": 3600.0,
    "configSyncPeriod": 900.0,
    "clientConnection.contentType": PROTOBUF,
    "clientConnection.qps": 5.0,
    "clientConnection.burst": 10,
    "mode": "iptables",
    "detectLocalMode": "ClusterCIDR",
    "ipvs.scheduler": "rr",
}
# Fields whose zero value is a legal setting of its own: only null gets the default there.
_NULL_ONLY = frozenset({"iptables.masqueradeBit", "nftables.masqueradeBit", "iptables.localhostNodePorts",
                        "conntrack.maxPerCore", "conntrack.min", "conntrack.tcpEstablishedTimeout",
                        "conntrack.tcpCloseWaitTimeout", "oomScoreAdj"})


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the bool {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# --- decoding --------------------------------------------------------------------------------------


class _Doc:
    """The decoded document: values by full path, the line of every path, and what was reported."""

    def __init__(self, source: str, lines: Mapping[str, int]) -> None:
        self.source, self.lines = source, lines
        self.values: dict[str, Any] = {}
        self.kept: dict[str, str] = {}
        self.unknown: list[str] = []
        self.warnings: list[str] = []

    def where(self, path: str) -> str:
        line = self.lines.get(path)
        return f"{self.source}:{line}" if line else self.source

    def fail(self, path: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.where(path)}: KubeProxyConfiguration: {path}: {reason}")

    def warn(self, path: str, reason: str) -> None:
        self.warnings.append(f"{self.where(path)}: KubeProxyConfiguration: {path}: {reason}")

    def get(self, path: str) -> Any:
        """The value after defaulting."""
        value = self.values.get(path)
        if path in DEFAULTS and (value is None or (path not in _NULL_ONLY and not value)):
            return DEFAULTS[path]
        return value


def _walk(doc: _Doc, obj: Mapping[str, Any], prefix: str) -> None:
    for key, value in obj.items():
        path = f"{prefix}{key}"
        spec = _BY_PATH.get(str(path))
        if spec is None:
            doc.unknown.append(str(path))
            doc.warn(str(path), "unknown field (ignored, as kube-proxy's lenient decoding does)")
            continue
        if spec.kind is Kind.OBJECT:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise doc.fail(path, f"expected an object, got {_describe(value)}")
            _walk(doc, value, f"{path}.")
            continue
        doc.values[path] = _typed(doc, spec, value)
        if spec.use is not Use.USED and value is not None:
            doc.kept[path] = json.dumps(value, sort_keys=True, default=str)


def _typed(doc: _Doc, spec: FieldSpec, value: Any) -> Any:
    """Strict types, as kube-proxy's decoder: null is the zero value; anything else must match."""
    if value is None or spec.kind is Kind.ANY:
        return value
    path, kind = spec.path, spec.kind
    if kind is Kind.BOOL and isinstance(value, bool):
        return value
    if kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is Kind.FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is Kind.STRING and isinstance(value, str):
        return value
    if kind is Kind.DURATION:
        if isinstance(value, str):
            try:
                return parse_duration(value, path)
            except ConfigError as exc:
                raise doc.fail(path, f"{value!r} is not a duration like 1s, 30s or 1m30s") from exc
    if kind is Kind.STRINGS and isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise doc.fail(f"{path}[{i}]", f"expected a string, got {_describe(item)}")
        return tuple(value)
    if kind is Kind.BOOLMAP and isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(v, bool):
                raise doc.fail(f"{path}.{k}", f"expected a bool, got {_describe(v)}")
        return dict(value)
    raise doc.fail(path, f"expected {_EXPECTED[kind]}, got {_describe(value)}")


_EXPECTED = {Kind.BOOL: "a bool (true or false, unquoted)", Kind.INT: "an integer", Kind.FLOAT: "a number",
             Kind.STRING: "a string", Kind.DURATION: "a duration string like 30s", Kind.STRINGS: "a list of strings",
             Kind.BOOLMAP: "a map of names to bools", Kind.OBJECT: "an object", Kind.ANY: "a value"}


def _line_map(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                path = f"{prefix}{key.value}"
                out[path] = key.start_mark.line + 1
                out.update(_line_map(value, f"{path}."))
    return out


def load_kube_proxy_configuration(text: str, source: str = "config") -> Config:
    """Decode a KubeProxyConfiguration file's text (errors name FILE:LINE and the field)."""
    try:
        node = yamlload.compose(text)
        doc = yamlload.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    return from_kube_proxy_configuration(doc, source, _line_map(node) if node is not None else {})


def from_kube_proxy_configuration(doc: Any, source: str = "config", lines: Mapping[str, int] | None = None) -> Config:
    if not isinstance(doc, Mapping) or doc.get("kind") != "KubeProxyConfiguration":
        raise ConfigError(f"{source}: expected kind KubeProxyConfiguration (apiVersion {API_VERSION})")
    d = _Doc(source, lines or {})
    api = doc.get("apiVersion")
    if api != API_VERSION:
        raise d.fail("apiVersion", f"{api!r} is not {API_VERSION}")
    _walk(d, doc, "")
    changes = _decode(d)
    return replace(Config(), **changes, kept=tuple(sorted(d.kept.items())), ignored=tuple(d.unknown),
                   warnings=tuple(d.warnings))


def _decode(d: _Doc) -> dict[str, Any]:
    mode = d.get("mode")
    if mode not in MODES:
        raise d.fail("mode", f"{mode!r} is not one of {', '.join(MODES)} (or empty for iptables)")
    out: dict[str, Any] = {"mode": mode}
    out.update(_mode_section(d, mode))
    out.update(_addresses(d))
    out.update(_client(d))
    out.update(_detect_local(d))
    out.update(_conntrack(d))
    out.update(_ipvs(d, mode))
    out.update(_node_ports(d, mode))
    if d.get("hostnameOverride"):
        name = str(d.get("hostnameOverride")).strip().lower()
        if not name:
            raise d.fail("hostnameOverride", "is only whitespace")
        out["node_name"] = name
    if d.values.get("iptables.localhostNodePorts") is not None:  # null: netkit's default (see Config)
        out["localhost_nodeports"] = bool(d.values["iptables.localhostNodePorts"])
    oom = d.get("oomScoreAdj")
    if not -1000 <= oom <= 1000:
        raise d.fail("oomScoreAdj", f"{oom} must be within the range [-1000, 1000]")
    out["oom_score_adj"] = oom
    if d.get("configSyncPeriod") <= 0:
        raise d.fail("configSyncPeriod", "must be greater than 0")
    out.update(_logging(d))
    _report_unused(d, mode)
    return out


def _mode_section(d: _Doc, mode: str) -> dict[str, Any]:
    """syncPeriod/minSyncPeriod/masqueradeAll/masqueradeBit from the section kube-proxy reads."""
    periods = {"iptables": "iptables", "ipvs": "ipvs", "nftables": "nftables"}[mode]
    masq = "nftables" if mode == "nftables" else "iptables"
    bit = d.get(f"{masq}.masqueradeBit")
    if not 0 <= bit <= 31:
        raise d.fail(f"{masq}.masqueradeBit", f"{bit} must be within the range [0, 31]")
    sync, min_sync = d.get(f"{periods}.syncPeriod"), d.get(f"{periods}.minSyncPeriod") or 0.0
    if sync <= 0:
        raise d.fail(f"{periods}.syncPeriod", "must be greater than 0")
    if min_sync < 0:
        raise d.fail(f"{periods}.minSyncPeriod", "must be greater than or equal to 0")
    if min_sync > sync:
        raise d.fail(f"{periods}.syncPeriod", f"must be greater than or equal to {periods}.minSyncPeriod")
    return {"masquerade_bit": bit, "masquerade_all": bool(d.get(f"{masq}.masqueradeAll")),
            "sync_period": sync, "min_sync_period": min_sync}


def append_port(address: str, port: int) -> str:
    """kube-proxy's AppendPortIfNeeded: "1.2.3.4" → "1.2.3.4:port", "::1" → "[::1]:port"."""
    try:
        ip = ip_address(address.strip("[]"))
    except ValueError:
        return address  # has a port already (or is invalid: validated next)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def check_host_port(address: str, what: str) -> str:
    """kube-proxy's validateHostPort; returns the address. Raises ConfigError naming `what`."""
    host, sep, port = address.rpartition(":")
    if not sep or (":" in host and not (host.startswith("[") and host.endswith("]"))):
        raise ConfigError(f"{what}: {address!r} must be IP:port")
    try:
        ip_address(host.strip("[]"))
    except ValueError:
        raise ConfigError(f"{what}: {host!r} must be a valid IP") from None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{what}: {port!r} must be a valid port (1-65535)")
    return address


def _addresses(d: _Doc) -> dict[str, Any]:
    bind = d.get("bindAddress")
    try:
        bind_ip = ip_address(bind)
    except ValueError:
        raise d.fail("bindAddress", f"{bind!r} is not a valid IP address") from None
    v6 = bind_ip.version == 6
    out: dict[str, Any] = {"bind_address": str(bind_ip), "bind_address_hard_fail": bool(d.get("bindAddressHardFail"))}
    if not bind_ip.is_unspecified:
        out["node_ips"] = (bind_ip,)
    for key, attr, port, default_host in (("healthzBindAddress", "healthz_bind_address", HEALTHZ_PORT,
                                            "[::]" if v6 else "0.0.0.0"),
                                           ("metricsBindAddress", "metrics_bind_address", METRICS_PORT,
                                            "[::1]" if v6 else "127.0.0.1")):
        value = d.get(key) or f"{default_host}:{port}"
        try:
            out[attr] = check_host_port(append_port(value, port), key)
        except ConfigError as exc:
            raise d.fail(key, str(exc).split(": ", 1)[1]) from None
    return out


def _client(d: _Doc) -> dict[str, Any]:
    burst = d.get("clientConnection.burst")
    if burst < 0:
        raise d.fail("clientConnection.burst", "must be greater than or equal to 0")
    qps = d.get("clientConnection.qps")
    content = d.get("clientConnection.contentType")
    if content not in (PROTOBUF, "application/json"):
        d.warn("clientConnection.contentType", f"{content!r}: netkit sends JSON")
    if d.get("clientConnection.acceptContentTypes"):
        d.warn("clientConnection.acceptContentTypes", "set, but netkit always accepts JSON")
    return {"kubeconfig": d.get("clientConnection.kubeconfig") or "", "api_qps": qps, "api_burst": burst,
            "api_content_type": content}


def _detect_local(d: _Doc) -> dict[str, Any]:
    dlm = d.get("detectLocalMode")
    if dlm not in DETECT_LOCAL_MODES:
        raise d.fail("detectLocalMode", f"{dlm!r} is not one of {', '.join(DETECT_LOCAL_MODES)}")
    bridge = d.get("detectLocal.bridgeInterface") or ""
    prefix = d.get("detectLocal.interfaceNamePrefix") or ""
    if dlm == "BridgeInterface" and not bridge:
        raise d.fail("detectLocal.bridgeInterface", "required with detectLocalMode BridgeInterface")
    if dlm == "InterfaceNamePrefix" and not prefix:
        raise d.fail("detectLocal.interfaceNamePrefix", "required with detectLocalMode InterfaceNamePrefix")
    out: dict[str, Any] = {"detect_local_mode": dlm, "bridge_interface": bridge, "interface_name_prefix": prefix}
    text = d.get("clusterCIDR") or ""
    if text:
        try:
            out["cluster_cidrs"] = cluster_cidrs(text)
        except ConfigError as exc:
            raise d.fail("clusterCIDR", str(exc)) from None
    return out


def cluster_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """kube-proxy's clusterCIDR rule: one CIDR, or two of different families, comma-separated."""
    items = [t.strip() for t in text.split(",")]
    nets = []
    for item in items:
        try:
            nets.append(ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{item!r} is not a valid CIDR (e.g. 10.244.0.0/16 or fd00:10:244::/56)") from None
    if len(nets) > 2 or (len(nets) == 2 and nets[0].version == nets[1].version):
        raise ConfigError(f"{text!r}: one CIDR, or one IPv4 and one IPv6 CIDR")
    return tuple(nets)


def _conntrack(d: _Doc) -> dict[str, Any]:
    out: dict[str, Any] = {"conntrack_tcp_be_liberal": bool(d.get("conntrack.tcpBeLiberal"))}
    for key, attr in (("maxPerCore", "conntrack_max_per_core"), ("min", "conntrack_min"),
                      ("tcpEstablishedTimeout", "conntrack_tcp_established_timeout"),
                      ("tcpCloseWaitTimeout", "conntrack_tcp_close_wait_timeout"),
                      ("udpTimeout", "conntrack_udp_timeout"), ("udpStreamTimeout", "conntrack_udp_stream_timeout")):
        value = d.get(f"conntrack.{key}") or 0
        if value < 0:
            raise d.fail(f"conntrack.{key}", "must be greater than or equal to 0")
        out[attr] = value
    return out


def _ipvs(d: _Doc, mode: str) -> dict[str, Any]:
    sched = d.get("ipvs.scheduler")
    if sched not in IPVS_SCHEDULERS:
        raise d.fail("ipvs.scheduler", f"{sched!r} is not one of {', '.join(s for s in IPVS_SCHEDULERS if s)}")
    out: dict[str, Any] = {"ipvs_scheduler": sched, "ipvs_strict_arp": bool(d.get("ipvs.strictARP"))}
    excl = []
    for i, text in enumerate(d.get("ipvs.excludeCIDRs") or ()):
        try:
            excl.append(ip_network(text.strip(), strict=False))
        except ValueError:
            raise d.fail(f"ipvs.excludeCIDRs[{i}]", f"{text!r} is not a valid CIDR") from None
    out["ipvs_exclude_cidrs"] = tuple(excl)
    for key, attr in (("tcpTimeout", "ipvs_tcp_timeout"), ("tcpFinTimeout", "ipvs_tcp_fin_timeout"),
                      ("udpTimeout", "ipvs_udp_timeout")):
        value = d.get(f"ipvs.{key}") or 0.0
        if value < 0:
            raise d.fail(f"ipvs.{key}", "must be greater than or equal to 0")
        out[attr] = value
    return out


def node_port_addresses(items: Sequence[str], what: str) -> tuple[tuple[IPNetwork, ...], bool]:
    """nodePortAddresses / --nodeport-addresses: (CIDRs, primary). 'all' (and no entries) is every
    address; 'localhost' is 127.0.0.0/8 and ::1/128; 'primary' is the Node's primary IPs."""
    nets: list[IPNetwork] = []
    primary = every = False
    for item in (i.strip() for i in items):
        if item == "primary":
            primary = True
        elif item == "all":
            every = True
        elif item == "localhost":
            nets += [IPv4Network("127.0.0.0/8"), IPv6Network("::1/128")]
        elif item:
            try:
                nets.append(ip_network(item, strict=False))
            except ValueError:
                raise ConfigError(f"{what}: {item!r} is not a CIDR or one of primary, localhost, all") from None
    if every:
        return (), False
    return tuple(dict.fromkeys(nets)), primary


def _node_ports(d: _Doc, mode: str) -> dict[str, Any]:
    items = d.values.get("nodePortAddresses")
    if not items:  # null or empty: unset (kube-proxy's default for the mode)
        return {}
    try:
        nets, primary = node_port_addresses(items, "nodePortAddresses")
    except ConfigError as exc:
        raise d.fail("nodePortAddresses", str(exc).split(": ", 1)[1]) from None
    return {"node_port_addresses": nets, "node_port_primary": primary}


def _logging(d: _Doc) -> dict[str, Any]:
    fmt = d.get("logging.format") or ""
    if fmt not in ("", "text", "json"):
        raise d.fail("logging.format", f"{fmt!r} is not text or json")
    verbosity = d.get("logging.verbosity") or 0
    if verbosity < 0:
        raise d.fail("logging.verbosity", "must be greater than or equal to 0")
    return {"log_format": fmt, "log_verbosity": verbosity}


def _is_default(spec: FieldSpec, value: Any) -> bool:
    """The value kube-proxy would default the field to (what `--write-config-to` writes for it)."""
    if spec.path in DEFAULTS:
        return bool(value == DEFAULTS[spec.path])
    if spec.kind is Kind.DURATION:
        return bool(value == parse_duration(spec.default, spec.path))
    return bool(value == yamlload.safe_load(spec.default))


def _report_unused(d: _Doc, mode: str) -> None:
    """Set values netkit does not act on, and mode sections the active mode does not read; a value
    equal to kube-proxy's default is not reported (a file written with every field has them all)."""
    for spec in KPC_FIELDS:
        value = d.values.get(spec.path)
        if spec.use is Use.REPORTED and value not in (None, "", False, {}, ()) and not _is_default(spec, value):
            d.warn(spec.path, f"set, but netkit does not act on it: {spec.netkit}")
    reads = {"iptables": {"iptables"}, "ipvs": {"ipvs", "iptables.masquerade"}, "nftables": {"nftables"}}[mode]
    for spec in KPC_FIELDS:
        section = spec.path.split(".")[0]
        if section not in ("iptables", "ipvs", "nftables") or "." not in spec.path:
            continue
        if section in reads or any(spec.path.startswith(r) for r in reads):
            continue
        if spec.path == "iptables.localhostNodePorts":
            continue
        value = d.values.get(spec.path)
        if value not in (None, 0, 0.0, "", False, ()) and not _is_default(spec, value):
            d.warn(spec.path, f"ignored in {mode} mode (kube-proxy ignores it too)")


# --- flags helpers (shared with the other commands) -----------------------------------------------


def _cidrs(value: Any, what: str) -> tuple[IPNetwork, ...]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    out = []
    for item in items:
        item = str(item).strip()
        if not item or item == "primary":  # "primary": the node's primary IPs, resolved at run time
            continue
        try:
            out.append(ip_network(item, strict=False))
        except ValueError as exc:
            raise ConfigError(f"{what}: {item!r} is not a valid CIDR") from exc
    return tuple(out)


def parse_ips(values: list[str], what: str) -> tuple[IPAddress, ...]:
    out = []
    for v in values:
        try:
            out.append(ip_address(v))
        except ValueError as exc:
            raise ConfigError(f"{what}: {v!r} is not a valid IP address") from exc
    return tuple(out)


def parse_cidrs(values: list[str], what: str) -> tuple[IPNetwork, ...]:
    return tuple(c for v in values for c in _cidrs(v, what))
