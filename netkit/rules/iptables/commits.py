"""A plan as a sequence of kernel commits, each of one table, in an order no packet can tell apart.

`iptables-restore` commits each table on its own (legacy: one IPT_SO_SET_REPLACE per table;
iptables-nft: one batch per table), so a payload with `*filter … COMMIT *nat … COMMIT` has a moment
in which filter is new and nat is old. For a Service whose endpoints just appeared that moment has
no REJECT (filter, new) and no DNAT (nat, old): a SYN leaves by the default route untranslated and
its conntrack entry keeps the connection broken until it times out. The other way round (endpoints
gone), nat first would have the same hole.

What makes an order safe: the filter rules that refuse a Service (REJECT/DROP in KUBE-SERVICES,
KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-PROXY-FIREWALL) match the Service's own address and
port, which a DNATed packet no longer carries. So a refusal and a DNAT for the same Service never
both apply: where nat DNATs, nat decides. Hence the commits:

1. mangle (only the canary chain);
2. filter, but keeping every refusal the new filter drops (its Service gains a DNAT in step 3):
   Services gaining a refusal are refused only where nat (still old) does not DNAT them — as before;
3. nat: Services gaining endpoints are DNATed (the kept refusal no longer matches them), Services
   losing them meet their refusal — the new behaviour;
4. filter as desired (the kept refusals go; nat already decides for those Services).

After every step each packet meets either the old or the new ruleset for its Service. Step 2 or 4
is left out when it would change nothing, so a plan touching one table is still one commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from netkit.rules.iptables import names as n
from netkit.rules.iptables.plan import Plan

V = TypeVar("V")

# filter chains whose rules refuse a Service by its own address and port
REFUSING_CHAINS = frozenset({n.SERVICES, n.EXTERNAL_SERVICES, n.NODEPORTS, n.PROXY_FIREWALL})


def refuses(rule: str) -> bool:
    return rule.endswith(" -j DROP") or " -j REJECT" in rule


def commits(p: Plan) -> list[Plan]:
    """`p` split into one plan per kernel commit, in the order above (empty steps left out)."""
    old_filter = p.old.get("filter", {})
    new_filter = p.write.get("filter", {})
    interim: dict[str, tuple[str, ...]] = {}
    for chain, rules in new_filter.items():
        kept = [r for r in old_filter.get(chain, ()) if chain in REFUSING_CHAINS and refuses(r)
                and r not in set(rules)]
        interim[chain] = (*rules, *kept)
    first = {c: r for c, r in interim.items() if r != old_filter.get(c)}
    last = {c: r for c, r in new_filter.items() if interim[c] != r}
    steps = [
        _table(p, "mangle"),
        Plan(p.family, {"filter": first} if first else {}, _only(p.delete, "filter"), (), _only(p.old, "filter")),
        _table(p, "nat"),
        Plan(p.family, {"filter": last} if last else {}, {}, (), _only(p.old, "filter")),
        *(_table(p, t) for t in sorted(set(p.write) | set(p.delete)) if t not in ("mangle", "filter", "nat")),
    ]
    return [s for s in steps if not s.empty]


def _table(p: Plan, table: str) -> Plan:
    return Plan(p.family, _only(p.write, table), _only(p.delete, table), (), _only(p.old, table))


def _only(m: Mapping[str, V], table: str) -> dict[str, V]:
    value = m.get(table)
    return {table: value} if value else {}
