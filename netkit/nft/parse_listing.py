"""parse_listing(lines) -> Ruleset: from nft's TEXT listing, `nft -y -T list table <family> netkit`.

Why text: at 10,000 services × 10 endpoints nft 1.0.6 lists the table as text in 1.5 s and 261 MB,
as JSON in 2.0 s and 527 MB (docs/nftables.md). The text is read one line at a time (from the file
the listing was written to), so the listing is never held whole in this process.

Exact or nothing. This reader knows the listing of what `compile` writes and nothing else: every
line must be one of the shapes below, every rule must read back through rule.py's typed reader to
the very text it was read from (after the normalisations), and every value must look like the
values netkit writes. Anything else — a counter, a comment, an element timeout, a statement or set
attribute netkit never writes, a foreign rule — raises `Unrecognised`, and the caller reads the JSON
listing instead (kernel.py), whose parser (parse.py) knows how to show and repair foreign edits. So
the result is the Ruleset parse.py would have read from the JSON of the same table, or none at all;
tests/netns/test_nft_listing.py compares the two on every shape netkit emits.

With `-y` (numeric priorities) and `-T` (times in seconds) the text differs from the canonical
spelling (ruleset.py) only where nft 1.0.6 prints values its own way; normalised here:

- integers after a bitwise operator and their results are printed zero-padded to the width of the
  field (`meta mark & 0x00004000 == 0x00000000`): canonical `0x4000`, `0x0`;
- `dnat ip to 10.0.0.1:80` is listed without its family (`dnat to …`) unless it maps; the family is
  put back as parse.py does for the JSON;
- an anonymous set of addresses comes back merged by the kernel, possibly as ranges: sorted
  prefixes again (ruleset.prefixes, as for the JSON);
- a dynamic set (flags dynamic,timeout) is a set with timeout, as in the JSON; its elements are
  runtime state and skipped;
- an endpoint map declared with `typeof numgen random mod 1 : ip daddr . tcp dport` has the types
  the JSON shows (`integer : ipv4_addr . inet_service`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import repeat

from netkit.nft.parse import ParseError, anonymous, shared
from netkit.nft.rule import (
    AnonSet,
    Bitwise,
    Counter,
    Dnat,
    Match,
    Meta,
    NotUnderstood,
    Rule,
    SetRef,
    Value,
    Verdict,
    VerdictMap,
    read,
)
from netkit.nft.ruleset import Chain, Element, Hook, NamedSet, Ruleset

# nft's options for the listing this module reads: numeric chain priorities, times in seconds.
LIST_OPTIONS = ("-y", "-T")


class Unrecognised(ParseError):
    """The listing holds something this reader does not know; read the JSON listing instead."""


def parse_listing(lines: Iterable[str], family: str, table: str, *, like: Ruleset | None = None) -> Ruleset | None:
    """The table `table` of `family` in the listing (None when the listing is empty); raises
    Unrecognised on anything the reader does not know. `like`: as in parse.parse (equal sets and
    chains are shared with it)."""
    body = _stripped(lines)
    first = next(body, None)
    if first is None:
        return None
    if first != f"table {family} {table} {{":
        raise Unrecognised(f"listing starts with {first!r}")
    same = like is not None and like.family == family and like.table == table
    old_sets = like.set_map() if like is not None and same else {}
    old_chains = like.chain_map() if like is not None and same else {}
    sets: list[NamedSet] = []
    chains: list[Chain] = []
    rules = Rules(family)
    for line in body:
        if line == "}":
            if next(body, None) is not None:
                raise Unrecognised("more than one table in the listing")
            return Ruleset.of(family, sets, chains, table)
        kind, name = _header(line)
        if kind == "chain":
            chains.append(shared(_chain(name, body, rules), old_chains))
        else:
            sets.append(shared(_set(name, kind == "map", body), old_sets))
    raise Unrecognised("listing ends inside the table")


def _stripped(lines: Iterable[str]) -> Iterator[str]:
    """The listing's lines without indentation, blank ones left out."""
    for line in lines:
        line = line.strip()
        if line:
            yield line


_NAME = r"[A-Za-z0-9_./:\-]+"
_HEADER = re.compile(rf"(set|map|chain) ({_NAME}) \{{")


def _header(line: str) -> tuple[str, str]:
    found = _HEADER.fullmatch(line)
    if found is None:
        raise Unrecognised(f"table line {line!r}")
    return found[1], found[2]


# ── chains ───────────────────────────────────────────────────────────────────────────────────────

_HOOK = re.compile(r"type (filter|nat) hook (prerouting|input|forward|output|postrouting) "
                   r"priority (-?[0-9]+); policy (accept|drop);")


def _chain(name: str, lines: Iterator[str], rules_: Rules) -> Chain:
    hook: Hook | None = None
    rules: list[str] = []
    for line in lines:
        if line == "}":
            return Chain(name, tuple(rules), hook)
        if hook is None and not rules and line.startswith("type "):
            found = _HOOK.fullmatch(line)
            if found is None:
                raise Unrecognised(f"chain {name}: {line!r}")
            hook = Hook(found[1], found[2], int(found[3]), found[4])
        else:
            rules.append(rules_.canonical(line))
    raise Unrecognised(f"listing ends inside chain {name}")


_HEX = re.compile(r"(?<!\S)0x([0-9a-f]+)(?!\S)")
_DNAT_TO = re.compile(r"(?<!\S)dnat to (?=\S)")

# The words of a rule that are values, by class: a rule's SHAPE is its text with each replaced by
# its class. Whether a rule reads (rule.read) back to its own text and passes `_check` depends only
# on its shape: each class holds words that every step of the reader and of the checks treats alike
# (an integer without leading zeros, an IPv4 address or prefix, IPv4 address:port, [IPv6]:port, an
# IPv6 address or prefix, @set, the chain after goto/jump). So the first rule of each shape is read
# and checked and the others (~20,000 rules of a 10,000-service table, in a few dozen shapes) are
# not: a cache of shapes, one per listing.
_CLASSES = re.compile(
    r"(?<!\S)(?:(?P<N>0|[1-9][0-9]*)|(?P<T4>[0-9]+(?:\.[0-9]+){3}:[0-9]+)|(?P<A4>[0-9]+(?:\.[0-9]+){3}(?:/[0-9]+)?)"
    r"|(?P<T6>\[[0-9a-f:.]+\]:[0-9]+)|(?P<A6>[0-9a-f]*:[0-9a-f:.]*(?:/[0-9]+)?)|(?P<S>@[A-Za-z0-9_./:\-]+)"
    r"|(?<=goto |jump )(?P<C>[A-Za-z0-9_./:\-]+))(?!\S)")


def shape(text: str) -> str:
    """`text` with each value word replaced by its class (`ip daddr <A4> th dport <N> jump <C>`)."""
    return _CLASSES.sub(_class, text)


def _class(m: re.Match[str]) -> str:
    return f"<{m.lastgroup}>"


class Rules:
    """Rules of one listing into canonical text, remembering the shapes already read."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._plain: set[str] = set()  # shapes that read back to themselves with no set to merge

    def canonical(self, line: str) -> str:
        """A rule as listed, in the canonical spelling (ruleset.py); Unrecognised unless it is a rule
        netkit writes."""
        text = line
        if "0x" in text:
            text = _HEX.sub(lambda m: hex(int(m[1], 16)), text)
        if "dnat to " in text:
            text = _DNAT_TO.sub(f"dnat {self.family} to ", text)
        key = shape(text)
        if key in self._plain:
            return text
        rule = _read(text, line)
        if any(isinstance(s, Match) and isinstance(s.right, AnonSet) for s in rule.statements):
            return str(_merged(rule))
        self._plain.add(key)
        return text


def canonical_rule(line: str, family: str) -> str:
    """One rule as listed, in the canonical spelling (see Rules.canonical)."""
    return Rules(family).canonical(line)


def _read(text: str, line: str) -> Rule:
    try:
        rule = read(text)
    except NotUnderstood as exc:
        raise Unrecognised(f"rule {line!r}: {exc}") from None
    if str(rule) != text:
        raise Unrecognised(f"rule {line!r} is not spelt as netkit spells it")
    for statement in rule.statements:
        _check(statement, line)
    return rule


_ATOM = r'(?:[0-9a-f:.]+(?:/[0-9]+)?|[a-z]+)'
_VALUE = re.compile(rf"{_ATOM}(?: \. {_ATOM})*")
_IFNAME = re.compile(r'"[A-Za-z0-9_.\-]+\*?"')
_HEXNUM = re.compile(r"0x[0-9a-f]+")
_TARGET = re.compile(r"(?:[0-9]+(?:\.[0-9]+){3}|\[[0-9a-f:.]+\]):[0-9]+")
_SET_ITEM = re.compile(r"[0-9a-f:.]+(?:/[0-9]+|-[0-9a-f:.]+)?|[a-z]+|[0-9]+")


def _check(s: object, line: str) -> None:
    """Every value of a statement has a shape netkit writes (rule.py keeps values as written)."""
    if not _statement_ok(s):
        raise Unrecognised(f"rule {line!r}: {s} is not a statement netkit writes")


def _statement_ok(s: object) -> bool:
    if isinstance(s, Match):
        return _operand_ok(s)
    if isinstance(s, Verdict):  # the JSON reads any other reject as plain `reject`
        return s.verb != "reject" or s.target in (None, "tcp reset")
    if isinstance(s, Dnat):  # to one endpoint, or through a named endpoint map
        return _TARGET.fullmatch(s.to.text) is not None if isinstance(s.to, Value) else isinstance(s.to.table, SetRef)
    if isinstance(s, VerdictMap):  # the JSON reads an anonymous verdict map as foreign
        return isinstance(s.table, SetRef)
    return not isinstance(s, Counter)  # netkit writes no counters (the JSON: a foreign statement)


def _operand_ok(m: Match) -> bool:
    right = m.right
    if isinstance(right, SetRef):
        return True
    if isinstance(right, AnonSet):
        return all(_SET_ITEM.fullmatch(v.text) for v in right.items)
    if isinstance(m.left, Bitwise):
        return _HEXNUM.fullmatch(right.text) is not None
    if m.left == Meta("iifname"):
        return _IFNAME.fullmatch(right.text) is not None
    return _VALUE.fullmatch(right.text) is not None


def _merged(rule: Rule) -> Rule:
    """Anonymous sets as parse.py prints them from the JSON: addresses merged into sorted prefixes."""
    out = []
    for s in rule.statements:
        if isinstance(s, Match) and isinstance(s.right, AnonSet):
            items = _items(anonymous([_item(v.text) for v in s.right.items]))
            s = replace(s, right=AnonSet(tuple(map(Value, items))) if len(items) > 1 else Value(items[0]))
        out.append(s)
    return Rule(tuple(out))


def _item(text: str) -> object:
    """One anonymous-set item the way the JSON spells it (a range as {"range": [lo, hi]})."""
    lo, dash, hi = text.partition("-")
    if dash:
        return {"range": [lo, hi]}
    if text.isdigit():
        return int(text)
    return text


def _items(spelt: str) -> list[str]:
    return spelt[2:-2].split(", ") if spelt.startswith("{ ") else [spelt]


# ── sets and maps ────────────────────────────────────────────────────────────────────────────────

_TYPEOF = re.compile(r"typeof numgen random mod 1 : (ip|ip6) daddr \. (tcp|udp|sctp|th) dport")
_TYPEOF_VALUE = {"ip": "ipv4_addr . inet_service", "ip6": "ipv6_addr . inet_service"}
_TYPE = re.compile(r"type ([a-z0-9_]+(?: \. [a-z0-9_]+)*)(?: : ([a-z0-9_]+(?: \. [a-z0-9_]+)*))?")
_FLAGS = {"flags dynamic,timeout": ("dynamic", "timeout"), "flags timeout": ("dynamic", "timeout")}
_NUMBER = re.compile(r"(size|timeout) ([0-9]+)(s?)")


def _set(name: str, is_map: bool, lines: Iterator[str]) -> NamedSet:
    key: tuple[str, ...] | None = None
    value: str | None = None
    flags: tuple[str, ...] = ()
    numbers: dict[str, int] = {}
    elements: list[Element] | None = None
    declared_as: str | None = None
    for line in lines:
        if line == "}":
            if key is None or is_map != (value is not None):
                raise Unrecognised(f"set {name}: no type")
            return NamedSet(name, key, value, flags, numbers.get("timeout"), numbers.get("size"),
                            frozenset(elements or ()), declared_as)
        if elements is not None:  # nft lists every attribute before the elements
            raise Unrecognised(f"set {name}: {line!r} after its elements")
        if line.startswith("elements = {"):
            if key is None or is_map != (value is not None):
                raise Unrecognised(f"set {name}: elements before its type")
            # a dynamic set's elements are runtime state (clients seen, with timeouts): not read
            elements = _elements(name, None if "dynamic" in flags else value, line, lines, read="dynamic" not in flags)
        elif line.startswith("type "):
            key, value = _type(name, line)
        elif (typeof := _TYPEOF.fullmatch(line)) is not None:
            key, value, declared_as = ("integer",), _TYPEOF_VALUE[typeof[1]], line.removeprefix("typeof ")
        elif line in _FLAGS:
            flags = _FLAGS[line]
        elif (number := _NUMBER.fullmatch(line)) is not None and (number[1] == "timeout") == bool(number[3]):
            numbers[number[1]] = int(number[2])
        else:
            raise Unrecognised(f"set {name}: {line!r}")
    raise Unrecognised(f"listing ends inside set {name}")


def _type(name: str, line: str) -> tuple[tuple[str, ...], str | None]:
    found = _TYPE.fullmatch(line)
    if found is None:
        raise Unrecognised(f"set {name}: {line!r}")
    return tuple(found[1].split(" . ")), found[2]


# The elements of a set, all its lines joined, checked with one match. Possessive quantifiers
# (`++`, `*+`: never given back) because the words they take end where the next separator starts:
# the same strings match, 6× faster (54 ms → 8 ms for 100,000 hairpin pairs).
_WORD = r"(?:[0-9a-f:.]++(?:/[0-9]++)?+|tcp|udp|sctp)"
_KEY = rf"{_WORD}(?: \. {_WORD})*+"
_VERDICT = r"(?:(?:goto|jump) [A-Za-z0-9_./:\-]++|accept|drop|return|continue)"
_SET_LINE = re.compile(rf"{_KEY}(?:, {_KEY})*+,?")
_VERDICT_MAP_LINE = re.compile(rf"{_KEY} : {_VERDICT}(?:, {_KEY} : {_VERDICT})*+,?")
_DATA_MAP_LINE = re.compile(rf"{_KEY} : {_KEY}(?:, {_KEY} : {_KEY})*+,?")


def _elements(name: str, value: str | None, first: str, lines: Iterator[str], *, read: bool) -> list[Element]:
    """`elements = { a, b,` … `c }`: nft wraps the elements over lines, several to a line (`read`
    False: the lines are passed over). The lines are joined and checked and split as one block:
    line by line, the ~130,000 lines of a 10,000-service table cost twice the time."""
    parts = [first[len("elements = {"):]]
    while not parts[-1].endswith("}"):
        line = next(lines, None)
        if line is None:
            raise Unrecognised(f"listing ends inside the elements of set {name}")
        parts.append(line)
    if not read:
        return []
    block = " ".join(parts)[:-1].strip()
    del parts
    shape = _SET_LINE if value is None else _VERDICT_MAP_LINE if value == "verdict" else _DATA_MAP_LINE
    if block and shape.fullmatch(block) is None:
        raise Unrecognised(f"set {name}: elements {block[:200]!r}")
    return list(_split(block, value is not None)) if block else []


def _split(line: str, is_map: bool) -> Iterator[Element]:
    """The elements of one checked line (built with tuple.__new__: Element's own __new__ is Python
    code, twice the time for the ~220,000 elements of a 10,000-service table)."""
    if is_map:  # `k : v, k : v`: keys and values alternate (neither holds ", " or " : ")
        words = _MAP_SEPARATORS.split(line.rstrip(","))
        return map(_NEW, repeat(Element), zip(words[0::2], words[1::2], strict=True))
    return map(_NEW, repeat(Element), zip(line.rstrip(",").split(", "), repeat(None)))


_NEW = tuple.__new__
_MAP_SEPARATORS = re.compile(", | : ")
