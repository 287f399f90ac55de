"""`netkit run --dns-listen`: the daemon serves cluster DNS from the objects it syncs, and follows them."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode

from netkit.lab.cluster import nodehttp
from netkit.netns import socket_in
from tests.conftest import EXAMPLES, ROOT

DNS_PORT = 53  # inside the test's own namespace: nothing else can hold it


def ask(netns: str, name: str, rdtype: str = "A") -> dns.message.Message:
    """A query to the daemon, from a socket made in its namespace."""
    with socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)  # as dnspython's own: it waits for readability, then reads
        return dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1", port=DNS_PORT, timeout=1, sock=sock)


def wait_for(proc: subprocess.Popen[str], predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Until `predicate` holds; fails at once, with the daemon's errors, if it exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (dns.exception.Timeout, OSError):
            pass
        if proc.poll() is not None:
            raise AssertionError(f"netkit run exited ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def run_with_dns(manifests: Path, netns: str, min_sync: str, sync: str) -> subprocess.Popen[str]:
    """`netkit run -f MANIFESTS --dns-listen 127.0.0.1:53` inside NETNS (as a host-network pod runs
    it), metrics on 127.0.0.1:10249 there, health off. The ports are the namespace's own: a port
    picked free in the machine's namespace can be taken before the daemon binds it (a loopback
    connection's ephemeral port is enough), and the daemon exits."""
    return subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-m", "netkit", "run", "-f", str(manifests),
         "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--healthz-bind-address", "",
         "--metrics-bind-address", "127.0.0.1:10249", "--dns-listen", f"127.0.0.1:{DNS_PORT}",
         "--dns-upstream", "127.0.0.1:9",
         "--min-sync-period", min_sync, "--sync-period", sync],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_daemon_serves_and_follows_the_synced_view(netns: str, tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES, manifests)
    proc = run_with_dns(manifests, netns, "0.1", "5")
    try:
        wait_for(proc, lambda: ask(netns, "web.default.svc.cluster.local").rcode() == dns.rcode.NOERROR)
        reply = ask(netns, "web.default.svc.cluster.local")
        assert [str(r) for rrset in reply.answer for r in rrset] == ["10.96.0.10"]
        headless = ask(netns, "db.default.svc.cluster.local")
        assert sorted(str(r) for rrset in headless.answer for r in rrset) == ["10.244.1.21", "10.244.2.21"]
        assert ask(netns, "nope.default.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN

        (manifests / "10-web-clusterip.yaml").write_text(
            (manifests / "10-web-clusterip.yaml").read_text().replace("10.96.0.10", "10.96.0.99"))
        wait_for(proc, lambda: [str(r) for rrset in ask(netns, "web.default.svc.cluster.local").answer
                                for r in rrset] == ["10.96.0.99"])
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_dns_follows_changes_without_waiting_for_a_rule_sync(netns: str, tmp_path: Path) -> None:
    """Rule syncs at most every 60 s: a changed ClusterIP must still reach DNS at once."""
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES, manifests)
    proc = run_with_dns(manifests, netns, "60", "120")
    try:
        wait_for(proc, lambda: ask(netns, "web.default.svc.cluster.local").rcode() == dns.rcode.NOERROR)
        wait_for(proc, lambda: (nodehttp.last_sync(netns) or 0) > 0)  # the next may not start for 60 s
        first_sync = nodehttp.last_sync(netns)
        (manifests / "10-web-clusterip.yaml").write_text(
            (manifests / "10-web-clusterip.yaml").read_text().replace("10.96.0.10", "10.96.0.77"))
        wait_for(proc, lambda: [str(r) for rrset in ask(netns, "web.default.svc.cluster.local").answer
                                for r in rrset] == ["10.96.0.77"], timeout=30)
        assert nodehttp.last_sync(netns) == first_sync  # no rule sync brought it

    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
