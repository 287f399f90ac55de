"""KubeSource: kube-proxy's selectors, the Endpoints fallback, connection settings, and the merged store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from netkit.model.types import Node
from netkit.sources.apiclient import Credential
from netkit.sources.kube import (
    ENDPOINTS_SELECTOR,
    SERVICE_SELECTOR,
    ApiSettings,
    KubeSource,
    WatchSpec,
    connect,
    watch_plan,
)
from netkit.sources.kubeconfig import ApiConfigError
from netkit.sources.store import Store
from netkit.testing.apiserver import TestApiServer
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import FAST, background, endpoint_slice, endpoints, node, run, service

PROXY_NAME = {"service.kubernetes.io/service-proxy-name": "other-proxy"}
HEADLESS = {"service.kubernetes.io/headless": ""}


@pytest.mark.parametrize("node_name, slices, pods, expected", [
    ("node-a", True, False, [
        WatchSpec("services", "Service", "CoreV1Api.list_service_for_all_namespaces", SERVICE_SELECTOR),
        WatchSpec("endpointslices", "EndpointSlice", "DiscoveryV1Api.list_endpoint_slice_for_all_namespaces",
                  ENDPOINTS_SELECTOR),
        WatchSpec("nodes", "Node", "CoreV1Api.list_node", field_selector="metadata.name=node-a"),
    ]),
    ("", False, True, [
        WatchSpec("services", "Service", "CoreV1Api.list_service_for_all_namespaces", SERVICE_SELECTOR),
        WatchSpec("endpoints", "Endpoints", "CoreV1Api.list_endpoints_for_all_namespaces", ENDPOINTS_SELECTOR),
        WatchSpec("pods", "Pod", "CoreV1Api.list_pod_for_all_namespaces"),
    ]),
])
def test_watch_plan(node_name: str, slices: bool, pods: bool, expected: list[WatchSpec]) -> None:
    assert list(watch_plan(node_name, endpoint_slices=slices, pods=pods)) == expected
    assert SERVICE_SELECTOR == "!service.kubernetes.io/service-proxy-name"
    assert ENDPOINTS_SELECTOR == "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"


def _populate(srv: TestApiServer) -> None:
    s = srv.store
    s.create(service("web", "10.96.0.10"))
    s.create(service("other", "10.96.0.11", labels=PROXY_NAME))
    s.create(endpoint_slice("web-1", "web", ["10.244.1.1"]))
    s.create(endpoint_slice("other-1", "other", ["10.244.1.2"], labels=PROXY_NAME))
    s.create(endpoint_slice("hl-1", "hl", ["10.244.1.3"], labels=HEADLESS))
    s.create(endpoints("web", ["10.244.9.1"]))
    s.create(node("node-a", zone="zone-a"))
    s.create(node("node-b", zone="zone-b"))


def test_selectors_match_kube_proxy_and_the_store_merges_every_reflector() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            _populate(srv)
            store = Store()
            source = KubeSource(ApiSettings(master=srv.url), store, node_name="node-a", options=FAST)
            assert not store.all_synced
            async with background(source.run()):
                await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
                objs = store.objects()
                assert [s.ref.name for s in objs.services] == ["web"]
                assert [s.ref.name for s in objs.slices] == ["web-1"]
                assert [n.name for n in objs.nodes] == ["node-a"]
                assert source.endpoint_slices is True
                queries = {a.resource: parse_qs(a.query) for a in srv.requests("list")}
                assert queries["services"]["labelSelector"] == [SERVICE_SELECTOR]
                assert queries["endpointslices"]["labelSelector"] == [ENDPOINTS_SELECTOR]
                assert queries["nodes"]["fieldSelector"] == ["metadata.name=node-a"]
                assert "endpoints" not in queries
                # a change arrives as one net change per object
                store.take_changes()
                srv.store.apply(node("node-a", zone="zone-c"))
                changes = await asyncio.wait_for(store.wait_changes(), EVENT_TIMEOUT)
                [change] = changes.values()
                assert isinstance(change.before, Node) and change.before.zone == "zone-a"
                assert isinstance(change.after, Node) and change.after.zone == "zone-c"

    run(scenario())


def test_a_service_labelled_for_another_proxy_leaves_the_store_and_comes_back() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            _populate(srv)
            store = Store()
            source = KubeSource(ApiSettings(master=srv.url), store, node_name="node-a", options=FAST)
            async with background(source.run()):
                await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
                store.take_changes()
                srv.store.apply(service("web", "10.96.0.10", labels=PROXY_NAME))
                await asyncio.wait_for(store.wait_changes(), EVENT_TIMEOUT)
                assert [s.ref.name for s in store.objects().services] == []
                srv.store.apply(service("web", "10.96.0.10"))
                await asyncio.wait_for(store.wait_changes(), EVENT_TIMEOUT)
                assert [s.ref.name for s in store.objects().services] == ["web"]

    run(scenario())


def test_endpoints_are_watched_only_when_the_cluster_serves_no_endpoint_slices() -> None:
    async def scenario() -> None:
        async with TestApiServer(serve_endpoint_slices=False) as srv:
            _populate(srv)
            store = Store()
            source = KubeSource(ApiSettings(master=srv.url), store, node_name="node-a", options=FAST)
            async with background(source.run()):
                await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
                assert source.endpoint_slices is False
                [legacy] = store.objects().slices
                assert legacy.from_legacy_endpoints and legacy.service_name == "web"
                assert str(legacy.endpoints[0].addresses[0]) == "10.244.9.1"
                assert [parse_qs(a.query)["labelSelector"] for a in srv.requests("list", "endpoints")] == \
                    [[ENDPOINTS_SELECTOR]]
                assert srv.requests("list", "endpointslices") == []

    run(scenario())


def test_discovery_during_an_outage_waits_instead_of_falling_back() -> None:
    async def scenario() -> None:
        srv = TestApiServer()
        await srv.start()
        await srv.stop()  # the port is known, nothing listens
        store = Store()
        source = KubeSource(ApiSettings(master=srv.url), store, options=FAST)
        async with background(source.run()):
            await asyncio.sleep(0.2)
            assert source.endpoint_slices is None and not store.all_synced
            srv.store.create(service("web", "10.96.0.10"))
            await srv.start()
            try:
                await asyncio.wait_for(store.wait_synced(), EVENT_TIMEOUT)
                assert source.endpoint_slices is True
                assert [s.ref.name for s in store.objects().services] == ["web"]
            finally:
                await srv.stop()

    run(scenario())


def test_kubeconfig_is_used_and_master_overrides_its_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
            api = await connect(ApiSettings(kubeconfig=str(kubeconfig)))
            assert api.config.server == srv.url
            async with await api.get("/api/v1/namespaces") as resp:
                assert resp.status == 200
            await api.close()
            api = await connect(ApiSettings(kubeconfig=str(kubeconfig), master="http://127.0.0.1:1"))
            assert api.config.server == "http://127.0.0.1:1"
            await api.close()

    run(scenario())


def test_without_settings_outside_a_cluster_the_error_says_what_to_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ApiConfigError, match="--kubeconfig"):
        run(connect(ApiSettings()))


def test_in_cluster_config_is_chosen_automatically(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}

    async def scenario() -> None:
        api = await connect(ApiSettings(), env=env, secret_dir=str(tmp_path))
        assert api.config.server == "https://[fd00::1]:6443"
        assert await api.auth.credential() == Credential("Bearer sa-token")
        await api.close()

    run(scenario())
