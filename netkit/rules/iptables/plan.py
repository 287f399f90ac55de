"""plan(committed, desired) → Plan: the smallest change that turns what the kernel holds into what is wanted.

- A netkit chain (names.is_owned) is written only when its rules differ from the committed ones or it
  is new; declaring it in the payload (`:CHAIN - [0:0]`) flushes it first. Chains not mentioned are
  untouched by `iptables-restore --noflush` — this is what makes partial syncs cheap (KEP-3453's
  idea, here a plain comparison of two Rulesets rather than change tracking threaded through the
  compiler).
- A netkit chain that is no longer wanted is flushed and deleted (`-X`) in the same batch; whatever
  referenced it has changed too, so it is rewritten in that batch, and the kernel applies it all or
  nothing.
- Entry jumps in the built-in chains are never part of the payload (`--noflush` does not flush
  built-in chains, so a restored jump would be duplicated); missing ones are listed for
  `iptables -C/-I` after the restore.
- Chains netkit does not own, and rules in built-in chains it did not write, are never touched.

`render_plan` gives the `iptables-restore --noflush` payload; an empty plan renders to "".
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from netkit.change import PlanStats
from netkit.model import IPFamily
from netkit.rules.iptables.names import is_owned
from netkit.rules.iptables.ruleset import BUILTIN_CHAINS, TABLE_ORDER, Ruleset


@dataclass(frozen=True, slots=True)
class Jump:
    table: str
    chain: str  # a built-in chain
    rule: str  # canonical rule text
    position: int  # 1-based position it should take (inserted in this order)


@dataclass(frozen=True, slots=True)
class Plan:
    family: IPFamily
    write: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    delete: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    jumps: tuple[Jump, ...] = ()
    old: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)  # for human diffs

    @property
    def empty(self) -> bool:
        return not any(self.write.values()) and not any(self.delete.values()) and not self.jumps

    @property
    def chains_written(self) -> int:
        return sum(len(c) for c in self.write.values())

    def stats(self) -> PlanStats:
        deleted = sum(len(c) for c in self.delete.values())
        return PlanStats(self.chains_written, deleted,
                         f"{self.chains_written} chains written, {deleted} deleted, {len(self.jumps)} jumps added")


def plan(committed: Ruleset, desired: Ruleset, *, full: bool = False,
         only: Collection[str] | None = None) -> Plan:
    """`full` rewrites every netkit chain (a full sync after a failure or a detected flush).
    `only`, when given, names every chain (in any table) that can differ between the two — the
    compiler knows this for the ruleset it compiled last — so the others are not even compared; the
    plan is the same as without it (a property test checks)."""
    write: dict[str, dict[str, tuple[str, ...]]] = {}
    delete: dict[str, tuple[str, ...]] = {}
    old: dict[str, dict[str, tuple[str, ...]]] = {}
    for table in _tables(committed, desired):
        have = committed.chains(table)
        want = desired.chains(table)
        builtins = BUILTIN_CHAINS.get(table, ())
        candidates = want if only is None or full else [c for c in only if c in want]
        # `is` first: a daemon plans against what it compiled last time, and unchanged chains are the
        # very same tuples (the Compiler reuses them), so most chains cost one pointer comparison.
        changed = {c: want[c] for c in candidates
                   if (full or (h := have.get(c)) is not want[c] and h != want[c]) and c not in builtins}
        gone = tuple(c for c in (have if only is None else [c for c in only if c in have])
                     if c not in want and is_owned(c))
        if changed:
            write[table] = changed
            old[table] = {c: have[c] for c in changed if c in have}
        if gone:
            delete[table] = gone
            old.setdefault(table, {}).update({c: have[c] for c in gone})
    return Plan(desired.family, write, delete, _missing_jumps(committed, desired), old)


def _tables(a: Ruleset, b: Ruleset) -> list[str]:
    names = set(a.tables) | set(b.tables)
    return sorted(names, key=lambda t: (TABLE_ORDER.index(t) if t in TABLE_ORDER else 99, t))


def _missing_jumps(committed: Ruleset, desired: Ruleset) -> tuple[Jump, ...]:
    out: list[Jump] = []
    for table, chains in desired.tables.items():
        for chain in BUILTIN_CHAINS.get(table, ()):
            rules = chains.get(chain)
            if rules is None:
                continue
            current = list(committed.rules(table, chain))
            for index, rule in enumerate(rules):
                if rule not in current:
                    at = min(index, len(current))  # the kernel refuses a position past the end
                    current.insert(at, rule)
                    out.append(Jump(table, chain, rule, at + 1))
    return tuple(out)


# New per-service chains in the order they can be created: each refers only to chains before it
# (KUBE-MARK-MASQ refers to none; SEP → MARK-MASQ; SVC/SVL → SEP; EXT → SVC/SVL; FW → EXT).
_CREATION_ORDER = ("KUBE-MARK-MASQ", "KUBE-SEP-", "KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-")


def batches(p: Plan, size: int) -> list[Plan]:
    """`p` as a sequence of plans that each write at most about `size` chains and jump to at most
    about `size` distinct other chains, for iptables-nft, whose `--noflush` restore time grows with
    the square of both in one batch (measured: 1,000 services take 6 s in one batch, 0.8 s loaded
    whole; 10,000 never finished in 10 minutes; 2,000 new chains jumping to 20,000 distinct existing
    ones 10 s, to 2,000 of them 0.25 s, to one 0.35 s — so service chains, ten endpoint jumps each,
    go ~180 to a batch).
    Chains that do not exist yet come first, in creation order, so nothing refers to a chain a later
    batch creates; everything that changes what traffic sees — the shared chains, rewrites of existing
    chains, deletions and jumps — goes in the last batch, which stays one atomic restore. A failure
    part-way leaves only new, unreferenced chains behind, which the next full sync finds equal."""
    if p.chains_written <= size:
        return [p]
    early: list[tuple[int, str, str, tuple[str, ...]]] = []
    final: dict[str, dict[str, tuple[str, ...]]] = {}
    for table, chains in p.write.items():
        existed = p.old.get(table, {})
        for chain, rules in chains.items():
            rank = next((i for i, prefix in enumerate(_CREATION_ORDER) if chain.startswith(prefix)), -1)
            if chain not in existed and rank >= 0:
                early.append((rank, table, chain, rules))
            else:
                final.setdefault(table, {})[chain] = rules
    early.sort(key=lambda item: item[0])
    out: list[Plan] = []
    write: dict[str, dict[str, tuple[str, ...]]] = {}
    count, targets = 0, set[str]()
    for _, table, chain, rules in early:
        jumps = _chain_targets(rules)
        if count and (count >= size or len(targets) + len(jumps - targets) > size):
            out.append(Plan(p.family, write))
            write, count, targets = {}, 0, set()
        write.setdefault(table, {})[chain] = rules
        count += 1
        targets |= jumps
    if write:
        out.append(Plan(p.family, write))
    out.append(Plan(p.family, final, p.delete, p.jumps, p.old))
    return out


def _chain_targets(rules: tuple[str, ...]) -> set[str]:
    """The KUBE- chains `rules` jump (-j) or go (-g) to, read as words: only the batch sizes depend
    on it (a comment that looked like a jump would make a batch smaller, nothing else). Not
    rule.target_of: at 10,000 services its full parse of the 337,000 new rules made `batches`
    take 2.0 s instead of 0.4 s, and pushed everything else out of its 65,536-rule cache."""
    out = set()
    for rule in rules:
        words = rule.split()
        for i, word in enumerate(words[:-1]):
            if word in ("-j", "-g") and words[i + 1].startswith("KUBE-"):
                out.add(words[i + 1])
    return out


def render_plan(p: Plan) -> str:
    """The `iptables-restore --noflush` payload: declare (flush) every chain written or deleted,
    append the new rules, then delete the stale chains."""
    return "".join(render_plan_lines(p))


def render_plan_with_jumps(p: Plan) -> str:
    """Everything apply sends: the restore payload, then the entry jumps it inserts where missing
    (apply runs `iptables -C`, then `-I`; written here as restore lines that do the same)."""
    jumps: dict[str, list[Jump]] = {}
    for j in p.jumps:
        jumps.setdefault(j.table, []).append(j)
    tail = "".join(f"*{table}\n" + "".join(f"-I {j.chain} {j.position} {j.rule}\n" for j in js) + "COMMIT\n"
                   for table, js in jumps.items())
    return render_plan(p) + tail


def render_plan_lines(p: Plan) -> Iterator[str]:
    """The same payload line by line (each ending in a newline), for streaming into the tool."""
    for table in sorted(set(p.write) | set(p.delete),
                        key=lambda t: (TABLE_ORDER.index(t) if t in TABLE_ORDER else 99, t)):
        chains = p.write.get(table, {})
        gone = p.delete.get(table, ())
        if not chains and not gone:
            continue
        yield f"*{table}\n"
        for c in (*chains, *gone):
            yield f":{c} - [0:0]\n"
        for chain, rules in chains.items():
            prefix = f"-A {chain} "
            for r in rules:
                yield f"{prefix}{r}\n"
        for c in gone:
            yield f"-X {c}\n"
        yield "COMMIT\n"


def apply_to(ruleset: Ruleset, p: Plan) -> Ruleset:
    """What the kernel holds after a successful apply of `p` (pure; the fake kernel and the daemon's
    in-memory committed state use it)."""
    tables = {t: dict(c) for t, c in ruleset.tables.items()}
    for table, chains in p.write.items():
        tables.setdefault(table, {}).update(chains)
    for table, gone in p.delete.items():
        for c in gone:
            tables.get(table, {}).pop(c, None)
    for j in p.jumps:
        rules = list(tables.setdefault(j.table, {}).get(j.chain, ()))
        rules.insert(min(j.position - 1, len(rules)), j.rule)
        tables[j.table][j.chain] = tuple(rules)
    return Ruleset(ruleset.family, tables)


def describe(p: Plan) -> str:
    """A plan for people: a unified diff per chain (live → desired), then the jumps to insert."""
    lines: list[str] = []
    for table, chains in p.write.items():
        for chain, rules in chains.items():
            lines += _chain_diff(table, chain, p.old.get(table, {}).get(chain), rules)
    for table, gone in p.delete.items():
        for chain in gone:
            lines += _chain_diff(table, chain, p.old.get(table, {}).get(chain, ()), None)
    tool = "ip6tables" if p.family is IPFamily.IPV6 else "iptables"
    lines += [f"+ {tool} -t {j.table} -I {j.chain} {j.position} {j.rule}" for j in p.jumps]
    return "\n".join(lines) + ("\n" if lines else "")


def _chain_diff(table: str, chain: str, old: tuple[str, ...] | None, new: tuple[str, ...] | None) -> list[str]:
    before = [f"-A {chain} {r}" for r in old or ()]
    after = [f"-A {chain} {r}" for r in new or ()]
    head_old = f"live {table} {chain}" if old is not None else "/dev/null"
    head_new = f"desired {table} {chain}" if new is not None else "/dev/null"
    if not before and not after:  # an empty chain created or deleted
        return [f"--- {head_old}", f"+++ {head_new}", "@@ (empty chain) @@"]
    return list(difflib.unified_diff(before, after, fromfile=head_old, tofile=head_new, lineterm="", n=1))


def count_rules(ruleset: Ruleset | None) -> dict[str, int]:
    """Rules per table of an iptables Ruleset (a full count: done on full syncs)."""
    return {table: sum(len(rules) for rules in chains.values())
            for table, chains in (ruleset.tables if ruleset is not None else {}).items()}


def plan_rules(plan: Plan, before: Ruleset, total: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(rules per table after a partial sync, rules written by it) from its iptables Plan and the
    ruleset it was planned against: only the chains the plan touches are looked at."""
    old_tables = before.tables
    new_total = dict(total)
    last: dict[str, int] = {}
    for table, chains in plan.write.items():
        old = old_tables.get(table, {})
        last[table] = sum(len(rules) for rules in chains.values())
        new_total[table] = new_total.get(table, 0) + last[table] - sum(len(old.get(c, ())) for c in chains)
    for table, names in plan.delete.items():
        old = old_tables.get(table, {})
        new_total[table] = new_total.get(table, 0) - sum(len(old.get(c, ())) for c in names)
    return new_total, last
