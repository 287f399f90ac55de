"""`make demo`: netkit on the bundled examples in a throwaway lab, with real traffic.

    build the lab (netkit/lab) → `netkit diff` (dry run: what would change) → `netkit apply` into node A
    → `netkit diff` again (now in sync) → for each example service: real connections from a client,
    tallied by the backend that answered and the source address it saw, next to `trace`'s prediction
    over the rules node A now holds → cluster DNS: `netkit dns` on node A serving the examples, a pod
    resolving `web` by its short name with glibc's resolver (`getent hosts`, its own resolv.conf with
    the pod search path) and connecting to the address it got → tear the lab down.

The lab is always removed, also on failure, Ctrl-C or SIGTERM (`netkit.lab.running`), and so is the
pod's /etc/netns/<netns>/resolv.conf (which `ip netns exec` bind-mounts over /etc/resolv.conf). Needs root.
The netkit commands run as the CLI a user would type; the traffic and the prediction use the library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from netkit.config import Config
from netkit.lab import Lab, Reply, running
from netkit.model import IPFamily
from netkit.model.types import IPAddress
from netkit.rules.backend import Backend, P, R
from netkit.rules.registry import with_backend
from netkit.rules.tracing import Outcome, Packet

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BACKEND = "nft"  # iptables-nft, Debian's default; `legacy` works the same
NODE_ARGS = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:244::/56"]
SERVICE_LINE = re.compile(r"^\s+[+~-] \S+/\S+")  # "  + default/web:http 3 endpoints"
ETC_NETNS = Path("/etc/netns")
DNS_CLIENT = "client-a"
BOLD, PLAIN = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")


@dataclass(frozen=True)
class Scenario:
    """One example service port, reached by one client."""

    service: str
    where: str  # lab role sending the traffic
    dst: str
    port: int
    proto: str = "tcp"
    src: str | None = None  # bind address (the external client has several)
    count: int = 60
    timeout: float = 2.0


SCENARIOS = (
    Scenario("web  ClusterIP", "client-a", "10.96.0.10", 80),
    Scenario("web  ClusterIP", "node-a", "10.96.0.10", 80),
    Scenario("web  ClusterIP", "client", "10.96.0.10", 80, src="203.0.113.5"),
    Scenario("web-nodeport  NodePort", "client", "192.0.2.10", 30080, src="203.0.113.5"),
    Scenario("web-lb  LoadBalancer, eTP=Local", "client", "198.51.100.100", 80, src="203.0.113.5"),
    Scenario("web-lb  LoadBalancer, outside its source ranges", "client", "198.51.100.100", 80,
             src="203.0.113.100", count=1, timeout=1.0),
    Scenario("shop/sticky  externalIP, ClientIP affinity", "client", "198.51.100.10", 80, src="203.0.113.5",
             count=20),
    Scenario("kube-system/kube-dns  UDP", "client-a", "10.96.0.53", 53, "udp"),
    Scenario("kube-system/kube-dns  TCP", "client-a", "10.96.0.53", 53),
    Scenario("dual  IPv6 ClusterIP", "client-a", "fd00:96::14", 80),
)


def title(text: str) -> None:
    print(f"\n{BOLD}== {text}{PLAIN}", flush=True)


def netkit(args: Sequence[str], *, keep: str = "all") -> int:
    """Run the CLI as a user would; `keep="services"` shows only the per-service summary lines."""
    print("$ netkit " + " ".join(args), flush=True)
    proc = subprocess.run([sys.executable, "-m", "netkit", *args], capture_output=True, text=True)
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    shown = lines if keep == "all" else [ln for ln in lines if not ln.startswith(" ") or SERVICE_LINE.match(ln)]
    for line in shown:
        print("  " + line)
    if len(shown) < len(lines):
        print(f"  … and {len(lines) - len(shown)} lines of rule diff (run `netkit diff` to see them all)")
    return proc.returncode


def node_addresses(lab: Lab) -> tuple[IPAddress, ...]:
    out = lab.exec("node-a", ["ip", "-j", "addr", "show"]).stdout
    return tuple(ip_address(a["local"]) for link in json.loads(out) for a in link.get("addr_info", ()))


def source_of(lab: Lab, s: Scenario) -> IPAddress:
    """The address a scenario's connections leave with (before any NAT)."""
    if s.src:
        return ip_address(s.src)
    family = ip_address(s.dst).version
    return lab.node_a.address(family) if s.where == "node-a" else lab.pod(s.where).address(family)


def pod_name(lab: Lab, destination: str) -> str:
    host = ip_address(destination.rpartition(":")[0].strip("[]"))
    return next((p.name for p in lab.pods if host in (p.ipv4, p.ipv6)), destination)


def predict(lab: Lab, s: Scenario, local: tuple[IPAddress, ...]) -> list[Outcome]:
    """What the trace of the rules the node holds says: through the backend interface, as `netkit trace`."""
    dst = ip_address(s.dst)
    packet = Packet(source_of(lab, s), dst, s.port, s.proto, local_addresses=local)

    def traced(be: Backend[R, P]) -> list[Outcome]:
        return be.trace(be.kernel(Config(iptables_backend=BACKEND), IPFamily.of(dst), lab.node_a.netns).dump(), packet)

    return with_backend("iptables", traced)


def report(lab: Lab, s: Scenario, local: tuple[IPAddress, ...]) -> bool:
    """Send the scenario's traffic, print its table; True when the kernel did what trace predicted."""
    src = source_of(lab, s)
    outcomes = predict(lab, s, local)
    replies = lab.connect_many(s.where, s.dst, s.port, s.proto, src=s.src, count=s.count, timeout=s.timeout)
    target = f"[{s.dst}]:{s.port}" if ":" in s.dst else f"{s.dst}:{s.port}"
    print(f"\n{BOLD}{s.service}{PLAIN}: {s.where} ({src}) → {target}/{s.proto}, {s.count} connection(s)")
    if any(o.verdict != "accept" for o in outcomes) or not any(o.destination for o in outcomes):
        return refused_or_dropped(replies, outcomes)
    predicted = {pod_name(lab, o.destination): o for o in outcomes if o.destination}
    got = Counter(r.backend for r in replies)
    sticky = any("--set" in st.rule and "-m recent" in st.rule for o in outcomes for st in o.steps)
    print(f"  {'backend':10} {'answered':>9}   {'trace':>6}   source the backend saw")
    ok = not got.keys() - predicted.keys()
    for name in sorted(predicted.keys() | {k for k in got if k}):
        seen = sorted({r.source for r in replies if r.backend == name and r.source}, key=str)
        o = predicted.get(name)
        expect = "?" if o is None else ("masqueraded" if o.masquerade else "kept")
        saw = ", ".join(map(str, seen)) + (f"  ({describe(src, seen, local)}; trace: {expect})" if seen else "-")
        share = f"{got[name]:3} {round(got[name] * 100 / max(s.count, 1)):3}%"
        print(f"  {name:10} {share:>9}   {o.probability * 100 if o else 0:5.1f}%   {saw}")
        ok = ok and o is not None and all(source_agrees(src, a, o.masquerade, local) for a in seen)
    failed = Counter(r.outcome.name for r in replies if not r.answered)
    if failed:
        print(f"  failed: {dict(failed)}")
    if sticky:
        ok = ok and len({r.backend for r in replies}) == 1
        print("  ClientIP affinity: trace gives the first connection's odds; every later one sticks to it")
    ok = ok and not failed
    print("  " + ("✓ the kernel agrees with trace" if ok else "✗ the kernel DIFFERS from trace"))
    return ok


def source_agrees(src: IPAddress, seen: IPAddress, masquerade: bool, local: tuple[IPAddress, ...]) -> bool:
    """Masqueraded: the backend saw one of node A's addresses (for the node's own traffic that may be
    the very address it sent from). Kept: it saw the client's own address."""
    if masquerade:
        return seen in local and (seen != src or src in local)
    return seen == src


def describe(src: IPAddress, seen: list[IPAddress], local: tuple[IPAddress, ...]) -> str:
    if all(a in local for a in seen):
        return "node A's address"
    return "the client's own" if all(a == src for a in seen) else "another address"


def refused_or_dropped(replies: list[Reply], outcomes: list[Outcome]) -> bool:
    got = Counter(r.outcome.name for r in replies)
    for o in outcomes:
        why = f"{o.reason.table} {o.reason.chain} rule {o.reason.index}" if o.reason else "no rule: untranslated"
        print(f"  trace: {o.probability * 100:.0f}% {o.verdict.upper()}, decided by {why}")
    secs = max(r.seconds for r in replies)
    print(f"  kernel: {', '.join(f'{n} {k}' for k, n in got.items())} after {secs:.2f}s")
    expected = {"drop": "TIMEOUT", "reject": "REFUSED"}.get(outcomes[0].verdict, "TIMEOUT")
    ok = set(got) == {expected}
    print("  " + ("✓ the kernel agrees with trace" if ok else "✗ the kernel DIFFERS from trace"))
    return ok


def pod_resolv_conf(server: IPAddress) -> str:
    """What kubelet writes for a pod in `default` with dnsPolicy ClusterFirst (timeouts kept short)."""
    return (f"nameserver {server}\nsearch default.svc.cluster.local svc.cluster.local cluster.local\n"
            "options ndots:5 timeout:1 attempts:2\n")


def getent(netns: str, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, "getent", "hosts", name], capture_output=True,
                          text=True, timeout=15)


def dns(lab: Lab, files: list[str]) -> bool:
    """`netkit dns` on node A; a pod resolves `web` through its search path and connects to it."""
    server = lab.node_a.address(4)
    pod = lab.pod(DNS_CLIENT)
    args = ["dns", *files, "--listen", f"{server}:53", "--upstream", "127.0.0.1:9", "--upstream-timeout", "0.2",
            "--metrics-listen", "", "--health-listen", "", "--ready-listen", ""]
    print(f"$ ip netns exec {lab.node_a.netns} netkit {shlex.join(args)} &")
    proc = subprocess.Popen(["ip", "netns", "exec", lab.node_a.netns, sys.executable, "-m", "netkit", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    made = [d for d in (ETC_NETNS, ETC_NETNS / pod.netns) if not d.exists()]
    conf = ETC_NETNS / pod.netns / "resolv.conf"
    try:
        for d in made:
            d.mkdir()
        conf.write_text(pod_resolv_conf(server))
        print(f"{conf} (what kubelet gives a pod in default):")
        print("".join("  " + line + "\n" for line in conf.read_text().splitlines()), end="")
        return resolve_and_connect(lab, pod.netns, proc)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
        conf.unlink(missing_ok=True)
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()


def resolve_and_connect(lab: Lab, netns: str, server: subprocess.Popen[str]) -> bool:
    deadline = time.monotonic() + 15
    while (got := getent(netns, "web")).returncode != 0 and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # netkit dns is starting
    print(f"$ ip netns exec {netns} getent hosts web")
    print("  " + (got.stdout.strip() or f"(exit {got.returncode}) {got.stderr.strip()}"))
    fields = got.stdout.split()
    if got.returncode != 0 or fields[1:2] != ["web.default.svc.cluster.local"]:
        print("  ✗ the short name did not resolve through the search path")
        return False
    replies = lab.connect_many(DNS_CLIENT, fields[0], 80, "tcp", count=6, timeout=2.0)
    answered = Counter(r.backend for r in replies if r.answered)
    print(f"{DNS_CLIENT} → {fields[0]}:80/tcp, 6 connections: " + ", ".join(f"{n} {k}" for k, n in sorted(
        answered.items())))
    ok = sum(answered.values()) == len(replies)
    print("  " + ("✓ resolved by its short name and reached" if ok else "✗ not every connection was answered"))
    return ok


def main() -> int:
    if os.geteuid() != 0:
        print("make demo needs root: it builds a lab of network namespaces", file=sys.stderr)
        return 2
    try:
        return demo()
    except KeyboardInterrupt:
        print("\ninterrupted: the lab was torn down", file=sys.stderr)
        return 130


def demo() -> int:
    started = time.monotonic()
    title("build the lab: a client, node A (under test), node B, pods answering with their name")
    with running() as lab:
        print(f"lab {lab.id}: node A is network namespace {lab.node_a.netns}")
        kernel = ["--netns", lab.node_a.netns, "--iptables-backend", BACKEND]
        files = ["-f", str(EXAMPLES.relative_to(Path.cwd()) if EXAMPLES.is_relative_to(Path.cwd()) else EXAMPLES)]
        title("dry run: what netkit would change on this empty node")
        pending = netkit(["diff", *files, *NODE_ARGS, *kernel], keep="services")
        title("apply")
        netkit(["apply", *files, *NODE_ARGS, *kernel])
        title("dry run again: nothing left to do")
        in_sync = netkit(["diff", *files, *NODE_ARGS, *kernel])
        title("real traffic through node A, next to `netkit trace` over the rules it now holds")
        local = node_addresses(lab)
        agree = [report(lab, s, local) for s in SCENARIOS]
        print("\ndb (headless) and search (ExternalName) have no ClusterIP: no proxy rules, only DNS.")
        title("cluster DNS: a pod finds `web` by its short name (glibc's resolver, the pod search path)")
        resolved = dns(lab, files)
        title("tear the lab down")
    ok = pending == 1 and in_sync == 0 and all(agree) and resolved
    print(f"demo {'finished' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s: "
          f"{sum(agree)}/{len(agree)} services behaved as trace predicted; "
          f"DNS by short name {'worked' if resolved else 'FAILED'}; the lab is gone")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
