"""docs/img/dashboard.png's pipeline (scripts/dashboard_png.py) end to end on a short run: a 1-node
lab cluster, Debian's Prometheus scraping its `netkit run` and `netkit dns` in a pod of the
cluster, traffic and changes through the lab; then every panel of deploy/monitoring's dashboard
returns data through Prometheus' query_range, and the picture is drawn."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import need_root_and
from tests.dashboard_script import load
from tests.lab_cluster.conftest import need_kubectl


def test_every_panel_returns_data_from_a_lab_run(tmp_path: Path) -> None:
    need_root_and("ip", "iptables-restore", "prometheus", "socat")
    need_kubectl()
    script = load()
    result = script.run(script.QUICK_SCHEDULE, nodes=1, pods_per_node=2, scrape=1.0, step=2.0,
                        say=lambda _: None)  # removes all it built, also when it fails
    doc = script.json.loads(script.DASHBOARD.read_text())
    answers = {p.title: result.results[p.id] for p in script.panels(doc) if p.kind != "row"}
    empty = [title for title, found in answers.items() if not any(s.finite() for _, ss in found for s in ss)]
    assert not empty, f"panels without data: {empty}"
    # what the run did shows: the scale-down's stale UDP flows deleted, NXDOMAIN answers for a missing name
    deleted = [v for _, ss in answers["Conntrack cleanups: stale UDP flows deleted"] for s in ss for _, v in s.points]
    assert any(v > 0 for v in deleted)
    rcodes = {s.labels.get("rcode") for _, ss in answers["Queries per second by answer"] for s in ss}
    assert {"NOERROR", "NXDOMAIN"} <= rcodes
    out = tmp_path / "dashboard.png"
    script.render(doc, result, out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
