"""Benchmark: what a lab cluster costs, and how long a Service takes to work on every node.

For each mode (iptables, nftables; ipvs only where the kernel has IPVS):

1. **up**: `netkit lab cluster up --nodes 10 --pods-per-node 1`, timed from the call to the cluster
   being ready (every node's daemon synced, the DNS answering), and the memory of every process it
   runs (control plane, one `netkit run` per node, the DNS servers) as the sum of their proportional
   set sizes (/proc/PID/smaps_rollup `Pss`: pages shared between them counted once), plus the largest
   single `netkit run`. Baseline, same run: the plain two-node lab (`netkit.lab.start`).
2. **network-programming latency**: 100 Services, one at a time, each `kubectl apply`'d (a ClusterIP
   chosen up front, selecting the web pods); the time from starting kubectl to *every* node answering
   a TCP connection to that ClusterIP (each node polled from its own namespace, 20 ms apart; before its
   rules exist a SYN goes nowhere). p50 / p99 over the 100, next to kubectl's own run time and to
   minSyncPeriod (1 s in deploy/'s configuration, kube-proxy's default: how long a node may hold a
   change back by design), the figures the latency is made of.

   minSyncPeriod is read from each run's first node's log (what its daemon uses: deploy/'s
   configuration leaves it at kube-proxy's defaults, 1 s for iptables and nftables, 0 for ipvs).

With `--image IMAGE` (netkit's node image, `make image`), each mode runs twice: with the daemons and
DNS servers as processes (the baseline, same run) and as podman containers of the image
(`up --image`, the lab acting as kubelet). Figures: `up`'s time and the memory next to the process
runtime's — a container's memory is the PSS of its processes plus its conmon (podman's per-container
monitor) —, the network-programming latency p50 / p99 next to the process runtime's (the container
runtime should leave it unchanged within noise), and the image's size.

Runs once; a few minutes on 2 cores. Needs root, kubectl. IPVS mode needs a kernel with IPVS: in the
test VM (software emulation, one vCPU; its /etc is read-only, so a tmpfs goes on /etc/netns), at a
smaller size:

    .venv/bin/python bench/cluster.py [--nodes 10] [--services 100] [--modes iptables nftables]
    vm-images/run --cpus 1 --memory 1536 -- .venv/bin/python bench/cluster.py --modes ipvs --nodes 2 \
        --dns-pods 1 --services 20 --timeout 400
    .venv/bin/python bench/cluster.py --modes iptables --image netkit:0.1.0 \
        --json bench/results/cluster-image.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The clusters live in a state directory of the benchmark's own, never in the machine's
# /run/netkit-lab where a user's own clusters are (netkit.lab reads the variable when imported).
OWN_STATE = "" if os.environ.get("NETKIT_LAB_STATE_DIR") else tempfile.mkdtemp(prefix="netkit-bench-cluster-")
if OWN_STATE:
    os.environ["NETKIT_LAB_STATE_DIR"] = OWN_STATE

import results  # noqa: E402  (bench/results.py: --json)

from netkit import procfs  # noqa: E402
from netkit.lab import start, stop  # noqa: E402
from netkit.lab.cluster import kubelet, lifecycle, state  # noqa: E402
from netkit.lab.cluster.controlplane import log_lines  # noqa: E402
from netkit.lab.cluster.podman import Podman  # noqa: E402
from netkit.lab.cluster.state import Record  # noqa: E402
from netkit.lab.sockets import connect  # noqa: E402

SERVICE = """apiVersion: v1
kind: Service
metadata: {{name: bench-{n}}}
spec:
  clusterIP: {ip}
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"""


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def role(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"netkit.lab.cluster.controlplane" in argv:
        return "control plane"
    return "netkit run" if b"run" in argv else "netkit dns" if b"dns" in argv else "other"


def memory(record: Record) -> dict[str, list[float]]:
    """MiB of PSS per process, by role."""
    by_role: dict[str, list[float]] = {}
    for pid in lifecycle.processes(str(state.cluster_dir(record.cluster_id))):
        size = pss_kib(pid)
        if size:  # a process still starting (or exiting) has no mappings to count
            by_role.setdefault(role(pid), []).append(size / 1024)
    return by_role


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def container_memory(record: Record) -> dict[str, list[float]]:
    """MiB of PSS per container (its processes), by role, and of each container's conmon."""
    podman = Podman.find()
    marker = str(state.cluster_dir(record.cluster_id))
    names = [n for n, where in podman.labelled(kubelet.CLUSTER_LABEL).items() if where == marker]
    out = podman.run("inspect", "--format", "{{.Name}} {{.State.Pid}}", *names).stdout
    by_role: dict[str, list[float]] = {}
    for line in out.splitlines():
        name, pid = line.split()[0], int(line.split()[1])
        pids, todo = [], [pid]
        while todo:
            pids.append(todo.pop())
            todo += children(pids[-1])
        kind = "netkit run (container)" if "-netkit-node-" in name else "netkit dns (container)"
        by_role.setdefault(kind, []).append(sum(pss_kib(p) for p in pids) / 1024)
        st = procfs.stat(pid)
        by_role.setdefault("conmon", []).append(pss_kib(st.ppid) / 1024 if st else 0.0)
    return by_role


def lab_baseline() -> float:
    started = time.monotonic()
    lab = start()
    seconds = time.monotonic() - started
    stop(lab)
    return seconds


def first_answer(netns: str, ip: str, until: float) -> float | None:
    while time.monotonic() < until:
        if connect(netns, ip, 80, timeout=0.05).answered:
            return time.monotonic()
        time.sleep(0.02)
    return None


def latency(record: Record, n: int, kubeconfig: Path, tmp: Path) -> tuple[float, float]:
    """(kubectl apply → every node answers, kubectl's own time) for Service number n."""
    ip = f"10.96.{200 + n // 250}.{n % 250 + 1}"
    path = tmp / f"svc-{n}.yaml"
    path.write_text(SERVICE.format(n=n, ip=ip))
    answered: dict[str, float | None] = {}
    begun = time.monotonic()
    until = begun + 30
    threads = [threading.Thread(target=lambda node=node: answered.__setitem__(node.name, first_answer(
        node.netns, ip, until))) for node in record.cluster.nodes]
    for t in threads:
        t.start()
    subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp / 'cache'}", "apply",
                    "-f", str(path)], check=True, capture_output=True)
    applied = time.monotonic()
    for t in threads:
        t.join()
    missing = [k for k, v in answered.items() if v is None]
    if missing:
        raise SystemExit(f"Service {n} never answered on {', '.join(missing)}")
    return max(v for v in answered.values() if v is not None) - begun, applied - begun


def min_sync_period(record: Record) -> float:
    """The minSyncPeriod the first node's daemon runs with (its `starting` log line)."""
    log = state.log_dir(record.cluster_id) / f"netkit-run-{record.cluster.nodes[0].name}.log"
    for line in log_lines(log):  # a container's too (CRI format)
        if line.startswith("{") and '"starting"' in line:
            return float(json.loads(line)["min_sync_period"])
    raise SystemExit(f"no `starting` line in {log}")


def writable_etc_netns() -> None:
    """In the test VM /etc is the host's, read-only: pods' resolv.conf files need a tmpfs there."""
    etc = Path("/etc/netns")
    if os.environ.get("NETKIT_IN_VM") == "1" and etc.is_dir() and not os.access(etc, os.W_OK):
        subprocess.run(["mount", "-t", "tmpfs", "netns", str(etc)], check=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True, slots=True)
class Run:
    up_seconds: float
    memory: dict[str, list[float]]
    e2e: list[float]
    floor: float  # minSyncPeriod

    @property
    def total(self) -> float:
        return sum(sum(v) for v in self.memory.values())


def measure(mode: str, args: argparse.Namespace, baseline: float, image: str = "") -> Run:
    nodes, services = args.nodes, args.services
    label = f"{mode}{' --image' if image else ''}"
    started = time.monotonic()
    record = lifecycle.up(nodes, mode, args.pods_per_node, timeout=args.timeout, dns_pods=args.dns_pods,
                          image=image)
    up_seconds = time.monotonic() - started
    try:
        mem = memory(record)
        if image:
            mem.update(container_memory(record))
        run = Run(up_seconds, mem, [], 0.0)
        parts = ", ".join(f"{r} {len(v)} × {statistics.mean(v):.0f}" for r, v in sorted(mem.items()))
        print(f"{label}: up {nodes} nodes in {up_seconds:.1f} s (plain 2-node lab {baseline:.2f} s: "
              f"×{up_seconds / baseline:.0f}); memory {run.total:.0f} MiB PSS ({parts} MiB)", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            samples = [latency(record, n, state.kubeconfig_path(record.cluster_id), Path(tmp))
                       for n in range(services)]
        e2e = [s[0] for s in samples]
        kubectl = [s[1] for s in samples]
        floor = min_sync_period(record)
        versus = f"p50 / minSyncPeriod ({floor:g} s) = {pct(e2e, 0.5) / floor:.2f}" if floor else \
            "minSyncPeriod 0: every change is synced at once"
        print(f"{label}: kubectl apply → all {nodes} nodes answer, {services} Services: "
              f"p50 {pct(e2e, 0.5):.2f} s, p99 {pct(e2e, 0.99):.2f} s, max {max(e2e):.2f} s "
              f"(Service #{e2e.index(max(e2e)) + 1}); "
              f"kubectl itself p50 {statistics.median(kubectl):.2f} s; {versus}", flush=True)
    finally:
        lifecycle.down(record.cluster_id)
    return Run(up_seconds, mem, e2e, floor)


def run_mode(mode: str, args: argparse.Namespace, baseline: float) -> list[results.Figure]:
    fig = results.Figure.measured
    run = measure(mode, args, baseline)
    if args.image:
        boxed = measure(mode, args, baseline, args.image)
        return [fig(f"{mode}: up --image vs processes", boxed.up_seconds, "s", run.up_seconds),
                fig(f"{mode}: PSS --image vs processes", boxed.total, "MiB", run.total),
                fig(f"{mode}: apply → every node answers, p50, --image vs processes", pct(boxed.e2e, 0.5), "s",
                    pct(run.e2e, 0.5)),
                fig(f"{mode}: apply → every node answers, p99, --image vs processes", pct(boxed.e2e, 0.99), "s",
                    pct(run.e2e, 0.99))]
    return [fig(f"{mode}: cluster up vs the plain lab", run.up_seconds, "s", baseline),
            fig(f"{mode}: PSS of every process", run.total, "MiB"),
            fig(f"{mode}: apply → every node answers, p50", pct(run.e2e, 0.5), "s", run.floor or None),
            fig(f"{mode}: apply → every node answers, p99", pct(run.e2e, 0.99), "s", run.floor or None)]


def image_size(image: str) -> results.Figure:
    size = int(Podman.find().run("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    print(f"image {image}: {size / 1e6:.0f} MB", flush=True)
    return results.Figure.measured(f"node image {image} size", round(size / 1e6), "MB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--services", type=int, default=100)
    p.add_argument("--modes", nargs="+", default=["iptables", "nftables", "ipvs"])
    p.add_argument("--pods-per-node", type=int, default=1)
    p.add_argument("--dns-pods", type=int, default=None, help="default: the cluster's (2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for every node's first sync")
    p.add_argument("--image", default="", help="also with the pods as containers of this image (up --image)")
    args = results.parse_args(p)
    if os.geteuid() != 0 or shutil.which("kubectl") is None:
        sys.exit("bench/cluster.py needs root and kubectl")
    writable_etc_netns()
    baseline = lab_baseline()
    figures: list[results.Figure] = [image_size(args.image)] if args.image else []
    for mode in args.modes:
        if mode == "ipvs" and not Path("/proc/net/ip_vs").exists():
            print("ipvs: not measured (this kernel has no IPVS; see docs/ipvs.md for the VM)")
            continue
        figures += run_mode(mode, args, baseline)
    up = f"`netkit lab cluster up --nodes {args.nodes} --pods-per-node {args.pods_per_node}`"
    if args.image:
        workload = (f"{up} --image {args.image} (the daemons and DNS pods as podman containers; PSS of their "
                    f"processes and conmons) vs {up} with processes, same run; then {args.services} Services one "
                    "at a time, `kubectl apply` → every node answers the ClusterIP, on each")
    else:
        workload = (f"{up} (every node synced, the DNS answering; PSS of every process) vs the plain 2-node lab; "
                    f"then {args.services} Services one at a time, `kubectl apply` → every node answers the "
                    "ClusterIP, vs minSyncPeriod as the daemon reads it")
    results.write(args.json, __file__, workload, figures)


if __name__ == "__main__":
    try:
        main()
    finally:
        if OWN_STATE:
            shutil.rmtree(OWN_STATE, ignore_errors=True)
