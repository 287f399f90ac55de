"""The nftables Compiler: the table of one family kept up to date part by part, for the daemon.

`compile.compile` is a fresh Compiler's first compile: the full and the incremental path are one
code path, and the goldens check both. What it remembers between compiles (per config and family):

- every service port's Part (rules, own sets, its elements of the shared sets), by the identity of
  its ServicePortState (netkit.rules.memo.PortMemo), with the endpoint-map slots it was compiled
  with — a slot is a function of the set of all endpoint-chain names (compile.endpoint_slots), so a
  part is reused only while its slots stay what they were;
- how many parts contribute each element of each shared set (two ports of one Service share their
  clusterIP element; pods share hairpin pairs), so a shared set is rebuilt only when an element
  actually comes or goes, and only that set;
- the chains and own sets by name, and the sorted tuples of the last result.

A sync after one EndpointSlice change then compiles one port, rebuilds two or three sets (the
endpoint map shard, hairpin pairs) and copies two tuples of pointers; the result shares every other
chain, set and Part with the previous one, and says which ports changed (`Ruleset.since`), so `plan`
compares those and not 10,000 (`narrow`). Measured at 10,000 services × 10 endpoints: docs/nftables.md.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

from netkit.config import Config
from netkit.model import IPFamily, NodeState, ServicePortState
from netkit.model.types import IPAddress
from netkit.rules.backend import Since
from netkit.rules.memo import PortMemo
from netkit.rules.nftables import compile as c
from netkit.rules.nftables import names as n
from netkit.rules.nftables.ruleset import Chain, Element, NamedSet, Part, Parts, Ruleset


@dataclass(frozen=True, slots=True, eq=False)
class PortPart:
    """One service port's Part, with what it was compiled from besides the port itself."""

    label: str
    names: tuple[str, ...]  # its endpoint chains that take a slot in the shared maps
    slots: tuple[int | None, ...]  # their slots when compiled
    part: Part


class Compiler:
    """`compile` with a memory for one (config, family). Its results equal a fresh `compile`'s
    (tests/unit/test_incremental.py); the result of each compile says which ports changed."""

    def __init__(self, config: Config, family: IPFamily) -> None:
        self.config, self.family = config, family
        self._reset(None)

    def _reset(self, node_ips: tuple[IPAddress, ...] | None) -> None:
        self._node_ips = node_ips
        self._memo: PortMemo[PortPart] = PortMemo()
        self._names: dict[str, int] = {}  # endpoint-chain name → how many ports have it
        self._slots: dict[str, int] = {}
        self._counts: dict[str, dict[Element, int]] = {}  # shared set → element → contributors
        self._shared: dict[str, NamedSet] = {}  # the shared sets with their elements, as last built
        self._chains: dict[str, Chain] = {}  # every port's chains by name
        self._own: dict[str, NamedSet] = {}  # every port's own sets by name
        self._fixed: Part | None = None
        self._last: Ruleset | None = None

    def compile(self, state: NodeState) -> Ruleset:
        ports = state.family(self.family)
        if state.node.ips != self._node_ips:
            self._reset(state.node.ips)
        self._update_slots(ports)
        ctx = c.Ctx(self.family, self.config, state.node.ips, self._slots)
        walk = self._memo.run(ports, lambda p: self._compile_port(ctx, p), self._slots_unchanged)
        labels = [e.label for e in walk.parts]
        if len(set(labels)) != len(labels):  # two ports, one label: not a valid state; no index, no memory
            self._reset(None)
            return c.unindexed(ctx, state, ports)
        touched: dict[str, set[Element]] = {}
        for e in walk.gone:
            self._drop(e.part, touched)
        for e in walk.came:
            self._add(e.part, touched)
        fixed = self._fixed_part(ctx, state)
        sets = self._shared_sets(fixed, touched)
        result = Ruleset.of(ctx.ip, [*sets, *self._own.values()], [*fixed.chains, *self._chains.values()])
        index = Parts(fixed, dict(zip(labels, (e.part for e in walk.parts), strict=True)), result.sets, result.chains)
        since = None
        if self._last is not None and not walk.fresh:
            since = Since(weakref.ref(self._last), frozenset(e.label for e in (*walk.came, *walk.gone)))
        result = Ruleset(result.family, result.table, result.sets, result.chains, index, since)
        self._last = result
        return result

    # ── slots ──

    def _update_slots(self, ports: tuple[ServicePortState, ...]) -> None:
        """Keep the name → slot map a pure function of the names in use: recomputed (all of it)
        only when a name comes or goes, which a change of endpoints within a port never does."""
        names: dict[str, int] = {}
        for p in ports:
            known = self._memo.previous(p)
            for name in known.names if known is not None else c.slotted_names(p):
                names[name] = names.get(name, 0) + 1
        if names.keys() != self._names.keys():
            self._slots = c.slots_of(names)
        self._names = names

    def _slots_unchanged(self, e: PortPart) -> bool:
        return all(self._slots.get(name) == slot for name, slot in zip(e.names, e.slots, strict=True))

    def _compile_port(self, ctx: c.Ctx, p: ServicePortState) -> PortPart:
        names = tuple(c.slotted_names(p))
        return PortPart(n.port_label(p), names, tuple(self._slots.get(x) for x in names), c.compile_port(ctx, p))

    # ── the parts' contributions ──

    def _drop(self, part: Part, touched: dict[str, set[Element]]) -> None:
        for chain in part.chains:
            if self._chains.get(chain.name) is chain:
                del self._chains[chain.name]
        for st in part.sets:
            if self._own.get(st.name) is st:
                del self._own[st.name]
        for set_name, element in part.elements:
            counts = self._counts[set_name]
            left = counts[element] - 1
            if left:
                counts[element] = left
            else:
                del counts[element]
                touched.setdefault(set_name, set()).add(element)

    def _add(self, part: Part, touched: dict[str, set[Element]]) -> None:
        for chain in part.chains:
            self._chains[chain.name] = chain
        for st in part.sets:
            self._own[st.name] = st
        for set_name, element in part.elements:
            counts = self._counts.setdefault(set_name, {})
            had = counts.get(element, 0)
            counts[element] = had + 1
            if not had:
                touched.setdefault(set_name, set()).add(element)

    # ── the fixed layer and the shared sets ──

    def _fixed_part(self, ctx: c.Ctx, state: NodeState) -> Part:
        """The fixed chains and the shared set definitions in use (the shards some part fills);
        the previous Part itself when equal, so `narrow` compares it by identity."""
        declared = c.fixed_sets(ctx, state)
        known = {s.name for s in declared}
        shards = [c.shard_map(ctx, name) for name in sorted(k for k, v in self._counts.items() if v and k not in known)]
        fixed = c.fixed_part(ctx, [*declared, *shards])
        if self._fixed is not None and fixed == self._fixed:
            return self._fixed
        self._fixed = fixed
        return fixed

    def _shared_sets(self, fixed: Part, touched: dict[str, set[Element]]) -> list[NamedSet]:
        """Each shared set with its elements: its definition's own plus every part's; rebuilt only
        when an element came or went (or its definition changed), else the very same object."""
        out: list[NamedSet] = []
        shared: dict[str, NamedSet] = {}
        for definition in fixed.sets:
            before = self._shared.get(definition.name)
            changed = touched.get(definition.name)
            if before is not None and not changed and before.definition() == definition.definition() \
                    and _base(before, definition):
                st = before
            else:
                parts = frozenset(self._counts.get(definition.name, ()))
                st = replace(definition, elements=definition.elements | parts)
            shared[st.name] = st
            out.append(st)
        self._shared = shared
        return out


def _base(before: NamedSet, definition: NamedSet) -> bool:
    """The definition's own elements (nodeport IPs) are still in the set built before."""
    return definition.elements <= before.elements
