"""How the leftovers guard (tests/leftovers.py) tells this run's objects from another run's: by the
run's tag in names and environments, or by its state directories on command lines (never by the
checkout alone: another run in the same checkout names it too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import leftovers
from tests.leftovers import Scope, new, runs_ours

RUN = Scope("1a2b3c4d", None, Path("/tmp/netkit-test-1a2b3c4d"), Path("/work/wt/guard"))
WORKER = Scope("1a2b3c4d", "gw1", RUN.state_root, RUN.checkout)
MARKERS = [str(RUN.state_root)]


@pytest.mark.parametrize(("name", "run", "worker"), [
    ("nkt-1a2b3c4d-0f0f0f0f", True, False),
    ("nkt-1a2b3c4dgw1-0f0f0f0f", True, True),
    ("nkgen-1a2b3c4dgw0-0f0f0f0f", True, False),
    ("nkt-9a2b3c4d-0f0f0f0f", False, False),  # another run's
    ("nkt-0f0f0f0f", False, False),  # a name without any run's tag
    ("nkt-1a2b3c4dx-0f0f0f0f", False, False),
])
def test_a_namespace_is_the_runs_when_its_name_carries_the_tag(name: str, run: bool, worker: bool) -> None:
    assert RUN.names_ours(name) is run and WORKER.names_ours(name) is worker


def env(**values: str) -> dict[bytes, bytes]:
    return {k.encode(): v.encode() for k, v in {"PATH": "/usr/bin", **values}.items()}


@pytest.mark.parametrize(("cmdline", "environ", "run", "worker"), [
    (b"sleep\x00600", env(NETKIT_TEST_RUN="1a2b3c4d"), True, False),
    (b"sleep\x00600", env(NETKIT_TEST_RUN="1a2b3c4d", PYTEST_XDIST_WORKER="gw1"), True, True),
    (b"/work/wt/guard/.venv/bin/python\x00-m\x00netkit", env(NETKIT_TEST_RUN="9a2b3c4d"), False, False),
    (b"/work/wt/guard/.venv/bin/python\x00-m\x00netkit", env(), False, False),  # untagged: maybe another run's
    (b"netkit\x00run\x00--config\x00/tmp/netkit-test-1a2b3c4d/gw0/clusters/abc123/c.conf", env(), True, False),
    (b"/work/wt/guardian/.venv/bin/python\x00-m\x00netkit", env(), False, False),  # another checkout
    (b"sleep\x00600", env(), False, False),
])
def test_a_process_is_the_runs_by_its_tag_or_else_by_what_it_names(cmdline: bytes, environ: dict[bytes, bytes],
                                                                    run: bool, worker: bool) -> None:
    assert runs_ours(RUN, cmdline, environ, MARKERS) is run
    assert runs_ours(WORKER, cmdline, environ, MARKERS) is worker


def test_only_what_appeared_is_listed() -> None:
    before = {"processes": {"1:5": "pid 1: init"}, "network namespaces": {}}
    after = {"processes": {"1:5": "pid 1: init", "7:9": "pid 7: sleep 600"},
             "network namespaces": {"nkt-1a2b3c4d-0f": "nkt-1a2b3c4d-0f"}}
    assert new(before, after) == ["network namespaces: nkt-1a2b3c4d-0f", "processes: pid 7: sleep 600"]
    assert new(after, after) == []


def test_a_workers_state_directories() -> None:
    assert WORKER.worker_owns("gw1") and WORKER.worker_owns("gw1.mine-0a0b0c")
    assert not WORKER.worker_owns("gw10") and not WORKER.worker_owns("gw0")
    assert RUN.worker_owns("gw0") and Scope("1a2b3c4d", "", RUN.state_root, RUN.checkout).worker_owns("main")


def test_procfs_reads_this_process_and_nothing_of_a_gone_one() -> None:
    from netkit import procfs
    me = procfs.stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.started > 0
    assert os.getpid() in set(procfs.pids())
    assert b"pytest" in (procfs.cmdline(os.getpid()) or b"") or b"python" in (procfs.cmdline(os.getpid()) or b"")
    gone = max(procfs.pids()) + 100_000
    assert procfs.stat(gone) is None and procfs.cmdline(gone) is None and procfs.environ(gone) is None


def test_a_container_is_the_runs_by_its_name_or_its_clusters_directory(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Named with the run's tag, or labelled with a cluster directory in one of the run's state
    directories (`lab cluster up --image`); another run's and unlabelled ones are left alone."""
    scope = Scope("1a2b3c4d", None, tmp_path, RUN.checkout)
    (tmp_path / "gw0").mkdir()
    listed = ["netkit-test-1a2b3c4dgw0-0f0f0f0f ",
              f"nkc0a0b0c.abc123-netkit-node-1 {tmp_path}/gw0/clusters/abc123",
              "nkc0a0b0c.def456-netkit-node-1 /tmp/netkit-test-9a2b3c4d/gw0/clusters/def456",
              "netkit-test-9a2b3c4dgw0-0f0f0f0f ", "someones-db "]
    monkeypatch.setattr(leftovers.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(leftovers, "run", lambda *argv: "\n".join(listed) + "\n")
    assert sorted(leftovers.containers(scope, {})) == ["netkit-test-1a2b3c4dgw0-0f0f0f0f",
                                                        "nkc0a0b0c.abc123-netkit-node-1"]
