"""Up, down, and the changes in between (scale, drain): the IO that ties plan, build, state and the
control plane together.

`up` records the cluster before it builds anything, builds the namespaces, starts the control plane
in its own session (so it outlives the command) and waits for its `ready` line; any failure, Ctrl-C
or SIGTERM on the way tears down everything that exists before the error is shown. `down` stops the
control plane (which stops what it started), then every process still naming the cluster's
directory on its command line (left by a crash), deletes the namespaces and forgets the record.

Removing pods is graceful, as in Kubernetes: the Pod gets a deletionTimestamp, the controller marks
its endpoints terminating (not ready, still serving), and only once every node's daemon has finished
a sync that took that slice (`programmed`: read from the daemons' metrics, so a scale-down takes
about as long as the daemons take to sync) is the Pod deleted, its servers closed and its namespace
removed — so connections never go to a pod that is gone.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from netkit import procfs
from netkit.lab import pause
from netkit.lab.cluster import build, kubelet, objects, plan, programmed, state
from netkit.lab.cluster.api import Api
from netkit.lab.cluster.controller import TRIGGER
from netkit.lab.cluster.plan import Cluster, Pod
from netkit.lab.cluster.podman import Podman
from netkit.lab.errors import LabError
from netkit.lab.lab import sigterm_raises
from netkit.lab.servers import read_line

READY = "ready"  # the control plane's line once the cluster works (controlplane.READY)
MODE_TOOLS = {"iptables": ("iptables-restore", "iptables-save"), "nftables": ("nft",), "ipvs": ("ipvsadm",)}


def need_root() -> None:
    if os.geteuid() != 0:
        raise LabError("netkit lab cluster needs root (it creates network namespaces)")


def need_tools(mode: str) -> None:
    missing = [t for t in ("ip", *MODE_TOOLS.get(mode, ())) if shutil.which(t) is None]
    if missing:
        raise LabError(f"--mode {mode} needs {', '.join(missing)} (not installed)")


def new_id() -> str:
    for _ in range(10):
        cid = secrets.token_hex(3)
        if not state.cluster_dir(cid).exists() and not build.leftovers(cid):
            return cid
    raise LabError("could not find an unused cluster id")


# --- up / down -------------------------------------------------------------------------------------

def up(nodes: int, mode: str, pods_per_node: int, *, timeout: float = 60.0, cluster_id: str = "",
       dns_pods: int | None = None, ip_family: str = "ipv4", image: str = "") -> state.Record:
    need_root()
    need_tools(mode)
    if image:
        need_image(image)
    if cluster_id and (state.cluster_dir(cluster_id).exists() or build.leftovers(cluster_id)):
        raise LabError(f"cluster {cluster_id} exists already (netkit lab cluster down {cluster_id})")
    try:
        cluster = plan.initial(cluster_id or new_id(), nodes, pods_per_node, mode, state.NETNS_PREFIX, dns_pods,
                               ip_family)
    except ValueError as exc:
        raise LabError(str(exc)) from exc
    cid = cluster.cluster_id
    with sigterm_raises():
        state.save(state.Record(cluster, image=image))
        try:
            build.build(cluster)
            start_control_plane(cid, timeout)
            pause.point("cluster-control-plane")
        except (LabError, OSError) as exc:  # OSError: e.g. /etc/netns read-only
            down(cid)
            why = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename else str(exc)
            raise LabError(f"cluster {cid} could not be built and was removed: {why}") from exc
        except BaseException:
            down(cid)
            raise
    record = state.load(cid)
    assert record is not None
    return record


def need_image(image: str) -> None:
    """podman, and `image` in its local storage (the lab never pulls)."""
    if not Podman.find().has_image(image):
        raise LabError(f"image {image}: not in podman's local storage (`make image` builds netkit's)")


def start_control_plane(cid: str, timeout: float) -> None:
    logs = state.log_dir(cid)
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "control-plane.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "netkit.lab.cluster.controlplane", str(state.cluster_dir(cid)),
             "--timeout", str(timeout)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
            env={**os.environ, "PYTHONPATH": package_path()})
    assert proc.stdout is not None
    line = read_line(proc.stdout, timeout + 10).strip()
    proc.stdout.close()
    if line != READY:
        raise LabError(line.removeprefix("error: ") if line else
                       f"the control plane did not start (see {logs / 'control-plane.log'})")


def package_path() -> str:
    root = str(Path(__file__).resolve().parents[3])
    return os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))


def down(cid: str) -> None:
    """Remove everything of cluster `cid`; tolerant of anything already gone (or never made)."""
    record = state.load(cid)
    marker = str(state.cluster_dir(cid))
    for _ in range(5):  # the control plane first (it stops its own); again, for what it started meanwhile
        pids = processes(marker)
        if not pids:
            break
        control = [p for p in pids if alive(p, "netkit.lab.cluster.controlplane")]
        stop_pids(control or pids, marker, grace=6.0 if control else 3.0)
    if record is None or record.image:
        remove_containers(marker)
    pause.point("cluster-down")
    names = set(build.leftovers(cid)) | set(record.cluster.namespaces if record else ())
    build.remove_namespaces(sorted(names))
    state.forget(cid)


def down_all() -> list[str]:
    """Every cluster of this state directory, and whatever a crash left of one: its directory (with
    or without a readable record), namespaces named with this directory's prefix (also without a
    record), and processes naming a path under its clusters/ directory."""
    ids = known_ids()
    for cid in ids:
        down(cid)
    stop_pids(processes(str(state.CLUSTERS_DIR)), str(state.CLUSTERS_DIR))
    remove_containers(str(state.CLUSTERS_DIR))
    return ids


def known_ids() -> list[str]:
    """Clusters of this state directory: with a directory, or only namespaces named as its clusters'."""
    prefix = state.NETNS_PREFIX
    return sorted(set(state.known_ids()) | {n[len(prefix):].split("-", 1)[0] for n in build.leftovers(prefix=prefix)})


def remove_containers(marker: str) -> None:
    """Containers of the cluster directory `marker` (or of any under it) that its control plane left
    (a crash): found by their label, whatever their state."""
    if shutil.which("podman") is None:
        return
    podman = Podman.find()
    m = marker.rstrip("/")
    for name, where in podman.labelled(kubelet.CLUSTER_LABEL).items():
        if where == m or where.startswith(m + "/"):
            podman.remove(name)


def processes(marker: str) -> list[int]:
    """Processes (except this one) with an argument that is the path `marker` or a path under it
    (also as `--flag=PATH`): every process of a cluster names its directory."""
    me = os.getpid()
    return [pid for pid in procfs.pids() if pid != me and names_path(procfs.cmdline(pid) or b"", marker)]


def names_path(cmdline: bytes, marker: str) -> bool:
    """Whether a NUL-separated command line has `marker`, or a path under it, as an argument."""
    m = marker.rstrip("/").encode()
    for arg in cmdline.split(b"\0"):
        value = arg.partition(b"=")[2] if arg.startswith(b"-") else arg
        if value == m or value.startswith(m + b"/"):
            return True
    return False


def alive(pid: int, marker: str) -> bool:
    return names_path(procfs.cmdline(pid) or b"", marker)


def stop_pids(pids: Iterable[int], marker: str, grace: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace`: only processes still naming `marker` (never a recycled pid)."""
    pids = [p for p in pids if alive(p, marker)]
    for pid in pids:
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        for pid in pids:
            reap(pid)
        pids = [p for p in pids if alive(p, marker)]
        time.sleep(0.02)
    for pid in pids:
        signal_pid(pid, signal.SIGKILL)
        reap(pid)


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# --- changes -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Changed:
    added: tuple[Pod, ...]
    removed: tuple[Pod, ...]


def record_of(cid: str) -> state.Record:
    record = state.load(cid)
    if record is None:
        raise LabError(f"no cluster {cid} (see netkit lab cluster status)")
    if not record.api_port:
        raise LabError(f"cluster {cid} is not up (its control plane never started)")
    return record


def scale(cid: str, deploy: str, replicas: int, *, create: bool = False, grace_timeout: float = 30.0,
          hostname: str = "", subdomain: str = "", unready: bool = False) -> Changed:
    """Set `deploy`'s pods to `replicas` (`create`: a new deployment, its pods labelled app=DEPLOY;
    new pods get `hostname` and `subdomain` as their spec.hostname and spec.subdomain; `unready`:
    new pods serve but never turn Ready, as with a readiness probe that always fails)."""
    with state.locked(cid):
        record = record_of(cid)
        known = (*record.cluster.deploys, *(() if plan.APP_DEPLOY in record.cluster.deploys else (plan.APP_DEPLOY,)))
        if deploy not in known and not (create and plan.valid_deploy_name(deploy)):
            hint = "" if create else "; --create makes a new one"
            raise LabError(f"no deployment {deploy!r} in cluster {cid} (deployments: {', '.join(known)}{hint})")
        try:
            cluster, added, doomed = plan.scale(record.cluster, deploy, replicas, hostname, subdomain, unready)
        except ValueError as exc:
            raise LabError(str(exc)) from exc
        record = add(record, cluster, added)
        record = remove(record, doomed, grace_timeout)
        return Changed(added, doomed)


def drain(cid: str, node: str, *, grace_timeout: float = 30.0) -> Changed:
    with state.locked(cid):
        record = record_of(cid)
        try:
            target = record.cluster.node(node)
        except KeyError:
            names = ", ".join(n.name for n in record.cluster.nodes)
            raise LabError(f"no node {node!r} in cluster {cid} (nodes: {names})") from None
        try:
            cluster, added, evicted = plan.drain(record.cluster, node)
        except ValueError as exc:
            raise LabError(str(exc)) from exc
        api = Api(record.api_port)
        api.replace("nodes", "", objects.node_object(record.cluster, target, cordoned=True))
        record = add(record, cluster, added)
        record = remove(record, evicted, grace_timeout)
        return Changed(added, evicted)


def delete(cid: str, names: Sequence[str], *, grace_timeout: float = 30.0, hold: bool = False) -> Changed:
    """Delete pods by name, gracefully, as `kubectl delete pod` does to a pod no controller replaces.
    `hold`: leave them terminating — not Ready, still serving — as a pod whose long
    terminationGracePeriodSeconds has not run out (agnhost netexec --delay-shutdown); a later
    delete without `hold` removes them."""
    with state.locked(cid):
        record = record_of(cid)
        pods = {p.name: p for p in record.cluster.pods}
        missing = [n for n in names if n not in pods]
        if missing:
            raise LabError(f"no pod {missing[0]!r} in cluster {cid}")
        doomed = tuple(pods[n] for n in names)
        if hold:
            api, stamp = Api(record.api_port), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for pod in doomed:
                api.replace("pods", pod.namespace, objects.pod_object(record.cluster, pod, terminating=stamp))
        else:
            remove(record, doomed, grace_timeout)
        return Changed((), doomed)


def add(record: state.Record, cluster: Cluster, pods: tuple[Pod, ...]) -> state.Record:
    """Build `pods`' namespaces, create their Pod objects, wait until the control plane serves them."""
    record = record.with_cluster(cluster)
    state.save(record)  # before building: `down` must know every namespace
    build.add_pods(cluster, pods)
    api = Api(record.api_port)
    for pod in pods:
        api.create("pods", pod.namespace, objects.pod_object(cluster, pod))
    status = state.cluster_dir(record.cluster_id) / "status.json"
    wait_for(lambda: all(p.name in read_echo(status) if p.unready else pod_ready(api, p) for p in pods), 10.0,
             "new pods to become ready")
    return record


def pod_ready(api: Api, pod: Pod) -> bool:
    conditions = (api.get("pods", pod.namespace, pod.name).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def remove(record: state.Record, pods: tuple[Pod, ...], grace_timeout: float) -> state.Record:
    if not pods:
        return record
    api = Api(record.api_port)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for pod in pods:
        if not (api.get("pods", pod.namespace, pod.name).get("metadata") or {}).get("deletionTimestamp"):
            api.replace("pods", pod.namespace,
                        objects.pod_object(record.cluster, pod, ready=not pod.unready, terminating=stamp))
    trigger = wait_published_terminating(api, pods, grace_timeout)
    if trigger is not None:  # else no slice lists them: no node sends them anything
        late = programmed.wait({n.name: n.netns for n in record.cluster.nodes}, trigger, grace_timeout)
        if late:  # removed all the same, as kubelet does after the grace period: but never silently
            _warn(f"{', '.join(late)} had not programmed the removal of {_names(pods)} after "
                  f"{grace_timeout:g} s; removing the pods anyway")
    for pod in pods:
        api.delete("pods", pod.namespace, pod.name)
    status = state.cluster_dir(record.cluster_id) / "status.json"
    wait_for(lambda: not any(p.name in read_echo(status) for p in pods), grace_timeout, "pods to stop")
    build.remove_pods(record.cluster, pods)
    record = record.with_cluster(plan.without(record.cluster, pods))
    state.save(record)
    return record


def wait_published_terminating(api: Api, pods: tuple[Pod, ...], timeout: float) -> float | None:
    """Until the EndpointSlice controller has published every one of `pods` as terminating (or
    dropped it), as a loaded machine may take longer than a fixed allowance: the newest
    last-change-trigger-time of the slices that list them, None when none does."""
    names = {(p.namespace, p.name) for p in pods}
    deadline = time.monotonic() + timeout
    while True:
        pending, triggers = False, []
        for sl in api.list("endpointslices"):
            meta = sl.get("metadata") or {}
            listed = [ep for ep in sl.get("endpoints") or ()
                      if (meta.get("namespace", ""), (ep.get("targetRef") or {}).get("name")) in names]
            pending |= any(not (ep.get("conditions") or {}).get("terminating") for ep in listed)
            if listed:
                triggers.append(programmed.trigger_time((meta.get("annotations") or {}).get(TRIGGER, "")))
        if not pending:
            break
        if time.monotonic() > deadline:  # the slices' times are older than the change: wait for now
            _warn(f"the EndpointSlice controller had not published {_names(pods)} as terminating after "
                  f"{timeout:g} s")
            return time.time()
        time.sleep(0.05)
    if not triggers:
        return None
    return max(t if t is not None else time.time() for t in triggers)


def _names(pods: tuple[Pod, ...]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


def _warn(text: str) -> None:
    print(f"netkit: warning: lab cluster: {text}", file=sys.stderr, flush=True)


def read_echo(status: Path) -> list[str]:
    import json

    try:
        echo = json.loads(status.read_text()).get("echo") or []
    except (OSError, ValueError):
        return []
    return [str(e) for e in echo]


def wait_for(check: object, timeout: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)
