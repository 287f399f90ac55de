"""Running kernel tools inside a named network namespace (`ip netns exec`), or on the host.

Every kernel edge of netkit (iptables, nft, ipset, conntrack, the lab) runs its tools through
`run()`, so `--netns NAME` is honoured everywhere by one piece of code.

For sockets: setns(2) with CLONE_NEWNET changes the namespace of the calling *thread* only, and a
socket keeps the namespace it was created in. `in_netns(ns, fn)` runs `fn` on a short-lived helper
thread that enters `ns` first, so `socket_in` gives a socket living in `ns` that any thread can use
(the daemon's health servers, the lab's clients) without moving the caller.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from netkit.errors import KernelError

T = TypeVar("T")


def wrap(cmd: Sequence[str], netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns, *cmd] if netns else list(cmd)


def run(cmd: Sequence[str], netns: str | None = None, *, input: str | None = None,
        check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = wrap(cmd, netns)
    try:
        # its own process group: a Ctrl-C at the terminal reaches netkit, which stops at a safe
        # point, and never kills a kernel tool half-way
        # (and never reads the terminal: a background process group reading it would be stopped)
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        proc = subprocess.run(argv, **stdin, capture_output=True, text=True, timeout=timeout,
                              process_group=0)
    except FileNotFoundError as exc:
        raise KernelError(f"{argv[0]}: not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise KernelError(f"{' '.join(argv[:6])}: timed out after {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        where = f" in network namespace {netns}" if netns else ""
        raise KernelError(f"{' '.join(cmd[:3])} failed{where} (exit {proc.returncode})",
                          payload=input or "", stderr=proc.stderr)
    return proc


def exists(netns: str) -> bool:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return any(line.split()[0] == netns for line in proc.stdout.splitlines() if line.strip())


NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter(netns: str) -> None:
    """Move the calling thread into `netns` (for helper threads and forked children only)."""
    fd = os.open(os.path.join(NETNS_RUN_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run `fn` on a helper thread inside `netns`; return its result or raise its exception."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            enter(netns)
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            failure.append(exc)

    helper = threading.Thread(target=body, name=f"netns:{netns}", daemon=True)
    helper.start()
    helper.join()
    if failure:
        raise failure[0]
    return outcome[0]


def socket_in(netns: str, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket living in `netns`, usable from any thread."""
    return in_netns(netns, lambda: socket.socket(family, kind, proto))


def netlink_socket(netns: str | None, proto: int, *, rcvbuf: int = 0) -> socket.socket:
    """A bound raw netlink socket of `proto` in `netns` (None: this process's namespace), with a
    receive buffer of `rcvbuf` bytes when given (large dumps)."""
    if netns is None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
    else:
        sock = socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, proto)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((0, 0))
    return sock


class KeptSocket:
    """A socket opened on first use by `opener` (which creates it in the right namespace) and kept
    open: closing a netfilter netlink socket costs ~13 ms, more than a whole batch. When the
    namespace file at `netns_path` (/run/netns/NAME) is no longer the one the socket was opened in
    — a namespace deleted and created again under the same name is another namespace — the old
    socket is closed and a new one opened."""

    def __init__(self, opener: Callable[[], socket.socket], netns_path: str | None, *, timeout: float) -> None:
        self._opener = opener
        self._path = netns_path
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._opened_in: tuple[int, int] | None = None

    def get(self) -> tuple[socket.socket, bool]:
        """The socket, and whether it was opened again because the namespace is another one.
        OSError: the namespace is gone, or no socket could be opened."""
        where = None
        if self._path is not None:
            st = os.stat(self._path)
            where = st.st_dev, st.st_ino
        replaced = self._sock is not None and where != self._opened_in
        if replaced:
            self.close()
        if self._sock is None:
            sock = self._opener()
            sock.settimeout(self._timeout)
            self._sock, self._opened_in = sock, where
        return self._sock, replaced

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._opened_in = None
