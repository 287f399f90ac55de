"""deploy/monitoring ships working: the Prometheus rules pass `promtool check rules` and their unit
tests (`promtool test rules`), the Grafana dashboard's queries parse, and every metric the rules and
the dashboard name is one that `netkit run` (in some mode) or `netkit dns` serves — read from the
metrics pages their registries render, built as the two commands build them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from netkit.dns.config import DEFAULTS, from_corefile, plugins_enabled
from netkit.dns.corefile import parse
from netkit.dns.endpoints import registry
from netkit.dns.metrics import DnsMetrics
from netkit.model import IPFamily
from netkit.rules.registry import MODES
from netkit.runtime.metrics import Metrics
from netkit.yamlload import safe_load, safe_load_all
from tests.dashboard_script import load

MONITORING = Path(__file__).parents[2] / "deploy" / "monitoring"
RULES, RULE_TESTS, DASHBOARD = (MONITORING / n for n in ("netkit-rules.yaml", "netkit-rules.test.yaml",
                                                         "netkit-dashboard.json"))
# Grafana's variables, as a query would be sent once they are replaced
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "$dns_instance": ".*"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("needs promtool (Debian's prometheus package, installed by scripts/setup.sh test)")
    return subprocess.run(["promtool", *args], cwd=MONITORING, capture_output=True, text=True, timeout=120)


def test_the_rules_pass_promtool_check() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_pass_their_unit_tests() -> None:
    """Each alert fires on the series that should raise it and stays quiet on a healthy node."""
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = {r["alert"] for g in safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tested = {t["alertname"] for case in safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", ())}
    assert alerts == tested


def rule_queries() -> Iterator[str]:
    for group in safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            yield rule["expr"]


def dashboard_queries() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield _grafana(target["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":  # label_values(SELECTOR, LABEL)
            found = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert found, variable["query"]
            yield found.group(1)


def _grafana(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (parsing it: an invalid query fails here)."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def deployed_plugins() -> tuple[str, ...]:
    """The plugins deploy/dns's Corefile (kubeadm's) enables: what the DNS pods serve metrics for."""
    docs = safe_load_all((MONITORING.parent / "dns" / "20-config.yaml").read_text())
    corefile = next(d for d in docs if d and d.get("kind") == "ConfigMap")["data"]["Corefile"]
    return plugins_enabled(from_corefile(parse(corefile, "Corefile"), DEFAULTS, "Corefile"))


def served() -> set[str]:
    """Every series name the daemon (each mode, both families) and `netkit dns` serve."""
    pages = [Metrics(mode, (IPFamily.IPV4, IPFamily.IPV6)).render().decode() for mode in MODES]
    pages.append(registry_text(DnsMetrics("dns://:53", plugins=deployed_plugins())))
    names = set()
    for page in pages:
        for line in page.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                names |= series(name, kind)
    return names


def registry_text(metrics: DnsMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry(metrics)).decode()


def series(name: str, kind: str) -> set[str]:
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    if kind == "counter":
        return {name if name.endswith("_total") else f"{name}_total"}
    return {name}


def recorded() -> set[str]:
    return {r["record"] for g in safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_used_is_served(source: str) -> None:
    queries = list(rule_queries() if source == "rules" else dashboard_queries())
    used = set().union(*map(metric_names, queries)) - recorded()
    assert used, "no metric found: the parser walk is broken"
    assert used <= served(), f"not served by netkit run or netkit dns: {sorted(used - served())}"


def test_a_name_nobody_serves_is_caught() -> None:
    """The check above can fail: a misspelt metric is not among the served ones."""
    assert metric_names('rate(kubeproxy_sync_proxy_rule_duration_seconds_bucket{job="netkit"}[5m])') - served()


def test_the_dashboard_picture_queries_every_panel() -> None:
    """scripts/dashboard_png.py (docs/img/dashboard.png) sends every target of every graph panel,
    with every Grafana variable filled in, and each query parses."""
    script = load()
    dashboard = json.loads(DASHBOARD.read_text())
    graphs = {p["id"]: p for p in dashboard["panels"] if p["type"] != "row"}
    sent = script.queries(dashboard, scrape=2.0, step=4.0)
    assert sent.keys() == graphs.keys()
    for pid, panel in graphs.items():
        assert [t.ref for t, _ in sent[pid]] == [t["refId"] for t in panel["targets"]]
        for _, query in sent[pid]:
            assert "$" not in query, query
            promql_parser.parse(query)


def test_the_dashboard_picture_uses_grafanas_rate_interval() -> None:
    """$__rate_interval is max(interval + scrape interval, 4 × scrape interval), as Grafana's."""
    script = load()
    assert script.rate_interval(2.0, 4.0) == 8.0 and script.rate_interval(1.0, 10.0) == 11.0
    assert script.promql('rate(x{instance=~"$instance"}[$__rate_interval])', 8.0) == 'rate(x{instance=~".*"}[8s])'
    with pytest.raises(ValueError, match="does not fill in"):
        script.promql("rate(x[$__range])", 8.0)
    assert script.legend("p99 {{instance}} {{ ip_family }}", {"instance": "a:1", "ip_family": "IPv4"}) == \
        "p99 a:1 IPv4"
