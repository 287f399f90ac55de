"""Shared fixtures. Kernel fixtures create uniquely named network namespaces and always remove them.

Every run has a tag (NETKIT_TEST_RUN, 8 hex digits; xdist's workers share their controller's) and
lab state directories of its own under `STATE_ROOT`: NETKIT_LAB_STATE_DIR is set here, before any
test imports netkit.lab, so no test lab or cluster is ever recorded in the machine's /run/netkit-lab.
Namespaces a test creates are named with `netns_name`; tests/leftovers.py finds by these marks what
the run left behind, and nothing of another run's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RUN_ENV, RUN_PID_ENV, WORKER_ENV = "NETKIT_TEST_RUN", "NETKIT_TEST_RUN_PID", "PYTEST_XDIST_WORKER"


def _run_tag() -> tuple[str, str]:
    """(tag, xdist worker): the controller's tag in one of its workers; a new one, and no worker, in
    any other pytest (also one that a test starts: its parent is not the process that made the tag)."""
    tag, maker = os.environ.get(RUN_ENV, ""), os.environ.get(RUN_PID_ENV, "")
    if tag and WORKER_ENV in os.environ and maker == str(os.getppid()):
        return tag, os.environ[WORKER_ENV]
    tag = uuid.uuid4().hex[:8]
    os.environ.update({RUN_ENV: tag, RUN_PID_ENV: str(os.getpid())})
    os.environ.pop(WORKER_ENV, None)  # inherited from the worker that started this pytest
    return tag, ""


RUN_TAG, WORKER = _run_tag()
STATE_ROOT = Path(tempfile.gettempdir()).resolve() / f"netkit-test-{RUN_TAG}"
os.environ["NETKIT_LAB_STATE_DIR"] = str(STATE_ROOT / (WORKER or "main"))  # before netkit.lab.state is read

from tests import leftovers, root_netns  # noqa: E402 - netkit.lab.state reads NETKIT_LAB_STATE_DIR on import


def netns_name(kind: str = "nkt") -> str:
    """A new namespace name carrying the run's tag and worker (tests/leftovers.py tells it apart)."""
    return f"{kind}-{RUN_TAG}{WORKER}-{uuid.uuid4().hex[:8]}"


def own_state_dir(label: str) -> Path:
    """A new lab state directory of the run's (NETKIT_LAB_STATE_DIR for a test's own clusters)."""
    path = STATE_ROOT / f"{WORKER or 'main'}.{label}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    return path


def run_netkit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m netkit ARGS` from the checkout, as a user runs it; never raises for the exit status."""
    return subprocess.run([sys.executable, "-m", "netkit", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)


def netns_sh(netns: str, *argv: str, input: str | None = None) -> str:
    """ARGV inside network namespace NETNS; its stdout (raises when it fails)."""
    return subprocess.run(["ip", "netns", "exec", netns, *argv], input=input, capture_output=True, text=True,
                          check=True).stdout


def need_root_and(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (installed by make test)")


@pytest.fixture(autouse=True)
def _private_xtables_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """iptables-legacy serialises on one lock file for every namespace on the machine; a long
    restore elsewhere (a benchmark, another worker) must not make these tests time out."""
    monkeypatch.setenv("XTABLES_LOCKFILE", str(tmp_path / "xtables.lock"))


@contextlib.contextmanager
def fresh_netns() -> Iterator[str]:
    """A fresh, empty network namespace with loopback up; removed afterwards, also on failure."""
    need_root_and("ip")
    name = netns_name()
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh, empty network namespace with loopback up; removed afterwards, also on failure."""
    with fresh_netns() as name:
        yield name


def route_out(netns: str, node_ip: str) -> None:
    """Give `netns` the node IP on a veth that every other destination is routed out of (its peer, in
    the same namespace, has no address): a datagram or SYN the namespace sends to a Service frontend
    is DNATed by the rules and goes nowhere, leaving a real conntrack entry behind."""
    for cmd in (["link", "add", "nk0", "type", "veth", "peer", "name", "nk1"], ["link", "set", "nk0", "arp", "off"],
                ["addr", "add", f"{node_ip}/24", "dev", "nk0"], ["link", "set", "nk0", "up"],
                ["link", "set", "nk1", "up"], ["route", "add", "default", "dev", "nk0"]):
        subprocess.run(["ip", "-n", netns, *cmd], check=True, capture_output=True)


def held_socket(kind: int) -> socket.socket:
    """A loopback socket bound to a free port (listening, for TCP): an address that is in use."""
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        s.listen()
    return s


# --- the machine's own namespace as it was, and nothing left behind (root_netns.py, leftovers.py) ---


def _mode() -> str:
    return os.environ.get("NETKIT_ROOT_GUARD", "session")


def _scope(worker: str | None) -> leftovers.Scope:
    return leftovers.Scope(RUN_TAG, worker, STATE_ROOT, ROOT)


def _root() -> bool:
    return os.geteuid() == 0


def pytest_sessionstart(session: pytest.Session) -> None:
    """Picture the machine before any test (in xdist's controller: once)."""
    if _mode() == "off" or hasattr(session.config, "workerinput"):
        return
    session.config.stash[_BEFORE] = (root_netns.read() if _root() else None, leftovers.read(_scope(None)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when it changed the machine's own namespace or left anything behind; remove that."""
    if hasattr(session.config, "workerinput"):
        return  # a worker: the controller checks and removes, once
    before = session.config.stash.get(_BEFORE, None)
    if before is None:  # NETKIT_ROOT_GUARD=off: nothing to check, but the run's state directories go
        shutil.rmtree(STATE_ROOT, ignore_errors=True)
        return
    root_before, left_before = before
    lines = []
    changed = root_netns.changes(root_before, root_netns.read()) if root_before is not None else []
    if changed:
        lines += ["the tests changed the machine's own network namespace (tests/root_netns.py; "
                  "NETKIT_ROOT_GUARD=each -n 0 names the test):", *(f"  {line}" for line in changed)]
    found = leftovers.settle(_scope(None), left_before)
    if any(found.values()):
        keep = os.environ.get("NETKIT_LEFTOVERS") == "keep"
        lines += [f"the tests left these behind ({'kept: NETKIT_LEFTOVERS=keep' if keep else 'now removed'}; "
                  "tests/leftovers.py; NETKIT_ROOT_GUARD=each names the test):",
                  *(f"  {line}" for line in leftovers.new({}, found))]
        if not keep:
            leftovers.remove(found)
    if not any(found.values()) or os.environ.get("NETKIT_LEFTOVERS") != "keep":
        shutil.rmtree(STATE_ROOT, ignore_errors=True)
    if lines:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True, bold=True)
        else:
            print("\n".join(lines), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[tuple[dict[str, list[str] | None] | None, leftovers.Picture]]()


@pytest.fixture(autouse=True)
def _guard_each(request: pytest.FixtureRequest) -> Iterator[None]:
    """NETKIT_ROOT_GUARD=each: the same checks around every test, failing the test that changed the
    machine's namespace or left something (of its xdist worker's) behind."""
    if _mode() != "each":
        yield
        return
    scope = _scope(WORKER)
    root_before = root_netns.read() if _root() else None
    left_before = leftovers.read(scope)
    yield
    changed = root_netns.changes(root_before, root_netns.read()) if root_before is not None else []
    found = leftovers.settle(scope, left_before)
    if any(found.values()):
        leftovers.remove(found)
    assert not changed, "this test changed the machine's own network namespace:\n" + "\n".join(changed)
    assert not any(found.values()), "this test left behind (now removed):\n" + "\n".join(leftovers.new({}, found))


ETC_NETNS = Path("/etc/netns")


@pytest.fixture(scope="session")
def writable_etc_netns() -> Iterator[None]:
    """/etc/netns writable for the lab cluster's pods' resolv.conf files: as it is on the host; in
    the test VM, whose /etc is the host's, read-only, a tmpfs goes on it — once for every xdist
    worker (under a lock), and never taken off: it is the VM's own mount, gone when it powers off,
    and another worker's cluster may still use it when this worker ends."""
    if not os.access(ETC_NETNS, os.W_OK):
        if not ETC_NETNS.is_dir() or os.environ.get("NETKIT_IN_VM") != "1":
            pytest.skip("needs a writable /etc/netns (in the test VM, whose /etc is read-only, a tmpfs goes on it)")
        with open("/tmp/netkit-etc-netns.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.access(ETC_NETNS, os.W_OK):
                subprocess.run(["mount", "-t", "tmpfs", "netns", str(ETC_NETNS)], check=True)
    yield
