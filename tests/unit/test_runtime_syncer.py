"""The syncer over the fake iptables kernel: partial syncs write only the chains that changed and never
read the kernel; a full sync reads it and repairs drift; a refused apply keeps the previous rules and
makes the next sync read the kernel again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from netkit.config import Config
from netkit.model import IPFamily, NodeState, build
from netkit.rules.iptables import backend as ipt
from netkit.rules.iptables.fake import FakeKernel
from netkit.rules.iptables.ruleset import Ruleset
from netkit.rules.iptables.summary import summarize
from netkit.runtime.syncer import Syncer
from tests.factories import endpoint, node, objects, service, slice_

CONFIG = Config(node_name="node-a")


@dataclass
class CountingKernel(FakeKernel):
    dumps: int = 0

    def dump(self) -> Ruleset:
        self.dumps += 1
        return super().dump()


@dataclass
class FakeBackend:
    """The iptables backend with the fake kernel behind it."""

    kernels: list[CountingKernel] = field(default_factory=list)

    def compile(self, state: NodeState, config: Config, family: IPFamily) -> Any:
        return ipt.compile(state, config, family)

    def compiler(self, config: Config, family: IPFamily) -> Any:
        return ipt.compiler(config, family)

    def plan(self, committed: Any, desired: Any) -> Any:
        return ipt.plan(committed, desired)

    def kernel(self, config: Config, family: IPFamily, netns: str | None) -> CountingKernel:
        k = CountingKernel(family)
        self.kernels.append(k)
        return k


def cluster(a: list[str], b: list[str]) -> NodeState:
    docs = [node(), service("a", ip="10.96.0.1"), service("b", ip="10.96.0.2"),
            slice_("a", endpoints=[endpoint(ip) for ip in a]), slice_("b", endpoints=[endpoint(ip) for ip in b])]
    return build(objects(*docs), "node-a", ())


def syncer() -> tuple[Syncer, CountingKernel]:
    backend = FakeBackend()
    s = Syncer(CONFIG, backend, (IPFamily.IPV4,))  # type: ignore[arg-type]
    return s, backend.kernels[0]


def chains_in(payload: str) -> set[str]:
    return {line[1:].split()[0] for line in payload.splitlines() if line.startswith(":")}


def test_partial_sync_writes_only_the_changed_service_and_never_reads_the_kernel() -> None:
    s, kernel = syncer()
    first = s.sync(cluster(["10.244.1.1"], ["10.244.2.1"]), full=True)
    assert first.error is None and kernel.dumps == 1
    assert summarize(kernel.state)["default/b:http/tcp"] == ("10.244.2.1:8080",)
    chains_a = {c for c in kernel.state.chains("nat") if "KUBE-S" in c and c not in ("KUBE-SERVICES",)}

    result = s.sync(cluster(["10.244.1.1"], ["10.244.2.1", "10.244.2.2"]), full=False)

    assert result.error is None and not result.full
    assert kernel.dumps == 1, "a partial sync plans against the committed rules in memory"
    written = chains_in(kernel.payloads[-1])
    assert written and result.chains_written == len(written)
    svc_a = {c for c in chains_a if any("10.244.1.1" in r for r in kernel.state.rules("nat", c))}
    assert not (written & svc_a), "service a did not change, none of its chains is written"
    assert summarize(kernel.state)["default/b:http/tcp"] == ("10.244.2.1:8080", "10.244.2.2:8080")


def test_an_unchanged_state_writes_nothing() -> None:
    s, kernel = syncer()
    s.sync(cluster(["10.244.1.1"], []), full=True)
    before = len(kernel.payloads)
    result = s.sync(cluster(["10.244.1.1"], []), full=False)
    assert not result.changed and result.chains_written == 0 and len(kernel.payloads) == before


def test_full_sync_reads_the_kernel_and_repairs_drift() -> None:
    s, kernel = syncer()
    state = cluster(["10.244.1.1"], ["10.244.2.1"])
    s.sync(state, full=True)
    good = kernel.state
    tables = {t: dict(c) for t, c in good.tables.items()}
    victim = next(c for c in tables["nat"] if c.startswith("KUBE-SEP-"))
    tables["nat"][victim] = ()  # someone flushed a chain
    kernel.state = Ruleset(good.family, tables)

    assert not s.sync(state, full=False).changed, "a partial sync does not see drift (no kernel read)"
    result = s.sync(state, full=True)
    assert result.changed and kernel.dumps == 2
    assert chains_in(kernel.payloads[-1]) == {victim}, "only the damaged chain is rewritten"
    assert kernel.state == good


def test_full_sync_after_a_flushed_table_restores_everything() -> None:
    s, kernel = syncer()
    state = cluster(["10.244.1.1"], ["10.244.2.1"])
    s.sync(state, full=True)
    good = kernel.state
    kernel.state = FakeKernel().state  # the tables flushed (the canary chain is gone too)
    s.sync(state, full=True)
    assert kernel.state == good


def test_a_refused_apply_keeps_the_rules_and_the_next_sync_reads_the_kernel() -> None:
    s, kernel = syncer()
    s.sync(cluster(["10.244.1.1"], ["10.244.2.1"]), full=True)
    good = kernel.state
    kernel.refuse_next = True
    failed = s.sync(cluster(["10.244.1.1"], ["10.244.2.9"]), full=False)
    assert failed.error and "refusal" in failed.error
    assert kernel.state == good, "the kernel took nothing"
    assert summarize(kernel.state)["default/b:http/tcp"] == ("10.244.2.1:8080",)

    ok = s.sync(cluster(["10.244.1.1"], ["10.244.2.9"]), full=False)
    assert ok.error is None and kernel.dumps == 2, "after a failure the kernel is read again"
    assert summarize(kernel.state)["default/b:http/tcp"] == ("10.244.2.9:8080",)


@pytest.mark.parametrize("mode", ["iptables", "nftables", "ipvs"])
def test_every_mode_reports_what_its_plan_wrote(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync's `written` is its plan's own count (PlanStats: chains; nft chains, sets and
    elements; IPVS servers and entries), not "1 chain" for whatever nftables or IPVS wrote."""
    from netkit.rules.registry import backend
    from tests.unit.test_backend_conformance import FAKES

    be: Any = backend(mode)
    fakes: list[Any] = []
    monkeypatch.setattr(be, "kernel", lambda config, family, netns: fakes.append(FAKES[mode](family)) or fakes[-1])
    s = Syncer(Config(mode=mode, node_name="node-a"), be, (IPFamily.IPV4,))
    before, after = cluster(["10.244.1.1"], ["10.244.2.1"]), cluster(["10.244.1.1"], ["10.244.2.1", "10.244.2.2"])
    assert s.sync(before, full=True).error is None
    committed = s.committed[IPFamily.IPV4]
    expected = be.plan(committed, be.compile(after, s.config, IPFamily.IPV4)).stats()
    result = s.sync(after, full=False)
    assert result.error is None and result.changed
    assert result.written == expected.written + expected.deleted > 1
