"""`netkit run --init-only` (kube-proxy's InitAndExit): sets the node sysctls --apply-sysctls sets,
then exits without starting the daemon. Run inside a fresh network namespace, whose conntrack
timeouts are its own (nf_conntrack_max is the machine's: left alone with --conntrack-max-per-core=0);
with --netns it is refused, as --apply-sysctls is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, need_root_and, netns_sh
from tests.conftest import run_netkit as netkit

pytestmark = pytest.mark.netns
NF = Path("/proc/sys/net/netfilter")
SET = {"nf_conntrack_tcp_timeout_established": 12345, "nf_conntrack_tcp_timeout_close_wait": 321,
       "nf_conntrack_udp_timeout": 33, "nf_conntrack_udp_timeout_stream": 99, "nf_conntrack_tcp_be_liberal": 1}


def _values(netns: str) -> dict[str, int]:
    text = netns_sh(netns, "sh", "-c", " ".join(f"cat {NF / name};" for name in SET))
    return dict(zip(SET, map(int, text.split()), strict=True))


def test_init_only_sets_the_sysctls_and_exits(netns: str) -> None:
    need_root_and("ip")
    if not (NF / "nf_conntrack_tcp_timeout_established").exists():
        pytest.skip("needs the nf_conntrack module (no /proc/sys/net/netfilter/nf_conntrack_*)")
    root_before = {name: int((NF / name).read_text()) for name in SET}
    before = _values(netns)
    assert before != SET  # a fresh namespace has the kernel's defaults
    argv = [sys.executable, "-m", "netkit", "run", "--init-only", "--log-format=text", "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=3h25m45s", "--conntrack-tcp-timeout-close-wait=321s",
            "--conntrack-udp-timeout=33s", "--conntrack-udp-timeout-stream=99s", "--conntrack-tcp-be-liberal",
            "--kubeconfig=/nonexistent", "--healthz-bind-address=127.0.0.1:1"]  # would fail if a daemon started
    proc = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "System initialized and --init-only specified" in proc.stderr
    assert "starting" not in proc.stderr
    assert _values(netns) == SET
    assert {name: int((NF / name).read_text()) for name in SET} == root_before  # the machine's: untouched


def test_init_only_is_refused_with_netns(netns: str) -> None:
    need_root_and("ip")
    before = _values(netns) if (NF / "nf_conntrack_udp_timeout").exists() else None
    proc = netkit("run", "--init-only", "--netns", netns, "--conntrack-udp-timeout=33s", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["netkit: error: --init-only: refused with --netns (the conntrack table "
                                        "size is the whole machine's)"]
    assert before is None or _values(netns) == before
