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
from netkit.rules.iptables.ruleset import Ruleset

_SERVICE_RULE = re.compile(r'-p (\w+) -m comment --comment "(\S+) (cluster IP|has no endpoints|has no local endpoints)"'
                           r".* -j (\S+)")
_DNAT = re.compile(r"--to-destination (\S+)")


def summarize(ruleset: Ruleset) -> Mapping[str, tuple[str, ...]]:
    """`ns/svc:port/proto` → the sorted endpoints its clusterIP DNATs to (empty: rejects or drops)."""
    nat = ruleset.chains("nat")
    out: dict[str, tuple[str, ...]] = {}
    for table, chain in (("nat", n.SERVICES), ("filter", n.SERVICES)):
        for rule in ruleset.rules(table, chain):
            m = _SERVICE_RULE.search(rule)
            if not m:
                continue
            proto, name, _, target = m.groups()
            out[f"{name}/{proto}"] = tuple(sorted(endpoints_of(nat, target)))
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
        for rule in nat.get(c, ()):
            m = _DNAT.search(rule)
            if m:
                found.add(m.group(1))
            tokens = rule.split()
            if "-j" in tokens:
                target = tokens[tokens.index("-j") + 1]
                if target.startswith(n.SERVICE_CHAIN_PREFIXES):
                    todo.append(target)
    return found
