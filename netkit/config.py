"""Configuration: one frozen value passed down, built from flags and/or a KubeProxyConfiguration.

`from_kube_proxy_configuration(doc)` accepts kube-proxy's own file
(`kubeproxy.config.k8s.io/v1alpha1`, kind `KubeProxyConfiguration`) so an operator can reuse it; the
fields netkit understands are listed in `_KPC_FIELDS`, the others are reported as ignored, never
silently dropped. Flags given on the command line override the file (as in kube-proxy).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from ipaddress import ip_address, ip_network
from typing import Any

from netkit.errors import NetkitError
from netkit.model.types import IPAddress, IPFamily, IPNetwork

MODES = ("iptables", "ipvs", "nftables")
DETECT_LOCAL_MODES = ("ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", "None")


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
    # kube-proxy defaults to True and sets route_localnet=1 on the node; netkit leaves the node's
    # sysctls alone, so localhost NodePorts are off unless the configuration turns them on.
    localhost_nodeports: bool = False
    conntrack_tcp_be_liberal: bool = False
    large_cluster_endpoints: int = 1000
    min_sync_period: float = 1.0
    sync_period: float = 30.0
    ipvs_scheduler: str = "rr"
    healthz_bind_address: str = "0.0.0.0:10256"
    metrics_bind_address: str = "127.0.0.1:10249"
    ignored: tuple[str, ...] = field(default=())  # KubeProxyConfiguration fields netkit does not use

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


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def parse_duration(text: str, what: str) -> float:
    """Go's time.Duration text as kube-proxy writes it: 1s, 30s, 1m30s, 500ms."""
    m = _DURATION.match(str(text).strip())
    if not m or not any(m.groups()):
        raise ConfigError(f"{what}: {text!r} is not a duration like 1s, 30s or 1m30s")
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


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


def from_kube_proxy_configuration(doc: Any, source: str = "config") -> Config:
    if not isinstance(doc, Mapping) or doc.get("kind") != "KubeProxyConfiguration":
        raise ConfigError(f"{source}: expected kind KubeProxyConfiguration "
                          "(apiVersion kubeproxy.config.k8s.io/v1alpha1)")
    api = doc.get("apiVersion")
    if api not in (None, "kubeproxy.config.k8s.io/v1alpha1"):
        raise ConfigError(f"{source}: apiVersion {api!r} is not kubeproxy.config.k8s.io/v1alpha1")
    cfg = Config()
    ipt = _section(doc, "iptables", source)
    ipvs = _section(doc, "ipvs", source)
    detect = _section(doc, "detectLocal", source)
    changes: dict[str, Any] = {}
    mode = doc.get("mode") or "iptables"
    if mode not in MODES:
        raise ConfigError(f"{source}: mode: {mode!r} is not one of {', '.join(MODES)}")
    changes["mode"] = mode
    if doc.get("hostnameOverride"):
        changes["node_name"] = str(doc["hostnameOverride"]).strip().lower()
    if doc.get("clusterCIDR"):
        changes["cluster_cidrs"] = _cidrs(doc["clusterCIDR"], f"{source}: clusterCIDR")
    dlm = doc.get("detectLocalMode") or "ClusterCIDR"
    if dlm not in DETECT_LOCAL_MODES:
        raise ConfigError(f"{source}: detectLocalMode: {dlm!r} is not one of {', '.join(DETECT_LOCAL_MODES)}")
    changes["detect_local_mode"] = dlm
    changes["bridge_interface"] = str(detect.get("bridgeInterface") or "")
    changes["interface_name_prefix"] = str(detect.get("interfaceNamePrefix") or "")
    changes["masquerade_all"] = bool(doc.get("masqueradeAll", ipt.get("masqueradeAll", False)))
    bit = ipt.get("masqueradeBit", 14)
    if not isinstance(bit, int) or not 0 <= bit <= 31:
        raise ConfigError(f"{source}: iptables.masqueradeBit: {bit!r} is not an integer 0-31")
    changes["masquerade_bit"] = bit
    if ipt.get("localhostNodePorts") is not None:
        changes["localhost_nodeports"] = bool(ipt["localhostNodePorts"])
    changes["node_port_addresses"] = _cidrs(doc.get("nodePortAddresses"), f"{source}: nodePortAddresses")
    for key, attr in (("syncPeriod", "sync_period"), ("minSyncPeriod", "min_sync_period")):
        value = doc.get(key, ipt.get(key))
        if value is not None:
            changes[attr] = parse_duration(value, f"{source}: {key}")
    if ipvs.get("scheduler"):
        changes["ipvs_scheduler"] = str(ipvs["scheduler"])
    for key, attr in (("healthzBindAddress", "healthz_bind_address"),
                      ("metricsBindAddress", "metrics_bind_address")):
        if doc.get(key):
            changes[attr] = str(doc[key])
    changes["ignored"] = tuple(sorted(k for k in doc if k not in _KPC_FIELDS))
    return replace(cfg, **changes)


def _section(doc: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {key}: expected an object")
    return value


_KPC_FIELDS = frozenset({
    "apiVersion", "kind", "mode", "hostnameOverride", "clusterCIDR", "detectLocalMode", "detectLocal",
    "masqueradeAll", "iptables", "ipvs", "nodePortAddresses", "syncPeriod", "minSyncPeriod",
    "healthzBindAddress", "metricsBindAddress",
})
