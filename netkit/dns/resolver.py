"""The resolver: (view, question) → reply, pure.

`resolve(view, options, name, qtype)` classifies the name (`names.classify`) and answers each shape
from the View. The rules, from the Kubernetes DNS spec 1.1.0 and CoreDNS's `kubernetes` plugin:

- a name that exists but lacks the type → NODATA (NOERROR, empty answer, the zone SOA in authority);
  the apex, `svc.<zone>`, `pod.<zone>`, an existing namespace and `_<proto>` names are such names;
- a name that does not exist → NXDOMAIN with the SOA; inside the zone that is final;
- no view yet → SERVFAIL (with the zone SOA) for the zone and reverse names, never a stale NXDOMAIN;
- an ExternalName answers a CNAME and the target is chased: inside the zone right here, outside
  through the upstream (the reply says `chase`), up to MAX_CHASE links;
- reverse names of cluster addresses are answered; other reverse names and names outside the zone
  are forwarded (the reply says `forward`), as kubeadm's `fallthrough in-addr.arpa ip6.arpa`.

Records are plain values whose `str()` is a zone-file line, so tests read like zone files.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from netkit.dns.names import (
    Apex,
    EndpointName,
    Invalid,
    Name,
    Nameserver,
    Namespace,
    Outside,
    PodName,
    PortName,
    ProtoName,
    Request,
    ReverseName,
    ServiceName,
    Space,
    Version,
    classify,
    name_to_text,
    reverse_name,
)
from netkit.dns.view import Entry, Kind, Options, PodMode, Port, View
from netkit.model.types import IPAddress

DNS_SCHEMA_VERSION = "1.1.0"
VERSION_TTL = 28800
MAX_CHASE = 8


class RType(enum.IntEnum):
    A = 1
    NS = 2
    CNAME = 5
    SOA = 6
    PTR = 12
    MX = 15  # never in the view's answers; loadbalance orders upstream-style sections by it
    TXT = 16
    AAAA = 28
    SRV = 33
    OPT = 41
    IXFR = 251
    AXFR = 252
    ANY = 255


class Rcode(enum.IntEnum):
    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5
    BADVERS = 16


@dataclass(frozen=True, slots=True)
class Srv:
    priority: int
    weight: int
    port: int
    target: Name

    def __str__(self) -> str:
        return f"{self.priority} {self.weight} {self.port} {name_to_text(self.target)}"


@dataclass(frozen=True, slots=True)
class Soa:
    mname: Name
    rname: Name
    serial: int
    refresh: int
    retry: int
    expire: int
    minimum: int

    def __str__(self) -> str:
        return (f"{name_to_text(self.mname)} {name_to_text(self.rname)} {self.serial} {self.refresh} "
                f"{self.retry} {self.expire} {self.minimum}")


@dataclass(frozen=True, slots=True)
class Txt:
    text: str

    def __str__(self) -> str:
        return f'"{self.text}"'


RData = IPv4Address | IPv6Address | Name | Srv | Soa | Txt


@dataclass(frozen=True, slots=True)
class Record:
    name: Name
    rtype: RType
    ttl: int
    data: RData

    def __str__(self) -> str:
        data = name_to_text(self.data) if isinstance(self.data, tuple) else str(self.data)
        return f"{name_to_text(self.name)} {self.ttl} IN {self.rtype.name} {data}"


@dataclass(frozen=True, slots=True)
class Reply:
    rcode: Rcode
    answer: tuple[Record, ...] = ()
    authority: tuple[Record, ...] = ()
    additional: tuple[Record, ...] = ()
    authoritative: bool = True
    forward: bool = False  # send the query itself to the upstream
    chase: Name | None = None  # resolve this name upstream and append it to the answer

    @property
    def from_view(self) -> bool:
        """Everything in it came from the view: it may be cached until the view changes."""
        return not self.forward and self.chase is None and self.rcode in (Rcode.NOERROR, Rcode.NXDOMAIN)


SERVFAIL = Reply(Rcode.SERVFAIL, authoritative=False)
REFUSED = Reply(Rcode.REFUSED, authoritative=False)
FORWARD = Reply(Rcode.NOERROR, authoritative=False, forward=True)


def resolve(view: View | None, options: Options, name: Name, qtype: int) -> Reply:
    if qtype in (RType.AXFR, RType.IXFR):
        return REFUSED
    request = classify(name, options.zone)
    if isinstance(request, Outside):
        return FORWARD
    if view is None:
        return Reply(Rcode.SERVFAIL, authority=(_zone_soa(options, 0, options.zone),), authoritative=False)
    return _answer(view, request, name, qtype, 0)


def _answer(view: View, req: Request, name: Name, qtype: int, depth: int) -> Reply:
    if isinstance(req, ServiceName):
        return _service(view, req, name, qtype, depth)
    if isinstance(req, PortName):
        return _port(view, req, name, qtype)
    if isinstance(req, EndpointName):
        return _endpoint(view, req, name, qtype)
    if isinstance(req, ReverseName):
        return _reverse(view, req, name, qtype)
    if isinstance(req, PodName):
        return _pod(view, req, name, qtype)
    return _structural(view, req, name, qtype)


def _structural(view: View, req: Request, name: Name, qtype: int) -> Reply:
    """The apex, dns-version, the two spaces, namespaces, `_proto` non-terminals, invalid shapes."""
    if isinstance(req, Apex):
        ns = Record(name, RType.NS, view.options.ttl, _ns_name(view))
        glue = tuple(_address_records(view, _ns_name(view), view.nameservers)) if qtype in (RType.NS, RType.ANY) else ()
        return _records(view, name, qtype, [_soa(view, view.options.zone), ns], additional=glue)
    if isinstance(req, Nameserver):
        return _records(view, name, qtype, _address_records(view, name, view.nameservers))
    if isinstance(req, Version):
        return _records(view, name, qtype, [Record(name, RType.TXT, VERSION_TTL, Txt(DNS_SCHEMA_VERSION))])
    if isinstance(req, Space):
        return _nodata(view)
    if isinstance(req, Namespace):
        return _nodata(view) if _namespace_exists(view, req) else _nxdomain(view)
    if isinstance(req, ProtoName):
        entry = _live(view, req.namespace, req.service)
        exists = entry is not None and any(p.name and p.proto == req.proto for p in _srv_ports(entry))
        return _nodata(view) if exists else _nxdomain(view)
    assert isinstance(req, Invalid), req
    return _nxdomain(view)


def _ns_name(view: View) -> Name:
    return ("ns", "dns", *view.options.zone)


def _namespace_exists(view: View, req: Namespace) -> bool:
    """A namespace is known from its Namespace object (or from any object in it); under `pod.` only
    when pod records are on."""
    if req.space == "pod" and view.options.pods is PodMode.DISABLED:
        return False
    return req.namespace in view.namespaces


def _live(view: View, namespace: str, service: str) -> Entry | None:
    entry = view.services.get((namespace, service))
    return entry if entry is not None and entry.exists else None


def _service(view: View, req: ServiceName, name: Name, qtype: int, depth: int) -> Reply:
    entry = _live(view, req.namespace, req.service)
    if entry is None:
        return _nxdomain(view)
    if entry.kind is Kind.EXTERNAL_NAME:
        return _cname(view, entry, name, qtype, depth)
    rrs = _address_records(view, name, _entry_addresses(entry)) + _srv_records(view, entry, _srv_ports(entry), name)
    return _records(view, name, qtype, rrs, additional=_srv_additional(view, entry, qtype))


def _port(view: View, req: PortName, name: Name, qtype: int) -> Reply:
    entry = _live(view, req.namespace, req.service)
    ports = [p for p in _srv_ports(entry) if p.name and p.name == req.port and p.proto == req.proto] if entry else []
    if entry is None or not ports:
        return _nxdomain(view)
    srvs = _srv_records(view, entry, ports, name)
    return _records(view, name, qtype, srvs, additional=_srv_additional(view, entry, qtype))


def _endpoint(view: View, req: EndpointName, name: Name, qtype: int) -> Reply:
    entry = _live(view, req.namespace, req.service)
    host = entry.hosts.get(req.host) if entry is not None else None
    if host is None:
        return _nxdomain(view)
    return _records(view, name, qtype, _address_records(view, name, host.addresses))


def _pod(view: View, req: PodName, name: Name, qtype: int) -> Reply:
    mode = view.options.pods
    addr = req.address
    if addr is None or mode is PodMode.DISABLED or req.namespace not in view.namespaces:
        return _nxdomain(view)
    if mode is PodMode.VERIFIED and (req.namespace, addr) not in view.pods:
        return _nxdomain(view)
    return _records(view, name, qtype, _address_records(view, name, (addr,)))


def _reverse(view: View, req: ReverseName, name: Name, qtype: int) -> Reply:
    targets = view.reverse.get(req.address) if req.address is not None else None
    if not targets:
        return FORWARD
    ptrs = [Record(name, RType.PTR, view.options.ttl, t) for t in targets]
    return _records(view, name, qtype, ptrs, soa_zone=req.zone)


def _cname(view: View, entry: Entry, name: Name, qtype: int, depth: int) -> Reply:
    assert entry.target is not None
    cname = Record(name, RType.CNAME, view.options.ttl, entry.target)
    if qtype == RType.CNAME:
        return Reply(Rcode.NOERROR, (cname,))
    target = classify(entry.target, view.options.zone)
    if isinstance(target, (Outside, ReverseName)):
        return Reply(Rcode.NOERROR, (cname,), chase=entry.target)
    if depth >= MAX_CHASE:
        return SERVFAIL
    rest = _answer(view, target, entry.target, qtype, depth + 1)
    if rest.rcode is Rcode.SERVFAIL:
        return SERVFAIL
    return Reply(rest.rcode, (cname, *rest.answer), rest.authority, rest.additional, chase=rest.chase)


# --- records -------------------------------------------------------------------------------------


def _entry_addresses(entry: Entry) -> tuple[IPAddress, ...]:
    if entry.kind is Kind.HEADLESS:
        return tuple(a for h in entry.hosts.values() for a in h.addresses)
    return entry.addresses


def _address_records(view: View, name: Name, addresses: tuple[IPAddress, ...]) -> list[Record]:
    ttl = view.options.ttl
    return [Record(name, RType.A if a.version == 4 else RType.AAAA, ttl, a) for a in addresses]


def _srv_ports(entry: Entry | None) -> tuple[Port, ...]:
    return entry.ports if entry is not None and entry.kind is not Kind.EXTERNAL_NAME else ()


def _srv_targets(entry: Entry) -> list[Name]:
    if entry.kind is Kind.HEADLESS:
        return [(label, *entry.name) for label in entry.hosts]
    return [entry.name]


def _srv_records(view: View, entry: Entry, ports: tuple[Port, ...] | list[Port], owner: Name) -> list[Record]:
    """One SRV per port per target (the service, or each ready endpoint name of a headless one).

    The weight is CoreDNS's: 100 split evenly (rounded down) over every (address, port) pair behind
    the answer, counted before equal records are merged — a dual-stack service's one SRV says 50, a
    hostname shared by two endpoints counts twice."""
    targets = _srv_targets(entry)
    pairs = len(ports) * (entry.endpoints if entry.kind is Kind.HEADLESS else len(entry.addresses))
    weight = 100 // pairs if pairs else 0
    ttl = view.options.ttl
    records = (Record(owner, RType.SRV, ttl, Srv(0, weight, p.port, t)) for p in ports for t in targets)
    return list(dict.fromkeys(records))


def _srv_additional(view: View, entry: Entry, qtype: int) -> tuple[Record, ...]:
    """The addresses of the SRV targets, so a client needs no second query."""
    if qtype not in (RType.SRV, RType.ANY) or not _srv_ports(entry):
        return ()
    if entry.kind is Kind.HEADLESS:
        return tuple(r for h in entry.hosts.values()
                     for r in _address_records(view, (h.label, *entry.name), h.addresses))
    return tuple(_address_records(view, entry.name, entry.addresses))


def _records(view: View, name: Name, qtype: int, rrs: list[Record], *,
             additional: tuple[Record, ...] = (), soa_zone: Name | None = None) -> Reply:
    """The records of one existing name: those of the asked type, or NODATA."""
    match = tuple(r for r in rrs if qtype == RType.ANY or r.rtype == qtype)
    if not match:
        return _nodata(view, soa_zone)
    return Reply(Rcode.NOERROR, match, additional=additional)


def _soa(view: View, zone: Name) -> Record:
    return _zone_soa(view.options, view.serial, zone)


def _zone_soa(o: Options, serial: int, zone: Name) -> Record:
    data = Soa(("ns", "dns", *o.zone), ("hostmaster", *o.zone), serial, 7200, 1800, 86400, o.ttl)
    return Record(zone, RType.SOA, o.ttl, data)


def _nodata(view: View, zone: Name | None = None) -> Reply:
    return Reply(Rcode.NOERROR, authority=(_soa(view, zone or view.options.zone),))


def _nxdomain(view: View) -> Reply:
    return Reply(Rcode.NXDOMAIN, authority=(_soa(view, view.options.zone),))


__all__ = ["RType", "Rcode", "Record", "Reply", "Soa", "Srv", "Txt", "resolve", "reverse_name"]
