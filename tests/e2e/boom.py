"""The "boom-server" of Kubernetes' regression test for kubernetes#74839 (test/images/regression-issue-74839),
in a lab pod's namespace: a TCP server on 9000 that closes each connection after 10 s, and beside it a
raw socket that watches the TCP packets to 9000. When a client's ACK completes a handshake it logs
"connection established" and answers with a segment whose sequence number is 100000 below what the
client expects: out of the window, so conntrack finds it INVALID and does not undo the Service's
DNAT on it. Delivered anyway, the client sees a segment from the pod's own address, which no socket
of its own owns, and answers with a reset; the raw socket sees that reset and logs "ERROR: RST
received". IPv4 only, as the image's checksum is.

Since Linux 6.1 conntrack no longer finds a segment from before the window INVALID (it ignores
"overly delayed" packets and still undoes the DNAT on them), so the image's segment alone passes
with or without an INVALID drop. The lab's server sends a second one, 2^30 ahead of the window,
which conntrack still finds INVALID: without a drop rule (or nf_conntrack_tcp_be_liberal) it
reaches the client un-NATed and the client resets — the failure upstream's test exists to catch.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from netkit.netns import socket_in

PORT = 9000  # the image's port
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
HOLD = 10.0  # seconds the server keeps each connection before closing it


@dataclass(frozen=True, slots=True)
class Segment:
    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int


def parse(packet: bytes) -> tuple[str, Segment]:
    """An IPv4 packet as a raw socket reads it: (source address, its TCP header)."""
    ihl = (packet[0] & 0x0F) * 4
    src = socket.inet_ntoa(packet[12:16])
    sport, dport, seq, ack, offset_flags, window = struct.unpack("!HHIIHH", packet[ihl:ihl + 16])
    return src, Segment(sport, dport, seq, ack, offset_flags & 0x1FF, window)


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def encode(seg: Segment, src: str, dst: str, payload: bytes) -> bytes:
    """The TCP segment (20-byte header, then `payload`) with its checksum over the IPv4 pseudo-header."""
    header = struct.pack("!HHIIHHHH", seg.src_port, seg.dst_port, seg.seq, seg.ack, (5 << 12) | seg.flags,
                         seg.window, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP,
                                                                          len(header) + len(payload))
    total = checksum(pseudo + header + payload)
    return header[:16] + struct.pack("!H", total) + header[18:] + payload


def bad_segments(client: Segment, expected_ack: int) -> list[Segment]:
    """The reply to the handshake's last ACK: the image's, sequence 100000 below the client's window,
    and the lab's, 2^30 above it."""
    return [Segment(client.dst_port, client.src_port, (client.ack + offset) & 0xFFFFFFFF, expected_ack,
                    PSH | ACK, client.window) for offset in (-100000, 1 << 30)]


@dataclass
class BoomServer:
    netns: str
    pod_ip: str
    logs: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def serve(self) -> None:
        """The TCP server: accept, hold each connection HOLD seconds, close it."""
        listener = socket_in(self.netns, socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", PORT))
        listener.listen(64)
        listener.settimeout(0.5)
        held: list[tuple[float, socket.socket]] = []
        with listener:
            while not self.stop.is_set():
                try:
                    held.append((time.monotonic() + HOLD, listener.accept()[0]))
                except TimeoutError:
                    pass
                for due, conn in [h for h in held if h[0] <= time.monotonic()]:
                    conn.close()
                    held.remove((due, conn))
        for _, conn in held:
            conn.close()

    def probe(self) -> None:
        """The raw socket: log each established connection and inject the bad segment; log resets."""
        raw = socket_in(self.netns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
        raw.bind((self.pod_ip, 0))
        raw.settimeout(0.5)
        pending: dict[tuple[str, int], int] = {}
        with raw:
            while not self.stop.is_set():
                try:
                    src, seg = parse(raw.recv(4096))
                except TimeoutError:
                    continue
                if seg.dst_port == PORT:
                    self.on_segment(raw, pending, src, seg)

    def on_segment(self, raw: socket.socket, pending: dict[tuple[str, int], int], src: str, seg: Segment) -> None:
        key = (src, seg.src_port)
        if seg.flags & SYN:
            pending[key] = (seg.seq + 1) & 0xFFFFFFFF
            return
        if seg.flags & RST:
            self.logs.append("ERROR: RST received")
        if seg.flags & ACK and key in pending:
            self.logs.append("connection established")
            for bad in bad_segments(seg, pending.pop(key)):
                raw.sendto(encode(bad, self.pod_ip, src, b"boom!!!"), (src, 0))
                self.logs.append("boom packet injected")


@contextmanager
def boom_server(netns: str, pod_ip: str) -> Iterator[BoomServer]:
    """The server running in `netns` (the pod at `pod_ip`) until the block ends."""
    server = BoomServer(netns, pod_ip)
    threads = [threading.Thread(target=server.serve, daemon=True), threading.Thread(target=server.probe, daemon=True)]
    for t in threads:
        t.start()
    try:
        yield server
    finally:
        server.stop.set()
        for t in threads:
            t.join(5)


@contextmanager
def startup_script(netns: str, host: str) -> Iterator[None]:
    """The client pod's `while true; do sleep 2; nc boom-server 9000& done`: every 2 s a connection
    to host:9000, left open (as nc's) until the server closes it."""
    stop = threading.Event()

    def nc() -> None:
        with socket_in(netns, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(HOLD + 5)
            try:
                sock.connect((host, PORT))
                while sock.recv(4096) and not stop.is_set():
                    pass
            except OSError:  # refused, reset, or timed out: nc exits
                pass

    def loop() -> None:
        while not stop.wait(2.0):
            threading.Thread(target=nc, daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
