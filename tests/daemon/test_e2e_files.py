"""`netkit run -f DIR`: the daemon from a manifest directory, following edits, in a fresh network
namespace. In-process (the store and syncer seen directly), and as the real command in a subprocess,
stopped with SIGTERM: rules stay in place."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import time
from pathlib import Path

import pytest

from netkit.rules.iptables.summary import summarize

from .conftest import run
from .e2e import (
    HEALTHZ,
    METRICS,
    WEB,
    Running,
    config,
    get_in,
    netkit_in,
    options,
    start_daemon,
    stop_daemon,
    web_service,
    web_slice,
    with_ports,
)

A, B, C = "10.244.1.11", "10.244.1.12", "10.244.2.11"


def test_file_source_follows_an_edit(netns: str, tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "web.yaml").write_text(web_service() + "---\n" + web_slice([A, B]))

    async def scenario() -> None:
        daemon, task = await start_daemon(options(netns, config(), files=(str(manifests),)))
        r = Running(None, daemon, netns, None, "legacy", task)
        try:
            await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="the manifest")
            (manifests / "web.yaml").write_text(web_service() + "---\n" + web_slice([C]))
            await r.converge(lambda s: s.get(WEB) == with_ports([C]), what="the edit")
            (manifests / "web.yaml").write_text("this: [is not yaml")  # broken: last good version stays
            await asyncio.sleep(0.5)
            assert (await r.services()).get(WEB) == with_ports([C])
            (manifests / "api.yaml").write_text(web_service("10.96.0.11", name="api"))
            await r.converge(lambda s: "default/api:http/tcp" in s, what="a second file")
            (manifests / "web.yaml").unlink()
            await r.converge(lambda s: WEB not in s, what="the removal")
            (manifests / "api.yaml").unlink()  # the last Service: a source briefly gone, rules kept
            await asyncio.sleep(0.5)
            assert "default/api:http/tcp" in await r.services()
        finally:
            await stop_daemon(task)

    run(scenario())


def _synced(netns: str) -> bool:
    text = get_in(netns, METRICS, "/metrics")[1]
    series = 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} '
    line = next(x for x in text.splitlines() if x.startswith(series))
    return float(line.split()[1]) > 0


def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_command_runs_serves_health_and_stops_on_sigterm(netns: str, tmp_path: Path) -> None:
    from netkit.model import IPFamily
    from netkit.rules.iptables.kernel import IptablesKernel

    (tmp_path / "web.yaml").write_text(web_service() + "---\n" + web_slice([A, B]))
    cmd = netkit_in(netns, "run", "-f", str(tmp_path), "--node-name", "node-a",
                    "--cluster-cidr", "10.244.0.0/16", "--netns", netns, "--ip-family", "ipv4",
                    "--iptables-backend", "legacy", "--min-sync-period", "0.1", "--sync-period", "3",
                    "--healthz-bind-address", HEALTHZ, "--metrics-bind-address", METRICS)
    log_path = tmp_path / "daemon.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    kernel = IptablesKernel(IPFamily.IPV4, netns, "legacy")
    try:
        _wait(lambda: _synced(netns), 20, "a completed sync")
        # the first sync also removes other modes' leftovers after the metrics are updated
        _wait(lambda: '"sync done"' in log_path.read_text(), 20, "the first sync's log line")
        assert summarize(kernel.dump()).get(WEB) == with_ports([A, B])
        status, body = get_in(netns, HEALTHZ, "/healthz")
        assert status == 200 and "lastUpdated" in json.loads(body)
        page = get_in(netns, METRICS, "/metrics")[1]
        assert "kubeproxy_sync_proxy_rules_last_timestamp_seconds" in page
        # kube-proxy's nfacct counters, created at start in the namespace: counted in the rules, exported
        assert "\nkubeproxy_iptables_ct_state_invalid_dropped_packets_total 0.0\n" in page
        assert "\nkubeproxy_iptables_localhost_nodeports_accepted_packets_total 0.0\n" in page
        assert "--nfacct-name  ct_state_invalid_dropped_pkts" in kernel.dump().rules("filter", "KUBE-FORWARD")[0]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        err = log_path.read_text()
        assert proc.returncode == 0, err
        logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        assert any(doc["msg"] == "sync done" for doc in logs), err
        assert any("rules stay in place" in doc["msg"] for doc in logs)
        assert summarize(kernel.dump()).get(WEB) == with_ports([A, B]), "SIGTERM leaves the rules"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_node_name_nothing_uses_is_warned_about_once(netns: str, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """As the one-shot commands: the hostname matching no Node and no endpoint's nodeName (no
    endpoint would be local) is said once, after the first full list, not on every sync."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if "matches no Node object" in r.getMessage()]

    async def scenario(node: str) -> None:
        (manifests / "web.yaml").write_text(web_service() + "---\n" + web_slice([A, B]))
        opts = options(netns, config(node_name=node), files=(str(manifests),), node_name_defaulted=True)
        daemon, task = await start_daemon(opts)
        r = Running(None, daemon, netns, None, "legacy", task)
        try:
            await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="the manifest")
            (manifests / "web.yaml").write_text(web_service() + "---\n" + web_slice([C]))
            await r.converge(lambda s: s.get(WEB) == with_ports([C]), what="the edit")
        finally:
            await stop_daemon(task)

    caplog.set_level(logging.WARNING)
    run(scenario("node-typo"))
    assert said() == ["node name 'node-typo' (the hostname; give --node-name) matches no Node object and no "
                      "endpoint's nodeName (known: node-a): no endpoint is local"]
    caplog.clear()
    run(scenario("node-a"))
    assert said() == []
