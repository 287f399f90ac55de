"""Query names → request shapes: the list of name shapes cluster DNS accepts.

A name is a tuple of lower-cased labels without the root (`("web", "default", "svc", "cluster",
"local")`). Labels are ASCII-lower-cased bytes decoded as latin-1, so every byte of a query survives
and matching is case-insensitive exactly as DNS defines it (ASCII letters only).

`classify(name, zone)` says which shape a name has, in the spirit of CoreDNS's `parseRequest`:

    <zone>                                   Apex
    dns-version.<zone>                       Version
    ns.dns.<zone>                            Nameserver        (the name the apex NS record gives)
    svc.<zone> | pod.<zone>                  Space
    <ns>.svc.<zone> | <ns>.pod.<zone>        Namespace
    <svc>.<ns>.svc.<zone>                    ServiceName
    <host>.<svc>.<ns>.svc.<zone>             EndpointName      (host never starts with "_")
    _<proto>.<svc>.<ns>.svc.<zone>           ProtoName         (an empty non-terminal of SRV names)
    _<port>._<proto>.<svc>.<ns>.svc.<zone>   PortName
    <dashed-ip>.<ns>.pod.<zone>              PodName           (address None when not an address)
    … .in-addr.arpa | … .ip6.arpa            ReverseName       (address None for partial names)
    anything else in the zone                Invalid           (NXDOMAIN: too long, wrong space, `*`)
    anything else                            Outside           (forwarded upstream)
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from netkit.model.types import IPAddress

Name = tuple[str, ...]

IN_ADDR_ARPA: Name = ("in-addr", "arpa")
IP6_ARPA: Name = ("ip6", "arpa")


def name_from_text(text: str) -> Name:
    """'Web.Default.svc.cluster.local.' → ('web', 'default', 'svc', 'cluster', 'local')."""
    stripped = text.strip().rstrip(".")
    return tuple(label.lower() for label in stripped.split(".")) if stripped else ()


def name_to_text(name: Name) -> str:
    return ".".join(name) + "."


def lower_label(raw: bytes) -> str:
    return raw.lower().decode("latin-1")


@dataclass(frozen=True, slots=True)
class Apex:
    pass


@dataclass(frozen=True, slots=True)
class Version:
    pass


@dataclass(frozen=True, slots=True)
class Nameserver:
    pass


@dataclass(frozen=True, slots=True)
class Space:
    space: str  # "svc" or "pod"


@dataclass(frozen=True, slots=True)
class Namespace:
    space: str
    namespace: str


@dataclass(frozen=True, slots=True)
class ServiceName:
    namespace: str
    service: str


@dataclass(frozen=True, slots=True)
class EndpointName:
    namespace: str
    service: str
    host: str


@dataclass(frozen=True, slots=True)
class ProtoName:
    namespace: str
    service: str
    proto: str  # without the underscore


@dataclass(frozen=True, slots=True)
class PortName:
    namespace: str
    service: str
    port: str  # without the underscore
    proto: str


@dataclass(frozen=True, slots=True)
class PodName:
    namespace: str
    address: IPAddress | None


@dataclass(frozen=True, slots=True)
class ReverseName:
    zone: Name  # IN_ADDR_ARPA or IP6_ARPA
    address: IPAddress | None


@dataclass(frozen=True, slots=True)
class Invalid:
    pass


@dataclass(frozen=True, slots=True)
class Outside:
    pass


Request = (Apex | Version | Nameserver | Space | Namespace | ServiceName | EndpointName | ProtoName | PortName
           | PodName | ReverseName | Invalid | Outside)


def classify(name: Name, zone: Name) -> Request:
    if name[-2:] in (IN_ADDR_ARPA, IP6_ARPA):
        return ReverseName(name[-2:], reverse_address(name))
    if len(name) < len(zone) or name[len(name) - len(zone):] != zone:
        return Outside()
    return _in_zone(name[: len(name) - len(zone)])


def _in_zone(rel: Name) -> Request:
    if not rel:
        return Apex()
    if rel == ("dns-version",):
        return Version()
    if rel == ("ns", "dns"):
        return Nameserver()
    space = rel[-1]
    if space not in ("svc", "pod"):
        return Invalid()
    if len(rel) == 1:
        return Space(space)
    if len(rel) == 2:
        return Namespace(space, rel[0])
    return _in_space(space, rel[:-1])


def _in_space(space: str, rel: Name) -> Request:
    """rel ends with the namespace: (…, svc, ns)."""
    if space == "pod":
        return PodName(rel[1], pod_address(rel[0])) if len(rel) == 2 else Invalid()
    ns, svc = rel[-1], rel[-2]
    if len(rel) == 2:
        return ServiceName(ns, svc)
    if len(rel) == 3:
        first = rel[0]
        return ProtoName(ns, svc, first[1:]) if first.startswith("_") else EndpointName(ns, svc, first)
    if len(rel) == 4 and rel[0].startswith("_") and rel[1].startswith("_"):
        return PortName(ns, svc, rel[0][1:], rel[1][1:])
    return Invalid()


def pod_address(label: str) -> IPAddress | None:
    """'10-244-1-12' → 10.244.1.12; 'fd00-244--5' → fd00:244::5 (CoreDNS's dashed forms)."""
    if label.count("-") == 3 and "--" not in label:
        return _parse(label.replace("-", "."), 4)
    return _parse(label.replace("-", ":"), 6)


def dashed(address: IPAddress) -> str:
    """The inverse of pod_address: the hostname label CoreDNS gives an endpoint without a hostname."""
    label = str(address).replace(".", "-").replace(":", "-")
    return label + "0" if label.endswith("-") else label  # fd00:: → fd00--0, as CoreDNS


def _parse(text: str, version: int) -> IPAddress | None:
    try:
        addr = ip_address(text)
    except ValueError:
        return None
    return addr if addr.version == version else None


def reverse_address(name: Name) -> IPAddress | None:
    """'12.1.244.10.in-addr.arpa' → 10.244.1.12; the 32-nibble ip6.arpa form → the IPv6 address."""
    labels = name[:-2]
    if name[-2:] == IN_ADDR_ARPA:
        if len(labels) != 4 or not all(_decimal_octet(x) for x in labels):
            return None
        return IPv4Address(".".join(reversed(labels)))
    if len(labels) != 32 or not all(len(x) == 1 and x in "0123456789abcdef" for x in labels):
        return None
    return IPv6Address(int("".join(reversed(labels)), 16))


def _decimal_octet(label: str) -> bool:
    return label.isascii() and label.isdigit() and (label == "0" or not label.startswith("0")) \
        and int(label) <= 255


def reverse_name(address: IPAddress) -> Name:
    """The PTR owner name of an address (in-addr.arpa, or full-nibble ip6.arpa)."""
    return name_from_text(address.reverse_pointer)
