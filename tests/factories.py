"""Small builders for Kubernetes-shaped dicts, so tests state only what matters to them."""

from __future__ import annotations

from typing import Any


def service(name: str = "web", ns: str = "default", ip: str | list[str] = "10.96.0.10", *,
            ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    ips = ip if isinstance(ip, list) else [ip]
    status = spec.pop("status", None)
    labels = spec.pop("labels", None)
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, **({"labels": labels} if labels else {})},
        "spec": {"clusterIP": ips[0], "clusterIPs": ips,
                 "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": 8080}],
                 **spec},
    }
    if status:
        doc["status"] = status
    return doc


def endpoint(ip: str, node: str | None = "node-b", **extra: Any) -> dict[str, Any]:
    conditions = {k: extra.pop(k) for k in ("ready", "serving", "terminating") if k in extra}
    ep: dict[str, Any] = {"addresses": [ip], **extra}
    if node:
        ep["nodeName"] = node
    if conditions:
        ep["conditions"] = conditions
    return ep


def slice_(service_name: str = "web", ns: str = "default", endpoints: list[dict[str, Any]] | None = None, *,
           name: str | None = None, ports: list[dict[str, Any]] | None = None,
           address_type: str = "IPv4") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name or f"{service_name}-abc", "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": address_type,
        "ports": ports if ports is not None else [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints or [],
    }


def node(name: str = "node-a", zone: str | None = "zone-a", ips: tuple[str, ...] = ("192.0.2.10",)) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"addresses": [{"type": "InternalIP", "address": ip} for ip in ips]}}


def objects(*docs: dict[str, Any]):  # type: ignore[no-untyped-def]
    from netkit.model import Objects, from_k8s
    out = []
    for d in docs:
        out.extend(from_k8s(d, "test"))
    return Objects.of(out)
