"""The nftables backend: this module is a `netkit.rules.backend.Backend[Ruleset | None, Transaction]`.

Its Ruleset type is `Ruleset | None`: a kernel without netkit's table dumps as None, and planning
from None creates the table. Its functions are the members (mypy checks it where
netkit.rules.registry hands it on).
"""

from __future__ import annotations

from collections.abc import Mapping

from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.nft import render as _render
from netkit.nft import rule as _rule
from netkit.nft.parse import FOREIGN
from netkit.nft.ruleset import Chain, NamedSet, Ruleset
from netkit.nft.transaction import Transaction
from netkit.nft.transaction import render_plan as _render_plan
from netkit.rules.backend import JSONValue
from netkit.rules.nftables import compile as _compile
from netkit.rules.nftables import names
from netkit.rules.nftables import plan as _plan
from netkit.rules.nftables import trace as _trace
from netkit.rules.nftables.compile import Compiler
from netkit.rules.nftables.kernel import NftKernel
from netkit.rules.tracing import Outcome, Packet

name = "nftables"

Live = Ruleset | None  # what the kernel holds: netkit's table, or None when there is none

__all__ = ["Live", "compile", "compiler", "describe_plan", "foreign", "kernel", "name",
           "plan", "render", "render_plan", "summarize", "to_json", "trace"]


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
    """`ns/svc:port/proto` → the endpoints (`IP:port`, `[IPv6]:port`) its dnat rules can choose,
    read from the endpoint chains (svc-… and local-…) and their endpoint maps, so a live dump
    summarises like a compile."""
    out: dict[str, set[str]] = {}
    sets = ruleset.set_map() if ruleset else {}
    for chain in ruleset.chains if ruleset else ():
        split = names.split(chain.name)
        if split is None or split[0] not in ("svc", "local"):
            continue
        out.setdefault(split[1], set()).update(ep for rule in chain.rules for ep in dnat_targets(rule, sets))
    return {k: tuple(sorted(v)) for k, v in sorted(out.items())}


def dnat_targets(rule: str, sets: Mapping[str, NamedSet]) -> list[str]:
    """Endpoints a canonical dnat rule can choose (rule.py reads it): `… to A:P`, `… numgen random mod N
    [offset O] map @NAME` (keys O … O+N-1 of an endpoint map, read from `sets`) or `… map { 0 : A . P, … }`."""
    read = _rule.readable(rule)
    return [ep for d in (read.dnats() if read else ()) for ep in _rule.endpoints(d, sets)]


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

