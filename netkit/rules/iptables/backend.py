"""The iptables backend behind the common interface: this module is a
`netkit.rules.backend.Backend[Ruleset, Plan]` (its functions are the members; mypy checks it where
netkit.rules.registry hands it on)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.change import comparable
from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.rules.backend import JSONValue, RuleCounts
from netkit.rules.iptables import compile as _compile
from netkit.rules.iptables import keep as _keep
from netkit.rules.iptables import plan as _plan
from netkit.rules.iptables import ruleset as _ruleset
from netkit.rules.iptables import summary as _summary
from netkit.rules.iptables import trace as _trace
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.names import is_owned
from netkit.rules.tracing import Outcome, Packet

name = "iptables"

__all__ = ["compile", "compiler", "describe_plan", "foreign", "holds_rules", "keep", "kernel", "live_names",
           "name", "objects", "plan", "render", "render_plan", "rule_counts", "summarize", "to_json", "trace"]

Ruleset = _ruleset.Ruleset
Plan = _plan.Plan


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:
    return _compile.compile(state, config, family)


def compiler(config: Config, family: IPFamily) -> _compile.Compiler:
    """A compiler that remembers unchanged service ports between calls (for the daemon)."""
    return _compile.Compiler(config, family)


def render(ruleset: Ruleset) -> str:
    return _ruleset.render(ruleset)


def to_json(ruleset: Ruleset) -> JSONValue:
    return {"tables": {t: {c: list(r) for c, r in chains.items()} for t, chains in ruleset.tables.items()}}


def plan(committed: Ruleset, desired: Ruleset) -> Plan:
    """The plan, comparing only the chains netkit.change.comparable names: a dump read against the
    compiler's previous result (Kernel.dump_reusing) says which chains it found different. (Where
    it names none, everything is compared: a plan of only some chains would list them in another
    order, which `diff` prints.)"""
    return _plan.plan(committed, desired, only=comparable(committed, desired, frozenset.union))


def render_plan(p: Plan) -> str:
    return _plan.render_plan_with_jumps(p)


def describe_plan(p: Plan) -> str:
    return _plan.describe(p)


def summarize(ruleset: Ruleset) -> Mapping[str, tuple[str, ...]]:
    return _summary.summarize(ruleset)


def objects(ruleset: Ruleset, names: Mapping[str, str]) -> dict[str, set[str]]:
    return _summary.objects(ruleset)


def live_names(desired: Ruleset) -> Mapping[str, tuple[str, bool]]:
    """Nothing: a dump names every service port in its rules' comments."""
    return {}


def keep(live: Ruleset, desired: Ruleset, services: Collection[str]) -> Ruleset:
    return _keep.keep(live, desired, services)


def holds_rules(ruleset: Ruleset) -> bool:
    """A chain of netkit's in any table."""
    return any(is_owned(chain) for chains in ruleset.tables.values() for chain in chains)


def rule_counts(base: Ruleset, p: Plan, desired: Ruleset, total: Mapping[str, int] | None) -> RuleCounts:
    """A full count of `desired` when no total is known (the first and every full sync), else the
    total moved by the chains the plan writes and deletes."""
    if total is None:
        return RuleCounts(_plan.count_rules(desired), _plan.plan_rules(p, base, {})[1])
    now, last = _plan.plan_rules(p, base, total)
    return RuleCounts(now, last)


def foreign(live: Ruleset, desired: Ruleset) -> list[str]:
    """Nothing: the planner writes only netkit's own chains and never touches anyone else's."""
    return []


def trace(ruleset: Ruleset, packet: Packet) -> list[Outcome]:
    return _trace.trace(ruleset, packet)


def kernel(config: Config, family: IPFamily, netns: str | None) -> IptablesKernel:
    return IptablesKernel(family, netns, config.iptables_backend)

