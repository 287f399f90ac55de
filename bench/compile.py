"""Benchmark: compile+render of N services × E endpoints against the kernel's full load of the same payload.

In one run: build NodeState from the objects (timed apart), compile and render the iptables ruleset (timed, with
peak RSS measured in a child process so the kernel step does not count), then
`iptables-legacy-restore` of that payload into a fresh network namespace (timed; the namespace is
always removed). Prints both and the ratio; the target is compile+render ≤ 0.25 × the kernel load and
peak RSS ≤ 400 MB.

    .venv/bin/python bench/compile.py [--services 10000] [--endpoints 10] [--runs 3]
    .venv/bin/python bench/compile.py --command   # the whole `netkit compile` from a JSON and a YAML dump
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from ipaddress import ip_address
from pathlib import Path
from typing import TypeVar

import yaml

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, Objects, build
from netkit.model.types import (
    AddressType,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    Node,
    ObjectRef,
    Protocol,
    Service,
    ServicePort,
    ServiceType,
)
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.ruleset import render

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results  # noqa: E402  (bench/results.py: --json)
from installed import installed_env  # noqa: E402  (bench/installed.py)


def objects(n_services: int, n_endpoints: int, affinity_every: int = 7) -> Objects:
    """N services × E endpoints; every 10th a NodePort (up to 2,768), every `affinity_every`-th with
    ClientIP affinity (0: none)."""
    services, slices = [], []
    for i in range(n_services):
        ref = ObjectRef(f"ns{i % 50}", f"svc{i}")
        # every 10th a NodePort, as long as nodePorts 30000-32767 last (2,768: the first 27,680 services)
        nodeport = ServiceType.NODE_PORT if i % 10 == 0 and i // 10 < 2768 else ServiceType.CLUSTER_IP
        port = ServicePort("http", Protocol.TCP, 80, 8080, 30000 + (i // 10) % 2768 if nodeport is ServiceType.NODE_PORT
                           else None)
        sticky = 10800 if affinity_every and i % affinity_every == 0 else None
        services.append(Service(ref, nodeport, (ip_address(f"10.96.{i // 250}.{i % 250 + 1}"),),
                                ports=(port,), session_affinity_timeout=sticky))
        eps = tuple(Endpoint((ip_address(f"10.{128 + (i * n_endpoints + j) // 65000}."
                                         f"{(i * n_endpoints + j) // 250 % 256}.{(i * n_endpoints + j) % 250 + 1}"),),
                             node_name=f"node-{j % 20}") for j in range(n_endpoints))
        slices.append(EndpointSlice(ObjectRef(ref.namespace, f"svc{i}-x"), ref.name, AddressType.IPV4, eps,
                                    (EndpointPort("http", Protocol.TCP, 8080),)))
    node = Node("node-0", (("InternalIP", ip_address("192.0.2.10")),))
    return Objects(tuple(services), tuple(slices), (node,))


CONFIG = Config(node_name="node-0", cluster_cidrs=parse_cidrs(["10.128.0.0/9"], "bench"))


def compile_once(n_services: int, n_endpoints: int) -> dict[str, float]:
    objs = objects(n_services, n_endpoints)
    start = time.perf_counter()
    state = build(objs, CONFIG.node_name)
    built = time.perf_counter()
    ruleset = compile(state, CONFIG, IPFamily.IPV4)
    text = render(ruleset)
    elapsed = time.perf_counter() - built
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": elapsed, "build_seconds": built - start, "peak_rss_mb": rss, "bytes": len(text),
            "rules": sum(1 for line in text.splitlines() if line.startswith("-A"))}


# iptables-legacy replaces a table as one blob, and the kernel refuses a blob larger than
# XT_MAX_TABLE_SIZE (512 MiB, net/netfilter/x_tables.c: xt_alloc_table_info returns NULL, and the
# restore fails at COMMIT). Read back with IPT_SO_GET_INFO after loading this layout at 10,000
# services, the nat table is 116,410,384 bytes of blob (559,313 entries, 208 bytes each) for
# 36,900,074 bytes of rules text: 3.15 bytes per byte, so at 50,000 services ~560 MiB. Nor is
# iptables-nft-restore a way out: it had not loaded the 50k payload after 10 minutes here (2.7 GB
# RSS). So a payload over the cap is loaded by iptables-legacy-restore in parts — the same Services
# split in contiguous runs, each compiled alone into a ruleset the kernel can hold and loaded into a
# fresh namespace of its own — and the parts' times are added (labelled as such; --try-legacy
# offers the whole payload, which libiptc takes many minutes to build before the kernel refuses it).
XT_MAX_TABLE_SIZE = 512 * 1024 * 1024
BLOB_PER_TEXT_BYTE = 116_410_384 / 36_900_074
T = TypeVar("T")


def parts_needed(payload: str) -> int:
    """How many parts keep each part's legacy nat blob under ~80% of the cap (1: the payload fits)."""
    return max(1, math.ceil(len(payload) * BLOB_PER_TEXT_BYTE / (0.8 * XT_MAX_TABLE_SIZE)))


def part_payloads(objs: Objects, parts: int) -> Iterator[str]:
    """The payload of each contiguous run of Services (with their EndpointSlices), compiled alone."""
    size = math.ceil(len(objs.services) / parts)
    for start in range(0, len(objs.services), size):
        part = replace(objs, services=objs.services[start:start + size], slices=objs.slices[start:start + size])
        yield render(compile(build(part, CONFIG.node_name), CONFIG, IPFamily.IPV4))


def baseline(objs: Objects, payload: str, load: Callable[[str], T], try_legacy: bool) -> tuple[list[T], str]:
    """`load` of the payload, or of its parts if legacy cannot hold it whole; and how it was split."""
    parts = 1 if try_legacy else parts_needed(payload)
    if parts == 1:
        return [load(payload)], ""
    blob = len(payload) * BLOB_PER_TEXT_BYTE / 2**20
    return [load(p) for p in part_payloads(objs, parts)], (
        f"the nat table would be ~{blob:.0f} MiB of legacy kernel blob, over XT_MAX_TABLE_SIZE (512 MiB): "
        f"loaded as {parts} parts of the same Services, one fresh namespace each, times added")


def kernel_load(payload: str) -> float:
    ns = f"nkbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        start = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore"], input=payload, text=True,
                       check=True)
        return time.perf_counter() - start
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def manifests(objs: Objects) -> dict[str, object]:
    """The objects as the JSON `kubectl get -o json` would give (a List), for the whole-command run."""
    items: list[dict[str, object]] = []
    for svc in objs.services:
        ports = [{"name": p.name, "protocol": p.protocol.value, "port": p.port, "targetPort": p.target_port,
                  **({"nodePort": p.node_port} if p.node_port else {})} for p in svc.ports]
        spec: dict[str, object] = {"type": svc.type.value, "clusterIP": str(svc.cluster_ips[0]),
                                   "clusterIPs": [str(ip) for ip in svc.cluster_ips], "ports": ports}
        if svc.session_affinity_timeout:
            spec.update(sessionAffinity="ClientIP", sessionAffinityConfig={
                "clientIP": {"timeoutSeconds": svc.session_affinity_timeout}})
        items.append({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": svc.ref.name, "namespace": svc.ref.namespace}, "spec": spec})
    for sl in objs.slices:
        items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                      "metadata": {"name": sl.ref.name, "namespace": sl.ref.namespace,
                                   "labels": {"kubernetes.io/service-name": sl.service_name}},
                      "ports": [{"name": p.name, "protocol": p.protocol.value, "port": p.port} for p in sl.ports],
                      "endpoints": [{"addresses": [str(a) for a in e.addresses], "nodeName": e.node_name,
                                     "conditions": {"ready": True}} for e in sl.endpoints]})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _timed(argv: list[str], stdin: str | None = None, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run argv to the end: (wall s, CPU s of the child: user + system, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def restore_in_fresh_netns(payload: str) -> tuple[float, float]:
    """`iptables-legacy-restore` of payload in a namespace made for it and always removed: (wall, CPU)."""
    ns = f"nkbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        wall, cpu, _ = _timed(["ip", "netns", "exec", ns, "iptables-legacy-restore"], payload)
        return wall, cpu
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def whole_command(n_services: int, n_endpoints: int, runs: int,
                  try_legacy: bool = False) -> tuple[list[str], list[results.Figure]]:
    """`netkit compile` as a user runs it on a dump (process start, decode, validate, compile, render),
    from JSON and from YAML, against `iptables-legacy-restore` of its output in a fresh namespace;
    medians of `runs` runs each, wall clock and CPU (user + system: steadier on a shared machine)."""
    objs = objects(n_services, n_endpoints)
    doc = manifests(objs)
    lines: list[str] = []
    figures: list[results.Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        dumps = {"json": Path(tmp) / "dump.json", "yaml": Path(tmp) / "dump.yaml"}
        dumps["json"].write_text(json.dumps(doc))
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        dumps["yaml"].write_text(yaml.dump(doc, Dumper=dumper, sort_keys=False))
        payload = ""
        timings: dict[str, list[tuple[float, float]]] = {"json": [], "yaml": []}
        env = installed_env()  # netkit starts as an installed copy does: its modules compiled to bytecode
        for _ in range(runs):
            for fmt, path in dumps.items():
                wall, cpu, payload = _timed([sys.executable, "-m", "netkit", "compile", "-f", str(path),
                                             "--mode", "iptables", "--ip-family", "ipv4", "--node-name",
                                             CONFIG.node_name, "--cluster-cidr", "10.128.0.0/9"], env=env)
                timings[fmt].append((wall, cpu))
        restores, how = [], ""
        for _ in range(runs):
            each, how = baseline(objs, payload, restore_in_fresh_netns, try_legacy)
            restores.append((sum(w for w, _ in each), sum(c for _, c in each)))
    r_wall = statistics.median(w for w, _ in restores)
    r_cpu = statistics.median(c for _, c in restores)
    lines.append(f"{n_services} services × {n_endpoints} endpoints, {len(payload) / 1e6:.1f} MB of rules; "
                 f"medians of {runs} runs")
    if how:
        lines.append(f"baseline: {how}")
    lines.append(f"iptables-legacy-restore into a fresh netns   wall {r_wall:.2f} s  CPU {r_cpu:.2f} s")
    for fmt, ts in timings.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        target = "  (target ≤ 0.5)" if fmt == "json" else ""
        verdict = f"  {'OK' if wall / r_wall <= 0.5 else 'MISSED'}" if fmt == "json" else ""
        lines.append(f"netkit compile -f dump.{fmt:<4}                 wall {wall:.2f} s  CPU {cpu:.2f} s  "
                     f"ratio wall {wall / r_wall:.2f}  CPU {cpu / r_cpu:.2f}{target}{verdict}")
        figures += [results.Figure.measured(f"`netkit compile -f dump.{fmt}`, wall", wall, "s", r_wall,
                                            "≤ 0.5×" if fmt == "json" else ""),
                    results.Figure.measured(f"`netkit compile -f dump.{fmt}`, CPU", cpu, "s", r_cpu)]
    return lines, figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", action="store_true",
                    help="time the whole `netkit compile -f dump.json` against iptables-legacy-restore of "
                         "its output (target ≤ 0.5×)")
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--try-legacy", action="store_true",
                    help="offer iptables-legacy-restore the whole payload even over its table cap (it refuses it at "
                         "COMMIT); otherwise such a payload is loaded in parts")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = results.parse_args(ap)
    if args.child:
        print(json.dumps(compile_once(args.services, args.endpoints)))
        return 0
    if args.command:
        lines, figures = whole_command(args.services, args.endpoints, args.runs, args.try_legacy)
        print("\n".join(lines))
        results.write(args.json, __file__, f"the whole `netkit compile -f DUMP` at {args.services:,} services × "
                      f"{args.endpoints} endpoints from a JSON and a YAML dump vs `iptables-legacy-restore` of its "
                      f"output into a fresh namespace; {results.runs(args.runs)}, wall clock and CPU", figures)
        return 0
    runs = []
    for _ in range(args.runs):  # a fresh process per run: honest peak RSS, no warm caches
        out = subprocess.run([sys.executable, __file__, "--child", "--services", str(args.services),
                              "--endpoints", str(args.endpoints)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    objs = objects(args.services, args.endpoints)
    payload = render(compile(build(objs, CONFIG.node_name), CONFIG, IPFamily.IPV4))
    loads, how = [], ""
    for _ in range(args.runs):
        each, how = baseline(objs, payload, kernel_load, args.try_legacy)
        loads.append(sum(each))
    compile_s = statistics.median(r["seconds"] for r in runs)
    kernel_s = statistics.median(loads)
    rss = max(r["peak_rss_mb"] for r in runs)
    print(f"{args.services} services × {args.endpoints} endpoints: {runs[0]['rules']} rules, "
          f"{runs[0]['bytes'] / 1e6:.1f} MB payload")
    build_s = statistics.median(r["build_seconds"] for r in runs)
    print(f"NodeState from objects (not in the target) median {build_s:.2f} s")
    each = [round(r["seconds"], 2) for r in runs]
    print(f"compile+render                          median {compile_s:.2f} s  runs {each}")
    if how:
        print(f"baseline: {how}")
    print(f"iptables-legacy-restore full load       median {kernel_s:.2f} s  runs {[round(x, 2) for x in loads]}")
    ratio = compile_s / kernel_s
    print(f"ratio compile/kernel = {ratio:.2f} (target ≤ 0.25)  {'OK' if ratio <= 0.25 else 'MISSED'}")
    print(f"peak RSS of the compile = {rss:.0f} MB (target ≤ 400)  {'OK' if rss <= 400 else 'MISSED'}")
    results.write(args.json, __file__, f"{args.services:,} services × {args.endpoints} endpoints: compile and render "
                  "of the iptables ruleset vs `iptables-legacy-restore` of the same payload into a fresh namespace; "
                  f"{results.runs(args.runs)}" + (f"; baseline: {how}" if how else ""), [
        results.Figure.measured("compile+render vs `iptables-legacy-restore` full load", compile_s, "s", kernel_s,
                                "≤ 0.25×"),
        results.Figure.measured("NodeState from the objects (not in the target)", build_s, "s"),
        results.Figure.measured("peak RSS of the compile", rss, "MB",
                                target="≤ 400 MB" if args.services <= 10_000 else "")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
