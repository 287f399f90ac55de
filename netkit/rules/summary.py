"""Plan summaries like `terraform plan`: per service port, what a plan changes, and the totals.

    endpoints  the endpoints its DNAT can choose (the backend's `summarize`)
    verdict    what a packet meets: `dnat` to an endpoint, or `reject` / `drop` when none is usable
    policy     local-only rules (internal/external traffic policy Local)
    masquerade rules that mark for masquerade (SNAT)
    firewall   loadBalancerSourceRanges rules
    affinity   ClientIP session affinity
    rules      anything else of the service port's own rules (a probability, a comment)

Read from the Rulesets themselves (a live dump as well as a compiled one), so every mode and
every source of the "before" side works the same: each service port's own objects are collected
(iptables: the rules naming it in their comment and every chain they reach; nftables: its chains,
its sets and the map elements pointing at them or sharing their key; IPVS: its virtual servers),
and the objects that differ are put in the aspects above. Pure: no IO.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from netkit.model import IPFamily, NodeState, Protocol
from netkit.nft.ruleset import Ruleset as NftRuleset
from netkit.rules.iptables import names as ipt_names
from netkit.rules.iptables import rule as ipt_rule
from netkit.rules.iptables.ruleset import Ruleset as IptablesRuleset
from netkit.rules.ipvs import names as ipvs_names
from netkit.rules.ipvs import ruleset as ipvs_rs
from netkit.rules.ipvs.entries import SetEntry
from netkit.rules.nftables import names as nft_names

ASPECTS = ("endpoints", "verdict", "policy", "masquerade", "firewall", "affinity", "rules")


class Op(Enum):
    ADD = "add"
    CHANGE = "change"
    REMOVE = "remove"

    @property
    def sign(self) -> str:
        return {"add": "+", "change": "~", "remove": "-"}[self.value]


@dataclass(frozen=True, slots=True, order=True)
class ServicePortKey:
    """A service port as JSON shows it: never a display string."""

    namespace: str
    name: str
    port: str  # the port's name, or its number when unnamed
    protocol: str

    @staticmethod
    def parse(key: str) -> ServicePortKey:
        """From "ns/svc:port/proto" (or "ns/svc/proto" for an unnamed port; an IPVS dump's
        "proto IP:port" keys are kept whole in `name`)."""
        spn, _, proto = key.rpartition("/")
        ns, sep, rest = spn.partition("/")
        if not sep:
            return ServicePortKey("", key, "", "")
        name, _, port = rest.partition(":")
        return ServicePortKey(ns, name, port, proto)

    def display(self) -> str:
        if not self.namespace:
            return self.name
        port = f":{self.port}" if self.port else ""
        proto = "" if self.protocol == "tcp" else f" ({self.protocol})"
        return f"{self.namespace}/{self.name}{port}{proto}"

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name, "port": self.port, "protocol": self.protocol}


@dataclass(frozen=True, slots=True)
class ServiceChange:
    op: Op
    service: ServicePortKey
    aspects: tuple[str, ...]  # which of ASPECTS differ (every one that applies, for add/remove)
    before: tuple[str, ...]  # endpoints
    after: tuple[str, ...]
    verdict_before: str | None  # None when the side has no such service port
    verdict_after: str | None

    def line(self) -> str:
        """One line for people, `terraform plan` style."""
        s = self.service.display()
        if self.op is Op.ADD:
            return f"+ {s} {_count(self.after)}" + _flags(self.aspects)
        if self.op is Op.REMOVE:
            return f"- {s}"
        parts = []
        for aspect in self.aspects:
            if aspect == "endpoints":
                gone = sorted(set(self.before) - set(self.after))
                new = sorted(set(self.after) - set(self.before))
                detail = " ".join([*(f"-{e}" for e in gone), *(f"+{e}" for e in new)])
                parts.append(f"endpoints {len(self.before)} → {len(self.after)}" + (f" ({detail})" if detail else ""))
            elif aspect == "verdict":
                parts.append(f"verdict {self.verdict_before} → {self.verdict_after}")
            else:
                parts.append(aspect)
        return f"~ {s} " + ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {"op": self.op.value, "service": self.service.to_json(), "changes": list(self.aspects),
                "endpoints": {"before": list(self.before), "after": list(self.after)},
                "verdict": {"before": self.verdict_before, "after": self.verdict_after}}


@dataclass(frozen=True, slots=True)
class Totals:
    add: int = 0
    change: int = 0
    remove: int = 0

    @staticmethod
    def of(changes: Iterable[ServiceChange]) -> Totals:
        ops = [c.op for c in changes]
        return Totals(ops.count(Op.ADD), ops.count(Op.CHANGE), ops.count(Op.REMOVE))

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.add + other.add, self.change + other.change, self.remove + other.remove)

    def line(self) -> str:
        return f"{self.add} to add, {self.change} to change, {self.remove} to remove"

    def to_json(self) -> dict[str, int]:
        return {"add": self.add, "change": self.change, "remove": self.remove}


@dataclass(frozen=True, slots=True)
class Facts:
    """One service port's own objects in one Ruleset."""

    endpoints: tuple[str, ...] = ()
    objects: frozenset[str] = field(default_factory=frozenset)


def service_changes(before: Mapping[str, Facts], after: Mapping[str, Facts]) -> list[ServiceChange]:
    out: list[ServiceChange] = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if old is None or new is None:
            side = new or old
            assert side is not None
            op = Op.ADD if old is None else Op.REMOVE
            aspects = tuple(a for a in ASPECTS if a in _aspects_of(side.objects) or a == "endpoints")
        else:
            op = Op.CHANGE
            aspects = _changed(old, new)
            if not aspects:
                continue
        out.append(ServiceChange(op, ServicePortKey.parse(key), aspects,
                                 old.endpoints if old else (), new.endpoints if new else (),
                                 verdict(old) if old else None, verdict(new) if new else None))
    return out


def _changed(old: Facts, new: Facts) -> tuple[str, ...]:
    found = _aspects_of(old.objects ^ new.objects)
    if old.endpoints != new.endpoints:
        found.add("endpoints")
    if verdict(old) != verdict(new):
        found.add("verdict")
    found.discard("dnat")
    if found - {"endpoints", "verdict"}:
        found.discard("rules")
    if found == {"rules"} or not found:
        return ("rules",) if old.objects != new.objects else ()
    return tuple(a for a in ASPECTS if a in found)


# What an object's text says about its aspect, first match wins (one table for every mode).
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("dnat", re.compile(r"^nat SEP ")),  # an endpoint's own chain (its hairpin masquerade too)
    ("firewall", re.compile(r"KUBE-FW-|KUBE-PROXY-FIREWALL|^fw-|goto fw-|firewall|LOAD-BALANCER-SOURCE")),
    ("affinity", re.compile(r"-m recent|@aff-|^aff-|persistent")),
    ("masquerade", re.compile(r"KUBE-MARK-MASQ|mark-for-masquerade|masquerade")),
    ("policy", re.compile(r"KUBE-SVL|^nat SVL |local endpoints|^local-|goto local-|fib saddr type local|KUBE-XLB-"
                          r"|traffic policy Local")),
    ("verdict", re.compile(r"-j (REJECT|DROP)|: (drop|reject)$|reject-chain$|has no endpoints")),
    ("dnat", re.compile(r"DNAT|dnat|KUBE-SEP-|KUBE-SVC-|probability|numgen|^svc-|^real ")),
)


def _aspects_of(objects: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for text in objects:
        for aspect, pattern in _CLASSES:
            if pattern.search(text):
                found.add(aspect)
                break
        else:
            found.add("rules")
    return found


def verdict(f: Facts) -> str:
    """`reject` / `drop` when the service port's rules turn packets away, else `dnat`."""
    for text in f.objects:
        if "has no endpoints" in text or text.endswith((": reject", ": drop", "reject-chain")):
            return "drop" if re.search(r"DROP|: drop$", text) else "reject"
    return "dnat" if f.endpoints else "reject"


# --- per mode: each service port's own objects -----------------------------------------------------


def addresses(state: NodeState, family: IPFamily) -> dict[str, str]:
    """From the model: each service port's destinations as nftables map keys ("IP . proto . port",
    "proto . nodePort") → its key, so objects that carry no name (a no-endpoints verdict element)
    are still told apart by Service."""
    out: dict[str, str] = {}
    for p in state.ports:
        if p.family is not family:
            continue
        key = f"{p.name}/{p.protocol.lower}"
        for ip in (p.cluster_ip, *p.external_ips, *p.load_balancer_ips):
            out[f"{ip} . {p.protocol.lower} . {p.port}"] = key
        if p.node_port:
            out[f"{p.protocol.lower} . {p.node_port}"] = key
    return out


def facts(ruleset: object, endpoints: Mapping[str, tuple[str, ...]],
          names: Mapping[str, str] | None = None) -> dict[str, Facts]:
    """Service port key → its Facts in `ruleset` (any mode's), with `endpoints` from the backend's
    `summarize` of the same ruleset; `names` (see `addresses`) names what the ruleset leaves unnamed."""
    if isinstance(ruleset, IptablesRuleset):
        objects = iptables_objects(ruleset)
    elif isinstance(ruleset, NftRuleset) or ruleset is None:
        objects = nftables_objects(ruleset, names or {})
    elif isinstance(ruleset, ipvs_rs.Ruleset):
        objects = ipvs_objects(ruleset)
    else:
        objects = {}
    return {k: Facts(endpoints.get(k, ()), frozenset(objects.get(k, ()))) for k in set(endpoints) | set(objects)}


def iptables_objects(ruleset: IptablesRuleset) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for table in ("nat", "filter"):
        chains = ruleset.chains(table)
        for chain, rules in chains.items():
            if chain.startswith(ipt_names.SERVICE_CHAIN_PREFIXES):
                continue
            for text in rules:
                name = _service_port(ipt_rule.read(text))
                if name is None:
                    continue
                own = out.setdefault(name, set())
                own.add(f"{table} {chain} {text}")
                _reach(chains, ipt_rule.target_of(text), table, own)
    return out


def _service_port(rule: ipt_rule.Rule) -> str | None:
    """"ns/svc:port/proto" of a rule in a shared chain that names its service port first in a comment
    with more words ("… cluster IP", "… has no endpoints"), right after `-p`."""
    name, space, _ = (rule.comment or "").partition(" ")
    if not space or "/" not in name or rule.protocol is None or rule.first_module != "comment":
        return None
    return f"{name}/{rule.protocol}"


def _reach(chains: Mapping[str, tuple[str, ...]], start: str | None, table: str, own: set[str]) -> None:
    todo = [start] if start and start.startswith(ipt_names.SERVICE_CHAIN_PREFIXES) else []
    seen: set[str] = set()
    while todo:
        chain = todo.pop()
        if chain in seen:
            continue
        seen.add(chain)
        for rule in chains.get(chain, ()):
            # chain names carry a hash of the service port: compare what the rules do
            own.add(f"{table} {chain.split('-', 2)[1]} {_unhash(rule)}")
            target = ipt_rule.target_of(rule)
            if target and target.startswith(ipt_names.SERVICE_CHAIN_PREFIXES):
                todo.append(target)


def _unhash(rule: str) -> str:
    return re.sub(r"(KUBE-(?:SVC|SVL|EXT|FW|SEP|XLB))-[A-Z0-9]{16}", r"\1", rule)


def nftables_objects(ruleset: NftRuleset | None, names: Mapping[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    if ruleset is None:
        return out
    for chain in ruleset.chains:
        split = nft_names.split(chain.name)
        if split:
            out.setdefault(split[1], set()).update(f"{split[0]}: {rule}" for rule in chain.rules)
            out[split[1]].add(f"{split[0]}-")
    by_element_key: dict[str, str] = dict(names)
    for s in ruleset.sets:
        split = nft_names.split(s.name)
        if split:
            out.setdefault(split[1], set()).add(f"{split[0]}- timeout {s.timeout}")
            continue
        for e in s.elements:
            target = e.target
            owner = nft_names.split(target) if target else None
            if owner:
                out.setdefault(owner[1], set()).add(f"{s.name} {e.key} : {e.value.split()[0] if e.value else ''} "
                                                    f"{owner[0]}-")
                by_element_key.setdefault(e.key, owner[1])
    for s in ruleset.sets:
        if nft_names.split(s.name):
            continue
        for e in s.elements:
            if e.key in by_element_key and not (e.target and nft_names.split(e.target)):
                out.setdefault(by_element_key[e.key], set()).add(f"{s.name} {e.text()}")
    return out


def ipvs_objects(ruleset: ipvs_rs.Ruleset) -> dict[str, set[str]]:
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
        own.update(f"real {vs.address()} {ipvs_rs.hostport(r.ip, r.port)} {r.weight}" for r in vs.reals)
        own.update(_ipvs_entries(vs, ruleset, sets))
    return out


# ipset base name → what its entries are for, in the words of the aspects (see _CLASSES)
_IPVS_SET_ASPECT = {
    ipvs_names.CLUSTER_IP: "masquerade", ipvs_names.EXTERNAL_IP: "masquerade", ipvs_names.LOAD_BALANCER: "masquerade",
    ipvs_names.EXTERNAL_IP_LOCAL: "local endpoints", ipvs_names.LOAD_BALANCER_LOCAL: "local endpoints",
    ipvs_names.LOAD_BALANCER_FW: "firewall", ipvs_names.LOAD_BALANCER_SOURCE_CIDR: "firewall",
    ipvs_names.HEALTH_CHECK_NODE_PORT: "local endpoints",
    **{ipvs_names.NODE_PORT.format(proto=p.value): "masquerade" for p in Protocol},
    **{ipvs_names.NODE_PORT_LOCAL.format(proto=p.value): "local endpoints" for p in Protocol},
}


_IPVSSet = tuple[str, str, frozenset[SetEntry], dict[tuple[object, object, object], list[SetEntry]]]


def _ipvs_sets(ruleset: ipvs_rs.Ruleset) -> list[_IPVSSet]:
    """(set name, aspect, typed entries, entries by their (ip, protocol, port) head for hash:…,net sets)."""
    out = []
    for s in ruleset.sets:
        base = next((b for b in (*_IPVS_SET_ASPECT, ipvs_names.NO_ENDPOINTS)
                     if ipvs_names.set_name(b, ruleset.family) == s.name), None)
        if base is None:
            continue
        heads: dict[tuple[object, object, object], list[SetEntry]] = {}
        if s.type.endswith(",net"):
            for e in s.typed():
                heads.setdefault(e.ip_port, []).append(e)
        out.append((s.name, _IPVS_SET_ASPECT.get(base, "reject"), s.typed(), heads))
    return out


def _ipvs_entries(vs: ipvs_rs.VirtualServer, ruleset: ipvs_rs.Ruleset, sets: list[_IPVSSet]) -> set[str]:
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
    loop = ipvs_names.set_name(ipvs_names.LOOP_BACK, ruleset.family)
    hairpin = next((s.typed() for s in ruleset.sets if s.name == loop), frozenset())
    for r in vs.reals:
        if SetEntry(r.ip, vs.protocol, r.port, ip2=r.ip) in hairpin:  # its hairpin masquerade goes with it
            found.add(f"real {vs.address()} {ipvs_rs.hostport(r.ip, r.port)} hairpin")
    return found


def _count(endpoints: tuple[str, ...]) -> str:
    if not endpoints:
        return "no endpoints (rejects)"
    return f"{len(endpoints)} endpoint" + ("s" if len(endpoints) != 1 else "")


def _flags(aspects: tuple[str, ...]) -> str:
    extra = [a for a in aspects if a in ("policy", "firewall", "affinity")]
    return f" ({', '.join(extra)})" if extra else ""


def name_live(live: Mapping[str, Facts], desired: object) -> dict[str, Facts]:
    """An IPVS dump names no service (the kernel keeps no comments): key its virtual servers by the
    service port of the desired virtual server with the same address, so both sides line up.
    Other modes' keys are returned as they are."""
    if not isinstance(desired, ipvs_rs.Ruleset):
        return dict(live)
    names: dict[str, tuple[str, bool]] = {}
    for vs in desired.services:
        if vs.comment:
            names[str(vs.key)] = (f"{vs.port_name}/{vs.protocol.lower}", vs.role == "cluster IP")
    out: dict[str, Facts] = {}
    for key, f in live.items():
        name, cluster = names.get(key, (key, True))
        seen = out.get(name)
        if seen is None:
            out[name] = f
        else:
            endpoints = f.endpoints if cluster else seen.endpoints
            out[name] = Facts(endpoints, seen.objects | f.objects)
    return out
