"""Creating and removing a lab's namespaces in the kernel (the IO half of `wiring`).

Every change is made inside namespaces this module has just created: `ip netns add`, then
`ip -n NS -batch -` per namespace and phase, run in parallel. Removal deletes the namespaces (their
veths, bridges, routes and any iptables rules go with them); it is idempotent and tolerates a lab
that was only partly built, so it is safe in every `finally`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable

from netkit.lab import wiring
from netkit.lab.errors import LabError
from netkit.lab.nsenter import NETNS_RUN_DIR, write_sysctls
from netkit.lab.plan import Layout


def ip_batch(lines: Iterable[str], netns: str | None = None, *, force: bool = False) -> subprocess.Popen[str]:
    argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if force else []), "-batch", "-"]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    except FileNotFoundError as exc:
        raise LabError("ip (iproute2) is not installed") from exc
    assert proc.stdin is not None
    proc.stdin.write("\n".join(lines) + "\n")
    proc.stdin.close()
    return proc


def run_batches(batches: wiring.Batches, phase: str) -> None:
    """Run one phase: every namespace's batch at once; fail with every namespace's stderr."""
    procs = {ns: ip_batch(lines, ns) for ns, lines in batches.items() if lines}
    failures = []
    for ns, proc in procs.items():
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        if proc.wait() != 0:
            failures.append(f"{ns}: {' / '.join(stderr.split(chr(10))).strip(' /')}")
    if failures:
        raise LabError(f"lab {phase} failed: " + "; ".join(failures))  # one line: the CLI's error line


def create_namespaces(names: Iterable[str]) -> None:
    proc = ip_batch(f"netns add {n}" for n in names)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    if proc.wait() != 0:
        raise LabError(f"ip netns add failed: {' / '.join(stderr.split(chr(10))).strip(' /')}")


def build(lay: Layout) -> None:
    """Create every namespace of `lay` and wire it (see `wiring` for the phases)."""
    create(lay)
    wire(lay)


def create(lay: Layout) -> None:
    """The empty namespaces, with their sysctls (phase 1)."""
    create_namespaces(lay.namespaces)
    for ns, values in wiring.sysctls(lay).items():
        write_sysctls(ns, values)


def wire(lay: Layout) -> None:
    """Links, addresses, routes (phases 2-4)."""
    run_batches(wiring.link_batches(lay), "links")
    run_batches(wiring.address_batches(lay), "addresses")
    run_batches(wiring.route_batches(lay), "routes")


def existing(names: Iterable[str]) -> list[str]:
    return [n for n in names if os.path.exists(os.path.join(NETNS_RUN_DIR, n))]


def remove(names: Iterable[str]) -> None:
    """Delete whichever of `names` exist. Never raises for a namespace that is already gone."""
    present = existing(names)
    if present:
        proc = ip_batch((f"netns del {n}" for n in present), force=True)
        assert proc.stderr is not None
        proc.stderr.read()
        proc.wait()
    left = existing(present)
    if left:
        raise LabError(f"could not delete network namespaces: {', '.join(left)}")


def list_lab_namespaces(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_RUN_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []
