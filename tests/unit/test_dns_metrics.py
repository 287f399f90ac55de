"""CoreDNS's metric names and labels, the query log format, and the upstream cache's rules (pure)."""

from __future__ import annotations

import struct

import pytest
from dnslib import QTYPE, RR, SOA, A, DNSRecord
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from netkit.dns.cache import CacheOptions, ForwardCache, parse_reply
from netkit.dns.engine import cache_key
from netkit.dns.metrics import COREDNS_METRICS, DnsMetrics, Kind
from netkit.dns.server import log_line

# CoreDNS 1.11+, as its sources declare them: plugin/metrics/vars/vars.go, plugin/metrics/metrics.go
# (build info), plugin/cache/metrics.go, plugin/forward/metrics.go, plugin/pkg/proxy/metrics.go.
COREDNS = {
    "coredns_build_info": ("gauge", {"version", "revision", "goversion"}),
    "coredns_panics_total": ("counter", set()),
    "coredns_plugin_enabled": ("gauge", {"server", "zone", "view", "name"}),
    "coredns_dns_requests_total": ("counter", {"server", "zone", "view", "proto", "family", "type"}),
    "coredns_dns_do_requests_total": ("counter", {"server", "view", "zone"}),
    "coredns_dns_request_duration_seconds": ("histogram", {"server", "zone", "view", "type"}),
    "coredns_dns_request_size_bytes": ("histogram", {"server", "zone", "view", "proto"}),
    "coredns_dns_response_size_bytes": ("histogram", {"server", "zone", "view", "proto"}),
    "coredns_dns_responses_total": ("counter", {"server", "zone", "view", "rcode", "plugin"}),
    "coredns_cache_entries": ("gauge", {"server", "type", "zones", "view"}),
    "coredns_cache_requests_total": ("counter", {"server", "zones", "view"}),
    "coredns_cache_hits_total": ("counter", {"server", "type", "zones", "view"}),
    "coredns_cache_misses_total": ("counter", {"server", "zones", "view"}),
    "coredns_cache_prefetch_total": ("counter", {"server", "zones", "view"}),
    "coredns_cache_drops_total": ("counter", {"server", "zones", "view"}),
    "coredns_cache_served_stale_total": ("counter", {"server", "zones", "view"}),
    "coredns_cache_evictions_total": ("counter", {"server", "type", "zones", "view"}),
    "coredns_autopath_success_total": ("counter", {"server"}),
    "coredns_forward_healthcheck_broken_total": ("counter", set()),
    "coredns_forward_max_concurrent_rejects_total": ("counter", set()),
    "coredns_proxy_request_duration_seconds": ("histogram", {"proxy_name", "to", "rcode"}),
    "coredns_proxy_healthcheck_failures_total": ("counter", {"proxy_name", "to"}),
    "coredns_proxy_conn_cache_hits_total": ("counter", {"proxy_name", "to", "proto"}),
    "coredns_proxy_conn_cache_misses_total": ("counter", {"proxy_name", "to", "proto"}),
    "coredns_hosts_entries": ("gauge", set()),  # plugin/hosts/metrics.go
    "coredns_hosts_reload_timestamp_seconds": ("gauge", set()),
    "coredns_reload_failed_total": ("counter", set()),  # plugin/reload/metrics.go
    "coredns_reload_version_info": ("gauge", {"hash", "value"}),
}
TIME_BUCKETS_COREDNS = [0.00025 * 2**i for i in range(16)]  # prometheus.ExponentialBuckets(0.00025, 2, 16)


def test_the_table_is_coredns_name_by_name() -> None:
    ours = {s.name: (s.type, set(s.labels)) for s in COREDNS_METRICS}
    assert ours == COREDNS


def test_the_scrape_serves_every_family_with_its_labels() -> None:
    m = DnsMetrics("dns://:53", plugins=("cache",))
    n = m.kind(Kind("udp", 1, "A", "NOERROR", "cache", "success", False, 40, 60))
    m.batch([n, n, n], 0.00003)
    m.answered(m.kind(Kind("tcp", 1, "AAAA", "NXDOMAIN", "kubernetes", "miss", True, 50, 100)), 0.003)
    m.proxy.exchanged("10.0.0.1:53", "udp", "NOERROR", 0.01)
    m.proxy.healthcheck_failed("10.0.0.1:53")
    m.hosts = (3, 1700000000.5)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)  # type: ignore[arg-type]
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    for name, (mtype, labels) in COREDNS.items():
        fam = families[name.removesuffix("_total") if mtype == "counter" else name]
        assert fam.type == mtype
        assert all(set(s.labels) - {"le"} == labels for s in fam.samples), name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    key = ("coredns_dns_requests_total",
           (("family", "1"), ("proto", "udp"), ("server", "dns://:53"), ("type", "A"), ("view", ""), ("zone", ".")))
    assert samples[key] == 3
    assert samples[("coredns_hosts_entries", ())] == 3
    assert samples[("coredns_hosts_reload_timestamp_seconds", ())] == 1700000000.5
    buckets = sorted(float(s.labels["le"]) for s in families["coredns_dns_request_duration_seconds"].samples
                     if s.name.endswith("_bucket") and s.labels["type"] == "A")
    assert buckets[:-1] == TIME_BUCKETS_COREDNS
    slow = [s for s in families["coredns_dns_request_duration_seconds"].samples
            if s.name.endswith("_bucket") and s.labels["type"] == "AAAA"]
    by_bound = {s.labels["le"]: s.value for s in slow}
    assert by_bound["0.002"] == 0 and by_bound["0.004"] == 1
    assert samples[("coredns_dns_do_requests_total", (("server", "dns://:53"), ("view", ""), ("zone", ".")))] == 1


def test_the_query_log_line_is_coredns_format() -> None:
    q = DNSRecord.question("Web.default.svc.cluster.local", "A")
    q.header.id = 4242
    r = q.reply()
    r.add_answer(RR("Web.default.svc.cluster.local", QTYPE.A, ttl=30, rdata=A("10.96.0.10")))
    query, reply = bytes(q.pack()), bytes(r.pack())
    line = log_line(("10.244.0.1", 53071), query, reply, False, 0.000085391)
    assert line == (f'[INFO] 10.244.0.1:53071 - 4242 "A IN Web.default.svc.cluster.local. udp {len(query)} false 512" '
                    f'NOERROR qr,aa,rd,ra {len(reply)} 0.000085391s')
    assert log_line(("::1", 5), query, reply, True, 1.5).startswith("[INFO] [::1]:5 - 4242 ")


def upstream_reply(name: str, ttl: int, nxdomain: bool = False) -> tuple[bytes, bytes, int]:
    q = DNSRecord.question(name, "A")
    r = q.reply()
    r.header.aa = 0
    if nxdomain:
        r.header.rcode = 3
        r.add_auth(RR("test.", QTYPE.SOA, ttl=ttl, rdata=SOA("ns.test.", "a.test.", (1, 2, 3, 4, 7))))
    else:
        r.add_answer(RR(name, QTYPE.A, ttl=ttl, rdata=A("192.0.2.1")))
    data = bytes(q.pack())
    end = data.find(0, 12)
    return data, bytes(r.pack()), end


def ttls(reply: bytes) -> list[int]:
    parsed = parse_reply(reply)
    assert parsed is not None
    return [struct.unpack_from("!I", reply, o)[0] for o in parsed.ttl_offsets]


def test_cache_clamps_like_cache_30_and_counts_down() -> None:
    cache = ForwardCache(DnsMetrics(""))
    data, reply, end = upstream_reply("www.example.com", 300)
    key = cache_key(data, end)
    sent = cache.put(key, reply, end, False, 100.0, len(data), 1, False)
    assert ttls(sent) == [30]
    e = cache.hit(cache.udp, key, 112.5)
    assert e is not None and ttls(data[:2] + e.head + data[12:end] + bytes(e.tail)) == [18]
    assert cache.hit(cache.udp, key, 130.0) is None and cache.counts() == (0, 0)
    short_data, short, short_end = upstream_reply("short.example.com", 1)
    assert ttls(cache.put(cache_key(short_data, short_end), short, short_end, False, 0, 1, 1, False)) == [5]


def test_cache_denials_use_the_soa_minimum_and_each_type_is_bounded() -> None:
    metrics = DnsMetrics("")
    cache = ForwardCache(metrics, CacheOptions(success_ttl=30, denial_ttl=30, success_capacity=2, denial_capacity=1))
    data, reply, end = upstream_reply("gone.test", 60, nxdomain=True)
    assert ttls(cache.put(cache_key(data, end), reply, end, False, 0, 1, 1, False)) == [7]  # min(ttl, minimum)
    for i in range(5):
        d, r, e = upstream_reply(f"n{i}.example.com", 60)
        cache.put(cache_key(d, e), r, e, False, 0, 1, 1, False)
    assert len(cache.udp) == 3 and sum(cache.counts()) == 3
    assert metrics.cache.evictions == {"success": 3, "denial": 0}  # each type within its own capacity


def with_rcode(reply: bytes, rcode: int) -> bytes:
    return reply[:3] + bytes([(reply[3] & 0xF0) | rcode]) + reply[4:]


def test_truncated_and_other_error_replies_are_not_kept() -> None:
    cache = ForwardCache(DnsMetrics(""))
    data, reply, end = upstream_reply("www.example.com", 60)
    truncated = reply[:2] + bytes([reply[2] | 0x02]) + reply[3:]
    for r in (truncated, with_rcode(reply, 5), with_rcode(reply, 1), with_rcode(truncated, 2)):  # REFUSED, FORMERR
        cache.put(cache_key(data, end), r, end, False, 0, 1, 1, False)
    assert not cache.udp


@pytest.mark.parametrize("rcode", [2, 4])  # SERVFAIL, NOTIMP: CoreDNS's "server error" type
def test_server_errors_are_kept_for_the_servfail_duration_as_denials(rcode: int) -> None:
    metrics = DnsMetrics("")
    cache = ForwardCache(metrics)
    data, reply, end = upstream_reply("www.example.com", 60)
    key = cache_key(data, end)
    failed = with_rcode(upstream_reply("www.example.com", 60)[1], rcode)
    sent = cache.put(key, failed, end, False, 100.0, len(data), 1, False)
    assert ttls(sent) == [5]  # its records (had it any) capped to the duration, as CoreDNS's writer does
    assert cache.counts() == (0, 1)
    e = cache.hit(cache.udp, key, 104.9)
    assert e is not None and e.type == "denial"
    assert (data[:2] + e.head + data[12:end] + bytes(e.tail))[3] & 0xF == rcode
    assert cache.hit(cache.udp, key, 105.0) is None and cache.counts() == (0, 0)  # 5 s, whatever the TTLs say
    short = ForwardCache(metrics, CacheOptions(servfail=0.5))
    short.put(key, failed, end, False, 0.0, 1, 1, False)
    assert short.hit(short.udp, key, 0.4) is not None and short.hit(short.udp, key, 0.5) is None
    off = ForwardCache(metrics, CacheOptions(servfail=0))
    off.put(key, failed, end, False, 0.0, 1, 1, False)
    assert not off.udp


def test_the_servfail_duration_is_capped_like_corednss() -> None:
    CacheOptions(servfail=300)
    with pytest.raises(ValueError, match="over 5 minutes is not permitted"):
        CacheOptions(servfail=301)
    with pytest.raises(ValueError, match="negative"):
        CacheOptions(servfail=-1)


def test_the_number_of_kinds_stays_bounded() -> None:
    m = DnsMetrics("")
    for size in range(20_000):
        m.kind(Kind("udp", 1, "A", "NXDOMAIN", "kubernetes", "miss", False, 12 + size % 500, 30 + size))
    assert len(m.kinds) < 4096 + 14 * 14


def test_hosts_gauges_count_addresses_per_name_and_carry_the_files_mtime() -> None:
    from netkit.dns.command import _use_hosts
    from netkit.dns.engine import Engine
    from netkit.dns.hosts import HostsOptions, parse
    from netkit.dns.view import Options

    m = DnsMetrics("dns://:53", plugins=("hosts",))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m)  # type: ignore[arg-type]
    before = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(reg).decode())}
    assert before["coredns_hosts_entries"] == []  # as CoreDNS: no entries before a hosts file is read,
    assert [s.value for s in before["coredns_hosts_reload_timestamp_seconds"]] == [0.0]  # the timestamp 0
    options = HostsOptions(inline="10.0.0.3 c.example.org")
    table = parse("10.0.0.1 a.example.org b.example.org\nfd00::1 a.example.org\n", options)
    _use_hosts(Engine(Options()), m, options, (1_700_000_000_250_000_000, 64), table)
    assert m.hosts == (4, pytest.approx(1700000000.25))  # a: 2 addresses, b: 1, c (inline): 1
    _use_hosts(Engine(Options()), m, options, (-1, -1), parse("", options))
    assert m.hosts == (1, 0.0)  # the file unread: the inline entry, no timestamp
