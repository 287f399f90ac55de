"""The one module that knows Kubernetes object shapes.

`from_k8s(doc, source)` turns one decoded manifest or API object (a dict) into netkit's frozen types
(`netkit.model.types`) or raises `InvalidObject` naming the source, kind, namespace/name, field path
and reason. Validation is strict where a value reaches kernel rule text (names are DNS labels, addresses
parse, ports are in range, nothing can carry a newline or a quote), and lenient where Kubernetes itself
defaults (protocol TCP, namespace "default", conditions unset = ready).

Legacy v1 Endpoints are converted to EndpointSlices here (one slice per address family), so nothing
downstream sees them. Kinds netkit does not use (Deployments, ConfigMaps, …) give None.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from ipaddress import IPv4Address, ip_address, ip_network
from sys import intern
from typing import Any, NoReturn, TypeGuard

from netkit.errors import InvalidObject, Problem
from netkit.model.types import (
    DEFAULT_AFFINITY_TIMEOUT,
    MAX_AFFINITY_TIMEOUT,
    SERVICE_NAME_LABEL,
    AddressType,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    IPAddress,
    IPFamily,
    IPNetwork,
    KubeObject,
    Namespace,
    Node,
    ObjectRef,
    Pod,
    Protocol,
    Service,
    ServicePort,
    ServiceType,
    TrafficPolicy,
)

# RFC 1123 label (Service names, namespaces, port names): at most 63 characters.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# RFC 1123 subdomain (most other object names, hostnames of ExternalName): at most 253 characters.
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# IANA service name (named targetPort): at most 15 characters, a letter somewhere, no "--".
_IANA_SVC_NAME = re.compile(r"^(?=.{1,15}$)(?!.*--)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Label keys and values: the parts after the prefix; they never reach rule text, but a newline or a
# quote in them would reach logs, so the charset is still checked.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class _Reader:
    """Walks one object, knows the path of every field it reads, and raises with it."""

    def __init__(self, source: str, kind: str, doc: Mapping[str, Any]) -> None:
        self.source, self.kind, self.doc = source, kind, doc

    def fail(self, path: str, reason: str) -> NoReturn:
        # The object's name and Service are read only for the error (20,000 objects at 10k services).
        raise InvalidObject(Problem(self.source, self.kind, _meta_name(self.doc), path, reason,
                                    _service_of(self.kind, self.doc)))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if type(value) is not dict and not isinstance(value, Mapping):  # the ABC check is slow
            self.fail(path, f"expected an object, got {_describe(value)}")
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, *, required: bool = False) -> str | None:
        if value is None or value == "":
            if required:
                self.fail(path, "required field is missing")
            return None
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_describe(value)}")
        return value

    def integer(self, value: Any, path: str, lo: int, hi: int, *, required: bool = False) -> int | None:
        if value is None:
            if required:
                self.fail(path, "required field is missing")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_describe(value)}")
        if not lo <= value <= hi:
            self.fail(path, f"{value} is out of range {lo}-{hi}")
        return value

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_describe(value)}")
        return value

    def ip(self, value: Any, path: str) -> IPAddress:
        text = self.string(value, path, required=True)
        assert text is not None
        try:
            return ipv4_fast(text) or parse_ip_sloppy(text)
        except ValueError:
            self.fail(path, f"{text!r} is not a valid IP address")

    def cidr(self, value: Any, path: str) -> IPNetwork:
        text = self.string(value, path, required=True)
        assert text is not None
        try:
            return parse_cidr_sloppy(text.strip())
        except ValueError:
            self.fail(path, f"{text!r} is not a valid CIDR")

    def matches(self, value: Any, path: str, pattern: re.Pattern[str], what: str) -> str:
        text = self.string(value, path, required=True)
        assert text is not None
        if not pattern.match(text):
            self.fail(path, f"{text!r} is not {what}")
        return text

    def enum(self, value: Any, path: str, cls: Any, default: Any) -> Any:
        if value is None or value == "":
            return default
        member = _members(cls).get(value) if isinstance(value, str) else None
        if member is not None:
            return member
        allowed = ", ".join(m.value for m in cls)
        self.fail(path, f"{value!r} is not one of {allowed}")

    def labels(self, value: Any, path: str) -> tuple[tuple[str, str], ...]:
        out = []
        for key, val in self.mapping(value, path).items():
            if not isinstance(key, str) or not _LABEL_KEY.match(key):
                self.fail(f"{path}[{key}]", f"{key!r} is not a valid label key")
            if val is None:
                val = ""
            if not isinstance(val, str) or not _LABEL_VALUE.match(val) or len(val) > 63:
                self.fail(f"{path}[{key}]", f"{val!r} is not a valid label value")
            out.append((key, val))
        return tuple(sorted(out))

    def annotations(self, value: Any, path: str) -> tuple[tuple[str, str], ...]:
        out = []
        for key, val in self.mapping(value, path).items():
            if not isinstance(key, str) or not isinstance(val, str):
                self.fail(f"{path}[{key}]", "annotation keys and values must be strings")
            out.append((key, val))
        return tuple(sorted(out))


@cache
def _members(cls: Any) -> dict[str, Any]:
    """An enum's members by value (the enums of netkit.model.types have string values): a look-up
    instead of a walk over the members, 60,000 times for 10,000 Services and their slices."""
    return {m.value: m for m in cls}


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping), a dict (what JSON and YAML give) checked first: the ABC's check
    costs ~0.4 µs, asked of every object and of most fields of 20,000 objects at 10k services."""
    return type(value) is dict or isinstance(value, Mapping)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _meta_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    if _is_mapping(meta):
        ns, name = meta.get("namespace"), meta.get("name")
        if isinstance(name, str):
            return f"{ns}/{name}" if isinstance(ns, str) and ns else name
    return "?"


def from_k8s(doc: Any, source: str = "<input>") -> list[KubeObject]:
    """Decode one object. Returns [] for kinds netkit ignores; raises InvalidObject for bad input.

    Returns a list because a legacy Endpoints object becomes one slice per address family.
    """
    if not _is_mapping(doc):
        raise InvalidObject(Problem(source, "?", "?", "", f"expected an object, got {_describe(doc)}"))
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject(Problem(source, "?", _meta_name(doc), "kind", "required field is missing"))
    decoder = _DECODERS.get(kind)
    if decoder is None:
        return []
    r = _Reader(source, kind, doc)
    return decoder(r, doc)


def _service_of(kind: str, doc: Mapping[str, Any]) -> str:
    """"namespace/name" of the Service an object feeds, read leniently (the object may be invalid):
    a Service or v1 Endpoints names it, an EndpointSlice labels it; "" when unknown."""
    meta = doc.get("metadata")
    if kind not in ("Service", "Endpoints", "EndpointSlice") or not _is_mapping(meta):
        return ""
    name = meta.get("name")
    if kind == "EndpointSlice":
        labels = meta.get("labels")
        name = labels.get(SERVICE_NAME_LABEL) if _is_mapping(labels) else None
    ns = meta.get("namespace") or "default"
    return f"{ns}/{name}" if isinstance(name, str) and name and isinstance(ns, str) else ""


def _ref(r: _Reader, doc: Mapping[str, Any], *, namespaced: bool = True, label: bool = False) -> ObjectRef:
    meta = r.mapping(doc.get("metadata"), "metadata")
    pattern, what = (_DNS_LABEL, "a DNS label (RFC 1123)") if label else (
        _DNS_SUBDOMAIN, "a DNS subdomain (RFC 1123)")
    name = r.matches(meta.get("name"), "metadata.name", pattern, what)
    if len(name) > (63 if label else 253):
        r.fail("metadata.name", "too long")
    if not namespaced:
        return ObjectRef("", name)
    ns = meta.get("namespace")
    ns = "default" if ns in (None, "") else r.matches(ns, "metadata.namespace", _DNS_LABEL, "a DNS label (RFC 1123)")
    return ObjectRef(ns, name)


# --- Service -------------------------------------------------------------------------------------


def _service(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    ref = _ref(r, doc, label=True)
    meta = r.mapping(doc.get("metadata"), "metadata")
    spec = r.mapping(doc.get("spec"), "spec")
    status = r.mapping(doc.get("status"), "status")
    stype: ServiceType = r.enum(spec.get("type"), "spec.type", ServiceType, ServiceType.CLUSTER_IP)

    external_name = None
    if stype is ServiceType.EXTERNAL_NAME:
        text = r.string(spec.get("externalName"), "spec.externalName", required=True)
        assert text is not None
        external_name = r.matches(text.lower().rstrip("."), "spec.externalName", _DNS_SUBDOMAIN,
                                  "a DNS name (RFC 1123 subdomain)")

    cluster_ips, headless = _cluster_ips(r, spec, stype)
    families = _ip_families(r, spec, cluster_ips)
    ports = _service_ports(r, spec, stype)
    affinity = _affinity(r, spec)
    hcnp = r.integer(spec.get("healthCheckNodePort"), "spec.healthCheckNodePort", 1, 65535)

    return [Service(
        ref=ref,
        type=stype,
        cluster_ips=cluster_ips,
        headless=headless,
        ip_families=families,
        ports=ports,
        external_ips=tuple(r.ip(v, f"spec.externalIPs[{i}]")
                           for i, v in enumerate(r.sequence(spec.get("externalIPs"), "spec.externalIPs"))),
        load_balancer_ips=_lb_ips(r, status),
        load_balancer_source_ranges=tuple(
            r.cidr(v, f"spec.loadBalancerSourceRanges[{i}]")
            for i, v in enumerate(r.sequence(spec.get("loadBalancerSourceRanges"),
                                             "spec.loadBalancerSourceRanges"))),
        session_affinity_timeout=affinity,
        external_traffic_policy=_policy(r, spec, "externalTrafficPolicy"),
        internal_traffic_policy=_policy(r, spec, "internalTrafficPolicy"),
        health_check_node_port=hcnp,
        publish_not_ready_addresses=r.boolean(spec.get("publishNotReadyAddresses"),
                                              "spec.publishNotReadyAddresses", False),
        traffic_distribution=r.string(spec.get("trafficDistribution"), "spec.trafficDistribution"),
        external_name=external_name,
        labels=r.labels(meta.get("labels"), "metadata.labels"),
        annotations=r.annotations(meta.get("annotations"), "metadata.annotations"),
    )]


def _cluster_ips(r: _Reader, spec: Mapping[str, Any],
                 stype: ServiceType) -> tuple[tuple[IPAddress, ...], bool]:
    raw = r.sequence(spec.get("clusterIPs"), "spec.clusterIPs")
    path = "spec.clusterIPs"
    if not raw and spec.get("clusterIP") not in (None, ""):
        raw, path = [spec.get("clusterIP")], "spec.clusterIP"
    if stype is ServiceType.EXTERNAL_NAME:
        return (), False
    if not raw:
        r.fail("spec.clusterIP", "not set: the API server allocates it, and a manifest given to netkit "
                                 "must carry the allocated address (or \"None\" for a headless service)")
    if raw == ["None"]:
        return (), True
    ips = tuple(r.ip(v, f"{path}[{i}]" if path.endswith("s") else path) for i, v in enumerate(raw))
    if len(ips) > 2 or (len(ips) == 2 and ips[0].version == ips[1].version):
        r.fail(path, "at most one address per IP family")
    single = spec.get("clusterIP")
    if single not in (None, "") and str(single) != str(ips[0]) and _sloppy_or_none(single) != ips[0]:
        r.fail("spec.clusterIP", f"{single!r} must equal spec.clusterIPs[0] ({ips[0]})")
    return ips, False


def _ip_families(r: _Reader, spec: Mapping[str, Any],
                 cluster_ips: tuple[IPAddress, ...]) -> tuple[IPFamily, ...]:
    raw = r.sequence(spec.get("ipFamilies"), "spec.ipFamilies")
    fams = tuple(r.enum(v, f"spec.ipFamilies[{i}]", IPFamily, None) for i, v in enumerate(raw))
    fams = tuple(f for f in fams if f is not None)
    derived = tuple(IPFamily.of(ip) for ip in cluster_ips)
    if fams and derived and fams[: len(derived)] != derived:
        r.fail("spec.ipFamilies", "must list the families of spec.clusterIPs in the same order")
    return fams or derived


def _service_ports(r: _Reader, spec: Mapping[str, Any], stype: ServiceType) -> tuple[ServicePort, ...]:
    raw = r.sequence(spec.get("ports"), "spec.ports")
    ports: list[ServicePort] = []
    seen: set[tuple[int, Protocol]] = set()
    names: set[str] = set()
    for i, item in enumerate(raw):
        path = f"spec.ports[{i}]"
        p = r.mapping(item, path)
        name = p.get("name") or ""
        if name:
            name = r.matches(name, f"{path}.name", _DNS_LABEL, "a DNS label (RFC 1123)")
        elif len(raw) > 1:
            r.fail(f"{path}.name", "required when a service has more than one port")
        if name in names:
            r.fail(f"{path}.name", f"duplicate port name {name!r}")
        names.add(name)
        proto: Protocol = r.enum(p.get("protocol"), f"{path}.protocol", Protocol, Protocol.TCP)
        port = r.integer(p.get("port"), f"{path}.port", 1, 65535, required=True)
        assert port is not None
        if (port, proto) in seen:
            r.fail(f"{path}.port", f"duplicate {proto.value} port {port}")
        seen.add((port, proto))
        target = _target_port(r, p.get("targetPort"), f"{path}.targetPort", port)
        node_port = r.integer(p.get("nodePort"), f"{path}.nodePort", 1, 65535)
        if node_port and stype not in (ServiceType.NODE_PORT, ServiceType.LOAD_BALANCER):
            r.fail(f"{path}.nodePort", f"only NodePort and LoadBalancer services have node ports, not {stype.value}")
        ports.append(ServicePort(name, proto, port, target, node_port,
                                 r.string(p.get("appProtocol"), f"{path}.appProtocol")))
    return tuple(ports)


def _target_port(r: _Reader, value: Any, path: str, default: int) -> int | str:
    if value is None or value == 0 or value == "":
        return default
    if isinstance(value, str):
        if value.isdigit():
            value = int(value)
        else:
            return r.matches(value, path, _IANA_SVC_NAME, "a port number or an IANA service name")
    port = r.integer(value, path, 1, 65535, required=True)
    assert port is not None
    return port


def _affinity(r: _Reader, spec: Mapping[str, Any]) -> int | None:
    mode = spec.get("sessionAffinity")
    if mode in (None, "", "None"):
        return None
    if mode != "ClientIP":
        r.fail("spec.sessionAffinity", f"{mode!r} is not one of None, ClientIP")
    cfg = r.mapping(spec.get("sessionAffinityConfig"), "spec.sessionAffinityConfig")
    client = r.mapping(cfg.get("clientIP"), "spec.sessionAffinityConfig.clientIP")
    timeout = r.integer(client.get("timeoutSeconds"), "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                        1, MAX_AFFINITY_TIMEOUT)
    return DEFAULT_AFFINITY_TIMEOUT if timeout is None else timeout


def _policy(r: _Reader, spec: Mapping[str, Any], field: str) -> TrafficPolicy:
    value = spec.get(field)
    if value == "Global":  # the pre-1.22 spelling of Cluster, still accepted by the API server
        value = "Cluster"
    policy: TrafficPolicy = r.enum(value, f"spec.{field}", TrafficPolicy, TrafficPolicy.CLUSTER)
    return policy


def _lb_ips(r: _Reader, status: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    lb = r.mapping(status.get("loadBalancer"), "status.loadBalancer")
    out = []
    for i, item in enumerate(r.sequence(lb.get("ingress"), "status.loadBalancer.ingress")):
        ing = r.mapping(item, f"status.loadBalancer.ingress[{i}]")
        if ing.get("ip") not in (None, ""):
            # ipMode Proxy: the load balancer delivers to the node itself, so kube-proxy does not
            # short-circuit the LB IP on the node (KEP-1860).
            if ing.get("ipMode") == "Proxy":
                continue
            out.append(r.ip(ing.get("ip"), f"status.loadBalancer.ingress[{i}].ip"))
    return tuple(out)


# --- EndpointSlice and legacy Endpoints ----------------------------------------------------------


def _endpoint_slice(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    ref = _ref(r, doc)
    meta = r.mapping(doc.get("metadata"), "metadata")
    labels = r.labels(meta.get("labels"), "metadata.labels")
    service = dict(labels).get(SERVICE_NAME_LABEL)
    if not service:
        r.fail(f"metadata.labels[{SERVICE_NAME_LABEL}]", "required label is missing: it names the Service")
    if not _DNS_LABEL.match(service):
        r.fail(f"metadata.labels[{SERVICE_NAME_LABEL}]", f"{service!r} is not a DNS label (RFC 1123)")
    atype: AddressType = r.enum(doc.get("addressType"), "addressType", AddressType, None)
    if atype is None:
        r.fail("addressType", "required field is missing")
    endpoints = tuple(_plain_endpoint(e, atype) or _endpoint(r, e, f"endpoints[{i}]", atype)
                      for i, e in enumerate(r.sequence(doc.get("endpoints"), "endpoints")))
    ports = tuple(p for p in (_endpoint_port(r, e, f"ports[{i}]")
                              for i, e in enumerate(r.sequence(doc.get("ports"), "ports"))) if p)
    return [EndpointSlice(ref, service, atype, endpoints, ports, labels,
                          r.annotations(meta.get("annotations"), "metadata.annotations"))]


def _plain_endpoint(item: Any, atype: AddressType) -> Endpoint | None:
    """The common endpoint (IPv4 addresses, boolean conditions, string node name and zone, no
    hints) read without a field path per value: 100,000 of them take a third of the time. None
    when anything is unusual or wrong; `_endpoint` then reads it, with the path in its error."""
    if type(item) is not dict or atype is not AddressType.IPV4 or item.get("hints") is not None:
        return None
    raw, cond, node, zone = item.get("addresses"), item.get("conditions"), item.get("nodeName"), item.get("zone")
    if type(raw) is not list or not raw or not (cond is None or type(cond) is dict):
        return None
    if not (node is None or type(node) is str) or not (zone is None or type(zone) is str):
        return None
    addresses = []
    for a in raw:
        address = ipv4_fast(a) if type(a) is str else None
        if address is None:
            return None
        addresses.append(address)
    ready, serving, terminating = (cond.get("ready"), cond.get("serving"), cond.get("terminating")) if cond \
        else (None, None, None)
    if not ((ready is None or type(ready) is bool) and (serving is None or type(serving) is bool)
            and (terminating is None or type(terminating) is bool)):  # not 0/1: not booleans
        return None
    hostname, target = item.get("hostname"), item.get("targetRef")
    if hostname in ("", None):
        hostname = None
    elif type(hostname) is not str or not _DNS_LABEL.match(hostname):
        return None
    if target is not None and type(target) is not dict:
        return None
    ready = ready is not False
    # Positional (Endpoint's field order): 100,000 of them at 10k services. A cluster has few node
    # names and zones: interned, each is held once, not once per endpoint.
    return Endpoint(tuple(addresses), ready, ready if serving is None else serving, terminating is True, hostname,
                    _interned(node), _interned(zone), (), (), _pod_ref(target) if target else None)


def _interned(text: str | None) -> str | None:
    """A node name or zone held once however many endpoints name it (None for "" and None)."""
    return intern(text) if text else None


def _endpoint(r: _Reader, item: Any, path: str, atype: AddressType) -> Endpoint:
    e = r.mapping(item, path)
    raw = r.sequence(e.get("addresses"), f"{path}.addresses")
    if not raw:
        r.fail(f"{path}.addresses", "must hold at least one address")
    addresses: tuple[IPAddress, ...] = ()
    if atype is not AddressType.FQDN:
        addresses = tuple(r.ip(a, f"{path}.addresses[{i}]") for i, a in enumerate(raw))
        want = 4 if atype is AddressType.IPV4 else 6
        for i, a in enumerate(addresses):
            if a.version != want:
                r.fail(f"{path}.addresses[{i}]", f"{a} is not an {atype.value} address")
    cond = r.mapping(e.get("conditions"), f"{path}.conditions")
    ready = r.boolean(cond.get("ready"), f"{path}.conditions.ready", True)
    hints = r.mapping(e.get("hints"), f"{path}.hints")
    zones = tuple(
        r.string(r.mapping(z, f"{path}.hints.forZones[{i}]").get("name"),
                 f"{path}.hints.forZones[{i}].name", required=True) or ""
        for i, z in enumerate(r.sequence(hints.get("forZones"), f"{path}.hints.forZones")))
    nodes = tuple(
        r.string(r.mapping(h, f"{path}.hints.forNodes[{i}]").get("name"),
                 f"{path}.hints.forNodes[{i}].name", required=True) or ""
        for i, h in enumerate(r.sequence(hints.get("forNodes"), f"{path}.hints.forNodes")))
    hostname = e.get("hostname")
    if hostname not in (None, ""):
        hostname = r.matches(hostname, f"{path}.hostname", _DNS_LABEL, "a DNS label (RFC 1123)")
    return Endpoint(
        addresses=addresses,
        ready=ready,
        serving=r.boolean(cond.get("serving"), f"{path}.conditions.serving", ready),
        terminating=r.boolean(cond.get("terminating"), f"{path}.conditions.terminating", False),
        hostname=hostname or None,
        node_name=_interned(r.string(e.get("nodeName"), f"{path}.nodeName")),
        zone=_interned(r.string(e.get("zone"), f"{path}.zone")),
        hint_zones=zones,
        hint_nodes=nodes,
        target_ref=_target_ref(r, e.get("targetRef"), f"{path}.targetRef"),
    )


def _target_ref(r: _Reader, value: Any, path: str) -> ObjectRef | None:
    return _pod_ref(r.mapping(value, path))


def _pod_ref(ref: Mapping[str, Any]) -> ObjectRef | None:
    if ref.get("kind") != "Pod" or not isinstance(ref.get("name"), str):
        return None
    return ObjectRef(str(ref.get("namespace") or ""), ref["name"])


def _endpoint_port(r: _Reader, item: Any, path: str) -> EndpointPort | None:
    p = r.mapping(item, path)
    port = r.integer(p.get("port"), f"{path}.port", 1, 65535)
    if port is None:  # "all ports": unusable for DNAT, kube-proxy skips it too
        return None
    name = p.get("name") or ""
    if name:
        name = r.matches(name, f"{path}.name", _DNS_LABEL, "a DNS label (RFC 1123)")
    proto: Protocol = r.enum(p.get("protocol"), f"{path}.protocol", Protocol, Protocol.TCP)
    return EndpointPort(name, proto, port, r.string(p.get("appProtocol"), f"{path}.appProtocol"))


def _legacy_endpoints(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    """v1 Endpoints → one EndpointSlice per (subset, family), as the EndpointSlice mirroring
    controller would make them. Endpoints carry no serving/terminating, zones or hints."""
    ref = _ref(r, doc, label=True)
    meta = r.mapping(doc.get("metadata"), "metadata")
    labels = r.labels(meta.get("labels"), "metadata.labels")
    annotations = r.annotations(meta.get("annotations"), "metadata.annotations")
    out: list[KubeObject] = []
    for si, item in enumerate(r.sequence(doc.get("subsets"), "subsets")):
        sub = r.mapping(item, f"subsets[{si}]")
        ports = tuple(p for p in (_endpoint_port(r, e, f"subsets[{si}].ports[{i}]")
                                  for i, e in enumerate(r.sequence(sub.get("ports"), f"subsets[{si}].ports")))
                      if p)
        eps: list[Endpoint] = []
        for key, ready in (("addresses", True), ("notReadyAddresses", False)):
            for ai, a in enumerate(r.sequence(sub.get(key), f"subsets[{si}].{key}")):
                eps.append(_legacy_address(r, a, f"subsets[{si}].{key}[{ai}]", ready))
        for fam, atype in ((4, AddressType.IPV4), (6, AddressType.IPV6)):
            chosen = tuple(e for e in eps if e.addresses[0].version == fam)
            if chosen:
                name = f"{ref.name}-legacy-{si}-{atype.value.lower()}"
                out.append(EndpointSlice(ObjectRef(ref.namespace, name), ref.name, atype, chosen, ports,
                                         labels, annotations, from_legacy_endpoints=True))
    return out


def _legacy_address(r: _Reader, item: Any, path: str, ready: bool) -> Endpoint:
    a = r.mapping(item, path)
    hostname = a.get("hostname")
    if hostname not in (None, ""):
        hostname = r.matches(hostname, f"{path}.hostname", _DNS_LABEL, "a DNS label (RFC 1123)")
    return Endpoint(
        addresses=(r.ip(a.get("ip"), f"{path}.ip"),),
        ready=ready,
        serving=ready,
        hostname=hostname or None,
        node_name=r.string(a.get("nodeName"), f"{path}.nodeName"),
        target_ref=_target_ref(r, a.get("targetRef"), f"{path}.targetRef"),
    )


# --- Node and Pod --------------------------------------------------------------------------------


def _node(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    ref = _ref(r, doc, namespaced=False)
    meta = r.mapping(doc.get("metadata"), "metadata")
    status = r.mapping(doc.get("status"), "status")
    addresses = []
    for i, item in enumerate(r.sequence(status.get("addresses"), "status.addresses")):
        a = r.mapping(item, f"status.addresses[{i}]")
        atype = r.string(a.get("type"), f"status.addresses[{i}].type", required=True) or ""
        if atype in ("InternalIP", "ExternalIP"):
            addresses.append((atype, r.ip(a.get("address"), f"status.addresses[{i}].address")))
    spec = r.mapping(doc.get("spec"), "spec")
    raw_cidrs = r.sequence(spec.get("podCIDRs"), "spec.podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    cidrs = []
    for i, text in enumerate(raw_cidrs):
        try:
            cidrs.append(parse_cidr_sloppy(str(text)))
        except ValueError:
            r.fail(f"spec.podCIDRs[{i}]", f"{text!r} is not a CIDR")
    taints = tuple(str(r.mapping(t, f"spec.taints[{i}]").get("key") or "")
                   for i, t in enumerate(r.sequence(spec.get("taints"), "spec.taints")))
    return [Node(ref.name, tuple(addresses), r.labels(meta.get("labels"), "metadata.labels"), tuple(cidrs),
                 bool(meta.get("deletionTimestamp")), taints)]


def _pod(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    ref = _ref(r, doc)
    spec = r.mapping(doc.get("spec"), "spec")
    status = r.mapping(doc.get("status"), "status")
    raw = [r.mapping(p, f"status.podIPs[{i}]").get("ip")
           for i, p in enumerate(r.sequence(status.get("podIPs"), "status.podIPs"))]
    if not raw and status.get("podIP"):
        raw = [status.get("podIP")]
    ips = tuple(r.ip(v, f"status.podIPs[{i}].ip") for i, v in enumerate(raw))
    return [Pod(ref, ips, r.string(spec.get("nodeName"), "spec.nodeName"))]


def _namespace(r: _Reader, doc: Mapping[str, Any]) -> list[KubeObject]:
    return [Namespace(_ref(r, doc, namespaced=False, label=True).name)]


_DECODERS = {
    "Service": _service,
    "EndpointSlice": _endpoint_slice,
    "Endpoints": _legacy_endpoints,
    "Node": _node,
    "Pod": _pod,
    "Namespace": _namespace,
}


def list_items(doc: Any) -> Iterator[Any]:
    """Expand `kind: List` (and `*List` API responses) into their items, like kubectl."""
    if _is_mapping(doc) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") \
            and isinstance(doc.get("items"), list):
        item_kind = doc["kind"][: -len("List")]
        for item in doc["items"]:
            if _is_mapping(item) and "kind" not in item and item_kind:
                item = {**item, "kind": item_kind}  # API list responses omit kind on items
            yield from list_items(item)
    elif doc is not None:
        yield doc


# Leading zeros on the numbers of a dotted quad (also one embedded in IPv6, and a CIDR's prefix
# length): k8s.io/utils/net's ParseIPSloppy / ParseCIDRSloppy strip them and read the numbers as
# decimal, as Go did before 1.17. Older apiservers stored such addresses ("172.30.0.041"), and
# kube-proxy serves them as 172.30.0.41, so the model does too, rather than drop the object.
_SLOPPY_ZEROS = re.compile(r"(^|:)0*(0|[1-9][0-9]*)\.0*(0|[1-9][0-9]*)\.0*(0|[1-9][0-9]*)\.0*(0|[1-9][0-9]*)"
                           r"((/)0*(0|[1-9][0-9]*))?$")


def _strip_zeros(text: str) -> str:
    return _SLOPPY_ZEROS.sub(r"\1\2.\3.\4.\5\7\8", text)


def parse_ip_sloppy(text: str) -> IPAddress:
    """An address as kube-proxy reads it (ParseIPSloppy): `172.30.0.041` is 172.30.0.41."""
    try:
        return ip_address(text)
    except ValueError:
        stripped = _strip_zeros(text)
        if stripped == text:
            raise
        return ip_address(stripped)


def _sloppy_or_none(value: Any) -> IPAddress | None:
    try:
        return parse_ip_sloppy(str(value))
    except ValueError:
        return None


def parse_cidr_sloppy(text: str) -> IPNetwork:
    """A CIDR as kube-proxy reads it (ParseCIDRSloppy); host bits allowed, as Go's ParseCIDR."""
    try:
        return ip_network(text, strict=False)
    except ValueError:
        stripped = _strip_zeros(text)
        if stripped == text:
            raise
        return ip_network(stripped, strict=False)




def ipv4_fast(text: str) -> IPv4Address | None:
    """A dotted-quad IPv4 address without `ipaddress`'s string parser (8× faster on 100,000 endpoint
    addresses): each of the four parts must be the canonical spelling of a number 0-255, which one
    dict look-up tells and answers. None for anything else, which `ip_address` then judges (and
    words the error). Accepts exactly what ip_address accepts: four ASCII decimal octets 0-255, no
    leading zeros, nothing around them (test)."""
    if type(text) is not str:  # a str subclass: its text is not kept (ip_address reads it)
        return None
    parts = text.split(".")
    if len(parts) != 4:
        return None
    get = _OCTETS.get
    a, b, c, d = get(parts[0]), get(parts[1]), get(parts[2]), get(parts[3])
    if a is None or b is None or c is None or d is None:
        return None
    return _Dotted(a << 24 | b << 16 | c << 8 | d, text)


_OCTETS = {str(i): i for i in range(256)}  # exactly the canonical spellings: "0", "7", "255"; not "07"


class _Dotted(IPv4Address):
    """An IPv4Address that keeps the text it was read from. `ipv4_fast` reads only the canonical
    spelling, which is what str() would compute again from the number — 200,000 times at 10,000
    services × 10 endpoints (NodeState's endpoint order, the compilers' rule text), a fifth of the
    compile. Equal, hashed and ordered as the IPv4Address it is; copied or pickled, a plain one."""

    __slots__ = ("_text",)

    def __init__(self, value: int, text: str = "") -> None:
        if text:  # from ipv4_fast: `value` is checked, `text` is its canonical spelling
            self._ip = value
            self._text = text
        else:  # from ipaddress's own arithmetic (address + 1)
            super().__init__(value)
            self._text = IPv4Address.__str__(self)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"IPv4Address({self._text!r})"

    def __reduce__(self) -> tuple[type[IPv4Address], tuple[int]]:
        return IPv4Address, (int(self),)
