"""Real connections from inside a lab namespace: connect, read the pod's answer, classify the outcome.

Sockets are created inside the source namespace (`nsenter.socket_in`) and then used from the
caller's thread, so a test can make hundreds of connections per second without forking. Every call
has a timeout, and the outcome tells apart what Service tests must distinguish:

- ANSWERED: a pod replied; `Reply.backend` is its name, `Reply.source` the source address it saw;
- REFUSED: TCP RST or ICMP port-unreachable (a REJECT rule, or nothing listening);
- UNREACHABLE: ICMP host/network unreachable or no route (EHOSTUNREACH, ENETUNREACH);
- TIMEOUT: no answer at all (a DROP rule, or packets lost);
- CLOSED: TCP connected but the peer closed without answering (not a lab pod).
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from ipaddress import ip_address

from netkit.lab.nsenter import socket_in
from netkit.lab.plan import IPAddress


class Outcome(Enum):
    ANSWERED = "answered"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    CLOSED = "closed"  # the connection opened but closed without an answer


UNREACHABLE_ERRNOS = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


@dataclass(frozen=True, slots=True)
class Reply:
    """What one connection attempt got. `text` is the raw answer line (empty unless ANSWERED)."""

    outcome: Outcome
    text: str = ""
    seconds: float = 0.0

    @property
    def answered(self) -> bool:
        return self.outcome is Outcome.ANSWERED

    @property
    def backend(self) -> str | None:
        """The answering pod's name."""
        return self.text.split()[0] if self.answered and self.text.split() else None

    @property
    def source(self) -> IPAddress | None:
        """The source address the pod saw (masqueraded, or the client's own)."""
        host = self.peer[0] if self.peer else None
        return ip_address(host) if host else None

    @property
    def peer(self) -> tuple[str, int] | None:
        parts = self.text.split()
        if not self.answered or len(parts) < 2:
            return None
        host, _, port = parts[1].rpartition(":")
        return host.strip("[]"), int(port)


def family_of(dst: str | IPAddress) -> int:
    return socket.AF_INET6 if ip_address(dst).version == 6 else socket.AF_INET


def classify(exc: OSError) -> Outcome:
    if isinstance(exc, ConnectionRefusedError):
        return Outcome.REFUSED
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Outcome.TIMEOUT
    if exc.errno in UNREACHABLE_ERRNOS:
        return Outcome.UNREACHABLE
    if isinstance(exc, ConnectionResetError):
        return Outcome.REFUSED
    raise exc


def open_socket(netns: str, dst: str | IPAddress, proto: str, src: str | IPAddress | None,
                timeout: float) -> socket.socket:
    kind = {"tcp": socket.SOCK_STREAM, "udp": socket.SOCK_DGRAM}[proto]
    sock = socket_in(netns, family_of(dst), kind)
    sock.settimeout(timeout)
    if src is not None:
        sock.bind((str(src), 0))
    return sock


def attempt(sock: socket.socket, dst: str | IPAddress, port: int, proto: str) -> str:
    sock.connect((str(dst), port))
    if proto == "udp":
        sock.send(b"probe\n")
        return sock.recv(4096).decode(errors="replace")
    return read_line(sock)


def read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def connect(netns: str, dst: str | IPAddress, port: int, proto: str = "tcp", *,
            src: str | IPAddress | None = None, timeout: float = 2.0) -> Reply:
    """One connection from `netns` to dst:port over `proto` ("tcp" or "udp"); never raises for
    refused, unreachable or silent destinations: the Reply says which it was."""
    started = time.monotonic()
    sock = open_socket(netns, dst, proto, src, timeout)
    try:
        text = attempt(sock, dst, port, proto)
        outcome = Outcome.ANSWERED if text else Outcome.CLOSED
    except OSError as exc:
        text, outcome = "", classify(exc)
    finally:
        sock.close()
    return Reply(outcome, text.strip(), time.monotonic() - started)


@dataclass(frozen=True, slots=True)
class Stream:
    """An open TCP connection from a lab namespace; `greeting` is the pod's first answer."""

    sock: socket.socket
    greeting: Reply

    def ask(self) -> Reply:
        """Send a line over the same connection and read the pod's next answer."""
        started = time.monotonic()
        try:
            self.sock.sendall(b"again\n")
            text = read_line(self.sock)
        except OSError as exc:
            return Reply(classify(exc), "", time.monotonic() - started)
        outcome = Outcome.ANSWERED if text else Outcome.CLOSED
        return Reply(outcome, text.strip(), time.monotonic() - started)


@contextmanager
def stream(netns: str, dst: str | IPAddress, port: int, *, src: str | IPAddress | None = None,
           timeout: float = 2.0) -> Iterator[Stream]:
    """Hold a TCP connection open (for "existing connections keep working" tests)."""
    started = time.monotonic()
    sock = open_socket(netns, dst, "tcp", src, timeout)
    try:
        try:
            greeting = Reply(Outcome.ANSWERED, attempt(sock, dst, port, "tcp").strip(),
                             time.monotonic() - started)
        except OSError as exc:
            greeting = Reply(classify(exc), "", time.monotonic() - started)
        yield Stream(sock, greeting)
    finally:
        sock.close()
