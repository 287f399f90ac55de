"""`netkit run` takes kube-proxy's command line: the flag table against kube-proxy's flags
(cmd/kube-proxy/app/options.go and component-base's logging flags), Go's syntax, durations, kubeadm's
DaemonSet arguments, and one `netkit: error:` line naming the flag for every bad value."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from netkit.config import ConfigError
from netkit.runtime.command import register, run_config
from netkit.runtime.flags import FLAGS, Use

# kube-proxy's flags (options.go AddFlags, then logsapi.AddFlags).
KUBE_PROXY_FLAGS = """config write-config-to cleanup feature-gates kubeconfig master kube-api-content-type
kube-api-burst kube-api-qps hostname-override bind-address healthz-bind-address metrics-bind-address
bind-address-hard-fail profiling show-hidden-metrics-for-version init-only proxy-mode iptables-masquerade-bit
masquerade-all iptables-localhost-nodeports iptables-sync-period iptables-min-sync-period ipvs-sync-period
ipvs-min-sync-period ipvs-scheduler ipvs-exclude-cidrs ipvs-strict-arp ipvs-tcp-timeout ipvs-tcpfin-timeout
ipvs-udp-timeout detect-local-mode pod-bridge-interface pod-interface-name-prefix cluster-cidr
nodeport-addresses oom-score-adj conntrack-max-per-core conntrack-min conntrack-tcp-timeout-established
conntrack-tcp-timeout-close-wait conntrack-tcp-be-liberal conntrack-udp-timeout conntrack-udp-timeout-stream
config-sync-period healthz-port metrics-port v vmodule logging-format log-flush-frequency
log-json-info-buffer-size log-json-split-stream log-text-info-buffer-size log-text-split-stream""".split()
KUBEADM_ARGS = ["--config=/var/lib/kube-proxy/config.conf", "--hostname-override=node-a"]


def parse(*argv: str) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="netkit")
    register(top.add_subparsers(dest="command"))
    return top.parse_args(["run", *argv])


def config(*argv: str):  # type: ignore[no-untyped-def]
    return run_config(parse(*argv))[0]


def test_the_table_has_every_kube_proxy_flag() -> None:
    mine = {f.name for f in FLAGS if f.kube_proxy}
    assert mine == set(KUBE_PROXY_FLAGS)
    assert all(f.help for f in FLAGS)


def test_kubeadms_daemonset_arguments(tmp_path: Path) -> None:
    conf = tmp_path / "config.conf"
    conf.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
                    "clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf}\n")
    cfg = config(f"--config={conf}", "--hostname-override=Node-A")
    assert (cfg.node_name, cfg.kubeconfig, cfg.sync_period) == ("node-a", "/var/lib/kube-proxy/kubeconfig.conf", 30.0)


def test_gos_flag_syntax() -> None:
    cfg = config("--v=2", "--masquerade-all", "--proxy-mode", "nftables", "--iptables-sync-period=45s",
                 "--iptables-min-sync-period", "500ms", "--nodeport-addresses", "primary",
                 "--cluster-cidr=10.244.0.0/16,fd00::/56", "--healthz-bind-address", "127.0.0.1",
                 "--metrics-bind-address=[::1]:9000", "--kube-api-qps=20", "--kube-api-burst", "40")
    assert cfg.log_verbosity == 2 and cfg.masquerade_all and cfg.mode == "nftables"
    assert (cfg.sync_period, cfg.min_sync_period) == (45.0, 0.5)
    assert cfg.node_port_primary and len(cfg.cluster_cidrs) == 2
    assert (cfg.healthz_bind_address, cfg.metrics_bind_address) == ("127.0.0.1:10256", "[::1]:9000")
    assert (cfg.api_qps, cfg.api_burst) == (20.0, 40)
    assert not config("--masquerade-all=false").masquerade_all
    assert config("-v", "5").log_verbosity == 5
    assert config("--sync-period", "30s").sync_period == 30.0
    assert config("--sync-period", "12.5").sync_period == 12.5
    assert config("--healthz-port", "0").healthz_bind_address == ""
    assert config("--metrics-port", "9101").metrics_bind_address == "127.0.0.1:9101"


def test_ipvs_period_flags_apply_only_in_ipvs_mode() -> None:
    assert config("--ipvs-sync-period=10s").sync_period == 30.0
    assert config("--proxy-mode=ipvs", "--ipvs-sync-period=10s", "--iptables-sync-period=5s").sync_period == 10.0


def test_flags_override_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
                    "mode: ipvs\nhostnameOverride: from-file\n")
    cfg = config(f"--config={conf}", "--proxy-mode=iptables", "--hostname-override=from-flag")
    assert (cfg.mode, cfg.node_name) == ("iptables", "from-flag")


@pytest.mark.parametrize(("argv", "message"), [
    (["--v=loud"], "--v: 'loud' is not an integer"),
    (["--masquerade-all=maybe"], "--masquerade-all: 'maybe' is not a bool"),
    (["--proxy-mode=userspace"], "--proxy-mode: 'userspace' is not one of iptables, ipvs, nftables"),
    (["--iptables-sync-period=30"], "--iptables-sync-period: '30' is not a duration"),
    (["--sync-period=0"], "--sync-period: must be greater than 0"),
    (["--iptables-masquerade-bit=40"], "--iptables-masquerade-bit: 40 must be within [0, 31]"),
    (["--healthz-bind-address=0.0.0.0:70000"], "--healthz-bind-address: '70000' must be a valid port"),
    (["--metrics-bind-address=nowhere:1"], "--metrics-bind-address: 'nowhere' must be a valid IP"),
    (["--bind-address=x"], "--bind-address: 'x' is not a valid IP address"),
    (["--cluster-cidr=10.0.0.0/8,10.1.0.0/16"], "--cluster-cidr: '10.0.0.0/8,10.1.0.0/16': one CIDR"),
    (["--nodeport-addresses=everywhere"], "--nodeport-addresses: 'everywhere' is not a CIDR"),
    (["--hostname-override= "], "--hostname-override: empty hostname-override is invalid"),
    (["--detect-local-mode=Pods"], "--detect-local-mode: 'Pods' is not one of"),
    (["--conntrack-min=-1"], "--conntrack-min: -1 must be at least 0"),
    (["--kube-api-qps=fast"], "--kube-api-qps: 'fast' is not a number"),
    (["--feature-gates=A"], "--feature-gates: 'A' is not NAME=true or NAME=false"),
    (["--feature-gates=A=maybe"], "--feature-gates: A: 'maybe' is not a bool"),
    (["--oom-score-adj=-2000"], "--oom-score-adj: -2000 must be within [-1000, 1000]"),
    (["--write-config-to="], "--write-config-to: empty path"),
    (["--min-sync-period=10s", "--sync-period=5s"], "--sync-period: 5s must be greater than or equal to"),
])
def test_bad_flag_values_name_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(*argv)
    assert message in str(err.value)


def test_reported_flags_warn() -> None:
    _, warnings = run_config(parse("--feature-gates=A=true", "--oom-score-adj=-999", "--profiling"))
    assert len(warnings) == 3 and all("netkit does not act on it" in w for w in warnings)


def _netkit(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netkit", *argv], capture_output=True, text=True, timeout=60)


def test_a_bad_flag_is_one_error_line_and_exit_2() -> None:
    proc = _netkit("run", "--iptables-sync-period=soon", "-f", "/nonexistent")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["netkit: error: --iptables-sync-period: 'soon' is not a duration like 1s, "
                                        "30s, 1m30s or 500ms"]


def test_a_bad_config_value_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    conf = tmp_path / "config.conf"
    conf.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
                    "iptables:\n  masqueradeBit: 99\n")
    proc = _netkit("run", f"--config={conf}")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"netkit: error: {conf}:4: KubeProxyConfiguration: iptables.masqueradeBit: "
                                        "99 must be within the range [0, 31]"]


def test_uses_of_the_table_are_consistent() -> None:
    refused = [f.name for f in FLAGS if f.use is Use.REFUSED]
    assert refused == []  # --write-config-to and --init-only act as kube-proxy's (test_config_encode, test_init_only)
