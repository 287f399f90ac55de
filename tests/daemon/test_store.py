"""The store: net changes per object, coalescing, origins, and the synced gate (pure, no server)."""

from __future__ import annotations

import asyncio
from ipaddress import ip_address

import pytest

from netkit.errors import Problem
from netkit.model.types import KubeObject, Node, ObjectRef, Service
from netkit.sources.reflector import EventType, Invalid, Update
from netkit.sources.store import ObjectKey, Store, key_of
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import run


def svc(name: str, ip: str = "10.96.0.1") -> Service:
    return Service(ObjectRef("default", name), cluster_ips=(ip_address(ip),))


A1, A2, B1 = svc("a", "10.96.0.1"), svc("a", "10.96.0.2"), svc("b")
KA, KB = key_of(A1), key_of(B1)

# (steps of (origin, objects), expected net changes {key: (before, after)})
CASES: list[tuple[str, list[tuple[str, tuple[KubeObject, ...]]], dict[ObjectKey, tuple[object, object]]]] = [
    ("add", [("o1", (A1,))], {KA: (None, A1)}),
    ("add then update coalesce", [("o1", (A1,)), ("o1", (A2,))], {KA: (None, A2)}),
    ("add then remove is nothing", [("o1", (A1,)), ("o1", ())], {}),
    ("identical put is nothing", [("o1", (A1,)), ("take", ()), ("o1", (A1,))], {}),
    ("update back to the start is nothing", [("o1", (A1,)), ("take", ()), ("o1", (A2,)), ("o1", (A1,))], {}),
    ("update then delete", [("o1", (A1,)), ("take", ()), ("o1", (A2,)), ("o1", ())], {KA: (A1, None)}),
    ("one origin, two objects", [("o1", (A1, B1))], {KA: (None, A1), KB: (None, B1)}),
    ("an origin drops one object", [("o1", (A1, B1)), ("take", ()), ("o1", (B1,))], {KA: (A1, None)}),
    ("second origin of the same key wins", [("o1", (A1,)), ("take", ()), ("o2", (A2,))], {KA: (A1, A2)}),
    ("and hands back when it goes", [("o1", (A1,)), ("o2", (A2,)), ("take", ()), ("o2", ())], {KA: (A2, A1)}),
]


@pytest.mark.parametrize("name, steps, expected", CASES, ids=[c[0] for c in CASES])
def test_net_changes(name: str, steps: list[tuple[str, tuple[KubeObject, ...]]],
                     expected: dict[ObjectKey, tuple[object, object]]) -> None:
    async def scenario() -> None:
        store = Store()
        for origin, objects in steps:
            if origin == "take":
                store.take_changes()
            else:
                store.put(origin, objects)
        changes = store.take_changes()
        assert {k: (c.before, c.after) for k, c in changes.items()} == expected
        assert store.changed.is_set() is False

    run(scenario())


def test_changed_event_follows_pending_changes_and_snapshot_is_current() -> None:
    async def scenario() -> None:
        store = Store()
        store.put("o1", (A1, B1))
        assert store.changed.is_set() and store.pending == 2
        assert store.objects().services == (A1, B1)
        changes = await asyncio.wait_for(store.wait_changes(), EVENT_TIMEOUT)
        assert set(changes) == {KA, KB} and not store.changed.is_set()
        store.put("o1", (A2, B1))
        store.put("o1", (A1, B1))  # undone before the consumer looked: nothing to wake it for
        assert not store.changed.is_set() and store.pending == 0
        assert store.objects().services == (A1, B1)
        store.put("n", (Node("node-a"),))
        assert store.get(ObjectKey("Node", ObjectRef("", "node-a"))) == Node("node-a")

    run(scenario())


def test_all_synced_needs_every_expected_source() -> None:
    async def scenario() -> None:
        store = Store()
        assert not store.all_synced  # nothing expected yet: never synced by default
        store.expect("kubernetes")
        store.expect("files")
        store.mark_synced("kubernetes")
        assert not store.all_synced
        waiter = asyncio.ensure_future(store.wait_synced())
        await asyncio.sleep(0)
        assert not waiter.done()
        store.mark_synced("files")
        await asyncio.wait_for(waiter, 1)
        assert store.all_synced

    run(scenario())


def test_reflector_events_feed_the_store_and_problems_clear_when_fixed() -> None:
    async def scenario() -> None:
        store = Store()
        ref = ObjectRef("default", "a")
        problem = Problem("api", "Service", "default/a", "spec.ports[0].port", "out of range")
        store.apply(Update("services", ref, EventType.ADDED, (A1,)))
        store.apply(Invalid("services", ref, problem))
        assert store.problems == {("services", ref): problem}
        assert store.objects().services == (A1,)
        store.apply(Update("services", ref, EventType.MODIFIED, (A2,)))
        assert store.problems == {} and store.objects().services == (A2,)
        store.apply(Update("services", ref, EventType.DELETED, (A2,)))
        assert store.objects().services == ()

    run(scenario())


def test_snapshot_is_in_namespace_name_order_whatever_the_arrival_order() -> None:
    async def scenario() -> None:
        store = Store()
        for name in ("c", "a", "d", "b"):
            store.put(name, (svc(name),))
        assert [s.ref.name for s in store.objects().services] == ["a", "b", "c", "d"]
        store.put("b", ())
        store.put("c", (svc("c", "10.96.0.9"),))
        assert [s.ref.name for s in store.objects().services] == ["a", "c", "d"]
        assert store.objects().services[1].cluster_ips == (ip_address("10.96.0.9"),)

    run(scenario())
