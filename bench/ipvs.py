"""Benchmark: IPVS mode, one EndpointSlice change (one endpoint removed), compile + plan, against
baselines measured in the same run; with `--daemon`, the real daemon end to end inside the test VM.

For N services × E endpoints (bench/compile.py's objects; every tenth service a NodePort), the state
is built the daemon's way (StateBuilder: unchanged services keep their objects), then for each of
`--changes` changes, one endpoint removed from a different service:

- incremental: the IPVS backend's remembering compiler (memo per service port) and its `plan`,
  which compares only what the compiler says can differ: what the daemon does;
- full: a fresh `compile` + `plan` comparing everything (the baseline: what a sync cost before);
- iptables: the iptables backend's remembering compiler and plan for the same change (a reference).

Prints medians and the ratios incremental / full and incremental / iptables. Pure computation, no
kernel. Targets: none timed; the issue asks that a sync cost what the change costs.

`--daemon` (this host's kernel has no IPVS) boots the VM (vm-images/run: TCG emulation, one vCPU,
`--memory` MB; every figure is that of an emulated CPU) and runs, for each size, one child process
(so its RSS is the daemon's) with the real `Daemon` in IPVS mode inside a network namespace it
creates and removes. As bench/sync.py does for iptables and nftables, the objects are fed into the
daemon's store directly and min-sync-period is 0. Per change (one endpoint address of one slice
replaced by a new one):

- daemon: from `store.put` to the end of the sync that wrote it (state build, compile, plan, apply);
- bare: the same kernel work sent directly, after the kernel was put back (untimed) with the reverse
  plan: the same pyroute2 IPVS requests over a freshly opened IPVS socket (as a tool run opens one),
  and the same `ipset restore` / `ip -batch` / `iptables-restore` input the plan has, in its order.

Also: the first sync into an empty kernel, a forced full sync (dump, plan, nothing to write), the
split inside a sync (compile, plan, kernel) and the daemon's RSS. Targets: daemon ≤ 1.5 ×
bare at 10k, RSS ≤ 300 MB. `--profile PREFIX` writes cProfiles PREFIX-N-{first,changes,full}.prof (the changes: the
event loop's and the sync thread's work merged).

    .venv/bin/python bench/ipvs.py [--services 3000 10000] [--endpoints 10] [--changes 15]
    .venv/bin/python bench/ipvs.py --daemon [--services 1000 10000] [--changes 15] [--memory 2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)
from compile import CONFIG, objects  # noqa: E402  (bench/compile.py: the same objects)

from netkit.model import IPFamily, NodeState, Objects  # noqa: E402
from netkit.model.state import StateBuilder  # noqa: E402
from netkit.rules.iptables import backend as IPTABLES  # noqa: E402
from netkit.rules.ipvs import backend as IPVS  # noqa: E402
from netkit.rules.ipvs import compile as ipvs_compile  # noqa: E402
from netkit.rules.ipvs import plan as ipvs_plan  # noqa: E402

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


# ---------------------------------------------------------------- --daemon: the real daemon, in the VM

def bare_apply(kernel: Any, p: ipvs_plan.Plan, via: str) -> float:
    """The plan's kernel work sent directly, in apply's order (sets and addresses first, removals
    last); the IPVS requests over a freshly opened socket, `via` netkit's netlink codec (the same
    messages the daemon sends) or pyroute2's `IPVS`. Returns the seconds it took."""
    from netkit.netns import run
    from netkit.rules.iptables.plan import render_plan as ipt_render
    from netkit.rules.ipvs import netlink as nlk

    def tool(argv: list[str], lines: list[str]) -> None:
        if lines:
            run(argv, kernel.netns, input="\n".join(lines) + "\n")

    start = time.perf_counter()
    tool(["ipset", "restore"], [*(s.create_line() for s in p.create_sets),
                                *(f"add {s.name} {e}" for s in p.create_sets for e in sorted(s.entries)),
                                *(f"add {name} {e}" for name, e in p.add_entries)])
    tool(["ip", "-batch", "-"], [f"addr add {a}/{a.max_prefixlen} dev kube-ipvs0" for a in p.add_addresses])
    if p.iptables:
        tool([kernel.iptables.tool("restore"), "--noflush", "--wait", "5"], [ipt_render(p.iptables)])
    if any((p.add_services, p.set_services, p.del_services, p.add_reals, p.set_reals, p.del_reals)):
        if via == "netlink":
            with nlk.IPVSNetlink(kernel.netns) as nl:  # the writes only: not apply's read of the live ones
                nl.write(kernel.requests(p, {}))
        else:
            pyroute2_requests(kernel.netns, p)
    tool(["ipset", "restore"], [*(f"del {name} {e}" for name, e in p.del_entries),
                                *(f"destroy {name}" for name in p.destroy_sets)])
    tool(["ip", "-batch", "-"], [f"addr del {a}/{a.max_prefixlen} dev kube-ipvs0" for a in p.del_addresses])
    return time.perf_counter() - start


def pyroute2_requests(netns: str, p: ipvs_plan.Plan) -> None:
    """The plan's IPVS requests through pyroute2 0.9.7 (NAT needs fwd_method 0; "set", not
    "update"; IPv4 only here)."""
    from pyroute2 import IPVS as Netlink
    from pyroute2 import IPVSDest, IPVSService

    def key(vs: Any) -> Any:
        if vs.fwmark:
            return IPVSService(af=2, fwmark=vs.fwmark, protocol=6, netmask="255.255.255.255")
        return IPVSService(af=2, protocol={"TCP": 6, "UDP": 17}.get(vs.protocol.value, 132), addr=str(vs.ip),
                           port=vs.port, netmask="255.255.255.255")

    def spec(vs: Any) -> Any:
        k = key(vs)
        return IPVSService(**{**{name: k[name] for name in k}, "sched_name": vs.scheduler,
                              "timeout": vs.persistent or 0,
                              "flags": {"flags": 1 if vs.persistent else 0, "mask": 0xFFFFFFFF}})

    def dest(r: Any) -> Any:
        return IPVSDest(addr=str(r.ip), port=r.port, weight=r.weight, fwd_method=0)

    nl = Netlink(netns=netns)
    try:
        for vs in p.add_services:
            nl.service("add", spec(vs))
            for r in vs.reals:
                nl.dest("add", key(vs), dest(r))
        for vs in p.set_services:
            nl.service("set", spec(vs))
        for verb, pairs in (("add", p.add_reals), ("set", p.set_reals), ("del", p.del_reals)):
            for vs, r in pairs:
                nl.dest(verb, key(vs), dest(r))
        for vs in p.del_services:
            nl.service("del", key(vs))
    finally:
        nl.close()


def new_address(objs: Objects, i: int, k: int) -> tuple[Any, Any]:
    """Slice i with its first endpoint's address replaced by a new one (change number k)."""
    from ipaddress import ip_address
    old = objs.slices[i]
    eps = list(old.endpoints)
    eps[0] = replace(eps[0], addresses=(ip_address(f"10.250.{k // 250}.{k % 250 + 1}"),))
    return old, replace(old, endpoints=tuple(eps))


async def daemon_measure(n: int, changes: int, netns: str, profile: str | None) -> dict[str, Any]:
    import asyncio
    import cProfile
    import pstats

    from sync import DirectSource, Timed, pct, rss_mb

    from netkit.runtime.daemon import Daemon, DaemonOptions

    cfg = replace(CFG, min_sync_period=0.0, sync_period=3600.0)
    daemon = Daemon.for_mode(DaemonOptions(config=cfg, families=(V4,), netns=netns, healthz_address=None,
                                           metrics_address=None, handle_signals=False))
    objs = objects(n, 10)
    daemon._source = lambda: DirectSource(daemon.store, objs)  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    finished: list[tuple[float, Any]] = []
    plans: list[ipvs_plan.Plan] = []
    phases: dict[str, list[float]] = {"compile": [], "plan": [], "kernel": []}
    syncer: Any = daemon.syncer
    kernel = syncer.kernels[V4]
    real_apply, real_sync = kernel.apply, syncer.sync
    # phase → (the event loop's profile, the sync thread's): first sync, changes, full sync
    profs = {phase: (cProfile.Profile(), cProfile.Profile()) for phase in ("first", "changes", "full")}
    profiling: list[str | None] = [None]

    def apply(plan: ipvs_plan.Plan) -> None:
        plans.append(plan if plan.changes < 1000 else ipvs_plan.Plan(plan.family))  # not the first sync's
        t = time.perf_counter()
        real_apply(plan)
        phases["kernel"].append(time.perf_counter() - t)

    compiler = syncer.compilers[V4]
    real_compile = compiler.compile

    def compile_(state: NodeState) -> Any:
        t = time.perf_counter()
        try:
            return real_compile(state)
        finally:
            phases["compile"].append(time.perf_counter() - t)

    def sync(state: Any, *, full: bool) -> Any:
        phase = profiling[0]
        if phase:
            profs[phase][1].enable()
        try:
            result = real_sync(state, full=full)
        finally:
            if phase:
                profs[phase][1].disable()
        finished.append((time.perf_counter(), result))
        loop.call_soon_threadsafe(done.set)
        return result

    compiler.compile = compile_
    kernel.apply = apply
    syncer.sync = sync
    syncer.backend = Timed(syncer.backend, phases)
    profiling[0] = "first" if profile else None
    task = asyncio.create_task(daemon.run())
    t0 = time.perf_counter()
    await asyncio.wait([task, asyncio.create_task(daemon.synced.wait())], return_when=asyncio.FIRST_COMPLETED)
    profiling[0] = None
    if task.done():
        task.result()
        raise RuntimeError("the daemon stopped before its first sync")
    first = finished[-1][0] - t0
    first_split = {k: round(sum(v), 3) for k, v in phases.items()}
    print(f"  {n} services: first sync {first:.1f} s {first_split}", file=sys.stderr, flush=True)
    rss_first = rss_mb()
    latencies, bare, bare_pyroute2, outside, splits = [], [], [], [], []
    for k in range(changes):
        for v in phases.values():
            v.clear()
        old, new = new_address(objs, (k * 7919) % n, k)
        before = syncer.committed[V4]
        done.clear()
        profiling[0] = "changes" if profile else None
        if profile:
            profs["changes"][0].enable()
        start = time.perf_counter()
        daemon.store.put(("obj", "EndpointSlice", old.ref), (new,))
        while True:
            await asyncio.wait_for(done.wait(), 1800)
            done.clear()
            if finished[-1][0] > start and finished[-1][1].changed:
                break
        end = finished[-1][0]
        if profile:
            profs["changes"][0].disable()
        profiling[0] = None
        latencies.append(end - start)
        print(f"  change {k + 1}: {end - start:.3f} s", file=sys.stderr, flush=True)
        outside.append(end - start - finished[-1][1].seconds)
        splits.append({name: round(sum(v), 4) for name, v in phases.items()})
        after = syncer.committed[V4]
        # put the kernel back (untimed), then send the same change directly (pyroute2 runs its own
        # event loop: not on this one)
        for via, into in (("netlink", bare), ("pyroute2", bare_pyroute2)):
            await asyncio.to_thread(real_apply, ipvs_plan.plan(after, before))
            into.append(await asyncio.to_thread(bare_apply, kernel, plans[-1], via))
    t = time.perf_counter()
    state = daemon.state_builder.build(daemon.store.objects(), cfg.node_name, cfg.node_ips)
    profiling[0] = "full" if profile else None
    full = await asyncio.to_thread(sync, state, full=True)
    profiling[0] = None
    full_s = time.perf_counter() - t
    assert full.error is None and full.written == 0, f"the kernel differs after the changes: {full}"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if profile is not None:
        for phase, (in_loop, in_sync) in profs.items():
            stats = pstats.Stats(in_sync)
            if phase == "changes":
                stats.add(in_loop)
            stats.dump_stats(f"{profile}-{n}-{phase}.prof")
    last = plans[-1]
    return {
        "services": n, "changes": changes, "first_sync_s": first, "first_split_s": first_split,
        "full_sync_s": full_s, "p50_daemon_s": statistics.median(latencies), "p99_daemon_s": pct(latencies, 0.99),
        "p50_bare_s": statistics.median(bare), "p99_bare_s": pct(bare, 0.99),
        "p50_bare_pyroute2_s": statistics.median(bare_pyroute2), "p99_bare_pyroute2_s": pct(bare_pyroute2, 0.99),
        "latencies_s": [round(x, 4) for x in latencies], "bare_s": [round(x, 4) for x in bare],
        "bare_pyroute2_s": [round(x, 4) for x in bare_pyroute2],
        "p50_outside_syncer_s": statistics.median(outside), "plan": last.stats().text,
        "split_first_change_s": splits[0], "split_last_change_s": splits[-1],
        "rss_after_first_sync_mb": rss_first[0], "rss_mb": rss_mb()[0], "peak_rss_mb": rss_mb()[1],
    }


def daemon_child(n: int, changes: int, profile: str | None) -> None:
    import asyncio
    import json
    import subprocess
    import uuid
    netns = f"nkbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        print(json.dumps(asyncio.run(daemon_measure(n, changes, netns, profile))))
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


def _daemon_figures(n: int, r: dict[str, float]) -> list[results.Figure]:
    fig, at = results.Figure.measured, f"{n:,} services: "
    return [fig(at + "one change, p50", r["p50_daemon_s"], "s", r["p50_bare_s"], "≤ 1.5×"),
            fig(at + "one change, p99", r["p99_daemon_s"], "s", r["p99_bare_s"]),
            fig(at + "first sync", r["first_sync_s"], "s"),
            fig(at + "full sync with nothing to write", r["full_sync_s"], "s"),
            fig(at + "RSS after the first sync", r["rss_mb"], "MB", target="≤ 300 MB")]


def daemon_main(args: argparse.Namespace) -> int:
    import json
    import os
    import subprocess
    if not os.environ.get("NETKIT_IN_VM"):
        here = Path(__file__).resolve()
        argv = [sys.executable, str(here), "--daemon", "--changes", str(args.changes),
                "--services", *map(str, args.services), *(["--profile", args.profile] if args.profile else []),
                *(["--json", str(Path(args.json).resolve())] if args.json else [])]  # the work folder is shared
        print(f"booting the test VM (TCG, 1 vCPU, {args.memory} MB)", flush=True)
        return subprocess.run([str(here.parent.parent / "vm-images" / "run"), "--cpus", "1",
                               "--memory", str(args.memory), "--timeout", str(args.timeout), "--", *argv]).returncode
    print(f"{'services':>8} | {'daemon p50':>10} {'p99':>7} | {'bare p50':>8} {'p99':>7} | {'ratio':>5} | "
          f"{'pyroute2 p50':>12} {'ratio':>5} | {'first sync':>10} {'full sync':>9} | {'RSS MB':>6} {'peak':>5}",
          flush=True)
    ok = True
    figures: list[results.Figure] = []
    for n in args.services:
        # the child's stderr (its progress, the daemon's warnings) passes through as it comes
        out = subprocess.run([sys.executable, __file__, "--daemon-child", str(n), str(args.changes),
                              args.profile or ""], stdout=subprocess.PIPE, text=True)
        if out.returncode != 0:
            print(f"{n} services: the child failed (exit {out.returncode})", flush=True)
            return 1
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ratio = r["p50_daemon_s"] / r["p50_bare_s"]
        ratio_pyroute2 = r["p50_daemon_s"] / r["p50_bare_pyroute2_s"]
        ok = ok and (n < 10_000 or (ratio <= 1.5 and r["rss_mb"] <= 300))
        print(f"{n:>8} | {r['p50_daemon_s']:>9.3f}s {r['p99_daemon_s']:>6.3f}s | {r['p50_bare_s']:>7.3f}s "
              f"{r['p99_bare_s']:>6.3f}s | {ratio:>5.2f} | {r['p50_bare_pyroute2_s']:>11.3f}s {ratio_pyroute2:>5.2f} | "
              f"{r['first_sync_s']:>9.1f}s {r['full_sync_s']:>8.1f}s | {r['rss_mb']:>6.0f} {r['peak_rss_mb']:>5.0f}",
              flush=True)
        print("         " + json.dumps({k: v for k, v in r.items() if k not in (
            "services", "changes", "p50_daemon_s", "p99_daemon_s", "p50_bare_s", "p99_bare_s")}), flush=True)
        figures += _daemon_figures(n, r)
    results.write(args.json, __file__, "IPVS mode through the real daemon inside the test VM (software emulation, "
                  "1 vCPU): one EndpointSlice change → the sync that wrote it, vs the same netlink requests and "
                  f"`ipset restore` runs sent directly in the same run; {args.changes} changes", figures)
    print("targets at 10k (daemon ≤ 1.5 × bare, RSS ≤ 300 MB):", "met" if ok else "MISSED")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[3000, 10_000])
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--changes", type=int, default=15)
    ap.add_argument("--daemon", action="store_true", help="the real daemon end to end, inside the test VM")
    ap.add_argument("--memory", type=int, default=2048, help="--daemon: the VM's memory in MB")
    ap.add_argument("--timeout", type=int, default=3600, help="--daemon: the VM run's time limit in seconds")
    ap.add_argument("--profile", help="--daemon: write cProfiles PREFIX-N-{first,changes,full}.prof")
    ap.add_argument("--daemon-child", nargs=3, help=argparse.SUPPRESS)
    args = results.parse_args(ap)
    if args.daemon_child:
        daemon_child(int(args.daemon_child[0]), int(args.daemon_child[1]), args.daemon_child[2] or None)
        return 0
    if args.daemon:
        return daemon_main(args)
    figures: list[results.Figure] = []
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
        figures += [results.Figure.measured(f"{n:,} services: compile + plan of one change", inc, "ms", full),
                    results.Figure.measured(f"{n:,} services: iptables mode's compile + plan of the same change",
                                            ipt, "ms")]
    results.write(args.json, __file__, f"IPVS mode at {args.endpoints} endpoints per service, one endpoint "
                  "removed: the remembering compiler and plan vs a fresh compile and full plan in the same run, "
                  f"and iptables mode's memo compiler for the same change; medians of {args.changes}", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
