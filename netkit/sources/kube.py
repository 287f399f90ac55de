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
| Pods (optional) | none (for cluster DNS pod records)                                         |

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
import os
import random
from dataclasses import dataclass

import aiohttp
from kubernetes.aio import client as kclient
from kubernetes.aio import config as kconfig

from netkit.errors import NetkitError
from netkit.model.types import HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL
from netkit.sources.reflector import (
    ApiUnavailable,
    KubeListWatch,
    ListCall,
    Reflector,
    ReflectorEvent,
    ReflectorOptions,
    Synced,
)
from netkit.sources.store import Store

log = logging.getLogger(__name__)

SERVICE_SELECTOR = f"!{SERVICE_PROXY_NAME_LABEL}"
ENDPOINTS_SELECTOR = f"!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}"


class ApiConfigError(NetkitError):
    pass


# --- connecting ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """How to reach the API server. Neither set: in-cluster config (the normal DaemonSet case)."""

    kubeconfig: str = ""
    master: str = ""
    context: str = ""


def add_api_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kubernetes API")
    g.add_argument("--kubeconfig", metavar="FILE", default="",
                   help="kubeconfig to use (default: in-cluster config when running in a pod)")
    g.add_argument("--master", metavar="URL", default="",
                   help="API server URL; overrides the kubeconfig's server")
    g.add_argument("--context", metavar="NAME", default="", help="kubeconfig context (default: current)")


def settings_from_args(args: argparse.Namespace) -> ApiSettings:
    return ApiSettings(getattr(args, "kubeconfig", "") or "", getattr(args, "master", "") or "",
                       getattr(args, "context", "") or "")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and bool(os.environ.get("KUBERNETES_SERVICE_PORT"))


async def connect(settings: ApiSettings) -> kclient.ApiClient:
    """An ApiClient for `settings`. Credentials and their refresh (service-account token re-read,
    client certificates, exec plugins) are the library's."""
    cfg = kclient.Configuration()
    try:
        if settings.kubeconfig:
            await kconfig.load_kube_config(config_file=settings.kubeconfig, context=settings.context or None,
                                           client_configuration=cfg,
                                           persist_config=False)  # type: ignore[no-untyped-call]
        elif not settings.master:
            if not in_cluster():
                raise ApiConfigError("not running in a cluster: give --kubeconfig FILE or --master URL "
                                     "(or -f DIR to run from manifests)")
            kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except kconfig.ConfigException as exc:
        raise ApiConfigError(f"cannot load the API configuration: {exc}") from exc
    if settings.master:
        cfg.host = settings.master.rstrip("/")
    return kclient.ApiClient(cfg)


# --- what to watch -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """One reflector: the resource, its kind, the kubernetes.aio call that lists it, selectors."""

    resource: str
    kind: str
    call: str  # "<api class>.<method>" in kubernetes.aio.client
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


def list_call(api: kclient.ApiClient, spec: WatchSpec) -> ListCall:
    cls_name, method = spec.call.split(".")
    call: ListCall = getattr(getattr(kclient, cls_name)(api), f"{method}_without_preload_content")
    return call


async def serves_endpoint_slices(api: kclient.ApiClient, timeout: float) -> bool:
    """Discovery: does the cluster serve discovery.k8s.io/v1 endpointslices? Raises ApiUnavailable
    when it cannot tell (an outage must not switch netkit to the Endpoints fallback)."""
    try:
        resp = await kclient.DiscoveryV1Api(api).get_api_resources_without_preload_content(
            _request_timeout=timeout)
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


class KubeSource:
    """Feeds `store` from the API server until cancelled. Construct, then `await run()`."""

    name = "kubernetes"

    def __init__(self, settings: ApiSettings, store: Store, *, node_name: str = "", pods: bool = False,
                 dns: bool = False, options: ReflectorOptions | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings, self.store, self.node_name, self.pods, self.dns = settings, store, node_name, pods, dns
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
            self.reflectors = [
                Reflector(s.resource, KubeListWatch(list_call(api, s), s.kind, label_selector=s.label_selector,
                                                    field_selector=s.field_selector),
                          self._deliver, self.options, rng=self._rng)
                for s in plan]
            async with asyncio.TaskGroup() as tg:
                for r in self.reflectors:
                    tg.create_task(r.run(), name=f"reflector-{r.resource}")
        finally:
            await api.close()  # type: ignore[no-untyped-call]

    async def _discover(self, api: kclient.ApiClient) -> bool:
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
