"""Read an nftables Ruleset back per service port: which endpoints its dnat rules can choose
(`summarize`, for diff and trace) and which objects are its own (`objects`, for the plan summary).
A live dump reads like a compiled table: both follow the object names (names.split). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from netkit.nft import rule
from netkit.nft.ruleset import NamedSet, Ruleset
from netkit.rules.nftables import names as n


def summarize(ruleset: Ruleset | None) -> Mapping[str, tuple[str, ...]]:
    """`ns/svc:port/proto` → the endpoints (`IP:port`, `[IPv6]:port`) its dnat rules can choose,
    read from the endpoint chains (svc-… and local-…) and their endpoint maps, so a live dump
    summarises like a compile."""
    out: dict[str, set[str]] = {}
    sets = ruleset.set_map() if ruleset else {}
    for chain in ruleset.chains if ruleset else ():
        split = n.split(chain.name)
        if split is None or split[0] not in ("svc", "local"):
            continue
        out.setdefault(split[1], set()).update(ep for rule in chain.rules for ep in dnat_targets(rule, sets))
    return {k: tuple(sorted(v)) for k, v in sorted(out.items())}


def dnat_targets(text: str, sets: Mapping[str, NamedSet]) -> list[str]:
    """Endpoints a canonical dnat rule can choose (rule.py reads it): `… to A:P`, `… numgen random mod N
    [offset O] map @NAME` (keys O … O+N-1 of an endpoint map, read from `sets`) or `… map { 0 : A . P, … }`."""
    read = rule.readable(text)
    return [ep for d in (read.dnats() if read else ()) for ep in rule.endpoints(d, sets)]


def objects(ruleset: Ruleset | None, names: Mapping[str, str]) -> dict[str, set[str]]:
    """Each service port's own objects, for the plan summary (netkit.rules.summary): its chains and
    sets, the map elements that point at them, and the elements of other maps with the same key
    (`names`: the model's element keys of each service port, for what points nowhere of its own)."""
    out: dict[str, set[str]] = {}
    if ruleset is None:
        return out
    for chain in ruleset.chains:
        split = n.split(chain.name)
        if split:
            out.setdefault(split[1], set()).update(f"{split[0]}: {rule}" for rule in chain.rules)
            out[split[1]].add(f"{split[0]}-")
    by_element_key: dict[str, str] = dict(names)
    for s in ruleset.sets:
        split = n.split(s.name)
        if split:
            out.setdefault(split[1], set()).add(f"{split[0]}- timeout {s.timeout}")
            continue
        for e in s.elements:
            target = e.target
            owner = n.split(target) if target else None
            if owner:
                out.setdefault(owner[1], set()).add(f"{s.name} {e.key} : {e.value.split()[0] if e.value else ''} "
                                                    f"{owner[0]}-")
                by_element_key.setdefault(e.key, owner[1])
    for s in ruleset.sets:
        if n.split(s.name):
            continue
        for e in s.elements:
            if e.key in by_element_key and not (e.target and n.split(e.target)):
                out.setdefault(by_element_key[e.key], set()).add(f"{s.name} {e.text()}")
    return out
