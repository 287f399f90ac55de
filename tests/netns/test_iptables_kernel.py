"""The iptables backend against the real kernel, in fresh network namespaces, legacy and nft backends."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from netkit.config import Config, parse_cidrs
from netkit.errors import KernelError
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.kernel import IptablesKernel, detect_backend
from netkit.rules.iptables.names import is_owned
from netkit.rules.iptables.plan import Plan, plan
from netkit.rules.iptables.ruleset import Ruleset
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and, run_netkit

BACKENDS = ["legacy", "nft"]
NODE = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:244::/56"]


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("iptables-legacy-restore", "iptables-nft-restore", "ip6tables-legacy-restore")


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=120)


def save(netns: str, backend: str, family: str = "iptables") -> str:
    """The dump without its "# Generated … on <time>" comments and counters."""
    out = subprocess.run(["ip", "netns", "exec", netns, f"{family}-{backend}-save"], capture_output=True,
                         text=True, check=True).stdout
    return "\n".join(ln for ln in out.splitlines() if not ln.startswith("#"))


def apply_and_read_back(netns: str, backend: str, desired: Ruleset) -> Ruleset:
    """Apply `desired` and assert every chain reads back in exactly its spelling; the live rules."""
    kernel = IptablesKernel(desired.family, netns, backend)
    kernel.apply(plan(kernel.dump(), desired))
    live = kernel.dump()
    for table, chains in desired.tables.items():
        for chain, rules in chains.items():
            assert live.rules(table, chain) == rules, (desired.family, table, chain)
    assert plan(live, desired).empty
    return live


def owned_lines(text: str) -> list[str]:
    return sorted(ln for ln in text.splitlines()
                  if ln.startswith((":KUBE", "-A KUBE", "-A PREROUTING", "-A OUTPUT", "-A POSTROUTING",
                                    "-A INPUT", "-A FORWARD")))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_loads_and_reads_back_equal(netns: str, backend: str, example: str) -> None:
    files = [str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / example)]
    loaded = load(files)
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"),
                 iptables_backend=backend)
    for family in (IPFamily.IPV4, IPFamily.IPV6):
        apply_and_read_back(netns, backend, compile(build(loaded.objects, "node-a"), cfg, family))


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_diff_edit_cycle(netns: str, backend: str, tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    shutil.copytree(EXAMPLES, manifests)
    args = ["-f", str(manifests), *NODE, "--netns", netns, "--iptables-backend", backend]
    first = netkit("diff", *args)
    assert first.returncode == 1 and "+ default/web:http 3 endpoints" in first.stdout
    applied = netkit("apply", *args)
    assert applied.returncode == 0, applied.stderr
    assert netkit("diff", *args).returncode == 0
    before = save(netns, backend)
    again = netkit("apply", *args)
    assert "already in sync" in again.stderr
    assert save(netns, backend) == before  # nothing written, no jump duplicated

    web = manifests / "10-web-clusterip.yaml"
    text = web.read_text()
    cut = text.index("- addresses: [10.244.2.11]")
    web.write_text(text[:cut])
    changed = netkit("diff", *args)
    assert changed.returncode == 1
    assert "~ default/web:http endpoints 3 → 2 (-10.244.2.11:8080)" in changed.stdout
    assert "--probability 0.50000000000" in changed.stdout
    assert netkit("apply", *args).returncode == 0
    assert netkit("diff", *args).returncode == 0
    assert "10.244.2.11:8080" not in "\n".join(ln for ln in save(netns, backend).splitlines() if "default/web:" in ln)


@pytest.mark.parametrize("backend", BACKENDS)
def test_foreign_chains_and_rules_survive_apply_and_cleanup(netns: str, backend: str) -> None:
    ipt = ["ip", "netns", "exec", netns, f"iptables-{backend}", "-w"]
    subprocess.run([*ipt, "-N", "MY-FIREWALL"], check=True)
    subprocess.run([*ipt, "-A", "MY-FIREWALL", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"], check=True)
    subprocess.run([*ipt, "-A", "INPUT", "-j", "MY-FIREWALL"], check=True)
    subprocess.run([*ipt, "-t", "nat", "-N", "KUBE-KUBELET-CANARY"], check=True)
    subprocess.run([*ipt, "-t", "nat", "-A", "POSTROUTING", "-s", "10.9.0.0/16", "-j", "MASQUERADE"], check=True)
    foreign = [ln for ln in save(netns, backend).splitlines() if "MY-FIREWALL" in ln or "KUBELET" in ln
               or "10.9.0.0" in ln]
    args = ["-f", str(EXAMPLES), *NODE, "--netns", netns, "--iptables-backend", backend]
    assert netkit("apply", *args).returncode == 0
    after_apply = save(netns, backend)
    assert all(ln in after_apply for ln in foreign)
    cleaned = netkit("cleanup", "--netns", netns, "--iptables-backend", backend)
    assert cleaned.returncode == 0, cleaned.stderr
    after = save(netns, backend)
    assert all(ln in after for ln in foreign)
    assert not [ln for ln in after.splitlines() if ln.startswith((":", "-A")) and
                any(is_owned(tok) for tok in ln.replace(":", " ").split())]
    assert "KUBE-" not in save(netns, backend, "ip6tables").replace("KUBE-KUBELET-CANARY", "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_refused_payload_leaves_previous_rules(netns: str, backend: str) -> None:
    args = ["-f", str(EXAMPLES), *NODE, "--netns", netns, "--iptables-backend", backend]
    assert netkit("apply", *args).returncode == 0
    before = save(netns, backend)
    kernel = IptablesKernel(IPFamily.IPV4, netns, backend)
    bad = Plan(IPFamily.IPV4, write={"nat": {
        "KUBE-SVC-AAAAAAAAAAAAAAAA": ("-j KUBE-SEP-AAAAAAAAAAAAAAAA",),  # fine on its own …
        "KUBE-SERVICES": ("-j NO-SUCH-CHAIN",)}})  # … but the batch fails here
    with pytest.raises(KernelError) as err:
        kernel.apply(bad)
    assert err.value.payload and err.value.stderr
    assert save(netns, backend) == before


def test_auto_detects_the_backend_in_use(netns: str) -> None:
    assert detect_backend(IPFamily.IPV4, netns) == "nft"  # nothing anywhere: Debian's default
    args = ["-f", str(EXAMPLES), *NODE, "--netns", netns, "--iptables-backend", "legacy", "--ip-family", "ipv4"]
    assert netkit("apply", *args).returncode == 0
    assert detect_backend(IPFamily.IPV4, netns) == "legacy"
    auto = netkit("diff", "-f", str(EXAMPLES), *NODE, "--netns", netns, "--ip-family", "ipv4")
    assert auto.returncode == 0, auto.stdout  # auto found the legacy rules: in sync


@pytest.mark.parametrize("backend", BACKENDS)
def test_kube_firewall_and_nodeport_addresses_read_back_equal(netns: str, backend: str) -> None:
    """Localhost NodePorts with nodePortAddresses: the KUBE-FIREWALL guard, its INPUT/OUTPUT jumps and
    the per-address NodePort rules are written in exactly the spelling the kernel prints back."""
    from netkit.config import node_port_addresses, parse_ips
    nets, primary = node_port_addresses(["192.0.2.0/24", "127.0.0.0/8", "2001:db8::/64"], "t")
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"),
                 iptables_backend=backend, localhost_nodeports=True, node_port_addresses=nets,
                 node_port_primary=primary, node_ips=parse_ips(["192.0.2.10", "2001:db8::10"], "t"))
    loaded = load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")])
    for family in (IPFamily.IPV4, IPFamily.IPV6):
        desired = compile(build(loaded.objects, "node-a", cfg.node_ips), cfg, family)
        kernel = IptablesKernel(family, netns, backend)
        kernel.apply(plan(kernel.dump(), desired))
        live = kernel.dump()
        assert ("KUBE-FIREWALL" in live.chains("filter")) is (family is IPFamily.IPV4)
        for table, chains in desired.tables.items():
            for chain, rules in chains.items():
                assert live.rules(table, chain) == rules, (family, table, chain)
        assert plan(live, desired).empty
    assert "-A INPUT -j KUBE-FIREWALL" in save(netns, backend)


def outside_edit(netns: str, backend: str, committed: Ruleset) -> tuple[str, list[str]]:
    """Drift: a rule deleted from a service chain, a foreign chain and a foreign rule in a built-in
    chain added (nat); the service chain, and the iptables command line for nat in the namespace."""
    svc = next(c for c in committed.chains("nat") if c.startswith("KUBE-SVC-"))
    ipt_ = ["ip", "netns", "exec", netns, f"iptables-{backend}", "-w", "-t", "nat"]
    subprocess.run([*ipt_, "-D", svc, "1"], check=True)
    subprocess.run([*ipt_, "-N", "MY-CHAIN"], check=True)
    subprocess.run([*ipt_, "-A", "POSTROUTING", "-s", "10.9.0.0/16", "-j", "MASQUERADE"], check=True)
    return svc, ipt_


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_sync_read_equals_the_plain_dump_and_repairs_drift(netns: str, backend: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """dump_reusing (legacy: compared with the text the kernel should print: the committed ruleset,
    the entry jumps apply inserted, other software's chains as last read) reads what dump reads, in
    sync, after drift (a rule deleted from a service chain, a foreign rule and chain added), and the
    plan it gives brings the kernel back; then the foreign additions are expected."""
    from netkit.rules.iptables import backend as ipt
    from netkit.rules.iptables import ruleset
    fed: list[int] = []
    feed = ruleset.Reader.feed
    monkeypatch.setattr(ruleset.Reader, "feed", lambda self, lines: (fed.append(len(lines)), feed(self, lines))[1])
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"), iptables_backend=backend)
    loaded = load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")])
    committed = compile(build(loaded.objects, "node-a"), cfg, IPFamily.IPV4)
    kernel = IptablesKernel(IPFamily.IPV4, netns, backend)
    kernel.apply(plan(kernel.dump(), committed))
    fed.clear()
    read = kernel.dump_reusing(committed)
    if backend == "legacy":  # the kernel's text was the expected one: only headers reached the line reader
        assert sum(fed) <= 40, fed
    assert read == kernel.dump()
    assert all(read.rules(t, c) is rules for t, chains in committed.tables.items() for c, rules in chains.items())
    assert ipt.plan(read, committed).empty
    svc, _ = outside_edit(netns, backend, committed)
    read = kernel.dump_reusing(committed)
    assert read == kernel.dump()
    assert read.rules("nat", svc) != committed.rules("nat", svc)
    repair = ipt.plan(read, committed)
    assert set(repair.write.get("nat", {})) == {svc}
    kernel.apply(repair)
    fed.clear()
    read = kernel.dump_reusing(committed)  # the other software's chain and rule are expected now
    if backend == "legacy":
        assert sum(fed) <= 40, fed
    assert read == kernel.dump()
    assert ipt.plan(read, committed).empty


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prefetched_read_equals_the_plain_dump(netns: str, backend: str) -> None:
    """prefetch (legacy; `netkit diff` reads the tables while it decodes its input) keeps the text for
    the next dump_reusing or dump, which then read exactly what a plain dump reads: in sync (sharing
    the compiled tuples), and after an outside edit; iptables-nft is not prefetched."""
    from netkit.rules.iptables import backend as ipt
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"), iptables_backend=backend)
    loaded = load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")])
    desired = compile(build(loaded.objects, "node-a"), cfg, IPFamily.IPV4)
    IptablesKernel(IPFamily.IPV4, netns, backend).apply(plan(IptablesKernel(IPFamily.IPV4, netns, backend).dump(),
                                                             desired))
    fresh = IptablesKernel(IPFamily.IPV4, netns, backend)
    assert fresh.prefetch() is (backend == "legacy")
    read = fresh.dump_reusing(desired)
    assert read == IptablesKernel(IPFamily.IPV4, netns, backend).dump()
    assert all(read.rules(t, c) is rules for t, chains in desired.tables.items() for c, rules in chains.items())
    assert ipt.plan(read, desired).empty
    svc, ipt_ = outside_edit(netns, backend, desired)
    plain = IptablesKernel(IPFamily.IPV4, netns, backend).dump()
    for read_again in ("dump_reusing", "dump"):
        edge = IptablesKernel(IPFamily.IPV4, netns, backend)
        edge.prefetch()
        subprocess.run([*ipt_, "-N", "LATER"], check=True)  # after the prefetch: not in what it read
        read = edge.dump_reusing(desired) if read_again == "dump_reusing" else edge.dump()
        subprocess.run([*ipt_, "-X", "LATER"], check=True)
        if backend == "legacy":
            assert read == plain
        assert set(ipt.plan(read, desired).write.get("nat", {})) == {svc}
        assert edge.dump() == plain  # the prefetched text is used once


@pytest.mark.parametrize("family", [IPFamily.IPV4, IPFamily.IPV6])
def test_nft_reads_every_table_in_one_run_of_the_tool(netns: str, family: IPFamily,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """iptables-nft-save reads the family's whole ruleset whichever table it prints, so netkit runs
    it once, without -t: what dump and dump_reusing read equals what the three `-t` runs print,
    table by table and in their order, and the raw and security tables it prints too (here with
    other software's rules) are left out."""
    from netkit.rules.iptables import ruleset
    tool = "iptables-nft" if family is IPFamily.IPV4 else "ip6tables-nft"
    cidr = "10.244.0.0/16" if family is IPFamily.IPV4 else "fd00:244::/56"
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs([cidr], "t"), iptables_backend="nft")
    loaded = load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")])
    desired = compile(build(loaded.objects, "node-a"), cfg, family)
    IptablesKernel(family, netns, "nft").apply(plan(IptablesKernel(family, netns, "nft").dump(), desired))
    for argv in (["-t", "raw", "-A", "OUTPUT", "-j", "ACCEPT"], ["-t", "security", "-N", "THEIRS"],
                 ["-t", "nat", "-N", "THEIRS"], ["-t", "nat", "-A", "THEIRS", "-j", "RETURN"]):
        subprocess.run(["ip", "netns", "exec", netns, tool, "-w", *argv], check=True)
    per_table = "".join(subprocess.run(["ip", "netns", "exec", netns, f"{tool}-save", "-t", t], capture_output=True,
                                       text=True, check=True).stdout for t in ("mangle", "filter", "nat"))
    want = ruleset.parse(per_table, family)
    runs: list[list[str]] = []
    real = subprocess.Popen

    def counted(argv: list[str], *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        if any(a.endswith("-save") for a in argv):
            runs.append(argv)
        return real(argv, *args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "Popen", counted)
    kernel = IptablesKernel(family, netns, "nft")
    for read in (kernel.dump(), kernel.dump_reusing(desired)):
        assert read == want and list(read.tables) == ["mangle", "filter", "nat"]
        assert read.rules("nat", "THEIRS") == ("-j RETURN",)
    assert [a[a.index(f"{tool}-save"):] for a in runs] == [[f"{tool}-save"]] * 2


def test_nft_small_tables_alone_are_read_table_by_table(netns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for mangle and filter only (the survey's look for other modes' chains), iptables-nft
    is run once per table, so the nat table, netkit's largest, is not printed and parsed."""
    runs: list[list[str]] = []
    real = subprocess.Popen

    def counted(argv: list[str], *args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        if any(a.endswith("-save") for a in argv):
            runs.append(argv[argv.index("iptables-nft-save"):])
        return real(argv, *args, **kwargs)  # type: ignore[call-overload, no-any-return]

    subprocess.run(["ip", "netns", "exec", netns, "iptables-nft", "-w", "-t", "nat", "-N", "BIG"], check=True)
    monkeypatch.setattr(subprocess, "Popen", counted)
    read = IptablesKernel(IPFamily.IPV4, netns, "nft").dump(("mangle", "filter"))
    assert runs == [["iptables-nft-save", "-t", "mangle"], ["iptables-nft-save", "-t", "filter"]]
    assert "nat" not in read.tables


# (what the namespace holds: tool, arguments; the backend auto picks; whether iptables-nft-save ran)
DETECTIONS = [
    ("nothing anywhere: Debian's default", [], "nft", True),
    ("legacy rules only", [("legacy", "-t nat -N THEIRS"), ("legacy", "-t nat -A THEIRS -j RETURN")], "legacy", True),
    ("nft rules only", [("nft", "-t filter -N THEIRS"), ("nft", "-t filter -A THEIRS -j RETURN")], "nft", True),
    ("more legacy rules, kubelet's canary in nft's nat",
     [("legacy", "-t nat -N A"), ("legacy", "-t nat -A A -j RETURN"), ("legacy", "-t nat -A A -j RETURN"),
      ("nft", "-t nat -N KUBE-KUBELET-CANARY")], "nft", False),
    ("the hint in legacy's mangle, more nft rules",
     [("legacy", "-t mangle -N KUBE-IPTABLES-HINT"), ("nft", "-t filter -N A"), ("nft", "-t filter -A A -j RETURN")],
     "legacy", False),
    ("hints in both", [("legacy", "-t mangle -N KUBE-IPTABLES-HINT"), ("nft", "-t mangle -N KUBE-PROXY-CANARY")],
     "nft", False),
    ("netkit's canary in nft's filter only", [("nft", "-t filter -N KUBE-PROXY-CANARY")], "nft", False),
]


@pytest.mark.parametrize("family", [IPFamily.IPV4, IPFamily.IPV6])
@pytest.mark.parametrize(("situation", "edits", "picked", "saved_nft"), DETECTIONS, ids=[d[0] for d in DETECTIONS])
def test_auto_detection_table(netns: str, family: IPFamily, situation: str, edits: list[tuple[str, str]],
                              picked: str, saved_nft: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-proxy's iptables wrapper's choice: a hint chain in iptables-nft's tables, else in
    legacy's, else more rules, else nft. iptables-nft's hints are looked up over netlink, so its
    save (every rule) runs only to count rules when no backend has a hint."""
    from netkit.rules.iptables import kernel
    base = "iptables" if family is IPFamily.IPV4 else "ip6tables"
    for backend, args in edits:
        subprocess.run(["ip", "netns", "exec", netns, f"{base}-{backend}", "-w", *args.split()], check=True)
    ran: list[str] = []
    real = kernel.run
    monkeypatch.setattr(kernel, "run", lambda argv, *a, **k: (ran.append(argv[0]), real(argv, *a, **k))[1])
    assert detect_backend(family, netns) == picked, situation
    assert (f"{base}-nft-save" in ran) is saved_nft, ran
