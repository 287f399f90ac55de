"""The lab's kubelet for `--image`: a manifest's pod (`pod.PodSpec`) run as a podman container and
kept running as kubelet keeps it.

- The container runs detached, its output in a CRI-format log (`podman --log-driver k8s-file`, what
  CRI-O writes for kubelet); `podman wait` says when it exits.
- The liveness probe runs from `initialDelaySeconds` on, every `periodSeconds`, each attempt given
  `timeoutSeconds`; `failureThreshold` failures in a row stop the container (its grace period, then
  SIGKILL) and it is started again.
- An exit, whatever its cause (also `podman kill`, which podman's own restart policy leaves stopped),
  starts the container again after a back-off (0.2 s doubling to 5 s; reset after 10 s of running).
- The readiness probe runs every `periodSeconds` from the start; the pod turns ready at the first
  success and unready after `failureThreshold` failures in a row, or when the container stops.

Each start is a new container under the same name (the old one removed first), as kubelet makes a
new container per restart. `stop` removes it after its grace period.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from netkit.lab.cluster import deploy
from netkit.lab.cluster.objects import kubeconfig
from netkit.lab.cluster.plan import API_PORT, Cluster, Node, netns_name
from netkit.lab.cluster.pod import SERVICE_ACCOUNT_DIR, Host, PodSpec, Probe, pod_spec, podman_run_argv
from netkit.lab.cluster.podman import Podman, host_for, probe_ok, write_files
from netkit.lab.errors import LabError

BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET_AFTER = 0.2, 5.0, 10.0
CLUSTER_LABEL = "netkit.lab.cluster"  # a container's cluster directory: `down` removes by it
TOKEN = "netkit-lab-service-account"  # the lab's API server takes any token
API_URL = f"http://127.0.0.1:{API_PORT}"  # inside every node and DNS pod namespace


class Threshold:
    """Consecutive probe results against a failure threshold (kubelet's successThreshold is 1)."""

    def __init__(self, failure_threshold: int) -> None:
        self.failure_threshold = max(1, failure_threshold)
        self.failures = 0

    def failed(self, ok: bool) -> bool:
        """Record one result; whether the failures in a row now reach the threshold."""
        self.failures = 0 if ok else self.failures + 1
        return self.failures >= self.failure_threshold


def next_backoff(backoff: float, ran: float) -> float:
    """The wait before the next start, given the last wait and how long the container ran."""
    return BACKOFF_FIRST if ran > BACKOFF_RESET_AFTER else min(backoff * 2, BACKOFF_MAX)


class PodContainer:
    """One pod's container on a node, with the interface of `controlplane.Supervised` (name, log,
    pid, restarts, last_exit, start, stop) and `on_ready` called when its readiness changes."""

    def __init__(self, name: str, container: str, podman: Podman, spec: PodSpec, host: Host, *,
                 on_change: Callable[[], None], on_ready: Callable[[bool], None] | None = None,
                 grace: float = 3.0) -> None:
        self.name, self.container, self.podman, self.spec, self.host = name, container, podman, spec, host
        self.log = Path(host.log_path)
        self.netns = Path(host.netns_path).name
        self.on_change, self.on_ready = on_change, on_ready
        self.grace = grace
        self.pid = 0
        self.restarts = 0
        self.liveness_restarts = 0  # of `restarts`, those after a failed liveness probe
        self.last_exit: int | None = None
        self.ready = False
        self.stopping = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        backoff = BACKOFF_FIRST
        while not self.stopping:
            started = time.monotonic()
            status = await self.attempt()
            self.set_ready(False)
            self.pid = 0
            if self.stopping:
                break
            self.last_exit = status
            self.restarts += 1
            self.on_change()
            backoff = next_backoff(backoff, time.monotonic() - started)
            await asyncio.sleep(backoff)

    async def attempt(self) -> int:
        """Start the container, watch it until it exits or fails its liveness probe: its exit status."""
        await asyncio.to_thread(self.podman.remove, self.container)
        argv = podman_run_argv(self.spec, self.container, self.host)
        proc = await asyncio.to_thread(self.podman.run, *argv[1:], check=False)
        if self.stopping:  # stop() removes what this made once this returns
            return 0
        if proc.returncode != 0:
            said = proc.stderr.strip().splitlines()
            self.note(f"podman run: {said[-1] if said else f'exit {proc.returncode}'}")
            return proc.returncode
        inspect = await asyncio.to_thread(self.podman.run, "inspect", "--format", "{{.State.Pid}}",
                                          self.container, check=False)
        self.pid = int(inspect.stdout.strip() or 0) if inspect.returncode == 0 else 0
        self.on_change()
        waiter = await asyncio.create_subprocess_exec(
            self.podman.path, "wait", self.container, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        exited = asyncio.ensure_future(waiter.communicate())
        probes = [asyncio.ensure_future(self.liveness(self.spec.liveness)),
                  asyncio.ensure_future(self.readiness(self.spec.readiness))]
        try:
            done, _ = await asyncio.wait({exited, probes[0]}, return_when=asyncio.FIRST_COMPLETED)
            if exited not in done and not self.stopping:
                self.liveness_restarts += 1
                await asyncio.to_thread(self.podman.run, "stop", "--time", str(round(self.grace)), self.container,
                                        check=False, timeout=self.grace + 60)
                # after the container's own last lines, so an error names the cause
                self.note(f"liveness probe failed {self.spec.liveness.failure_threshold if self.spec.liveness else 0}"
                          " times in a row: container stopped, to be started again")
            out, _ = await exited
        finally:
            for task in probes:
                task.cancel()
        text = out.decode().strip()
        return int(text) if text.lstrip("-").isdigit() else -1

    async def liveness(self, probe: Probe | None) -> None:
        """Returns once the probe has failed `failureThreshold` times in a row; never without a probe."""
        if probe is None:
            await asyncio.Event().wait()
            return
        await asyncio.sleep(probe.initial_delay)
        threshold = Threshold(probe.failure_threshold)
        while not threshold.failed(await asyncio.to_thread(probe_ok, self.netns, probe)):
            await asyncio.sleep(probe.period)

    async def readiness(self, probe: Probe | None) -> None:
        if probe is None:
            self.set_ready(True)
            return
        await asyncio.sleep(probe.initial_delay)
        threshold = Threshold(probe.failure_threshold)
        while True:
            ok = await asyncio.to_thread(probe_ok, self.netns, probe)
            if ok:
                self.set_ready(True)
            if threshold.failed(ok):
                self.set_ready(False)
            await asyncio.sleep(probe.period)

    def set_ready(self, ready: bool) -> None:
        if ready != self.ready:
            self.ready = ready
            if self.on_ready is not None:
                self.on_ready(ready)

    def note(self, text: str) -> None:
        """A line of the lab's own in the container's log (CRI format, as the runtime's lines)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        with open(self.log, "a") as f:
            f.write(f"{stamp}.000000000+00:00 stderr F lab: {text}\n")

    async def stop(self, grace: float | None = None) -> None:
        """Stop and remove the container: SIGTERM, SIGKILL after `grace` (None: the pod's own).

        The supervising task is let finish rather than cancelled: a `podman run` under way in a thread
        cannot be cancelled, and a container removed while podman creates it could outlive its record
        in podman's storage. So the task's own podman command ends first, then the container goes."""
        grace = self.grace if grace is None else grace
        self.stopping = True
        await asyncio.to_thread(self.podman.run, "rm", "--force", "--ignore", "--time", str(round(grace)),
                                self.container, check=False, timeout=grace + 60)
        if self.task is not None:
            done, _ = await asyncio.wait({self.task}, timeout=grace + 120)
            if not done:  # a podman command that hangs: give up on it
                self.task.cancel()
        await asyncio.to_thread(self.podman.remove, self.container)  # one started while it was stopping



def cidrs(cluster: Cluster) -> str:
    """The KubeProxyConfiguration's clusterCIDR: the cluster's pod CIDRs, one per family."""
    return ",".join(str(c) for c in cluster.cluster_cidrs)


def container_name(cluster: Cluster, pod: str) -> str:
    """Named as the cluster's namespaces are (its state directory's prefix, its id), so what a
    crash leaves is found by name too."""
    return netns_name(cluster.prefix, cluster.cluster_id, pod)


def node_daemon(podman: Podman, deploy_dir: Path, image: str, cluster: Cluster, node: Node, cluster_dir: Path,
                log: Path, on_change: Callable[[], None]) -> PodContainer:
    """The DaemonSet's pod on `node`, in the node's namespace (host network)."""
    ds = deploy.find(list(deploy.documents(deploy_dir)), "DaemonSet")
    spec = pod_spec(ds, node.name, image)
    if not spec.host_network:
        raise LabError("deploy/: the DaemonSet's pods run with hostNetwork: true (netkit programs the node)")
    maps, named = deploy.pod_config_maps(deploy_dir, ds, mode=cluster.mode, cluster_cidr=cidrs(cluster),
                                         server=API_URL)
    pod = f"netkit-{node.name}"
    dirs, sa = write_files(cluster_dir / "pods" / pod, maps, TOKEN)
    if not named:  # in-cluster credentials: the lab's API speaks plain HTTP, so a kubeconfig instead
        spec = with_kubeconfig(spec, Path(sa))
    host = host_for(spec, podman, node.netns, dirs, sa, labels={CLUSTER_LABEL: str(cluster_dir)}, log_path=str(log))
    return PodContainer(node.name, container_name(cluster, pod), podman, spec, host, on_change=on_change)


def dns_pod(podman: Podman, deploy_dir: Path, image: str, cluster: Cluster, pod: tuple[str, str, str],
            cluster_dir: Path, log: Path, on_change: Callable[[], None], on_ready: Callable[[bool], None],
            grace: float) -> PodContainer:
    """deploy/dns's Deployment's pod `pod` (name, node, network namespace): the pod's resolv.conf is
    the lab's (dnsPolicy: Default), its API the lab's through a kubeconfig."""
    name, node, netns = pod
    dep = deploy.find(list(deploy.documents(deploy_dir / "dns")), "Deployment")
    spec = pod_spec(dep, node, image)
    maps, _ = deploy.pod_config_maps(deploy_dir, dep, mode=cluster.mode, cluster_cidr=cidrs(cluster), server=API_URL)
    dirs, sa = write_files(cluster_dir / "pods" / name, maps, TOKEN)
    spec = with_kubeconfig(spec, Path(sa))
    host = host_for(spec, podman, netns, dirs, sa, resolv_conf=str(cluster_dir / "dns" / "resolv.conf"),
                    labels={CLUSTER_LABEL: str(cluster_dir)}, log_path=str(log))
    return PodContainer(name, container_name(cluster, name), podman, spec, host, on_change=on_change,
                        on_ready=on_ready, grace=grace)


def with_kubeconfig(spec: PodSpec, sa_dir: Path) -> PodSpec:
    """`spec` reading the lab's API through a kubeconfig in its service account's directory (with the
    account's token), where a pod would use in-cluster credentials (HTTPS, which the lab's API lacks)."""
    if not spec.service_account:
        raise LabError("deploy/: a pod that reads the API needs a serviceAccountName")
    config = kubeconfig(API_URL)
    config["users"][0]["user"] = {"tokenFile": f"{SERVICE_ACCOUNT_DIR}/token"}
    (sa_dir / "kubeconfig").write_text(json.dumps(config, indent=1))
    return replace(spec, args=(*spec.args, f"--kubeconfig={SERVICE_ACCOUNT_DIR}/kubeconfig"))
