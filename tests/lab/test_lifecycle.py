"""A lab comes up and always goes away: on exit, on a failing test, on Ctrl-C, SIGTERM, SIGKILL
of its owner, and when its own build fails half-way. It never touches the machine's namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from netkit.lab import Lab, LabError, running, start, stop, wiring
from netkit.lab import state as lab_state
from netkit.lab.build import existing
from netkit.lab.lab import teardown
from netkit.lab.nsenter import read_sysctl
from netkit.lab.plan import Layout
from netkit.lab.servers import is_server
from tests.conftest import ROOT, need_root_and, run_netkit

pytestmark = pytest.mark.netns


@pytest.fixture(autouse=True)
def _root() -> None:
    need_root_and("ip")


def host_view() -> tuple[str, ...]:
    """What the lab must never change in the machine's own namespace."""
    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    links = sorted(line.split(":")[1].strip() for line in out("ip", "-o", "link").splitlines())
    sysctls = [read_sysctl_host(k) for k in ("net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter")]
    return (*links, out("ip", "route"), out("ip", "-6", "route"), *sysctls)


def gone(lab: Lab) -> bool:
    return not existing(lab.namespaces) and not is_server(lab.server_pid) and lab_state.load(lab.id) is None


def wait_until(check: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_up_and_down_leave_nothing_behind() -> None:
    before = host_view()
    started = time.monotonic()
    with running() as lab:
        up_seconds = time.monotonic() - started
        assert existing(lab.namespaces) == list(lab.namespaces)
        assert is_server(lab.server_pid)
        assert lab_state.load(lab.id) is not None
    assert gone(lab)
    assert host_view() == before
    print(f"lab up in {up_seconds:.2f} s")  # about 0.3 s idle; a busy machine's figure is no failure


def test_a_failing_test_body_still_tears_down() -> None:
    with pytest.raises(RuntimeError, match="boom"), running() as lab:
        raise RuntimeError("boom")
    assert gone(lab)


def test_sysctls_are_set_inside_the_lab_only() -> None:
    host_forward = read_sysctl_host("net/ipv4/ip_forward")
    with running() as lab:
        assert read_sysctl(lab.node_a.netns, "net/ipv4/ip_forward") == "1"
        assert read_sysctl(lab.node_a.netns, "net/bridge/bridge-nf-call-iptables") == "1"
        assert read_sysctl(lab.node_a.netns, "net/ipv4/conf/all/rp_filter") == "0"
        assert read_sysctl(lab.pod("web-a1").netns, "net/ipv4/ip_forward") == "0"
        lab.sysctl("node-a", "net.ipv4.conf.all.route_localnet", "1")
        assert read_sysctl(lab.node_a.netns, "net/ipv4/conf/all/route_localnet") == "1"
    assert read_sysctl_host("net/ipv4/ip_forward") == host_forward
    assert read_sysctl_host("net/ipv4/conf/all/route_localnet") == "0"


def read_sysctl_host(key: str) -> str:
    with open(f"/proc/sys/{key}") as fh:
        return fh.read().strip()


def test_a_build_that_fails_half_way_removes_what_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Lab] = []
    real = wiring.route_batches

    def broken(lay: Layout) -> wiring.Batches:
        made.append(Lab(lay, 0, os.getpid()))
        return {**real(lay), lay.nodes[0].netns: ["route add 10.0.0.0/8 via 10.1.2.3"]}  # unreachable gw

    monkeypatch.setattr(wiring, "route_batches", broken)
    with pytest.raises(LabError, match="routes"):
        start()
    assert made and gone(made[0])


LAB_SCRIPT = """
import sys, time
from netkit.lab import running
with running() as lab:
    print(lab.id, lab.server_pid, flush=True)
    time.sleep(60)
"""


@pytest.fixture
def owner() -> Iterator[subprocess.Popen[str]]:
    """A separate process that builds a lab and waits; killed (and its lab removed) afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", LAB_SCRIPT], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for record in lab_state.load_all():
            if record.owner_pid == proc.pid:
                teardown(record)


def lab_of(proc: subprocess.Popen[str]) -> Lab:
    assert proc.stdout is not None
    lab_id, server_pid = proc.stdout.readline().split()
    record = lab_state.load(lab_id)
    assert record is not None
    return Lab(record.layout(), int(server_pid), proc.pid)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_the_owner_tears_down(owner: subprocess.Popen[str], sig: int) -> None:
    lab = lab_of(owner)
    assert existing(lab.namespaces)
    owner.send_signal(sig)
    owner.wait(timeout=10)
    assert gone(lab)


def test_a_killed_owner_leaves_a_stale_lab_that_down_stale_removes(owner: subprocess.Popen[str]) -> None:
    lab = lab_of(owner)
    owner.kill()
    owner.wait()
    assert wait_until(lambda: not is_server(lab.server_pid)), "servers outlived their owner"
    record = lab_state.load(lab.id)
    assert record is not None and not record.owner_alive()
    out = subprocess.run([sys.executable, "-m", "netkit", "lab", "down", "--stale"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert f"lab {lab.id} removed" in out.stdout
    assert gone(lab)


def test_two_labs_at_once_do_not_collide() -> None:
    with running() as one, running() as two:
        assert not set(one.namespaces) & set(two.namespaces)
        assert one.connect("client-a", "10.244.2.11", 8080).backend == "web-b1"
        assert two.connect("client-a", "10.244.2.11", 8080).backend == "web-b1"
        stop(one)  # removing one leaves the other working
        assert two.connect("client", "10.244.1.12", 8080).backend == "web-a2"
    assert gone(one) and gone(two)


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=60)


def test_cli_up_status_down() -> None:
    up = netkit("lab", "up", "--ports", "8080,9000", "-o", "json")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    lab_id = info["id"]
    try:
        record = lab_state.load(lab_id)
        assert record is not None and record.owner_pid == 0 and record.ports == (8080, 9000)
        lab = Lab(record.layout(), record.server_pid, 0)
        assert lab.connect("client-a", "10.244.2.11", 9000, "udp").backend == "web-b1"  # outlives `up`
        rows = {r["id"]: r for r in json.loads(netkit("lab", "status", "-o", "json").stdout)}
        assert rows[lab_id]["servers"] and rows[lab_id]["namespaces"] == "9/9"
        assert f"{lab_id}  persistent" in netkit("lab", "status").stdout
        assert {row["netns"] for row in info["namespaces"]} == set(lab.namespaces)
    finally:
        down = netkit("lab", "down", lab_id)
    assert down.returncode == 0, down.stderr
    assert gone(lab)
    assert netkit("lab", "down", lab_id).returncode == 2  # unknown now: a clean error
