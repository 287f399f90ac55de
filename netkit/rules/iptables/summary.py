"""Read a Ruleset back into "which service port reaches which endpoints" — for diffs and trace.

Works on a compiled Ruleset and on a live dump alike, because it follows the rules themselves:
KUBE-SERVICES rules name the service port in their comment ("ns/svc:port cluster IP") and jump to
its KUBE-SVC/SVL chain, whose rules jump to KUBE-SEP chains, whose DNAT names the endpoint. Filter
rules "… has no endpoints" mark ports that reject. Large-cluster mode drops per-endpoint comments,
not these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from netkit.rules.iptables import names as n
from netkit.rules.iptables.rule import Rule, read, target_of
from netkit.rules.iptables.ruleset import Ruleset

_KINDS = ("cluster IP", "has no endpoints", "has no local endpoints")


def summarize(ruleset: Ruleset) -> Mapping[str, tuple[str, ...]]:
    """`ns/svc:port/proto` → the sorted endpoints its clusterIP DNATs to (empty: rejects or drops).
    Where nat DNATs a Service, nat decides, as in the kernel (a DNATed packet no longer carries the
    address filter's refusal matches): between the commits of one sync (commits.py) filter may
    already refuse a Service that nat still sends to its endpoints, and those endpoints are what a
    connection meets."""
    nat = ruleset.chains("nat")
    out: dict[str, tuple[str, ...]] = {}
    for table, chain in (("filter", n.SERVICES), ("nat", n.SERVICES)):
        for text in ruleset.rules(table, chain):
            rule = read(text)
            name, _, kind = (rule.comment or "").partition(" ")
            proto = rule.protocol
            if kind not in _KINDS or proto is None or rule.first_module != "comment" or not rule.target \
                    or rule.goto:
                continue
            out[f"{name}/{proto}"] = tuple(sorted(endpoints_of(nat, rule.target)))
    return out


def endpoints_of(nat: Mapping[str, tuple[str, ...]], chain: str) -> set[str]:
    """Every DNAT destination reachable from a KUBE-SVC/SVL/EXT/FW chain."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [chain]
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        for text in nat.get(c, ()):
            rule = read(text)
            if rule.dnat:
                found.add(rule.dnat)
            target = rule.target
            if target and not rule.goto and target.startswith(n.SERVICE_CHAIN_PREFIXES):
                todo.append(target)
    return found


def objects(ruleset: Ruleset) -> dict[str, set[str]]:
    """Each service port's own rules, for the plan summary (netkit.rules.summary): the rules of the
    shared chains that name it in their comment, and every rule of the chains they reach (chain
    names unhashed: what the rules do is compared)."""
    out: dict[str, set[str]] = {}
    for table in ("nat", "filter"):
        chains = ruleset.chains(table)
        for chain, rules in chains.items():
            if chain.startswith(n.SERVICE_CHAIN_PREFIXES):
                continue
            for text in rules:
                name = _service_port(read(text))
                if name is None:
                    continue
                own = out.setdefault(name, set())
                own.add(f"{table} {chain} {text}")
                _reach(chains, target_of(text), table, own)
    return out


def _service_port(rule: Rule) -> str | None:
    """"ns/svc:port/proto" of a rule in a shared chain that names its service port first in a comment
    with more words ("… cluster IP", "… has no endpoints"), right after `-p`."""
    name, space, _ = (rule.comment or "").partition(" ")
    if not space or "/" not in name or rule.protocol is None or rule.first_module != "comment":
        return None
    return f"{name}/{rule.protocol}"


def _reach(chains: Mapping[str, tuple[str, ...]], start: str | None, table: str, own: set[str]) -> None:
    todo = [start] if start and start.startswith(n.SERVICE_CHAIN_PREFIXES) else []
    seen: set[str] = set()
    while todo:
        chain = todo.pop()
        if chain in seen:
            continue
        seen.add(chain)
        for rule in chains.get(chain, ()):
            # chain names carry a hash of the service port: compare what the rules do
            own.add(f"{table} {chain.split('-', 2)[1]} {_unhash(rule)}")
            target = target_of(rule)
            if target and target.startswith(n.SERVICE_CHAIN_PREFIXES):
                todo.append(target)


def _unhash(rule: str) -> str:
    return re.sub(r"(KUBE-(?:SVC|SVL|EXT|FW|SEP|XLB))-[A-Z0-9]{16}", r"\1", rule)
