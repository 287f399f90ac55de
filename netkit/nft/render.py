"""render(ruleset) -> the `nft -f` script that creates the table; render_set / render_chain for parts.

The script is line-structured on purpose: one declaration line per set attribute, one element per
line, one rule per line. nft reads it as it stands, people can diff it, and `parse.parse_text` reads
it back without a general nft grammar (the round trip `parse(render(x)) == x` is a property test).
Rules are already in canonical nft syntax (see ruleset.py), so they are written verbatim.

A transaction's script (`render_transaction`) lives in transaction.py next to the Transaction it renders.
"""

from __future__ import annotations

from collections.abc import Iterator

from netkit.nft.ruleset import Chain, Hook, NamedSet, Ruleset

INDENT = "\t"


def render(ruleset: Ruleset) -> str:
    lines = [f"table {ruleset.family} {ruleset.table} {{"]
    for s in ruleset.sets:
        lines.extend(INDENT + line for line in set_block(s))
    for c in ruleset.chains:
        lines.extend(INDENT + line for line in chain_block(c))
    lines.append("}")
    return "\n".join(lines) + "\n"


def set_block(s: NamedSet, *, with_elements: bool = True) -> Iterator[str]:
    yield f"{'map' if s.is_map else 'set'} {s.name} {{"
    yield from (INDENT + line for line in set_attributes(s))
    if with_elements and s.elements and not s.dynamic:
        yield from (INDENT + line for line in elements_block(sorted(e.text() for e in s.elements)))
    yield "}"


def set_attributes(s: NamedSet, *, size: bool = True) -> Iterator[str]:
    yield type_line(s)
    if size and s.size is not None:
        yield f"size {s.size}"
    if s.flags:
        yield f"flags {','.join(s.flags)}"
    if s.timeout is not None:
        yield f"timeout {s.timeout}s"


# nft cannot declare a map keyed by a plain integer with `type`; `typeof` gives the key its size.
# Such a set carries its typeof expressions (NamedSet.typeof); an integer-keyed map of address . port
# read from nft's JSON, which shows only the types, is declared with `th dport` (any transport
# header). A writer whose rules look such a map up after `meta l4proto tcp` sets typeof to
# `… tcp dport`: nft refuses the lookup against `th dport` or another protocol.
TYPEOF_ADDRESS = {"ipv4_addr . inet_service": "ip", "ipv6_addr . inet_service": "ip6"}
INTEGER_KEY = "numgen random mod 1"


def address_port_typeof(value_type: str, protocol: str = "th") -> str:
    """The typeof expressions of an integer-keyed map of `address . port` values (`value_type` one of
    TYPEOF_ADDRESS), for dnat to the port of `protocol`."""
    return f"{INTEGER_KEY} : {TYPEOF_ADDRESS[value_type]} daddr . {protocol} dport"


def type_line(s: NamedSet) -> str:
    if s.typeof is not None:
        return f"typeof {s.typeof}"
    key = " . ".join(s.key_type)
    if key == "integer" and s.value_type in TYPEOF_ADDRESS:
        return f"typeof {address_port_typeof(s.value_type)}"
    return f"type {key} : {s.value_type}" if s.value_type else f"type {key}"


def elements_block(items: list[str]) -> Iterator[str]:
    yield "elements = {"
    for i, item in enumerate(items):
        yield INDENT + item + ("," if i < len(items) - 1 else "")
    yield "}"


def chain_block(c: Chain) -> Iterator[str]:
    yield f"chain {c.name} {{"
    if c.hook:
        yield INDENT + hook_line(c.hook)
    yield from (INDENT + rule for rule in c.rules)
    yield "}"


def hook_line(h: Hook) -> str:
    return f"type {h.type} hook {h.hook} priority {h.priority}; policy {h.policy};"


def set_spec(s: NamedSet, *, size: bool = True) -> str:
    """One-line body of `add set`/`add map`: `{ type …; flags …; }` (`size=False`: without the size)."""
    return "{ " + "".join(f"{a}; " for a in set_attributes(s, size=size)) + "}"
