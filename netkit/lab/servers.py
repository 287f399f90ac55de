"""Pod servers: one process answers for every pod of a lab, on every lab port, TCP and UDP, v4 and v6.

Theory of operation: `start()` spawns a Python running `netkit.lab.servers.main` with a JSON config on stdin. The
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


@dataclass(frozen=True, slots=True)
class Connection:
    pod: str
    peer: tuple[str, int]


def on_ready(sel: selectors.BaseSelector, sock: socket.socket, data: Listener | Connection) -> None:
    try:
        if isinstance(data, Connection):
            on_data(sel, sock, data)
        elif data.kind == socket.SOCK_DGRAM:
            _payload, peer = sock.recvfrom(65535)
            sock.sendto(answer(data.pod, peer), peer)
        else:
            conn, peer = sock.accept()
            conn.setblocking(False)
            conn.sendall(answer(data.pod, peer))
            sel.register(conn, selectors.EVENT_READ, Connection(data.pod, peer))
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        if isinstance(data, Connection):
            sel.unregister(sock)
            sock.close()


def on_data(sel: selectors.BaseSelector, sock: socket.socket, conn: Connection) -> None:
    if sock.recv(65535):
        sock.sendall(answer(conn.pod, conn.peer))
    else:
        sel.unregister(sock)
        sock.close()


def serve(pods: Sequence[tuple[str, str]], ports: Sequence[int], parent: int) -> None:
    sel = selectors.DefaultSelector()
    for pod, netns in pods:
        open_pod(sel, pod, netns, ports)
    print(READY, flush=True)
    os.close(1)
    while not parent or os.getppid() == parent:
        for key, _ in sel.select(timeout=0.5):
            on_ready(sel, key.fileobj, key.data)  # type: ignore[arg-type]  # always our sockets


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the owner, which stops us
    config = json.load(sys.stdin)
    serve([(str(p), str(n)) for p, n in config["pods"]], [int(p) for p in config["ports"]],
          int(config.get("watch_parent", 0)))


# --- the caller's side --------------------------------------------------------------------------

def package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


SERVER_MAIN = "from netkit.lab.servers import main; main()"


def spawn(config: dict[str, object], log: Path | None) -> subprocess.Popen[bytes]:
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [package_root(), os.environ.get("PYTHONPATH")]))}
    with open(log or os.devnull, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-c", SERVER_MAIN], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(config).encode())
    proc.stdin.close()
    return proc


def start(pods: Sequence[tuple[str, str]], ports: Sequence[int], *, watch_parent: bool,
          log: Path | None = None, timeout: float = 10.0) -> int:
    """Spawn the server process for `pods` ((name, netns) pairs); return its pid once it is ready."""
    return ready(launch(pods, ports, watch_parent=watch_parent, log=log), log, timeout)


def launch(pods: Sequence[tuple[str, str]], ports: Sequence[int], *, watch_parent: bool,
           log: Path | None = None) -> subprocess.Popen[bytes]:
    """Spawn the server process without waiting: it binds wildcard addresses, so it may start as soon
    as the namespaces exist, while their interfaces are still being made."""
    config = {"pods": list(pods), "ports": list(ports), "watch_parent": os.getpid() if watch_parent else 0}
    return spawn(config, log)


def ready(proc: subprocess.Popen[bytes], log: Path | None = None, timeout: float = 10.0) -> int:
    """Wait until `proc` has bound every socket; its pid. Stops it and raises if it does not."""
    assert proc.stdout is not None
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
        reap(pid)
        if not is_server(pid):  # gone, or a zombie (its cmdline reads empty)
            return
        time.sleep(0.01)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    reap(pid)


def reap(pid: int) -> None:
    """Collect `pid` if it is our exited child (a zombie still answers kill(pid, 0))."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


if __name__ == "__main__":
    main()
