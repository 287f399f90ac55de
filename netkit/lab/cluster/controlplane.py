"""The cluster's control plane: one process that outlives `netkit lab cluster up`.

`python -m netkit.lab.cluster.controlplane DIR` (started by `up`, in its own session) runs one event
loop with:

- the test API server (`netkit.testing`) on 127.0.0.1:<port> of this machine (for kubectl, whose
  kubeconfig it writes) and on 127.0.0.1:6443 inside every node and DNS pod namespace (a listening
  socket made there: no forwarder, nothing routed into the machine), and on node-1's address :6443
  in node-1's namespace, where `default/kubernetes` (10.96.0.1:443) points, so pods reach the API
  through the Service as in a cluster;
- the lab's Node objects, its Pods and the kube-dns Service;
- the kubelet part: a Pod with the lab's netns annotation is served (`echo`: the answering servers;
  `dns`: `netkit dns` in the pod's namespace, reading the API) and marked Ready once it answers
  (the DNS pods' /ready, as kubelet's readiness probe); a deleted Pod stops;
- the EndpointSlice controller (`controller`), run after every Service or Pod change;
- on every node `netkit run` as `deploy/` runs it (`deploy`), restarted when it exits, like a
  DaemonSet's pod;
- with an image (`up --image`), the DaemonSet's and the DNS Deployment's pods as podman containers of
  that image instead of processes, run and probed as kubelet runs them (`kubelet`);

It prints `ready` on stdout once every daemon has synced and every DNS pod answers (or
`error: <why>` and exits 1), writes `status.json` (process ids, restarts) as things change, and on
SIGTERM stops every process it started.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from netkit.lab.cluster import controller, deploy, kubelet, nodehttp, objects, state
from netkit.lab.cluster.echo import EchoPod
from netkit.lab.cluster.plan import API_PORT, PORTS, Cluster, Kind
from netkit.lab.cluster.podman import Podman
from netkit.netns import in_netns
from netkit.testing.apiserver import TestApiServer
from netkit.testing.apistore import Change, Store, resource_for_kind

JSON = dict[str, Any]
READY = "ready"  # what lifecycle.READY waits for
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
PODS, SERVICES, SLICES = (resource_for_kind(k) for k in ("Pod", "Service", "EndpointSlice"))


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def netkit_argv() -> list[str]:
    return [sys.executable, "-m", "netkit"]


DNS_READY_PORT = 8181  # CoreDNS's readiness endpoint (/ready), probed as kubelet would


def dns_argv(cluster_dir: Path) -> list[str]:
    """`netkit dns` as the cluster DNS, reading deploy/dns's Corefile as CoreDNS's pods do (`-conf`),
    with what a pod's environment gives it: the API (the pod's own kubeconfig: 127.0.0.1:6443 in its
    namespace) and its resolv.conf (dnsPolicy: Default), here an upstream that never answers, so
    names outside the cluster fail at once instead of leaving the lab."""
    d = cluster_dir / "dns"
    return [*netkit_argv(), "dns", "--conf", str(d / "Corefile"), "--kubeconfig", str(d / deploy.KUBECONFIG_FILE),
            "--resolv-conf", str(d / "resolv.conf"), "--upstream-timeout", "0.5"]


def grace_period(pod: Any) -> float:
    """How long kubelet lets a pod's containers stop after SIGTERM: its terminationGracePeriodSeconds,
    30 s when unset (a DNS pod's `lameduck 5s` fits in it)."""
    value = ((pod or {}).get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 30.0


def api_listener(netns: str, host: str = "127.0.0.1") -> socket.socket:
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, API_PORT))
        sock.listen(128)
        sock.setblocking(False)
        return sock

    return in_netns(netns, make)


class Supervised:
    """A process inside a namespace, restarted when it exits (backing off to 5 s), like a pod's
    container under kubelet."""

    def __init__(self, name: str, netns: str, argv: Sequence[str], log: Path,
                 on_change: Callable[[], None], grace: float = 3.0) -> None:
        self.name, self.netns, self.argv, self.log = name, netns, list(argv), log
        self.grace = grace  # SIGTERM, then SIGKILL after this long (a pod's terminationGracePeriodSeconds)
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.last_exit: int | None = None
        self.stopping = False
        self.on_change = on_change
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        backoff = 0.2
        while not self.stopping:
            with open(self.log, "ab") as log:
                self.proc = await asyncio.create_subprocess_exec(
                    "ip", "netns", "exec", self.netns, *self.argv, stdin=asyncio.subprocess.DEVNULL,
                    stdout=log, stderr=log)
            self.on_change()
            started = time.monotonic()
            self.last_exit = await self.proc.wait()
            if self.stopping:
                break
            self.restarts += 1
            self.on_change()
            backoff = 0.2 if time.monotonic() - started > 10 else min(backoff * 2, 5.0)
            await asyncio.sleep(backoff)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else 0

    async def stop(self, grace: float | None = None) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (None: the process's own grace period)."""
        grace = self.grace if grace is None else grace
        self.stopping = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self.task is not None:
            self.task.cancel()


Runner = Supervised | kubelet.PodContainer  # a pod's process, or its container


class ControlPlane:
    def __init__(self, record: state.Record, deploy_dir: Path) -> None:
        self.record = record
        self.cluster: Cluster = record.cluster
        self.dir = record.dir
        self.deploy_dir = deploy_dir
        first = self.cluster.nodes[0]  # the "control-plane node": default/kubernetes points at it
        self.advertise = (str(self.cluster.node_ips(first)[0]), API_PORT)
        self.srv = TestApiServer(port=0, kubernetes_service=True, advertise=self.advertise,
                                 store=Store(service_cidrs=self.cluster.service_cidrs))
        self.store = self.srv.store
        self.echo: dict[str, EchoPod] = {}
        self.dns: dict[str, Runner] = {}
        self.api_sites: dict[str, web.SockSite] = {}
        self.daemons: dict[str, Runner] = {}
        self.podman = Podman.find() if record.image else None
        self.pending: set[str] = set()  # what to do on the next turn of the loop
        self.trigger = ""
        self.stopped = asyncio.Event()
        self.logs = state.log_dir(self.cluster.cluster_id)

    # --- start -------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.srv.start()
        for netns in self.api_namespaces():
            await self.srv.serve_socket(api_listener(netns))
        await self.srv.serve_socket(api_listener(self.cluster.nodes[0].netns, self.advertise[0]))
        self.write_kubeconfigs()
        self.record = state.Record(self.cluster, self.srv.port, os.getpid(), self.record.image)
        state.save(self.record)
        self.seed()
        self.store.listeners.append(self.on_change)
        self.reconcile()
        for pod in self.store.select(PODS, ""):
            await self.pod_changed("ADDED", pod)
        for node in self.cluster.nodes:
            self.start_daemon(node.name, node.netns)

    def api_namespaces(self) -> list[str]:
        """Where 127.0.0.1:6443 is the API: every node (DNS pods get theirs when they start)."""
        return [n.netns for n in self.cluster.nodes]

    def write_kubeconfigs(self) -> None:
        cid = self.cluster.cluster_id
        write_json(state.kubeconfig_path(cid), objects.kubeconfig(self.srv.url))
        for node in self.cluster.nodes:
            d = state.node_dir(cid, node.name)
            d.mkdir(parents=True, exist_ok=True)
            write_json(d / deploy.KUBECONFIG_FILE, objects.kubeconfig(f"http://127.0.0.1:{API_PORT}"))
        write_json(self.dir / "dns" / deploy.KUBECONFIG_FILE, objects.kubeconfig(f"http://127.0.0.1:{API_PORT}"))
        (self.dir / "dns" / "Corefile").write_text(deploy.dns_corefile(self.deploy_dir))
        (self.dir / "dns" / "resolv.conf").write_text(f"nameserver {self.cluster.outside_ips[0]}\n")

    def seed(self) -> None:
        for name in NAMESPACES:
            self.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for node in self.cluster.nodes:
            self.store.create(objects.node_object(self.cluster, node, node.name in self.cluster.cordoned))
        self.store.create(objects.dns_service(self.cluster))
        for pod in self.cluster.pods:
            self.store.create(objects.pod_object(self.cluster, pod))

    def start_daemon(self, node: str, netns: str) -> None:
        log = self.logs / f"netkit-run-{node}.log"
        if self.podman is not None:
            sup: Runner = kubelet.node_daemon(self.podman, self.deploy_dir, self.record.image, self.cluster,
                                              self.cluster.node(node), self.dir, log, self.write_status)
            self.daemons[node] = sup
            sup.start()
            return
        nd = state.node_dir(self.cluster.cluster_id, node)
        daemon = deploy.node_daemon(self.deploy_dir, node, nd, mode=self.cluster.mode,
                                    cluster_cidr=",".join(str(c) for c in self.cluster.cluster_cidrs))
        for fname, text in daemon.files:
            (nd / fname).write_text(text)
        argv = [*netkit_argv(), *daemon.argv[1:]] if daemon.argv[0] == "netkit" else list(daemon.argv)
        sup = Supervised(node, netns, argv, log, self.write_status)
        self.daemons[node] = sup
        sup.start()

    # --- changes -----------------------------------------------------------------------------------

    def on_change(self, change: Change) -> None:
        """A store listener: runs inside the store's write; the work is done on the next loop turn."""
        kind = change.resource.kind
        if kind in ("Service", "Pod"):
            self.trigger = self.trigger or now_rfc3339()
            self.later("reconcile")
        if kind == "Pod":
            asyncio.ensure_future(self.pod_changed(change.type, change.obj))

    def later(self, what: str) -> None:
        if not self.pending:
            asyncio.get_running_loop().call_soon(self.run_pending)
        self.pending.add(what)

    def run_pending(self) -> None:
        pending, self.pending = self.pending, set()
        if "reconcile" in pending:
            self.reconcile()

    def reconcile(self) -> None:
        trigger, self.trigger = self.trigger or now_rfc3339(), ""
        wanted = controller.desired(self.store.select(SERVICES, ""), self.store.select(PODS, ""))
        create, update, delete = controller.changes(self.store.select(SLICES, ""), wanted, trigger)
        for obj in create:
            self.store.create(obj)
        for obj in update:
            self.store.update(obj)
        for ns, name in delete:
            self.store.delete(SLICES, ns, name)

    # --- the kubelet part --------------------------------------------------------------------------

    async def pod_changed(self, kind: str, pod: JSON) -> None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        netns = annotations.get(objects.NETNS_ANNOTATION)
        name = pod["metadata"]["name"]
        if not netns:
            return
        if kind == "DELETED":
            await self.stop_pod(name)
        elif name not in self.echo and name not in self.dns:
            await self.start_pod(name, netns, annotations.get(objects.KIND_ANNOTATION, Kind.ECHO), pod)

    async def start_pod(self, name: str, netns: str, kind: str, pod: JSON) -> None:
        if kind == Kind.DNS:
            try:
                self.api_sites[name] = await self.srv.serve_socket(api_listener(netns))
            except OSError as exc:
                print(f"pod {name}: API socket: {exc}", file=sys.stderr, flush=True)
            log = self.logs / f"dns-{name}.log"
            if self.podman is not None:
                where = (name, str((pod.get("spec") or {}).get("nodeName") or ""), netns)
                self.dns[name] = kubelet.dns_pod(self.podman, self.deploy_dir, self.record.image, self.cluster,
                                                 where, self.dir, log, self.write_status,
                                                 lambda ready: self.set_ready(pod, ready), grace_period(pod))
                self.dns[name].start()
                return
            sup = Supervised(name, netns, dns_argv(self.dir), log, self.write_status, grace=grace_period(pod))
            self.dns[name] = sup
            sup.start()
            asyncio.ensure_future(self.mark_ready_when(name, pod, lambda: dns_ready(netns)))
            return
        families = tuple(socket.AF_INET6 if f == "IPv6" else socket.AF_INET for f in self.cluster.families)
        echo = EchoPod(name, netns, PORTS, families, str((pod.get("spec") or {}).get("hostname") or ""))
        self.echo[name] = echo
        try:
            await echo.start()
        except OSError as exc:
            print(f"pod {name}: {exc}", file=sys.stderr, flush=True)
            return
        never = ((pod.get("metadata") or {}).get("annotations") or {}).get(objects.NEVER_READY_ANNOTATION) == "true"
        self.set_ready(pod, not never)
        self.write_status()

    async def mark_ready_when(self, name: str, pod: JSON, check: Callable[[], bool]) -> None:
        started = time.monotonic()
        while name in self.dns:
            if await asyncio.to_thread(check):
                self.set_ready(pod, True)
                return
            await asyncio.sleep(poll_interval(started))

    def set_ready(self, pod: JSON, ready: bool) -> None:
        ns, name = controller.key(pod)
        try:
            current = self.store.get(PODS, ns, name)
        except Exception:  # noqa: BLE001 - deleted meanwhile
            return
        current["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        current["metadata"].pop("resourceVersion", None)
        self.store.update(current)

    async def stop_pod(self, name: str) -> None:
        echo = self.echo.pop(name, None)
        if echo is not None:
            echo.close()
        sup = self.dns.pop(name, None)
        if sup is not None:
            await sup.stop()
        site = self.api_sites.pop(name, None)
        if site is not None:
            await site.stop()
        self.write_status()

    # --- readiness, status, stop -------------------------------------------------------------------

    def dns_ready(self) -> bool:
        pods = {controller.key(p)[1]: p for p in self.store.select(PODS, "")}
        return all(controller.pod_ready(pods[name]) for name in self.dns if name in pods)

    async def wait_ready(self, timeout: float) -> str:
        """"" once every daemon synced and every DNS pod is ready; else why not."""
        deadline = time.monotonic() + timeout
        nodes = {n.name: n.netns for n in self.cluster.nodes}
        synced: set[str] = set()
        while time.monotonic() < deadline:
            for node, netns in nodes.items():
                if node not in synced and (await asyncio.to_thread(nodehttp.last_sync, netns) or 0) > 0:
                    synced.add(node)
            failed = [d for d in self.daemons.values() if exits(d)]
            if failed:
                return f"netkit run on {failed[0].name} exited ({failed[0].last_exit}): {last_line(failed[0].log)}"
            for node in sorted(set(nodes) - synced):
                error = sync_error(self.daemons[node].log)
                if error:
                    return f"netkit run on {node}: {error}"
            if len(synced) == len(nodes) and self.dns_ready():
                return ""
            await asyncio.sleep(poll_interval(deadline - timeout))
        missing = sorted(set(nodes) - synced)
        return (f"timed out after {timeout:.0f} s: no first sync from netkit run on {', '.join(missing)}"
                if missing else f"timed out after {timeout:.0f} s: the DNS pods do not answer")

    def write_status(self) -> None:
        doc = {"control_pid": os.getpid(), "api_port": self.srv.port,
               "daemons": {n: {"pid": d.pid, "restarts": d.restarts} for n, d in self.daemons.items()},
               "dns": {n: {"pid": d.pid, "restarts": d.restarts} for n, d in self.dns.items()},
               "echo": sorted(self.echo)}
        write_json(self.dir / "status.json", doc)

    async def stop(self) -> None:
        for echo in self.echo.values():
            echo.close()
        # The whole cluster goes: nothing is left to drain, so no pod waits out its grace period.
        await asyncio.gather(*(s.stop(grace=3.0) for s in [*self.daemons.values(), *self.dns.values()]))
        await self.srv.stop()


def exits(runner: Runner) -> int:
    """How often it stopped by itself: a container its liveness probe had restarted (a node too slow
    for the probe's budget, which kubelet would restart as well) is not a failed `up`."""
    if isinstance(runner, kubelet.PodContainer):
        return runner.restarts - runner.liveness_restarts
    return runner.restarts


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def poll_interval(since: float) -> float:
    """How long to wait between readiness checks begun at `since` (monotonic): 50 ms at first, then
    a twentieth of the time waited so far, at most 0.5 s. Each check scrapes a daemon's /metrics or
    a DNS pod's /ready. At a fixed 50 ms, while a 2-node cluster started in the test VM (software
    emulation, one vCPU) the checks took 25 s of its CPU from the daemons they wait for: the control
    plane used 35 s of CPU, now 10 s, and `up` took 190-220 s, now ~145 s. Waiting so costs at most
    5% more than the time to ready (on a real machine, `up` takes a few seconds: checks stay at 50 ms)."""
    return min(0.5, max(0.05, (time.monotonic() - since) / 20))


def dns_ready(netns: str) -> bool:
    try:
        return nodehttp.get(netns, "127.0.0.1", DNS_READY_PORT, "/ready", timeout=0.5).status == 200
    except OSError:
        return False


CRI_LOG_PREFIX = re.compile(r"^\S+ (?:stdout|stderr) [FP] ")  # a container's log line (k8s-file)


def log_lines(log: Path) -> list[str]:
    """A process's log lines, or a container's without their CRI prefix (time, stream, tag)."""
    return [CRI_LOG_PREFIX.sub("", line) for line in log.read_text(errors="replace").splitlines()]


def sync_error(log: Path) -> str:
    """The message of a failed sync in a daemon's (JSON lines) log, or ""."""
    try:
        lines = log_lines(log)
    except OSError:
        return ""
    for line in lines:
        if '"sync failed' in line:
            try:
                return str(json.loads(line).get("msg", line))
            except ValueError:
                return line[:300]
    return ""


def last_line(path: Path) -> str:
    try:
        lines = [line for line in log_lines(path) if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


async def serve(cluster_id: str, deploy_dir: Path, ready_out: IO[str], timeout: float) -> int:
    record = state.load(cluster_id)
    if record is None:
        print(f"error: no cluster {cluster_id}", file=ready_out, flush=True)
        return 1
    cp = ControlPlane(record, deploy_dir)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, cp.stopped.set)
    problem = "the control plane failed to start"
    try:
        await cp.start()
        cp.write_status()
        problem = await cp.wait_ready(timeout)
        print(f"error: {problem}" if problem else READY, file=ready_out, flush=True)
        ready_out.close()
        if not problem:
            await cp.stopped.wait()
    finally:
        await cp.stop()
    return 1 if problem else 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m netkit.lab.cluster.controlplane")
    p.add_argument("cluster_dir", type=Path)
    p.add_argument("--deploy", type=Path, default=deploy.default_dir())
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # only the ready line goes to whoever started us
    return asyncio.run(serve(args.cluster_dir.name, args.deploy, out, args.timeout))


if __name__ == "__main__":
    raise SystemExit(main())
