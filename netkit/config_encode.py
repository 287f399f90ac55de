"""The other direction of netkit/config.py: a `Config` written as a KubeProxyConfiguration
(`kubeproxy.config.k8s.io/v1alpha1`), for `netkit run --write-config-to PATH`.

kube-proxy's `--write-config-to` encodes the configuration it would run with — its defaults, the
file given with `--config` and the flags — in v1alpha1 and exits. The conversion puts the periods in
the active mode's section (`ipvs:` in ipvs mode, `nftables:` in nftables mode, `iptables:`
otherwise; the other sections get `0s`) and masqueradeAll in `nftables:` or `iptables:` likewise
(pkg/proxy/apis/config/v1alpha1/conversion.go); every field is written, keys sorted, as Go's YAML
encoder writes them. Here:

- every leaf of `KPC_FIELDS` is written: from the `Config` when netkit acts on it, else the value
  the file or a flag gave (`Config.kept`), else — also for a zero value there, which kube-proxy
  defaults — kube-proxy's default (the table's default column);
- what is written is what netkit does, so `load_kube_proxy_configuration(dump(cfg))` gives the same
  configuration back (tests/unit/test_config_encode.py): `iptables.localhostNodePorts` is written
  `false` unless on (netkit's default), `logging.format` `json` when none was chosen (netkit's
  default log format), and in nftables mode an unset `nodePortAddresses` is `[primary]` (as
  kube-proxy's platform defaults write it);
- pure: no IO (the command writes the text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from netkit import yamlload
from netkit.config import API_VERSION, DEFAULTS, KPC_FIELDS, Config, FieldSpec, Kind

_SECTIONS = ("iptables", "ipvs", "nftables")


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String(): 0s, 500ms, 1.5s, 30s, 1m30s, 1h0m0s, 24h0m0s."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size or unit == "ns":
                return f"{sign}{_decimal(ns, size)}{unit}"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = f"{_decimal(rest, 1_000_000_000)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _decimal(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    if not frac:
        return str(whole)
    digits = len(str(size)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def _node_ports(cfg: Config) -> list[str] | None:
    items = [str(n) for n in cfg.node_port_addresses]
    if cfg.node_port_primary is None:
        return ["primary"] if cfg.mode == "nftables" and not items else (items or None)
    if cfg.node_port_primary:
        items.append("primary")
    return items or ["all"]


def _sections(cfg: Config) -> dict[str, Any]:
    """The mode sections: the active mode's periods and masquerading; the rest zero (bit: default)."""
    masq = "nftables" if cfg.mode == "nftables" else "iptables"
    out: dict[str, Any] = {}
    for section in _SECTIONS:
        active = section == cfg.mode
        out[f"{section}.syncPeriod"] = format_duration(cfg.sync_period if active else 0.0)
        out[f"{section}.minSyncPeriod"] = format_duration(cfg.min_sync_period if active else 0.0)
    for section in ("iptables", "nftables"):
        out[f"{section}.masqueradeAll"] = cfg.masquerade_all and section == masq
        bit = cfg.masquerade_bit if section == masq else DEFAULTS[f"{section}.masqueradeBit"]
        out[f"{section}.masqueradeBit"] = bit
    out["iptables.localhostNodePorts"] = cfg.localhost_nodeports
    return out


def _from_config(cfg: Config, hostname_override: str) -> dict[str, Any]:
    """Every field netkit acts on, by path, from the configuration."""
    d = format_duration
    qps = int(cfg.api_qps) if float(cfg.api_qps).is_integer() else cfg.api_qps
    out: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "KubeProxyConfiguration",
        "clientConnection.kubeconfig": cfg.kubeconfig, "clientConnection.qps": qps,
        "clientConnection.burst": cfg.api_burst, "clientConnection.contentType": cfg.api_content_type,
        "logging.format": cfg.log_format or "json", "logging.verbosity": cfg.log_verbosity,
        "hostnameOverride": hostname_override, "bindAddress": cfg.bind_address,
        "healthzBindAddress": cfg.healthz_bind_address, "metricsBindAddress": cfg.metrics_bind_address,
        "bindAddressHardFail": cfg.bind_address_hard_fail, "mode": cfg.mode,
        "ipvs.scheduler": cfg.ipvs_scheduler, "ipvs.strictARP": cfg.ipvs_strict_arp,
        "ipvs.excludeCIDRs": [str(n) for n in cfg.ipvs_exclude_cidrs] or None,
        "ipvs.tcpTimeout": d(cfg.ipvs_tcp_timeout), "ipvs.tcpFinTimeout": d(cfg.ipvs_tcp_fin_timeout),
        "ipvs.udpTimeout": d(cfg.ipvs_udp_timeout),
        "detectLocalMode": cfg.detect_local_mode, "detectLocal.bridgeInterface": cfg.bridge_interface,
        "detectLocal.interfaceNamePrefix": cfg.interface_name_prefix,
        "clusterCIDR": ",".join(str(n) for n in cfg.cluster_cidrs), "nodePortAddresses": _node_ports(cfg),
        "oomScoreAdj": cfg.oom_score_adj,
        "conntrack.maxPerCore": cfg.conntrack_max_per_core, "conntrack.min": cfg.conntrack_min,
        "conntrack.tcpEstablishedTimeout": d(cfg.conntrack_tcp_established_timeout),
        "conntrack.tcpCloseWaitTimeout": d(cfg.conntrack_tcp_close_wait_timeout),
        "conntrack.tcpBeLiberal": cfg.conntrack_tcp_be_liberal,
        "conntrack.udpTimeout": d(cfg.conntrack_udp_timeout),
        "conntrack.udpStreamTimeout": d(cfg.conntrack_udp_stream_timeout),
    }
    out.update(_sections(cfg))
    return out


def default_value(spec: FieldSpec) -> Any:
    """kube-proxy's default of a field, as its YAML encoder writes it (the table's default column)."""
    return yamlload.safe_load(spec.default)


def encode_kube_proxy_configuration(cfg: Config, hostname_override: str = "") -> dict[str, Any]:
    """The configuration as a v1alpha1 document (nested mappings, every field)."""
    values = _from_config(cfg, hostname_override)
    kept = {path: json.loads(text) for path, text in cfg.kept}
    doc: dict[str, Any] = {}
    for spec in KPC_FIELDS:
        if spec.kind is Kind.OBJECT:
            continue
        if spec.path in values:
            value = values[spec.path]
        elif spec.path in kept and not _zero(kept[spec.path]):
            value = kept[spec.path]
        else:  # kube-proxy defaults a zero value before writing (kubeadm's `configSyncPeriod: 0s`)
            value = default_value(spec)
        _put(doc, spec.path, value)
    return doc


def _zero(value: Any) -> bool:
    return value is None or (not isinstance(value, (dict, list)) and value in (0, "", "0s", "0"))


def _put(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        doc = doc.setdefault(name, {})
    doc[leaf] = value


def dump_kube_proxy_configuration(cfg: Config, hostname_override: str = "") -> str:
    """The YAML text kube-proxy's `--write-config-to` writes: every field, keys sorted."""
    doc: Mapping[str, Any] = encode_kube_proxy_configuration(cfg, hostname_override)
    return yaml.safe_dump(dict(doc), sort_keys=True, default_flow_style=False, allow_unicode=True)
