"""A cluster's life: `up` and `down` through the real command leave nothing behind (namespaces,
processes, /run records, /etc/netns); neither does `down` after the control plane was killed; bad
input is one line and exit 2; a cluster that cannot be built is removed before the error shows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netkit.lab.cluster import build, lifecycle, plan, state
from netkit.lab.cluster.api import Api
from netkit.lab.sockets import connect
from netkit.lab.state import DEFAULT_STATE_DIR, STATE_DIR_ENV
from tests.conftest import need_root_and, own_state_dir
from tests.lab_cluster.conftest import UP_TIMEOUT, Held, eventually

pytestmark = pytest.mark.netns


def netkit(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", *args], capture_output=True,
                          text=True, timeout=timeout)


def leftovers(cid: str) -> dict[str, object]:
    marker = str(state.cluster_dir(cid))
    return {"namespaces": build.leftovers(cid), "processes": lifecycle.processes(marker),
            "record": state.cluster_dir(cid).exists(),
            "etc": sorted(p.name for p in Path("/etc/netns").glob(f"{state.NETNS_PREFIX}{cid}-*"))}


NOTHING = {"namespaces": [], "processes": [], "record": False, "etc": []}


def test_up_and_down_through_the_command_leave_nothing() -> None:
    need_root_and("ip", "iptables-restore")
    started = time.monotonic()
    up = netkit("up", "--nodes", "3", "--timeout", UP_TIMEOUT, "-o", "json")
    assert up.returncode == 0, up.stderr
    cid = json.loads(up.stdout)["id"]
    try:
        seconds_up = time.monotonic() - started
        status = json.loads(netkit("status", "--cluster", cid, "-o", "json").stdout)[0]
        assert status["state"] == "up" and len(status["nodes"]) == 3
        assert all(n["daemon_pid"] and n["last_sync_ago"] is not None for n in status["nodes"])
        assert {s["name"] for s in status["services"]} == {"default/kubernetes", "kube-system/kube-dns"}
        assert len(leftovers(cid)["namespaces"]) == 1 + 3 + 8  # switch, nodes, 6 web + 2 DNS pods
        kubeconfig = netkit("kubeconfig", "--cluster", cid).stdout.strip()
        assert kubeconfig == str(state.kubeconfig_path(cid)) and Path(kubeconfig).exists()
        started = time.monotonic()
    finally:
        down = netkit("down", cid)
    assert down.returncode == 0 and down.stdout.strip() == f"cluster {cid} removed", down.stderr
    print(f"3-node cluster: up {seconds_up:.1f} s, down {time.monotonic() - started:.1f} s")
    assert leftovers(cid) == NOTHING


def test_down_after_a_crash_leaves_nothing() -> None:
    need_root_and("ip", "iptables-restore")
    record = lifecycle.up(2, "nftables", 1, timeout=float(UP_TIMEOUT))
    cid = record.cluster_id
    try:
        for args, says in [(("exec", "-c", cid, "nope", "--", "true"), "no pod or node 'nope'"),
                           (("drain", "-c", cid, "node-9"), "no node 'node-9'"),
                           (("scale", "-c", cid, "nope", "2"), "no deployment 'nope'"),
                           (("trace", "-c", cid, "nope", "--to", "10.96.0.10:53/udp"), "no pod or node 'nope'")]:
            bad = netkit(*args)
            assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and says in bad.stderr, bad.stderr
        # nftables mode carries traffic too, and trace reads its rules on the node the packet enters
        Api(record.api_port).create("services", "default", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"clusterIP": "10.96.3.3", "selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": 8080}]}})
        pod = record.cluster.pods_of("web")[0]
        deadline = time.monotonic() + 20
        while not connect(pod.netns, "10.96.3.3", 80, timeout=0.5).answered:
            assert time.monotonic() < deadline, "the Service never answered in nftables mode"
        traced = netkit("trace", "-c", cid, pod.name, "--to", "10.96.3.3:80")
        assert traced.returncode == 0 and traced.stdout.count("DNAT") == 2, traced.stdout + traced.stderr
        assert len(leftovers(cid)["processes"]) == 1 + 2 + 2  # control plane, 2 daemons, 2 DNS pods
        os.kill(record.control_pid, signal.SIGKILL)  # its daemons and DNS servers are orphaned
        eventually(lambda: not lifecycle.alive(record.control_pid, str(state.cluster_dir(cid))), 30,
                   "the control plane to go")
        assert json.loads(netkit("status", "-c", cid, "-o", "json").stdout)[0]["state"].startswith("DOWN")
        assert leftovers(cid)["processes"]
    finally:
        assert netkit("down", cid).returncode == 0
    assert leftovers(cid) == NOTHING


@pytest.mark.parametrize("args", [
    ("up", "--nodes", "0"), ("up", "--mode", "userspace"), ("up", "--frobnicate"), ("up", "--dns-pods", "0"),
    ("up", "--ip-family", "ipv5"),
    ("scale", "web"),
    ("down", "zzzzzz"), ("status", "--cluster", "zzzzzz"), ("frob",), ("down", "--everything"), ("drain",),
    ("trace", "web-1"), ("status", "-o", "yaml"), ("kubeconfig", "--cluster", "zzzzzz"), ("exec", "-c", "zzzzzz", "x"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    bad = netkit(*args)
    assert bad.returncode == 2
    assert bad.stderr.startswith("netkit: error: ") and bad.stderr.count("\n") == 1, bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("why", ["not root", "no nft"])
def test_up_without_root_or_a_tool_creates_nothing(tmp_path: Path, why: str) -> None:
    """Checked before anything is made: one line, exit 2, no record, no namespace."""
    need_root_and("ip", "unshare")
    state_dir = own_state_dir("state")
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    argv = [sys.executable, "-m", "netkit", "lab", "cluster", "up", "--nodes", "2", "--mode", "nftables"]
    if why == "not root":
        argv = ["unshare", "--user", *argv]  # a user namespace without a mapping: euid 65534
        says = "needs root"
    else:
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "ip").symlink_to(shutil.which("ip") or "/usr/sbin/ip")
        env["PATH"] = str(tools)
        says = "--mode nftables needs nft (not installed)"
    failed = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1 and says in failed.stderr, failed.stderr
    prefix = plan.netns_prefix(str(state_dir.resolve()), str(DEFAULT_STATE_DIR))
    assert not any(state_dir.iterdir()) and build.leftovers(prefix=prefix) == []


BROKEN_IP = """#!/bin/sh
# ip, except that a batch adding routes fails, as with an iproute2 that cannot do what the lab asks
if [ "$1" = "-n" ] && [ "$3" = "-batch" ]; then
    input=$(cat)
    case "$input" in *"route add"*) echo "Error: Nexthop has invalid gateway." >&2; exit 2;; esac
    printf '%s\\n' "$input" | exec REAL "$@"
fi
exec REAL "$@"
"""


def test_a_cluster_whose_build_fails_halfway_is_removed_before_the_error(tmp_path: Path) -> None:
    """Namespaces, links and addresses exist when the routes fail: all gone when the one line shows."""
    need_root_and("ip", "iptables-restore")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "ip").write_text(BROKEN_IP.replace("REAL", shutil.which("ip") or "/usr/sbin/ip"))
    (tools / "ip").chmod(0o755)
    state_dir = own_state_dir("state")
    env = {**os.environ, STATE_DIR_ENV: str(state_dir), "PATH": f"{tools}:{os.environ['PATH']}"}
    failed = subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", "up", "--nodes", "2"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert "could not be built and was removed: lab routes failed: " in failed.stderr, failed.stderr
    assert "Nexthop has invalid gateway" in failed.stderr
    prefix = plan.netns_prefix(str(state_dir.resolve()), str(DEFAULT_STATE_DIR))
    assert build.leftovers(prefix=prefix) == [] and list((state_dir / "clusters").iterdir()) == []


def test_a_cluster_that_cannot_be_built_is_removed_before_the_error() -> None:
    need_root_and("ip", "ipvsadm")
    if Path("/proc/net/ip_vs").exists():
        pytest.skip("this kernel has IPVS: the ipvs cluster would build")
    failed = netkit("up", "--nodes", "2", "--mode", "ipvs")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert "could not be built and was removed" in failed.stderr and "ipvs" in failed.stderr
    cid = failed.stderr.split("cluster ", 1)[1].split()[0]
    assert leftovers(cid) == NOTHING

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_interrupted_removes_what_it_built(sig: signal.Signals, tmp_path: Path) -> None:
    """`up` held once its control plane is ready (every process running, before it returns): the
    signal lands there however busy the machine is, and `up` removes it all before exiting."""
    need_root_and("ip", "iptables-restore")
    held = Held(tmp_path / "held", "cluster-control-plane")
    cid = os.urandom(3).hex()
    proc = subprocess.Popen([sys.executable, "-m", "netkit", "lab", "cluster", "up", "--nodes", "2", "--id", cid,
                             "--timeout", UP_TIMEOUT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **held.env})
    try:
        held.wait("cluster-control-plane", proc, timeout=240)
        assert (state.cluster_dir(cid) / "kubeconfig").exists() and len(leftovers(cid)["processes"]) >= 1 + 2
        proc.send_signal(sig)
        assert proc.wait(60) == 128 + sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lifecycle.down(cid)
    assert leftovers(cid) == NOTHING
