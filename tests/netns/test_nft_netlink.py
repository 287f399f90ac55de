"""netlink.py's writer against the real kernel: each change written by netlink in one namespace and
by `nft -f` in another, from the same start, must leave equal tables (`nft list table`, and the
expressions the kernel holds, `nft --debug=netlink list table`); a batch whose generation moved is
refused and changes nothing; a refused batch is one KernelError with nothing changed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from ipaddress import ip_address, ip_network

import pytest

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName
from netkit.model.state import ServicePortState
from netkit.nft import netlink
from netkit.nft.ruleset import Element, Ruleset
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.nftables.plan import plan
from tests.conftest import need_root_and, netns_name

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("ip", "nft")


@pytest.fixture
def two_netns() -> Iterator[tuple[str, str]]:
    """Two fresh namespaces (netlink's, nft's); both removed afterwards, also on failure."""
    names = [netns_name("nkl") for _ in range(2)]
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
        yield names[0], names[1]
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def nft(netns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "nft", *args], capture_output=True, text=True,
                          check=True).stdout


def kernel_view(netns: str, family: str) -> tuple[str, list[str]]:
    """The table as nft lists it, and what the kernel holds in netlink terms: every rule's
    expressions and every set's elements (`nft --debug=netlink`; handles left out, elements sorted:
    the kernel lists them in hash order)."""
    listing = nft(netns, "list", "table", family, "netkit")
    blocks: list[str] = []
    for line in nft(netns, "--debug=netlink", "list", "table", family, "netkit").splitlines():
        if not line.strip():
            continue
        if line.startswith((" ", "\t")) and blocks:
            blocks[-1] += "\n" + line
        else:
            words = line.split()
            blocks.append(" ".join(words[:3]))  # "ip netkit CHAIN" without handle and position
    return listing, [b if " @" not in b.split("\n")[0] else "\n".join(sorted(b.split("\n"))) for b in blocks]


def port(name: str, family: IPFamily, hosts: tuple[int, ...], **kw: object) -> ServicePortState:
    v4 = family is IPFamily.IPV4
    eps = tuple(EndpointAddr(ip_address(f"10.244.1.{h}" if v4 else f"fd00:244:0:1::{h}"), 8080,
                             local=h % 2 == 0, node_name="node-a" if h % 2 == 0 else "node-b") for h in hosts)
    index = sum(map(ord, name)) % 200
    cluster_ip = ip_address(f"10.96.0.{index}" if v4 else f"fd00:96::{index:x}")
    return replace(ServicePortState(ServicePortName(ObjectRef("default", name), "http"), family, Protocol.TCP,
                                    cluster_ip, 80, endpoints=eps, cluster_endpoints=eps,
                                    local_endpoints=tuple(e for e in eps if e.local), has_endpoints=bool(eps)),
                   **kw)  # type: ignore[arg-type]


def start(family: IPFamily) -> tuple[ServicePortState, ...]:
    """Five services to change, then enough others that every shared endpoint map exists (a new one
    is created by nft: its `typeof` key is no part of what netlink.py encodes)."""
    v4 = family is IPFamily.IPV4
    lb, lb2 = (ip_address("192.0.2.50"), ip_address("192.0.2.51")) if v4 else (ip_address("2001:db8::50"),
                                                                               ip_address("2001:db8::51"))
    return (
        port("web", family, (1, 2, 3)),
        port("api", family, (4, 5)),
        port("sticky", family, (6, 7), affinity_timeout=600),
        port("local", family, (8, 9), node_port=30080, external_policy_local=True, load_balancer_ips=(lb,),
             health_check_node_port=31000),
        port("walled", family, (10,), load_balancer_ips=(lb2,),
             source_ranges=(ip_network("198.51.100.0/24" if v4 else "2001:db8:1::/48"),)),
        *(FILLER_V4 if v4 else FILLER_V6),
    )


def _filler(family: IPFamily) -> tuple[ServicePortState, ...]:
    v4 = family is IPFamily.IPV4
    return tuple(replace(port(f"f{i}", family, (20, 21)), cluster_ip=ip_address(
        f"10.97.{i // 250}.{i % 250 + 1}" if v4 else f"fd00:97::{i + 1:x}")) for i in range(600))


FILLER_V4, FILLER_V6 = _filler(IPFamily.IPV4), _filler(IPFamily.IPV6)


Change = Callable[[tuple[ServicePortState, ...], IPFamily], tuple[ServicePortState, ...]]


def _hosts(p: ServicePortState, hosts: tuple[int, ...]) -> ServicePortState:
    return replace(port(p.name.ref.name, p.family, hosts), **{
        k: getattr(p, k) for k in ("node_port", "external_policy_local", "load_balancer_ips", "source_ranges",
                                   "affinity_timeout", "health_check_node_port")})


def _ranges(p: ServicePortState, family: IPFamily, n: int = 2) -> ServicePortState:
    more = ("203.0.113.0/24", "192.0.2.128/25", "198.51.101.0/24") if family is IPFamily.IPV4 else (
        "2001:db8:2::/48", "2001:db8:3::/48", "2001:db8:f00::/40")
    return replace(p, source_ranges=(*p.source_ranges, *map(ip_network, more[:n])))


def _walled_again(p: ServicePortState, family: IPFamily) -> ServicePortState:
    lb = ip_address("192.0.2.52" if family is IPFamily.IPV4 else "2001:db8::52")
    return replace(port("wall2", family, (17,)), load_balancer_ips=(lb,), source_ranges=p.source_ranges)


SCENARIOS: list[tuple[str, Change]] = [
    ("endpoint removed", lambda ps, f: (_hosts(ps[0], (1, 2)), *ps[1:])),
    ("endpoint added", lambda ps, f: (_hosts(ps[0], (1, 2, 3, 11)), *ps[1:])),
    ("endpoint address changed", lambda ps, f: (ps[0], _hosts(ps[1], (4, 12)), *ps[2:])),
    ("last endpoint removed", lambda ps, f: (ps[0], _hosts(ps[1], ()), *ps[2:])),
    ("service added", lambda ps, f: (*ps, port("new", f, (13, 14)))),
    ("service removed", lambda ps, f: ps[1:]),
    ("UDP service added: a new endpoint map", lambda ps, f: (*ps, replace(port("dns", f, (18, 19)),
                                                                           protocol=Protocol.UDP))),
    ("affinity service endpoint removed", lambda ps, f: (*ps[:2], _hosts(ps[2], (6,)), *ps[3:])),
    ("affinity service added", lambda ps, f: (*ps, port("sticky2", f, (15, 16), affinity_timeout=300))),
    ("Local policy: local endpoint removed", lambda ps, f: (*ps[:3], _hosts(ps[3], (9,)), *ps[4:])),
    ("Local policy: local endpoint added", lambda ps, f: (*ps[:3], _hosts(ps[3], (8, 9, 12)), *ps[4:])),
    ("firewalled service endpoint added", lambda ps, f: (*ps[:4], _hosts(ps[4], (10, 12)), *ps[5:])),
    ("firewalled service added", lambda ps, f: (*ps, _walled_again(ps[4], f))),
    ("firewall: source ranges added (an anonymous set)", lambda ps, f: (*ps[:4], _ranges(ps[4], f), *ps[5:])),
    ("firewalled service with three ranges added", lambda ps, f: (*ps, _ranges(_walled_again(ps[4], f), f, 3))),
]


@pytest.mark.parametrize("family", list(IPFamily), ids=lambda f: f.value)
@pytest.mark.parametrize(("what", "change"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_change_written_by_netlink_equals_the_same_change_written_by_nft(
        two_netns: tuple[str, str], family: IPFamily, what: str, change: Change) -> None:
    by_netlink, by_nft = two_netns
    before = start(family)
    a = compile(NodeState(NodeInfo("node-a"), before), CONFIG, family)
    b = compile(NodeState(NodeInfo("node-a"), change(before, family)), CONFIG, family)
    tx = plan(a, b)
    assert not tx.empty, what
    netlink.encode(tx, 0)  # every scenario is one the writer encodes (else nft would write it)
    assert bool(tx.add_sets) == ("new endpoint map" in what or "affinity service added" in what)
    writer = NftKernel(a.family, by_netlink)  # "auto": small transactions by netlink
    for k in (writer, NftKernel(a.family, by_nft, transport="cli")):
        k.apply(plan(None, a))
        k.apply(tx)
    assert writer.netlink_batches >= 1
    assert kernel_view(by_netlink, a.family) == kernel_view(by_nft, a.family)
    assert writer.dump() == b


def test_what_the_writer_does_not_encode_goes_by_nft_whole(two_netns: tuple[str, str]) -> None:
    """A source range up to the last address (nft marks it open-ended in the element's userdata,
    which netlink.py does not write) is no netlink batch: the transaction goes as an nft script,
    all of it, and the table ends the same."""
    by_netlink, _ = two_netns
    ps = start(IPFamily.IPV4)
    walled = replace(ps[4], source_ranges=(ip_network("198.51.100.0/24"), ip_network("255.255.255.0/24")))
    a = compile(NodeState(NodeInfo("node-a"), ps), CONFIG, IPFamily.IPV4)
    b = compile(NodeState(NodeInfo("node-a"), (*ps[:4], walled, *ps[5:])), CONFIG, IPFamily.IPV4)
    with pytest.raises(netlink.Unsupported):
        netlink.encode(plan(a, b), 0)
    k = NftKernel("ip", by_netlink)
    k.apply(plan(None, a))
    k.apply(plan(a, b))
    assert k.netlink_batches == 0
    assert k.dump() == b


def test_a_batch_whose_generation_moved_is_refused_and_changes_nothing(two_netns: tuple[str, str]) -> None:
    netns, _ = two_netns
    ps = start(IPFamily.IPV4)
    a = compile(NodeState(NodeInfo("node-a"), ps), CONFIG, IPFamily.IPV4)
    b = compile(NodeState(NodeInfo("node-a"), ps[1:]), CONFIG, IPFamily.IPV4)
    k = NftKernel("ip", netns)
    k.apply(plan(None, a))
    read = k._generation.read
    k._generation.read = lambda: (g - 1 if (g := read()) is not None else None)  # type: ignore[method-assign]
    listing = kernel_view(netns, "ip")
    with pytest.raises(KernelError, match="generation moved"):
        k.apply(plan(a, b))
    assert kernel_view(netns, "ip") == listing
    k._generation.read = read  # type: ignore[method-assign]
    assert k.dump() == a
    k.apply(plan(a, b))  # with the true generation the same batch goes through
    assert k.netlink_batches >= 1 and k.dump() == b


@pytest.mark.parametrize("what", ["a missing element", "a flush of a missing chain", "a missing chain"])
def test_a_refused_batch_is_one_error_and_changes_nothing(two_netns: tuple[str, str], what: str) -> None:
    netns, _ = two_netns
    ps = start(IPFamily.IPV4)
    a = compile(NodeState(NodeInfo("node-a"), ps), CONFIG, IPFamily.IPV4)
    good = plan(a, compile(NodeState(NodeInfo("node-a"), ps[1:]), CONFIG, IPFamily.IPV4))
    if what == "a missing element":  # ENOENT
        bad = replace(good, delete_elements=(*good.delete_elements, ("cluster-ips", Element("10.96.9.9"))))
    elif what == "a flush of a missing chain":
        bad = replace(good, flush_chains=(*good.flush_chains, "no-such-chain"))
    else:
        bad = replace(good, delete_chains=(*good.delete_chains, "no-such-chain"))
    k = NftKernel("ip", netns)
    k.apply(plan(None, a))
    listing = kernel_view(netns, "ip")
    with pytest.raises(KernelError, match="nothing was changed") as refused:
        k.apply(bad)
    assert "No such file or directory" in str(refused.value)
    assert kernel_view(netns, "ip") == listing
    assert k.netlink_batches == 0
    k.apply(good)  # the same socket, past the refused batch's replies
    assert k.netlink_batches >= 1 and k.dump() == good_end(ps)


def good_end(ps: tuple[ServicePortState, ...]) -> Ruleset:
    return compile(NodeState(NodeInfo("node-a"), ps[1:]), CONFIG, IPFamily.IPV4)


def test_a_namespace_created_again_is_written_through_a_new_socket() -> None:
    """The writer's socket belongs to the namespace it was opened in: after the namespace is
    created again under the same name, a batch must change the new one."""
    name = netns_name("nkl")
    ps = start(IPFamily.IPV4)
    a = compile(NodeState(NodeInfo("node-a"), ps), CONFIG, IPFamily.IPV4)
    b = good_end(ps)
    try:
        subprocess.run(["ip", "netns", "add", name], check=True)
        k = NftKernel("ip", name)
        k.apply(plan(None, a))
        k.apply(plan(a, b))
        assert k.netlink_batches >= 1
        subprocess.run(["ip", "netns", "del", name], check=True)
        subprocess.run(["ip", "netns", "add", name], check=True)
        k.apply(plan(None, b))
        sent = k.netlink_batches
        k.apply(plan(b, a))
        assert k.netlink_batches > sent and k.dump() == a
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
