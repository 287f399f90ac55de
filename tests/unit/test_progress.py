"""Progress on stderr: a line per phase on a terminal (a real pseudo-terminal here), silent when stderr
is not one unless -v, and an interruption reported with what was done."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

import pytest

from netkit.cli.progress import Progress
from tests.conftest import ROOT

COMPILE = [sys.executable, "-m", "netkit", "compile", "-f", str(ROOT / "examples"), "--node-name", "node-a"]


def _on_pty(argv: list[str]) -> tuple[str, str]:
    """Run with stderr on a pseudo-terminal (stdout a pipe); returns (stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, text=True)
        os.close(slave)
        out, _ = proc.communicate(timeout=60)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0, shown
    return out, shown.decode().replace("\r\n", "\n")


def test_a_terminal_sees_each_phase_with_counts_and_time() -> None:
    out, shown = _on_pty(COMPILE)
    assert "*nat" in out and "netkit: [" not in out  # progress never goes to stdout
    lines = [line for line in shown.splitlines() if line.startswith("netkit: [")]
    assert [line.split("] ", 1)[1] for line in lines] == [
        "read the input: 8 Services, 8 EndpointSlices",
        "IPv4: compile: 7 service ports",
        "IPv6: compile: 1 service ports",
    ]
    assert all(line[len("netkit: ["):].split("s]")[0].strip().replace(".", "").isdigit() for line in lines)


@pytest.mark.parametrize(("extra", "shown"), [([], False), (["-v"], True)])
def test_not_a_terminal_is_quiet_unless_verbose(extra: list[str], shown: bool) -> None:
    proc = subprocess.run([*COMPILE, *extra], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert ("netkit: [" in proc.stderr) is shown
    assert ("IPv4: compile: 7 service ports" in proc.stderr) is shown


def test_an_interruption_says_what_was_done() -> None:
    err = io.StringIO()
    progress = Progress(False, out=err)  # reported even when progress lines are off
    with pytest.raises(KeyboardInterrupt), progress.running():
        with progress.phase("IPv4: compile"):
            pass
        with progress.phase("IPv4: plan"):
            raise KeyboardInterrupt
    assert err.getvalue().startswith("netkit: interrupted after ")
    assert err.getvalue().endswith("s; done: IPv4: compile; interrupted during: IPv4: plan\n")


def test_phase_lines_carry_elapsed_time() -> None:
    ticks = iter([0.0, 1.5, 2.25])
    err = io.StringIO()
    progress = Progress(True, out=err, clock=lambda: next(ticks))
    with progress.phase("IPv4: plan") as done:
        done("12 chains written")
    progress.say("IPv4: 1 of 3 table commits done")
    assert err.getvalue() == ("netkit: [   1.5s] IPv4: plan: 12 chains written\n"
                              "netkit: [   2.2s] IPv4: 1 of 3 table commits done\n")
