"""nft's text listing read by parse_listing against the real kernel: the same Ruleset as the JSON.

Every ruleset netkit compiles (the examples under several configurations, and generated states:
ClientIP affinity, Local policies, firewall source ranges, NodePorts, hairpin, reject, services
without endpoints) is loaded into a fresh namespace, read from `nft -y -T list table` and from
`nft -j list table`, and the two Rulesets are compared with each other and with what was compiled.
Foreign edits (`nft add rule … counter`, …) either read the same from both listings or make the text
reader refuse, and `dump()` then reads the JSON: it always equals the JSON's Ruleset.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName, build
from netkit.model.state import ServicePortState
from netkit.nft.parse import FOREIGN
from netkit.nft.parse_listing import Unrecognised
from netkit.nft.ruleset import Ruleset
from netkit.rules.nftables import kernel as kernel_mod
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel, load_nftables_module
from netkit.rules.nftables.plan import plan
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and
from tests.unit.nft_states import node_states

BASE = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
CONFIGS = {
    "cluster-cidr": BASE,
    "interface-prefix": replace(BASE, detect_local_mode="InterfaceNamePrefix", interface_name_prefix="veth"),
    "bridge": replace(BASE, detect_local_mode="BridgeInterface", bridge_interface="cni0"),
    "masquerade-all-bit-0": replace(BASE, masquerade_all=True, masquerade_bit=0, masquerade_random_fully=False),
    "nodeport-addresses": replace(BASE, node_port_addresses=(ip_network("192.0.2.0/24"),
                                                             ip_network("2001:db8:2::/64"))),
}


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("nft")


def nft(netns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "nft", *args], capture_output=True, text=True, check=True)


def both(k: NftKernel) -> tuple[Ruleset | None, Ruleset | None]:
    """(from the text listing, from the JSON listing)."""
    return k._read(None, text=True), k._read(None, text=False)


def loaded(netns: str, desired: Ruleset, transport: str = "cli") -> NftKernel:
    k = NftKernel(desired.family, netns, transport=transport)
    k.cleanup()
    k.apply(plan(None, desired))
    return k


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_example_reads_the_same_from_text_and_json(netns: str, config: str) -> None:
    for path in sorted(EXAMPLES.glob("[1-9]*.yaml")):
        state = build(load([str(EXAMPLES / "00-node.yaml"), str(path)]).objects, "node-a")
        for family in IPFamily:
            desired = compile(state, CONFIGS[config], family)
            text, json = both(loaded(netns, desired))
            assert text == json == desired, (path.name, family)


def test_the_in_process_transport_reads_the_text_listing_too(netns: str) -> None:
    if load_nftables_module() is None:
        pytest.skip("needs python3-nftables (Debian) for the libnftables transport")
    state = build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "40-sticky-affinity.yaml")]).objects, "node-a")
    desired = compile(state, BASE, IPFamily.IPV4)
    k = loaded(netns, desired, transport="lib")
    assert k._read(None, text=True) == desired
    assert not k._lib.get_numeric_prio_output() and not k._lib.get_numeric_time_output(), "options put back"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), family=st.sampled_from(list(IPFamily)), config=st.sampled_from(sorted(CONFIGS)))
def test_generated_states_read_the_same_from_text_and_json(netns: str, data: st.DataObject, family: IPFamily,
                                                           config: str) -> None:
    desired = compile(data.draw(node_states(family, max_services=6)), CONFIGS[config], family)
    text, json = both(loaded(netns, desired))
    assert text == json == desired


def test_source_ranges_the_kernel_merges_into_ranges_read_as_prefixes(netns: str) -> None:
    """10.0.0.0/25 + 10.0.0.128/26 is one interval to the kernel: nft lists it as a range."""
    eps = (EndpointAddr(ip_address("10.244.1.5"), 8080, local=True, node_name="node-a"),)
    port = ServicePortState(ServicePortName(ObjectRef("default", "lb"), "http"), IPFamily.IPV4, Protocol.TCP,
                            ip_address("10.96.0.20"), 80, load_balancer_ips=(ip_address("198.51.100.20"),),
                            source_ranges=(ip_network("10.0.0.0/25"), ip_network("10.0.0.128/26"),
                                           ip_network("10.1.0.0/16")),
                            endpoints=eps, cluster_endpoints=eps, local_endpoints=eps, has_endpoints=True)
    desired = compile(NodeState(NodeInfo("node-a"), (port,)), BASE, IPFamily.IPV4)
    k = loaded(netns, desired)
    listing = subprocess.run(["ip", "netns", "exec", netns, "nft", "list", "table", "ip", "netkit"],
                             capture_output=True, text=True, check=True).stdout
    assert "10.0.0.0-10.0.0.191" in listing
    text, json = both(k)
    assert text == json == desired


def _sticky_example(netns: str) -> tuple[NftKernel, Ruleset]:
    state = build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "40-sticky-affinity.yaml")]).objects, "node-a")
    desired = compile(state, BASE, IPFamily.IPV4)
    return loaded(netns, desired), desired


READ_BY_BOTH = {  # edits made of shapes netkit writes: the text reader reads them, as the JSON does
    "element": ["add", "element", "ip", "netkit", "cluster-ips", "{ 10.96.9.9 }"],
    "rule": ["add", "rule", "ip", "netkit", "services", "ip", "daddr", "10.96.9.9", "drop"],
    "chain": ["add", "chain", "ip", "netkit", "my-chain"],
    "set": ["add", "set", "ip", "netkit", "my-set", "{ type ipv4_addr; }"],
    "deleted-rule": ["flush", "chain", "ip", "netkit", "masquerading"],
}
REFUSED_BY_TEXT = {  # edits the text reader does not know: dump() reads the JSON
    "counter": ["add", "rule", "ip", "netkit", "services", "counter"],
    "comment": ["add", "rule", "ip", "netkit", "services", "ip", "daddr", "10.96.9.9", "drop", "comment", '"x"'],
    "log": ["add", "rule", "ip", "netkit", "services", "log", "prefix", '"x "'],
    "range": ["add", "rule", "ip", "netkit", "services", "ip", "daddr", "10.96.9.1-10.96.9.9", "drop"],
    "icmp-reject": ["add", "rule", "ip", "netkit", "services", "reject", "with", "icmp", "host-unreachable"],
    "interval-set": ["add", "set", "ip", "netkit", "my-set", "{ type ipv4_addr; flags interval; }"],
    "counter-set": ["add", "set", "ip", "netkit", "my-set", "{ type ipv4_addr; counter; }"],
    "element-comment": ["add", "element", "ip", "netkit", "cluster-ips", '{ 10.96.9.9 comment "x" }'],
    "anonymous-vmap": ["add", "rule", "ip", "netkit", "services", "tcp", "dport", "vmap", "{ 80 : drop }"],
}


@pytest.mark.parametrize("edit", sorted(READ_BY_BOTH))
def test_foreign_edits_of_netkits_shapes_read_the_same_from_text_and_json(netns: str, edit: str) -> None:
    k, desired = _sticky_example(netns)
    nft(netns, *READ_BY_BOTH[edit])
    text, json = both(k)
    assert text == json != desired
    assert k.dump() == json


@pytest.mark.parametrize("edit", sorted(REFUSED_BY_TEXT))
def test_other_foreign_edits_make_the_text_reader_refuse_and_dump_reads_the_json(netns: str, edit: str) -> None:
    k, desired = _sticky_example(netns)
    nft(netns, *REFUSED_BY_TEXT[edit])
    with pytest.raises(Unrecognised):
        k._read(None, text=True)
    live = k.dump()
    assert live == k._read(None, text=False) != desired
    assert plan(live, desired).empty is False, "the plan repairs it"


def test_a_foreign_statement_is_shown_through_the_json(netns: str) -> None:
    k, _ = _sticky_example(netns)
    nft(netns, *REFUSED_BY_TEXT["counter"])
    live = k.dump()
    assert live is not None and f"{FOREIGN} counter" in live.chain_map()["services"].rules


def test_remembered_clients_in_dynamic_sets_are_not_read(netns: str) -> None:
    k, desired = _sticky_example(netns)
    aff = next(s.name for s in desired.sets if s.dynamic)
    nft(netns, "add", "element", "ip", "netkit", aff, "{ 203.0.113.9 timeout 10s }")
    text, json = both(k)
    assert text == json == desired


def test_a_full_sync_after_a_foreign_commit_reads_the_text_and_shares_what_is_unchanged(
        netns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    k, desired = _sticky_example(netns)
    nft(netns, *READ_BY_BOTH["element"])

    def no_json(*args: object, **kwargs: object) -> None:
        raise AssertionError("the JSON listing was read")

    monkeypatch.setattr(kernel_mod, "parse", no_json)
    live = k.dump_reusing(desired)
    assert live is not None and live != desired
    old = desired.set_map()
    assert all(s is old[s.name] for s in live.sets if s.name != "cluster-ips")
    assert all(c is d for c, d in zip(live.chains, desired.chains, strict=True))
    assert k.dump_reusing(live) is live, "nothing committed since the read: the generation says so"
