"""A fake iptables kernel with the real one's all-or-nothing semantics, for unit and property tests.

It holds a Ruleset and applies a Plan the way `iptables-restore --noflush` would: every jump must
name an existing chain or a known target, a deleted chain must not stay referenced, and any refusal
leaves the previous rules untouched. `tests/netns` checks it against the real kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from netkit.errors import KernelError
from netkit.model import IPFamily
from netkit.rules.iptables.names import is_owned
from netkit.rules.iptables.plan import Plan, apply_to, render_plan
from netkit.rules.iptables.rule import read
from netkit.rules.iptables.ruleset import BUILTIN_CHAINS, Ruleset, is_builtin

TARGETS = frozenset({"ACCEPT", "DROP", "RETURN", "REJECT", "MARK", "DNAT", "SNAT", "MASQUERADE", "LOG"})


@dataclass
class FakeKernel:
    family: IPFamily = IPFamily.IPV4
    state: Ruleset = field(default_factory=lambda: Ruleset(IPFamily.IPV4, {
        t: {c: () for c in BUILTIN_CHAINS[t]} for t in ("mangle", "filter", "nat")}))
    payloads: list[str] = field(default_factory=list)
    refuse_next: bool = False  # simulate a payload the kernel refuses

    def dump(self) -> Ruleset:
        return self.state

    @property
    def writes(self) -> frozenset[str]:
        return frozenset()  # a fake writes no kernel

    def dump_reusing(self, committed: Ruleset) -> Ruleset:
        return self.dump()

    def prefetch(self) -> bool:
        """Nothing to read before the dump itself."""
        return False

    def apply(self, plan: Plan, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        payload = render_plan(plan)
        after = apply_to(self.state, plan)
        problem = "injected refusal" if self.refuse_next else _check(after)
        self.refuse_next = False
        if problem:
            raise KernelError(f"iptables-restore: {problem}", payload=payload)
        self.payloads.append(payload)
        self.state = after

    def cleanup(self) -> int:
        """As IptablesKernel.cleanup: netkit's jumps out of the built-in chains, then its chains."""
        tables: dict[str, dict[str, tuple[str, ...]]] = {}
        removed = 0
        for table, chains in self.state.tables.items():
            kept = {c: r for c, r in chains.items() if not is_owned(c)}
            removed += len(chains) - len(kept)
            tables[table] = {c: tuple(x for x in r if not is_owned(read(x).target or "")) if is_builtin(table, c)
                             else r for c, r in kept.items()}
        self.state = Ruleset(self.family, tables)
        return removed


def _check(rs: Ruleset) -> str | None:
    for table, chains in rs.tables.items():
        for chain, rules in chains.items():
            for rule in rules:
                tokens = rule.split()
                for flag in ("-j", "-g"):
                    if flag in tokens:
                        target = tokens[tokens.index(flag) + 1]
                        if target not in TARGETS and target not in chains:
                            return f"{table} {chain}: jump to missing chain {target}"
    return None
