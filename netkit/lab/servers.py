"""Pod servers: one process answers for every pod of a lab, on every lab port, TCP and UDP, v4 and v6.

Theory of operation: `start()` spawns `python -m netkit.lab.servers` with a JSON config on stdin. The
process enters each pod's namespace in turn (setns on its only thread), binds its listeners there
(a socket keeps the namespace it was created in), and once every socket is bound prints `ready` and
serves them all from one selector loop. A fresh interpreter rather than a fork keeps the servers
free of whatever threads and locks the caller holds; it is also what lets `netkit lab up` leave the
servers running after the command exits.

Every answer is one line, `<pod> <source>\\n`, naming the pod and the source address it saw
(`10.244.1.50:41234`, `[fd00:244:0:1::50]:41234`): tests read from it which backend the DNAT chose and
whether the source was masqueraded. TCP answers once on accept and once more for every chunk received,
until the peer closes (so a test can hold a connection open across a rules change and use it again);
UDP answers every datagram. With `watch_parent`, the process exits when its parent dies, so a test
run killed with SIGKILL leaves no servers behind.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from netkit.lab.errors import LabError

READY = "ready"


@dataclass(frozen=True, slots=True)
class Listener:
    pod: str
    kind: int  # socket.SOCK_STREAM or SOCK_DGRAM


def peer_text(peer: tuple[str, int] | tuple[str, int, int, int]) -> str:
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def answer(pod: str, peer: tuple[str, int] | tuple[str, int, int, int]) -> bytes:
    return f"{pod} {peer_text(peer)}\n".encode()


def bind(family: int, kind: int, port: int) -> socket.socket:
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    if kind == socket.SOCK_STREAM:
        sock.listen(128)
    sock.setblocking(False)
    return sock


def open_pod(sel: selectors.BaseSelector, pod: str, netns: str, ports: Sequence[int]) -> None:
    from netkit.lab.nsenter import enter

    enter(netns)
    for port in ports:
        for family in (socket.AF_INET, socket.AF_INET6):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                sel.register(bind(family, kind, port), selectors.EVENT_READ, Listener(pod, kind))


def on_ready(sel: selectors.BaseSelector, sock: socket.socket, data: object) -> None:
    try:
        if isinstance(data, Listener) and data.kind == socket.SOCK_DGRAM:
            _payload, peer = sock.recvfrom(65535)
            sock.sendto(answer(data.pod, peer), peer)
        elif isinstance(data, Listener):
            conn, peer = sock.accept()
            conn.setblocking(False)
            conn.sendall(answer(data.pod, peer))
            sel.register(conn, selectors.EVENT_READ, (data.pod, peer))
        else:
            pod, peer = data  # type: ignore[misc]
            if sock.recv(65535):
                sock.sendall(answer(pod, peer))
            else:
                sel.unregister(sock)
                sock.close()
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        if not isinstance(data, Listener):
            sel.unregister(sock)
            sock.close()


def serve(config: dict[str, object]) -> None:
    sel = selectors.DefaultSelector()
    ports = [int(p) for p in config["ports"]]  # type: ignore[attr-defined]
    for pod, netns in config["pods"]:  # type: ignore[attr-defined]
        open_pod(sel, pod, netns, ports)
    parent = int(config.get("watch_parent", 0))  # type: ignore[call-overload]
    print(READY, flush=True)
    os.close(1)
    while not parent or os.getppid() == parent:
        for key, _ in sel.select(timeout=0.5):
            on_ready(sel, key.fileobj, key.data)  # type: ignore[arg-type]


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(json.load(sys.stdin))


# --- the caller's side --------------------------------------------------------------------------

def package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def start(pods: Sequence[tuple[str, str]], ports: Sequence[int], *, watch_parent: bool,
          log: Path | None = None, timeout: float = 10.0) -> int:
    """Spawn the server process for `pods` ((name, netns) pairs); return its pid once it is ready."""
    config = {"pods": list(pods), "ports": list(ports), "watch_parent": os.getpid() if watch_parent else 0}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root(), os.environ.get("PYTHONPATH")]))}
    err: IO[bytes] | int = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "netkit.lab.servers"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    if not isinstance(err, int):
        err.close()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(config).encode())
    proc.stdin.close()
    line = read_line(proc.stdout, timeout)
    proc.stdout.close()
    if line.strip() != READY:
        stop(proc.pid)
        raise LabError(f"pod servers did not start (got {line!r}; see {log or 'stderr'})")
    return proc.pid


def read_line(stream: IO[bytes], timeout: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    if not sel.select(timeout):
        return ""
    return stream.readline().decode(errors="replace")


def is_server(pid: int) -> bool:
    """Whether `pid` is a pod-server process (guards against a recycled pid in a stale state file)."""
    try:
        return b"netkit.lab.servers" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop(pid: int, grace: float = 2.0) -> None:
    """Stop the server process `pid` (SIGTERM, then SIGKILL); a pid that is gone is fine."""
    if not is_server(pid):
        reap(pid)
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    reap(pid)


def alive(pid: int) -> bool:
    reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def reap(pid: int) -> None:
    """Collect `pid` if it is our exited child (a zombie still answers kill(pid, 0))."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


if __name__ == "__main__":
    main()
