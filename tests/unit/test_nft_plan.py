"""nftables render/parse round trip and plan, as properties over generated NodeStates.

- parse(render(x)) == x for every compiled table;
- applying plan(a, b) to a FakeKernel holding a yields b, with the fake refusing what kernels before
  6.2 refuse (deleting a chain a just-deleted element referenced) — so deferral is exercised;
- plan(a, a) is empty; an endpoint change touches one chain and its endpoint map, nothing shared;
- the plan over the Parts index (compiled Rulesets) equals the plan of the full comparison.
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName
from netkit.model.state import ServicePortState
from netkit.nft.parse import parse
from netkit.nft.render import render
from netkit.nft.ruleset import Chain, Element, Ruleset
from netkit.nft.transaction import Transaction, render_plan
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.fake import FakeKernel
from netkit.rules.nftables.layout import STRIDE, endpoint_slots
from netkit.rules.nftables.names import port_label
from netkit.rules.nftables.plan import plan
from tests.unit.nft_states import NODE_V4, node_states

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
FAMILIES = st.sampled_from(list(IPFamily))


def tables(family: IPFamily, max_services: int = 5) -> st.SearchStrategy[NodeState]:
    return node_states(family, max_services)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), family=FAMILIES, masquerade_all=st.booleans())
def test_parse_render_round_trip(data: st.DataObject, family: IPFamily, masquerade_all: bool) -> None:
    state = data.draw(tables(family))
    rs = compile(state, replace(CONFIG, masquerade_all=masquerade_all), family)
    assert parse(render(rs)) == rs


@settings(max_examples=150, deadline=None)
@given(data=st.data(), family=FAMILIES)
def test_fake_apply_plan_turns_a_into_b(data: st.DataObject, family: IPFamily) -> None:
    a = compile(data.draw(tables(family)), CONFIG, family)
    b = compile(data.draw(tables(family)), CONFIG, family)
    kernel = FakeKernel(a.family, pre_6_2=True)
    kernel.apply(plan(None, a))
    assert kernel.dump() == a
    tx = plan(a, b)
    kernel.apply(tx)
    assert kernel.dump() == b
    assert plan(b, b).empty
    assert render_plan(tx).count("second transaction") == (1 if tx.deferred_chains else 0)


def without_new_dynamic_sets(live: Ruleset | None, before: Ruleset) -> Ruleset | None:
    """`live` without the dynamic sets `before` does not have, checking that no chain uses them."""
    if live is None:
        return None
    extra = {s.name for s in live.sets if s.dynamic} - {s.name for s in before.sets}
    assert not any(c.set_refs() & extra for c in live.chains)
    return replace(live, sets=tuple(s for s in live.sets if s.name not in extra))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_without_deferral_an_old_kernel_refuses_and_keeps_a(data: st.DataObject) -> None:
    a = compile(data.draw(tables(IPFamily.IPV4)), CONFIG, IPFamily.IPV4)
    b = compile(data.draw(tables(IPFamily.IPV4)), CONFIG, IPFamily.IPV4)
    kernel = FakeKernel("ip", pre_6_2=True)
    kernel.apply(plan(None, a))
    eager = plan(a, b, defer=False)
    deferred = plan(a, b)
    if not deferred.deferred_chains:
        kernel.apply(eager)
        assert kernel.dump() == b
        return
    with pytest.raises(KernelError, match="busy"):
        kernel.apply(eager)
    assert without_new_dynamic_sets(kernel.dump(), a) == a, "a refused transaction changes nothing" \
        " (but the new dynamic sets its prelude created, which nothing uses)"
    new = FakeKernel("ip", pre_6_2=False)
    new.apply(plan(None, a))
    new.apply(eager)
    assert new.dump() == b


def _endpoint_state(count: int) -> NodeState:
    eps = tuple(EndpointAddr(ip_address(f"10.244.1.{i}"), 8080) for i in range(1, count + 1))
    ports = tuple(
        ServicePortState(ServicePortName(ObjectRef("default", f"svc{j}"), "http"), IPFamily.IPV4, Protocol.TCP,
                         ip_address(f"10.96.0.{j}"), 80, endpoints=eps, cluster_endpoints=eps, has_endpoints=True)
        for j in range(1, 4))
    return NodeState(NodeInfo("node-a", None, (NODE_V4,)), ports)


def test_endpoint_change_rewrites_one_chain_and_deletes_one_endpoint_map_element() -> None:
    a = compile(_endpoint_state(3), CONFIG, IPFamily.IPV4)
    state = _endpoint_state(3)
    first = state.ports[0]
    fewer = first.cluster_endpoints[:2]
    state = replace(state, ports=(replace(first, endpoints=fewer, cluster_endpoints=fewer), *state.ports[1:]))
    b = compile(state, CONFIG, IPFamily.IPV4)
    tx = plan(a, b)
    (svc,) = tx.flush_chains
    assert tuple(c.name for c in tx.rules) == (svc,)
    offset = endpoint_slots(state.ports)[svc] * STRIDE
    (shard, gone), = tx.delete_elements
    assert shard.startswith("endpoints-tcp-") and gone == Element(str(offset + 2), "10.244.1.3 . 8080")
    assert tx.add_elements == ()
    assert not tx.add_chains and not tx.delete_chains and not tx.add_sets and not tx.delete_sets
    script = render_plan(tx)
    assert script.startswith(f"flush chain ip netkit {svc}\ndelete element ip netkit {shard} {{ {offset + 2} }}\n")
    assert script.endswith(f"dnat ip to numgen random mod 2 offset {offset} map @{shard}\n")
    assert plan(strip(a), strip(b)) == tx


def strip(rs: Ruleset) -> Ruleset:
    """The same Ruleset without its Parts index: plan then compares everything."""
    return Ruleset(rs.family, rs.table, rs.sets, rs.chains)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), family=FAMILIES)
def test_plan_over_parts_equals_the_full_comparison(data: st.DataObject, family: IPFamily) -> None:
    a = compile(data.draw(tables(family, 8)), CONFIG, family)
    b = compile(data.draw(tables(family, 8)), CONFIG, family)
    assert a.indexed() is not None and b.indexed() is not None
    assert plan(a, b) == plan(strip(a), strip(b))
    assert plan(b, a) == plan(strip(b), strip(a))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), family=FAMILIES)
def test_plan_over_parts_equals_the_full_comparison_for_small_changes(data: st.DataObject, family: IPFamily) -> None:
    """b keeps some of a's service ports as they are and takes others from another state (changed
    endpoints, new ports, shared hairpin and cluster-IP elements): the case `narrow` is for."""
    s, t = data.draw(tables(family, 8)), data.draw(tables(family, 4))
    keep = data.draw(st.lists(st.booleans(), min_size=len(s.ports), max_size=len(s.ports)))
    ports: dict[str, ServicePortState] = {}
    for p in [*(p for p, k in zip(s.ports, keep, strict=True) if k), *t.ports]:
        ports.setdefault(port_label(p), p)
    b_state = replace(s, ports=tuple(sorted(ports.values(), key=lambda p: (p.name, p.protocol.value))))
    a, b = compile(s, CONFIG, family), compile(b_state, CONFIG, family)
    assert plan(a, b) == plan(strip(a), strip(b))
    assert plan(b, a) == plan(strip(b), strip(a))


def test_parts_index_is_ignored_once_the_ruleset_is_edited() -> None:
    a = compile(_endpoint_state(2), CONFIG, IPFamily.IPV4)
    edited = replace(a, chains=a.chains[1:])
    assert edited.parts is a.parts and edited.indexed() is None
    assert a == strip(a), "the index takes no part in equality"
    assert plan(edited, a).rules == (a.chains[0],)


def test_removed_service_defers_its_chain_deletion() -> None:
    a = compile(_endpoint_state(2), CONFIG, IPFamily.IPV4)
    state = _endpoint_state(2)
    b = compile(replace(state, ports=state.ports[1:]), CONFIG, IPFamily.IPV4)
    tx = plan(a, b)
    (gone,) = tx.deferred_chains
    assert gone.startswith("svc-") and gone.endswith("default/svc1/tcp/http")
    assert gone in tx.flush_chains and gone not in tx.delete_chains
    assert ("service-ips", Element("10.96.0.1 . tcp . 80", f"goto {gone}")) in tx.delete_elements
    assert render_plan(tx).endswith(f"delete chain ip netkit {gone}\n")


def test_affinity_timeout_change_recreates_sets_and_rewrites_their_users() -> None:
    state = _endpoint_state(2)
    sticky = replace(state, ports=tuple(replace(p, affinity_timeout=600) for p in state.ports))
    longer = replace(state, ports=tuple(replace(p, affinity_timeout=900) for p in state.ports))
    a, b = (compile(s, CONFIG, IPFamily.IPV4) for s in (sticky, longer))
    tx = plan(a, b)
    assert len(tx.delete_sets) == len(tx.add_sets) == 6 and len(tx.rules) == 3
    kernel = FakeKernel("ip")
    kernel.apply(plan(None, a))
    kernel.apply(tx)
    assert kernel.dump() == b


def test_fake_refuses_a_jump_to_a_missing_chain_and_keeps_state() -> None:
    a = compile(_endpoint_state(1), CONFIG, IPFamily.IPV4)
    kernel = FakeKernel("ip")
    kernel.apply(plan(None, a))
    bad = Transaction("ip", add_elements=(("cluster-ips", Element("10.96.9.9")),),
                      rules=(Chain("services", ("jump nowhere",)),))
    with pytest.raises(KernelError, match="nowhere"):
        kernel.apply(bad)
    assert kernel.dump() == a
