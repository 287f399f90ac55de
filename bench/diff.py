"""Benchmark: the whole `netkit diff` command against a namespace already in sync, next to the
kernel's own dump of the same tables measured in the same run.

For each mode/backend (legacy and nft: iptables mode with that iptables; nftables: nftables mode),
a network namespace is created (and always removed), N services × E endpoints (bench/compile.py's
objects, dumped to a JSON file as `kubectl get -o json` gives them) are written into it with
`netkit apply`, and then, `--runs` times each, alternating:

- `netkit diff -f dump.json` as a user runs it (process start, decode, validate, read the kernel,
  compile, plan, summarise); it must say "in sync" (exit 0);
- the kernel's own dump of what netkit reads, run as netkit runs it: `iptables-legacy-save -t mangle`,
  `-t filter`, `-t nat` (one process per table), one `iptables-nft-save` of every table (the tool
  reads the whole ruleset whichever table it prints), or `nft -y -T list table ip netkit` (the text
  listing netkit reads; `nft -j` only when the table holds a foreign edit).

In iptables mode each run also times bench/diff_floor.py on the same dump and namespace: the least a
Python process does for the same answer (the JSON read, the nat table's text built, the dump read
meanwhile and compared), which no complete implementation beats.

netkit runs as an installed copy does, its modules compiled to bytecode first (bench/installed.py).
Printed: medians of wall time and CPU (user + system of the process and the tools it ran), the peak
RSS of `netkit diff`, the ratios diff/dump, and the floor's time against the dump and netkit's.
Targets: iptables modes ≤ 1.5 × the dump; nftables mode ≤ 3 s and ≤ 400 MB at 10k services.

    .venv/bin/python bench/diff.py [--services 10000] [--endpoints 10] [--runs 3] [--backends legacy nft nftables]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)
from compile import CONFIG, manifests, objects  # noqa: E402  (bench/compile.py: the same objects)
from installed import installed_env  # noqa: E402

from netkit.nft.parse_listing import LIST_OPTIONS  # noqa: E402

TABLES = ("mangle", "filter", "nat")  # what netkit's iptables kernel reads (rules/iptables/kernel.py)
FLOOR = Path(__file__).resolve().parent / "diff_floor.py"


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    peak_rss_mb: float
    returncode: int
    stdout: str


def timed(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """argv to the end, its own rusage (wait4: this child and the descendants it waited for)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    out, err = _drain(proc)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv)} failed (exit {proc.returncode}): {err[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, out)


def _drain(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Read stdout and stderr to their ends without reaping the child (wait4 does that)."""
    assert proc.stdout is not None and proc.stderr is not None
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))
    reader.start()
    out = proc.stdout.read()
    reader.join()
    proc.stdout.close()
    proc.stderr.close()
    return out, err[0] if err else ""


def netkit_args(mode: str, backend: str, netns: str, dump: Path) -> list[str]:
    args = ["-f", str(dump), "--mode", mode, "--ip-family", "ipv4", "--netns", netns,
            "--node-name", CONFIG.node_name, "--cluster-cidr", "10.128.0.0/9"]
    return args + (["--iptables-backend", backend] if mode == "iptables" else [])


def kernel_dump(backend: str, netns: str) -> Run:
    """The kernel's own dump of what netkit reads, each tool in the namespace; times summed."""
    if backend == "nftables":  # the text listing, with the options netkit lists it with (parse_listing.py)
        return timed(["ip", "netns", "exec", netns, "nft", *LIST_OPTIONS, "list", "table", "ip", "netkit"])
    if backend == "nft":  # one run of every table: the tool reads the whole ruleset whichever it prints
        return timed(["ip", "netns", "exec", netns, "iptables-nft-save"])
    runs = [timed(["ip", "netns", "exec", netns, f"iptables-{backend}-save", "-t", t]) for t in TABLES]
    return Run(sum(r.wall for r in runs), sum(r.cpu for r in runs), max(r.peak_rss_mb for r in runs), 0,
               "".join(r.stdout for r in runs))


def measure(backend: str, n: int, endpoints: int, runs: int, tmp: Path, env: dict[str, str]) -> dict[str, float]:
    mode = "nftables" if backend == "nftables" else "iptables"
    # nftables mode without ClientIP affinity, as bench/sync.py: nft 1.0.6 is killed loading the
    # 14,300 dynamic sets of the bench's sticky services at 10k in one transaction.
    dump = tmp / f"dump-{mode}.json"
    if not dump.exists():
        dump.write_text(json.dumps(manifests(objects(n, endpoints, affinity_every=0 if mode == "nftables" else 7))))
    netns = f"nkbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        subprocess.run([sys.executable, "-m", "netkit", "apply", *netkit_args(mode, backend, netns, dump)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        diffs, dumps, floors = [], [], []
        for _ in range(runs):
            d = timed([sys.executable, "-m", "netkit", "diff", "--stat", *netkit_args(mode, backend, netns, dump)], env)
            if d.returncode != 0:
                raise RuntimeError(f"{backend}: netkit diff is not in sync after apply:\n{d.stdout[-2000:]}")
            diffs.append(d)
            dumps.append(kernel_dump(backend, netns))
            if mode == "iptables":
                floors.append(timed([sys.executable, str(FLOOR), str(dump), netns, backend]))
        floor = {"floor_wall": statistics.median(r.wall for r in floors),
                 "floor_cpu": statistics.median(r.cpu for r in floors)} if floors else {}
        return floor | {"diff_wall": statistics.median(r.wall for r in diffs),
                "diff_cpu": statistics.median(r.cpu for r in diffs),
                "diff_rss": max(r.peak_rss_mb for r in diffs),
                "dump_wall": statistics.median(r.wall for r in dumps),
                "dump_cpu": statistics.median(r.cpu for r in dumps),
                "dump_mb": len(dumps[-1].stdout) / 1e6}
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


NAMES = {"legacy": "iptables-legacy", "nft": "iptables-nft", "nftables": "nftables"}


def _figures(backend: str, r: dict[str, float]) -> list[results.Figure]:
    """One backend's figures for --json."""
    fig, at = results.Figure.measured, f"{NAMES[backend]}: "
    target = "≤ 3 s" if backend == "nftables" else "≤ 1.5×"
    out = [fig(at + "`netkit diff`, wall", r["diff_wall"], "s", r["dump_wall"], target),
           fig(at + "`netkit diff`, CPU (the tools it runs included)", r["diff_cpu"], "s", r["dump_cpu"]),
           fig(at + "peak RSS", r["diff_rss"], "MB", target="≤ 400 MB")]
    if "floor_wall" in r:
        out.append(fig(at + "the floor, wall", r["floor_wall"], "s", r["dump_wall"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["legacy", "nft", "nftables"],
                    help="legacy, nft (iptables mode with that iptables), nftables (nftables mode)")
    args = results.parse_args(ap)
    print(f"{args.services} services × {args.endpoints} endpoints, in sync; medians of {args.runs} runs; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'backend':8} | {'diff wall':>9} {'CPU':>7} {'peak RSS':>8} | {'dump wall':>9} {'CPU':>7} {'MB':>5} | "
          f"{'ratio wall':>10} {'CPU':>5} | target")
    ok = True
    env = installed_env()
    floors = []
    figures: list[results.Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends:
            r = measure(backend, args.services, args.endpoints, args.runs, Path(tmp), env)
            ratio = r["diff_wall"] / r["dump_wall"]
            if backend == "nftables":
                met = r["diff_wall"] <= 3.0 and r["diff_rss"] <= 400
                target = f"≤ 3 s, ≤ 400 MB  {'OK' if met else 'MISSED'}"
            else:
                met = ratio <= 1.5
                target = f"≤ 1.5×  {'OK' if met else 'MISSED'}"
            ok = ok and met
            print(f"{backend:8} | {r['diff_wall']:>8.2f}s {r['diff_cpu']:>6.2f}s {r['diff_rss']:>6.0f}MB | "
                  f"{r['dump_wall']:>8.2f}s {r['dump_cpu']:>6.2f}s {r['dump_mb']:>5.1f} | "
                  f"{ratio:>10.2f} {r['diff_cpu'] / r['dump_cpu']:>5.2f} | {target}", flush=True)
            if "floor_wall" in r:
                floors.append(f"{backend:8} | floor {r['floor_wall']:.2f}s (CPU {r['floor_cpu']:.2f}s, the tools "
                              f"included): {r['floor_wall'] / r['dump_wall']:.2f}× the dump; netkit diff "
                              f"{r['diff_wall'] / r['floor_wall']:.2f}× the floor")
            figures += _figures(backend, r)
    if floors:
        print("the floor (bench/diff_floor.py): the JSON read, the nat table's text built and compared with the "
              "dump read meanwhile, nothing else")
        print("\n".join(floors))
    results.write(args.json, __file__, f"the whole `netkit diff -f dump.json` at {args.services:,} services × "
                  f"{args.endpoints} endpoints against a namespace already in sync, vs the kernel's own dump of "
                  "what netkit reads, run as netkit runs it, and (iptables mode) the floor bench/diff_floor.py "
                  f"in the same run; {results.runs(args.runs)}", figures)
    print(f"load average {os.getloadavg()[0]:.2f} at the end; targets", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
