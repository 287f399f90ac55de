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
which bounds what random names can cost.

The key's lower-casing stops at the first zero byte after the header, which is the root label of a
plain name; a reply is stored only when it is, so no two distinct questions share a key.
"""

from __future__ import annotations

from dataclasses import dataclass

from netkit.dns.resolver import REFUSED, Reply, resolve
from netkit.dns.view import Options, View
from netkit.dns.wire import Query, Rejected, encode, encode_rejected, parse_query, reply_limit

CLASS_IN, CLASS_ANY = 1, 255
Cache = dict[bytes, tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Upstream:
    """Work for the upstream: forward `query` (when `reply.forward`) or chase `reply.chase`."""

    data: bytes  # the query as received
    query: Query
    reply: Reply
    tcp: bool


Outcome = bytes | Upstream | None


def cache_key(data: bytes, end: int) -> bytes:
    return data[2:12] + data[12:end].lower() + data[end:]


class Engine:
    def __init__(self, options: Options, max_entries: int = 200_000) -> None:
        self.options = options
        self.max_entries = max_entries
        self.view: View | None = None
        self.udp_cache: Cache = {}
        self.tcp_cache: Cache = {}
        # Second level for UDP: the whole query but its ID, exactly as received → the reply but its
        # ID. A client repeating a question (same case, same EDNS) costs one slice and one lookup.
        self.udp_exact: dict[bytes, bytes] = {}

    def set_view(self, view: View) -> None:
        if view.options != self.options:
            raise ValueError("the view was built with other options than this server's")
        self.view = view
        self.udp_cache, self.tcp_cache, self.udp_exact = {}, {}, {}

    def fast(self, data: bytes, tcp: bool) -> bytes | None:
        if not tcp:
            exact = self.udp_exact.get(data[2:])
            if exact is not None:
                return data[:2] + exact
        end = data.find(0, 12)
        if end < 13:
            return None
        hit = (self.tcp_cache if tcp else self.udp_cache).get(cache_key(data, end))
        if hit is None:
            return None
        rest = hit[0] + data[12:end] + hit[1]
        if not tcp:
            self.remember_exact(data[2:], rest)
        return data[:2] + rest

    def remember_exact(self, query_rest: bytes, reply_rest: bytes) -> None:
        if len(self.udp_exact) >= self.max_entries:
            self.udp_exact.clear()
        self.udp_exact[query_rest] = reply_rest

    def slow(self, data: bytes, tcp: bool) -> Outcome:
        parsed = parse_query(data)
        if parsed is None:
            return None
        if isinstance(parsed, Rejected):
            return encode_rejected(parsed)
        query = parsed
        if query.qclass not in (CLASS_IN, CLASS_ANY):
            return encode(query, REFUSED, reply_limit(query.edns, tcp))
        view = self.view
        reply = resolve(view, self.options, query.name, query.qtype)
        if reply.forward or reply.chase is not None:
            return Upstream(data, query, reply, tcp)
        out = encode(query, reply, reply_limit(query.edns, tcp))
        if reply.from_view and query.plain and view is not None and view is self.view:
            self._store(data, query, out, tcp)
        return out

    def answer(self, data: bytes, tcp: bool) -> Outcome:
        hit = self.fast(data, tcp)
        return hit if hit is not None else self.slow(data, tcp)

    def _store(self, data: bytes, query: Query, out: bytes, tcp: bool) -> None:
        end = 12 + len(query.raw_name) - 1
        if data.find(0, 12) != end or end == 12:
            return
        cache = self.tcp_cache if tcp else self.udp_cache
        if len(cache) >= self.max_entries:
            cache.clear()
        cache[cache_key(data, end)] = (out[2:12], out[end:])
