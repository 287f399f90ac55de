"""The cluster view: an index of Services, EndpointSlices and Pods shaped for answering DNS queries.

`build(objects, options)` runs once per change of the cluster and does all the work a query would
otherwise repeat: it merges a service's EndpointSlices, keeps the ready endpoints (readiness unset =
ready; every endpoint when the service publishes not-ready addresses), names each endpoint (its
`hostname`, else its address with dashes, as CoreDNS does), and builds the reverse map from cluster
addresses to names. A View is a value: the resolver only reads it, and the server swaps a whole View
in at once, so a query never sees half an update.

`Views` builds a cluster's successive views and makes each rebuild cost what changed: a service's
Entry is the previous one when its Service and EndpointSlices are the very objects it was built from
(the reflectors keep an unchanged object as the one they held, netkit.sources.reflector), and a
reverse name list equal to the previous view's is the previous one. The old view answers while the
new one is built, so both are held for a moment; they share all but the new maps and the changed
services (at 10,000 Services and 50,000 Pods, tracemalloc counts ~8 MiB for the new view beside the
old one). What `Views.build` returns equals what `build` returns for the same objects.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from netkit.dns.names import Name, dashed, name_from_text, reverse_name
from netkit.model.state import slices_over_endpoints
from netkit.model.types import Endpoint, EndpointSlice, IPAddress, Objects, Service, ServiceType

MAX_TTL = 3600


class PodMode(enum.Enum):
    """CoreDNS's `pods` option: no pod records, any well-formed address, or only existing pods."""

    DISABLED = "disabled"
    INSECURE = "insecure"
    VERIFIED = "verified"


@dataclass(frozen=True, slots=True)
class Options:
    zone: Name = ("cluster", "local")
    ttl: int = 30
    pods: PodMode = PodMode.INSECURE  # kubeadm's Corefile: `pods insecure`
    loadbalance: bool = True  # shuffle A/AAAA answers (CoreDNS's `loadbalance`); done by the engine
    local_ips: tuple[IPAddress, ...] = ()  # the server's own addresses: finds its Service for `NS`
    autopath: bool = False  # CoreDNS's `autopath @kubernetes` (netkit.dns.autopath)
    autopath_search: tuple[Name, ...] = ()  # the search domains of the server's resolv.conf
    endpoint_pod_names: bool = False  # CoreDNS's `endpoint_pod_names`: an endpoint without hostname is named by its pod

    def __post_init__(self) -> None:
        if self.autopath and self.pods is not PodMode.VERIFIED:
            raise ValueError("autopath @kubernetes needs pods verified (it finds the client's pod by its address)")
        if not 0 <= self.ttl <= MAX_TTL:
            raise ValueError(f"ttl {self.ttl} is outside 0..{MAX_TTL}")
        if not self.zone:
            raise ValueError("the cluster zone cannot be the root")


class Kind(enum.Enum):
    CLUSTER_IP = "ClusterIP"
    HEADLESS = "Headless"
    EXTERNAL_NAME = "ExternalName"


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    proto: str  # "tcp", "udp", "sctp"
    port: int


@dataclass(frozen=True, slots=True)
class Host:
    """One DNS name below a headless service and the ready addresses behind it."""

    label: str
    addresses: tuple[IPAddress, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """A service as DNS sees it."""

    name: Name  # <svc>.<ns>.svc.<zone>
    kind: Kind
    addresses: tuple[IPAddress, ...] = ()  # cluster IPs
    ports: tuple[Port, ...] = ()  # service ports, or endpoint ports when headless (name "" when unnamed)
    hosts: Mapping[str, Host] = field(default_factory=dict)  # ready endpoints: label → Host
    endpoints: int = 0  # ready endpoint addresses (with repeats across hostnames), for SRV weights
    target: Name | None = None  # ExternalName only

    @property
    def exists(self) -> bool:
        """A headless service without a ready endpoint has no name (NXDOMAIN)."""
        return self.kind is not Kind.HEADLESS or bool(self.hosts)


class PodAddresses:
    """The (namespace, address) pairs of the known pods (`pods verified`): `(ns, addr) in pods`. Held
    as address → namespace (a frozenset of namespaces for an address pods of several share), the
    namespace being the objects' own string, so a view holds no pair per pod: one dict entry each,
    and a rebuild allocates nothing per pod that outlives it."""

    __slots__ = ("_found",)

    def __init__(self, pairs: Iterable[tuple[str, IPAddress]] = ()) -> None:
        found: dict[IPAddress, str | frozenset[str]] = {}
        for namespace, addr in pairs:
            have = found.setdefault(addr, namespace)
            if isinstance(have, str):
                if have != namespace:
                    found[addr] = frozenset((have, namespace))
            elif namespace not in have:
                found[addr] = have | {namespace}
        self._found = found

    def __contains__(self, pair: object) -> bool:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return False
        have = self._found.get(pair[1])
        return have == pair[0] if isinstance(have, str) else have is not None and pair[0] in have

    def __len__(self) -> int:
        return sum(1 if isinstance(n, str) else len(n) for n in self._found.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PodAddresses) and self._found == other._found

    __hash__ = None  # type: ignore[assignment]  # equal by content, as the view's other maps

    def __repr__(self) -> str:
        return f"PodAddresses({len(self)} pairs)"


@dataclass(frozen=True, slots=True)
class View:
    options: Options
    serial: int
    services: Mapping[tuple[str, str], Entry]  # (namespace, name) → Entry
    namespaces: frozenset[str]
    reverse: Mapping[IPAddress, tuple[Name, ...]]
    pods: PodAddresses  # (namespace, address) of known pods (pods verified)
    nameservers: tuple[IPAddress, ...] = ()  # the addresses of ns.dns.<zone>
    pod_namespaces: Mapping[IPAddress, str] = field(default_factory=dict)  # pod IP → namespace (autopath)


def build(objects: Objects, options: Options, serial: int = 1) -> View:
    return Views(options).build(objects, serial)


_Made = tuple[tuple[str, str], Service, list[EndpointSlice], Entry]


class Views:
    """Successive views of one cluster with one set of options, each built from the objects alone
    (as `build`), the previous one's unchanged parts reused. Builds must not overlap."""

    def __init__(self, options: Options) -> None:
        self.options = options
        # (namespace, name) → that key, the Service and EndpointSlices its entry was built from, the entry
        self._made: dict[tuple[str, str], _Made] = {}
        self._reverse: Mapping[IPAddress, tuple[Name, ...]] = {}

    def build(self, objects: Objects, serial: int = 1) -> View:
        slices = _slices_by_service(objects.slices)
        made: dict[tuple[str, str], _Made] = {}
        for svc in objects.services:
            key = (svc.ref.namespace, svc.ref.name)
            mine = slices.get(key, [])
            before = self._made.get(key)
            if before is not None and before[1] is svc and _same(before[2], mine):
                made[before[0]] = before  # nothing new is kept for it, not even its key
            else:
                key = before[0] if before is not None else key
                made[key] = (key, svc, mine, _entry(svc, mine, self.options))
        del slices
        self._made = made
        services = {key: entry for key, (_, _, _, entry) in made.items()}
        reverse = self._reverse = MappingProxyType(_reverse(services.values(), self._reverse))
        return View(
            options=self.options,
            serial=serial,
            services=MappingProxyType(services),
            namespaces=frozenset(_namespaces(objects)),
            reverse=reverse,
            pods=PodAddresses(_pods(objects)),
            nameservers=_nameservers(services, self.options.local_ips),
            pod_namespaces=MappingProxyType(_pod_namespaces(objects) if self.options.autopath else {}),
        )


def _same(before: list[EndpointSlice], now: list[EndpointSlice]) -> bool:
    return len(before) == len(now) and all(a is b for a, b in zip(before, now, strict=True))


def _slices_by_service(slices: Iterable[EndpointSlice]) -> dict[tuple[str, str], list[EndpointSlice]]:
    out: dict[tuple[str, str], list[EndpointSlice]] = {}
    for s in slices:
        out.setdefault((s.ref.namespace, s.service_name), []).append(s)
    return {k: slices_over_endpoints(v) if len(v) > 1 else v for k, v in out.items()}  # slices over v1 Endpoints


def _entry(svc: Service, slices: list[EndpointSlice], options: Options) -> Entry:
    name = (svc.ref.name, svc.ref.namespace, "svc", *options.zone)
    if svc.type is ServiceType.EXTERNAL_NAME:
        return Entry(name, Kind.EXTERNAL_NAME, target=name_from_text(svc.external_name or ""))
    hosts = _hosts(svc, slices, options.endpoint_pod_names)
    count = sum(len(h.addresses) for h in hosts.values())
    if svc.headless:
        ports = _unique(Port(p.name, p.protocol.lower, p.port) for s in slices for p in s.ports)
        return Entry(name, Kind.HEADLESS, ports=ports, hosts=hosts, endpoints=count)
    ports = tuple(Port(p.name, p.protocol.lower, p.port) for p in svc.ports)
    return Entry(name, Kind.CLUSTER_IP, addresses=svc.cluster_ips, ports=ports, hosts=hosts, endpoints=count)


def _hosts(svc: Service, slices: list[EndpointSlice], pod_names: bool) -> Mapping[str, Host]:
    """Ready endpoints grouped by DNS label, in slice order; addresses deduplicated."""
    grouped: dict[str, list[IPAddress]] = {}
    for s in slices:
        for ep in s.endpoints:
            if not (ep.ready or svc.publish_not_ready_addresses):
                continue
            for addr in ep.addresses:
                addrs = grouped.setdefault(_label(ep, addr, pod_names), [])
                if addr not in addrs:
                    addrs.append(addr)
    return MappingProxyType({label: Host(label, tuple(a)) for label, a in grouped.items()})


def _label(ep: Endpoint, addr: IPAddress, pod_names: bool) -> str:
    """CoreDNS's endpointHostname: the endpoint's hostname; with `endpoint_pod_names` else the name of
    its targetRef; else the address with dashes."""
    if ep.hostname:
        return ep.hostname
    if pod_names and ep.target_ref is not None and ep.target_ref.name:
        return ep.target_ref.name
    return dashed(addr)


def _unique(ports: Iterable[Port]) -> tuple[Port, ...]:
    return tuple(dict.fromkeys(ports))


def _namespaces(objects: Objects) -> Iterable[str]:
    yield from (n.name for n in objects.namespaces)
    yield from (s.ref.namespace for s in objects.services)
    yield from (s.ref.namespace for s in objects.slices)
    yield from (p.ref.namespace for p in objects.pods)


def _reverse(entries: Iterable[Entry], before: Mapping[IPAddress, tuple[Name, ...]],
             ) -> dict[IPAddress, tuple[Name, ...]]:
    """Cluster IPs → the service name; other ready endpoint addresses → their host names.

    As CoreDNS's serviceRecordForIP: a cluster IP names its (first) service alone; an address that is
    no cluster IP names every endpoint with it, of ClusterIP and headless services alike. A list of
    names equal to the one `before` is that one (one name per address is the rule: it is checked,
    and dropped, as it is made)."""
    services: dict[IPAddress, Name] = {}
    out: dict[IPAddress, tuple[Name, ...]] = {}
    for e in entries:
        for addr in e.addresses:
            services.setdefault(addr, e.name)
        for host in e.hosts.values():
            for addr in host.addresses:
                name = (host.label, *e.name)
                have = out.get(addr)
                if have is None:
                    out[addr] = _previous(before, addr, (name,))
                elif name not in have:
                    out[addr] = (*have, name)
    out.update((addr, _previous(before, addr, (name,))) for addr, name in services.items())
    return out


def _previous(before: Mapping[IPAddress, tuple[Name, ...]], addr: IPAddress,
              names: tuple[Name, ...]) -> tuple[Name, ...]:
    old = before.get(addr)
    return old if old == names and old is not None else names


def _nameservers(services: Mapping[tuple[str, str], Entry], local: tuple[IPAddress, ...]) -> tuple[IPAddress, ...]:
    """The addresses of `ns.dns.<zone>`, found as CoreDNS's nsAddrs finds them: the Services with an
    endpoint on one of the server's own addresses (their cluster IPs; a headless one's endpoint
    addresses), else the `kube-dns` Service of `kube-system` (files, or a server outside the cluster),
    else the server's own addresses."""
    mine = set(local)
    found = [e for e in services.values() if any(mine & set(h.addresses) for h in e.hosts.values())]
    if not found and ("kube-system", "kube-dns") in services:
        found = [services[("kube-system", "kube-dns")]]
    addrs = [a for e in found for a in (e.addresses if e.kind is Kind.CLUSTER_IP
                                        else [x for h in e.hosts.values() for x in h.addresses])]
    return tuple(dict.fromkeys(addrs)) or local


def _pod_namespaces(objects: Objects) -> dict[IPAddress, str]:
    """Each Pod's addresses → its namespace (the first Pod seen wins an address two share)."""
    out: dict[IPAddress, str] = {}
    for pod in objects.pods:
        for ip in pod.ips:
            out.setdefault(ip, pod.ref.namespace)
    return out


def _pods(objects: Objects) -> Iterable[tuple[str, IPAddress]]:
    for pod in objects.pods:
        yield from ((pod.ref.namespace, ip) for ip in pod.ips)
    for s in objects.slices:  # an endpoint's targetRef is a pod with that address
        for ep in s.endpoints:
            if ep.target_ref is not None:
                yield from ((ep.target_ref.namespace, a) for a in ep.addresses)


__all__ = ["Entry", "Host", "Kind", "Options", "PodAddresses", "PodMode", "Port", "View", "Views", "build",
           "reverse_name"]
