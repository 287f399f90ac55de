"""The sysctls kube-proxy sets at start, as netkit computes them, and `--apply-sysctls` writing only
what differs (into a scratch directory standing for /proc/sys: tests never touch the machine's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from netkit.config import Config
from netkit.runtime.sysctls import Sysctl, apply_or_report, wanted


def test_kube_proxys_conntrack_sizing_and_timeouts() -> None:
    got = {s.path: s.value for s in wanted(Config(), cpus=2)}
    assert got == {"net/netfilter/nf_conntrack_max": 131072,  # max(32768 x 2, 131072)
                   "net/netfilter/nf_conntrack_tcp_timeout_established": 86400,
                   "net/netfilter/nf_conntrack_tcp_timeout_close_wait": 3600}
    assert {s.path: s.value for s in wanted(Config(), cpus=8)}["net/netfilter/nf_conntrack_max"] == 262144


def test_zero_leaves_a_value_and_options_add_theirs() -> None:
    cfg = replace(Config(), conntrack_max_per_core=0, conntrack_tcp_established_timeout=0,
                  conntrack_tcp_close_wait_timeout=0, conntrack_udp_timeout=30, conntrack_udp_stream_timeout=120,
                  conntrack_tcp_be_liberal=True)
    nf = "net/netfilter/nf_conntrack"
    assert wanted(cfg, 4) == (Sysctl(f"{nf}_udp_timeout", 30, "conntrack.udpTimeout"),
                              Sysctl(f"{nf}_udp_timeout_stream", 120, "conntrack.udpStreamTimeout"),
                              Sysctl(f"{nf}_tcp_be_liberal", 1, "conntrack.tcpBeLiberal"))
    arp = {s.path for s in wanted(replace(cfg, mode="ipvs", ipvs_strict_arp=True), 4)}
    assert {"net/ipv4/conf/all/arp_ignore", "net/ipv4/conf/all/arp_announce"} <= arp
    assert "net/ipv4/conf/all/route_localnet" in {s.path for s in wanted(replace(cfg, localhost_nodeports=True), 4)}


def _proc(tmp: Path, values: dict[str, int]) -> Path:
    for path, value in values.items():
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_text(f"{value}\n")
    return tmp


def test_report_writes_nothing_and_apply_writes_what_differs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _proc(tmp_path, {"net/netfilter/nf_conntrack_max": 65536,
                            "net/netfilter/nf_conntrack_tcp_timeout_established": 86400,
                            "net/netfilter/nf_conntrack_tcp_timeout_close_wait": 60})
    caplog.set_level("INFO")
    assert apply_or_report(Config(), apply=False, root=root, cpus=2).written == ()
    assert "leaving sysctl net.netfilter.nf_conntrack_max at 65536 (kube-proxy would set 131072" in caplog.text
    assert (root / "net/netfilter/nf_conntrack_max").read_text() == "65536\n"
    outcome = apply_or_report(Config(), apply=True, root=root, cpus=2)
    written = outcome.written
    assert outcome.failed == ()
    assert [s.path for s in written] == ["net/netfilter/nf_conntrack_max",
                                         "net/netfilter/nf_conntrack_tcp_timeout_close_wait"]
    assert (root / "net/netfilter/nf_conntrack_max").read_text() == "131072\n"
    assert (root / "net/netfilter/nf_conntrack_tcp_timeout_close_wait").read_text() == "3600\n"


def test_a_refused_write_is_a_failure_not_an_exception(tmp_path: Path) -> None:
    root = _proc(tmp_path, {"net/netfilter/nf_conntrack_max": 65536})
    (root / "net/netfilter/nf_conntrack_tcp_timeout_established").mkdir()  # writing a directory fails
    outcome = apply_or_report(Config(), apply=True, root=root, cpus=2)
    assert [s.path for s in outcome.failed] == ["net/netfilter/nf_conntrack_tcp_timeout_established"]
    assert "net/netfilter/nf_conntrack_max" in [s.path for s in outcome.written]
