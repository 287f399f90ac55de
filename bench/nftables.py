"""nftables at scale, in one run: netkit's layout against a kube-proxy-like layout.

    .venv/bin/python bench/nftables.py [--services 10000] [--endpoints 10] [--connects 1000]

1. Full load of N services × E endpoints: netkit's layout (compile + render + `nft -f`, and the
   libnftables transport) against kube-proxy's nftables layout (a chain per service and per
   endpoint, `numgen … vmap` to endpoint chains), generated here for comparison. Target ≥ 10×.
2. One endpoint removed from one service through netkit's planner: plan + render + apply into the
   loaded table, by `nft -f`, libnftables and netlink.py's own batch (the daemon's path; target
   ≤ 150 ms including the kernel); the full-state compile
   that precedes it in a sync is reported separately; and the same change in kube-proxy's layout.
3. First-packet latency: sequential TCP connects from the node namespace to the first and to the
   last service's ClusterIP (interleaved, so drift hits both), medians compared. Target: last
   within 10% of first.

`--layouts 1000,3000` instead compares where a service's chain looks its endpoints up (no map, an
anonymous map per service, a named map per service, shared maps with elements before or after the
rules), each in a table of only dispatch, service chains and endpoints (docs/nftables.md, "What
each endpoint-map layout measured").

Everything runs in network namespaces created here with unique names and always removed.
Figures are from a shared 2-core machine: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from ipaddress import IPv4Address, ip_network
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import backend_ns  # noqa: E402
import results  # noqa: E402  (bench/results.py: --json)
from backend_ns import namespace, sh  # noqa: E402  (bench/backend_ns.py)

from netkit.config import Config  # noqa: E402
from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName  # noqa: E402
from netkit.model.state import ServicePortState  # noqa: E402
from netkit.nft.render import render  # noqa: E402
from netkit.nft.transaction import render_transaction  # noqa: E402
from netkit.rules.nftables.compile import compile  # noqa: E402
from netkit.rules.nftables.kernel import NftKernel  # noqa: E402
from netkit.rules.nftables.plan import plan  # noqa: E402

T = TypeVar("T")
CONFIG = Config(cluster_cidrs=(ip_network("10.0.0.0/8"),))
SVC_BASE = int(IPv4Address("10.96.0.0"))
EP_BASE = int(IPv4Address("10.128.0.0"))
BACKEND_NET = "10.250.0"  # the first and last services' endpoints live in the backend namespace


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def ip(base: int, i: int) -> IPv4Address:
    return IPv4Address(base + i)


def endpoints(s: int, n: int, e: int) -> tuple[EndpointAddr, ...]:
    if s in (0, n - 1):  # reachable: addresses of the backend namespace
        return tuple(EndpointAddr(IPv4Address(f"{BACKEND_NET}.{k + 1}"), 8080) for k in range(e))
    return tuple(EndpointAddr(ip(EP_BASE, s * e + k + 1), 8080) for k in range(e))


def state(n: int, e: int) -> NodeState:
    ports = []
    for s in range(n):
        eps = endpoints(s, n, e)
        ports.append(ServicePortState(
            ServicePortName(ObjectRef("bench", f"svc-{s:05d}"), "http"), IPFamily.IPV4, Protocol.TCP,
            ip(SVC_BASE, s + 1), 80, endpoints=eps, cluster_endpoints=eps, has_endpoints=True))
    return NodeState(NodeInfo("node-a"), tuple(ports))


def drop_one_endpoint(st: NodeState, index: int) -> NodeState:
    p = st.ports[index]
    fewer = p.cluster_endpoints[:-1]
    changed = replace(p, endpoints=fewer, cluster_endpoints=fewer)
    return replace(st, ports=(*st.ports[:index], changed, *st.ports[index + 1:]))


# ── kube-proxy's nftables layout, generated for comparison ───────────────────────────────────────

def kp_hash(text: str) -> str:
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:8]


def kube_proxy_layout(st: NodeState) -> str:
    """kube-proxy (1.29+) nftables mode's shape: vmap dispatch to a chain per service, which picks
    an endpoint chain with `numgen random mod N vmap`; each endpoint chain masquerades hairpin
    traffic and DNATs."""
    chains: list[str] = []
    elements: list[str] = []
    for p in st.ports:
        label = f"{p.name.ref.namespace}/{p.name.ref.name}/tcp/{p.name.port}"
        svc = f"service-{kp_hash(label)}-{label}"
        elements.append(f"{p.cluster_ip} . tcp . {p.port} : goto {svc}")
        picks = []
        for i, ep in enumerate(p.cluster_endpoints):
            epc = f"endpoint-{kp_hash(label + str(ep))}-{label}__{ep.ip}/{ep.port}"
            picks.append(f"{i} : goto {epc}")
            chains.append(f"chain {epc} {{\n ip saddr {ep.ip} jump mark-for-masquerade\n"
                          f" meta l4proto tcp dnat to {ep.ip}:{ep.port}\n}}")
        chains.append(f"chain {svc} {{\n ip daddr {p.cluster_ip} tcp dport {p.port} ip saddr != 10.0.0.0/8 "
                      f"jump mark-for-masquerade\n numgen random mod {len(picks)} vmap {{ {', '.join(picks)} }}\n}}")
    head = ("table ip kube-proxy {\n"
            " map service-ips {\n  type ipv4_addr . inet_proto . inet_service : verdict\n"
            f"  elements = {{ {', '.join(elements)} }}\n }}\n"
            " chain mark-for-masquerade {\n meta mark set meta mark | 0x4000\n}\n"
            " chain services {\n ip daddr . meta l4proto . th dport vmap @service-ips\n}\n"
            " chain nat-output {\n type nat hook output priority -100; policy accept;\n jump services\n}\n")
    return head + "\n".join(chains) + "\n}\n"


def kube_proxy_endpoint_change(st: NodeState, index: int) -> str:
    """The same change in kube-proxy's layout: rewrite the service chain, delete the endpoint chain
    (kube-proxy defers that delete; counted here anyway as it is kernel work of the change)."""
    p = st.ports[index]
    label = f"{p.name.ref.namespace}/{p.name.ref.name}/tcp/{p.name.port}"
    svc = f"service-{kp_hash(label)}-{label}"
    eps = p.cluster_endpoints
    picks = ", ".join(f"{i} : goto endpoint-{kp_hash(label + str(ep))}-{label}__{ep.ip}/{ep.port}"
                      for i, ep in enumerate(eps[:-1]))
    gone = eps[-1]
    return (f"flush chain ip kube-proxy {svc}\n"
            f"add rule ip kube-proxy {svc} numgen random mod {len(eps) - 1} vmap {{ {picks} }}\n"
            f"flush chain ip kube-proxy endpoint-{kp_hash(label + str(gone))}-{label}__{gone.ip}/{gone.port}\n")


# ── namespaces ───────────────────────────────────────────────────────────────────────────────────

CLIENT = r"""
import json, socket, sys, time
first, last, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
times = {first: [], last: []}
for i in range(count):
    for dst in ((first, last) if i % 2 else (last, first)):
        s = socket.socket()
        t = time.perf_counter()
        s.connect((dst, 80))
        times[dst].append(time.perf_counter() - t)
        s.close()
print(json.dumps(times))
"""


def backend(node: str) -> AbstractContextManager[None]:
    """A backend namespace behind a veth, owning the endpoint addresses of the first and last service."""
    return backend_ns.backend(node, BACKEND_NET)


def latency(node: str, first: str, last: str, count: int) -> dict[str, list[float]]:
    out = sh("ip", "netns", "exec", node, sys.executable, "-c", CLIENT, first, last, str(count))
    return dict(json.loads(out))


# ── endpoint-map layouts, isolated ───────────────────────────────────────────────────────────────

LAYOUTS = ("none", "anonymous", "per-service", "shared-1", "shared-16-after", "shared-64", "shared-64-after",
           "shared-256-after")


def layout_script(n: int, e: int, layout: str) -> str:
    """A table with the dispatch map, one chain per service and its dnat rule, endpoints looked up as
    `layout` says; `shared-K[-after]`: K maps, key s × 4096 + i, elements sent after the rules."""
    def ep(s: int, k: int) -> str:
        return f"{ip(EP_BASE, s * e + k)} . 8080"
    shards = int(layout.split("-")[1]) if layout.startswith("shared") else 0
    after = layout.endswith("-after")
    typeof = "typeof numgen random mod 1 : ip daddr . tcp dport"
    out = ["table ip t {", " map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; elements = { "
           + ", ".join(f"{ip(SVC_BASE, s + 1)} . tcp . 80 : goto svc-{s}" for s in range(n)) + " }; }"]
    for j in range(shards):
        items = ", ".join(f"{s * 4096 + k} : {ep(s, k)}" for s in range(j, n, shards) for k in range(e))
        out.append(f" map ep-{j} {{ {typeof}; " + (f"elements = {{ {items} }};" if items and not after else "") + " }")
    out.append(" chain services { ip daddr . meta l4proto . th dport vmap @service-ips; }")
    out.append(" chain nat-output { type nat hook output priority -100; policy accept; jump services; }")
    for s in range(n):
        dnat = "meta l4proto tcp dnat ip to"
        if layout == "none":
            rule = f"{dnat} {ip(EP_BASE, s * e)}:8080"
        elif layout == "anonymous":
            rule = f"{dnat} numgen random mod {e} map {{ " + ", ".join(f"{k} : {ep(s, k)}" for k in range(e)) + " }"
        elif layout == "per-service":
            out.append(f" map m-{s} {{ {typeof}; elements = {{ "
                       + ", ".join(f"{k} : {ep(s, k)}" for k in range(e)) + " }; }")
            rule = f"{dnat} numgen random mod {e} map @m-{s}"
        else:
            offset = f" offset {s * 4096}" if s else ""
            rule = f"{dnat} numgen random mod {e}{offset} map @ep-{s % shards}"
        out.append(f" chain svc-{s} {{ {rule}; }}")
    out.append("}")
    if after:
        for j in range(shards):
            items = ", ".join(f"{s * 4096 + k} : {ep(s, k)}" for s in range(j, n, shards) for k in range(e))
            if items:
                out.append(f"add element ip t ep-{j} {{ {items} }}")
    return "\n".join(out) + "\n"


def compare_layouts(sizes: list[int], e: int, chart: Path | None = None) -> None:
    points: dict[str, list[tuple[float, float]]] = {}
    for n in sizes:
        for layout in LAYOUTS:
            script = layout_script(n, e, layout)
            with namespace("lay") as ns:
                _, took = timed(partial(sh, "ip", "netns", "exec", ns, "nft", "-f", "-", input=script))
            print(f"layout {layout:17} {n:6} services: full load {took:6.2f} s", flush=True)
            points.setdefault(layout, []).append((n, took))
    if chart:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from charts import line_chart

        line_chart(chart, points, title=f"nftables full load by endpoint-map layout ({e} endpoints)",
                   xlabel="Services", ylabel="seconds (nft -f)", log_y=True)
        print(f"chart: {chart}")


# ── the run ──────────────────────────────────────────────────────────────────────────────────────

def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--services", type=int, default=10_000)
    args.add_argument("--endpoints", type=int, default=10)
    args.add_argument("--connects", type=int, default=1000, help="connects per service in the latency test")
    args.add_argument("--skip-kube-proxy", action="store_true", help="skip the slow comparison load")
    args.add_argument("--layouts", metavar="N,N", help="only compare endpoint-map layouts at these sizes")
    args.add_argument("--chart", type=Path, metavar="PNG", help="with --layouts: write a chart of the loads here")
    opt = results.parse_args(args)
    n, e = opt.services, opt.endpoints
    if opt.layouts:
        compare_layouts([int(x) for x in opt.layouts.split(",")], e, opt.chart)
        return
    print(f"# nftables benchmark: {n} services × {e} endpoints")
    st = state(n, e)
    desired, t_compile = timed(lambda: compile(st, CONFIG, IPFamily.IPV4))
    script, t_render = timed(lambda: render(desired))
    print(f"netkit compile {t_compile:.2f} s, render {t_render:.2f} s ({len(script) / 1e6:.1f} MB)")
    fig = results.Figure.measured
    figures = [fig("compile", t_compile, "s"), fig("render", t_render, "s")]
    loads: dict[str, float] = {}
    for transport in ("cli", "lib"):
        with namespace(f"nk{transport}") as ns:
            k = NftKernel("ip", ns, transport=transport)
            _, loads[transport] = timed(partial(k.apply, plan(None, desired)))
            assert k.dump() == desired, "the kernel holds what was compiled"
            print(f"netkit full load ({transport}): {loads[transport]:.2f} s")
    if not opt.skip_kube_proxy:
        kp = kube_proxy_layout(st)
        with namespace("kp") as ns:
            _, t_kp = timed(lambda: sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=kp))
            print(f"kube-proxy layout full load: {t_kp:.2f} s ({len(kp) / 1e6:.1f} MB)")
            _, t_kp_change = timed(lambda: sh("ip", "netns", "exec", ns, "nft", "-f", "-",
                                              input=kube_proxy_endpoint_change(st, n // 2)))
        best = min(loads.values())
        print(f"RATIO kube-proxy layout / netkit full load: {t_kp / best:.1f}× (target ≥ 10×)")
    figures.append(fig("full load" + ("" if opt.skip_kube_proxy else " vs the kube-proxy-style layout's"),
                       min(loads.values()), "s", None if opt.skip_kube_proxy else t_kp, "≤ 0.1×"))
    changed = drop_one_endpoint(st, n // 2)
    after, t_compile2 = timed(lambda: compile(changed, CONFIG, IPFamily.IPV4))
    with namespace("nkchg") as ns, backend(ns):
        change_s: dict[str, float] = {}
        for transport in ("cli", "lib", "auto"):  # "auto": netlink.py's batch (the daemon's path)
            k = NftKernel("ip", ns, transport=transport)
            k.cleanup()
            k.apply(plan(None, desired))
            if transport == "auto":  # open its socket first, as cleanup() made the others' context
                k.apply(plan(desired, after))
                k.apply(plan(after, desired))
            tx, t_plan = timed(lambda: plan(desired, after))
            text = render_transaction(tx)
            _, t_apply = timed(partial(k.apply, tx))
            change_s[transport] = t_plan + t_apply
            assert transport != "auto" or k.netlink_batches, "the change went by netlink"
            label = "netlink" if transport == "auto" else transport
            print(f"one endpoint change ({label}): plan {t_plan * 1000:.0f} ms + apply {t_apply * 1000:.0f} ms "
                  f"= {(t_plan + t_apply) * 1000:.0f} ms ({len(text)} bytes; full compile before it "
                  f"{t_compile2:.2f} s)")
            k.apply(plan(after, desired))
        if not opt.skip_kube_proxy:
            print(f"RATIO kube-proxy layout change / netkit change: {t_kp_change / min(change_s.values()):.1f}× "
                  f"({t_kp_change * 1000:.0f} ms)")
        print(f"RATIO single change / 150 ms target: {min(change_s.values()) / 0.150:.2f}")
        first, last = str(st.ports[0].cluster_ip), str(st.ports[-1].cluster_ip)
        times = latency(ns, first, last, opt.connects)
        med = {dst: statistics.median(v) * 1e6 for dst, v in times.items()}
        p99 = {dst: sorted(v)[int(len(v) * 0.99) - 1] * 1e6 for dst, v in times.items()}
        print(f"first-packet latency, first service {first}: median {med[first]:.0f} µs, p99 {p99[first]:.0f} µs")
        print(f"first-packet latency, last service {last}: median {med[last]:.0f} µs, p99 {p99[last]:.0f} µs")
        print(f"RATIO last / first service median latency: {med[last] / med[first]:.3f} (target ≤ 1.10)")
    figures.append(fig("one endpoint change, netkit's netlink batch (plan + apply) vs `nft -f`",
                       change_s["auto"] * 1e3, "ms", change_s["cli"] * 1e3, "≤ 150 ms"))
    if not opt.skip_kube_proxy:
        figures.append(fig("one endpoint change through libnftables vs the kube-proxy-style layout's",
                           change_s["lib"] * 1e3, "ms", t_kp_change * 1e3))
    figures.append(results.Figure("first-packet latency, last service / first", None, "", None,
                                  med[last] / med[first], "≤ 1.10"))
    faster = min(loads, key=lambda t: loads[t])
    print(f"transports: full load cli {loads['cli']:.2f} s vs lib {loads['lib']:.2f} s; "
          f"change cli {change_s['cli'] * 1000:.0f} ms vs lib {change_s['lib'] * 1000:.0f} ms vs netlink "
          f"{change_s['auto'] * 1000:.0f} ms → faster full load: {faster}")
    results.write(opt.json, __file__, f"{n:,} services × {e} endpoints: netkit's nftables layout (verdict maps, no "
                  "chain per endpoint)" + ("" if opt.skip_kube_proxy else " vs a kube-proxy-style layout (a chain "
                  "per service and per endpoint) generated by the benchmark") + ": full load, one endpoint "
                  "change, and the first-packet latency of the last service against the first's", figures)


if __name__ == "__main__":
    main()
