"""`netkit dns` as a user runs it: serves the manifests and follows changes to the files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest

from tests.dnsserver.conftest import DNS_PORT, NO_HTTP, DnsProcess

Z = ".svc.cluster.local."


def svc(name: str, ip: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]}}
"""


@pytest.fixture
def served(tmp_path: Path, netns: str) -> Iterator[tuple[Path, DnsProcess]]:
    """`netkit dns -f DIR` in the test's namespace; its upstream: nothing there, so no query leaves it."""
    (tmp_path / "a.yaml").write_text(svc("alpha", "10.96.1.1"))
    server = DnsProcess(netns, "-f", str(tmp_path), "--listen", f"127.0.0.1:{DNS_PORT}",
                        "--upstream", "127.0.0.1:9", "--upstream-timeout", "0.2", *NO_HTTP)
    try:
        server.wait_for(lambda: rcode(server, f"alpha.default{Z}") == dns.rcode.NOERROR)
        yield tmp_path, server
    finally:
        server.stop()


def rcode(server: DnsProcess, name: str) -> int | None:
    try:
        return server.ask(name).rcode()
    except (OSError, dns.exception.Timeout):
        return None


def address(server: DnsProcess, name: str) -> str | None:
    try:
        m = server.ask(name)
    except (OSError, dns.exception.Timeout):
        return None
    return next((str(r) for rrset in m.answer for r in rrset), None)


def test_reload_on_file_change(served: tuple[Path, DnsProcess]) -> None:
    path, server = served
    assert rcode(server, f"beta.default{Z}") == dns.rcode.NXDOMAIN
    (path / "b.yaml").write_text(svc("beta", "10.96.1.2"))  # a new file
    server.wait_for(lambda: rcode(server, f"beta.default{Z}") == dns.rcode.NOERROR)
    (path / "a.yaml").write_text(svc("gamma", "10.96.1.3"))  # a changed file
    server.wait_for(lambda: rcode(server, f"gamma.default{Z}") == dns.rcode.NOERROR)
    assert rcode(server, f"alpha.default{Z}") == dns.rcode.NXDOMAIN


def test_a_file_that_cannot_be_read_keeps_the_previous_view(served: tuple[Path, DnsProcess]) -> None:
    path, server = served
    (path / "a.yaml").write_text("kind: Service\nmetadata: [unclosed\n")
    (path / "c.yaml").write_text(svc("delta", "10.96.1.4"))
    # The other file's change is served; the broken file keeps its last good objects (no stale NXDOMAIN).
    server.wait_for(lambda: rcode(server, f"delta.default{Z}") == dns.rcode.NOERROR)
    assert rcode(server, f"alpha.default{Z}") == dns.rcode.NOERROR
    (path / "a.yaml").write_text(svc("alpha", "10.96.1.9"))
    server.wait_for(lambda: address(server, f"alpha.default{Z}") == "10.96.1.9")


def test_namespace_objects_in_the_files_count(served: tuple[Path, DnsProcess]) -> None:
    """A Namespace without Services is NODATA, not NXDOMAIN; its pod names answer (pods insecure, the
    default), those of a namespace that does not exist are NXDOMAIN — as CoreDNS with the API."""
    path, server = served
    assert rcode(server, "quiet.svc.cluster.local.") == dns.rcode.NXDOMAIN
    assert rcode(server, "10-244-1-5.quiet.pod.cluster.local.") == dns.rcode.NXDOMAIN
    (path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: quiet}\n")
    server.wait_for(lambda: rcode(server, "quiet.svc.cluster.local.") == dns.rcode.NOERROR)
    assert address(server, "10-244-1-5.quiet.pod.cluster.local.") == "10.244.1.5"
    assert rcode(server, "10-244-1-5.elsewhere.pod.cluster.local.") == dns.rcode.NXDOMAIN
