"""An in-process Kubernetes API server for tests (a test double: never a product path).

Theory of operation. `TestApiServer` serves the HTTP side of the protocol in
`shared/reference/kubernetes-watch.md` over aiohttp on a loopback port, backed by
`netkit.testing.apistore.Store` (objects, one version counter, history, list snapshots):

- discovery: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/discovery.k8s.io[/v1]` (plain JSON; an
  option hides EndpointSlices to exercise the Endpoints fallback);
- list with `limit`/`continue` (pages of one snapshot; an expired token gives 410) and
  `labelSelector`/`fieldSelector`;
- watch (`watch=true`, booleans parsed like Go's strconv.ParseBool) from `resourceVersion`: unset or "0"
  sends synthetic ADDED events first, N sends only later changes, a compacted N gives 410 (as an ERROR
  event after HTTP 200, or as a plain HTTP 410: `expired_as_event`); BOOKMARK events every
  `bookmark_interval` when asked for; `sendInitialEvents=true` with `resourceVersionMatch=NotOlderThan`
  is served (ADDED for everything, then the `k8s.io/initial-events-end` bookmark) or, with
  `serve_initial_events=False`, rejected with 422 — never silently ignored; the stream ends cleanly at
  `timeoutSeconds`;
- GET, POST (201), PUT, PATCH (merge and strategic merge), DELETE on namespaced and cluster-scoped
  paths, enough for kubectl as people type it (`apply`, `create`, `replace`, `delete`, `get`, `label`;
  see `write_kubeconfig`);
- the OpenAPI documents kubectl validates against (`/openapi/v3`, `/openapi/v3/<group-version>`,
  `/openapi/v2` as JSON) and the server side of `fieldValidation` (`netkit.testing.openapi`);

`kubernetes_service=True` makes it start as a cluster does, with `default/kubernetes` (443 → the
server's address, or `advertise`) and its EndpointSlice; the lab and `python -m
netkit.testing.apiserver` turn it on, the protocol tests start from an empty server.

Fault hooks: `end_watches()` (clean end of every stream), `drop_connections()` (abort every stream's
TCP connection mid-chunk), `compact()` (the next watch from an old version gets 410),
`fail_next(n, code)` (the next n resource requests fail), `stop()`/`start()` (down and back up on the
same port, objects kept). `audit` records every request (verb, group, resource, namespace, name) and
`rbac_uncovered(audit, cluster_role)` lists the requests a ClusterRole would not allow, so a test can
check the daemon's RBAC covers everything it did.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict

from netkit.testing import openapi
from netkit.testing.apistore import (
    JSON,
    RESOURCES,
    ApiError,
    Change,
    Resource,
    Store,
    field_selector,
    label_selector,
    resource_for_kind,
)
from netkit.testing.patch import merge_patch, strategic_merge_patch

_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def parse_bool(text: str | None, name: str) -> bool:
    """Go's strconv.ParseBool, which is how the API server reads boolean query parameters."""
    if text is None or text == "":
        return False
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ApiError(400, "BadRequest", f"invalid boolean for {name}: {text!r}")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One request as RBAC sees it. Non-resource requests have resource "" and the path set."""

    verb: str  # get, list, watch, create, update, delete
    group: str
    resource: str
    namespace: str
    name: str
    path: str
    code: int
    query: str = ""  # the raw query string (selectors, watch parameters)
    auth: str = ""  # the Authorization header as sent (the test server accepts any)


@dataclass(frozen=True, slots=True)
class _Target:
    resource: Resource
    namespace: str  # "" for all namespaces or cluster-scoped
    name: str  # "" for the collection


class _Stream:
    """One open watch: a queue of changes plus the control messages of the fault hooks."""

    END = object()
    DROP = object()
    STALL = object()

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.queue: asyncio.Queue[object] = asyncio.Queue()


class TestApiServer:
    """The test API server. Construct, then `await start()`; `await stop()` when done."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, bookmark_interval: float = 60.0,
                 default_watch_timeout: float = 1800.0, serve_endpoint_slices: bool = True,
                 serve_initial_events: bool = True, expired_as_event: bool = True,
                 store: Store | None = None, kubernetes_service: bool = False,
                 advertise: tuple[str, int] | None = None) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the test API server listens on loopback only")
        self.host, self.port = host, port
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.serve_endpoint_slices = serve_endpoint_slices
        self.serve_initial_events = serve_initial_events
        self.expired_as_event = expired_as_event
        self.store = store or Store()
        self.kubernetes_service = kubernetes_service
        self.advertise = advertise  # where default/kubernetes points; default: where this server listens
        self.audit: list[AuditRecord] = []
        self._streams: set[_Stream] = set()
        self._failures: list[int] = []
        self._runner: web.AppRunner | None = None
        self.store.listeners.append(self._publish)

    # lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (again) on the same port; objects and history survive a stop/start."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5,
                                    handler_cancellation=True)  # a client gone ends its watch at once
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        if self.kubernetes_service:
            self._seed_kubernetes_service()

    def _seed_kubernetes_service(self) -> None:
        """`default/kubernetes` and its EndpointSlice, as kube-apiserver keeps them in every cluster
        (its endpoint reconciler): 443/TCP `https` on the service range's first address, one endpoint
        at the API server's address. Written once; a restart keeps what is there."""
        if ("default", "kubernetes") in self.store.objects[resource_for_kind("Service")]:
            return
        host, port = self.advertise or (self.host, self.port)
        labels = {"component": "apiserver", "provider": "kubernetes"}
        self.store.create({"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "kubernetes", "namespace": "default", "labels": labels},
            "spec": {"clusterIP": str(self.store.first_service_ip), "type": "ClusterIP",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}})
        self.store.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {
            "name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv6" if ":" in host else "IPv4",
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})

    async def serve_socket(self, sock: socket.socket) -> web.SockSite:
        """Also answer on `sock`, a listening TCP socket made by the caller: one on loopback inside
        another network namespace is how the lab's nodes reach the API (`netkit.lab.cluster`)."""
        if self._runner is None:
            raise RuntimeError("start() the server first")
        site = web.SockSite(self._runner, sock)
        await site.start()
        return site

    async def stop(self) -> None:
        """Go down: open streams are cut and new connections refused until `start()`."""
        self.drop_connections()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # fault hooks

    def end_watches(self) -> None:
        for stream in list(self._streams):
            stream.queue.put_nowait(_Stream.END)

    def drop_connections(self) -> None:
        for stream in list(self._streams):
            stream.queue.put_nowait(_Stream.DROP)

    def stall_watches(self) -> None:
        """Open streams go silent and ignore their timeout, like a dead TCP peer (until stop())."""
        for stream in list(self._streams):
            stream.queue.put_nowait(_Stream.STALL)

    def compact(self) -> None:
        self.store.compact()

    def fail_next(self, count: int, code: int = 500) -> None:
        self._failures.extend([code] * count)

    @property
    def open_watches(self) -> int:
        return len(self._streams)

    def requests(self, verb: str, resource: str = "") -> list[AuditRecord]:
        return [a for a in self.audit if a.verb == verb and (not resource or a.resource == resource)]

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for kubectl and for netkit's `--kubeconfig`, pointing at this server."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test",
                                                      "namespace": "default"}}],
        }
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        return path

    # HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        if path.startswith("/openapi/"):
            self._record("get", None, request, 200)
            return self._openapi(request, path)
        discovery = self._discovery(path)
        if discovery is not None:
            self._record("get", None, request, 200)
            return web.json_response(discovery)
        try:
            target = self._target(path)
        except ApiError as exc:
            self._record("get", None, request, exc.code)
            return _error(exc)
        verb = _verb(request.method, target, request.query)
        code = self._failures.pop(0) if self._failures else 0
        try:
            if code:
                raise ApiError(code, "InternalError", f"injected failure {code}")
            if verb == "watch":
                self._record(verb, target, request, 200)
                return await self._watch(request, target)
            response = await self._serve(request, target, verb)
        except ApiError as exc:
            self._record(verb, target, request, exc.code)
            return _error(exc)
        self._record(verb, target, request, response.status)
        return response

    def _record(self, verb: str, target: _Target | None, request: web.Request, code: int) -> None:
        path, query = request.path, request.query_string
        auth = request.headers.get("Authorization", "")
        if target is None:
            self.audit.append(AuditRecord(verb, "", "", "", "", path, code, query, auth))
        else:
            r = target.resource
            self.audit.append(AuditRecord(verb, r.group, r.plural, target.namespace, target.name, path, code,
                                          query, auth))

    async def _serve(self, request: web.Request, target: _Target, verb: str) -> web.Response:
        store, r = self.store, target.resource
        if verb == "list":
            return web.json_response(self._list(target, request.query))
        if verb == "get":
            return web.json_response(store.get(r, target.namespace, target.name))
        if verb == "delete":
            return web.json_response(store.delete(r, target.namespace, target.name))
        if verb not in ("patch", "create", "update"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on this path")
        body = await _patched(request, target, store) if verb == "patch" else await _body(request, target)
        body, warnings = openapi.validate(body, r, request.query.get("fieldValidation", ""))
        headers = CIMultiDict(("Warning", '299 - "{}"'.format(w.replace('"', '\\"'))) for w in warnings)
        if verb == "create":
            return web.json_response(store.create(body), status=201, headers=headers)
        if verb == "update" and (body.get("metadata") or {}).get("name") != target.name:
            raise ApiError(400, "BadRequest", f"the name of the object ({body.get('metadata', {}).get('name')}) "
                                              f"does not match the name on the URL ({target.name})")
        return web.json_response(store.update(body), headers=headers)

    def _openapi(self, request: web.Request, path: str) -> web.Response:
        """`/openapi/v2` (JSON only) and `/openapi/v3[/<group-version>]` (see netkit.testing.openapi)."""
        served = tuple(self._served())
        if path == "/openapi/v2":
            accept = request.headers.get("Accept", "*/*")
            if "json" not in accept and "*/*" not in accept:
                return _error(ApiError(406, "NotAcceptable", "the test API server serves /openapi/v2 as JSON only"))
            return web.json_response(openapi.v2_document(served))
        if path.rstrip("/") == "/openapi/v3":
            return web.json_response(openapi.v3_index(served))
        doc = openapi.v3_document(served, path.removeprefix("/openapi/v3/"))
        if doc is None:
            return _error(ApiError(404, "NotFound", f"the server could not find the requested resource ({path})"))
        return web.json_response(doc)

    def _list(self, target: _Target, query: Mapping[str, str]) -> JSON:
        limit_text = query.get("limit", "0")
        limit = int(limit_text) if limit_text.isdigit() else 0
        rv, items, token = self.store.list_page(target.resource, target.namespace,
                                                query.get("labelSelector", ""), query.get("fieldSelector", ""),
                                                limit, query.get("continue", ""))
        meta: JSON = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
        return {"kind": f"{target.resource.kind}List", "apiVersion": target.resource.api_version,
                "metadata": meta, "items": items}

    # watch

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        q = request.query
        timeout = float(q.get("timeoutSeconds") or self.default_watch_timeout)
        bookmarks = parse_bool(q.get("allowWatchBookmarks"), "allowWatchBookmarks")
        stream = _Stream(request)
        try:
            backlog = self._backlog(target, q)
        except ApiError as exc:
            if exc.code != 410 or not self.expired_as_event:
                raise
            backlog = [{"type": "ERROR", "object": exc.status()}]
        self._streams.add(stream)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for event in backlog:
                await resp.write(_line(event))
            failed = any(e["type"] == "ERROR" for e in backlog)
            if not failed and not await self._follow(resp, stream, target, timeout, bookmarks):
                return resp  # dropped: no clean end
            await resp.write_eof()
            return resp
        finally:
            self._streams.discard(stream)

    def _backlog(self, target: _Target, q: Mapping[str, str]) -> list[JSON]:
        """Events sent before live ones: synthetic ADDED, or history after the requested version."""
        rv_text = q.get("resourceVersion", "")
        r = target.resource
        if parse_bool(q.get("sendInitialEvents"), "sendInitialEvents"):
            if not self.serve_initial_events:
                raise ApiError(422, "Invalid", "sendInitialEvents is not supported by this server")
            if q.get("resourceVersionMatch") != "NotOlderThan":
                raise ApiError(422, "Invalid", "sendInitialEvents requires resourceVersionMatch=NotOlderThan")
            events = self._current(target, q)
            end = self._bookmark(r, self.store.rv)
            end["object"]["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
            return [*events, end]
        if rv_text in ("", "0"):
            return self._current(target, q)
        if not rv_text.isdigit():
            raise ApiError(400, "BadRequest", f"invalid resourceVersion {rv_text!r}")
        convert = self._matcher(target, q)
        return [e for c in self.store.changes_since(int(rv_text)) if (e := convert(c)) is not None]

    def _current(self, target: _Target, q: Mapping[str, str]) -> list[JSON]:
        items = self.store.select(target.resource, target.namespace, q.get("labelSelector", ""),
                                  q.get("fieldSelector", ""))
        return [{"type": "ADDED", "object": {"kind": target.resource.kind, **o}} for o in items]

    def _matcher(self, target: _Target, q: Mapping[str, str]) -> Callable[[Change], JSON | None]:
        """The event a watch with these selectors sends for a change, or None. As kube-apiserver's
        cacher (cacheWatcher.convertToWatchEvent): an update that makes an object match is ADDED, one
        that makes it stop matching is DELETED (the previous object at the new resourceVersion)."""
        labels, fields = label_selector(q.get("labelSelector", "")), field_selector(q.get("fieldSelector", ""))

        def passes(obj: JSON | None) -> bool:
            ns = ((obj or {}).get("metadata") or {}).get("namespace", "")
            return obj is not None and (not target.namespace or ns == target.namespace) \
                and labels(obj) and fields(obj)

        def event(change: Change) -> JSON | None:
            if change.resource != target.resource:
                return None
            now, before = passes(change.obj), change.type == "MODIFIED" and passes(change.old)
            if change.type != "MODIFIED" or now == before:
                return _event(change) if now else None
            if now:
                return _event(Change(change.rv, change.resource, "ADDED", change.obj))
            assert change.old is not None
            gone = copy.deepcopy(change.old)
            gone["metadata"]["resourceVersion"] = str(change.rv)
            return _event(Change(change.rv, change.resource, "DELETED", gone))

        return event

    async def _follow(self, resp: web.StreamResponse, stream: _Stream, target: _Target, timeout: float,
                      bookmarks: bool) -> bool:
        """Relay live changes until the timeout (clean end: True) or a drop (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        convert = self._matcher(target, stream.request.query)
        while (left := deadline - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(stream.queue.get(), min(left, self.bookmark_interval))
            except TimeoutError:
                if bookmarks and loop.time() < deadline:
                    await resp.write(_line(self._bookmark(target.resource, self.store.rv)))
                continue
            if item is _Stream.END:
                return True
            if item is _Stream.STALL:  # silent until dropped (stop() drops every stream)
                while await stream.queue.get() is not _Stream.DROP:
                    pass
                item = _Stream.DROP
            if item is _Stream.DROP:
                if stream.request.transport is not None:
                    stream.request.transport.abort()
                return False
            assert isinstance(item, Change)
            event = convert(item)
            if event is not None:
                await resp.write(_line(event))
        return True

    def _publish(self, change: Change) -> None:
        for stream in self._streams:
            stream.queue.put_nowait(change)

    @staticmethod
    def _bookmark(r: Resource, rv: int) -> JSON:
        return {"type": "BOOKMARK", "object": {"kind": r.kind, "apiVersion": r.api_version,
                                               "metadata": {"resourceVersion": str(rv)}}}

    # routing and discovery

    def _served(self) -> list[Resource]:
        return [r for r in RESOURCES if self.serve_endpoint_slices or r.group != "discovery.k8s.io"]

    def _target(self, path: str) -> _Target:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, rest = parts[1], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        for r in self._served():
            if r.group == group and rest and rest[0] == r.plural and len(rest) <= 2 \
                    and (r.namespaced or not namespace):
                return _Target(r, namespace, rest[1] if len(rest) == 2 else "")
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")

    def _discovery(self, path: str) -> JSON | None:
        path = path.rstrip("/") or "/"
        groups = sorted({r.group for r in self._served() if r.group})
        if path == "/version":
            return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-netkit-test", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]}
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in groups]}
        if path == "/api/v1":
            return _resource_list("v1", [r for r in self._served() if not r.group])
        for g in groups:
            if path == f"/apis/{g}":
                return {"kind": "APIGroup", "apiVersion": "v1", **_group(g)}
            if path == f"/apis/{g}/v1":
                return _resource_list(f"{g}/v1", [r for r in self._served() if r.group == g])
        return None


def rbac_uncovered(records: list[AuditRecord], cluster_role: Mapping[str, Any], *,
                   include_discovery: bool = False) -> list[AuditRecord]:
    """The requests in `records` that the ClusterRole's rules do not allow (RBAC's matching: group,
    resource, verb, optional resourceNames; nonResourceURLs for the rest). Discovery paths are allowed
    to every authenticated user by system:discovery, so they are skipped unless asked for."""
    rules = [r for r in cluster_role.get("rules") or [] if isinstance(r, Mapping)]
    return [a for a in records if (a.resource or include_discovery) and not any(_allows(r, a) for r in rules)]


def _allows(rule: Mapping[str, Any], a: AuditRecord) -> bool:
    def has(field: str, value: str) -> bool:
        values = rule.get(field) or []
        return "*" in values or value in values

    if not a.resource:
        return has("nonResourceURLs", a.path) and has("verbs", a.verb)
    names = rule.get("resourceNames") or []
    return (has("apiGroups", a.group) and has("resources", a.resource) and has("verbs", a.verb)
            and (not names or a.name in names))


def _verb(method: str, target: _Target, query: Mapping[str, str]) -> str:
    if method == "GET":
        if target.name:
            return "get"
        return "watch" if parse_bool(query.get("watch"), "watch") else "list"
    if method == "POST" and not target.name:
        if target.resource.namespaced and not target.namespace:
            raise ApiError(405, "MethodNotAllowed", "POST needs a namespace in the path")
        return "create"
    if method == "PUT" and target.name:
        return "update"
    if method == "PATCH" and target.name:
        return "patch"
    if method == "DELETE" and target.name:
        return "delete"
    raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on this path")


async def _body(request: web.Request, target: _Target) -> JSON:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body must be a JSON object")
    r = target.resource
    if body.get("kind") != r.kind:
        raise ApiError(400, "BadRequest", f"expected kind {r.kind}, got {body.get('kind')!r}")
    meta = body.setdefault("metadata", {})
    if r.namespaced:
        if meta.get("namespace") not in (None, "", target.namespace):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                              "sent on the request")
        meta["namespace"] = target.namespace
    return body


PATCHES: dict[str, Callable[[Any, Any], Any]] = {
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}


async def _patched(request: web.Request, target: _Target, store: Store) -> JSON:
    """The object with a merge or strategic merge patch applied (what kubectl apply, label,
    annotate and scale send); other patch types get 415."""
    merge = PATCHES.get(request.content_type)
    if merge is None:
        raise ApiError(415, "UnsupportedMediaType", f"the test API server does not take {request.content_type} "
                                                    f"patches (only {', '.join(PATCHES)})")
    try:
        patch = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from exc
    current = store.get(target.resource, target.namespace, target.name)
    result = merge(current, patch)
    if not isinstance(result, dict):
        raise ApiError(400, "BadRequest", "the patch must be a JSON object")
    meta = result.setdefault("metadata", {})
    meta.update(name=target.name, resourceVersion=current["metadata"]["resourceVersion"])
    result["kind"] = target.resource.kind
    return result


def _event(change: Change) -> JSON:
    return {"type": change.type, "object": {"kind": change.resource.kind, **change.obj}}


def _line(event: JSON) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _error(exc: ApiError) -> web.Response:
    return web.json_response(exc.status(), status=exc.code)


def _group(name: str) -> JSON:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


def _resource_list(group_version: str, resources: list[Resource]) -> JSON:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": [
        {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": list(r.short_names)}
        for r in resources]}


def main(argv: list[str] | None = None) -> None:
    """`python -m netkit.testing.apiserver`: serve on loopback until interrupted (for labs and demos)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m netkit.testing.apiserver",
                                description="netkit's test API server (a test double, loopback only)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--kubeconfig", metavar="FILE", help="write a kubeconfig pointing at the server")
    p.add_argument("--no-endpoint-slices", action="store_true", help="serve v1 Endpoints only")
    p.add_argument("--no-kubernetes-service", action="store_true",
                   help="start empty, without the default/kubernetes Service every cluster has")
    args = p.parse_args(argv)

    async def serve() -> None:
        async with TestApiServer(host=args.host, port=args.port, serve_endpoint_slices=not args.no_endpoint_slices,
                                 kubernetes_service=not args.no_kubernetes_service) as srv:
            if args.kubeconfig:
                srv.write_kubeconfig(Path(args.kubeconfig))
            print(f"serving {srv.url}", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
