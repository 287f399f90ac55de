"""`netkit lab cluster down --all` finds what crashes and interrupted `up`s left behind, and nothing
else: each test records its clusters in state directories of its own (NETKIT_LAB_STATE_DIR,
`tests.conftest.own_state_dir`), so `down --all` there cannot touch the clusters of parallel tests
(which use their worker's), and a cluster in a second state directory must survive it untouched.

Crashes are real: the control plane and daemons SIGKILLed (stale record, live namespaces and
veths, orphaned processes), the record deleted as well, `up` SIGKILLed while it builds, and
Ctrl-C (SIGINT to `up`'s process group, as a terminal sends it, `ip` children included) followed by
SIGKILL before `up` could tear down what it built."""

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

from netkit.lab.cluster import build, lifecycle, plan
from netkit.lab.state import DEFAULT_STATE_DIR, STATE_DIR_ENV
from tests.conftest import need_root_and, own_state_dir
from tests.lab_cluster.conftest import UP_TIMEOUT, Held, eventually

pytestmark = pytest.mark.netns


class StateDir:
    """One NETKIT_LAB_STATE_DIR: the `netkit lab cluster` command run with it, and what of a
    cluster recorded there exists (namespaces, processes, the record, /etc/netns, veths)."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.prefix = plan.netns_prefix(str(self.path), str(DEFAULT_STATE_DIR))
        self.env = {**os.environ, STATE_DIR_ENV: str(self.path)}

    def cluster_dir(self, cid: str) -> Path:
        return self.path / "clusters" / cid

    def netkit(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", *args], capture_output=True,
                              text=True, timeout=timeout, env=self.env)

    def up(self, nodes: int, pods_per_node: int) -> str:
        done = self.netkit("up", "--nodes", str(nodes), "--pods-per-node", str(pods_per_node), "--timeout", UP_TIMEOUT,
                           "-o", "json")
        assert done.returncode == 0, done.stderr
        cid = str(json.loads(done.stdout)["id"])
        assert all(ns.startswith(self.prefix + cid + "-") for ns in self.namespaces(cid))
        return cid

    def namespaces(self, cid: str) -> list[str]:
        return build.leftovers(cid, self.prefix)

    def of(self, cid: str) -> dict[str, object]:
        return {"namespaces": self.namespaces(cid),
                "processes": lifecycle.processes(str(self.cluster_dir(cid))),
                "record": self.cluster_dir(cid).exists(),
                "etc": sorted(p.name for p in Path("/etc/netns").glob(f"{self.prefix}{cid}-*"))}

    def control_pid(self, cid: str) -> int:
        return int(json.loads((self.cluster_dir(cid) / "state.json").read_text())["control_pid"])


NOTHING = {"namespaces": [], "processes": [], "record": False, "etc": []}


def root_veths() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def veths_in(namespaces: list[str]) -> int:
    out = [subprocess.run(["ip", "-n", ns, "-o", "link", "show", "type", "veth"], capture_output=True,
                          text=True).stdout for ns in namespaces]
    return sum(len(o.splitlines()) for o in out)


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_down_all_removes_crashed_clusters_and_nothing_else() -> None:
    need_root_and("ip", "iptables-restore")
    mine, theirs = StateDir(own_state_dir("mine")), StateDir(own_state_dir("theirs"))
    assert mine.prefix != theirs.prefix and plan.NETNS_PREFIX not in (mine.prefix, theirs.prefix)
    veths_before = root_veths()
    lookalike = f"{mine.prefix}notours"  # our prefix, but no cluster id after it: not netkit's
    subprocess.run(["ip", "netns", "add", lookalike], check=True)
    crashed = orphaned = survivor = ""
    try:
        crashed, orphaned = mine.up(2, 1), mine.up(1, 1)
        survivor = theirs.up(1, 0)
        # crashed: the control plane SIGKILLed, its daemons and DNS servers orphaned, the record stale
        control = mine.control_pid(crashed)
        kill([control])
        # orphaned: every process SIGKILLed and the record deleted; only namespaces (and veths) remain
        kill(lifecycle.processes(str(mine.cluster_dir(orphaned))))
        shutil.rmtree(mine.cluster_dir(orphaned))
        eventually(lambda: not lifecycle.alive(control, str(mine.cluster_dir(crashed)))
                   and not lifecycle.processes(str(mine.cluster_dir(orphaned))), 30, "the SIGKILLed processes to go")
        assert mine.of(crashed)["processes"] and veths_in(mine.namespaces(crashed)) >= 2 + 3
        assert not mine.of(orphaned)["record"] and veths_in(mine.namespaces(orphaned)) >= 1 + 2
        states = {s["id"]: s["state"] for s in json.loads(mine.netkit("status", "-o", "json").stdout)}
        assert states[crashed].startswith("DOWN") and "namespaces left" in states[orphaned], states
        # the survivor's lasting processes: seen in two looks (a helper of `up` may still be exiting)
        first = theirs.of(survivor)
        time.sleep(0.3)
        kept = theirs.of(survivor)
        lasting = {*first["processes"]} & {*kept["processes"]}  # type: ignore[misc]

        done = mine.netkit("down", "--all")
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.split()) == sorted(f"cluster {crashed} removed cluster {orphaned} removed".split())
        assert mine.of(crashed) == NOTHING and mine.of(orphaned) == NOTHING
        assert not any((mine.path / "clusters").iterdir())
        # the other state directory's cluster, and the lookalike namespace, are untouched
        after = theirs.of(survivor)
        assert lasting and lasting <= {*after["processes"]}, (lasting, after)  # type: ignore[misc]
        assert {k: v for k, v in after.items() if k != "processes"} == \
            {k: v for k, v in kept.items() if k != "processes"} and lookalike in build.existing([lookalike])
        status = json.loads(theirs.netkit("status", "-o", "json").stdout)
        assert [(s["id"], s["state"]) for s in status] == [(survivor, "up")]
    finally:
        subprocess.run(["ip", "netns", "del", lookalike], capture_output=True)
        for where, cid in ((mine, crashed), (mine, orphaned), (theirs, survivor)):
            if cid:
                kill(lifecycle.processes(str(where.cluster_dir(cid))))
        mine.netkit("down", "--all")
        theirs.netkit("down", "--all")
    assert theirs.of(survivor) == NOTHING
    assert root_veths() <= veths_before


@pytest.mark.parametrize("how", ["sigkill", "ctrl-c", "ctrl-c-twice"])
def test_down_all_after_up_was_interrupted_while_building(tmp_path: Path, how: str) -> None:
    """SIGKILL leaves the record and namespaces; Ctrl-C makes `up` remove everything itself before it
    exits; a second Ctrl-C interrupts that teardown. In each case `down --all` leaves nothing. `up` is
    held where the namespaces exist and nothing is wired (and, for the second Ctrl-C, where its
    teardown is about to delete them): the signal lands there however busy the machine is."""
    need_root_and("ip", "iptables-restore")
    mine = StateDir(own_state_dir("mine"))
    held = Held(tmp_path / "held", "cluster-namespaces", "cluster-down")
    cid = os.urandom(3).hex()
    proc = subprocess.Popen([sys.executable, "-m", "netkit", "lab", "cluster", "up", "--nodes", "2", "--id", cid],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**mine.env, **held.env}, start_new_session=True)
    try:
        held.wait("cluster-namespaces", proc)
        building = mine.of(cid)
        assert building["record"] and building["namespaces"] and not building["processes"], building
        interrupt = signal.SIGKILL if how == "sigkill" else signal.SIGINT
        os.killpg(proc.pid, interrupt)  # up and any children, as a terminal's Ctrl-C
        if how == "ctrl-c-twice":
            held.wait("cluster-down", proc)  # the first Ctrl-C's teardown, before it deletes anything
            os.killpg(proc.pid, signal.SIGINT)
        elif how == "ctrl-c":
            held.go("cluster-down")
        rc = proc.wait(60)
        stderr = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in stderr, stderr
        left = mine.of(cid)
        if how == "sigkill":
            assert rc == -signal.SIGKILL and left["record"] and left["namespaces"], left
        elif how == "ctrl-c":
            assert rc == 128 + signal.SIGINT and left == NOTHING, (rc, stderr, left)
        else:
            assert rc == 128 + signal.SIGINT and left["record"] and left["namespaces"], (rc, stderr, left)
        done = mine.netkit("down", "--all")
        assert done.returncode == 0, done.stderr
        assert done.stdout == ("" if left == NOTHING else f"cluster {cid} removed\n"), done.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        mine.netkit("down", "--all")
    assert mine.of(cid) == NOTHING
