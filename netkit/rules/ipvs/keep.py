"""Keep the live IPVS objects of some Services as they are (netkit.rules.keep: "kept, invalid input").

A kernel dump names no Service: a virtual server is (protocol, IP, port) or a firewall mark. So:

- a kept Service whose object is still valid (an invalid EndpointSlice) is found by the keys the new
  compile gives it (its virtual servers carry the `ns/svc:port` comment there): the live virtual
  servers with those keys replace the compiled ones, real servers and all;
- a kept Service whose own object is invalid cannot be named at all: then every live virtual server
  that no valid Service claims is kept, with its kube-ipvs0 address and set entries. That may keep a
  Service removed in the same run for a while (it goes with the first apply after the input is
  fixed) — never the other way round.

Pure.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from netkit.rules.ipvs.ruleset import IPSet, Ruleset, VirtualServer


def keep(live: Ruleset | None, desired: Ruleset, services: Collection[str]) -> Ruleset:
    wanted = set(services)
    if not wanted or live is None:
        return desired
    theirs = [vs for vs in desired.services if vs.service_name in wanted]
    others = [vs for vs in desired.services if vs.service_name not in wanted]
    index = live.index
    kept = {vs.key: index[vs.key] for vs in theirs if vs.key in index}
    if wanted - {vs.service_name for vs in theirs}:  # an invalid Service object: nothing names its parts
        claimed = {vs.key for vs in others}
        kept.update((vs.key, vs) for vs in live.services if vs.key not in claimed)
    chosen = sorted([*others, *kept.values()], key=lambda vs: vs.key.sort_key)
    ips = {vs.ip for vs in kept.values() if vs.ip is not None}
    return replace(desired, services=tuple(chosen), addresses=desired.addresses | (live.addresses & ips),
                   sets=_sets(live, desired, list(kept.values())), since=None)


def _sets(live: Ruleset, desired: Ruleset, kept: list[VirtualServer]) -> tuple[IPSet, ...]:
    """The desired sets plus the live entries that name a kept virtual server's address or one of
    its real servers (`10.96.0.11,tcp:80`, `10.244.1.6,tcp:8080,10.244.1.6`)."""
    marks = {f"{vs.ip},{vs.protocol.lower}:{vs.port}" for vs in kept if vs.ip is not None}
    reals = {f"{r.ip}," for vs in kept for r in vs.reals}
    if not marks and not reals:
        return desired.sets
    live_sets = {s.name: s for s in live.sets}
    out = []
    for s in desired.sets:
        extra = {e for e in live_sets[s.name].entries if _names_one(e, marks, reals)} if s.name in live_sets else set()
        out.append(replace(s, entries=s.entries | extra) if extra else s)
    return tuple(out)


def _names_one(entry: str, marks: set[str], reals: set[str]) -> bool:
    head = entry.split(",", 2)
    return ",".join(head[:2]) in marks or f"{head[0]}," in reals
