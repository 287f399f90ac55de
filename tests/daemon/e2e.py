"""Scaffolding for the daemon's end-to-end tests: the test API server, kubectl, an in-process Daemon
programming a network namespace, and a watcher that samples the live rules while something happens.

The daemon runs in the test's own event loop (so the fault hooks and the daemon interleave without
sleeps) and writes its rules with the real iptables tools inside the namespace it is given — never
the machine's own. Timings are shortened: min-sync-period 0.1 s, sync-period 3 s, reflector backoff
from 20 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from ipaddress import ip_network
from pathlib import Path
from typing import Any

from netkit.config import Config
from netkit.model import IPFamily
from netkit.rules.iptables import backend as iptables_backend
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.ruleset import Ruleset
from netkit.rules.iptables.summary import summarize
from netkit.runtime.daemon import Daemon, DaemonOptions
from netkit.sources.kube import ApiSettings
from netkit.testing.apiserver import TestApiServer
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import FAST

WEB = "default/web:http/tcp"

# `netkit run` as a process runs inside the test's own namespace (`ip netns exec`), where kube-proxy's
# fixed ports are free: a port picked free on the machine's loopback can be taken by another process
# (a loopback connection's ephemeral port is enough) before the daemon binds it.
HEALTHZ, METRICS = "127.0.0.1:10256", "127.0.0.1:10249"


def netkit_in(netns: str, *args: str) -> list[str]:
    """The command line of `netkit ARGS` run inside `netns`."""
    return ["ip", "netns", "exec", netns, sys.executable, "-m", "netkit", *args]


def get_in(netns: str, address: str, path: str, timeout: float = 2.0) -> tuple[int, str]:
    """GET http://ADDRESS/PATH from inside `netns`: the status and the body (OSError: no answer)."""
    from netkit.lab.cluster.nodehttp import get

    host, _, port = address.rpartition(":")
    answer = get(netns, host, int(port), path, timeout)
    return answer.status, answer.body


def config(backend: str = "legacy", **changes: Any) -> Config:
    base = Config(node_name="node-a", iptables_backend=backend, cluster_cidrs=(ip_network("10.244.0.0/16"),),
                  min_sync_period=0.1, sync_period=3.0)
    return replace(base, **changes)


def options(netns: str, cfg: Config, *, kubeconfig: Path | None = None, files: tuple[str, ...] = (),
            health: bool = False, **changes: Any) -> DaemonOptions:
    return DaemonOptions(
        config=cfg, families=(IPFamily.IPV4,), netns=netns, files=files,
        api=ApiSettings(kubeconfig=str(kubeconfig)) if kubeconfig else None,
        # port 0: the daemon binds a free port itself and says which (Daemon.serving)
        healthz_address="127.0.0.1:0" if health else None,
        metrics_address="127.0.0.1:0" if health else None,
        health_check_host="127.0.0.1", reflector_options=FAST, **changes)


class Kubectl:
    """`/usr/bin/kubectl` against the test API server (asynchronous, so the server keeps serving)."""

    def __init__(self, srv: TestApiServer, tmp: Path) -> None:
        self.tmp = tmp
        self.kubeconfig = srv.write_kubeconfig(tmp / "kubeconfig")
        self.base = ["kubectl", f"--kubeconfig={self.kubeconfig}", f"--cache-dir={tmp / 'cache'}",
                     "--request-timeout=10s"]

    async def __call__(self, *args: str, stdin: str | None = None) -> str:
        proc = await asyncio.create_subprocess_exec(
            *self.base, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
        return out.decode()

    async def apply_text(self, verb: str, text: str) -> str:
        """`kubectl create|replace -f -` with a manifest given as text."""
        return await self(verb, "-f", "-", stdin=text)


def web_service(ip: str = "10.96.0.10", proto: str = "TCP", name: str = "web", port: int = 80,
                target: int = 8080) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  clusterIP: {ip}
  selector: {{app: {name}}}
  ports: [{{name: http, protocol: {proto}, port: {port}, targetPort: {target}}}]
"""


def web_slice(ips: list[str], proto: str = "TCP", name: str = "web", slice_name: str = "web-1",
              port: int = 8080, node: str = "node-a") -> str:
    eps = "".join(f"- addresses: [{ip}]\n  conditions: {{ready: true}}\n  nodeName: {node}\n" for ip in ips)
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {slice_name}
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, protocol: {proto}, port: {port}}}]
endpoints:{chr(10) + eps if ips else " []"}
"""


def with_ports(ips: list[str], port: int = 8080) -> tuple[str, ...]:
    return tuple(sorted(f"{ip}:{port}" for ip in ips))


@dataclass
class Running:
    srv: TestApiServer | None
    daemon: Daemon
    netns: str
    kubectl: Kubectl | None
    backend: str
    task: asyncio.Task[None] | None = None

    async def serving(self, name: str) -> str:
        """HOST:PORT where the daemon serves `name` ("healthz", "metrics"), once it listens."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EVENT_TIMEOUT
        while name not in self.daemon.serving:
            if loop.time() > deadline:
                raise AssertionError(f"the daemon does not serve {name} after {EVENT_TIMEOUT} s")
            await asyncio.sleep(0.02)
        return self.daemon.serving[name]

    def dump(self) -> Ruleset:
        return IptablesKernel(IPFamily.IPV4, self.netns, self.backend).dump()

    async def services(self) -> Mapping[str, tuple[str, ...]]:
        return summarize(await asyncio.to_thread(self.dump))

    async def converge(self, check: Callable[[Mapping[str, tuple[str, ...]]], bool], timeout: float = EVENT_TIMEOUT,
                       what: str = "rules") -> Mapping[str, tuple[str, ...]]:
        """Poll the live rules until `check` holds; returns the last summary."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            seen = await self.services()
            if check(seen):
                return seen
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the kernel holds {dict(seen)}")
            await asyncio.sleep(0.05)


async def start_daemon(opts: DaemonOptions) -> tuple[Daemon, asyncio.Task[None]]:
    daemon = Daemon(opts, iptables_backend)  # type: ignore[arg-type]
    task = asyncio.create_task(daemon.run(), name="daemon")
    return daemon, task


async def stop_daemon(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def running_daemon(netns: str, tmp: Path, *, backend: str = "legacy", srv: TestApiServer | None = None,
                         health: bool = False, conntrack: bool = True, **cfg: Any) -> AsyncIterator[Running]:
    """A test API server (or the one given) and a daemon watching it, programming `netns`;
    `cfg` overrides fields of the Config."""
    own = srv is None
    server = srv or TestApiServer(bookmark_interval=0.5)
    if own:
        await server.start()
    kubectl = Kubectl(server, tmp)
    daemon, task = await start_daemon(options(netns, config(backend, **cfg), kubeconfig=kubectl.kubeconfig,
                                              health=health, conntrack=conntrack))
    try:
        yield Running(server, daemon, netns, kubectl, backend, task)
    finally:
        await stop_daemon(task)
        if own:
            await server.stop()


@dataclass
class Sampler:
    """Samples the live rules in the background; `emptied` lists every sample in which `key` had no
    DNAT destination (missing, or rejecting)."""

    running: Running
    key: str
    interval: float = 0.05
    samples: int = 0
    emptied: list[Mapping[str, tuple[str, ...]]] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            seen = await self.running.services()
            self.samples += 1
            if not seen.get(self.key):
                self.emptied.append(seen)
            await asyncio.sleep(self.interval)

    async def take(self, count: int, timeout: float = EVENT_TIMEOUT) -> None:
        """Until `count` more samples have been taken (an event wait: however slow the machine)."""
        target = self.samples + count
        async with asyncio.timeout(timeout):
            while self.samples < target:
                await asyncio.sleep(self.interval)


@contextlib.asynccontextmanager
async def sampling(running: Running, key: str = WEB) -> AsyncIterator[Sampler]:
    sampler = Sampler(running, key)
    task = asyncio.create_task(sampler.run())
    try:
        yield sampler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
