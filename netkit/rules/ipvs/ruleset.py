"""The IPVS backend's Ruleset: virtual servers with their real servers, the kube-ipvs0 addresses, the
ipsets and the iptables payload that IPVS mode still needs.

`render()` prints it readably: the virtual servers in `ipvsadm-save -n` syntax (so the section can be
fed to `ipvsadm-restore`), the addresses as `ip addr` lines, the sets in `ipset save` syntax and the
iptables payload (an iptables-backend Ruleset: IPVS mode's chains, and its entry jumps in the
built-in chains) in `iptables-save` syntax. `parse(render(r)) == r`.

Connection counters (active/inactive) of real servers are read from the kernel for graceful
termination; they are not part of a real server's identity or equality.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from ipaddress import ip_address

from netkit.change import Since
from netkit.model import IPFamily, Protocol
from netkit.model.types import IPAddress, IPNetwork
from netkit.rules.backend import JSONValue
from netkit.rules.iptables import ruleset as ipt
from netkit.rules.ipvs.entries import EntryError, SetEntry, parse_entry

SCHEDULERS = frozenset({"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf",
                        "mh", "twos"})
MAXELEM = 1 << 20  # entries per hash set (see IPSet.create_line)
_FLAG = {Protocol.TCP: "-t", Protocol.UDP: "-u", Protocol.SCTP: "--sctp-service"}


def hostport(ip: IPAddress, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


@dataclass(frozen=True, slots=True, order=True)
class RealServer:
    """An endpoint behind a virtual server, always NAT ("masq": the only method that remaps ports)."""

    ip: IPAddress
    port: int
    weight: int = 1
    active: int = field(default=0, compare=False)
    inactive: int = field(default=0, compare=False)

    @property
    def key(self) -> tuple[IPAddress, int]:
        return (self.ip, self.port)


@dataclass(frozen=True, slots=True)
class VirtualServer:
    """One IPVS service: (protocol, IP, port), or a firewall mark (then ip is None and port 0)."""

    protocol: Protocol
    ip: IPAddress | None
    port: int
    scheduler: str = "rr"
    persistent: int | None = None  # ClientIP affinity timeout in seconds
    fwmark: int = 0
    family: IPFamily = IPFamily.IPV4
    reals: tuple[RealServer, ...] = ()
    comment: str = field(default="", compare=False)  # "ns/svc:port cluster IP"; not in the kernel

    @property
    def key(self) -> VSKey:
        return VSKey(self.protocol, self.ip, self.port, self.fwmark)

    @property
    def port_name(self) -> str:
        """"ns/svc:port" of the service port that compiled it ("" for one read from a kernel, which
        keeps no comments); the one reader of the comment, with `role`."""
        return self.comment.partition(" ")[0]

    @property
    def role(self) -> str:
        """What it serves of its service port: "cluster IP", "external IP", "loadbalancer IP",
        "nodePort" or "in-cluster traffic to external addresses" ("" when read from a kernel)."""
        return self.comment.partition(" ")[2]

    @property
    def service_name(self) -> str:
        """"ns/svc" of `port_name`."""
        return self.port_name.partition(":")[0]

    @property
    def spec(self) -> tuple[str, int | None]:
        """What `service set` changes in place."""
        return (self.scheduler, self.persistent)

    def address(self) -> str:
        return f"-f {self.fwmark}" if self.fwmark else f"{_FLAG[self.protocol]} {hostport(self.ip, self.port)}"  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class VSKey:
    """What identifies a virtual server in the kernel."""

    protocol: Protocol
    ip: IPAddress | None
    port: int
    fwmark: int = 0

    @property
    def sort_key(self) -> tuple[int, int, int, int, str]:
        ip = self.ip
        return (self.fwmark, ip.version if ip else 0, int(ip) if ip else 0, self.port, self.protocol.value)

    def __str__(self) -> str:
        if self.fwmark:
            return f"fwmark {self.fwmark:#x}"
        return f"{self.protocol.lower} {hostport(self.ip, self.port)}"  # type: ignore[arg-type]


class Entries(AbstractSet[str]):
    """An immutable set of ipset entries kept in `CHUNKS` frozensets (by the entry's hash), so a set
    of 100,000 entries (KUBE-LOOP-BACK at 10,000 services × 10 endpoints) changed by one entry is a
    new Entries sharing all chunks but one: `changed(came, went)` costs what the change costs, where
    a new frozenset would copy them all (~5 ms on a real CPU). Equal to any set with the same
    members (a frozenset too)."""

    CHUNKS = 64
    __slots__ = ("_chunks", "_len")

    def __init__(self, items: Iterable[str] = ()) -> None:
        parts: list[set[str]] = [set() for _ in range(self.CHUNKS)]
        for e in items:
            parts[hash(e) % self.CHUNKS].add(e)
        self._chunks = tuple(frozenset(x) for x in parts)
        self._len = sum(map(len, self._chunks))

    def changed(self, came: Iterable[str], went: Iterable[str]) -> Entries:
        """These entries with `came` added and `went` removed; only the chunks touched are copied."""
        touched: dict[int, set[str]] = {}
        for e in went:
            i = hash(e) % self.CHUNKS
            touched.setdefault(i, set(self._chunks[i])).discard(e)
        for e in came:
            i = hash(e) % self.CHUNKS
            touched.setdefault(i, set(self._chunks[i])).add(e)
        out = Entries.__new__(Entries)
        chunks = list(self._chunks)
        for i, members in touched.items():
            chunks[i] = frozenset(members)
        out._chunks = tuple(chunks)
        out._len = sum(map(len, chunks))
        return out

    def __contains__(self, entry: object) -> bool:
        return entry in self._chunks[hash(entry) % self.CHUNKS]

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            yield from chunk

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entries):
            return self._len == other._len and all(a is b or a == b for a, b in zip(self._chunks, other._chunks,
                                                                                    strict=True))
        if isinstance(other, (set, frozenset)):  # a dump's: chunk by chunk in C, not entry by entry
            return self._len == len(other) and all(map(other.issuperset, self._chunks))
        return AbstractSet.__eq__(self, other)

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"Entries({sorted(self)!r})"


@dataclass(frozen=True, slots=True)
class IPSet:
    name: str
    type: str  # "hash:ip,port", "bitmap:port", ...
    family: IPFamily
    entries: AbstractSet[str] = frozenset()  # in `ipset save` syntax: "10.96.0.10,tcp:80", "30080"
    comment: str = field(default="", compare=False)
    _typed: frozenset[SetEntry] | None = field(default=None, init=False, compare=False, repr=False)

    def typed(self) -> frozenset[SetEntry]:
        """The entries read (netkit.rules.ipvs.entries), parsed on first use and kept: what the tracer,
        keep, the summary and the ownership test look at. An entry of no shape netkit or kube-proxy
        writes (someone else's) is left out here; `entries` still holds it, so a plan still sees it."""
        if self._typed is None:
            object.__setattr__(self, "_typed", frozenset(_read_entries(self.type, self.entries)))
        assert self._typed is not None
        return self._typed

    def create_line(self) -> str:
        if self.type.startswith("bitmap:port"):
            return f"create {self.name} {self.type} range 0-65535"
        fam = "inet" if self.family is IPFamily.IPV4 else "inet6"
        # maxelem: kube-proxy's 65,536 is less than KUBE-LOOP-BACK's entry per endpoint at 10,000
        # services × 10 endpoints ("Hash is full"); the kernel allocates per entry, not per maxelem
        return f"create {self.name} {self.type} family {fam} hashsize 1024 maxelem {MAXELEM}"


def _read_entries(set_type: str, texts: Iterable[str]) -> Iterator[SetEntry]:
    for text in texts:
        try:
            yield parse_entry(set_type, text)
        except EntryError:
            continue


def _no_payload() -> ipt.Ruleset:
    return ipt.Ruleset(IPFamily.IPV4)


@dataclass(frozen=True, slots=True)
class Changes:
    """What can differ between two consecutive compiles: the planner compares only this."""

    services: frozenset[VSKey] = frozenset()
    sets: frozenset[str] = frozenset()  # set names
    addresses: bool = False
    chains: frozenset[str] = frozenset()  # iptables chains
    # set name → (entries that came, entries that went): exact, so the planner need not compare the
    # sets (KUBE-LOOP-BACK holds an entry per endpoint)
    entries: Mapping[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Ruleset:
    family: IPFamily
    services: tuple[VirtualServer, ...] = ()  # sorted by key
    addresses: frozenset[IPAddress] = frozenset()  # on kube-ipvs0
    sets: tuple[IPSet, ...] = ()  # sorted by name
    # IPVS mode's iptables chains and, in the built-in chains, its entry jumps (a dump: the built-in
    # chains as they are, with everyone's rules; only IPVS mode's own chains besides).
    iptables: ipt.Ruleset = field(default_factory=_no_payload)
    # ipvs.excludeCIDRs (desired side): a live virtual server whose address is in one is never deleted.
    keep: tuple[IPNetwork, ...] = field(default=(), compare=False)
    # From a remembering Compiler: what can differ from its previous result (see netkit.rules.backend.Since).
    since: Since[Changes] | None = field(default=None, compare=False, repr=False)
    _index: Mapping[VSKey, VirtualServer] | None = field(default=None, init=False, compare=False, repr=False)

    def kept(self, vs: VirtualServer) -> bool:
        """A virtual server in ipvs.excludeCIDRs: no plan deletes it (kube-proxy's cleanLegacyService)."""
        return vs.ip is not None and any(vs.ip in net for net in self.keep if net.version == vs.ip.version)

    def __post_init__(self) -> None:
        if self.iptables.family is not self.family and not self.iptables.tables:
            object.__setattr__(self, "iptables", ipt.Ruleset(self.family))

    @property
    def index(self) -> Mapping[VSKey, VirtualServer]:
        """Virtual servers by key (built on first use; the compiler hands its own over)."""
        if self._index is None:
            object.__setattr__(self, "_index", {s.key: s for s in self.services})
        assert self._index is not None
        return self._index

    def service(self, key: VSKey) -> VirtualServer | None:
        return self.index.get(key)

    def set(self, name: str) -> IPSet | None:
        return next((s for s in self.sets if s.name == name), None)


def with_index(r: Ruleset, index: Mapping[VSKey, VirtualServer]) -> Ruleset:
    """`r`, its by-key index given (the caller vouches it matches `r.services` and never changes)."""
    object.__setattr__(r, "_index", index)
    return r


def sort_services(services: list[VirtualServer] | tuple[VirtualServer, ...]) -> tuple[VirtualServer, ...]:
    return tuple(sorted(services, key=lambda s: s.key.sort_key))


# ---------------------------------------------------------------- render / parse

def render(r: Ruleset) -> str:
    return "\n".join([f"# netkit ipvs ruleset ({r.family.value})", render_ipvs(r.services),
                      render_addresses(r.addresses), render_sets(r.sets), render_iptables(r.iptables)])


def render_ipvs(services: tuple[VirtualServer, ...]) -> str:
    lines = ["# ipvs virtual servers (ipvsadm-save -n)"]
    for s in services:
        lines.append(_service_line(s))
        lines += [_real_line(s, rs) for rs in sorted(s.reals)]
    return "\n".join(lines) + "\n"


def _service_line(s: VirtualServer) -> str:
    line = f"-A {s.address()} -s {s.scheduler}"
    if s.persistent:
        line += f" -p {s.persistent}"
    return line + (f"  # {s.comment}" if s.comment else "")


def _real_line(s: VirtualServer, rs: RealServer) -> str:
    return f"-a {s.address()} -r {hostport(rs.ip, rs.port)} -m -w {rs.weight}"


def render_addresses(addresses: frozenset[IPAddress]) -> str:
    lines = ["# addresses on kube-ipvs0"]
    lines += [f"ip addr add {a}/{a.max_prefixlen} dev kube-ipvs0"
              for a in sorted(addresses, key=lambda a: (a.version, int(a)))]
    return "\n".join(lines) + "\n"


def render_sets(sets: tuple[IPSet, ...]) -> str:
    lines = ["# ipsets (ipset save)"]
    for s in sets:
        lines.append(s.create_line())
        lines += [f"add {s.name} {e}" for e in sorted(s.entries)]
    return "\n".join(lines) + "\n"


def render_iptables(payload: ipt.Ruleset) -> str:
    return "# iptables (iptables-save; the jumps in built-in chains are inserted with -C/-I)\n" + ipt.render(payload)


def to_json(r: Ruleset) -> JSONValue:
    """The Ruleset as plain data (`netkit compile -o json`): every part structured, none as text."""
    return {
        "virtual_servers": [{
            "protocol": vs.protocol.value, "address": str(vs.ip) if vs.ip else None, "port": vs.port,
            "fwmark": vs.fwmark, "scheduler": vs.scheduler, "persistent": vs.persistent, "comment": vs.comment,
            "real_servers": [{"address": str(x.ip), "port": x.port, "weight": x.weight} for x in vs.reals],
        } for vs in r.services],
        "addresses": [str(a) for a in sorted(r.addresses, key=lambda a: (a.version, int(a)))],
        "ipsets": [{"name": s.name, "type": s.type, "entries": sorted(s.entries)} for s in r.sets],
        "iptables": {"tables": {t: {c: list(rules) for c, rules in chains.items()}
                                for t, chains in r.iptables.tables.items()}},
    }


_SVC = re.compile(r"^-A (?:(-t|-u|--sctp-service) (\S+)|-f (\d+)) -s (\S+)(?: -p (\d+))?(?:  # (.*))?$")
_RS = re.compile(r"^-a (?:(?:-t|-u|--sctp-service) (\S+)|-f (\d+)) -r (\S+) -m -w (\d+)$")
_PROTO = {"-t": Protocol.TCP, "-u": Protocol.UDP, "--sctp-service": Protocol.SCTP}


def split_hostport(text: str) -> tuple[IPAddress, int]:
    host, _, port = text.rpartition(":")
    return ip_address(host.strip("[]")), int(port)


def parse(text: str) -> Ruleset:
    """The inverse of `render` (used by golden tests and `netkit diff` against a saved ruleset)."""
    sections: dict[str, list[str]] = {}
    current = ""
    family = IPFamily.IPV4
    for line in text.splitlines():
        if line.startswith("# netkit ipvs ruleset ("):
            family = IPFamily(line.split("(")[1].rstrip(")"))
        elif line.startswith("# ") and current != "iptables":
            current = line.split()[1]
        elif line or current == "iptables":
            sections.setdefault(current, []).append(line)
    payload = ipt.parse("\n".join(sections.get("iptables", [])), family)
    return Ruleset(family, _parse_ipvs(sections.get("ipvs", []), family),
                   frozenset(ip_address(a.split()[3].split("/")[0]) for a in sections.get("addresses", [])),
                   parse_sets(sections.get("ipsets", []), family), payload)


def _parse_ipvs(lines: list[str], family: IPFamily) -> tuple[VirtualServer, ...]:
    services: list[VirtualServer] = []
    for line in lines:
        if m := _SVC.match(line):
            flag, hp, mark, sched, persist, comment = m.groups()
            ip, port = split_hostport(hp) if hp else (None, 0)
            services.append(VirtualServer(_PROTO.get(flag, Protocol.TCP), ip, port, sched,
                                          int(persist) if persist else None, int(mark or 0), family,
                                          (), comment or ""))
        elif m := _RS.match(line):
            ip, port = split_hostport(m.group(3))
            last = services[-1]
            services[-1] = _with_reals(last, (*last.reals, RealServer(ip, port, int(m.group(4)))))
    return sort_services(services)


def _with_reals(s: VirtualServer, reals: tuple[RealServer, ...]) -> VirtualServer:
    from dataclasses import replace
    return replace(s, reals=tuple(sorted(reals)))


def parse_sets(lines: Iterable[str], family: IPFamily,
               wanted: Callable[[str], bool] | None = None) -> tuple[IPSet, ...]:
    """Sets in `ipset save` syntax (a kernel dump's, or render's section), sorted by name: the one
    reader of them. `wanted(name)` picks the sets to read (default: all); a hash set of the other
    family is skipped (`ipset save` lists both; bitmap sets have no family). Linear in the lines:
    KUBE-LOOP-BACK holds an entry per endpoint."""
    types: dict[str, str] = {}
    entries: dict[str, list[str]] = {}
    v6 = family is IPFamily.IPV6
    for line in lines:
        words = line.split()
        if len(words) < 3 or (wanted is not None and not wanted(words[1])):
            continue
        if words[0] == "create" and (words[2].startswith("bitmap") or ("inet6" in words) == v6):
            types[words[1]] = words[2]
            entries[words[1]] = []
        elif words[0] == "add" and words[1] in entries:
            entries[words[1]].append(words[2])
    return tuple(IPSet(name, types[name], family, frozenset(entries[name])) for name in sorted(types))
