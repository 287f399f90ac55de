"""KubeProxyConfiguration v1alpha1 decoded as kube-proxy decodes it: the field table against
kube-proxy's types, kubeadm's ConfigMap verbatim, defaulting of every zero/null field, the active
mode's section, strict types, unknown fields by full path, validation, and each field's effect."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest
import yaml

from netkit.config import DEFAULTS, KPC_FIELDS, ConfigError, Kind, Use, load_kube_proxy_configuration, parse_duration

KUBEADM_CM = Path(__file__).parents[1] / "daemon" / "kubeadm" / "kube-proxy-configmap.yaml"
HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

# Every field of staging/src/k8s.io/kube-proxy/config/v1alpha1/types.go by its JSON path (with
# component-base's ClientConnectionConfiguration and LoggingConfiguration).
V1ALPHA1 = """apiVersion kind featureGates clientConnection clientConnection.kubeconfig
clientConnection.acceptContentTypes clientConnection.contentType clientConnection.qps clientConnection.burst
logging logging.format logging.flushFrequency logging.verbosity logging.vmodule logging.options
hostnameOverride bindAddress healthzBindAddress metricsBindAddress bindAddressHardFail enableProfiling
showHiddenMetricsForVersion mode iptables iptables.masqueradeBit iptables.masqueradeAll
iptables.localhostNodePorts iptables.snatNodeInternalIP iptables.syncPeriod iptables.minSyncPeriod ipvs
ipvs.syncPeriod ipvs.minSyncPeriod ipvs.scheduler ipvs.excludeCIDRs ipvs.strictARP ipvs.tcpTimeout
ipvs.tcpFinTimeout ipvs.udpTimeout nftables nftables.masqueradeBit nftables.masqueradeAll nftables.syncPeriod
nftables.minSyncPeriod winkernel winkernel.networkName winkernel.sourceVip winkernel.enableDSR
winkernel.rootHnsEndpointName winkernel.forwardHealthCheckVip detectLocalMode detectLocal
detectLocal.bridgeInterface detectLocal.interfaceNamePrefix clusterCIDR nodePortAddresses oomScoreAdj
conntrack conntrack.maxPerCore conntrack.min conntrack.tcpEstablishedTimeout conntrack.tcpCloseWaitTimeout
conntrack.tcpBeLiberal conntrack.udpTimeout conntrack.udpStreamTimeout configSyncPeriod portRange
windowsRunAsService""".split()


def load(body: str, source: str = "kp.yaml") -> Any:
    return load_kube_proxy_configuration(HEAD + body, source)


def kubeadm_config_conf() -> str:
    return str(yaml.safe_load(KUBEADM_CM.read_text())["data"]["config.conf"])


def test_the_field_table_is_kube_proxys_v1alpha1() -> None:
    assert [f.path for f in KPC_FIELDS] == V1ALPHA1 or sorted(f.path for f in KPC_FIELDS) == sorted(V1ALPHA1)
    assert len({f.path for f in KPC_FIELDS}) == len(KPC_FIELDS)
    assert all(f.netkit for f in KPC_FIELDS)
    assert set(DEFAULTS) <= {f.path for f in KPC_FIELDS}


def test_kubeadms_configmap_gets_kube_proxys_defaults() -> None:
    cfg = load_kube_proxy_configuration(kubeadm_config_conf(), "config.conf")
    assert (cfg.mode, cfg.sync_period, cfg.min_sync_period, cfg.masquerade_bit) == ("iptables", 30.0, 1.0, 14)
    assert cfg.kubeconfig == "/var/lib/kube-proxy/kubeconfig.conf"
    assert (cfg.api_qps, cfg.api_burst) == (5.0, 10)
    assert cfg.cluster_cidrs == (ip_network("10.244.0.0/16"),) and cfg.detect_local_mode == "ClusterCIDR"
    assert (cfg.healthz_bind_address, cfg.metrics_bind_address) == ("0.0.0.0:10256", "127.0.0.1:10249")
    assert (cfg.conntrack_max_per_core, cfg.conntrack_min) == (32768, 131072)
    assert (cfg.conntrack_tcp_established_timeout, cfg.conntrack_tcp_close_wait_timeout) == (86400, 3600)
    assert cfg.node_port_addresses == () and not cfg.primary_node_ports and cfg.oom_score_adj == -999
    assert cfg.warnings == () and cfg.ignored == ()


@pytest.mark.parametrize(("body", "attr", "expected"), [
    ("mode: ''\n", "mode", "iptables"),
    ("iptables: {masqueradeBit: null}\n", "masquerade_bit", 14),
    ("iptables: {masqueradeBit: 0}\n", "masquerade_bit", 0),  # 0 is a bit, not "unset"
    ("iptables: {syncPeriod: 0s}\n", "sync_period", 30.0),
    ("iptables: {minSyncPeriod: 0s}\n", "min_sync_period", 1.0),
    ("mode: ipvs\nipvs: {syncPeriod: 0s}\n", "sync_period", 30.0),
    ("mode: ipvs\nipvs: {minSyncPeriod: 0s}\n", "min_sync_period", 0.0),
    ("mode: nftables\nnftables: {syncPeriod: 0s, minSyncPeriod: 0s, masqueradeBit: null}\n", "sync_period", 30.0),
    ("mode: nftables\nnftables: {minSyncPeriod: 0s}\n", "min_sync_period", 1.0),
    ("mode: nftables\nnftables: {masqueradeBit: null}\n", "masquerade_bit", 14),
    ("detectLocalMode: ''\n", "detect_local_mode", "ClusterCIDR"),
    ("bindAddress: ''\n", "bind_address", "0.0.0.0"),
    ("healthzBindAddress: ''\n", "healthz_bind_address", "0.0.0.0:10256"),
    ("metricsBindAddress: ''\n", "metrics_bind_address", "127.0.0.1:10249"),
    ("bindAddress: '::'\n", "healthz_bind_address", "[::]:10256"),
    ("bindAddress: '::'\n", "metrics_bind_address", "[::1]:10249"),
    ("clientConnection: {qps: 0, burst: 0}\n", "api_burst", 10),
    ("clientConnection: {qps: 0}\n", "api_qps", 5.0),
    ("conntrack: {maxPerCore: null, min: null}\n", "conntrack_min", 131072),
    ("conntrack: {maxPerCore: 0}\n", "conntrack_max_per_core", 0),  # 0: leave the limit
    ("conntrack: {tcpEstablishedTimeout: null}\n", "conntrack_tcp_established_timeout", 86400.0),
    ("conntrack: {tcpCloseWaitTimeout: null}\n", "conntrack_tcp_close_wait_timeout", 3600.0),
    ("ipvs: {scheduler: ''}\n", "ipvs_scheduler", "rr"),
    ("oomScoreAdj: null\n", "oom_score_adj", -999),
])
def test_zero_and_null_get_kube_proxys_default(body: str, attr: str, expected: object) -> None:
    assert getattr(load(body), attr) == expected


def test_the_active_modes_section_is_read() -> None:
    body = ("iptables: {syncPeriod: 10s, minSyncPeriod: 2s, masqueradeAll: true, masqueradeBit: 5}\n"
            "ipvs: {syncPeriod: 20s, minSyncPeriod: 3s}\n"
            "nftables: {syncPeriod: 40s, minSyncPeriod: 4s, masqueradeAll: false, masqueradeBit: 7}\n")
    ipt = load("mode: iptables\n" + body)
    assert (ipt.sync_period, ipt.min_sync_period, ipt.masquerade_all, ipt.masquerade_bit) == (10, 2, True, 5)
    ipvs = load("mode: ipvs\n" + body)  # periods from ipvs:, masquerading from iptables: (as kube-proxy)
    assert (ipvs.sync_period, ipvs.min_sync_period, ipvs.masquerade_all, ipvs.masquerade_bit) == (20, 3, True, 5)
    nft = load("mode: nftables\n" + body)
    assert (nft.sync_period, nft.min_sync_period, nft.masquerade_all, nft.masquerade_bit) == (40, 4, False, 7)
    assert any("iptables.syncPeriod: ignored in nftables mode" in w for w in nft.warnings)
    assert any("nftables.masqueradeBit: ignored in iptables mode" in w for w in ipt.warnings)


@pytest.mark.parametrize(("body", "message"), [
    ("iptables:\n  masqueradeAll: 'false'\n", "kp.yaml:4: KubeProxyConfiguration: iptables.masqueradeAll: "
                                              "expected a bool (true or false, unquoted), got the string 'false'"),
    ("iptables:\n  masqueradeBit: '14'\n", "kp.yaml:4: KubeProxyConfiguration: iptables.masqueradeBit: "
                                           "expected an integer, got the string '14'"),
    ("iptables:\n  masqueradeBit: true\n", "iptables.masqueradeBit: expected an integer, got the bool true"),
    ("iptables:\n  syncPeriod: 30\n", "iptables.syncPeriod: expected a duration string like 30s, got the number 30"),
    ("iptables:\n  syncPeriod: 30 seconds\n", "iptables.syncPeriod: '30 seconds' is not a duration"),
    ("mode: 1\n", "mode: expected a string, got the number 1"),
    ("iptables: [1]\n", "iptables: expected an object, got a list"),
    ("nodePortAddresses: 10.0.0.0/8\n", "nodePortAddresses: expected a list of strings"),
    ("ipvs: {excludeCIDRs: [1]}\n", "ipvs.excludeCIDRs[0]: expected a string, got the number 1"),
    ("featureGates: {A: 'yes'}\n", "featureGates.A: expected a bool"),
])
def test_strict_types(body: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(body)
    assert message in str(err.value)


def test_unknown_fields_are_named_by_full_path_and_not_fatal() -> None:
    cfg = load("iptables:\n  masqueradeBitt: 15\n  masqueradeBit: 12\nconntrack: {maxPerCor: 1}\nfoo: 1\n")
    assert cfg.masquerade_bit == 12
    assert cfg.ignored == ("iptables.masqueradeBitt", "conntrack.maxPerCor", "foo")
    assert "kp.yaml:4: KubeProxyConfiguration: iptables.masqueradeBitt: unknown field" in cfg.warnings[0]


@pytest.mark.parametrize(("body", "message"), [
    ("apiVersion: v1\n", "apiVersion: 'v1' is not kubeproxy.config.k8s.io/v1alpha1"),
    ("mode: userspace\n", "mode: 'userspace' is not one of iptables, ipvs, nftables"),
    ("iptables: {masqueradeBit: 32}\n", "iptables.masqueradeBit: 32 must be within the range [0, 31]"),
    ("mode: nftables\nnftables: {masqueradeBit: -1}\n", "nftables.masqueradeBit: -1 must be within"),
    ("iptables: {syncPeriod: -1s}\n", "iptables.syncPeriod: must be greater than 0"),
    ("iptables: {minSyncPeriod: -1s}\n", "iptables.minSyncPeriod: must be greater than or equal to 0"),
    ("iptables: {syncPeriod: 1s, minSyncPeriod: 2s}\n", "iptables.syncPeriod: must be greater than or equal to "
                                                        "iptables.minSyncPeriod"),
    ("healthzBindAddress: 0.0.0.0:99999\n", "healthzBindAddress: '99999' must be a valid port"),
    ("metricsBindAddress: localhost:10249\n", "metricsBindAddress: 'localhost' must be a valid IP"),
    ("bindAddress: node-a\n", "bindAddress: 'node-a' is not a valid IP address"),
    ("clusterCIDR: 10.0.0.0/8,10.1.0.0/16\n", "clusterCIDR: '10.0.0.0/8,10.1.0.0/16': one CIDR, or one IPv4"),
    ("clusterCIDR: 10.0.0.0/33\n", "clusterCIDR: '10.0.0.0/33' is not a valid CIDR"),
    ("nodePortAddresses: [nope]\n", "nodePortAddresses: 'nope' is not a CIDR or one of primary, localhost, all"),
    ("ipvs: {scheduler: fancy}\n", "ipvs.scheduler: 'fancy' is not one of rr"),
    ("ipvs: {excludeCIDRs: [x]}\n", "ipvs.excludeCIDRs[0]: 'x' is not a valid CIDR"),
    ("ipvs: {tcpTimeout: -1s}\n", "ipvs.tcpTimeout: must be greater than or equal to 0"),
    ("conntrack: {min: -1}\n", "conntrack.min: must be greater than or equal to 0"),
    ("conntrack: {udpTimeout: -5s}\n", "conntrack.udpTimeout: must be greater than or equal to 0"),
    ("clientConnection: {burst: -1}\n", "clientConnection.burst: must be greater than or equal to 0"),
    ("oomScoreAdj: 2000\n", "oomScoreAdj: 2000 must be within the range [-1000, 1000]"),
    ("detectLocalMode: Pods\n", "detectLocalMode: 'Pods' is not one of"),
    ("detectLocalMode: BridgeInterface\n", "detectLocal.bridgeInterface: required"),
    ("detectLocalMode: InterfaceNamePrefix\n", "detectLocal.interfaceNamePrefix: required"),
    ("hostnameOverride: '  '\n", "hostnameOverride: is only whitespace"),
    ("logging: {format: xml}\n", "logging.format: 'xml' is not text or json"),
    ("configSyncPeriod: -1s\n", "configSyncPeriod: must be greater than 0"),
])
def test_invalid_values_name_the_field(body: str, message: str) -> None:
    text = HEAD + body if not body.startswith("apiVersion") else body + "kind: KubeProxyConfiguration\n"
    with pytest.raises(ConfigError) as err:
        load_kube_proxy_configuration(text, "kp.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


EFFECTS = [
    ("hostnameOverride: ' Node-A '\n", "node_name", "node-a"),
    ("bindAddress: 192.0.2.10\n", "node_ips", (ip_address("192.0.2.10"),)),
    ("bindAddress: 0.0.0.0\n", "node_ips", ()),
    ("healthzBindAddress: 127.0.0.1\n", "healthz_bind_address", "127.0.0.1:10256"),
    ("metricsBindAddress: '::1'\n", "metrics_bind_address", "[::1]:10249"),
    ("metricsBindAddress: 0.0.0.0:9100\n", "metrics_bind_address", "0.0.0.0:9100"),
    ("bindAddressHardFail: true\n", "bind_address_hard_fail", True),
    ("clientConnection: {kubeconfig: /k, qps: 50, burst: 100}\n", "kubeconfig", "/k"),
    ("clientConnection: {qps: 50}\n", "api_qps", 50.0),
    ("clientConnection: {burst: 100}\n", "api_burst", 100),
    ("clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n", "cluster_cidrs",
     (ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/56"))),
    ("detectLocalMode: NodeCIDR\n", "detect_local_mode", "NodeCIDR"),
    ("detectLocalMode: BridgeInterface\ndetectLocal: {bridgeInterface: cbr0}\n", "bridge_interface", "cbr0"),
    ("detectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: veth}\n",
     "interface_name_prefix", "veth"),
    ("iptables: {localhostNodePorts: true}\n", "localhost_nodeports", True),
    ("iptables: {localhostNodePorts: null}\n", "localhost_nodeports", False),  # netkit's default
    ("nodePortAddresses: [primary]\n", "node_port_primary", True),
    ("mode: nftables\n", "primary_node_ports", True),  # kube-proxy's default in nftables mode
    ("mode: nftables\nnodePortAddresses: [all]\n", "primary_node_ports", False),
    ("mode: iptables\n", "primary_node_ports", False),
    ("nodePortAddresses: [127.0.0.0/8, 192.0.2.0/24]\n", "node_port_addresses",
     (ip_network("127.0.0.0/8"), ip_network("192.0.2.0/24"))),
    ("nodePortAddresses: [localhost]\n", "node_port_addresses", (ip_network("127.0.0.0/8"), ip_network("::1/128"))),
    ("nodePortAddresses: [all, 10.0.0.0/8]\n", "node_port_addresses", ()),
    ("conntrack: {tcpBeLiberal: true}\n", "conntrack_tcp_be_liberal", True),
    ("conntrack: {maxPerCore: 65536, min: 1}\n", "conntrack_max_per_core", 65536),
    ("conntrack: {udpTimeout: 30s, udpStreamTimeout: 2m}\n", "conntrack_udp_stream_timeout", 120.0),
    ("conntrack: {udpTimeout: 30s}\n", "conntrack_udp_timeout", 30.0),
    ("conntrack: {tcpEstablishedTimeout: 1h}\n", "conntrack_tcp_established_timeout", 3600.0),
    ("conntrack: {tcpCloseWaitTimeout: 0s}\n", "conntrack_tcp_close_wait_timeout", 0.0),
    ("mode: ipvs\nipvs: {scheduler: lc}\n", "ipvs_scheduler", "lc"),
    ("ipvs: {strictARP: true}\n", "ipvs_strict_arp", True),
    ("ipvs: {excludeCIDRs: [10.0.0.0/8]}\n", "ipvs_exclude_cidrs", (ip_network("10.0.0.0/8"),)),
    ("ipvs: {tcpTimeout: 15m, tcpFinTimeout: 2m, udpTimeout: 5m}\n", "ipvs_tcp_timeout", 900.0),
    ("ipvs: {tcpFinTimeout: 2m}\n", "ipvs_tcp_fin_timeout", 120.0),
    ("ipvs: {udpTimeout: 5m}\n", "ipvs_udp_timeout", 300.0),
    ("logging: {verbosity: 4}\n", "log_verbosity", 4),
    ("logging: {format: json}\n", "log_format", "json"),
    ("oomScoreAdj: -500\n", "oom_score_adj", -500),
]
# Read by test_the_active_modes_section_is_read.
SECTION_FIELDS = {f"{s}.{k}" for s in ("iptables", "nftables") for k in ("syncPeriod", "minSyncPeriod",
                                                                          "masqueradeAll", "masqueradeBit")}
SECTION_FIELDS |= {"ipvs.syncPeriod", "ipvs.minSyncPeriod", "mode", "apiVersion", "kind"}


@pytest.mark.parametrize(("body", "attr", "expected"), EFFECTS)
def test_each_field_has_its_effect(body: str, attr: str, expected: object) -> None:
    assert getattr(load(body), attr) == expected


@pytest.mark.parametrize("body", [
    "featureGates: {NFTablesProxyMode: true}\n", "enableProfiling: true\n", "showHiddenMetricsForVersion: '1.30'\n",
    "portRange: 30000-32767\n", "winkernel: {enableDSR: true}\n", "windowsRunAsService: true\n",
    "iptables: {snatNodeInternalIP: true}\n", "clientConnection: {acceptContentTypes: application/json}\n",
    "clientConnection: {contentType: application/yaml}\n", "logging: {vmodule: [{filePattern: x, verbosity: 2}]}\n",
    "oomScoreAdj: -500\n",
])
def test_fields_netkit_does_not_act_on_are_reported_when_set(body: str) -> None:
    cfg = load(body)
    assert cfg.warnings and cfg.ignored == ()


def _paths(doc: Any, prefix: str = "") -> set[str]:
    if not isinstance(doc, dict):
        return set()
    out = set()
    for k, v in doc.items():
        out |= {f"{prefix}{k}"} | _paths(v, f"{prefix}{k}.")
    return out


def test_every_used_field_is_covered_by_an_effect_test() -> None:
    covered = set(SECTION_FIELDS)
    for body, _, _ in EFFECTS:
        covered |= _paths(yaml.safe_load(body))
    for f in KPC_FIELDS:
        if f.use is Use.USED and f.kind is not Kind.OBJECT:
            assert f.path in covered, f.path


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("0s", 0.0), ("30s", 30.0), ("1m30s", 90.0), ("1h0m0s", 3600.0), ("500ms", 0.5),
    ("1.5h", 5400.0), ("24h0m0s", 86400.0), ("-1s", -1.0), ("100us", 1e-4),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "30", "1d", "1h m", "30 s"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text, "x")
