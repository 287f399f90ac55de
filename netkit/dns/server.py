"""The DNS server: UDP and TCP on one address, asyncio (IO).

UDP is read with a reader callback that drains the socket (up to UDP_BATCH datagrams per wake-up), so
under load one poll serves many queries and a cache hit costs two system calls and a dict lookup. The
fast path is inlined there; a miss goes to `Engine.slow`. TCP (RFC 7766) accepts several queries per
connection and answers them in order; a connection idle for `tcp_idle` seconds is closed, and at most
`max_tcp` connections are open at once.

Work that needs the upstream (names outside the zone, reverse names that are not the cluster's,
ExternalName targets outside the zone) runs as tasks, at most `max_pending` at once (beyond that:
SERVFAIL), so a flood of such queries or a loop cannot exhaust memory. Nothing a client sends stops
the server: the engine answers FORMERR where a header can be read, and any unexpected error is logged
and answered SERVFAIL.

Until `set_view` installs the first complete view, names in the zone get SERVFAIL.
`check_loops()` probes each upstream with a random name; if the probe comes back to us, that upstream
forwards to us and is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import struct
from collections.abc import Coroutine
from typing import Any

from dnslib import DNSRecord

from netkit.dns.engine import Engine, Upstream
from netkit.dns.names import Name
from netkit.dns.resolver import REFUSED, SERVFAIL, Rcode, Reply
from netkit.dns.upstream import Address, Forwarder, is_self
from netkit.dns.view import View
from netkit.dns.wire import Query, encode, reply_limit

log = logging.getLogger("netkit.dns")

UDP_BATCH = 256
UDP_RCVBUF = 4 << 20
LOOP_PROBE_ZONE = ("netkit-loop-check",)
HINFO = 13


class DnsServer:
    def __init__(self, engine: Engine, listen: Address, forwarder: Forwarder, *, tcp_idle: float = 10.0,
                 max_tcp: int = 256, max_pending: int = 1000) -> None:
        self.engine = engine
        self.listen = listen
        self.forwarder = forwarder
        self.tcp_idle = tcp_idle
        self.max_tcp = max_tcp
        self.max_pending = max_pending
        self.address: Address | None = None
        self._udp: socket.socket | None = None
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._tcp_open = 0
        self._probes: dict[Name, Address] = {}

    def set_view(self, view: View) -> None:
        self.engine.set_view(view)

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> Address:
        """Bind UDP and TCP on the same port (port 0: any free port, the same for both)."""
        for _ in range(20):
            udp = _udp_socket(self.listen)
            port = udp.getsockname()[1]
            try:
                tcp = _tcp_socket(Address(self.listen.host, port))
            except OSError:
                udp.close()
                if self.listen.port:
                    raise
                continue
            break
        else:
            raise OSError(f"cannot bind UDP and TCP on one port at {self.listen.host}")
        self._udp = udp
        self.address = Address(self.listen.host, port)
        self._drop_self_upstreams()
        asyncio.get_running_loop().add_reader(udp.fileno(), self._on_udp)
        self._tcp = await asyncio.start_server(self._on_tcp, sock=tcp)
        return self.address

    async def close(self) -> None:
        if self._udp is not None:
            asyncio.get_running_loop().remove_reader(self._udp.fileno())
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            self._tcp = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _drop_self_upstreams(self) -> None:
        assert self.address is not None
        for up in self.forwarder.upstreams:
            if is_self(up, [self.address]):
                log.warning("upstream %s is this server itself: not forwarding to it", up)
                self.forwarder.looping.add(up)

    async def check_loops(self) -> tuple[Address, ...]:
        """Probe every upstream; those that send the probe back to us are dropped. Returns them."""
        probes: dict[Name, Address] = {
            (secrets.token_hex(8), *LOOP_PROBE_ZONE): up for up in self.forwarder.usable}
        self._probes.update(probes)
        await asyncio.gather(*(self._probe(name, up) for name, up in probes.items()))
        for name in probes:
            self._probes.pop(name, None)
        return tuple(up for up in probes.values() if up in self.forwarder.looping)

    async def _probe(self, name: Name, upstream: Address) -> None:
        await self.forwarder.ask(upstream, question_wire(name, HINFO), False)

    # --- UDP -------------------------------------------------------------------------------------

    def _on_udp(self) -> None:
        sock = self._udp
        if sock is None:
            return
        # Hot loop: everything it touches is a local (attribute lookups cost ~40 ns each in CPython)
        # and errors are handled with plain try/except (contextlib.suppress costs ~1 µs a call).
        engine = self.engine
        recvfrom, sendto, get = sock.recvfrom, sock.sendto, engine.udp_cache.get
        exact_get, remember = engine.udp_exact.get, engine.remember_exact
        for _ in range(UDP_BATCH):
            try:
                data, addr = recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            # The fast path, inlined (see Engine.fast): the exact query seen before → one lookup;
            # else the case-folded question → one find, one lookup, one join (and remembered exactly).
            rest = exact_get(data[2:])
            if rest is None:
                end = data.find(0, 12)
                if end > 12:
                    hit = get(data[2:12] + data[12:end].lower() + data[end:])
                    if hit is not None:
                        rest = hit[0] + data[12:end] + hit[1]
                        remember(data[2:], rest)
            if rest is not None:
                try:
                    sendto(data[:2] + rest, addr)
                except OSError:  # a full buffer or a vanished client: the client retries
                    pass
                continue
            self._udp_slow(sock, data, addr)

    def _udp_slow(self, sock: socket.socket, data: bytes, addr: tuple[str, int]) -> None:
        outcome = self._slow(data, False)
        if isinstance(outcome, Upstream):
            self._spawn(self._udp_upstream(sock, outcome, addr), outcome)
        elif outcome is not None:
            self._send(sock, outcome, addr)

    async def _udp_upstream(self, sock: socket.socket, work: Upstream, addr: tuple[str, int]) -> None:
        self._send(sock, await self._complete(work), addr)

    @staticmethod
    def _send(sock: socket.socket, out: bytes, addr: tuple[str, int]) -> None:
        with contextlib.suppress(OSError):  # a full buffer or a vanished client: the client retries
            sock.sendto(out, addr)

    # --- TCP -------------------------------------------------------------------------------------

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._tcp_open >= self.max_tcp:
            writer.close()
            return
        self._tcp_open += 1
        try:
            await self._tcp_session(reader, writer)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            self._tcp_open -= 1
            writer.close()

    async def _tcp_session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            size = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), self.tcp_idle))[0]
            data = await asyncio.wait_for(reader.readexactly(size), self.tcp_idle)
            out = self.engine.fast(data, True)
            if out is None:
                outcome = self._slow(data, True)
                out = await self._complete(outcome) if isinstance(outcome, Upstream) else outcome
            if out is None:
                return  # not a query: a TCP stream cannot skip a message, so end it
            writer.write(struct.pack("!H", len(out)) + out)
            await writer.drain()

    # --- the slow path and the upstream ----------------------------------------------------------

    def _slow(self, data: bytes, tcp: bool) -> bytes | Upstream | None:
        try:
            return self.engine.slow(data, tcp)
        except Exception:  # a bug must cost one answer, never the server
            log.exception("failed to answer a query")
            if len(data) < 12:
                return None
            return data[:2] + bytes([0x80 | (data[2] & 0x01), 0x80 | Rcode.SERVFAIL]) + bytes(8)

    def _spawn(self, coro: Coroutine[Any, Any, None], work: Upstream) -> None:
        if len(self._tasks) >= self.max_pending:
            coro.close()
            log.warning("too many queries waiting for the upstream: dropping one")
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, work: Upstream) -> bytes:
        q = work.query
        limit = reply_limit(q.edns, work.tcp)
        looped = self._probes.get(q.name)
        if looped is not None:
            log.error("upstream %s forwards to this server (loop): not forwarding to it", looped)
            self.forwarder.looping.add(looped)
            return encode(q, REFUSED, limit)
        try:
            if work.reply.forward:
                out = await self.forwarder.exchange(work.data, work.tcp)
                return out if out is not None else encode(q, SERVFAIL, limit)
            return await self._chase(q, work.reply, limit, work.tcp)
        except Exception:
            log.exception("upstream exchange failed")
            return encode(q, SERVFAIL, limit)

    async def _chase(self, q: Query, reply: Reply, limit: int, tcp: bool) -> bytes:
        """Resolve an ExternalName's target upstream and append what it finds to the CNAME."""
        assert reply.chase is not None
        out = await self.forwarder.exchange(question_wire(reply.chase, q.qtype), tcp)
        if out is None:
            return encode(q, SERVFAIL, limit)
        found = DNSRecord.parse(out)
        merged = Reply(Rcode(found.header.rcode), reply.answer, authoritative=False)
        return encode(q, merged, limit, extra=found.rr)


def question_wire(name: Name, qtype: int) -> bytes:
    """A recursive query (ID 0: the forwarder sets one) for one name and type, class IN."""
    labels = b"".join(bytes([len(x)]) + x.encode("latin-1") for x in name)
    return struct.pack("!HHHHHH", 0, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack("!HH", qtype, 1)


def _udp_socket(addr: Address) -> socket.socket:
    sock = socket.socket(_family(addr), socket.SOCK_DGRAM)
    try:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RCVBUF)
        sock.bind((addr.host, addr.port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _tcp_socket(addr: Address) -> socket.socket:
    sock = socket.socket(_family(addr), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr.host, addr.port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _family(addr: Address) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr.host else socket.AF_INET
