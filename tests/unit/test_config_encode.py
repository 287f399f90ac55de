"""`netkit run --write-config-to PATH`: the configuration written as kube-proxy writes it (every
v1alpha1 field, kube-proxy's defaults, the active mode's section, Go durations), and read back by
`--config` and the field table to the same configuration, without a warning."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from netkit.config import KPC_FIELDS, Config, Kind, load_kube_proxy_configuration, parse_duration
from netkit.config_encode import default_value, dump_kube_proxy_configuration, format_duration
from netkit.runtime.command import register, run_config_named
from tests.conftest import run_netkit
from tests.unit.test_kube_proxy_config import V1ALPHA1, kubeadm_config_conf

# What kube-proxy itself writes for a field whose default it fills in (kube-proxy's defaults, typed
# out here independently of the table in netkit/config.py).
KUBE_PROXY_WRITES = {
    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
    "bindAddress": "0.0.0.0", "healthzBindAddress": "0.0.0.0:10256", "metricsBindAddress": "127.0.0.1:10249",
    "clientConnection.contentType": "application/vnd.kubernetes.protobuf", "clientConnection.qps": 5,
    "clientConnection.burst": 10, "configSyncPeriod": "15m0s", "mode": "iptables", "detectLocalMode": "ClusterCIDR",
    "iptables.masqueradeBit": 14, "iptables.syncPeriod": "30s", "iptables.minSyncPeriod": "1s",
    "nftables.masqueradeBit": 14, "ipvs.scheduler": "rr", "oomScoreAdj": -999,
    "conntrack.maxPerCore": 32768, "conntrack.min": 131072, "conntrack.tcpEstablishedTimeout": "24h0m0s",
    "conntrack.tcpCloseWaitTimeout": "1h0m0s", "logging.flushFrequency": "5s",
}
# Where netkit's file differs from the table's defaults, and why: the conversion leaves the periods
# of the sections the mode does not read at 0s (as kube-proxy's); netkit's own defaults.
NOT_THE_TABLES = {"ipvs.syncPeriod": "0s", "nftables.syncPeriod": "0s", "nftables.minSyncPeriod": "0s",
                  "iptables.localhostNodePorts": False, "logging.format": "json"}


def parse(*argv: str) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="netkit")
    register(top.add_subparsers(dest="command"))
    return top.parse_args(["run", *argv])


def flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path != "featureGates" and path != "logging.options":
            out.update(flat(value, f"{path}."))
        else:
            out[path] = value
    return out


def written(*argv: str) -> tuple[Config, str]:
    cfg, _, defaulted = run_config_named(parse(*argv))
    return cfg, dump_kube_proxy_configuration(cfg, "" if defaulted else cfg.node_name)


def same(cfg: Config) -> Config:
    """What a configuration does (a file's `kept` values and warnings aside)."""
    return replace(cfg, node_port_primary=cfg.primary_node_ports, log_format=cfg.log_format or "json",
                   kept=(), warnings=(), ignored=(), node_name="")


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.5, "500ms"), (0.0015, "1.5ms"), (1e-4, "100µs"), (1.5, "1.5s"), (30, "30s"), (90, "1m30s"),
    (3600, "1h0m0s"), (86400, "24h0m0s"), (3661.25, "1h1m1.25s"), (-2, "-2s"),
])
def test_go_duration_strings(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text, "t") == pytest.approx(seconds)


def test_every_field_is_written_with_kube_proxys_default() -> None:
    _, text = written()
    fields = flat(yaml.safe_load(text))
    assert sorted(fields) == sorted(p for p in V1ALPHA1 if Kind.OBJECT not in {f.kind for f in KPC_FIELDS
                                                                                if f.path == p})
    assert list(yaml.safe_load(text)) == sorted(yaml.safe_load(text))  # keys sorted, as Go's encoder
    for path, value in KUBE_PROXY_WRITES.items():
        assert fields[path] == value, path
    for spec in KPC_FIELDS:
        if spec.kind is not Kind.OBJECT:
            assert fields[spec.path] == NOT_THE_TABLES.get(spec.path, default_value(spec)), spec.path


@pytest.mark.parametrize("argv", [
    (),
    ("--proxy-mode=nftables", "--masquerade-all", "--iptables-sync-period=45s", "--iptables-min-sync-period=500ms",
     "--hostname-override=Node-A", "--cluster-cidr=10.244.0.0/16,fd00:244::/56"),
    ("--proxy-mode=nftables", "--nodeport-addresses=10.0.0.0/8"),
    ("--proxy-mode=ipvs", "--ipvs-sync-period=1m", "--ipvs-min-sync-period=2s", "--ipvs-scheduler=wrr",
     "--ipvs-exclude-cidrs=10.9.0.0/16", "--ipvs-strict-arp", "--ipvs-tcp-timeout=900s", "--iptables-masquerade-bit=5"),
    ("--nodeport-addresses=primary,127.0.0.0/8", "--iptables-localhost-nodeports", "--conntrack-tcp-be-liberal",
     "--conntrack-max-per-core=0", "--conntrack-udp-timeout=30s", "--conntrack-udp-timeout-stream=2m",
     "--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth", "--healthz-port=12345",
     "--metrics-bind-address=[::1]:9000", "--bind-address=192.0.2.10", "--bind-address-hard-fail",
     "--kube-api-qps=2.5", "--kube-api-burst=7", "--kubeconfig=/etc/kp.conf", "-v", "4", "--logging-format=text"),
    ("--nodeport-addresses=all", "--proxy-mode=nftables"),
])
def test_the_written_file_reads_back_to_the_same_configuration(tmp_path: Path, argv: tuple[str, ...]) -> None:
    cfg, text = written(*argv)
    back = load_kube_proxy_configuration(text, "written.conf")
    assert back.warnings == ()  # netkit's own file: nothing to report
    assert same(back) == same(cfg)
    path = tmp_path / "config.conf"
    path.write_text(text)
    via_run, warnings, _ = run_config_named(parse(f"--config={path}"))
    assert warnings == () and same(via_run) == same(cfg)
    assert via_run.node_name == cfg.node_name or "--hostname-override=Node-A" not in argv


def test_a_files_values_are_written_back_and_flags_override_them(tmp_path: Path) -> None:
    conf = tmp_path / "in.conf"
    conf.write_text(kubeadm_config_conf() + "\nfeatureGates: {A: true}\nportRange: 30000-32767\n")
    cfg, text = written(f"--config={conf}", "--feature-gates=B=false", "--profiling", "--config-sync-period=5m",
                        "--oom-score-adj=-10")
    fields = flat(yaml.safe_load(text))
    assert fields["featureGates"] == {"B": False}  # the flag replaces the file's map (kube-proxy's flags win)
    assert (fields["portRange"], fields["enableProfiling"], fields["configSyncPeriod"]) == ("30000-32767", True, "5m")
    assert fields["oomScoreAdj"] == -10
    assert fields["clientConnection.kubeconfig"] == "/var/lib/kube-proxy/kubeconfig.conf"
    assert fields["clusterCIDR"] == "10.244.0.0/16" and fields["iptables.syncPeriod"] == "30s"
    assert fields["logging.flushFrequency"] == "5s"  # kubeadm's 0, defaulted as kube-proxy does
    assert fields["logging.options"] == {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}}
    back = load_kube_proxy_configuration(text, "w")
    assert same(back) == same(cfg)
    reported = {w.split(": ")[2] for w in back.warnings}  # still said, as for the flags that set them
    assert reported == {"featureGates", "enableProfiling", "portRange", "oomScoreAdj"}


def test_the_command_writes_exits_0_and_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "kp.conf"
    proc = run_netkit("run", f"--write-config-to={out}", "--proxy-mode=nftables", "--masquerade-all",
                      "--kubeconfig=/nonexistent", "--log-format=text", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"Wrote configuration to: {out}" in proc.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["mode"] == "nftables" and doc["nftables"]["masqueradeAll"] is True
    assert doc["iptables"]["masqueradeAll"] is False and doc["nodePortAddresses"] == ["primary"]


def test_a_bad_flag_writes_nothing_and_an_unwritable_path_is_one_error_line(tmp_path: Path) -> None:
    out = tmp_path / "kp.conf"
    bad = run_netkit("run", f"--write-config-to={out}", "--iptables-masquerade-bit=40", timeout=60)
    assert bad.returncode == 2 and not out.exists()
    assert bad.stderr.splitlines() == ["netkit: error: --iptables-masquerade-bit: 40 must be within [0, 31]"]
    nowhere = tmp_path / "missing" / "kp.conf"
    proc = run_netkit("run", f"--write-config-to={nowhere}", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (f"netkit: error: --write-config-to: {nowhere}: cannot write: "
                                            "No such file or directory")


def test_kubeadms_zero_values_are_written_as_kube_proxys_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "config.conf"
    conf.write_text(kubeadm_config_conf())
    cfg, text = written(f"--config={conf}")
    fields = flat(yaml.safe_load(text))
    for path in ("configSyncPeriod", "clientConnection.qps", "clientConnection.burst", "iptables.masqueradeBit",
                 "iptables.syncPeriod", "iptables.minSyncPeriod", "conntrack.maxPerCore", "conntrack.min",
                 "conntrack.tcpEstablishedTimeout", "healthzBindAddress", "metricsBindAddress", "mode",
                 "detectLocalMode", "oomScoreAdj", "clientConnection.contentType", "ipvs.scheduler"):
        assert fields[path] == KUBE_PROXY_WRITES[path], path
    assert same(load_kube_proxy_configuration(text, "w")) == same(cfg)
