"""The engine: one server's answering logic for the current view, with the fast path; no IO.

`slow(data, tcp)` is the whole pipeline: parse, resolve, encode. It returns the reply bytes, None
(send nothing), or an `Upstream` request the server must complete with IO (forwarding a query, or
chasing an ExternalName target outside the zone).

`fast(data, tcp)` answers from a dict of reply bytes. The key is the query without its ID, with the
question name's bytes lower-cased; the value is the reply without its ID, split around the question
name. A hit is `id + head + question name as asked + tail`: because the encoder points every repeat of
the question name back at it, this is byte for byte what `slow` would produce (a test checks it).
Only replies that depend on nothing but the view are stored (not forwarded or chased ones, not
SERVFAIL), only for "plain" queries (no EDNS options, no extra records), so the key captures every input.
Installing a view replaces both caches; they are also dropped whole when they reach `max_entries`,
which bounds what random names can cost. Every cached value carries its metrics `Kind` number, so a
hit is counted with one list increment (netkit.dns.metrics).

With `Options.loadbalance` (CoreDNS's `loadbalance`, on by default as in kubeadm's Corefile) every
section of a NOERROR reply — answer, authority, additional — is put in CoreDNS's round_robin order
(netkit.dns.loadbalance: CNAMEs first, A/AAAA records shuffled); a reply in which some section has
more than one address is never cached, so every query gets its own order; replies with one address
(most ClusterIP names) stay on the fast path.

The key's lower-casing stops at the first zero byte after the header, which is the root label of a
plain name; a reply is stored only when it is, so no two distinct questions share a key.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from netkit.dns import loadbalance, rewrite
from netkit.dns.hosts import HostsOptions, HostsTable
from netkit.dns.hosts import answer as hosts_answer
from netkit.dns.metrics import DnsMetrics, Kind, rcode_label, type_label
from netkit.dns.names import Name
from netkit.dns.resolver import REFUSED, SERVFAIL, Reply, resolve
from netkit.dns.rewrite import Mapping, NameRule
from netkit.dns.view import Options, View
from netkit.dns.wire import Query, Rejected, encode, encode_rejected, parse_query, reply_limit

CLASS_IN, CLASS_ANY = 1, 255
NXDOMAIN = 3
Cache = dict[bytes, tuple[bytes, bytes, int]]  # key → (reply head, reply tail, kind number)
Exact = dict[bytes, tuple[bytes, int]]  # query but its ID → (reply but its ID, kind number)


@dataclass(frozen=True, slots=True)
class Upstream:
    """Work for the upstream: forward `query` (when `reply.forward`) or chase `reply.chase`."""

    data: bytes  # the query as received (as `rewrite` made it)
    query: Query
    reply: Reply
    tcp: bool
    asked: Query | None = None  # the query as received when `rewrite` changed its name
    reverts: tuple[Mapping, ...] = ()  # how to rewrite the answer back for `asked`


Outcome = bytes | Upstream | None


def _with_name(data: bytes, query: Query, name: Name) -> tuple[bytes, Query]:
    """The query with another question name (what `rewrite` sends upstream)."""
    labels = b"".join(bytes([len(x)]) + x.encode("latin-1") for x in name) + b"\x00"
    wire = data[:12] + labels + data[12 + len(query.raw_name):]
    parsed = parse_query(wire)
    assert isinstance(parsed, Query)
    return wire, parsed


def cache_key(data: bytes, end: int) -> bytes:
    return data[2:12] + data[12:end].lower() + data[end:]


class Engine:
    def __init__(self, options: Options, max_entries: int = 200_000, metrics: DnsMetrics | None = None) -> None:
        self.options = options
        self.max_entries = max_entries
        self.metrics = metrics or DnsMetrics("")
        self.family = 1  # of the server's sockets (CoreDNS's label: 1 IPv4, 2 IPv6)
        self.view: View | None = None
        self.udp_cache: Cache = {}
        self.tcp_cache: Cache = {}
        # Second level for UDP: the whole query but its ID, exactly as received → the reply but its
        # ID. A client repeating a question (same case, same EDNS) costs one slice and one lookup.
        self.udp_exact: Exact = {}
        self.cached = {"success": 0, "denial": 0}
        self.random = random.Random()
        self.hosts: tuple[HostsOptions, HostsTable] | None = None  # CoreDNS's `hosts`, ahead of kubernetes
        self.rewrite: tuple[NameRule, ...] = ()  # CoreDNS's `rewrite name` rules, ahead of hosts

    def set_hosts(self, options: HostsOptions, table: HostsTable) -> None:
        """Install (or replace) the hosts plugin's table; cached replies are dropped, as for a view."""
        self.hosts = (options, table)
        self.udp_cache, self.tcp_cache, self.udp_exact = {}, {}, {}
        self.cached = {"success": 0, "denial": 0}

    def set_view(self, view: View) -> None:
        if view.options != self.options:
            raise ValueError("the view was built with other options than this server's")
        self.view = view
        self.udp_cache, self.tcp_cache, self.udp_exact = {}, {}, {}
        self.cached = {"success": 0, "denial": 0}

    def fast(self, data: bytes, tcp: bool) -> bytes | None:
        """The cached reply, counted; None on a miss."""
        hit = self.lookup(data, tcp)
        if hit is None:
            return None
        self.metrics.counts[hit[1]] += 1
        return hit[0]

    def lookup(self, data: bytes, tcp: bool) -> tuple[bytes, int] | None:
        """The cached reply and its metrics kind number (not counted); None on a miss."""
        if not tcp:
            exact = self.udp_exact.get(data[2:])
            if exact is not None:
                return data[:2] + exact[0], exact[1]
        end = data.find(0, 12)
        if end < 13:
            return None
        hit = (self.tcp_cache if tcp else self.udp_cache).get(cache_key(data, end))
        if hit is None:
            return None
        rest = hit[0] + data[12:end] + hit[1]
        if not tcp:
            self.remember_exact(data[2:], (rest, hit[2]))
        return data[:2] + rest, hit[2]

    def remember_exact(self, query_rest: bytes, reply: tuple[bytes, int]) -> None:
        if len(self.udp_exact) >= self.max_entries:
            self.udp_exact.clear()
        self.udp_exact[query_rest] = reply

    def slow(self, data: bytes, tcp: bool) -> Outcome:
        return self.slow_query(data, tcp)[0]

    def slow_query(self, data: bytes, tcp: bool) -> tuple[Outcome, Query | None]:
        """The full pipeline; also the parsed query (None when it could not be read), for the metrics."""
        parsed = parse_query(data)
        if parsed is None:
            return None, None
        if isinstance(parsed, Rejected):
            return encode_rejected(parsed), None
        query = parsed
        if query.qclass not in (CLASS_IN, CLASS_ANY):
            return encode(query, REFUSED, reply_limit(query.edns, tcp)), query
        name, done = query.name, None
        if self.rewrite:
            try:
                done = rewrite.apply(self.rewrite, query.name)
            except rewrite.RewriteError:
                return encode(query, SERVFAIL, reply_limit(query.edns, tcp)), query
            name = done.name if done is not None else name
        view, hosts = self.view, self.hosts
        reply = hosts_answer(hosts[1], hosts[0], name, query.qtype) if hosts is not None else None
        if reply is None:
            reply = resolve(view, self.options, name, query.qtype)
        shuffled = False
        if self.options.loadbalance:
            shuffled = loadbalance.changes(reply)
            reply = loadbalance.shuffle(reply, self.random)
        if reply.forward or reply.chase is not None:
            if done is not None:
                asked = _with_name(data, query, name)
                return Upstream(asked[0], asked[1], reply, tcp, query, done.reverts), query
            return Upstream(data, query, reply, tcp), query
        if done is not None:
            reply = rewrite.revert(reply, done.reverts)
        out = encode(query, reply, reply_limit(query.edns, tcp), zone=self.options.zone)
        if (reply.from_view and query.plain and view is not None and view is self.view and hosts is self.hosts
                and not shuffled):
            self._store(data, query, out, tcp)
        return out, query

    def kind(self, query: Query | None, request_size: int, out: bytes, tcp: bool, plugin: str, cache: str) -> int:
        """The metrics kind number of one answer."""
        return self.metrics.kind(Kind(
            "tcp" if tcp else "udp", self.family, type_label(query.qtype) if query is not None else "other",
            rcode_label(out[3] & 0xF if len(out) > 3 else 2), plugin if query is not None else "",
            cache if query is not None else "", bool(query is not None and query.edns is not None and query.edns.do),
            request_size, len(out)))

    def answer(self, data: bytes, tcp: bool) -> Outcome:
        hit = self.fast(data, tcp)
        return hit if hit is not None else self.slow(data, tcp)

    def _store(self, data: bytes, query: Query, out: bytes, tcp: bool) -> None:
        end = 12 + len(query.raw_name) - 1
        if data.find(0, 12) != end or end == 12:
            return
        if self.options.autopath and out[3] & 0xF == NXDOMAIN:
            return  # autopath answers it by the client's namespace: it must reach the server's slow path
        cache = self.tcp_cache if tcp else self.udp_cache
        if len(cache) >= self.max_entries:
            for t, n in self.cached.items():
                self.metrics.cache.evictions[t] += n
            cache.clear()
            self.cached = {"success": 0, "denial": 0}
        type_ = "success" if out[6:8] != b"\x00\x00" and out[3] & 0xF == 0 else "denial"
        kind = self.kind(query, len(data), out, tcp, "cache", type_)
        cache[cache_key(data, end)] = (out[2:12], out[end:], kind)
        self.cached[type_] += 1

