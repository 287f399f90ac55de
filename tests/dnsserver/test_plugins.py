"""The Corefile's `hosts`, kubernetes `endpoint_pod_names` and a block without `bind` (both
families) over real sockets (`netkit dns --conf`
on the examples, dnspython as the client)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from netkit.dns.engine import Engine
from netkit.dns.server import DnsServer
from netkit.dns.upstream import Address, Forwarder
from netkit.dns.view import Options
from netkit.netns import socket_in
from tests.dnsserver.conftest import DNS_PORT, READY_PORT, LoopThread, TestUpstream, upstream
from tests.dnsserver.test_corefile import WEB, Served, corefile, serve, wait_for
from tests.unit.test_runtime_health import _has_ipv6_loopback

__all__ = ["serve", "upstream"]


def answers(served: Served, name: str, qtype: str = "A") -> list[str] | str | None:
    reply = served.ask(name, qtype)
    if reply is None:
        return None
    if reply.rcode() != dns.rcode.NOERROR or not reply.answer:
        return dns.rcode.to_text(reply.rcode())
    return sorted(f"{rrset.name} {rrset.ttl} {dns.rdatatype.to_text(rrset.rdtype)} {rr}"
                  for rrset in reply.answer for rr in rrset)


def test_hosts_file_inline_ptr_fallthrough_and_reload(tmp_path: Path,
                                                      serve: Callable[[Path], Served]) -> None:
    port, ready = DNS_PORT, READY_PORT
    hosts = tmp_path / "custom.hosts"
    hosts.write_text("10.0.0.1 a.example.org\nfd00::1 a.example.org\n")
    extra = (f"hosts {hosts} {{\n        10.0.0.2 b.example.org\n        ttl 60\n        reload 1s\n"
             "        fallthrough\n    }")
    conf = tmp_path / "Corefile"
    conf.write_text(corefile(port, ready, extra=extra))
    served = serve(conf)
    wait_for(lambda: served.ready_status() == 200, served)
    assert answers(served, "a.example.org.") == ["a.example.org. 60 A 10.0.0.1"]
    assert answers(served, "A.Example.Org.", "AAAA") == ["A.Example.Org. 60 AAAA fd00::1"]
    assert answers(served, "b.example.org.") == ["b.example.org. 60 A 10.0.0.2"]
    assert answers(served, "1.0.0.10.in-addr.arpa.", "PTR") == ["1.0.0.10.in-addr.arpa. 60 PTR a.example.org."]
    assert answers(served, "b.example.org.", "AAAA") == "NOERROR"  # the name exists: NODATA
    assert answers(served, WEB) == [f"{WEB} 30 A 10.96.0.10"]  # fallthrough: kubernetes answers
    hosts.write_text("10.0.0.7 a.example.org\n10.0.0.8 c.example.org\n")
    wait_for(lambda: answers(served, "c.example.org.") == ["c.example.org. 60 A 10.0.0.8"], served)
    assert answers(served, "a.example.org.") == ["a.example.org. 60 A 10.0.0.7"]
    assert answers(served, "b.example.org.") == ["b.example.org. 60 A 10.0.0.2"]  # inline entries stay


def test_hosts_without_fallthrough_serves_only_its_zone(tmp_path: Path,
                                                        serve: Callable[[Path], Served]) -> None:
    port, ready = DNS_PORT, READY_PORT
    conf = tmp_path / "Corefile"
    extra = f"hosts {tmp_path / 'missing.hosts'} example.org {{\n        10.0.0.2 b.example.org\n    }}"
    conf.write_text(corefile(port, ready, extra=extra))
    served = serve(conf)
    wait_for(lambda: served.ready_status() == 200, served)
    assert answers(served, "b.example.org.") == ["b.example.org. 3600 A 10.0.0.2"]
    assert answers(served, "x.example.org.") == "SERVFAIL"  # CoreDNS's answer for a name it lacks
    assert answers(served, WEB) == [f"{WEB} 30 A 10.96.0.10"]  # outside its zones: kubernetes
    assert served.said("missing.hosts")


def test_a_server_block_without_bind_listens_on_both_families(
        tmp_path: Path, netns: str, serve: Callable[[Path], Served]) -> None:
    if not _has_ipv6_loopback():
        pytest.skip("needs IPv6 on loopback (::1)")
    port, ready = DNS_PORT, READY_PORT
    conf = tmp_path / "Corefile"
    conf.write_text(corefile(port, ready).replace("    bind 127.0.0.1\n", ""))
    served = serve(conf)
    wait_for(lambda: served.ready_status() == 200, served)
    query = dns.message.make_query(WEB, "A")
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket_in(netns, family, socket.SOCK_DGRAM) as udp:
            udp.setblocking(False)
            assert dns.query.udp(query, host, port=port, timeout=5, sock=udp).answer, host
        with socket_in(netns, family, socket.SOCK_STREAM) as tcp:
            tcp.settimeout(5)
            tcp.connect((host, port))
            tcp.setblocking(False)
            assert dns.query.tcp(query, host, port=port, timeout=5, sock=tcp).answer, host


def test_without_ipv6_the_wildcard_falls_back_to_ipv4(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: Any, **kw: Any) -> socket.socket:
        if family == socket.AF_INET6:  # as in a namespace or kernel without IPv6
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kw)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    lt = LoopThread()
    dns_server = DnsServer(Engine(Options()), Address("::", 0), Forwarder([]))
    try:
        address = lt.call(dns_server.start())
        assert address.host == "0.0.0.0"
        reply = dns.query.udp(dns.message.make_query(WEB, "A"), "127.0.0.1", port=address.port, timeout=5)
        assert reply.rcode() == dns.rcode.SERVFAIL  # answered (no view yet), over IPv4
    finally:
        lt.call(dns_server.close())
        lt.stop()


def test_rewrite_answers_the_name_asked(tmp_path: Path, netns: str, serve: Callable[[Path], Served]) -> None:
    upstream = TestUpstream(host="127.0.0.2", netns=netns)
    try:
        port, ready = DNS_PORT, READY_PORT
        extra = ("rewrite name suffix .my.domain .svc.cluster.local answer auto\n"
                 "    rewrite continue name exact outside.test hop.test\n"
                 "    rewrite name exact hop.test www.example.com\n"
                 "    rewrite name regex ^(.*)\\.pods\\.test\\.$ {1}.default.svc.cluster.local answer auto\n"
                 f"    forward . 127.0.0.2:{upstream.port}")
        conf = tmp_path / "Corefile"
        conf.write_text(corefile(port, ready, extra=extra))
        served = serve(conf)
        wait_for(lambda: served.ready_status() == 200, served)
        assert answers(served, "web.default.my.domain.") == ["web.default.my.domain. 30 A 10.96.0.10"]
        assert answers(served, "Web.Default.My.Domain.") == ["Web.Default.My.Domain. 30 A 10.96.0.10"]
        assert answers(served, "web.pods.test.") == ["web.pods.test. 30 A 10.96.0.10"]
        assert answers(served, "nothing.default.my.domain.") == "NXDOMAIN"
        # forwarded: the upstream is asked the rewritten name (through a continue chain), the client sees its own
        reply = served.ask("outside.test.", "A")
        assert reply is not None and str(reply.question[0].name) == "outside.test."
        assert answers(served, "outside.test.") == ["outside.test. 60 A 192.0.2.1"]
        assert "www.example.com." in upstream.seen
        assert answers(served, WEB) == [f"{WEB} 30 A 10.96.0.10"]  # no rule matches: as asked
    finally:
        upstream.close()
