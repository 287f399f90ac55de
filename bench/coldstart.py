"""Benchmark: a node's cold start — from `netkit run` being started to the last Service answering —
next to the kernel's own tool loading the same rules, measured in the same run.

For each mode (nftables; iptables with iptables-nft) and size N (services × 10 endpoints, every 10th a
NodePort, as bench/compile.py):

1. The test API server (`netkit.testing.apiserver`, in a process of its own) holds the N Services, their
   EndpointSlices and the Node.
2. `netkit run` is started as a node would start it (a new process, so imports count) with
   `--kubeconfig` pointing at that server, programming a fresh network namespace. Inside the namespace a
   client connects to the ClusterIP of the Service listed last, again and again (0.2 s per attempt), and a
   backend namespace behind a veth owns that Service's endpoints: "answers" is the first connection
   accepted through the daemon's rules. Also read from the daemon's log as it happens: "all sources
   synced" (the lists are in) and "sync done" (the first sync is complete, conntrack included), and the
   daemon's peak RSS (VmHWM), PSS (/proc/PID/smaps_rollup) and CPU time (its own and its tools')
   once it is done.
3. The baseline: what the daemon wrote, dumped from the namespace (`nft list ruleset`; `iptables-nft-save`),
   loaded into another fresh namespace by the bare tool (`nft -f`; `iptables-nft-restore`), timed as a
   process start to its exit, and its CPU time (on a loaded machine the CPU times compare better
   than the wall-clock ones).

`--tracemalloc N` runs the daemon under tracemalloc instead and prints the N source lines holding
the most memory once its first sync is done.

Everything runs in network namespaces created here with unique names and always removed; the figures
come from a shared machine, so read the ratios, not the absolutes.

    .venv/bin/python bench/coldstart.py [--services 10000 50000] [--modes nftables iptables-nft]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)
from backend_ns import backend, namespace, sh  # noqa: E402  (bench/backend_ns.py)

from netkit import nfacct  # noqa: E402

ENDPOINTS = 10
BACKEND_NET = "198.18.0"  # the probed Service's endpoints (RFC 2544 benchmarking range)
NODE = "node-0"
NETKIT = str(Path(sys.executable).with_name("netkit"))


# --- the API server's objects ---------------------------------------------------------------------


def _endpoint_ip(i: int, j: int) -> str:
    k = i * ENDPOINTS + j
    return f"10.{128 + k // 65000}.{k // 250 % 256}.{k % 250 + 1}"


def api_objects(n: int) -> tuple[list[dict[str, Any]], str]:
    """N Services with one EndpointSlice each, and the Node; and the ClusterIP of the Service a
    list returns last, whose endpoints are in BACKEND_NET."""
    names = sorted((f"ns{i % 50}", f"svc{i}", i) for i in range(n))
    last = names[-1][2]
    objs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                                   "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}}]
    for i in range(n):
        ns, name, ip = f"ns{i % 50}", f"svc{i}", f"10.96.{i // 250}.{i % 250 + 1}"
        nodeport = i % 10 == 0 and i // 10 < 2768
        port: dict[str, Any] = {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}
        if nodeport:
            port["nodePort"] = 30000 + i // 10
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                     "spec": {"type": "NodePort" if nodeport else "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
                              "selector": {"app": name}, "ports": [port]}})
        addrs = [f"{BACKEND_NET}.{j + 1}" if i == last else _endpoint_ip(i, j) for j in range(ENDPOINTS)]
        objs.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                     "metadata": {"name": f"{name}-x", "namespace": ns,
                                  "labels": {"kubernetes.io/service-name": name}},
                     "endpoints": [{"addresses": [a], "conditions": {"ready": True}, "nodeName": f"node-{j % 20}"}
                                   for j, a in enumerate(addrs)],
                     "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]})
    return objs, f"10.96.{last // 250}.{last % 250 + 1}"


def serve(n: int, kubeconfig: str) -> None:
    """The API server's process: seed the store, serve, print the probed ClusterIP, run until killed."""
    from netkit.testing.apiserver import TestApiServer
    from netkit.testing.apistore import resource_for_kind

    async def run() -> None:
        srv = TestApiServer()
        objs, probe = api_objects(n)
        for obj in objs:  # straight into the store: the allocator and history are not what is measured
            srv.store.rv += 1
            meta = obj["metadata"]
            meta.update(resourceVersion=str(srv.store.rv), uid=uuid.uuid4().hex)
            srv.store.objects[resource_for_kind(obj["kind"])][(meta.get("namespace", ""), meta["name"])] = obj
        srv.store.compacted = srv.store.rv
        await srv.start()
        srv.write_kubeconfig(Path(kubeconfig))
        print(probe, flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


# --- namespaces, probe ----------------------------------------------------------------------------


CLIENT = r"""
import socket, sys, time
while True:
    s = socket.socket(); s.settimeout(0.2)
    try:
        s.connect((sys.argv[1], 80))
        print(time.monotonic(), flush=True)
        break
    except OSError:
        time.sleep(0.02)
    finally:
        s.close()
"""


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process and of its children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """(peak RSS, PSS) of a process in MiB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    rollup = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    return int(status["VmHWM"].split()[0]) / 1024, int(rollup["Pss"].split()[0]) / 1024


# --- one cold start -------------------------------------------------------------------------------


def _watch_log(proc: subprocess.Popen[str], stamps: dict[str, float], lines: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        for what in ("all sources synced", "sync done"):
            if what in line and what not in stamps:
                stamps[what] = time.monotonic()


# `--tracemalloc`: the daemon started under tracemalloc (imports included); SIGUSR1 writes the
# traced total and the top entries by line to the file named first
TRACED = r"""
import signal, sys, tracemalloc
tracemalloc.start(1)
out = sys.argv[1]
def dump(*_):
    stats = tracemalloc.take_snapshot().statistics("lineno")
    lines = [f"{sum(s.size for s in stats)}"] + [
        f"{s.size}\t{s.count}\t{s.traceback[0].filename}:{s.traceback[0].lineno}" for s in stats[:40]]
    with open(out + ".part", "w") as f:
        f.write("\n".join(lines) + "\n")
    import os; os.rename(out + ".part", out)
signal.signal(signal.SIGUSR1, dump)
from netkit.cli import main
sys.argv = ["netkit", *sys.argv[2:]]
sys.exit(main())
"""


def daemon_argv(mode: str, kubeconfig: str, netns: str) -> list[str]:
    proxy = ["--proxy-mode", "nftables"] if mode == "nftables" else ["--proxy-mode", "iptables",
                                                                      "--iptables-backend", "nft"]
    return [NETKIT, "run", "--kubeconfig", kubeconfig, "--netns", netns, "--ip-family", "ipv4", *proxy,
            "--hostname-override", NODE, "--cluster-cidr", "10.128.0.0/9", "--healthz-bind-address=",
            "--metrics-bind-address=", "--sync-period", "1h", "--min-sync-period", "0s"]


def cold_start(mode: str, kubeconfig: str, probe_ip: str, node: str, timeout: float,
               traced: Path | None = None) -> dict[str, Any]:
    """Start the daemon; seconds from its start to the lists, the probe's answer and the first sync's end
    (with `traced`, under tracemalloc, whose top entries are written there once the sync is done)."""
    client = subprocess.Popen(["ip", "netns", "exec", node, sys.executable, "-c", CLIENT, probe_ip],
                              stdout=subprocess.PIPE, text=True)
    stamps: dict[str, float] = {}
    lines: list[str] = []
    t0 = time.monotonic()
    argv = daemon_argv(mode, kubeconfig, node)
    if traced is not None:
        argv = [sys.executable, "-c", TRACED, str(traced), *argv[1:]]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=_watch_log, args=(proc, stamps, lines), daemon=True)
    reader.start()
    try:
        assert client.stdout is not None
        answered = float(client.stdout.readline())
        while "sync done" not in stamps:
            if proc.poll() is not None or time.monotonic() - t0 > timeout:
                raise RuntimeError("the daemon did not complete its first sync:\n" + "".join(lines[-20:]))
            time.sleep(0.05)
        time.sleep(1.0)  # what it holds once settled
        peak, pss = memory_mib(proc.pid)
        cpu = cpu_seconds(proc.pid)
        if traced is not None:
            proc.send_signal(signal.SIGUSR1)
            while not traced.exists() and proc.poll() is None:
                time.sleep(0.2)
    finally:
        client.kill()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"answered_s": answered - t0, "synced_s": stamps["all sources synced"] - t0,
            "sync_done_s": stamps["sync done"] - t0, "peak_rss_mib": peak, "pss_mib": pss,
            "cpu_s": cpu}


def bare_load(mode: str, node: str) -> tuple[float, float]:
    """Seconds for the bare tool to load what the daemon wrote into `node`, in a fresh namespace, and
    the CPU seconds it took."""
    dump = ["nft", "list", "ruleset"] if mode == "nftables" else ["iptables-nft-save"]
    load = ["nft", "-f"] if mode == "nftables" else ["iptables-nft-restore"]
    text = sh("ip", "netns", "exec", node, *dump)
    with tempfile.NamedTemporaryFile("w", suffix=".rules") as f, namespace("bare", "nkcold") as fresh:
        f.write(text)
        f.flush()
        if mode != "nftables":  # the counters the daemon creates before its first restore (untimed)
            nfacct.ensure_counters(fresh)
        t, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        if mode == "nftables":
            sh("ip", "netns", "exec", fresh, *load, f.name)
        else:
            sh("ip", "netns", "exec", fresh, *load, input=text)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.monotonic() - t, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure(mode: str, n: int, traced: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nkcold-") as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(n), kubeconfig], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert server.stdout is not None
            probe_ip = server.stdout.readline().strip()
            if not probe_ip:
                raise RuntimeError("the API server did not start")
            with namespace("node", "nkcold") as node, backend(node, BACKEND_NET, ENDPOINTS, "nkcold"):
                r = cold_start(mode, kubeconfig, probe_ip, node, 600 + n / 20, traced)
                if traced is None:
                    r["bare_s"], r["bare_cpu_s"] = bare_load(mode, node)
        finally:
            server.kill()
            server.wait()
    return {"mode": mode, "services": n, **r}


def top(mode: str, n: int, count: int) -> None:
    """Print where the daemon's traced memory is once its first sync is done, by source line."""
    with tempfile.TemporaryDirectory(prefix="nkcold-") as tmp:
        out = Path(tmp) / "top"
        r = measure(mode, n, out)
        total, *rows = out.read_text().splitlines()
    root = str(Path(__file__).resolve().parent.parent) + "/"
    print(f"{mode}, {n:,} services: traced {int(total) / 2**20:.0f} MiB after the first sync "
          f"(peak RSS {r['peak_rss_mib']:.0f} MiB, PSS {r['pss_mib']:.0f} MiB, both under tracemalloc)")
    print("| MiB | blocks | where |\n|---|---|---|")
    for row in rows[:count]:
        size, blocks, where = row.split("\t")
        where = where.replace(root, "").split("site-packages/")[-1]
        print(f"| {int(size) / 2**20:.1f} | {int(blocks):,} | `{where}` |")


# --- report ---------------------------------------------------------------------------------------

TARGETS = {"nftables": 2.0, "iptables-nft": 1.5}


def _figures(r: dict[str, Any]) -> list[results.Figure]:
    fig, at = results.Figure.measured, f"{r['mode']}, {r['services']:,} services: "
    rss_target = "≤ 200 MB" if r["services"] <= 10_000 else "≤ 1,000 MB" if r["services"] <= 50_000 else ""
    return [fig(at + "cold start to the last Service answering", r["answered_s"], "s", r["bare_s"],
                f"≤ {TARGETS[r['mode']]}×"),
            fig(at + "cold start to the lists received", r["synced_s"], "s", r["bare_s"]),
            fig(at + "cold start to the first sync done", r["sync_done_s"], "s", r["bare_s"]),
            fig(at + "CPU time, process start to the first sync done", r["cpu_s"], "s", r["bare_cpu_s"]),
            fig(at + "daemon peak RSS", r["peak_rss_mib"] * 1.048576, "MB", target=rss_target)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[10_000])
    ap.add_argument("--modes", nargs="+", default=["nftables", "iptables-nft"], choices=sorted(TARGETS))
    ap.add_argument("--tracemalloc", type=int, metavar="N", default=0,
                    help="instead: run the daemon under tracemalloc and print the N entries holding the most "
                         "memory once its first sync is done (no timings: tracing slows it several times)")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = results.parse_args(ap)
    if args.serve:
        serve(int(args.serve[0]), args.serve[1])
        return 0
    if args.tracemalloc:
        for n in args.services:
            for mode in args.modes:
                top(mode, n, args.tracemalloc)
        return 0
    print(f"{'mode':12} {'services':>8} | {'lists':>7} {'answers':>8} {'sync done':>9} | {'bare':>7} | "
          f"{'ratio':>5} | {'CPU':>6} {'bare':>6} | {'peak RSS':>8} {'PSS':>7}")
    figures: list[results.Figure] = []
    ok = True
    for n in args.services:
        for mode in args.modes:
            r = measure(mode, n)
            ratio = r["answered_s"] / r["bare_s"]
            ok = ok and ratio <= TARGETS[mode] and r["peak_rss_mib"] * 1.048576 <= (200 if n <= 10_000 else 1000)
            print(f"{mode:12} {n:>8} | {r['synced_s']:>6.2f}s {r['answered_s']:>7.2f}s {r['sync_done_s']:>8.2f}s | "
                  f"{r['bare_s']:>6.2f}s | {ratio:>5.2f} | {r['cpu_s']:>5.1f}s {r['bare_cpu_s']:>5.1f}s | "
                  f"{r['peak_rss_mib']:>5.0f} MiB {r['pss_mib']:>3.0f} MiB",
                  flush=True)
            figures += _figures(r)
    load = os.getloadavg()[0]
    results.write(args.json, __file__, f"{' and '.join(args.modes)} at {' and '.join(f'{n:,}' for n in args.services)} "
                  "services × 10 endpoints from the test API server: `netkit run` started as a new process → the "
                  "last Service listed answers a TCP connection through its ClusterIP, vs the bare tool "
                  "(`nft -f`, `iptables-nft-restore`) loading what the daemon wrote into a fresh namespace; one run",
                  figures)
    print(f"load average at the end: {load:.1f}")
    print("targets (answers ≤ 2.0 × bare nft -f, ≤ 1.5 × bare iptables-nft-restore; peak RSS ≤ 200 MB at 10k, "
          "≤ 1 GB at 50k):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
