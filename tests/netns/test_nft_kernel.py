"""The nftables backend against the real kernel, each test in a fresh network namespace.

Both transports (`nft -f -` and libnftables in-process) are exercised: every example loads and
dumps back equal to what was compiled; plan(a, b) applied to a kernel holding a yields b; cleanup
removes netkit's table and nothing else; a refused transaction changes nothing.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import (
    EndpointAddr,
    IPFamily,
    NodeInfo,
    NodeState,
    ObjectRef,
    Protocol,
    ServicePortName,
    build,
)
from netkit.model.state import ServicePortState
from netkit.nft.rule import read
from netkit.nft.ruleset import Chain, Element
from netkit.nft.transaction import Transaction, render_prelude, render_transaction
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel, load_nftables_module
from netkit.rules.nftables.plan import plan
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and, netns_name
from tests.unit.nft_states import node_states

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
TRANSPORTS = ["cli", "lib"]


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("nft")


def kernel(netns: str, family: str, transport: str) -> NftKernel:
    if transport == "lib" and load_nftables_module() is None:
        pytest.skip("needs python3-nftables (Debian) for the libnftables transport")
    return NftKernel(family, netns, transport=transport)


def nft(netns: str, *args: str, input: str | None = None) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "nft", *args], input=input, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_loads_and_dumps_back_equal(netns: str, example: str, transport: str) -> None:
    state = build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / example)]).objects, "node-a")
    for family in IPFamily:
        desired = compile(state, CONFIG, family)
        k = kernel(netns, desired.family, transport)
        assert k.dump() is None
        k.apply(plan(None, desired))
        live = k.dump()
        assert live == desired
        assert plan(live, desired).empty
        assert live is not None
        # JSON dump → typed: every rule read from the kernel reads as the compiled one does
        assert [[read(r) for r in c.rules] for c in live.chains] == [[read(r) for r in c.rules] for c in desired.chains]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_plan_between_examples_applied_to_the_kernel(netns: str, transport: str) -> None:
    """Every example to every other, in one namespace: the kernel ends where plan says."""
    files = sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "00-node.yaml")
    k = kernel(netns, "ip", transport)
    committed = None
    for example in [*files, *reversed(files)]:
        state = build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / example)]).objects, "node-a")
        desired = compile(state, CONFIG, IPFamily.IPV4)
        k.apply(plan(committed, desired))
        committed = k.dump()
        assert committed == desired, example


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), family=st.sampled_from(list(IPFamily)))
def test_kernel_apply_plan_turns_a_into_b(netns: str, data: st.DataObject, family: IPFamily) -> None:
    a = compile(data.draw(node_states(family)), CONFIG, family)
    b = compile(data.draw(node_states(family)), CONFIG, family)
    k = NftKernel(a.family, netns, transport="cli")
    k.cleanup()
    k.apply(plan(None, a))
    assert k.dump() == a
    k.apply(plan(a, b))
    assert k.dump() == b


def _service(family: IPFamily, protocol: Protocol, hosts: tuple[int, ...]) -> NodeState:
    net = "10.244.1." if family is IPFamily.IPV4 else "fd00:244:0:1::"
    cluster_ip = ip_address("10.96.0.10" if family is IPFamily.IPV4 else "fd00:96::10")
    eps = tuple(EndpointAddr(ip_address(f"{net}{h}"), 8080) for h in hosts)
    port = ServicePortState(ServicePortName(ObjectRef("default", "web"), "http"), family, protocol, cluster_ip, 80,
                            endpoints=eps, cluster_endpoints=eps, has_endpoints=True)
    return NodeState(NodeInfo("node-a"), (port,))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("protocol", list(Protocol), ids=lambda p: p.lower)
@pytest.mark.parametrize("family", list(IPFamily), ids=lambda f: f.value)
def test_endpoint_changes_update_the_existing_endpoint_map(netns: str, family: IPFamily, protocol: Protocol,
                                                           transport: str) -> None:
    """The rule is rewritten against a map the kernel already holds (nft then checks the map's typeof
    against the rule's protocol), and the map's elements are deleted and re-added in place."""
    steps = [(11, 12, 13), (12, 13), (12, 13, 14, 15), (11,), (11, 12)]
    k = kernel(netns, "ip" if family is IPFamily.IPV4 else "ip6", transport)
    committed = None
    for hosts in steps:
        desired = compile(_service(family, protocol, hosts), CONFIG, family)
        k.apply(plan(committed, desired))
        committed = k.dump()
        assert committed == desired, hosts


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cleanup_removes_only_netkits_table(netns: str, transport: str) -> None:
    nft(netns, "-f", "-", input="table ip foreign {\n chain c {\n type filter hook input priority 0;\n"
                                 " tcp dport 22 accept\n }\n}\ntable ip6 netkit {\n}\n")
    state = build(load([str(EXAMPLES)]).objects, "node-a")
    k = kernel(netns, "ip", transport)
    k.apply(plan(None, compile(state, CONFIG, IPFamily.IPV4)))
    k.cleanup()
    assert k.dump() is None
    k.cleanup()  # a second cleanup is no error
    tables = nft(netns, "list", "tables")
    assert tables.split("\n")[:2] == ["table ip foreign", "table ip6 netkit"]
    assert "tcp dport 22 accept" in nft(netns, "list", "table", "ip", "foreign")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_refused_transaction_changes_nothing(netns: str, transport: str) -> None:
    state = build(load([str(EXAMPLES)]).objects, "node-a")
    a = compile(state, CONFIG, IPFamily.IPV4)
    k = kernel(netns, "ip", transport)
    k.apply(plan(None, a))
    good = plan(a, compile(replace(state, ports=state.ports[1:]), CONFIG, IPFamily.IPV4))
    bad = replace(good, add_elements=(*good.add_elements, ("cluster-ips", Element("10.96.9.9"))),
                  rules=(*good.rules, Chain("services", ("jump no-such-chain",))))
    with pytest.raises(KernelError) as refused:
        k.apply(bad)
    assert "no-such-chain" in refused.value.payload
    assert k.dump() == a


def test_refused_transaction_on_missing_table_is_an_error(netns: str) -> None:
    k = NftKernel("ip", netns, transport="cli")
    with pytest.raises(KernelError):
        k.apply(Transaction("ip", add_elements=(("cluster-ips", Element("10.96.9.9")),)))
    assert k.dump() is None


# Each an edit someone else makes inside netkit's table (or beside it): a full sync must see it.
EDITS = [
    ("a foreign statement", ["add", "rule", "ip", "netkit", "services", "counter"]),
    ("a deleted element", ["delete", "element", "ip", "netkit", "cluster-ips", "{ 10.96.0.10 }"]),
    ("a changed rule", ["flush", "chain", "ip", "netkit", "services"]),
    ("another table", ["add", "table", "ip", "someone-else"]),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("what", "edit"), EDITS, ids=[e[0] for e in EDITS])
def test_full_sync_reads_the_kernel_again_after_any_edit(netns: str, transport: str, what: str,
                                                         edit: list[str]) -> None:
    """`dump_reusing` hands back the committed Ruleset itself only while the namespace's nftables
    generation is the one netkit's own apply (or its own last read) left, or while the table's
    fingerprint is the one netkit knew (a commit to another table only); any edit of netkit's
    table is read."""
    state = build(load([str(EXAMPLES)]).objects, "node-a")
    a = compile(state, CONFIG, IPFamily.IPV4)
    b = compile(replace(state, ports=state.ports[1:]), CONFIG, IPFamily.IPV4)
    k = kernel(netns, "ip", transport)
    k.apply(plan(None, a))
    assert k.dump_reusing(a) is a  # nothing changed since the apply: nothing to read
    k.apply(plan(a, b))
    assert k.dump_reusing(b) is b
    nft(netns, *edit)
    live = k.dump_reusing(b)
    if what == "another table":
        assert live is b and k.compared_reads == 1  # compared over netlink, not read
    else:
        assert live is not b, what
        assert live != b and not plan(live, b).empty
        assert live is not None and live.chain_map()["nat-prerouting"] is b.chain_map()["nat-prerouting"]  # shared
        k.apply(plan(live, b))
        assert k.dump() == b
    assert k.dump_reusing(b) is b  # the dump just read is what the kernel holds


def test_a_commit_by_someone_else_during_an_apply_is_noticed(netns: str) -> None:
    """Another writer between netkit's transaction and its read of the generation: the generation has
    moved by more than netkit's own commits, so the next full sync reads the table."""
    state = build(load([str(EXAMPLES)]).objects, "node-a")
    a = compile(state, CONFIG, IPFamily.IPV4)
    k = NftKernel("ip", netns, transport="cli")
    send = k.send

    def send_and_edit(script: str, *, big: bool = False) -> int:
        sent = send(script, big=big)
        if "jump services" in script:  # the table's transaction (not its prelude of affinity sets)
            nft(netns, "add", "rule", "ip", "netkit", "services", "counter")
        return sent

    k.send = send_and_edit  # type: ignore[method-assign]
    k.apply(plan(None, a))
    k.send = send  # type: ignore[method-assign]
    live = k.dump_reusing(a)
    assert live is not a and live != a


def _sticky(services: int, endpoints: int) -> NodeState:
    """`services` ClientIP-affinity services of `endpoints` each (one dynamic set per endpoint)."""
    ports = []
    for s in range(services):
        eps = tuple(EndpointAddr(ip_address(f"10.244.{s}.{h + 1}"), 8080) for h in range(endpoints))
        ports.append(ServicePortState(ServicePortName(ObjectRef("default", f"sticky{s}"), "http"), IPFamily.IPV4,
                                      Protocol.TCP, ip_address(f"10.96.1.{s + 1}"), 80, affinity_timeout=600,
                                      endpoints=eps, cluster_endpoints=eps, has_endpoints=True))
    return NodeState(NodeInfo("node-a"), tuple(ports))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_affinity_sets_are_created_alone_before_the_rules_that_use_them(netns: str, transport: str) -> None:
    """nft 1.0.6 sizes a dynamic set created beside a rule that updates it for 65535 elements, which
    the kernel allocates at once (~2 MB a set): each transaction's new dynamic sets go first, alone
    and without a size. If the transaction after them is refused, only those unused sets stay, and a
    plan from the kernel's table finishes the job."""
    a = compile(_sticky(20, 3), CONFIG, IPFamily.IPV4)
    tx = plan(None, a)
    pre, main = render_prelude(tx), render_transaction(tx)
    assert pre.count("add set ip netkit aff-") == 60 and "size" not in pre and "aff-" not in main.split("chain")[0]
    k = kernel(netns, "ip", transport)
    k.apply(tx)
    assert k.dump() == a  # the kernel reports size 65535 once a rule binds a set, as compiled
    b = compile(_sticky(22, 3), CONFIG, IPFamily.IPV4)
    good = plan(a, b)
    assert render_prelude(good).count("add set") == 6
    bad = replace(good, rules=(*good.rules, Chain("services", ("jump no-such-chain",))))
    with pytest.raises(KernelError):
        k.apply(bad)
    live = k.dump()
    assert live is not None and live != a
    extra = {s.name for s in live.sets} - {s.name for s in a.sets}
    assert len(extra) == 6 and all(s.dynamic for s in live.sets if s.name in extra)
    assert not any(c.set_refs() & extra for c in live.chains), "nothing uses the sets created first"
    k.apply(plan(live, b))
    assert k.dump() == b


def test_a_namespace_created_again_under_the_same_name_is_read_again() -> None:
    """The generation's socket belongs to the namespace it was opened in: a new namespace under the
    same name (netkit's table gone with the old one) must be read, not trusted."""
    name = netns_name("nkgen")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        state = build(load([str(EXAMPLES)]).objects, "node-a")
        a = compile(state, CONFIG, IPFamily.IPV4)
        k = NftKernel("ip", name, transport="cli")
        k.apply(plan(None, a))
        assert k.dump_reusing(a) is a
        subprocess.run(["ip", "netns", "del", name], check=True)
        subprocess.run(["ip", "netns", "add", name], check=True)
        assert k.dump_reusing(a) is None  # the new namespace holds no table
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.mark.parametrize("transport", [*TRANSPORTS, "auto"])  # auto: netkit's own netlink batch
def test_services_sharing_an_external_ip_and_port_load_and_hand_the_key_over(netns: str, transport: str) -> None:
    """Two Services claiming 198.51.100.7:80 (kubernetes#69599): the kernel refuses a map with two
    values for one key, so the table holds the first port's claim; when that Service goes, the
    other's claim replaces it in the same transaction, and back."""
    from netkit.rules.nftables.compile import Compiler
    from tests.factories import node, objects
    from tests.unit.test_nft_compile import shared_address_docs

    k = kernel(netns, "ip", transport)
    compiler = Compiler(CONFIG, IPFamily.IPV4)
    for present, winner in ((("alpha", "beta"), "alpha"), (("beta",), "beta"), (("alpha", "beta"), "alpha")):
        desired = compiler.compile(build(objects(node(), *shared_address_docs(*present)), "node-a"))
        tx, sent = plan(k.dump(), desired), k.netlink_batches
        k.apply(tx)
        if transport == "auto" and tx.create is None:  # the handover itself went as one netlink batch
            assert k.netlink_batches > sent
        listed = [line for line in nft(netns, "list", "map", "ip", "netkit", "service-ips").splitlines()
                  if "198.51.100.7" in line]
        assert len(listed) == 1 and "ext-" in listed[0] and f"default/{winner}/" in listed[0], listed
        assert plan(k.dump(), desired).empty
