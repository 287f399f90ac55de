"""The iptables backend behind the common Backend interface (netkit.rules.backend)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.rules.iptables import compile as _compile
from netkit.rules.iptables import plan as _plan
from netkit.rules.iptables import ruleset as _ruleset
from netkit.rules.iptables import summary as _summary
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.trace import trace

name = "iptables"

__all__ = ["compile", "describe_plan", "kernel", "name", "plan", "render", "render_plan", "summarize", "trace"]


def compile(state: NodeState, config: Config, family: IPFamily) -> _ruleset.Ruleset:
    return _compile.compile(state, config, family)


def compiler(config: Config, family: IPFamily) -> _compile.Compiler:
    """A compiler that remembers unchanged service ports between calls (for the daemon)."""
    return _compile.Compiler(config, family)


def render(ruleset: _ruleset.Ruleset) -> str:
    return _ruleset.render(ruleset)


def plan(committed: _ruleset.Ruleset, desired: _ruleset.Ruleset, *,
         only: Collection[str] | None = None) -> _plan.Plan:
    return _plan.plan(committed, desired, only=only)


def render_plan(p: _plan.Plan) -> str:
    return _plan.render_plan(p)


def summarize(ruleset: _ruleset.Ruleset) -> Mapping[str, tuple[str, ...]]:
    return _summary.summarize(ruleset)


def kernel(config: Config, family: IPFamily, netns: str | None) -> IptablesKernel:
    return IptablesKernel(family, netns, config.iptables_backend)


def describe_plan(p: _plan.Plan) -> str:
    return _plan.describe(p)
