"""Removing what netkit — and kube-proxy before it — wrote, for any set of modes, all or nothing.

Used by `netkit cleanup` (every mode, or the one `--mode` names) and after a successful `apply` or
daemon sync (every mode but the one just programmed: two dataplanes on one node must not both see
traffic). Two phases:

1. `survey(modes, …)` reads and changes nothing. Per IP family it finds
   - iptables (both backends, legacy and nft, since the two cannot see each other's rules): the
     chains the selected modes own (`KUBE-SVC-…`, `KUBE-SERVICES`, …; the IPVS mode's
     `KUBE-IPVS-FILTER`, …), the entry jumps into them from built-in chains, and every *foreign*
     reference to them — a rule in a chain netkit does not own jumping to one (`-A MY-CHAIN -j
     KUBE-MARK-MASQ`), a rule in a built-in chain that is not one of the entry jumps netkit or
     kube-proxy writes (`-A FORWARD -i eth9 -j KUBE-FORWARD`), a `--match-set` of an IPVS set;
   - nftables: tables `netkit` and kube-proxy's `kube-proxy` (no other table can refer to them);
   - IPVS: the IPVS mode's ipsets, its virtual servers (when the kernel has IPVS) and `kube-ipvs0`.
2. `execute(survey)` refuses (CleanupRefused, naming each foreign reference) when there is any, so
   nothing is changed; else it validates every iptables payload with `iptables-restore --test`
   before the first change, then removes: nftables tables (one transaction), iptables (one
   `--noflush` restore per backend and family: jumps deleted, chains flushed and deleted), then the
   IPVS objects (which the iptables rules referred to).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

from netkit.errors import KernelError, NetkitError
from netkit.model import IPFamily
from netkit.netns import run
from netkit.rules.iptables.kernel import IptablesKernel, jump_target
from netkit.rules.iptables.names import is_owned as iptables_owned
from netkit.rules.iptables.rule import read
from netkit.rules.iptables.ruleset import Ruleset, is_builtin, parse_lines

MODES = ("iptables", "ipvs", "nftables")
IPTABLES_BACKENDS = ("legacy", "nft")
NFT_TABLES = ("netkit", "kube-proxy")  # netkit's, and kube-proxy's nftables mode's
TABLES = ("mangle", "filter", "nat")


class CleanupRefused(NetkitError):
    pass


@dataclass(frozen=True, slots=True)
class IptablesPart:
    tool: str  # e.g. "iptables-nft"
    family: IPFamily
    chains: dict[str, tuple[str, ...]]  # table → chains to flush and delete
    jumps: dict[str, tuple[tuple[str, str], ...]]  # table → (built-in chain, rule) to delete

    @property
    def empty(self) -> bool:
        return not any(self.chains.values()) and not any(self.jumps.values())

    def payload(self) -> str:
        out: list[str] = []
        for table in TABLES:
            chains, jumps = self.chains.get(table, ()), self.jumps.get(table, ())
            if not chains and not jumps:
                continue
            out += [f"*{table}", *(f":{c} - [0:0]" for c in chains), *(f"-D {c} {r}" for c, r in jumps),
                    *(f"-X {c}" for c in chains), "COMMIT"]
        return "\n".join(out) + "\n" if out else ""

    def describe(self) -> str:
        n_chains = sum(len(c) for c in self.chains.values())
        n_jumps = sum(len(j) for j in self.jumps.values())
        return f"{self.tool}: {n_chains} chains, {n_jumps} entry jumps"


@dataclass(frozen=True, slots=True)
class Survey:
    family: IPFamily
    netns: str | None
    iptables: tuple[IptablesPart, ...] = ()
    nft_tables: tuple[str, ...] = ()  # "ip netkit", …
    ipsets: tuple[str, ...] = ()
    ipvs_services: int = 0  # netkit's virtual servers (0 also when the kernel has no IPVS)
    ipvs_interface: bool = False
    blockers: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return (all(p.empty for p in self.iptables) and not self.nft_tables and not self.ipsets
                and not self.ipvs_services and not self.ipvs_interface)

    def describe(self) -> list[str]:
        """What execute() would remove, one line per kind of object."""
        out = [p.describe() for p in self.iptables if not p.empty]
        out += [f"nftables: table {t}" for t in self.nft_tables]
        if self.ipsets:
            out.append(f"ipvs: {len(self.ipsets)} ipsets")
        if self.ipvs_services:
            out.append(f"ipvs: {self.ipvs_services} virtual servers")
        if self.ipvs_interface:
            out.append("ipvs: interface kube-ipvs0")
        return out


# --- what each mode owns ---------------------------------------------------------------------------


@cache
def _ipvs_layout() -> tuple[frozenset[str], frozenset[tuple[str, str, str]]]:
    """(chains, entry jumps as (table, chain, rule)) of the IPVS mode."""
    from netkit.rules.ipvs.compile import entry_jumps
    from netkit.rules.ipvs.names import CHAINS
    chains = frozenset(c for names in CHAINS.values() for c in names)
    return chains, entry_jumps()


@cache
def _iptables_jumps() -> frozenset[tuple[str, str, str]]:
    from netkit.rules.iptables.compile import ENTRY_JUMPS
    return frozenset((t, c, r) for t, chains in ENTRY_JUMPS.items() for c, rules in chains.items() for r in rules)


def owner(modes: Iterable[str], *, keep: Iterable[str] = ()) -> Callable[[str], bool]:
    """Whether an iptables chain belongs to one of `modes` (and to none of `keep`). Asked of every
    chain of a dump (110k at 10k services): one test per mode set, made once."""
    yes, no = _owned_by(set(modes)), _owned_by(set(keep))
    if no is None:
        return yes or _nobody
    if yes is None:
        return _nobody
    return lambda chain: yes(chain) and not no(chain)


def _owned_by(modes: set[str]) -> Callable[[str], bool] | None:
    ipvs_chains = _ipvs_layout()[0] if "ipvs" in modes else frozenset()
    if "iptables" in modes:
        return (lambda chain: chain in ipvs_chains or iptables_owned(chain)) if ipvs_chains else iptables_owned
    return ipvs_chains.__contains__ if ipvs_chains else None


def _nobody(chain: str) -> bool:
    return False


def is_entry_jump(table: str, chain: str, rule: str) -> bool:
    """One of the jumps netkit (or kube-proxy) inserts into built-in chains, in any mode."""
    key = (table, chain, rule)
    return key in _iptables_jumps() or key in _ipvs_layout()[1]


# --- phase 1: survey ---------------------------------------------------------------------------------


def survey(modes: Sequence[str], family: IPFamily, netns: str | None, *, keep: Sequence[str] = (),
           iptables_backends: Sequence[str] = IPTABLES_BACKENDS,
           known: dict[str, Ruleset] | None = None, iptables_only: bool = False,
           nft_tables: Sequence[str] = NFT_TABLES) -> Survey:
    """Everything of `modes` (but not of `keep`) in one family; `known` maps an iptables backend to
    a dump already read (the apply path has one of its own backend)."""
    owned = owner(modes, keep=keep)
    kept = owner(keep)  # chains the mode just programmed rewrites: never blockers
    ipvs = "ipvs" in modes and "ipvs" not in keep and not iptables_only
    sets = _ipsets(family, netns) if ipvs else ()
    parts: list[IptablesPart] = []
    blockers: list[str] = []
    if set(modes) & {"iptables", "ipvs"}:
        for backend in iptables_backends:
            live = (known or {}).get(backend)
            if live is None:
                live = _dump(family, backend, netns)
            if live is None:
                continue
            part, found = _iptables_part(_tool(family, backend), family, live, owned, kept, set(sets))
            parts.append(part)
            blockers += found
    return Survey(family, netns, tuple(parts),
                  _nft_tables(family, netns, nft_tables)
                  if "nftables" in modes and "nftables" not in keep and not iptables_only else (),
                  sets, _ipvs_services(family, netns) if ipvs else 0, ipvs and _has_link(netns), tuple(blockers))


def iptables_backend(writes: Iterable[str]) -> str | None:
    """The iptables backend ("legacy", "nft") among what a kernel edge writes (Kernel.writes)."""
    return next((w.removeprefix("iptables-") for w in sorted(writes) if w.startswith("iptables-")), None)


def leftovers(mode: str, family: IPFamily, netns: str | None, *, writes: Iterable[str] = (),
              known: object = None) -> list[Survey]:
    """What the other modes left on a node now programmed in `mode` by a kernel edge that writes
    `writes` (Kernel.writes) — kube-proxy removes them when it starts, so that two dataplanes never
    both see traffic. For the iptables mode, that includes every netkit chain in the iptables
    backend it does not write; `known` is the iptables mode's dump of its backend taken before the
    apply (what other modes own in it, apply does not change); any other mode's dump is not used."""
    backend = iptables_backend(writes)
    if mode != "iptables" or not isinstance(known, Ruleset):
        known = None
    others = tuple(m for m in MODES if m != mode)
    if mode == "nftables":  # and kube-proxy's own nftables table: a second dataplane too
        return [survey(MODES, family, netns, nft_tables=("kube-proxy",))]
    if mode == "ipvs" or backend not in IPTABLES_BACKENDS:
        return [survey(others, family, netns, keep=(mode,))]
    other = tuple(b for b in IPTABLES_BACKENDS if b != backend)
    mine = (backend,) if known is not None or _other_modes_in(mode, others, family, netns, backend) else ()
    return [survey(others, family, netns, keep=(mode,), iptables_backends=mine,
                   known={backend: known} if known is not None else None),
            survey(("iptables", "ipvs"), family, netns, iptables_backends=other, iptables_only=True)]


def leftovers_then(mode: str, family: IPFamily, netns: str | None, backend: str) -> Callable[[object], list[Survey]]:
    """`leftovers(mode, family, netns, writes=("iptables-" + backend,), known=live)` in two steps, for an iptables
    mode whose own dump is not read yet: everything that runs a tool is surveyed now (a thread does
    it while `netkit diff` decodes its input), and the function returned completes the survey from
    `live`, that backend's dump, without IO (the part of it that depends on the dump)."""
    if mode != "iptables" or backend not in IPTABLES_BACKENDS:
        raise ValueError(f"leftovers_then: iptables mode in legacy or nft, not {mode} {backend}")
    first, *rest = leftovers(mode, family, netns, writes=(f"iptables-{backend}",), known=Ruleset(family))
    others = tuple(m for m in MODES if m != mode)

    def complete(live: object) -> list[Survey]:
        if not isinstance(live, Ruleset):
            raise TypeError(f"leftovers_then: an iptables dump, not {type(live).__name__}")
        part, found = _iptables_part(_tool(family, backend), family, live, owner(others, keep=(mode,)),
                                     owner((mode,)), set(first.ipsets))
        return [replace(first, iptables=(part,), blockers=tuple(found)), *rest]

    return complete


def _other_modes_in(mode: str, others: Sequence[str], family: IPFamily, netns: str | None, backend: str) -> bool:
    """Whether the backend the iptables mode uses holds another mode's chains, judged from its small
    tables (the IPVS mode always writes KUBE-IPVS-FILTER in filter): the daemon then need not read a
    300k-rule nat table back once more just to find nothing."""
    owned = owner(others, keep=(mode,))
    small = IptablesKernel(family, netns, backend).dump(("mangle", "filter"))
    return any(owned(c) for table in ("mangle", "filter") for c in small.chains(table))


def _tool(family: IPFamily, backend: str) -> str:
    return f"{'iptables' if family is IPFamily.IPV4 else 'ip6tables'}-{backend}"


def _dump(family: IPFamily, backend: str, netns: str | None) -> Ruleset | None:
    """The whole save of one backend (without `-t`, which would create empty legacy tables)."""
    tool = _tool(family, backend)
    if shutil.which(f"{tool}-save") is None:
        return None
    proc = run([f"{tool}-save"], netns, check=False)
    if proc.returncode != 0:
        raise KernelError(f"{tool}-save failed", stderr=proc.stderr)
    return parse_lines(proc.stdout.splitlines(), family)


def _iptables_part(tool: str, family: IPFamily, live: Ruleset, owned: Callable[[str], bool],
                   kept: Callable[[str], bool], sets: set[str]) -> tuple[IptablesPart, list[str]]:
    chains: dict[str, tuple[str, ...]] = {}
    jumps: dict[str, tuple[tuple[str, str], ...]] = {}
    blockers: list[str] = []
    for table in TABLES:
        present = live.chains(table)
        mine = tuple(c for c in present if owned(c) and not is_builtin(table, c))
        skip = set(mine)
        found: list[tuple[str, str]] = []
        for chain, rules in present.items():
            if chain in skip or kept(chain):
                continue
            for rule in rules:
                target = jump_target(rule)
                refers = (target is not None and owned(target)) or bool(sets & set(match_sets(rule)))
                if not refers:
                    continue
                if is_builtin(table, chain) and target is not None and is_entry_jump(table, chain, rule):
                    found.append((chain, rule))
                else:
                    blockers.append(f"{tool} -t {table} -A {chain} {rule}")
        if mine:
            chains[table] = mine
        if found:
            jumps[table] = tuple(found)
    return IptablesPart(tool, family, chains, jumps), blockers


def match_sets(rule: str) -> list[str]:
    """The ipsets a rule names (`-m set --match-set NAME …`; rule.py reads it)."""
    return list(read(rule).match_sets)


def _nft_tables(family: IPFamily, netns: str | None, names: Sequence[str]) -> tuple[str, ...]:
    """Which of the tables exist, asked over netfilter netlink (NFT_MSG_GETTABLE by name: a round
    trip, whatever else is loaded). `nft list tables` and `nft -c delete table` both read every
    rule first (0.45 s each beside 10,000 services of iptables-nft rules here); `nft -c` is the
    fallback where the socket cannot be opened."""
    from netkit.nft import lookup
    fam = "ip" if family is IPFamily.IPV4 else "ip6"
    if (found := lookup.tables(netns, fam, names)) is not None:
        return tuple(f"{fam} {t}" for t in found)
    if shutil.which("nft") is None:
        return ()
    return tuple(f"{fam} {t}" for t in names
                 if run(["nft", "-c", "delete", "table", fam, t], netns, check=False).returncode == 0)


def _ipsets(family: IPFamily, netns: str | None) -> tuple[str, ...]:
    if shutil.which("ipset") is None:
        return ()
    from netkit.rules.ipvs.names import is_ours
    proc = run(["ipset", "list", "-n"], netns, check=False)
    v6 = family is IPFamily.IPV6
    return tuple(s for s in proc.stdout.split() if is_ours(s) and s.startswith("KUBE-6-") == v6)


def _ipvs_services(family: IPFamily, netns: str | None) -> int:
    """How many of netkit's virtual servers there are; 0 without IPVS in the kernel (this check
    does not load the module)."""
    if run(["test", "-e", "/proc/net/ip_vs"], netns, check=False).returncode != 0:
        return 0
    from netkit.rules.ipvs.kernel import IPVSKernel
    return len(IPVSKernel(family, netns).dump().services)


def _has_link(netns: str | None) -> bool:
    return run(["ip", "link", "show", "kube-ipvs0"], netns, check=False).returncode == 0


# --- phase 2: execute --------------------------------------------------------------------------------


def refuse_if_blocked(surveys: Sequence[Survey]) -> None:
    found = [f"{b}" for s in surveys for b in s.blockers]
    if found:
        raise CleanupRefused(f"nothing was changed: {len(found)} rule(s) netkit did not write refer to what "
                             f"it would remove; delete or change them first: " + "; ".join(found))


def execute(surveys: Sequence[Survey]) -> None:
    """Remove everything the surveys found (see the module docstring for the order)."""
    refuse_if_blocked(surveys)
    for s in surveys:
        for part in s.iptables:
            if not part.empty:
                _restore(part, s.netns, test=True)
    for s in surveys:
        if s.nft_tables:
            script = "".join(f"delete table {t}\n" for t in s.nft_tables)
            proc = run(["nft", "-f", "-"], s.netns, input=script, check=False)
            if proc.returncode != 0:
                raise KernelError("nft refused to delete the tables", payload=script, stderr=proc.stderr)
    for s in surveys:
        for part in s.iptables:
            if not part.empty:
                _restore(part, s.netns, test=False)
    for s in surveys:
        _ipvs_cleanup(s)


def _restore(part: IptablesPart, netns: str | None, *, test: bool) -> None:
    argv = [f"{part.tool}-restore", "--noflush", "--wait", "5", *(["--test"] if test else [])]
    payload = part.payload()
    proc = run(argv, netns, input=payload, check=False)
    if proc.returncode != 0:
        what = "refused the cleanup payload; nothing was changed" if test else "failed part-way"
        raise KernelError(f"{part.tool}-restore {what}", payload=payload, stderr=proc.stderr)


def _ipvs_cleanup(s: Survey) -> None:
    if s.ipvs_services:
        from netkit.rules.ipvs.kernel import IPVSKernel
        IPVSKernel(s.family, s.netns).cleanup()  # virtual servers, sets, kube-ipvs0 (chains are gone)
        return
    if s.ipsets:
        run(["ipset", "restore"], s.netns, input="".join(f"destroy {name}\n" for name in s.ipsets))
    if s.ipvs_interface:
        run(["ip", "link", "del", "kube-ipvs0"], s.netns, check=False)
