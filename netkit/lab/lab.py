"""The Lab value and its lifecycle: `start()`, `stop()`, and the `running()` context manager.

`start()` picks a random id, builds the namespaces (`build`), starts the pod servers (`servers`) and
records the lab (`state`); if any step fails or is interrupted it removes whatever exists and
re-raises. `stop()` is idempotent and tolerant of partial setup: servers, namespaces, record.
`running()` also turns SIGTERM into an exception while the lab is up (when called from the main
thread), so `kill PID` tears the lab down like Ctrl-C does.

A `Lab` is a frozen value (namespace names and addresses, from `plan`) with methods for working
inside it; `where` is always a role — "client", "node-a", "node-b", a pod name — or a full namespace
name.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from netkit import netns as netns_tools
from netkit.lab import build, servers, sockets, state
from netkit.lab import probe as probing
from netkit.lab.errors import LabError
from netkit.lab.fork import run_in
from netkit.lab.nsenter import write_sysctls
from netkit.lab.plan import DEFAULT_PORTS, Client, IPAddress, Layout, Node, Pod, layout
from netkit.lab.probe import Probe


@dataclass(frozen=True, slots=True)
class Lab:
    """A running lab. Build one with `running()` (tests, demo) or `start()` (`netkit lab up`)."""

    layout: Layout
    server_pid: int
    owner_pid: int  # 0: persistent, lives until `netkit lab down`

    # --- what is there ------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.layout.lab_id

    @property
    def client(self) -> Client:
        return self.layout.client

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.layout.nodes

    @property
    def node_a(self) -> Node:
        return self.layout.nodes[0]

    @property
    def node_b(self) -> Node:
        return self.layout.nodes[1]

    @property
    def pods(self) -> tuple[Pod, ...]:
        return self.layout.pods

    @property
    def ports(self) -> tuple[int, ...]:
        return self.layout.ports

    @property
    def namespaces(self) -> tuple[str, ...]:
        return self.layout.namespaces

    def pod(self, name: str) -> Pod:
        for pod in self.pods:
            if pod.name == name:
                return pod
        raise LabError(f"no pod {name!r} in the lab (pods: {', '.join(p.name for p in self.pods)})")

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LabError(f"no node {name!r} in the lab")

    def netns(self, where: str) -> str:
        """The namespace name for a role ("client", "node-a", a pod name) or a namespace name."""
        roles = {"client": self.client.netns, **{n.name: n.netns for n in self.nodes},
                 **{p.name: p.netns for p in self.pods}}
        if where in roles:
            return roles[where]
        if where in self.namespaces:
            return where
        raise LabError(f"nothing called {where!r} in lab {self.id} (roles: {', '.join(roles)})")

    # --- working inside it ----------------------------------------------------------------------

    def exec(self, where: str, argv: Sequence[str], *, input: str | None = None, check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a command inside a lab namespace (`ip netns exec`); KernelError if it fails and check."""
        return netns_tools.run(argv, self.netns(where), input=input, check=check, timeout=timeout)

    def run(self, where: str, fn: Callable[..., Any], *args: Any, timeout: float = 30) -> Any:
        """fn(*args) in a forked child inside the namespace (import Scapy inside fn)."""
        return run_in(self.netns(where), fn, *args, timeout=timeout)

    def sysctl(self, where: str, key: str, value: str) -> None:
        """Set a sysctl ("net/ipv4/conf/all/route_localnet") inside a lab namespace only."""
        write_sysctls(self.netns(where), {key.replace(".", "/"): value})

    def connect(self, where: str, dst: str | IPAddress, port: int, proto: str = "tcp", *,
                src: str | IPAddress | None = None, timeout: float = 2.0) -> sockets.Reply:
        """One real connection from `where`; the Reply says answered (by whom, seeing which source),
        refused, unreachable or timed out."""
        return sockets.connect(self.netns(where), dst, port, proto, src=src, timeout=timeout)

    def connect_many(self, where: str, dst: str | IPAddress, port: int, proto: str = "tcp", *,
                     count: int, src: str | IPAddress | None = None,
                     timeout: float = 2.0) -> list[sockets.Reply]:
        """`count` sequential connections (each a new socket, so a new source port)."""
        return [self.connect(where, dst, port, proto, src=src, timeout=timeout) for _ in range(count)]

    def stream(self, where: str, dst: str | IPAddress, port: int, *, src: str | IPAddress | None = None,
               timeout: float = 2.0) -> AbstractContextManager[sockets.Stream]:
        """An open TCP connection to keep across a change (`with lab.stream(...) as s: s.ask()`)."""
        return sockets.stream(self.netns(where), dst, port, src=src, timeout=timeout)

    def sniff_points(self, names: Sequence[str] | None = None) -> dict[str, tuple[str, str]]:
        """{label: (netns, interface)} for probes: a pod name means its eth0, "ROLE:IFACE" any
        interface ("node-b:eth0"); default every pod."""
        chosen = names if names is not None else [p.name for p in self.pods]
        points = {}
        for name in chosen:
            role, _, iface = name.partition(":")
            points[name] = (self.pod(role).netns if not iface else self.netns(role), iface or "eth0")
        return points

    def probe(self, where: str, dst: str | IPAddress, port: int, proto: str = "tcp", *,
              src: str | IPAddress | None = None, sport: int | None = None,
              at: Sequence[str] | None = None, timeout: float = 1.0) -> Probe:
        """A Scapy-crafted SYN/UDP/SCTP INIT from `where`, sniffed at the pods `at` (default all)."""
        return self.probes(where, dst, port, proto, src=src, sport=sport, at=at, timeout=timeout)[0]

    def probes(self, where: str, dst: str | IPAddress, port: int, proto: str = "tcp", *, count: int = 1,
               src: str | IPAddress | None = None, sport: int | None = None,
               at: Sequence[str] | None = None, timeout: float = 1.0) -> tuple[Probe, ...]:
        """`count` probes from one forked Scapy child (Scapy's import cost is paid once)."""
        batch = probing.specs(dst, port, proto, count=count, src=src, sport=sport)
        return probing.send_probes(self.netns(where), batch, self.sniff_points(at), timeout=timeout)


# --- lifecycle -----------------------------------------------------------------------------------

def new_id() -> str:
    return secrets.token_hex(3)


def start(ports: Sequence[int] = DEFAULT_PORTS, *, persistent: bool = False) -> Lab:
    """Build a lab and start its servers. On any failure (or Ctrl-C) nothing is left behind."""
    lay = fresh_layout(tuple(ports))
    owner = 0 if persistent else os.getpid()
    state.save(state.Record(lay.lab_id, lay.ports, 0, owner))
    proc = None
    try:
        build.create(lay)
        proc = servers.launch([(p.name, p.netns) for p in lay.pods], lay.ports,
                              watch_parent=not persistent, log=state.log_path(lay.lab_id))
        build.wire(lay)  # while the servers start
        pid = servers.ready(proc, state.log_path(lay.lab_id))
        state.save(state.Record(lay.lab_id, lay.ports, pid, owner))
    except BaseException:
        teardown(state.Record(lay.lab_id, lay.ports, proc.pid if proc else 0, owner))
        raise
    return Lab(lay, pid, owner)


def fresh_layout(ports: tuple[int, ...]) -> Layout:
    for _ in range(5):
        lay = layout(new_id(), ports)
        if not build.existing(lay.namespaces) and state.load(lay.lab_id) is None:
            return lay
    raise LabError("could not find an unused lab id")


def teardown(record: state.Record) -> None:
    """Remove everything `record` names; tolerant of anything already gone."""
    if record.server_pid:
        servers.stop(record.server_pid)
    build.remove(record.layout().namespaces)
    state.forget(record.lab_id)


def stop(lab: Lab) -> None:
    teardown(state.Record(lab.id, lab.ports, lab.server_pid, lab.owner_pid))


class Terminated(SystemExit):
    """SIGTERM arrived while a lab was up."""


def raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(128 + signum)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM raises `Terminated` (main thread only, default handler only)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    if main and previous == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        if main and previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def running(ports: Sequence[int] = DEFAULT_PORTS) -> Iterator[Lab]:
    """A lab for the duration of the block, torn down on exit, exception, Ctrl-C or SIGTERM."""
    with sigterm_raises():
        lab = start(ports)
        try:
            yield lab
        finally:
            stop(lab)
