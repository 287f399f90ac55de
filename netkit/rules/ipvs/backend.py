"""IPVS mode behind `netkit.rules.backend.Backend[Ruleset, Plan]`: what `--mode ipvs` of compile/diff/apply uses."""

from __future__ import annotations

from collections.abc import Mapping

from netkit.config import Config
from netkit.model import IPFamily, NodeState
from netkit.rules.backend import JSONValue
from netkit.rules.ipvs import compile as _compile
from netkit.rules.ipvs import plan as plan_mod
from netkit.rules.ipvs import ruleset as rs
from netkit.rules.ipvs import trace as _trace
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.tracing import Outcome, Packet


class IPVSBackend:
    name = "ipvs"

    def compile(self, state: NodeState, config: Config, family: IPFamily) -> rs.Ruleset:
        return _compile.compile(state, config, family)

    def render(self, ruleset: rs.Ruleset) -> str:
        return rs.render(ruleset)

    def compiler(self, config: Config, family: IPFamily) -> _compile.Compiler:
        """A compiler that remembers unchanged service ports between calls (for the daemon)."""
        return _compile.Compiler(config, family)

    def plan(self, committed: rs.Ruleset, desired: rs.Ruleset) -> plan_mod.Plan:
        """When `desired` came from a Compiler whose previous result is `committed`, only what it
        says can differ is compared (the same plan: tests/unit/test_ipvs_incremental.py)."""
        since = desired.since
        only = since.changed if since is not None and since.applies_to(committed) else None
        return plan_mod.plan(committed, desired, only=only)

    def render_plan(self, plan: plan_mod.Plan) -> str:
        return plan_mod.render_plan(plan)

    def describe_plan(self, plan: plan_mod.Plan) -> str:
        return plan_mod.describe(plan)

    def summarize(self, ruleset: rs.Ruleset) -> Mapping[str, tuple[str, ...]]:
        """Service port ("ns/svc:port/proto", from the clusterIP virtual server's comment) → its real
        servers with a non-zero weight. A kernel dump carries no names: its virtual servers are
        keyed by "proto IP:port" instead."""
        out: dict[str, tuple[str, ...]] = {}
        for vs in ruleset.services:
            if vs.comment and vs.role != "cluster IP":
                continue
            key = f"{vs.port_name}/{vs.protocol.lower}" if vs.comment else str(vs.key)
            out[key] = tuple(rs.hostport(r.ip, r.port) for r in vs.reals if r.weight > 0)
        return out

    def foreign(self, live: rs.Ruleset, desired: rs.Ruleset) -> list[str]:
        """Nothing: a dump holds only netkit's own virtual servers and sets (see plan.owned)."""
        return []

    def trace(self, ruleset: rs.Ruleset, packet: Packet) -> list[Outcome]:
        return _trace.trace(ruleset, packet)

    def to_json(self, ruleset: rs.Ruleset) -> JSONValue:
        return rs.to_json(ruleset)

    def kernel(self, config: Config, family: IPFamily, netns: str | None) -> IPVSKernel:
        return IPVSKernel(family, netns, config.iptables_backend,
                          (config.ipvs_tcp_timeout, config.ipvs_tcp_fin_timeout, config.ipvs_udp_timeout))


BACKEND = IPVSBackend()
