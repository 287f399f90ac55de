"""Fixtures for the running DNS server: each server or test upstream runs its own event loop in a
thread on loopback, so tests talk to it with ordinary blocking clients (dnspython, dig)."""

from __future__ import annotations

import asyncio
import http.client
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import dns.exception
import dns.message
import dns.query
import pytest
from dnslib import CNAME, PTR, QTYPE, RR, SOA, A, DNSLabel, DNSRecord

from netkit.dns.engine import Engine
from netkit.dns.server import DnsServer
from netkit.dns.upstream import Address, Forwarder, Router
from netkit.dns.view import Options, View
from netkit.netns import enter, socket_in
from tests.conftest import ROOT, fresh_netns

T = TypeVar("T")
NO_HTTP = ("--metrics-listen", "", "--health-listen", "", "--ready-listen", "")  # no fixed ports in tests

# `netkit dns` as a process runs in the test's own network namespace, on these fixed ports: a port
# picked free in the machine's namespace can be taken (a loopback connection's ephemeral port is
# enough) before the server binds it, and the server exits 2.
DNS_PORT, METRICS_PORT, HEALTH_PORT, READY_PORT, API_PORT = 53, 9153, 8080, 8181, 6443
IN_NETNS = ("--listen", f"127.0.0.1:{DNS_PORT}", "--metrics-listen", f"127.0.0.1:{METRICS_PORT}",
            "--health-listen", f"127.0.0.1:{HEALTH_PORT}", "--ready-listen", f"127.0.0.1:{READY_PORT}")


class LoopThread:
    """An event loop running in a daemon thread; `call` runs a coroutine there and waits for it. With
    `netns`, the thread enters that network namespace first: every socket made there lives in it."""

    def __init__(self, netns: str | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, args=(netns,), daemon=True)
        self.thread.start()

    def _run(self, netns: str | None) -> None:
        if netns is not None:
            enter(netns)  # this thread only (setns(2)); the thread ends with the loop
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn: Callable[[], T]) -> T:
        async def wrapped() -> T:
            return fn()
        return self.call(wrapped())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Running:
    """A DnsServer on 127.0.0.1 and the loop it runs in; inside `netns` when given (there a fixed port
    is the test's own)."""

    def __init__(self, options: Options, upstreams: list[Address], timeout: float, port: int = 0,
                 forwarder: Forwarder | Router | None = None, netns: str | None = None, **server: Any) -> None:
        self.netns = netns
        self.lt = LoopThread(netns)
        self.server = DnsServer(Engine(options), Address("127.0.0.1", port),
                                forwarder if forwarder is not None else Forwarder(upstreams, timeout), **server)
        self.address = self.lt.call(self.server.start())
        self.port = self.address.port

    def set_view(self, view: View) -> None:
        self.lt.run(lambda: self.server.set_view(view))

    def close(self) -> None:
        self.lt.call(self.server.close())
        self.lt.stop()


@pytest.fixture
def start_server() -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(view: View | None = None, upstreams: list[Address] | None = None, timeout: float = 0.5,
              port: int = 0, options: Options | None = None, **server: Any) -> Running:
        r = Running(options or (view.options if view else Options()), upstreams or [], timeout, port, **server)
        started.append(r)
        if view is not None:
            r.set_view(view)
        return r

    yield start
    for r in started:
        r.close()


class TestUpstream:
    """A loopback resolver for forwarding tests.

    *.example.com A → 192.0.2.1 (and counts the queries); silent.example.com → no reply;
    slow.example.com A → 192.0.2.9 after `delay` seconds; big.example.com A → 60 records (TC over UDP
    without EDNS); flaky.example.com → SERVFAIL while `failing` is set, else as *.example.com;
    pool.example.com A → 192.0.2.11-.16; alias.example.com A → CNAME pool.example.com and those;
    9.9.9.9 PTR → nine.example.com; other names → NXDOMAIN with an SOA (minimum 60).
    With `forward_to`, it forwards every query there instead (a loop); with `mute`, it answers nothing
    (a dead upstream that still counts what it receives). Listens on `host` (any 127.0.0.x), in
    `netns` when given (port 53 there).
    """

    __test__ = False

    def __init__(self, forward_to: tuple[str, int] | None = None, *, host: str = "127.0.0.1",
                 mute: bool = False, delay: float = 1.0, netns: str | None = None) -> None:
        self.forward_to, self.host, self.mute, self.delay = forward_to, host, mute, delay
        self.seen: list[str] = []
        self.failing = False
        self.lt = LoopThread()
        self.port = self.lt.call(self._start() if netns is None else self._start_in(netns))

    async def _start_in(self, netns: str) -> int:
        udp, tcp = (socket_in(netns, socket.AF_INET, kind) for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM))
        for sock in (udp, tcp):
            sock.bind((self.host, 53))
        self.transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: _Udp(self), sock=udp)
        self.tcp = await asyncio.start_server(self._tcp, sock=tcp)
        return 53

    async def _start(self) -> int:
        loop = asyncio.get_running_loop()
        for _ in range(20):  # a free UDP port whose TCP twin is free too
            transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), local_addr=(self.host, 0))
            port: int = transport.get_extra_info("sockname")[1]
            try:
                self.tcp = await asyncio.start_server(self._tcp, self.host, port)
            except OSError:
                transport.close()
                continue
            self.transport = transport
            return port
        raise OSError("no free port for the test upstream")

    @property
    def address(self) -> Address:
        return Address(self.host, self.port)

    def count(self, name: str) -> int:
        return self.seen.count(name)

    def answer(self, data: bytes, tcp: bool) -> bytes | None:
        q = DNSRecord.parse(data)
        name = str(q.q.qname).lower()
        self.seen.append(name)
        if name.startswith("silent.") or self.mute:
            return None
        r = q.reply()
        if name == "flaky.example.com." and self.failing:
            r.header.rcode = 2
        elif name == "big.example.com.":
            for i in range(60):
                r.add_answer(RR(q.q.qname, QTYPE.A, ttl=60, rdata=A(f"192.0.2.{i + 1}")))
            packed: bytes = r.pack()
            if not tcp and len(packed) > 512:
                r = q.reply()
                r.header.tc = 1
        elif name in ("pool.example.com.", "alias.example.com.") and q.q.qtype == QTYPE.A:
            owner = q.q.qname
            if name == "alias.example.com.":
                owner = DNSLabel("pool.example.com.")
                r.add_answer(RR(q.q.qname, QTYPE.CNAME, ttl=60, rdata=CNAME(owner)))
            for i in range(11, 17):
                r.add_answer(RR(owner, QTYPE.A, ttl=60, rdata=A(f"192.0.2.{i}")))
        elif name == "slow.example.com.":
            r.add_answer(RR(q.q.qname, QTYPE.A, ttl=60, rdata=A("192.0.2.9")))
        elif name.endswith("example.com.") and q.q.qtype == QTYPE.A:
            r.add_answer(RR(q.q.qname, QTYPE.A, ttl=60, rdata=A("192.0.2.1")))
        elif name == "9.9.9.9.in-addr.arpa." and q.q.qtype == QTYPE.PTR:
            r.add_answer(RR(q.q.qname, QTYPE.PTR, ttl=60, rdata=PTR("nine.example.com.")))
        elif not name.endswith("example.com.") and name != ".":
            r.header.rcode = 3
            r.add_auth(RR("test.", QTYPE.SOA, ttl=60, rdata=SOA("ns.test.", "admin.test.", (1, 7200, 1800, 86400, 60))))
        out: bytes = r.pack()
        return out

    async def _tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                out = self.answer(await reader.readexactly(size), True)
                if out is not None:
                    writer.write(struct.pack("!H", len(out)) + out)
        except asyncio.IncompleteReadError:
            writer.close()

    def close(self) -> None:
        async def stop() -> None:
            self.transport.close()
            self.tcp.close()
        self.lt.call(stop())
        self.lt.stop()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, up: TestUpstream) -> None:
        self.up = up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.up.forward_to is not None:
            self.up.seen.append(str(DNSRecord.parse(data).q.qname).lower())
            self.transport.sendto(data, self.up.forward_to)  # a forwarder that forwards back: a loop
            return
        out = self.up.answer(data, False)
        if out is None:
            return
        if b"\x04slow" in data[12:18]:
            asyncio.get_running_loop().call_later(self.up.delay, self.transport.sendto, out, addr)
        else:
            self.transport.sendto(out, addr)


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    up = TestUpstream()
    yield up
    up.close()


def need_dig() -> str:
    dig = shutil.which("dig")
    if dig is None:
        pytest.skip("needs dig (Debian package dnsutils)")
    return dig


@pytest.fixture(scope="module")
def module_netns() -> Iterator[str]:
    """A network namespace with loopback up, for a module's shared server; removed afterwards."""
    with fresh_netns() as name:
        yield name


def ask_in(netns: str, name: str, qtype: str = "A", port: int = DNS_PORT, timeout: float = 1) -> dns.message.Message:
    """A UDP query to 127.0.0.1:PORT inside `netns`."""
    with socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)  # as dnspython's own: it waits for readability, then reads
        return dns.query.udp(dns.message.make_query(name, qtype), "127.0.0.1", port=port, timeout=timeout, sock=sock)


class _InNetns(http.client.HTTPConnection):
    def __init__(self, netns: str, port: int, timeout: float) -> None:
        super().__init__("127.0.0.1", port, timeout=timeout)
        self.netns = netns

    def connect(self) -> None:
        sock = socket_in(self.netns, socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def get_in(netns: str, port: int, path: str, timeout: float = 5) -> tuple[int, str]:
    """GET http://127.0.0.1:PORT/PATH inside `netns`: the status and the body."""
    conn = _InNetns(netns, port, timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


class DnsProcess:
    """`netkit dns ARGS` inside `netns`, its stderr collected line by line (stdout too, when asked)."""

    def __init__(self, netns: str, *args: str, stdout: bool = False) -> None:
        self.netns = netns
        self.lines: list[str] = []
        self.proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-m", "netkit", "dns", *args],
                                     cwd=ROOT, stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stderr, self.lines), daemon=True)]
        if stdout:
            self.readers.append(threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True))
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def ask(self, name: str, qtype: str = "A") -> dns.message.Message:
        return ask_in(self.netns, name, qtype)

    def get(self, port: int, path: str) -> tuple[int, str]:
        return get_in(self.netns, port, path)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for(self, check: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until `check` holds (a query's timeout or a refused connection counts as not yet); fails at
        once, with the server's stderr, when it exits."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except (dns.exception.Timeout, OSError, http.client.HTTPException):
                pass
            if self.proc.poll() is not None:
                self.finish()
                pytest.fail(f"netkit dns exited {self.proc.returncode}: {''.join(self.lines)[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"not within {timeout} s; netkit dns said: {''.join(self.lines)[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 60) -> int:
        """Wait for the exit and the last of its output."""
        code = self.proc.wait(timeout)
        for reader in self.readers:
            reader.join(10)
        return code

    def stop(self) -> tuple[str, str]:
        """SIGTERM; it must exit 0. Its stdout and stderr."""
        self.proc.terminate()
        code = self.finish()
        err = "".join(self.lines)
        assert code == 0, err
        return "".join(self.out), err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()
