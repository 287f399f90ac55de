"""Upstream resolvers: where names outside the cluster zone go (IO, asyncio), like CoreDNS's `forward`.

`Forwarder.exchange(query, tcp)` sends a query to the upstreams in the order of the policy (`random`,
CoreDNS's default; `round_robin`; `sequential`) with a fresh random ID, waits `timeout` seconds for a
reply that matches the ID and the question, and returns it with the client's ID restored; None when no
upstream answered (the server then says SERVFAIL), `LIMIT` when `max_concurrent` exchanges are already
in flight (the server says REFUSED, as CoreDNS does; kubeadm's Corefile sets 1000). A query from a TCP
client is retried over TCP when the UDP reply comes back truncated; a UDP client gets the truncated
reply and retries over TCP itself.

Health (CoreDNS's proxy health check): an upstream that fails an exchange is probed every
`health_check` seconds with `. IN NS` until it answers anything at all; each failed probe counts, and
after more than `max_fails` (2) it is *down* and skipped, so a dead upstream stops costing a timeout
per query. When every upstream is down, one is picked at random anyway (CoreDNS does the same and
counts `healthcheck_broken`). `Router` picks the forwarder for a name: the longest stub domain that
ends it (`--stub-domain example.com=10.0.0.5`), else the default.

Loops (the first thing CoreDNS users run into: resolv.conf pointing at a local stub that forwards back
to cluster DNS) are refused twice over: `is_self` drops an upstream that is one of our own listening
addresses, and the server's loop probe sends each upstream a query for a random name; an upstream
whose probe comes back to us is marked `looping` and never used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import secrets
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Final

from netkit.dns.metrics import ProxyCounters, rcode_label
from netkit.dns.names import Name, name_from_text
from netkit.errors import NetkitError

DEFAULT_TIMEOUT = 2.0
DNS_PORT = 53
HEALTH_CHECK = 0.5
MAX_FAILS = 2
MAX_CONCURRENT = 1000
HEALTH_QUERY = struct.pack("!HHHHHH", 0, 0x0100, 1, 0, 0, 0) + b"\x00" + struct.pack("!HH", 2, 1)  # . IN NS


class Limit(enum.Enum):
    LIMIT = "limit"


LIMIT: Final = Limit.LIMIT


class Policy(enum.Enum):
    RANDOM = "random"
    ROUND_ROBIN = "round_robin"
    SEQUENTIAL = "sequential"


class UpstreamError(NetkitError):
    pass


@dataclass(frozen=True, slots=True)
class Address:
    host: str  # an IP address, never a name
    port: int = DNS_PORT

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, default_port: int = DNS_PORT, *, listen: bool = False) -> Address:
    """'10.0.0.1', '10.0.0.1:5353', 'fd00::1', '[fd00::1]:5353'; port 0 only for a `listen` address
    (any free port, the one bound is said)."""
    host, port = text.strip(), default_port
    if host.startswith("["):
        host, sep, rest = host[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise UpstreamError(f"{text!r}: expected [IPv6]:PORT")
        port = int(rest[1:]) if rest else default_port
    elif host.count(":") == 1:
        host, _, p = host.partition(":")
        port = _port(p, text)
    try:
        ip_address(host)
    except ValueError:
        raise UpstreamError(f"{text!r}: not an IP address") from None
    if not (0 if listen else 1) <= port < 65536:
        raise UpstreamError(f"{text!r}: port out of range")
    return Address(host, port)


def _port(text: str, whole: str) -> int:
    if not text.isdigit():
        raise UpstreamError(f"{whole!r}: bad port")
    return int(text)


def from_resolv_conf(text: str) -> list[Address]:
    """The `nameserver` lines of a resolv.conf (addresses only; a scope suffix is dropped)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            with contextlib.suppress(UpstreamError):
                out.append(parse_address(fields[1].split("%")[0]))
    return out


def resolv_conf_upstreams(path: str = "/etc/resolv.conf") -> list[Address]:
    """The nameservers of a resolv.conf; none when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return from_resolv_conf(f.read())
    except OSError:
        return []


def resolv_conf_search(path: str) -> tuple[Name, ...]:
    """The search domains of a resolv.conf (its last `search` line, as the resolver reads it)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ()
    found: tuple[Name, ...] = ()
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] in ("search", "domain"):
            found = tuple(n for n in map(name_from_text, fields[1:]) if n)
    return found


def is_self(upstream: Address, listening: Iterable[Address]) -> bool:
    """Would a query to `upstream` arrive at one of our own sockets?"""
    up = ip_address(upstream.host)
    for own in listening:
        if own.port != upstream.port:
            continue
        mine = ip_address(own.host)
        dual = mine.version == 6  # `::` is a dual-stack socket (netkit.dns.server)
        if mine == up or (mine.is_unspecified and (mine.version == up.version or dual) and
                          (up.is_loopback or up.is_unspecified)):
            return True
    return False


class Forwarder:
    def __init__(self, upstreams: Iterable[Address], timeout: float = DEFAULT_TIMEOUT, *,
                 policy: Policy = Policy.RANDOM, max_concurrent: int = MAX_CONCURRENT,
                 health_check: float = HEALTH_CHECK, max_fails: int = MAX_FAILS,
                 counters: ProxyCounters | None = None, rng: random.Random | None = None) -> None:
        self.upstreams = tuple(upstreams)
        self.timeout = timeout
        self.policy, self.max_concurrent = policy, max_concurrent
        self.health_check, self.max_fails = health_check, max_fails
        self.counters = counters or ProxyCounters()
        self.looping: set[Address] = set()
        self.fails: dict[Address, int] = dict.fromkeys(self.upstreams, 0)
        self.inflight = 0
        self._next = 0
        self._rng = rng or random.Random()
        self._probes: dict[Address, asyncio.Task[None]] = {}

    @property
    def usable(self) -> tuple[Address, ...]:
        return tuple(u for u in self.upstreams if u not in self.looping)

    def down(self, upstream: Address) -> bool:
        return self.fails.get(upstream, 0) > self.max_fails

    def order(self) -> list[Address]:
        """The upstreams to try, in turn: the healthy ones in the policy's order."""
        usable = list(self.usable)
        if not usable:
            return []
        if self.policy is Policy.RANDOM:
            self._rng.shuffle(usable)
        elif self.policy is Policy.ROUND_ROBIN:
            i = self._next % len(usable)
            self._next += 1
            usable = usable[i:] + usable[:i]
        healthy = [u for u in usable if not self.down(u)]
        if healthy:
            # One that failed a query is being probed: it goes last until a probe answers, so a silent
            # upstream costs one query its timeout, not every query until max_fails probes have failed.
            return [u for u in healthy if u not in self._probes] + [u for u in healthy if u in self._probes]
        self.counters.healthcheck_broken += 1
        return [self._rng.choice(usable)]

    async def exchange(self, query: bytes, tcp: bool) -> bytes | Limit | None:
        if self.max_concurrent and self.inflight >= self.max_concurrent:
            self.counters.max_concurrent_rejects += 1
            return LIMIT
        self.inflight += 1
        try:
            for upstream in self.order():
                reply = await self.ask(upstream, query, tcp)
                if reply is not None:
                    return reply
                self.failed(upstream)
            return None
        finally:
            self.inflight -= 1

    async def ask(self, upstream: Address, query: bytes, tcp: bool, timeout: float | None = None) -> bytes | None:
        """One upstream, UDP first (then TCP for a TCP client whose answer was truncated)."""
        qid = secrets.randbits(16)
        wire = struct.pack("!H", qid) + query[2:]
        wait = self.timeout if timeout is None else timeout
        to, started = str(upstream), time.monotonic()
        try:
            self.counters.connected(to, "udp")
            reply = await asyncio.wait_for(_udp(upstream, wire), wait)
            if tcp and reply[2] & 0x02:
                self.counters.connected(to, "tcp")
                reply = await asyncio.wait_for(_tcp(upstream, wire), wait)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return None
        self.counters.exchanged(to, "tcp" if tcp else "udp", rcode_label(reply[3] & 0xF),
                                time.monotonic() - started)
        return query[:2] + reply[2:]

    def failed(self, upstream: Address) -> None:
        """`upstream` did not answer: probe it until it does (it goes last meanwhile)."""
        if self.health_check <= 0 or upstream in self._probes:
            return
        self._probes[upstream] = asyncio.ensure_future(self._probe(upstream))

    async def _probe(self, upstream: Address) -> None:
        """Probe until the upstream answers; every failed probe counts towards `down`."""
        try:
            while True:
                await asyncio.sleep(self.health_check)
                if await self.ask(upstream, HEALTH_QUERY, False, timeout=min(self.timeout, 1.0)) is not None:
                    self.fails[upstream] = 0
                    return
                self.fails[upstream] = self.fails.get(upstream, 0) + 1
                self.counters.healthcheck_failed(str(upstream))
        finally:
            self._probes.pop(upstream, None)

    async def close(self) -> None:
        tasks = list(self._probes.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Router:
    """The forwarder for a name: the longest stub domain that ends it, else the default."""

    def __init__(self, default: Forwarder, stubs: Mapping[Name, Forwarder] | None = None) -> None:
        self.default = default
        self.stubs = dict(stubs or {})
        self._longest = max((len(d) for d in self.stubs), default=0)

    @property
    def forwarders(self) -> tuple[Forwarder, ...]:
        return (self.default, *self.stubs.values())

    def forwarder_for(self, name: Name) -> Forwarder:
        if self.stubs:
            lowered = tuple(x.lower() for x in name)
            for n in range(min(len(lowered), self._longest), 0, -1):
                stub = self.stubs.get(lowered[-n:])
                if stub is not None:
                    return stub
        return self.default

    async def close(self) -> None:
        for f in self.forwarders:
            await f.close()


def parse_stub_domain(text: str) -> tuple[Name, list[Address]]:
    """'example.com=10.0.0.5[:53][,10.0.0.6]'."""
    domain, sep, servers = text.partition("=")
    name = name_from_text(domain)
    if not sep or not name or not servers.strip():
        raise UpstreamError(f"{text!r}: expected DOMAIN=IP[:PORT][,IP[:PORT]…]")
    return name, [parse_address(s) for s in servers.split(",")]


def _matches(query: bytes, reply: bytes) -> bool:
    """Same ID, a response, and the same question (compared without case, RFC 5452)."""
    if len(reply) < 12 or reply[:2] != query[:2] or not reply[2] & 0x80:
        return False
    end = query.find(0, 12) + 5
    return end > 5 and reply[12:end].lower() == query[12:end].lower()


async def _udp(upstream: Address, wire: bytes) -> bytes:
    family = socket.AF_INET6 if ":" in upstream.host else socket.AF_INET
    loop = asyncio.get_running_loop()
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, (upstream.host, upstream.port))
        await loop.sock_sendall(sock, wire)
        while True:
            reply = await loop.sock_recv(sock, 65535)
            if _matches(wire, reply):
                return reply


async def _tcp(upstream: Address, wire: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(upstream.host, upstream.port)
    try:
        writer.write(struct.pack("!H", len(wire)) + wire)
        await writer.drain()
        while True:
            size = struct.unpack("!H", await reader.readexactly(2))[0]
            reply = await reader.readexactly(size)
            if _matches(wire, reply):
                return reply
    finally:
        writer.close()
