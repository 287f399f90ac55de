"""ConntrackCleaner against the real conntrack table of a fresh network namespace: entries are made
with the conntrack tool (as a DNATed UDP flow looks: original to the service, reply from the
endpoint), then `reconcile` must delete exactly the entries that point at no serving endpoint of a
checked frontend — in batches over one socket — and leave every other entry. Then kube-proxy's
reconciler cases as a table, each against the real daemon in iptables and in nftables mode, with
flows made by real datagrams through the mode's rules."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import time
from ipaddress import ip_address
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from netkit.model import NodeState, Objects, build, from_k8s
from netkit.model.conntrack import Flow, Frontends, serving
from netkit.netns import socket_in
from netkit.rules.registry import backend
from netkit.runtime.conntrack import CleanupWorker, ConntrackCleaner, Reconciled
from netkit.runtime.daemon import Daemon, DaemonOptions
from netkit.yamlload import safe_load_all
from tests.conftest import route_out

from .conftest import eventually, run
from .e2e import Running, config, options, start_daemon, stop_daemon, web_service, web_slice, with_ports

CLIENT = "203.0.113.5"


def _insert(netns: str, proto: str, dst: str, dport: int, endpoint: str, eport: int, sport: int) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-I", "-p", proto, "-s", CLIENT, "-d", dst,
                    "--sport", str(sport), "--dport", str(dport), "-r", endpoint, "-q", CLIENT,
                    "--reply-port-src", str(eport), "--reply-port-dst", str(sport), "-t", "120",
                    *(["--state", "ESTABLISHED"] if proto == "tcp" else [])],
                   check=True, capture_output=True)


def _flows(netns: str) -> set[tuple[str, str, int, str, int]]:
    out = subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-L", "-o", "extended"],
                         check=True, capture_output=True, text=True).stdout
    flows = set()
    for line in out.splitlines():
        pairs = [kv.split("=", 1) for kv in line.split() if "=" in kv]
        first: dict[str, str] = {}
        second: dict[str, str] = {}
        for k, v in pairs:
            (second if k in first else first).setdefault(k, v)
        proto = line.split()[2]
        flows.add((proto, first["dst"], int(first["dport"]), second["src"], int(second["sport"])))
    return flows


@pytest.fixture
def ctns(netns: str) -> str:
    if shutil.which("conntrack") is None:
        pytest.skip("needs the conntrack tool (conntrack package) to create entries")
    return netns


def checked(services: dict[tuple[str, int], list[str]], node_ports: dict[int, list[str]] | None = None,
            port: int = 5353) -> Frontends:
    return Frontends({(ip_address(ip), p): frozenset((ip_address(e), port) for e in eps)
                      for (ip, p), eps in services.items()},
                     {(4, np): frozenset((ip_address(e), port) for e in eps) for np, eps in (node_ports or {}).items()})


def test_reconcile_deletes_exactly_the_stale_entries(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)  # to the service, removed endpoint
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.2.11", 5353, 40002)  # to the service, serving endpoint
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.2.11", 6000, 40006)  # serving IP, but an old port
    _insert(ctns, "udp", "10.96.0.53", 53, "10.96.0.53", 53, 40007)  # never DNATed (before the rules)
    _insert(ctns, "udp", "10.96.0.54", 53, "10.244.1.11", 5353, 40003)  # a service not checked
    _insert(ctns, "udp", "192.0.2.10", 30053, "10.244.1.11", 5353, 40004)  # nodePort, removed endpoint
    _insert(ctns, "tcp", "10.96.0.53", 53, "10.244.1.11", 5353, 40005)  # TCP: never touched
    assert len(_flows(ctns)) == 7

    result = ConntrackCleaner(ctns).reconcile(checked({("10.96.0.53", 53): ["10.244.2.11"]},
                                                      {30053: ["10.244.2.11"]}))

    assert result.deleted == 4 and result.flows == 6
    assert _flows(ctns) == {
        ("udp", "10.96.0.53", 53, "10.244.2.11", 5353),
        ("udp", "10.96.0.54", 53, "10.244.1.11", 5353),
        ("tcp", "10.96.0.53", 53, "10.244.1.11", 5353),
    }


def test_reconcile_deletes_many_entries_in_batches(ctns: str) -> None:
    for i in range(120):
        _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11" if i % 2 else "10.244.2.11", 5353, 41000 + i)
    cleaner = ConntrackCleaner(ctns, batch=25)  # 60 stale entries: three batches, one socket
    result = cleaner.reconcile(checked({("10.96.0.53", 53): ["10.244.2.11"]}))
    assert (result.flows, result.deleted) == (120, 60)
    assert {f.reply_src for f in cleaner.flows(4)} == {ip_address("10.244.2.11")}
    assert cleaner.reconcile(checked({("10.96.0.53", 53): ["10.244.2.11"]})).deleted == 0


def test_nothing_to_check_touches_nothing(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)
    assert ConntrackCleaner(ctns).reconcile(Frontends()) == Reconciled(0, 0, 0.0)
    assert ConntrackCleaner(ctns).reconcile(checked({("10.96.0.99", 53): ["10.244.9.9"]})).deleted == 0
    assert len(_flows(ctns)) == 1


def test_the_worker_cleans_off_the_callers_thread(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)
    done: list[Reconciled] = []
    worker = CleanupWorker(ConntrackCleaner(ctns), done.append)
    worker.start()
    try:
        worker.submit(checked({("10.96.0.53", 53): ["10.244.2.11"]}))
        deadline = time.monotonic() + 5
        while not (done and worker.idle()) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
    assert [d.deleted for d in done] == [1]
    assert _flows(ctns) == set()


class BlockingCleaner:
    """Stands in for the netlink edge: every pass waits until released, recording what it checks."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.passes: list[Frontends] = []

    def reconcile(self, work: Frontends) -> Reconciled:
        self.passes.append(work)
        self.release.wait(10)
        return Reconciled(0, 0, 0.0)


def test_a_sync_never_waits_for_the_conntrack_cleanup(netns: str, tmp_path: Path) -> None:
    """While a cleanup pass hangs, the next change still reaches the kernel; the pass after it
    checks the port with the endpoints of the latest sync."""
    manifests = tmp_path / "m"
    manifests.mkdir()
    dns = "default/dns:http/udp"

    def write(ips: list[str]) -> None:
        (manifests / "dns.yaml").write_text(web_service("10.96.0.53", "UDP", "dns", 53, 5353) + "---\n"
                                            + web_slice(ips, "UDP", "dns", "dns-1", 5353))

    async def scenario() -> None:
        write(["10.244.1.11", "10.244.2.11"])
        daemon, task = await start_daemon(options(netns, config(), files=(str(manifests),)))
        assert daemon.conntrack is not None
        cleaner = BlockingCleaner()
        daemon.conntrack.cleaner = cleaner  # type: ignore[assignment]
        r = Running(None, daemon, netns, None, "legacy", task)
        try:
            await r.converge(lambda s: s.get(dns) == with_ports(["10.244.1.11", "10.244.2.11"], 5353))
            await eventually(lambda: len(cleaner.passes) == 1, what="the first cleanup pass (hanging)")
            write(["10.244.3.11"])
            await r.converge(lambda s: s.get(dns) == with_ports(["10.244.3.11"], 5353), what="a sync meanwhile")
            assert len(cleaner.passes) == 1 and not daemon.conntrack.idle(), "the first pass still hangs"
            cleaner.release.set()
            await eventually(lambda: len(cleaner.passes) == 2, what="the next pass")
            assert set(cleaner.passes[1].by_address.values()) == {frozenset({(ip_address("10.244.3.11"), 5353)})}
        finally:
            cleaner.release.set()
            await stop_daemon(task)

    run(scenario())


# --- kube-proxy's reconciler cases against the real daemon, in iptables and in nftables mode ---------
#
# The namespace gets a veth holding the node IP, with every other destination routed out of it (its
# peer, in the same namespace, has no address): a datagram the namespace sends to a Service frontend
# is DNATed by the mode's rules to an endpoint (10.244.x.x) and goes nowhere, leaving a real conntrack
# entry behind —
# original destination the frontend, reply source the endpoint. Each case opens such flows, changes
# the Service (or stops the daemon, changes it and starts a new one) and expects exactly the entries
# the change made stale to be gone, counted by kube-proxy's reconciler metric.

NODE_IP, EP_A, EP_B, OTHER_EP = "192.0.2.10", "10.244.1.11", "10.244.2.11", "10.244.9.9"
FRONTENDS = {"cluster": ("10.96.0.53", 53), "external": ("198.51.100.7", 53), "lb": ("198.51.100.8", 53),
             "nodeport": (NODE_IP, 30053), "other": ("10.96.0.99", 53)}


def dns(*, eps: tuple[str, ...] = (EP_A, EP_B), ip: str = "10.96.0.53", node_port: int = 30053,
        external: tuple[str, ...] = ("198.51.100.7",), lb: tuple[str, ...] = ("198.51.100.8",)) -> str:
    """The UDP Service under test (a LoadBalancer with an externalIP), its endpoints, and a bystander."""
    ingress = ", ".join(f"{{ip: {x}}}" for x in lb)
    svc = f"""apiVersion: v1
kind: Service
metadata: {{name: dns, namespace: default}}
spec:
  type: LoadBalancer
  clusterIP: {ip}
  externalIPs: [{", ".join(external)}]
  ports: [{{name: http, protocol: UDP, port: 53, targetPort: 5353, nodePort: {node_port}}}]
status: {{loadBalancer: {{ingress: [{ingress}]}}}}
"""
    return "---\n".join([svc, web_slice(list(eps), "UDP", "dns", "dns-1", 5353), *bystander()])


def bystander() -> list[str]:
    return [web_service("10.96.0.99", "UDP", "other", 53, 5353), web_slice([OTHER_EP], "UDP", "other", "other-1", 5353)]


NODE = f"""apiVersion: v1
kind: Node
metadata: {{name: node-a}}
status: {{addresses: [{{type: InternalIP, address: {NODE_IP}}}]}}
"""
ALL_DNS = {"cluster", "external", "lb", "nodeport"}

# (case, manifests before, manifests after, restart in between, frontends whose flows all go,
#  endpoints whose flows to the Service go)
TABLE: list[tuple[str, str, str, bool, set[str], set[str]]] = [
    ("endpoint removed", dns(), dns(eps=(EP_B,)), False, set(), {EP_A}),
    ("scale to zero", dns(), dns(eps=()), False, ALL_DNS, set()),
    ("Service deleted", dns(), "---\n".join(bystander()), False, ALL_DNS, set()),
    ("clusterIP changed", dns(), dns(ip="10.96.0.54"), False, {"cluster"}, set()),
    ("nodePort changed", dns(), dns(node_port=30054), False, {"nodeport"}, set()),
    ("externalIP removed", dns(), dns(external=()), False, {"external"}, set()),
    ("load-balancer IP removed", dns(), dns(lb=()), False, {"lb"}, set()),
    ("restart: an endpoint removed while the daemon was down", dns(), dns(eps=(EP_B,)), True, set(), {EP_A}),
]


@pytest.fixture
def node_ns(ctns: str) -> str:
    """`ctns` with the node IP on a veth that every other destination is routed out of. Its unreplied
    UDP entries live 600 s, not the kernel's 30 s: on a loaded machine a case's sends, dumps and
    restarts can take longer, and an entry that expired by itself would pass for a deleted one."""
    route_out(ctns, NODE_IP)
    subprocess.run(["ip", "netns", "exec", ctns, "sysctl", "-qw", "net.netfilter.nf_conntrack_udp_timeout=600"],
                   check=True, capture_output=True)
    return ctns


def open_flows(netns: str, frontends: dict[str, tuple[str, int]]) -> list[socket.socket]:
    """UDP sockets in `netns`, each having sent one datagram to a frontend: up to 32 per Service
    frontend, until both endpoints have a flow (the rules pick one at random per new flow)."""
    socks = []
    for name, (ip, port) in frontends.items():
        seen: set[str] = set()
        for _ in range(32 if name != "other" else 1):
            s = socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.sendto(b"x", (ip, port))
            seen |= {str(f.reply_src) for f in udp_flows(netns) if (str(f.dst), f.dport) == (ip, port)}
            if {EP_A, EP_B} <= seen:
                break
        assert name == "other" or seen == {EP_A, EP_B}, f"{name}: flows reach {seen}, the rules are not DNATing"
    return socks


def udp_flows(netns: str) -> set[Flow]:
    return set(ConntrackCleaner(netns).flows(4))


def fingerprint(state: NodeState | None) -> object:
    return None if state is None else sorted(
        (str(p.name), str(p.cluster_ip), p.node_port, p.external_ips, p.load_balancer_ips, sorted(serving(p)))
        for p in state.ports)


def expected_fingerprint(manifests: str) -> object:
    docs = [d for d in safe_load_all(NODE + "---\n" + manifests) if d]
    return fingerprint(build(Objects.of([o for d in docs for o in from_k8s(d)]), "node-a"))


def deleted_metric(daemon: Daemon) -> float:
    return sum(s.value for fam in text_string_to_metric_families(daemon.metrics.render().decode())
               for s in fam.samples if s.name == "kubeproxy_conntrack_reconciler_deleted_entries_total")


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
@pytest.mark.parametrize("before, after, restart, frontends_gone, endpoints_gone", [c[1:] for c in TABLE],
                         ids=[c[0] for c in TABLE])
def test_stale_udp_flows_go_like_kube_proxys(node_ns: str, tmp_path: Path, mode: str, before: str, after: str,
                                             restart: bool, frontends_gone: set[str],
                                             endpoints_gone: set[str]) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()

    def write(text: str) -> None:
        (tmp_path / "next.yaml").write_text(NODE + "---\n" + text)
        os.replace(tmp_path / "next.yaml", manifests / "all.yaml")  # one change, never half a file

    async def settled(daemon: Daemon, manifests_now: str) -> None:
        want = expected_fingerprint(manifests_now)
        await eventually(lambda: fingerprint(daemon.state) == want and daemon.settled(),
                         what=f"the daemon in {mode} mode to sync and clean up")

    async def scenario() -> None:
        write(before)
        opts = options(node_ns, config(mode=mode), files=(str(manifests),))
        daemon, task = await start(opts)
        try:
            await settled(daemon, before)
            socks = open_flows(node_ns, FRONTENDS)
            opened = udp_flows(node_ns)
            counted = deleted_metric(daemon)
            if restart:
                await stop_daemon(task)
                write(after)
                daemon, task = await start(opts)
            else:
                write(after)
            await settled(daemon, after)
            left = udp_flows(node_ns)
            names = {(ip_address(ip), port): name for name, (ip, port) in FRONTENDS.items()}
            expected = {f for f in opened if not (names[(f.dst, f.dport)] in frontends_gone or (
                names[(f.dst, f.dport)] != "other" and str(f.reply_src) in endpoints_gone))}
            assert expected != opened or not (frontends_gone or endpoints_gone), "the case makes nothing stale"
            assert left == expected
            assert deleted_metric(daemon) - (0 if restart else counted) == len(opened - left)
            for s in socks:
                s.close()
        finally:
            await stop_daemon(task)

    run(scenario())


async def start(opts: DaemonOptions) -> tuple[Daemon, asyncio.Task[None]]:
    daemon = Daemon(opts, backend(opts.config.mode))  # type: ignore[arg-type]
    return daemon, asyncio.create_task(daemon.run(), name="daemon")
