"""The leftovers guard (tests/leftovers.py, wired in tests/conftest.py) fails a run that leaves a
namespace, a process or a lab behind, lists each, removes them, and blames nothing of another run's:
pytest runs in a subprocess on a small file of tests made to leak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from netkit.lab.build import existing
from tests.conftest import ROOT, need_root_and

pytestmark = pytest.mark.netns

OTHER = "0badc0de"  # another run's tag
LEAKS = f'''
import os, subprocess, sys
from pathlib import Path
from netkit.lab import start
from tests.conftest import netns_name

NOTES = Path(os.environ["LEAK_NOTES"])
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def note(what, value):
    (NOTES / what).write_text(str(value))


def test_leaks_a_namespace():
    name = netns_name()
    subprocess.run(["ip", "netns", "add", name], check=True)
    note("netns", name)


def test_leaks_a_process():
    note("pid", subprocess.Popen(SLEEPER, start_new_session=True).pid)


def test_leaks_a_lab():
    note("lab", start().id)  # never stopped: its record, namespaces and servers stay


def test_cleans_up():
    name = netns_name()
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "del", name], check=True)


def test_makes_what_another_run_would():
    name = "nkt-{OTHER}-" + os.urandom(4).hex()
    subprocess.run(["ip", "netns", "add", name], check=True)
    note("other-netns", name)
    env = {{**os.environ, "NETKIT_TEST_RUN": "{OTHER}"}}
    note("other-pid", subprocess.Popen(SLEEPER, env=env, start_new_session=True).pid)
'''


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/cmdline").read_bytes() != b""  # not a zombie


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[Path]:
    """Where the leaking tests write what they made; whatever is left of it is removed afterwards."""
    d = tmp_path / "notes"
    d.mkdir()
    try:
        yield d
    finally:
        for what in ("pid", "other-pid"):
            if (d / what).exists():
                try:
                    os.kill(int((d / what).read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        names = [(d / what).read_text() for what in ("netns", "other-netns") if (d / what).exists()]
        if (d / "lab").exists():
            names += [n for n in os.listdir("/run/netns") if n.startswith(f"nk{(d / 'lab').read_text()}-")]
        for name in existing(names):
            subprocess.run(["ip", "netns", "del", name], check=False)


def run_pytest(tmp_path: Path, notes: Path, *args: str, guard: str = "session") -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_leaks.py").write_text(LEAKS)
    env = {**os.environ, "LEAK_NOTES": str(notes), "NETKIT_ROOT_GUARD": guard}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q",
                           "-o", "addopts=", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_a_run_that_leaks_fails_lists_what_it_left_and_removes_it(tmp_path: Path, notes: Path) -> None:
    need_root_and("ip")
    done = run_pytest(tmp_path, notes, str(tmp_path / "test_leaks.py"))
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "5 passed" in out, out
    netns, pid, lab = ((notes / what).read_text() for what in ("netns", "pid", "lab"))
    listing = out[out.index("the tests left these behind"):]
    assert f"network namespaces: {netns}" in listing, listing
    assert f"processes: pid {pid}: " in listing and f"/etc/netns directories: {netns}" not in listing
    assert "lab records: " in listing and f"/main/{lab}.json" in listing
    assert f"network namespaces: nk{lab}-node-a" in listing
    assert OTHER not in listing and str((notes / "other-pid").read_text()) not in listing
    # removed: the run leaves the machine as it found it; another run's objects stay
    assert not existing([netns]) and not alive(int(pid))
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"nk{lab}-")]
    assert existing([(notes / "other-netns").read_text()]) and alive(int((notes / "other-pid").read_text()))


def test_guard_each_names_the_test_that_leaked(tmp_path: Path, notes: Path) -> None:
    need_root_and("ip")
    done = run_pytest(tmp_path, notes, f"{tmp_path / 'test_leaks.py'}::test_leaks_a_namespace",
                      f"{tmp_path / 'test_leaks.py'}::test_cleans_up", guard="each")
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "2 passed, 1 error" in out, out
    assert "ERROR" in out and "test_leaks.py::test_leaks_a_namespace" in out.split("short test summary")[1], out
    assert "test_cleans_up" not in out.split("short test summary")[1]
    assert f"network namespaces: {(notes / 'netns').read_text()}" in out
    assert not existing([(notes / "netns").read_text()])
