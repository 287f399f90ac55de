"""Stale UDP conntrack entries: decide (pure) which flows to delete, then delete them over netlink.

UDP has no connection end, so a conntrack entry made while a service had no endpoint (the packet was
rejected) or that points at an endpoint that is gone keeps black-holing the client's later packets
with the same 5-tuple (a DNS client reusing its source port: kubernetes#19029, #48370). kube-proxy
deletes, and netkit deletes exactly the same and nothing more, so a restart never drops live flows:

- a UDP service port goes from no endpoints to some: flows whose original destination is one of its
  service IPs and port (clusterIP, externalIPs, LB IPs), and flows to its nodePort on any address;
- a UDP endpoint goes away: flows DNATed to it (reply source = the endpoint) that were addressed to
  one of the port's service IPs, or to its nodePort.

TCP and SCTP need nothing: their endpoints reset or time out visibly.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from netkit.model import NodeState, ServicePortState
from netkit.model.types import IPAddress, Protocol
from netkit.netns import in_netns

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class Flush:
    """Delete UDP flows originally addressed to `dst`:`port` (any address when dst is None: a nodePort),
    and, when `endpoint` is set, only those DNATed to that endpoint IP and port."""

    dst: IPAddress | None
    port: int
    endpoint: tuple[IPAddress, int] | None = None

    def __str__(self) -> str:
        where = f"{self.dst}:{self.port}" if self.dst else f"*:{self.port} (nodePort)"
        return where + (f" → {self.endpoint[0]}:{self.endpoint[1]}" if self.endpoint else "")


def stale_udp_flows(old: NodeState | None, new: NodeState) -> tuple[Flush, ...]:
    """What to flush after moving from `old` to `new` (None: the first sync after a start — nothing,
    so a restart keeps every live flow)."""
    if old is None:
        return ()
    # StateBuilder hands unchanged services back as the very same objects: only the others can move.
    same = {id(p) for p in old.ports} & {id(p) for p in new.ports}
    before = {(p.name, p.protocol, p.family): p for p in old.ports
              if p.protocol is Protocol.UDP and id(p) not in same}
    out: set[Flush] = set()
    for p in new.ports:
        if p.protocol is not Protocol.UDP or id(p) in same:
            continue
        prev = before.get((p.name, p.protocol, p.family))
        if _usable(p) and not (prev is not None and _usable(prev)):
            out.update(_service_flushes(p))
        if prev is not None:
            gone = {(e.ip, e.port) for e in prev.reachable_endpoints} - {(e.ip, e.port) for e in p.reachable_endpoints}
            for ep in gone:
                out.update(_endpoint_flushes(prev, ep))
    new_keys = {(p.name, p.protocol, p.family) for p in new.ports if id(p) not in same}
    for key, prev in before.items():
        if key not in new_keys:  # the service port went away: its endpoints went with it
            for ep in {(e.ip, e.port) for e in prev.reachable_endpoints}:
                out.update(_endpoint_flushes(prev, ep))
    return tuple(sorted(out, key=lambda f: (str(f.dst), f.port, str(f.endpoint))))


def _usable(p: ServicePortState) -> bool:
    return bool(p.cluster_endpoints or p.local_endpoints)


def _service_ips(p: ServicePortState) -> tuple[IPAddress, ...]:
    return (p.cluster_ip, *p.external_ips, *p.load_balancer_ips)


def _service_flushes(p: ServicePortState) -> list[Flush]:
    out = [Flush(ip, p.port) for ip in _service_ips(p)]
    if p.node_port:
        out.append(Flush(None, p.node_port))
    return out


def _endpoint_flushes(p: ServicePortState, ep: tuple[IPAddress, int]) -> list[Flush]:
    out = [Flush(ip, p.port, ep) for ip in _service_ips(p)]
    if p.node_port:
        out.append(Flush(None, p.node_port, ep))
    return out


class ConntrackCleaner:
    """The netlink edge (pyroute2). Constructing it does no IO.

    With a network namespace, the netlink socket is opened by a helper thread that entered it
    (`netkit.netns.in_netns`), not with pyroute2's own `netns=` argument: that forks a child which is
    later ended with SIGTERM, and a forked child shares the asyncio loop's signal wake-up fd, so the
    daemon took the child's SIGTERM for its own and stopped (seen with pyroute2 0.9.7)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def flush(self, flushes: Sequence[Flush]) -> int:
        if not flushes:
            return 0
        if self.netns:
            return in_netns(self.netns, lambda: _flush(flushes))
        return _flush(flushes)


def _flush(flushes: Sequence[Flush]) -> int:
    from pyroute2 import Conntrack  # imported here: only the daemon needs netlink
    from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

    deleted = 0
    ct = Conntrack()
    try:
        for f in flushes:
            filt = NFCTAttrTuple(proto=socket.IPPROTO_UDP, dport=f.port,
                                 **({"daddr": str(f.dst)} if f.dst else {}))
            for entry in list(ct.dump_entries(tuple_orig=filt)):
                if f.endpoint and (entry.tuple_reply.saddr != str(f.endpoint[0])
                                   or entry.tuple_reply.sport != f.endpoint[1]):
                    continue
                try:
                    ct.delete(entry)
                    deleted += 1
                except OSError as exc:  # already gone
                    log.debug("conntrack delete %s: %s", entry, exc)
    finally:
        ct.close()
    return deleted
