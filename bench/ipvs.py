"""Benchmark: IPVS mode, one EndpointSlice change (one endpoint removed), compile + plan, against
baselines measured in the same run.

For N services × E endpoints (bench/compile.py's objects; every tenth service a NodePort), the state
is built the daemon's way (StateBuilder: unchanged services keep their objects), then for each of
`--changes` changes, one endpoint removed from a different service:

- incremental: the IPVS backend's remembering compiler (memo per service port) and its `plan`,
  which compares only what the compiler says can differ: what the daemon does;
- full: a fresh `compile` + `plan` comparing everything (the baseline: what a sync cost before);
- iptables: the iptables backend's remembering compiler and plan for the same change (a reference).

Prints medians and the ratios incremental / full and incremental / iptables. Pure computation, no
kernel (IPVS is not in this host's kernel). Targets: none timed; the issue asks that a sync cost
what the change costs.

    .venv/bin/python bench/ipvs.py [--services 3000 10000] [--endpoints 10] [--changes 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile import CONFIG, objects  # noqa: E402  (bench/compile.py: the same objects)

from netkit.model import IPFamily, NodeState, Objects  # noqa: E402
from netkit.model.state import StateBuilder  # noqa: E402
from netkit.rules.iptables import backend as IPTABLES  # noqa: E402
from netkit.rules.ipvs import compile as ipvs_compile  # noqa: E402
from netkit.rules.ipvs import plan as ipvs_plan  # noqa: E402
from netkit.rules.ipvs.backend import BACKEND as IPVS  # noqa: E402

T = TypeVar("T")
V4 = IPFamily.IPV4
CFG = replace(CONFIG, mode="ipvs")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def drop_one_endpoint(objs: Objects, index: int) -> Objects:
    s = objs.slices[index]
    slices = (*objs.slices[:index], replace(s, endpoints=s.endpoints[:-1]), *objs.slices[index + 1:])
    return replace(objs, slices=slices)


def states(n: int, e: int, changes: int) -> list[NodeState]:
    """The first state, then one per change: each removes one endpoint of another service."""
    builder = StateBuilder()
    objs = objects(n, e)
    out = [builder.build(objs, CFG.node_name)]
    for k in range(changes):
        objs = drop_one_endpoint(objs, (k * 7919) % n)
        out.append(builder.build(objs, CFG.node_name))
    return out


def measure(n: int, e: int, changes: int) -> dict[str, float]:
    seq = states(n, e, changes)
    times: dict[str, list[float]] = {k: [] for k in ("inc_compile", "inc_plan", "full_compile", "full_plan",
                                                      "ipt_compile", "ipt_plan")}
    ipvs_c = IPVS.compiler(CFG, V4)
    ipt_c = IPTABLES.compiler(CFG, V4)
    (prev, first_s) = timed(lambda: ipvs_c.compile(seq[0]))
    ipt_prev = ipt_c.compile(seq[0])
    for st in seq[1:]:
        desired, t = timed(lambda: ipvs_c.compile(st))  # noqa: B023 (called at once)
        times["inc_compile"].append(t)
        assert desired.since is not None and desired.since.applies_to(prev)
        p, t = timed(lambda: IPVS.plan(prev, desired))  # noqa: B023
        times["inc_plan"].append(t)
        fresh, t = timed(lambda: ipvs_compile.compile(st, CFG, V4))  # noqa: B023
        times["full_compile"].append(t)
        full, t = timed(lambda: ipvs_plan.plan(prev, fresh))  # noqa: B023
        times["full_plan"].append(t)
        assert p == full and not p.empty, "the hint changed the plan"
        ipt_desired, t = timed(lambda: ipt_c.compile(st))  # noqa: B023
        times["ipt_compile"].append(t)
        _, t = timed(lambda: IPTABLES.plan(ipt_prev, ipt_desired))  # noqa: B023
        times["ipt_plan"].append(t)
        prev, ipt_prev = desired, ipt_desired
    out = {k: statistics.median(v) * 1000 for k, v in times.items()}
    out["first_compile"] = first_s * 1000
    out["virtual_servers"] = len(prev.services)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[3000, 10_000])
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--changes", type=int, default=15)
    args = ap.parse_args()
    for n in args.services:
        r = measure(n, args.endpoints, args.changes)
        inc = r["inc_compile"] + r["inc_plan"]
        full = r["full_compile"] + r["full_plan"]
        ipt = r["ipt_compile"] + r["ipt_plan"]
        print(f"{n} services × {args.endpoints} endpoints ({r['virtual_servers']:.0f} virtual servers; first "
              f"compile {r['first_compile']:.0f} ms), one endpoint removed, median of {args.changes}:")
        for label, key, total in (("IPVS incremental", "inc", inc), ("IPVS full", "full", full),
                                  ("iptables memo", "ipt", ipt)):
            print(f"  {label:17} compile {r[key + '_compile']:7.2f} ms  plan {r[key + '_plan']:7.2f} ms"
                  f"  = {total:7.2f} ms")
        print(f"  ratio incremental / full = {inc / full:.3f}   incremental / iptables = {inc / ipt:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
