"""compile(state, config, family) → Ruleset: kube-proxy's IPVS layout, as a pure function.

- Every service IP (clusterIP, externalIPs, LB IPs) goes on the dummy `kube-ipvs0` as a /32 (/128):
  the kernel then treats it as local and IPVS takes the traffic on INPUT (or OUTPUT for the node).
- One virtual server per (IP, port, protocol), and per node IP for a NodePort; real servers in NAT
  mode, weight 1. Internal traffic policy picks the clusterIP's endpoints, external traffic policy
  those of external IPs, LB IPs and NodePorts. The scheduler is `config.ipvs_scheduler` unless the
  service carries the annotation `SCHEDULER_ANNOTATION` (kube-router's) naming a valid one.
- ClientIP affinity is IPVS persistence with the affinity timeout.
- A service without usable endpoints keeps its virtual server with no real server (nothing else on
  the node can answer in its place), and its (IP, port) goes into KUBE-NO-ENDPOINTS: filter INPUT
  refuses new TCP connections with a reset and the rest with ICMP before IPVS sees them. IPVS's own
  answer (ip_vs_leave) is ICMP even for TCP, rate-limited per peer (kubernetes#90810).
- eTP=Local and kubernetes#75262: with only local endpoints on an external address, pods and the
  node itself would be black-holed on a node without a local endpoint (the address is local here,
  so their traffic never reaches the real load balancer). kube-proxy's iptables mode sends such
  in-cluster traffic to all cluster endpoints; we do the same with a firewall-mark virtual server
  holding the cluster endpoints, marked in mangle for pod-sourced (local-traffic detector) and
  node-sourced packets. IPVS looks fwmark services up before address services.
- The iptables payload and ipsets follow kube-proxy's IPVS mode: masquerade via KUBE-CLUSTER-IP /
  KUBE-NODE-PORT-* / KUBE-LOAD-BALANCER, hairpin via KUBE-LOOP-BACK, LB source ranges in filter,
  KUBE-IPVS-FILTER rejecting ports of service IPs that no virtual server serves. It is an iptables
  Ruleset in the iptables backend's canonical (iptables-save) spelling, entry jumps included in the
  built-in chains, so a dump compares to it rule by rule and the iptables planner and kernel write
  only the chains that differ.

Per service port, `compile_port(ctx, sp, mark) → Part`: its virtual servers, addresses, set entries
and mangle rules. `Compiler` keeps the Part of every ServicePortState it has seen, keyed on the
object's identity in the memo every backend shares (rules/memo.py), and the totals (reference
counts of addresses and set entries, the virtual servers by key, their sorted order), so a sync
after one EndpointSlice change compiles one service port and rebuilds only the sets it touched;
each result says which virtual servers, sets and chains can differ from the one before
(`Ruleset.since`, a `Changes`), and the backend's plan compares only those. `compile()` is a
fresh Compiler's first compile:
the full and the incremental path are one code path.
"""

from __future__ import annotations

import hashlib
import weakref
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from netkit.change import Since
from netkit.config import Config
from netkit.model import EndpointAddr, IPFamily, NodeState, Protocol, ServicePortState
from netkit.model.state import PortChanges
from netkit.model.types import IPAddress
from netkit.rules.iptables import ruleset as ipt
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.entries import SetEntry
from netkit.rules.ipvs.ruleset import (
    SCHEDULERS,
    Changes,
    Entries,
    IPSet,
    RealServer,
    Ruleset,
    VirtualServer,
    VSKey,
    hostport,
    with_index,
)
from netkit.rules.memo import PortMemo

SCHEDULER_ANNOTATION = "kube-router.io/service.scheduler"


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:  # noqa: A001 (the stage name)
    return Compiler(config, family).compile(state)


@dataclass(frozen=True, slots=True)
class Context:
    """What every service port's Part depends on besides the port itself and its mark."""

    config: Config
    family: IPFamily
    node_ips: tuple[IPAddress, ...]  # the NodePort addresses


@dataclass(frozen=True, slots=True)
class Part:
    """Everything one service port contributes to the Ruleset."""

    services: tuple[VirtualServer, ...]
    entries: tuple[tuple[str, str], ...]  # (set base name, entry); its kube-ipvs0 addresses are IPVS_IPS entries
    addresses: tuple[IPAddress, ...]
    mangle: tuple[str, ...]  # its KUBE-IPVS-INTERNAL rules (canonical text)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """What the Compiler remembers of one service port: the Part made from it with this mark."""

    port: ServicePortState
    mark: int
    part: Part


def compile_port(ctx: Context, sp: ServicePortState, mark: int) -> Part:
    mine = virtual_servers(sp, ctx.config, ctx.node_ips, mark)
    entries: dict[str, set[str]] = {}
    add_set_entries(entries, sp, mine, ctx.family)
    addresses = tuple(dict.fromkeys((sp.cluster_ip, *sp.external_ips, *sp.load_balancer_ips)))
    flat = [(base, e) for base, es in entries.items() for e in es]
    flat += [(n.IPVS_IPS, str(a)) for a in addresses]
    mangle = mark_rules(sp, mark, ctx.node_ips, ctx.config, ctx.family) if mark else ()
    return Part(tuple(mine), tuple(flat), addresses, mangle)


@dataclass
class _Touched:
    services: set[VSKey] = field(default_factory=set)
    sets: set[str] = field(default_factory=set)  # base names
    addr_came: set[IPAddress] = field(default_factory=set)  # kube-ipvs0 addresses new, and gone (net of
    addr_went: set[IPAddress] = field(default_factory=set)  # a port removed and added back)
    mangle: bool = False
    bulk: bool = False  # a fresh compile: virtual servers are sorted once at the end
    came: dict[str, set[str]] = field(default_factory=dict)  # set base name → entries new in it
    went: dict[str, set[str]] = field(default_factory=dict)  # … and gone from it

    @property
    def addresses(self) -> bool:
        return bool(self.addr_came or self.addr_went)

    def flip_address(self, a: IPAddress, present: bool) -> None:
        undo, do = (self.addr_went, self.addr_came) if present else (self.addr_came, self.addr_went)
        if a in undo:
            undo.discard(a)
        else:
            do.add(a)

    def flip(self, base: str, entry: str, present: bool) -> None:
        """An entry came (present) or went; one that goes and comes back in one compile is no change."""
        came, went = self.came.setdefault(base, set()), self.went.setdefault(base, set())
        undo, do = (went, came) if present else (came, went)
        if entry in undo:
            undo.discard(entry)
        else:
            do.add(entry)
        if came or went:
            self.sets.add(base)
        else:
            self.sets.discard(base)


class Compiler:
    """`compile` with a memory (see the module doc). Its results equal a fresh `compile`'s, and
    planning with what a result's `since` names gives the plan a full comparison gives (property
    tests in tests/unit/test_ipvs_incremental.py)."""

    def __init__(self, config: Config, family: IPFamily) -> None:
        self.config, self.family = config, family
        self._fixed = _fixed_chains(config, family)
        self._reset(None)

    def _reset(self, node_ips: tuple[IPAddress, ...] | None) -> None:
        self._node_ips = node_ips
        self._memo: PortMemo[_Compiled] = PortMemo()  # a port's Part, kept while its mark stays
        self._services: dict[VSKey, VirtualServer] = {}
        self._contenders: dict[VSKey, list[VirtualServer]] = {}  # keys that two service ports claim
        self._sorted: list[VirtualServer] = []  # the winners, sorted by key
        self._addresses: Counter[IPAddress] = Counter()
        self._entries: dict[str, Counter[str]] = {base: Counter() for base in n.SET_TYPES}
        self._mangle: dict[int, tuple[tuple[str, str], tuple[str, ...]]] = {}
        self._sets: dict[str, IPSet] = {}
        self._result: Ruleset | None = None
        self._state: NodeState | None = None  # the state of the last compile (NodeState.changes' base)
        self._marks: dict[tuple[str, str], int] = {}  # (port name, protocol) → its firewall mark

    def compile(self, state: NodeState) -> Ruleset:
        node_ips = node_port_ips(state.node.ips, self.config, self.family)
        fresh = node_ips != self._node_ips
        if fresh:
            self._reset(node_ips)
        ctx = Context(self.config, self.family, node_ips)
        t = _Touched(bulk=fresh)
        previous, self._state = self._state, state
        changes = state.changes
        if not (changes is not None and changes.applies_to(previous) and self._follow(ctx, changes, t)):
            self._walk(ctx, state.family(self.family), t)
        if fresh:
            self._sorted = sorted(self._services.values(), key=_sort_key)
        before = self._result
        result = self._build(t, fresh)
        changes_ = None if fresh else Changes(
            frozenset(t.services), frozenset(n.set_name(b, self.family) for b in t.sets), t.addresses,
            frozenset({n.INTERNAL_MARK}) if t.mangle else frozenset(),
            {n.set_name(b, self.family): (frozenset(t.came[b]), frozenset(t.went[b])) for b in t.sets})
        if changes_ is not None and before is not None:  # what the planner needs to know, on the result
            result = with_index(replace(result, since=Since(weakref.ref(before), changes_)), result.index)
        self._result = result
        return result

    def _walk(self, ctx: Context, ports: Sequence[ServicePortState], t: _Touched) -> None:
        """Every port: an unchanged one (the very object, the same mark) keeps its Part."""
        marks = fwmarks(ports)
        self._marks = {_mark_key(sp): m for sp in ports if (m := marks.get(id(sp), 0))}

        def compiled(sp: ServicePortState) -> _Compiled:
            mark = marks.get(id(sp), 0)
            return _Compiled(sp, mark, compile_port(ctx, sp, mark))

        walk = self._memo.run(ports, compiled, keep=lambda c: c.mark == marks.get(id(c.port), 0))
        for c in walk.gone:  # service ports that changed, went away or whose mark moved
            self._remove(id(c.port), c.part, t)
        for c in walk.came:
            self._add(id(c.port), c.port, c.part, t)

    def _follow(self, ctx: Context, changes: PortChanges, t: _Touched) -> bool:
        """Only the ports NodeState.changes names (every other one is the very object it was):
        costs what the change costs. False, having done nothing, when the firewall marks of other
        ports would move (a port needing one came or went: marks are given in name order)."""
        gone = [sp for sp in changes.gone if sp.family is self.family]
        came = [sp for sp in changes.came if sp.family is self.family]
        dropped = {_mark_key(sp) for sp in gone if _needs_fwmark(sp)}
        if (self._marks.keys() - dropped) | {_mark_key(sp) for sp in came if _needs_fwmark(sp)} != self._marks.keys():
            return False
        def compiled(sp: ServicePortState) -> _Compiled:
            mark = self._marks[_mark_key(sp)] if _needs_fwmark(sp) else 0
            return _Compiled(sp, mark, compile_port(ctx, sp, mark))

        came_parts, gone_parts = self._memo.update(gone, came, compiled)
        for c in gone_parts:
            self._remove(id(c.port), c.part, t)
        for c in came_parts:
            self._add(id(c.port), c.port, c.part, t)
        return True

    # --- bookkeeping -------------------------------------------------------------------------------

    def _add(self, ident: int, sp: ServicePortState, part: Part, t: _Touched) -> None:
        for vs in part.services:
            self._add_service(vs, t)
        self._count(part, 1, t)
        if part.mangle:
            self._mangle[ident] = ((str(sp.name), sp.protocol.value), part.mangle)
            t.mangle = True

    def _remove(self, ident: int, part: Part, t: _Touched) -> None:
        for vs in part.services:
            self._remove_service(vs, t)
        self._count(part, -1, t)
        if self._mangle.pop(ident, None) is not None:
            t.mangle = True

    def _count(self, part: Part, delta: int, t: _Touched) -> None:
        """Reference counts of set entries and addresses; a set (the addresses) is touched when an
        entry (an address) comes (0 → 1) or goes (1 → 0)."""
        if t.bulk and delta > 0:  # a fresh compile rebuilds every set: only the counts matter
            for base, entry in part.entries:
                c = self._entries[base]
                c[entry] = c.get(entry, 0) + 1
            for a in part.addresses:
                self._addresses[a] = self._addresses.get(a, 0) + 1
            return
        flips = 1 if delta > 0 else 0
        for base, entry in part.entries:
            c = self._entries[base]
            now = c[entry] + delta
            if now == flips:
                t.flip(base, entry, delta > 0)
            if now:
                c[entry] = now
            else:
                del c[entry]
        for a in part.addresses:
            now = self._addresses[a] + delta
            if now == flips:
                t.flip_address(a, delta > 0)
            if now:
                self._addresses[a] = now
            else:
                del self._addresses[a]

    def _add_service(self, vs: VirtualServer, t: _Touched) -> None:
        k = vs.key
        t.services.add(k)
        cur = self._services.get(k)
        if cur is None:
            self._services[k] = vs
            if not t.bulk:  # a fresh compile sorts them all once at the end
                insort(self._sorted, vs, key=_sort_key)
            return
        contenders = self._contenders.setdefault(k, [cur])
        contenders.append(vs)
        self._crown(k, min(contenders, key=_claim), t)

    def _remove_service(self, vs: VirtualServer, t: _Touched) -> None:
        k = vs.key
        t.services.add(k)
        contenders = self._contenders.get(k)
        if contenders is None:
            del self._services[k]
            del self._sorted[bisect_left(self._sorted, k.sort_key, key=_sort_key)]
            return
        del contenders[next(i for i, c in enumerate(contenders) if c is vs)]
        self._crown(k, min(contenders, key=_claim), t)
        if len(contenders) == 1:
            del self._contenders[k]

    def _crown(self, k: VSKey, vs: VirtualServer, t: _Touched) -> None:
        """`vs` is now the virtual server of key `k` (which stays)."""
        self._services[k] = vs
        if not t.bulk:
            self._sorted[bisect_left(self._sorted, k.sort_key, key=_sort_key)] = vs

    def _build(self, t: _Touched, fresh: bool) -> Ruleset:
        last = None if fresh else self._result
        for base in (n.SET_TYPES if last is None else t.sets):
            typ, comment = n.SET_TYPES[base]
            name = n.set_name(base, self.family)
            was = self._sets.get(name) if last is not None else None
            # one change patches the chunks it touches (KUBE-LOOP-BACK: an entry per endpoint)
            entries = was.entries.changed(t.came[base], t.went[base]) if was is not None and isinstance(
                was.entries, Entries) else Entries(self._entries[base])
            self._sets[name] = IPSet(name, typ, self.family, entries, comment)
        sets = last.sets if last is not None and not t.sets else tuple(self._sets[k] for k in sorted(self._sets))
        index: Mapping[VSKey, VirtualServer]
        if last is not None and not t.services:
            services, index = last.services, last.index
        else:
            services, index = tuple(self._sorted), dict(self._services)
        if last is None:
            addresses = frozenset(self._addresses)
        elif t.addresses:  # from the last ones: hashing 10,000 ipaddress objects again costs ~3 ms
            addresses = (last.addresses - t.addr_went) | t.addr_came
        else:
            addresses = last.addresses
        payload = last.iptables if last is not None and not t.mangle else self._payload()
        keep = tuple(net for net in self.config.ipvs_exclude_cidrs
                     if net.version == (4 if self.family is IPFamily.IPV4 else 6))
        return with_index(Ruleset(self.family, services, addresses, sets, payload, keep), index)

    def _payload(self) -> ipt.Ruleset:
        mangle = tuple(rule for _, rules in sorted(self._mangle.values()) for rule in rules)
        tables = {table: dict(chains) for table, chains in self._fixed.items()}
        tables["mangle"][n.INTERNAL_MARK] = mangle
        return ipt.Ruleset(self.family, tables)


def _mark_key(sp: ServicePortState) -> tuple[str, str]:
    return (str(sp.name), sp.protocol.value)


def _sort_key(vs: VirtualServer) -> tuple[int, int, int, int, str]:
    return vs.key.sort_key


def _claim(vs: VirtualServer) -> str:
    """Of service ports claiming one virtual server (the same external IP and port, say), the first
    by name wins, whatever order they came in."""
    return vs.comment


def node_port_ips(ips: Sequence[IPAddress], config: Config, family: IPFamily) -> tuple[IPAddress, ...]:
    """The node's addresses of this family, narrowed to nodePortAddresses when set."""
    mine = [ip for ip in ips if IPFamily.of(ip) is family]
    if config.node_port_addresses:
        mine = [ip for ip in mine if any(ip in net for net in config.node_port_addresses
                                         if IPFamily.of(net) is family)]
    return tuple(mine)


def scheduler(sp: ServicePortState, config: Config) -> str:
    wanted = dict(sp.annotations).get(SCHEDULER_ANNOTATION)
    return wanted if wanted in SCHEDULERS else config.ipvs_scheduler


def fwmarks(ports: Sequence[ServicePortState]) -> dict[int, int]:
    """A stable firewall mark per service port (by the port object's id) that needs the anti-#75262
    fwmark service: hashed from its name (so marks do not move when other services come and go),
    linear probing on a clash."""
    taken: set[int] = set()
    out: dict[int, int] = {}
    for sp in sorted((p for p in ports if _needs_fwmark(p)), key=lambda p: (str(p.name), p.protocol.value)):
        slot = _slot(f"{sp.name}/{sp.protocol.lower}")
        while slot in taken:
            slot = (slot + 1) % n.FWMARK_SLOTS
        taken.add(slot)
        out[id(sp)] = n.FWMARK_BASE | slot
    return out


@lru_cache(maxsize=65536)
def _slot(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4]) % n.FWMARK_SLOTS


def _needs_fwmark(sp: ServicePortState) -> bool:
    return sp.external_policy_local and sp.externally_accessible and bool(sp.cluster_endpoints)


def virtual_servers(sp: ServicePortState, config: Config, node_ips: Sequence[IPAddress],
                    mark: int) -> list[VirtualServer]:
    internal, external = sp.internal.endpoints, sp.external.endpoints  # the model decided (no endpoints: none)
    sched = scheduler(sp, config)

    made: dict[int, tuple[RealServer, ...]] = {}  # by the endpoint tuple's identity: made once, shared
    name = str(sp.name)

    def vs(ip: IPAddress | None, port: int, eps: tuple[EndpointAddr, ...], what: str, fw: int = 0) -> VirtualServer:
        reals = made.get(id(eps))
        if reals is None:
            # in the model's endpoint order, which is RealServer's (family, address, port)
            reals = made[id(eps)] = tuple([RealServer(e.ip, e.port) for e in eps])
        return VirtualServer(sp.protocol, ip, port, sched, sp.affinity_timeout, fw, sp.family, reals,
                             f"{name} {what}")

    out = [vs(sp.cluster_ip, sp.port, internal, "cluster IP")]
    out += [vs(ip, sp.port, external, "external IP") for ip in sp.external_ips]
    out += [vs(ip, sp.port, external, "loadbalancer IP") for ip in sp.load_balancer_ips]
    if sp.node_port:
        out += [vs(ip, sp.node_port, external, "nodePort") for ip in node_ips]
    if mark:
        out.append(vs(None, 0, sp.cluster_endpoints, "in-cluster traffic to external addresses", mark))
    return out


def add_set_entries(entries: dict[str, set[str]], sp: ServicePortState, mine: Sequence[VirtualServer],
                    family: IPFamily) -> None:
    proto = sp.protocol.lower

    def ipport(ip: IPAddress, port: int) -> str:
        return f"{ip},{proto}:{port}"

    def add(base: str, *entry: str) -> None:
        entries.setdefault(base, set()).update(entry)

    add(n.CLUSTER_IP, ipport(sp.cluster_ip, sp.port))
    for ip in sp.external_ips:
        add(n.EXTERNAL_IP, ipport(ip, sp.port))
        if sp.external_policy_local:
            add(n.EXTERNAL_IP_LOCAL, ipport(ip, sp.port))
    for ip in sp.load_balancer_ips:
        add(n.LOAD_BALANCER, ipport(ip, sp.port))
        if sp.external_policy_local:
            add(n.LOAD_BALANCER_LOCAL, ipport(ip, sp.port))
        if sp.source_ranges:
            add(n.LOAD_BALANCER_FW, ipport(ip, sp.port))
            # ipset's spelling: a host-sized range without its /32 (/128), as `ipset save` and a dump print it
            add(n.LOAD_BALANCER_SOURCE_CIDR,
                *(str(SetEntry(ip, sp.protocol, sp.port, net=net)) for net in sp.source_ranges))
    if sp.node_port:
        add(n.NODE_PORT.format(proto=sp.protocol.value), str(sp.node_port))
        if sp.external_policy_local:
            add(n.NODE_PORT_LOCAL.format(proto=sp.protocol.value), str(sp.node_port))
    if sp.health_check_node_port:
        add(n.HEALTH_CHECK_NODE_PORT, str(sp.health_check_node_port))
    for vs in mine:
        if vs.ip is not None and not vs.reals:
            add(n.NO_ENDPOINTS, ipport(vs.ip, vs.port))
    distinct = {id(vs.reals): vs.reals for vs in mine if vs.reals}  # the virtual servers share their tuples
    for reals in distinct.values():
        add(n.LOOP_BACK, *(f"{ip},{proto}:{rs.port},{ip}" for rs in reals for ip in (str(rs.ip),)))


def mark_rules(sp: ServicePortState, mark: int, node_ips: Sequence[IPAddress], config: Config,
               family: IPFamily) -> tuple[str, ...]:
    """The mangle rules marking in-cluster traffic to one eTP=Local port's external addresses (see
    the module doc), canonical."""
    pods = config.local_match(family)
    rules: list[str] = []
    dests = [(ip, sp.port) for ip in (*sp.external_ips, *sp.load_balancer_ips)]
    dests += [(ip, sp.node_port) for ip in node_ips] if sp.node_port else []
    p = sp.protocol.lower
    for ip, port in dests:
        where = f"-d {ip}/{ip.max_prefixlen} -p {p} -m {p} --dport {port}"
        set_mark = f"-j MARK --set-xmark {mark:#x}/0xffffffff"
        comment = f'-m comment --comment "{sp.name} {hostport(ip, port)} in-cluster"'
        if pods:
            rules.append(f"{pods} {where} {comment} {set_mark}")
        rules.append(f"{where} {comment} -m addrtype --src-type LOCAL {set_mark}")
    return tuple(ipt.normalize(r, family) for r in rules)


# Entry jumps from the built-in chains, in the order they take at the head of each chain:
# table → chain → (target, comment, matches before the comment).
JUMPS: dict[str, dict[str, tuple[tuple[str, str, str], ...]]] = {
    "mangle": {"PREROUTING": ((n.INTERNAL_MARK, "netkit ipvs in-cluster marks", ""),),
               "OUTPUT": ((n.INTERNAL_MARK, "netkit ipvs in-cluster marks", ""),)},
    "filter": {
        "INPUT": ((n.PROXY_FIREWALL, "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),
                  (n.NODE_PORT_CHAIN, "kubernetes health check rules", ""),
                  (n.IPVS_FILTER, "kubernetes ipvs access filter", "")),
        "FORWARD": ((n.PROXY_FIREWALL, "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),
                    (n.FORWARD, "kubernetes forwarding rules", "")),
        "OUTPUT": ((n.PROXY_FIREWALL, "kubernetes load balancer firewall", "-m conntrack --ctstate NEW"),),
    },
    "nat": {"PREROUTING": ((n.SERVICES, "kubernetes service portals", ""),),
            "OUTPUT": ((n.SERVICES, "kubernetes service portals", ""),),
            "POSTROUTING": ((n.POSTROUTING, "kubernetes postrouting rules", ""),)},
}


def _jump_rule(target: str, comment: str, matches: str) -> str:
    return ipt.normalize(f'{matches} -m comment --comment "{comment}" -j {target}'.strip(), IPFamily.IPV4)


def entry_jumps() -> frozenset[tuple[str, str, str]]:
    """Every entry jump of IPVS mode as (table, built-in chain, rule) (the same in both families)."""
    return frozenset((table, chain, _jump_rule(*j)) for table, chains in JUMPS.items()
                     for chain, js in chains.items() for j in js)


def _fixed_chains(config: Config, family: IPFamily) -> dict[str, dict[str, tuple[str, ...]]]:
    """Every chain of the payload but KUBE-IPVS-INTERNAL's rules: they depend on the config only
    (the services live in the ipsets)."""
    tables: dict[str, dict[str, tuple[str, ...]]] = {}
    for table, lines in (("mangle", []), ("filter", _filter(config, family)), ("nat", _nat(config, family))):
        chains: dict[str, list[str]] = {c: [] for c in n.CHAINS[table]}
        for line in lines:
            if line.startswith("-A "):
                chain, _, rule = line[3:].partition(" ")
                chains[chain].append(ipt.normalize(rule, family))
        jumps = {chain: tuple(_jump_rule(*j) for j in js) for chain, js in JUMPS[table].items()}
        tables[table] = {**jumps, **{c: tuple(r) for c, r in chains.items()}}
    return tables


def _filter(config: Config, family: IPFamily) -> list[str]:
    def s(base: str) -> str:
        return n.set_name(base, family)

    reject = "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable"
    mark = config.masquerade_mark
    return [
        "*filter",
        *(f":{c} - [0:0]" for c in (n.FORWARD, n.NODE_PORT_CHAIN, n.PROXY_FIREWALL, n.SOURCE_RANGES_FIREWALL,
                                     n.IPVS_FILTER)),
        *([] if config.conntrack_tcp_be_liberal else [f"-A {n.FORWARD} -m conntrack --ctstate INVALID -j DROP"]),
        f'-A {n.FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT',
        f'-A {n.FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" '
        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f'-A {n.NODE_PORT_CHAIN} -m comment --comment "Kubernetes health check node port" '
        f"-m set --match-set {s(n.HEALTH_CHECK_NODE_PORT)} dst -j ACCEPT",
        f'-A {n.PROXY_FIREWALL} -m comment --comment "Kubernetes service load balancer ip + port for load balancer '
        f'with sourceRange" -m set --match-set {s(n.LOAD_BALANCER_FW)} dst,dst -j {n.SOURCE_RANGES_FIREWALL}',
        f"-A {n.SOURCE_RANGES_FIREWALL} -m set --match-set {s(n.LOAD_BALANCER_SOURCE_CIDR)} dst,dst,src -j RETURN",
        f"-A {n.SOURCE_RANGES_FIREWALL} -j DROP",
        # No endpoints: refused here, before IPVS, whose own answer (ip_vs_leave) is an ICMP error
        # rate-limited per peer even for TCP (kubernetes#90810). In-cluster traffic marked for an
        # eTP=Local address's fwmark virtual server is served by the cluster endpoints: not refused;
        # nor are open connections of a draining real server (the kernel keeps it at weight 0).
        *(f"-A {n.IPVS_FILTER} {proto}-m conntrack --ctstate NEW "
          f"-m mark ! --mark {n.FWMARK_BASE:#x}/{n.FWMARK_HIGH:#x} "
          f"-m set --match-set {s(n.NO_ENDPOINTS)} dst,dst -j REJECT --reject-with {how}"
          for proto, how in (("-p tcp ", "tcp-reset"), ("", reject))),
        *(f"-A {n.IPVS_FILTER} -m set --match-set {s(base)} {dims} -j RETURN"
          for base, dims in ((n.LOAD_BALANCER, "dst,dst"), (n.CLUSTER_IP, "dst,dst"), (n.EXTERNAL_IP, "dst,dst"),
                             (n.HEALTH_CHECK_NODE_PORT, "dst"))),
        *(f"-A {n.IPVS_FILTER} {proto}-m conntrack --ctstate NEW -m set --match-set {s(n.IPVS_IPS)} dst "
          f"-j REJECT --reject-with {how}" for proto, how in (("-p tcp ", "tcp-reset"), ("", reject))),
        "COMMIT",
    ]


def _nat(config: Config, family: IPFamily) -> list[str]:
    def s(base: str) -> str:
        return n.set_name(base, family)

    mark = config.masquerade_mark
    masq = f"-A {n.SERVICES} -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" "
    masq += f"-m set --match-set {s(n.CLUSTER_IP)} dst,dst"
    not_pods = config.local_match(family, negate=True)
    cluster_masq = [f"{masq} -j {n.MARK_MASQ}"] if config.masquerade_all else (
        [f"{masq} {not_pods} -j {n.MARK_MASQ}"] if not_pods else [])
    nodeports = [
        rule for p in Protocol for rule in (
            f"-A {n.NODE_PORT_CHAIN} -p {p.lower} -m comment --comment \"Kubernetes nodeport {p.value} port with "
            f"externalTrafficPolicy=local\" -m set --match-set {s(n.NODE_PORT_LOCAL.format(proto=p.value))} dst "
            "-j RETURN",
            f"-A {n.NODE_PORT_CHAIN} -p {p.lower} -m comment --comment \"Kubernetes nodeport {p.value} port for "
            f"masquerade purpose\" -m set --match-set {s(n.NODE_PORT.format(proto=p.value))} dst -j {n.MARK_MASQ}")]
    random_fully = " --random-fully" if config.masquerade_random_fully else ""
    return [
        "*nat",
        *(f":{c} - [0:0]" for c in (n.SERVICES, n.POSTROUTING, n.NODE_PORT_CHAIN, n.LOAD_BALANCER_CHAIN,
                                     n.MARK_MASQ)),
        *cluster_masq,
        f"-A {n.SERVICES} -m set --match-set {s(n.EXTERNAL_IP_LOCAL)} dst,dst -j RETURN",
        f"-A {n.SERVICES} -m comment --comment \"Kubernetes service external ip + port for masquerade and filter "
        f"purpose\" -m set --match-set {s(n.EXTERNAL_IP)} dst,dst -j {n.MARK_MASQ}",
        f"-A {n.SERVICES} -m comment --comment \"Kubernetes service lb portal\" "
        f"-m set --match-set {s(n.LOAD_BALANCER)} dst,dst -j {n.LOAD_BALANCER_CHAIN}",
        f"-A {n.SERVICES} -m addrtype --dst-type LOCAL -j {n.NODE_PORT_CHAIN}",
        *nodeports,
        f"-A {n.LOAD_BALANCER_CHAIN} -m set --match-set {s(n.LOAD_BALANCER_LOCAL)} dst,dst -j RETURN",
        f"-A {n.LOAD_BALANCER_CHAIN} -j {n.MARK_MASQ}",
        f"-A {n.MARK_MASQ} -j MARK --set-xmark {mark}/{mark}",
        f"-A {n.POSTROUTING} -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin "
        f"purpose\" -m set --match-set {s(n.LOOP_BACK)} dst,dst,src -j MASQUERADE",
        f"-A {n.POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A {n.POSTROUTING} -j MARK --set-xmark {mark}/0x0",
        f"-A {n.POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" "
        f"-j MASQUERADE{random_fully}",
        "COMMIT",
    ]
