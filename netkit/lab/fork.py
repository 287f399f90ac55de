"""Running a Python function inside a namespace in a forked child process.

For code that reads namespace state once and caches it — Scapy caches interfaces and routes when it
is imported — entering a namespace on a helper thread is not enough. `run_in(netns, fn, *args)` forks;
the child enters `netns`, calls `fn(*args)` (which does its own imports, e.g. Scapy, after the
setns), sends the pickled result or exception back over a pipe and exits with `os._exit` (no atexit
handlers, no pytest teardown in the child). The parent waits at most `timeout` seconds and kills a
child that overruns. `fn` must be picklable-returning; define it at module level.

Several children can run at once: `start_in` returns a `Child` to `collect()` later (used by probes,
which start sniffers and a sender together).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netkit.lab.errors import LabError
from netkit.lab.nsenter import enter


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """An exception raised in the child, with its formatted traceback."""

    kind: str
    message: str
    trace: str


@dataclass(frozen=True, slots=True)
class Child:
    pid: int
    pipe: int  # read end
    netns: str
    what: str


def child_main(netns: str, write_fd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        enter(netns)
        payload = pickle.dumps(("ok", fn(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        payload = pickle.dumps(("error", ChildFailure(type(exc).__name__, str(exc), traceback.format_exc())))
    with os.fdopen(write_fd, "wb") as out:
        out.write(payload)


def start_in(netns: str, fn: Callable[..., Any], *args: Any) -> Child:
    """Fork a child that runs fn(*args) inside `netns`."""
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        status = 0
        try:
            child_main(netns, write_fd, fn, args)
        except BaseException:  # noqa: BLE001
            status = 1
        os._exit(status)
    os.close(write_fd)
    return Child(pid, read_fd, netns, getattr(fn, "__name__", "function"))


def read_all(fd: int, deadline: float) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def collect(child: Child, timeout: float = 30.0) -> Any:
    """Wait for `child`'s result; re-raise its failure as LabError; kill it after `timeout`."""
    try:
        data = read_all(child.pipe, time.monotonic() + timeout)
    finally:
        os.close(child.pipe)
    if data is None:
        os.kill(child.pid, signal.SIGKILL)
    os.waitpid(child.pid, 0)
    if data is None:
        raise LabError(f"{child.what} in {child.netns}: timed out after {timeout:.1f} s")
    if not data:
        raise LabError(f"{child.what} in {child.netns}: child died without a result")
    status, value = pickle.loads(data)
    if status == "error":
        raise LabError(f"{child.what} in {child.netns}: {value.kind}: {value.message}\n{value.trace}")
    return value


def run_in(netns: str, fn: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
    """fn(*args) in a forked child inside `netns`; returns its (picklable) result."""
    return collect(start_in(netns, fn, *args), timeout)
