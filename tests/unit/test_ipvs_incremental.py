"""The IPVS Compiler remembers what it made; whatever the sequence of changes, its result equals a fresh
compile, planning with its hint (the result's `since`) gives the plan a full comparison gives, and that
plan, applied by the fake kernel, turns the previous ruleset into the new one."""

from __future__ import annotations

import weakref
from dataclasses import replace
from ipaddress import ip_address
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, NodeState, Protocol, ServicePortState
from netkit.model.state import PortChanges
from netkit.rules.ipvs import backend as BACKEND
from netkit.rules.ipvs.compile import Compiler, compile
from netkit.rules.ipvs.fake import FakeKernel
from netkit.rules.ipvs.plan import plan
from netkit.rules.ipvs.ruleset import Changes, Entries, Ruleset
from tests.unit.ipvs_states import NODE, sp, state

CFG = Config(mode="ipvs", node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"))
V4 = IPFamily.IPV4

# (endpoint count, variant): variants cover NodePort, eTP=Local with an LB IP (a fwmark service and
# mangle rules), affinity, UDP, and an external IP that two services share (one virtual server,
# claimed twice).
Spec = tuple[int, int]


def changed_since(result: Ruleset, previous: Ruleset) -> Changes | None:
    """What `result` says can differ from `previous` (the planner's hint), when it was compiled
    right after it; else None."""
    since = result.since
    return since.changed if since is not None and since.applies_to(previous) else None


def port(i: int, count: int, variant: int) -> ServicePortState:
    eps = tuple(f"10.244.{i}.{j + 1}" for j in range(count))
    local = eps[::2]
    kinds = [
        {},
        {"node_port": 30000 + i},
        {"lb_ips": (f"198.51.100.{i + 1}",), "etp_local": True, "local_eps": local, "node_port": 31000 + i},
        {"affinity": 600 + i},
        {"proto": Protocol.UDP, "target": 5353},
        {"external_ips": ("198.51.100.250",)},
        {"lb_ips": (f"198.51.100.{i + 1}",), "source_ranges": ("203.0.113.0/28",)},
    ]
    return sp(f"s{i}", f"10.96.0.{i + 1}", 80, eps, **kinds[variant % len(kinds)])  # type: ignore[arg-type]


services = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), min_size=0, max_size=6)


def states(steps: list[list[Spec]], cache: dict[tuple[int, int, int], ServicePortState],
           tell: bool = False) -> list[NodeState]:
    """One state per step; with `tell`, each says how it differs from the one before
    (NodeState.changes, as the daemon's StateBuilder does), so the compiler follows only those ports."""
    out: list[NodeState] = []
    for specs in steps:
        ports = []
        for i, (count, variant) in enumerate(specs):
            key = (i, count, variant)
            if key not in cache:  # an unchanged service port stays the very same object, as the store does
                cache[key] = port(i, count, variant)
            ports.append(cache[key])
        st_ = state(*ports)
        if tell and out:
            was, now = {id(p) for p in out[-1].ports}, {id(p) for p in st_.ports}
            gone = tuple(p for p in out[-1].ports if id(p) not in now)
            st_ = replace(st_, changes=PortChanges(weakref.ref(out[-1]), gone,
                                                   tuple(p for p in st_.ports if id(p) not in was)))
        out.append(st_)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(services, min_size=1, max_size=5), st.booleans(), st.booleans())
def test_incremental_compile_and_plan_equal_the_full_ones(steps: list[list[Spec]], node_moves: bool,
                                                          tell: bool) -> None:
    compiler = Compiler(CFG, V4)
    cache: dict[tuple[int, int, int], ServicePortState] = {}
    fake = FakeKernel(V4)
    previous: Ruleset | None = None
    for n, st_ in enumerate(states(steps, cache, tell)):
        if node_moves and n >= 2:  # another node address: every NodePort moves, the compiler starts over
            st_ = replace(st_, node=replace(NODE, ips=(ip_address("192.0.2.11"),)))
        desired = compiler.compile(st_)
        assert desired == compile(st_, CFG, V4)
        committed = fake.dump()
        full = plan(committed, desired)
        if previous is not None:
            hint = changed_since(desired, previous)
            if hint is not None:
                assert plan(previous, desired, only=hint) == plan(previous, desired)
        fake.apply(full)
        after = fake.dump()
        assert (after.services, after.addresses, after.sets, after.iptables) == (
            desired.services, desired.addresses, desired.sets, desired.iptables)
        assert plan(after, desired).empty
        previous = desired


def test_one_endpoint_removed_touches_one_service_port() -> None:
    ports = [port(i, 3, 1) for i in range(20)]
    compiler = Compiler(CFG, V4)
    first = compiler.compile(state(*ports))
    smaller = port(7, 2, 1)
    second = compiler.compile(state(*ports[:7], smaller, *ports[8:]))
    hint = changed_since(second, first)
    assert hint is not None
    assert {str(k) for k in hint.services} == {"tcp 10.96.0.8:80", "tcp 192.0.2.10:30007"}
    assert hint.sets == {"KUBE-LOOP-BACK"} and not hint.addresses and not hint.chains
    # unchanged parts are the very same objects: the planner compares them by identity
    assert second.iptables is first.iptables
    assert [s for s in second.sets if s.name != "KUBE-LOOP-BACK"] == [s for s in first.sets
                                                                       if s.name != "KUBE-LOOP-BACK"]
    assert all(a is b for a, b in zip(first.services[:7], second.services[:7], strict=True))
    p = plan(first, second, only=hint)
    assert [str(r.ip) for _, r in p.del_reals] == ["10.244.7.3", "10.244.7.3"]
    assert p.del_entries == (("KUBE-LOOP-BACK", "10.244.7.3,tcp:8080,10.244.7.3"),)
    assert p.counts()["real_servers_deleted"] == 2 and p.changes == 3


def test_a_hint_about_another_ruleset_is_refused() -> None:
    compiler = Compiler(CFG, V4)
    a = compiler.compile(state(port(0, 2, 0)))
    b = compiler.compile(state(port(0, 3, 0)))
    assert changed_since(b, a) is not None
    assert changed_since(b, compile(state(port(0, 2, 0)), CFG, V4)) is None


def test_the_result_carries_its_index_and_what_can_differ() -> None:
    compiler = Compiler(CFG, V4)
    first = compiler.compile(state(port(0, 2, 1), port(1, 2, 0)))
    second = compiler.compile(state(port(0, 3, 1), port(1, 2, 0)))
    assert second.since is not None and second.since.applies_to(first)
    assert second._index is not None  # handed over by the compiler, not rebuilt on first use
    assert BACKEND.plan(first, second) == plan(first, second)


def test_an_entry_that_goes_and_comes_back_in_one_compile_is_no_change() -> None:
    """The remove-then-add order (a port whose mark moved, or whose object's id was reused)."""
    from netkit.rules.ipvs.compile import _Touched

    t = _Touched()
    t.flip("KUBE-LOOP-BACK", "a", present=False)
    t.flip("KUBE-LOOP-BACK", "a", present=True)
    assert not t.sets and not t.came["KUBE-LOOP-BACK"] and not t.went["KUBE-LOOP-BACK"]
    t.flip("KUBE-LOOP-BACK", "b", present=True)
    assert t.sets == {"KUBE-LOOP-BACK"} and t.came["KUBE-LOOP-BACK"] == {"b"}


def test_a_told_change_is_followed_without_walking_every_port(monkeypatch: pytest.MonkeyPatch) -> None:
    cache: dict[tuple[int, int, int], ServicePortState] = {}
    base = [(3, 2 if i % 4 == 0 else 1) for i in range(20)]  # eTP=Local ones among them: firewall marks
    one_endpoint_less = [*base[:5], (2, 1), *base[6:]]
    another_local = [*base[:5], (3, 2), *base[6:]]  # a port now needs a mark: the others' may move
    first, second, third = states([base, one_endpoint_less, another_local], cache, tell=True)
    compiler = Compiler(CFG, V4)
    was = compiler.compile(first)
    walks: list[int] = []
    real_walk = compiler._walk
    def walk(*a: Any) -> None:
        walks.append(1)
        real_walk(*a)

    monkeypatch.setattr(compiler, "_walk", walk)
    now = compiler.compile(second)
    assert now == compile(second, CFG, V4) and walks == []
    assert now.addresses is was.addresses  # its cluster IP went and came back: no new set of addresses
    assert changed_since(now, was) is not None and not changed_since(now, was).addresses  # type: ignore[union-attr]
    assert compiler.compile(third) == compile(third, CFG, V4) and walks == [1]


entry_sets = st.frozensets(st.text("0123456789.,:tcp", max_size=8), max_size=40)


@settings(max_examples=80, deadline=None)
@given(entry_sets, entry_sets, entry_sets)
def test_entries_behave_as_the_frozenset_they_stand_for(start: frozenset[str], came: frozenset[str],
                                                        went: frozenset[str]) -> None:
    e = Entries(start)
    assert e == start and start == e and len(e) == len(start) and sorted(e) == sorted(start)
    after = e.changed(came, went - came)
    want = (start - (went - came)) | came
    assert after == want and after == Entries(want) and hash(after) == hash(Entries(want))
    assert all(x in after for x in want) and not any(x in after for x in went - came)
    assert e == start  # changed() made a new one
    assert (e | came) == start | came and (e - went) == start - went


@pytest.mark.parametrize("tell", [False, True])
@pytest.mark.parametrize("changing", [0, 1])
def test_a_virtual_server_two_services_claim_follows_the_winner(changing: int, tell: bool) -> None:
    """Two services share an external IP and port: one virtual server, claimed by both. Whichever one
    changes, and whether the compiler walks every port or follows NodeState.changes (the claimant
    removed, then added back), it crowns the one a fresh compile does."""
    steps = [[(2, 5), (2, 5), (1, 0)]]
    for count in (3, 1, 2):
        steps.append([*steps[-1]])
        steps[-1][changing] = (count, 5)
    compiler = Compiler(CFG, V4)
    for st_ in states(steps, {}, tell):
        assert compiler.compile(st_) == compile(st_, CFG, V4)
