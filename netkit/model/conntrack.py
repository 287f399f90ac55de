"""Which UDP conntrack entries are stale: the pure decision behind the daemon's conntrack cleanup.

UDP has no connection end, so a conntrack entry keeps steering a client's later datagrams with the
same 5-tuple to wherever the first one went — to a pod that is gone, or nowhere when the entry was
made before the Service had rules (a DNS client reusing its source port: kubernetes#19029, #48370).
The daemon does what kube-proxy's `pkg/proxy/conntrack` does: it reads the kernel's UDP entries and
compares them with the **serving** endpoints of each UDP service port it checks, not with its own
memory of what it deleted before — so a cleanup lost to a restart or a crash is made up for:

- an entry whose original destination is one of the port's service IPs (clusterIP, externalIPs, load
  balancer IPs) and port, or whose original destination port is its nodePort, is stale when its reply
  source (the endpoint it was DNATed to, or the service IP itself when it was not DNATed) is not a
  serving endpoint IP:port of that service port;
- a service port with no serving endpoint is checked too, so all its flows go and the client's next
  datagram is rejected at once like a new one, instead of reaching a pod that is gone or no longer
  serves (kube-proxy since kubernetes#139629; before it, such flows lingered);
- an endpoint that is terminating but still serving keeps its flows (current kube-proxy; only an
  endpoint that stops serving or is removed loses them), and neither topology nor traffic policy
  matters: those decide where *new* flows go, like for TCP.

- a frontend that went — its Service deleted, its port removed, its clusterIP, externalIP, load
  balancer IP or nodePort changed — is checked with no serving endpoint, so every flow still sent to
  it goes too (kube-proxy since kubernetes#141371; before it, a deleted UDP Service's flows stayed
  as long as a client kept sending).

What to check (`to_check`): every UDP port on the first sync after a start (the daemon also does so
on its periodic full syncs), afterwards those whose serving endpoints or addresses changed
(`ports_to_check`); on every sync after the first, also the frontends the previous state had that
no port has now. kube-proxy checks every UDP port on every sync; checking only the changed ones
gives the same result (the table only gains stale entries when a port's endpoints or addresses
change, or a frontend goes) at a cost that follows the change, not the cluster. A Service deleted
while the daemon was not running cannot be known afterwards: its flows time out (as kube-proxy's).

Everything here is pure: the daemon's netlink edge (`netkit.runtime.conntrack`) lists and deletes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from netkit.model.state import NodeState, ServicePortState
from netkit.model.types import IPAddress, Protocol

Backend = tuple[IPAddress, int]  # an endpoint's IP and port


@dataclass(frozen=True, slots=True, order=True)
class Flow:
    """One UDP conntrack entry: its original tuple and the source of its reply tuple."""

    src: IPAddress
    sport: int
    dst: IPAddress
    dport: int
    reply_src: IPAddress
    reply_sport: int
    zone: int = 0

    def __str__(self) -> str:
        return f"{_hostport(self.src, self.sport)} → {_hostport(self.dst, self.dport)} " \
               f"(reply from {_hostport(self.reply_src, self.reply_sport)})"


@dataclass(frozen=True, slots=True)
class Frontends:
    """The serving endpoints of each frontend being checked: service IP and port, and (IP version,
    nodePort) — a nodePort answers on every node address of its family."""

    by_address: Mapping[tuple[IPAddress, int], frozenset[Backend]] = field(default_factory=dict)
    by_node_port: Mapping[tuple[int, int], frozenset[Backend]] = field(default_factory=dict)

    @property
    def versions(self) -> frozenset[int]:
        """The IP versions (4, 6) whose conntrack table needs reading."""
        return frozenset({ip.version for ip, _ in self.by_address} | {v for v, _ in self.by_node_port})

    def __bool__(self) -> bool:
        return bool(self.by_address or self.by_node_port)

    def __len__(self) -> int:
        return len(self.by_address) + len(self.by_node_port)


def serving(port: ServicePortState) -> frozenset[Backend]:
    """The endpoints of `port` that serve (ready, or terminating and still serving)."""
    return frozenset((e.ip, e.port) for e in port.endpoints if e.serving)


def frontends(ports: Iterable[ServicePortState]) -> Frontends:
    """The frontends of the UDP `ports` (TCP and SCTP need nothing: they reset or time out visibly)."""
    by_address: dict[tuple[IPAddress, int], frozenset[Backend]] = {}
    by_node_port: dict[tuple[int, int], frozenset[Backend]] = {}
    for p in ports:
        if p.protocol is not Protocol.UDP:
            continue
        backends = serving(p)
        for ip in _service_ips(p):
            by_address[(ip, p.port)] = backends
        if p.node_port:
            by_node_port[(p.cluster_ip.version, p.node_port)] = backends
    return Frontends(by_address, by_node_port)


def stale(flows: Iterable[Flow], checked: Frontends) -> tuple[Flow, ...]:
    """The entries of `flows` that point at no serving endpoint of the frontend they were sent to."""
    out = []
    for f in flows:
        reply = (f.reply_src, f.reply_sport)
        via_ip = checked.by_address.get((f.dst, f.dport))
        via_node_port = checked.by_node_port.get((f.dst.version, f.dport))
        if (via_ip is not None and reply not in via_ip) or (via_node_port is not None and reply not in via_node_port):
            out.append(f)
    return tuple(out)


def to_check(old: NodeState | None, new: NodeState, *, every_port: bool = False) -> Frontends:
    """The frontends a sync from `old` to `new` asks to check: those of `ports_to_check` (of every UDP
    port of `new` when `every_port` or `old` is None), and each frontend of `old` that no port of
    `new` looked at has, with no serving endpoint (all its flows are stale)."""
    ports = ports_to_check(None if every_port else old, new)
    checked = frontends(ports)
    if old is None:
        return checked
    went, came = _replaced(old, new)
    kept = checked if every_port else frontends(came)
    gone = frontends(went)
    nothing: frozenset[Backend] = frozenset()
    return Frontends(
        {**{k: nothing for k in gone.by_address if k not in kept.by_address}, **checked.by_address},
        {**{k: nothing for k in gone.by_node_port if k not in kept.by_node_port}, **checked.by_node_port})


def _replaced(old: NodeState, new: NodeState) -> tuple[tuple[ServicePortState, ...], tuple[ServicePortState, ...]]:
    """(the ports of `old` that are not in `new`, the ports of `new` that were not in `old`), by
    identity: StateBuilder hands unchanged services back as the very same objects."""
    if new.changes is not None and new.changes.applies_to(old):
        return new.changes.gone, new.changes.came
    before, after = {id(p) for p in old.ports}, {id(p) for p in new.ports}
    return tuple(p for p in old.ports if id(p) not in after), tuple(p for p in new.ports if id(p) not in before)


def ports_to_check(old: NodeState | None, new: NodeState) -> tuple[ServicePortState, ...]:
    """The UDP ports of `new` to check against the kernel: all of them when `old` is None (the first
    sync after a start), otherwise those whose serving endpoints or addresses differ from `old`."""
    if old is None:
        return tuple(p for p in new.ports if p.protocol is Protocol.UDP)
    went, came = _replaced(old, new)
    before = {_key(p): p for p in went if p.protocol is Protocol.UDP}
    out = []
    for p in came:
        if p.protocol is not Protocol.UDP:
            continue
        prev = before.get(_key(p))
        if prev is None or _watched(prev) != _watched(p):
            out.append(p)
    return tuple(out)


def _key(p: ServicePortState) -> tuple[object, ...]:
    return (p.name, p.protocol, p.family)


def _watched(p: ServicePortState) -> tuple[object, ...]:
    return (serving(p), _service_ips(p), p.port, p.node_port)


def _service_ips(p: ServicePortState) -> tuple[IPAddress, ...]:
    return (p.cluster_ip, *p.external_ips, *p.load_balancer_ips)


def _hostport(ip: IPAddress, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"

