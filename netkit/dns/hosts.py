"""CoreDNS's `hosts` plugin: A, AAAA and PTR answers from a hosts(5) file and lines inlined in the
Corefile. Pure: `parse` builds a `HostsTable` from text, `answer` answers one question from it; the
server re-reads the file (netkit.dns.command) every `reload` seconds when its size or mtime changed.

As CoreDNS (plugin/hosts): a name outside the plugin's zones is not its business (the next plugin
answers) but a PTR question is answered for any address the table knows; a name in the zones with
records of the asked type is answered authoritatively with `ttl`; a name with records of the other
family only gets an empty NOERROR (no SOA: a hosts file has none); a name it does not know goes to the
next plugin when `fallthrough` covers it, else SERVFAIL (CoreDNS's stand-in for an NXDOMAIN without
a SOA). Names are stored lower-case; entries of the file come first, then the inline ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import ip_address
from types import MappingProxyType

from netkit.dns.names import Name, name_from_text, reverse_address
from netkit.dns.resolver import Rcode, Record, Reply, RType
from netkit.model.types import IPAddress

DEFAULT_PATH = "/etc/hosts"
DEFAULT_TTL = 3600
DEFAULT_RELOAD = 5.0


def in_zones(name: Name, zones: tuple[Name, ...]) -> bool:
    """CoreDNS's plugin.Zones.Matches: the name is one of the zones or below one (() is the root)."""
    return any(name[len(name) - len(z):] == z if z else True for z in zones if len(z) <= len(name))


@dataclass(frozen=True, slots=True)
class HostsTable:
    by_name: Mapping[Name, tuple[IPAddress, ...]] = field(default_factory=dict)
    by_address: Mapping[IPAddress, tuple[Name, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HostsOptions:
    path: str = DEFAULT_PATH
    zones: tuple[Name, ...] = ((),)
    inline: str = ""  # the Corefile's inline lines, in hosts(5) format
    ttl: int = DEFAULT_TTL
    reverse: bool = True  # PTR records from the entries (`no_reverse` turns them off)
    reload: float = DEFAULT_RELOAD  # seconds between checks of the file; 0: never
    fallthrough: tuple[Name, ...] | None = None  # None: no fallthrough; (()): every name


def parse_line(line: str) -> tuple[IPAddress, list[str]] | None:
    """One hosts(5) line: (address, names), or None for a blank or comment line; ValueError if the
    first field is no address (an IPv6 zone `%eth0` is dropped, as CoreDNS does; an IPv4-mapped
address is the IPv4 address)."""
    fields = line.partition("#")[0].split()
    if not fields:
        return None
    if len(fields) < 2:
        raise ValueError(f"{line.strip()!r}: expected an address and at least one name")
    try:
        addr = ip_address(fields[0].partition("%")[0])
    except ValueError:
        raise ValueError(f"{fields[0]!r} is not an IP address") from None
    mapped = addr.ipv4_mapped if addr.version == 6 else None  # ::ffff:10.0.0.2 is 10.0.0.2, as Go's To4
    return mapped or addr, fields[1:]


def parse(text: str, options: HostsOptions, *, strict: bool = False) -> HostsTable:
    """The table of a hosts file followed by the inline entries; names outside the zones are left
    out. A line that cannot be read is skipped (strict: ValueError, for the inline lines)."""
    by_name: dict[Name, list[IPAddress]] = {}
    by_address: dict[IPAddress, list[Name]] = {}
    for source, lines in (("file", text.splitlines()), ("inline", options.inline.splitlines())):
        for line in lines:
            try:
                entry = parse_line(line)
            except ValueError:
                if strict or source == "inline":
                    raise
                continue
            if entry is None:
                continue
            addr, names = entry
            for text_name in names:
                name = name_from_text(text_name.lower())
                if not in_zones(name, options.zones):
                    continue
                by_name.setdefault(name, []).append(addr)
                by_address.setdefault(addr, []).append(name)
    return HostsTable(MappingProxyType({k: tuple(dict.fromkeys(v)) for k, v in by_name.items()}),
                      MappingProxyType({k: tuple(dict.fromkeys(v)) for k, v in by_address.items()}))


def answer(table: HostsTable, options: HostsOptions, name: Name, qtype: int) -> Reply | None:
    """The hosts plugin's reply to one question; None: the next plugin answers."""
    lowered = tuple(label.lower() for label in name)
    ptr = qtype == RType.PTR
    if not ptr and not in_zones(lowered, options.zones):
        return None
    if ptr:
        address = reverse_address(lowered)
        names = table.by_address.get(address, ()) if address is not None and options.reverse else ()
        if not names:
            return None
        return Reply(Rcode.NOERROR, tuple(Record(name, RType.PTR, options.ttl, n) for n in names))
    addresses = table.by_name.get(lowered, ())
    version = {int(RType.A): 4, int(RType.AAAA): 6}.get(qtype, 0)
    records = tuple(Record(name, RType.A if a.version == 4 else RType.AAAA, options.ttl, a)
                    for a in addresses if a.version == version)
    if records or addresses:
        return Reply(Rcode.NOERROR, records)
    if options.fallthrough is not None and in_zones(lowered, options.fallthrough):
        return None
    return Reply(Rcode.SERVFAIL, authoritative=False)
