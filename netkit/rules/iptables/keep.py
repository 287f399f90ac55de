"""Keep the live rules of some Services as they are, whatever the compiled ruleset says about them.

Used when a Service's input is invalid (netkit.cli.inputs: "kept, invalid input"): the new state
leaves the object out, but its rules must not go. `keep(live, desired, services)` returns `desired`
with each kept Service's parts taken from `live` instead:

- in the shared chains (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES, KUBE-PROXY-FIREWALL),
  the rules whose comment names a port of a kept Service (`"ns/svc:port cluster IP"`, …) are the
  live ones, placed where the compiler places that Service (services in namespace/name order);
- the per-service chains those rules reach (KUBE-SVC/SVL/EXT/FW/SEP-…) are the live ones, and the
  ones the compiled rules of that Service would have reached are dropped.

Pure; a Service that has no live rules simply has none afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.rules.iptables import names as n
from netkit.rules.iptables.rule import read
from netkit.rules.iptables.ruleset import Ruleset

SHARED_CHAINS = (n.SERVICES, n.NODEPORTS, n.EXTERNAL_SERVICES, n.PROXY_FIREWALL)


def owner(rule: str) -> tuple[str, str] | None:
    """(namespace, service) a shared-chain rule belongs to, from its comment; None for fixed rules."""
    return read(rule).owner


def keep(live: Ruleset, desired: Ruleset, services: Collection[str]) -> Ruleset:
    wanted = {tuple(s.split("/", 1)) for s in services}
    if not wanted:
        return desired
    tables = dict(desired.tables)
    for table, chains in desired.tables.items():
        kept = _keep_table(live.chains(table), chains, wanted)
        if kept is not None:
            tables[table] = kept
    return Ruleset(desired.family, tables)


def _keep_table(live: Mapping[str, tuple[str, ...]], desired: Mapping[str, tuple[str, ...]],
                wanted: set[tuple[str, ...]]) -> dict[str, tuple[str, ...]] | None:
    shared = [c for c in SHARED_CHAINS if c in desired]
    if not shared:
        return None
    out = dict(desired)
    dropped: set[str] = set()
    added: set[str] = set()
    for chain in shared:
        mine = [r for r in desired[chain] if owner(r) in wanted]
        theirs = [r for r in live.get(chain, ()) if owner(r) in wanted]
        if not mine and not theirs:
            continue
        dropped |= _reachable(desired, mine)
        added |= _reachable(live, theirs)
        out[chain] = _merge([r for r in desired[chain] if owner(r) not in wanted], theirs)
    for chain in dropped - added:
        out.pop(chain, None)
    for chain in added:
        out[chain] = live[chain]
    return out


def _reachable(chains: Mapping[str, tuple[str, ...]], rules: list[str]) -> set[str]:
    """The per-service chains `rules` jump to, and the ones those jump to, in `chains`."""
    found: set[str] = set()
    todo = [t for t in map(_target, rules) if t]
    while todo:
        chain = todo.pop()
        if chain in found or chain not in chains:
            continue
        found.add(chain)
        todo.extend(t for t in map(_target, chains[chain]) if t)
    return found


def _target(rule: str) -> str | None:
    target = read(rule).target
    return target if target and target.startswith(n.SERVICE_CHAIN_PREFIXES) else None


def _merge(rules: list[str], kept: list[str]) -> tuple[str, ...]:
    """`rules` with the `kept` rules inserted, each Service's block before the first rule of a
    Service that sorts after it (or before the fixed rules at the end), as the compiler orders them."""
    out = list(rules)
    blocks: list[tuple[tuple[str, str], list[str]]] = []
    for rule in kept:
        who = owner(rule)
        assert who is not None
        if blocks and blocks[-1][0] == who:
            blocks[-1][1].append(rule)
        else:
            blocks.append((who, [rule]))
    for who, block in blocks:
        at = next((i for i, r in enumerate(out) if (o := owner(r)) is None or o > who), len(out))
        out[at:at] = block
    return tuple(out)
