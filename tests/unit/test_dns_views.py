"""Successive cluster views (netkit.dns.view.Views): after any sequence of adds, changes, deletes and
relists, the view built from the previous one equals the view built from scratch, and a service
whose objects did not change keeps its entry (what keeps a rebuild from holding a second view)."""

from __future__ import annotations

from ipaddress import IPv4Address

from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.dns.view import Options, PodAddresses, PodMode, Views, build
from netkit.model.types import (
    AddressType,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    KubeObject,
    ObjectRef,
    Objects,
    Pod,
    Protocol,
    Service,
    ServicePort,
    ServiceType,
)

OPTIONS = Options(pods=PodMode.VERIFIED, autopath=True, local_ips=(IPv4Address("10.244.0.1"),))
SERVICES, SLICES, PODS, VERSIONS = 4, 5, 4, 4
Slot = tuple[str, int]  # ("svc" | "slice" | "pod", number)


def ip(last: int) -> IPv4Address:
    return IPv4Address(f"10.244.0.{last % 4 + 1}")  # four addresses: services and pods share them


def make(slot: Slot, version: int) -> KubeObject:
    """Object `slot` at `version`: each call a new object (equal for equal arguments)."""
    kind, i = slot
    if kind == "pod":
        return Pod(ObjectRef(f"ns-{i % 2}", f"pod-{i}"), (ip(i + version),))
    if kind == "slice":
        endpoints = tuple(Endpoint((ip(i + version + e),), ready=(i + version + e) % 3 != 0,
                                   hostname=f"host-{e}" if version == 2 else None,
                                   target_ref=ObjectRef(f"ns-{i % 2}", f"pod-{(i + e) % PODS}"))
                          for e in range(1 + version % 3))
        return EndpointSlice(ObjectRef(f"ns-{i % 2}", f"slice-{i}"), f"svc-{i % SERVICES}", AddressType.IPV4,
                             endpoints, (EndpointPort("http", Protocol.TCP, 8080 + version),))
    ref, ports = ObjectRef(f"ns-{i % 2}", f"svc-{i}"), (ServicePort("http", Protocol.TCP, 80, 8080),)
    if version == 1:
        return Service(ref, headless=True, ports=ports, publish_not_ready_addresses=i % 2 == 1)
    if version == 3:
        return Service(ref, ServiceType.EXTERNAL_NAME, external_name=f"svc-{i}.ns-0.svc.cluster.local")
    cluster_ip = IPv4Address("10.96.0.1" if version == 2 else f"10.96.0.{i + 2}")  # 2: one address, many services
    return Service(ref, cluster_ips=(cluster_ip,), ports=ports)


SLOTS: list[Slot] = ([("svc", i) for i in range(SERVICES)] + [("slice", i) for i in range(SLICES)]
                     + [("pod", i) for i in range(PODS)])
# per slot and step: None keeps the object (the reflector's unchanged one), -1 deletes it,
# a version makes it anew (equal to the one held when the version is the same: a relist)
STEP = st.fixed_dictionaries({slot: st.one_of(st.none(), st.integers(-1, VERSIONS - 1)) for slot in SLOTS})


def objects(held: dict[Slot, KubeObject]) -> Objects:
    """As the store delivers them: each kind in namespace/name order."""
    found = sorted(held.values(), key=lambda o: (o.ref.namespace, o.ref.name))  # type: ignore[union-attr]
    return Objects(services=tuple(o for o in found if isinstance(o, Service)),
                   slices=tuple(o for o in found if isinstance(o, EndpointSlice)),
                   pods=tuple(o for o in found if isinstance(o, Pod)))


def apply(held: dict[Slot, KubeObject], step: dict[Slot, int | None]) -> dict[Slot, KubeObject]:
    out = dict(held)
    for slot, what in step.items():
        if what == -1:
            out.pop(slot, None)
        elif what is not None:
            new = make(slot, what)
            out[slot] = held[slot] if held.get(slot) == new else new  # equal: the held one (the reflector)
    return out


def made_from(key: tuple[str, str]) -> list[Slot]:
    """The slots of the Service `key` and of its EndpointSlices."""
    n = int(key[1].removeprefix("svc-"))
    return [("svc", n)] + [("slice", j) for j in range(SLICES) if j % SERVICES == n]


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=6))
def test_a_rebuilt_view_equals_one_built_from_scratch(steps: list[dict[Slot, int | None]]) -> None:
    views, held = Views(OPTIONS), {slot: make(slot, 0) for slot in SLOTS}
    before = views.build(objects(held))
    for step in steps:
        after_held = apply(held, step)
        after = views.build(objects(after_held))
        assert after == build(objects(after_held), OPTIONS)
        for key, entry in after.services.items():  # the same Service and slices: the same entry
            if key in before.services and all(held.get(s) is after_held.get(s) for s in made_from(key)):
                assert entry is before.services[key]
        held, before = after_held, after


def test_a_relist_of_an_unchanged_cluster_reuses_every_entry_and_reverse_name() -> None:
    views, held = Views(OPTIONS), {slot: make(slot, 1 if slot == ("svc", 0) else 0) for slot in SLOTS}
    first = views.build(objects(held))
    second = views.build(objects(apply(held, {slot: None for slot in SLOTS})))
    assert second == first and second.services is not first.services
    assert all(second.services[k] is e for k, e in first.services.items())
    assert all(any(k is key for k in first.services) for key in second.services)  # the keys too
    assert all(second.reverse[a] is names for a, names in first.reverse.items())


NAMESPACES = ("ns-a", "ns-b", "ns-c")


@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), st.integers(0, 3))))
def test_pod_addresses_hold_exactly_the_pairs_given(pairs: list[tuple[str, int]]) -> None:
    held = PodAddresses((ns, ip(n)) for ns, n in pairs)
    expected = {(ns, ip(n)) for ns, n in pairs}
    assert {(ns, ip(n)) for ns in NAMESPACES for n in range(4) if (ns, ip(n)) in held} == expected
    assert len(held) == len(expected) and ("ns-a",) not in held and held == PodAddresses(sorted(expected))
