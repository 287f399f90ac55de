"""The iptables Ruleset value, its text form (`render`) and reading it back (`parse`).

A Ruleset is tables → chains → rules for one IP family. A rule is the text after `-A CHAIN ` in
the *canonical form*: exactly what `iptables-save` prints for it (legacy and nft print the same),
e.g. `-d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80
-j KUBE-SVC-…`. The compiler emits that form directly, so a live dump and a compiled ruleset compare
as plain strings — no per-rule work on the hot path. `normalize()` turns any other spelling (kube-proxy's
restore text: `-m tcp -p tcp -d 10.0.0.1`, `--or-mark`, `--probability 0.3333333333`, unquoted
comments) into the canonical form; `parse(..., normalize=True)` applies it to text not from iptables-save.

Built-in chains (PREROUTING, INPUT, …) hold netkit's entry jumps; in a compiled Ruleset they contain
only those jumps, in a dump they contain whatever the node has. `render()` prints the iptables-save
format (loadable by `iptables-restore` into empty tables); partial `--noflush` payloads are the
planner's business (`plan.render_plan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from ipaddress import ip_network

from netkit.model import IPFamily
from netkit.rules.backend import Since
from netkit.rules.iptables.rule import ParseError, words

BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}
TABLE_ORDER = ("mangle", "filter", "nat")

Chains = Mapping[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Ruleset:
    family: IPFamily
    tables: Mapping[str, Chains] = field(default_factory=dict)
    # From a remembering Compiler: the chains (any table) that can differ from its previous result.
    since: Since[frozenset[str]] | None = field(default=None, compare=False, repr=False)

    def chains(self, table: str) -> Chains:
        return self.tables.get(table, {})

    def rules(self, table: str, chain: str) -> tuple[str, ...]:
        return self.tables.get(table, {}).get(chain, ())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ruleset):
            return NotImplemented
        return self.family is other.family and _plain(self.tables) == _plain(other.tables)

    def __hash__(self) -> int:
        return hash((self.family, tuple(sorted((t, tuple(sorted(c.items()))) for t, c in self.tables.items()))))


def _plain(tables: Mapping[str, Chains]) -> dict[str, dict[str, tuple[str, ...]]]:
    return {t: dict(c) for t, c in tables.items() if c}


def is_builtin(table: str, chain: str) -> bool:
    return chain in BUILTIN_CHAINS.get(table, ())


# --- render ---------------------------------------------------------------------------------------


def render(ruleset: Ruleset) -> str:
    """iptables-save format: every table, its chain declarations, then its rules."""
    out: list[str] = []
    for table in _table_order(ruleset.tables):
        chains = ruleset.tables[table]
        out.append(f"*{table}")
        builtins = [c for c in BUILTIN_CHAINS.get(table, ()) if c in chains]
        out.extend(f":{c} ACCEPT [0:0]" for c in builtins)
        out.extend(f":{c} - [0:0]" for c in chains if c not in builtins)
        for chain, rules in chains.items():
            prefix = f"-A {chain} "
            out.extend(prefix + r for r in rules)
        out.append("COMMIT")
    out.append("")
    return "\n".join(out)


def _table_order(tables: Mapping[str, Chains]) -> list[str]:
    return sorted(tables, key=lambda t: (TABLE_ORDER.index(t) if t in TABLE_ORDER else 99, t))


# --- parse ----------------------------------------------------------------------------------------


def parse(text: str, family: IPFamily, *, normalize_rules: bool = False) -> Ruleset:
    """Read iptables-save (or iptables-restore) text. Counters, policies and comments are dropped."""
    return parse_lines(text.splitlines(), family, normalize_rules=normalize_rules)


def parse_lines(lines: Iterable[str], family: IPFamily, *, normalize_rules: bool = False,
                reuse: Ruleset | None = None) -> Ruleset:
    """`parse` over lines as they come (the kernel edge streams iptables-save's output through it, so
    a 10k-service dump is never held as one text). With `reuse`, a chain whose rules equal that
    Ruleset's gets its tuple instead of the freshly read one, so a full sync that re-reads an
    unchanged kernel keeps one copy of the rules in memory, not two. iptables-save prints each
    chain's rules together, so a chain is settled as soon as the next one starts."""
    tables: dict[str, dict[str, list[str] | tuple[str, ...]]] = {}
    current: dict[str, list[str] | tuple[str, ...]] | None = None
    table = ""
    open_chain: str | None = None

    def settle() -> None:
        if current is not None and open_chain is not None:
            rules = tuple(current[open_chain])
            known = reuse.rules(table, open_chain) if reuse is not None else None
            current[open_chain] = known if known == rules and known is not None else rules

    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if not line or line[0] == "#":
            continue
        if line[0] == "*":
            settle()
            open_chain = None
            table = line[1:].strip()
            current = tables.setdefault(table, {})
        elif line == "COMMIT":
            settle()
            current, open_chain = None, None
        elif current is None:
            raise ParseError(f"line {lineno}: {line[:60]!r} outside a table")
        elif line[0] == ":":
            current.setdefault(line[1:].split(" ", 1)[0], [])
        elif line.startswith("-A "):
            chain, _, rule = line[3:].partition(" ")
            if chain != open_chain:
                settle()
                open_chain = chain
                existing = current.get(chain)
                current[chain] = list(existing) if existing is not None else []
            rules = current[chain]
            assert isinstance(rules, list)
            rules.append(normalize(rule, family) if normalize_rules else rule)
        else:
            raise ParseError(f"line {lineno}: cannot read {line[:60]!r}")
    settle()
    return Ruleset(family, {t: {c: tuple(r) for c, r in chains.items()} for t, chains in tables.items()})


# --- normalize ------------------------------------------------------------------------------------

# Options iptables-save prints before any -m match, in this order.
_GENERIC_ORDER = ("-s", "-d", "-i", "-o", "-p", "-f")
_GENERIC_ALIASES = {"--source": "-s", "--src": "-s", "--destination": "-d", "--dst": "-d",
                    "--in-interface": "-i", "--out-interface": "-o", "--protocol": "-p",
                    "--match": "-m", "--jump": "-j", "--goto": "-g"}


def normalize(rule: str, family: IPFamily) -> str:
    """The canonical (iptables-save) spelling of one rule given in any form iptables-restore accepts."""
    return _normalize_cached(rule, family)


@lru_cache(maxsize=200_000)
def _normalize_cached(rule: str, family: IPFamily) -> str:
    tokens = words(rule)
    generic: dict[str, list[str]] = {}
    sections: list[list[str]] = []  # each: ["-m", name, opts…] or ["-j"/"-g", target, opts…]
    negate = False
    it: Iterator[str] = iter(tokens)
    for tok in it:
        tok = _GENERIC_ALIASES.get(tok, tok)
        if tok == "!":
            negate = True
            continue
        if tok in _GENERIC_ORDER:  # match and target options are always --long, so this is safe
            value = next(it, "") if tok != "-f" else ""
            generic[tok] = (["!"] if negate else []) + [tok] + ([_generic_value(tok, value, family)] if value
                                                               else [])
        elif tok in ("-m", "-j", "-g"):
            sections.append([tok, next(it, "")] + (["!"] if negate else []))
        elif sections:
            if negate:
                sections[-1].append("!")
            sections[-1].append(tok)
        else:
            raise ParseError(f"cannot read rule {rule!r}: {tok!r} before any match or target")
        negate = False
    parts: list[str] = []
    for opt in _GENERIC_ORDER:
        parts.extend(generic.get(opt, ()))
    for section in sections:
        parts.extend(_section(section, family))
    return " ".join(parts)


def _generic_value(opt: str, value: str, family: IPFamily) -> str:
    if opt in ("-s", "-d"):
        try:
            return str(ip_network(value, strict=False))
        except ValueError:
            return value
    return value.lower() if opt == "-p" else value


def _section(section: list[str], family: IPFamily) -> list[str]:
    kind, name, opts = section[0], section[1], section[2:]
    if kind == "-m":
        fixer = _MATCH_FIXERS.get(name)
        opts = fixer(opts, family) if fixer else opts
    else:
        fixer = _TARGET_FIXERS.get(name)
        opts = fixer(opts, family) if fixer else opts
    return [kind, name, *opts]


def _comment(opts: list[str], family: IPFamily) -> list[str]:
    # iptables-save always double-quotes the comment text.
    if len(opts) >= 2 and opts[0] == "--comment":
        return ["--comment", '"' + opts[1].replace('"', '\\"') + '"', *opts[2:]]
    return opts


def _statistic(opts: list[str], family: IPFamily) -> list[str]:
    out = list(opts)
    if "--probability" in out:
        i = out.index("--probability")
        out[i + 1] = kernel_probability(float(out[i + 1]))
    return out


def _recent(opts: list[str], family: IPFamily) -> list[str]:
    # iptables-save order: action (--set/--rcheck/--update/--remove), --seconds, --hitcount, --reap,
    # --rttl, --name, --mask, --rsource/--rdest; name and mask get defaults.
    flags = {o for o in opts if o in ("--set", "--rcheck", "--update", "--remove", "--reap", "--rttl",
                                      "--rsource", "--rdest")}
    values = {opts[i]: opts[i + 1] for i in range(len(opts) - 1)
              if opts[i] in ("--seconds", "--hitcount", "--name", "--mask")}
    out: list[str] = [f for f in ("--set", "--rcheck", "--update", "--remove") if f in flags]
    for opt in ("--seconds", "--hitcount"):
        if opt in values:
            out += [opt, values[opt]]
    out += [f for f in ("--reap", "--rttl") if f in flags]
    out += ["--name", values.get("--name", "DEFAULT")]
    out += ["--mask", values.get("--mask", _FULL_MASK[family])]
    out.append("--rdest" if "--rdest" in flags else "--rsource")
    return out


_FULL_MASK = {IPFamily.IPV4: "255.255.255.255", IPFamily.IPV6: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}


def _mark_target(opts: list[str], family: IPFamily) -> list[str]:
    if len(opts) >= 2:
        op, value = opts[0], opts[1]
        mark = value.split("/")[0]
        if op == "--or-mark":
            return ["--set-xmark", f"{int(mark, 0):#x}/{int(mark, 0):#x}"]
        if op == "--xor-mark":
            return ["--set-xmark", f"{int(mark, 0):#x}/0x0"]
        if op == "--and-mark":
            return ["--set-xmark", f"0x0/{(~int(mark, 0)) & 0xFFFFFFFF:#x}"]
        if op == "--set-mark":
            return ["--set-xmark", f"{int(mark, 0):#x}/0xffffffff"]
    return opts


def _reject_target(opts: list[str], family: IPFamily) -> list[str]:
    if "--reject-with" in opts:
        return opts
    default = "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable"
    return ["--reject-with", default]


def _nfacct(opts: list[str], family: IPFamily) -> list[str]:
    # iptables-save prints two spaces between --nfacct-name and the counter's name.
    if len(opts) >= 2 and opts[0] == "--nfacct-name":
        return ["--nfacct-name", " " + opts[1], *opts[2:]]
    return opts


_MATCH_FIXERS = {"nfacct": _nfacct, "comment": _comment, "statistic": _statistic, "recent": _recent}
_TARGET_FIXERS = {"MARK": _mark_target, "REJECT": _reject_target}


def kernel_probability(p: float) -> str:
    """xt_statistic keeps the probability as a 31-bit fraction and prints it with 11 decimals."""
    return _fraction_text(p * 0x80000000)


@lru_cache(maxsize=4096)
def probability_of(n: int) -> str:
    """The canonical probability text for the first of n remaining endpoints (1/n)."""
    return _fraction_text(0x80000000 / n)


@lru_cache(maxsize=4096)
def _fraction_text(scaled: float) -> str:
    return f"{int(scaled + 0.5) / 0x80000000:.11f}"


def quote_comment(text: str) -> str:
    """The comment as iptables-save prints it. Callers pass only validated names (no quotes, no
    newlines); this refuses anything else rather than let it reach a restore payload."""
    if '"' in text or "\n" in text or "\\" in text:
        raise ValueError(f"refusing comment text {text!r}")
    return f'"{text}"'
