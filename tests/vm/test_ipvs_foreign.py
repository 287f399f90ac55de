"""IPVS mode, foreign edits inside what netkit owns (in the test VM): a real server someone added
to one of netkit's virtual servers and an entry someone added to one of netkit's ipsets are shown
by the plan (what `diff` prints), removed by apply (what `netkit apply` and the daemon's full sync
send), and the kernel is in sync afterwards; cleanup without --mode removes the IPVS objects too.
"""

from __future__ import annotations

import subprocess
import sys

from netkit.config import Config
from netkit.model import IPFamily
from netkit.rules.ipvs.compile import compile
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.plan import describe, plan
from tests.conftest import ROOT
from tests.unit.ipvs_states import sp, state
from tests.vm.ipvslab import POD_IPS, Lab, sh

CONFIG = Config(mode="ipvs")


def test_foreign_real_server_and_set_entry_are_shown_and_repaired(lab: Lab) -> None:
    node = lab.node
    k = IPVSKernel(IPFamily.IPV4, node)
    desired = compile(state(sp("web", "10.96.0.10", 80, POD_IPS[:2])), CONFIG, IPFamily.IPV4)
    k.apply(plan(k.dump(), desired))
    try:
        sh("ip", "netns", "exec", node, "ipvsadm", "-a", "-t", "10.96.0.10:80", "-r", "10.244.9.9:8080", "-m")
        sh("ip", "netns", "exec", node, "ipset", "add", "KUBE-CLUSTER-IP", "10.96.0.99,tcp:80")
        p = plan(k.dump(), desired)
        shown = describe(p)
        assert "10.244.9.9" in shown and "10.96.0.99" in shown, shown
        k.apply(p)
        assert plan(k.dump(), desired).empty
        assert "10.244.9.9" not in sh("ip", "netns", "exec", node, "ipvsadm", "-Ln")
        assert "10.96.0.99" not in sh("ip", "netns", "exec", node, "ipset", "list", "KUBE-CLUSTER-IP")
    finally:
        done = subprocess.run([sys.executable, "-m", "netkit", "cleanup", "--netns", node, "--ip-family", "ipv4"],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "10.96.0.10" not in sh("ip", "netns", "exec", node, "ipvsadm", "-Ln")
    assert "KUBE-CLUSTER-IP" not in sh("ip", "netns", "exec", node, "ipset", "list", "-n")
