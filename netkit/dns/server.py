"""The DNS server: UDP and TCP on one address, asyncio (IO).

UDP is read with a reader callback that drains the socket (up to UDP_BATCH datagrams per wake-up), so
under load one poll serves many queries and a cache hit costs two system calls and a dict lookup. The
fast path is inlined there: the engine's caches of cluster answers, then the cache of upstream answers
(`netkit.dns.cache`); a miss goes to `Engine.slow`. Hits are counted by their metrics kind number and
timed per batch (`netkit.dns.metrics`).

TCP follows RFC 7766: a connection carries many queries; they are processed concurrently and each
answer is written when it is ready, so a cluster name is not held up behind a slow upstream (§6.2.1.1);
at most `tcp_pipeline` queries of one connection wait for the upstream at once (then reading pauses). A
connection with nothing in flight for `tcp_idle` seconds is closed. At most `max_tcp` connections are
open: a new client beyond that evicts the connection idle the longest; only when every connection is
busy is the new one closed.

Work that needs the upstream (names outside the zone, reverse names that are not the cluster's,
ExternalName targets outside the zone) runs as tasks, at most `max_pending` at once (beyond that:
SERVFAIL), so a flood of such queries or a loop cannot exhaust memory. Nothing a client sends stops
the server: the engine answers FORMERR where a header can be read, and any unexpected error is logged,
counted as a panic and answered SERVFAIL.

Until `set_view` installs the first complete view, names in the zone get SERVFAIL.
`check_loops()` probes each upstream with a random name; if the probe comes back to us, that upstream
forwards to us and is dropped. With `query_log`, every answer is logged in CoreDNS's `log` format.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import secrets
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

from dnslib import DNSError, DNSLabel, DNSQuestion, DNSRecord

from netkit.dns.autopath import candidates, search_path
from netkit.dns.cache import NOERROR, NXDOMAIN, Entry, ForwardCache, parse_reply, query_of
from netkit.dns.engine import Engine, Upstream, cache_key
from netkit.dns.loadbalance import permute
from netkit.dns.metrics import rcode_label
from netkit.dns.names import Name, name_from_text
from netkit.dns.resolver import REFUSED, SERVFAIL, Rcode, Record, Reply, RType
from netkit.dns.rewrite import Mapping, revert_text
from netkit.dns.upstream import Address, Forwarder, Limit, Router, is_self
from netkit.dns.view import View
from netkit.dns.wire import Query, encode, parse_query, reply_limit

log = logging.getLogger("netkit.dns")

UDP_BATCH = 256
UDP_RCVBUF = 4 << 20
TCP_BACKLOG = 1024
LOOP_PROBE_ZONE = ("netkit-loop-check",)
HINFO = 13
QueryLog = Callable[[str], None]


class _Conn:
    """One TCP client: its writer and how many of its queries are still being worked on."""

    __slots__ = ("writer", "busy", "room")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.busy = 0
        self.room = asyncio.Event()
        self.room.set()


class DnsServer:
    def __init__(self, engine: Engine, listen: Address, forwarder: Forwarder | Router, *, tcp_idle: float = 10.0,
                 max_tcp: int = 256, tcp_pipeline: int = 64, max_pending: int = 2000,
                 cache: ForwardCache | None = None, query_log: QueryLog | None = None) -> None:
        self.engine = engine
        self.metrics = engine.metrics
        self.listen = listen
        self.router = forwarder if isinstance(forwarder, Router) else Router(forwarder)
        self.forwarder = self.router.default
        for f in self.router.forwarders:
            f.counters = self.metrics.proxy  # one set of coredns_proxy_* counters per server
        self.cache = cache if cache is not None else ForwardCache(engine.metrics)
        self.tcp_idle = tcp_idle
        self.max_tcp = max_tcp
        self.tcp_pipeline = tcp_pipeline
        self.max_pending = max_pending
        self.query_log = query_log
        self.address: Address | None = None
        self._udp: socket.socket | None = None
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: dict[_Conn, None] = {}  # least recently active first
        self._probes: dict[Name, Address] = {}
        self.metrics.cache_entries = self._cache_entries

    def set_view(self, view: View) -> None:
        self.engine.set_view(view)

    @property
    def tcp_connections(self) -> int:
        return len(self._conns)

    def _cache_entries(self) -> tuple[int, int]:
        s, d = self.cache.counts()
        return s + self.engine.cached["success"], d + self.engine.cached["denial"]

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> Address:
        """Bind UDP and TCP on the same port (port 0: any free port, the same for both). The IPv6
        wildcard `::` is both families (one dual-stack socket each, as Go's `:53` in CoreDNS); where
        IPv6 is unavailable (disabled in the namespace or the kernel) it falls back to 0.0.0.0."""
        try:
            udp, tcp = _bind_pair(self.listen)
        except OSError as exc:
            if self.listen.host != "::" or exc.errno == errno.EADDRINUSE:
                raise
            log.info("IPv6 unavailable (%s): listening on 0.0.0.0 only", exc.strerror or exc)
            udp, tcp = _bind_pair(Address("0.0.0.0", self.listen.port))
        self._udp = udp
        self.address = Address(udp.getsockname()[0].partition("%")[0], udp.getsockname()[1])
        self.engine.family = 2 if udp.family == socket.AF_INET6 else 1
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
        for conn in list(self._conns):
            conn.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.router.close()

    def _drop_self_upstreams(self) -> None:
        assert self.address is not None
        for fwd in self.router.forwarders:
            for up in fwd.upstreams:
                if is_self(up, [self.address]):
                    log.warning("upstream %s is this server itself: not forwarding to it", up)
                    fwd.looping.add(up)

    async def check_loops(self) -> tuple[Address, ...]:
        """Probe every upstream; those that send the probe back to us are dropped. Returns them."""
        probes: dict[Name, tuple[Forwarder, Address]] = {
            (secrets.token_hex(8), *LOOP_PROBE_ZONE): (f, up) for f in self.router.forwarders for up in f.usable}
        self._probes.update({name: up for name, (_, up) in probes.items()})
        replies = await asyncio.gather(*(f.ask(up, question_wire(name, HINFO), False)
                                         for name, (f, up) in probes.items()))
        for (name, (f, up)), reply in zip(probes.items(), replies, strict=True):
            self._probes.pop(name, None)
            if reply is None and up not in f.looping:
                f.failed(up)  # silent at start: probed, and tried last, before any client's query pays for it
        return tuple(dict.fromkeys(up for f, up in probes.values() if up in f.looping))

    # --- UDP -------------------------------------------------------------------------------------

    def _on_udp(self) -> None:
        sock = self._udp
        if sock is None:
            return
        if self.query_log is not None:
            self._on_udp_logged(sock)
            return
        # Hot loop: everything it touches is a local (attribute lookups cost ~40 ns each in CPython)
        # and errors are handled with plain try/except (contextlib.suppress costs ~1 µs a call).
        engine, cache = self.engine, self.cache
        recvfrom, sendto, get = sock.recvfrom, sock.sendto, engine.udp_cache.get
        exact_get, remember = engine.udp_exact.get, engine.remember_exact
        forwarded, fwd_hit, fwd_exact, fwd_remember = cache.udp, cache.hit, cache.udp_exact, cache.remember_exact
        fwd_exact_get = fwd_exact.get
        balance, rng = engine.options.loadbalance, engine.random
        hits: list[int] = []
        count = hits.append
        started = now = time.monotonic()
        slow = 0.0
        for _ in range(UDP_BATCH):
            try:
                data, addr = recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                continue
            # The fast path, inlined (see Engine.fast): the exact query seen before → one lookup;
            # else the case-folded question → one find, one lookup, one join (and remembered exactly);
            # else an upstream answer still fresh in the cache (exactly as asked, then case-folded).
            rest = data[2:]
            exact: tuple[bytes, int] | tuple[bytes, int, float] | None = exact_get(rest)
            if exact is None:
                fx = fwd_exact_get(rest) if fwd_exact else None
                if fx is not None and now < fx[2]:
                    exact = fx  # (reply but its ID, kind, valid until)
                else:
                    end = data.find(0, 12)
                    if end > 12:
                        key = data[2:12] + data[12:end].lower() + data[end:]
                        hit = get(key)
                        if hit is not None:
                            exact = (hit[0] + data[12:end] + hit[1], hit[2])
                            remember(rest, exact)
                        elif forwarded:
                            entry = fwd_hit(forwarded, key, now)
                            if entry is not None and balance and entry.runs:  # a new order each time
                                exact = (entry.head + data[12:end] + permute(entry.tail, entry.runs, rng),
                                         entry.kind)
                            elif entry is not None:
                                exact = (entry.head + data[12:end] + entry.tail, entry.kind)
                                fwd_remember(rest, entry, exact[0])
            if exact is not None:
                try:
                    sendto(data[:2] + exact[0], addr)
                except OSError:  # a full buffer or a vanished client: the client retries
                    pass
                count(exact[1])
                continue
            t0 = time.monotonic()
            self._udp_slow(sock, data, addr, t0)
            slow += time.monotonic() - t0
        if hits:
            self.metrics.batch(hits, max(0.0, time.monotonic() - started - slow))
        if cache.due:
            self._prefetch()

    def _udp_slow(self, sock: socket.socket, data: bytes, addr: tuple[str, int], started: float) -> None:
        plan = self._autopath_plan(data, addr[0]) if self.engine.options.autopath else None
        if plan is not None:
            self._spawn(self._udp_autopath(sock, data, plan, addr, started))
            return
        outcome, query = self._slow(data, False)
        if isinstance(outcome, Upstream):
            self._spawn(self._udp_upstream(sock, outcome, addr, started))
        elif outcome is not None:
            self._send(sock, outcome, addr)
            self._count(query, data, outcome, False, "kubernetes", "miss", started, addr)

    async def _udp_autopath(self, sock: socket.socket, data: bytes, plan: tuple[Query, tuple[Name, ...]],
                            addr: tuple[str, int], started: float) -> None:
        out, plugin, cache = await self._autopath(data, *plan, False)
        self._send(sock, out, addr)
        self._count(plan[0], data, out, False, plugin, cache, started, addr)

    async def _udp_upstream(self, sock: socket.socket, work: Upstream, addr: tuple[str, int], started: float) -> None:
        out, plugin, cache = await self._complete(work)
        self._send(sock, out, addr)
        self._count(work.query, work.data, out, False, plugin, cache, started, addr)

    def _on_udp_logged(self, sock: socket.socket) -> None:
        """The same answers, one at a time, each timed and logged (the query log is not fast)."""
        for _ in range(UDP_BATCH):
            try:
                data, addr = sock.recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            started = time.monotonic()
            hit = self._cached(data, False, started)
            if hit is None:
                self._udp_slow(sock, data, addr, started)
                continue
            out, kind = hit
            self._prefetch()
            self._send(sock, out, addr)
            self.metrics.answered(kind, time.monotonic() - started)
            self._log(addr, data, out, False, started)

    @staticmethod
    def _send(sock: socket.socket, out: bytes, addr: tuple[str, int]) -> None:
        with contextlib.suppress(OSError):  # a full buffer or a vanished client: the client retries
            sock.sendto(out, addr)

    # --- TCP -------------------------------------------------------------------------------------

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._conns) >= self.max_tcp and not self._evict_idle():
            writer.close()  # every connection is busy: the client retries
            return
        conn = _Conn(writer)
        self._conns[conn] = None
        try:
            await self._tcp_session(conn, reader)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._conns.pop(conn, None)
            writer.close()

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest; False when every connection has queries in flight."""
        for conn in self._conns:
            if not conn.busy:
                del self._conns[conn]
                conn.writer.close()
                return True
        return False

    async def _tcp_session(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        peer = conn.writer.get_extra_info("peername") or ("", 0)
        while True:
            try:
                async with asyncio.timeout(self.tcp_idle):
                    head = await reader.readexactly(2)
            except TimeoutError:
                if conn.busy:
                    continue  # not idle: answers are still coming
                return
            async with asyncio.timeout(self.tcp_idle):
                data = await reader.readexactly(struct.unpack("!H", head)[0])
            if conn in self._conns:  # most recently active last
                del self._conns[conn]
                self._conns[conn] = None
            if not self._tcp_answer(conn, data, peer):
                return  # not a query: a TCP stream cannot skip a message, so end it
            if conn.writer.transport.get_write_buffer_size() > 1 << 16:
                await conn.writer.drain()
            if conn.busy >= self.tcp_pipeline:
                conn.room.clear()
                await conn.room.wait()

    def _tcp_answer(self, conn: _Conn, data: bytes, peer: tuple[str, int]) -> bool:
        started = time.monotonic()
        hit = self._cached(data, True, started)
        if hit is not None:
            self._prefetch()
            _write(conn, hit[0])
            self.metrics.answered(hit[1], time.monotonic() - started)
            if self.query_log is not None:
                self._log(peer, data, hit[0], True, started)
            return True
        plan = self._autopath_plan(data, peer[0]) if self.engine.options.autopath else None
        if plan is not None:
            conn.busy += 1
            self._spawn(self._tcp_autopath(conn, data, plan, started, peer))
            return True
        outcome, query = self._slow(data, True)
        if outcome is None:
            return False
        if isinstance(outcome, Upstream):
            conn.busy += 1
            self._spawn(self._tcp_upstream(conn, outcome, started, peer))
        else:
            _write(conn, outcome)
            self._count(query, data, outcome, True, "kubernetes", "miss", started, peer)
        return True

    async def _tcp_autopath(self, conn: _Conn, data: bytes, plan: tuple[Query, tuple[Name, ...]], started: float,
                            peer: tuple[str, int]) -> None:
        try:
            out, plugin, cache = await self._autopath(data, *plan, True)
            _write(conn, out)
            self._count(plan[0], data, out, True, plugin, cache, started, peer)
        finally:
            conn.busy -= 1
            conn.room.set()

    async def _tcp_upstream(self, conn: _Conn, work: Upstream, started: float, peer: tuple[str, int]) -> None:
        try:
            out, plugin, cache = await self._complete(work)
            _write(conn, out)
            self._count(work.query, work.data, out, True, plugin, cache, started, peer)
        finally:
            conn.busy -= 1
            conn.room.set()

    # --- the slow path and the upstream ----------------------------------------------------------

    def _cached(self, data: bytes, tcp: bool, now: float) -> tuple[bytes, int] | None:
        """A reply from the engine's caches or the upstream cache, with its kind number; None on a miss."""
        hit = self.engine.lookup(data, tcp)
        if hit is not None:
            return hit
        end = data.find(0, 12)
        if end <= 12:
            return None
        entry = self.cache.hit(self.cache.tcp if tcp else self.cache.udp, cache_key(data, end), now)
        if entry is None:
            return None
        return data[:2] + entry.head + data[12:end] + self._tail(entry), entry.kind

    def _tail(self, entry: Entry) -> bytes:
        """A cached upstream reply's tail, its addresses shuffled with loadbalance (CoreDNS shuffles
        every reply it writes, cached or not)."""
        if self.engine.options.loadbalance and entry.runs:
            return permute(entry.tail, entry.runs, self.engine.random)
        return bytes(entry.tail)

    def _slow(self, data: bytes, tcp: bool) -> tuple[bytes | Upstream | None, Query | None]:
        try:
            return self.engine.slow_query(data, tcp)
        except Exception:  # a bug must cost one answer, never the server
            log.exception("failed to answer a query")
            self.metrics.panics += 1
            if len(data) < 12:
                return None, None
            return data[:2] + bytes([0x80 | (data[2] & 0x01), 0x80 | Rcode.SERVFAIL]) + bytes(8), None

    def _count(self, query: Query | None, data: bytes, out: bytes, tcp: bool, plugin: str, cache: str,
               started: float, peer: tuple[str, int]) -> None:
        kind = self.engine.kind(query, len(data), out, tcp, plugin, cache)
        self.metrics.answered(kind, time.monotonic() - started)
        if self.query_log is not None:
            self._log(peer, data, out, tcp, started)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> bool:
        if len(self._tasks) >= self.max_pending:
            coro.close()
            log.warning("too many queries waiting for the upstream: dropping one")
            return False
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _complete(self, work: Upstream) -> tuple[bytes, str, str]:
        """The reply for work that needs the upstream, the plugin that made it and its cache status;
        with `rewrite`, its question and answer made what the client asked for."""
        out, plugin, cache = await self._completed(work)
        if work.asked is not None:
            out = revert_wire(out, work.asked, work.reverts)
        return out, plugin, cache

    async def _completed(self, work: Upstream) -> tuple[bytes, str, str]:
        q = work.query
        limit = reply_limit(q.edns, work.tcp)
        looped = self._probes.get(q.name)
        if looped is not None:
            log.error("upstream %s forwards to this server (loop): not forwarding to it", looped)
            for f in self.router.forwarders:
                if looped in f.upstreams:
                    f.looping.add(looped)
            return encode(q, REFUSED, limit), "forward", "miss"
        try:
            if work.reply.forward:
                return await self._forward(work, limit)
            return await self._chase(q, work.reply, limit, work.tcp), "kubernetes", "miss"
        except Exception:
            log.exception("upstream exchange failed")
            self.metrics.panics += 1
            return encode(q, SERVFAIL, limit), "forward", "miss"

    async def _forward(self, work: Upstream, limit: int) -> tuple[bytes, str, str]:
        q = work.query
        out, cached = await self._exchange(work.data, q, work.tcp)
        if isinstance(out, Limit):
            return encode(q, REFUSED, limit), "forward", "miss"
        if out is None:
            log.warning("[ERROR] plugin/errors: 2 %s %s: no upstream answered", _text(q.raw_name), q.qtype)
            return encode(q, SERVFAIL, limit), "forward", "miss"
        return out, ("cache" if cached else "forward"), (cached or "miss")

    async def _exchange(self, data: bytes, q: Query, tcp: bool) -> tuple[bytes | Limit | None, str]:
        """The upstream's reply to `data` (a query for `q`), from the cache when it is there and fresh
        (or stale, with serve_stale). Also the cache type of a hit ("success" | "denial"), "" when it
        came from the upstream."""
        end = 12 + len(q.raw_name) - 1
        keyed = data.find(0, 12) == end and end > 12
        key = cache_key(data, end) if keyed else b""
        cache = self.cache
        entries = cache.tcp if tcp else cache.udp
        stale: Entry | None = None
        if keyed:
            now = time.monotonic()
            entry = cache.hit(entries, key, now)
            if entry is not None:
                self._prefetch()
                return data[:2] + entry.head + data[12:end] + self._tail(entry), entry.type
            stale = cache.stale(entries, key, now) if cache.stale_for else None
            if stale is not None and not cache.options.serve_stale_verify:
                if not stale.due:  # immediate: serve it, refresh it in the background (once at a time)
                    stale.due = True
                    self._start_refresh(tcp, key)
                return self._served_stale(data, end, stale)
        out = await self.router.forwarder_for(q.name).exchange(data, tcp)
        if stale is not None and not (isinstance(out, bytes) and len(out) > 3 and out[3] & 0xF in (NOERROR, NXDOMAIN)):
            stale = cache.stale(entries, key, time.monotonic()) or stale  # verify: the upstream failed
            return self._served_stale(data, end, stale)
        if keyed and isinstance(out, bytes):
            out = cache.put(key, out, end, tcp, time.monotonic(), len(data), self.engine.family,
                            bool(q.edns is not None and q.edns.do))
        if isinstance(out, bytes) and self.engine.options.loadbalance:
            parsed = parse_reply(out)
            if parsed is not None and parsed.runs:
                out = permute(out, parsed.runs, self.engine.random)
        return out, ""

    def _served_stale(self, data: bytes, end: int, stale: Entry) -> tuple[bytes, str]:
        self.cache.counters.served_stale += 1
        return data[:2] + stale.head + data[12:end] + self._tail(stale), stale.type

    def _prefetch(self) -> None:
        """Start a refresh of every cache entry that prefetch queued."""
        due, self.cache.due = self.cache.due, []
        for tcp, key in due:
            self._start_refresh(tcp, key)

    def _start_refresh(self, tcp: bool, key: bytes) -> None:
        if not self._spawn(self._refresh(tcp, key)):
            self.cache.refreshed(tcp, key)

    async def _refresh(self, tcp: bool, key: bytes) -> None:
        """Ask the upstream again for a cached answer (prefetch, serve_stale) and keep what it says;
        counted as CoreDNS's cache counts a prefetch. An upstream that does not answer changes nothing."""
        self.cache.counters.prefetches += 1
        data = query_of(key)
        try:
            q = parse_query(data)
            if not isinstance(q, Query):
                return
            out = await self.router.forwarder_for(q.name).exchange(data, tcp)
            if isinstance(out, bytes):
                self.cache.put(key, out, 12 + len(q.raw_name) - 1, tcp, time.monotonic(), len(data),
                               self.engine.family, bool(q.edns is not None and q.edns.do))
        finally:
            self.cache.refreshed(tcp, key)

    async def _chase(self, q: Query, reply: Reply, limit: int, tcp: bool) -> bytes:
        """Resolve an ExternalName's target upstream and add what it finds: its records after the
        CNAME, the SOA of its NXDOMAIN or NODATA, and its TC bit."""
        assert reply.chase is not None
        wire = question_wire(reply.chase, q.qtype)
        target = parse_query(wire)
        assert isinstance(target, Query)
        out, _ = await self._exchange(wire, target, tcp)
        if isinstance(out, Limit):
            return encode(q, REFUSED, limit)
        if out is None:
            return encode(q, SERVFAIL, limit)
        found = DNSRecord.parse(out)
        merged = Reply(Rcode(found.header.rcode), reply.answer, authoritative=False)
        return encode(q, merged, limit, extra=found.rr, extra_authority=() if found.rr else found.auth,
                      truncated=bool(found.header.tc))

    # --- autopath (netkit.dns.autopath) ------------------------------------------------------------

    def _autopath_plan(self, data: bytes, client: str) -> tuple[Query, tuple[Name, ...]] | None:
        """The query and the names to try when autopath applies to it (a pod asking a name in the
        first element of its search path); None otherwise."""
        view = self.engine.view
        search = search_path(view, self.engine.options, client) if view is not None else ()
        if not search:
            return None
        q = parse_query(data)
        if not isinstance(q, Query) or q.qclass not in (1, 255):
            return None
        names = candidates(q.name, search)
        return (q, names) if names else None

    async def _autopath(self, data: bytes, q: Query, names: tuple[Name, ...], tcp: bool) -> tuple[bytes, str, str]:
        """The first answer down the search path that is not NXDOMAIN, under the name asked with a
        CNAME to the name found; the usual answer when the name asked exists or nothing does."""
        usual = await self._usual(data, tcp)  # names[0] is the name asked
        if len(usual[0]) < 4 or usual[0][3] & 0xF != NXDOMAIN:
            return usual
        limit = reply_limit(q.edns, tcp)
        for name in names[1:]:
            out, _, _ = await self._usual(question_wire(name, q.qtype), tcp)
            found = DNSRecord.parse(out)
            if found.header.rcode == NXDOMAIN:
                continue
            self.metrics.autopath += 1
            return self._cnamed(q, found, limit), "autopath", "miss"
        return usual

    async def _usual(self, data: bytes, tcp: bool) -> tuple[bytes, str, str]:
        outcome, query = self._slow(data, tcp)
        if isinstance(outcome, Upstream):
            return await self._complete(outcome)
        return outcome if outcome is not None else b"", "kubernetes", "miss"

    def _cnamed(self, q: Query, found: DNSRecord, limit: int) -> bytes:
        """`found` as the answer to `q`: CoreDNS's cnamer puts a CNAME from the name asked to the owner
        of the first answer record that is not the name asked in front of the answer."""
        cname: tuple[Record, ...] = ()
        for rr in found.rr:
            owner = name_from_text(str(rr.rname))
            if owner != q.name:
                cname = (Record(q.name, RType.CNAME, rr.ttl, owner),)
                break
        try:
            rcode = Rcode(found.header.rcode)
        except ValueError:
            rcode = Rcode.SERVFAIL
        merged = Reply(rcode, cname, authoritative=bool(found.header.aa))
        return encode(q, merged, limit, extra=found.rr, extra_authority=found.auth, truncated=bool(found.header.tc),
                      zone=self.engine.options.zone)

    # --- the query log ---------------------------------------------------------------------------

    def _log(self, peer: tuple[str, int], data: bytes, out: bytes, tcp: bool, started: float) -> None:
        assert self.query_log is not None
        self.query_log(log_line(peer, data, out, tcp, time.monotonic() - started))


def _write(conn: _Conn, out: bytes) -> None:
    if not conn.writer.is_closing():
        conn.writer.write(struct.pack("!H", len(out)) + out)


def _text(raw_name: bytes) -> str:
    labels, pos = [], 0
    while pos < len(raw_name) and raw_name[pos]:
        labels.append(raw_name[pos + 1:pos + 1 + raw_name[pos]].decode("latin-1"))
        pos += 1 + raw_name[pos]
    return ".".join(labels) + "."


_TYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
          41: "OPT", 43: "DS", 48: "DNSKEY", 65: "HTTPS", 251: "IXFR", 252: "AXFR", 255: "ANY"}
_CLASSES = {1: "IN", 3: "CH", 4: "HS", 254: "NONE", 255: "ANY"}
_FLAGS = ((0x8000, "qr"), (0x0400, "aa"), (0x0200, "tc"), (0x0100, "rd"), (0x0080, "ra"), (0x0020, "ad"),
          (0x0010, "cd"))


def log_line(peer: tuple[str, int], data: bytes, out: bytes, tcp: bool, seconds: float) -> str:
    """CoreDNS's log plugin, default format: `{remote}:{port} - {>id} "{type} {class} {name} {proto}
    {size} {>do} {>bufsize}" {rcode} {>rflags} {rsize} {duration}`."""
    host, port = peer[0], peer[1]
    remote = f"[{host}]" if ":" in host else host
    parsed = parse_query(data)
    qid = struct.unpack_from("!H", data)[0] if len(data) >= 2 else 0
    if isinstance(parsed, Query):
        qtype = _TYPES.get(parsed.qtype, f"TYPE{parsed.qtype}")
        qclass = _CLASSES.get(parsed.qclass, f"CLASS{parsed.qclass}")
        name, do = _text(parsed.raw_name), parsed.edns is not None and parsed.edns.do
        bufsize = parsed.edns.udp_size if parsed.edns is not None else 512
    else:
        qtype, qclass, name, do, bufsize = "-", "-", "-", False, 512
    flags = struct.unpack_from("!H", out, 2)[0] if len(out) >= 4 else 0
    rflags = ",".join(n for bit, n in _FLAGS if flags & bit)
    duration = f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    return (f'[INFO] {remote}:{port} - {qid} "{qtype} {qclass} {name} {"tcp" if tcp else "udp"} {len(data)} '
            f'{"true" if do else "false"} {bufsize}" {rcode_label(flags & 0xF)} {rflags} {len(out)} {duration}')


def revert_wire(out: bytes, asked: Query, reverts: tuple[Mapping, ...]) -> bytes:
    """A reply to a rewritten question, given back the question asked and its records rewritten back."""
    try:
        msg = DNSRecord.parse(out)
    except DNSError:
        return out
    labels = [asked.raw_name[i + 1:i + 1 + n] for i, n in _label_offsets(asked.raw_name)]
    msg.questions = [DNSQuestion(DNSLabel(labels), asked.qtype, asked.qclass)]
    for rr in (*msg.rr, *msg.auth, *(r for r in msg.ar if r.rtype != 41)):
        rr.rname = DNSLabel(revert_text(reverts, str(rr.rname).lower(), owner=True))
        for attr in ("label", "target"):  # CNAME, PTR, NS / SRV
            value = getattr(rr.rdata, attr, None)
            if isinstance(value, DNSLabel):
                setattr(rr.rdata, attr, DNSLabel(revert_text(reverts, str(value).lower(), owner=False)))
    packed: bytes = msg.pack()
    return packed


def _label_offsets(raw: bytes) -> list[tuple[int, int]]:
    out, i = [], 0
    while i < len(raw) and raw[i]:
        out.append((i, raw[i]))
        i += raw[i] + 1
    return out


def question_wire(name: Name, qtype: int) -> bytes:
    """A recursive query (ID 0: the forwarder sets one) for one name and type, class IN."""
    labels = b"".join(bytes([len(x)]) + x.encode("latin-1") for x in name)
    return struct.pack("!HHHHHH", 0, 0x0100, 1, 0, 0, 0) + labels + b"\x00" + struct.pack("!HH", qtype, 1)


def _bind_pair(listen: Address) -> tuple[socket.socket, socket.socket]:
    for _ in range(20):
        udp = _udp_socket(listen)
        port = udp.getsockname()[1]
        try:
            tcp = _tcp_socket(Address(listen.host, port))
        except OSError:
            udp.close()
            if listen.port:
                raise
            continue
        return udp, tcp
    raise OSError(f"cannot bind UDP and TCP on one port at {listen.host}")


def _socket(addr: Address, kind: socket.SocketKind) -> socket.socket:
    sock = socket.socket(_family(addr), kind)
    if addr.host == "::":
        try:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        except OSError:
            sock.close()
            raise
    return sock


def _udp_socket(addr: Address) -> socket.socket:
    sock = _socket(addr, socket.SOCK_DGRAM)
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
    sock = _socket(addr, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr.host, addr.port))
        sock.listen(TCP_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _family(addr: Address) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr.host else socket.AF_INET
