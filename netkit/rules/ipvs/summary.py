"""Read an IPVS Ruleset back per service port: the real servers a virtual server sends to
(`summarize`, for diff), its own objects (`objects`, for the plan summary), and the names a dump
lacks (`live_names`: the kernel keeps no comments). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from netkit.model import Protocol
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.entries import SetEntry
from netkit.rules.ipvs.ruleset import Ruleset, VirtualServer, hostport


def summarize(ruleset: Ruleset) -> Mapping[str, tuple[str, ...]]:
    """Service port ("ns/svc:port/proto", from the clusterIP virtual server's comment) → its real
    servers with a non-zero weight. A kernel dump carries no names: its virtual servers are
    keyed by "proto IP:port" instead."""
    out: dict[str, tuple[str, ...]] = {}
    for vs in ruleset.services:
        if vs.comment and vs.role != "cluster IP":
            continue
        key = f"{vs.port_name}/{vs.protocol.lower}" if vs.comment else str(vs.key)
        out[key] = tuple(hostport(r.ip, r.port) for r in vs.reals if r.weight > 0)
    return out


def live_names(desired: Ruleset) -> dict[str, tuple[str, bool]]:
    """A dump's key of each virtual server ("proto IP:port") → (the service port of the desired
    virtual server with that address, whether it is the cluster IP's), so both sides line up."""
    return {str(vs.key): (f"{vs.port_name}/{vs.protocol.lower}", vs.role == "cluster IP")
            for vs in desired.services if vs.comment}


def objects(ruleset: Ruleset, names: Mapping[str, str]) -> dict[str, set[str]]:
    """Each service port's virtual servers and real servers, and the ipset entries that name them
    (what IPVS mode writes per Service besides the virtual servers), labelled with the aspect the
    set stands for: masquerade, policy (the *-LOCAL sets and the eTP=Local fwmark virtual server),
    firewall (source ranges), the no-endpoints reject; a real server's hairpin entry goes with it."""
    out: dict[str, set[str]] = {}
    sets = _ipvs_sets(ruleset)
    for vs in ruleset.services:
        key = f"{vs.port_name}/{vs.protocol.lower}" if vs.comment else str(vs.key)
        own = out.setdefault(key, set())
        policy = " (external traffic policy Local, in-cluster)" if vs.fwmark else ""
        own.add(f"virtual {vs.address()} scheduler {vs.scheduler}{policy}")
        if vs.persistent:
            own.add(f"virtual {vs.address()} persistent {vs.persistent}")
        own.update(f"real {vs.address()} {hostport(r.ip, r.port)} {r.weight}" for r in vs.reals)
        own.update(_ipvs_entries(vs, ruleset, sets))
    return out


# ipset base name → what its entries are for, in the words of the aspects (see _CLASSES)
_IPVS_SET_ASPECT = {
    n.CLUSTER_IP: "masquerade", n.EXTERNAL_IP: "masquerade", n.LOAD_BALANCER: "masquerade",
    n.EXTERNAL_IP_LOCAL: "local endpoints", n.LOAD_BALANCER_LOCAL: "local endpoints",
    n.LOAD_BALANCER_FW: "firewall", n.LOAD_BALANCER_SOURCE_CIDR: "firewall",
    n.HEALTH_CHECK_NODE_PORT: "local endpoints",
    **{n.NODE_PORT.format(proto=p.value): "masquerade" for p in Protocol},
    **{n.NODE_PORT_LOCAL.format(proto=p.value): "local endpoints" for p in Protocol},
}


_IPVSSet = tuple[str, str, frozenset[SetEntry], dict[tuple[object, object, object], list[SetEntry]]]


def _ipvs_sets(ruleset: Ruleset) -> list[_IPVSSet]:
    """(set name, aspect, typed entries, entries by their (ip, protocol, port) head for hash:…,net sets)."""
    out = []
    for s in ruleset.sets:
        base = next((b for b in (*_IPVS_SET_ASPECT, n.NO_ENDPOINTS)
                     if n.set_name(b, ruleset.family) == s.name), None)
        if base is None:
            continue
        heads: dict[tuple[object, object, object], list[SetEntry]] = {}
        if s.type.endswith(",net"):
            for e in s.typed():
                heads.setdefault(e.ip_port, []).append(e)
        out.append((s.name, _IPVS_SET_ASPECT.get(base, "reject"), s.typed(), heads))
    return out


def _ipvs_entries(vs: VirtualServer, ruleset: Ruleset, sets: list[_IPVSSet]) -> set[str]:
    if vs.ip is None:
        return set()
    ipport = SetEntry(vs.ip, vs.protocol, vs.port)
    node_port = vs.ip not in ruleset.addresses  # a NodePort's virtual server is on a node address
    found: set[str] = set()
    for name, aspect, entries, heads in sets:
        if aspect == "reject":  # KUBE-NO-ENDPOINTS: the whole Service rejects only when its cluster IP does
            if ipport in entries:
                found.add(f"set {name} {ipport}: reject" if not node_port and vs.role in (
                    "cluster IP", "") else f"set {name} {ipport} rejected")
            continue
        hits = heads.get(ipport.ip_port, []) if heads else [
            e for e in (SetEntry(port=vs.port) if node_port else ipport,) if e in entries]
        found.update(f"set {name} {e} ({aspect})" for e in hits)
    loop = n.set_name(n.LOOP_BACK, ruleset.family)
    hairpin = next((s.typed() for s in ruleset.sets if s.name == loop), frozenset())
    for r in vs.reals:
        if SetEntry(r.ip, vs.protocol, r.port, ip2=r.ip) in hairpin:  # its hairpin masquerade goes with it
            found.add(f"real {vs.address()} {hostport(r.ip, r.port)} hairpin")
    return found
