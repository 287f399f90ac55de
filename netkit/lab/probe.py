"""Scapy probes: craft a SYN, UDP or SCTP INIT in one namespace, see where the kernel delivered it.

Theory of operation:

1. Sniffers open first: an AF_PACKET socket per watched interface (by default every pod's `eth0`),
   created inside that pod's namespace from a helper thread (`nsenter.socket_in`), so sniffing needs
   no extra process. They keep only packets arriving at the interface, never ones it sends.
2. A forked child enters the source namespace, imports Scapy there (Scapy caches interfaces and routes
   at import, so it must see the namespace's own) and sends the probes. Each probe carries a token
   that NAT never rewrites: the TCP sequence number, the UDP payload, the SCTP initiate tag.
3. The parent reads the sniffers until every token was seen once (plus a short settle time for
   duplicates) or until the timeout — a probe nobody sees (DROP) costs the full timeout.

Each `Sighting` reports where the probe arrived, the destination after DNAT and the source the
backend saw (masqueraded or preserved). Headers are parsed here with `struct`, ignoring checksums:
kernel-built packets on a veth carry partial checksums (tx offload), Scapy would call them bad.
The test process itself never imports Scapy.
"""

from __future__ import annotations

import random
import select
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from netkit.lab.fork import collect, start_in
from netkit.lab.nsenter import in_netns
from netkit.lab.plan import IPAddress

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
PACKET_OUTGOING = 4
IPPROTO = {"tcp": 6, "udp": 17, "sctp": 132}
UDP_MARK = b"netkit-probe "


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One packet to craft. `src`/`sport` None: the namespace's route picks the source, port random."""

    dst: str
    dport: int
    proto: str  # "tcp" | "udp" | "sctp"
    token: int
    src: str | None = None
    sport: int | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    token: int
    src: IPAddress
    sport: int


@dataclass(frozen=True, slots=True)
class Sighting:
    """A probe seen arriving at `where` (a pod name or a sniffer label)."""

    where: str
    proto: str
    src: IPAddress
    sport: int
    dst: IPAddress
    dport: int


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe: what was sent and every place it was seen (empty: dropped or lost)."""

    spec: ProbeSpec
    sent: Sent
    seen: tuple[Sighting, ...]

    @property
    def backend(self) -> str | None:
        return self.seen[0].where if len(self.seen) == 1 else None


def craft_and_send(specs: Sequence[ProbeSpec]) -> list[Sent]:
    """Runs in the forked child, inside the source namespace: Scapy is imported only here."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6, L3RawSocket6
    from scapy.layers.sctp import SCTP, SCTPChunkInit
    from scapy.packet import Packet, Raw
    from scapy.supersocket import L3RawSocket

    packets: list[Packet] = []
    sent: list[Sent] = []
    for spec in specs:
        l3 = IPv6(dst=spec.dst) if ip_address(spec.dst).version == 6 else IP(dst=spec.dst)
        if spec.src:
            l3.src = spec.src
        sport = spec.sport or random.randint(20000, 60000)
        l4: Packet
        if spec.proto == "tcp":
            l4 = TCP(sport=sport, dport=spec.dport, flags="S", seq=spec.token)
        elif spec.proto == "udp":
            l4 = UDP(sport=sport, dport=spec.dport) / Raw(UDP_MARK + str(spec.token).encode())
        else:
            l4 = SCTP(sport=sport, dport=spec.dport, tag=0) / SCTPChunkInit(init_tag=spec.token)
        packet = l3 / l4
        packets.append(packet)
        sent.append(Sent(spec.token, ip_address(packet.src), sport))
    # Raw IP sockets, not Scapy's own routing and link layer: the kernel of the source namespace
    # routes the probe, so a probe from a node passes that node's nat OUTPUT hook like any
    # locally generated packet (Scapy's default L3 sender writes frames straight onto the routed
    # interface and skips netfilter there).
    sockets = {4: L3RawSocket(), 6: L3RawSocket6()}  # type: ignore[no-untyped-call]
    try:
        for crafted in packets:
            sockets[6 if crafted.haslayer(IPv6) else 4].send(crafted)
    finally:
        for sock in sockets.values():
            sock.close()
    return sent


@dataclass(frozen=True, slots=True)
class Parsed:
    proto: int
    src: IPAddress
    dst: IPAddress
    l4: bytes


def parse_l3(ethertype: int, data: bytes) -> Parsed | None:
    if ethertype == ETH_P_IP and len(data) >= 20:
        ihl = (data[0] & 0x0F) * 4
        return Parsed(data[9], IPv4Address(data[12:16]), IPv4Address(data[16:20]), data[ihl:])
    if ethertype == ETH_P_IPV6 and len(data) >= 40:  # no extension headers in lab traffic
        return Parsed(data[6], IPv6Address(data[8:24]), IPv6Address(data[24:40]), data[40:])
    return None


def token_of(proto: int, l4: bytes) -> int | None:
    """The probe token carried by this transport header, or None when it is not a probe."""
    if proto == 6 and len(l4) >= 14 and l4[13] & 0x3F == 0x02:  # a pure SYN
        return int(struct.unpack("!I", l4[4:8])[0])
    if proto == 17 and l4[8:].startswith(UDP_MARK):
        digits = l4[8 + len(UDP_MARK):].split(b"\n")[0]
        return int(digits) if digits.isdigit() else None
    if proto == 132 and len(l4) >= 20 and l4[12] == 1:  # INIT chunk
        return int(struct.unpack("!I", l4[16:20])[0])
    return None


def sighting(where: str, packet: Parsed) -> Sighting:
    names = {v: k for k, v in IPPROTO.items()}
    sport, dport = struct.unpack("!HH", packet.l4[:4])
    return Sighting(where, names[packet.proto], packet.src, sport, packet.dst, dport)


def open_sniffer(netns: str, iface: str) -> socket.socket:
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
        sock.bind((iface, ETH_P_ALL))
        sock.setblocking(False)
        return sock

    return in_netns(netns, make)


def drain(where: str, sock: socket.socket, tokens: set[int]) -> list[tuple[int, Sighting]]:
    found: list[tuple[int, Sighting]] = []
    while True:
        try:
            data, addr = sock.recvfrom(65535)
        except BlockingIOError:
            return found
        packet = parse_l3(addr[1], data) if addr[2] != PACKET_OUTGOING else None
        token = token_of(packet.proto, packet.l4) if packet and packet.proto in IPPROTO.values() else None
        if packet and token in tokens:
            found.append((token, sighting(where, packet)))


def watch(sniffers: Mapping[str, socket.socket], tokens: set[int], timeout: float,
          settle: float) -> dict[int, list[Sighting]]:
    seen: dict[int, list[Sighting]] = {t: [] for t in tokens}
    deadline = time.monotonic() + timeout
    by_fd = {s.fileno(): (where, s) for where, s in sniffers.items()}
    while (now := time.monotonic()) < deadline:
        ready, _, _ = select.select(list(by_fd), [], [], deadline - now)
        for fd in ready:
            where, sock = by_fd[fd]
            for token, sight in drain(where, sock, tokens):
                seen[token].append(sight)
        if all(seen.values()):
            deadline = min(deadline, time.monotonic() + settle)
    return seen


def send_probes(from_netns: str, specs: Sequence[ProbeSpec], at: Mapping[str, tuple[str, str]], *,
                timeout: float = 1.0, settle: float = 0.05) -> tuple[Probe, ...]:
    """Send `specs` from `from_netns`; sniff at `at` ({label: (netns, interface)})."""
    sniffers = {where: open_sniffer(ns, iface) for where, (ns, iface) in at.items()}
    try:
        sent: list[Sent] = collect(start_in(from_netns, craft_and_send, list(specs)), timeout=30)
        seen = watch(sniffers, {s.token for s in specs}, timeout, settle)
    finally:
        for sock in sniffers.values():
            sock.close()
    return tuple(Probe(spec, out, tuple(seen[spec.token])) for spec, out in zip(specs, sent, strict=True))


def specs(dst: str | IPAddress, port: int, proto: str = "tcp", *, count: int = 1,
          src: str | IPAddress | None = None, sport: int | None = None) -> list[ProbeSpec]:
    """`count` probes to the same destination, each with its own random token."""
    if proto not in IPPROTO:
        raise ValueError(f"probe protocol must be one of {sorted(IPPROTO)}, not {proto!r}")
    tokens = random.sample(range(1, 2**32), count)
    return [ProbeSpec(str(dst), port, proto, t, str(src) if src else None, sport) for t in tokens]
