"""Benchmark: what `netkit run` costs before it does anything — the CPU time and peak RSS of a new
process importing the daemon's modules (the CLI, `netkit run`'s command and daemon, the API source
and netkit's own API client, the nftables backend, the DNS server `--dns-listen` adds), against the
same imports plus the official `kubernetes` client's asyncio modules (`kubernetes.aio`: what a daemon
built on that client loads). Both in the same run, alternating, each a new interpreter; medians of
`--runs`. Needs the test extra (the official client is a test dependency).

    .venv/bin/python bench/imports.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results  # noqa: E402  (bench/results.py: --json)

DAEMON = ("netkit.cli", "netkit.runtime.command", "netkit.runtime.daemon", "netkit.sources.kube",
          "netkit.sources.apiclient", "netkit.rules.nftables.backend", "netkit.dns.server")
OFFICIAL = ("kubernetes.aio.client", "kubernetes.aio.config")


def one(modules: tuple[str, ...]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of a new interpreter importing `modules`."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import " + ", ".join(modules)])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"imports.py: importing {modules} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    args = results.parse_args(ap)
    mine: list[tuple[float, float, float]] = []
    theirs: list[tuple[float, float, float]] = []
    one(DAEMON + OFFICIAL)  # warm the page cache for both
    for _ in range(args.runs):
        mine.append(one(DAEMON))
        theirs.append(one(DAEMON + OFFICIAL))
    figures = []
    for i, (what, unit) in enumerate((("daemon imports: wall", "s"), ("daemon imports: CPU", "s"),
                                      ("daemon imports: peak RSS", "MiB"))):
        value, baseline = statistics.median(m[i] for m in mine), statistics.median(t[i] for t in theirs)
        figures.append(results.Figure.measured(what, round(value, 3), unit, round(baseline, 3)))
        print(f"{what}: {value:.3f} {unit} vs {baseline:.3f} {unit} with the official client "
              f"({value / baseline:.2f}×)", flush=True)
    workload = (f"a new interpreter importing what `netkit run` loads vs the same plus the official client's "
                f"kubernetes.aio; {results.runs(args.runs)}, alternating")
    results.write(args.json, __file__, workload, figures)


if __name__ == "__main__":
    main()
