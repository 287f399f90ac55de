"""The full sync's read of netkit's table by its fingerprint over netlink (fingerprint.py), against the
real kernel, each test in a fresh network namespace.

In sync: after netkit wrote the table and someone committed elsewhere in the namespace, the
fingerprint says "unchanged" for every example and several configurations, both families, and
netkit's own writes (scripts and netlink batches) keep the fingerprint it holds equal to one read
afresh. Out of sync: every kind of change someone else makes to netkit's table makes the full sync
read the table as before, and plan what it always planned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName, build
from netkit.model.state import ServicePortState
from netkit.nft.ruleset import Chain, Element, Elements, NamedSet, Ruleset
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.nftables.plan import plan
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and, netns_sh
from tests.unit.nft_states import node_states

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
CONFIGS = {
    "default": CONFIG,
    "masquerade-all": replace(CONFIG, masquerade_all=True, masquerade_random_fully=False),
    "nodeport-addresses": replace(CONFIG, node_port_addresses=(ip_network("192.0.2.0/24"),
                                                               ip_network("2001:db8::/64"))),
    "node-cidr": replace(CONFIG, detect_local_mode="NodeCIDR",
                         node_cidrs=(ip_network("10.244.1.0/24"), ip_network("fd00:244:0:1::/64"))),
}
FAMILY = {IPFamily.IPV4: "ip", IPFamily.IPV6: "ip6"}


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("nft")


def commit_elsewhere(netns: str) -> None:
    """A commit to another table: the namespace's generation moves, netkit's table does not."""
    netns_sh(netns, "nft", "-f", "-", input="add table inet someone-else\nadd chain inet someone-else c\n"
                                            "flush chain inet someone-else c\n")


def example_state(example: str) -> NodeState:
    return build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / example)]).objects, "node-a")


def two_ranges(state: NodeState) -> NodeState:
    """Every service port with source ranges gets a second one: `ip saddr != { a, b } drop`, an
    anonymous set the kernel names itself."""
    def widened(p: ServicePortState) -> ServicePortState:
        if not p.source_ranges:
            return p
        extra = ip_network("198.18.0.0/15") if p.family is IPFamily.IPV4 else ip_network("2001:db8:18::/48")
        return replace(p, source_ranges=(*p.source_ranges, extra))
    return replace(state, ports=tuple(widened(p) for p in state.ports))


def assert_compared(k: NftKernel, netns: str, committed: Ruleset) -> None:
    """After a commit elsewhere, the full sync's read compares and finds the table unchanged."""
    before = k.compared_reads
    commit_elsewhere(netns)
    assert k.dump_reusing(committed) is committed
    assert k.compared_reads == before + 1


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_in_sync_is_compared_not_read(netns: str, example: str, config: str) -> None:
    for family in IPFamily:
        desired = compile(two_ranges(example_state(example)), CONFIGS[config], family)
        k = NftKernel(desired.family, netns)
        k.apply(plan(None, desired))
        assert_compared(k, netns, desired)
        assert_compared(k, netns, desired)  # and again, from the generation the compare left known


@pytest.mark.parametrize("transport", ["auto", "cli"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), family=st.sampled_from(list(IPFamily)))
def test_netkits_writes_keep_the_fingerprint(netns: str, transport: str, data: st.DataObject,
                                            family: IPFamily) -> None:
    """a → b → c through netkit's own writes (netlink batches with "auto", scripts with "cli"): the
    fingerprint kept after each write is the one read afresh, and a full sync after a commit
    elsewhere compares instead of reading."""
    states = [two_ranges(data.draw(node_states(family))) for _ in range(3)]
    k = NftKernel(FAMILY[family], netns, transport=transport)
    k.cleanup()
    committed = None
    for state in states:
        desired = compile(state, CONFIG, family)
        k.apply(plan(committed, desired))
        committed = desired
        fresh = k.read_fingerprint()
        assert fresh is not None and k._print == fresh[0]  # noqa: SLF001 — the kept one is the real one
    assert committed is not None
    assert_compared(k, netns, committed)


def _port(family: IPFamily, hosts: tuple[int, ...], *, sticky: bool = False) -> ServicePortState:
    net = "10.244.1." if family is IPFamily.IPV4 else "fd00:244:0:1::"
    eps = tuple(EndpointAddr(ip_address(f"{net}{h}"), 8080) for h in hosts)
    return ServicePortState(ServicePortName(ObjectRef("default", "web"), "http"), family, Protocol.TCP,
                            ip_address("10.96.0.10" if family is IPFamily.IPV4 else "fd00:96::10"), 80,
                            node_port=30080, endpoints=eps, cluster_endpoints=eps, has_endpoints=True,
                            affinity_timeout=600 if sticky else None)


def base_table(family: IPFamily) -> Ruleset:
    return compile(NodeState(NodeInfo("node-a"), (_port(family, (11, 12, 13)),)), CONFIG, family)


def _with_chain(rs: Ruleset, name: str, change: Callable[[Chain], Chain | None]) -> Ruleset:
    chains = [c2 for c in rs.chains if (c2 := change(c) if c.name == name else c) is not None]
    return Ruleset.of(rs.family, rs.sets, chains, rs.table)


def _with_set(rs: Ruleset, name: str, change: Callable[[NamedSet], NamedSet]) -> Ruleset:
    return Ruleset.of(rs.family, [change(s) if s.name == name else s for s in rs.sets], rs.chains, rs.table)


def _elements(s: NamedSet, drop: int = 0, add: tuple[Element, ...] = ()) -> NamedSet:
    kept = sorted(s.elements)[drop:]
    return replace(s, elements=Elements.of([*kept, *add]))


def _without_ext_chain(rs: Ruleset) -> Ruleset:
    """The ext- chain deleted, with the map elements that go to it."""
    ext = next(c.name for c in rs.chains if c.name.startswith("ext-"))
    sets = [replace(s, elements=frozenset(e for e in s.elements if e.target != ext)) for s in rs.sets]
    return Ruleset.of(rs.family, sets, [c for c in rs.chains if c.name != ext], rs.table)


def _svc(rs: Ruleset) -> str:
    return next(c.name for c in rs.chains if c.name.startswith("svc-"))


# Each kind of change someone else may make to netkit's table, as the table it leaves.
DRIFTS: dict[str, Callable[[Ruleset], Ruleset]] = {
    "rule added": lambda rs: _with_chain(rs, "services",
                                         lambda c: replace(c, rules=(*c.rules, "meta l4proto tcp accept"))),
    "rule removed": lambda rs: _with_chain(rs, "masquerading", lambda c: replace(c, rules=c.rules[:-1])),
    "rule changed": lambda rs: _with_chain(rs, "mark-for-masquerade",
                                           lambda c: replace(c, rules=("meta mark set meta mark | 0x8000",))),
    "counter added": lambda rs: _with_chain(rs, _svc(rs), lambda c: replace(c, rules=("counter", *c.rules))),
    "chain added": lambda rs: Ruleset.of(rs.family, rs.sets, [*rs.chains, Chain("someone-elses", ("accept",))]),
    "chain deleted": _without_ext_chain,
    "base chain priority changed": lambda rs: _with_chain(
        rs, "nat-output", lambda c: replace(c, hook=replace(c.hook, priority=-99) if c.hook else None)),
    "set element added": lambda rs: _with_set(rs, "cluster-ips", lambda s: _elements(
        s, add=(Element("10.96.9.9" if rs.family == "ip" else "fd00:96::9:9"),))),
    "set element removed": lambda rs: _with_set(rs, "hairpin-endpoints", lambda s: _elements(s, drop=1)),
    "map element added": lambda rs: _with_set(rs, "service-nodeports", lambda s: _elements(
        s, add=(Element("udp . 31999", "drop"),))),
    "map element changed": lambda rs: _with_set(rs, "service-ips", lambda s: replace(s, elements=frozenset(
        e._replace(value="drop") for e in s.elements))),
    "map element removed": lambda rs: _with_set(rs, "service-ips", lambda s: _elements(s, drop=1)),
    "set flags changed": lambda rs: _with_set(rs, "cluster-ips", lambda s: replace(s, flags=("interval",))),
    "set timeout added": lambda rs: _with_set(rs, "health-check-nodeports",
                                              lambda s: replace(s, flags=("timeout",), timeout=3600)),
    "set added": lambda rs: Ruleset.of(rs.family, [*rs.sets, NamedSet("someone-elses", ("inet_service",))],
                                       rs.chains),
}


@pytest.mark.parametrize("family", list(IPFamily), ids=lambda f: f.value)
@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_a_change_to_netkits_table_is_read_and_planned_as_before(netns: str, drift: str, family: IPFamily) -> None:
    committed = base_table(family)
    k = NftKernel(committed.family, netns)
    k.apply(plan(None, committed))
    drifted = DRIFTS[drift](committed)
    assert drifted != committed
    NftKernel(committed.family, netns).apply(plan(committed, drifted))  # someone else's writer
    found = k.dump_reusing(committed)
    assert k.compared_reads == 0
    assert found is not committed and found == NftKernel(committed.family, netns).dump()  # the read of before
    repair = plan(found, committed)
    assert not repair.empty
    k.apply(repair)
    assert k.dump() == committed
    k.dump_reusing(committed)  # learns the fingerprint again (the generation is where netkit left it)
    assert_compared(k, netns, committed)


def test_affinity_sets_runtime_elements_are_not_compared(netns: str) -> None:
    """A ClientIP affinity set's elements are the clients seen: one added by traffic (here, by
    hand) is no change to the table."""
    committed = compile(NodeState(NodeInfo("node-a"), (_port(IPFamily.IPV4, (11, 12), sticky=True),)), CONFIG,
                        IPFamily.IPV4)
    k = NftKernel("ip", netns)
    k.apply(plan(None, committed))
    sticky = next(s for s in committed.sets if s.dynamic)
    netns_sh(netns, "nft", "add", "element", "ip", "netkit", sticky.name, "{ 192.0.2.77 }")
    assert k.dump_reusing(committed) is committed
    assert k.compared_reads == 1


def test_no_table_is_read_as_before(netns: str) -> None:
    committed = base_table(IPFamily.IPV4)
    k = NftKernel("ip", netns)
    k.apply(plan(None, committed))
    netns_sh(netns, "nft", "delete", "table", "ip", "netkit")
    assert k.dump_reusing(committed) is None
    assert k.compared_reads == 0


# Changes that leave netkit's next partial write valid (it touches other objects).
BEFORE_A_WRITE = ["rule added", "counter added", "chain added", "base chain priority changed", "set added",
                  "set element added", "map element added", "set flags changed"]


@pytest.mark.parametrize("drift", BEFORE_A_WRITE)
def test_a_change_before_netkits_next_write_is_still_read(netns: str, drift: str) -> None:
    """Someone changes netkit's table, then netkit's partial sync writes (an endpoint changed): the
    write does not make netkit trust a table it has not seen since; its next full sync reads it."""
    family = IPFamily.IPV4
    committed = base_table(family)
    k = NftKernel("ip", netns)
    assert k.dump() is None
    k.apply(plan(None, committed))
    NftKernel("ip", netns).apply(plan(committed, DRIFTS[drift](committed)))  # someone else's writer
    changed = compile(NodeState(NodeInfo("node-a"), (_port(family, (11, 12, 14)),)), CONFIG, family)
    k.apply(plan(committed, changed))
    found = k.dump_reusing(changed)
    assert k.compared_reads == 0
    assert found is not changed and found == NftKernel("ip", netns).dump()
    assert not plan(found, changed).empty
