"""The lab's EndpointSlice controller: Services' selectors × the lab's Pods → EndpointSlices. Pure.

What Kubernetes' endpointslice controller does, in the part a Service dataplane can see
(pkg/controller/endpointslice, staging/src/k8s.io/endpointslice):

- a Service with a selector gets slices labelled `kubernetes.io/service-name` and
  `endpointslice.kubernetes.io/managed-by`; the Service's own labels are copied (so
  `service.kubernetes.io/service-proxy-name` keeps a Service away from netkit, as from kube-proxy),
  and a headless Service's slices carry `service.kubernetes.io/headless`;
- every pod in the Service's namespace whose labels match, scheduled and with an IP, is an endpoint:
  `ready` = pod Ready and not terminating (or `publishNotReadyAddresses`), `serving` = pod Ready,
  `terminating` = the pod has a deletionTimestamp; `nodeName` and a `targetRef` to the pod;
- a named `targetPort` is looked up among the pod's container ports (name and protocol); a pod
  without that port is left out of that port; pods that resolve to different port numbers go into
  different slices (one slice per distinct port list);
- an endpoint's `hostname` is the pod's `spec.hostname` when the pod sets one and its `spec.subdomain`
  is the Service's name (endpointutil.ShouldSetHostname), which gives the pod its DNS name under a
  headless Service;
- one set of slices per IP family of the Service (`ipFamilies`; without them the family of its
  `clusterIP`), `addressType` IPv4 or IPv6, each endpoint the pod's address of that family (from
  `status.podIPs`); a pod without one is not an endpoint of that family;
- a Service whose selector matches nothing has one slice with no endpoints (per family);
- `endpoints.kubernetes.io/last-change-trigger-time` is set when a slice changes, so each node's
  `kubeproxy_network_programming_duration_seconds` measures this cluster's programming latency.

Deliberate differences: no 100-endpoint slice limit, no topology hints, slices named
`<service>-lab[-N]` (IPv4) and `<service>-lab-v6[-N]` (IPv6) instead of generated names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGER = "netkit-lab"
SERVICE_NAME = "kubernetes.io/service-name"
HEADLESS = "service.kubernetes.io/headless"
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def key(obj: Mapping[str, Any]) -> Key:
    m = meta(obj)
    return (str(m.get("namespace") or "default"), str(m.get("name")))


def selects(selector: Mapping[str, str], pod: Mapping[str, Any]) -> bool:
    labels = meta(pod).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def candidate(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("podIP")) and bool((pod.get("spec") or {}).get("nodeName")) \
        and status.get("phase") not in ("Succeeded", "Failed")


def target_port(port: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    protocol = port.get("protocol", "TCP")
    for container in (pod.get("spec") or {}).get("containers") or []:
        for cp in container.get("ports") or []:
            if cp.get("name") == target and cp.get("protocol", "TCP") == protocol:
                return int(cp["containerPort"])
    return None


def resolved_ports(service: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[tuple[str, int, str], ...]:
    ports = []
    for port in (service.get("spec") or {}).get("ports") or []:
        number = target_port(port, pod)
        if number is not None:
            ports.append((str(port.get("name") or ""), number, str(port.get("protocol", "TCP"))))
    return tuple(ports)


def hostname(pod: Mapping[str, Any], service_name: str) -> str:
    """The endpoint's hostname: the pod's, if it names this Service as its subdomain (namespaces
    are already equal: only pods of the Service's namespace are endpoints)."""
    spec = pod.get("spec") or {}
    return str(spec.get("hostname") or "") if spec.get("subdomain") == service_name else ""


def service_families(service: Mapping[str, Any]) -> tuple[str, ...]:
    spec = service.get("spec") or {}
    families = spec.get("ipFamilies") or []
    if families:
        return tuple(str(f) for f in families)
    ip = str(spec.get("clusterIP") or "")
    return ("IPv6",) if ":" in ip else ("IPv4",)


def pod_address(pod: Mapping[str, Any], family: str) -> str:
    """The pod's address of `family` (IPv4, IPv6), or ""."""
    status = pod.get("status") or {}
    ips = [str(p.get("ip") or "") for p in status.get("podIPs") or []] or [str(status.get("podIP") or "")]
    return next((ip for ip in ips if ip and (":" in ip) == (family == "IPv6")), "")


def endpoint(pod: Mapping[str, Any], publish_not_ready: bool, service_name: str = "", family: str = "IPv4") -> JSON:
    ready, terminating = pod_ready(pod), pod_terminating(pod)
    m = meta(pod)
    host = hostname(pod, service_name)
    return {
        "addresses": [pod_address(pod, family)],
        "conditions": {"ready": publish_not_ready or (ready and not terminating), "serving": ready,
                       "terminating": terminating},
        **({"hostname": host} if host else {}),
        "nodeName": pod["spec"]["nodeName"],
        "targetRef": {"kind": "Pod", "namespace": m.get("namespace", "default"), "name": m.get("name"),
                      "uid": m.get("uid", "")},
    }


def slice_for(service: Mapping[str, Any], name: str, ports: Sequence[tuple[str, int, str]],
              endpoints: list[JSON], family: str = "IPv4") -> JSON:
    ns, svc_name = key(service)
    spec = service.get("spec") or {}
    labels = {**(meta(service).get("labels") or {}), SERVICE_NAME: svc_name, MANAGED_BY: MANAGER}
    if spec.get("clusterIP") == "None":
        labels[HEADLESS] = ""
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": labels,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": svc_name,
                                          "uid": meta(service).get("uid", ""), "controller": True}]},
        "addressType": family,
        "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
        "endpoints": endpoints,
    }


def slices_for(service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[Key, JSON]:
    out: dict[Key, JSON] = {}
    for family in service_families(service):
        out.update(family_slices(service, pods, family))
    return out


def family_slices(service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], family: str) -> dict[Key, JSON]:
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    ns, name = key(service)
    publish = bool(spec.get("publishNotReadyAddresses"))
    groups: dict[tuple[tuple[str, int, str], ...], list[JSON]] = {}
    for pod in sorted(pods, key=lambda p: key(p)[1]):
        if key(pod)[0] == ns and candidate(pod) and selects(selector, pod) and pod_address(pod, family):
            ports = resolved_ports(service, pod)
            if ports or not spec.get("ports"):
                groups.setdefault(ports, []).append(endpoint(pod, publish, name, family))
    if not groups:
        groups[()] = []
    out: dict[Key, JSON] = {}
    base = f"{name}-lab" + ("-v6" if family == "IPv6" else "")
    for i, (ports, eps) in enumerate(sorted(groups.items())):
        slice_name = base + (f"-{i}" if i else "")
        out[(ns, slice_name)] = slice_for(service, slice_name, ports, eps, family)
    return out


def managed(service: Mapping[str, Any]) -> bool:
    spec = service.get("spec") or {}
    return bool(spec.get("selector")) and spec.get("type") != "ExternalName"


def desired(services: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> dict[Key, JSON]:
    """Every slice the controller wants, by (namespace, name)."""
    out: dict[Key, JSON] = {}
    for service in services:
        if managed(service):
            out.update(slices_for(service, pods))
    return out


def content(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    m = meta(obj)
    return (m.get("labels") or {}, obj.get("addressType"), obj.get("ports") or [], obj.get("endpoints") or [])


def changes(current: Sequence[Mapping[str, Any]], wanted: Mapping[Key, JSON],
            trigger_time: str) -> tuple[list[JSON], list[JSON], list[Key]]:
    """(slices to create, to update, keys to delete) to go from our current slices to `wanted`.
    `current` is only the slices this controller manages."""
    have = {key(s): s for s in current if (meta(s).get("labels") or {}).get(MANAGED_BY) == MANAGER}
    create: list[JSON] = []
    update: list[JSON] = []
    for k, want in sorted(wanted.items()):
        old = have.get(k)
        if old is not None and content(old) == content(want):
            continue
        stamped = {**want, "metadata": {**want["metadata"], "annotations": {TRIGGER: trigger_time}}}
        (update if old is not None else create).append(stamped)
    delete = sorted(k for k in have if k not in wanted)
    return create, update, delete
