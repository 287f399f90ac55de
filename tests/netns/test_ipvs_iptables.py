"""IPVS mode's iptables payload against the real iptables (legacy and nft) in a fresh network
namespace: this host has no IPVS, but it has ipset and xt_set, so the payload itself can be checked
here. It goes through the iptables kernel edge, and reads back rule for rule as compiled (the
compiler writes iptables-save's own spelling), so a second plan writes nothing."""

from __future__ import annotations

import subprocess

import pytest

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily
from netkit.rules.iptables.plan import plan as iptables_plan
from netkit.rules.ipvs import names
from netkit.rules.ipvs.compile import compile
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.plan import plan
from netkit.rules.ipvs.ruleset import Ruleset
from tests.conftest import need_root_and
from tests.unit.ipvs_states import sp, state

CFG = Config(mode="ipvs", node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"))
DESIRED = state(sp("lb", "10.96.0.12", 80, ("10.244.1.11", "10.244.2.11"), lb_ips=("198.51.100.100",),
                   node_port=30081, source_ranges=("203.0.113.0/28",), local_eps=("10.244.1.11",), etp_local=True),
                sp("web", "10.96.0.10", 80, ("10.244.1.11",), external_ips=("198.51.100.10",)))


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("ipset", "iptables-legacy-restore", "iptables-nft-restore")


def sets_and_payload(kernel: IPVSKernel, desired: Ruleset) -> None:
    p = plan(Ruleset(IPFamily.IPV4), desired)
    lines = [s.create_line() for s in p.create_sets]
    subprocess.run(["ip", "netns", "exec", str(kernel.netns), "ipset", "restore"], input="\n".join(lines) + "\n",
                   text=True, check=True)
    assert p.iptables is not None
    kernel.iptables.apply(p.iptables)


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_payload_reads_back_as_compiled_and_replans_to_nothing(netns: str, backend: str) -> None:
    desired = compile(DESIRED, CFG, IPFamily.IPV4)
    kernel = IPVSKernel(IPFamily.IPV4, netns, backend)
    sets_and_payload(kernel, desired)
    live = kernel.dump_iptables()
    for table, chains in desired.iptables.tables.items():
        for chain, rules in chains.items():
            assert live.rules(table, chain) == rules, (table, chain)
    again = iptables_plan(live, desired.iptables)
    assert again.empty, again
    kernel.iptables.apply(again)  # nothing twice: the jumps do not pile up
    saved = subprocess.run(["ip", "netns", "exec", netns, f"iptables-{backend}-save"], capture_output=True,
                           text=True, check=True).stdout
    assert saved.count('"kubernetes service portals" -j KUBE-SERVICES') == 2  # PREROUTING, OUTPUT


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_cleanup_of_the_payload_leaves_foreign_chains(netns: str, backend: str) -> None:
    kernel = IPVSKernel(IPFamily.IPV4, netns, backend)
    run = ["ip", "netns", "exec", netns, f"iptables-{backend}"]
    subprocess.run([*run, "-t", "nat", "-N", "FOREIGN"], check=True)
    subprocess.run([*run, "-t", "nat", "-A", "PREROUTING", "-j", "FOREIGN"], check=True)
    sets_and_payload(kernel, compile(DESIRED, CFG, IPFamily.IPV4))
    assert "FOREIGN" not in kernel.dump_iptables().chains("nat")  # not IPVS mode's: never even read
    assert kernel.iptables.cleanup(owned=names.is_ipvs_chain) == sum(len(c) for c in names.CHAINS.values())
    saved = subprocess.run([*run[:-1], f"iptables-{backend}-save"], capture_output=True, text=True, check=True).stdout
    assert ":FOREIGN" in saved and "-A PREROUTING -j FOREIGN" in saved and "KUBE-" not in saved
