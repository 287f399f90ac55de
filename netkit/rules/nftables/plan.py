"""plan(committed, desired) -> Transaction: the smallest nft transaction from one table to another
(the Transaction and its nft script: netkit/nft/transaction.py).

Theory of operation. The layout (layout.py) puts everything that changes often into map and set
elements, so most syncs are element adds and deletes — a few bytes of netlink whatever the size of
the table. Only chains whose rules differ are rewritten (flush + add rules); chains that no longer
exist are flushed and deleted; sets whose definition changed (an affinity timeout) are recreated,
and every chain that uses such a set is rewritten with it so the set is unreferenced when deleted.

Order inside the transaction, so every reference resolves and every delete is allowed:
flush rewritten and stale chains → delete elements → delete stale or redefined sets → delete stale
chains → add chains → add sets → add rules → add elements (of new sets, then of existing ones).
Elements go last because the kernel walks a map's elements whenever a rule in another chain binds
it: with the elements added after the rules, loading a table binds empty maps (docs/nftables.md).
A new table is created the same way: its declaration without elements, then every set's elements.

Deferred deletion: kernels before 6.2 refuse to delete, in the same transaction, a chain that a
just-deleted map element still referenced (the element released its reference only at commit). Such
chains are flushed in the transaction and listed in `deferred_chains`; `followup()` is the second,
tiny transaction that deletes them once the first has committed. kube-proxy waits for a later sync;
a second transaction is all the kernel needs, so the Kernel sends it right away.

No table yet (`committed` None): the transaction creates the whole table in one batch.

Dynamic sets first: the transaction's `prelude` (netkit/nft/transaction.py) creates them alone.

Speed: a 10,000-service table holds ~130k elements; hashing them all took ~130 ms of Python per sync.
When both Rulesets are compiled (they carry a `Parts` index, see ruleset.py) — the daemon's case,
which plans against the Ruleset it committed last — `narrow` first finds the service ports whose
Part differs (only those the Compiler names in `desired.since` when it planned against its previous
result, else one identity or digest comparison per port) and the plan is computed over those parts only:
their chains and own sets, the fixed chains, and of each shared set only the elements those parts
contribute. That yields exactly the transaction of the full comparison (an element that must go or
come belongs to a part that changed; a property test compares both), in a few milliseconds.
"""

from __future__ import annotations

import bisect
from dataclasses import replace

from netkit.change import comparable
from netkit.nft.ruleset import Chain, Element, NamedSet, Part, Parts, Ruleset, SetElement
from netkit.nft.transaction import Transaction


def plan(committed: Ruleset | None, desired: Ruleset, *, defer: bool = True) -> Transaction:
    """The transaction that turns the table `committed` (None: absent) into `desired`.

    `defer=False` deletes stale chains in the same transaction (kernels 6.2 and later allow it)."""
    if committed is None:
        return Transaction(desired.family, desired.table, create=desired)
    narrowed = narrow(committed, desired)
    if narrowed is not None:
        committed, desired = narrowed
    old_sets, new_sets = committed.set_map(), desired.set_map()
    old_chains, new_chains = committed.chain_map(), desired.chain_map()
    redefined = {n for n in old_sets.keys() & new_sets.keys() if _compared(old_sets[n]) != _compared(new_sets[n])}
    stale_sets = (old_sets.keys() - new_sets.keys()) | redefined
    rewrite, recreate = chain_changes(old_chains, new_chains, stale_sets)
    stale_chains = sorted(old_chains.keys() - new_chains.keys())
    deleted, added = element_changes(old_sets, new_sets, redefined)
    released = {e.target for _, e in deleted if e.target}
    deferred = tuple(c for c in stale_chains if defer and c in released)
    return Transaction(
        desired.family, desired.table,
        flush_chains=tuple(sorted({*rewrite, *stale_chains, *recreate})),
        delete_elements=tuple(deleted),
        delete_sets=tuple(old_sets[n] for n in sorted(stale_sets)),
        delete_chains=tuple(c for c in [*stale_chains, *sorted(recreate)] if c not in deferred),
        add_chains=tuple(new_chains[c] for c in sorted((new_chains.keys() - old_chains.keys()) | recreate)),
        add_sets=tuple(new_sets[n] for n in sorted((new_sets.keys() - old_sets.keys()) | redefined)),
        add_elements=tuple(added),
        rules=tuple(new_chains[c] for c in sorted({*rewrite, *recreate, *(new_chains.keys() - old_chains.keys())})
                    if new_chains[c].rules),
        deferred_chains=deferred,
        element_sets=tuple(new_sets[n].definition() for n in sorted({n for n, _ in (*deleted, *added)})),
    )


def narrow(committed: Ruleset, desired: Ruleset) -> tuple[Ruleset, Ruleset] | None:
    """Both Rulesets cut down to what can differ: the parts of service ports that changed, the fixed
    chains, and each shared set with only the elements those parts contribute. None when either has
    no valid index or the fixed layer changed (then the full comparison runs)."""
    old, new = committed.indexed(), desired.indexed()
    if old is None or new is None or old.fixed != new.fixed or committed.table != desired.table:
        return None
    before: list[Part] = []
    after: list[Part] = []
    changed = comparable(committed, desired)
    if changed is not None:  # the Compiler says which ports can differ
        for label in changed:
            was, now = old.ports.get(label), new.ports.get(label)
            if was is not None and now is not None and (was is now or was == now):
                continue
            if was is not None:
                before.append(was)
            if now is not None:
                after.append(now)
    else:
        for label, part in old.ports.items():
            other = new.ports.get(label)
            if other is not part and other != part:
                before.append(part)
                if other is not None:
                    after.append(other)
        after.extend(part for label, part in new.ports.items() if label not in old.ports)
    # Only the shared sets these parts have elements in: the others are left out of both sides.
    touched: dict[str, set[Element]] = {}
    for part in (*before, *after):
        for name, e in part.elements:
            touched.setdefault(name, set()).add(e)
    for index in (old, new):  # a contested key: every claim, the unchanged winner among them
        for name, by_key in index.contested.items():
            elements = touched.get(name)
            if elements:
                for e in list(elements):
                    elements.update(by_key.get(e.key, ()))
    return _cut(committed, old, before, touched), _cut(desired, new, after, touched)


def _cut(rs: Ruleset, index: Parts, parts: list[Part], touched: dict[str, set[Element]]) -> Ruleset:
    shared = []
    for name, candidates in touched.items():
        full = _find(rs.sets, name)
        shared.append(replace(full, elements=frozenset(e for e in candidates if e in full.elements)))
    own = [s for part in parts for s in part.sets]
    chains = [*index.fixed.chains, *(c for part in parts for c in part.chains)]
    return Ruleset.of(rs.family, [*shared, *own], chains, rs.table)


def _find(sets: tuple[NamedSet, ...], name: str) -> NamedSet:
    """A set of a Ruleset by name (its sets are sorted by name)."""
    i = bisect.bisect_left(sets, name, key=lambda s: s.name)
    if i == len(sets) or sets[i].name != name:
        raise KeyError(name)
    return sets[i]


def _compared(s: NamedSet) -> NamedSet:
    """What a set's recreation depends on: its definition, without the size of a dynamic set (the
    kernel sets 65535 once a rule binds it; created alone it has none: see `prelude`)."""
    d = s.definition()
    return replace(d, size=None) if d.dynamic else d


def chain_changes(old: dict[str, Chain], new: dict[str, Chain], stale_sets: set[str]) -> tuple[set[str], set[str]]:
    """(chains to rewrite in place, chains to delete and recreate because their hook changed)."""
    rewrite: set[str] = set()
    recreate: set[str] = set()
    for name in old.keys() & new.keys():
        if old[name].hook != new[name].hook:
            recreate.add(name)
        elif old[name].rules != new[name].rules or (stale_sets and old[name].set_refs() & stale_sets):
            rewrite.add(name)
    return rewrite, recreate


def element_changes(old: dict[str, NamedSet], new: dict[str, NamedSet],
                    redefined: set[str]) -> tuple[list[SetElement], list[SetElement]]:
    """Element deletes and adds for sets that exist on both sides with the same definition.
    A map element whose value changed is deleted and added again (nft 1.0.6 has no replace)."""
    deleted: list[SetElement] = []
    added: list[SetElement] = []
    for name in sorted(old.keys() & new.keys() - redefined):
        if new[name].dynamic:
            continue
        before, after = old[name].elements, new[name].elements
        deleted.extend((name, e) for e in sorted(before - after))
        added.extend((name, e) for e in sorted(after - before))
    return deleted, added
