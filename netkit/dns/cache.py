"""The cache of upstream answers, CoreDNS's `cache` plugin (pure: `now` is passed in).

What is kept: replies from the upstream (forwarded names, and the upstream half of an ExternalName
chase) with rcode NOERROR (with records: *success*; empty: *denial*, NODATA) or NXDOMAIN (*denial*),
and SERVFAIL or NOTIMP (CoreDNS's "server error" type, kept with the denials); never a truncated
reply, another rcode or a reply that cannot be read. How long: CoreDNS's rules — the smallest TTL of
the records (for a denial, of the authority section's; 5 s when there is none), clamped to the type's
[MINTTL, TTL] (`success`: 5 and 3600, `denial`: 5 and 1800; `cache 30` sets both TTLs to 30); a
server error for `servfail` whatever its records say (5 s unless set, 0 keeps none, at most 5
minutes — RFC 2308 section 7.1). So an upstream that fails a name is asked again once per 5 s, not
once per query; an upstream that does not answer at all is not a reply and is never cached (CoreDNS's
forward answers SERVFAIL outside its cache then). A hit is served with every TTL set to what remains,
as CoreDNS does (`keepttl`: the TTL as stored); the TTL bytes are rewritten at most once per second
per entry.

`serve_stale DURATION`: an entry is kept DURATION past its expiry; `hit` does not return it, `stale`
does (its TTLs then read 0) and the server decides: mode `immediate` serves it and refreshes it in the
background, `verify` asks the upstream first and serves the stale entry only when the upstream does
not answer NOERROR or NXDOMAIN. `prefetch AMOUNT DURATION PERCENTAGE%`: every hit counts in its
entry's frequency (hits with no gap of DURATION or more; a longer gap starts the count at 1 again);
an entry with AMOUNT hits whose remaining TTL is at most ceil(PERCENTAGE% of its TTL) is queued in
`due` once, for the server to refresh; the refreshed entry inherits the count. With prefetch on, the
UDP exact-bytes level is off, so that every hit is counted.

Keys are the engine's: the query without its ID, with the question name lower-cased, so a hit is
`id + head + question name as asked + tail` (the upstream echoes the question, and every later name
that repeats it is a pointer to it); for UDP a second level keeps the exact query bytes, valid until
the entry's next TTL tick. UDP and TCP answers are kept apart (a TCP answer may be larger
than a UDP client can take). Memory is bounded twice: CAPACITY entries per type (CoreDNS: 9,984 each)
and `max_bytes` of reply bytes; beyond either the oldest entries go, counted as evictions.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from netkit.config import parse_duration
from netkit.dns.loadbalance import Run, WireRecord, wire_run
from netkit.dns.metrics import CacheCounters, DnsMetrics, Kind, rcode_label, type_label
from netkit.dns.names import Name, name_from_text

SUCCESS_TTL, DENIAL_TTL, MIN_TTL, DEFAULT_DENIAL_TTL = 3600, 1800, 5, 5  # CoreDNS's maxTTL, maxNTTL, minTTL
MAX_TTL = 30  # kubeadm's `cache 30`: netkit dns's default
SERVFAIL_TTL, MAX_SERVFAIL_TTL = 5.0, 300.0  # CoreDNS's failttl default and the cap its setup enforces
CAPACITY = 9984
MAX_BYTES = 32 << 20
STALE = 3600.0  # serve_stale's default DURATION
PREFETCH_DURATION, PREFETCH_PERCENTAGE = 60.0, 10
OPT, SOA = 41, 6
NOERROR, SERVFAIL, NXDOMAIN, NOTIMP = 0, 2, 3, 4
TYPES = ("success", "denial")


@dataclass(frozen=True, slots=True)
class CacheOptions:
    """CoreDNS's `cache [TTL] { … }` block, one field per option argument, CoreDNS's names and defaults.

    `cache N` is `success_ttl = denial_ttl = N`; `enabled=False` is no `cache` plugin at all.
    `disable_success`/`disable_denial`: zones whose answers of that type are not kept (`disable
    success|denial [ZONES…]`; without zones the cache's zone, the root)."""

    enabled: bool = True
    success_capacity: int = CAPACITY
    success_ttl: int = SUCCESS_TTL
    success_minttl: int = MIN_TTL
    denial_capacity: int = CAPACITY
    denial_ttl: int = DENIAL_TTL
    denial_minttl: int = MIN_TTL
    servfail: float = SERVFAIL_TTL
    prefetch: int = 0  # AMOUNT; 0: off
    prefetch_duration: float = PREFETCH_DURATION
    prefetch_percentage: int = PREFETCH_PERCENTAGE
    serve_stale: float = 0.0  # DURATION; 0: off
    serve_stale_verify: bool = False  # REFRESH_MODE: immediate (False) | verify (True)
    keepttl: bool = False
    disable_success: tuple[Name, ...] = ()
    disable_denial: tuple[Name, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.servfail <= MAX_SERVFAIL_TTL:
            raise ValueError("caching SERVFAIL responses over 5 minutes is not permitted" if self.servfail > 0
                             else "invalid negative ttl for servfail")
        for what, value in (("success", self.success_capacity), ("denial", self.denial_capacity)):
            if value < 0:
                raise ValueError(f"{what}: cache capacity can not be negative: {value}")
        for what, ttl, minttl in (("success", self.success_ttl, self.success_minttl),
                                  ("denial", self.denial_ttl, self.denial_minttl)):
            if ttl < 0 or minttl < 0:
                raise ValueError(f"{what}: cache TTL can not be negative: {min(ttl, minttl)}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch amount should be positive: {self.prefetch}")
        if self.prefetch_duration <= 0:
            raise ValueError(f"prefetch duration should be positive: {self.prefetch_duration:g}s")
        if not 0 <= self.prefetch_percentage <= 100:
            raise ValueError(f"percentage should fall in range [0, 100]: {self.prefetch_percentage}")
        if self.serve_stale < 0:
            raise ValueError(f"invalid negative duration for serve_stale: {self.serve_stale:g}s")

    def capacity(self, type_: str) -> int:
        return self.success_capacity if type_ == "success" else self.denial_capacity

    def disabled(self, type_: str, name: Sequence[str]) -> bool:
        zones = self.disable_success if type_ == "success" else self.disable_denial
        return any(tuple(name[len(name) - len(z):]) == z for z in zones if len(z) <= len(name))


def parse_option(options: CacheOptions, option: str, args: Sequence[str]) -> CacheOptions:
    """`options` with one line of a `cache` block applied, as CoreDNS's setup reads it: `option` is
    its first word, `args` the rest. ValueError (CoreDNS's message) when the arguments are wrong."""
    parse = _PARSERS.get(option)
    if parse is None:
        raise ValueError(f"unknown property '{option}'")
    return replace(options, **parse(list(args)))


def parse_cache(args: Sequence[str], lines: Sequence[tuple[str, Sequence[str]]] = ()) -> CacheOptions:
    """A whole `cache [TTL] { OPTION ARGS… }` as CoreDNS's setup reads it (zones other than the
    server block's are not taken: ValueError)."""
    options = CacheOptions()
    if args:
        try:
            ttl = int(args[0])
        except ValueError:
            ttl = None
        if ttl is not None and ttl <= 0:
            raise ValueError(f"cache TTL can not be zero or negative: {ttl}")
        if ttl is not None:
            options = replace(options, success_ttl=ttl, denial_ttl=ttl)
        if args[1 if ttl is not None else 0:]:
            raise ValueError("cache ZONES are not implemented: the cache covers the server block's zones")
    for option, option_args in lines:
        options = parse_option(options, option, option_args)
    return options


def _count(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what}: not a number: {text!r}") from None


def _seconds(text: str, what: str) -> float:
    try:
        return parse_duration(text, what)
    except Exception:  # NetkitError or ValueError: one message either way
        raise ValueError(f"{what}: not a duration: {text!r}") from None


Parser = Callable[[list[str]], dict[str, Any]]


def _typed(type_: str) -> Parser:
    def parse(args: list[str]) -> dict[str, Any]:
        if not 1 <= len(args) <= 3:
            raise ValueError(f"{type_} takes CAPACITY [TTL] [MINTTL]")
        out: dict[str, Any] = {f"{type_}_capacity": _count(args[0], type_)}
        if len(args) > 1:
            out[f"{type_}_ttl"] = _count(args[1], type_)
        if len(args) > 2:
            out[f"{type_}_minttl"] = _count(args[2], type_)
        return out
    return parse


def _prefetch(args: list[str]) -> dict[str, Any]:
    if not 1 <= len(args) <= 3:
        raise ValueError("prefetch takes AMOUNT [[DURATION] [PERCENTAGE%]]")
    out: dict[str, Any] = {"prefetch": _count(args[0], "prefetch")}
    if out["prefetch"] == 0:
        raise ValueError("prefetch amount should be positive: 0")
    if len(args) > 1:
        out["prefetch_duration"] = _seconds(args[1], "prefetch")
    if len(args) > 2:
        if not args[2].endswith("%"):
            raise ValueError(f"last character of percentage should be `%`, but is: {args[2]!r}")
        out["prefetch_percentage"] = _count(args[2][:-1], "prefetch")
    return out


def _serve_stale(args: list[str]) -> dict[str, Any]:
    if len(args) > 2:
        raise ValueError("serve_stale takes [DURATION] [REFRESH_MODE]")
    out: dict[str, Any] = {"serve_stale": _seconds(args[0], "serve_stale") if args else STALE}
    if len(args) > 1:
        if args[1].lower() not in ("immediate", "verify"):
            raise ValueError(f"invalid value for serve_stale refresh mode: {args[1]}")
        out["serve_stale_verify"] = args[1].lower() == "verify"
    return out


def _servfail(args: list[str]) -> dict[str, Any]:
    if len(args) != 1:
        raise ValueError("servfail takes DURATION")
    return {"servfail": _seconds(args[0], "servfail")}


def _keepttl(args: list[str]) -> dict[str, Any]:
    if args:
        raise ValueError("keepttl takes no arguments")
    return {"keepttl": True}


def _disable(args: list[str]) -> dict[str, Any]:
    if not args or args[0] not in TYPES:
        raise ValueError("disable takes success|denial [ZONES...]")
    return {f"disable_{args[0]}": tuple(name_from_text(z) for z in args[1:]) or ((),)}


_PARSERS: dict[str, Parser] = {"success": _typed("success"), "denial": _typed("denial"), "prefetch": _prefetch,
            "serve_stale": _serve_stale, "servfail": _servfail, "keepttl": _keepttl, "disable": _disable}


class Entry:
    __slots__ = ("head", "tail", "kind", "stored", "expires", "ttl", "age", "offsets", "type", "runs",
                 "hits", "last", "due")

    def __init__(self, head: bytes, tail: bytearray, kind: int, stored: float, ttl: int,
                 offsets: tuple[int, ...], type_: str, lifetime: float | None = None) -> None:
        self.head, self.tail, self.kind = head, tail, kind
        self.stored, self.ttl = stored, ttl
        self.expires = stored + (ttl if lifetime is None else lifetime)
        self.age = -1
        self.offsets = offsets  # where the TTLs are in `tail`
        self.type = type_  # "success" | "denial"
        self.runs: tuple[Run, ...] = ()  # address records loadbalance shuffles, offsets in `tail`
        self.hits, self.last = 0, stored  # prefetch: CoreDNS's freq (hits with no long gap, last hit)
        self.due = False  # queued for a refresh (prefetch or serve_stale)


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
    def __init__(self, metrics: DnsMetrics, options: CacheOptions | None = None, *,
                 max_bytes: int = MAX_BYTES) -> None:
        self.options = o = options if options is not None else CacheOptions(success_ttl=MAX_TTL, denial_ttl=MAX_TTL)
        self.metrics = metrics
        self.counters: CacheCounters = metrics.cache
        self.capacity = (o.success_capacity + o.denial_capacity) if o.enabled else 0
        self.max_bytes = max_bytes
        self.stale_for = o.serve_stale
        self.udp: dict[bytes, Entry] = {}
        self.tcp: dict[bytes, Entry] = {}
        # UDP queries exactly as received (but the ID) → (reply but its ID, kind, valid until): a
        # client repeating a question costs one lookup and one comparison until the next TTL tick.
        self.udp_exact: dict[bytes, tuple[bytes, int, float]] = {}
        self.bytes = 0
        # Per type, oldest first: (tcp, key) of every entry, for evicting within a type's capacity.
        self.order: dict[str, dict[tuple[bool, bytes], None]] = {t: {} for t in TYPES}
        self.due: list[tuple[bool, bytes]] = []  # entries to prefetch: (tcp, key); the server drains it

    @property
    def entries(self) -> dict[str, int]:
        return {t: len(keys) for t, keys in self.order.items()}

    def hit(self, entries: dict[bytes, Entry], key: bytes, now: float) -> Entry | None:
        """The live entry for `key`, its TTLs brought up to date; an expired one is dropped (unless
        serve_stale keeps it: see `stale`). With prefetch, the hit is counted and may queue a refresh."""
        e = entries.get(key)
        if e is None:
            return None
        if now >= e.expires:
            if now >= e.expires + self.stale_for:
                self._drop(entries, key, e)
            return None
        self._age(e, now)
        o = self.options
        if o.prefetch and not e.due:
            e.hits = 1 if e.last < now - o.prefetch_duration else e.hits + 1
            e.last = now
            if e.hits >= o.prefetch and e.ttl - int(now - e.stored) <= math.ceil(o.prefetch_percentage / 100 * e.ttl):
                e.due = True
                self.due.append((entries is self.tcp, key))
        return e

    def stale(self, entries: dict[bytes, Entry], key: bytes, now: float) -> Entry | None:
        """An expired entry still within serve_stale's DURATION, its TTLs at 0 (keepttl: as stored)."""
        e = entries.get(key)
        if e is None or now < e.expires or now >= e.expires + self.stale_for:
            return None
        self._age(e, now)
        return e

    def _age(self, e: Entry, now: float) -> None:
        age = int(now - e.stored)
        if age != e.age and not self.options.keepttl:
            remaining = struct.pack("!I", max(0, e.ttl - age))
            tail = e.tail
            for off in e.offsets:
                tail[off:off + 4] = remaining
        e.age = age

    def remember_exact(self, query_rest: bytes, e: Entry, reply_rest: bytes) -> None:
        if self.options.prefetch:
            return  # every hit must reach `hit` to be counted
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
        success = parsed.rcode == NOERROR and parsed.answers > 0
        type_ = "success" if success else "denial"
        lifetime = self._lifetime(parsed, type_)
        if lifetime is None or not self.options.capacity(type_) or self.options.disabled(type_, _labels(key)):
            return reply
        ttl = int(lifetime)
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
            self._forget(old, tcp, key)
        entry = entries[key] = Entry(reply[2:12], tail, kind, now, ttl, offsets, type_, lifetime)
        entry.age = 0
        entry.runs = tuple(Run(r.start - name_end, r.size, r.count) for r in parsed.runs)
        if old is not None and old.due:
            entry.hits = old.hits  # a prefetched entry keeps its popularity (CoreDNS's Freq.Reset)
        self.bytes += len(tail) + 10
        self.order[type_][(tcp, key)] = None
        self._bound(type_)
        return reply[:name_end] + bytes(tail)

    def refreshed(self, tcp: bool, key: bytes) -> None:
        """A refresh of `key` ended without a new entry: it may be queued again."""
        e = (self.tcp if tcp else self.udp).get(key)
        if e is not None:
            e.due = False

    def _lifetime(self, parsed: Parsed, type_: str) -> float | None:
        """How long to keep a reply (seconds), None for one not kept."""
        o = self.options
        if parsed.truncated:
            return None
        if parsed.rcode in (SERVFAIL, NOTIMP):
            return o.servfail or None
        if parsed.rcode not in (NOERROR, NXDOMAIN):
            return None
        ttl = parsed.min_ttl if type_ == "success" else parsed.min_authority_ttl
        low, high = (o.success_minttl, o.success_ttl) if type_ == "success" else (o.denial_minttl, o.denial_ttl)
        return float(max(min(low, high), min(high, DEFAULT_DENIAL_TTL if ttl is None else ttl))) or None

    def clear(self) -> None:
        self.udp.clear()
        self.tcp.clear()
        self.udp_exact.clear()
        self.bytes = 0
        self.order = {t: {} for t in TYPES}

    def counts(self) -> tuple[int, int]:
        return len(self.order["success"]), len(self.order["denial"])

    def _bound(self, type_: str) -> None:
        order = self.order[type_]
        while len(order) > self.options.capacity(type_):
            self._evict(type_, next(iter(order)))
        while self.bytes > self.max_bytes:
            t = max(TYPES, key=lambda t: len(self.order[t]))
            self._evict(t, next(iter(self.order[t])))

    def _evict(self, type_: str, where: tuple[bool, bytes]) -> None:
        tcp, key = where
        entries = self.tcp if tcp else self.udp
        self._drop(entries, key, entries[key])
        self.counters.evictions[type_] += 1

    def _drop(self, entries: dict[bytes, Entry], key: bytes, e: Entry) -> None:
        del entries[key]
        self._forget(e, entries is self.tcp, key)

    def _forget(self, e: Entry, tcp: bool, key: bytes) -> None:
        self.bytes -= len(e.tail) + 10
        self.order[e.type].pop((tcp, key), None)


def _labels(key: bytes) -> tuple[str, ...]:
    """The question name of a cache key (the query from its flags on, the name lower-cased)."""
    labels, pos = [], 10
    while pos < len(key) and key[pos]:
        labels.append(key[pos + 1:pos + 1 + key[pos]].decode("latin-1"))
        pos += 1 + key[pos]
    return tuple(labels)


def query_of(key: bytes) -> bytes:
    """The query a cache key was made from (ID 0), for a refresh."""
    return b"\x00\x00" + key
