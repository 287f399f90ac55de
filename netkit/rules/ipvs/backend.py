"""IPVS mode behind the common interface: this module is a `netkit.rules.backend.Backend[Ruleset, Plan]`
(its functions are the members; mypy checks it where netkit.rules.registry hands it on)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.change import comparable
from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.rules.backend import JSONValue
from netkit.rules.ipvs import compile as _compile
from netkit.rules.ipvs import keep as _keep
from netkit.rules.ipvs import plan as plan_mod
from netkit.rules.ipvs import ruleset as rs
from netkit.rules.ipvs import summary as _summary
from netkit.rules.ipvs import trace as _trace
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.tracing import Outcome, Packet

name = "ipvs"

__all__ = ["compile", "compiler", "describe_plan", "foreign", "holds_rules", "keep", "kernel", "live_names",
           "name", "objects", "plan", "render", "render_plan", "rule_counts", "summarize", "to_json", "trace"]


def compile(state: NodeState, config: Config, family: IPFamily) -> rs.Ruleset:  # noqa: A001 (the stage name)
    return _compile.compile(state, config, family)


def render(ruleset: rs.Ruleset) -> str:
    return rs.render(ruleset)


def compiler(config: Config, family: IPFamily) -> _compile.Compiler:
    """A compiler that remembers unchanged service ports between calls (for the daemon)."""
    return _compile.Compiler(config, family)


def plan(committed: rs.Ruleset, desired: rs.Ruleset) -> plan_mod.Plan:
    """Comparing only what netkit.change.comparable names (the same plan:
    tests/unit/test_ipvs_incremental.py); an IPVS dump names nothing, so a full sync compares all."""
    return plan_mod.plan(committed, desired, only=comparable(committed, desired))


def render_plan(p: plan_mod.Plan) -> str:
    return plan_mod.render_plan(p)


def describe_plan(p: plan_mod.Plan) -> str:
    return plan_mod.describe(p)


def summarize(ruleset: rs.Ruleset) -> Mapping[str, tuple[str, ...]]:
    return _summary.summarize(ruleset)


def objects(ruleset: rs.Ruleset, names: Mapping[str, str]) -> dict[str, set[str]]:
    return _summary.objects(ruleset, names)


def live_names(desired: rs.Ruleset) -> Mapping[str, tuple[str, bool]]:
    return _summary.live_names(desired)


def keep(live: rs.Ruleset, desired: rs.Ruleset, services: Collection[str]) -> rs.Ruleset:
    return _keep.keep(live, desired, services)


def holds_rules(ruleset: rs.Ruleset) -> bool:
    """A virtual server or a set of netkit's (a dump holds nothing else)."""
    return bool(ruleset.services or ruleset.sets)


def rule_counts(base: rs.Ruleset, p: plan_mod.Plan, desired: rs.Ruleset, total: Mapping[str, int] | None) -> None:
    """None: the iptables rule gauges exist in iptables mode only (as in kube-proxy)."""
    return None


def foreign(live: rs.Ruleset, desired: rs.Ruleset) -> list[str]:
    """Nothing: a dump holds only netkit's own virtual servers and sets (see plan.owned)."""
    return []


def trace(ruleset: rs.Ruleset, packet: Packet) -> list[Outcome]:
    return _trace.trace(ruleset, packet)


def to_json(ruleset: rs.Ruleset) -> JSONValue:
    return rs.to_json(ruleset)


def kernel(config: Config, family: IPFamily, netns: str | None) -> IPVSKernel:
    return IPVSKernel(family, netns, config.iptables_backend,
                      (config.ipvs_tcp_timeout, config.ipvs_tcp_fin_timeout, config.ipvs_udp_timeout))
