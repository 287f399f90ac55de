"""Runs a manifest's pod (`pod.PodSpec`) as a podman container, as kubelet would: the ConfigMaps'
files and the service account's token written to a directory of the caller's, hostPaths of type
FileOrCreate created, the node's network namespace as host network; `start` returns once the
readiness probe answers, and says why when the container exits or never gets ready.

Podman as some container hosts have it: crun refuses a hybrid cgroup layout, so runc is used where it
is installed (it runs on both layouts); root may lack CAP_SYS_RESOURCE, so podman could not raise a
container's rlimits to its defaults: it is asked for what it has (`ulimits`); a hostPath this
machine lacks (/lib/modules) is not mounted.

Every failure is a LabError (one `netkit: error:` line, exit 2) and leaves no container behind.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from netkit.lab.cluster.nodehttp import get
from netkit.lab.cluster.pod import Host, PodSpec, Probe, podman_run_argv
from netkit.lab.errors import LabError
from netkit.runtime import capabilities

NETNS_DIR = "/run/netns"


@dataclass(frozen=True, slots=True)
class Podman:
    """The podman command; `Podman.find()` says clearly when there is none."""

    path: str
    runtime: str  # "" for podman's default

    ulimits: tuple[str, ...] = ()

    @staticmethod
    def find() -> Podman:
        path = shutil.which("podman")
        if path is None:
            raise LabError("podman: not installed (apt-get install podman runc; see docs/daemon.md)")
        return Podman(path, "runc" if shutil.which("runc") else "", ulimits())

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            said = proc.stderr.strip().splitlines()
            raise LabError(f"podman {args[0]}: {said[-1] if said else f'exit {proc.returncode}'}")
        return proc

    def has_image(self, image: str) -> bool:
        return self.run("image", "exists", image, check=False).returncode == 0

    def remove(self, name: str) -> None:
        self.run("rm", "--force", "--time", "0", "--ignore", name, check=False)

    def labelled(self, key: str) -> dict[str, str]:
        """{container name: its label `key`} for every container (running or not) that has the label."""
        out = self.run("ps", "--all", "--filter", f"label={key}", "--format",
                       f'{{{{.Names}}}} {{{{index .Labels "{key}"}}}}', check=False).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def exited(self, name: str) -> int | None:
        """The container's exit status once it has stopped; None while it runs."""
        out = self.run("inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", name).stdout.split()
        return None if out[0] == "true" else int(out[1])

    def last_log_line(self, name: str) -> str:
        proc = self.run("logs", "--tail", "5", name, check=False)
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        return lines[-1] if lines else "(no output)"


CAP_SYS_RESOURCE = 24
PODMAN_NPROC = 32768  # the RLIMIT_NPROC podman (4.3) gives itself and so its containers' runtime


def ulimits() -> tuple[str, ...]:
    """None when this process may raise rlimits (podman's defaults work); else open files as this
    process has them and processes at most what podman keeps for itself."""
    if capabilities.effective(Path("/proc/self/status").read_text()) >> CAP_SYS_RESOURCE & 1:
        return ()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = [min(v if v != resource.RLIM_INFINITY else PODMAN_NPROC, PODMAN_NPROC)
             for v in resource.getrlimit(resource.RLIMIT_NPROC)]
    return (f"nofile={nofile[0]}:{nofile[1]}", f"nproc={nproc[0]}:{nproc[1]}")


def write_files(workdir: Path, config_maps: Mapping[str, Mapping[str, str]], token: str) -> tuple[dict[str, str], str]:
    """Each ConfigMap's files in its own directory and the service account's (token, an empty ca.crt
    for a plain-HTTP API server); ({ConfigMap name: directory}, the service account's directory)."""
    dirs = {}
    for name, data in config_maps.items():
        d = workdir / f"configmap-{name}"
        d.mkdir(parents=True, exist_ok=True)
        for fname, text in data.items():
            (d / fname).write_text(text)
        dirs[name] = str(d)
    sa = workdir / "serviceaccount"
    sa.mkdir(parents=True, exist_ok=True)
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_text("")
    return dirs, str(sa)


def host_for(spec: PodSpec, podman: Podman, netns: str, config_dirs: Mapping[str, str], sa_dir: str, *,
             resolv_conf: str = "", labels: Mapping[str, str] | None = None, log_path: str = "") -> Host:
    """Where `spec`'s things are on this machine: FileOrCreate hostPaths created (as kubelet does),
    other missing ones left out."""
    missing = set()
    for m in spec.mounts:
        if m.config_map or os.path.exists(m.source):
            continue
        if m.host_path_type == "FileOrCreate":
            Path(m.source).touch()
        else:
            missing.add(m.source)
    return Host(f"{NETNS_DIR}/{netns}", config_dirs, sa_dir, frozenset(missing), podman.runtime, podman.ulimits,
                resolv_conf, tuple(sorted((labels or {}).items())), log_path)


def start(podman: Podman, spec: PodSpec, name: str, host: Host, ready_timeout: float = 60) -> None:
    """Run the container and wait for its readiness probe; on any failure it is removed and a
    LabError says why (the container's last log line when it exited)."""
    if not podman.has_image(spec.image):
        raise LabError(f"image {spec.image}: not in podman's local storage (`make image` builds netkit's)")
    try:
        podman.run(*podman_run_argv(spec, name, host)[1:])
        netns = os.path.basename(host.netns_path)
        deadline = time.monotonic() + ready_timeout
        while not probe_ok(netns, spec.readiness):
            if (status := podman.exited(name)) is not None:
                raise LabError(f"container {name} ({spec.image}) exited with status {status}: "
                               f"{podman.last_log_line(name)}")
            if time.monotonic() > deadline:
                raise LabError(f"container {name} ({spec.image}): not ready after {ready_timeout:.0f} s: "
                               f"{podman.last_log_line(name)}")
            time.sleep(0.2)
    except BaseException:
        podman.remove(name)
        raise


def probe_ok(netns: str, probe: Probe | None) -> bool:
    """One httpGet probe from inside the node's namespace: 200-399 passes, as kubelet's."""
    if probe is None:
        return True
    try:
        return 200 <= get(netns, probe.host, probe.port, probe.path, timeout=probe.timeout).status < 400
    except OSError:
        return False
