"""`make demo` end to end: it finds every example service behaving as trace predicts, a pod resolves
`web` by its short name with glibc's resolver against `netkit dns` and reaches it, and it leaves no lab
and no /etc/netns file behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, need_root_and

pytestmark = pytest.mark.netns


def test_demo_agrees_with_trace_and_removes_its_lab() -> None:
    need_root_and("ip", "iptables-nft-restore", "ip6tables-nft-restore", "getent")
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
    assert re.search(r"getent hosts web\n  10\.96\.0\.10 +web\.default\.svc\.cluster\.local\n", out), out
    assert "✓ resolved by its short name and reached" in out and "DNS by short name worked" in out
    assert not list(Path("/etc/netns").glob(f"nk{lab_id.group(1)}-*"))  # the pod's resolv.conf is gone
