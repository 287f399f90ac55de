"""Upstream resolvers: where names outside the cluster zone go (IO, asyncio).

`Forwarder.exchange(query, tcp)` sends a query to each upstream in turn with a fresh random ID, waits
`timeout` seconds for a reply that matches the ID and the question, and returns it with the client's
ID restored; None when no upstream answered (the server then says SERVFAIL). A query from a TCP client
is retried over TCP when the UDP reply comes back truncated; a UDP client gets the truncated reply and
retries over TCP itself.

Loops (the first thing CoreDNS users run into: resolv.conf pointing at a local stub that forwards back
to cluster DNS) are refused twice over: `is_self` drops an upstream that is one of our own listening
addresses, and the server's loop probe sends each upstream a query for a random name; an upstream
whose probe comes back to us is marked `looping` and never used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address

from netkit.errors import NetkitError

DEFAULT_TIMEOUT = 2.0
DNS_PORT = 53


class UpstreamError(NetkitError):
    pass


@dataclass(frozen=True, slots=True)
class Address:
    host: str  # an IP address, never a name
    port: int = DNS_PORT

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, default_port: int = DNS_PORT) -> Address:
    """'10.0.0.1', '10.0.0.1:5353', 'fd00::1', '[fd00::1]:5353'."""
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
    if not 0 < port < 65536:
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


def is_self(upstream: Address, listening: Iterable[Address]) -> bool:
    """Would a query to `upstream` arrive at one of our own sockets?"""
    up = ip_address(upstream.host)
    for own in listening:
        if own.port != upstream.port:
            continue
        mine = ip_address(own.host)
        if mine == up or (mine.is_unspecified and mine.version == up.version and
                          (up.is_loopback or up.is_unspecified)):
            return True
    return False


class Forwarder:
    def __init__(self, upstreams: Iterable[Address], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.upstreams = tuple(upstreams)
        self.timeout = timeout
        self.looping: set[Address] = set()

    @property
    def usable(self) -> tuple[Address, ...]:
        return tuple(u for u in self.upstreams if u not in self.looping)

    async def exchange(self, query: bytes, tcp: bool) -> bytes | None:
        for upstream in self.usable:
            reply = await self.ask(upstream, query, tcp)
            if reply is not None:
                return reply
        return None

    async def ask(self, upstream: Address, query: bytes, tcp: bool) -> bytes | None:
        """One upstream, UDP first (then TCP for a TCP client whose answer was truncated)."""
        qid = secrets.randbits(16)
        wire = struct.pack("!H", qid) + query[2:]
        try:
            reply = await asyncio.wait_for(_udp(upstream, wire), self.timeout)
            if tcp and reply[2] & 0x02:
                reply = await asyncio.wait_for(_tcp(upstream, wire), self.timeout)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return None
        return query[:2] + reply[2:]


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
