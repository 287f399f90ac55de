"""glibc's resolver (`getent hosts`) in a network namespace with a pod's resolv.conf: a short Service
name resolves through the search path, as it does for a pod with kubelet's resolv.conf."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.dnsserver.conftest import NO_HTTP

POD_RESOLV_CONF = """nameserver 127.0.0.1
search default.svc.cluster.local svc.cluster.local cluster.local
options ndots:5 timeout:1 attempts:2
"""


@pytest.fixture
def pod_resolv_conf(netns: str) -> Iterator[str]:
    """`ip netns exec` bind-mounts /etc/netns/<name>/resolv.conf over /etc/resolv.conf."""
    if shutil.which("getent") is None:
        pytest.skip("needs getent (glibc)")
    conf = Path("/etc/netns") / netns
    conf.mkdir(parents=True)
    try:
        (conf / "resolv.conf").write_text(POD_RESOLV_CONF)
        yield netns
    finally:
        shutil.rmtree(conf, ignore_errors=True)


def getent(netns: str, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, "getent", "hosts", name],
                          capture_output=True, text=True, timeout=15)


def test_a_short_name_resolves_through_the_search_path(pod_resolv_conf: str) -> None:
    ns = pod_resolv_conf
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "netkit", "dns", "-f", str(EXAMPLES),
                             "--listen", "127.0.0.1:53", "--upstream", "127.0.0.1:9", "--upstream-timeout", "0.2",
                             *NO_HTTP], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while (short := getent(ns, "web")).returncode != 0:
            assert time.monotonic() < deadline, short.stderr
            time.sleep(0.1)
        assert short.stdout.split() == ["10.96.0.10", "web.default.svc.cluster.local"]
        assert getent(ns, "web.default").stdout.split()[0] == "10.96.0.10"
        assert getent(ns, "nothing-here").returncode == 2  # NXDOMAIN on every search path entry
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
