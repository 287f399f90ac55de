"""Every backend through every member of netkit.rules.backend.Backend, over its fake kernel: what the
daemon, `compile`, `diff`, `apply` and `trace` rely on holds for iptables, nftables and IPVS alike.
(mypy checks the signatures: registry.with_backend hands each BACKEND to code typed Backend[R, P].)"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from ipaddress import ip_address
from typing import Any

import pytest

from netkit.config import Config
from netkit.model import IPFamily, NodeState, build
from netkit.rules import summary
from netkit.rules.backend import PlanStats
from netkit.rules.iptables.fake import FakeKernel as IptablesFake
from netkit.rules.ipvs.fake import FakeKernel as IPVSFake
from netkit.rules.nftables.fake import FakeKernel as NftFake
from netkit.rules.registry import MODES, backend, with_backend
from netkit.rules.tracing import Packet
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES

CONFIG = Config(node_name="node-a")
FAKES: dict[str, Callable[[IPFamily], Any]] = {
    "iptables": IptablesFake,
    "nftables": lambda f: NftFake("ip" if f is IPFamily.IPV4 else "ip6"),
    "ipvs": IPVSFake,
}


def state(*skip: str) -> NodeState:
    files = [str(p) for p in sorted(EXAMPLES.glob("*.yaml")) if not p.name.startswith(skip)]
    return build(load(files).objects, "node-a", CONFIG.node_ips)


@pytest.mark.parametrize("mode", MODES)
def test_with_backend_and_backend_name_the_same_object(mode: str) -> None:
    be: Any = backend(mode)
    assert with_backend(mode, lambda b: b) is be and be.name == mode


@pytest.mark.parametrize("family", [IPFamily.IPV4, IPFamily.IPV6])
@pytest.mark.parametrize("mode", MODES)
def test_every_member(mode: str, family: IPFamily) -> None:
    be: Any = backend(mode)
    desired = be.compile(state(), CONFIG, family)
    assert be.render(desired).strip()
    structured = be.to_json(desired)
    assert isinstance(structured, dict) and "text" not in structured  # structured, not {"text": …}
    assert json.loads(json.dumps(structured)) == structured
    assert ("10.96.0.10" if family is IPFamily.IPV4 else "fd00:96::14") in json.dumps(structured)

    kernel = FAKES[mode](family)
    live = kernel.dump()
    assert not be.holds_rules(live)
    first = be.plan(live, desired)
    assert not first.empty and isinstance(first.stats(), PlanStats) and first.stats().written > 0
    assert be.render_plan(first).strip() and be.describe_plan(first).strip()
    told: list[str] = []
    kernel.apply(first, stop=lambda: False, progress=told.append)
    assert be.holds_rules(kernel.dump())
    again = be.plan(kernel.dump_reusing(kernel.dump()), desired)
    assert again.empty and again.stats().written == again.stats().deleted == 0
    assert be.foreign(kernel.dump(), desired) == []  # in sync: nothing of anyone else's to report

    summary = be.summarize(desired)
    assert summary and all(isinstance(k, str) and isinstance(v, tuple) for k, v in summary.items())
    served = "default/web:http/tcp" if family is IPFamily.IPV4 else "default/dual:http/tcp"
    assert summary[served], "the example service has endpoints"
    assert summary == backend("iptables").summarize(backend("iptables").compile(state(), CONFIG, family)), \
        "every backend sends each service port to the same endpoints"
    members_for_summaries_and_kept_input(be, family, kernel.dump(), desired, served)
    kernel.cleanup()
    assert not be.plan(kernel.dump(), desired).empty, "cleanup removed what apply wrote"
    assert not be.holds_rules(kernel.dump())
    real = be.kernel(CONFIG, family, None)  # constructing a kernel does no IO
    assert callable(real.dump) and callable(real.dump_reusing) and callable(real.apply) and callable(real.cleanup)
    assert {"stop", "progress"} <= inspect.signature(real.apply).parameters.keys()


def members_for_summaries_and_kept_input(be: Any, family: IPFamily, live: Any, desired: Any, served: str) -> None:
    """objects, live_names and keep, on a live dump that holds `desired`."""
    names = summary.addresses(state(), family)
    own = be.objects(desired, names)
    assert own[served] and all(isinstance(line, str) for lines in own.values() for line in lines)
    by_name = summary.name_live(summary.facts(be.objects(live, names), be.summarize(live)), be.live_names(desired))
    assert by_name == summary.facts(own, be.summarize(desired)), "a dump in sync summarises as the compile"
    service = served.partition(":")[0]
    without = be.compile(state("10-web" if service == "default/web" else "80-dual"), CONFIG, family)
    assert served not in be.summarize(without)
    kept = be.keep(live, without, [service])
    assert be.summarize(kept)[served] == be.summarize(desired)[served], "its live rules are kept"
    assert be.plan(live, kept).stats().deleted < be.plan(live, without).stats().deleted


@pytest.mark.parametrize("mode", MODES)
def test_a_remembering_compiler_plans_like_a_fresh_compile(mode: str) -> None:
    be: Any = backend(mode)
    compiler = be.compiler(CONFIG, IPFamily.IPV4)
    before, after = state("80-"), state()
    first = compiler.compile(before)
    assert first == be.compile(before, CONFIG, IPFamily.IPV4)
    second = compiler.compile(after)
    assert second == be.compile(after, CONFIG, IPFamily.IPV4)
    remembered, fresh = be.plan(first, second), be.plan(be.compile(before, CONFIG, IPFamily.IPV4), second)
    assert sorted(be.render_plan(remembered).splitlines()) == sorted(be.render_plan(fresh).splitlines())


@pytest.mark.parametrize("mode", MODES)
def test_every_backend_traces_a_packet_to_the_endpoints_the_others_do(mode: str) -> None:
    """Every backend has a tracer now (IPVS over its virtual servers and iptables payload), and they
    agree: the same endpoints with the same probabilities. (`Unsupported` stays in the interface for
    a backend that cannot trace; none of today's three may use it.)"""
    st = state()
    pkt = Packet(ip_address("192.0.2.99"), ip_address("10.96.0.10"), 80, "tcp", local_addresses=st.node.ips)

    def spread(m: str) -> dict[str | None, float]:
        be: Any = backend(m)
        out: dict[str | None, float] = {}
        for o in be.trace(be.compile(st, CONFIG, IPFamily.IPV4), pkt):
            out[o.destination] = out.get(o.destination, 0.0) + o.probability
        return out

    mine = spread(mode)
    assert len(mine) == 3 and sum(mine.values()) == pytest.approx(1.0)
    assert mine == pytest.approx(spread("iptables"))


@pytest.mark.parametrize("mode", MODES)
def test_compile_json_is_structured_in_every_mode(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`netkit compile -o json`: per family, the backend's own to_json (not a {"text": …} wrapper)."""
    from netkit.cli import main

    assert main(["compile", "--mode", mode, "-f", str(EXAMPLES), "--node-name", "node-a", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == mode and list(doc["families"]) == ["IPv4", "IPv6"]
    be: Any = backend(mode)
    for family, name in ((IPFamily.IPV4, "IPv4"), (IPFamily.IPV6, "IPv6")):  # the CLI's config has its defaults
        assert doc["families"][name].keys() == be.to_json(be.compile(state(), CONFIG, family)).keys()
        assert "text" not in doc["families"][name]


def test_one_parse_error_for_every_reader() -> None:
    """#15: the backends' readers raise one ParseError (a NetkitError: one line, exit 2)."""
    from netkit import errors
    from netkit.nft import parse, parse_listing
    from netkit.rules.iptables import rule, ruleset

    assert rule.ParseError is ruleset.ParseError is parse.ParseError is errors.ParseError
    assert issubclass(parse_listing.Unrecognised, errors.ParseError)
    assert issubclass(errors.ParseError, errors.NetkitError)
    with pytest.raises(errors.ParseError):
        rule.read('-A X -m comment --comment "unbalanced')


def test_the_interface_is_a_contract_not_a_hope() -> None:
    """#15 / house style 10, kept true by a test: no `Any` in the backend interface or a backend's
    members, and no `cast` or `getattr` probe on the way from the CLI and the daemon to the kernel."""
    import ast
    import re

    from tests.conftest import ROOT

    pkg = ROOT / "netkit"
    typed = [pkg / "rules" / "backend.py", *sorted((pkg / "rules").glob("*/backend.py"))]
    no_probes = [pkg / "cli" / "commands.py", pkg / "cli" / "tracing.py", pkg / "runtime" / "syncer.py",
                 pkg / "runtime" / "daemon.py", *typed]
    for path in typed:
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        notes = [ast.unparse(a) for n in ast.walk(tree) for a in (
            [n.returns, *(x.annotation for x in (*n.args.args, *n.args.kwonlyargs))]
            if isinstance(n, ast.FunctionDef) else [n.annotation] if isinstance(n, ast.AnnAssign) else []) if a]
        assert "Any" not in names and not any(re.search(r"\bAny\b", a) for a in notes), path
    for path in no_probes:
        calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not calls & {"cast", "getattr", "hasattr"}, (path, calls & {"cast", "getattr", "hasattr"})
