"""`netkit run --dns-listen`: the daemon serves cluster DNS from the objects it syncs, and follows them."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode

from tests.conftest import EXAMPLES, ROOT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(port: int, name: str, rdtype: str = "A") -> dns.message.Message:
    return dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1", port=port, timeout=1)


def wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (dns.exception.Timeout, OSError):
            pass
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def run_with_dns(manifests: Path, netns: str, port: int, min_sync: str, sync: str) -> subprocess.Popen[str]:
    """`netkit run -f MANIFESTS --dns-listen 127.0.0.1:PORT` inside NETNS, health and metrics off."""
    return subprocess.Popen(
        [sys.executable, "-m", "netkit", "run", "-f", str(manifests), "--node-name", "node-a",
         "--cluster-cidr", "10.244.0.0/16", "--netns", netns, "--healthz-bind-address", "",
         "--metrics-bind-address", "", "--dns-listen", f"127.0.0.1:{port}", "--dns-upstream", "127.0.0.1:9",
         "--min-sync-period", min_sync, "--sync-period", sync],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_daemon_serves_and_follows_the_synced_view(netns: str, tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES, manifests)
    port = free_port()
    proc = run_with_dns(manifests, netns, port, "0.1", "5")
    try:
        wait_for(lambda: ask(port, "web.default.svc.cluster.local").rcode() == dns.rcode.NOERROR)
        reply = ask(port, "web.default.svc.cluster.local")
        assert [str(r) for rrset in reply.answer for r in rrset] == ["10.96.0.10"]
        headless = ask(port, "db.default.svc.cluster.local")
        assert sorted(str(r) for rrset in headless.answer for r in rrset) == ["10.244.1.21", "10.244.2.21"]
        assert ask(port, "nope.default.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN

        (manifests / "10-web-clusterip.yaml").write_text(
            (manifests / "10-web-clusterip.yaml").read_text().replace("10.96.0.10", "10.96.0.99"))
        wait_for(lambda: [str(r) for rrset in ask(port, "web.default.svc.cluster.local").answer
                          for r in rrset] == ["10.96.0.99"])
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_dns_follows_changes_without_waiting_for_a_rule_sync(netns: str, tmp_path: Path) -> None:
    """Rule syncs at most every 60 s: a changed ClusterIP must still reach DNS at once."""
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES, manifests)
    port = free_port()
    proc = run_with_dns(manifests, netns, port, "60", "120")
    try:
        wait_for(lambda: ask(port, "web.default.svc.cluster.local").rcode() == dns.rcode.NOERROR)
        time.sleep(0.5)  # the first rule sync has run: the next may not start for 60 s
        (manifests / "10-web-clusterip.yaml").write_text(
            (manifests / "10-web-clusterip.yaml").read_text().replace("10.96.0.10", "10.96.0.77"))
        wait_for(lambda: [str(r) for rrset in ask(port, "web.default.svc.cluster.local").answer
                          for r in rrset] == ["10.96.0.77"], timeout=10)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
