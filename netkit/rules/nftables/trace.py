"""trace(ruleset, packet) → where a new connection goes, read off netkit's nftables table.

A pure interpreter of the rules in a Ruleset (compiled, or parsed from a live `nft -j` dump), in the
canonical spelling of ruleset.py; it returns the same Outcomes as the iptables tracer
(netkit.rules.tracing), so `netkit trace` and the tests read both alike. It evaluates the base
chains of the hooks a first packet passes, each hook's chains in priority order:

    from another host or a pod:  prerouting (filter -110, nat -100) → (routing: is the destination,
                                 after DNAT, an address of the node?) input or forward → postrouting
    from the node itself:        output (filter -110, nat -100, filter 0) → postrouting

It evaluates each rule as the typed reader (rule.py) reads it. What it understands is what
netkit writes: matches on `ip/ip6 saddr|daddr`, `meta l4proto|mark`,
`th|tcp|udp|sctp dport|sport`, `ct state|status`, `fib saddr|daddr type`, `iifname`, with `==`/`!=`,
prefixes, anonymous sets and named sets (`@name`); concatenations (`a . b`); `& | ^` on marks;
`vmap` (named or anonymous) to jump/goto/accept/drop/return; `numgen random mod N [offset O]`, as a
match or as the key of a `map` (every value becomes a branch with its probability); statements
`dnat … to ADDR:PORT | <expr> map …`, `masquerade`, `reject`, `meta mark set …`, `update @set {…}`.

Connection-tracking sees a NEW connection: `ct state new` holds, `ct status dnat` holds after a
DNAT. A dynamic set (ClientIP affinity) holds no client yet — the first connection, which is the
one the random choice decides; its `update` is recorded in the steps. `fib … type local` is judged
against the node's addresses given in the Packet. A rule using anything else is reported as not
understood (Outcome.unknown) and treated as not matching.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from netkit.model.types import IPAddress
from netkit.nft.rule import (
    AnonMap,
    AnonSet,
    Concat,
    Counter,
    Ct,
    Dnat,
    Expr,
    Fib,
    MapLookup,
    MarkSet,
    Masquerade,
    Match,
    Meta,
    NotUnderstood,
    Number,
    Numgen,
    Operand,
    Payload,
    SetRef,
    SetUpdate,
    Statement,
    Table,
    Value,
    Verdict,
    VerdictMap,
    hostport,
    read,
)
from netkit.nft.ruleset import Chain, NamedSet, Ruleset
from netkit.rules.tracing import Outcome, Packet, Step, endpoints

__all__ = ["Outcome", "Packet", "Step", "endpoints", "trace"]

MAX_DEPTH = 32


# ── the walk ─────────────────────────────────────────────────────────────────────────────────────

@dataclass(slots=True)
class _Branch:
    p: float
    pkt: Packet
    steps: list[Step] = field(default_factory=list)
    dnat: str | None = None
    masquerade: bool = False
    state: str | None = None  # see _rule: go, miss, next, accept, drop, reject, return
    reason: Step | None = None
    unknown: list[str] = field(default_factory=list)
    sticky: bool = False

    def fork(self, p: float) -> _Branch:
        return _Branch(p, self.pkt, list(self.steps), self.dnat, self.masquerade, self.state, self.reason,
                       list(self.unknown), self.sticky)

    def step(self, step: Step) -> None:
        """Record the rule being walked, once (Step objects are made per rule and per chain walk)."""
        if not any(s is step for s in self.steps):
            self.steps.append(step)


class _Table:
    """The Ruleset with lookups built once per trace: chains by name, base chains by hook, and each
    set's elements by normalised key."""

    def __init__(self, rs: Ruleset) -> None:
        self.rs = rs
        self.label = f"{rs.family} {rs.table}"
        self.chains = rs.chain_map()
        self.sets = rs.set_map()
        self._index: dict[str, dict[str, str | None]] = {}

    def base(self, hook: str) -> list[Chain]:
        found = [c for c in self.rs.chains if c.hook and c.hook.hook == hook]
        return sorted(found, key=lambda c: c.hook.priority if c.hook else 0)

    def elements(self, name: str) -> dict[str, str | None] | None:
        found = self._index.get(name)
        if found is None:
            s = self.sets.get(name)
            if s is None:
                return None
            found = {_norm_key(e.key): e.value for e in s.elements}
            self._index[name] = found
        return found


def trace(ruleset: Ruleset, pkt: Packet) -> list[Outcome]:
    """Every outcome of a new connection, most likely first; probabilities add up to 1."""
    t = _Table(ruleset)
    if pkt.from_node:
        branches = _hook(t, "output", [_Branch(1.0, pkt)])
    else:
        branches = []
        for b in _hook(t, "prerouting", [_Branch(1.0, pkt)]):
            if b.state:  # dropped or rejected before routing
                branches.append(b)
            else:
                branches.extend(_hook(t, "input" if _is_local(b.pkt.dst, pkt) else "forward", [b]))
    done = [b for b in branches if b.state]
    done.extend(_hook(t, "postrouting", [b for b in branches if not b.state]))
    return _collect(done)


def _hook(t: _Table, hook: str, branches: list[_Branch]) -> list[_Branch]:
    """Run every base chain of a hook, by priority. Returned branches have state None (the packet
    goes on) or "drop"/"reject" (it ended here)."""
    for chain in t.base(hook):
        out: list[_Branch] = []
        for b in branches:
            if b.state:
                out.append(b)
                continue
            for r in _chain(t, chain.name, b, 0):
                if r.state == "return":  # fell off the base chain: its policy decides
                    policy = chain.hook.policy if chain.hook else "accept"
                    r.state = "drop" if policy == "drop" else None
                elif r.state == "accept":
                    r.state = None  # accepted here: the next base chain of the hook still runs
                out.append(r)
        branches = out
    return branches


def _chain(t: _Table, name: str, start: _Branch, depth: int) -> list[_Branch]:
    """Walk one chain. Returned branches ended (accept/drop/reject) or returned ("return": fell off
    the end or met `return`)."""
    chain = t.chains.get(name)
    if chain is None or depth > MAX_DEPTH:
        why = "jumps nested too deep" if chain else "no such chain"
        start.state, start.unknown = "drop", [*start.unknown, f"{t.label} {name}: {why}"]
        return [start]
    live = [start]
    done: list[_Branch] = []
    for index, rule in enumerate(chain.rules, 1):
        if not live:
            break
        step = Step(t.label, name, index, rule)
        nxt: list[_Branch] = []
        for b in live:
            for r in _rule(t, step, b, depth):
                if r.state in ("miss", "next"):
                    r.state = None
                    nxt.append(r)
                else:
                    done.append(r)
        live = nxt
    for b in live:
        b.state = "return"
    return done + live


def _rule(t: _Table, step: Step, b: _Branch, depth: int) -> list[_Branch]:
    """One rule on one branch. Returned states: "miss" (a match failed), "next" (matched, go on to
    the next rule), or a verdict (accept, drop, reject, return)."""
    try:
        stmts = read(step.rule).statements
    except NotUnderstood as exc:
        b.unknown.append(f"{step.table} {step.chain} #{step.index}: {exc} in: {step.rule}")
        b.state = "miss"
        return [b]
    b.state = "go"
    live = [b]
    out: list[_Branch] = []
    for st in stmts:
        nxt: list[_Branch] = []
        for x in live:
            for r in _statement(t, st, x, step, depth):
                (nxt if r.state == "go" else out).append(r)
        live = nxt
    for x in live:
        x.step(step)
        x.state = "next"
    return out + live


def _statement(t: _Table, st: Statement, b: _Branch, step: Step, depth: int) -> list[_Branch]:
    if isinstance(st, Match):
        return _split(b, _truth(t, st, b), step)
    if isinstance(st, VerdictMap):
        return _vmap(t, st, b, step, depth)
    b.step(step)
    if isinstance(st, Verdict):
        return _verdict(t, st, b, step, depth)
    if isinstance(st, Dnat):
        return _dnat(t, st, b, step)
    if isinstance(st, Masquerade):
        b.masquerade, b.state = True, "accept"
        return [b]
    if isinstance(st, MarkSet):
        (_, value), = _values(t, st.value, b)
        b.pkt = replace(b.pkt, mark=int(_number(value)))
        return [b]
    if isinstance(st, SetUpdate):
        b.sticky = True
        return [b]
    assert isinstance(st, Counter)
    return [b]


def _vmap(t: _Table, st: VerdictMap, b: _Branch, step: Step, depth: int) -> list[_Branch]:
    out = []
    for p, verdict in _lookup(t, st.key, st.table, b):
        x = b if p == 1.0 else b.fork(b.p * p)
        if verdict is None:
            x.state = "miss"
            out.append(x)
        else:
            x.step(step)
            out.extend(_verdict(t, Verdict(*verdict.split(maxsplit=1)), x, step, depth))
    return out


def _dnat(t: _Table, st: Dnat, b: _Branch, step: Step) -> list[_Branch]:
    out = []
    for p, target in _dnat_targets(t, st.to, b):
        x = b if p == 1.0 else b.fork(b.p * p)
        if target is None:
            x.state = "miss"
            x.unknown.append(f"{step.table} {step.chain} #{step.index}: dnat map has no element for the key")
        else:
            host, port = _split_hostport(target)
            x.dnat, x.reason, x.state = target, step, "accept"
            x.pkt = replace(x.pkt, dst=host, dport=port if port is not None else x.pkt.dport)
        out.append(x)
    return out


def _verdict(t: _Table, v: Verdict, b: _Branch, step: Step, depth: int) -> list[_Branch]:
    if v.verb in ("jump", "goto") and v.target is not None:
        out = []
        for r in _chain(t, v.target, b, depth + 1):
            if r.state == "return" and v.verb == "jump":
                r.state = "go"
            out.append(r)
        return out
    if v.verb in ("drop", "reject"):
        b.state, b.reason = v.verb, step
        return [b]
    if v.verb == "continue":
        b.state = "go"
        return [b]
    b.state = v.verb  # accept, return
    return [b]


def _split(b: _Branch, q: float, step: Step) -> list[_Branch]:
    """A match that holds with probability q: the branch goes on ("go") with q, misses with 1-q."""
    if q >= 1.0:
        return [b]
    if q <= 0.0:
        b.state = "miss"
        return [b]
    miss = b.fork(b.p * (1 - q))
    miss.state = "miss"
    b.p *= q
    return [b, miss]


# ── values ───────────────────────────────────────────────────────────────────────────────────────

# What an expression evaluates to for the packet: an address, a number (port, mark, numgen), a name
# (protocol, interface, route type), the set of conntrack flags that hold, a concatenation of those,
# or None (no value: `tcp dport` of a UDP packet).
Val = IPAddress | int | str | frozenset[str] | tuple["Val", ...] | None
Dist = list[tuple[float, Val]]  # (probability, value), probabilities adding up to 1


def _values(t: _Table, e: Expr, b: _Branch) -> Dist:
    pkt = b.pkt
    if isinstance(e, Payload):
        if e.protocol in ("ip", "ip6"):
            return [(1.0, pkt.src if e.field == "saddr" else pkt.dst)]
        if e.protocol != "th" and e.protocol != pkt.proto:
            return [(1.0, None)]  # `tcp dport` on a UDP packet: no value, nothing matches
        return [(1.0, pkt.dport if e.field == "dport" else pkt.sport)]
    if isinstance(e, Meta):
        return [(1.0, pkt.proto if e.key == "l4proto" else pkt.mark if e.key == "mark" else pkt.in_iface or "")]
    if isinstance(e, Ct):
        return [(1.0, frozenset({"new"}) if e.key == "state" else frozenset({"dnat"} if b.dnat else ()))]
    if isinstance(e, Fib):
        addr = pkt.src if e.address == "saddr" else pkt.dst
        return [(1.0, "local" if _is_local(addr, pkt) else "unicast")]
    if isinstance(e, Numgen):
        return [(1 / e.mod, i + e.offset) for i in range(e.mod)]
    if isinstance(e, Number):
        return [(1.0, e.value)]
    if isinstance(e, Concat):
        dist: Dist = [(1.0, ())]
        for part in e.parts:
            dist = [(p * q, (*_parts(v), w)) for p, v in dist for q, w in _values(t, part, b)]
        return dist
    op, operand = e.op, e.operand
    out: Dist = []
    for p, v in _values(t, e.inner, b):
        n = _number(v)
        out.append((p, n & operand if op == "&" else n | operand if op == "|" else n ^ operand))
    return out


def _parts(v: Val) -> tuple[Val, ...]:
    return v if isinstance(v, tuple) else (v,)


def _number(v: Val) -> int:
    if not isinstance(v, int):
        raise NotUnderstood(f"{v!r} is not a number")
    return v


def _text(v: Val) -> str:
    if isinstance(v, tuple):
        return " . ".join(_text(x) for x in v)
    return str(v)


def _truth(t: _Table, m: Match, b: _Branch) -> float:
    """Probability that the match holds."""
    p_true = 0.0
    for p, v in _values(t, m.left, b):
        if _compare(t, v, m.right) == (m.op == "=="):
            p_true += p
    return p_true


def _compare(t: _Table, v: Val, right: Operand) -> bool:
    if v is None:
        return False
    if isinstance(right, SetRef):
        s = t.sets.get(right.name)
        if s is None:
            raise NotUnderstood(f"set @{right.name} does not exist")
        if s.dynamic:
            return False  # nobody seen yet: a first connection
        return _in_set(t, s, v)
    if isinstance(right, AnonSet):
        return any(_equal(v, item.unquoted) for item in right.items)
    return _equal(v, right.unquoted)


def _in_set(t: _Table, s: NamedSet, v: Val) -> bool:
    index = t.elements(s.name) or {}
    if _norm_key(_text(v)) in index:
        return True
    if not isinstance(v, tuple) and any("/" in k or "-" in k for k in index):
        return any(_equal(v, k) for k in index)  # an interval set
    return False


def _equal(v: Val, literal: str) -> bool:
    if isinstance(v, frozenset):  # ct state / ct status: any of the listed flags
        return bool(v & set(literal.split(",")))
    if isinstance(v, (IPv4Address, IPv6Address)):
        try:
            if "-" in literal:
                first, last = (ip_address(x) for x in literal.split("-"))
                return first.version == v.version and int(first) <= int(v) <= int(last)
            net = ip_network(literal, strict=False)
        except ValueError:
            return False
        return net.version == v.version and v in net
    if isinstance(v, int):
        try:
            if "-" in literal:
                low, high = (int(x, 0) for x in literal.split("-"))
                return low <= v <= high
            return v == int(literal, 0)
        except ValueError:
            return False
    if isinstance(v, tuple):
        return _norm_key(_text(v)) == _norm_key(literal)
    if literal.endswith("*"):
        return str(v).startswith(literal[:-1])
    return str(v) == literal


def _lookup(t: _Table, key: Expr, table: Table, b: _Branch) -> list[tuple[float, str | None]]:
    """A map lookup, for each value the key can take: (probability, mapped value or None)."""
    if isinstance(table, SetRef):
        found = t.elements(table.name)
        if found is None:
            raise NotUnderstood(f"map @{table.name} does not exist")
    else:
        found = _anonymous(table)
    out: dict[str | None, float] = {}
    for p, v in _values(t, key, b):
        value = found.get(_norm_key(_text(v)))
        out[value] = out.get(value, 0.0) + p
    if len(out) == 1:
        return [(1.0, next(iter(out)))]
    return [(p, value) for value, p in out.items()]


@lru_cache(maxsize=10_000)
def _anonymous(table: AnonMap) -> dict[str, str | None]:
    """An anonymous map's entries by normalised key (as _Table.elements indexes a named one)."""
    return {_norm_key(k): v for k, v in table.entries}


def _dnat_targets(t: _Table, to: Value | MapLookup, b: _Branch) -> list[tuple[float, str | None]]:
    if isinstance(to, Value):
        return [(1.0, to.text)]
    return [(p, hostport(v) if v else None) for p, v in _lookup(t, to.key, to.table, b)]


def _split_hostport(text: str) -> tuple[IPAddress, int | None]:
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        return ip_address(host), int(port[1:]) if port else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return ip_address(host), int(port)
    return ip_address(text), None


def _norm_key(key: str) -> str:
    """One spelling for a set key: addresses as Python prints them, numbers in decimal."""
    parts = []
    for part in key.split(" . "):
        part = part.strip()
        try:
            parts.append(str(ip_address(part)))
            continue
        except ValueError:
            pass
        try:
            parts.append(str(int(part, 0)))
        except ValueError:
            parts.append(part)
    return " . ".join(parts)


def _is_local(addr: IPAddress, pkt: Packet) -> bool:
    return addr in pkt.local_addresses or addr.is_loopback


# ── outcomes ─────────────────────────────────────────────────────────────────────────────────────

def _collect(done: list[_Branch]) -> list[Outcome]:
    merged: dict[tuple[str, str | None, bool, tuple[Step, ...]], Outcome] = {}
    for b in done:
        verdict = b.state if b.state in ("drop", "reject") else "accept"
        masq = b.masquerade and verdict == "accept"
        key = (verdict, b.dnat, masq, tuple(b.steps))
        old = merged.get(key)
        p = b.p + (old.probability if old else 0.0)
        merged[key] = Outcome(p, verdict, b.dnat, masq, tuple(b.steps), b.reason, tuple(b.unknown))
    return sorted(merged.values(), key=lambda o: (-o.probability, o.destination or ""))
