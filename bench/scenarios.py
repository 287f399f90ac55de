"""Scenario benchmark: traffic while things change, per scenario and mode.

The node daemon programs the lab's node A while real connections flow (by default 40 new TCP
connections/s to a ClusterIP, 40/s to a NodePort, 20 UDP requests/s on one socket and 20/s on new
sockets), through the scenarios of `netkit.testing.scenarios`: a rolling update with terminating
endpoints, a scale to zero and back, a SIGTERM restart, a SIGKILL of the real `netkit run` while it
writes 2,000 new Services, an endpoint removed while the daemon was down (conntrack across a
restart), endpoints terminating while still serving, and the `-f` directory removed and re-created.
Every attempt is judged against what was right when it started; the table says, per scenario and
mode, how many were attempted, answered, refused as expected (a Service without endpoints), failed,
timed out, or answered by a wrong or removed endpoint. The first row of each mode is the baseline
measured in the same run: the same traffic for as long with nothing changing.

Everything runs in one lab (network namespaces it creates and always removes); node A is cleaned
between scenarios. Not part of `make test` (a few minutes):

    .venv/bin/python bench/scenarios.py [--modes iptables nftables] [--hold 3] [--rate 40]
                                        [--load 2000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)

from netkit.lab import running  # noqa: E402
from netkit.lab.traffic import Tally  # noqa: E402
from netkit.testing import scenarios as sc  # noqa: E402

COLUMNS = ("attempted", "answered", "refused_as_expected", "lost_in_move", "failed", "timed_out", "wrong")
HEADER = ("attempted", "answered", "refused (expected)", "lost in a flow move", "failed", "timed out",
          "wrong/removed endpoint")


def total(tallies: dict[str, Tally]) -> dict[str, int]:
    return {c: sum(getattr(t, c) for t in tallies.values()) for c in COLUMNS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["iptables", "nftables"], choices=sorted(sc.MODES))
    ap.add_argument("--hold", type=float, default=3.0, help="seconds of traffic per step")
    ap.add_argument("--rate", type=float, default=40.0, help="new TCP connections/s per TCP target")
    ap.add_argument("--load", type=int, default=2000, help="Services written during the SIGKILL scenario")
    ap.add_argument("--only", nargs="+", default=None, help="scenario names (default: all)")
    ap.add_argument("--per-target", action="store_true", help="also print each target's row")
    args = results.parse_args(ap)
    logging.basicConfig(level=logging.ERROR)
    chosen = {"baseline (no change)": sc.steady, **sc.SCENARIOS}
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only or k.startswith("baseline")}
    chosen["SIGKILL mid-sync"] = functools.partial(sc.kill_mid_sync, load=args.load)  # type: ignore[assignment]
    if args.only and "SIGKILL mid-sync" not in args.only:
        del chosen["SIGKILL mid-sync"]
    print(f"rate: {args.rate:g} new TCP connections/s to the ClusterIP and to the NodePort, "
          f"{args.rate / 2:g} UDP requests/s on one socket and on new sockets; {args.hold:g} s per step")
    print(f"| scenario | mode | {' | '.join(HEADER)} | seconds |")
    print("|---|---|" + "---|" * (len(HEADER) + 1))
    bad = 0
    sums = {"change": {"attempted": 0, "bad": 0}, "baseline": {"attempted": 0, "bad": 0}}
    with running() as lab:
        for mode in args.modes:
            for name, scenario in chosen.items():
                started = time.monotonic()
                try:
                    tallies = asyncio.run(scenario(lab, mode, args.rate, args.hold))
                except AssertionError as exc:
                    print(f"| {name} | {mode} | did not run: {exc} |")
                    bad += 1
                    continue
                row = total(tallies)
                bad += row["failed"] + row["timed_out"] + row["wrong"]
                kind = sums["baseline" if name.startswith("baseline") else "change"]
                kind["attempted"] += row["attempted"]
                kind["bad"] += row["failed"] + row["timed_out"] + row["wrong"]
                cells = " | ".join(str(row[c]) for c in COLUMNS)
                print(f"| {name} | {mode} | {cells} | {time.monotonic() - started:.1f} |", flush=True)
                if args.per_target:
                    for target, t in tallies.items():
                        print(f"|   {target} | | {' | '.join(str(getattr(t, c)) for c in COLUMNS)} | |")
                        for example in t.examples:
                            print(f"|     {example} |")
    change, base = sums["change"], sums["baseline"]
    results.write(args.json, __file__, f"traffic while things change ({args.rate:g} new TCP connections/s to a "
                  f"ClusterIP and to a NodePort, {args.rate / 2:g} UDP requests/s on one socket and on new ones, "
                  f"{args.hold:g} s per step) in {' and '.join(args.modes)} mode, through every scenario; baseline: "
                  "the same traffic with nothing changing", [
        results.Figure.measured("attempts", change["attempted"], "", base["attempted"]),
        results.Figure.measured("of them failed, timed out or answered by a wrong or removed endpoint",
                                change["bad"], "", base["bad"], target="0")])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
