"""`make demo` end to end: it finds every example service behaving as trace predicts and leaves no lab."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, need_root_and

pytestmark = pytest.mark.netns


def test_demo_agrees_with_trace_and_removes_its_lab() -> None:
    need_root_and("ip", "iptables-nft-restore", "ip6tables-nft-restore")
    proc = subprocess.run([sys.executable, "-m", "netkit.lab.demo"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "IPv4: in sync" in out and "IPv6: in sync" in out  # the second dry run is empty
    assert "+ default/web:http 3 endpoints" in out  # the first one was not
    assert "DIFFERS" not in out and "10/10 services behaved as trace predicted" in out
    lab_id = re.search(r"^lab (\w+):", out, re.M)
    assert lab_id, out
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"nk{lab_id.group(1)}-" not in left
