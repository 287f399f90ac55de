"""Cluster fixtures and helpers: a real cluster (namespaces, the control plane, `netkit run` on every
node, `netkit dns`), kubectl against it, and connections from inside its namespaces.

`cluster` is module-scoped (a cluster takes a few seconds to build): tests in one module share it
and must not depend on each other's order; each xdist worker builds its own. It is always removed,
also when a test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netkit.lab import pause
from netkit.lab.cluster import lifecycle, state
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome, Reply, connect
from tests.conftest import need_root_and

UP_TIMEOUT = "180"  # seconds `up` may wait for every node's first sync: a loaded machine takes minutes


def need_kubectl() -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("needs kubectl")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Record]:
    need_root_and("ip", "iptables-restore")
    record = lifecycle.up(3, "iptables", 2, timeout=float(UP_TIMEOUT))
    try:
        yield record
    finally:
        lifecycle.down(record.cluster_id)


def fresh(record: Record) -> Record:
    latest = state.load(record.cluster_id)
    assert latest is not None
    return latest


class Kubectl:
    def __init__(self, record: Record, tmp: Path) -> None:
        self.base = ["kubectl", f"--kubeconfig={state.kubeconfig_path(record.cluster_id)}",
                     f"--cache-dir={tmp / 'kube-cache'}", "--request-timeout=10s"]
        self.tmp = tmp

    def __call__(self, *args: str, manifest: str | None = None) -> str:
        argv = [*self.base, *args]
        if manifest is not None:
            path = self.tmp / f"m{time.monotonic_ns()}.yaml"
            path.write_text(manifest)
            argv += ["-f", str(path)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def apply(self, manifest: str) -> str:
        return self("apply", manifest=manifest)


@pytest.fixture
def kubectl(cluster: Record, tmp_path: Path) -> Kubectl:
    need_kubectl()
    return Kubectl(cluster, tmp_path)


def netns(record: Record, where: str) -> str:
    c = fresh(record).cluster
    if where == "outside":
        return c.net_netns
    return next(x.netns for x in (*c.nodes, *c.pods) if x.name == where)


def hit(record: Record, where: str, dst: str, port: int, proto: str = "tcp", timeout: float = 2.0) -> Reply:
    return connect(netns(record, where), dst, port, proto, timeout=timeout)


def eventually(check: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """`check()`'s first true value; a generous bound, since a busy machine's daemons sync late."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def answered_by(record: Record, where: str, dst: str, port: int, count: int = 30) -> set[str]:
    replies = [hit(record, where, dst, port) for _ in range(count)]
    assert all(r.outcome is Outcome.ANSWERED for r in replies), [r.outcome for r in replies]
    return {r.backend for r in replies if r.backend}


def in_pod(record: Record, pod: str, argv: list[str], timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns(record, pod), *argv], capture_output=True, text=True,
                          timeout=timeout)


class Held:
    """A `netkit lab cluster` command held at named points (netkit/lab/pause.py): `env` for the
    command, `wait(point, proc)` until `proc` is held there (failing if it exits first)."""

    def __init__(self, where: Path, *points: str) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.where = where
        self.env = {pause.DIR_ENV: str(where), pause.AT_ENV: ",".join(points)}

    def wait(self, point: str, proc: subprocess.Popen[str], timeout: float = 90.0) -> None:
        reached = self.where / f"{point}.reached"
        deadline = time.monotonic() + timeout
        while not reached.exists():
            if proc.poll() is not None:
                raise AssertionError(f"exited ({proc.returncode}) before {point}: "
                                     + (proc.stderr.read() if proc.stderr else ""))
            assert time.monotonic() < deadline, f"not at {point} after {timeout} s"
            time.sleep(0.02)

    def go(self, point: str) -> None:
        (self.where / f"{point}.go").touch()
