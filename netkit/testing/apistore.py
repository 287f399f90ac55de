"""The storage behind the test API server (a test double: never a product path).

Theory of operation. One global resourceVersion counter, as etcd's revision: every create, update and
delete bumps it and appends a `Change` to the history. A watch from version N replays the history after
N and then follows live changes; `compact()` forgets the history, so a watch from a version older than
the compaction point must be answered with 410 Gone, exactly like a real server after etcd compaction.
A paginated list takes one snapshot on its first page and serves later pages from it (the continue
token names the snapshot); compaction expires those tokens too.

Objects are plain JSON dicts, deep-copied on the way in and out so a caller can never alias the store.
Services go through what kube-apiserver's Service registry does (`netkit.testing.services`): defaults,
the fields a type change makes meaningless dropped, clusterIPs and node ports allocated (a requested
one in use refused) and released when no longer held, so `kubectl create` of an ordinary manifest
gives the object a real cluster would store.

Label selectors support the set-based and equality forms (`k`, `!k`, `k=v`, `k==v`, `k!=v`,
`k in (a,b)`, `k notin (a,b)`); field selectors support `metadata.name` and `metadata.namespace` with
`=`, `==` and `!=` — the forms kube-proxy and kubectl use.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

from netkit.testing import services

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource the server serves."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "services", "Service", True, ("svc",)),
    Resource("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    Resource("", "v1", "nodes", "Node", False, ("no",)),
    Resource("", "v1", "pods", "Pod", True, ("po",)),
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",)),
    Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, ()),
    # stored only, so kubectl can create the daemon's own deployment manifests (deploy/, deploy/dns/)
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, ()),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, ()),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",)),
    Resource("apps", "v1", "deployments", "Deployment", True, ("deploy",)),  # deploy/dns
)


def resource_for_kind(kind: str) -> Resource:
    for r in RESOURCES:
        if r.kind == kind:
            return r
    raise KeyError(f"the test API server does not serve kind {kind!r}")


class ApiError(Exception):
    """A request the server refuses; carries the HTTP code and the Kubernetes Status reason."""

    def __init__(self, code: int, reason: str, message: str, name: str = "", kind: str = "",
                 causes: tuple[JSON, ...] = ()) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.name, self.kind = code, reason, message, name, kind
        self.causes = causes  # StatusCause objects: kubectl prints "The <kind> <name> is invalid: <causes>"

    def status(self) -> JSON:
        details: JSON = {"name": self.name, "kind": self.kind}
        if self.causes:
            details["causes"] = list(self.causes)
        return {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "details": details, "code": self.code,
        }


# --- selectors ------------------------------------------------------------------------------------

Predicate = Callable[[JSON], bool]

_SET_EXPR = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_requirements(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (`a in (x,y),!b`)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_selector(text: str) -> Predicate:
    reqs = [_label_requirement(r) for r in _split_requirements(text or "")]
    return lambda obj: all(req(_labels(obj)) for req in reqs)


def _labels(obj: JSON) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def _label_requirement(req: str) -> Callable[[dict[str, str]], bool]:
    m = _SET_EXPR.match(req)
    if m:
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if req.startswith("!"):
        key = req[1:].strip()
        return lambda labels: key not in labels
    for op in ("!=", "==", "="):
        if op in req:
            key, value = (s.strip() for s in req.split(op, 1))
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if not re.match(r"^[A-Za-z0-9./_-]+$", req):
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {req!r}")
    return lambda labels: req in labels


def field_selector(text: str) -> Predicate:
    reqs = [_field_requirement(r) for r in _split_requirements(text or "")]
    return lambda obj: all(req(obj) for req in reqs)


def _field_requirement(req: str) -> Predicate:
    for op in ("!=", "==", "="):
        if op in req:
            path, value = (s.strip() for s in req.split(op, 1))
            if path not in ("metadata.name", "metadata.namespace"):
                raise ApiError(400, "BadRequest", f"field label not supported: {path}")
            key = path.split(".", 1)[1]
            if op == "!=":
                return lambda obj: (obj.get("metadata") or {}).get(key, "") != value
            return lambda obj: (obj.get("metadata") or {}).get(key, "") == value
    raise ApiError(400, "BadRequest", f"invalid field selector: {req!r}")


# --- the store ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    resource: Resource
    type: str  # ADDED, MODIFIED, DELETED
    obj: JSON
    old: JSON | None = None  # the object before a MODIFIED (a watch with a selector needs it)


@dataclass(slots=True)
class Snapshot:
    rv: int
    items: list[JSON]


SERVICE_IP_BASE = IPv4Address("10.96.0.0")  # clusterIPs are allocated from 10.96.0.100 up
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass
class Store:
    """Objects, versions, history and list snapshots. Pure: no IO, no asyncio."""

    service_ip_base: IPv4Address = SERVICE_IP_BASE
    rv: int = 1000
    compacted: int = 1000  # a watch from a version below this is answered with 410
    objects: dict[Resource, dict[Key, JSON]] = field(default_factory=lambda: {r: {} for r in RESOURCES})
    history: list[Change] = field(default_factory=list)
    listeners: list[Callable[[Change], None]] = field(default_factory=list)
    _snapshots: dict[str, Snapshot] = field(default_factory=dict)
    allocator: services.Allocator = field(default_factory=services.Allocator)
    # kube-apiserver's --service-cluster-ip-range, primary first: with it, the IP family fields are
    # settled and checked as the real one does; without, anything is stored (tests of odd objects)
    service_cidrs: tuple[IPv4Network | IPv6Network, ...] = ()

    def __post_init__(self) -> None:
        self.allocator.ip_base = self.service_ip_base
        self.allocator.cidrs = self.service_cidrs

    @property
    def first_service_ip(self) -> IPv4Address | IPv6Address:
        """The service range's first address (`default/kubernetes`'s)."""
        return self.service_cidrs[0].network_address + 1 if self.service_cidrs else self.service_ip_base + 1

    # reads

    def select(self, resource: Resource, namespace: str, labels: str = "", fields: str = "") -> list[JSON]:
        match_l, match_f = label_selector(labels), field_selector(fields)
        return [copy.deepcopy(o) for (ns, _), o in sorted(self.objects[resource].items())
                if (not namespace or ns == namespace) and match_l(o) and match_f(o)]

    def get(self, resource: Resource, namespace: str, name: str) -> JSON:
        obj = self.objects[resource].get((namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found', name, resource.plural)
        return copy.deepcopy(obj)

    def list_page(self, resource: Resource, namespace: str, labels: str, fields: str,
                  limit: int, token: str) -> tuple[int, list[JSON], str]:
        """One page of a consistent list: (resourceVersion, items, continue token or "")."""
        if token:
            snap_id, _, offset_text = token.partition(":")
            snap = self._snapshots.get(snap_id)
            if snap is None or snap.rv < self.compacted or not offset_text.isdigit():
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                               "consistent list result. You can start a new list without "
                                               "the continue parameter.")
            offset = int(offset_text)
        else:
            snap_id, offset = uuid.uuid4().hex, 0
            snap = Snapshot(self.rv, self.select(resource, namespace, labels, fields))
        end = offset + limit if limit > 0 else len(snap.items)
        page = snap.items[offset:end]
        if end < len(snap.items):
            self._snapshots[snap_id] = snap
            return snap.rv, page, f"{snap_id}:{end}"
        self._snapshots.pop(snap_id, None)
        return snap.rv, page, ""

    def changes_since(self, rv: int) -> list[Change]:
        if rv < self.compacted:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.compacted})")
        return [c for c in self.history if c.rv > rv]

    # writes

    def create(self, obj: JSON) -> JSON:
        resource, key = self._identify(obj)
        if key in self.objects[resource]:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{key[1]}" already exists',
                           key[1], resource.plural)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        if resource.namespaced:
            meta["namespace"] = key[0]
        if resource.kind == "Service":
            obj = self._admit(obj, None)
        return self._commit(resource, key, "ADDED", obj)

    def update(self, obj: JSON) -> JSON:
        resource, key = self._identify(obj)
        old = self.objects[resource].get(key)
        if old is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{key[1]}" not found', key[1], resource.plural)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        want = meta.get("resourceVersion")
        if want not in (None, "") and want != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource.plural} "{key[1]}": '
                                            "the object has been modified; please apply your changes to the "
                                            "latest version and try again", key[1], resource.plural)
        meta.update(uid=old["metadata"]["uid"], creationTimestamp=old["metadata"]["creationTimestamp"])
        if resource.namespaced:
            meta["namespace"] = key[0]
        if resource.kind == "Service":
            obj = self._admit(obj, old)
        return self._commit(resource, key, "MODIFIED", obj, old=old)

    def apply(self, obj: JSON) -> JSON:
        """Create or update (a convenience for tests; not an HTTP verb)."""
        resource, key = self._identify(obj)
        if key in self.objects[resource]:
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {}).pop("resourceVersion", None)
            return self.update(obj)
        return self.create(obj)

    def delete(self, resource: Resource, namespace: str, name: str) -> JSON:
        old = self.get(resource, namespace, name)
        del self.objects[resource][(namespace, name)]
        if resource.kind == "Service":
            self.allocator.release(f"{namespace}/{name}")
        return self._commit(resource, (namespace, name), "DELETED", old, store=False)

    def compact(self) -> None:
        """Forget all history up to now: watches from older versions get 410, continue tokens expire."""
        self.compacted = self.rv
        self.history.clear()
        self._snapshots.clear()

    # internals

    def _identify(self, obj: JSON) -> tuple[Resource, Key]:
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            raise ApiError(400, "BadRequest", "Object 'Kind' is missing")
        try:
            resource = resource_for_kind(obj["kind"])
        except KeyError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "Invalid", f'{resource.kind} "" is invalid: metadata.name: Required value: name or '
                                           "generateName is required", "", resource.plural)
        namespace = (meta.get("namespace") or "default") if resource.namespaced else ""
        return resource, (namespace, name)

    def _commit(self, resource: Resource, key: Key, kind: str, obj: JSON, store: bool = True,
                old: JSON | None = None) -> JSON:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        obj.setdefault("apiVersion", resource.api_version)
        if store:
            self.objects[resource][key] = obj
        change = Change(self.rv, resource, kind, copy.deepcopy(obj), copy.deepcopy(old))
        self.history.append(change)
        for listener in list(self.listeners):
            listener(change)
        return copy.deepcopy(obj)

    def _admit(self, svc: JSON, old: JSON | None) -> JSON:
        try:
            return services.admit(svc, old, self.allocator)
        except services.Invalid as exc:
            causes = tuple({"reason": "FieldValueInvalid", "message": d, "field": p} for p, d in exc.problems)
            raise ApiError(422, "Invalid", exc.message, exc.name, "Service", causes) from exc


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
