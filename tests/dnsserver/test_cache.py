"""The `cache` plugin's serve_stale and prefetch against real sockets: a test upstream on 127.0.0.x
that goes silent or keeps answering, a client asking over UDP, and the metrics CoreDNS counts them with."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import dns.message
import dns.query
import dns.rcode
import pytest

from netkit.dns.cache import CacheOptions, ForwardCache
from netkit.dns.metrics import DnsMetrics
from tests.dnsserver.conftest import Running, TestUpstream
from tests.unit.dns_cluster import view

Start = Callable[..., Running]
WAIT = 20.0  # generous bound for anything the server does in the background


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    up = TestUpstream(host="127.0.0.23")
    yield up
    up.close()


def serve(start_server: Start, upstream: TestUpstream, options: CacheOptions) -> Running:
    r = start_server(view(), [upstream.address], timeout=0.5)
    r.lt.run(lambda: setattr(r.server, "cache", ForwardCache(r.server.metrics, options)))
    return r


def ask(r: Running, name: str = "www.example.com.") -> dns.message.Message:
    return dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=r.port, timeout=10)


def metric(metrics: DnsMetrics, name: str, **labels: str) -> float:
    for family in metrics.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"{name} not exported")


def expire(answer: dns.message.Message, asked: float) -> None:
    """Wait until the cached answer has expired (its TTL, counted from when it was asked)."""
    time.sleep(max(0.0, asked + answer.answer[0].ttl + 0.1 - time.monotonic()))


def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "the server did not get there"
        time.sleep(0.05)


def fresh_then_silent(r: Running, upstream: TestUpstream) -> None:
    asked = time.monotonic()
    first = ask(r)
    assert first.rcode() == dns.rcode.NOERROR and first.answer[0].ttl == 1
    upstream.mute = True
    expire(first, asked)


def test_serve_stale_answers_from_the_expired_entry_when_the_upstream_is_silent(
        start_server: Start, upstream: TestUpstream) -> None:
    r = serve(start_server, upstream, CacheOptions(success_ttl=1, success_minttl=0, serve_stale=3600))
    fresh_then_silent(r, upstream)
    m = ask(r)
    assert m.rcode() == dns.rcode.NOERROR and m.answer[0][0].to_text() == "192.0.2.1"
    assert m.answer[0].ttl == 0  # stale: TTL 0, as CoreDNS serves it
    assert metric(r.server.metrics, "coredns_cache_served_stale_total") == 1
    until(lambda: upstream.count("www.example.com.") == 2)  # immediate: refreshed in the background
    assert metric(r.server.metrics, "coredns_cache_prefetch_total") == 1
    assert metric(r.server.metrics, "coredns_cache_hits_total", type="success") == 1
    upstream.mute = False  # the upstream comes back: a later stale answer's refresh succeeds
    until(lambda: ask(r).answer[0].ttl == 1)
    assert metric(r.server.metrics, "coredns_cache_served_stale_total") >= 2


def test_without_serve_stale_a_silent_upstream_is_servfail(start_server: Start, upstream: TestUpstream) -> None:
    r = serve(start_server, upstream, CacheOptions(success_ttl=1, success_minttl=0))
    fresh_then_silent(r, upstream)
    assert ask(r).rcode() == dns.rcode.SERVFAIL
    assert metric(r.server.metrics, "coredns_cache_served_stale_total") == 0


def test_serve_stale_verify_asks_the_upstream_first(start_server: Start, upstream: TestUpstream) -> None:
    r = serve(start_server, upstream, CacheOptions(success_ttl=1, success_minttl=0, serve_stale=3600,
                                                   serve_stale_verify=True))
    fresh_then_silent(r, upstream)
    m = ask(r)  # the upstream is tried (and times out) before the stale entry is served
    assert m.rcode() == dns.rcode.NOERROR and m.answer[0].ttl == 0
    assert upstream.count("www.example.com.") == 2
    assert metric(r.server.metrics, "coredns_cache_served_stale_total") == 1
    assert metric(r.server.metrics, "coredns_cache_prefetch_total") == 0  # verify refreshes in line
    upstream.mute = False
    m = ask(r)  # the upstream answers: its answer, not the stale one
    assert m.answer[0].ttl == 1 and upstream.count("www.example.com.") == 3
    assert metric(r.server.metrics, "coredns_cache_served_stale_total") == 1


@pytest.mark.parametrize("prefetch", [2, 0])
def test_prefetch_refreshes_a_popular_name_before_it_expires(
        start_server: Start, upstream: TestUpstream, prefetch: int) -> None:
    r = serve(start_server, upstream, CacheOptions(success_ttl=4, success_minttl=0, prefetch=prefetch,
                                                   prefetch_percentage=50))
    asked = time.monotonic()
    first = ask(r)
    assert first.answer[0].ttl == 4
    while time.monotonic() < asked + 4.5:  # a popular name: asked every 0.2 s, past the first TTL
        assert ask(r).rcode() == dns.rcode.NOERROR
        time.sleep(0.2)
    misses = metric(r.server.metrics, "coredns_cache_misses_total")
    prefetches = metric(r.server.metrics, "coredns_cache_prefetch_total")
    if prefetch:
        assert misses == 1  # only the first query: the entry was refreshed before it expired
        assert prefetches >= 1 and upstream.count("www.example.com.") == 1 + prefetches
    else:
        assert misses == 2 and prefetches == 0 and upstream.count("www.example.com.") == 2
