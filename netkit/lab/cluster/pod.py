"""What kubelet would run for a manifest's pod on one node, read from the manifest (a DaemonSet or a
Deployment in `deploy/`), and the `podman run` arguments that run it. Pure: no IO.

Read, not restated: the container's image, command and args (`$(VAR)` expanded from its env), its
env (a `fieldRef: spec.nodeName` gets the node's name), its ConfigMap and hostPath volume mounts, the
service account kubelet projects, host network, the securityContext (privileged, capabilities added
and dropped) and the liveness and readiness probes. The caller supplies where things live on this
machine: each ConfigMap's files, the service account's directory, the node's network namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netkit.lab.cluster.deploy import container, expand, field_env
from netkit.lab.errors import LabError

JSON = dict[str, Any]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True, slots=True)
class Probe:
    """An httpGet probe with kubelet's defaults for what the manifest leaves out."""

    path: str
    port: int
    host: str
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    failure_threshold: int = 3


@dataclass(frozen=True, slots=True)
class Mount:
    source: str  # a ConfigMap's name, or a hostPath's path
    target: str
    read_only: bool
    config_map: bool
    host_path_type: str = ""  # the hostPath's `type` ("" or FileOrCreate, Directory, ...)


@dataclass(frozen=True, slots=True)
class PodSpec:
    image: str
    command: tuple[str, ...]  # expanded; () keeps the image's entrypoint
    args: tuple[str, ...]     # expanded; after the command, or the image's entrypoint
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    service_account: str
    host_network: bool
    privileged: bool
    cap_add: tuple[str, ...]
    cap_drop: tuple[str, ...]
    liveness: Probe | None
    readiness: Probe | None


def pod_spec(workload: JSON, node: str, image: str | None = None) -> PodSpec:
    """The pod `workload` (a DaemonSet or Deployment) runs on `node`; `image` replaces the manifest's."""
    pod = (((workload.get("spec") or {}).get("template") or {}).get("spec")) or {}
    c = container(workload)
    env = field_env(c, node)
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = []
    for m in c.get("volumeMounts") or []:
        vol = volumes.get(m["name"])
        if vol is None:
            raise LabError(f"deploy/: volumeMount {m['name']}: no such volume in the pod")
        read_only = bool(m.get("readOnly"))
        if "configMap" in vol:
            mounts.append(Mount(vol["configMap"]["name"], m["mountPath"], True, True))
        elif "hostPath" in vol:
            hp = vol["hostPath"]
            mounts.append(Mount(hp["path"], m["mountPath"], read_only, False, hp.get("type", "")))
        else:
            raise LabError(f"deploy/: volume {m['name']}: only configMap and hostPath volumes are run")
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    return PodSpec(
        image=image or str(c.get("image") or ""),
        command=tuple(expand(a, env) for a in c.get("command") or ()),
        args=tuple(expand(a, env) for a in c.get("args") or ()),
        env=tuple(sorted(env.items())),
        mounts=tuple(mounts),
        service_account=str(pod.get("serviceAccountName") or ""),
        host_network=bool(pod.get("hostNetwork")),
        privileged=bool(sc.get("privileged")),
        cap_add=tuple(caps.get("add") or ()),
        cap_drop=tuple(caps.get("drop") or ()),
        liveness=_probe(c.get("livenessProbe"), c),
        readiness=_probe(c.get("readinessProbe"), c),
    )


def _probe(doc: JSON | None, c: JSON) -> Probe | None:
    """An httpGet probe; a named port is the container's port of that name, as kubelet resolves it."""
    if not doc:
        return None
    get = doc.get("httpGet")
    port = get.get("port") if isinstance(get, dict) else None
    if isinstance(port, str):
        port = next((p.get("containerPort") for p in c.get("ports") or () if p.get("name") == port), None)
    if not isinstance(get, dict) or not isinstance(port, int):
        raise LabError("deploy/: only httpGet probes with a numeric port or a named container port are run")
    return Probe(path=str(get.get("path") or "/"), port=port, host=str(get.get("host") or "127.0.0.1"),
                 initial_delay=float(doc.get("initialDelaySeconds", 0)), period=float(doc.get("periodSeconds", 10)),
                 timeout=float(doc.get("timeoutSeconds", 1)), failure_threshold=int(doc.get("failureThreshold", 3)))


@dataclass(frozen=True, slots=True)
class Host:
    """Where the pod's things are on this machine, and what its podman needs."""

    netns_path: str                       # the pod's network namespace (the node's: host network)
    config_maps: Mapping[str, str]        # ConfigMap name -> a directory holding its files
    service_account_dir: str              # token and ca.crt, as kubelet projects them
    missing_paths: frozenset[str] = frozenset()  # hostPaths absent here (no /lib/modules): not mounted
    runtime: str = ""                     # an OCI runtime to use (runc where crun refuses the cgroups)
    ulimits: tuple[str, ...] = ()         # podman's --ulimit values, where its defaults cannot be set
    resolv_conf: str = ""                 # a file for the container's /etc/resolv.conf ("": podman's)
    labels: tuple[tuple[str, str], ...] = ()  # the container's labels (whose it is)
    log_path: str = ""                    # the container's log, in the CRI format kubelet's runtimes write


def podman_run_argv(spec: PodSpec, name: str, host: Host) -> list[str]:
    """`podman run` for `spec`, detached, named `name`; no restart policy: the caller restarts, as
    kubelet does."""
    argv = ["podman", "run", "--detach", "--name", name, "--pull", "never"]
    argv += [f"--ulimit={u}" for u in host.ulimits]
    if host.runtime:
        argv += ["--runtime", host.runtime]
    argv += ["--network", f"ns:{host.netns_path}"]  # a pod's own namespace, or the node's (host network)
    argv += [f"--label={k}={v}" for k, v in host.labels]
    if host.log_path:
        argv += ["--log-driver", "k8s-file", "--log-opt", f"path={host.log_path}"]
    if spec.privileged:
        argv.append("--privileged")
    argv += [f"--cap-drop={cap}" for cap in spec.cap_drop]
    argv += [f"--cap-add={cap}" for cap in spec.cap_add]
    argv += [f"--env={k}={v}" for k, v in spec.env]
    for m in spec.mounts:
        if m.config_map:
            if m.source not in host.config_maps:
                raise LabError(f"deploy/: ConfigMap {m.source}: not in the manifests")
            argv.append(f"--volume={host.config_maps[m.source]}:{m.target}:ro")
        elif m.source not in host.missing_paths:
            argv.append(f"--volume={m.source}:{m.target}{':ro' if m.read_only else ''}")
    if spec.service_account:
        argv.append(f"--volume={host.service_account_dir}:{SERVICE_ACCOUNT_DIR}:ro")
    if host.resolv_conf:
        argv.append(f"--volume={host.resolv_conf}:/etc/resolv.conf:ro")
    if spec.command:
        argv += ["--entrypoint", spec.command[0], spec.image, *spec.command[1:], *spec.args]
    else:
        argv += [spec.image, *spec.args]
    return argv
