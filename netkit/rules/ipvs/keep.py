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

from netkit.model import Protocol
from netkit.model.types import IPAddress
from netkit.rules.ipvs.entries import SetEntry
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
    """The desired sets plus the live entries that name a kept virtual server's address and port
    (`10.96.0.11,tcp:80`, `10.96.0.11,tcp:80,203.0.113.0/24`) or start with one of its real servers'
    addresses (`10.244.1.6,tcp:8080,10.244.1.6`)."""
    heads = {(vs.ip, vs.protocol, vs.port) for vs in kept if vs.ip is not None}
    reals = {r.ip for vs in kept for r in vs.reals}
    if not heads and not reals:
        return desired.sets
    live_sets = {s.name: s for s in live.sets}
    out = []
    for s in desired.sets:
        there = live_sets.get(s.name)
        extra = {str(e) for e in there.typed() if _names_one(e, heads, reals)} if there is not None else set()
        out.append(replace(s, entries=s.entries | extra) if extra else s)
    return tuple(out)


def _names_one(entry: SetEntry, heads: set[tuple[IPAddress, Protocol, int]], reals: set[IPAddress]) -> bool:
    return entry.ip_port in heads or (entry.ip is not None and entry.ip in reals)
