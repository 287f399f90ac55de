"""`netkit cleanup` in fresh network namespaces: every mode's objects, only those, all or nothing.

- Without `--mode` it removes what every mode wrote — iptables chains and jumps in both backends
  (legacy and nft) and both families, netkit's (and kube-proxy's) nftables tables, the IPVS mode's
  ipsets — and leaves everything else: a foreign chain and its jump, kubelet's canary, a foreign
  nftables table, a foreign ipset.
- With a foreign reference to what it would remove (a foreign chain jumping to KUBE-MARK-MASQ, a
  `-A FORWARD -i eth9 -j KUBE-FORWARD` netkit did not write) it exits 2 naming each, and the
  kernel is exactly as before.
"""

from __future__ import annotations

import subprocess

import pytest

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile as iptables_compile
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.plan import plan as iptables_plan
from netkit.rules.nftables.compile import compile as nft_compile
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.nftables.plan import plan as nft_plan
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and, netns_sh, run_netkit

CFG = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"))


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("iptables-legacy-restore", "iptables-nft-restore", "ip6tables-legacy-restore", "nft", "ipset")


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=120)


sh = netns_sh


def everything(netns: str) -> str:
    """The node's whole packet-filtering state: every rule and user chain of both iptables backends
    and families (not the empty tables and built-in chains iptables creates on first use), the
    nftables ruleset, the ipsets."""
    out = []
    for tool in ("iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"):
        out += [f"{tool}: {ln}" for ln in sh(netns, tool).splitlines()
                if ln.startswith("-A ") or (ln.startswith(":") and " - [" in ln)]
    for line in sh(netns, "nft", "list", "tables").splitlines():  # iptables-nft's own tables: seen above
        if line.split()[-1] not in ("filter", "nat", "mangle", "raw", "security"):
            out += sh(netns, "nft", "list", *line.split()).splitlines()
    out += sh(netns, "ipset", "list", "-n").split()
    return "\n".join(out)


def program_every_mode(netns: str) -> None:
    """netkit's iptables rules in both backends and families, its nftables tables, and an IPVS-mode
    ipset — written through the kernel edges, so nothing removes another mode's objects."""
    state = build(load([str(EXAMPLES)]).objects, "node-a")
    for family in IPFamily:
        for backend in ("legacy", "nft"):
            k = IptablesKernel(family, netns, backend)
            k.apply(iptables_plan(k.dump(), iptables_compile(state, CFG, family)))
        desired = nft_compile(state, CFG, family)
        NftKernel(desired.family, netns, transport="cli").apply(nft_plan(None, desired))
    sh(netns, "ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port")
    sh(netns, "nft", "add", "table", "ip", "kube-proxy")  # kube-proxy's own nftables mode


def add_foreign(netns: str) -> None:
    for backend in ("legacy", "nft"):
        ipt = f"iptables-{backend}"
        sh(netns, ipt, "-w", "-N", "MY-FIREWALL")
        sh(netns, ipt, "-w", "-A", "MY-FIREWALL", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
        sh(netns, ipt, "-w", "-A", "INPUT", "-j", "MY-FIREWALL")
        sh(netns, ipt, "-w", "-t", "nat", "-N", "KUBE-KUBELET-CANARY")
    sh(netns, "nft", "-f", "-", input="table ip foreign {\n chain c {\n type filter hook input priority 0;\n"
                                      " tcp dport 22 accept\n }\n}\n")
    sh(netns, "ipset", "create", "my-set", "hash:ip")


def test_cleanup_without_mode_removes_every_mode_and_nothing_else(netns: str) -> None:
    add_foreign(netns)
    foreign = everything(netns).splitlines()
    program_every_mode(netns)
    done = netkit("cleanup", "--netns", netns)
    assert done.returncode == 0, done.stderr
    assert "table ip netkit" in done.stderr and "iptables-legacy" in done.stderr
    assert everything(netns).splitlines() == foreign
    again = netkit("cleanup", "--netns", netns)
    assert again.returncode == 0 and "nothing of netkit's was there" in again.stderr


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_cleanup_with_foreign_references_refuses_and_changes_nothing(netns: str, backend: str) -> None:
    program_every_mode(netns)
    ipt = f"iptables-{backend}"
    sh(netns, ipt, "-w", "-t", "nat", "-N", "MY-CHAIN")
    sh(netns, ipt, "-w", "-t", "nat", "-A", "MY-CHAIN", "-s", "10.9.0.0/16", "-j", "KUBE-MARK-MASQ")
    sh(netns, ipt, "-w", "-A", "FORWARD", "-i", "eth9", "-j", "KUBE-FORWARD")
    before = everything(netns)
    refused = netkit("cleanup", "--netns", netns)
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert f"{ipt} -t nat -A MY-CHAIN -s 10.9.0.0/16 -j KUBE-MARK-MASQ" in refused.stderr
    assert f"{ipt} -t filter -A FORWARD -i eth9 -j KUBE-FORWARD" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert everything(netns) == before
    # once the foreign rules are gone, cleanup goes through
    sh(netns, ipt, "-w", "-D", "FORWARD", "-i", "eth9", "-j", "KUBE-FORWARD")
    sh(netns, ipt, "-w", "-t", "nat", "-F", "MY-CHAIN")
    assert netkit("cleanup", "--netns", netns).returncode == 0
    assert "KUBE-SVC" not in everything(netns) and "netkit" not in everything(netns)


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_the_survey_in_two_steps_equals_the_survey_of_a_known_dump(netns: str, backend: str) -> None:
    """`netkit diff` surveys other modes' leftovers while it reads its input and completes the survey
    once its own backend's dump is read (cleanup.leftovers_then): the same Surveys as
    leftovers(known=dump), with every mode's objects, foreign ones, and references that block."""
    from netkit.rules import cleanup
    program_every_mode(netns)
    add_foreign(netns)
    ipt = f"iptables-{backend}"
    sh(netns, ipt, "-w", "-t", "nat", "-N", "MY-CHAIN")
    sh(netns, ipt, "-w", "-t", "nat", "-A", "MY-CHAIN", "-s", "10.9.0.0/16", "-j", "KUBE-MARK-MASQ")
    sh(netns, ipt, "-w", "-N", "KUBE-IPVS-FILTER")  # an IPVS-mode chain in the backend being read
    sh(netns, ipt, "-w", "-A", "INPUT", "-j", "KUBE-IPVS-FILTER")
    for family in IPFamily:
        complete = cleanup.leftovers_then("iptables", family, netns, backend)
        live = IptablesKernel(family, netns, backend).dump()
        whole = cleanup.leftovers("iptables", family, netns, writes=(f"iptables-{backend}",), known=live)
        assert complete(live) == whole
        assert not whole[0].empty or family is IPFamily.IPV6
    with pytest.raises(ValueError):
        cleanup.leftovers_then("nftables", IPFamily.IPV4, netns, backend)


def test_which_nftables_tables_exist_is_asked_over_netlink(netns: str) -> None:
    """The survey's check of netkit's and kube-proxy's tables (NFT_MSG_GETTABLE by name) answers
    what `nft -c delete table` answers, per family, beside iptables-nft's tables and others."""
    from netkit.rules.cleanup import _nft_tables
    names = ("netkit", "kube-proxy", "nat", "filter", "theirs", "absent")
    sh(netns, "nft", "add table ip netkit; add table ip6 kube-proxy; add table inet theirs; add table ip6 theirs")
    sh(netns, "iptables-nft", "-w", "-t", "nat", "-N", "X")
    for family, fam in ((IPFamily.IPV4, "ip"), (IPFamily.IPV6, "ip6")):
        checks = {t: subprocess.run(["ip", "netns", "exec", netns, "nft", "-c", "delete", "table", fam, t],
                                    capture_output=True).returncode for t in names}
        by_nft = tuple(f"{fam} {t}" for t in names if checks[t] == 0)
        assert _nft_tables(family, netns, names) == by_nft
    assert _nft_tables(IPFamily.IPV4, netns, names) == ("ip netkit", "ip nat")
    assert _nft_tables(IPFamily.IPV6, netns, names) == ("ip6 kube-proxy", "ip6 theirs")
    from netkit.nft import lookup
    assert lookup.tables(f"{netns}-gone", "ip", names) is None  # cannot be asked: the caller runs nft -c
    assert lookup.chains(netns, "ip", [("nat", "X"), ("nat", "Y"), ("mangle", "X")]) == (("nat", "X"),)
