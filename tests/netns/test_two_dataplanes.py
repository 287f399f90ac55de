"""One dataplane per node: after `apply` (or the daemon's first sync) in one mode, no netkit rules of
another mode remain — nor kube-proxy's own leftovers of other modes — and `diff` says so first.
Each test in a fresh network namespace.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from netkit.config import Config
from netkit.model import IPFamily
from netkit.rules.iptables import backend as iptables_backend
from netkit.runtime.daemon import Daemon, DaemonOptions
from tests.conftest import EXAMPLES, need_root_and, netns_sh, run_netkit

NODE = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:244::/56"]
# A dataplane: (mode, iptables backend)
LEGACY, NFT, NFTABLES = ("iptables", "legacy"), ("iptables", "nft"), ("nftables", "auto")


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("iptables-legacy-restore", "iptables-nft-restore", "ip6tables-legacy-restore", "nft", "ipset")


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=120)


sh = netns_sh


def args(netns: str, plane: tuple[str, str]) -> list[str]:
    return ["-f", str(EXAMPLES), *NODE, "--netns", netns, "--mode", plane[0], "--iptables-backend", plane[1]]


def holds(netns: str, plane: tuple[str, str]) -> bool:
    """Does the namespace hold any netkit rules of this dataplane (either family)?"""
    mode, backend = plane
    if mode == "nftables":
        return "netkit" in sh(netns, "nft", "list", "tables")
    return any("KUBE-" in sh(netns, f"{tool}-{backend}-save") for tool in ("iptables", "ip6tables"))


@pytest.mark.parametrize(("before", "after"), [(LEGACY, NFT), (NFT, LEGACY), (NFT, NFTABLES), (NFTABLES, LEGACY)],
                         ids=["legacy-to-nft", "nft-to-legacy", "iptables-to-nftables", "nftables-to-iptables"])
def test_apply_removes_the_other_dataplane_after_its_own_rules(netns: str, before: tuple[str, str],
                                                               after: tuple[str, str]) -> None:
    assert netkit("apply", *args(netns, before)).returncode == 0
    assert holds(netns, before)
    diff = netkit("diff", *args(netns, after))
    assert diff.returncode == 1
    assert "another mode's" in diff.stdout and "apply removes it once the" in diff.stdout
    applied = netkit("apply", *args(netns, after))
    assert applied.returncode == 0, applied.stderr
    assert "removed what other modes left" in applied.stderr
    assert not holds(netns, before), f"{before} rules are still there"
    assert holds(netns, after)
    assert netkit("diff", *args(netns, after)).returncode == 0


def test_apply_removes_kube_proxys_leftovers_of_other_modes(netns: str) -> None:
    """kube-proxy's nftables table, and its IPVS mode's set, chain and entry jump."""
    sh(netns, "nft", "add", "table", "ip", "kube-proxy")
    sh(netns, "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
    sh(netns, "iptables-nft", "-w", "-N", "KUBE-IPVS-FILTER")
    sh(netns, "iptables-nft", "-w", "-A", "KUBE-IPVS-FILTER", "-m", "set", "--match-set", "KUBE-CLUSTER-IP",
       "dst,dst", "-j", "RETURN")
    sh(netns, "iptables-nft", "-w", "-A", "INPUT", "-m", "comment", "--comment", "kubernetes ipvs access filter",
       "-j", "KUBE-IPVS-FILTER")
    diff = netkit("diff", *args(netns, NFT))
    assert "another mode's nftables: table ip kube-proxy" in diff.stdout
    assert "another mode's ipvs: 1 ipsets" in diff.stdout
    assert netkit("apply", *args(netns, NFT)).returncode == 0
    assert "kube-proxy" not in sh(netns, "nft", "list", "tables")
    assert "KUBE-CLUSTER-IP" not in sh(netns, "ipset", "list", "-n")
    assert "KUBE-IPVS-FILTER" not in sh(netns, "iptables-nft-save")
    assert "KUBE-SERVICES" in sh(netns, "iptables-nft-save")


def test_a_foreign_reference_to_another_modes_chain_stops_apply_before_any_change(netns: str) -> None:
    assert netkit("apply", *args(netns, LEGACY)).returncode == 0
    sh(netns, "iptables-legacy", "-w", "-t", "nat", "-N", "MY-CHAIN")
    sh(netns, "iptables-legacy", "-w", "-t", "nat", "-A", "MY-CHAIN", "-j", "KUBE-MARK-MASQ")
    diff = netkit("diff", *args(netns, NFTABLES))
    assert "iptables-legacy -t nat -A MY-CHAIN -j KUBE-MARK-MASQ: refers to another mode's chains" in diff.stdout
    refused = netkit("apply", *args(netns, NFTABLES))
    assert refused.returncode == 2 and "nothing was changed" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "netkit" not in sh(netns, "nft", "list", "tables")  # the new mode was not written either
    assert holds(netns, LEGACY)


def test_the_daemon_removes_other_modes_after_its_first_sync(netns: str) -> None:
    assert netkit("apply", *args(netns, NFTABLES)).returncode == 0
    sh(netns, "iptables-nft", "-w", "-N", "KUBE-IPVS-FILTER")  # and kube-proxy's IPVS mode, in the same backend
    sh(netns, "iptables-nft", "-w", "-A", "INPUT", "-m", "comment", "--comment", "kubernetes ipvs access filter",
       "-j", "KUBE-IPVS-FILTER")
    cfg = Config(node_name="node-a", iptables_backend="nft", min_sync_period=0.1, sync_period=30.0)
    opts = DaemonOptions(config=cfg, families=(IPFamily.IPV4, IPFamily.IPV6), netns=netns, files=(str(EXAMPLES),),
                         healthz_address=None, metrics_address=None, conntrack=False)

    async def scenario() -> None:
        daemon = Daemon(opts, iptables_backend)  # type: ignore[arg-type]
        task = asyncio.create_task(daemon.run())
        try:
            await asyncio.wait_for(daemon.synced.wait(), 20)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert not holds(netns, NFTABLES)
    assert holds(netns, NFT)
    assert "KUBE-IPVS-FILTER" not in sh(netns, "iptables-nft-save")
