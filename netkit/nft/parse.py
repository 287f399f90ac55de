"""parse(text) -> Ruleset: from `nft -j list table <family> netkit` JSON, or from `render`'s script.

The kernel's JSON describes each rule as a list of expression trees. `rule_text` prints those trees
back in the canonical spelling `compile` writes (see ruleset.py), for exactly the statement and
expression kinds netkit uses; anything else raises ParseError naming the JSON it met, so a foreign
edit inside netkit's table shows up instead of being silently misread. What the kernel or nft 1.0.6
rewrites is normalised here:

- a dynamic set is listed with flags ["timeout"] only (nft 1.0.6 JSON drops "dynamic");
- `reject` comes back as `reject with icmp(v6) type port-unreachable`; `reject with tcp reset`
  comes back without the `meta l4proto tcp` match nft adds for it;
- `dnat ip to a:p` comes back without its family;
- a `numgen … offset` of 2³¹ or more comes back negative (printed as signed 32-bit);
- an interval set comes back merged, possibly as ranges: printed as sorted prefixes again;
- match operators: `==` and `in` are implicit in nft's syntax except after a bitwise expression.

Elements of dynamic sets (clients remembered for ClientIP affinity) are runtime state and ignored.

Foreign edits inside netkit's table (someone ran `nft add rule ip netkit services counter`) are
read, not refused: a rule with a statement or expression netkit never writes is printed with
FOREIGN in front (`# foreign: counter`), and a set with an element it cannot read gets the key type
FOREIGN. Neither ever equals anything `compile` writes, so `plan` rewrites that chain or recreates
that set: `diff` shows the edit and `apply` (or the daemon's next full sync) repairs it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from netkit.errors import ParseError as ParseError  # re-exported: one class for every reader
from netkit.nft.render import TYPEOF_ADDRESS
from netkit.nft.ruleset import (
    Chain,
    Element,
    Hook,
    IPNetwork,
    NamedSet,
    Ruleset,
    anonymous_set,
    prefixes,
)

JSON = Any


FOREIGN = "# foreign:"


def parse(text: str, family: str = "ip", table: str = "netkit", *, like: Ruleset | None = None) -> Ruleset | None:
    """The netkit table found in `text` (JSON dump or rendered script); None if it is not there.

    `like`: a Ruleset (the one committed last) whose equal sets and chains the result shares, so
    what is unchanged is held once; each read set is dropped as soon as it is found equal."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_items(items(stripped), family, table, like)
    return parse_text(text)


# ── JSON from the kernel ─────────────────────────────────────────────────────────────────────────

_DECODER = json.JSONDecoder()
_BETWEEN = re.compile(r"[\s,]*")


def items(text: str) -> Iterator[JSON]:
    """The objects of `{"nftables": [item, …]}` one at a time, each decoded when it is reached.

    Decoding the whole document first held every object of a 10,000-service table at once (~160 MB
    of dicts and lists for a 21 MB dump); item by item, only the Ruleset being built stays."""
    start = re.match(r'\s*\{\s*"nftables"\s*:\s*\[', text)
    if start is None:  # not nft's layout: decode it whole
        yield from json.loads(text).get("nftables", [])
        return
    at = start.end()
    while True:
        at = _BETWEEN.match(text, at).end()  # type: ignore[union-attr]  # matches the empty string too
        if at >= len(text) or text[at] == "]":
            return
        item, at = _DECODER.raw_decode(text, at)
        yield item


def parse_items(objects: Iterable[JSON], family: str, table: str, like: Ruleset | None = None) -> Ruleset | None:
    found = False
    same = like is not None and like.family == family and like.table == table
    old_sets = like.set_map() if like is not None and same else {}
    old_chains = like.chain_map() if like is not None and same else {}
    sets: list[NamedSet] = []
    chains: dict[str, Chain] = {}
    rules: dict[str, list[str]] = {}
    for item in objects:
        kind, body = next(iter(item.items()))
        if not isinstance(body, dict) or body.get("family") != family:
            continue
        if kind == "table" and body.get("name") == table:
            found = True
        elif body.get("table") != table:
            continue
        elif kind in ("set", "map"):
            sets.append(shared(named_set(body), old_sets))
        elif kind == "chain":
            chains[body["name"]] = Chain(body["name"], (), hook(body))
        elif kind == "rule":
            rules.setdefault(body["chain"], []).append(rule_text(body["expr"], family))
    if not found:
        return None
    full = [shared(Chain(c.name, tuple(rules.get(c.name, ())), c.hook), old_chains) for c in chains.values()]
    return Ruleset.of(family, sets, full, table)


Named = TypeVar("Named", NamedSet, Chain)


def shared(read: Named, old: Mapping[str, Named]) -> Named:
    """The equal object of the Ruleset read `like`, if there is one, else what was read."""
    found = old.get(read.name)
    return found if found is not None and found == read else read


def named_set(body: JSON) -> NamedSet:
    key_type = body["type"] if isinstance(body["type"], list) else [body["type"]]
    flags = set(body.get("flags") or ())
    if isinstance(body.get("flags"), str):
        flags = {body["flags"]}
    if "timeout" in flags:
        flags.add("dynamic")  # nft 1.0.6 omits it from JSON; netkit's only timeout sets are dynamic
    dynamic = "dynamic" in flags
    try:
        elements = frozenset() if dynamic else frozenset(map(element, body.get("elem", ())))
    except (ParseError, KeyError, TypeError, ValueError, IndexError):
        key_type, elements = [FOREIGN], frozenset()  # recreated whole by plan
    return NamedSet(body["name"], tuple(key_type), body.get("map"), tuple(sorted(flags)),
                    body.get("timeout"), body.get("size"), elements)


def element(e: JSON) -> Element:
    """One element; the shapes netkit's sets and maps hold take the short way (220k of them in a
    10,000-service table): an address or port, `addr . addr`, `key : addr . port`,
    `addr . proto . port : goto X`."""
    kind = type(e)
    if kind is str or kind is int:
        return Element(str(e))
    if kind is dict and (key := _scalars(e)) is not None:
        return Element(key)
    if kind is list and len(e) == 2:
        key, data = _scalars(e[0]), e[1]
        if key is not None and type(data) is dict and len(data) == 1:
            found = _scalars(data) if "concat" in data else _jump(data)
            if found is not None:
                return Element(key, found)
    return _any_element(e)


def _scalars(v: JSON) -> str | None:
    """A str, an int or a concatenation of those, spelled; None for anything else."""
    kind = type(v)
    if kind is str or kind is int:
        return str(v)
    if kind is dict and len(v) == 1 and type(parts := v.get("concat")) is list:
        if all(type(x) is str or type(x) is int for x in parts):
            return " . ".join(map(str, parts))
    return None


def _jump(v: JSON) -> str | None:
    for verb in ("goto", "jump"):
        arg = v.get(verb)
        if type(arg) is dict and type(target := arg.get("target")) is str:
            return f"{verb} {target}"
    return None


def _any_element(e: JSON) -> Element:
    if isinstance(e, list):
        data = e[1]
        is_verdict = isinstance(data, dict) and len(data) == 1 and next(iter(data)) in _VERDICTS
        return Element(value(e[0]), verdict(data) if is_verdict else value(data))
    return Element(value(e))


_VERDICTS = ("jump", "goto", "accept", "drop", "return", "continue")


def value(e: JSON) -> str:
    if isinstance(e, dict) and "elem" in e:
        return value(e["elem"]["val"])
    if isinstance(e, dict) and "concat" in e:
        return " . ".join(value(x) for x in e["concat"])
    if isinstance(e, dict) and "prefix" in e:
        return f"{e['prefix']['addr']}/{e['prefix']['len']}"
    if isinstance(e, (str, int)) and not isinstance(e, bool):
        return str(e)
    raise ParseError(f"unexpected element value {json.dumps(e)}")


def verdict(v: JSON) -> str:
    (name, arg), = v.items()
    if name in ("jump", "goto"):
        return f"{name} {arg['target']}"
    if name in ("accept", "drop", "return", "continue"):
        return str(name)
    raise ParseError(f"unexpected verdict {json.dumps(v)}")


def hook(body: JSON) -> Hook | None:
    if "hook" not in body:
        return None
    return Hook(body["type"], body["hook"], int(body["prio"]), body.get("policy", "accept"))


def rule_text(stmts: list[JSON], family: str) -> str:
    try:
        return " ".join(statement(s, family) for s in stmts)
    except (ParseError, KeyError, TypeError, ValueError, StopIteration):
        return f"{FOREIGN} " + " ".join(foreign_statement(s, family) for s in stmts)


def foreign_statement(s: JSON, family: str) -> str:
    """A statement of a foreign rule for people: netkit's spelling where it has one, `counter` without
    its (ever-changing) numbers, else the kernel's JSON."""
    try:
        return statement(s, family)
    except (ParseError, KeyError, TypeError, ValueError, StopIteration):
        pass
    kind = next(iter(s)) if isinstance(s, dict) and s else None
    if kind == "counter":
        return "counter"
    return json.dumps(s, separators=(",", ":"), sort_keys=True)


def statement(s: JSON, family: str) -> str:
    (kind, body), = s.items()
    if kind in ("jump", "goto", "accept", "drop", "return", "continue"):
        return verdict(s)
    handler = _STATEMENTS.get(kind)
    if handler is None:
        raise ParseError(f"netkit does not write statements like {json.dumps(s)}")
    return handler(body, family)


def match(body: JSON, family: str) -> str:
    left, right, op = body["left"], body["right"], body["op"]
    bitwise = isinstance(left, dict) and bool({"&", "|", "^"} & set(left))
    text_left = expr(left)
    text_right = mark_value(right) if bitwise else literal(right, left)
    if op in ("==", "in") and not bitwise:
        return f"{text_left} {text_right}"
    return f"{text_left} {op} {text_right}"


def literal(right: JSON, left: JSON) -> str:
    """The right-hand side of a match; interface names are quoted as nft requires."""
    if isinstance(left, dict) and left.get("meta", {}).get("key") in ("iifname", "oifname"):
        return '"' + str(right).replace("\\*", "*") + '"'
    return expr(right)


def mark_value(v: JSON) -> str:
    return f"{v:#x}" if isinstance(v, int) else expr(v)


def expr(e: JSON) -> str:
    if isinstance(e, bool):
        raise ParseError(f"unexpected boolean {e}")
    if isinstance(e, (str, int)):
        return str(e)
    if isinstance(e, list):
        return anonymous(e)
    (kind, body), = e.items()
    handler = _EXPRESSIONS.get(kind)
    if handler is None:
        raise ParseError(f"netkit does not write expressions like {json.dumps(e)}")
    return str(handler(body))


def anonymous(items: list[JSON]) -> str:
    """An anonymous set. Interval sets come back merged, maybe as ranges: print sorted prefixes."""
    nets: list[IPNetwork] = []
    plain: list[str] = []
    for item in items:
        found = _networks(item)
        if found is None:
            plain.append(expr(item))
        else:
            nets.extend(found)
    return anonymous_set(prefixes(nets) + plain)


def _networks(item: JSON) -> list[IPNetwork] | None:
    try:
        if isinstance(item, str):
            return [ipaddress.ip_network(item)]
        if isinstance(item, dict) and "prefix" in item:
            return [ipaddress.ip_network(f"{item['prefix']['addr']}/{item['prefix']['len']}")]
        if isinstance(item, dict) and "range" in item:
            lo, hi = (ipaddress.ip_address(x) for x in item["range"])
            return list(ipaddress.summarize_address_range(lo, hi))
    except ValueError:
        return None
    return None


def _set_expr(body: JSON) -> str:
    return anonymous(body) if isinstance(body, list) else expr(body)


def _bitwise(op: str) -> Any:
    return lambda body: f"{expr(body[0])} {op} {mark_value(body[1])}"


def _map(body: JSON) -> str:
    data = body["data"]
    if isinstance(data, dict) and "set" in data:
        pairs = ", ".join(f"{value(k)} : {value(v)}" for k, v in data["set"])
        return f"{expr(body['key'])} map {{ {pairs} }}"
    return f"{expr(body['key'])} map {expr(data)}"


def _numgen(body: JSON) -> str:
    # nft 1.0.6 prints a 32-bit offset as a signed integer: 3466993664 comes back as -827973632
    offset = f" offset {int(body['offset']) & 0xFFFFFFFF}" if body.get("offset") else ""
    return f"numgen {body['mode']} mod {body['mod']}{offset}"


_EXPRESSIONS = {
    "payload": lambda b: f"{b['protocol']} {b['field']}",
    "meta": lambda b: b["key"] if b["key"] in ("iifname", "oifname") else f"meta {b['key']}",
    "ct": lambda b: f"ct {b['key']}",
    "fib": lambda b: f"fib {' '.join(b['flags'])} {b['result']}",
    "numgen": _numgen,
    "concat": lambda b: " . ".join(expr(x) for x in b),
    "prefix": lambda b: f"{b['addr']}/{b['len']}",
    "set": _set_expr,
    "map": _map,
    "&": _bitwise("&"),
    "|": _bitwise("|"),
    "^": _bitwise("^"),
}


def _vmap(body: JSON, family: str) -> str:
    return f"{expr(body['key'])} vmap {expr(body['data'])}"


def _mangle(body: JSON, family: str) -> str:
    return f"{expr(body['key'])} set {expr(body['value'])}"


def _masquerade(body: JSON, family: str) -> str:
    flags = body.get("flags") if isinstance(body, dict) else None
    if isinstance(flags, list):
        flags = ",".join(flags)
    return f"masquerade {flags}" if flags else "masquerade"


def _dnat(body: JSON, family: str) -> str:
    fam = body.get("family", family)
    addr = body["addr"]
    if isinstance(addr, dict):
        return f"dnat {fam} to {expr(addr)}"
    host = f"[{addr}]" if ":" in str(addr) else str(addr)
    return f"dnat {fam} to {host}:{body['port']}" if "port" in body else f"dnat {fam} to {host}"


def _set_update(body: JSON, family: str) -> str:
    return f"{body['op']} {body['set']} {{ {expr(body['elem'])} }}"


_STATEMENTS = {
    "match": match,
    "vmap": _vmap,
    "mangle": _mangle,
    "masquerade": _masquerade,
    "reject": lambda body, family: (
        "reject with tcp reset" if isinstance(body, dict) and body.get("type") == "tcp reset" else "reject"),
    "dnat": _dnat,
    "set": _set_update,
}


# ── render's own script ──────────────────────────────────────────────────────────────────────────

def parse_text(text: str) -> Ruleset | None:
    """Read back a script written by `render` (its line structure, not nft's whole grammar)."""
    lines = iter(line.strip() for line in text.splitlines() if line.strip())
    for line in lines:
        words = line.split()
        if words[:1] == ["table"] and len(words) == 4:
            return _table(words[1], words[2], lines)
    return None


def _table(family: str, table: str, lines: Iterator[str]) -> Ruleset:
    sets: list[NamedSet] = []
    chains: list[Chain] = []
    for line in lines:
        if line == "}":
            break
        kind, name, _ = line.split()
        if kind == "chain":
            chains.append(_chain(name, lines))
        else:
            sets.append(_set(name, lines))
    return Ruleset.of(family, sets, chains, table)


def _chain(name: str, lines: Iterator[str]) -> Chain:
    hook_: Hook | None = None
    rules: list[str] = []
    for line in lines:
        if line == "}":
            break
        if line.startswith("type ") and line.endswith(";") and hook_ is None and not rules:
            w = line.replace(";", "").split()
            hook_ = Hook(w[1], w[3], int(w[5]), w[7])
        else:
            rules.append(line)
    return Chain(name, tuple(rules), hook_)


def _set(name: str, lines: Iterator[str]) -> NamedSet:
    attrs: dict[str, str] = {}
    elements: list[Element] = []
    for line in lines:
        if line == "}":
            break
        if line == "elements = {":
            elements = [_element(item.rstrip(",")) for item in _until_brace(lines)]
        else:
            key, _, rest = line.partition(" ")
            attrs[key] = rest
    if "typeof" in attrs:  # render.type_line's spelling of an integer-keyed endpoint map
        address = attrs["typeof"].partition(" : ")[2].split()[0]
        key_type, value_type = "integer", _TYPEOF_VALUES[address]
    else:
        key_type, _, value_type = attrs["type"].partition(" : ")
    return NamedSet(name, tuple(key_type.split(" . ")), value_type or None,
                    tuple(attrs["flags"].split(",")) if "flags" in attrs else (),
                    int(attrs["timeout"].rstrip("s")) if "timeout" in attrs else None,
                    int(attrs["size"]) if "size" in attrs else None, frozenset(elements), attrs.get("typeof"))


_TYPEOF_VALUES = {v: k for k, v in TYPEOF_ADDRESS.items()}


def _until_brace(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if line == "}":
            return
        yield line


def _element(text: str) -> Element:
    key, sep, val = text.partition(" : ")
    return Element(key, val if sep else None)
