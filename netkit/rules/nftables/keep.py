"""Keep the live nftables objects of some Services as they are (netkit.rules.keep: "kept, invalid
input"): `keep(live, desired, services)` is `desired` with each kept Service's part taken from `live`.

What belongs to a Service in a live table, found without an index:

- its chains and own sets: the names carry `ns/svc/…` (`svc-`, `local-`, `ext-`, `fw-`, `aff-`, an
  own endpoint map named like its chain; `names.split`);
- its elements of the shared maps: those that jump or go to one of its chains (service-ips,
  service-nodeports, firewall-ips), the endpoint-map slots its dnat rules choose from
  (`numgen random mod N offset O map @endpoints-…`), its cluster IPs in cluster-ips (the addresses of
  its service-ips keys) and the hairpin pairs of its endpoints;
- the keys the new compile gives it, when the Service object itself is still valid (an invalid
  EndpointSlice): their live elements in any dispatch map (e.g. its no-endpoints verdicts).

The new compile's part of such a Service is dropped. A Service without live chains whose own object
is invalid (no endpoints: its reject verdicts carry no name) cannot be found: `Unkeepable`, and the
command changes nothing. Nor when the new compile has given another service port the endpoint-map
slots the kept one still uses (slots are settled in name order). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import replace

from netkit.errors import NetkitError
from netkit.nft import rule
from netkit.nft.ruleset import Chain, Element, NamedSet, Ruleset
from netkit.rules.keep import service_of as port_service
from netkit.rules.nftables import names as n
from netkit.rules.nftables.layout import declared

_DISPATCH = (n.SERVICE_IPS, n.SERVICE_NODEPORTS, n.NO_ENDPOINT_SERVICES, n.NO_ENDPOINT_NODEPORTS, n.FIREWALL_IPS)


class Unkeepable(NetkitError):
    pass


def service_of(name: str) -> str | None:
    """"ns/svc" of a per-service-port object name, else None."""
    split = n.split(name)
    return port_service(split[1]) if split else None


def keep(live: Ruleset | None, desired: Ruleset, services: Collection[str]) -> Ruleset:
    wanted = set(services)
    if not wanted or live is None:
        return desired
    drop_sets, drop_chains, drop_elements, keys = _desired_parts(desired, wanted)
    chains = [c for c in live.chains if service_of(c.name) in wanted]
    own = [declared(s) for s in live.sets if service_of(s.name) in wanted]
    found = _shared_elements(live, {c.name for c in chains}, chains, keys)
    missing = wanted - {service_of(c.name) for c in chains} - {_service_of_key(k, desired) for k in keys}
    if any(_has_unnamed(live, s) for s in missing):
        raise Unkeepable(f"cannot tell the live nftables objects of {', '.join(sorted(missing))} apart")
    sets: list[NamedSet] = []
    for s in desired.sets:
        if s.name in drop_sets:
            continue
        elements = {e for e in s.elements if (s.name, e) not in drop_elements}
        for e in found.get(s.name, ()):
            clash = next((x for x in elements if x.key == e.key and x != e), None) if s.is_map else None
            if clash is not None:
                raise Unkeepable(f"{s.name}: key {e.key} of a kept Service is now given to another service port")
            elements.add(e)
        sets.append(replace(s, elements=frozenset(elements)))
    sets.extend(own)
    have = {s.name for s in sets}
    sets.extend(declared(replace(s, elements=frozenset(found[s.name])))
                for s in live.sets if s.name in found and s.name not in have)  # a shard no longer in use
    kept = [c for c in desired.chains if c.name not in drop_chains]
    return Ruleset.of(desired.family, sets, [*kept, *chains], desired.table)


def _desired_parts(desired: Ruleset, wanted: set[str]) -> tuple[set[str], set[str], set[tuple[str, Element]], set[str]]:
    """What the new compile gives the kept Services: own sets, chains, shared elements, dispatch keys."""
    drop_sets = {s.name for s in desired.sets if service_of(s.name) in wanted}
    drop_chains = {c.name for c in desired.chains if service_of(c.name) in wanted}
    drop_elements: set[tuple[str, Element]] = set()
    index = desired.indexed()
    for label, part in (index.ports.items() if index else ()):
        if "/".join(label.split("/")[:2]) in wanted:
            drop_elements.update(part.elements)
    keys = {e.key for name, e in drop_elements if name in _DISPATCH}
    return drop_sets, drop_chains, drop_elements, keys


def _shared_elements(live: Ruleset, names: set[str], chains: Iterable[Chain],
                     keys: set[str]) -> dict[str, set[Element]]:
    out: dict[str, set[Element]] = {}
    sets = live.set_map()
    for name in _DISPATCH:
        for e in sets[name].elements if name in sets else ():
            if e.target in names or e.key in keys:
                out.setdefault(name, set()).add(e)
    addresses: set[str] = set()
    for d in (d for chain in chains for text in chain.rules for d in _dnats(text)):
        if isinstance(d.to, rule.Value):
            addresses.add(rule.host(d.to.text))
            continue
        table, wanted = d.to.table, rule.slots(d.to)
        if isinstance(table, rule.SetRef) and wanted is not None and table.name in sets:
            chosen = {e for e in sets[table.name].elements if e.key in wanted}
            out.setdefault(table.name, set()).update(chosen)
            addresses.update(e.value.split(" . ")[0] for e in chosen if e.value)
    ips = {e.key.split(" . ")[0] for e in out.get(n.SERVICE_IPS, ())}
    for name, pick in ((n.CLUSTER_IPS, ips), (n.HAIRPIN, addresses)):  # "ip" and "ip . ip" elements
        for e in sets[name].elements if name in sets else ():
            if e.key.split(" . ")[0] in pick:
                out.setdefault(name, set()).add(e)
    return out


def _dnats(text: str) -> Iterator[rule.Dnat]:
    read = rule.readable(text)
    return read.dnats() if read else iter(())


def _service_of_key(key: str, desired: Ruleset) -> str | None:
    index = desired.indexed()
    for label, part in (index.ports.items() if index else ()):
        if any(e.key == key for _, e in part.elements):
            return "/".join(label.split("/")[:2])
    return None


def _has_unnamed(live: Ruleset, service: str) -> bool:
    """Whether `service` (without live chains) may have live objects nothing here can name: it might,
    whenever the table holds no-endpoints verdicts (they carry no Service name)."""
    del service
    sets = live.set_map()
    return any(sets[name].elements for name in (n.NO_ENDPOINT_SERVICES, n.NO_ENDPOINT_NODEPORTS) if name in sets)
