"""netkit's own types for the Kubernetes objects it reads.

Every value here is frozen and already validated: `netkit.model.k8s` is the only module that knows
the Kubernetes object shapes and turns a manifest or API object into these types (or reports why it
cannot). Everything after it — NodeState, the rule compilers, the DNS resolver — speaks these types.
Addresses are `ipaddress` objects, never strings.
"""

from __future__ import annotations

import enum
from dataclasses import MISSING, dataclass, fields
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TypeVar

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """A frozen dataclass's `__init__` made again, the same in every way but one: it calls
    `object.__setattr__` through a local name rather than looking it up for every field, as the
    generated one does — a third faster, for the classes made 100,000 times at 10,000 services
    (endpoints, their per-port copies, service ports). Plain fields only (defaults, no factories,
    all set by __init__, no __post_init__); a test compares the signature with the generated one."""
    own = fields(cls)  # type: ignore[arg-type]
    if "__post_init__" in cls.__dict__ or any(not f.init or f.kw_only or f.default_factory is not MISSING
                                              for f in own):
        raise TypeError(f"quick_init: {cls.__name__} has a field it cannot set plainly")
    defaults = {f"_d_{f.name}": f.default for f in own if f.default is not MISSING}
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}=_d_{f.name}" for f in own)
    body = "".join(f"        _set(self, {f.name!r}, {f.name})\n" for f in own)
    source = f"def make({', '.join(['_set', *defaults])}):\n    def __init__(self, {params}):\n{body}" \
             "    return __init__\n"
    scope: dict[str, object] = {}
    exec(source, {}, scope)  # as dataclasses itself makes __init__
    make = scope["make"]
    assert callable(make)
    init = make(object.__setattr__, *defaults.values())
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in own}, "return": None}
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class Protocol(enum.Enum):
    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"

    @property
    def lower(self) -> str:
        return _PROTO_LOWER[self]


_PROTO_LOWER = {p: p.value.lower() for p in Protocol}


class IPFamily(enum.Enum):
    IPV4 = "IPv4"
    IPV6 = "IPv6"

    @staticmethod
    def of(addr: IPAddress | IPNetwork) -> IPFamily:
        return IPFamily.IPV4 if addr.version == 4 else IPFamily.IPV6


class ServiceType(enum.Enum):
    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"
    EXTERNAL_NAME = "ExternalName"


class TrafficPolicy(enum.Enum):
    CLUSTER = "Cluster"
    LOCAL = "Local"


class AddressType(enum.Enum):
    IPV4 = "IPv4"
    IPV6 = "IPv6"
    FQDN = "FQDN"


# Labels that decide whether a Service is proxied at all (kube-proxy's selectors).
SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ZONE_LABEL = "topology.kubernetes.io/zone"
LAST_CHANGE_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"

DEFAULT_AFFINITY_TIMEOUT = 10800
MAX_AFFINITY_TIMEOUT = 86400


@quick_init
@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """namespace/name of an object."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str  # "" when the port is unnamed (allowed only for a single-port service)
    protocol: Protocol
    port: int
    target_port: int | str  # a number, or the name of a container port
    node_port: int | None = None
    app_protocol: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Service:
    ref: ObjectRef
    type: ServiceType = ServiceType.CLUSTER_IP
    cluster_ips: tuple[IPAddress, ...] = ()  # empty for headless and ExternalName services
    headless: bool = False  # spec.clusterIP == "None"
    ip_families: tuple[IPFamily, ...] = ()
    ports: tuple[ServicePort, ...] = ()
    external_ips: tuple[IPAddress, ...] = ()
    load_balancer_ips: tuple[IPAddress, ...] = ()  # status.loadBalancer.ingress[].ip
    load_balancer_source_ranges: tuple[IPNetwork, ...] = ()
    session_affinity_timeout: int | None = None  # None: no ClientIP affinity
    external_traffic_policy: TrafficPolicy = TrafficPolicy.CLUSTER
    internal_traffic_policy: TrafficPolicy = TrafficPolicy.CLUSTER
    health_check_node_port: int | None = None
    publish_not_ready_addresses: bool = False
    # Read by no proxy decision, as in kube-proxy (pkg/proxy/topology.go uses only the endpoints'
    # hints, which the EndpointSlice controller derives from it); kept for what the Service says.
    traffic_distribution: str | None = None
    external_name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)

    @property
    def externally_accessible(self) -> bool:
        """NodePort, externalIPs or load-balancer IPs make a service reachable from outside."""
        return (
            any(p.node_port for p in self.ports)
            or bool(self.external_ips)
            or bool(self.load_balancer_ips)
        )

    @property
    def proxied(self) -> bool:
        """kube-proxy ignores headless, ExternalName and other-proxy services."""
        return (
            not self.headless
            and self.type is not ServiceType.EXTERNAL_NAME
            and bool(self.cluster_ips)
            and self.label(SERVICE_PROXY_NAME_LABEL) is None
        )


@quick_init
@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[IPAddress, ...]  # FQDN slices carry no usable addresses and are dropped earlier
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    hostname: str | None = None
    node_name: str | None = None
    zone: str | None = None
    hint_zones: tuple[str, ...] = ()
    hint_nodes: tuple[str, ...] = ()  # hints.forNodes (trafficDistribution PreferSameNode)
    target_ref: ObjectRef | None = None  # the Pod, when known (DNS pod records)


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    protocol: Protocol
    port: int
    app_protocol: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class EndpointSlice:
    ref: ObjectRef
    service_name: str  # label kubernetes.io/service-name
    address_type: AddressType
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[EndpointPort, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    from_legacy_endpoints: bool = False

    @property
    def service(self) -> ObjectRef:
        return ObjectRef(self.ref.namespace, self.service_name)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    addresses: tuple[tuple[str, IPAddress], ...] = ()  # (type, address): InternalIP, ExternalIP
    labels: tuple[tuple[str, str], ...] = ()
    pod_cidrs: tuple[IPNetwork, ...] = ()  # spec.podCIDRs (detectLocalMode NodeCIDR)
    deleting: bool = False  # metadata.deletionTimestamp is set
    taints: tuple[str, ...] = ()  # spec.taints[].key (ToBeDeletedByClusterAutoscaler: not eligible)

    @property
    def zone(self) -> str | None:
        return dict(self.labels).get(ZONE_LABEL)

    @property
    def ips(self) -> tuple[IPAddress, ...]:
        return tuple(ip for _, ip in self.addresses)


@dataclass(frozen=True, slots=True)
class Pod:
    """Only what cluster DNS needs for verified pod records."""

    ref: ObjectRef
    ips: tuple[IPAddress, ...] = ()
    node_name: str | None = None


@dataclass(frozen=True, slots=True)
class Namespace:
    """Only its name: cluster DNS answers NODATA (not NXDOMAIN) for a namespace that exists."""

    name: str

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("", self.name)


KubeObject = Service | EndpointSlice | Node | Pod | Namespace


@dataclass(frozen=True, slots=True)
class Objects:
    """A complete view of the objects a node cares about, keyed for stable order."""

    services: tuple[Service, ...] = ()
    slices: tuple[EndpointSlice, ...] = ()
    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    namespaces: tuple[Namespace, ...] = ()

    @staticmethod
    def of(objs: list[KubeObject] | tuple[KubeObject, ...]) -> Objects:
        return Objects(
            services=tuple(o for o in objs if isinstance(o, Service)),
            slices=tuple(o for o in objs if isinstance(o, EndpointSlice)),
            nodes=tuple(o for o in objs if isinstance(o, Node)),
            pods=tuple(o for o in objs if isinstance(o, Pod)),
            namespaces=tuple(o for o in objs if isinstance(o, Namespace)),
        )
