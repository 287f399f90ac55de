"""The typed decoder (netkit.model.apidecode) decodes what it accepts exactly as `from_k8s` does, and
leaves everything else — every invalid object above all — to `from_k8s`, so the errors stay its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.errors import InvalidObject
from netkit.model import apidecode, from_k8s
from netkit.model.types import ObjectRef
from netkit.sources.reflector import _LIST, Invalid, Page, Reflector, ReflectorEvent, Update
from tests.factories import endpoint, service, slice_
from tests.unit import test_model_k8s as reference_tests
from tests.unit.test_model_k8s import _BAD_ENDPOINTS, _ENDPOINTS, _slice_with


def agree(doc: Any) -> bool:
    """True when the typed decoder answered (False when it left the object to from_k8s); fails the
    test when the two disagree."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    item = {k: v for k, v in doc.items() if k != "kind"} if isinstance(doc, dict) else doc
    got = apidecode.decode(json.dumps(item).encode(), str(kind))
    try:
        want = from_k8s({**item, "kind": kind} if isinstance(doc, dict) else doc, "api")
    except InvalidObject:
        assert got is None, f"accepted what from_k8s refuses: {doc}"
        return False
    if got is None:
        return False
    meta = item["metadata"]
    assert got == (ObjectRef(meta.get("namespace") or "", meta["name"]), want), doc
    return True


GOOD = [
    service(), service("a", "ns1", "10.96.1.1", type="NodePort",
                       ports=[{"name": "http", "port": 80, "targetPort": "web", "nodePort": 30080, "appProtocol": "h2"},
                              {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "5353"}],
                       externalTrafficPolicy="Local", internalTrafficPolicy="Global", healthCheckNodePort=32000,
                       publishNotReadyAddresses=True, trafficDistribution="PreferClose", ipFamilies=["IPv4"],
                       labels={"app": "a", "example.com/tier": ""}),
    service(ip="None"), {**service(), "metadata": {"name": "web", "annotations": {"a": "b"}}},
    slice_(endpoints=[endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False, serving=True, terminating=True,
                                                     hostname="web-0", zone="z1",
                                                     targetRef={"kind": "Pod", "namespace": "x", "name": "p"})],
           ports=[{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "all"}]),
    slice_(endpoints=[]), *(_slice_with(e) for e in _ENDPOINTS),
]


@pytest.mark.parametrize("doc", GOOD)
def test_the_common_shapes_decode_typed_as_from_k8s_decodes_them(doc: dict[str, Any]) -> None:
    answered = agree(doc)
    assert answered or doc in [_slice_with(e) for e in _ENDPOINTS]  # hints, sloppy zeros: from_k8s reads them


# the invalid objects of from_k8s's own tables (tests/unit/test_model_k8s.py)
BAD = [d for d, _, _ in reference_tests.test_invalid_objects_name_the_field.pytestmark[0].args[1]] + \
    [_slice_with(e) for e, _ in _BAD_ENDPOINTS]


@pytest.mark.parametrize("doc", BAD)
def test_an_invalid_object_is_left_to_from_k8s(doc: dict[str, Any]) -> None:
    assert not agree(doc)


# Values for each field the typed decoder reads: usual ones, unusual ones and wrong ones.
_ANY = st.sampled_from([None, "", 0, 1, -1, True, "x", "None", [], {}, ["10.0.0.1"], {"a": 1}])
_NAME = st.sampled_from(["web", "a-b", "a.b", "Web", "-a", "a" * 64, "", "x y"]) | _ANY
_IP = st.sampled_from(["10.0.0.1", "10.96.0.10", "fd00::1", "10.0.0.256", "010.0.0.1", "None", " 10.0.0.1"]) | _ANY
_PORT = st.sampled_from([80, 8080, 65535, 0, 65536, -1, "80", "web", "Web", "a--b", "http-alt-longname1"]) | _ANY
_STR = st.sampled_from(["TCP", "UDP", "SCTP", "tcp", "ClusterIP", "NodePort", "LoadBalancer", "ExternalName",
                        "Cluster", "Local", "Global", "IPv4", "IPv6", "ClientIP", "Pod"]) | _ANY


def _maybe(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_META = st.fixed_dictionaries({"name": _NAME}, optional={
    "namespace": _NAME, "labels": st.dictionaries(st.sampled_from(["app", "kubernetes.io/service-name", "Bad Key"]),
                                                  _NAME, max_size=2) | _ANY,
    "annotations": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", ""]) | _ANY) | _ANY})
_SERVICE_PORT = _maybe({"name": _NAME, "port": _PORT, "protocol": _STR, "targetPort": _PORT, "nodePort": _PORT,
                        "appProtocol": _STR}) | _ANY
_SPEC = _maybe({"type": _STR, "clusterIP": _IP, "clusterIPs": st.lists(_IP, max_size=2) | _ANY,
                "ipFamilies": st.lists(_STR, max_size=2) | _ANY, "ports": st.lists(_SERVICE_PORT, max_size=2) | _ANY,
                "externalIPs": st.lists(_IP, max_size=1) | _ANY, "loadBalancerSourceRanges": _ANY,
                "sessionAffinity": _STR, "externalTrafficPolicy": _STR, "internalTrafficPolicy": _STR,
                "healthCheckNodePort": _PORT, "publishNotReadyAddresses": _ANY, "trafficDistribution": _STR,
                "externalName": _NAME})
_ENDPOINT = _maybe({"addresses": st.lists(_IP, max_size=2) | _ANY,
                    "conditions": _maybe({"ready": _ANY, "serving": _ANY, "terminating": _ANY}) | _ANY,
                    "hostname": _NAME, "nodeName": _NAME, "zone": _NAME, "hints": _ANY,
                    "targetRef": _maybe({"kind": _STR, "namespace": _NAME, "name": _NAME}) | _ANY}) | _ANY
_ENDPOINT_PORT = _maybe({"name": _NAME, "port": _PORT, "protocol": _STR, "appProtocol": _STR}) | _ANY


@settings(max_examples=400, deadline=None)
@given(_META, _SPEC, _maybe({"loadBalancer": _maybe({"ingress": _ANY}) | _ANY}) | _ANY)
def test_any_service_decodes_alike_or_is_left_to_from_k8s(meta: Any, spec: Any, status: Any) -> None:
    agree({"kind": "Service", "metadata": meta, "spec": spec, "status": status})


@settings(max_examples=400, deadline=None)
@given(_META, _STR, st.lists(_ENDPOINT, max_size=3) | _ANY, st.lists(_ENDPOINT_PORT, max_size=2) | _ANY)
def test_any_endpoint_slice_decodes_alike_or_is_left_to_from_k8s(meta: Any, atype: Any, endpoints: Any,
                                                                  ports: Any) -> None:
    agree({"kind": "EndpointSlice", "metadata": meta, "addressType": atype, "endpoints": endpoints, "ports": ports})


def test_a_generated_large_list_decodes_typed_as_from_k8s_decodes_it() -> None:
    docs = []
    for i in range(2000):
        docs.append(service(f"svc{i}", f"ns{i % 50}", f"10.96.{i // 250}.{i % 250 + 1}",
                            type="NodePort" if i % 10 == 0 else "ClusterIP",
                            ports=[{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                                    **({"nodePort": 30000 + i // 10} if i % 10 == 0 else {})}]))
        docs.append(slice_(f"svc{i}", f"ns{i % 50}", [endpoint(f"10.{128 + i // 25}.{i % 25}.{j + 1}", f"node-{j}")
                                                       for j in range(10)],
                           ports=[{"name": "http", "protocol": "TCP", "port": 8080}]))
    assert all(agree(d) for d in docs)


# --- through the reflector: the same events from a page of JSON text as from a page of dicts ---------


class OnePage:
    def __init__(self, kind: str, items: list[Any]) -> None:
        self.kind, self.items = kind, items

    async def list_page(self, limit: int, continue_token: str, timeout: float) -> Page:
        return Page(self.items, "1", "")

    @asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int,
                    read_timeout: float) -> AsyncIterator[AsyncIterator[Any]]:
        yield self._quiet()

    async def _quiet(self) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield {}


def listed(kind: str, items: list[Any]) -> list[ReflectorEvent]:
    events: list[ReflectorEvent] = []

    async def run() -> None:
        reflector = Reflector("r", OnePage(kind, items), events.append)
        task = asyncio.create_task(reflector.run())
        await reflector.wait_synced()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    return events


@pytest.mark.parametrize("kind, docs", [
    ("Service", [service("a"), service("Web_1"), service("b", ports=[{"name": "http", "port": 70000}]),
                 service("c", externalIPs=["198.51.100.1"]), service("d", ip="fd00::1")]),
    ("EndpointSlice", [slice_("a"), *(_slice_with(e) for e, _ in _BAD_ENDPOINTS), slice_("b", address_type="IPv6")]),
])
def test_a_page_of_json_text_gives_the_events_a_page_of_dicts_gives(kind: str, docs: list[dict[str, Any]]) -> None:
    items = [{k: v for k, v in d.items() if k != "kind"} for d in docs]
    text = _LIST.decode(json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()).items
    assert all(isinstance(i, msgspec.Raw) for i in text)
    from_text, from_dicts = listed(kind, text), listed(kind, items)
    assert from_text == from_dicts
    assert any(isinstance(e, Invalid) for e in from_text) and any(isinstance(e, Update) for e in from_text)
