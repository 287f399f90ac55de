"""commits(plan): after every kernel commit, each Service's traffic meets its old or its new rules.

Services flip between no endpoints (REJECT in filter) and some (DNAT in nat), in both directions in
one plan, plus a NodePort and an external IP; trace() over the ruleset after each commit must give,
for every address and port, the outcome of the old ruleset or of the new one — never "delivered
untranslated" where neither says so. The old single-restore order (filter, then nat) fails this.
"""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from netkit.config import Config
from netkit.model import IPFamily, build
from netkit.rules.iptables.commits import commits
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.plan import Plan, apply_to, plan
from netkit.rules.iptables.ruleset import Ruleset
from netkit.rules.iptables.trace import trace
from netkit.rules.tracing import Packet
from tests.factories import endpoint, node, objects, service, slice_

CFG = Config(node_name="node-a", cluster_cidrs=(ip_network("10.244.0.0/16"),))
NODE_IP = ip_address("192.0.2.10")


def state(with_endpoints: set[str]):  # type: ignore[no-untyped-def]
    docs = [node()]
    for i, name in enumerate(["a", "b", "c", "d"]):
        docs.append(service(name, ip=f"10.96.0.{i + 1}", type="NodePort", externalIPs=[f"198.51.100.{i + 1}"],
                            ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080 + i}]))
        if name in with_endpoints:
            docs.append(slice_(name, endpoints=[endpoint(f"10.244.2.{i + 1}")]))
    return build(objects(*docs), "node-a", (NODE_IP,))


def outcome(rules: Ruleset, dst: str, port: int) -> tuple[tuple[str, str | None], ...]:
    pkt = Packet(ip_address("203.0.113.5"), ip_address(dst), port, local_addresses=(NODE_IP,))
    return tuple(sorted((o.verdict, o.destination) for o in trace(rules, pkt)))


TARGETS = [(f"10.96.0.{i}", 80) for i in range(1, 5)] + [(f"198.51.100.{i}", 80) for i in range(1, 5)] + [
    ("192.0.2.10", 30080 + i) for i in range(4)]


def every_state_is_old_or_new(before: Ruleset, after: Ruleset, steps: list[Plan]) -> list[str]:
    bad: list[str] = []
    current = before
    for k, step in enumerate(steps, 1):
        current = apply_to(current, step)
        for dst, port in TARGETS:
            got = outcome(current, dst, port)
            if got not in (outcome(before, dst, port), outcome(after, dst, port)):
                bad.append(f"after commit {k}: {dst}:{port} → {got}")
    return bad


@pytest.mark.parametrize(("old", "new"), [({"a", "b"}, {"c", "d"}), (set(), {"a", "b", "c", "d"}),
                                          ({"a", "b", "c", "d"}, set()), ({"a"}, {"a", "b"}), ({"a", "b"}, {"b"})])
def test_every_commit_leaves_each_service_with_its_old_or_new_rules(old: set[str], new: set[str]) -> None:
    before = compile(state(old), CFG, IPFamily.IPV4)
    after = compile(state(new), CFG, IPFamily.IPV4)
    p = plan(before, after)
    steps = commits(p)
    assert every_state_is_old_or_new(before, after, steps) == []
    end = apply_to(before, Plan(p.family, jumps=p.jumps))
    for step in steps:
        end = apply_to(end, step)
    assert plan(end, after).empty


def test_the_single_restore_order_would_leak() -> None:
    """The check above is able to fail: filter then nat in one go leaves a hole."""
    before = compile(state(set()), CFG, IPFamily.IPV4)
    after = compile(state({"a"}), CFG, IPFamily.IPV4)
    p = plan(before, after)
    naive = [Plan(p.family, {"filter": p.write["filter"]}, {}, (), p.old),
             Plan(p.family, {"nat": p.write["nat"]}, {}, (), p.old)]
    assert every_state_is_old_or_new(before, after, naive)


def test_a_plan_touching_one_table_is_one_commit() -> None:
    """An endpoint replaced by another: only nat changes, so one commit as before (no --test run)."""
    moved = build(objects(node(), *(service(n, ip=f"10.96.0.{i + 1}", type="NodePort",
                                            externalIPs=[f"198.51.100.{i + 1}"],
                                            ports=[{"name": "http", "port": 80, "targetPort": 8080,
                                                    "nodePort": 30080 + i}])
                                    for i, n in enumerate("abcd")),
                          slice_("a", endpoints=[endpoint("10.244.2.9")])), "node-a", (NODE_IP,))
    steps = commits(plan(compile(state({"a"}), CFG, IPFamily.IPV4), compile(moved, CFG, IPFamily.IPV4)))
    assert [sorted({*s.write, *s.delete}) for s in steps] == [["nat"]]


@pytest.mark.parametrize(("old", "new"), [({"a", "b"}, {"c", "d"}), ({"a", "b", "c", "d"}, set()), ({"a", "b"}, {"b"})])
def test_the_summary_names_what_a_connection_meets_after_every_commit(old: set[str], new: set[str]) -> None:
    """summarize() (read by `netkit diff`'s summaries and the daemon tests waiting for the kernel)
    gives, for each Service, the endpoints a packet to its cluster IP is DNATed to after every
    commit — also between filter's new refusal and nat's removal of the DNAT, where nat decides."""
    from netkit.rules.iptables.summary import summarize
    before = compile(state(old), CFG, IPFamily.IPV4)
    current = before
    for step in commits(plan(before, compile(state(new), CFG, IPFamily.IPV4))):
        current = apply_to(current, step)
        summary = summarize(current)
        for i, name in enumerate("abcd"):
            met = {d for _, d in outcome(current, f"10.96.0.{i + 1}", 80) if d}
            assert set(summary.get(f"default/{name}:http/tcp", ())) == met, (name, summary, met)
