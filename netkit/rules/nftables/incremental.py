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
from dataclasses import replace

from netkit.config import Config
from netkit.model import IPFamily, NodeState, ServicePortState
from netkit.model.types import IPAddress
from netkit.rules.backend import Since
from netkit.rules.memo import PortMemo
from netkit.rules.nftables import compile as c
from netkit.rules.nftables import names as n
from netkit.rules.nftables.ruleset import Chain, Element, NamedSet, Part, Parts, Ruleset


class PortPart:
    """One service port's Part, with what it was compiled from besides the port itself. Made when the
    memo first meets the port; compiled once the slots of this compile are known (`part` None until
    then), and again in place if its slots move."""

    __slots__ = ("label", "names", "part", "port", "slots")

    def __init__(self, p: ServicePortState) -> None:
        self.port = p
        self.label = n.port_label(p)
        self.names = tuple(c.slotted_names(p))  # its endpoint chains that take a slot in the shared maps
        self.slots: tuple[int | None, ...] = ()  # their slots when compiled
        self.part: Part | None = None


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
        self._order: list[str] | None = None  # every chain's name (fixed and ports'), sorted
        self._renamed: set[str] = set()  # port chains dropped or added since the order was made
        self._own: dict[str, NamedSet] = {}  # every port's own sets by name
        self._fixed: Part | None = None
        self._last: Ruleset | None = None

    def compile(self, state: NodeState) -> Ruleset:
        ports = state.family(self.family)
        if state.node.ips != self._node_ips:
            self._reset(state.node.ips)
        walk = self._memo.run(ports, PortPart)  # new and changed ports get a PortPart not compiled yet
        labels = [e.label for e in walk.parts]
        if len(set(labels)) != len(labels):  # two ports, one label: not a valid state; no index, no memory
            self._reset(None)
            ctx = c.Ctx(self.family, self.config, state.node.ips, c.endpoint_slots(ports))
            return c.unindexed(ctx, state, ports)
        moved = self._count_names(walk.came, walk.gone)
        ctx = c.Ctx(self.family, self.config, state.node.ips, self._slots)
        touched: dict[str, set[Element]] = {}
        changed = {e.label for e in (*walk.came, *walk.gone)}
        for e in walk.gone:
            self._drop(e, touched)
        again = [e for e in walk.parts if e.part is not None and e.slots != self._slots_of(e)] if moved else []
        for e in again:  # rare: a name came or went and moved this port's slot
            self._drop(e, touched)
            changed.add(e.label)
        for e in (*walk.came, *again):
            e.slots, e.part = self._slots_of(e), c.compile_port(ctx, e.port)
            self._add(e, touched)
        return self._result(ctx, state, walk.parts, labels, touched, changed, walk.fresh)

    def _result(self, ctx: c.Ctx, state: NodeState, parts: list[PortPart], labels: list[str],
                touched: dict[str, set[Element]], changed: set[str], fresh: bool) -> Ruleset:
        before = self._fixed
        fixed = self._fixed_part(ctx, state)
        sets = self._shared_sets(fixed, touched, fixed is before)
        chains = self._sorted_chains(fixed)
        result = Ruleset.of(ctx.ip, [*sets, *self._own.values()], ())
        result = Ruleset(result.family, result.table, result.sets, chains)
        index = Parts(fixed, {e.label: e.part for e in parts if e.part is not None}, result.sets, result.chains)
        since = None
        if self._last is not None and not fresh:
            since = Since(weakref.ref(self._last), frozenset(changed))
        result = Ruleset(result.family, result.table, result.sets, result.chains, index, since)
        self._last = result
        return result

    def _sorted_chains(self, fixed: Part) -> tuple[Chain, ...]:
        """Every chain in name order. The order is sorted again only when a chain name came or went
        (a port's chain dropped and added back under its name leaves it as it was)."""
        by_name = {**{ch.name: ch for ch in fixed.chains}, **self._chains}
        if self._order is None or self._renamed or len(self._order) != len(by_name):
            self._order = sorted(by_name)
            self._renamed = set()
        return tuple(map(by_name.__getitem__, self._order))

    # ── slots ──

    def _count_names(self, came: list[PortPart], gone: list[PortPart]) -> bool:
        """Keep the name → slot map a pure function of the names in use: recomputed (all of it)
        only when a name comes or goes, which a change of endpoints within a port never does.
        True when the slots were recomputed."""
        counts, before = self._names, len(self._names)
        appeared = False  # a name no port had
        for e in came:
            for name in e.names:
                had = counts.get(name, 0)
                counts[name] = had + 1
                appeared = appeared or not had
        for e in gone:
            for name in e.names:
                left = counts[name] - 1
                if left:
                    counts[name] = left
                else:
                    del counts[name]
        if not appeared and len(counts) == before:
            return False
        self._slots = c.slots_of(counts)
        return True

    def _slots_of(self, e: PortPart) -> tuple[int | None, ...]:
        return tuple(self._slots.get(name) for name in e.names)

    # ── the parts' contributions ──

    def _drop(self, e: PortPart, touched: dict[str, set[Element]]) -> None:
        part = e.part
        if part is None:
            return
        for chain in part.chains:
            if self._chains.get(chain.name) is chain:
                del self._chains[chain.name]
                self._renamed.symmetric_difference_update((chain.name,))
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

    def _add(self, e: PortPart, touched: dict[str, set[Element]]) -> None:
        part = e.part
        if part is None:
            return
        for chain in part.chains:
            if chain.name not in self._chains:
                self._renamed.symmetric_difference_update((chain.name,))
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

    def _shared_sets(self, fixed: Part, touched: dict[str, set[Element]], same_fixed: bool) -> list[NamedSet]:
        """Each shared set with its elements: its definition's own plus every part's; rebuilt only
        when an element came or went (or its definition changed), else the very same object."""
        out: list[NamedSet] = []
        shared: dict[str, NamedSet] = {}
        for definition in fixed.sets:
            before = self._shared.get(definition.name)
            changed = touched.get(definition.name)
            if before is not None and not changed and (same_fixed or (
                    before.definition() == definition.definition() and _base(before, definition))):
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
