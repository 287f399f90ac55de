"""CoreDNS's metrics, counted cheaply: plain ints on the hot path, Prometheus families at scrape time.

`COREDNS_METRICS` is the compatibility promise: every name, type and label set as CoreDNS exports it
today (plugin/metrics/vars, plugin/cache, plugin/forward, plugin/pkg/proxy), so its dashboards and
alerts work unchanged. A test compares the table with what `/metrics` serves, name by name.

Theory of operation. Every answered query belongs to a `Kind`: transport, address family, query type,
rcode, the plugin that answered (`kubernetes`, `forward` or `cache`), whether it was a cache hit, the
DO bit and the request and reply sizes. Kinds are few (a cached reply always has the same kind), so
each gets a small integer and `counts[kind] += 1` is all a cache hit costs; the cache entries carry
their kind's number. Request duration is timed per batch of datagrams answered in one wake-up (each
query is counted in the bucket of its batch's average, and the batch's time goes to the sum); answers
that take the slow path are timed one by one. Scraping folds the counts into CoreDNS's families.

Pure: no IO; the server owns the HTTP side.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

import netkit

TIME_BUCKETS = tuple(0.00025 * 2**i for i in range(16))  # CoreDNS plugin.TimeBuckets: 0.25 ms … 8.192 s
SIZE_BUCKETS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3)
PROXY_NAME = "forward"
EXACT_KINDS = 4096  # kinds with exact request and response sizes; beyond, sizes are rounded up to a bucket

# CoreDNS's own list of query types with their own label value; everything else is "other".
MONITORED_TYPES = ("A", "AAAA", "MX", "SOA", "CNAME", "PTR", "TXT", "NS", "SRV", "DS", "DNSKEY", "RRSIG",
                   "NSEC", "NSEC3", "HTTPS", "IXFR", "AXFR", "ANY")
_TYPE_CODES = {1: "A", 28: "AAAA", 15: "MX", 6: "SOA", 5: "CNAME", 12: "PTR", 16: "TXT", 2: "NS", 33: "SRV",
               43: "DS", 48: "DNSKEY", 46: "RRSIG", 47: "NSEC", 50: "NSEC3", 65: "HTTPS", 251: "IXFR",
               252: "AXFR", 255: "ANY"}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED", 6: "YXDOMAIN",
          7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH", 10: "NOTZONE", 16: "BADVERS"}


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    type: str  # counter | gauge | histogram
    labels: tuple[str, ...]
    help: str


COREDNS_METRICS: tuple[Spec, ...] = (
    Spec("coredns_build_info", "gauge", ("version", "revision", "goversion"),
         "A metric with a constant '1' value labeled by version, revision, and goversion "
         "from which CoreDNS was built."),
    Spec("coredns_panics_total", "counter", (), "A metrics that counts the number of panics."),
    Spec("coredns_plugin_enabled", "gauge", ("server", "zone", "view", "name"),
         "A metric that indicates whether a plugin is enabled on per server and zone basis."),
    Spec("coredns_dns_requests_total", "counter", ("server", "zone", "view", "proto", "family", "type"),
         "Counter of DNS requests made per zone, protocol and family."),
    Spec("coredns_dns_do_requests_total", "counter", ("server", "view", "zone"),
         "Counter of DNS requests with DO bit set per zone."),
    Spec("coredns_dns_request_duration_seconds", "histogram", ("server", "zone", "view", "type"),
         "Histogram of the time (in seconds) each request took per zone."),
    Spec("coredns_dns_request_size_bytes", "histogram", ("server", "zone", "view", "proto"),
         "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol."),
    Spec("coredns_dns_response_size_bytes", "histogram", ("server", "zone", "view", "proto"),
         "Size of the returned response in bytes."),
    Spec("coredns_dns_responses_total", "counter", ("server", "zone", "view", "rcode", "plugin"),
         "Counter of response status codes."),
    Spec("coredns_cache_entries", "gauge", ("server", "type", "zones", "view"), "The number of elements in the cache."),
    Spec("coredns_cache_requests_total", "counter", ("server", "zones", "view"), "The count of cache requests."),
    Spec("coredns_cache_hits_total", "counter", ("server", "type", "zones", "view"), "The count of cache hits."),
    Spec("coredns_cache_misses_total", "counter", ("server", "zones", "view"),
         "The count of cache misses. Deprecated, derive misses from cache hits/requests counters."),
    Spec("coredns_cache_prefetch_total", "counter", ("server", "zones", "view"),
         "The number of times the cache has prefetched a cached item."),
    Spec("coredns_cache_drops_total", "counter", ("server", "zones", "view"),
         "The number responses that are not cached, because the reply is malformed."),
    Spec("coredns_cache_served_stale_total", "counter", ("server", "zones", "view"),
         "The number of requests served from stale cache entries."),
    Spec("coredns_cache_evictions_total", "counter", ("server", "type", "zones", "view"),
         "The count of cache evictions."),
    Spec("coredns_autopath_success_total", "counter", ("server",), "Counter of requests that did autopath."),
    Spec("coredns_forward_healthcheck_broken_total", "counter", (),
         "Counter of the number of complete failures of the healthchecks."),
    Spec("coredns_forward_max_concurrent_rejects_total", "counter", (),
         "Counter of the number of queries rejected because the concurrent queries were at maximum."),
    Spec("coredns_proxy_request_duration_seconds", "histogram", ("proxy_name", "to", "rcode"),
         "Histogram of the time each request took."),
    Spec("coredns_proxy_healthcheck_failures_total", "counter", ("proxy_name", "to"),
         "Counter of the number of failed healthchecks."),
    Spec("coredns_proxy_conn_cache_hits_total", "counter", ("proxy_name", "to", "proto"),
         "Counter of connection cache hits per upstream and protocol."),
    Spec("coredns_proxy_conn_cache_misses_total", "counter", ("proxy_name", "to", "proto"),
         "Counter of connection cache misses per upstream and protocol."),
    Spec("coredns_hosts_entries", "gauge", (), "The combined number of entries in hosts and Corefile."),
    Spec("coredns_hosts_reload_timestamp_seconds", "gauge", (), "The timestamp of the last reload of hosts file."),
    Spec("coredns_reload_failed_total", "counter", (), "Counter of the number of failed reload attempts."),
    Spec("coredns_reload_version_info", "gauge", ("hash", "value"),
         "A metric with a constant '1' value labeled by hash, and value which type of hash generated."),
)
SPECS = {s.name: s for s in COREDNS_METRICS}


def type_label(qtype: int) -> str:
    return _TYPE_CODES.get(qtype, "other")


def rcode_label(rcode: int) -> str:
    return RCODES.get(rcode, str(rcode))


@dataclass(frozen=True, slots=True)
class Kind:
    """One class of answered queries: everything the metrics say about an answer but its time."""

    proto: str  # "udp" | "tcp"
    family: int  # 1: IPv4, 2: IPv6 (CoreDNS's values)
    qtype: str
    rcode: str
    plugin: str  # "kubernetes" | "forward" | "cache" | "" (answered before any plugin: FORMERR, …)
    cache: str  # "success" | "denial": a cache hit; "miss"; "": did not go through the cache
    do: bool
    request_size: int
    response_size: int


def _bound(size: int) -> int:
    b = _bucket(size, SIZE_BUCKETS)
    return int(SIZE_BUCKETS[b]) if b < len(SIZE_BUCKETS) else 65535


def _bucket(value: float, bounds: tuple[float, ...]) -> int:
    for i, b in enumerate(bounds):
        if value <= b:
            return i
    return len(bounds)


class ProxyCounters:
    """What the forwarder counts, per upstream ("to" is `ip:port`, as CoreDNS labels it)."""

    def __init__(self) -> None:
        self.durations: dict[tuple[str, str], list[int]] = {}  # (to, rcode) → bucket counts
        self.duration_sums: dict[tuple[str, str], float] = {}
        self.healthcheck_failures: dict[str, int] = {}
        self.conn_misses: dict[tuple[str, str], int] = {}  # (to, proto): every exchange opens a socket
        self.healthcheck_broken = 0
        self.max_concurrent_rejects = 0

    def exchanged(self, to: str, proto: str, rcode: str, seconds: float) -> None:
        key = (to, rcode)
        counts = self.durations.setdefault(key, [0] * (len(TIME_BUCKETS) + 1))
        counts[_bucket(seconds, TIME_BUCKETS)] += 1
        self.duration_sums[key] = self.duration_sums.get(key, 0.0) + seconds
        self.connected(to, proto)

    def connected(self, to: str, proto: str) -> None:
        self.conn_misses[(to, proto)] = self.conn_misses.get((to, proto), 0) + 1

    def healthcheck_failed(self, to: str) -> None:
        self.healthcheck_failures[to] = self.healthcheck_failures.get(to, 0) + 1


@dataclass
class CacheCounters:
    evictions: dict[str, int] = field(default_factory=lambda: {"success": 0, "denial": 0})
    drops: int = 0
    prefetches: int = 0  # refreshes started by prefetch or by serve_stale's immediate mode
    served_stale: int = 0


class DnsMetrics:
    """The counters of one server. `kind()` numbers a Kind; `counts[n] += 1` counts an answer of kind n."""

    def __init__(self, server: str, zone: str = ".", plugins: tuple[str, ...] = ()) -> None:
        self.server, self.zone, self.plugins = server, zone, plugins
        self.kinds: list[Kind] = []
        self._numbers: dict[Kind, int] = {}
        self.counts: list[int] = []
        self.duration_sums: list[float] = []
        self.timed: dict[tuple[int, int], int] = {}  # (kind, bucket) for answers not in bucket 0
        self.panics = 0
        self.proxy = ProxyCounters()
        self.cache = CacheCounters()
        self.cache_entries: Callable[[], tuple[int, int]] = lambda: (0, 0)  # (success, denial)
        self.reload_failed = 0
        self.reload_digest = ""  # the SHA-512 of the Corefile running, with `reload`
        self.autopath = 0  # answers autopath found further down the search path
        self.hosts: tuple[int, float] | None = None  # with the hosts plugin: (entries, the file's mtime)

    def kind(self, kind: Kind) -> int:
        n = self._numbers.get(kind)
        if n is None and len(self.kinds) >= EXACT_KINDS:
            # Many distinct sizes (random names): keep the number of kinds bounded by counting sizes
            # at their bucket's bound from here on (the histogram buckets stay exact, the sums round).
            kind = replace(kind, request_size=_bound(kind.request_size), response_size=_bound(kind.response_size))
            n = self._numbers.get(kind)
        if n is None:
            n = self._numbers[kind] = len(self.kinds)
            self.kinds.append(kind)
            self.counts.append(0)
            self.duration_sums.append(0.0)
        return n

    def answered(self, n: int, seconds: float) -> None:
        """One answer of kind n that took `seconds` (the slow path)."""
        self.counts[n] += 1
        self.duration_sums[n] += seconds
        b = _bucket(seconds, TIME_BUCKETS)
        if b:
            self.timed[(n, b)] = self.timed.get((n, b), 0) + 1

    def batch(self, numbers: list[int], seconds: float) -> None:
        """Answers from the cache, served in one wake-up that took `seconds` in all."""
        each = seconds / len(numbers)
        counts, sums = self.counts, self.duration_sums
        for n in numbers:
            counts[n] += 1
            sums[n] += each
        b = _bucket(each, TIME_BUCKETS)
        if b:
            for n in numbers:
                self.timed[(n, b)] = self.timed.get((n, b), 0) + 1

    # --- scrape ----------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield from self._info()
        yield from self._dns()
        yield from self._caches()
        m = self._family("coredns_autopath_success_total")
        m.add_metric([self.server], self.autopath)
        yield m
        yield from self._hosts()
        yield from self._forward()

    def _hosts(self) -> Iterator[Metric]:
        """As CoreDNS's: the entries only once a hosts file was read; the timestamp always (0 before)."""
        entries, stamp = self.hosts or (None, 0.0)
        m = self._family("coredns_hosts_entries")
        if entries is not None:
            m.add_metric([], entries)
        yield m
        m = self._family("coredns_hosts_reload_timestamp_seconds")
        m.add_metric([], stamp)
        yield m

    def _family(self, name: str) -> Any:  # a Counter/Gauge/HistogramMetricFamily
        spec = SPECS[name]
        short = name.removesuffix("_total") if spec.type == "counter" else name
        cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}
        return cls[spec.type](short, spec.help, labels=spec.labels)

    def _info(self) -> Iterator[Metric]:
        m = self._family("coredns_build_info")
        m.add_metric([f"netkit-{netkit.__version__}", "", f"python{platform.python_version()}"], 1)
        yield m
        m = self._family("coredns_panics_total")
        m.add_metric([], self.panics)
        yield m
        m = self._family("coredns_plugin_enabled")
        for name in self.plugins:
            m.add_metric([self.server, self.zone, "", name], 1)
        yield m
        m = self._family("coredns_reload_failed_total")
        m.add_metric([], self.reload_failed)
        yield m
        m = self._family("coredns_reload_version_info")
        if self.reload_digest:
            m.add_metric(["sha512", self.reload_digest], 1)
        yield m

    def _dns(self) -> Iterator[Metric]:
        sv, zone = self.server, self.zone
        requests: dict[tuple[str, ...], int] = {}
        responses: dict[tuple[str, ...], int] = {}
        do = 0
        req_sizes: dict[str, list[int]] = {}
        resp_sizes: dict[str, list[int]] = {}
        size_sums: dict[tuple[str, str], float] = {}
        durations: dict[str, list[int]] = {}
        duration_sums: dict[str, float] = {}
        for n, k in enumerate(self.kinds):
            c = self.counts[n]
            if not c:
                continue
            key = (sv, zone, "", k.proto, str(k.family), k.qtype)
            requests[key] = requests.get(key, 0) + c
            rkey = (sv, zone, "", k.rcode, k.plugin)
            responses[rkey] = responses.get(rkey, 0) + c
            do += c if k.do else 0
            for sizes, size, what in ((req_sizes, k.request_size, "req"), (resp_sizes, k.response_size, "resp")):
                counts = sizes.setdefault(k.proto, [0] * (len(SIZE_BUCKETS) + 1))
                counts[_bucket(size, SIZE_BUCKETS)] += c
                size_sums[(what, k.proto)] = size_sums.get((what, k.proto), 0.0) + size * c
            dur = durations.setdefault(k.qtype, [0] * (len(TIME_BUCKETS) + 1))
            dur[0] += c
            duration_sums[k.qtype] = duration_sums.get(k.qtype, 0.0) + self.duration_sums[n]
        for (n, b), c in self.timed.items():
            dur = durations[self.kinds[n].qtype]
            dur[0] -= c
            dur[b] += c
        m = self._family("coredns_dns_requests_total")
        for labels, c in sorted(requests.items()):
            m.add_metric(list(labels), c)
        yield m
        m = self._family("coredns_dns_do_requests_total")
        m.add_metric([sv, "", zone], do)
        yield m
        m = self._family("coredns_dns_request_duration_seconds")
        for qtype, counts in sorted(durations.items()):
            m.add_metric([sv, zone, "", qtype], _cumulative(counts, TIME_BUCKETS), duration_sums[qtype])
        yield m
        for name, sizes, what in (("coredns_dns_request_size_bytes", req_sizes, "req"),
                                  ("coredns_dns_response_size_bytes", resp_sizes, "resp")):
            m = self._family(name)
            for proto, counts in sorted(sizes.items()):
                m.add_metric([sv, zone, "", proto], _cumulative(counts, SIZE_BUCKETS), size_sums[(what, proto)])
            yield m
        m = self._family("coredns_dns_responses_total")
        for labels, c in sorted(responses.items()):
            m.add_metric(list(labels), c)
        yield m

    def _caches(self) -> Iterator[Metric]:
        sv, zones = self.server, self.zone
        hits = {"success": 0, "denial": 0}
        requests = misses = 0
        for n, k in enumerate(self.kinds):
            if k.cache in hits:
                hits[k.cache] += self.counts[n]
            elif k.cache == "miss":
                misses += self.counts[n]
            requests += self.counts[n] if k.cache else 0
        success, denial = self.cache_entries()
        m = self._family("coredns_cache_entries")
        m.add_metric([sv, "success", zones, ""], success)
        m.add_metric([sv, "denial", zones, ""], denial)
        yield m
        for name, value in (("coredns_cache_requests_total", requests), ("coredns_cache_misses_total", misses),
                            ("coredns_cache_prefetch_total", self.cache.prefetches),
                            ("coredns_cache_drops_total", self.cache.drops),
                            ("coredns_cache_served_stale_total", self.cache.served_stale)):
            m = self._family(name)
            m.add_metric([sv, zones, ""], value)
            yield m
        for name, values in (("coredns_cache_hits_total", hits),
                             ("coredns_cache_evictions_total", self.cache.evictions)):
            m = self._family(name)
            for t in ("success", "denial"):
                m.add_metric([sv, t, zones, ""], values[t])
            yield m

    def _forward(self) -> Iterator[Metric]:
        p = self.proxy
        m = self._family("coredns_forward_healthcheck_broken_total")
        m.add_metric([], p.healthcheck_broken)
        yield m
        m = self._family("coredns_forward_max_concurrent_rejects_total")
        m.add_metric([], p.max_concurrent_rejects)
        yield m
        m = self._family("coredns_proxy_request_duration_seconds")
        for (to, rcode), counts in sorted(p.durations.items()):
            m.add_metric([PROXY_NAME, to, rcode], _cumulative(counts, TIME_BUCKETS), p.duration_sums[(to, rcode)])
        yield m
        m = self._family("coredns_proxy_healthcheck_failures_total")
        for to, c in sorted(p.healthcheck_failures.items()):
            m.add_metric([PROXY_NAME, to], c)
        yield m
        hits = self._family("coredns_proxy_conn_cache_hits_total")
        misses = self._family("coredns_proxy_conn_cache_misses_total")
        for (to, proto), c in sorted(p.conn_misses.items()):
            hits.add_metric([PROXY_NAME, to, proto], 0)
            misses.add_metric([PROXY_NAME, to, proto], c)
        yield hits
        yield misses


def _cumulative(counts: list[int], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    total = 0
    for bound, c in zip((*bounds, float("inf")), counts, strict=True):
        total += c
        out.append(("+Inf" if bound == float("inf") else _float(bound), total))
    return out


def _float(value: float) -> str:
    return repr(float(value))
