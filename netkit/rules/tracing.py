"""The values every backend's tracer speaks: a Packet in, Outcomes (each with the Steps it walked) out.

`trace(ruleset, packet) -> list[Outcome]` is exposed by each backend module that can be traced
(netkit.rules.iptables.trace, netkit.rules.nftables.trace); both read the rules themselves, so they
explain a live dump as well as a compiled ruleset. `endpoints` sums the outcomes per DNAT target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netkit.model.types import IPAddress


@dataclass(frozen=True, slots=True)
class Packet:
    src: IPAddress
    dst: IPAddress
    dport: int
    proto: str = "tcp"
    sport: int = 40000
    local_addresses: tuple[IPAddress, ...] = ()  # the node's own addresses (addrtype LOCAL, fib type local)
    in_iface: str | None = None
    mark: int = 0

    @property
    def from_node(self) -> bool:
        return self.src in self.local_addresses or self.src.is_loopback


@dataclass(frozen=True, slots=True)
class Step:
    table: str
    chain: str
    index: int  # 1-based rule number in the chain
    rule: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One way the connection can go, with its probability."""

    probability: float
    verdict: str  # "accept" (delivered), "reject", "drop"
    destination: str | None  # DNAT target "IP:port", or None when not translated
    masquerade: bool
    steps: tuple[Step, ...]
    reason: Step | None  # the rule that decided (DNAT, REJECT, DROP), if any
    unknown: tuple[str, ...] = ()  # rules the tracer could not interpret

    @property
    def delivered_to_node(self) -> bool:
        return self.verdict == "accept" and self.destination is None


def endpoints(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Destination → total probability, over the delivered outcomes."""
    out: dict[str, float] = {}
    for o in outcomes:
        if o.verdict == "accept" and o.destination:
            out[o.destination] = out.get(o.destination, 0.0) + o.probability
    return out
