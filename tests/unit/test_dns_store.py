"""Cluster DNS's store (netkit.dns.store) and decoder (netkit.dns.decode): a relist keeps every name
answered until the new list is complete, and the objects keep only what answers read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from netkit.dns.decode import decode, decode_unlabelled
from netkit.dns.names import name_from_text
from netkit.dns.resolver import Rcode, resolve
from netkit.dns.store import ClusterStore
from netkit.dns.view import Options, PodMode, Views, build
from netkit.model.types import Endpoint, EndpointSlice, ObjectRef, Pod, Service
from netkit.sources.reflector import JSON, EventType, Gone, Page, Reflector, ReflectorOptions, Update

OPTIONS = Options(pods=PodMode.VERIFIED)


def service(i: int) -> JSON:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": "ns", "resourceVersion": "1", "uid": f"u-{i}",
                         "labels": {"app": "web"}, "annotations": {"note": "x" * 200},
                         "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"clusterIP": f"10.96.0.{i + 1}", "type": "ClusterIP", "sessionAffinity": "ClientIP",
                     "externalIPs": ["192.0.2.1"], "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}


def pod(i: int) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "ns", "labels": {"app": "web"}, "uid": f"p-{i}"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "podIP": f"10.244.0.{i + 1}", "podIPs": [{"ip": f"10.244.0.{i + 1}"}],
                       "hostIP": "192.168.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}


def endpoint_slice(i: int) -> JSON:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"svc-{i}-abc", "namespace": "ns", "annotations": {"a": "b"},
                         "labels": {"kubernetes.io/service-name": f"svc-{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "h2c"}],
            "endpoints": [{"addresses": [f"10.244.0.{i + 1}"], "nodeName": "node-a", "zone": "z1",
                           "conditions": {"ready": True, "serving": True, "terminating": False},
                           "hints": {"forZones": [{"name": "z1"}]},
                           "targetRef": {"kind": "Pod", "namespace": "ns", "name": f"web-{i}", "uid": f"p-{i}"}}]}


def test_the_decoder_keeps_only_what_answers_read() -> None:
    (svc,) = decode(service(1))
    assert isinstance(svc, Service)
    assert svc.ref == ObjectRef("ns", "svc-1") and [str(a) for a in svc.cluster_ips] == ["10.96.0.2"]
    assert [(p.name, p.port) for p in svc.ports] == [("http", 80)] and svc.labels == (("app", "web"),)
    assert svc.annotations == () and svc.external_ips == () and svc.session_affinity_timeout is None
    (es,) = decode(endpoint_slice(1))
    assert isinstance(es, EndpointSlice) and es.annotations == ()
    assert es.endpoints == (Endpoint(es.endpoints[0].addresses, True, target_ref=ObjectRef("ns", "web-1")),)
    assert es.endpoints[0].node_name is None and es.endpoints[0].zone is None and es.endpoints[0].hint_zones == ()
    assert [(p.name, p.port, p.app_protocol) for p in es.ports] == [("http", 8080, None)]
    (p,) = decode(pod(1))
    assert isinstance(p, Pod) and p.ref == ObjectRef("ns", "web-1") and p.node_name is None
    (bare,), (bare_slice,) = decode_unlabelled(service(1)), decode_unlabelled(endpoint_slice(1))
    assert isinstance(bare, Service) and isinstance(bare_slice, EndpointSlice)
    assert bare.labels == () and bare_slice.labels == () and bare_slice.service_name == "svc-1"


def test_repeated_values_are_one_object() -> None:
    (a,), (b,) = decode(pod(1)), decode(pod(2))
    (es,) = decode(endpoint_slice(1))
    assert isinstance(a, Pod) and isinstance(b, Pod) and isinstance(es, EndpointSlice)
    assert a.ref.namespace is b.ref.namespace
    assert es.endpoints[0].addresses[0] is a.ips[0]  # a pod's address is its endpoint's
    assert es.endpoints[0].target_ref is a.ref
    (s1,), (s2,) = decode(service(1)), decode(service(2))
    assert isinstance(s1, Service) and isinstance(s2, Service) and s1.ports is s2.ports and s1.labels is s2.labels


class PagedList:
    """A ListWatch of one resource: the first list is `first`, every later one `then`, in pages of one;
    every watch ends in 410 Gone. A relist stops before its last page until `release` is set."""

    def __init__(self, kind: str, first: list[JSON], then: list[JSON]) -> None:
        self.kind, self.first, self.then = kind, first, then
        self.lists = 0
        self.release = asyncio.Event()
        self.held = asyncio.Event()

    async def list_page(self, limit: int, continue_token: str, timeout: float) -> Page:
        offset = int(continue_token or 0)
        if offset == 0:
            self.lists += 1
        items = self.first if self.lists == 1 else self.then
        if self.lists > 1 and offset == len(items) - 1:
            self.held.set()
            await self.release.wait()
        end = offset + 1
        return Page(items[offset:end], str(self.lists), str(end) if end < len(items) else "")

    @asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int,
                    read_timeout: float) -> AsyncIterator[AsyncIterator[JSON]]:
        yield self._events()

    async def _events(self) -> AsyncIterator[JSON]:
        if self.lists > 1:
            await self.release.wait()
        for event in ():  # no event: the version is too old at once
            yield event
        raise Gone("too old resource version")


def answered(store: ClusterStore, names: list[str], views: Views | None = None) -> dict[str, Rcode]:
    view = views.build(store.objects()) if views is not None else build(store.objects(), OPTIONS)
    return {n: resolve(view, OPTIONS, name_from_text(n), 1).rcode for n in names}


def test_a_relist_keeps_answering_from_the_old_objects_until_the_new_list_is_complete() -> None:
    async def scenario() -> dict[str, Any]:
        store = ClusterStore()
        lists = {"services": PagedList("Service", [service(i) for i in range(3)], [service(i) for i in (1, 2)]),
                 "pods": PagedList("Pod", [pod(i) for i in range(3)], [pod(i) for i in (1, 2)])}
        tasks = [asyncio.create_task(Reflector(r, lw, store.apply, ReflectorOptions(page_size=1)).run())
                 for r, lw in lists.items()]
        try:
            for lw in lists.values():
                await lw.held.wait()  # the first list is in; the relist after the 410 holds its last page
            names = [f"svc-{i}.ns.svc.cluster.local" for i in range(3)] + \
                    [f"10-244-0-{i + 1}.ns.pod.cluster.local" for i in range(3)]
            views = Views(OPTIONS)  # rebuilt as `netkit dns` rebuilds: from the view before
            during = answered(store, names, views)
            objects_during = len(store)
            for lw in lists.values():
                lw.release.set()  # the new lists, without the first of each, complete
            for _ in range(100):
                await asyncio.sleep(0)
                if len(store) == 4:
                    break
            return {"during": during, "objects_during": objects_during,
                    "after": answered(store, names, views)}
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    got = asyncio.run(scenario())
    assert set(got["during"].values()) == {Rcode.NOERROR}
    assert got["objects_during"] == 6
    assert got["after"]["svc-0.ns.svc.cluster.local"] is Rcode.NXDOMAIN  # gone once the list is complete
    assert got["after"]["10-244-0-1.ns.pod.cluster.local"] is Rcode.NXDOMAIN
    assert got["after"]["svc-2.ns.svc.cluster.local"] is Rcode.NOERROR


def test_a_relist_keeps_each_object_under_its_own_reference_as_key() -> None:
    """The reflector's and the store's key of an object is the object's own (interned) reference, not
    a key object of its own; a relist brings no new keys, nor new objects for unchanged ones."""
    async def scenario() -> tuple[dict[ObjectRef, Any], dict[ObjectRef, Any], ClusterStore]:
        store, lw = ClusterStore(), PagedList("Pod", [pod(i) for i in range(3)], [pod(i) for i in range(4)])
        reflector = Reflector("pods", lw, store.apply, ReflectorOptions(page_size=1))
        task = asyncio.create_task(reflector.run())
        try:
            await lw.held.wait()
            first = reflector.snapshot()
            lw.release.set()
            for _ in range(100):
                await asyncio.sleep(0)
                if len(store) == 4:
                    break
            return first, reflector.snapshot(), store
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    first, after, store = asyncio.run(scenario())
    assert len(first) == 3 and len(after) == 4 and len(store) == 4
    assert all(key is objects[0].ref for key, objects in after.items())
    assert all(next(k for k in after if k == key) is key and after[key] is objects for key, objects in first.items())


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"]), st.integers(0, 5))))
def test_the_snapshot_is_in_namespace_name_order_whatever_the_order_of_events(
        events: list[tuple[bool, str, int]]) -> None:
    store, held = ClusterStore(), {}
    for added, namespace, n in events:
        key = ObjectRef(namespace, f"pod-{n}")
        kind = EventType.ADDED if added else EventType.DELETED
        store.apply(Update("pods", key, kind, (Pod(key),) if added else ()))
        if added:
            held[key] = Pod(key)
        else:
            held.pop(key, None)
    assert store.objects().pods == tuple(held[k] for k in sorted(held, key=lambda k: (k.namespace, k.name)))
