"""The `cache` plugin's options and its stale and prefetch rules, from CoreDNS's own test tables
(plugin/cache setup_test.go, prefetch_test.go), against the pure cache with a fake clock."""

from __future__ import annotations

import struct

import pytest
from dnslib import QTYPE, RR, A, DNSRecord

from netkit.dns.cache import (
    CAPACITY,
    DENIAL_TTL,
    MIN_TTL,
    STALE,
    SUCCESS_TTL,
    CacheOptions,
    ForwardCache,
    parse_cache,
    parse_option,
    parse_reply,
)
from netkit.dns.engine import cache_key
from netkit.dns.metrics import DnsMetrics

# CoreDNS's TestSetup: (cache line, block lines) → (ncap, pcap, nttl, minnttl, pttl, minpttl, prefetch)
SETUP = [
    ([], [], (CAPACITY, CAPACITY, DENIAL_TTL, MIN_TTL, SUCCESS_TTL, MIN_TTL, 0)),
    ([], [("success", ["10"])], (CAPACITY, 10, DENIAL_TTL, MIN_TTL, SUCCESS_TTL, MIN_TTL, 0)),
    ([], [("success", ["10", "1800", "30"])], (CAPACITY, 10, DENIAL_TTL, MIN_TTL, 1800, 30, 0)),
    ([], [("success", ["10"]), ("denial", ["10", "15"])], (10, 10, 15, MIN_TTL, SUCCESS_TTL, MIN_TTL, 0)),
    ([], [("success", ["10"]), ("denial", ["10", "15", "2"])], (10, 10, 15, 2, SUCCESS_TTL, MIN_TTL, 0)),
    (["25"], [("success", ["10"]), ("denial", ["10", "15"])], (10, 10, 15, MIN_TTL, 25, MIN_TTL, 0)),
    (["25"], [("success", ["10"]), ("denial", ["10", "15", "5"])], (10, 10, 15, 5, 25, MIN_TTL, 0)),
    ([], [("prefetch", ["10"])], (CAPACITY, CAPACITY, DENIAL_TTL, MIN_TTL, SUCCESS_TTL, MIN_TTL, 10)),
]
SETUP_FAILS = [
    ([], [("success", []), ("denial", ["10", "15"])]),
    ([], [("success", ["15"]), ("denial", ["aaa"])]),
    ([], [("positive", ["15"])]),
    (["0"], []),
    (["-1"], []),
    (["1"], [("prefetch", ["-1"])]),
    (["1"], [("prefetch", ["0", "blurp"])]),
]
# CoreDNS's TestServeStale: line → (DURATION, verify), or None for an error
SERVE_STALE = [
    ([], (STALE, False)), (["20m"], (1200.0, False)), (["1h20m"], (4800.0, False)), (["0m"], (0.0, False)),
    (["0"], (0.0, False)), (["0", "verify"], (0.0, True)), (["0", "immediate"], (0.0, False)),
    (["0", "VERIFY"], (0.0, True)),
    (["20"], None), (["-20m"], None), (["aa"], None), (["1m", "nono"], None), (["0", "after", "nono"], None),
]
# CoreDNS's TestServfail
SERVFAIL = [(["1s"], 1.0), (["5m"], 300.0), (["0s"], 0.0), (["0"], 0.0),
            ([], None), (["6m"], None), (["20"], None), (["-1s"], None), (["aa"], None), (["1m", "invalid"], None)]


@pytest.mark.parametrize(("args", "lines", "want"), SETUP)
def test_setup_table(args: list[str], lines: list[tuple[str, list[str]]], want: tuple[int, ...]) -> None:
    o = parse_cache(args, lines)
    got = (o.denial_capacity, o.success_capacity, o.denial_ttl, o.denial_minttl, o.success_ttl, o.success_minttl,
           o.prefetch)
    assert got == want


@pytest.mark.parametrize(("args", "lines"), SETUP_FAILS)
def test_setup_table_errors(args: list[str], lines: list[tuple[str, list[str]]]) -> None:
    with pytest.raises(ValueError):
        parse_cache(args, lines)


@pytest.mark.parametrize(("args", "want"), SERVE_STALE)
def test_serve_stale_table(args: list[str], want: tuple[float, bool] | None) -> None:
    if want is None:
        with pytest.raises(ValueError):
            parse_option(CacheOptions(), "serve_stale", args)
        return
    o = parse_option(CacheOptions(), "serve_stale", args)
    assert (o.serve_stale, o.serve_stale_verify) == want


@pytest.mark.parametrize(("args", "want"), SERVFAIL)
def test_servfail_table(args: list[str], want: float | None) -> None:
    if want is None:
        with pytest.raises(ValueError):
            parse_option(CacheOptions(), "servfail", args)
        return
    assert parse_option(CacheOptions(), "servfail", args).servfail == want


def test_disable_table() -> None:
    o = parse_option(CacheOptions(), "disable", ["denial", "example.com", "example.org"])
    assert o.disable_denial == (("example", "com"), ("example", "org")) and o.disable_success == ()
    assert parse_option(CacheOptions(), "disable", ["success"]).disable_success == ((),)  # the root: every name
    with pytest.raises(ValueError):
        parse_option(CacheOptions(), "disable", ["invalid", "example.com"])


def test_prefetch_arguments() -> None:
    o = parse_option(CacheOptions(), "prefetch", ["2", "30s", "50%"])
    assert (o.prefetch, o.prefetch_duration, o.prefetch_percentage) == (2, 30.0, 50)
    assert (CacheOptions().prefetch_duration, CacheOptions().prefetch_percentage) == (60.0, 10)
    for bad in (["2", "30s", "50"], ["2", "30s", "101%"], []):
        with pytest.raises(ValueError):
            parse_option(CacheOptions(), "prefetch", bad)


# --- behaviour, with a fake clock ----------------------------------------------------------------


def query(name: str) -> tuple[bytes, int]:
    data = bytes(DNSRecord.question(name, "A").pack())
    return data, data.find(0, 12)


def reply(data: bytes, ttl: int, address: str) -> bytes:
    q = DNSRecord.parse(data)
    r = q.reply()
    r.add_answer(RR(q.q.qname, QTYPE.A, ttl=ttl, rdata=A(address)))
    return bytes(r.pack())


def served(cache: ForwardCache, e: object, data: bytes, end: int) -> tuple[int, str]:
    assert e is not None
    out = data[:2] + e.head + data[12:end] + bytes(e.tail)  # type: ignore[attr-defined]
    parsed = parse_reply(out)
    assert parsed is not None
    r = DNSRecord.parse(out)
    return struct.unpack_from("!I", out, parsed.ttl_offsets[0])[0], str(r.rr[0].rdata)


# CoreDNS's TestPrefetch: (ttl, prefetch, [(after, (ttl, address) served, fetch)])
PREFETCH = {
    "hits.reset": (80, 1, [(0, (80, "127.0.0.1"), True), (73, (7, "127.0.0.1"), True), (80, (73, "127.0.0.2"), False)]),
    "short.ttl": (5, 1, [(0, (5, "127.0.0.1"), True), (1, (4, "127.0.0.1"), False), (4, (1, "127.0.0.1"), True),
                         (5, (4, "127.0.0.2"), False)]),
    "no.prefetch": (30, 0, [(0, (30, "127.0.0.1"), True), (15, (15, "127.0.0.1"), False),
                            (29, (1, "127.0.0.1"), False), (30, (30, "127.0.0.2"), True)]),
}


@pytest.mark.parametrize("case", sorted(PREFETCH))
def test_prefetch_table(case: str) -> None:
    ttl, amount, steps = PREFETCH[case]
    cache = ForwardCache(DnsMetrics(""), CacheOptions(prefetch=amount))
    data, end = query(f"{case}.example.org")
    key, fetched, t0 = cache_key(data, end), 0, 1000.0
    for after, want, _ in steps:
        now = t0 + after
        e = cache.hit(cache.udp, key, now)
        if e is None:  # a miss: the upstream is asked
            fetched += 1
            cache.put(key, reply(data, ttl, f"127.0.0.{fetched}"), end, False, now, len(data), 1, False)
            e = cache.hit(cache.udp, key, now)
            cache.due.clear()  # the fetch itself, not a prefetch
        got = served(cache, e, data, end)
        if cache.due:  # the server refreshes what is due: the upstream's next answer
            assert cache.due == [(False, key)]
            cache.due.clear()
            fetched += 1
            cache.put(key, reply(data, ttl, f"127.0.0.{fetched}"), end, False, now, len(data), 1, False)
        assert got == want, f"after {after}s"
        assert fetched == sum(1 for a, _, f in steps if f and a <= after), f"after {after}s"


def test_an_expired_entry_is_stale_within_the_window_only() -> None:
    cache = ForwardCache(DnsMetrics(""), CacheOptions(success_ttl=30, serve_stale=60))
    data, end = query("www.example.com")
    key = cache_key(data, end)
    cache.put(key, reply(data, 300, "192.0.2.1"), end, False, 100.0, len(data), 1, False)
    assert cache.stale(cache.udp, key, 129.0) is None  # fresh: not stale
    assert cache.hit(cache.udp, key, 130.0) is None  # expired: not a hit …
    e = cache.stale(cache.udp, key, 130.0)
    assert served(cache, e, data, end) == (0, "192.0.2.1")  # … but stale, served with TTL 0
    assert cache.stale(cache.udp, key, 189.9) is not None
    assert cache.hit(cache.udp, key, 190.0) is None and cache.stale(cache.udp, key, 190.0) is None
    assert cache.counts() == (0, 0)  # past the window: gone
    plain = ForwardCache(DnsMetrics(""), CacheOptions(success_ttl=30))
    plain.put(key, reply(data, 300, "192.0.2.1"), end, False, 100.0, len(data), 1, False)
    assert plain.hit(plain.udp, key, 130.0) is None and plain.counts() == (0, 0)  # no serve_stale: dropped


def test_keepttl_serves_the_ttl_as_stored() -> None:
    cache = ForwardCache(DnsMetrics(""), CacheOptions(keepttl=True))
    data, end = query("www.example.com")
    key = cache_key(data, end)
    cache.put(key, reply(data, 300, "192.0.2.1"), end, False, 100.0, len(data), 1, False)
    assert served(cache, cache.hit(cache.udp, key, 250.0), data, end) == (300, "192.0.2.1")


def test_disable_keeps_a_type_out_of_the_cache_in_its_zones() -> None:
    cache = ForwardCache(DnsMetrics(""), CacheOptions(disable_success=(("example", "com"),)))
    for name, kept in (("www.example.com", False), ("example.com", False), ("www.example.org", True),
                       ("www.notexample.com", True)):
        data, end = query(name)
        cache.put(cache_key(data, end), reply(data, 60, "192.0.2.1"), end, False, 0.0, len(data), 1, False)
        assert (cache_key(data, end) in cache.udp) is kept, name
