"""NodeState: what one node must program, derived purely from the objects it sees.

`build(objects, node)` merges EndpointSlices per Service (by label `kubernetes.io/service-name`),
keeps `addresses[0]` of each endpoint, deduplicates by IP:port (the non-terminating copy wins),
resolves each service port to the slice port of the same name and protocol (this is how a named
targetPort reaches its number), and categorises the endpoints exactly as kube-proxy does
(`categorize` below). One ServicePortState exists per (service port, IP family); the rule compilers
take the full state; equal states mean there is nothing to do. The daemon's StateBuilder also says
how a state differs from the one it built before (`NodeState.changes`), so a remembering compiler can
follow the few ports that changed instead of walking 10,000 (equal results either way).
"""

from __future__ import annotations

import bisect
import operator
import typing
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate, chain, compress
from typing import NamedTuple, TypeVar

from netkit.model.types import (
    AddressType,
    Endpoint,
    EndpointSlice,
    IPAddress,
    IPFamily,
    IPNetwork,
    Node,
    ObjectRef,
    Objects,
    Protocol,
    Service,
    ServicePort,
    ServiceType,
    TrafficPolicy,
    quick_init,
)

T = TypeVar("T")


@quick_init
@dataclass(frozen=True, slots=True, order=True)
class ServicePortName:
    """kube-proxy's name of a service port: `ns/svc:port`, or `ns/svc` when the port is unnamed."""

    ref: ObjectRef
    port: str

    def __str__(self) -> str:
        return f"{self.ref}:{self.port}" if self.port else str(self.ref)


@quick_init
@dataclass(frozen=True, slots=True, order=True)
class EndpointAddr:
    """One endpoint of one service port, as the dataplane sees it."""

    ip: IPAddress
    port: int
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    local: bool = False
    node_name: str | None = None
    zone: str | None = None
    hint_zones: tuple[str, ...] = ()
    hint_nodes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[{self.ip!s}]:{self.port}" if self.ip.version == 6 else f"{self.ip!s}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str = ""
    zone: str | None = None
    ips: tuple[IPAddress, ...] = ()


class Verdict(Enum):
    """What happens to traffic that has no endpoint to go to."""

    REJECT = "reject"  # no usable endpoint anywhere: refused at once (ICMP unreachable / TCP reset)
    DROP = "drop"  # a Local policy with no endpoint on this node: dropped (clients retry while the
    # load balancer's health check, which sees no local endpoint, steers them elsewhere)


@quick_init
@dataclass(frozen=True, slots=True)
class Traffic:
    """Where one kind of traffic to a service port goes, decided once here for every backend:
    `endpoints` (this node's own when `local`, i.e. the traffic policy is Local; already narrowed by
    topology hints and the ready / serving-terminating fallback), or a `verdict` when there are none."""

    endpoints: tuple[EndpointAddr, ...] = ()
    local: bool = False
    verdict: Verdict | None = None


def _uses_cluster(internal_local: bool, externally: bool) -> bool:
    # Externally reachable ports need cluster endpoints even with eTP=Local: pod and node
    # traffic to an external IP is short-circuited to the Cluster chain (kube-proxy does the same).
    return not internal_local or externally


def _uses_local(internal_local: bool, external_local: bool, externally: bool) -> bool:
    return internal_local or (externally and external_local)


class Uses(typing.Protocol):  # (typing's: `Protocol` here is the TCP/UDP/SCTP enum)
    """Which endpoint lists a service port needs (what `categorize` reads of it)."""

    @property
    def uses_cluster_endpoints(self) -> bool: ...

    @property
    def uses_local_endpoints(self) -> bool: ...


class _Uses(NamedTuple):
    uses_cluster_endpoints: bool
    uses_local_endpoints: bool


@quick_init
@dataclass(frozen=True, slots=True)
class ServicePortState:
    name: ServicePortName
    family: IPFamily
    protocol: Protocol
    cluster_ip: IPAddress
    port: int
    node_port: int | None = None
    external_ips: tuple[IPAddress, ...] = ()
    load_balancer_ips: tuple[IPAddress, ...] = ()
    source_ranges: tuple[IPNetwork, ...] = ()
    affinity_timeout: int | None = None
    external_policy_local: bool = False
    internal_policy_local: bool = False
    health_check_node_port: int | None = None
    endpoints: tuple[EndpointAddr, ...] = ()  # every endpoint known (deduplicated, kube-proxy's order)
    cluster_endpoints: tuple[EndpointAddr, ...] = ()
    local_endpoints: tuple[EndpointAddr, ...] = ()
    has_endpoints: bool = False  # any usable endpoint anywhere (decides REJECT vs DROP)
    annotations: tuple[tuple[str, str], ...] = ()  # the Service's (per-service options, e.g. IPVS scheduler)

    @property
    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.external_ips or self.load_balancer_ips)

    @property
    def uses_cluster_endpoints(self) -> bool:
        return _uses_cluster(self.internal_policy_local, self.externally_accessible)

    @property
    def uses_local_endpoints(self) -> bool:
        return _uses_local(self.internal_policy_local, self.external_policy_local, self.externally_accessible)

    @property
    def internal(self) -> Traffic:
        """Traffic from pods and from the node to the clusterIP (internalTrafficPolicy)."""
        return self._traffic(self.internal_policy_local)

    @property
    def external(self) -> Traffic:
        """Traffic to the nodePort, external IPs and load-balancer IPs (externalTrafficPolicy).
        Pods and the node itself reaching those addresses use the cluster endpoints even with a
        Local policy, as in kube-proxy: that short-circuit is the backend's routing, not a policy."""
        return self._traffic(self.external_policy_local)

    def _traffic(self, local: bool) -> Traffic:
        if not self.has_endpoints:
            return Traffic(local=local, verdict=Verdict.REJECT)
        endpoints = self.local_endpoints if local else self.cluster_endpoints
        if not endpoints:
            return Traffic(local=local, verdict=Verdict.DROP)
        return Traffic(endpoints, local)

    @property
    def reachable_endpoints(self) -> tuple[EndpointAddr, ...]:
        """Union of cluster and local endpoints, in `endpoints` order (both lists are made of the very
        objects of `endpoints`, so identity decides membership)."""
        wanted = {id(e) for e in self.cluster_endpoints} | {id(e) for e in self.local_endpoints}
        return tuple(e for e in self.endpoints if id(e) in wanted)

    @property
    def key(self) -> tuple[ServicePortName, Protocol]:
        return (self.name, self.protocol)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class NodeState:
    node: NodeInfo
    ports: tuple[ServicePortState, ...] = ()
    # From StateBuilder: how this state differs from the one it built before (not part of the value).
    changes: PortChanges | None = field(default=None, compare=False, hash=False, repr=False)

    def family(self, family: IPFamily) -> tuple[ServicePortState, ...]:
        return tuple(p for p in self.ports if p.family is family)


@dataclass(frozen=True, slots=True)
class PortChanges:
    """How a NodeState differs from `base`, the state built just before it (held weakly, so states do
    not chain): the ports of `base` that are not in it and its ports that were not in `base`, both by
    identity, in port order. Every other port is the very object it was in `base`. A Service is built
    whole: all its ports go, and all its ports come, together."""

    base: weakref.ref[NodeState]
    gone: tuple[ServicePortState, ...]
    came: tuple[ServicePortState, ...]

    def applies_to(self, previous: NodeState | None) -> bool:
        return previous is not None and self.base() is previous


def build(objects: Objects, node_name: str = "", extra_node_ips: Sequence[IPAddress] = ()) -> NodeState:
    """The NodeState of `objects` as seen from node `node_name` (pure)."""
    return StateBuilder().build(objects, node_name, extra_node_ips)


@dataclass(slots=True)
class _Memo:
    service: Service
    slices: tuple[EndpointSlice, ...]
    node: NodeInfo
    ports: tuple[ServicePortState, ...]


_PORTS = operator.attrgetter("ports")
_PATCH_LIMIT = 64  # objects replaced between two builds that are followed one by one (else: regroup all)
Key = tuple[str, str]


class StateBuilder:
    """`build` with a memory, for the daemon, which rebuilds the state of 10,000 services after every
    change of one. A Service whose object and EndpointSlices are the very same objects as last time
    (the store keeps unchanged objects as they are), seen from the same node, gets the very same
    ServicePortState objects back — so the compiler can recognise them by identity and reuse what it
    made of them. The result equals what `build` gives; only the work differs.

    When only a few objects changed (the usual sync), only their Services are looked at: the store's
    tuples are compared with the previous ones object by object in C (`compress`), the few that differ
    name the Services to build again, and the result says which ports went and came (`changes`)."""

    def __init__(self) -> None:
        self._memo: dict[Key, _Memo] = {}
        self._node: NodeInfo | None = None
        # The store hands back the very same tuple of a kind that did not change: the services by
        # key in name order, and the slices by service, are then kept (and patched for a few objects).
        self._services_in: tuple[Service, ...] | None = None
        self._services: dict[Key, Service] = {}
        self._keys: list[Key] = []
        self._slices_in: tuple[EndpointSlice, ...] | None = None
        self._by_service: dict[Key, list[EndpointSlice]] = {}
        # The proxied services' entries in key order (what the ports tuple is made of), and the last state.
        self._entry_keys: list[Key] = []
        self._entries: list[_Memo] = []
        self._flat: list[ServicePortState] = []  # the last state's ports
        self._starts: list[int] = []  # where each entry's ports start in it
        self._last: NodeState | None = None  # the state built last (its ports are all in the memo anyway)

    def build(self, objects: Objects, node_name: str = "", extra_node_ips: Sequence[IPAddress] = ()) -> NodeState:
        node = _node_info(objects.nodes, node_name, extra_node_ips)
        if node == self._node:  # one comparison here, identity checks per service below
            node = self._node
        same_node, self._node = node is self._node, node
        services = self._follow_services(objects.services)
        slices = self._follow_slices(objects.slices)
        last = self._last
        if same_node and services is not None and slices is not None and last is not None:
            state = self._patch(last, services | slices, node)
        else:
            state = self._build_all(node)
        self._last = state
        return state

    def _build_all(self, node: NodeInfo) -> NodeState:
        memo: dict[Key, _Memo] = {}
        keys: list[Key] = []
        entries: list[_Memo] = []
        previous = self._memo
        # Services in name order, each one's ports already in order: the state needs no final sort.
        for key in self._keys:
            entry = self._entry(key, previous.get(key), node)
            if entry is not None:
                memo[key] = entry
                keys.append(key)
                entries.append(entry)
        self._memo, self._entry_keys, self._entries = memo, keys, entries
        return NodeState(node, self._flatten())

    def _flatten(self) -> tuple[ServicePortState, ...]:
        """Every entry's ports in order, and where each entry's ports start (all C loops)."""
        self._flat = list(chain.from_iterable(map(_PORTS, self._entries)))
        self._starts = list(accumulate(map(len, map(_PORTS, self._entries)), initial=0))
        return tuple(self._flat)

    def _patch(self, last: NodeState, affected: set[Key], node: NodeInfo) -> NodeState:
        """The state of the few services in `affected` built again, every other entry kept."""
        gone: list[ServicePortState] = []
        came: list[ServicePortState] = []
        keys, entries = self._entry_keys, self._entries
        in_place: list[tuple[int, _Memo]] = []  # entries replaced by as many ports
        reshaped = False  # an entry came, went or changed its number of ports
        for key in sorted(affected):
            old = self._memo.get(key)
            new = self._entry(key, old, node)
            if new is old:
                continue
            i = bisect.bisect_left(keys, key)
            if old is not None:
                gone.extend(old.ports)
                if new is None:
                    del keys[i], entries[i], self._memo[key]
                    reshaped = True
                    continue
                entries[i] = new
                if len(new.ports) == len(old.ports):
                    in_place.append((i, new))
                else:
                    reshaped = True
            else:
                assert new is not None
                keys.insert(i, key)
                entries.insert(i, new)
                reshaped = True
            self._memo[key] = new
            came.extend(new.ports)
        if not (gone or came):
            ports = last.ports
        elif reshaped:
            ports = self._flatten()
        else:
            for i, entry in in_place:
                self._flat[self._starts[i]:self._starts[i] + len(entry.ports)] = entry.ports
            ports = tuple(self._flat)
        return NodeState(node, ports, PortChanges(weakref.ref(last), tuple(gone), tuple(came)))

    def _entry(self, key: Key, old: _Memo | None, node: NodeInfo) -> _Memo | None:
        """The service's entry: `old` when its objects are the very same, None when it is not proxied."""
        svc = self._services.get(key)
        if svc is None:
            return None
        found = self._by_service.get(key, [])
        if len(found) > 1:
            found = slices_over_endpoints(found)
            found = sorted(found, key=_slice_order)
        if old is not None and old.service is svc and old.node is node and _same_objects(old.slices, found):
            return old
        if not svc.proxied:
            return None
        return _Memo(svc, tuple(found), node, _service_ports(svc, found, node))

    def _follow_services(self, services: tuple[Service, ...]) -> set[Key] | None:
        """Keep the services by key: the keys of the services that came, went or changed, or None
        when they were all read again (the first build, many changes, a Service given twice)."""
        old, self._services_in = self._services_in, services
        if services is old:
            return set()
        diff = _diff(old, services) if len(self._services) == (len(old) if old is not None else -1) else None
        if diff is not None:
            gone, came = diff
            keys = {(s.ref.namespace, s.ref.name) for s in (*gone, *came)}
            for s in gone:
                self._services.pop((s.ref.namespace, s.ref.name), None)
            for s in came:
                self._services[(s.ref.namespace, s.ref.name)] = s
            if len(self._services) == len(services):  # still no key given twice
                for key in sorted(keys):
                    i = bisect.bisect_left(self._keys, key)
                    listed = i < len(self._keys) and self._keys[i] == key
                    if key in self._services and not listed:
                        self._keys.insert(i, key)
                    elif key not in self._services and listed:
                        del self._keys[i]
                return keys
        # The same Service given twice (two manifest files): the last one wins, as with kubectl apply.
        self._services = {(svc.ref.namespace, svc.ref.name): svc for svc in services}
        self._keys = sorted(self._services)
        return None

    def _follow_slices(self, slices: tuple[EndpointSlice, ...]) -> set[Key] | None:
        """Keep the slices grouped by (namespace, service name): the services whose slices came, went
        or changed, or None when they were all grouped again."""
        old, self._slices_in = self._slices_in, slices
        if slices is old:
            return set()
        diff = _diff(old, slices)
        if diff is not None:
            gone, came = diff
            for a in gone:
                group = self._by_service[(a.ref.namespace, a.service_name)]
                del group[next(i for i, x in enumerate(group) if x is a)]
            for b in came:
                self._by_service.setdefault((b.ref.namespace, b.service_name), []).append(b)
            return {(x.ref.namespace, x.service_name) for x in (*gone, *came)}
        # Plain (namespace, name) tuples as keys: hashing them is C code, hashing ObjectRef is not.
        grouped: dict[Key, list[EndpointSlice]] = defaultdict(list)
        for s in slices:
            grouped[(s.ref.namespace, s.service_name)].append(s)
        self._by_service = dict(grouped)
        return None


def _diff(old: Sequence[T] | None, new: Sequence[T]) -> tuple[list[T], list[T]] | None:
    """(objects of `old` not in `new`, objects of `new` not in `old`), by identity, when at most
    _PATCH_LIMIT differ; else None. The walks are C code: position by position for equal lengths
    (an object replaced in place), else by sets of identities."""
    if old is None:
        return None
    if len(old) == len(new):
        at = list(compress(range(len(new)), map(operator.is_not, old, new)))
        if len(at) > _PATCH_LIMIT:
            return None
        return [old[i] for i in at], [new[i] for i in at]
    if abs(len(old) - len(new)) > _PATCH_LIMIT:
        return None
    before, after = dict(zip(map(id, old), old, strict=True)), dict(zip(map(id, new), new, strict=True))
    gone, came = before.keys() - after.keys(), after.keys() - before.keys()
    if len(gone) + len(came) > _PATCH_LIMIT:
        return None
    return list(map(before.__getitem__, gone)), list(map(after.__getitem__, came))


def _same_objects(old: tuple[EndpointSlice, ...], new: list[EndpointSlice]) -> bool:
    if len(old) != len(new):
        return False
    if len(new) == 1:  # the common case, without a generator
        return old[0] is new[0]
    return all(a is b for a, b in zip(old, new, strict=True))


def slices_over_endpoints(found: list[EndpointSlice]) -> list[EndpointSlice]:
    """A Service's EndpointSlices, without the ones made from its v1 Endpoints when it has real
    slices as well: kube-proxy reads only EndpointSlices, and a `kubectl get svc,ep,endpointslices`
    dump holds both views of the same endpoints (merged, an endpoint that left one view would stay)."""
    legacy = [s for s in found if s.from_legacy_endpoints]
    if not legacy or len(legacy) == len(found):
        return found
    return [s for s in found if not s.from_legacy_endpoints]


def _slice_order(s: EndpointSlice) -> str:
    return s.ref.name


def _service_ports(svc: Service, slices: Sequence[EndpointSlice], node: NodeInfo) -> tuple[ServicePortState, ...]:
    out = []
    for fam_ip in svc.cluster_ips:
        family = IPFamily.of(fam_ip)
        for sp in svc.ports:
            out.append(_port_state(svc, sp, fam_ip, family, slices, node))
    out.sort(key=lambda p: (p.name.port, p.protocol.value, p.family.value))
    return tuple(out)


def _node_info(nodes: Iterable[Node], name: str, extra_ips: Sequence[IPAddress]) -> NodeInfo:
    me = next((n for n in nodes if n.name == name), None)
    ips = tuple(dict.fromkeys([*extra_ips, *(me.ips if me else ())]))
    return NodeInfo(name, me.zone if me else None, ips)


def _port_state(svc: Service, sp: ServicePort, cluster_ip: IPAddress, family: IPFamily,
                slices: Sequence[EndpointSlice], node: NodeInfo) -> ServicePortState:
    def same(addrs: Iterable[IPAddress]) -> tuple[IPAddress, ...]:
        return tuple(a for a in addrs if IPFamily.of(a) is family)

    externally = bool(sp.node_port or svc.external_ips or svc.load_balancer_ips)
    etp_local = externally and svc.external_traffic_policy is TrafficPolicy.LOCAL and (
        svc.type in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER) or bool(svc.external_ips))
    hcnp = svc.health_check_node_port if etp_local and svc.type is ServiceType.LOAD_BALANCER else None
    itp_local = svc.internal_traffic_policy is TrafficPolicy.LOCAL
    external_ips, lb_ips = same(svc.external_ips), same(svc.load_balancer_ips)
    accessible = bool(sp.node_port or external_ips or lb_ips)  # the port's externally_accessible
    endpoints = merge_endpoints(slices, sp, family, node.name)
    # What categorize reads of the port, without making it twice (10,000 ports at 10k services).
    uses = _Uses(_uses_cluster(itp_local, accessible), _uses_local(itp_local, etp_local, accessible))
    cluster, local, has_any = categorize(endpoints, uses, node.zone, node.name)
    return ServicePortState(
        name=ServicePortName(svc.ref, sp.name),
        family=family,
        protocol=sp.protocol,
        cluster_ip=cluster_ip,
        port=sp.port,
        node_port=sp.node_port,
        external_ips=external_ips,
        load_balancer_ips=lb_ips,
        source_ranges=tuple(n for n in svc.load_balancer_source_ranges if IPFamily.of(n) is family),
        affinity_timeout=svc.session_affinity_timeout,
        external_policy_local=etp_local,
        internal_policy_local=itp_local,
        health_check_node_port=hcnp,
        endpoints=endpoints,
        cluster_endpoints=cluster,
        local_endpoints=local,
        has_endpoints=has_any,
        annotations=svc.annotations,
    )


def merge_endpoints(slices: Sequence[EndpointSlice], sp: ServicePort, family: IPFamily,
                    node_name: str) -> tuple[EndpointAddr, ...]:
    """The endpoints of one service port across all its slices of one family.

    A slice port matches the service port by name and protocol. Only `addresses[0]` counts.
    Duplicates by IP:port keep the non-terminating copy (an endpoint moving between slices).
    """
    want = AddressType.IPV4 if family is IPFamily.IPV4 else AddressType.IPV6
    # Keyed by the "IP:port" ("[IP]:port") text, one per (IP, port) of a family: kube-proxy's order
    # (see below), and a str is hashed in C, an address in Python.
    found: dict[str, EndpointAddr] = {}
    for s in slices:
        if s.address_type is not want:
            continue
        port = next((p for p in s.ports if p.name == sp.name and p.protocol is sp.protocol), None)
        if port is None:
            continue
        for e in s.endpoints:
            addr = _endpoint_addr(e, port.port, node_name)
            key = str(addr)
            old = found.get(key)
            if old is None or (old.terminating and not addr.terminating):
                found[key] = addr
    return tuple(map(found.__getitem__, sorted(found)))


# kube-proxy's endpoint order: by the endpoint's "IP:port" ("[IP]:port") string, so 10.0.0.10:80
# comes before 10.0.0.2:80. Rules then list endpoints exactly as kube-proxy's do, and a ruleset
# kube-proxy wrote compares clean against netkit's (the probabilities follow the position).


def _endpoint_addr(e: Endpoint, port: int, node_name: str) -> EndpointAddr:
    # Positional: 100,000 of them at 10k services (the fields' order: EndpointAddr above).
    return EndpointAddr(e.addresses[0], port, e.ready, e.serving, e.terminating,
                        bool(node_name) and e.node_name == node_name, e.node_name, e.zone, e.hint_zones,
                        e.hint_nodes)


def categorize(endpoints: Sequence[EndpointAddr], sp: Uses, node_zone: str | None,
               node_name: str = "") -> tuple[tuple[EndpointAddr, ...], tuple[EndpointAddr, ...], bool]:
    """Split a port's endpoints into (cluster, local, has_any) — kube-proxy's CategorizeEndpoints.

    - cluster: only when some traffic uses the Cluster policy. Ready endpoints, narrowed to this
      node (hints.forNodes) or zone (hints.forZones) when topology hints apply (`topology_mode`);
      if none is ready, the serving and terminating ones (so a rolling update does not drop traffic).
    - local: only when some traffic uses a Local policy. Ready endpoints on this node; if none,
      serving-terminating ones on this node. Decided independently of cluster.
    - has_any: some endpoint is usable anywhere in the cluster; False makes the service REJECT,
      True with an empty list makes a Local policy DROP.
    """
    cluster: tuple[EndpointAddr, ...] = ()
    has_any = False
    if sp.uses_cluster_endpoints:
        mode = topology_mode(endpoints, node_zone, node_name)
        cluster = tuple(e for e in endpoints if e.ready and (
            mode is None or (node_name in e.hint_nodes if mode is Topology.NODE else node_zone in e.hint_zones)))
        if not cluster:
            cluster = tuple(e for e in endpoints if e.serving and e.terminating)
        has_any = bool(cluster)
    if not sp.uses_local_endpoints:
        return cluster, (), has_any
    has_any = has_any or any(e.ready or (e.serving and e.terminating) for e in endpoints)
    local = tuple(e for e in endpoints if e.local and e.ready)
    if not local:
        local = tuple(e for e in endpoints if e.local and e.serving and e.terminating)
    return cluster, local, has_any


class Topology(Enum):
    """Which topology hints narrow a port's Cluster endpoints (kube-proxy's topologyModeFromHints)."""

    NODE = "PreferSameNode"  # hints.forNodes (trafficDistribution PreferSameNode)
    ZONE = "PreferSameZone"  # hints.forZones (PreferClose / PreferSameZone, topology-aware routing)


def topology_mode(endpoints: Sequence[EndpointAddr], node_zone: str | None, node_name: str) -> Topology | None:
    """Node hints count if every ready endpoint has one and one of them names this node; otherwise
    zone hints, if every ready endpoint has one and one names this node's zone; otherwise none."""
    ready = [e for e in endpoints if e.ready]
    if not ready:
        return None
    if node_name and all(e.hint_nodes for e in ready) and any(node_name in e.hint_nodes for e in ready):
        return Topology.NODE
    if can_use_topology(ready, node_zone):
        return Topology.ZONE
    return None


def can_use_topology(endpoints: Sequence[EndpointAddr], node_zone: str | None) -> bool:
    """Zone hints count only if every ready endpoint has one and one of them names this zone."""
    if node_zone is None:
        return False
    found = False
    for e in endpoints:
        if not e.ready:
            continue
        if not e.hint_zones:
            return False
        found = found or node_zone in e.hint_zones
    return found
