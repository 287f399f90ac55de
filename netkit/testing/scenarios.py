"""Traffic-while-things-change scenarios: the node daemon programs the lab's node A while real
connections flow, and every attempt is judged (`netkit.lab.traffic`). Used by
`tests/daemon/test_e2e_traffic.py` (short runs, in `make test`) and `bench/scenarios.py` (longer
runs, both modes, a table). A test harness, never used by the daemon.

Services (the lab's pods answer with their name on every lab port, and keep answering after they are
removed from a Service — which is what makes "answered by a removed endpoint" measurable):

- `web`: TCP, ClusterIP 10.96.0.10:80 and NodePort 30080 → pods' 8080;
- `dns`: UDP, ClusterIP 10.96.0.53:53 → pods' 5353.

Targets: new TCP connections to the ClusterIP from the pod client-a and to the NodePort from the
external client (192.0.2.10:30080); UDP requests to the ClusterIP from client-a, one socket for the
whole run (`udp-sticky`: one conntrack entry) and a new socket each (`udp-new`).

The source is the test API server (objects written into its store, as kubectl would), or a manifest
directory for the directory scenario. The daemon runs in-process (stopped like SIGTERM: rules stay)
or, for the SIGKILL scenario, as the real `netkit run` in a subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import yaml

from netkit import procfs
from netkit.config import Config
from netkit.lab import Lab
from netkit.lab.traffic import Flowing, Tally, Timeline, Traffic, tally
from netkit.model import IPFamily, NodeState
from netkit.runtime.daemon import Daemon, DaemonOptions
from netkit.sources.kube import ApiSettings
from netkit.sources.reflector import BackoffPolicy, ReflectorOptions
from netkit.testing.apiserver import TestApiServer

PODS = {"web-a1": "10.244.1.11", "web-a2": "10.244.1.12", "web-b1": "10.244.2.11"}
WEB_IP, DNS_IP, NODE_IP, NODE_PORT = "10.96.0.10", "10.96.0.53", "192.0.2.10", 30080
MODES = {"iptables": ("iptables", "legacy"), "iptables-nft": ("iptables", "nft"), "nftables": ("nftables", "auto")}
FAST = ReflectorOptions(page_size=500, min_watch_timeout=30, read_timeout_margin=2, list_timeout=5,
                        short_watch=0.0, backoff=BackoffPolicy(initial=0.02, cap=0.2))
JSON = dict[str, Any]


# --- objects -------------------------------------------------------------------------------------

def web_service() -> JSON:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "NodePort", "clusterIP": WEB_IP, "selector": {"app": "web"},
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                                "nodePort": NODE_PORT}]}}


def dns_service() -> JSON:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "default"},
            "spec": {"clusterIP": DNS_IP, "selector": {"app": "dns"},
                     "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353}]}}


def filler_service(i: int) -> JSON:
    """An unrelated Service with one endpoint (load for the SIGKILL-mid-sync scenario)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"filler-{i}", "namespace": "load"},
            "spec": {"clusterIP": f"10.96.{100 + i // 250}.{i % 250 + 1}",
                     "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}}


def filler_slice(i: int) -> JSON:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"filler-{i}-1", "namespace": "load",
                         "labels": {"kubernetes.io/service-name": f"filler-{i}"}},
            "addressType": "IPv4", "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [f"10.244.{3 + i // 250}.{i % 250 + 1}"], "conditions": {"ready": True}}]}


Endpoint = tuple[str, str]  # (pod name, condition: "ready" | "terminating" (still serving) | "stopped")


def endpoint_slice(service: str, endpoints: Sequence[str | Endpoint]) -> JSON:
    proto, port, pname = ("UDP", 5353, "dns") if service == "dns" else ("TCP", 8080, "http")
    eps = []
    for ep in endpoints:
        pod, cond = (ep, "ready") if isinstance(ep, str) else ep
        conditions = {"ready": cond == "ready", "serving": cond != "stopped", "terminating": cond != "ready"}
        eps.append({"addresses": [PODS[pod]], "conditions": conditions,
                    "nodeName": "node-a" if pod.startswith("web-a") else "node-b"})
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "ports": [{"name": pname, "protocol": proto, "port": port}], "endpoints": eps}


def node_object() -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}}


def base_objects(web: Sequence[str | Endpoint], dns: Sequence[str | Endpoint]) -> list[JSON]:
    return [node_object(), web_service(), endpoint_slice("web", web), dns_service(), endpoint_slice("dns", dns)]


# --- the environment -----------------------------------------------------------------------------

def targets(lab: Lab, rate: float) -> list[Flowing]:
    client_a, client = lab.netns("client-a"), lab.netns("client")
    return [Flowing("clusterip-tcp", client_a, WEB_IP, 80, "tcp", rate),
            Flowing("nodeport-tcp", client, NODE_IP, NODE_PORT, "tcp", rate),
            Flowing("udp-sticky", client_a, DNS_IP, 53, "udp", rate / 2, sticky=True),
            Flowing("udp-new", client_a, DNS_IP, 53, "udp", rate / 2)]


def config(mode: str) -> Config:
    m, ipt = MODES[mode]
    return Config(node_name="node-a", mode=m, iptables_backend=ipt, cluster_cidrs=(ip_network("10.244.0.0/16"),),
                  min_sync_period=0.1, sync_period=5.0)


@dataclass
class Env:
    """One scenario's world: the lab, the test API server, the in-process daemon, the traffic."""

    lab: Lab
    mode: str
    tmp: Path
    srv: TestApiServer | None = None
    kubeconfig: Path | None = None
    files: Path | None = None
    daemon: Daemon | None = None
    task: asyncio.Task[None] | None = None
    timeline: Timeline = field(default_factory=Timeline)

    # sources

    def put(self, *objects: JSON) -> None:
        if self.files is not None:
            write_manifests(self.files, objects)
        else:
            assert self.srv is not None
            for obj in objects:
                self.srv.store.apply(obj)

    # the daemon

    def options(self) -> DaemonOptions:
        return DaemonOptions(config=config(self.mode), families=(IPFamily.IPV4,), netns=self.lab.node_a.netns,
                             files=(str(self.files),) if self.files is not None else (),
                             api=ApiSettings(kubeconfig=str(self.kubeconfig)) if self.kubeconfig else None,
                             healthz_address=None, metrics_address=None, health_check_host="127.0.0.1",
                             reflector_options=FAST, handle_signals=False)

    async def begin(self, web: Sequence[str], dns: Sequence[str]) -> None:
        """Serve `web` and `dns` from these pods, start the daemon, wait for its rules, start the timeline."""
        self.put(*base_objects(web, dns))
        await self.start_daemon()
        await self.applied(has(set(web), set(dns)))
        self.timeline.start(sorted(set(web) | set(dns)))

    async def start_daemon(self) -> Daemon:
        self.daemon = Daemon.for_mode(self.options())
        self.task = asyncio.create_task(self.daemon.run(), name="daemon")
        return self.daemon

    async def stop_daemon(self) -> None:
        """Like SIGTERM: the daemon stops, its rules stay."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.task = None

    async def applied(self, check: Callable[[NodeState], bool], timeout: float = 15.0) -> None:
        """Until the daemon's synced state satisfies `check` and nothing is pending (rules written,
        conntrack cleaned); then the timeline's pending change counts as applied."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            d = self.daemon
            if d is not None and d.state is not None and check(d.state) and d.settled():
                return
            if self.task is not None and self.task.done():
                self.task.result()  # the daemon died: say why
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for the daemon to apply a change ({self.mode})")
            await asyncio.sleep(0.02)

    async def change(self, objects: Sequence[JSON], check: Callable[[NodeState], bool],
                     new: Sequence[str], serving: Sequence[str] | None = None) -> None:
        """Write `objects`, mark the timeline, wait until the daemon applied them (its state holds
        every endpoint of the slices written, with their conditions, and `check` holds)."""
        self.timeline.change(new, serving)
        self.put(*objects)
        wanted = written_endpoints(objects)
        await self.applied(lambda state: check(state) and all(
            known_endpoints(state, svc) == eps for svc, eps in wanted.items()))
        self.timeline.applied()


def endpoints_of(state: NodeState, service: str) -> set[str]:
    """The pods new connections to `service` go to, in the daemon's state."""
    names = {ip: pod for pod, ip in PODS.items()}
    out: set[str] = set()
    for p in state.ports:
        if p.name.ref.name == service:
            out |= {names.get(str(e.ip), str(e.ip)) for e in p.reachable_endpoints}
    return out


EndpointConditions = frozenset[tuple[str, bool, bool, bool]]  # (IP, ready, serving, terminating)


def known_endpoints(state: NodeState, service: str) -> EndpointConditions:
    return frozenset((str(e.ip), e.ready, e.serving, e.terminating) for p in state.ports
                     if p.name.ref.name == service for e in p.endpoints)


def written_endpoints(objects: Sequence[JSON]) -> dict[str, EndpointConditions]:
    """Per Service, the endpoints of the EndpointSlices in `objects` (one slice per Service here)."""
    out: dict[str, EndpointConditions] = {}
    for obj in objects:
        if obj["kind"] == "EndpointSlice":
            service = obj["metadata"]["labels"]["kubernetes.io/service-name"]
            out[service] = frozenset((ep["addresses"][0], ep["conditions"]["ready"], ep["conditions"]["serving"],
                                      ep["conditions"]["terminating"]) for ep in obj["endpoints"])
    return out


def has(web: set[str] | None = None, dns: set[str] | None = None) -> Callable[[NodeState], bool]:
    def check(state: NodeState) -> bool:
        return ((web is None or endpoints_of(state, "web") == web)
                and (dns is None or endpoints_of(state, "dns") == dns))
    return check


def write_manifests(directory: Path, objects: Sequence[JSON]) -> None:
    """Write each object to its own file, atomically (write, then rename), as a deploy tool would."""
    directory.mkdir(parents=True, exist_ok=True)
    for obj in objects:
        meta = obj["metadata"]
        path = directory / f"{obj['kind'].lower()}-{meta.get('namespace', '')}-{meta['name']}.yaml"
        staged = directory / f".{path.name}.tmp"
        staged.write_text(yaml.safe_dump(obj))
        staged.rename(path)


@contextlib.asynccontextmanager
async def environment(lab: Lab, mode: str, *, files: bool = False) -> AsyncIterator[Env]:
    with tempfile.TemporaryDirectory(prefix="netkit-scenario-") as tmp:
        env = Env(lab, mode, Path(tmp))
        if files:
            env.files = Path(tmp) / "manifests"
        else:
            env.srv = TestApiServer(bookmark_interval=0.5)
            await env.srv.start()
            env.kubeconfig = env.srv.write_kubeconfig(Path(tmp) / "kubeconfig")
        try:
            yield env
        finally:
            await env.stop_daemon()
            if env.srv is not None:
                await env.srv.stop()
            cleanup_node(lab, mode)


def cleanup_node(lab: Lab, mode: str) -> None:
    """Remove what the daemon wrote into node A (the lab is reused across scenarios in the bench)."""
    options = DaemonOptions(config=config(mode), families=(IPFamily.IPV4,), netns=lab.node_a.netns,
                            healthz_address=None, metrics_address=None)
    daemon = Daemon.for_mode(options)
    with contextlib.suppress(Exception):
        daemon.cleanup()
    with contextlib.suppress(Exception):
        lab.exec("node-a", ["conntrack", "-F"], check=False)


@contextlib.asynccontextmanager
async def traffic(env: Env, rate: float) -> AsyncIterator[Traffic]:
    t = Traffic(targets(env.lab, rate), timeout=1.0)
    t.start()
    try:
        yield t
    finally:
        await asyncio.to_thread(t.stop)


def tallies(t: Traffic, timeline: Timeline) -> dict[str, Tally]:
    return {target.name: tally(t.of(target.name), timeline) for target in t.targets}


# --- the scenarios -------------------------------------------------------------------------------

Scenario = Callable[[Lab, str, float, float], Awaitable[dict[str, Tally]]]


async def rolling_update(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """web and dns move from web-a1 + web-a2 to web-a2 + web-b1 the way a Deployment rolls: the new
    pod becomes ready, the old one terminates while still serving, then it is removed."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1", "web-a2"], ["web-a1", "web-a2"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            steps: list[tuple[list[str | Endpoint], list[str], list[str]]] = [
                (["web-a1", "web-a2", "web-b1"], ["web-a1", "web-a2", "web-b1"], ["web-a1", "web-a2", "web-b1"]),
                ([("web-a1", "terminating"), "web-a2", "web-b1"], ["web-a2", "web-b1"], ["web-a1", "web-a2", "web-b1"]),
                (["web-a2", "web-b1"], ["web-a2", "web-b1"], ["web-a2", "web-b1"]),
            ]
            for eps, new, serving in steps:
                await env.change([endpoint_slice("web", eps), endpoint_slice("dns", eps)],
                                 has(set(new), set(new)), new, serving)
                await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def scale_to_zero_and_back(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """Two endpoints → none (connections are rejected at once) → one new one."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            await env.change([endpoint_slice("web", []), endpoint_slice("dns", [])], has(set(), set()), [])
            await asyncio.sleep(hold)
            await env.change([endpoint_slice("web", ["web-a2"]), endpoint_slice("dns", ["web-a2"])],
                             has({"web-a2"}, {"web-a2"}), ["web-a2"])
            await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def restart(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """The daemon stops (SIGTERM: rules stay), is down for `hold`, starts again: its first sync
    after the start must not disturb anything."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            await env.stop_daemon()
            await asyncio.sleep(hold)
            await env.start_daemon()
            await env.applied(has({"web-a1", "web-b1"}, {"web-a1", "web-b1"}))
            await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def conntrack_across_restart(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """An endpoint is removed while the daemon is down: the UDP flows on it must move once the daemon
    is back (its first sync checks the kernel's entries, not its memory)."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            await env.stop_daemon()
            # while it is down the endpoint goes: nobody can move the flows yet (they still reach it)
            env.timeline.change(["web-b1"], ["web-a1", "web-b1"])
            env.put(endpoint_slice("web", ["web-b1"]), endpoint_slice("dns", ["web-b1"]))
            await asyncio.sleep(hold)
            await env.start_daemon()
            await env.applied(has({"web-b1"}, {"web-b1"}))
            env.timeline.applied()
            await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def terminating_udp(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """dns's endpoints start terminating while still serving: new flows avoid them, existing UDP
    flows stay (nothing flushed); then they stop serving and the flows move."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1"], ["web-a1", "web-a2"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            flushed = env.daemon.metrics.conntrack_flushed._value.get()  # type: ignore[union-attr]
            term: list[str | Endpoint] = [("web-a1", "terminating"), ("web-a2", "terminating"), "web-b1"]
            await env.change([endpoint_slice("dns", term), endpoint_slice("web", term)],
                             has({"web-b1"}, {"web-b1"}), ["web-b1"], ["web-a1", "web-a2", "web-b1"])
            await asyncio.sleep(hold)
            assert env.daemon is not None
            kept = env.daemon.metrics.conntrack_flushed._value.get() == flushed
            stopped: list[str | Endpoint] = [("web-a1", "stopped"), ("web-a2", "stopped"), "web-b1"]
            await env.change([endpoint_slice("dns", stopped), endpoint_slice("web", stopped)],
                             has({"web-b1"}, {"web-b1"}), ["web-b1"])
            await asyncio.sleep(hold)
        if not kept:
            raise AssertionError("UDP flows were flushed while their endpoints still served")
        return tallies(t, env.timeline)


async def directory_removed_and_recreated(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """`-f DIR`: the directory is removed (rules must stay), re-created with a change (followed), and
    edited again later (followed)."""
    async with environment(lab, mode, files=True) as env:
        assert env.files is not None
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            shutil.rmtree(env.files)
            await asyncio.sleep(max(hold, 1.0))  # everything gone for a while: nothing may change
            await env.change(base_objects(["web-a1", "web-a2"], ["web-a1", "web-a2"]),
                             has({"web-a1", "web-a2"}, {"web-a1", "web-a2"}), ["web-a1", "web-a2"])
            await asyncio.sleep(hold)
            await env.change([endpoint_slice("web", ["web-a2"]), endpoint_slice("dns", ["web-a2"])],
                             has({"web-a2"}, {"web-a2"}), ["web-a2"])
            await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def files_deleted_and_written_back(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """`-f DIR`: every file in it deleted for a while (the directory stays), then written back one by
    one with a change: the rules stay meanwhile, and the change is followed."""
    async with environment(lab, mode, files=True) as env:
        assert env.files is not None
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(hold)
            for path in env.files.iterdir():
                path.unlink()
            await asyncio.sleep(max(hold, 2.0))  # the case: every file gone for 2 s
            await env.change(base_objects(["web-b1", "web-a2"], ["web-b1", "web-a2"]),
                             has({"web-b1", "web-a2"}, {"web-b1", "web-a2"}), ["web-b1", "web-a2"])
            await asyncio.sleep(hold)
        return tallies(t, env.timeline)


async def kill_mid_sync(lab: Lab, mode: str, rate: float, hold: float, *, load: int = 300) -> dict[str, Tally]:
    """The real `netkit run` in a subprocess is SIGKILLed while it takes in `load` new Services (as
    soon as its restore or nft child runs, or after 80 ms of CPU on them), then started again: web's
    traffic never notices."""
    async with environment(lab, mode) as env:
        env.put(*base_objects(["web-a1", "web-b1"], ["web-a1", "web-b1"]))
        env.timeline.start(["web-a1", "web-b1"])
        first = spawn_daemon(env)
        try:
            await wait_rules(env, first)
            async with traffic(env, rate) as t:
                await asyncio.sleep(hold)
                for i in range(load):
                    env.put(filler_service(i), filler_slice(i))
                killed = await kill_when_writing(first)
                await asyncio.sleep(hold)
                second = spawn_daemon(env)
                try:
                    await wait_rules(env, second)
                    await asyncio.sleep(hold)
                finally:
                    stop_process(second)
        finally:
            stop_process(first)
        if not killed:
            raise AssertionError("the daemon was never caught writing: not killed mid-sync")
        return tallies(t, env.timeline)


# --- the real command, for SIGKILL ---------------------------------------------------------------

@dataclass
class Spawned:
    proc: subprocess.Popen[bytes]
    log: Path


def spawn_daemon(env: Env) -> Spawned:
    m, ipt = MODES[env.mode]
    assert env.kubeconfig is not None
    argv = [sys.executable, "-m", "netkit", "run", "--kubeconfig", str(env.kubeconfig), "--netns",
            env.lab.node_a.netns, "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--mode", m,
            "--ip-family", "ipv4", "--min-sync-period", "0.1", "--healthz-bind-address", "",
            "--metrics-bind-address", "", "--log-format", "text"]
    if m == "iptables":
        argv += ["--iptables-backend", ipt]
    log = env.tmp / f"daemon-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Spawned(proc, log)


async def wait_rules(env: Env, spawned: Spawned, timeout: float = 60.0) -> None:
    """Until the daemon logged a sync and web answers through node A's rules."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if spawned.proc.poll() is not None:
            raise AssertionError(f"netkit run exited with {spawned.proc.returncode}: "
                                 f"{spawned.log.read_text(errors='replace')[-2000:]}")
        if "sync done" in spawned.log.read_text(errors="replace"):
            reply = await asyncio.to_thread(env.lab.connect, "client-a", WEB_IP, 80, "tcp", timeout=0.5)
            if reply.answered:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"netkit run did not sync in time: {spawned.log.read_text(errors='replace')[-2000:]}")


async def kill_when_writing(spawned: Spawned, timeout: float = 30.0, cpu: float = 0.08) -> bool:
    """SIGKILL `proc` as soon as it runs a child (iptables-restore, nft), or — for a backend that
    writes in-process (libnftables) — once it has spent `cpu` seconds on the change; False if neither
    happened in time."""
    proc = spawned.proc
    deadline = time.monotonic() + timeout
    start = _cpu_seconds(proc.pid)
    caught = False
    while time.monotonic() < deadline and not caught:
        caught = bool(_children(proc.pid)) or _cpu_seconds(proc.pid) - start >= cpu
        if not caught:
            await asyncio.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return caught


def _cpu_seconds(pid: int) -> float:
    st = procfs.stat(pid)
    return 0.0 if st is None else st.cpu_seconds


def _children(pid: int) -> list[int]:
    """The children of every thread of `pid` (the daemon runs its tools from worker threads)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(x) for x in (task / "children").read_text().split()]
    return out


def stop_process(spawned: Spawned) -> None:
    proc = spawned.proc
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def steady(lab: Lab, mode: str, rate: float, hold: float) -> dict[str, Tally]:
    """The baseline: the same traffic for as long, nothing changes."""
    async with environment(lab, mode) as env:
        await env.begin(["web-a1", "web-b1"], ["web-a1", "web-b1"])
        async with traffic(env, rate) as t:
            await asyncio.sleep(4 * hold)
        return tallies(t, env.timeline)


SCENARIOS: Mapping[str, Scenario] = {
    "rolling update": rolling_update,
    "scale to zero and back": scale_to_zero_and_back,
    "restart (SIGTERM)": restart,
    "SIGKILL mid-sync": kill_mid_sync,
    "conntrack across restart": conntrack_across_restart,
    "terminating UDP endpoints": terminating_udp,
    "directory removed and re-created": directory_removed_and_recreated,
    "every file deleted for 2 s": files_deleted_and_written_back,
}

