"""API objects' JSON decoded straight into netkit's model, for the objects a list brings by the thousand.

`decode(raw, kind)` reads one Service or EndpointSlice (the JSON of one list item) with msgspec into
typed structs holding just the fields `netkit.model.k8s` reads — every other field (managedFields,
status conditions, …) is skipped by msgspec's C parser without being built — and turns them into the
same model objects `from_k8s` gives. It answers only for the common shape, which it checks as
`from_k8s` does (names, labels, addresses, ports, enums); for anything else — a type msgspec refuses,
an IPv6 or FQDN slice, externalIPs, session affinity, hints, a value `from_k8s` would refuse — it
answers None, and the caller reads the object with `from_k8s`, which judges it and words the error.
So what this module accepts is a subset of what `from_k8s` accepts, decoded alike
(tests/unit/test_apidecode.py), and every error is `from_k8s`'s.

At 10,000 Services × 10 endpoints this takes the EndpointSlice list's decoding from ~0.8 s (json,
then `from_k8s`) to ~0.55 s of CPU, most of what remains being the model's own objects.
"""

from __future__ import annotations

from typing import Any

import msgspec

from netkit.model.k8s import (
    _DNS_LABEL,
    _DNS_SUBDOMAIN,
    _IANA_SVC_NAME,
    _LABEL_KEY,
    _LABEL_VALUE,
    _interned,
    _members,
    ipv4_fast,
)
from netkit.model.types import (
    SERVICE_NAME_LABEL,
    AddressType,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    IPAddress,
    IPFamily,
    KubeObject,
    ObjectRef,
    Protocol,
    Service,
    ServicePort,
    ServiceType,
    TrafficPolicy,
)

# --- the fields netkit reads, typed (a wrong type is a msgspec.ValidationError: from_k8s judges it)


class _Meta(msgspec.Struct):
    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _ServicePort(msgspec.Struct):
    port: int
    name: str | None = None
    protocol: str | None = None
    targetPort: int | str | None = None  # noqa: N815 (the API's field names)
    nodePort: int | None = None  # noqa: N815
    appProtocol: str | None = None  # noqa: N815


class _ServiceSpec(msgspec.Struct):
    type: str | None = None
    clusterIP: str | None = None  # noqa: N815
    clusterIPs: list[str] | None = None  # noqa: N815
    ipFamilies: list[str] | None = None  # noqa: N815
    ports: list[_ServicePort] | None = None
    externalIPs: list[Any] | None = None  # noqa: N815
    loadBalancerSourceRanges: list[Any] | None = None  # noqa: N815
    sessionAffinity: str | None = None  # noqa: N815
    externalTrafficPolicy: str | None = None  # noqa: N815
    internalTrafficPolicy: str | None = None  # noqa: N815
    healthCheckNodePort: int | None = None  # noqa: N815
    publishNotReadyAddresses: bool | None = None  # noqa: N815
    trafficDistribution: str | None = None  # noqa: N815


class _LoadBalancer(msgspec.Struct):
    ingress: list[Any] | None = None


class _ServiceStatus(msgspec.Struct):
    loadBalancer: _LoadBalancer | None = None  # noqa: N815


class _Service(msgspec.Struct):
    metadata: _Meta
    spec: _ServiceSpec | None = None
    status: _ServiceStatus | None = None


class _Conditions(msgspec.Struct):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class _TargetRef(msgspec.Struct):
    kind: Any = None
    namespace: Any = None
    name: Any = None


class _Endpoint(msgspec.Struct):
    addresses: list[str] | None = None
    conditions: _Conditions | None = None
    hostname: str | None = None
    nodeName: str | None = None  # noqa: N815
    zone: str | None = None
    targetRef: _TargetRef | None = None  # noqa: N815
    hints: Any = None


class _EndpointPort(msgspec.Struct):
    port: int | None = None
    name: str | None = None
    protocol: str | None = None
    appProtocol: str | None = None  # noqa: N815


class _EndpointSlice(msgspec.Struct):
    metadata: _Meta
    addressType: str | None = None  # noqa: N815
    endpoints: list[_Endpoint] | None = None
    ports: list[_EndpointPort] | None = None


_SERVICE = msgspec.json.Decoder(_Service)
_SLICE = msgspec.json.Decoder(_EndpointSlice)


class _Refused(Exception):
    """Not the common shape: `from_k8s` reads it."""


def decode(raw: bytes | msgspec.Raw, kind: str) -> tuple[ObjectRef, list[KubeObject]] | None:
    """One Service or EndpointSlice as `from_k8s` decodes it, with its key (namespace/name as the
    object gives them: namespace "" when it has none), or None: `from_k8s` must read it."""
    try:
        obj: _Service | _EndpointSlice
        decoded: Service | EndpointSlice
        if kind == "EndpointSlice":
            obj = _SLICE.decode(raw)
            decoded = _slice(obj)
        elif kind == "Service":
            obj = _SERVICE.decode(raw)
            decoded = _service(obj)
        else:
            return None
    except (msgspec.ValidationError, _Refused):
        return None
    # the model's ref is the key when the namespace was given: one object, not two, per Service
    key = decoded.ref if obj.metadata.namespace else ObjectRef("", obj.metadata.name)
    return key, [decoded]


def _check(ok: object) -> None:
    if not ok:
        raise _Refused


def _ref(meta: _Meta, pattern: Any) -> ObjectRef:
    _check(pattern.match(meta.name))
    ns = meta.namespace
    if not ns:
        return ObjectRef("default", meta.name)
    _check(_DNS_LABEL.match(ns))
    return ObjectRef(ns, meta.name)


def _labels(values: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    if not values:
        return ()
    for key, val in values.items():
        _check(_LABEL_KEY.match(key) and _LABEL_VALUE.match(val) and len(val) <= 63)
    return tuple(sorted(values.items()))


def _annotations(values: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items())) if values else ()


def _enum(value: str | None, cls: Any, default: Any) -> Any:
    if not value:
        return default
    member = _members(cls).get(value)
    _check(member is not None)
    return member


def _port(value: int | None) -> int:
    _check(value is not None and 1 <= value <= 65535)
    assert value is not None
    return value


# --- Service ---------------------------------------------------------------------------------------


def _service(obj: _Service) -> Service:
    meta = obj.metadata
    ref = _ref(meta, _DNS_LABEL)
    spec = obj.spec or _ServiceSpec()
    stype: ServiceType = _enum(spec.type, ServiceType, ServiceType.CLUSTER_IP)
    lb = obj.status.loadBalancer if obj.status is not None else None
    _check(stype is not ServiceType.EXTERNAL_NAME and not spec.externalIPs and not spec.loadBalancerSourceRanges
           and spec.sessionAffinity in (None, "", "None") and not (lb is not None and lb.ingress))
    cluster_ips, headless = _cluster_ips(spec)
    hcnp = spec.healthCheckNodePort
    if hcnp is not None:
        _port(hcnp)
    return Service(ref, stype, cluster_ips, headless, _ip_families(spec, cluster_ips), _service_ports(spec, stype),
                   (), (), (), None, _policy(spec.externalTrafficPolicy), _policy(spec.internalTrafficPolicy), hcnp,
                   bool(spec.publishNotReadyAddresses), spec.trafficDistribution or None, None,
                   _labels(meta.labels), _annotations(meta.annotations))


def _cluster_ips(spec: _ServiceSpec) -> tuple[tuple[IPAddress, ...], bool]:
    raw = spec.clusterIPs or ([spec.clusterIP] if spec.clusterIP else [])
    _check(raw)
    if raw == ["None"]:
        return (), True
    ip = ipv4_fast(raw[0])
    _check(len(raw) == 1 and ip is not None and spec.clusterIP in (None, "", raw[0]))
    assert ip is not None
    return (ip,), False


def _ip_families(spec: _ServiceSpec, cluster_ips: tuple[IPAddress, ...]) -> tuple[IPFamily, ...]:
    derived = tuple(IPFamily.of(ip) for ip in cluster_ips)
    fams = tuple(_enum(v, IPFamily, None) for v in spec.ipFamilies or ())
    _check(None not in fams and not (fams and derived and fams[: len(derived)] != derived))
    return fams or derived


def _service_ports(spec: _ServiceSpec, stype: ServiceType) -> tuple[ServicePort, ...]:
    raw = spec.ports or []
    ports: list[ServicePort] = []
    seen: set[tuple[int, Protocol]] = set()
    names: set[str] = set()
    node_ports_allowed = stype in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER)
    for p in raw:
        name = p.name or ""
        _check((_DNS_LABEL.match(name) if name else len(raw) == 1) and name not in names)
        names.add(name)
        proto: Protocol = _enum(p.protocol, Protocol, Protocol.TCP)
        port = _port(p.port)
        _check((port, proto) not in seen)
        seen.add((port, proto))
        node_port = p.nodePort
        if node_port is not None:
            _check(_port(node_port) and node_ports_allowed)
        ports.append(ServicePort(name, proto, port, _target_port(p.targetPort, port), node_port,
                                 p.appProtocol or None))
    return tuple(ports)


def _target_port(value: int | str | None, default: int) -> int | str:
    if value is None or value == 0 or value == "":
        return default
    if isinstance(value, str):
        if not value.isdigit():
            _check(_IANA_SVC_NAME.match(value))
            return value
        value = int(value)
    return _port(value)


def _policy(value: str | None) -> TrafficPolicy:
    return _enum("Cluster" if value == "Global" else value, TrafficPolicy, TrafficPolicy.CLUSTER)  # type: ignore[no-any-return]


# --- EndpointSlice ---------------------------------------------------------------------------------


def _slice(obj: _EndpointSlice) -> EndpointSlice:
    meta = obj.metadata
    ref = _ref(meta, _DNS_SUBDOMAIN)
    labels = _labels(meta.labels)
    service = (meta.labels or {}).get(SERVICE_NAME_LABEL)
    _check(service and _DNS_LABEL.match(service) and obj.addressType == AddressType.IPV4.value)
    assert service is not None
    endpoints = tuple(_endpoint(e) for e in obj.endpoints or ())
    ports = tuple(EndpointPort(_port_name(p.name), _enum(p.protocol, Protocol, Protocol.TCP), _port(p.port),
                               p.appProtocol or None)
                  for p in obj.ports or () if p.port is not None)
    return EndpointSlice(ref, service, AddressType.IPV4, endpoints, ports, labels, _annotations(meta.annotations))


def _port_name(name: str | None) -> str:
    if name:
        _check(_DNS_LABEL.match(name))
    return name or ""


def _endpoint(e: _Endpoint) -> Endpoint:
    _check(e.addresses and e.hints is None and (not e.hostname or _DNS_LABEL.match(e.hostname)))
    addresses = []
    for text in e.addresses or ():
        address = ipv4_fast(text)
        if address is None:  # tested by identity: `None in addresses` calls ipaddress's __eq__ for each
            raise _Refused
        addresses.append(address)
    cond = e.conditions
    ready = cond is None or cond.ready is not False
    serving = ready if cond is None or cond.serving is None else cond.serving
    target = e.targetRef
    pod = ObjectRef(str(target.namespace or ""), target.name) \
        if target is not None and target.kind == "Pod" and isinstance(target.name, str) else None
    # Positional (Endpoint's field order), as k8s._plain_endpoint: 100,000 of them at 10k services.
    return Endpoint(tuple(addresses), ready, serving, cond is not None and cond.terminating is True,
                    e.hostname or None, _interned(e.nodeName), _interned(e.zone), (), (), pod)
