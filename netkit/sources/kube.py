"""The Kubernetes API as a source: what netkit watches, how it connects, and the store it feeds.

Theory of operation. `KubeSource.run()` connects (`connect`: in-cluster config when running in a pod,
`--kubeconfig F` and/or `--master URL` otherwise), asks discovery whether the cluster serves
`discovery.k8s.io/v1` EndpointSlices, and then runs one `Reflector` per resource of `watch_plan`:

| resource        | selector                                                                   |
|-----------------|----------------------------------------------------------------------------|
| Services        | label `!service.kubernetes.io/service-proxy-name`                          |
| EndpointSlices  | label `!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless` |
| v1 Endpoints    | the same, and only when the cluster serves no EndpointSlices               |
| this Node       | field `metadata.name=<node>` (its labels carry the topology zone)          |
| Pods (optional) | none (verified DNS pod records only; never for `netkit run`)               |

`netkit dns` (`dns=True`) watches like CoreDNS's `kubernetes` plugin instead: every Service and every
EndpointSlice (no selectors: headless services and services of other proxies need names too), the
Namespaces (an existing namespace without services is NODATA, not NXDOMAIN), and Pods only when asked.

These are kube-proxy's own selectors, so netkit programs exactly the services kube-proxy would. Every
reflector delivers into one `Store`; the source marks itself synced in the store when every reflector
has completed its first list, and only then may rules be written. A discovery failure is retried with
the reflector's backoff; it never decides the Endpoints fallback on an outage.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from netkit.model.types import HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL
from netkit.sources.apiclient import ApiClient, load_config, open_client
from netkit.sources.kubeconfig import SERVICE_ACCOUNT_DIR
from netkit.sources.reflector import (
    ApiUnavailable,
    Decoder,
    KubeListWatch,
    ListCall,
    Reflector,
    ReflectorEvent,
    ReflectorOptions,
    Synced,
    decode_api,
)
from netkit.sources.store import Store

log = logging.getLogger(__name__)

SERVICE_SELECTOR = f"!{SERVICE_PROXY_NAME_LABEL}"
ENDPOINTS_SELECTOR = f"!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}"


# --- connecting ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """How to reach the API server. Neither set: in-cluster config (the normal DaemonSet case)."""

    kubeconfig: str = ""
    master: str = ""
    context: str = ""
    qps: float = 5.0  # clientConnection.qps / --kube-api-qps: client-side rate limit (0 or less: none)
    burst: int = 10  # clientConnection.burst / --kube-api-burst


class RateLimiter:
    """client-go's token bucket: `burst` requests at once, then `qps` per second (a watch is one
    request; the events it streams are not limited)."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, max(1, burst), clock
        self.tokens = float(self.burst)
        self.stamp = clock()

    def delay(self) -> float:
        """Take a token; how long to wait before using it (pure but for the clock)."""
        if self.qps <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps

    async def wait(self) -> None:
        wait = self.delay()
        if wait > 0:
            await asyncio.sleep(wait)


def settings_from_args(args: argparse.Namespace) -> ApiSettings:
    return ApiSettings(getattr(args, "kubeconfig", "") or "", getattr(args, "master", "") or "",
                       getattr(args, "context", "") or "")


async def connect(settings: ApiSettings, *, env: Mapping[str, str] | None = None,
                  secret_dir: str = SERVICE_ACCOUNT_DIR) -> ApiClient:
    """A client for `settings` (netkit.sources.apiclient: kube-proxy's choice between --kubeconfig,
    --master and the in-cluster config; credentials and their refresh). ApiConfigError when unusable."""
    config = load_config(settings.kubeconfig, settings.context, settings.master, env=env, secret_dir=secret_dir)
    return open_client(config)


# --- what to watch -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """One reflector: the resource, its kind, the list call (by the official client's name), selectors."""

    resource: str
    kind: str
    call: str  # "<api class>.<method>" as the official client names it: a key of PATHS
    label_selector: str = ""
    field_selector: str = ""


def watch_plan(node_name: str, *, endpoint_slices: bool, pods: bool = False,
               dns: bool = False) -> tuple[WatchSpec, ...]:
    """kube-proxy's watches, or cluster DNS's (pure: the table in the module docstring)."""
    services, endpoints = ("", "") if dns else (SERVICE_SELECTOR, ENDPOINTS_SELECTOR)
    plan = [WatchSpec("services", "Service", "CoreV1Api.list_service_for_all_namespaces", services)]
    if endpoint_slices:
        plan.append(WatchSpec("endpointslices", "EndpointSlice",
                              "DiscoveryV1Api.list_endpoint_slice_for_all_namespaces", endpoints))
    else:
        plan.append(WatchSpec("endpoints", "Endpoints", "CoreV1Api.list_endpoints_for_all_namespaces", endpoints))
    if dns:
        plan.append(WatchSpec("namespaces", "Namespace", "CoreV1Api.list_namespace"))
    if node_name:
        plan.append(WatchSpec("nodes", "Node", "CoreV1Api.list_node", field_selector=f"metadata.name={node_name}"))
    if pods:
        plan.append(WatchSpec("pods", "Pod", "CoreV1Api.list_pod_for_all_namespaces"))
    return tuple(plan)


# The API paths of the list calls a WatchSpec names, and the query parameters the reflector passes by
# their Python names (the official client's, whose generated calls these replace: importing that
# package cost the daemon ~20 MiB and a third of a second at every start; netkit.sources.apiclient).
PATHS = {
    "CoreV1Api.list_service_for_all_namespaces": "/api/v1/services",
    "CoreV1Api.list_endpoints_for_all_namespaces": "/api/v1/endpoints",
    "DiscoveryV1Api.list_endpoint_slice_for_all_namespaces": "/apis/discovery.k8s.io/v1/endpointslices",
    "CoreV1Api.list_namespace": "/api/v1/namespaces",
    "CoreV1Api.list_node": "/api/v1/nodes",
    "CoreV1Api.list_pod_for_all_namespaces": "/api/v1/pods",
}
_QUERY = {"_continue": "continue", "label_selector": "labelSelector", "field_selector": "fieldSelector",
          "limit": "limit", "watch": "watch", "resource_version": "resourceVersion",
          "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds"}


async def get(api: ApiClient, path: str, _request_timeout: float | None = None,
              **query: Any) -> aiohttp.ClientResponse:
    """GET `path` with `query` (the generated calls' parameter names) as JSON, unread."""
    params = [(_QUERY[k], _param(v)) for k, v in query.items() if v is not None]
    return await api.get(path, params, _request_timeout)


def _param(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def list_call(api: ApiClient, spec: WatchSpec, limiter: RateLimiter | None = None) -> ListCall:
    path = PATHS[spec.call]

    async def call(**kwargs: Any) -> aiohttp.ClientResponse:
        if limiter is not None:
            await limiter.wait()
        return await get(api, path, **kwargs)

    return call


async def serves_endpoint_slices(api: ApiClient, timeout: float) -> bool:
    """Discovery: does the cluster serve discovery.k8s.io/v1 endpointslices? Raises ApiUnavailable
    when it cannot tell (an outage must not switch netkit to the Endpoints fallback)."""
    try:
        resp = await get(api, "/apis/discovery.k8s.io/v1/", timeout)
        async with resp:
            if resp.status == 404:
                return False
            if resp.status != 200:
                raise ApiUnavailable(f"discovery: HTTP {resp.status}")
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        raise ApiUnavailable(f"discovery: {exc!r}") from exc
    resources = body.get("resources") if isinstance(body, dict) else None
    return any(isinstance(r, dict) and r.get("name") == "endpointslices" for r in resources or [])


# --- the source ----------------------------------------------------------------------------------


class StoreSink(Protocol):
    """What a KubeSource feeds: the general `Store`, or cluster DNS's (netkit.dns.store)."""

    def expect(self, source: str) -> None: ...

    def mark_synced(self, source: str) -> None: ...

    def apply(self, event: ReflectorEvent) -> None: ...


class KubeSource:
    """Feeds `store` from the API server until cancelled. Construct, then `await run()`."""

    name = "kubernetes"

    def __init__(self, settings: ApiSettings, store: Store | StoreSink, *, node_name: str = "", pods: bool = False,
                 dns: bool = False, options: ReflectorOptions | None = None,
                 rng: random.Random | None = None, decode: Decoder = decode_api) -> None:
        self.settings, self.store, self.node_name, self.pods, self.dns = settings, store, node_name, pods, dns
        self.decode = decode  # what the reflectors make of each object (cluster DNS: netkit.dns.decode)
        self.options = options or ReflectorOptions()
        self.reflectors: list[Reflector] = []
        self.endpoint_slices: bool | None = None  # decided by discovery in run()
        self._rng = rng or random.Random()
        self._pending_sync: set[str] = set()
        store.expect(self.name)

    async def run(self) -> None:
        api = await connect(self.settings)
        try:
            self.endpoint_slices = await self._discover(api)
            plan = watch_plan(self.node_name, endpoint_slices=self.endpoint_slices, pods=self.pods, dns=self.dns)
            log.info("watching %s", ", ".join(s.resource for s in plan))
            self._pending_sync = {s.resource for s in plan}
            limiter = RateLimiter(self.settings.qps, self.settings.burst)
            self.reflectors = [
                Reflector(s.resource, KubeListWatch(list_call(api, s, limiter), s.kind, label_selector=s.label_selector,
                                                    field_selector=s.field_selector),
                          self._deliver, self.options, rng=self._rng, decode=self.decode)
                for s in plan]
            async with asyncio.TaskGroup() as tg:
                for r in self.reflectors:
                    tg.create_task(r.run(), name=f"reflector-{r.resource}")
        finally:
            await api.close()

    async def _discover(self, api: ApiClient) -> bool:
        failures = 0
        while True:
            try:
                slices = await serves_endpoint_slices(api, self.options.list_timeout)
                if not slices:
                    log.warning("the cluster serves no EndpointSlices: falling back to v1 Endpoints")
                return slices
            except ApiUnavailable as exc:
                failures += 1
                delay = self.options.backoff.delay(failures, self._rng)
                log.warning("%s; retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)

    def _deliver(self, event: ReflectorEvent) -> None:
        self.store.apply(event)
        if isinstance(event, Synced):
            self._pending_sync.discard(event.resource)
            if not self._pending_sync:
                self.store.mark_synced(self.name)
