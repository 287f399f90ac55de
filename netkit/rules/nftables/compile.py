"""compile(state, config, family) -> Ruleset, and the daemon's Compiler: the table of one family
kept up to date part by part from what layout.py makes of each service port.

`compile` is a fresh Compiler's first compile: the full and the incremental path are one
code path, and the goldens check both. What it remembers between compiles (per config and family):

- every service port's Part (rules, own sets, its elements of the shared sets), by the identity of
  its ServicePortState (netkit.rules.memo.PortMemo), with the endpoint-map slots it was compiled
  with — a slot is a function of the set of all endpoint-chain names (layout.endpoint_slots), so a
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

import bisect
import weakref
from dataclasses import replace
from typing import Generic, TypeVar

from netkit.change import Since
from netkit.config import Config
from netkit.model import IPFamily, NodeState, ServicePortState
from netkit.model.types import IPAddress
from netkit.nft.ruleset import Chain, Element, Elements, NamedSet, Part, Parts, Ruleset
from netkit.rules.memo import PortMemo
from netkit.rules.nftables import layout as c
from netkit.rules.nftables import names as n

T = TypeVar("T")


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:  # noqa: A001 (the stage name)
    """The complete desired table of one family, indexed by service port (see ruleset.Parts): a
    fresh Compiler's first compile, the daemon's one code path."""
    return Compiler(config, family).compile(state)


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
        self._state: NodeState | None = None  # the state of the last compile (its ports are in the memo)
        self._by_label: dict[str, PortPart] = {}  # every port's PortPart by label
        self._port_parts: dict[str, Part] = {}  # every compiled port's Part by label (the index)
        self._names: dict[str, int] = {}  # endpoint-chain name → how many ports have it
        self._slots: dict[str, int] = {}
        self._taken: dict[int, str] = {}  # slot → the name in it
        self._passed: dict[int, int] = {}  # slot → how many names' probes passed it (taken when they came)
        self._counts: dict[str, dict[Element, int]] = {}  # shared set → element → contributors
        # one-value-per-key maps (layout.ONE_PER_KEY) → key → its claims, the winner first
        self._claims: dict[str, dict[str, list[Element]]] = {}
        self._contested: dict[str, dict[str, list[Element]]] = {}  # those of them with several claims
        self._shared: dict[str, NamedSet] = {}  # the shared sets with their elements, as last built
        self._chains = _ByName[Chain]()  # every chain (fixed and ports') by name, kept in name order
        self._sets = _ByName[NamedSet]()  # every set (shared and ports' own) by name, in name order
        self._fixed: Part | None = None
        self._last: Ruleset | None = None

    def compile(self, state: NodeState) -> Ruleset:
        if state.node.ips != self._node_ips:
            self._reset(state.node.ips)
        previous, self._state = self._state, state
        changes = state.changes
        fresh = self._memo.fresh
        if changes is not None and changes.applies_to(previous) and not fresh:
            came, gone = self._memo.update(self._mine(changes.gone), self._mine(changes.came), PortPart)
            if not self._relabel(came, gone):
                return self._unindexed(state)
        else:
            walk = self._memo.run(state.family(self.family), PortPart)  # new and changed ports: not compiled yet
            came, gone = walk.came, walk.gone
            self._by_label = {e.label: e for e in walk.parts}
            if len(self._by_label) != len(walk.parts):
                return self._unindexed(state)
        moved = self._count_names(came, gone)
        ctx = c.Ctx(self.family, self.config, state.node.ips, self._slots)
        touched: dict[str, set[Element]] = {}
        changed = {e.label for e in (*came, *gone)}
        for e in gone:
            self._drop(e, touched)
        again = [e for e in self._by_label.values() if e.part is not None and e.slots != self._slots_of(e)] \
            if moved else []
        for e in again:  # rare: a name came or went and moved this port's slot
            self._drop(e, touched)
            changed.add(e.label)
        for e in (*came, *again):
            e.slots, e.part = self._slots_of(e), c.compile_port(ctx, e.port)
            self._add(e, touched)
        return self._result(ctx, state, touched, changed, fresh)

    def _mine(self, ports: tuple[ServicePortState, ...]) -> list[ServicePortState]:
        return [p for p in ports if p.family is self.family]

    def _relabel(self, came: list[PortPart], gone: list[PortPart]) -> bool:
        """Follow a change in the label index; False when two ports now share a label."""
        by_label = self._by_label
        for e in gone:
            if by_label.get(e.label) is e:
                del by_label[e.label]
        for e in came:
            if e.label in by_label:
                return False
            by_label[e.label] = e
        return True

    def _unindexed(self, state: NodeState) -> Ruleset:
        """Two ports, one label: not a valid state; no index, no memory."""
        self._reset(None)
        ports = state.family(self.family)
        ctx = c.Ctx(self.family, self.config, state.node.ips, c.endpoint_slots(ports))
        return c.unindexed(ctx, state, ports)

    def _result(self, ctx: c.Ctx, state: NodeState, touched: dict[str, set[Element]], changed: set[str],
                fresh: bool) -> Ruleset:
        before = self._fixed
        fixed = self._fixed_part(ctx, state)
        if fixed is not before:
            for ch in before.chains if before is not None else ():
                self._chains.put(ch.name, None)
            for ch in fixed.chains:
                self._chains.put(ch.name, ch)
        self._shared_sets(fixed, touched, fixed is before)
        sets, chains = self._sets.sorted(), self._chains.sorted()
        contested = {name: {key: tuple(claims) for key, claims in by_key.items()}
                     for name, by_key in self._contested.items() if by_key}
        index = Parts(fixed, self._port_parts.copy(), sets, chains, contested)
        since = None
        if self._last is not None and not fresh:
            since = Since(weakref.ref(self._last), frozenset(changed))
        result = Ruleset(ctx.ip, "netkit", sets, chains, index, since)
        self._last = result
        return result

    # ── slots ──

    def _count_names(self, came: list[PortPart], gone: list[PortPart]) -> bool:
        """Keep the name → slot map a pure function of the names in use (`layout.slots_of`). A
        change of endpoints within a port changes no name; a name that comes or goes is placed or
        taken out alone when that moves no other name (its slot free and no other name's probe
        passed it), else all slots are computed again. True when other ports' slots may have moved."""
        counts = self._names
        had = {name: counts.get(name, 0) for e in (*came, *gone) for name in e.names}
        for e in came:
            for name in e.names:
                counts[name] = counts.get(name, 0) + 1
        for e in gone:
            for name in e.names:
                left = counts[name] - 1
                if left:
                    counts[name] = left
                else:
                    del counts[name]
        appeared = sorted(name for name, n in had.items() if not n and name in counts)
        vanished = sorted(name for name, n in had.items() if n and name not in counts)
        if not appeared and not vanished:
            return False
        if self._place(appeared, vanished):
            return False
        self._slots = c.slots_of(counts)
        self._taken, self._passed = _probes(self._slots)
        return True

    def _place(self, appeared: list[str], vanished: list[str]) -> bool:
        """Take out and place names without moving any other; False when that is not possible (the
        caller then computes every slot again, so what was done here is thrown away)."""
        taken, passed, slots = self._taken, self._passed, self._slots
        for name in vanished:
            slot = slots[name]
            if passed.get(slot):  # a later name probed past it: it would move into the freed slot
                return False
            del taken[slot], slots[name]
            for s in _probed(c.slot_hash(name), slot):
                passed[s] -= 1
        for name in appeared:
            slot = c.slot_hash(name)
            if slot in taken or passed.get(slot):
                return False
            taken[slot], slots[name] = name, slot
        return True

    def _slots_of(self, e: PortPart) -> tuple[int | None, ...]:
        return tuple(self._slots.get(name) for name in e.names)

    # ── the parts' contributions ──

    def _drop(self, e: PortPart, touched: dict[str, set[Element]]) -> None:
        part = e.part
        if part is None:
            return
        if self._port_parts.get(e.label) is part:
            del self._port_parts[e.label]
        for chain in part.chains:
            if self._chains.get(chain.name) is chain:
                self._chains.put(chain.name, None)
        for st in part.sets:
            if self._sets.get(st.name) is st:
                self._sets.put(st.name, None)
        for set_name, element in part.elements:
            counts = self._counts[set_name]
            left = counts[element] - 1
            if left:
                counts[element] = left
            else:
                del counts[element]
                touched.setdefault(set_name, set()).add(element)
                if set_name in c.ONE_PER_KEY:
                    self._unclaim(set_name, element)

    def _add(self, e: PortPart, touched: dict[str, set[Element]]) -> None:
        part = e.part
        if part is None:
            return
        self._port_parts[e.label] = part
        for chain in part.chains:
            self._chains.put(chain.name, chain)
        for st in part.sets:
            self._sets.put(st.name, st)
        for set_name, element in part.elements:
            counts = self._counts.setdefault(set_name, {})
            had = counts.get(element, 0)
            counts[element] = had + 1
            if not had:
                touched.setdefault(set_name, set()).add(element)
                if set_name in c.ONE_PER_KEY:
                    self._claim(set_name, element)

    def _claim(self, set_name: str, element: Element) -> None:
        claims = self._claims.setdefault(set_name, {}).setdefault(element.key, [])
        claims.append(element)
        if len(claims) > 1:  # rare: two ports claim one address and port
            claims.sort(key=c.claim_rank)
            self._contested.setdefault(set_name, {})[element.key] = claims

    def _unclaim(self, set_name: str, element: Element) -> None:
        by_key = self._claims[set_name]
        claims = by_key[element.key]
        claims.remove(element)
        if len(claims) < 2:
            self._contested.get(set_name, {}).pop(element.key, None)
        if not claims:
            del by_key[element.key]

    def _visible_changes(self, set_name: str, before: Elements, changed: set[Element]
                         ) -> tuple[list[Element], list[Element]]:
        """(removed, added) elements of a shared set after `changed` came or went: for a
        one-value-per-key map, a key's element is its winning claim, which changes only when the
        winner came or went."""
        counts = self._counts.get(set_name, {})
        if set_name not in c.ONE_PER_KEY:
            return [e for e in changed if e not in counts], [e for e in changed if e in counts]
        claims = self._claims.get(set_name, {})
        removed: list[Element] = []
        added: list[Element] = []
        by_key: dict[str, list[Element]] = {}
        for e in changed:
            by_key.setdefault(e.key, []).append(e)
        for key, touched in by_key.items():
            now = claims.get(key)
            new = now[0] if now else None
            old = next((e for e in (*touched, *(now or ())) if e in before), None)
            if old != new:
                if old is not None:
                    removed.append(old)
                if new is not None:
                    added.append(new)
        return removed, added

    def _present(self, set_name: str) -> list[Element]:
        """Every element of a shared set the parts give it (a one-value-per-key map: the winners)."""
        if set_name in c.ONE_PER_KEY:
            return [claims[0] for claims in self._claims.get(set_name, {}).values()]
        return list(self._counts.get(set_name, ()))

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

    def _shared_sets(self, fixed: Part, touched: dict[str, set[Element]], same_fixed: bool) -> None:
        """Each shared set with its elements: its definition's own plus every part's; rebuilt only
        when an element came or went (or its definition changed), else the very same object."""
        shared: dict[str, NamedSet] = {}
        for definition in fixed.sets:
            before = self._shared.get(definition.name)
            changed = touched.get(definition.name)
            same = before is not None and (same_fixed or (
                before.definition() == definition.definition() and _base(before, definition)))
            if before is not None and same and not changed:
                st = before
            elif before is not None and same and changed and not definition.elements \
                    and isinstance(before.elements, Elements):
                # Only elements of the parts came or went: rebuild their chunks (hairpin: 100k pairs).
                removed, added = self._visible_changes(definition.name, before.elements, changed)
                st = replace(before, elements=before.elements.changed(removed, added))
                self._sets.put(st.name, st)
            else:
                parts = Elements.of(self._present(definition.name))
                st = replace(definition, elements=definition.elements | parts if definition.elements else parts)
                self._sets.put(st.name, st)
            shared[st.name] = st
        for name in self._shared.keys() - shared.keys():
            self._sets.put(name, None)
        self._shared = shared


class _ByName(Generic[T]):
    """Objects by name, and their tuple in name order: patched name by name (bisect) when a few
    changed since the last tuple, sorted again when many did (the first compile)."""

    def __init__(self) -> None:
        self._by_name: dict[str, T] = {}
        self._names: list[str] = []
        self._items: list[T] = []
        self._dirty: set[str] = set()

    def get(self, name: str) -> T | None:
        return self._by_name.get(name)

    def put(self, name: str, item: T | None) -> None:
        """Set (or with None, remove) the object of a name."""
        if item is None:
            self._by_name.pop(name, None)
        else:
            self._by_name[name] = item
        self._dirty.add(name)

    def sorted(self) -> tuple[T, ...]:
        dirty, self._dirty = self._dirty, set()
        if len(dirty) > 64 or len(dirty) * 8 > len(self._names):
            self._names = sorted(self._by_name)
            self._items = list(map(self._by_name.__getitem__, self._names))
            return tuple(self._items)
        names, items = self._names, self._items
        for name in dirty:
            i = bisect.bisect_left(names, name)
            here = i < len(names) and names[i] == name
            item = self._by_name.get(name)
            if item is None:
                if here:
                    del names[i], items[i]
            elif here:
                items[i] = item
            else:
                names.insert(i, name)
                items.insert(i, item)
        return tuple(items)


def _probed(start: int, slot: int) -> list[int]:
    """The slots a name probed past, from its hash to the slot it got."""
    out = []
    while start != slot:
        out.append(start)
        start = (start + 1) % c.SLOTS
    return out


def _probes(slots: dict[str, int]) -> tuple[dict[int, str], dict[int, int]]:
    """(slot → name, slot → how many names probed past it) of a complete slot map."""
    taken = {slot: name for name, slot in slots.items()}
    passed: dict[int, int] = {}
    for name, slot in slots.items():
        for s in _probed(c.slot_hash(name), slot):
            passed[s] = passed.get(s, 0) + 1
    return taken, passed


def _base(before: NamedSet, definition: NamedSet) -> bool:
    """The definition's own elements (nodeport IPs) are still in the set built before."""
    return definition.elements <= before.elements
