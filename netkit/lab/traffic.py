"""Traffic while things change: steady real connections through the lab, judged against a timeline.

`Traffic` runs one thread per `Flowing` target, each opening connections at a fixed rate (a new
socket, so a new source port, per TCP connection or fresh UDP request; or one UDP socket kept for the
whole run — one conntrack entry — when `sticky`). Every attempt is recorded with its start time.

A `Timeline` says what each attempt may get: the test marks `change(new)` when it asks for a change
(where new connections may go, and which endpoints still serve) and `applied()` once the daemon has
synced it (rules and conntrack cleanup); in between, the old and the new phase are both right.

`tally` sorts every attempt into answered by a right endpoint, refused as expected (a Service
without endpoints rejects), lost in a flow move, failed (refused/unreachable/closed where an endpoint
should answer), timed out, or answered by a wrong or removed endpoint. Pure bookkeeping besides the
sockets.

Lost in a flow move: a sticky UDP flow on an endpoint that goes must move, and it moves when the
daemon deletes its conntrack entry. A reply already on its way back then meets no entry, is not
translated back to the service address, and the client's connected socket drops it — kube-proxy's
cleanup does the same. So one timed-out request per sticky socket and change is allowed, only
while the change is under way and only when the flow's last endpoint does not serve after it; a
second one, or one on a flow that could stay, is a timeout like any other.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from netkit.lab.sockets import Outcome, Reply, classify, connect, open_socket


@dataclass(frozen=True, slots=True)
class Flowing:
    """One stream of attempts: `rate` per second from `netns` to dst:port."""

    name: str
    netns: str
    dst: str
    port: int
    proto: str = "tcp"
    rate: float = 20.0
    sticky: bool = False  # UDP only: one socket (one source port, one conntrack entry) for the whole run


@dataclass(frozen=True, slots=True)
class Attempt:
    target: str
    proto: str
    sticky: bool
    started: float
    reply: Reply


@dataclass(frozen=True, slots=True)
class Phase:
    since: float
    new: frozenset[str]  # where a new connection may go
    serving: frozenset[str]  # where an existing UDP flow may stay
    may_refuse: bool  # a Service without endpoints (now, or on one side of a change) rejects


@dataclass
class Timeline:
    """What is right when; see the module docstring."""

    phases: list[Phase] = field(default_factory=list)
    clock: object = time.monotonic

    def start(self, new: Sequence[str], serving: Sequence[str] | None = None) -> None:
        self.phases = [Phase(float("-inf"), frozenset(new), frozenset(serving if serving is not None else new),
                             not new)]

    def change(self, new: Sequence[str], serving: Sequence[str] | None = None) -> None:
        """A change is asked for: until `applied()`, the old and the new phase are both right."""
        old = self.phases[-1]
        nxt = Phase(0.0, frozenset(new), frozenset(serving if serving is not None else new), not new)
        self._pending = nxt
        self.phases.append(Phase(self._now(), old.new | nxt.new, old.serving | nxt.serving | old.new | nxt.new,
                                 old.may_refuse or nxt.may_refuse))

    def applied(self) -> None:
        nxt = self._pending
        self.phases.append(Phase(self._now(), nxt.new, nxt.serving, nxt.may_refuse))

    def at(self, t: float) -> Phase:
        current = self.phases[0]
        for phase in self.phases:
            if phase.since <= t:
                current = phase
        return current

    def after(self, t: float) -> Phase | None:
        """The phase that follows the one at `t` (None for the last)."""
        later = [phase for phase in self.phases if phase.since > t]
        return later[0] if later else None

    def _now(self) -> float:
        return float(self.clock())  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class Tally:
    attempted: int = 0
    answered: int = 0
    refused_as_expected: int = 0
    failed: int = 0
    timed_out: int = 0
    wrong: int = 0  # answered by an endpoint that was not (or no longer) one to answer
    lost_in_move: int = 0  # sticky UDP: the one reply in flight when its flow moved (module docstring)
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.failed or self.timed_out or self.wrong)

    def __str__(self) -> str:
        return (f"attempted {self.attempted}, answered {self.answered}, refused as expected "
                f"{self.refused_as_expected}, lost in a flow move {self.lost_in_move}, failed {self.failed}, "
                f"timed out {self.timed_out}, wrong or removed endpoint {self.wrong}")


def tally(attempts: Sequence[Attempt], timeline: Timeline) -> Tally:
    counts = {"answered": 0, "refused_as_expected": 0, "failed": 0, "timed_out": 0, "wrong": 0, "lost_in_move": 0}
    examples: list[str] = []
    reached: dict[tuple[str, int], str] = {}  # UDP: the backend each client address:port last reached
    flow: str | None = None  # sticky: the backend the socket's one flow last reached
    forgiven: set[float] = set()  # sticky: the changes (by start) in which a request was lost in the move
    for a in sorted(attempts, key=lambda a: a.started):
        phase = timeline.at(a.started)
        right = phase.new | phase.serving if a.sticky else phase.new
        r = a.reply
        if a.proto == "udp" and not a.sticky and r.peer is not None and reached.get(r.peer) in phase.serving:
            # a new socket that drew the source port of an earlier flow meets that flow's conntrack
            # entry, which stays on its endpoint while it serves: as right as a sticky flow
            right = right | {reached[r.peer]}
        if r.outcome is Outcome.ANSWERED:
            verdict = "answered" if r.backend in right else "wrong"
            if a.proto == "udp" and r.peer is not None and r.backend is not None:
                reached[r.peer] = r.backend
            if a.sticky:
                flow = r.backend
        elif r.outcome is Outcome.TIMEOUT and a.sticky and _moving(timeline, a.started, flow, forgiven):
            verdict = "lost_in_move"
            forgiven.add(phase.since)
        elif r.outcome is Outcome.TIMEOUT:
            # UDP to a Service without endpoints: the kernel rate-limits its ICMP port-unreachable
            # replies per client, so some datagrams are dropped silently: as good as a refusal
            verdict = "refused_as_expected" if phase.may_refuse and a.proto == "udp" else "timed_out"
        else:
            verdict = "refused_as_expected" if phase.may_refuse else "failed"
        counts[verdict] += 1
        if verdict in ("wrong", "failed", "timed_out") and len(examples) < 5:
            examples.append(f"{a.target} at {a.started:.3f}: {r.outcome.value} {r.text!r} (right: {sorted(right)})")
    return Tally(len(attempts), examples=tuple(examples), **counts)


def _moving(timeline: Timeline, t: float, flow: str | None, forgiven: set[float]) -> bool:
    """Whether a sticky flow last on `flow` had to move in a change under way at `t`, and no request
    of it was lost in that change yet."""
    phase, nxt = timeline.at(t), timeline.after(t)
    return flow is not None and nxt is not None and flow not in nxt.serving and phase.since not in forgiven


class Traffic:
    """Runs the targets on threads until stopped; `attempts` holds every attempt so far."""

    def __init__(self, targets: Sequence[Flowing], *, timeout: float = 1.0) -> None:
        self.targets = tuple(targets)
        self.timeout = timeout
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for t in self.targets:
            thread = threading.Thread(target=self._run, args=(t,), name=f"traffic-{t.name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout + 2)

    def of(self, name: str) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if a.target == name]

    def _run(self, t: Flowing) -> None:
        sock = open_socket(t.netns, t.dst, "udp", None, self.timeout) if t.sticky else None
        try:
            if sock is not None:
                sock.connect((t.dst, t.port))
            interval, due = 1.0 / t.rate, time.monotonic()
            while not self._stop.is_set():
                started = time.monotonic()
                reply = _ask(sock) if sock is not None else connect(t.netns, t.dst, t.port, t.proto,
                                                                     timeout=self.timeout)
                with self._lock:
                    self.attempts.append(Attempt(t.name, t.proto, t.sticky, started, reply))
                due = max(due + interval, time.monotonic())
                self._stop.wait(max(0.0, due - time.monotonic()))
        finally:
            if sock is not None:
                sock.close()


def _ask(sock: socket.socket) -> Reply:
    started = time.monotonic()
    try:
        sock.send(b"probe\n")
        text = sock.recv(4096).decode(errors="replace").strip()
    except OSError as exc:
        return Reply(classify(exc), "", time.monotonic() - started)
    return Reply(Outcome.ANSWERED if text else Outcome.CLOSED, text, time.monotonic() - started)
