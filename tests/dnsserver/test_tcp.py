"""TCP as RFC 7766 asks: idle connections are evicted for new clients, idle ones time out, and pipelined
queries are answered as they are ready (out of order)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import dns.message
import dns.query
import dns.rcode

from tests.dnsserver.conftest import Running, TestUpstream
from tests.unit.dns_cluster import view

Start = Callable[..., Running]


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return False


def framed(msg: dns.message.Message) -> bytes:
    wire = msg.to_wire()
    return struct.pack("!H", len(wire)) + wire


def read_message(sock: socket.socket) -> dns.message.Message:
    size = struct.unpack("!H", _exactly(sock, 2))[0]
    return dns.message.from_wire(_exactly(sock, size))


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def test_300_idle_connections_never_keep_a_new_client_out(start_server: Start) -> None:
    r = start_server(view())  # at most 256 connections
    idle = [socket.create_connection(("127.0.0.1", r.port)) for _ in range(300)]
    try:
        eventually(lambda: r.server.tcp_connections == r.server.max_tcp)
        m = dns.query.tcp(dns.message.make_query("web.default.svc.cluster.local.", "A"), "127.0.0.1",
                          port=r.port, timeout=5)
        assert m.rcode() == dns.rcode.NOERROR and m.answer[0][0].to_text() == "10.96.0.10"
        assert closed_by_server(idle[0])  # the connection idle the longest made room
        assert r.server.tcp_connections <= r.server.max_tcp
    finally:
        for s in idle:
            s.close()


def test_an_idle_connection_times_out(start_server: Start) -> None:
    r = start_server(view(), tcp_idle=0.2)
    with socket.create_connection(("127.0.0.1", r.port)) as s:
        s.sendall(framed(dns.message.make_query("web.default.svc.cluster.local.", "A")))
        assert read_message(s).answer
        assert closed_by_server(s)


def test_pipelined_queries_are_answered_as_they_are_ready(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address], timeout=5)
    slow = dns.message.make_query("slow.example.com.", "A")
    fast = dns.message.make_query("web.default.svc.cluster.local.", "A")
    with socket.create_connection(("127.0.0.1", r.port)) as s:
        s.settimeout(10)
        s.sendall(framed(slow) + framed(fast))
        first, second = read_message(s), read_message(s)
    assert first.id == fast.id and first.answer[0][0].to_text() == "10.96.0.10"
    assert second.id == slow.id and second.answer[0][0].to_text() == "192.0.2.9"


def test_a_connection_waiting_for_the_upstream_is_not_evicted(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address], timeout=5, max_tcp=1)
    slow = dns.message.make_query("slow.example.com.", "A")
    with socket.create_connection(("127.0.0.1", r.port)) as busy:
        busy.settimeout(10)
        busy.sendall(framed(slow))
        eventually(lambda: upstream.count("slow.example.com.") == 1)
        with socket.create_connection(("127.0.0.1", r.port)) as newcomer:
            assert closed_by_server(newcomer)  # every connection is busy: the newcomer retries later
        assert read_message(busy).id == slow.id
