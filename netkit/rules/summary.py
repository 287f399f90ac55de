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

from netkit.model import IPFamily, NodeState

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


def facts(objects: Mapping[str, Iterable[str]], endpoints: Mapping[str, tuple[str, ...]]) -> dict[str, Facts]:
    """Service port key → its Facts: its `endpoints` (the backend's `summarize`) and its own
    `objects` (the backend's `objects`), both read from the same ruleset."""
    return {k: Facts(endpoints.get(k, ()), frozenset(objects.get(k, ()))) for k in set(endpoints) | set(objects)}


def _count(endpoints: tuple[str, ...]) -> str:
    if not endpoints:
        return "no endpoints (rejects)"
    return f"{len(endpoints)} endpoint" + ("s" if len(endpoints) != 1 else "")


def _flags(aspects: tuple[str, ...]) -> str:
    extra = [a for a in aspects if a in ("policy", "firewall", "affinity")]
    return f" ({', '.join(extra)})" if extra else ""


def name_live(live: Mapping[str, Facts], names: Mapping[str, tuple[str, bool]]) -> dict[str, Facts]:
    """`live` keyed by service port: `names` (the backend's `live_names` of the desired ruleset) maps
    a key a dump uses for want of a name to (service port key, whether it is the cluster IP's), so
    both sides line up; keys not in it stay as they are."""
    if not names:
        return dict(live)
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
