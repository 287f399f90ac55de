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

import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from ipaddress import ip_network
from itertools import compress, groupby
from operator import is_not, itemgetter, methodcaller

from netkit.change import Since
from netkit.model import IPFamily
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
    # From `read_expecting`: the chains (any table) that can differ from the ruleset it was given.
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
    reader = Reader(family, normalize_rules=normalize_rules)
    reader.feed(text.splitlines())
    return reader.result()


def parse_lines(lines: Iterable[str], family: IPFamily, *, normalize_rules: bool = False,
                reuse: Ruleset | None = None) -> Ruleset:
    """`parse` over lines as they come (each may end in a newline)."""
    reader = Reader(family, normalize_rules=normalize_rules, reuse=reuse)
    reader.feed([line.rstrip("\n") for line in lines])
    return reader.result()


def parse_chunks(chunks: Iterable[bytes], family: IPFamily, *, reuse: Ruleset | None = None) -> Ruleset:
    """`parse` over iptables-save's output as it streams in, in pieces cut anywhere (the kernel edge
    reads the tool's pipe so: a 10k-service dump is never held whole, and is read while the tool
    still writes it)."""
    reader = Reader(family, reuse=reuse)
    _feed_chunks(reader, chunks)
    return reader.result()


def _feed_chunks(reader: Reader, chunks: Iterable[bytes], pending: bytes = b"") -> None:
    """Feed `reader` the lines of `chunks` (cut anywhere), `pending` the start of the first."""
    for chunk in chunks:
        data = pending + chunk if pending else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        reader.feed(data[:cut].decode().split("\n"))
        pending = data[cut + 1:]
    if pending:
        reader.feed([pending.decode()])


# --- reading a dump expected to hold a known ruleset ----------------------------------------------
#
# A full sync re-reads the kernel to find drift, and almost always finds none. iptables-legacy-save
# prints a table the same way every time: the built-in chains' declarations (with their counters),
# the other chains' declarations sorted by name (libiptc keeps them so), then every chain's rules in
# that order. So the text the committed ruleset would print is built before the dump arrives, while
# the tool still reads the kernel (~60 ms of C at 10k services), and the dump is compared with it a
# pipe read at a time — no line is split, no chain grouped. At the first difference the table is
# read the usual way from its start, so the result never depends on the shortcut (a property test
# compares the two on varied rulesets).


@dataclass(frozen=True, slots=True)
class Expected:
    """What iptables-legacy-save prints of `table` after its built-in chains' declarations, up to
    and with COMMIT, when the kernel holds exactly `chains` (which that text reads as); `differs`:
    the chains of those that are not the very tuples of the ruleset the dump is read against."""

    table: str
    text: str
    chains: Chains
    differs: frozenset[str] = frozenset()


def expected_save(table: str, known: Chains, differs: frozenset[str] = frozenset()) -> Expected:
    builtins = [c for c in BUILTIN_CHAINS.get(table, ()) if c in known]
    users = sorted(c for c in known if not is_builtin(table, c))  # str order is strcmp's for ASCII names
    order = [*builtins, *users]
    rules = list(map(known.__getitem__, order))
    return Expected(table, _save_text(users, order, rules), dict(zip(order, rules, strict=True)), differs)


def _save_text(users: list[str], order: list[str], rules: list[tuple[str, ...]]) -> str:
    """The declarations of `users`, then each chain's rules in `order`, then COMMIT: one join of
    the pieces, which are the rules themselves and one prefix string per chain (at 10k services,
    110k chains of 340k rules: no string is made per line, so the text is the only new 37 MB;
    most chains are KUBE-SEP ones of two rules, added in one step each)."""
    out: list[str] = []
    add = out.extend
    for chain in users:
        add((":", chain, " - [0:0]\n"))
    for chain, lines in zip(order, rules, strict=True):
        prefix = f"-A {chain} "
        if len(lines) == 2:
            add((prefix, lines[0], "\n", prefix, lines[1], "\n"))
        else:
            for line in lines:
                add((prefix, line, "\n"))
    out.append("COMMIT\n")
    return "".join(out)


def read_expecting(tables: Iterable[Iterable[bytes]], family: IPFamily, known: Ruleset,
                   expected: Mapping[str, Expected]) -> tuple[Ruleset, frozenset[str]]:
    """`parse_chunks(..., reuse=known)` of iptables-save's output, one iterable of pieces per table,
    comparing each table with its `expected` text first (built from `known`, or from what else the
    kernel is expected to hold besides); and the tables that equalled it. The result's `since`
    names every chain that can differ from `known` (for the planner: the rest are `known`'s very
    tuples)."""
    reader = Reader(family, reuse=known)
    matched = frozenset(t for chunks in tables if (t := _read_table(reader, _texts(chunks), expected)))
    result = reader.result()
    return replace(result, since=Since(weakref.ref(known), _differing(result, known, expected, matched))), matched


def _read_table(reader: Reader, texts: Iterator[str], expected: Mapping[str, Expected]) -> str | None:
    """Read one table's text into `reader`; its name if it equalled the expected text."""
    buf = ""
    for piece in texts:
        buf += piece
        if (end := _header_end(buf)) >= 0:
            break
    else:
        _feed_text(reader, buf)
        return None
    _feed_text(reader, buf[:end])
    want = expected.get(reader.table) if reader.current is not None else None
    buf = buf[end:]
    at = 0
    while want is not None:
        room = len(want.text) - at
        if len(buf) >= room:
            if not want.text.startswith(buf[:room], at):
                break
            assert reader.current is not None
            reader.current.update(want.chains)
            reader.lineno += want.text.count("\n") - 1  # an error in what follows says its own line
            rest = "".join((buf[room:], *texts))  # iptables-save's closing comment
            _feed_text(reader, "COMMIT\n" + rest)
            return want.table if all(not line or line[0] == "#" for line in rest.split("\n")) else None
        if not want.text.startswith(buf, at):
            break
        at += len(buf)
        buf = next(texts, "")
        if not buf:
            break
    if want is not None:  # it differs from `at` on: read the table the usual way
        _feed_text(reader, want.text[:at])
    _feed_text(reader, buf)
    for piece in texts:
        _feed_text(reader, piece)
    return None


def _header_end(text: str) -> int:
    """Where the comments, `*table` and built-in chains' declarations (`:INPUT ACCEPT [3:180]`) end;
    -1 if `text` does not show it yet."""
    at = 0
    while (nl := text.find("\n", at)) >= 0:
        line = text[at:nl]
        if not (line[:1] in ("#", "*") or (line[:1] == ":" and line.split(" ", 2)[1:2] != ["-"])):
            return at
        at = nl + 1
    return -1


def _texts(chunks: Iterable[bytes]) -> Iterator[str]:
    """`chunks` decoded, each piece cut after its last newline (the last piece may lack one)."""
    pending = b""
    for chunk in chunks:
        data = pending + chunk if pending else chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut].decode()
        pending = data[cut:]
    if pending:
        yield pending.decode()


def _feed_text(reader: Reader, text: str) -> None:
    if text:
        reader.feed(text[:-1].split("\n") if text[-1] == "\n" else text.split("\n"))


def _differing(result: Ruleset, known: Ruleset, expected: Mapping[str, Expected],
               matched: frozenset[str]) -> frozenset[str]:
    out: set[str] = set()
    for table in set(result.tables) | set(known.tables):
        mine, theirs = result.chains(table), known.chains(table)
        if table in matched:  # the expected chains, and the built-in ones the header declared
            out.update(expected[table].differs)
            out.update(c for c in BUILTIN_CHAINS.get(table, ()) if c in mine and mine[c] is not theirs.get(c))
            continue
        out.update(compress(mine, map(is_not, mine.values(), map(theirs.get, mine))))
        out.update(theirs.keys() - mine.keys())
    return frozenset(out)


_SPLIT_RULE = methodcaller("split", " ", 2)  # "-A CHAIN rule…" → ["-A", "CHAIN", "rule…"]
_SPLIT_DECLARATION = methodcaller("split", " ", 1)  # ":CHAIN ACCEPT [0:0]" → [":CHAIN", …]
_IS_RULE = methodcaller("startswith", "-A ")
_IS_DECLARATION = methodcaller("startswith", ":")
_WITHOUT_COLON = methodcaller("__getitem__", slice(1, None))
_FIRST, _CHAIN_OF, _RULE_OF = itemgetter(0), itemgetter(1), itemgetter(2)


class Reader:
    """iptables-save text → Ruleset, fed lines (without their newlines) in any number of pieces.

    iptables-save prints a table's chain declarations together, then each chain's rules together,
    then COMMIT; so a run of declarations or of `-A` lines is split and grouped by chain in C
    (str.split, itertools.groupby) rather than line by line: at 10k services that is 110k chains and
    340k rules. Anything else goes through the line-by-line path, which also says what it cannot
    read. With `reuse`, a chain whose rules equal that Ruleset's gets its tuple instead of the
    freshly read one, so a full sync that re-reads an unchanged kernel keeps one copy of the rules
    in memory, not two (and the planner compares those chains by identity)."""

    def __init__(self, family: IPFamily, *, normalize_rules: bool = False, reuse: Ruleset | None = None) -> None:
        self.family, self.normalize_rules, self.reuse = family, normalize_rules, reuse
        self.tables: dict[str, dict[str, tuple[str, ...]]] = {}
        self.current: dict[str, tuple[str, ...]] | None = None
        self.known: Chains = {}  # reuse's chains of the current table
        self.table = ""
        self.open: str | None = None  # the chain whose rules are being read
        self.rules: list[str] = []
        self.lineno = 0

    def feed(self, lines: list[str]) -> None:
        i, count = 0, len(lines)
        while i < count:
            line = lines[i]
            if self.current is not None and line and line[0] in ":-" and not self.normalize_rules:
                end = _run_end(lines, i, "-A " if line[0] == "-" else ":")
                if end > i:
                    run = lines[i:end]
                    if not (self._rules(run) if line[0] == "-" else self._declarations(run)):
                        for one in run:
                            self.lineno += 1
                            self._line(one)
                    else:
                        self.lineno += end - i
                    i = end
                    continue
            self.lineno += 1
            self._line(line)
            i += 1

    def result(self) -> Ruleset:
        self._settle()
        return Ruleset(self.family, self.tables)

    def _declarations(self, run: list[str]) -> bool:
        assert self.current is not None
        for chain in map(_WITHOUT_COLON, map(_FIRST, map(_SPLIT_DECLARATION, run))):
            self.current.setdefault(chain, ())
        return True

    def _rules(self, run: list[str]) -> bool:
        """A run of `-A` lines, grouped by chain in C; False (nothing done) for a rule-less `-A CHAIN`."""
        try:
            groups = [(chain, tuple(map(_RULE_OF, grp))) for chain, grp in groupby(map(_SPLIT_RULE, run), _CHAIN_OF)]
        except IndexError:
            return False
        current, known = self.current, self.known
        assert current is not None
        last = len(groups) - 1
        for i, (chain, rules) in enumerate(groups):
            if i == 0 and chain == self.open:
                self.rules += rules
                if last:
                    self._settle()
                continue
            if i == 0:
                self._settle()
            if i == last:  # may go on in the next piece
                self.open, self.rules = chain, [*current.get(chain, ()), *rules]
                continue
            before = current.get(chain)
            if before:  # a chain whose rules come in two places
                rules = (*before, *rules)
            same = known.get(chain)
            current[chain] = same if same is not None and same == rules else rules
        return True

    def _line(self, line: str) -> None:
        if not line or line[0] == "#":
            return
        if line[0] == "*":
            self._settle()
            self.table = line[1:].strip()
            self.current = self.tables.setdefault(self.table, {})
            self.known = self.reuse.chains(self.table) if self.reuse is not None else {}
        elif line == "COMMIT":
            self._settle()
            self.current = None
        elif self.current is None:
            raise ParseError(f"line {self.lineno}: {line[:60]!r} outside a table")
        elif line[0] == ":":
            self.current.setdefault(line[1:].split(" ", 1)[0], ())
        elif line.startswith("-A "):
            chain, _, rule = line[3:].partition(" ")
            if chain != self.open:
                self._settle()
                self.open, self.rules = chain, list(self.current.get(chain, ()))
            self.rules.append(normalize(rule, self.family) if self.normalize_rules else rule)
        else:
            raise ParseError(f"line {self.lineno}: cannot read {line[:60]!r}")

    def _settle(self) -> None:
        if self.current is not None and self.open is not None:
            rules = tuple(self.rules)
            same = self.known.get(self.open)
            self.current[self.open] = same if same is not None and same == rules else rules
        self.open, self.rules = None, []


def _run_end(lines: list[str], start: int, prefix: str) -> int:
    """The end of the run of lines starting with `prefix` from `start` (iptables-save ends the rules
    with COMMIT); where anything else comes first, the run ends there."""
    try:
        end = lines.index("COMMIT", start) if prefix == "-A " else len(lines)
    except ValueError:
        end = len(lines)
    run = lines[start:end]
    test = _IS_RULE if prefix == "-A " else _IS_DECLARATION
    if all(map(test, run)):
        return end
    return start + list(map(test, run)).index(False)


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
