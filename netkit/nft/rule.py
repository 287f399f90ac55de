"""The one typed reader of an nftables rule: `read(text) → Rule`, for everything that looks inside rules.

A Ruleset keeps each rule as its canonical text (ruleset.py), the spelling `compile` writes and
`parse` prints back from the kernel's JSON: the planner compares those strings and needs no more.
Whatever asks what a rule *does* — netkit's nftables tracer, its summary of service ports,
keeping invalid Services' objects (netkit.rules.nftables: trace, summary, keep) — reads it here, once per distinct
text (cached), into frozen values whose `str()` is that text again:

    ip daddr 10.96.0.10 th dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
    └ Match(Payload, ==, Value) ┘ └ Match ─┘ └ Match(…, !=, …) ─────┘ └ Verdict(jump) ──────┘

    meta l4proto tcp dnat ip to numgen random mod 2 offset 939057152 map @endpoints-tcp-0e
    └ Match(Meta) ──┘ └ Dnat(ip, MapLookup(Numgen, SetRef)) ─────────────────────────────┘

What it reads is what netkit writes (the expressions and statements listed by the classes below);
anything else — a foreign rule (`# foreign: …`, parse.py) or an expression netkit never writes —
raises NotUnderstood naming what it met, which the tracer reports and the summaries skip. Values
(addresses, prefixes, ports, flags) stay text as written: the reader keeps their spelling, and each
user compares them its own way. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

# ── expressions: what a match or a map looks at ─────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Payload:
    """`ip saddr`, `ip6 daddr`, `th dport`, `tcp sport` …"""

    protocol: str
    field: str

    def __str__(self) -> str:
        return f"{self.protocol} {self.field}"


@dataclass(frozen=True, slots=True)
class Meta:
    """`meta l4proto`, `meta mark`; `iifname` and `oifname` are written bare."""

    key: str

    def __str__(self) -> str:
        return self.key if self.key in _BARE_META else f"meta {self.key}"


@dataclass(frozen=True, slots=True)
class Ct:
    """`ct state`, `ct status`."""

    key: str

    def __str__(self) -> str:
        return f"ct {self.key}"


@dataclass(frozen=True, slots=True)
class Fib:
    """`fib daddr type`: the route type of an address."""

    address: str  # saddr or daddr

    def __str__(self) -> str:
        return f"fib {self.address} type"


@dataclass(frozen=True, slots=True)
class Numgen:
    """`numgen random mod N [offset O]`: 0 … N-1 (plus O) with equal probability."""

    mod: int
    offset: int = 0

    def __str__(self) -> str:
        return f"numgen random mod {self.mod}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True, slots=True)
class Number:
    """An integer where an expression stands (the key of a constant lookup)."""

    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class Concat:
    """`a . b . c`"""

    parts: tuple[Primary, ...]

    def __str__(self) -> str:
        return " . ".join(str(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class Bitwise:
    """`meta mark & 0x4000`: an expression combined with a constant (written in hex)."""

    inner: Primary | Concat
    op: str  # & | ^
    operand: int

    def __str__(self) -> str:
        return f"{self.inner} {self.op} {self.operand:#x}"


Primary = Payload | Meta | Ct | Fib | Numgen | Number
Expr = Primary | Concat | Bitwise

# ── what an expression is compared with or looked up in ──────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Value:
    """A constant as written: an address, prefix, range, port, protocol, flag list, `"eth0"`, `a . b`."""

    text: str

    @property
    def unquoted(self) -> str:
        t = self.text
        return t[1:-1] if len(t) >= 2 and t[0] == t[-1] == '"' else t

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class AnonSet:
    """`{ a, b }` (nft writes a set of one as the bare value)."""

    items: tuple[Value, ...]

    def __str__(self) -> str:
        return "{ " + ", ".join(str(i) for i in self.items) + " }"


@dataclass(frozen=True, slots=True)
class SetRef:
    """`@name`: a named set or map of the table."""

    name: str

    def __str__(self) -> str:
        return f"@{self.name}"


@dataclass(frozen=True, slots=True)
class AnonMap:
    """`{ k : v, … }`: keys and values as written (a value may be a verdict, `goto X`)."""

    entries: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return "{ " + ", ".join(f"{k} : {v}" for k, v in self.entries) + " }"


Operand = Value | AnonSet | SetRef
Table = SetRef | AnonMap

# ── statements ───────────────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Match:
    """`left right` (==, or `in` for a set) or `left != right`; `==` is written only after a bitwise
    expression, as nft lists it."""

    left: Expr
    op: str  # == or !=
    right: Operand

    def __str__(self) -> str:
        if self.op == "==" and not isinstance(self.left, Bitwise):
            return f"{self.left} {self.right}"
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True, slots=True)
class VerdictMap:
    """`key vmap @map` or `key vmap { k : verdict, … }`."""

    key: Expr
    table: Table

    def __str__(self) -> str:
        return f"{self.key} vmap {self.table}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """`jump X`, `goto X`, `accept`, `drop`, `return`, `continue`; `reject [with …]`."""

    verb: str
    target: str | None = None  # the chain of jump/goto; for reject, what follows `with`

    def __str__(self) -> str:
        if self.target is None:
            return self.verb
        return f"reject with {self.target}" if self.verb == "reject" else f"{self.verb} {self.target}"


@dataclass(frozen=True, slots=True)
class Masquerade:
    flags: tuple[str, ...] = ()  # fully-random, random, persistent

    def __str__(self) -> str:
        return "masquerade" + (" " + ",".join(self.flags) if self.flags else "")


@dataclass(frozen=True, slots=True)
class MapLookup:
    """`key map @map` / `key map { k : v, … }`: the value found for the key (a dnat target)."""

    key: Expr
    table: Table

    def __str__(self) -> str:
        return f"{self.key} map {self.table}"


@dataclass(frozen=True, slots=True)
class Dnat:
    """`dnat ip to 10.0.0.1:8080` (`[v6]:port`), or `dnat ip to <key> map …` (values `addr . port`)."""

    family: str | None  # ip / ip6 as written, None if not
    to: Value | MapLookup

    def __str__(self) -> str:
        return f"dnat {self.family} to {self.to}" if self.family else f"dnat to {self.to}"


@dataclass(frozen=True, slots=True)
class MarkSet:
    """`meta mark set <expr>`."""

    value: Expr

    def __str__(self) -> str:
        return f"meta mark set {self.value}"


@dataclass(frozen=True, slots=True)
class SetUpdate:
    """`update @set { expr }` (or `add`): remember the key in a dynamic set."""

    op: str
    set: str
    key: Expr

    def __str__(self) -> str:
        return f"{self.op} @{self.set} {{ {self.key} }}"


@dataclass(frozen=True, slots=True)
class Counter:
    def __str__(self) -> str:
        return "counter"


Statement = Match | VerdictMap | Verdict | Masquerade | Dnat | MarkSet | SetUpdate | Counter


@dataclass(frozen=True, slots=True)
class Rule:
    statements: tuple[Statement, ...]

    def __str__(self) -> str:
        return " ".join(str(s) for s in self.statements)

    def dnats(self) -> Iterator[Dnat]:
        return (s for s in self.statements if isinstance(s, Dnat))

    def chains(self) -> frozenset[str]:
        """The chains it jumps or goes to (also through an anonymous verdict map)."""
        found: set[str] = set()
        for s in self.statements:
            if isinstance(s, Verdict) and s.verb in ("jump", "goto") and s.target:
                found.add(s.target)
            elif isinstance(s, VerdictMap) and isinstance(s.table, AnonMap):
                found.update(w[1] for _, v in s.table.entries if len(w := v.split()) == 2 and w[0] in ("jump", "goto"))
        return frozenset(found)

    def sets(self) -> frozenset[str]:
        """The named sets and maps it uses."""
        found: set[str] = set()
        for s in self.statements:
            if isinstance(s, Match) and isinstance(s.right, SetRef):
                found.add(s.right.name)
            elif isinstance(s, VerdictMap) and isinstance(s.table, SetRef):
                found.add(s.table.name)
            elif isinstance(s, Dnat) and isinstance(s.to, MapLookup) and isinstance(s.to.table, SetRef):
                found.add(s.to.table.name)
            elif isinstance(s, SetUpdate):
                found.add(s.set)
        return frozenset(found)


def slots(lookup: MapLookup) -> frozenset[str] | None:
    """The keys a `numgen random mod N offset O map …` lookup can take (O … O+N-1, as text); None
    when the key is anything else (every key of the map may be found)."""
    if not isinstance(lookup.key, Numgen):
        return None
    return frozenset(str(lookup.key.offset + i) for i in range(lookup.key.mod))


class MapElement(Protocol):
    """An element of a named map as `endpoints` reads it (ruleset.Element is one)."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str | None: ...


class NamedMap(Protocol):
    """A named map as `endpoints` reads it (ruleset.NamedSet is one; ruleset.py imports this module)."""

    @property
    def elements(self) -> Iterable[MapElement]: ...


def endpoints(dnat: Dnat, sets: Mapping[str, NamedMap]) -> list[str]:
    """The `IP:port` (`[IPv6]:port`) targets a dnat statement can choose, its named maps read from `sets`."""
    if isinstance(dnat.to, Value):
        return [dnat.to.text]
    table = dnat.to.table
    if isinstance(table, AnonMap):
        values = [v for _, v in table.entries]
    else:
        found = sets.get(table.name)
        keys = slots(dnat.to)
        values = [e.value for e in found.elements if e.value and (keys is None or e.key in keys)] if found else []
    return [hostport(v) for v in values]


def hostport(value: str) -> str:
    """An endpoint map value `addr . port` as a dnat target `addr:port` (`[v6]:port`)."""
    host, _, port = value.partition(" . ")
    host = host.strip()
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port.strip()}" if port else shown


def host(target: str) -> str:
    """The address of a dnat target `A:P`, `[v6]:P`, `A` or `v6`."""
    if target.startswith("["):
        return target[1:].partition("]")[0]
    return target.partition(":")[0] if target.count(":") == 1 else target


class NotUnderstood(ValueError):
    """A rule with an expression or statement netkit never writes."""


@lru_cache(maxsize=100_000)
def read(text: str) -> Rule:
    """The rule written as `text`; NotUnderstood if netkit never writes such a rule."""
    tok = _Tokens(text)
    statements: list[Statement] = []
    while tok.peek() is not None:
        statements.append(_statement(tok))
    return Rule(tuple(statements))


def readable(text: str) -> Rule | None:
    """`read(text)`, or None when it cannot be read (a foreign rule)."""
    try:
        return read(text)
    except NotUnderstood:
        return None


# ── the reader ───────────────────────────────────────────────────────────────────────────────────

_BARE_META = ("iifname", "oifname")
_VERDICTS = ("accept", "drop", "return", "continue")
_MASQUERADE_FLAGS = ("fully-random", "random", "persistent")
_EXPRESSION_STARTS = ("ip", "ip6", "meta", "th", "tcp", "udp", "sctp", "ct", "fib", "numgen", "iifname")


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
            raise NotUnderstood(f"expected {' or '.join(expected) or 'more'} at {word!r}")
        self.i += 1
        return word

    def rest(self) -> str:
        words, self.i = self.words[self.i:], len(self.words)
        return " ".join(words)


def _statement(tok: _Tokens) -> Statement:
    word = tok.peek()
    if word in ("jump", "goto"):
        tok.take()
        return Verdict(word, tok.take())
    if word in _VERDICTS:
        return Verdict(tok.take())
    if word == "reject":
        tok.take()
        if tok.peek() != "with":
            return Verdict("reject")
        tok.take()
        return Verdict("reject", tok.rest())  # `with icmp type …`, `with tcp reset`
    if word == "masquerade":
        return _masquerade(tok)
    if word == "dnat":
        return _dnat(tok)
    if word in ("update", "add"):
        return _set_update(tok)
    if word == "counter":
        tok.take()
        return Counter()
    left = _expr(tok)
    if tok.peek() == "vmap":
        tok.take()
        return VerdictMap(left, _table(tok))
    if tok.peek() == "set":
        tok.take()
        if left != Meta("mark"):
            raise NotUnderstood("only `meta mark set` is understood")
        return MarkSet(_expr(tok))
    op = tok.take() if tok.peek() in ("==", "!=") else "=="
    return Match(left, op, _operand(tok))


def _masquerade(tok: _Tokens) -> Masquerade:
    tok.take()
    flags: list[str] = []
    while tok.peek() in _MASQUERADE_FLAGS:
        flags.append(tok.take())
        if tok.peek() == "," and tok.peek(1) in _MASQUERADE_FLAGS:
            tok.take()
    return Masquerade(tuple(flags))


def _dnat(tok: _Tokens) -> Dnat:
    tok.take()
    family = tok.take() if tok.peek() in ("ip", "ip6") else None
    tok.take("to")
    if tok.peek() in _EXPRESSION_STARTS:
        key = _expr(tok)
        tok.take("map")
        return Dnat(family, MapLookup(key, _table(tok)))
    return Dnat(family, Value(tok.take()))


def _set_update(tok: _Tokens) -> SetUpdate:
    op, name = tok.take(), tok.take()
    if not name.startswith("@"):
        raise NotUnderstood(f"{op} of {name}")
    tok.take("{")
    key = _expr(tok)
    tok.take("}")
    return SetUpdate(op, name[1:], key)


def _expr(tok: _Tokens) -> Expr:
    parts = [_primary(tok)]
    while tok.peek() == ".":
        tok.take()
        parts.append(_primary(tok))
    expr: Expr = parts[0] if len(parts) == 1 else Concat(tuple(parts))
    if tok.peek() in ("&", "|", "^"):
        op = tok.take()
        if isinstance(expr, Bitwise):
            raise NotUnderstood("nested bitwise expression")
        expr = Bitwise(expr, op, _int(tok.take()))
    return expr


def _primary(tok: _Tokens) -> Primary:
    word = tok.take()
    if word in ("ip", "ip6"):
        return Payload(word, tok.take("saddr", "daddr"))
    if word == "meta":
        return Meta(tok.take("l4proto", "mark"))
    if word == "iifname":  # netkit matches no output interface
        return Meta(word)
    if word in ("th", "tcp", "udp", "sctp"):
        return Payload(word, tok.take("dport", "sport"))
    if word == "ct":
        return Ct(tok.take("state", "status"))
    if word == "fib":
        which = tok.take("saddr", "daddr")
        tok.take("type")
        return Fib(which)
    if word == "numgen":
        tok.take("random")
        tok.take("mod")
        mod = _int(tok.take())
        if tok.peek() != "offset":
            return Numgen(mod)
        tok.take()
        return Numgen(mod, _int(tok.take()))
    if word[:1].isdigit():
        return Number(_int(word))
    raise NotUnderstood(f"expression {word!r}")


def _operand(tok: _Tokens) -> Operand:
    word = tok.take()
    if word.startswith("@"):
        return SetRef(word[1:])
    if word == "{":
        items: list[Value] = []
        while (w := tok.take()) != "}":
            if w != ",":
                items.append(Value(w))
        return AnonSet(tuple(items))
    parts = [word]
    while tok.peek() == ".":  # a concatenated constant, `a . b`
        tok.take()
        parts.append(tok.take())
    return Value(" . ".join(parts))


def _table(tok: _Tokens) -> Table:
    word = tok.take()
    if word.startswith("@"):
        return SetRef(word[1:])
    if word != "{":
        raise NotUnderstood(f"map {word!r}")
    entries: list[tuple[str, str]] = []
    key: list[str] = []
    value: list[str] = []
    target = key
    while (w := tok.take()) != "}":
        if w == ":":
            target = value
        elif w == ",":
            entries.append((" ".join(key), " ".join(value)))
            key, value = [], []
            target = key
        else:
            target.append(w)
    if key:
        entries.append((" ".join(key), " ".join(value)))
    return AnonMap(tuple(entries))


def _int(word: str) -> int:
    try:
        return int(word, 0)
    except ValueError:
        raise NotUnderstood(f"not a number: {word!r}") from None
