"""One memo for every backend's per-port compilation: what each ServicePortState compiled to, by identity.

The daemon rebuilds the NodeState of 10,000 services after every change of one; `StateBuilder` hands
back the very same ServicePortState object for a Service whose object and EndpointSlices did not
change. A backend compiles each service port on its own (`compile_port(ctx, sp) → part`, plus a
fixed part that depends only on the config and the node), so a part made from the very same object
in the same context is still right. `PortMemo.run` walks the ports of one compile, reuses those
parts, compiles the others, and reports which parts came and went: exactly what can differ from the
previous result, which the backend passes to its planner on the result (netkit.rules.backend.Since).

When the NodeState says how it differs from the state of the previous walk (`NodeState.changes`, from
the daemon's StateBuilder), `PortMemo.update` follows those few ports instead of walking them all.

The memo holds the ServicePortState it keyed on, so the identity cannot be reused by another object.
A context change (node addresses, large-cluster mode) is the backend's business: it calls `reset()`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from netkit.model import ServicePortState

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Pass(Generic[C]):
    """One compile's walk: every port's part in port order, and what changed since the previous walk."""

    parts: list[C]
    came: list[C]  # compiled this time: new ports, changed ones, and ones whose context moved
    gone: list[C]  # the previous walk's parts not used any more (their ports changed or went away)
    fresh: bool  # nothing was remembered: everything can differ

    @property
    def unchanged(self) -> bool:
        return not self.fresh and not self.came and not self.gone


class PortMemo(Generic[C]):
    def __init__(self) -> None:
        self._entries: dict[int, tuple[ServicePortState, C]] = {}
        self._fresh = True

    def reset(self) -> None:
        self._entries, self._fresh = {}, True

    @property
    def fresh(self) -> bool:
        """Nothing remembered yet (no walk since the start or the last reset)."""
        return self._fresh

    def previous(self, port: ServicePortState) -> C | None:
        """The part the previous walk made from this very object, if any."""
        hit = self._entries.get(id(port))
        return hit[1] if hit is not None and hit[0] is port else None

    def run(self, ports: Iterable[ServicePortState], compile_port: Callable[[ServicePortState], C],
            keep: Callable[[C], bool] | None = None) -> Pass[C]:
        """Walk `ports`: a remembered part is reused when `keep(part)` (default: always), else the
        port is compiled again. The part of a port seen twice in one walk is compiled once."""
        old = self._entries
        new: dict[int, tuple[ServicePortState, C]] = {}
        pop = old.pop
        parts: list[C] = []
        came: list[C] = []
        gone: list[C] = []
        for port in ports:
            ident = id(port)
            hit = pop(ident, None)
            if hit is not None and hit[0] is port and (keep is None or keep(hit[1])):
                part = hit[1]
            else:
                if hit is not None:
                    gone.append(hit[1])
                seen = new.get(ident)
                part = seen[1] if seen is not None else compile_port(port)
                if seen is None:
                    came.append(part)
            new[ident] = (port, part)
            parts.append(part)
        gone.extend(part for _, part in old.values())
        fresh, self._entries, self._fresh = self._fresh, new, False
        return Pass(parts, came, gone, fresh)

    def update(self, gone: Iterable[ServicePortState], came: Iterable[ServicePortState],
               compile_port: Callable[[ServicePortState], C]) -> tuple[list[C], list[C]]:
        """The previous walk's ports without `gone` and with `came`, every other port being the very
        object it was (NodeState.changes says so): (parts compiled for `came`, parts of `gone`).
        Costs what the change costs; the caller keeps its own index of the parts in use."""
        entries = self._entries
        gone_parts: list[C] = []
        for port in gone:
            hit = entries.pop(id(port), None)
            if hit is not None and hit[0] is port:
                gone_parts.append(hit[1])
        came_parts: list[C] = []
        for port in came:
            part = compile_port(port)
            entries[id(port)] = (port, part)
            came_parts.append(part)
        self._fresh = False
        return came_parts, gone_parts
