"""Plan summaries (`netkit diff`, `--summary`, `--stat`, `-o json` schema netkit.diff/v1): per service
port, what changes — read from the compiled rulesets of every mode."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pytest

from netkit.cli.commands import DIFF_SCHEMA, FamilyDiff, _print_diff, diff_json, plan_summary
from netkit.config import Config
from netkit.model import IPFamily
from netkit.model.state import build
from netkit.rules.backend import Backend, P, R
from netkit.rules.iptables.fake import FakeKernel
from netkit.rules.registry import with_backend
from netkit.rules.summary import addresses
from tests import factories as f

MODES = ("iptables", "nftables", "ipvs")
NODE = f.node("node-a")


def web(**spec: Any) -> dict[str, Any]:
    return f.service(type="NodePort", ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}],
                     **spec)


def eps(*ips: str) -> dict[str, Any]:
    return f.slice_(endpoints=[f.endpoint(ip) for ip in ips])


BASE = [web(), eps("10.244.1.1", "10.244.1.2")]

CASES: dict[str, tuple[list[dict[str, Any]], str, set[str]]] = {
    "endpoint added": ([web(), eps("10.244.1.1", "10.244.1.2", "10.244.1.3")], "change", {"endpoints"}),
    "no endpoints left": ([web()], "change", {"endpoints", "verdict"}),
    "affinity": ([web(sessionAffinity="ClientIP"), BASE[1]], "change", {"affinity"}),
    "external policy Local": ([web(externalTrafficPolicy="Local"), BASE[1]], "change", {"policy"}),
    "removed": ([], "remove", set()),
}


def _state(docs: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    return build(f.objects(NODE, *docs), "node-a")


def _summary(mode: str, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[Any]:
    def run(be: Backend[R, P]) -> list[Any]:
        old = be.compile(_state(before), Config(mode=mode), IPFamily.IPV4)
        new = be.compile(_state(after), Config(mode=mode), IPFamily.IPV4)
        return plan_summary(be, old, new, _names(before, after))
    return with_backend(mode, run)


def _names(*sides: list[dict[str, Any]]) -> dict[str, str]:
    return {k: v for docs in sides for k, v in addresses(_state(docs), IPFamily.IPV4).items()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_each_change_is_named_per_service(mode: str, case: str) -> None:
    after, op, aspects = CASES[case]
    changes = _summary(mode, BASE, after)
    assert [c.service.display() for c in changes] == ["default/web:http"], changes
    (c,) = changes
    assert c.op.value == op
    if op == "change":
        assert aspects <= set(c.aspects), c.aspects


@pytest.mark.parametrize("mode", ("iptables", "nftables"))
def test_masquerade_appearing_shows_a_service_line(mode: str) -> None:
    # masqueradeAll: every Service's rules gain a mark-for-masquerade; the endpoints stay the same
    def run(be: Backend[R, P]) -> list[Any]:
        state = _state(BASE)
        old = be.compile(state, Config(mode=mode), IPFamily.IPV4)
        new = be.compile(state, Config(mode=mode, masquerade_all=True), IPFamily.IPV4)
        return plan_summary(be, old, new)
    (c,) = with_backend(mode, run)
    assert c.op.value == "change" and "masquerade" in c.aspects and "endpoints" not in c.aspects


@pytest.mark.parametrize("mode", MODES)
def test_drop_to_served_names_the_verdict(mode: str) -> None:
    (c,) = _summary(mode, [web()], BASE)
    assert c.verdict_before in ("reject", "drop") and c.verdict_after == "dnat"
    assert "verdict" in c.aspects and "endpoints" in c.aspects


def _report(mode: str, before: list[dict[str, Any]], after: list[dict[str, Any]],
            out: Callable[[Backend[Any, Any], dict[str, FamilyDiff[Any]]], Any]) -> Any:
    def run(be: Backend[R, P]) -> Any:
        old = be.compile(_state(before), Config(mode=mode), IPFamily.IPV4)
        new = be.compile(_state(after), Config(mode=mode), IPFamily.IPV4)
        if mode == "iptables" and not before:  # a node netkit never wrote to: no entry jumps yet
            old = FakeKernel().state
        p = be.plan(old, new)
        return out(be, {"IPv4": FamilyDiff(p.empty, plan_summary(be, old, new, _names(before, after)), p, [], [])})
    return with_backend(mode, run)


ADDED = [*BASE, f.service("api", ip="10.96.0.20"), f.slice_("api", endpoints=[f.endpoint("10.244.2.1")])]


def test_text_summary_and_stat() -> None:
    def text(stat: bool, only: bool) -> str:
        def out(be: Backend[Any, Any], r: dict[str, FamilyDiff[Any]]) -> str:
            buf = io.StringIO()
            with redirect_stdout(buf):
                _print_diff(be, r, stat, only)
            return buf.getvalue()
        return str(_report("iptables", BASE, [ADDED[0], eps("10.244.1.1"), *ADDED[2:]], out))

    full, summary_only, stat = text(False, False), text(False, True), text(True, False)
    assert "  + default/api:http 1 endpoint\n" in full
    assert "  ~ default/web:http endpoints 2 → 1 (-10.244.1.2:8080)\n" in full
    assert "1 to add, 1 to change, 0 to remove" in full and "-A KUBE-" in full
    assert "-A KUBE-" not in summary_only and "~ default/web:http" in summary_only
    assert "1 to add, 1 to change, 0 to remove" in summary_only
    assert stat.startswith("IPv4: 1 to add, 1 to change, 0 to remove (") and "default/" not in stat


SERVICE_KEYS = {"namespace", "name", "port", "protocol"}


@pytest.mark.parametrize("mode", MODES)
def test_json_schema_v1(mode: str) -> None:
    doc = _report(mode, BASE, ADDED, lambda be, r: json.loads(json.dumps(diff_json(be, r))))
    assert doc["schema"] == DIFF_SCHEMA == "netkit.diff/v1"
    assert doc["mode"] == mode and doc["in_sync"] is False
    assert doc["totals"] == {"add": 1, "change": 0, "remove": 0}
    fam = doc["families"]["IPv4"]
    assert set(fam) == {"in_sync", "totals", "objects", "services", "foreign", "kept_invalid_input", "payload"}
    (svc,) = fam["services"]
    assert svc["service"] == {"namespace": "default", "name": "api", "port": "http", "protocol": "tcp"}
    assert set(svc["service"]) == SERVICE_KEYS
    assert svc["op"] == "add" and "endpoints" in svc["changes"]
    assert svc["endpoints"] == {"before": [], "after": ["10.244.2.1:8080"]}
    assert svc["verdict"] == {"before": None, "after": "dnat"}
    assert set(fam["objects"]) == {"written", "deleted", "text"} and fam["objects"]["written"] > 0
    stat = _report(mode, BASE, ADDED, lambda be, r: diff_json(be, r, stat=True))
    assert set(stat["families"]["IPv4"]) == {"in_sync", "totals", "objects"}
    summary = _report(mode, BASE, ADDED, lambda be, r: diff_json(be, r, only_summary=True))
    assert "payload" not in summary["families"]["IPv4"] and summary["families"]["IPv4"]["services"]


def test_json_payload_holds_the_entry_jumps_apply_inserts() -> None:
    doc = _report("iptables", [], BASE, lambda be, r: diff_json(be, r))
    payload = doc["families"]["IPv4"]["payload"]
    assert "-I PREROUTING 1 " in payload and "-j KUBE-SERVICES" in payload


def test_ipv6_jumps_are_named_ip6tables() -> None:
    from netkit.rules.iptables import backend as be
    v6 = [f.service(ip="fd00::10", ipFamilies=["IPv6"]),
          f.slice_(endpoints=[f.endpoint("fd00:1::1")], address_type="IPv6")]
    old = FakeKernel(IPFamily.IPV6).state
    new = be.compile(_state(v6), Config(), IPFamily.IPV6)
    text = be.describe_plan(be.plan(old, new))
    assert "+ ip6tables -t nat -I PREROUTING" in text and "+ iptables " not in text


def lb(**spec: Any) -> dict[str, Any]:
    return f.service(type="LoadBalancer", ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}],
                     status={"loadBalancer": {"ingress": [{"ip": "192.0.2.50"}]}}, **spec)


@pytest.mark.parametrize(("before", "after", "op", "want", "not_wanted"), [
    # an endpoint's hairpin set entry goes with its real server: no "masquerade" on an endpoint change
    (BASE, CASES["endpoint added"][0], "change", {"endpoints"}, {"masquerade", "rules", "verdict"}),
    # eTP=Local: the *-LOCAL set entries and the in-cluster fwmark virtual server; the cluster IP still serves
    (BASE, [web(externalTrafficPolicy="Local"), BASE[1]], "change", {"policy"}, {"rules", "verdict"}),
    ([lb(), BASE[1]], [lb(loadBalancerSourceRanges=["198.51.100.0/24"]), BASE[1]], "change", {"firewall"},
     {"rules", "verdict"}),
    ([], BASE, "add", {"masquerade", "endpoints"}, set()),
])
def test_ipvs_summaries_name_what_the_ipsets_do(before: list[dict[str, Any]], after: list[dict[str, Any]], op: str,
                                                want: set[str], not_wanted: set[str]) -> None:
    (c,) = _summary("ipvs", before, after)
    assert c.op.value == op and want <= set(c.aspects) and not not_wanted & set(c.aspects), c.aspects
