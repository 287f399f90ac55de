"""Typed ipset entries: the one reader of an entry's text, for every set type IPVS mode uses.

A set keeps its entries as text in `ipset save`'s own spelling (`IPSet.entries`): that is what the
compiler produces, what `ipset restore` takes and what the planner compares, so a plan is a set
difference of strings. Everything that needs to know what an entry *says* — the tracer matching a
packet, `keep` finding the entries of a kept Service, the summary, the ownership test of a dump —
reads the typed view instead, `IPSet.typed()`: each entry parsed once into a `SetEntry`, and
`str(entry)` gives the text back (`parse_entry(t, str(e)) == e`; `str(parse_entry(t, text)) == text`
for text in ipset's spelling).

The spellings, as `ipset save` (ipset 7.x, lib/print.c) prints them, one per type kube-proxy uses:

    hash:ip            10.96.0.10                     fd00::10
    hash:net           10.0.0.0/8, 203.0.113.7        (a host-sized net is printed without /32, /128)
    hash:ip,port       10.96.0.10,tcp:80              fd00::10,udp:53
    hash:ip,port,ip    10.244.1.5,tcp:8080,10.244.1.5
    hash:ip,port,net   10.96.0.10,tcp:80,203.0.113.0/24
    bitmap:port        30080                          (no protocol: one set per protocol)

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from netkit.model import Protocol
from netkit.model.types import IPAddress, IPNetwork

TYPES = ("hash:ip", "hash:net", "hash:ip,port", "hash:ip,port,ip", "hash:ip,port,net", "bitmap:port")
_PROTOCOLS = {p.lower: p for p in Protocol}


@dataclass(frozen=True, slots=True)
class SetEntry:
    """One member of an ipset, by dimension; the dimensions its set type does not have are None."""

    ip: IPAddress | None = None  # hash:ip…: the first dimension
    protocol: Protocol | None = None  # hash:…,port; None in a bitmap:port set
    port: int | None = None
    ip2: IPAddress | None = None  # hash:ip,port,ip: the third dimension (KUBE-LOOP-BACK's source)
    net: IPNetwork | None = None  # hash:net, or hash:ip,port,net's third dimension

    @property
    def ip_port(self) -> tuple[IPAddress | None, Protocol | None, int | None]:
        """The (address, protocol, port) head: what names a virtual server."""
        return (self.ip, self.protocol, self.port)

    def __str__(self) -> str:
        parts: list[str] = []
        if self.ip is not None:
            parts.append(str(self.ip))
        if self.port is not None:
            parts.append(f"{self.protocol.lower}:{self.port}" if self.protocol is not None else str(self.port))
        if self.ip2 is not None:
            parts.append(str(self.ip2))
        if self.net is not None:
            net = self.net
            parts.append(str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net))
        return ",".join(parts)


class EntryError(ValueError):
    """Text that is not an entry of the set type."""


def parse_entry(set_type: str, text: str) -> SetEntry:
    """One entry of a set of `set_type` (one of TYPES) from its text; EntryError when it is not one."""
    try:
        return _parse(set_type, text)
    except (ValueError, KeyError, IndexError) as exc:
        raise EntryError(f"{text!r} is not an entry of a {set_type} set") from exc


def _parse(set_type: str, text: str) -> SetEntry:
    if set_type == "bitmap:port":
        return SetEntry(port=_port(text))
    dims = set_type.partition(":")[2].split(",")
    values = text.split(",")
    if len(values) != len(dims) or not set_type.startswith("hash:"):
        raise EntryError(f"{text!r} has {len(values)} parts, a {set_type} entry {len(dims)}")
    if dims == ["net"]:
        return SetEntry(net=network(values[0]))
    if dims[0] != "ip":
        raise EntryError(f"unknown set type {set_type}")
    ip = address(values[0])
    if len(dims) == 1:
        return SetEntry(ip=ip)
    proto, _, port = values[1].partition(":")
    entry = SetEntry(ip=ip, protocol=_PROTOCOLS[proto], port=_port(port))
    if len(dims) == 2:
        return entry
    if dims[2] == "ip":
        return SetEntry(ip, entry.protocol, entry.port, ip2=address(values[2]))
    if dims[2] == "net":
        return SetEntry(ip, entry.protocol, entry.port, net=network(values[2]))
    raise EntryError(f"unknown set type {set_type}")


def address(text: str) -> IPAddress:
    return IPv6Address(text) if ":" in text else IPv4Address(text)


def network(text: str) -> IPNetwork:
    return IPv6Network(text, strict=False) if ":" in text else IPv4Network(text, strict=False)


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535 or not text.isdigit():
        raise EntryError(f"port {text!r}")
    return port
