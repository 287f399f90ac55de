"""Helpers for the daemon's source tests: object builders, fast reflector options, and async scaffolding.

Tests are plain functions that call `run(scenario())`: each scenario starts its own loopback test API
server inside its own event loop, so nothing leaks between tests and no asyncio plugin is needed.
Fault timings are shortened through parameters (backoff, watch timeouts), never by sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from netkit.sources.apiclient import open_client
from netkit.sources.kube import WatchSpec, list_call, watch_plan
from netkit.sources.kubeconfig import ApiConfig
from netkit.sources.reflector import (
    BackoffPolicy,
    KubeListWatch,
    Reflector,
    ReflectorEvent,
    ReflectorOptions,
)
from netkit.testing.apiserver import TestApiServer

T = TypeVar("T")

# The bound on a wait for an event (a sync, a change, a process's line): generous, because it costs
# nothing when the event comes and a loaded machine can take many seconds; a test's whole run gets
# RUN_TIMEOUT. Neither is a timing assertion.
EVENT_TIMEOUT = 120.0
RUN_TIMEOUT = 600.0

FAST = ReflectorOptions(page_size=500, min_watch_timeout=30, read_timeout_margin=2, list_timeout=5,
                        short_watch=0.0, backoff=BackoffPolicy(initial=0.02, cap=0.2))


def run(coro: Coroutine[Any, Any, T], timeout: float = RUN_TIMEOUT) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def eventually(check: Callable[[], bool], timeout: float = EVENT_TIMEOUT, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def background(work: Awaitable[Any]) -> AsyncIterator[asyncio.Task[Any]]:
    task = asyncio.ensure_future(work)
    try:
        yield task
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


def service(name: str, ip: str, *, ns: str = "default", labels: dict[str, str] | None = None,
            port: int = 80, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": port, "protocol": "TCP"}], **spec}}


def endpoint_slice(name: str, svc: str, ips: list[str], *, ns: str = "default",
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"kubernetes.io/service-name": svc, **(labels or {})}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


def endpoints(name: str, ips: list[str], *, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns},
            "subsets": [{"addresses": [{"ip": ip} for ip in ips],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]}


def node(name: str, zone: str = "zone-a", ip: str = "192.0.2.10") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}


def spec_for(resource: str, node_name: str = "node-a") -> WatchSpec:
    plans = watch_plan(node_name, endpoint_slices=True) + watch_plan(node_name, endpoint_slices=False)
    return next(s for s in plans if s.resource == resource)


@asynccontextmanager
async def reflecting(srv: TestApiServer, resource: str = "services", options: ReflectorOptions = FAST,
                     ) -> AsyncIterator[tuple[Reflector, list[ReflectorEvent]]]:
    """A running reflector for one resource of `srv`, recording what it delivers."""
    events: list[ReflectorEvent] = []
    spec = spec_for(resource)
    api = open_client(ApiConfig(srv.url))
    lw = KubeListWatch(list_call(api, spec), spec.kind, label_selector=spec.label_selector,
                       field_selector=spec.field_selector)
    reflector = Reflector(resource, lw, events.append, options)
    try:
        async with background(reflector.run()):
            await asyncio.wait_for(reflector.wait_synced(), EVENT_TIMEOUT)
            yield reflector, events
    finally:
        await api.close()
