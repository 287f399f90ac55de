"""plan(): the fake kernel, applying plan(a, b) to a kernel holding a, ends up holding b."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config, parse_cidrs
from netkit.errors import KernelError
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.fake import FakeKernel
from netkit.rules.iptables.names import is_owned
from netkit.rules.iptables.plan import apply_to, plan, render_plan
from netkit.rules.iptables.ruleset import Ruleset
from tests.factories import endpoint, node, objects, service, slice_

CFG = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"))


def desired(n_services: int, endpoints: list[int], affinity: bool = False) -> Ruleset:
    docs = [node()]
    for i in range(n_services):
        spec = {"sessionAffinity": "ClientIP"} if affinity and i % 2 else {}
        docs.append(service(f"s{i}", ip=f"10.96.0.{i + 1}", **spec))
        count = endpoints[i % len(endpoints)] if endpoints else 0
        docs.append(slice_(f"s{i}", endpoints=[endpoint(f"10.244.{i}.{j + 1}", "node-a" if j % 2 else "node-b")
                                                for j in range(count)]))
    return compile(build(objects(*docs), "node-a"), CFG, IPFamily.IPV4)


def owned_view(rs: Ruleset) -> Ruleset:
    return Ruleset(rs.family, {t: {c: r for c, r in chains.items() if is_owned(c) or r}
                               for t, chains in rs.tables.items()})


@settings(max_examples=40, deadline=None)
@given(a=st.tuples(st.integers(0, 5), st.lists(st.integers(0, 4), min_size=1, max_size=3), st.booleans()),
       b=st.tuples(st.integers(0, 5), st.lists(st.integers(0, 4), min_size=1, max_size=3), st.booleans()))
def test_apply_plan_turns_a_into_b(a: tuple[int, list[int], bool], b: tuple[int, list[int], bool]) -> None:
    fake = FakeKernel()
    first, second = desired(*a), desired(*b)
    fake.apply(plan(fake.dump(), first))
    assert owned_view(fake.dump()) == owned_view(first)
    p = plan(fake.dump(), second)
    fake.apply(p)
    assert owned_view(fake.dump()) == owned_view(second)
    assert plan(fake.dump(), second).empty


def test_unchanged_services_are_not_rewritten() -> None:
    fake = FakeKernel()
    fake.apply(plan(fake.dump(), desired(5, [3])))
    changed = desired(5, [3, 3, 3, 3, 2])  # only s4 loses an endpoint
    p = plan(fake.dump(), changed)
    written = set(p.write.get("nat", {}))
    assert all(c.startswith(("KUBE-SVC-", "KUBE-SEP-")) for c in written)
    assert len([c for c in written if c.startswith("KUBE-SVC-")]) == 1
    assert sum(len(c) for c in p.delete.values()) == 1  # the endpoint chain that went away
    assert not p.jumps


def test_foreign_chains_and_rules_are_never_touched() -> None:
    base = FakeKernel().dump()
    foreign = Ruleset(IPFamily.IPV4, {**base.tables, "filter": {
        **base.chains("filter"), "MY-CHAIN": ("-j ACCEPT",), "INPUT": ("-p tcp -m tcp --dport 22 -j MY-CHAIN",)}})
    fake = FakeKernel(state=foreign)
    fake.apply(plan(fake.dump(), desired(2, [2])))
    fake.apply(plan(fake.dump(), desired(0, [0])))
    assert fake.dump().rules("filter", "MY-CHAIN") == ("-j ACCEPT",)
    assert "-p tcp -m tcp --dport 22 -j MY-CHAIN" in fake.dump().rules("filter", "INPUT")
    assert "MY-CHAIN" not in render_plan(plan(fake.dump(), desired(1, [1])))


def test_refused_payload_changes_nothing() -> None:
    fake = FakeKernel()
    fake.apply(plan(fake.dump(), desired(2, [2])))
    before = fake.dump()
    fake.refuse_next = True
    with pytest.raises(KernelError):
        fake.apply(plan(before, desired(3, [1])))
    assert fake.dump() == before


def test_full_plan_rewrites_every_chain_and_jumps_are_not_duplicated() -> None:
    fake = FakeKernel()
    want = desired(2, [2])
    fake.apply(plan(fake.dump(), want))
    p = plan(fake.dump(), want, full=True)
    assert p.chains_written == sum(1 for t in want.tables.values() for c in t if c.startswith("KUBE-"))
    assert not p.jumps
    after = apply_to(fake.dump(), p)
    assert after.rules("nat", "PREROUTING") == want.rules("nat", "PREROUTING")


def test_jumps_keep_their_order_above_foreign_rules() -> None:
    base = FakeKernel().dump()
    start = Ruleset(IPFamily.IPV4, {**base.tables, "filter": {**base.chains("filter"), "FORWARD": ("-j DROP",)}})
    want = desired(1, [1])
    p = plan(start, want)
    got = apply_to(start, p).rules("filter", "FORWARD")
    assert got == (*want.rules("filter", "FORWARD"), "-j DROP")


@pytest.mark.parametrize("size", [1, 3, 10, 1000])
def test_batches_apply_in_order_and_end_where_one_plan_ends(size: int) -> None:
    """Every batch must be acceptable on its own (the fake refuses a jump to a missing chain)."""
    from netkit.rules.iptables.plan import batches
    for before, after in ((desired(0, [0]), desired(6, [3, 2], affinity=True)),
                          (desired(3, [2]), desired(6, [1, 3]))):
        fake = FakeKernel()
        fake.apply(plan(fake.dump(), before))
        p = plan(fake.dump(), after)
        parts = batches(p, size)
        assert all(part.chains_written <= max(size, 1) for part in parts[:-1])
        for part in parts:
            fake.apply(part)
        assert owned_view(fake.dump()) == owned_view(after)


def test_batches_hold_few_distinct_jump_targets() -> None:
    """iptables-nft's restore is quadratic in the distinct chains one batch jumps to, so a batch
    closes at `size` of them as well as at `size` chains: service chains (one jump per endpoint)
    go fewer to a batch than endpoint chains (which all jump to KUBE-MARK-MASQ)."""
    from netkit.rules.iptables.plan import _chain_targets, batches
    fake = FakeKernel()
    p = plan(fake.dump(), desired(40, [5] * 40))
    parts = batches(p, 20)
    for part in parts[:-1]:
        targets = set().union(*(_chain_targets(r) for c in part.write.values() for r in c.values()))
        assert part.chains_written <= 20 and len(targets) <= 20, (part.chains_written, len(targets))
    services = [part for part in parts[:-1] if any(c.startswith("KUBE-SVC-") for t in part.write.values() for c in t)]
    assert services and max(part.chains_written for part in services) < 20
    for part in parts:
        fake.apply(part)
    assert owned_view(fake.dump()) == owned_view(desired(40, [5] * 40))
    assert _chain_targets(('-m comment --comment "a -> b" -j KUBE-SEP-X', "-g KUBE-EXT-Y", "-j DNAT")) == \
        {"KUBE-SEP-X", "KUBE-EXT-Y"}
