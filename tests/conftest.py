"""Shared fixtures. Kernel fixtures create uniquely named network namespaces and always remove them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import root_netns

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


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


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh, empty network namespace with loopback up; removed afterwards, also on failure."""
    need_root_and("ip")
    name = f"nkt-{uuid.uuid4().hex[:10]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


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


# --- the machine's own network namespace is left as it was (tests/root_netns.py) -----------------


def _guards() -> bool:
    return os.geteuid() == 0 and os.environ.get("NETKIT_ROOT_GUARD", "session") != "off"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Picture the machine's own namespace before any test (in xdist's controller: once)."""
    if _guards() and not hasattr(session.config, "workerinput"):
        session.config.stash[_BEFORE] = root_netns.read()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when the tests changed the machine's own network namespace."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    found = root_netns.changes(before, root_netns.read())
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["the tests changed the machine's own network namespace (tests/root_netns.py; "
                 "NETKIT_ROOT_GUARD=each -n 0 names the test):", *(f"  {line}" for line in found)]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True, bold=True)
        else:
            print("\n".join(lines), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[dict[str, list[str] | None]]()


@pytest.fixture(autouse=True)
def _root_netns_each(request: pytest.FixtureRequest) -> Iterator[None]:
    """NETKIT_ROOT_GUARD=each: the same check around every test, failing the test that changed it."""
    if os.environ.get("NETKIT_ROOT_GUARD") != "each" or os.geteuid() != 0:
        yield
        return
    before = root_netns.read()
    yield
    found = root_netns.changes(before, root_netns.read())
    assert not found, "this test changed the machine's own network namespace:\n" + "\n".join(found)
