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

Runs once; a few minutes on 2 cores. Needs root, kubectl. IPVS mode needs a kernel with IPVS: in the
test VM (software emulation, one vCPU; its /etc is read-only, so a tmpfs goes on /etc/netns), at a
smaller size:

    .venv/bin/python bench/cluster.py [--nodes 10] [--services 100] [--modes iptables nftables]
    vm-images/run --memory 1536 -- .venv/bin/python bench/cluster.py --modes ipvs --nodes 2 \
        --dns-pods 1 --services 20 --timeout 400
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)

from netkit.lab import start, stop  # noqa: E402
from netkit.lab.cluster import lifecycle, state  # noqa: E402
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
    for line in log.read_text().splitlines():
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


def run_mode(mode: str, args: argparse.Namespace, baseline: float) -> list[results.Figure]:
    nodes, services = args.nodes, args.services
    started = time.monotonic()
    record = lifecycle.up(nodes, mode, args.pods_per_node, timeout=args.timeout, dns_pods=args.dns_pods)
    up_seconds = time.monotonic() - started
    try:
        mem = memory(record)
        total = sum(sum(v) for v in mem.values())
        parts = ", ".join(f"{r} {len(v)} × {statistics.mean(v):.0f}" for r, v in sorted(mem.items()))
        print(f"{mode}: up {nodes} nodes in {up_seconds:.1f} s (plain 2-node lab {baseline:.2f} s: "
              f"×{up_seconds / baseline:.0f}); memory {total:.0f} MiB PSS ({parts} MiB)", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            samples = [latency(record, n, state.kubeconfig_path(record.cluster_id), Path(tmp))
                       for n in range(services)]
        e2e = [s[0] for s in samples]
        kubectl = [s[1] for s in samples]
        floor = min_sync_period(record)
        versus = f"p50 / minSyncPeriod ({floor:g} s) = {pct(e2e, 0.5) / floor:.2f}" if floor else \
            "minSyncPeriod 0: every change is synced at once"
        print(f"{mode}: kubectl apply → all {nodes} nodes answer, {services} Services: "
              f"p50 {pct(e2e, 0.5):.2f} s, p99 {pct(e2e, 0.99):.2f} s, max {max(e2e):.2f} s "
              f"(Service #{e2e.index(max(e2e)) + 1}); "
              f"kubectl itself p50 {statistics.median(kubectl):.2f} s; {versus}", flush=True)
    finally:
        lifecycle.down(record.cluster_id)
    fig = results.Figure.measured
    return [fig(f"{mode}: cluster up vs the plain lab", up_seconds, "s", baseline),
            fig(f"{mode}: PSS of every process", total, "MiB"),
            fig(f"{mode}: apply → every node answers, p50", pct(e2e, 0.5), "s", floor or None),
            fig(f"{mode}: apply → every node answers, p99", pct(e2e, 0.99), "s", floor or None)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--services", type=int, default=100)
    p.add_argument("--modes", nargs="+", default=["iptables", "nftables", "ipvs"])
    p.add_argument("--pods-per-node", type=int, default=1)
    p.add_argument("--dns-pods", type=int, default=None, help="default: the cluster's (2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for every node's first sync")
    args = results.parse_args(p)
    if os.geteuid() != 0 or shutil.which("kubectl") is None:
        sys.exit("bench/cluster.py needs root and kubectl")
    writable_etc_netns()
    baseline = lab_baseline()
    figures: list[results.Figure] = []
    for mode in args.modes:
        if mode == "ipvs" and not Path("/proc/net/ip_vs").exists():
            print("ipvs: not measured (this kernel has no IPVS; see docs/ipvs.md for the VM)")
            continue
        figures += run_mode(mode, args, baseline)
    results.write(args.json, __file__, f"`netkit lab cluster up --nodes {args.nodes} --pods-per-node "
                  f"{args.pods_per_node}` (every node synced, the DNS answering; PSS of every process) vs the plain "
                  f"2-node lab; then {args.services} Services one at a time, `kubectl apply` → every node answers "
                  "the ClusterIP, vs minSyncPeriod as the daemon reads it", figures)


if __name__ == "__main__":
    main()
