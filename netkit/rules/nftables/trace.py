"""trace(ruleset, packet) → where a new connection goes, read off netkit's nftables table.

A pure interpreter of the rules in a Ruleset (compiled, or parsed from a live `nft -j` dump), in the
canonical spelling of ruleset.py; it returns the same Outcomes as the iptables tracer
(netkit.rules.tracing), so `netkit trace` and the tests read both alike. It evaluates the base
chains of the hooks a first packet passes, each hook's chains in priority order:

    from another host or a pod:  prerouting (filter -110, nat -100) → (routing: is the destination,
                                 after DNAT, an address of the node?) input or forward → postrouting
    from the node itself:        output (filter -110, nat -100, filter 0) → postrouting

What it understands is what netkit writes: matches on `ip/ip6 saddr|daddr`, `meta l4proto|mark`,
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

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

from netkit.model.types import IPAddress
from netkit.rules.nftables.ruleset import Chain, NamedSet, Ruleset
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
        stmts = _parse(step.rule)
    except _NotUnderstood as exc:
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


def _statement(t: _Table, st: tuple[Any, ...], b: _Branch, step: Step, depth: int) -> list[_Branch]:
    kind = st[0]
    if kind == "match":
        _, left, op, right = st
        return _split(b, _truth(t, left, op, right, b), step)
    if kind == "vmap":
        _, key, table = st
        out = []
        for p, verdict in _lookup(t, key, table, b):
            x = b if p == 1.0 else b.fork(b.p * p)
            if verdict is None:
                x.state = "miss"
                out.append(x)
            else:
                x.step(step)
                out.extend(_verdict(t, verdict.split(), x, step, depth))
        return out
    b.step(step)
    if kind == "verdict":
        return _verdict(t, st[1], b, step, depth)
    if kind == "dnat":
        out = []
        for p, target in _dnat_targets(t, st[1], b):
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
    if kind == "masquerade":
        b.masquerade, b.state = True, "accept"
        return [b]
    if kind == "mark":
        (p, value), = _values(t, st[1], b)
        b.pkt = replace(b.pkt, mark=int(value))
        return [b]
    if kind == "update":
        b.sticky = b.sticky or st[1] is not None
        return [b]
    raise AssertionError(kind)


def _verdict(t: _Table, words: list[str] | tuple[str, ...], b: _Branch, step: Step, depth: int) -> list[_Branch]:
    verb = words[0]
    if verb in ("jump", "goto"):
        out = []
        for r in _chain(t, words[1], b, depth + 1):
            if r.state == "return" and verb == "jump":
                r.state = "go"
            out.append(r)
        return out
    if verb in ("drop", "reject"):
        b.state, b.reason = verb, step
        return [b]
    if verb == "continue":
        b.state = "go"
        return [b]
    b.state = verb  # accept, return
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

Dist = list[tuple[float, Any]]  # (probability, value), probabilities adding up to 1


def _values(t: _Table, e: tuple[Any, ...], b: _Branch) -> Dist:
    kind = e[0]
    pkt = b.pkt
    if kind == "addr":
        return [(1.0, pkt.src if e[1] == "saddr" else pkt.dst)]
    if kind == "port":
        proto, which = e[1], e[2]
        if proto != "th" and proto != pkt.proto:
            return [(1.0, None)]  # `tcp dport` on a UDP packet: no value, nothing matches
        return [(1.0, pkt.dport if which == "dport" else pkt.sport)]
    if kind == "l4proto":
        return [(1.0, pkt.proto)]
    if kind == "mark":
        return [(1.0, pkt.mark)]
    if kind == "ct":
        return [(1.0, frozenset({"new"}) if e[1] == "state" else frozenset({"dnat"} if b.dnat else ()))]
    if kind == "fib":
        addr = pkt.src if e[1] == "saddr" else pkt.dst
        return [(1.0, "local" if _is_local(addr, pkt) else "unicast")]
    if kind == "iface":
        return [(1.0, pkt.in_iface or "")]
    if kind == "numgen":
        _, mod, offset = e
        return [(1 / mod, i + offset) for i in range(mod)]
    if kind == "literal":
        return [(1.0, e[1])]
    if kind == "concat":
        dist: Dist = [(1.0, ())]
        for part in e[1]:
            dist = [(p * q, (*v, w)) for p, v in dist for q, w in _values(t, part, b)]
        return dist
    if kind == "bitwise":
        _, op, inner, operand = e
        out = []
        for p, v in _values(t, inner, b):
            v = int(v)
            out.append((p, v & operand if op == "&" else v | operand if op == "|" else v ^ operand))
        return out
    raise _NotUnderstood(f"expression {kind}")


def _text(v: Any) -> str:
    if isinstance(v, tuple):
        return " . ".join(_text(x) for x in v)
    return str(v)


def _truth(t: _Table, left: tuple[Any, ...], op: str, right: tuple[Any, ...], b: _Branch) -> float:
    """Probability that `left op right` holds."""
    p_true = 0.0
    for p, v in _values(t, left, b):
        if _compare(t, v, right, b) == (op == "=="):
            p_true += p
    return p_true


def _compare(t: _Table, v: Any, right: tuple[Any, ...], b: _Branch) -> bool:
    if v is None:
        return False
    kind = right[0]
    if kind == "ref":
        s = t.sets.get(right[1])
        if s is None:
            raise _NotUnderstood(f"set @{right[1]} does not exist")
        if s.dynamic:
            return False  # nobody seen yet: a first connection
        return _in_set(t, s, v)
    if kind == "anon":
        return any(_equal(v, item) for item in right[1])
    return _equal(v, right[1])


def _in_set(t: _Table, s: NamedSet, v: Any) -> bool:
    index = t.elements(s.name) or {}
    if _norm_key(_text(v)) in index:
        return True
    if not isinstance(v, tuple) and any("/" in k or "-" in k for k in index):
        return any(_equal(v, k) for k in index)  # an interval set
    return False


def _equal(v: Any, literal: str) -> bool:
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


def _lookup(t: _Table, key: tuple[Any, ...], table: tuple[Any, ...], b: _Branch) -> list[tuple[float, str | None]]:
    """A map lookup, for each value the key can take: (probability, mapped value or None)."""
    if table[0] == "ref":
        found = t.elements(table[1])
        if found is None:
            raise _NotUnderstood(f"map @{table[1]} does not exist")
    else:
        found = table[1]
    out: dict[str | None, float] = {}
    for p, v in _values(t, key, b):
        value = found.get(_norm_key(_text(v)))
        out[value] = out.get(value, 0.0) + p
    if len(out) == 1:
        return [(1.0, next(iter(out)))]
    return [(p, value) for value, p in out.items()]


def _dnat_targets(t: _Table, target: tuple[Any, ...], b: _Branch) -> list[tuple[float, str | None]]:
    if target[0] == "literal":
        return [(1.0, target[1])]
    _, key, table = target
    return [(p, _hostport(v) if v else None) for p, v in _lookup(t, key, table, b)]


def _hostport(value: str) -> str:
    """A map value `addr . port` as a dnat target `addr:port` (`[v6]:port`)."""
    host, _, port = value.partition(" . ")
    host = host.strip()
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port.strip()}" if port else shown


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


# ── parsing the canonical rule spelling ──────────────────────────────────────────────────────────

class _NotUnderstood(Exception):
    pass


_VERDICTS = ("accept", "drop", "return", "continue")
_MASQUERADE_FLAGS = ("fully-random", "random", "persistent")


class _Tokens:
    def __init__(self, text: str) -> None:
        self.words = text.replace("{", " { ").replace("}", " } ").replace(",", " , ").split()
        self.i = 0

    def peek(self, ahead: int = 0) -> str | None:
        j = self.i + ahead
        return self.words[j] if j < len(self.words) else None

    def take(self, *expected: str) -> str:
        word = self.peek()
        if word is None or (expected and word not in expected):
            raise _NotUnderstood(f"expected {' or '.join(expected) or 'more'} at {word!r}")
        self.i += 1
        return word

    def __iter__(self) -> Iterator[str]:
        return iter(self.words[self.i:])


@lru_cache(maxsize=100_000)
def _parse(rule: str) -> tuple[tuple[Any, ...], ...]:
    tok = _Tokens(rule)
    out: list[tuple[Any, ...]] = []
    while tok.peek() is not None:
        out.append(_parse_statement(tok))
    return tuple(out)


def _parse_statement(tok: _Tokens) -> tuple[Any, ...]:
    word = tok.peek()
    if word in ("jump", "goto"):
        tok.take()
        return ("verdict", (word, tok.take()))
    if word in _VERDICTS:
        tok.take()
        return ("verdict", (word,))
    if word == "reject":
        tok.take()
        if tok.peek() == "with":  # `reject with icmp type …`: the kind of refusal does not matter here
            tok.i = len(tok.words)
        return ("verdict", ("reject",))
    if word == "masquerade":
        tok.take()
        while tok.peek() in _MASQUERADE_FLAGS:
            tok.take()
        return ("masquerade",)
    if word == "dnat":
        tok.take()
        if tok.peek() in ("ip", "ip6"):
            tok.take()
        tok.take("to")
        if tok.peek() in _EXPRESSION_STARTS:
            key = _parse_expr(tok)
            tok.take("map")
            return ("dnat", ("map", key, _parse_table(tok)))
        return ("dnat", ("literal", tok.take()))
    if word in ("update", "add"):
        tok.take()
        name = tok.take()
        if not name.startswith("@"):
            raise _NotUnderstood(f"{word} of {name}")
        tok.take("{")
        _parse_expr(tok)
        tok.take("}")
        return ("update", name[1:])
    if word == "counter":
        tok.take()
        return ("update", None)
    left = _parse_expr(tok)
    nxt = tok.peek()
    if nxt == "vmap":
        tok.take()
        return ("vmap", left, _parse_table(tok))
    if nxt == "set":
        tok.take()
        if left[0] != "mark":
            raise _NotUnderstood("only `meta mark set` is understood")
        return ("mark", _parse_expr(tok))
    op = "=="
    if nxt in ("==", "!="):
        op = tok.take()
    return ("match", left, op, _parse_value(tok))


_EXPRESSION_STARTS = ("ip", "ip6", "meta", "th", "tcp", "udp", "sctp", "ct", "fib", "numgen", "iifname")


def _parse_expr(tok: _Tokens) -> tuple[Any, ...]:
    parts = [_parse_primary(tok)]
    while tok.peek() == ".":
        tok.take()
        parts.append(_parse_primary(tok))
    expr = parts[0] if len(parts) == 1 else ("concat", tuple(parts))
    if tok.peek() in ("&", "|", "^"):
        op = tok.take()
        expr = ("bitwise", op, expr, int(tok.take(), 0))
    return expr


def _parse_primary(tok: _Tokens) -> tuple[Any, ...]:
    word = tok.take()
    if word in ("ip", "ip6"):
        return ("addr", tok.take("saddr", "daddr"))
    if word == "meta":
        key = tok.take("l4proto", "mark")
        return (key,)
    if word in ("th", "tcp", "udp", "sctp"):
        return ("port", word, tok.take("dport", "sport"))
    if word == "ct":
        return ("ct", tok.take("state", "status"))
    if word == "fib":
        which = tok.take("saddr", "daddr")
        tok.take("type")
        return ("fib", which)
    if word == "iifname":
        return ("iface",)
    if word == "numgen":
        tok.take("random")
        tok.take("mod")
        mod = int(tok.take())
        offset = 0
        if tok.peek() == "offset":
            tok.take()
            offset = int(tok.take())
        return ("numgen", mod, offset)
    if word[:1].isdigit():
        return ("literal", int(word, 0))
    raise _NotUnderstood(f"expression {word!r}")


def _parse_value(tok: _Tokens) -> tuple[Any, ...]:
    word = tok.take()
    if word.startswith("@"):
        return ("ref", word[1:])
    if word == "{":
        items = []
        while (w := tok.take()) != "}":
            if w != ",":
                items.append(_unquote(w))
        return ("anon", tuple(items))
    parts = [word]
    while tok.peek() == ".":  # a concatenated literal, `a . b`
        tok.take()
        parts.append(tok.take())
    return ("literal", _unquote(" . ".join(parts)))


def _parse_table(tok: _Tokens) -> tuple[Any, ...]:
    """`@name`, or an anonymous map `{ k : v, … }` (keys normalised as _Table.elements does)."""
    word = tok.take()
    if word.startswith("@"):
        return ("ref", word[1:])
    if word != "{":
        raise _NotUnderstood(f"map {word!r}")
    entries: dict[str, str] = {}
    key: list[str] = []
    value: list[str] = []
    target = key
    while (w := tok.take()) != "}":
        if w == ":":
            target = value
        elif w == ",":
            entries[_norm_key(" ".join(key))] = " ".join(value)
            key, value = [], []
            target = key
        else:
            target.append(w)
    if key:
        entries[_norm_key(" ".join(key))] = " ".join(value)
    return ("anon", entries)


def _unquote(word: str) -> str:
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] == '"' else word
