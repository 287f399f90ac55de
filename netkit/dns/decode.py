"""What cluster DNS keeps of an API object: the fields its answers read, with repeated values shared.

A reflector hands every object to `decode` (netkit.sources.reflector's `decode` hook). It is read
and checked as `netkit.model.from_k8s` reads it for `netkit run` — the same objects are refused —
and then reduced to what `netkit.dns.view.build` and `netkit.dns.scope` read:

- Service: namespace/name, type, cluster IPs, headless, ports (name, protocol, number),
  publishNotReadyAddresses, externalName, labels;
- EndpointSlice: namespace/name, service name, address type, endpoints (addresses, ready, hostname,
  the targetRef's namespace/name), ports (name, protocol, number), labels;
  (`decode_unlabelled`, used unless the `labels` option selects by them, keeps no labels);
- Pod: namespace/name and IPs; Namespace: its name.

Everything else (annotations, node ports, traffic policies, an endpoint's node, zone, serving and
terminating conditions and hints, a pod's node) is dropped. Values that repeat across objects —
namespaces, label keys and values, port names, ports, addresses (a pod's address is also its
endpoint's), object references — are interned: equal values are one object. The intern table is a
plain dict that is emptied when it grows past `INTERN_LIMIT`, so churn cannot grow it without bound
(an emptied table costs sharing for objects decoded later, never correctness).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from netkit.model import from_k8s
from netkit.model.types import (
    Endpoint,
    EndpointPort,
    EndpointSlice,
    KubeObject,
    Namespace,
    ObjectRef,
    Pod,
    Service,
    ServicePort,
)

INTERN_LIMIT = 1 << 20
T = TypeVar("T")
_table: dict[Any, Any] = {}


def shared(value: T) -> T:
    """The one object equal to `value` (hashable) that earlier calls returned."""
    found = _table.get(value)
    if found is not None:
        return found  # type: ignore[no-any-return]
    if len(_table) >= INTERN_LIMIT:
        _table.clear()
    _table[value] = value
    return value


def _ref(ref: ObjectRef) -> ObjectRef:
    return shared(ObjectRef(sys.intern(ref.namespace), sys.intern(ref.name)))


def _labels(labels: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return shared(tuple((sys.intern(k), sys.intern(v)) for k, v in labels))


def decode(obj: Mapping[str, Any]) -> list[KubeObject]:
    """`from_k8s(obj)` (raises InvalidObject alike), reduced to what cluster DNS reads."""
    return [_slim(o, True) for o in from_k8s(obj, "api")]


def decode_unlabelled(obj: Mapping[str, Any]) -> list[KubeObject]:
    """`decode`, without the labels too (they are read only to select with the `labels` option)."""
    return [_slim(o, False) for o in from_k8s(obj, "api")]


def _slim(obj: KubeObject, labels: bool) -> KubeObject:
    if isinstance(obj, Pod):
        return Pod(_ref(obj.ref), tuple(shared(ip) for ip in obj.ips))
    if isinstance(obj, Service):
        return _service(obj, labels)
    if isinstance(obj, EndpointSlice):
        return _slice(obj, labels)
    if isinstance(obj, Namespace):
        return Namespace(sys.intern(obj.name))
    return obj


def _service(svc: Service, labels: bool) -> Service:
    ports = tuple(shared(ServicePort(sys.intern(p.name), p.protocol, p.port, p.port)) for p in svc.ports)
    return Service(_ref(svc.ref), svc.type, tuple(shared(ip) for ip in svc.cluster_ips), svc.headless,
                   ports=shared(ports), publish_not_ready_addresses=svc.publish_not_ready_addresses,
                   external_name=svc.external_name, labels=_labels(svc.labels) if labels else ())


def _slice(s: EndpointSlice, labels: bool) -> EndpointSlice:
    endpoints = tuple(Endpoint(tuple(shared(a) for a in ep.addresses), ep.ready,
                               hostname=ep.hostname and sys.intern(ep.hostname),
                               target_ref=_ref(ep.target_ref) if ep.target_ref is not None else None)
                      for ep in s.endpoints)
    ports = shared(tuple(shared(EndpointPort(sys.intern(p.name), p.protocol, p.port)) for p in s.ports))
    return EndpointSlice(_ref(s.ref), sys.intern(s.service_name), s.address_type, endpoints, ports,
                         _labels(s.labels) if labels else (), from_legacy_endpoints=s.from_legacy_endpoints)
