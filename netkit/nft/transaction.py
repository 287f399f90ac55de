"""An nft transaction on one table (what netkit.rules.nftables.plan makes) and its `nft -f` script.

A Transaction lists, in the order they are sent, the changes to one table: chains flushed, elements
deleted, sets and chains deleted, chains and sets added, rules written, elements added; or, when
there was no table, the whole table to create (`create`). `render_transaction` prints it as one
`nft -f` script; netlink.py encodes the same transaction as one netlink batch. `element_sets` carries
the definitions of the sets whose elements change, for a writer that encodes elements itself.

Dynamic sets first (`prelude`): the dynamic sets a transaction creates (ClientIP affinity, one per
endpoint) are created in a transaction of their own just before it, without a size. nft 1.0.6 gives
a set created in the same batch as a rule that updates it its default size 65535, and the kernel then
allocates the set's hash table for that many elements at once: ~2 MB each here, so the 14,300
affinity sets of 10,000 services (every 7th sticky) asked ~28 GB and the OOM killer ended nft.
Created alone, a set gets no size and no such allocation; the kernel reports 65535 once a rule binds
it, so a set's size is no part of what `plan` compares for a dynamic set. In between the two
transactions the kernel holds the new sets and nothing that uses them: no packet sees a difference,
and if the second is refused the unused sets stay until the next sync writes or deletes them.

`followup()` is the second transaction that deletes the chains a first one could only flush (kernels
before 6.2 keep a chain referenced until the map element that jumped to it is committed deleted).
Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from netkit.change import PlanStats
from netkit.nft.render import hook_line, render, set_spec
from netkit.nft.ruleset import Chain, NamedSet, Ruleset, SetElement


@dataclass(frozen=True, slots=True)
class Transaction:
    family: str
    table: str = "netkit"
    create: Ruleset | None = None  # the whole table, when there was none
    flush_chains: tuple[str, ...] = ()
    delete_elements: tuple[SetElement, ...] = ()
    delete_sets: tuple[NamedSet, ...] = ()
    delete_chains: tuple[str, ...] = ()
    add_chains: tuple[Chain, ...] = ()  # declared empty; their rules are in `rules`
    add_sets: tuple[NamedSet, ...] = ()  # with their elements
    add_elements: tuple[SetElement, ...] = ()
    rules: tuple[Chain, ...] = ()  # chains whose rules are (re)written, with the rules
    deferred_chains: tuple[str, ...] = ()  # flushed now, deleted by followup()
    # The definitions (no elements) of the sets whose elements are deleted or added: their key and
    # value types, for a writer that encodes elements itself (netlink.py). Not part of equality.
    element_sets: tuple[NamedSet, ...] = field(default=(), compare=False)

    @property
    def empty(self) -> bool:
        return self == Transaction(self.family, self.table)

    def stats(self) -> PlanStats:
        """Kernel objects written (chains declared or rewritten, sets, elements) and deleted."""
        if self.create is not None:
            c = self.create
            written = len(c.chains) + len(c.sets) + sum(len(s.elements) for s in c.sets)
            return PlanStats(written, 0, f"table created: {len(c.chains)} chains, {len(c.sets)} sets, "
                                         f"{written - len(c.chains) - len(c.sets)} elements")
        chains = len({c.name for c in self.add_chains} | {c.name for c in self.rules})
        elements = len(self.add_elements) + sum(len(s.elements) for s in self.add_sets)
        gone_chains = len(self.delete_chains) + len(self.deferred_chains)
        written = chains + len(self.add_sets) + elements
        deleted = gone_chains + len(self.delete_sets) + len(self.delete_elements)
        return PlanStats(written, deleted, f"{chains} chains, {len(self.add_sets)} sets, {elements} elements written; "
                                           f"{gone_chains} chains, {len(self.delete_sets)} sets, "
                                           f"{len(self.delete_elements)} elements deleted")

    def prelude(self) -> Transaction | None:
        """The dynamic sets this transaction creates, as the transaction of their own sent first (a
        redefined one, deleted and created again, stays in this one)."""
        early = early_sets(self)
        if not early:
            return None
        return Transaction(self.family, self.table, add_sets=early)

    def followup(self) -> Transaction | None:
        if not self.deferred_chains:
            return None
        return Transaction(self.family, self.table, delete_chains=self.deferred_chains)


def early_sets(tx: Transaction) -> tuple[NamedSet, ...]:
    if tx.create is not None:
        return tuple(s for s in tx.create.sets if s.dynamic)
    redefined = {s.name for s in tx.delete_sets}
    return tuple(s for s in tx.add_sets if s.dynamic and s.name not in redefined)


# ── the transaction as an nft script ─────────────────────────────────────────────────────────────

def render_transaction(tx: Transaction) -> str:
    """The `nft -f` script of one transaction (without its prelude and follow-up)."""
    return "".join(line + "\n" for line in script(tx))


def render_prelude(tx: Transaction) -> str:
    """The `nft -f` script of the transaction's prelude (its new dynamic sets, without a size), or ""."""
    early = early_sets(tx)
    if not early:
        return ""
    t = f"{tx.family} {tx.table}"
    lines = [f"add table {t}"] if tx.create is not None else []
    lines.extend(f"add set {t} {s.name} {set_spec(s, size=False)}" for s in early)
    return "".join(line + "\n" for line in lines)


def render_plan(tx: Transaction) -> str:
    """The `nft -f` scripts of the transaction: its prelude of dynamic sets, then the transaction,
    then a deferred second transaction, each after a comment line (the Kernel sends each alone)."""
    pre = render_prelude(tx)
    text = ("# dynamic sets first, alone (no size: see netkit/nft/transaction.py):\n" + pre
            + "# then:\n") if pre else ""
    text += render_transaction(tx)
    follow = tx.followup()
    if follow:
        text += "# second transaction, once the first has committed:\n" + render_plan(follow)
    return text


def script(tx: Transaction) -> Iterator[str]:
    t = f"{tx.family} {tx.table}"
    early = {s.name for s in early_sets(tx)}  # created by the prelude
    if tx.create is not None:
        yield f"add table {t}"
        bare = replace(tx.create, sets=tuple(st.definition() for st in tx.create.sets if st.name not in early),
                       parts=None)
        yield from render(bare).splitlines()
        yield from element_commands("add", t, [(st.name, e) for st in tx.create.sets if not st.dynamic
                                               for e in sorted(st.elements)])
        return
    yield from (f"flush chain {t} {c}" for c in tx.flush_chains)
    yield from element_commands("delete", t, tx.delete_elements, keys_only=True)
    yield from (f"delete {'map' if s.is_map else 'set'} {t} {s.name}" for s in tx.delete_sets)
    yield from (f"delete chain {t} {c}" for c in tx.delete_chains)
    for c in tx.add_chains:
        yield f"add chain {t} {c.name} {{ {hook_line(c.hook)} }}" if c.hook else f"add chain {t} {c.name}"
    for s in tx.add_sets:
        if s.name not in early:
            yield f"add {'map' if s.is_map else 'set'} {t} {s.name} {set_spec(s)}"
    yield from (f"add rule {t} {c.name} {rule}" for c in tx.rules for rule in c.rules)
    for s in tx.add_sets:
        if s.elements and not s.dynamic:
            yield from element_commands("add", t, [(s.name, e) for e in sorted(s.elements)])
    yield from element_commands("add", t, tx.add_elements)


def element_commands(verb: str, t: str, elements: Iterable[SetElement], *, keys_only: bool = False) -> Iterator[str]:
    """One command per set, elements comma-separated (one netlink batch message per set)."""
    by_set: dict[str, list[str]] = {}
    for name, e in elements:
        by_set.setdefault(name, []).append(e.key if keys_only else e.text())
    for name, items in by_set.items():
        yield f"{verb} element {t} {name} {{ {', '.join(items)} }}"
