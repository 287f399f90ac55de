"""Health transitions of a running daemon, as kube-proxy's: a stalled sync turns /healthz, /livez and
the health check node ports 503; the Node tainted ToBeDeletedByClusterAutoscaler, being deleted, or
gone turns /healthz 503 (nodeEligible false) but not /livez; health check node ports follow the local
endpoints; the metrics page counts the probes."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netkit.netns import socket_in
from tests.conftest import need_root_and
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import run
from .e2e import Running, running_daemon

HC_PORT = 32100
LB = f"""apiVersion: v1
kind: Service
metadata: {{name: lb, namespace: default}}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.30
  externalTrafficPolicy: Local
  healthCheckNodePort: {HC_PORT}
  selector: {{app: lb}}
  ports: [{{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}}]
"""


def lb_slice(nodes: list[str]) -> str:
    eps = "".join(f"- addresses: [10.244.{i + 1}.20]\n  conditions: {{ready: true}}\n  nodeName: {n}\n"
                  for i, n in enumerate(nodes))
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: lb-1, namespace: default, labels: {{kubernetes.io/service-name: lb}}}}
addressType: IPv4
ports: [{{name: http, protocol: TCP, port: 8080}}]
endpoints:{chr(10) + eps if nodes else " []"}
"""


def node(taints: str = "", deleting: bool = False) -> str:
    meta = ', deletionTimestamp: "2026-12-01T10:00:00Z", finalizers: [example.com/hold]' if deleting else ""
    spec = f"spec: {{taints: [{taints}]}}\n" if taints else ""
    return f"""apiVersion: v1
kind: Node
metadata: {{name: node-a{meta}}}
{spec}status: {{addresses: [{{type: InternalIP, address: 192.168.0.21}}]}}
"""


def netns_get(netns: str, port: int) -> tuple[int, dict[str, str], str]:
    """GET / on 127.0.0.1:port inside the namespace (the health check node port's listener)."""
    with socket_in(netns, socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


async def probe(r: Running, path: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://{await r.serving('healthz')}{path}") as resp:
        return resp.status, json.loads(await resp.text())


async def until(check: Any, what: str, timeout: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_node_lifecycle_turns_healthz_not_livez(netns: str, tmp_path: Path) -> None:
    async def status(r: Running) -> tuple[int, int, bool]:
        hz, doc = await probe(r, "/healthz")
        lz, _ = await probe(r, "/livez")
        return hz, lz, bool(doc["nodeEligible"])

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, health=True) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", node())
            await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)
            assert await status(r) == (200, 200, True)
            await r.kubectl.apply_text("replace", node('{key: ToBeDeletedByClusterAutoscaler, effect: NoSchedule}'))
            await until(lambda: _is(status(r), (503, 200, False)), "the taint")
            await r.kubectl.apply_text("replace", node('{key: node.kubernetes.io/unschedulable, effect: NoSchedule}'))
            await until(lambda: _is(status(r), (200, 200, True)), "another taint is fine")
            await r.kubectl.apply_text("replace", node(deleting=True))
            await until(lambda: _is(status(r), (503, 200, False)), "deletionTimestamp")
            await r.kubectl.apply_text("replace", node())
            await until(lambda: _is(status(r), (200, 200, True)), "back")
            await r.kubectl("delete", "node", "node-a")
            await until(lambda: _is(status(r), (503, 200, False)), "the Node gone")
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://{await r.serving('metrics')}/metrics") as resp:
                    page = await resp.text()
            assert 'kubeproxy_proxy_healthz_total{code="503"}' in page
            assert 'kubeproxy_proxy_livez_total{code="200"}' in page

    run(scenario())


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


def test_a_stalled_sync_and_health_check_node_ports(netns: str, tmp_path: Path) -> None:
    release = threading.Event()

    async def scenario() -> None:
        # syncPeriod 1 s: unhealthy once a change has waited 2 s for a sync
        async with running_daemon(netns, tmp_path, health=True, sync_period=1.0) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", node() + "---\n" + LB + "---\n" + lb_slice(["node-a", "node-b"]))
            await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)
            code, headers, body = await until_port(netns)
            assert code == 200 and headers["X-Load-Balancing-Endpoint-Weight"] == "1"
            assert json.loads(body) == {"service": {"namespace": "default", "name": "lb"}, "localEndpoints": 1,
                                        "serviceProxyHealthy": True}
            await r.kubectl.apply_text("replace", lb_slice(["node-b"]))  # no local endpoint: the LB skips us
            await until(lambda: _port_is(netns, 503), "503 without local endpoints")
            await r.kubectl.apply_text("replace", lb_slice(["node-a"]))
            await until(lambda: _port_is(netns, 200), "200 with a local endpoint again")

            real = r.daemon.syncer.sync

            def stuck(*args: Any, **kwargs: Any) -> Any:
                release.wait(30)  # a sync that hangs (a held xtables lock, a wedged kernel tool)
                return real(*args, **kwargs)

            r.daemon.syncer.sync = stuck  # type: ignore[method-assign]
            await r.kubectl.apply_text("replace", lb_slice(["node-a", "node-b"]))
            await until(lambda: _is(_codes(r), (503, 503)), "healthz and livez 503 after 2 x syncPeriod")
            await r.kubectl.apply_text("replace", LB.replace("clusterIP: 10.96.0.30",
                                                             "clusterIP: 10.96.0.30\n  sessionAffinity: ClientIP"))
            pending = r.daemon.metrics.plain("kubeproxy_sync_proxy_rules_service_changes_pending")
            await until(lambda: _is(_value(pending), 1.0), "one Service change pending behind the stalled sync")
            _, doc = await probe(r, "/livez")
            assert doc["healthy"] is False and doc["status"]["IPv4"]["healthy"] is False
            code, _, body = await asyncio.to_thread(netns_get, netns, HC_PORT)
            assert code == 503 and json.loads(body)["serviceProxyHealthy"] is False  # endpoints, but stalled
            release.set()
            await until(lambda: _is(_codes(r), (200, 200)), "healthy after the sync completes")
            await until(lambda: _port_is(netns, 200), "the health check port follows")
            await r.kubectl("delete", "service", "lb")
            await until(lambda: _port_closed(netns), "the port closes with the service")

    try:
        run(scenario())
    finally:
        release.set()


async def _value(metric: Any) -> float:
    return float(metric._value.get())


async def _codes(r: Running) -> tuple[int, int]:
    return (await probe(r, "/healthz"))[0], (await probe(r, "/livez"))[0]


async def until_port(netns: str) -> tuple[int, dict[str, str], str]:
    for _ in range(100):
        try:
            return await asyncio.to_thread(netns_get, netns, HC_PORT)
        except OSError:
            await asyncio.sleep(0.05)
    raise AssertionError("the health check node port never opened")


async def _port_is(netns: str, code: int) -> bool:
    try:
        return (await asyncio.to_thread(netns_get, netns, HC_PORT))[0] == code
    except OSError:
        return False


async def _port_closed(netns: str) -> bool:
    try:
        await asyncio.to_thread(netns_get, netns, HC_PORT)
    except ConnectionRefusedError:
        return True
    return False


def test_a_busy_healthz_port_is_logged_and_retried(netns: str, tmp_path: Path) -> None:
    """As kube-proxy: a health port in use stops nothing; it is logged and tried again every 5 s, and
    served once free. `netkit run` runs inside the test's namespace, where the test holds the port."""
    from .e2e import HEALTHZ, METRICS, get_in, netkit_in, web_service, web_slice

    (tmp_path / "web.yaml").write_text(web_service() + "---\n" + web_slice(["10.244.1.11"]))
    host, _, port = HEALTHZ.rpartition(":")
    blocker = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind((host, int(port)))
    blocker.listen(1)
    log = tmp_path / "daemon.log"
    with log.open("w") as err:
        proc = subprocess.Popen(netkit_in(netns, "run", "-f", str(tmp_path), "--node-name", "node-a",
                                          "--cluster-cidr", "10.244.0.0/16", "--netns", netns, "--ip-family", "ipv4",
                                          "--iptables-backend", "legacy", "--healthz-bind-address", HEALTHZ,
                                          "--metrics-bind-address", METRICS), stdout=subprocess.DEVNULL, stderr=err)

    def synced() -> bool:  # the busy port does not stop the daemon
        series = 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} '
        return any(line.startswith(series) and float(line.split()[-1]) > 0
                   for line in get_in(netns, METRICS, "/metrics")[1].splitlines())

    try:
        _eventually(synced, proc, "a sync while the health port is busy", log)
        _eventually(lambda: "failed to start the healthz server" in log.read_text(), proc, "the bind failure logged",
                    log)
        blocker.close()
        _eventually(lambda: get_in(netns, HEALTHZ, "/healthz")[0] == 200, proc, "healthz once the port is free", log)
    finally:
        blocker.close()
        proc.terminate()
        proc.wait(EVENT_TIMEOUT)


def _eventually(check: Any, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT
    while True:
        assert proc.poll() is None, f"netkit run exited ({proc.returncode}) before {what}: {log.read_text()[-2000:]}"
        try:
            if check():
                return
        except OSError:
            pass  # not answering yet
        assert time.monotonic() < deadline, f"timed out after {EVENT_TIMEOUT} s waiting for {what}"
        time.sleep(0.05)


def test_node_cidr_waits_for_the_nodes_pod_cidrs(netns: str, tmp_path: Path) -> None:
    from .e2e import web_service, web_slice

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, detect_local_mode="NodeCIDR") as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", node() + "---\n" + web_service() + "---\n"
                                       + web_slice(["10.244.1.11"]))
            await asyncio.sleep(1.0)
            assert not r.daemon.synced.is_set(), "no sync before the Node has podCIDRs (kube-proxy waits)"
            await r.kubectl.apply_text("replace", node().replace(
                "status:", "spec: {podCIDRs: [10.244.1.0/24]}\nstatus:"))
            await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)
            live = await asyncio.to_thread(r.dump)
            text = "\n".join(rule for chain in live.chains("nat").values() for rule in chain)
            assert "10.244.1.0/24" in text and "10.244.0.0/16" not in text, text[:2000]

    run(scenario())


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_proxy_mode_is_served_on_the_metrics_address(netns: str, tmp_path: Path, mode: str) -> None:
    """As kube-proxy's serveMetrics: GET /proxyMode answers the mode as plain text, no newline (the
    e2e framework reads it to know which dataplane a node runs)."""
    if mode == "nftables":
        need_root_and("nft")

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, health=True, mode=mode) as r:
            await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)  # serving by then
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://{await r.serving('metrics')}/proxyMode") as resp:
                    body = await resp.read()
                    assert resp.status == 200
                    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
                    assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert body == mode.encode()

    run(scenario())
