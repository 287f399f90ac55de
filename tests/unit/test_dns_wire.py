"""Wire format and the fast path: strict parsing, truncation to whole records, fast == slow."""

from __future__ import annotations

import ast
import random
import struct

import dns.edns
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest

from netkit.dns.engine import Engine, Upstream
from netkit.dns.names import (
    EndpointName,
    Invalid,
    Outside,
    PortName,
    ProtoName,
    classify,
    name_from_text,
    pod_address,
    reverse_address,
)
from netkit.dns.view import Options, build
from netkit.dns.wire import Rejected, parse_query
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text
from tests.conftest import ROOT
from tests.unit.dns_cluster import headless, objects, view

Z = ".svc.cluster.local."


def engine() -> Engine:
    e = Engine(Options())
    e.set_view(view())
    return e


def reply(e: Engine, q: dns.message.Message | bytes, tcp: bool = False) -> dns.message.Message:
    out = e.slow(q if isinstance(q, bytes) else q.to_wire(), tcp)
    assert isinstance(out, bytes)
    return dns.message.from_wire(out)


def test_pure_modules_import_no_io() -> None:
    pure = ["names", "view", "resolver", "wire", "engine"]
    for mod in pure:
        tree = ast.parse((ROOT / "netkit" / "dns" / f"{mod}.py").read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"socket", "asyncio", "subprocess", "selectors", "os"}, mod


@pytest.mark.parametrize(("name", "shape"), [
    ("_http._tcp.web.default.svc.cluster.local", PortName("default", "web", "http", "tcp")),
    ("_tcp.web.default.svc.cluster.local", ProtoName("default", "web", "tcp")),
    ("db-0.db.default.svc.cluster.local", EndpointName("default", "db", "db-0")),
    ("http.tcp.web.default.svc.cluster.local", Invalid()),
    ("web.default.svc.cluster.local.default.svc.cluster.local", Invalid()),
    ("web.default.svc.other.local", Outside()),
    ("local", Outside()),
])
def test_classify(name: str, shape: object) -> None:
    assert classify(name_from_text(name), ("cluster", "local")) == shape


def test_dashed_and_reverse_addresses() -> None:
    assert str(pod_address("fd00-244--5")) == "fd00:244::5"
    assert pod_address("01-2-3-4") is None and pod_address("1-2-3") is None
    assert str(reverse_address(name_from_text("4.3.2.1.in-addr.arpa"))) == "1.2.3.4"
    assert reverse_address(name_from_text("04.3.2.1.in-addr.arpa")) is None


def test_answer_echoes_the_query_case() -> None:
    r = reply(engine(), dns.message.make_query(f"_HTTP._tcp.Web.default{Z}", "SRV"))
    assert r.answer[0].name.to_text() == f"_HTTP._tcp.Web.default{Z}"
    assert r.additional[0].name.to_text() == f"web.default{Z}"  # canonical, as CoreDNS's additional section
    assert r.flags & dns.flags.AA and r.flags & dns.flags.RD and not r.flags & dns.flags.TC


@pytest.mark.parametrize("data", [b"", b"\x12\x34", b"\x00" * 11])
def test_no_header_no_answer(data: bytes) -> None:
    assert engine().slow(data, False) is None


def test_responses_are_never_answered() -> None:
    q = dns.message.make_query(f"web.default{Z}", "A")
    q.flags |= dns.flags.QR
    assert engine().slow(q.to_wire(), False) is None


@pytest.mark.parametrize("mangle", [
    lambda w: w[:-1],                                   # question cut short
    lambda w: w + b"\x00",                              # trailing garbage
    lambda w: w[:4] + b"\x00\x02" + w[6:],              # two questions announced
    lambda w: w[:4] + b"\x00\x00" + w[6:],              # no question
    lambda w: w[:6] + b"\x00\x01" + w[8:],              # an answer in a query
    lambda w: w[:12] + b"\xc0\x0c" + w[-4:],            # a pointer in the question
    lambda w: w[:12] + b"\x50" + w[13:],                # a label over 63 bytes
])
def test_malformed_queries_get_formerr(mangle: object) -> None:
    wire = dns.message.make_query(f"web.default{Z}", "A").to_wire()
    out = engine().slow(mangle(wire), False)  # type: ignore[operator]
    assert isinstance(out, bytes) and out[:2] == wire[:2]
    assert out[3] & 0x0F == dns.rcode.FORMERR and out[2] & 0x80


def test_two_opt_records_are_formerr() -> None:
    wire = dns.message.make_query(f"web.default{Z}", "A", use_edns=0).to_wire()
    opt = wire[-11:]
    doubled = wire[:10] + b"\x00\x02" + wire[12:] + opt
    assert isinstance(parse_query(doubled), Rejected)


def test_unknown_edns_version_is_badvers() -> None:
    r = reply(engine(), dns.message.make_query(f"web.default{Z}", "A", use_edns=1))
    assert r.rcode() == dns.rcode.BADVERS and r.edns == 0


def test_other_opcodes_are_notimp_and_other_classes_refused() -> None:
    q = dns.message.make_query(f"web.default{Z}", "A")
    q.set_opcode(dns.opcode.NOTIFY)
    assert reply(engine(), q).rcode() == dns.rcode.NOTIMP
    assert reply(engine(), dns.message.make_query("version.bind", "TXT", "CH")).rcode() == dns.rcode.REFUSED


def test_edns_reply_advertises_a_buffer_and_keeps_opt() -> None:
    r = reply(engine(), dns.message.make_query(f"web.default{Z}", "A", use_edns=0, payload=4096))
    assert r.edns == 0 and r.payload == 1232 and len(r.answer) == 1


def big_engine(count: int) -> Engine:
    extra, problems = decode_text(headless("big", count), "big")
    assert not problems
    base = objects()
    e = Engine(Options())
    e.set_view(build(Objects.of(list(base.services + base.slices) + extra), Options()))
    return e


@pytest.mark.parametrize(("edns", "payload", "limit"), [(-1, 0, 512), (0, 1232, 1232), (0, 700, 512)])
def test_truncation_keeps_whole_records_and_sets_tc(edns: int, payload: int, limit: int) -> None:
    e = big_engine(100)
    q = dns.message.make_query(f"big.default{Z}", "A", use_edns=edns, payload=payload)
    out = e.slow(q.to_wire(), False)
    assert isinstance(out, bytes) and len(out) <= limit
    r = dns.message.from_wire(out)  # parses: only whole records
    assert r.flags & dns.flags.TC and 0 < len(r.answer[0]) < 100
    full = reply(e, q, tcp=True)
    assert not full.flags & dns.flags.TC and len(full.answer[0]) == 100


def test_additional_records_are_dropped_without_tc() -> None:
    e = big_engine(20)  # 20 SRV records fit in 1232 bytes, their 20 addresses do not
    r = reply(e, dns.message.make_query(f"_peer._tcp.big.default{Z}", "SRV", use_edns=0, payload=1232))
    assert len(r.answer[0]) == 20 and not r.flags & dns.flags.TC


def queries(rng: random.Random) -> list[bytes]:
    names = [f"web.default{Z}", f"dual.default{Z}", f"db.default{Z}", f"db-0.db.default{Z}",
             f"_postgres._tcp.db.default{Z}", f"_http._tcp.web.default{Z}", f"nope.default{Z}",
             f"web.default.svc.cluster.local.default{Z}", "cluster.local.", "default.svc.cluster.local.",
             "dns-version.cluster.local.", f"alias.default{Z}", "10.0.96.10.in-addr.arpa.",
             f"big.default{Z}", f"_peer._tcp.big.default{Z}", f"x.web.default{Z}"]
    out = []
    for name in names:
        for qtype in ("A", "AAAA", "SRV", "PTR", "TXT", "SOA", "ANY", "CNAME"):
            for edns, payload in ((-1, 0), (0, 512), (0, 1232), (0, 4096)):
                cased = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
                q = dns.message.make_query(cased, qtype, use_edns=edns, payload=payload)
                out.append(q.to_wire())
    return out


def test_fast_path_replies_equal_slow_path_replies_byte_for_byte() -> None:
    rng = random.Random(7)
    e = big_engine(40)
    wires = queries(rng)
    for tcp in (False, True):
        for wire in wires:
            e.slow(wire, tcp)  # fills the cache
    assert len(e.udp_cache) > 300 and len(e.tcp_cache) > 300
    hits = 0
    for tcp in (False, True):
        for wire in queries(random.Random(8)):  # same questions, other cases and IDs
            fast = e.fast(wire, tcp)
            slow = e.slow(wire, tcp)
            if fast is not None:
                hits += 1
                assert fast == slow, dns.message.from_wire(wire).question
                again = bytes([wire[0] ^ 0x5A, wire[1]]) + wire[2:]  # the same query, another ID:
                assert e.fast(again, tcp) == e.slow(again, tcp)  # UDP answers it from the exact cache
    assert hits > 600
    assert len(e.udp_exact) > 300


def test_a_new_view_empties_the_cache() -> None:
    e = engine()
    wire = dns.message.make_query(f"web.default{Z}", "A").to_wire()
    e.slow(wire, False)
    assert e.fast(wire, False) is not None
    assert e.fast(wire, False) is not None  # now from the exact cache
    e.set_view(build(Objects(), Options()))
    assert e.fast(wire, False) is None
    r = reply(e, wire)
    assert r.rcode() == dns.rcode.NXDOMAIN


def test_forwarded_and_chased_answers_are_not_cached() -> None:
    e = engine()
    for name in ("example.com.", f"search.default{Z}", "1.1.1.1.in-addr.arpa."):
        wire = dns.message.make_query(name, "A").to_wire()
        assert isinstance(e.slow(wire, False), Upstream)
        assert e.fast(wire, False) is None


def test_servfail_before_the_first_view_is_not_cached() -> None:
    e = Engine(Options())
    wire = dns.message.make_query(f"web.default{Z}", "A").to_wire()
    assert reply(e, wire).rcode() == dns.rcode.SERVFAIL
    assert not e.udp_cache
    e.set_view(view())
    assert reply(e, wire).answer[0][0].to_text() == "10.96.0.10"


def test_queries_with_edns_options_are_answered_but_not_cached() -> None:
    e = engine()
    q = dns.message.make_query(f"web.default{Z}", "A", use_edns=0,
                               options=[dns.edns.GenericOption(10, b"12345678")])  # a client cookie
    assert reply(e, q).answer
    assert not e.udp_cache


def test_the_cache_is_bounded() -> None:
    e = Engine(Options(), max_entries=10)
    e.set_view(view())
    for i in range(25):
        e.slow(dns.message.make_query(f"n{i}.default{Z}", "A").to_wire(), False)
    assert len(e.udp_cache) <= 10


def test_header_struct_is_what_the_fast_path_assumes() -> None:
    wire = dns.message.make_query(f"web.default{Z}", "A").to_wire()
    assert struct.unpack("!H", wire[4:6])[0] == 1 and wire.find(0, 12) == len(wire) - 5



def test_loadbalance_shuffles_addresses_and_off_keeps_the_view_order() -> None:
    extra, _ = decode_text(headless("many", 8), "many")
    objs = Objects.of([*objects().services, *objects().slices, *objects().namespaces, *extra])
    q = dns.message.make_query(f"many.default{Z}", "A")
    distinct = {}
    for balance in (True, False):
        e = Engine(Options(loadbalance=balance))
        e.set_view(build(objs, Options(loadbalance=balance)))
        got = [tuple(rr.to_text() for rrset in reply(e, q).answer for rr in rrset) for _ in range(12)]
        assert {frozenset(g) for g in got} == {frozenset(f"10.250.0.{i}" for i in range(1, 9))}
        distinct[balance] = len(set(got))
    assert distinct[False] == 1 and distinct[True] > 1  # 12 shuffles of 8 all equal: p = (1/8!)^11
