"""StateBuilder and every backend's Compiler remember what they made; whatever the sequence of changes,
their results equal a fresh build and compile, and the plan made with what the compiler says can differ
(`Ruleset.since`) equals the plan of a full comparison. Every backend whose compiler remembers is in
REMEMBERING (IPVS's own cases are in test_ipvs_incremental.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, NodeState, build
from netkit.model.conntrack import ports_to_check, to_check
from netkit.model.state import StateBuilder
from netkit.model.types import Objects
from netkit.nft.ruleset import Element, Elements
from netkit.rules.iptables.compile import Compiler, compile
from netkit.rules.iptables.plan import Plan, plan
from netkit.rules.registry import backend
from netkit.runtime.health import service_health, service_health_since
from netkit.runtime.metrics import Metrics, no_local_endpoints_by_family
from netkit.sources.store import Store
from tests.factories import endpoint, node, objects, service, slice_

CFG = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"), large_cluster_endpoints=12)


def docs_for(i: int, count: int, variant: int) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"sessionAffinity": "ClientIP"} if variant % 3 == 1 else {}
    if variant % 3 == 2:
        spec = {"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30000 + i}]}
    return [service(f"s{i}", ip=f"10.96.0.{i + 1}", **spec),
            slice_(f"s{i}", endpoints=[endpoint(f"10.244.{i}.{j + 1}", "node-a" if j % 2 else "node-b")
                                       for j in range(count)])]


step = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(st.lists(step, min_size=1, max_size=4))
def test_remembering_gives_the_same_results(steps: list[list[tuple[int, int]]]) -> None:
    builder, compiler = StateBuilder(), Compiler(CFG, IPFamily.IPV4)
    cache: dict[tuple[int, int, int], Objects] = {}
    previous = None
    previous_state: NodeState | None = None
    for services in steps:
        docs: list[dict[str, Any]] = [node()]
        pieces = []
        for i, (count, variant) in enumerate(services):
            key = (i, count, variant)
            if key not in cache:  # unchanged services keep their very objects, as the store does
                cache[key] = objects(*docs_for(i, count, variant))
            pieces.append(cache[key])
        merged = objects(*docs)
        merged = Objects(tuple(s for p in pieces for s in p.services), tuple(s for p in pieces for s in p.slices),
                         merged.nodes)
        state = builder.build(merged, "node-a")
        assert state == build(merged, "node-a")
        assert_changes_are_the_identity_diff(previous_state, state)
        previous_state = state
        desired = compiler.compile(state)
        assert desired == compile(state, CFG, IPFamily.IPV4)
        if previous is not None:  # the compiler's hint gives the same plan as comparing everything
            since = desired.since  # None when the context changed (large-cluster mode)
            hint = since.changed if since is not None and since.applies_to(previous) else None
            if hint is not None:
                assert hint != frozenset()
            assert hint is None or same_plan(plan(previous, desired, only=hint), plan(previous, desired))
        previous = desired


def assert_changes_are_the_identity_diff(before: NodeState | None, after: NodeState) -> None:
    """NodeState.changes, when the builder gives it, is exactly what differs by identity."""
    if after.changes is None:
        return
    assert before is not None and after.changes.applies_to(before)
    was, now = {id(p) for p in before.ports}, {id(p) for p in after.ports}
    assert [id(p) for p in after.changes.gone] == [id(p) for p in before.ports if id(p) not in now]
    assert [id(p) for p in after.changes.came] == [id(p) for p in after.ports if id(p) not in was]


REMEMBERING = ("iptables", "nftables", "ipvs")


def unlinked(ruleset: Any) -> Any:
    """The same content with no link to the compile that made it (no `since`, no part index): what
    a planner must compare in full."""
    fields = {"since": None}
    if hasattr(ruleset, "parts"):
        fields["parts"] = None
    return replace(ruleset, **fields)


@pytest.mark.parametrize("mode", REMEMBERING)
@settings(max_examples=30, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=5))
def test_every_remembering_compiler_plans_like_a_full_comparison(mode: str, steps: list[list[tuple[int, int]]]) -> None:
    be: Any = backend(mode)
    builder, compiler = StateBuilder(), be.compiler(CFG, IPFamily.IPV4)
    cache: dict[tuple[int, int, int], Objects] = {}
    previous = None
    for services in steps:
        pieces = []
        for i, (count, variant) in enumerate(services):
            key = (i, count, variant)
            if key not in cache:
                cache[key] = objects(*docs_for(i, count, variant))
            pieces.append(cache[key])
        merged = Objects(tuple(s for p in pieces for s in p.services), tuple(s for p in pieces for s in p.slices),
                         objects(node()).nodes)
        state = builder.build(merged, "node-a")
        desired = compiler.compile(state)
        assert desired == be.compile(state, CFG, IPFamily.IPV4)
        if previous is not None:
            incremental, full = be.plan(previous, desired), be.plan(unlinked(previous), unlinked(desired))
            assert sorted(be.render_plan(incremental).splitlines()) == sorted(be.render_plan(full).splitlines())
            assert incremental.empty == full.empty
        previous = desired


def same_plan(a: Plan, b: Plan) -> bool:
    return ({t: dict(c) for t, c in a.write.items()} == {t: dict(c) for t, c in b.write.items()}
            and {t: set(c) for t, c in a.delete.items()} == {t: set(c) for t, c in b.delete.items()}
            and a.jumps == b.jumps)


def test_unchanged_services_keep_their_objects_and_chains() -> None:
    a = objects(node(), *docs_for(0, 2, 0), *docs_for(1, 3, 1))
    builder, compiler = StateBuilder(), Compiler(CFG, IPFamily.IPV4)
    s1 = builder.build(a, "node-a")
    first = compiler.compile(s1)
    changed = objects(*docs_for(1, 2, 1))  # s1 loses an endpoint; s0 stays as it was
    s2 = builder.build(Objects(a.services[:1] + changed.services, a.slices[:1] + changed.slices, a.nodes), "node-a")
    assert s2.ports[0] is s1.ports[0]
    assert s2.ports[1] is not s1.ports[1]
    second = compiler.compile(s2)
    s0_chains = [c for c, rules in first.chains("nat").items() if any("default/s0:http" in r for r in rules)
                 and c.startswith(("KUBE-SVC-", "KUBE-SEP-"))]
    assert len(s0_chains) == 3
    assert all(second.rules("nat", c) is first.rules("nat", c) for c in s0_chains)


def test_nftables_one_endpoint_change_recompiles_one_port_and_names_it() -> None:
    be: Any = backend("nftables")
    a = objects(node(), *docs_for(0, 2, 0), *docs_for(1, 3, 1), *docs_for(2, 4, 2))
    builder, compiler = StateBuilder(), be.compiler(CFG, IPFamily.IPV4)
    first = compiler.compile(builder.build(a, "node-a"))
    changed = objects(*docs_for(1, 2, 1))  # s1 loses an endpoint; s0 and s2 stay as they were
    b = Objects(a.services[:1] + changed.services + a.services[2:], a.slices[:1] + changed.slices + a.slices[2:],
                a.nodes)
    state = builder.build(b, "node-a")
    assert state.changes is not None and [p.name.ref.name for p in state.changes.came] == ["s1"]
    second = compiler.compile(state)
    assert second.since is not None and second.since.applies_to(first)
    assert second.since.changed == {"default/s1/tcp/http"}
    assert first.parts is not None and second.parts is not None
    for label in ("default/s0/tcp/http", "default/s2/tcp/http"):
        assert second.parts.ports[label] is first.parts.ports[label]
    unchanged = [s for s in second.sets if s.name.startswith("no-endpoint")]
    assert unchanged and all(s is first.set_map()[s.name] for s in unchanged), "untouched shared sets are reused"
    assert be.plan(first, second) == be.plan(unlinked(first), unlinked(second))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=8))
def test_nftables_compiler_following_state_changes_equals_a_fresh_compile(edits: list[tuple[int, int, int]]) -> None:
    """The store's way of changing: one object replaced, added or removed at a time. The builder says
    what changed (the compiler follows only that), and every result equals a fresh build and compile."""
    be: Any = backend("nftables")
    store = Store()
    store.expect("t")
    builder, compiler = StateBuilder(), be.compiler(CFG, IPFamily.IPV4)
    for obj in objects(node(), *docs_for(0, 2, 0), *docs_for(1, 3, 1)).nodes:
        store.put(("node",), (obj,))
    previous_state: NodeState | None = None
    previous = None
    present: set[int] = set()
    metrics = Metrics("nftables", (IPFamily.IPV4,), process=False)
    for i, count, variant in edits:
        docs = objects(*docs_for(i, count, variant))
        if count == 0 and variant == 0:  # the service goes away
            store.put(("svc", i), ())
            store.put(("slice", i), ())
            present.discard(i)
        else:
            store.put(("svc", i), docs.services)
            store.put(("slice", i), docs.slices)
            present.add(i)
        state = builder.build(store.objects(), "node-a")
        assert state == build(store.objects(), "node-a")
        assert_changes_are_the_identity_diff(previous_state, state)
        assert state.changes is not None or previous_state is None, "a few objects are followed, not rebuilt"
        if previous_state is not None and state.changes is not None:  # the daemon's other walks follow it too
            assert ports_to_check(previous_state, state) == ports_to_check(previous_state, replace(state, changes=None))
            assert service_health_since(service_health(previous_state), state.changes) == service_health(state)
            metrics.no_local_endpoints(previous_state)
            metrics.no_local_endpoints(state)
            assert metrics._no_local is not None
            assert metrics._no_local[1].get(IPFamily.IPV4, (0, 0)) == \
                no_local_endpoints_by_family(state).get(IPFamily.IPV4, (0, 0))
        desired = compiler.compile(state)
        assert desired == be.compile(state, CFG, IPFamily.IPV4)
        if previous is not None:
            incremental, full = be.plan(previous, desired), be.plan(unlinked(previous), unlinked(desired))
            assert sorted(be.render_plan(incremental).splitlines()) == sorted(be.render_plan(full).splitlines())
        previous_state, previous = state, desired


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 400)), st.sets(st.integers(0, 400)), st.sets(st.integers(0, 400)))
def test_chunked_elements_equal_the_frozenset_of_the_same_elements(start: set[int], out: set[int],
                                                                    into: set[int]) -> None:
    def els(xs: set[int]) -> frozenset[Element]:
        return frozenset(Element(f"10.0.{x // 250}.{x % 250} . 10.0.{x // 250}.{x % 250}") for x in xs)

    base = Elements.of(els(start))
    assert base == els(start) and els(start) == base and hash(base) == hash(els(start)) and len(base) == len(start)
    after = base.changed(els(out), els(into))
    want = (els(start) - els(out)) | els(into)
    assert after == want and want == after and hash(after) == hash(want)
    assert after == Elements.of(want) and (after != base) == (want != els(start))
    assert after - els(start) == want - els(start) and els(start) - after == els(start) - want
    assert (after | els(out)) == (want | els(out)) and (after <= want | els(out))
    assert all(e in after for e in want) and not any(e in after for e in els(out) - els(into))
    assert sorted(after) == sorted(want)


@pytest.mark.parametrize("slots", [8, 16])
@settings(max_examples=60, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), min_size=1, max_size=16))
def test_nftables_slots_placed_one_by_one_equal_a_fresh_computation(slots: int, edits: list[tuple[int, int]]) -> None:
    """With 8 or 16 slots for at most 8 names the names collide often: a name that comes or goes is
    placed alone only when no other moves, else all are computed again; either way the table equals
    a fresh compile's."""
    from netkit.rules.nftables import layout as nft_compile

    with mock.patch.object(nft_compile, "SLOTS", slots):
        be: Any = backend("nftables")
        store, builder, compiler = Store(), StateBuilder(), be.compiler(CFG, IPFamily.IPV4)
        store.put(("node",), objects(node()).nodes)
        for i, count in edits:
            docs = objects(*docs_for(i, count, 0))
            store.put(("svc", i), docs.services)
            store.put(("slice", i), docs.slices)
            state = builder.build(store.objects(), "node-a")
            assert compiler.compile(state) == be.compile(state, CFG, IPFamily.IPV4)


# ── the store's changes, one object at a time, followed by every backend in both families ──

PORTS = [{"name": "http", "port": 80, "targetPort": 8080},
         {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]
SLICE_PORTS = [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}]
DUAL = {"ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}


def service_doc(i: int, variant: int) -> dict[str, Any]:
    """Service `s{i}` in one of the shapes whose changes a shortcut could get wrong: several ports,
    dual-stack, not proxied, eTP/iTP Local, affinity, topology, load balancer with source ranges."""
    v4, v6 = f"10.96.0.{i + 1}", f"fd00:96::{i + 1}"
    shapes: list[dict[str, Any]] = [
        {},
        {"ports": PORTS},
        {"sessionAffinity": "ClientIP"},
        {"type": "NodePort", "externalTrafficPolicy": "Local",
         "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30000 + i}]},
        {"ip": [v4, v6], **DUAL, "ports": PORTS},
        {"labels": {"service.kubernetes.io/service-proxy-name": "someone-else"}},
        {"internalTrafficPolicy": "Local", "ports": PORTS},
        {"trafficDistribution": "PreferClose", "ip": [v4, v6], **DUAL},
        {"type": "LoadBalancer", "externalIPs": ["10.96.0.1", "198.51.100.20"],  # s0's clusterIP; shared
         "loadBalancerSourceRanges": ["203.0.113.0/28"], "externalTrafficPolicy": "Local",
         "healthCheckNodePort": 32000 + i,
         "status": {"loadBalancer": {"ingress": [{"ip": f"198.51.100.{i + 10}"}]}},
         "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 31000 + i}]},
    ]
    spec = dict(shapes[variant])
    ip = spec.pop("ip", v4)
    return service(f"s{i}", ip=ip, **spec)


def slice_doc(i: int, k: int, count: int, flavour: int) -> dict[str, Any]:
    """Slice k of service s{i} (0, 1: IPv4, 2: IPv6) with `count` endpoints: on this node or
    another, zone hints, terminating ones."""
    def ep(j: int) -> dict[str, Any]:
        ip = f"10.244.{i}.{k * 10 + j + 1}" if k < 2 else f"fd00:244::{i}:{j + 1}"
        extra: dict[str, Any] = {"zone": "zone-a" if (j + flavour) % 2 else "zone-b"}
        if flavour == 1:
            extra["hints"] = {"forZones": [{"name": extra["zone"]}]}
        if flavour == 2 and j == 0:
            extra.update(ready=False, serving=True, terminating=True)
        return endpoint(ip, "node-a" if (j + flavour) % 2 else "node-b", **extra)

    return slice_(f"s{i}", name=f"s{i}-{'abc'[k]}", endpoints=[ep(j) for j in range(count)], ports=SLICE_PORTS,
                  address_type="IPv6" if k == 2 else "IPv4")


NODES = [node(ips=("192.0.2.10", "2001:db8::10")), node(zone="zone-b", ips=("192.0.2.10", "2001:db8::10")),
         node(ips=("192.0.2.11", "2001:db8::10"))]

SERVICES = st.integers(0, 2)  # few, so that edits meet: a slice of a service, a second slice, a node move
edit = st.one_of(
    st.tuples(st.just("svc"), SERVICES, st.integers(0, 8)),
    st.tuples(st.just("no-svc"), SERVICES),
    st.tuples(st.just("slice"), SERVICES, st.integers(0, 2), st.integers(0, 3), st.integers(0, 2)),
    st.tuples(st.just("no-slice"), SERVICES, st.integers(0, 2)),
    st.tuples(st.just("node"), st.integers(0, 2)),
)


def put(store: Store, change: tuple[Any, ...]) -> None:
    """One watch event, as the reflectors hand them to the store."""
    kind, i = change[0], change[1]
    if kind == "svc":
        store.put(("svc", i), objects(service_doc(i, change[2])).services)
    elif kind == "no-svc":
        store.put(("svc", i), ())
    elif kind == "slice":
        store.put(("slice", i, change[2]), objects(slice_doc(i, *change[2:])).slices)
    elif kind == "no-slice":
        store.put(("slice", i, change[2]), ())
    else:
        store.put(("node",), objects(NODES[i]).nodes)


FAMILIES = (IPFamily.IPV4, IPFamily.IPV6)


def assert_the_daemons_walks_follow_the_changes(before: NodeState | None, after: NodeState, metrics: Metrics) -> None:
    """What the daemon computes after a sync from NodeState.changes equals its full computation:
    the UDP ports to check for stale conntrack, the health-check servers, the no-local gauges."""
    metrics.no_local_endpoints(after)
    assert metrics._no_local is not None and all(
        metrics._no_local[1].get(f, (0, 0)) == no_local_endpoints_by_family(after).get(f, (0, 0)) for f in FAMILIES)
    if before is None or after.changes is None:
        return
    full = replace(after, changes=None)
    assert sorted(map(id, ports_to_check(before, after))) == sorted(map(id, ports_to_check(before, full)))
    assert to_check(before, after) == to_check(before, full)
    assert service_health_since(service_health(before), after.changes) == service_health(after)


@settings(max_examples=30, deadline=None)
@given(st.lists(edit, min_size=1, max_size=16))
# Sequences a shortcut gets wrong that random edits meet too rarely to rely on: a port counted in a
# no-local gauge going away, a second slice changing alone, a node moving zone under hinted
# endpoints, a slice before its Service, two IPv6 slices' worth of dual-stack endpoints.
@example([("svc", 0, 6), ("slice", 0, 0, 1, 0), ("no-svc", 0)])
@example([("svc", 0, 1), ("slice", 0, 0, 2, 0), ("slice", 0, 1, 2, 0), ("slice", 0, 1, 3, 1)])
@example([("svc", 0, 7), ("slice", 0, 0, 3, 1), ("slice", 0, 2, 2, 1), ("node", 1), ("node", 2)])
@example([("slice", 1, 0, 2, 0), ("svc", 1, 3), ("no-slice", 1, 0), ("svc", 1, 8), ("slice", 1, 0, 3, 2)])
@example([("svc", 2, 4), ("slice", 2, 2, 3, 0), ("slice", 2, 0, 1, 2), ("svc", 2, 5), ("svc", 2, 4)])
# s1's externalIP is s0's clusterIP: s0's claim wins; then s0 goes and s1's takes the key
@example([("svc", 0, 0), ("slice", 0, 0, 2, 0), ("svc", 1, 8), ("slice", 1, 0, 2, 0), ("no-svc", 0), ("svc", 0, 1)])
def test_every_backend_follows_the_stores_changes_in_both_families(edits: list[tuple[Any, ...]]) -> None:
    """After each watch event: the builder's state equals a fresh build and says exactly what differs;
    every backend's remembering compiler equals a fresh compile in each family; its plan equals the
    plan of a full comparison; and that plan, applied by the backend's fake kernel to the previous
    result, leaves exactly the new one."""
    from tests.unit.test_backend_conformance import FAKES

    store, builder = Store(), StateBuilder()
    put(store, ("node", 0))
    bes: dict[str, Any] = {mode: backend(mode) for mode in REMEMBERING}
    compilers = {(m, f): bes[m].compiler(CFG, f) for m in REMEMBERING for f in FAMILIES}
    fakes = {(m, f): FAKES[m](f) for m in REMEMBERING for f in FAMILIES}
    previous: dict[tuple[str, IPFamily], Any] = {}
    previous_state: NodeState | None = None
    metrics = Metrics("nftables", FAMILIES, process=False)
    for change in edits:
        put(store, change)
        state = builder.build(store.objects(), "node-a")
        assert state == build(store.objects(), "node-a")
        assert_changes_are_the_identity_diff(previous_state, state)
        assert_the_daemons_walks_follow_the_changes(previous_state, state, metrics)
        for (mode, family), compiler in compilers.items():
            be, fake = bes[mode], fakes[mode, family]
            desired, fresh = compiler.compile(state), be.compile(state, CFG, family)
            assert desired == fresh, (mode, family)
            if mode == "nftables":  # and the index the planner narrows with (contested keys too)
                a, b = desired.parts, fresh.parts
                assert (a.fixed, a.ports, a.contested) == (b.fixed, b.ports, b.contested)
            if (mode, family) in previous:
                before = previous[mode, family]
                incremental, full = be.plan(before, desired), be.plan(unlinked(before), unlinked(desired))
                assert sorted(be.render_plan(incremental).splitlines()) == \
                    sorted(be.render_plan(full).splitlines()), (mode, family)
                assert incremental.empty == full.empty
            else:
                incremental = be.plan(fake.dump(), desired)
            fake.apply(incremental)
            assert be.plan(unlinked(fake.dump()), unlinked(desired)).empty, (mode, family)
            previous[mode, family] = desired
        previous_state = state


@pytest.mark.parametrize("mode", REMEMBERING)
def test_an_endpoint_change_across_the_large_cluster_threshold_is_followed(mode: str) -> None:
    """CFG's large-cluster mode starts above 12 endpoints: endpoint-only changes (the ones a compiler
    follows without walking every port) that cross it, both ways, give what a fresh compile gives."""
    be: Any = backend(mode)
    store, builder, compiler = Store(), StateBuilder(), be.compiler(CFG, IPFamily.IPV4)
    for change in [("node", 0), ("svc", 0, 1), ("slice", 0, 0, 3, 0), ("slice", 0, 1, 3, 0), ("svc", 1, 0),
                   ("slice", 1, 0, 3, 0), ("slice", 0, 0, 1, 0), ("slice", 0, 0, 3, 0), ("slice", 1, 0, 2, 1)]:
        put(store, change)
        state = builder.build(store.objects(), "node-a")
        assert compiler.compile(state) == be.compile(state, CFG, IPFamily.IPV4), change


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("run"), st.lists(st.integers(0, 9), max_size=8), st.sets(st.integers(0, 9))),
    st.tuples(st.just("update"), st.sets(st.integers(0, 9)), st.sets(st.integers(10, 19))),
    st.tuples(st.just("reset"))), min_size=1, max_size=12))
def test_port_memo_remembers_exactly_the_parts_of_the_last_walk(ops: list[tuple[Any, ...]]) -> None:
    """PortMemo against a plain model: a port's part is reused only for the very same object (and
    when `keep` says so), `came` / `gone` are exactly what differs from the previous walk, `update`
    follows a told change, and `previous` answers from what is remembered now."""
    from netkit.rules.memo import PortMemo
    from tests.unit.ipvs_states import sp

    pool = [sp(f"p{i}", f"10.96.0.{i + 1}") for i in range(20)]
    memo: PortMemo[tuple[int, int]] = PortMemo()
    model: dict[int, tuple[int, int]] = {}  # pool index → its part (pool index, compile number)
    compiled = iter(range(10**6))
    fresh = True

    def compile_port(p: Any) -> tuple[int, int]:
        return (pool.index(p), next(compiled))

    for op in ops:
        if op[0] == "reset":
            memo.reset()
            model, fresh = {}, True
        elif op[0] == "run":
            ports, refused = op[1], op[2]
            walk = memo.run([pool[i] for i in ports], compile_port, keep=lambda part, no=refused: part[0] not in no)
            kept = {i: model[i] for i in set(ports) if i in model and i not in refused}
            assert walk.fresh is fresh
            assert [part[0] for part in walk.parts] == ports
            assert all(walk.parts[n] == kept[i] for n, i in enumerate(ports) if i in kept)
            assert sorted(p[0] for p in walk.came) == sorted(set(ports) - kept.keys())
            assert sorted(walk.gone) == sorted(part for i, part in model.items() if i not in kept)
            model, fresh = {part[0]: part for part in walk.parts}, False
        else:
            gone, came = sorted(op[1] & model.keys()), sorted(op[2] - model.keys())
            came_parts, gone_parts = memo.update([pool[i] for i in gone], [pool[i] for i in came], compile_port)
            assert gone_parts == [model.pop(i) for i in gone] and [p[0] for p in came_parts] == came
            model.update((p[0], p) for p in came_parts)
            fresh = False
        assert memo.fresh is fresh
        assert all(memo.previous(pool[i]) == model.get(i) for i in range(20))
