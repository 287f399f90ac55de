"""trace(ruleset, packet) → where a new connection goes in IPVS mode, read off the virtual servers,
the ipsets and the iptables payload (compiled, or dumped from a node).

The walk follows the hooks a first packet passes on a node in IPVS mode:

    from another host or a pod:  mangle PREROUTING → nat PREROUTING → (routing: the kube-ipvs0
        addresses and the node's own are local) → filter INPUT → IPVS (LOCAL_IN) → filter OUTPUT
        → nat POSTROUTING; a packet for another host takes filter FORWARD → nat POSTROUTING
    from the node itself:        mangle OUTPUT → nat OUTPUT → IPVS (LOCAL_OUT) → filter OUTPUT →
        nat POSTROUTING; a packet IPVS leaves alone loops back to a local address: filter INPUT

The iptables chains are run by the iptables tracer, with `-m set` answered from the Ruleset's
ipsets. IPVS itself: a firewall-mark virtual server whose mark equals the packet's is looked up
first, then the (protocol, address, port) one. The connection goes to each real server with a
positive weight in proportion to its weight (what rr and wrr give over many first connections;
persistence only matters from the second). A virtual server without such a real server answers
ICMP port-unreachable (ip_vs_leave): the outcome is "reject", with the virtual server as the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from netkit.model import Protocol
from netkit.model.types import IPAddress, IPNetwork
from netkit.rules.iptables import ruleset as ipt
from netkit.rules.iptables.trace import Branch, hook, outcomes
from netkit.rules.ipvs.entries import SetEntry
from netkit.rules.ipvs.ruleset import IPSet, Ruleset, VirtualServer, VSKey, _real_line, _service_line, hostport
from netkit.rules.tracing import Outcome, Packet, Step

__all__ = ["trace"]

_PROTOCOLS = {p.lower: p for p in Protocol}


def trace(ruleset: Ruleset, pkt: Packet) -> list[Outcome]:
    """Every outcome of a new connection, most likely first; probabilities add up to 1."""
    ipvs0 = sorted(ruleset.addresses, key=lambda a: (a.version, int(a)))
    local = tuple(dict.fromkeys((*pkt.local_addresses, *ipvs0)))
    pkt = replace(pkt, local_addresses=local)
    rules = ruleset.iptables
    start = Branch(1.0, pkt, sets=_lookup(ruleset.sets))
    done: list[Branch] = []
    if pkt.from_node:
        live = _run(rules, [("mangle", "OUTPUT"), ("nat", "OUTPUT")], [start], done)
        translated, untouched = _ipvs(ruleset, live, done)
        out = _run(rules, [("filter", "OUTPUT")], translated + untouched, done)
        for b in out:
            if b.dnat is None and b.pkt.dst in local:
                _finish(_run(rules, [("filter", "INPUT")], [b], done), done)
            else:
                _finish(_run(rules, [("nat", "POSTROUTING")], [b], done), done)
        return outcomes(done)
    live = _run(rules, [("mangle", "PREROUTING"), ("nat", "PREROUTING")], [start], done)
    for b in live:
        if b.pkt.dst not in local:
            _finish(_run(rules, [("filter", "FORWARD"), ("nat", "POSTROUTING")], [b], done), done)
            continue
        translated, untouched = _ipvs(ruleset, _run(rules, [("filter", "INPUT")], [b], done), done)
        _finish(untouched, done)  # delivered to the node itself
        _finish(_run(rules, [("filter", "OUTPUT"), ("nat", "POSTROUTING")], translated, done), done)
    return outcomes(done)


def _run(rules: ipt.Ruleset, hooks: list[tuple[str, str]], branches: list[Branch],
         done: list[Branch]) -> list[Branch]:
    """Run built-in chains in turn; branches dropped or rejected go to `done`, the rest go on."""
    for table, chain in hooks:
        nxt = []
        for b in hook(rules, table, chain, branches):
            if b.verdict in ("drop", "reject"):
                done.append(b)
            else:
                if b.verdict != "masquerade":
                    b.verdict = None
                nxt.append(b)
        branches = nxt
    return branches


def _finish(branches: list[Branch], done: list[Branch]) -> None:
    """Delivered (masqueraded when POSTROUTING said so)."""
    done.extend(branches)


def _ipvs(r: Ruleset, branches: list[Branch], done: list[Branch]) -> tuple[list[Branch], list[Branch]]:
    """IPVS on each branch: (branches sent to a real server, branches no virtual server took)."""
    translated: list[Branch] = []
    untouched: list[Branch] = []
    for b in branches:
        vs = _virtual_server(r, b.pkt)
        if vs is None:
            untouched.append(b)
            continue
        step = Step("ipvs", str(vs.key), 0, _service_line(vs))
        b.steps.append(step)
        reals = [(i, rs) for i, rs in enumerate(vs.reals, 1) if rs.weight > 0]
        total = sum(rs.weight for _, rs in reals)
        if not reals:
            b.verdict, b.reason = "reject", step
            done.append(b)
            continue
        for i, rs in reals:
            fork = b.fork(b.p * rs.weight / total) if len(reals) > 1 else b
            pick = Step("ipvs", str(vs.key), i, _real_line(vs, rs))
            fork.steps.append(pick)
            fork.dnat, fork.reason = hostport(rs.ip, rs.port), pick
            fork.pkt = replace(fork.pkt, dst=rs.ip, dport=rs.port)
            translated.append(fork)
    return translated, untouched


def _virtual_server(r: Ruleset, pkt: Packet) -> VirtualServer | None:
    if pkt.mark:
        for vs in r.services:
            if vs.fwmark and vs.fwmark == pkt.mark and vs.family.value == f"IPv{pkt.dst.version}":
                return vs
    proto = _PROTOCOLS.get(pkt.proto)
    return r.index.get(VSKey(proto, pkt.dst, pkt.dport)) if proto else None


def _lookup(sets: tuple[IPSet, ...]) -> Callable[[str, tuple[str, ...], Packet], bool]:
    """`-m set --match-set NAME dims` against the Ruleset's sets, read through their typed entries."""
    by_name = {s.name: s for s in sets}
    nets: dict[str, dict[Head, list[IPNetwork]]] = {}

    def member(name: str, dims: tuple[str, ...], pkt: Packet) -> bool:
        s = by_name.get(name)
        if s is None:
            return False
        kinds = s.type.split(":", 1)[1].split(",")
        ip: IPAddress | None = None
        ip2: IPAddress | None = None
        protocol: Protocol | None = None
        port: int | None = None
        for i, (kind, dim) in enumerate(zip(kinds, dims, strict=False)):
            addr: IPAddress = pkt.dst if dim == "dst" else pkt.src
            if kind == "ip":
                if i == 0:
                    ip = addr
                else:
                    ip2 = addr
            elif kind == "port":
                protocol = None if s.type.startswith("bitmap") else _PROTOCOLS.get(pkt.proto)
                if protocol is None and not s.type.startswith("bitmap"):
                    return False  # a protocol no entry can name
                port = pkt.dport if dim == "dst" else pkt.sport
            elif kind == "net":
                head = (ip, protocol, port)
                return any(addr.version == net.version and addr in net for net in _nets(s, nets).get(head, ()))
        return SetEntry(ip=ip, protocol=protocol, port=port, ip2=ip2) in s.typed()

    return member


Head = tuple[object, object, object]


def _nets(s: IPSet, cache: dict[str, dict[Head, list[IPNetwork]]]) -> dict[Head, list[IPNetwork]]:
    """A hash:…net set's networks by the rest of the entry (address, protocol, port)."""
    if s.name not in cache:
        out: dict[Head, list[IPNetwork]] = {}
        for e in s.typed():
            if e.net is not None:
                out.setdefault(e.ip_port, []).append(e.net)
        cache[s.name] = out
    return cache[s.name]
