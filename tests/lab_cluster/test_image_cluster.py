"""`netkit lab cluster up --image`: every node's daemon and every DNS pod run as podman containers of
netkit's image, as kubelet runs deploy/'s DaemonSet and deploy/dns/'s Deployment. A Service applied
with kubectl is reached by DNS name across nodes; a node's container that `podman kill` stops is
started again by the lab and the Service keeps answering; bad input is one line, exit 2, nothing left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netkit.lab.cluster import build, kubelet, lifecycle, plan, state
from netkit.lab.cluster.podman import Podman
from netkit.lab.cluster.state import Record
from netkit.lab.state import DEFAULT_STATE_DIR, STATE_DIR_ENV
from tests.conftest import need_root_and, own_state_dir
from tests.image.build import build_image, need_podman

from .conftest import UP_TIMEOUT, Kubectl, eventually, fresh, in_pod, need_kubectl

pytestmark = pytest.mark.netns

DB = """apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  selector: {app: db}
  ports: [{name: pg, port: 5432, targetPort: 5432}]
"""
CONNECT = ("import socket; s = socket.create_connection(('db', 5432), timeout=3); "
           "print(s.recv(100).decode().split()[0])")


def containers(cid: str) -> dict[str, str]:
    """{container name: 'running' or 'exited'} of cluster `cid`, by the label the lab gives them."""
    podman = Podman.find()
    marker = str(state.cluster_dir(cid))
    names = [n for n, where in podman.labelled(kubelet.CLUSTER_LABEL).items() if where == marker]
    if not names:
        return {}
    out = podman.run("inspect", "--format", "{{.Name}} {{.State.Status}}", *names, check=False).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


@pytest.fixture(scope="module")
def image_cluster() -> Iterator[Record]:
    need_root_and("ip", "iptables-restore")
    image = build_image()
    record = lifecycle.up(2, "iptables", 1, timeout=float(UP_TIMEOUT), image=image)
    try:
        yield record
    finally:
        lifecycle.down(record.cluster_id)
        assert containers(record.cluster_id) == {}, "down removes the cluster's containers"


@pytest.fixture(scope="module")
def db(image_cluster: Record) -> str:
    """One `db` pod, on node-1 (a deployment's first replica)."""
    changed = lifecycle.scale(image_cluster.cluster_id, "db", 1, create=True)
    assert [p.node for p in changed.added] == ["node-1"]
    return changed.added[0].name


def status(record: Record) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((state.cluster_dir(record.cluster_id) / "status.json").read_text())
    return doc


def client_on_node_2(record: Record) -> str:
    return next(p for p in fresh(record).cluster.pods_on("node-2") if p.deploy == "web").name


def test_the_pods_are_containers_of_the_image(image_cluster: Record) -> None:
    c = image_cluster.cluster
    dns = [p.name for p in c.pods if p.kind == plan.Kind.DNS]
    want = {kubelet.container_name(c, name) for name in ["netkit-node-1", "netkit-node-2", *dns]}
    assert containers(image_cluster.cluster_id) == dict.fromkeys(want, "running")
    podman = Podman.find()
    for node, info in status(image_cluster)["daemons"].items():
        name = kubelet.container_name(c, f"netkit-{node}")
        pid = podman.run("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        assert info["pid"] == int(pid) and info["restarts"] == 0


def test_a_service_is_reached_by_dns_name_across_nodes(image_cluster: Record, db: str, tmp_path: Path) -> None:
    need_kubectl()
    Kubectl(image_cluster, tmp_path).apply(DB)
    client = client_on_node_2(image_cluster)
    reply = eventually(lambda: in_pod(image_cluster, client, [sys.executable, "-c", CONNECT]).stdout.strip(),
                       what="a connection to db by name from node-2")
    assert reply == db


def test_a_killed_node_container_is_started_again(image_cluster: Record, db: str, tmp_path: Path) -> None:
    """podman's restart policy leaves a `podman kill`ed container stopped: the lab, as kubelet, starts
    a new one; the Service keeps answering from the node's pods."""
    need_kubectl()
    Kubectl(image_cluster, tmp_path).apply(DB)
    client = client_on_node_2(image_cluster)
    before = status(image_cluster)["daemons"]["node-2"]
    name = kubelet.container_name(image_cluster.cluster, "netkit-node-2")
    Podman.find().run("kill", name)
    after = eventually(lambda: (d := status(image_cluster)["daemons"]["node-2"])["pid"] not in (0, before["pid"])
                       and d, what="node-2's container started again")
    assert after["restarts"] == before["restarts"] + 1
    assert containers(image_cluster.cluster_id)[name] == "running"
    reply = eventually(lambda: in_pod(image_cluster, client, [sys.executable, "-c", CONNECT]).stdout.strip(),
                       what="a connection to db by name after the restart")
    assert reply == db


# --- bad input: one line, exit 2, nothing left -----------------------------------------------------------

def up_fails(state_dir: Path, *args: str, path: str | None = None) -> str:
    """`up --nodes 2 ARGS` in its own state directory: its one stderr line, after checking it left
    no record, namespace or container."""
    env = {**os.environ, STATE_DIR_ENV: str(state_dir), **({"PATH": path} if path is not None else {})}
    proc = subprocess.run([sys.executable, "-m", "netkit", "lab", "cluster", "up", "--nodes", "2", "--pods-per-node",
                           "1", "--timeout", UP_TIMEOUT, *args], capture_output=True, text=True, env=env,
                          timeout=float(UP_TIMEOUT) + 120, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("netkit: error: ") and "Traceback" not in proc.stderr
    prefix = plan.netns_prefix(str(state_dir.resolve()), str(DEFAULT_STATE_DIR))
    assert not any((state_dir / "clusters").glob("*")) and build.leftovers(prefix=prefix) == []
    if shutil.which("podman"):
        ours = [n for n, where in Podman.find().labelled(kubelet.CLUSTER_LABEL).items()
                if where.startswith(str(state_dir) + "/")]
        assert ours == [], "containers left"
    return proc.stderr.strip()


def test_no_podman_is_one_line(tmp_path: Path) -> None:
    need_root_and("ip", "iptables-restore")
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("ip", "iptables-restore", "iptables-save"):
        (tools / tool).symlink_to(shutil.which(tool) or tool)
    said = up_fails(own_state_dir("nopodman"), "--image", "netkit:0.1.0", path=str(tools))
    assert said == "netkit: error: podman: not installed (apt-get install podman runc; see docs/daemon.md)"


def test_a_missing_image_is_one_line() -> None:
    need_root_and("ip", "iptables-restore")
    need_podman()
    said = up_fails(own_state_dir("noimage"), "--image", "netkit:no-such-version")
    assert said == ("netkit: error: image netkit:no-such-version: not in podman's local storage "
                    "(`make image` builds netkit's)")


EXITS = """#!/bin/sh
echo "netkit: error: this image only exits" >&2
exit 3
"""


@pytest.fixture
def exiting_image(tmp_path: Path) -> Iterator[str]:
    """netkit's image whose `netkit` exits at once (status 3), removed afterwards."""
    need_root_and("ip", "iptables-restore")
    base = build_image()
    podman = Podman.find()
    tag = f"localhost/netkit-test-exits:{uuid.uuid4().hex[:10]}"
    (tmp_path / "netkit").write_text(EXITS)
    (tmp_path / "netkit").chmod(0o755)
    (tmp_path / "Containerfile").write_text(f"FROM {base}\nCOPY netkit /usr/local/bin/netkit\n")
    podman.run("build", "--quiet", "--isolation=chroot", "--pull=never", "-t", tag, str(tmp_path), timeout=600)
    try:
        yield tag
    finally:
        podman.run("image", "rm", "--force", tag, check=False)


def test_an_image_that_exits_is_one_line_and_leaves_nothing(exiting_image: str) -> None:
    said = up_fails(own_state_dir("exits"), "--image", exiting_image)
    assert said.startswith("netkit: error: cluster ") and "could not be built and was removed: " in said
    assert "netkit run on node-" in said and "exited (3): netkit: error: this image only exits" in said
