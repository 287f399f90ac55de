"""FakeKernel: an in-memory nftables table with the kernel's all-or-nothing transaction semantics.

It applies a `Transaction` step by step to a scratch copy and keeps the copy only if every step
is allowed, refusing what the kernel refuses: an element for a missing set or of the wrong arity,
a jump/goto/verdict to a missing chain, a rule using a missing set, deleting something missing,
deleting a chain or set that is still referenced. With `pre_6_2=True` (the default) it also refuses
what kernels before 6.2 refused: deleting a chain that a map element deleted in the same transaction
still pointed at. Unit tests run plans against it; netns tests check the real kernel agrees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from netkit.errors import KernelError
from netkit.nft.ruleset import Chain, NamedSet, Ruleset
from netkit.nft.transaction import Transaction


@dataclass
class _Table:
    sets: dict[str, NamedSet] = field(default_factory=dict)
    chains: dict[str, Chain] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)  # chains whose element references died this batch


class FakeKernel:
    def __init__(self, family: str = "ip", table: str = "netkit", *, pre_6_2: bool = True) -> None:
        self.family = family
        self.table = table
        self.pre_6_2 = pre_6_2
        self.state: Ruleset | None = None
        self.transactions = 0

    def dump(self) -> Ruleset | None:
        return self.state

    writes: frozenset[str] = frozenset()  # a fake writes no kernel

    def dump_reusing(self, committed: Ruleset | None) -> Ruleset | None:
        return self.dump()

    def cleanup(self) -> None:
        self.state = None

    def prefetch(self) -> bool:
        """Nothing to read before the dump itself."""
        return False

    def apply(self, tx: Transaction, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        pre = tx.prelude()  # the new dynamic sets alone, first (plan.py), as NftKernel sends them
        if pre is not None:
            if self.state is None:  # its script adds the table
                self.state = Ruleset(self.family, self.table)
            self._commit(pre)
        self._commit(tx)
        follow = tx.followup()
        if follow:
            self._commit(follow)

    def _commit(self, tx: Transaction) -> None:
        t = self._scratch(tx)
        try:
            _steps(t, tx, self.pre_6_2)
            _check_references(t)
            _check_one_value_per_key(t)
        except KeyError as exc:
            raise KernelError(f"transaction refused: {exc.args[0]}") from None
        self.state = Ruleset.of(self.family, t.sets.values(), t.chains.values(), self.table)
        self.transactions += 1

    def _scratch(self, tx: Transaction) -> _Table:
        if tx.create is not None:
            t = _Table()
            base = self.state
            if base:
                t.sets, t.chains = base.set_map(), base.chain_map()
            t.sets.update(tx.create.set_map())
            t.chains.update(tx.create.chain_map())
            return t
        if self.state is None:
            raise KernelError(f"transaction refused: table {self.family} {self.table} does not exist")
        return _Table(self.state.set_map(), self.state.chain_map())


def _steps(t: _Table, tx: Transaction, pre_6_2: bool) -> None:
    for name in tx.flush_chains:
        t.chains[name] = replace(_chain(t, name), rules=())
    for set_name, e in tx.delete_elements:
        s = _set(t, set_name)
        match = [x for x in s.elements if x.key == e.key]
        if not match:
            raise KeyError(f"element {e.key} not in {set_name}")
        t.released.update(x.target for x in match if x.target)
        t.sets[set_name] = replace(s, elements=s.elements - set(match))
    for s in tx.delete_sets:
        _unused(t, s.name, "set")
        del t.sets[_set(t, s.name).name]
    for name in tx.delete_chains:
        if pre_6_2 and name in t.released:
            raise KeyError(f"chain {name} is busy (a map element deleted in this transaction used it)")
        _chain(t, name)
        _unused(t, name, "chain")
        del t.chains[name]
    for c in tx.add_chains:
        t.chains.setdefault(c.name, replace(c, rules=()))
    for s in tx.add_sets:
        t.sets[s.name] = replace(s, elements=frozenset())
        _add_elements(t, s.name, s)
    for set_name, e in tx.add_elements:
        s = _set(t, set_name)
        _add_elements(t, set_name, replace(s, elements=frozenset([e])))
    for c in tx.rules:
        old = _chain(t, c.name)
        t.chains[c.name] = replace(old, rules=old.rules + c.rules)


def _check_one_value_per_key(t: _Table) -> None:
    """A map holds one value per key: the kernel refuses a second (File exists), also within the
    transaction that creates the map."""
    for s in t.sets.values():
        if s.is_map and len({e.key for e in s.elements}) != len(s.elements):
            raise KeyError(f"two elements with one key in {s.name}")


def _add_elements(t: _Table, set_name: str, new: NamedSet) -> None:
    s = t.sets[set_name]
    for e in new.elements:
        if len(e.key.split(" . ")) != len(s.key_type) or (e.value is None) == s.is_map:
            raise KeyError(f"element {e.text()} does not fit {set_name}")
        if e.target and e.target not in t.chains:
            raise KeyError(f"element {e.text()}: no chain {e.target}")
        clash = [x for x in s.elements if x.key == e.key and x != e]
        if clash:
            raise KeyError(f"element {e.key} already in {set_name} with another value")
    t.sets[set_name] = replace(s, elements=s.elements | new.elements)


def _unused(t: _Table, name: str, kind: str) -> None:
    for c in t.chains.values():
        if name in (c.targets() if kind == "chain" else c.set_refs()):
            raise KeyError(f"{kind} {name} is busy (used by chain {c.name})")
    if kind == "chain":
        for s in t.sets.values():
            if any(e.target == name for e in s.elements):
                raise KeyError(f"chain {name} is busy (used by an element of {s.name})")


def _check_references(t: _Table) -> None:
    for c in t.chains.values():
        for target in c.targets():
            _chain(t, target)
        for set_name in c.set_refs():
            _set(t, set_name)


def _chain(t: _Table, name: str) -> Chain:
    if name not in t.chains:
        raise KeyError(f"no chain {name}")
    return t.chains[name]


def _set(t: _Table, name: str) -> NamedSet:
    if name not in t.sets:
        raise KeyError(f"no set {name}")
    return t.sets[name]
