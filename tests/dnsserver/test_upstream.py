"""Forwarding to an upstream on loopback: answers, truncation, timeouts, ExternalName chase, loops."""

from __future__ import annotations

import time
from collections.abc import Callable

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

import netkit.dns.server
from netkit.dns.upstream import Address, from_resolv_conf, is_self, parse_address
from tests.dnsserver.conftest import DNS_PORT, Running, TestUpstream, ask_in
from tests.unit.dns_cluster import view

Z = ".svc.cluster.local."
Start = Callable[..., Running]


def ask(r: Running, name: str, qtype: str, tcp: bool = False) -> dns.message.Message:
    q = dns.message.make_query(name, qtype)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=r.port, timeout=5)
    return dns.query.udp(q, "127.0.0.1", port=r.port, timeout=5)


def test_names_outside_the_zone_are_forwarded(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    for tcp in (False, True):
        m = ask(r, "www.Example.com.", "A", tcp)
        assert m.rcode() == dns.rcode.NOERROR and m.answer[0][0].to_text() == "192.0.2.1"
        assert m.question[0].name.to_text() == "www.Example.com."
    assert ask(r, "nothing.test.", "A").rcode() == dns.rcode.NXDOMAIN
    assert upstream.seen.count("www.example.com.") == 2


def test_an_upstream_servfail_is_cached_for_the_servfail_duration_then_asked_again(
        start_server: Start, upstream: TestUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    skew = Skewed()  # the server's clock: moved on past the duration instead of waiting for it
    monkeypatch.setattr(netkit.dns.server, "time", skew)
    r = start_server(view(), [upstream.address])
    assert r.server.cache.options.servfail == 5.0  # CoreDNS's default
    upstream.failing = True
    assert ask(r, "flaky.example.com.", "A").rcode() == dns.rcode.SERVFAIL
    upstream.failing = False  # the upstream recovers; the cached SERVFAIL stands for its duration
    skew.offset = 4.9
    again = [ask(r, "Flaky.Example.com.", "A") for _ in range(3)]
    assert [m.rcode() for m in again] == [dns.rcode.SERVFAIL] * 3
    assert again[0].question[0].name.to_text() == "Flaky.Example.com."  # answered in the question's case
    assert upstream.count("flaky.example.com.") == 1
    skew.offset = 5.1
    m = ask(r, "flaky.example.com.", "A")
    assert m.rcode() == dns.rcode.NOERROR and m.answer[0][0].to_text() == "192.0.2.1"
    assert upstream.count("flaky.example.com.") == 2
    assert ask(r, "flaky.example.com.", "A").rcode() == dns.rcode.NOERROR and upstream.count("flaky.example.com.") == 2


class Skewed:
    """`time` for netkit.dns.server: the real monotonic clock plus `offset` seconds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


def test_no_answer_at_all_is_not_cached(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address], timeout=0.3)
    for _ in range(2):
        assert ask(r, "silent.example.com.", "A").rcode() == dns.rcode.SERVFAIL
    assert upstream.count("silent.example.com.") == 2  # a timeout is not the upstream's SERVFAIL


def test_zone_names_never_reach_the_upstream(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    assert ask(r, f"nope.default{Z}", "A").rcode() == dns.rcode.NXDOMAIN
    assert ask(r, "10.0.96.10.in-addr.arpa.", "PTR").answer
    assert upstream.seen == []


def test_foreign_reverse_names_fall_through(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    m = ask(r, "9.9.9.9.in-addr.arpa.", "PTR")
    assert m.answer[0][0].to_text() == "nine.example.com."


def test_truncated_upstream_answer_is_retried_over_tcp_for_tcp_clients(
        start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    assert ask(r, "big.example.com.", "A").flags & dns.flags.TC  # a UDP client retries itself
    m = ask(r, "big.example.com.", "A", tcp=True)
    assert len(m.answer[0]) == 60 and not m.flags & dns.flags.TC


def test_external_name_outside_the_zone_is_chased(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    m = ask(r, f"Search.default{Z}", "A")
    text = [rr.to_text() for rr in m.answer]
    assert text == [f"Search.default{Z} 30 IN CNAME search.example.com.",
                    "search.example.com. 30 IN A 192.0.2.1"]  # capped by the cache, as `cache 30`


def test_silent_upstream_times_out_to_servfail_then_the_next_one_answers(
        start_server: Start, upstream: TestUpstream) -> None:
    """Each upstream is asked once per query within its timeout: a silent one is passed over to the
    next, and when none answers the client gets SERVFAIL in its one attempt (dnspython's single UDP
    query, 5 s: a generous bound), not silence."""
    dead = TestUpstream(mute=True)  # receives and counts, never answers
    try:
        r = start_server(view(), [dead.address, upstream.address], timeout=0.3)
        assert ask(r, "www.example.com.", "A").answer[0][0].to_text() == "192.0.2.1"
        assert upstream.count("www.example.com.") == 1 and dead.count("www.example.com.") <= 1
        m = ask(r, "silent.example.com.", "A")
        assert m.rcode() == dns.rcode.SERVFAIL
        assert upstream.count("silent.example.com.") == 1 and dead.count("silent.example.com.") == 1
    finally:
        dead.close()


def test_no_upstream_is_servfail(start_server: Start) -> None:
    r = start_server(view(), [])
    assert ask(r, "www.example.com.", "A").rcode() == dns.rcode.SERVFAIL


def test_an_upstream_that_forwards_back_is_detected_and_dropped(start_server: Start) -> None:
    looper = TestUpstream()
    try:
        r = start_server(view(), [looper.address], timeout=0.5)
        looper.forward_to = ("127.0.0.1", r.port)  # from now on it sends every query back to the server
        looping = r.lt.call(r.server.check_loops())
        assert looping == (looper.address,)
        before = len(looper.seen)
        m = ask(r, "www.example.com.", "A")
        assert m.rcode() == dns.rcode.SERVFAIL and len(looper.seen) == before  # not forwarded any more
    finally:
        looper.close()


def test_an_upstream_that_is_this_server_is_never_used(start_server: Start, netns: str) -> None:
    # in the test's own namespace, where port 53 is the server's before it starts
    r = start_server(view(), [Address("127.0.0.1", DNS_PORT)], port=DNS_PORT, netns=netns)
    assert r.server.forwarder.usable == ()
    assert ask_in(netns, "www.example.com.", "A").rcode() == dns.rcode.SERVFAIL


def test_is_self_and_address_parsing() -> None:
    own = [Address("0.0.0.0", 53)]
    assert is_self(Address("127.0.0.1", 53), own) and not is_self(Address("127.0.0.1", 5353), own)
    assert is_self(Address("10.0.0.5", 53), [Address("10.0.0.5", 53)])
    assert is_self(Address("127.0.0.1", 53), [Address("::", 53)])  # `::` is both families
    assert is_self(Address("::1", 53), [Address("::", 53)]) and not is_self(Address("::1", 53), own)
    assert not is_self(Address("127.0.0.53", 53), [Address("10.0.0.5", 53)])
    assert parse_address("[fd00::1]:5353") == Address("fd00::1", 5353)
    assert parse_address("fd00::1") == Address("fd00::1", 53)
    assert parse_address("10.0.0.1:54") == Address("10.0.0.1", 54)
    assert from_resolv_conf("search x\nnameserver 127.0.0.53\nnameserver fe80::1%eth0\noptions ndots:5\n") == [
        Address("127.0.0.53"), Address("fe80::1")]


def _orders(r: Running, name: str, tcp: bool, n: int = 12) -> list[tuple[str, ...]]:
    """The answer's records in order, `TYPE DATA` each."""
    return [tuple(f"{dns.rdatatype.to_text(rrset.rdtype)} {rr.to_text()}" for rrset in ask(r, name, "A", tcp).answer
                  for rr in rrset) for _ in range(n)]


def test_loadbalance_shuffles_forwarded_answers_fresh_and_cached(start_server: Start, upstream: TestUpstream) -> None:
    """CoreDNS's loadbalance wraps forward and cache: every forwarded answer, cached or not, in a new
    order; a CNAME stays first. With loadbalance off, the upstream's order."""
    pool = {f"192.0.2.{i}" for i in range(11, 17)}
    for balance in (True, False):
        r = start_server(view(loadbalance=balance), [upstream.address])
        for tcp in (False, True):
            for name in ("pool.example.com.", "alias.example.com."):
                got = _orders(r, name, tcp)
                cname = name == "alias.example.com."
                assert all(g[0].startswith("CNAME") == cname for g in got)
                assert {frozenset(a.split()[-1] for a in g[cname:]) for g in got} == {frozenset(pool)}
                assert (len(set(got)) > 1) == balance, (name, tcp, balance)  # 12 equal of 6!: p = 720^-11
    assert upstream.count("pool.example.com.") == 4  # once per server and transport: the rest from the cache
    r = start_server(view(), [upstream.address])
    r.lt.run(lambda: setattr(r.server.cache, "capacity", 0))  # no cache: each answer straight from upstream
    assert len(set(_orders(r, "pool.example.com.", False))) > 1
