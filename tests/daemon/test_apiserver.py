"""The test API server itself: the protocol facts of the reference, checked over raw HTTP."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from netkit.testing import openapi
from netkit.testing.apiserver import INITIAL_EVENTS_END, TestApiServer, parse_bool
from netkit.testing.apistore import ApiError, Store, field_selector, label_selector, resource_for_kind

from .conftest import eventually, node, run, service

SERVICES = resource_for_kind("Service")


async def get(srv: TestApiServer, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(srv.url + path) as resp:
        return resp.status, await resp.json(content_type=None)


async def watch(srv: TestApiServer, query: str, until: Callable[[list[dict[str, Any]]], bool] | None = None,
                ) -> tuple[int, list[dict[str, Any]]]:
    """Read a watch stream to its end (or until `until` holds), returning (status, events)."""
    events: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s, s.get(f"{srv.url}/api/v1/services?{query}") as resp:
        if resp.status != 200:
            return resp.status, [await resp.json()]
        async for line in resp.content:
            events.append(json.loads(line))
            if until and until(events):
                break
        return resp.status, events


@pytest.mark.parametrize("path, kind", [
    ("/version", None), ("/api", "APIVersions"), ("/apis", "APIGroupList"), ("/api/v1", "APIResourceList"),
    ("/apis/discovery.k8s.io", "APIGroup"), ("/apis/discovery.k8s.io/v1", "APIResourceList"),
])
def test_discovery(path: str, kind: str | None) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            status, body = await get(srv, path)
            assert status == 200 and body.get("kind") == kind
            if path == "/version":
                assert body["gitVersion"].startswith("v1.32")

    run(scenario())


def test_discovery_without_endpoint_slices() -> None:
    async def scenario() -> None:
        async with TestApiServer(serve_endpoint_slices=False) as srv:
            groups = [g["name"] for g in (await get(srv, "/apis"))[1]["groups"]]
            assert "discovery.k8s.io" not in groups
            assert (await get(srv, "/apis/discovery.k8s.io/v1"))[0] == 404
            assert (await get(srv, "/apis/discovery.k8s.io/v1/endpointslices"))[0] == 404

    run(scenario())


def test_pages_come_from_one_snapshot_and_tokens_expire_on_compaction() -> None:
    store = Store()
    for i in range(5):
        store.create(service(f"s{i}", f"10.96.0.{i + 1}"))
    rv1, page1, token = store.list_page(SERVICES, "", "", "", 2, "")
    store.delete(SERVICES, "default", "s4")  # a write between pages does not show in the same list
    store.create(service("s5", "10.96.0.6"))
    rv2, page2, token2 = store.list_page(SERVICES, "", "", "", 2, token)
    rv3, page3, token3 = store.list_page(SERVICES, "", "", "", 2, token2)
    assert rv1 == rv2 == rv3 and token3 == ""
    assert [o["metadata"]["name"] for o in page1 + page2 + page3] == [f"s{i}" for i in range(5)]
    _, _, token = store.list_page(SERVICES, "", "", "", 2, "")
    store.compact()
    with pytest.raises(ApiError) as err:
        store.list_page(SERVICES, "", "", "", 2, token)
    assert err.value.code == 410


def test_watch_from_zero_sends_synthetic_adds_and_from_n_only_later_changes() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("a", "10.96.0.1"))
            after_a = srv.store.rv
            srv.store.create(service("b", "10.96.0.2"))
            _, events = await watch(srv, "watch=true&resourceVersion=0&timeoutSeconds=1", lambda e: len(e) == 2)
            assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]
            _, events = await watch(srv, f"watch=1&resourceVersion={after_a}&timeoutSeconds=1",
                                    lambda e: len(e) == 1)
            assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]
            assert events[0]["object"]["kind"] == "Service"

    run(scenario())


def test_the_stream_ends_cleanly_at_timeout_seconds_with_bookmarks_on_request() -> None:
    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.1) as srv:
            srv.store.create(node("node-a"))
            loop = asyncio.get_running_loop()
            start = loop.time()
            status, events = await watch(srv, f"watch=True&resourceVersion={srv.store.rv}&timeoutSeconds=1"
                                              "&allowWatchBookmarks=true")
            assert status == 200 and 0.9 < loop.time() - start < 2
            assert events and {e["type"] for e in events} == {"BOOKMARK"}
            assert events[0]["object"] == {"kind": "Service", "apiVersion": "v1",
                                           "metadata": {"resourceVersion": str(srv.store.rv)}}
            _, events = await watch(srv, f"watch=true&resourceVersion={srv.store.rv}&timeoutSeconds=1")
            assert events == []  # no bookmarks unless asked for

    run(scenario())


@pytest.mark.parametrize("serve, query, status", [
    (True, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan", 200),
    (True, "sendInitialEvents=true", 422),
    (False, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan", 422),
])
def test_send_initial_events_is_served_or_rejected(serve: bool, query: str, status: int) -> None:
    async def scenario() -> None:
        async with TestApiServer(serve_initial_events=serve) as srv:
            srv.store.create(service("a", "10.96.0.1"))
            got, events = await watch(srv, f"watch=true&allowWatchBookmarks=true&timeoutSeconds=1&{query}",
                                      lambda e: e[-1]["type"] == "BOOKMARK")
            assert got == status
            if status == 200:
                assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
                assert events[1]["object"]["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}

    run(scenario())


@pytest.mark.parametrize("as_event", [True, False])
def test_a_compacted_version_gives_410(as_event: bool) -> None:
    async def scenario() -> None:
        async with TestApiServer(expired_as_event=as_event) as srv:
            old = srv.store.rv
            srv.store.create(service("a", "10.96.0.1"))
            srv.compact()
            status, events = await watch(srv, f"watch=true&resourceVersion={old}&timeoutSeconds=1")
            if as_event:
                assert status == 200 and events[0]["type"] == "ERROR"
                assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
            else:
                assert status == 410

    run(scenario())


def test_fault_hooks_end_and_drop_streams() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            ended = asyncio.ensure_future(watch(srv, f"watch=true&resourceVersion={srv.store.rv}"))
            await eventually(lambda: srv.open_watches == 1)
            srv.end_watches()
            assert (await asyncio.wait_for(ended, 2)) == (200, [])
            dropped = asyncio.ensure_future(watch(srv, f"watch=true&resourceVersion={srv.store.rv}"))
            await eventually(lambda: srv.open_watches == 1)
            srv.drop_connections()
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(dropped, 2)
            port = srv.port
            await srv.stop()
            with pytest.raises(aiohttp.ClientConnectorError):
                await get(srv, "/version")
            await srv.start()
            assert srv.port == port and (await get(srv, "/version"))[0] == 200

    run(scenario())


@pytest.mark.parametrize("selector, names", [
    ("", ["plain", "proxied-elsewhere", "tier-web"]),
    ("!service.kubernetes.io/service-proxy-name", ["plain", "tier-web"]),
    ("tier=web", ["tier-web"]),
    ("tier==web", ["tier-web"]),
    ("tier!=web", ["plain", "proxied-elsewhere"]),
    ("tier", ["tier-web"]),
    ("tier in (web,db)", ["tier-web"]),
    ("tier notin (web)", ["plain", "proxied-elsewhere"]),
    ("!service.kubernetes.io/service-proxy-name,tier=web", ["tier-web"]),
])
def test_label_selectors(selector: str, names: list[str]) -> None:
    objs = [service("plain", "10.96.0.1"),
            service("proxied-elsewhere", "10.96.0.2", labels={"service.kubernetes.io/service-proxy-name": "x"}),
            service("tier-web", "10.96.0.3", labels={"tier": "web"})]
    assert [o["metadata"]["name"] for o in objs if label_selector(selector)(o)] == names


@pytest.mark.parametrize("selector, names", [
    ("metadata.name=node-a", ["node-a"]),
    ("metadata.name==node-b", ["node-b"]),
    ("metadata.name!=node-a", ["node-b"]),
])
def test_field_selectors(selector: str, names: list[str]) -> None:
    objs = [node("node-a"), node("node-b")]
    assert [o["metadata"]["name"] for o in objs if field_selector(selector)(o)] == names


@pytest.mark.parametrize("text, value", [(t, True) for t in ("1", "t", "T", "TRUE", "true", "True")]
                         + [(f, False) for f in ("0", "f", "F", "FALSE", "false", "False", "")])
def test_booleans_parse_like_go(text: str, value: bool) -> None:
    assert parse_bool(text, "watch") is value


def test_bad_boolean_is_rejected() -> None:
    with pytest.raises(ApiError):
        parse_bool("yes", "watch")


def test_services_get_addresses_allocated_and_keep_them_on_update() -> None:
    store = Store()
    created = store.create({"kind": "Service", "metadata": {"name": "np"},
                            "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    ip, node_port = created["spec"]["clusterIP"], created["spec"]["ports"][0]["nodePort"]
    assert ip.startswith("10.96.") and 30000 <= node_port <= 32767
    updated = store.update({"kind": "Service", "metadata": {"name": "np"},
                            "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    assert updated["spec"]["clusterIP"] == ip and updated["spec"]["ports"][0]["nodePort"] == node_port
    with pytest.raises(ApiError) as err:
        store.update({"kind": "Service", "metadata": {"name": "np", "resourceVersion": "1"}, "spec": {}})
    assert err.value.code == 409


PROXY_NAME = "service.kubernetes.io/service-proxy-name"


def test_a_watch_with_a_selector_sees_objects_enter_and_leave_it() -> None:
    """As kube-apiserver's cacher: an update that makes an object match is ADDED, one that makes it stop
    matching is DELETED (carrying the object as it was, at the new resourceVersion), and an update of an
    object that matches neither before nor after is not sent; replayed history says the same."""
    async def scenario() -> None:
        async with TestApiServer() as srv:
            start = srv.store.rv
            srv.store.create(service("web", "10.96.0.10"))
            gained = srv.store.apply(service("web", "10.96.0.10", labels={PROXY_NAME: "other"}))
            srv.store.apply(service("web", "10.96.0.10", labels={PROXY_NAME: "other", "tier": "web"}))
            srv.store.apply(service("web", "10.96.0.10"))
            query = f"watch=true&resourceVersion={start}&timeoutSeconds=1&labelSelector=!{PROXY_NAME}"
            _, events = await watch(srv, query, lambda e: len(e) == 3)
            assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]
            gone = events[1]["object"]
            assert gone["metadata"]["resourceVersion"] == gained["metadata"]["resourceVersion"]
            assert PROXY_NAME not in gone["metadata"]["labels"]  # the object as it was before

    run(scenario())


def test_the_official_client_sees_a_service_leave_the_selector_as_deleted() -> None:
    from kubernetes import client as kclient
    from kubernetes import watch as kwatch

    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("web", "10.96.0.10"))
            start = srv.store.rv

            def follow() -> list[tuple[str, str]]:
                api = kclient.CoreV1Api(kclient.ApiClient(kclient.Configuration(host=srv.url)))
                stream = kwatch.Watch().stream(api.list_service_for_all_namespaces, resource_version=str(start),
                                               label_selector=f"!{PROXY_NAME}", timeout_seconds=60)
                seen = []
                for event in stream:
                    seen.append((event["type"], event["object"].metadata.name))
                    if len(seen) == 2:
                        break
                return seen

            task = asyncio.ensure_future(asyncio.to_thread(follow))
            await eventually(lambda: srv.open_watches == 1, timeout=30)
            srv.store.apply(service("web", "10.96.0.10", labels={PROXY_NAME: "other"}))
            srv.store.apply(service("web", "10.96.0.10"))
            assert await asyncio.wait_for(task, 30) == [("DELETED", "web"), ("ADDED", "web")]

    run(scenario())


@pytest.mark.parametrize("directive, stored, warnings", [
    ("Ignore", True, []),
    ("", True, ['unknown field "spec.ports[0].bogus"', 'unknown field "extra"']),
    ("Warn", True, ['unknown field "spec.ports[0].bogus"', 'unknown field "extra"']),
    ("Strict", False, []),
])
def test_field_validation_names_unknown_fields_and_never_stores_them(directive: str, stored: bool,
                                                                     warnings: list[str]) -> None:
    obj = service("web", "10.96.0.10", labels={"any.label/x": "y"})
    obj["spec"]["ports"][0]["bogus"] = 1
    obj["extra"] = {"a": 1}
    if not stored:
        with pytest.raises(ApiError) as err:
            openapi.validate(obj, SERVICES, directive)
        assert err.value.code == 400 and err.value.message == (
            'Service in version "v1" cannot be handled as a Service: strict decoding error: '
            'unknown field "spec.ports[0].bogus", unknown field "extra"')
        return
    kept, said = openapi.validate(obj, SERVICES, directive)
    assert said == warnings
    assert "extra" not in kept and "bogus" not in kept["spec"]["ports"][0]
    assert kept["metadata"]["labels"] == {"any.label/x": "y"} and kept["spec"]["clusterIP"] == "10.96.0.10"


def test_the_openapi_documents_kubectl_reads() -> None:
    async def scenario() -> None:
        async with TestApiServer(serve_endpoint_slices=False) as srv:
            _, index = await get(srv, "/openapi/v3")
            assert "api/v1" in index["paths"] and "apis/discovery.k8s.io/v1" not in index["paths"]
            status, doc = await get(srv, index["paths"]["api/v1"]["serverRelativeURL"])
            patch = doc["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
            assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Service"}
            assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
            ports = doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
            assert ports["x-kubernetes-patch-merge-key"] == "port" and ports["type"] == "array"
            assert (await get(srv, "/openapi/v3/apis/discovery.k8s.io/v1"))[0] == 404
            status, v2 = await get(srv, "/openapi/v2")
            assert status == 200 and v2["swagger"] == "2.0" and "io.k8s.api.core.v1.Pod" in v2["definitions"]
            async with aiohttp.ClientSession() as s, s.get(srv.url + "/openapi/v2", headers={
                    "Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}) as resp:
                assert resp.status == 406

    run(scenario())



def svc_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_services_get_kube_apiservers_defaults() -> None:
    """SetDefaults_Service and the registry's IP family fields."""
    store = Store()
    plain = store.create(svc_obj("plain", ports=[{"port": 80}]))["spec"]
    assert plain == {"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                     "clusterIP": "10.96.0.100", "clusterIPs": ["10.96.0.100"], "ipFamilies": ["IPv4"],
                     "ipFamilyPolicy": "SingleStack",
                     "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}
    lb = store.create(svc_obj("lb", type="LoadBalancer", sessionAffinity="ClientIP",
                              ports=[{"port": 53, "protocol": "UDP", "targetPort": "dns"}]))["spec"]
    assert lb["externalTrafficPolicy"] == "Cluster" and lb["allocateLoadBalancerNodePorts"] is True
    assert lb["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    assert lb["ports"][0]["targetPort"] == "dns" and lb["ports"][0]["nodePort"] >= 30000
    ext = store.create(svc_obj("ext", externalIPs=["192.0.2.50"], ports=[{"port": 80}]))["spec"]
    assert ext["externalTrafficPolicy"] == "Cluster"  # externalIPs make a ClusterIP Service reachable
    headless = store.create(svc_obj("hl", clusterIP="None", ports=[{"port": 80}]))["spec"]
    assert headless["clusterIPs"] == ["None"] and headless["ipFamilies"] == ["IPv4"]
    v6 = store.create(svc_obj("v6", clusterIP="fd00:10:96::10", ports=[{"port": 80}]))["spec"]
    assert v6["ipFamilies"] == ["IPv6"] and v6["clusterIPs"] == ["fd00:10:96::10"]
    name = store.create(svc_obj("name", type="ExternalName", externalName="example.org"))["spec"]
    assert "clusterIP" not in name and "ipFamilies" not in name and "internalTrafficPolicy" not in name


def test_a_type_change_drops_what_the_new_type_cannot_use_and_releases_it() -> None:
    """dropTypeDependentFields on an update that leaves the old values in place (as kubectl edit or
    apply of a changed type does), with the freed values allocatable again."""
    store = Store()
    lb = store.create(svc_obj("lb", type="LoadBalancer", externalTrafficPolicy="Local",
                              ports=[{"port": 80}]))
    hc, node_port, ip = lb["spec"]["healthCheckNodePort"], lb["spec"]["ports"][0]["nodePort"], lb["spec"]["clusterIP"]
    to_cluster = copy.deepcopy(lb)
    to_cluster["spec"]["externalTrafficPolicy"] = "Cluster"
    spec = store.update(to_cluster)["spec"]
    assert "healthCheckNodePort" not in spec and spec["ports"][0]["nodePort"] == node_port
    to_cluster_ip = store.get(SERVICES, "default", "lb")
    to_cluster_ip["spec"]["type"] = "ClusterIP"
    spec = store.update(to_cluster_ip)["spec"]
    assert "nodePort" not in spec["ports"][0] and "externalTrafficPolicy" not in spec
    assert "allocateLoadBalancerNodePorts" not in spec and spec["clusterIP"] == ip
    to_name = store.get(SERVICES, "default", "lb")
    to_name["spec"].update(type="ExternalName", externalName="example.org")
    spec = store.update(to_name)["spec"]
    assert not {"clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"} & set(spec)
    # everything it held is free again: another Service may ask for exactly those values
    taken = store.create(svc_obj("again", type="LoadBalancer", externalTrafficPolicy="Local", clusterIP=ip,
                                 healthCheckNodePort=hc, ports=[{"port": 80, "nodePort": node_port}]))["spec"]
    assert (taken["clusterIP"], taken["healthCheckNodePort"], taken["ports"][0]["nodePort"]) == (ip, hc, node_port)


def test_values_in_use_are_refused_in_kube_apiservers_words_and_deletion_frees_them() -> None:
    store = Store()
    first = store.create(svc_obj("a", type="NodePort", ports=[{"port": 80}]))["spec"]
    ip, node_port = first["clusterIP"], first["ports"][0]["nodePort"]
    with pytest.raises(ApiError) as err:
        store.create(svc_obj("b", clusterIP=ip, ports=[{"port": 80}]))
    assert err.value.code == 422 and err.value.message == (
        f'Service "b" is invalid: spec.clusterIPs: Invalid value: []string{{"{ip}"}}: '
        f"failed to allocate IP {ip}: provided IP is already allocated")
    with pytest.raises(ApiError) as err:
        store.create(svc_obj("b", type="NodePort", ports=[{"port": 80, "nodePort": node_port}]))
    assert err.value.message == (f'Service "b" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: '
                                 "provided port is already allocated")
    assert "b" not in {k[1] for k in store.objects[SERVICES]}
    store.delete(SERVICES, "default", "a")
    again = store.create(svc_obj("b", type="NodePort", clusterIP=ip, ports=[{"port": 80, "nodePort": node_port}]))
    assert again["spec"]["clusterIP"] == ip and again["spec"]["ports"][0]["nodePort"] == node_port


def test_the_server_can_start_as_a_cluster_does_with_default_kubernetes() -> None:
    async def scenario() -> None:
        async with TestApiServer(kubernetes_service=True) as srv:
            svc = srv.store.get(SERVICES, "default", "kubernetes")
            assert svc["spec"]["clusterIP"] == "10.96.0.1"
            assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP",
                                             "targetPort": srv.port}]
            eps = srv.store.get(resource_for_kind("EndpointSlice"), "default", "kubernetes")
            assert eps["endpoints"][0]["addresses"] == ["127.0.0.1"] and eps["ports"][0]["port"] == srv.port
            assert eps["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
            version = srv.store.rv
            await srv.stop()
            await srv.start()  # a restart keeps it, does not write it again
            assert srv.store.rv == version
        async with TestApiServer() as srv:
            assert srv.store.select(SERVICES, "") == []

    run(scenario())


def test_a_body_that_disagrees_with_the_url_is_refused_in_kube_apiservers_words() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv, aiohttp.ClientSession() as s:
            srv.store.create(service("web", "10.96.0.10"))
            async with s.put(f"{srv.url}/api/v1/namespaces/default/services/web",
                             json=service("other", "10.96.0.10")) as resp:
                assert resp.status == 400 and (await resp.json())["message"] == \
                    "the name of the object (other) does not match the name on the URL (web)"
            async with s.post(f"{srv.url}/api/v1/namespaces/kube-system/services",
                              json=service("x", "10.96.0.11")) as resp:
                assert resp.status == 400 and (await resp.json())["message"] == \
                    "the namespace of the provided object does not match the namespace sent on the request"
            async with s.post(f"{srv.url}/api/v1/namespaces/default/services",
                              json={"kind": "Service", "metadata": {}, "spec": {}}) as resp:
                assert resp.status == 422 and (await resp.json())["message"] == \
                    'Service "" is invalid: metadata.name: Required value: name or generateName is required'

    run(scenario())
