"""The nftables backend: this module is a `netkit.rules.backend.Backend[Ruleset | None, Transaction]`.

Its Ruleset type is `Ruleset | None`: a kernel without netkit's table dumps as None, and planning
from None creates the table. Its functions are the members (mypy checks it where
netkit.rules.registry hands it on).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.nft import render as _render
from netkit.nft.parse import FOREIGN
from netkit.nft.ruleset import Chain, NamedSet, Ruleset
from netkit.nft.transaction import Transaction
from netkit.nft.transaction import render_plan as _render_plan
from netkit.rules.backend import JSONValue
from netkit.rules.nftables import compile as _compile
from netkit.rules.nftables import keep as _keep
from netkit.rules.nftables import names
from netkit.rules.nftables import plan as _plan
from netkit.rules.nftables import summary as _summary
from netkit.rules.nftables import trace as _trace
from netkit.rules.nftables.compile import Compiler
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.tracing import Outcome, Packet

name = "nftables"

Live = Ruleset | None  # what the kernel holds: netkit's table, or None when there is none

__all__ = ["Live", "compile", "compiler", "describe_plan", "foreign", "holds_rules", "keep", "kernel",
           "live_names", "name", "objects", "plan", "render", "render_plan", "rule_counts", "summarize", "to_json",
           "trace"]


def family_name(family: IPFamily) -> str:
    return "ip" if family is IPFamily.IPV4 else "ip6"


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:
    return _compile.compile(state, config, family)


def compiler(config: Config, family: IPFamily) -> Compiler:
    """A compiler that remembers unchanged service ports between calls (for the daemon)."""
    return Compiler(config, family)


def render(ruleset: Live) -> str:
    return _render.render(ruleset) if ruleset is not None else ""


def to_json(ruleset: Live) -> JSONValue:
    """The table as data: its sets and maps (with elements) and its chains (with hook and rules)."""
    if ruleset is None:
        return None
    return {"family": ruleset.family, "table": ruleset.table,
            "sets": [_set_json(s) for s in ruleset.sets], "chains": [_chain_json(c) for c in ruleset.chains]}


def _set_json(s: NamedSet) -> JSONValue:
    return {"name": s.name, "type": "map" if s.is_map else "set", "key": list(s.key_type), "value": s.value_type,
            "flags": list(s.flags), "timeout": s.timeout, "size": s.size,
            "elements": [{"key": e.key, "value": e.value} if e.value is not None else {"key": e.key}
                         for e in sorted(s.elements)]}


def _chain_json(c: Chain) -> JSONValue:
    h = c.hook
    hook: JSONValue = None if h is None else {"type": h.type, "hook": h.hook, "priority": h.priority,
                                              "policy": h.policy}
    return {"name": c.name, "hook": hook, "rules": list(c.rules)}


def plan(committed: Live, desired: Live) -> Transaction:
    if desired is None:
        raise ValueError("nftables: the desired ruleset is a table, never None")
    return _plan.plan(committed, desired)


def render_plan(transaction: Transaction) -> str:
    return _render_plan(transaction)


def describe_plan(transaction: Transaction) -> str:
    """The nft script itself: each line is one change (flush, delete element, add rule, …)."""
    return _render_plan(transaction)


def trace(ruleset: Live, packet: Packet) -> list[Outcome]:
    """No table: nothing of netkit's is in the packet's way."""
    return _trace.trace(ruleset if ruleset is not None else Ruleset("ip6" if packet.dst.version == 6 else "ip"),
                        packet)


def summarize(ruleset: Live) -> Mapping[str, tuple[str, ...]]:
    return _summary.summarize(ruleset)


def objects(ruleset: Live, names: Mapping[str, str]) -> dict[str, set[str]]:
    return _summary.objects(ruleset, names)


def live_names(desired: Live) -> Mapping[str, tuple[str, bool]]:
    """Nothing: a dump names every service port in its object names."""
    return {}


def keep(live: Live, desired: Live, services: Collection[str]) -> Live:
    if desired is None:
        raise ValueError("nftables: the desired ruleset is a table, never None")
    return _keep.keep(live, desired, services)


def holds_rules(ruleset: Live) -> bool:
    """netkit's table exists (None: there is none)."""
    return ruleset is not None


def rule_counts(base: Live, transaction: Transaction, desired: Live, total: Mapping[str, int] | None) -> None:
    """None: the iptables rule gauges do not exist in nftables mode."""
    return None


def foreign(live: Live, desired: Live) -> list[str]:
    """What someone else put into netkit's table, for `diff`: rules netkit never writes, and chains
    and sets that are neither in the desired table nor named like a service port's. `apply`
    removes them all (the plan rewrites those chains and deletes those objects)."""
    if live is None or desired is None:
        return []
    out: list[str] = []
    want_chains, want_sets = desired.chain_map(), desired.set_map()
    for chain in live.chains:
        if chain.name not in want_chains and names.split(chain.name) is None:
            out.append(f"foreign chain {chain.name} ({len(chain.rules)} rules): apply deletes it")
            continue
        out.extend(f"foreign rule in chain {chain.name}: {rule.removeprefix(FOREIGN).strip()}: apply removes it"
                   for rule in chain.rules if rule.startswith(FOREIGN))
    for st in live.sets:
        if st.key_type == (FOREIGN,):
            out.append(f"set {st.name} holds elements netkit never writes: apply recreates it")
        elif st.name not in want_sets and names.split(st.name) is None and names.shard_protocol(st.name) is None:
            out.append(f"foreign {'map' if st.is_map else 'set'} {st.name}: apply deletes it")
    return out


def kernel(config: Config, family: IPFamily, netns: str | None) -> NftKernel:
    return NftKernel(family_name(family), netns)

