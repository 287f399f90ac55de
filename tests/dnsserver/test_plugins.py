"""The Corefile's `hosts` and kubernetes `endpoint_pod_names` over real sockets (`netkit dns --conf`
on the examples, dnspython as the client)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import dns.rcode
import dns.rdatatype

from tests.dnsserver.conftest import free_port
from tests.dnsserver.test_corefile import WEB, Served, corefile, serve, wait_for

__all__ = ["serve"]


def answers(served: Served, name: str, qtype: str = "A") -> list[str] | str | None:
    reply = served.ask(name, qtype)
    if reply is None:
        return None
    if reply.rcode() != dns.rcode.NOERROR or not reply.answer:
        return dns.rcode.to_text(reply.rcode())
    return sorted(f"{rrset.name} {rrset.ttl} {dns.rdatatype.to_text(rrset.rdtype)} {rr}"
                  for rrset in reply.answer for rr in rrset)


def test_hosts_file_inline_ptr_fallthrough_and_reload(tmp_path: Path,
                                                      serve: Callable[[Path, int, int], Served]) -> None:
    port, ready = free_port(), free_port()
    hosts = tmp_path / "custom.hosts"
    hosts.write_text("10.0.0.1 a.example.org\nfd00::1 a.example.org\n")
    extra = (f"hosts {hosts} {{\n        10.0.0.2 b.example.org\n        ttl 60\n        reload 1s\n"
             "        fallthrough\n    }")
    conf = tmp_path / "Corefile"
    conf.write_text(corefile(port, ready, extra=extra))
    served = serve(conf, port, ready)
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
                                                        serve: Callable[[Path, int, int], Served]) -> None:
    port, ready = free_port(), free_port()
    conf = tmp_path / "Corefile"
    extra = f"hosts {tmp_path / 'missing.hosts'} example.org {{\n        10.0.0.2 b.example.org\n    }}"
    conf.write_text(corefile(port, ready, extra=extra))
    served = serve(conf, port, ready)
    wait_for(lambda: served.ready_status() == 200, served)
    assert answers(served, "b.example.org.") == ["b.example.org. 3600 A 10.0.0.2"]
    assert answers(served, "x.example.org.") == "SERVFAIL"  # CoreDNS's answer for a name it lacks
    assert answers(served, WEB) == [f"{WEB} 30 A 10.96.0.10"]  # outside its zones: kubernetes
    assert served.said("missing.hosts")
