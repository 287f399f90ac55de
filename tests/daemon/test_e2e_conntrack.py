"""ConntrackCleaner against the real conntrack table of a fresh network namespace: entries are made
with the conntrack tool (as a DNATed UDP flow looks: original to the service, reply from the
endpoint), then `reconcile` must delete exactly the entries that point at no serving endpoint of a
checked frontend — in batches over one socket — and leave every other entry."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from ipaddress import ip_address
from pathlib import Path

import pytest

from netkit.model.conntrack import Frontends
from netkit.runtime.conntrack import CleanupWorker, ConntrackCleaner, Reconciled

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

    run(scenario(), timeout=40)
