"""The running server over UDP and TCP, asked by dnspython and dig."""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import time
from collections.abc import Callable

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from netkit.dns.view import Options, build
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text
from tests.dnsserver.conftest import Running, need_dig
from tests.unit.dns_cluster import headless, objects, view
from tests.unit.test_dns_resolver import CASES

Z = ".svc.cluster.local."
Start = Callable[..., Running]


def ask(r: Running, name: str, qtype: str, tcp: bool = False, **kw: object) -> dns.message.Message:
    q = dns.message.make_query(name, qtype, **kw)  # type: ignore[arg-type]
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=r.port, timeout=3)
    return dns.query.udp(q, "127.0.0.1", port=r.port, timeout=3)


def answer_lines(m: dns.message.Message) -> str:
    return "\n".join(line.lower() for rrset in m.answer for line in rrset.to_text().splitlines())


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_table_over_the_wire(start_server: Start, tcp: bool) -> None:
    r = start_server(view())
    for name, qtype, rcode, expected in CASES:
        for _ in range(2):  # the second time from the fast path
            m = ask(r, name, qtype, tcp)
            got = sorted(answer_lines(m).splitlines())  # loadbalance shuffles the addresses
            assert (dns.rcode.to_text(m.rcode()), got) == (rcode.name, sorted(expected.lower().splitlines())), name
            assert m.question[0].name.to_text() == name


def test_the_query_case_is_echoed(start_server: Start) -> None:
    r = start_server(view())
    for name in (f"WEB.default{Z}", f"web.DEFAULT{Z}", f"WeB.dEfAuLt{Z}"):
        m = ask(r, name, "A")
        assert m.answer[0].name.to_text() == name


def test_several_queries_on_one_tcp_connection_answered_in_order(start_server: Start) -> None:
    r = start_server(view())
    names = [f"web.default{Z}", f"nope.default{Z}", f"dual.default{Z}", f"db.default{Z}"] * 3
    wires = []
    for i, name in enumerate(names):
        q = dns.message.make_query(name, "A")
        q.id = 1000 + i
        wires.append(q.to_wire())
    with socket.create_connection(("127.0.0.1", r.port), timeout=3) as s:
        s.sendall(b"".join(struct.pack("!H", len(w)) + w for w in wires))  # pipelined
        f = s.makefile("rb")
        for i in range(len(names)):
            size = struct.unpack("!H", f.read(2))[0]
            m = dns.message.from_wire(f.read(size))
            assert m.id == 1000 + i and m.question[0].name.to_text() == names[i]


def test_servfail_until_the_first_view_then_answers(start_server: Start) -> None:
    r = start_server(None, options=Options())
    assert ask(r, f"web.default{Z}", "A").rcode() == dns.rcode.SERVFAIL
    assert ask(r, f"nope.default{Z}", "A", tcp=True).rcode() == dns.rcode.SERVFAIL
    r.set_view(view())
    assert answer_lines(ask(r, f"web.default{Z}", "A")) == f"web.default{Z} 30 in a 10.96.0.10"


def test_view_change_invalidates_fast_answers(start_server: Start) -> None:
    r = start_server(view())
    for _ in range(3):
        assert ask(r, f"web.default{Z}", "A").answer
    r.set_view(build(Objects(), Options()))
    assert ask(r, f"web.default{Z}", "A").rcode() == dns.rcode.NXDOMAIN
    r.set_view(view())
    assert ask(r, f"web.default{Z}", "A").answer


def big_view(count: int = 100) -> object:
    extra, problems = decode_text(headless("big", count), "big")
    assert not problems
    base = objects()
    return build(Objects.of(list(base.services + base.slices) + extra), Options())


def test_large_headless_service_truncates_and_the_client_retries_over_tcp(start_server: Start) -> None:
    r = start_server(big_view())
    udp = ask(r, f"big.default{Z}", "A")
    assert udp.flags & dns.flags.TC and 0 < len(udp.answer[0]) < 100
    q = dns.message.make_query(f"big.default{Z}", "A")
    m, used_tcp = dns.query.udp_with_fallback(q, "127.0.0.1", port=r.port, timeout=3)
    assert used_tcp and len(m.answer[0]) == 100 and not m.flags & dns.flags.TC
    edns = ask(r, f"big.default{Z}", "A", use_edns=0, payload=4096)  # 100 × 16 bytes fit in 4096
    assert len(edns.answer[0]) == 100 and not edns.flags & dns.flags.TC


def test_dig_retries_truncated_answers_over_tcp(start_server: Start) -> None:
    dig = need_dig()
    r = start_server(big_view())
    out = subprocess.run([dig, "@127.0.0.1", "-p", str(r.port), "+noedns", "+noall", "+answer",
                          "+comments", f"big.default{Z}", "A"], capture_output=True, text=True, timeout=20, check=False)
    assert "Truncated, retrying in TCP mode" in out.stdout + out.stderr
    assert out.stdout.count(" IN\tA\t10.250.") == 100


@pytest.mark.parametrize(("args", "want"), [
    (["+short", f"web.default{Z}"], "10.96.0.10"),
    (["+short", "+tcp", f"dual.default{Z}", "AAAA"], "fd00:96::14"),
    (["+short", f"_postgres._tcp.db.default{Z}", "SRV"],
     f"0 50 5432 db-0.db.default{Z}\n0 50 5432 db-1.db.default{Z}"),
    (["+short", "-x", "10.96.0.10"], f"web.default{Z}"),
    (["+short", "dns-version.cluster.local", "TXT"], '"1.1.0"'),
])
def test_dig(start_server: Start, args: list[str], want: str) -> None:
    dig = need_dig()
    r = start_server(view())
    out = subprocess.run([dig, "@127.0.0.1", "-p", str(r.port), *args], capture_output=True, text=True, check=False,
                         timeout=20)
    assert out.stdout.strip() == want


def test_dig_nxdomain_has_the_soa(start_server: Start) -> None:
    dig = need_dig()
    r = start_server(view())
    out = subprocess.run([dig, "@127.0.0.1", "-p", str(r.port), f"nope.default{Z}"], capture_output=True,
                         text=True, timeout=20, check=False).stdout
    assert "status: NXDOMAIN" in out and "flags: qr aa rd ra" in out
    assert "cluster.local.\t\t30\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local." in out


def test_zone_transfer_is_refused_over_tcp(start_server: Start) -> None:
    r = start_server(view())
    assert ask(r, "cluster.local.", "AXFR", tcp=True).rcode() == dns.rcode.REFUSED


def test_badvers(start_server: Start) -> None:
    r = start_server(view())
    m = ask(r, f"web.default{Z}", "A", use_edns=1)
    assert m.rcode() == dns.rcode.BADVERS


def fuzz_packets(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    valid = [dns.message.make_query(n, t, use_edns=e).to_wire()
             for n in (f"web.default{Z}", f"db.default{Z}", "example.org.", "10.0.96.10.in-addr.arpa.")
             for t in ("A", "SRV", "PTR") for e in (-1, 0)]
    out = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            out.append(rng.randbytes(rng.randrange(0, 600)))
        elif kind == 1:  # flip bytes of a valid query
            w = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                w[rng.randrange(len(w))] = rng.randrange(256)
            out.append(bytes(w))
        elif kind == 2:  # cut a valid query short, or extend it
            w = rng.choice(valid)
            out.append(w[:rng.randrange(len(w))] if rng.random() < 0.5 else w + rng.randbytes(rng.randrange(1, 40)))
        else:  # a plausible header with random counts and a random body
            w = rng.choice(valid)
            out.append(w[:2] + bytes([rng.randrange(256) & 0x7F, rng.randrange(256)])
                       + rng.randbytes(8) + w[12:])
    return out


def test_fuzz_never_stops_the_server(start_server: Start) -> None:
    r = start_server(view(), timeout=0.05)
    packets = fuzz_packets(20240601, 3000)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        for i, p in enumerate(packets):
            s.sendto(p, ("127.0.0.1", r.port))
            if i % 50 == 0:
                time.sleep(0.002)
    for p in packets[:300]:  # the same garbage over TCP, on a few connections
        with socket.create_connection(("127.0.0.1", r.port), timeout=3) as c:
            c.sendall(struct.pack("!H", len(p)) + p)
            c.settimeout(1)
            try:
                c.recv(4096)
            except (TimeoutError, ConnectionError):
                pass
    assert answer_lines(ask(r, f"web.default{Z}", "A")) == f"web.default{Z} 30 in a 10.96.0.10"
    assert answer_lines(ask(r, f"web.default{Z}", "A", tcp=True)) == f"web.default{Z} 30 in a 10.96.0.10"
