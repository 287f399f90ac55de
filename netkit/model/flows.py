"""Which Service port and endpoint each live connection goes through: the pure tally behind `netkit flows`.

A conntrack entry keeps what a connection's first packet was sent to (its original destination: a
clusterIP, externalIP or load balancer IP and port, or a nodePort) and where the rules sent it (the
source of its reply tuple: the endpoint it was DNATed to, or the address itself when it was not
DNATed). `tally` gives each entry sent to a Service frontend of the NodeState to that Service port,
and counts it under its endpoint. An entry whose endpoint is not a serving endpoint of the port (a
pod removed, one that stopped serving, an old target port, or no DNAT at all) is **stale**: for UDP
that is what the daemon's conntrack cleanup deletes (`netkit.model.conntrack`), for TCP a connection
the rules would no longer make. Entries to no Service are left out.

Pure: the conntrack dump is the caller's (`netkit.runtime.conntrack.ConntrackCleaner.entries`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from netkit.model.conntrack import Flow, serving
from netkit.model.state import NodeState, ServicePortState
from netkit.model.types import IPAddress, Protocol

Endpoint = tuple[IPAddress, int]


@dataclass(frozen=True, slots=True)
class EndpointFlows:
    ip: IPAddress
    port: int
    flows: int
    stale: bool  # not a serving endpoint of the port (or the entry was never DNATed)


@dataclass(frozen=True, slots=True)
class PortFlows:
    port: ServicePortState
    endpoints: tuple[EndpointFlows, ...]  # serving ones first, most flows first

    @property
    def flows(self) -> int:
        return sum(e.flows for e in self.endpoints)

    @property
    def stale(self) -> int:
        return sum(e.flows for e in self.endpoints if e.stale)


def tally(entries: Iterable[tuple[Protocol, Flow]], state: NodeState) -> tuple[PortFlows, ...]:
    """The entries sent to a frontend of `state`, counted per Service port and endpoint; ports in
    `state`'s order, those without an entry left out."""
    by_address: dict[tuple[Protocol, IPAddress, int], ServicePortState] = {}
    by_node_port: dict[tuple[Protocol, int, int], ServicePortState] = {}
    for p in state.ports:
        for ip in (p.cluster_ip, *p.external_ips, *p.load_balancer_ips):
            by_address[(p.protocol, ip, p.port)] = p
        if p.node_port:
            by_node_port[(p.protocol, p.cluster_ip.version, p.node_port)] = p
    counts: dict[int, Counter[Endpoint]] = {}
    for proto, f in entries:
        port = by_address.get((proto, f.dst, f.dport)) or by_node_port.get((proto, f.dst.version, f.dport))
        if port is not None:
            counts.setdefault(id(port), Counter())[(f.reply_src, f.reply_sport)] += 1
    return tuple(_port(p, counts[id(p)]) for p in state.ports if id(p) in counts)


def _port(p: ServicePortState, counts: Counter[Endpoint]) -> PortFlows:
    good = serving(p)
    eps = [EndpointFlows(ip, port, n, (ip, port) not in good) for (ip, port), n in counts.items()]
    eps.sort(key=lambda e: (e.stale, -e.flows, e.ip.version, e.ip, e.port))
    return PortFlows(p, tuple(eps))
