"""End to end, in a fresh network namespace: the daemon watches the test API server, objects are made
with kubectl, and the live rules (iptables-save inside the namespace, read back by `summarize`) follow:
create → DNAT to the endpoints; a Service labelled for another proxy loses its rules and gets them
back when the label goes; scale up and down; no endpoints → REJECT; delete → nothing. Both
iptables backends. Also the health and metrics servers of a running daemon, and --cleanup."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from netkit.model import IPFamily
from netkit.model.types import LAST_CHANGE_TRIGGER_TIME
from netkit.rules.iptables import names as n
from netkit.testing.apiserver import TestApiServer
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import run
from .e2e import WEB, Running, running_daemon, web_service, web_slice, with_ports

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")

A, B, C = "10.244.1.11", "10.244.1.12", "10.244.2.11"


def _rejects(seen: object, key: str = WEB) -> bool:
    return isinstance(seen, dict) and key in seen and seen[key] == ()


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_create_scale_and_delete_with_kubectl(netns: str, tmp_path: Path, backend: str) -> None:
    need = f"iptables-{backend}-restore"
    if shutil.which(need) is None:
        pytest.skip(f"needs {need}")

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, backend=backend) as r:
            assert r.kubectl is not None
            await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)  # the first sync of an empty cluster
            await r.kubectl.apply_text("create", web_service())
            await r.converge(lambda s: _rejects(dict(s)), what="REJECT for a service without endpoints")
            await r.kubectl.apply_text("create", web_slice([A]))
            await r.converge(lambda s: s.get(WEB) == with_ports([A]), what="one endpoint")
            # a Service handed to another proxy leaves kube-proxy's selector: its rules go, and come back
            await r.kubectl("label", "service", "web", "service.kubernetes.io/service-proxy-name=other")
            await r.converge(lambda s: WEB not in s, what="no rules once another proxy owns the Service")
            await r.kubectl("label", "service", "web", "service.kubernetes.io/service-proxy-name-")
            await r.converge(lambda s: s.get(WEB) == with_ports([A]), what="rules again without the label")
            await r.kubectl.apply_text("replace", web_slice([A, B, C]))
            seen = await r.converge(lambda s: s.get(WEB) == with_ports([A, B, C]), what="scale up to 3")
            assert set(seen) == {WEB}
            await r.kubectl.apply_text("replace", web_slice([C]))
            await r.converge(lambda s: s.get(WEB) == with_ports([C]), what="scale down to 1")
            await r.kubectl.apply_text("replace", web_slice([]))
            await r.converge(lambda s: _rejects(dict(s)), what="REJECT after scaling to 0")
            live = await asyncio.to_thread(r.dump)
            assert any("REJECT" in rule and "has no endpoints" in rule
                       for rule in live.rules("filter", n.SERVICES)), live.chains("filter")
            await r.kubectl("delete", "service", "web")
            await r.converge(lambda s: WEB not in s, what="nothing after delete")
            live = await asyncio.to_thread(r.dump)
            leftovers = [c for c in live.chains("nat") if c.startswith(("KUBE-SVC-", "KUBE-SEP-"))]
            assert leftovers == []
            failures = r.daemon.metrics.family("kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                                               IPFamily.IPV4)
            assert failures._value.get() == 0

    run(scenario())


def test_health_and_metrics_of_a_running_daemon(netns: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, health=True) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", web_service() + "---\n" + web_slice([A, B]))
            await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="web")
            healthz, metrics = await r.serving("healthz"), await r.serving("metrics")
            async with aiohttp.ClientSession() as http:
                for path in ("/healthz", "/livez"):
                    async with http.get(f"http://{healthz}{path}") as resp:
                        assert resp.status == 200, path
                        body = json.loads(await resp.text())
                        assert {"lastUpdated", "currentTime", "healthy", "status"} <= set(body)
                        assert ("nodeEligible" in body) == (path == "/healthz")
                        assert body["lastUpdated"]
                async with http.get(f"http://{metrics}/metrics") as resp:
                    text = await resp.text()
            assert "kubeproxy_sync_proxy_rules_duration_seconds_count" in text
            count = [line for line in text.splitlines()
                     if line.startswith("kubeproxy_sync_proxy_rules_duration_seconds_count")]
            assert float(count[0].split()[-1]) >= 1
            assert "kubeproxy_sync_proxy_rules_endpoint_changes_total" in text
            nat = [line for line in text.splitlines() if line.startswith("kubeproxy_sync_proxy_rules_iptables_total{")
                   and 'ip_family="IPv4"' in line and 'table="nat"' in line]
            assert nat and float(nat[0].split()[-1]) > 0, "the syncer tells the daemon what it planned"

    run(scenario())


def test_cleanup_removes_every_rule_the_daemon_wrote(netns: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", web_service() + "---\n" + web_slice([A]))
            await r.converge(lambda s: s.get(WEB) == with_ports([A]), what="web")
            daemon = r.daemon
        await asyncio.to_thread(daemon.cleanup)  # as `netkit run --cleanup`
        live = await asyncio.to_thread(r.dump)
        owned = [c for t in ("nat", "filter", "mangle") for c in live.chains(t) if n.is_owned(c)]
        assert owned == []
        builtin_jumps = [rule for t in ("nat", "filter") for c, rules in live.chains(t).items()
                         for rule in rules if "KUBE-" in rule]
        assert builtin_jumps == []

    run(scenario())


def test_network_programming_latency_leaves_out_changes_from_before_the_start(netns: str, tmp_path: Path) -> None:
    """As kube-proxy's EndpointsChangeTracker (trackerStartTime): a slice changed before the daemon
    started is programmed but not observed (after a restart, every slice is read again, its trigger
    time hours old); a change made while it runs is."""
    def slice_changed(ips: list[str], at: float) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(web_slice(ips))
        when = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")  # RFC 3339, as Kubernetes
        doc["metadata"]["annotations"] = {LAST_CHANGE_TRIGGER_TIME: when}
        return doc

    def observed(r: Running) -> float:
        series = 'kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} '
        text = r.daemon.metrics.render().decode()
        return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(series))

    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.5) as srv:
            srv.store.create(yaml.safe_load(web_service()))
            srv.store.create(slice_changed([A], time.time() - 3600))  # an hour before the daemon
            async with running_daemon(netns, tmp_path, srv=srv) as r:
                await r.converge(lambda s: s.get(WEB) == with_ports([A]), what="A")
                await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)
                assert observed(r) == 0
                srv.store.update(slice_changed([A, B], time.time()))
                await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="A and B")
                loop = asyncio.get_running_loop()
                deadline = loop.time() + EVENT_TIMEOUT
                while observed(r) < 1 and loop.time() < deadline:
                    await asyncio.sleep(0.02)
                assert observed(r) == 1

    run(scenario())
