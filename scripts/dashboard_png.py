#!/usr/bin/env python3
"""docs/img/dashboard.png: deploy/monitoring/netkit-dashboard.json drawn over a lab cluster's run,
the way Grafana would draw it from a real Prometheus (Grafana itself is not packaged for Debian, PyPI
or npm; Prometheus is: Debian's `prometheus`, which `make setup` installs for promtool).

    sudo .venv/bin/python scripts/dashboard_png.py [--out docs/img/dashboard.png] [--nodes 3]

What it does, every part real:
1. `netkit lab cluster up` in a state directory of its own (a temporary one), then a `prometheus`
   pod and a `client` pod (`netkit lab cluster scale NAME 1 --create`).
2. Prometheus from Debian runs in the prometheus pod's network namespace (storage in a temporary
   directory), scraping every node's `netkit run` as job `netkit` at NODE-IP:10249 and every DNS
   pod's `netkit dns` as job `netkit-dns` at POD-IP:9153, as daemon.md's scrape configuration says.
   The lab runs the daemons as deploy/ does, /metrics on 127.0.0.1:10249 inside each node, so a
   relay (socat, in the node's namespace) serves NODE-IP:10249 as metricsBindAddress 0.0.0.0 would.
3. Traffic from the client pod (TCP and UDP to a Service, DNS queries: cluster names, a missing
   name, an outside name the lab's upstream never answers) while a schedule of changes plays:
   kubectl apply, scale up and down (stale UDP flows for the conntrack reconciler), a node daemon
   killed (restarted), a Service deleted.
4. Every panel's queries (Grafana's $__rate_interval for the scrape interval and step; every
   instance) through Prometheus' /api/v1/query_range, drawn in the dashboard's grid with matplotlib.
Everything it starts is stopped and removed at exit, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout: netkit from its source

import yaml  # noqa: E402

DASHBOARD = ROOT / "deploy" / "monitoring" / "netkit-dashboard.json"
OUT = ROOT / "docs" / "img" / "dashboard.png"
METRICS_PORT, DNS_METRICS_PORT, PROMETHEUS_PORT = 10249, 9153, 9090
SERVICE_IP, DNS_IP = "10.96.0.100", "10.96.0.10"
JSON = dict[str, Any]


# ---- the dashboard (pure) ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Target:
    ref: str
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    id: int
    title: str
    kind: str  # "row" or "timeseries"
    x: int
    y: int
    w: int
    h: int
    unit: str
    targets: tuple[Target, ...]


def panels(doc: JSON) -> tuple[Panel, ...]:
    out = []
    for p in doc["panels"]:
        g = p["gridPos"]
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
        targets = tuple(Target(t["refId"], t["expr"], t.get("legendFormat", "")) for t in p.get("targets", ()))
        out.append(Panel(p["id"], p["title"], p["type"], g["x"], g["y"], g["w"], g["h"], unit, targets))
    return tuple(out)


def rate_interval(scrape: float, step: float) -> float:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 × scrape interval)."""
    return max(step + scrape, 4 * scrape)


def promql(expr: str, rate: float) -> str:
    """A panel's expression as Grafana sends it: the rate window filled in, every instance chosen."""
    expr = expr.replace("$__rate_interval", f"{rate:g}s")
    expr = expr.replace("$dns_instance", ".*").replace("$instance", ".*")
    if "$" in expr:
        raise ValueError(f"a Grafana variable this script does not fill in: {expr}")
    return expr


def queries(doc: JSON, scrape: float, step: float) -> dict[int, tuple[tuple[Target, str], ...]]:
    """Every graph panel's id → (target, the PromQL sent for it)."""
    rate = rate_interval(scrape, step)
    return {p.id: tuple((t, promql(t.expr, rate)) for t in p.targets) for p in panels(doc) if p.kind != "row"}


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    return " ".join(text.split()) or "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def prometheus_config(scrape: float, nodes: Sequence[str], dns_pods: Sequence[str]) -> str:
    def job(name: str, targets: list[str]) -> JSON:
        return {"job_name": name, "static_configs": [{"targets": targets}]}

    return yaml.safe_dump({
        "global": {"scrape_interval": f"{scrape:g}s", "scrape_timeout": f"{scrape:g}s"},
        "scrape_configs": [job("netkit", [f"{ip}:{METRICS_PORT}" for ip in nodes]),
                           job("netkit-dns", [f"{ip}:{DNS_METRICS_PORT}" for ip in dns_pods])],
    }, sort_keys=False)


@dataclass(frozen=True, slots=True)
class Series:
    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]  # (unix time, value); NaN where Prometheus says so

    def finite(self) -> bool:
        return any(math.isfinite(v) for _, v in self.points)


def series(answer: JSON) -> list[Series]:
    """/api/v1/query_range's answer → its series (a matrix)."""
    if answer.get("status") != "success":
        raise RuntimeError(f"Prometheus: {answer.get('errorType')}: {answer.get('error')}")
    return [Series(r["metric"], tuple((float(t), float(v)) for t, v in r["values"]))
            for r in answer["data"]["result"]]


# ---- the lab cluster (IO) ----------------------------------------------------------------------

def netkit(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "netkit", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"netkit {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True, slots=True)
class Layout:
    cluster_id: str
    kubeconfig: str
    nodes: tuple[tuple[str, str, str], ...]  # (name, netns, ip)
    pods: dict[str, tuple[str, str]]  # pod name → (netns, ip)

    @classmethod
    def of(cls, doc: JSON) -> Layout:
        return cls(doc["id"], doc["kubeconfig"], tuple((n["name"], n["netns"], n["ip"]) for n in doc["nodes"]),
                   {p["name"]: (p["netns"], p["ip"]) for p in doc["pods"]})

    def dns_pods(self) -> list[str]:
        return [ip for name, (_, ip) in sorted(self.pods.items()) if name.startswith("coredns-")]


def status(cluster_id: str) -> JSON:
    found: list[JSON] = json.loads(netkit("lab", "cluster", "status", "--cluster", cluster_id, "-o", "json"))
    return found[0]


@contextmanager
def lab_cluster(nodes: int, pods_per_node: int) -> Iterator[Layout]:
    """A cluster with a prometheus pod and a client pod; always removed."""
    doc = json.loads(netkit("lab", "cluster", "up", "--nodes", str(nodes), "--pods-per-node", str(pods_per_node),
                            "--timeout", "180", "-o", "json"))  # a busy machine's first syncs take long
    try:
        for deploy in ("prometheus", "client"):
            netkit("lab", "cluster", "scale", "--cluster", doc["id"], deploy, "1", "--create")
        yield Layout.of(status(doc["id"]))
    finally:
        netkit("lab", "cluster", "down", doc["id"])


class Process:
    """A command in a namespace, in a process group of its own; stopped (the group) at exit."""

    def __init__(self, netns: str, argv: Sequence[str], log: Path) -> None:
        with log.open("w") as out:
            self.proc = subprocess.Popen(["ip", "netns", "exec", netns, *argv], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


@contextmanager
def relays(layout: Layout, workdir: Path) -> Iterator[None]:
    """NODE-IP:10249 → 127.0.0.1:10249 inside every node (where deploy/'s daemon serves /metrics)."""
    procs = []
    try:
        for name, netns, ip in layout.nodes:
            procs.append(Process(netns, ["socat", f"TCP-LISTEN:{METRICS_PORT},bind={ip},reuseaddr,fork",
                                         f"TCP:127.0.0.1:{METRICS_PORT}"], workdir / f"relay-{name}.log"))
        yield
    finally:
        for p in procs:
            p.stop()


class Prometheus:
    def __init__(self, netns: str, workdir: Path, config: str) -> None:
        self.netns = netns
        (workdir / "prometheus.yml").write_text(config)
        self.process = Process(netns, ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                                       f"--storage.tsdb.path={workdir / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"],
                               workdir / "prometheus.log")

    def get(self, path: str, **params: str | float) -> JSON:
        from netkit.lab.cluster import nodehttp

        answer = nodehttp.get(self.netns, "127.0.0.1", PROMETHEUS_PORT, f"{path}?{urlencode(params)}", timeout=30)
        doc: JSON = json.loads(answer.body)
        return doc

    def wait_scraping(self, targets: int, timeout: float = 120.0) -> None:
        """Until every target has been scraped successfully (a generous bound for a busy machine)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                active = self.get("/api/v1/targets")["data"]["activeTargets"]
                if len(active) == targets and all(t["health"] == "up" for t in active):
                    return
            except (OSError, ValueError, KeyError):
                pass  # not listening yet
            if self.process.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Prometheus did not scrape every target (see prometheus.log)")
            time.sleep(0.2)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        return series(self.get("/api/v1/query_range", query=expr, start=start, end=end, step=step))


# ---- traffic and changes (IO) ------------------------------------------------------------------

DNS_NAMES = (("web.default.svc.cluster.local", "A"), ("web.default.svc.cluster.local", "AAAA"),
             ("kubernetes.default.svc.cluster.local", "A"), ("missing.default.svc.cluster.local", "A"),
             ("kube-dns.kube-system.svc.cluster.local", "SRV"))
OUTSIDE_NAME = "example.org"  # forwarded to the lab's upstream, which never answers: SERVFAIL


class Traffic:
    """From the client pod until stopped: a TCP and a UDP exchange with the Service and a few DNS
    queries every `pause` seconds (an outside name every tenth round)."""

    def __init__(self, netns: str, pause: float = 0.1) -> None:
        self.netns, self.pause = netns, pause
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.rounds = 0

    def run(self) -> None:
        from netkit.lab.sockets import connect

        while not self.done.is_set():
            connect(self.netns, SERVICE_IP, 80, "tcp", timeout=0.5)
            connect(self.netns, SERVICE_IP, 5353, "udp", timeout=0.5)
            names = DNS_NAMES + ((OUTSIDE_NAME, "A"),) if self.rounds % 10 == 0 else DNS_NAMES
            for name, kind in names:
                self.ask(name, kind)
            self.rounds += 1
            self.done.wait(self.pause)

    def ask(self, name: str, kind: str) -> None:
        import dns.message

        from netkit.netns import socket_in

        with socket_in(self.netns, socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.3)
            sock.sendto(dns.message.make_query(name, kind).to_wire(), (DNS_IP, 53))
            try:
                sock.recv(4096)
            except OSError:
                pass  # an outside name is answered later (SERVFAIL) or not at all: counted either way

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join(30)


def kubectl(layout: Layout, *args: str, manifest: str | None = None) -> None:
    argv = ["kubectl", f"--kubeconfig={layout.kubeconfig}", "--request-timeout=30s", *args]
    proc = subprocess.run([*argv, *(["-f", "-"] if manifest else [])], input=manifest, capture_output=True,
                          text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")


def service(name: str, ip: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterIP": ip, "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                           {"name": "udp", "port": 5353, "targetPort": 5353, "protocol": "UDP"}]}})


def kill_daemon(layout: Layout, node: str) -> None:
    """SIGKILL a node's `netkit run` (the lab restarts it, as a DaemonSet would)."""
    pid = next(n["daemon_pid"] for n in status(layout.cluster_id)["nodes"] if n["name"] == node)
    os.kill(pid, signal.SIGKILL)


Step = tuple[float, str, Callable[[Layout], None]]


def scale(n: int) -> Callable[[Layout], None]:
    def action(layout: Layout) -> None:
        netkit("lab", "cluster", "scale", "--cluster", layout.cluster_id, "web", str(n))
    return action


def apply_service(name: str, ip: str) -> Callable[[Layout], None]:
    return lambda layout: kubectl(layout, "apply", manifest=service(name, ip))


# (seconds into the run, what, how); the last step only marks the end
FULL_SCHEDULE: tuple[Step, ...] = (
    (20, "kubectl apply Service web (TCP 80, UDP 5353)", apply_service("web", SERVICE_IP)),
    (50, "scale web to 8", scale(8)),
    (80, "scale web to 2", scale(2)),
    (110, "SIGKILL node-2's netkit run", lambda layout: kill_daemon(layout, "node-2")),
    (140, "scale web to 5", scale(5)),
    (170, "kubectl apply Service api", apply_service("api", "10.96.0.101")),
    (200, "kubectl delete Service web", lambda layout: kubectl(layout, "delete", "service", "web")),
    (230, "end", lambda layout: None),
)

# a short run for the tests: every panel gets data (scrape 1 s, step 2 s)
QUICK_SCHEDULE: tuple[Step, ...] = (
    (0, "kubectl apply Service web", apply_service("web", SERVICE_IP)),
    (3, "scale web to 4", scale(4)),
    (6, "scale web to 1", scale(1)),
    (9, "end", lambda layout: None),
)


def play(layout: Layout, schedule: Sequence[Step], say: Callable[[str], None]) -> list[tuple[float, str]]:
    """Each step at its time (or as soon as the previous one is done); (unix time, what) of each."""
    started, done = time.monotonic(), []
    for at, what, action in schedule:
        time.sleep(max(0.0, started + at - time.monotonic()))
        say(f"{time.monotonic() - started:6.1f} s  {what}")
        done.append((time.time(), what))
        action(layout)
    return done[:-1]


@dataclass(frozen=True, slots=True)
class Run:
    start: float
    end: float
    step: float
    events: list[tuple[float, str]]
    results: dict[int, list[tuple[Target, list[Series]]]]


def run(schedule: Sequence[Step], *, nodes: int, pods_per_node: int, scrape: float, step: float,
        say: Callable[[str], None] = print) -> Run:
    """The whole lab run: cluster, relays, Prometheus, traffic and changes; the panels' answers."""
    doc = json.loads(DASHBOARD.read_text())
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="netkit-dashboard-")))
        say("building a lab cluster")
        layout = stack.enter_context(lab_cluster(nodes, pods_per_node))
        stack.enter_context(relays(layout, workdir))
        prom = Prometheus(layout.pods["prometheus-1"][0], workdir,
                          prometheus_config(scrape, [ip for _, _, ip in layout.nodes], layout.dns_pods()))
        stack.callback(prom.process.stop)
        prom.wait_scraping(len(layout.nodes) + len(layout.dns_pods()))
        start = time.time()
        with Traffic(layout.pods["client-1"][0]):
            events = play(layout, schedule, say)
            time.sleep(2 * scrape)  # the last changes scraped
        end = time.time()
        results = {pid: [(t, prom.query_range(q, start, end, step)) for t, q in qs]
                   for pid, qs in queries(doc, scrape, step).items()}
    return Run(start, end, step, events, results)


# ---- drawing (matplotlib) ----------------------------------------------------------------------

GRID_W, ROW_H = 24, 0.36  # Grafana's 24 columns; inches per grid row (Grafana: 30 px)
FIG_W = 20.0
BG, PANEL_BG, TEXT, GRIDLINE = "#111217", "#181b1f", "#ccccdc", "#2c3235"
COLORS = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#ffb357")


def scaled(unit: str) -> tuple[float, str]:
    """(factor, label) for a Grafana unit."""
    return {"s": (1.0, "seconds"), "bytes": (1 / 2**20, "MiB"), "percentunit": (100.0, "%"),
            "reqps": (1.0, "requests/s"), "ops": (1.0, "per second"), "short": (1.0, "")}.get(unit, (1.0, unit))


HEADER = 1.0  # inches above the grid: the title and the changes


def render(doc: JSON, result: Run, out: Path, caption: str) -> None:
    """The dashboard's grid as Grafana lays it out: 24 columns, panels at their gridPos; each change
    of the run a numbered dashed line in every panel (Grafana's annotations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_panels = panels(doc)
    height = max(p.y + p.h for p in all_panels) * ROW_H + HEADER
    fig = plt.figure(figsize=(FIG_W, height), facecolor=BG)
    fig.text(0.008, 1 - 0.3 / height, f"{doc['title']}: {caption}", color=TEXT, fontsize=13, va="center")
    changes = "   ".join(f"{i}: {what} ({t - result.start:.0f} s)" for i, (t, what) in enumerate(result.events, 1))
    fig.text(0.008, 1 - 0.65 / height, f"changes (dashed lines)   {changes}", color=TEXT, fontsize=9, va="center")
    for panel in all_panels:
        left, width = panel.x / GRID_W, panel.w / GRID_W
        top = 1 - (HEADER + panel.y * ROW_H) / height
        if panel.kind == "row":
            fig.text(left + 0.008, top - 0.5 * ROW_H / height, panel.title, color=TEXT, fontsize=12,
                     fontweight="bold", va="center")
            continue
        box = (left + 0.03, top - (panel.h - 0.9) * ROW_H / height, width - 0.04, (panel.h - 1.7) * ROW_H / height)
        draw_panel(fig.add_axes(box), panel, result)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=72, facecolor=BG)
    plt.close(fig)


def draw_panel(ax: Any, panel: Panel, result: Run) -> None:
    factor, label = scaled(panel.unit)
    ax.set_facecolor(PANEL_BG)
    ax.set_title(panel.title, color=TEXT, fontsize=10, loc="left")
    ax.tick_params(colors=TEXT, labelsize=7)
    for spine in ax.spines.values():
        spine.set_color(GRIDLINE)
    ax.grid(color=GRIDLINE, linewidth=0.5)
    drawn = 0
    for target, found in result.results[panel.id]:
        for s in found:
            ax.plot([t - result.start for t, _ in s.points], [v * factor for _, v in s.points],
                    color=COLORS[drawn % len(COLORS)], linewidth=1.2, label=legend(target.legend, s.labels))
            drawn += 1
    ax.set_xlim(0, result.end - result.start)
    for i, (t, _) in enumerate(result.events, 1):
        ax.axvline(t - result.start, color="#8e8e8e", linewidth=0.7, linestyle="--")
        ax.text(t - result.start, 1.0, f" {i}", color="#8e8e8e", fontsize=6, va="top",
                transform=ax.get_xaxis_transform())
    ax.set_xlabel("seconds into the run", color=TEXT, fontsize=7)
    if label:
        ax.set_ylabel(label, color=TEXT, fontsize=7)
    if drawn:
        ax.legend(fontsize=6, loc="upper left", facecolor=PANEL_BG, edgecolor=GRIDLINE, labelcolor=TEXT,
                  ncol=2 if drawn > 4 else 1, framealpha=0.8)
    else:
        ax.text(0.5, 0.5, "No data", color=TEXT, ha="center", va="center", transform=ax.transAxes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--scrape", type=float, default=2.0, help="scrape interval, seconds (default 2)")
    p.add_argument("--step", type=float, default=4.0, help="query resolution, seconds (default 4)")
    p.add_argument("--quick", action="store_true", help="the tests' 12-second schedule instead of the full one")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("dashboard_png: error: needs root (network namespaces)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="netkit-dashboard-state-") as state:
        os.environ["NETKIT_LAB_STATE_DIR"] = state  # a state directory of our own, never /run/netkit-lab
        schedule = QUICK_SCHEDULE if args.quick else FULL_SCHEDULE
        result = run(schedule, nodes=args.nodes, pods_per_node=2, scrape=args.scrape, step=args.step)
    caption = (f"a {args.nodes}-node lab cluster (iptables mode) for {result.end - result.start:.0f} s, "
               f"Prometheus scraping every {args.scrape:g} s, queries at {args.step:g} s steps "
               f"(scripts/dashboard_png.py)")
    render(json.loads(DASHBOARD.read_text()), result, args.out, caption)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
