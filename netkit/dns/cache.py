"""The cache of upstream answers, like CoreDNS's `cache 30` in kubeadm's Corefile (pure: `now` is passed in).

What is kept: replies from the upstream (forwarded names, and the upstream half of an ExternalName
chase) with rcode NOERROR (with records: *success*; empty: *denial*, NODATA) or NXDOMAIN (*denial*),
and SERVFAIL or NOTIMP (CoreDNS's "server error" type, kept with the denials); never a truncated
reply, another rcode or a reply that cannot be read. How long: CoreDNS's rules — the smallest TTL of
the records (for a denial, of the authority section's; 5 s when there is none), clamped to
[min_ttl, max_ttl] (5 and 30); a server error for `servfail_ttl` whatever its records say (CoreDNS's
`servfail` option: 5 s unless set, 0 keeps none, at most 5 minutes — RFC 2308 section 7.1). So an
upstream that fails a name is asked again once per 5 s, not once per query; an upstream that does
not answer at all is not a reply and is never cached (CoreDNS's forward answers SERVFAIL outside
its cache then). A hit is served with every TTL set to what remains, as CoreDNS does; the TTL bytes
are rewritten at most once per second per entry.

Keys are the engine's: the query without its ID, with the question name lower-cased, so a hit is
`id + head + question name as asked + tail` (the upstream echoes the question, and every later name
that repeats it is a pointer to it); for UDP a second level keeps the exact query bytes, valid until
the entry's next TTL tick. UDP and TCP answers are kept apart (a TCP answer may be larger
than a UDP client can take). Memory is bounded twice: `capacity` entries (CoreDNS: 9,984 per type)
and `max_bytes` of reply bytes; beyond either the oldest entries go, counted as evictions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from netkit.dns.loadbalance import Run, WireRecord, wire_run
from netkit.dns.metrics import CacheCounters, DnsMetrics, Kind, rcode_label, type_label

MAX_TTL, MIN_TTL, DEFAULT_DENIAL_TTL = 30, 5, 5
SERVFAIL_TTL, MAX_SERVFAIL_TTL = 5.0, 300.0  # CoreDNS's failttl default and the cap its setup enforces
CAPACITY = 9984
MAX_BYTES = 32 << 20
OPT, SOA = 41, 6
NOERROR, SERVFAIL, NXDOMAIN, NOTIMP = 0, 2, 3, 4


class Entry:
    __slots__ = ("head", "tail", "kind", "stored", "expires", "ttl", "age", "offsets", "type", "runs")

    def __init__(self, head: bytes, tail: bytearray, kind: int, stored: float, ttl: int,
                 offsets: tuple[int, ...], type_: str, lifetime: float | None = None) -> None:
        self.head, self.tail, self.kind = head, tail, kind
        self.stored, self.ttl = stored, ttl
        self.expires = stored + (ttl if lifetime is None else lifetime)
        self.age = -1
        self.offsets = offsets  # where the TTLs are in `tail`
        self.type = type_  # "success" | "denial"
        self.runs: tuple[Run, ...] = ()  # address records loadbalance shuffles, offsets in `tail`


@dataclass(frozen=True, slots=True)
class Parsed:
    rcode: int
    truncated: bool
    answers: int
    ttl_offsets: tuple[int, ...]  # absolute offsets of every TTL but the OPT record's
    min_ttl: int | None  # over answer + authority + additional (success)
    min_authority_ttl: int | None  # over authority (denial)
    runs: tuple[Run, ...] = ()  # address records loadbalance may shuffle (NOERROR only)


def parse_reply(reply: bytes) -> Parsed | None:
    """The parts of an upstream reply the cache needs; None when it cannot be walked."""
    try:
        _, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", reply)
        pos = 12
        for _ in range(qd):
            pos = _skip_name(reply, pos) + 4
        offsets, ttls, auth_ttls = [], [], []
        sections: tuple[list[WireRecord], ...] = ([], [], [])
        for i in range(an + ns + ar):
            start, pos = pos, _skip_name(reply, pos)
            rtype, _, ttl, rdlen = struct.unpack_from("!HHIH", reply, pos)
            if rtype != OPT:
                offsets.append(pos + 4)
                ttls.append(ttl)
                if an <= i < an + ns:
                    auth_ttls.append(min(ttl, _soa_minimum(reply, pos + 10, rdlen)) if rtype == SOA else ttl)
            pos += 10 + rdlen
            sections[0 if i < an else 1 if i < an + ns else 2].append(
                WireRecord(start, reply[start:start + 2], rtype, pos))
        if pos != len(reply):
            return None
    except (struct.error, IndexError, ValueError):
        return None
    runs = tuple(r for r in map(wire_run, sections) if r is not None) if flags & 0xF == NOERROR else ()
    return Parsed(flags & 0xF, bool(flags & 0x0200), an, tuple(offsets), min(ttls) if ttls else None,
                  min(auth_ttls) if auth_ttls else None, runs)


def _skip_name(data: bytes, pos: int) -> int:
    while True:
        n = data[pos]
        if n == 0:
            return pos + 1
        if n & 0xC0 == 0xC0:
            if pos + 2 > len(data):
                raise ValueError("pointer cut short")
            return pos + 2
        if n & 0xC0:
            raise ValueError("bad label")
        pos += 1 + n


def _soa_minimum(reply: bytes, rdata: int, rdlen: int) -> int:
    minimum: int = struct.unpack_from("!I", reply, rdata + rdlen - 4)[0]
    return minimum


class ForwardCache:
    def __init__(self, metrics: DnsMetrics, *, max_ttl: int = MAX_TTL, min_ttl: int = MIN_TTL,
                 capacity: int = CAPACITY, max_bytes: int = MAX_BYTES, servfail_ttl: float = SERVFAIL_TTL) -> None:
        if not 0 <= servfail_ttl <= MAX_SERVFAIL_TTL:
            raise ValueError("caching SERVFAIL responses over 5 minutes is not permitted" if servfail_ttl > 0
                             else "invalid negative ttl for servfail")
        self.metrics = metrics
        self.counters: CacheCounters = metrics.cache
        self.servfail_ttl = servfail_ttl
        self.max_ttl, self.min_ttl = max_ttl, min(min_ttl, max_ttl)
        self.capacity, self.max_bytes = capacity, max_bytes
        self.udp: dict[bytes, Entry] = {}
        self.tcp: dict[bytes, Entry] = {}
        # UDP queries exactly as received (but the ID) → (reply but its ID, kind, valid until): a
        # client repeating a question costs one lookup and one comparison until the next TTL tick.
        self.udp_exact: dict[bytes, tuple[bytes, int, float]] = {}
        self.bytes = 0
        self.entries = {"success": 0, "denial": 0}

    def hit(self, entries: dict[bytes, Entry], key: bytes, now: float) -> Entry | None:
        """The live entry for `key`, its TTLs brought up to date; an expired one is dropped."""
        e = entries.get(key)
        if e is None:
            return None
        if now >= e.expires:
            self._drop(entries, key, e)
            return None
        age = int(now - e.stored)
        if age != e.age:
            remaining = struct.pack("!I", max(0, e.ttl - age))
            tail = e.tail
            for off in e.offsets:
                tail[off:off + 4] = remaining
            e.age = age
        return e

    def remember_exact(self, query_rest: bytes, e: Entry, reply_rest: bytes) -> None:
        if len(self.udp_exact) >= self.capacity:
            self.udp_exact.clear()
        self.udp_exact[query_rest] = (reply_rest, e.kind, min(e.expires, e.stored + e.age + 1))

    def put(self, key: bytes, reply: bytes, name_end: int, tcp: bool, now: float, request_size: int,
            family: int, do: bool) -> bytes:
        """Keep `reply` (with its ID) to the query whose key is `key`; its question name ends at `name_end`.
        Returns the reply to send: with the TTLs the cache will serve (CoreDNS caps the first answer too)."""
        if self.capacity <= 0:
            return reply
        parsed = parse_reply(reply)
        if parsed is None:
            self.counters.drops += 1
            return reply
        lifetime = self._lifetime(parsed)
        if lifetime is None:
            return reply
        success = parsed.rcode == NOERROR and parsed.answers > 0
        ttl = int(lifetime)
        type_ = "success" if success else "denial"
        qtype = struct.unpack_from("!H", reply, name_end + 1)[0] if len(reply) >= name_end + 3 else 0
        kind = self.metrics.kind(Kind("tcp" if tcp else "udp", family, type_label(qtype), rcode_label(parsed.rcode),
                                      "cache", type_, do, request_size, len(reply)))
        tail = bytearray(reply[name_end:])
        offsets = tuple(o - name_end for o in parsed.ttl_offsets)
        packed = struct.pack("!I", ttl)
        for off in offsets:
            tail[off:off + 4] = packed
        entries = self.tcp if tcp else self.udp
        old = entries.pop(key, None)
        if old is not None:
            self._forget(old)
        entry = entries[key] = Entry(reply[2:12], tail, kind, now, ttl, offsets, type_, lifetime)
        entry.age = 0
        entry.runs = tuple(Run(r.start - name_end, r.size, r.count) for r in parsed.runs)
        self.bytes += len(tail) + 10
        self.entries[type_] += 1
        self._bound()
        return reply[:name_end] + bytes(tail)

    def _lifetime(self, parsed: Parsed) -> float | None:
        """How long to keep a reply (seconds), None for one not kept."""
        if parsed.truncated:
            return None
        if parsed.rcode in (SERVFAIL, NOTIMP):
            return self.servfail_ttl or None
        if parsed.rcode not in (NOERROR, NXDOMAIN):
            return None
        success = parsed.rcode == NOERROR and parsed.answers > 0
        ttl = parsed.min_ttl if success else parsed.min_authority_ttl
        return float(max(self.min_ttl, min(self.max_ttl, DEFAULT_DENIAL_TTL if ttl is None else ttl)))

    def clear(self) -> None:
        self.udp.clear()
        self.tcp.clear()
        self.udp_exact.clear()
        self.bytes = 0
        self.entries = {"success": 0, "denial": 0}

    def counts(self) -> tuple[int, int]:
        return self.entries["success"], self.entries["denial"]

    def _bound(self) -> None:
        while len(self.udp) + len(self.tcp) > self.capacity or self.bytes > self.max_bytes:
            entries = self.udp if len(self.udp) >= len(self.tcp) else self.tcp
            key, e = next(iter(entries.items()))
            self._drop(entries, key, e)
            self.counters.evictions[e.type] += 1

    def _drop(self, entries: dict[bytes, Entry], key: bytes, e: Entry) -> None:
        del entries[key]
        self._forget(e)

    def _forget(self, e: Entry) -> None:
        self.bytes -= len(e.tail) + 10
        self.entries[e.type] -= 1
