"""`netkit dns` as a user runs it: serves the manifests and follows changes to the files."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from tests.conftest import ROOT
from tests.dnsserver.conftest import NO_HTTP, free_port

Z = ".svc.cluster.local."


def svc(name: str, ip: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]}}
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    (tmp_path / "a.yaml").write_text(svc("alpha", "10.96.1.1"))
    port = free_port()
    dead = free_port()  # the upstream: nothing there, so no query leaves loopback
    proc = subprocess.Popen(
        [sys.executable, "-m", "netkit", "dns", "-f", str(tmp_path), "--listen", f"127.0.0.1:{port}",
         "--upstream", f"127.0.0.1:{dead}", "--upstream-timeout", "0.2", *NO_HTTP],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rcode(port, f"alpha.default{Z}") == dns.rcode.NOERROR)
        yield tmp_path, port
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
        print(err)
    assert proc.returncode == 0, err


def rcode(port: int, name: str) -> int | None:
    try:
        m = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=0.5)
    except (TimeoutError, OSError, dns.exception.Timeout):
        return None
    return m.rcode()


def address(port: int, name: str) -> str | None:
    try:
        m = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=0.5)
    except (TimeoutError, OSError, dns.exception.Timeout):
        return None
    return next((str(r) for rrset in m.answer for r in rrset), None)


def wait_for(cond: object, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_reload_on_file_change(served: tuple[Path, int]) -> None:
    path, port = served
    assert rcode(port, f"beta.default{Z}") == dns.rcode.NXDOMAIN
    (path / "b.yaml").write_text(svc("beta", "10.96.1.2"))  # a new file
    wait_for(lambda: rcode(port, f"beta.default{Z}") == dns.rcode.NOERROR)
    (path / "a.yaml").write_text(svc("gamma", "10.96.1.3"))  # a changed file
    wait_for(lambda: rcode(port, f"gamma.default{Z}") == dns.rcode.NOERROR)
    assert rcode(port, f"alpha.default{Z}") == dns.rcode.NXDOMAIN


def test_a_file_that_cannot_be_read_keeps_the_previous_view(served: tuple[Path, int]) -> None:
    path, port = served
    (path / "a.yaml").write_text("kind: Service\nmetadata: [unclosed\n")
    (path / "c.yaml").write_text(svc("delta", "10.96.1.4"))
    # The other file's change is served; the broken file keeps its last good objects (no stale NXDOMAIN).
    wait_for(lambda: rcode(port, f"delta.default{Z}") == dns.rcode.NOERROR)
    assert rcode(port, f"alpha.default{Z}") == dns.rcode.NOERROR
    (path / "a.yaml").write_text(svc("alpha", "10.96.1.9"))
    wait_for(lambda: address(port, f"alpha.default{Z}") == "10.96.1.9")


def test_namespace_objects_in_the_files_count(served: tuple[Path, int]) -> None:
    """A Namespace without Services is NODATA, not NXDOMAIN; its pod names answer (pods insecure, the
    default), those of a namespace that does not exist are NXDOMAIN — as CoreDNS with the API."""
    path, port = served
    assert rcode(port, "quiet.svc.cluster.local.") == dns.rcode.NXDOMAIN
    assert rcode(port, "10-244-1-5.quiet.pod.cluster.local.") == dns.rcode.NXDOMAIN
    (path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: quiet}\n")
    wait_for(lambda: rcode(port, "quiet.svc.cluster.local.") == dns.rcode.NOERROR)
    assert address(port, "10-244-1-5.quiet.pod.cluster.local.") == "10.244.1.5"
    assert rcode(port, "10-244-1-5.elsewhere.pod.cluster.local.") == dns.rcode.NXDOMAIN
