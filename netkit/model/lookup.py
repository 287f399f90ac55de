"""Which service port a destination belongs to, and a kubectl-style `SERVICE.NAMESPACE[:PORT]`
name resolved to one — read from the model (NodeState), never from rules. Pure: no IO."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from netkit.errors import NetkitError
from netkit.model.state import NodeState, ServicePortState
from netkit.model.types import IPAddress


@dataclass(frozen=True, slots=True)
class Match:
    port: ServicePortState
    via: str  # "cluster IP", "external IP", "load-balancer IP", "node port"

    def to_json(self) -> dict[str, object]:
        p = self.port
        return {"namespace": p.name.ref.namespace, "name": p.name.ref.name, "port": p.name.port,
                "protocol": p.protocol.lower, "number": p.port, "via": self.via}

    def line(self) -> str:
        p = self.port
        number = f"{p.port}/{p.protocol.lower}"
        port = f"port {p.name.port} ({number})" if p.name.port else f"port {number}"
        via = f"node port {p.node_port}" if self.via == "node port" else self.via
        return f"Service {p.name.ref.namespace}/{p.name.ref.name} {port}, {via}"


def match(state: NodeState, dst: IPAddress, dport: int, proto: str,
          local: Iterable[IPAddress] = ()) -> Match | None:
    """The service port a packet to dst:dport/proto meets (a node port on any of `local`)."""
    node = set(local)
    for p in state.ports:
        if p.protocol.lower != proto:
            continue
        if dport == p.port:
            for via, ips in (("cluster IP", (p.cluster_ip,)), ("external IP", p.external_ips),
                             ("load-balancer IP", p.load_balancer_ips)):
                if dst in ips:
                    return Match(p, via)
        if p.node_port == dport and dst in node:
            return Match(p, "node port")
    return None


def owners(state: NodeState, dst: IPAddress) -> list[ServicePortState]:
    """Every service port with `dst` as a cluster, external or load-balancer IP."""
    return [p for p in state.ports if dst == p.cluster_ip or dst in p.external_ips or dst in p.load_balancer_ips]


def miss(state: NodeState, dst: IPAddress, dport: int, proto: str) -> str:
    """Why no service port matched, for people."""
    found = owners(state, dst)
    if not found:
        return f"no Service has {dst}"
    ref = found[0].name.ref
    ports = ", ".join(sorted({f"{p.port}/{p.protocol.lower}" for p in found}))
    return f"{dst} is Service {ref.namespace}/{ref.name}'s, which has no port {dport}/{proto} (it has {ports})"


def resolve(state: NodeState, text: str, family_version: int | None = None) -> ServicePortState:
    """`SERVICE.NAMESPACE[:PORT][/PROTO]` (PORT: a number or the port's name) → its service port."""
    target, _, proto = text.partition("/")
    name, _, port = target.partition(":")
    svc, dot, ns = name.partition(".")
    if not dot or not svc or not ns:
        raise NetkitError(f"--to {text!r}: expected IP:PORT[/PROTO] or SERVICE.NAMESPACE[:PORT][/PROTO], "
                          "e.g. web.default:80")
    ports = [p for p in state.ports if p.name.ref.name == svc and p.name.ref.namespace == ns
             and (family_version is None or p.cluster_ip.version == family_version)]
    if not ports:
        raise NetkitError(f"--to {text!r}: no Service {ns}/{svc} with a cluster IP in the input")
    chosen = [p for p in ports if (not port or port in (p.name.port, str(p.port)))
              and (not proto or p.protocol.lower == proto.lower())]
    families = {p.cluster_ip.version for p in chosen}
    if len(chosen) > 1 and len(families) > 1:
        chosen = [p for p in chosen if p.cluster_ip.version == 4]
    if len(chosen) != 1:
        have = ", ".join(sorted({f"{p.name.port or p.port} ({p.port}/{p.protocol.lower})" for p in ports}))
        what = "names more than one port" if chosen else "matches no port"
        raise NetkitError(f"--to {text!r}: {what} of {ns}/{svc} (its ports: {have}); give :PORT[/PROTO]")
    return chosen[0]
