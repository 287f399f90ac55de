"""CoreDNS's `loadbalance round_robin` (plugin/loadbalance): every section of a NOERROR reply —
answer, authority and additional — CNAMEs first, then other types, then the A/AAAA records shuffled,
then the MX records shuffled; a section of only addresses shuffled; anything but NOERROR untouched.
The table is CoreDNS's loadbalance_test.go (record counts per group, groups in order); then the
engine on a real view: a headless SRV answer's additional A records come in a new order per query."""

from __future__ import annotations

import random
from collections.abc import Sequence
from ipaddress import ip_address

import dns.message
import dns.rdatatype
import pytest

from netkit.dns.engine import Engine
from netkit.dns.loadbalance import Run, WireRecord, changes, permute, round_robin, shuffle, wire_run
from netkit.dns.names import name_from_text
from netkit.dns.resolver import Rcode, Record, Reply, RType
from netkit.dns.view import Options, build
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text
from tests.unit.dns_cluster import headless, objects

Z = ".svc.cluster.local."
START, CNAMES, ADDRESSES, MXES, ANY = range(5)


def rr(kind: str, owner: str, data: str) -> Record:
    rtype = RType[kind]
    value = ip_address(data) if kind in ("A", "AAAA") else name_from_text(data)
    return Record(name_from_text(owner), rtype, 300, value)


CNAME = [rr("CNAME", f"cname{i}.region2.skydns.test.", f"cname{i + 1}.region2.skydns.test.") for i in range(4)]
A = [rr("A", "endpoint.region2.skydns.test.", f"10.240.0.{i}") for i in range(1, 4)]
AAAA = [rr("AAAA", "endpoint.region2.skydns.test.", f"::{i}") for i in range(1, 3)]
MXS = [rr("MX", "mx.region2.skydns.test.", f"mx{i}.region2.skydns.test.") for i in range(1, 4)]


def counts(records: Sequence[Record]) -> tuple[int, int, int, bool]:
    """CoreDNS's countRecords: (CNAMEs, A/AAAAs, MXs, whether the groups come in that order)."""
    state, ordered, n = START, True, {CNAMES: 0, ADDRESSES: 0, MXES: 0}
    for r in records:
        group = {RType.CNAME: CNAMES, RType.A: ADDRESSES, RType.AAAA: ADDRESSES, RType.MX: MXES}.get(r.rtype, ANY)
        if group != ANY:
            ordered = ordered and state <= group
            n[group] += 1
        state = group
    return n[CNAMES], n[ADDRESSES], n[MXES], ordered


@pytest.mark.parametrize(("answer", "extra", "answer_counts", "extra_counts"), [
    ([*CNAME, A[0], *MXS], [], (4, 1, 3), (0, 0, 0)),
    ([A[0], MXS[0], CNAME[0]], [], (1, 1, 1), (0, 0, 0)),
    ([MXS[0], A[0], A[1], MXS[1], CNAME[1], A[2], MXS[2]],
     [A[0], AAAA[0], MXS[0], CNAME[1], MXS[1], A[2], AAAA[1], MXS[2]], (1, 3, 3), (1, 4, 3)),
])
def test_coredns_round_robin_table(answer: list[Record], extra: list[Record], answer_counts: tuple[int, int, int],
                                   extra_counts: tuple[int, int, int]) -> None:
    rng = random.Random(7)
    for _ in range(20):
        out = shuffle(Reply(Rcode.NOERROR, tuple(answer), additional=tuple(extra)), rng)
        assert counts(out.answer) == (*answer_counts, True)
        assert counts(out.additional) == (*extra_counts, True)
        assert sorted(map(str, out.answer)) == sorted(map(str, answer))  # a permutation, nothing lost


def test_every_section_is_shuffled_and_only_noerror() -> None:
    rng = random.Random(1)
    reply = Reply(Rcode.NOERROR, tuple(A), authority=tuple(A), additional=tuple(AAAA))
    seen = {section: set() for section in ("answer", "authority", "additional")}
    for _ in range(40):
        out = shuffle(reply, rng)
        for section in seen:
            seen[section].add(tuple(map(str, getattr(out, section))))
    assert [len(seen[s]) for s in ("answer", "authority")] == [6, 6] and len(seen["additional"]) == 2
    assert changes(reply) and changes(Reply(Rcode.NOERROR, additional=tuple(AAAA)))
    assert not changes(Reply(Rcode.NOERROR, (A[0], CNAME[0]), additional=(A[1],)))
    nx = Reply(Rcode.NXDOMAIN, tuple(A), additional=tuple(A))
    assert shuffle(nx, rng) == nx and not changes(nx)


def test_one_record_and_non_address_sections_keep_their_order() -> None:
    rng = random.Random(3)
    assert round_robin((A[0],), rng) == (A[0],)
    srv_like = tuple(CNAME)
    assert all(round_robin(srv_like, rng) == srv_like for _ in range(10))


def test_the_engine_shuffles_a_headless_srv_answers_additional_section() -> None:
    extra, _ = decode_text(headless("many", 6), "many")
    objs = Objects.of([*objects().services, *objects().slices, *objects().namespaces, *extra])
    q = dns.message.make_query(f"_peer._tcp.many.default{Z}", "SRV")
    orders = {}
    for balance in (True, False):
        e = Engine(Options(loadbalance=balance))
        e.set_view(build(objs, Options(loadbalance=balance)))
        got = []
        for _ in range(12):
            out = e.slow(q.to_wire(), True)  # TCP: every additional record fits
            assert isinstance(out, bytes)
            m = dns.message.from_wire(out)
            got.append(tuple(rr.to_text() for rrset in m.additional for rr in rrset))
        assert {frozenset(g) for g in got} == {frozenset(f"10.250.0.{i}" for i in range(1, 7))}
        orders[balance] = len(set(got))
        assert not e.tcp_cache if balance else e.tcp_cache  # a reply in a new order each time is never cached
    assert orders[False] == 1 and orders[True] > 1  # 12 equal shuffles of 6: p = (1/720)^11


# --- upstream replies, shuffled as bytes -----------------------------------------------------------

def upstream(records: list[tuple[str, str, str]], rcode: int = 0) -> bytes:
    """A reply to `pool.example.com. A` as dnslib packs it (owners compressed to pointers)."""
    from dnslib import AAAA as DAAAA
    from dnslib import CNAME as DCNAME
    from dnslib import MX as DMX
    from dnslib import QTYPE, RR, DNSRecord
    from dnslib import A as DA

    q = DNSRecord.question("pool.example.com", "A")
    r = q.reply()
    r.header.rcode = rcode
    make = {"A": DA, "AAAA": DAAAA, "CNAME": DCNAME, "MX": DMX}
    for owner, kind, data in records:
        r.add_answer(RR(owner, getattr(QTYPE, kind), ttl=60, rdata=make[kind](data)))
    return bytes(r.pack())


def answers(wire: bytes) -> list[str]:
    return [f"{rrset.name} {dns.rdatatype.to_text(rrset.rdtype)} {rr}"
            for rrset in dns.message.from_wire(wire).answer for rr in rrset]


POOL = [("pool.example.com", "A", f"192.0.2.{i}") for i in range(1, 7)]


@pytest.mark.parametrize(("records", "shuffled"), [
    (POOL, True),
    ([("pool.example.com", "CNAME", "real.example.net"), *[("real.example.net", "A", a) for _, _, a in POOL]], True),
    ([("pool.example.com", "AAAA", f"2001:db8::{i}") for i in range(1, 4)], True),
    ([("pool.example.com", "MX", "mx1.example.com"), ("pool.example.com", "MX", "mx2.example.com")], False),
    ([POOL[0], ("pool.example.com", "AAAA", "2001:db8::1"), POOL[1]], False),  # mixed A/AAAA: left as is
    ([POOL[0], ("pool.example.com", "MX", "mx1.example.com"), POOL[1]], False),  # not consecutive
    (POOL[:1], False),
])
def test_upstream_addresses_are_shuffled_in_place(records: list[tuple[str, str, str]], shuffled: bool) -> None:
    from netkit.dns.cache import parse_reply

    wire = upstream(records)
    parsed = parse_reply(wire)
    assert parsed is not None and bool(parsed.runs) == shuffled
    rng = random.Random(5)
    outs = {tuple(answers(permute(wire, parsed.runs, rng))) for _ in range(20)}
    assert {frozenset(o) for o in outs} == {frozenset(answers(wire))}  # the same records, still valid DNS
    assert (len(outs) > 1) == shuffled
    assert all(o[0] == answers(wire)[0] for o in outs) or records[0][1] != "CNAME"  # a CNAME stays first


def test_only_noerror_upstream_replies_and_pointer_owners_are_shuffled() -> None:
    from netkit.dns.cache import parse_reply

    parsed = parse_reply(upstream(POOL, rcode=3))
    assert parsed is not None and parsed.runs == ()
    literal = [WireRecord(12 + 20 * i, b"\x04pool", 1, 32 + 20 * i) for i in range(3)]
    assert wire_run(literal) is None  # an owner written out could be pointed at: never moved
    pointers = [WireRecord(40 + 16 * i, b"\xc0\x0c", 1, 56 + 16 * i) for i in range(3)]
    assert wire_run(pointers) == Run(40, 16, 3)
    other_owner = [*pointers[:2], WireRecord(72, b"\xc0\x20", 1, 88)]
    assert wire_run(other_owner) is None
