"""A small nftables transaction as one NFNETLINK batch, encoded here: the daemon's write path.

Why. nft 1.0.6 fills its cache before it evaluates any `add` or `delete` of a rule or element: it
lists the table's sets and every chain (`GETCHAIN` in `nft --debug=mnl`, also for `add element`
and `delete element`; only `flush chain` and `add chain` skip it). At 50,000 services that is
55,000 chains, ~120 ms of each one-change sync, whatever the change — the libnftables context keeps
no cache across commits, since every commit moves the generation its cache is keyed by. This module
encodes what a small sync sends (transaction.py's Transaction) directly, as `nft` would send it, so a sync
costs the kernel's work on what changed.

What is encoded (everything else raises `Unsupported`, and the caller sends the whole transaction
as an nft script instead; a transaction goes all by one path, never split):

- element adds and deletes in named sets and maps of the types netkit declares (`ipv4_addr`,
  `ipv6_addr`, `inet_proto`, `inet_service`, `integer` — the `typeof numgen` key, host byte order —
  and their concatenations, each field padded to 4 bytes; values: those, or verdicts);
- `flush chain` (DELRULE naming only the chain), `delete chain`, `add chain` without a hook, and
  `delete set`;
- the rules of service chains as layout.py writes them (svc-/local-/ext-/fw- and affinity), read
  with rule.py and encoded as the expressions `nft --debug=netlink` prints for them: payload, cmp
  (a byte-aligned prefix compares its leading bytes), meta, fib, numgen, lookup, dynset `update`,
  immediate, nat, and the anonymous interval set of a fw- rule with several source ranges (created
  in the batch before its rule, found by NFTA_SET_ID). Not encoded: bitwise, ct, masquerade, vmap,
  `meta mark set`, reject and base chains (fixed chains, rewritten when the configuration
  changes), new named sets other than endpoint maps (`add map` of those is encoded, their
  `typeof` userdata as nft writes it), whole tables.

The bytes are nft 1.0.6's (libnftnl 1.2.4) for the same commands, attribute for attribute, but for
the NFTA_*_SET_ID attributes nft adds from its cache (tests/unit/test_nft_netlink.py).

The batch starts with NFNL_MSG_BATCH_BEGIN carrying NFNL_BATCH_GENID: the kernel refuses it
(ERESTART) unless the namespace's generation is still the one read just before (generation.py),
and refuses all of it when any message fails; either way nothing is changed. Every message asks
for an acknowledgement; the kernel handles a batch inside sendmsg, so the replies are queued when
the send returns. Everything but `Writer` (which keeps the socket) is pure. A socket that cannot
be opened or written sends nothing: that is Unsupported too, and the script goes instead.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from netkit.netns import KeptSocket
from netkit.nft.render import type_line
from netkit.nft.rule import (
    AnonSet,
    Dnat,
    Fib,
    MapLookup,
    Match,
    Meta,
    NotUnderstood,
    Numgen,
    Payload,
    SetRef,
    SetUpdate,
    Statement,
    Value,
    Verdict,
    read,
)
from netkit.nft.ruleset import NamedSet, SetElement
from netkit.nft.transaction import Transaction

NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NFNL_BATCH_GENID = 1
NFT_MSG = {"NEWCHAIN": 3, "DELCHAIN": 5, "NEWRULE": 6, "DELRULE": 8, "NEWSET": 9, "DELSET": 11,
           "NEWSETELEM": 12, "DELSETELEM": 14}
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE, NLM_F_APPEND = 0x1, 0x4, 0x400, 0x800
NLA_F_NESTED = 0x8000
NLMSG_ERROR = 2
FAMILIES = {"ip": socket.AF_INET, "ip6": socket.AF_INET6}  # NFPROTO_IPV4/6 have the same numbers

# Attribute numbers (linux/netfilter/nf_tables.h).
TABLE, NAME = 1, 2  # NFTA_{CHAIN,RULE,SET,SET_ELEM_LIST}_TABLE and the object's name (CHAIN: 3)
NFTA_CHAIN_NAME = 3
NFTA_RULE_EXPRESSIONS = 4
NFTA_SET_ELEM_LIST_ELEMENTS = 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_DATA = 1, 2
NFTA_DATA_VALUE, NFTA_DATA_VERDICT = 1, 2
NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN = 1, 2
NFTA_EXPR_NAME, NFTA_EXPR_DATA = 1, 2

REG_VERDICT, REG_1, REG_2, REG32_00 = 0, 1, 2, 8
VERDICTS = {"accept": 1, "drop": 0, "continue": -1, "return": -5, "jump": -3, "goto": -4}
PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}
PAYLOAD_NETWORK, PAYLOAD_TRANSPORT = 1, 2
PAYLOADS = {  # (protocol, field) -> (base, offset, length)
    ("ip", "saddr"): (PAYLOAD_NETWORK, 12, 4), ("ip", "daddr"): (PAYLOAD_NETWORK, 16, 4),
    ("ip6", "saddr"): (PAYLOAD_NETWORK, 8, 16), ("ip6", "daddr"): (PAYLOAD_NETWORK, 24, 16),
    ("th", "sport"): (PAYLOAD_TRANSPORT, 0, 2), ("th", "dport"): (PAYLOAD_TRANSPORT, 2, 2),
}
META_KEYS = {"l4proto": 16, "iifname": 6}
IFNAMSIZ = 16
FIB_SADDR, FIB_DADDR, FIB_RESULT_ADDRTYPE = 1, 2, 3
RTN_LOCAL = 2
NF_NAT_RANGE_PROTO_SPECIFIED = 2
NFT_NAT_DNAT = 1
NFT_LOOKUP_F_INV = 1
NFT_DYNSET_OP_UPDATE = 1
MAX_ELEMENTS_PER_MESSAGE = 256  # an attribute's length is 16 bits
MAX_BATCH_BYTES = 96 * 1024  # well inside a netlink socket's default send buffer (212,992 bytes)

_HEADER = struct.Struct("=IHHII")
_NFGEN = struct.Struct("=BBH")
_ATTR = struct.Struct("=HH")


class Unsupported(Exception):  # noqa: N818 — a verdict, not a failure: send the script instead
    """The transaction holds something this encoder does not write; send it as an nft script."""


# ── attributes ──────────────────────────────────────────────────────────────────────────────────

def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    size = _ATTR.size + len(payload)
    return _ATTR.pack(size, kind) + payload + b"\0" * (-size & 3)


def nest(kind: int, *children: bytes) -> bytes:
    return attr(kind | NLA_F_NESTED, b"".join(children))


def strz(kind: int, text: str) -> bytes:
    return attr(kind, text.encode() + b"\0")


def be32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack(">i" if value < 0 else ">I", value))


def message(kind: int, family: int, seq: int, flags: int, body: bytes, res_id: int = 0) -> bytes:
    head = _NFGEN.pack(family, 0, socket.htons(res_id))
    size = _HEADER.size + len(head) + len(body)
    return _HEADER.pack(size, kind, flags, seq, 0) + head + body


# ── data: element keys and values, compared constants ──────────────────────────────────────────

def scalar(kind: str, text: str) -> bytes:
    """One value of an nft datatype, in the bytes the kernel stores."""
    try:
        if kind == "ipv4_addr":
            return ipaddress.IPv4Address(text).packed
        if kind == "ipv6_addr":
            return ipaddress.IPv6Address(text).packed
        if kind == "inet_proto":
            return bytes([PROTOCOLS[text] if text in PROTOCOLS else int(text)])
        if kind == "inet_service":
            return struct.pack(">H", int(text))
        if kind == "integer":  # `typeof numgen random mod 1`: a register value, host byte order
            return struct.pack("=I", int(text))
    except (ValueError, KeyError, struct.error) as exc:
        raise Unsupported(f"{kind} value {text!r}") from exc
    raise Unsupported(f"datatype {kind}")


def concat(kinds: Sequence[str], text: str) -> bytes:
    """A key or value of `kinds`: one field alone as it is, concatenated fields padded to 4 bytes."""
    words = [w.strip() for w in text.split(" . ")]
    if len(words) != len(kinds):
        raise Unsupported(f"{text!r} is not of type {' . '.join(kinds)}")
    if len(kinds) == 1:
        return scalar(kinds[0], words[0])
    out = b""
    for kind, word in zip(kinds, words, strict=True):
        field = scalar(kind, word)
        out += field + b"\0" * (-len(field) & 3)
    return out


def verdict(text: str) -> bytes:
    """NFTA_DATA_VERDICT of `drop`, `goto CHAIN`, …"""
    words = text.split()
    code = VERDICTS.get(words[0]) if words else None
    if code is None or len(words) != (2 if words[0] in ("jump", "goto") else 1):
        raise Unsupported(f"verdict {text!r}")
    chain = strz(NFTA_VERDICT_CHAIN, words[1]) if len(words) == 2 else b""
    return nest(NFTA_DATA_VERDICT, be32(NFTA_VERDICT_CODE, code), chain)


def data(payload: bytes) -> bytes:
    return attr(NFTA_DATA_VALUE, payload)


# ── elements ────────────────────────────────────────────────────────────────────────────────────

@dataclass(frozen=True, slots=True)
class SetType:
    """What encoding a set's elements takes: key fields, and the value's fields or verdicts."""

    key: tuple[str, ...]
    value: tuple[str, ...] | None  # None: a set; ("verdict",): a verdict map

    @classmethod
    def of(cls, s: NamedSet) -> SetType:
        if "interval" in s.flags or "timeout" in s.flags:
            raise Unsupported(f"elements of set {s.name} ({', '.join(s.flags)})")
        value = tuple(s.value_type.split(" . ")) if s.value_type else None
        return cls(s.key_type, value)


def element(kind: SetType, key: str, value: str | None, *, keys_only: bool) -> bytes:
    body = nest(NFTA_SET_ELEM_KEY, data(concat(kind.key, key)))
    if not keys_only:
        if (value is None) != (kind.value is None):
            raise Unsupported(f"element {key!r} : {value!r} of the wrong shape")
        if value is not None and kind.value is not None:
            inner = verdict(value) if kind.value == ("verdict",) else data(concat(kind.value, value))
            body += nest(NFTA_SET_ELEM_DATA, inner)
    return body


def element_list(bodies: Sequence[bytes]) -> bytes:
    """NFTA_SET_ELEM_LIST_ELEMENTS; libnftnl numbers the list's entries 1, 2, … (the kernel reads
    any type there), and so does this, to send nft's bytes."""
    return nest(NFTA_SET_ELEM_LIST_ELEMENTS, *(nest(i, b) for i, b in enumerate(bodies, 1)))


def element_bodies(table: str, elements: Iterable[SetElement], types: dict[str, SetType],
                   *, keys_only: bool, ids: dict[str, int] | None = None) -> Iterator[bytes]:
    """The bodies of NEWSETELEM/DELSETELEM messages: one per set (and per 256 elements)."""
    by_set: dict[str, list[bytes]] = {}
    for name, e in elements:
        if name not in types:
            raise Unsupported(f"set {name} has no known type")
        by_set.setdefault(name, []).append(element(types[name], e.key, e.value, keys_only=keys_only))
    for name, items in by_set.items():
        for i in range(0, len(items), MAX_ELEMENTS_PER_MESSAGE):
            chunk = items[i:i + MAX_ELEMENTS_PER_MESSAGE]
            set_id = be32(4, ids[name]) if ids and name in ids else b""  # a set of this batch, as nft
            yield strz(TABLE, table) + strz(NAME, name) + set_id + element_list(chunk)


# ── rules ───────────────────────────────────────────────────────────────────────────────────────

def expression(name: str, *attrs: bytes) -> bytes:
    return nest(NFTA_LIST_ELEM, strz(NFTA_EXPR_NAME, name), nest(NFTA_EXPR_DATA, *attrs))


def payload_load(p: Payload, length: int | None = None) -> tuple[bytes, int]:
    """(the payload expression loading `p` into reg 1, its length)."""
    if (p.protocol, p.field) not in PAYLOADS:
        raise Unsupported(f"payload {p}")
    base, offset, size = PAYLOADS[(p.protocol, p.field)]
    size = size if length is None else length
    return expression("payload", be32(1, REG_1), be32(2, base), be32(3, offset), be32(4, size)), size


def cmp(op: str, value: bytes) -> bytes:
    return expression("cmp", be32(1, REG_1), be32(2, 0 if op == "==" else 1), nest(3, data(value)))


def match(m: Match, anon: AnonSets | None) -> bytes:
    left, right = m.left, m.right
    if isinstance(right, AnonSet) and isinstance(left, Payload) and m.op == "!=" and anon is not None:
        load, _ = payload_load(left)
        set_id = anon.add(left, right)
        return load + expression("lookup", be32(2, REG_1), strz(1, ANON_NAME), be32(4, set_id),
                                 be32(5, NFT_LOOKUP_F_INV))
    if isinstance(right, SetRef) and isinstance(left, Payload):
        load, _ = payload_load(left)
        flags = be32(5, NFT_LOOKUP_F_INV) if m.op == "!=" else b""
        return load + expression("lookup", be32(2, REG_1), strz(1, right.name), flags)
    if not isinstance(right, Value):
        raise Unsupported(f"match against {right}")
    if isinstance(left, Payload):
        return payload_match(left, m.op, right.text)
    if isinstance(left, Meta) and left.key in META_KEYS:
        load = expression("meta", be32(2, META_KEYS[left.key]), be32(1, REG_1))
        return load + cmp(m.op, meta_value(left.key, right))
    if isinstance(left, Fib) and right.text == "local":
        which = FIB_SADDR if left.address == "saddr" else FIB_DADDR
        load = expression("fib", be32(3, which), be32(2, FIB_RESULT_ADDRTYPE), be32(1, REG_1))
        return load + cmp(m.op, struct.pack("=I", RTN_LOCAL))
    if isinstance(left, Numgen) and left.offset == 0:
        return numgen(left) + cmp(m.op, scalar("integer", right.text))
    raise Unsupported(f"match {m}")


def payload_match(p: Payload, op: str, text: str) -> bytes:
    if p.protocol in ("ip", "ip6"):
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            raise Unsupported(f"address {text!r}") from exc
        if net.prefixlen % 8 or net.version != (4 if p.protocol == "ip" else 6) or net.prefixlen == 0:
            raise Unsupported(f"prefix {text}")  # nft masks with bitwise: not encoded here
        load, size = payload_load(p, net.prefixlen // 8)
        return load + cmp(op, net.network_address.packed[:size])
    load, _ = payload_load(p)
    return load + cmp(op, scalar("inet_service", text))


def meta_value(key: str, v: Value) -> bytes:
    if key == "l4proto":
        return scalar("inet_proto", v.text)
    name = v.unquoted
    if name.endswith("*"):  # a wildcard compares the prefix only, without the NUL
        return name[:-1].encode()
    raw = name.encode()
    if len(raw) >= IFNAMSIZ:
        raise Unsupported(f"interface name {name!r}")
    return raw + b"\0" * (IFNAMSIZ - len(raw))


def numgen(n: Numgen) -> bytes:
    return expression("numgen", be32(1, REG_1), be32(2, n.mod), be32(3, 1), be32(4, n.offset))


def immediate(reg: int, payload: bytes) -> bytes:
    return expression("immediate", be32(1, reg), nest(2, payload))


def dnat(d: Dnat, family: str) -> bytes:
    if d.family not in (None, family):
        raise Unsupported(f"{d} in family {family}")
    addr_type = "ipv4_addr" if family == "ip" else "ipv6_addr"
    nfproto = FAMILIES[family]
    if isinstance(d.to, MapLookup):
        if not isinstance(d.to.key, Numgen) or not isinstance(d.to.table, SetRef):
            raise Unsupported(f"dnat {d.to}")
        proto_reg = REG32_00 + len(scalar(addr_type, "::" if family == "ip6" else "0.0.0.0")) // 4
        return (numgen(d.to.key)
                + expression("lookup", be32(2, REG_1), be32(3, REG_1), strz(1, d.to.table.name))
                + expression("nat", be32(1, NFT_NAT_DNAT), be32(2, nfproto), be32(3, REG_1), be32(5, proto_reg)))
    host, _, port = d.to.text.rpartition(":")
    if not host or not port.isdigit():
        raise Unsupported(f"dnat to {d.to}")
    host = host[1:-1] if host.startswith("[") else host
    return (immediate(REG_1, data(scalar(addr_type, host))) + immediate(REG_2, data(scalar("inet_service", port)))
            + expression("nat", be32(1, NFT_NAT_DNAT), be32(2, nfproto), be32(3, REG_1), be32(5, REG_2),
                         be32(7, NF_NAT_RANGE_PROTO_SPECIFIED)))


def statement(s: Statement, family: str, anon: AnonSets | None) -> bytes:
    if isinstance(s, Match):
        return match(s, anon)
    if isinstance(s, Verdict) and s.verb in VERDICTS:
        return immediate(REG_VERDICT, verdict(f"{s.verb} {s.target}" if s.target else s.verb))
    if isinstance(s, Dnat):
        return dnat(s, family)
    if isinstance(s, SetUpdate) and s.op == "update" and isinstance(s.key, Payload):
        load, _ = payload_load(s.key)
        return load + expression("dynset", be32(4, REG_1), be32(3, NFT_DYNSET_OP_UPDATE), strz(1, s.set))
    raise Unsupported(f"statement {s}")


def rule_expressions(text: str, family: str, anon: AnonSets | None = None) -> bytes:
    """NFTA_RULE_EXPRESSIONS of one rule in netkit's canonical spelling; the anonymous sets it
    needs are added to `anon` (without it, such a rule is Unsupported)."""
    try:
        parsed = read(text)
    except NotUnderstood as exc:
        raise Unsupported(f"rule {text!r}: {exc}") from exc
    return nest(NFTA_RULE_EXPRESSIONS, *(statement(s, family, anon) for s in parsed.statements))


# ── anonymous interval sets (`ip saddr != { a/n, b/m } drop` of fw- chains) ────────────────────

ANON_NAME = "__set%d"  # the kernel names it __setN; the rule finds it by NFTA_SET_ID in the batch
NFT_SET_ANONYMOUS, NFT_SET_CONSTANT, NFT_SET_INTERVAL = 1, 2, 4
NFT_SET_ELEM_INTERVAL_END = 1
KEY_TYPES = {"ip": (7, 32), "ip6": (8, 128)}  # nft's datatype ids of ipv4_addr / ipv6_addr, key bits
# NFTA_SET_USERDATA as nft 1.0.6 writes it for `ip saddr` / `ip6 saddr` (byte order big-endian,
# merge adjacent elements, typeof payload ip/ip6 saddr): read back by nft to list the set.
ANON_USERDATA = {
    "ip": bytes.fromhex("0004020000000204010000000314000407000000010c00040c00000001040b000000"),
    "ip6": bytes.fromhex("0004020000000204010000000314000407000000010c00040d000000010408000000"),
}


def intervals(items: Iterable[Value], bits: int) -> list[tuple[int, int]]:
    """The items (addresses, prefixes, `a-b` ranges) as sorted inclusive ranges, touching ones merged
    (nft merges them too: the kernel holds the merged ranges)."""
    ranges: list[tuple[int, int]] = []
    for item in items:
        try:
            if "-" in item.text:
                lo, hi = (int(ipaddress.ip_address(x)) for x in item.text.split("-"))
            else:
                net = ipaddress.ip_network(item.text, strict=True)
                lo, hi = int(net.network_address), int(net.broadcast_address)
        except ValueError as exc:
            raise Unsupported(f"set item {item}") from exc
        ranges.append((lo, hi))
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    if merged and merged[-1][1] == (1 << bits) - 1:
        raise Unsupported("a range to the last address")  # nft marks it open-ended in element userdata
    return merged


def interval_elements(ranges: list[tuple[int, int]], bits: int) -> list[bytes]:
    """As nft sends them: an end at 0 unless a range starts there, then each range's start and the
    end one past it."""
    def key(n: int) -> bytes:
        return nest(NFTA_SET_ELEM_KEY, data(n.to_bytes(bits // 8, "big")))

    def end(n: int) -> bytes:
        return be32(3, NFT_SET_ELEM_INTERVAL_END) + key(n)

    out = [] if ranges and ranges[0][0] == 0 else [end(0)]
    for lo, hi in ranges:
        out += [key(lo), end(hi + 1)]
    return out


class AnonSets:
    """The anonymous sets the rules of one batch bind, numbered by NFTA_SET_ID as they come."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._next_id = 1
        self._pending: list[tuple[str, str, int, bytes]] = []

    def next_id(self) -> int:
        """An NFTA_SET_ID for a set this batch creates (named sets get one too, as nft gives them)."""
        set_id, self._next_id = self._next_id, self._next_id + 1
        return set_id

    def add(self, p: Payload, items: AnonSet) -> int:
        if p.field != "saddr" or p.protocol not in ANON_USERDATA:
            raise Unsupported(f"anonymous set of {p}")
        kind, bits = KEY_TYPES[p.protocol]
        elements = interval_elements(intervals(items.items, bits), bits)
        set_id = self.next_id()
        head = strz(TABLE, self.table) + strz(NAME, ANON_NAME)
        definition = (head + be32(3, NFT_SET_ANONYMOUS | NFT_SET_CONSTANT | NFT_SET_INTERVAL) + be32(4, kind)
                      + be32(5, bits // 8) + be32(10, set_id) + nest(9, be32(1, len(elements)))
                      + attr(13, ANON_USERDATA[p.protocol]))
        self._pending += [(f"anonymous set {items}", "NEWSET", NLM_F_CREATE, definition),
                          (f"elements of anonymous set {items}", "NEWSETELEM", NLM_F_CREATE,
                           head + be32(4, set_id) + element_list(elements))]
        return set_id

    def take(self) -> list[tuple[str, str, int, bytes]]:
        pending, self._pending = self._pending, []
        return pending


# ── the batch ───────────────────────────────────────────────────────────────────────────────────

@dataclass(frozen=True, slots=True)
class Batch:
    """The bytes of one batch and, by sequence number, what each message does (for errors)."""

    data: bytes
    what: dict[int, str]
    first: int  # the BATCH_BEGIN's sequence number

    @property
    def messages(self) -> int:
        """Messages that are acknowledged (all but BATCH_BEGIN and BATCH_END)."""
        return len(self.what)


def operations(tx: Transaction, types: dict[str, SetType]) -> Iterator[tuple[str, str, int, bytes]]:
    """(description, message kind, extra flags, body) of each message, in the order of plan.script."""
    t = tx.table
    if tx.create is not None:
        raise Unsupported("a whole table")
    pre = tx.prelude()
    early = {s.name for s in pre.add_sets} if pre else set()  # created just before, by a script
    table = strz(TABLE, t)
    for c in tx.flush_chains:
        yield f"flush chain {c}", "DELRULE", 0, table + strz(2, c)
    for body in element_bodies(t, tx.delete_elements, types, keys_only=True):
        yield "delete element", "DELSETELEM", 0, body
    for s in tx.delete_sets:
        yield f"delete set {s.name}", "DELSET", 0, table + strz(NAME, s.name)
    for c in tx.delete_chains:
        yield f"delete chain {c}", "DELCHAIN", 0, table + strz(NFTA_CHAIN_NAME, c)
    for ch in tx.add_chains:
        if ch.hook is not None:
            raise Unsupported(f"base chain {ch.name}")
        yield f"add chain {ch.name}", "NEWCHAIN", NLM_F_CREATE, table + strz(NFTA_CHAIN_NAME, ch.name)
    anon = AnonSets(t)
    ids: dict[str, int] = {}
    for s in tx.add_sets:
        if s.name not in early:
            ids[s.name] = anon.next_id()
            yield f"add map {s.name}", "NEWSET", NLM_F_CREATE, table + endpoint_map(s, tx.family, ids[s.name])
    for ch in tx.rules:
        for r in ch.rules:
            body = table + strz(2, ch.name) + rule_expressions(r, tx.family, anon)
            yield from anon.take()  # its anonymous set first, then the rule that binds it
            yield f"add rule {ch.name} {r}", "NEWRULE", NLM_F_CREATE | NLM_F_APPEND, body
    own = [(s.name, e) for s in tx.add_sets if s.elements and not s.dynamic for e in sorted(s.elements)]
    own_types = {s.name: SetType.of(s) for s in tx.add_sets if not s.dynamic}
    for body in element_bodies(t, own, own_types, keys_only=False, ids=ids):
        yield "add element", "NEWSETELEM", NLM_F_CREATE, body
    for body in element_bodies(t, tx.add_elements, types, keys_only=False):
        yield "add element", "NEWSETELEM", NLM_F_CREATE, body


# An endpoint map, `typeof numgen random mod 1 : ip daddr . tcp dport` (render.type_line): NEWSET
# as nft 1.0.6 sends it. Its NFTA_SET_USERDATA (key byte order, and the typeof expressions nft lists
# the map with) differs only in the address family's and the protocol's ids, filled in here.
NFT_SET_MAP = 8
TYPE_INTEGER = 4
CONCAT_ADDR_PORT = {"ip": (7 << 6 | 13, 8), "ip6": (8 << 6 | 13, 20)}  # ipv4/6_addr . inet_service, length
_MAP_USERDATA = ("000401000000010400000000031a0004170000000112000401000000010401000000020400000000043400040d0000"
                 "00012c0014000407000000010c0004{addr}0114000407000000010c0004{proto}000000010402000000060400000000")
_USERDATA_ADDR = {"ip": "0c00000001040c000000", "ip6": "0d000000010409000000"}
_USERDATA_PROTO = {"tcp": "08", "udp": "06", "sctp": "0a"}


def endpoint_map(s: NamedSet, family: str, set_id: int) -> bytes:
    """NEWSET's attributes after the table, for an endpoint map (Unsupported for any other set)."""
    words = type_line(s).split()
    shape = ["typeof", "numgen", "random", "mod", "1", ":", family, "daddr", ".", "?", "dport"]
    if (len(words) != len(shape) or any(w != x for w, x in zip(words, shape, strict=True) if x != "?")
            or words[9] not in _USERDATA_PROTO or s.flags or s.timeout is not None or s.size is not None):
        raise Unsupported(f"add set {s.name} ({type_line(s)})")
    data_type, data_len = CONCAT_ADDR_PORT[family]
    userdata = _MAP_USERDATA.format(addr=_USERDATA_ADDR[family], proto=_USERDATA_PROTO[words[9]])
    return (strz(NAME, s.name) + be32(3, NFT_SET_MAP) + be32(4, TYPE_INTEGER) + be32(5, 4) + be32(6, data_type)
            + be32(7, data_len) + be32(10, set_id) + attr(13, bytes.fromhex(userdata)))


def encode(tx: Transaction, genid: int, seq: int = 1) -> Batch:
    """The batch of `tx`, refused by the kernel unless its generation is still `genid`.
    Raises Unsupported for anything this module does not encode (see the module's docstring)."""
    types = {s.name: SetType.of(s) for s in tx.element_sets}
    family = FAMILIES[tx.family]
    parts = [message(NFNL_MSG_BATCH_BEGIN, socket.AF_UNSPEC, seq, NLM_F_REQUEST,
                     be32(NFNL_BATCH_GENID, genid), res_id=NFNL_SUBSYS_NFTABLES)]
    what: dict[int, str] = {}
    n = seq
    for description, kind, flags, body in operations(tx, types):
        n += 1
        what[n] = description
        parts.append(message(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG[kind], family, n,
                             NLM_F_REQUEST | NLM_F_ACK | flags, body))
    parts.append(message(NFNL_MSG_BATCH_END, socket.AF_UNSPEC, n + 1, NLM_F_REQUEST, b"",
                         res_id=NFNL_SUBSYS_NFTABLES))
    batch = Batch(b"".join(parts), what, seq)
    if len(batch.data) > MAX_BATCH_BYTES:
        raise Unsupported(f"a batch of {len(batch.data)} bytes")
    return batch


# ── the replies ─────────────────────────────────────────────────────────────────────────────────

class Refused(Exception):  # noqa: N818 — the kernel's answer, turned into a KernelError by kernel.py
    """The kernel refused the batch (nothing was changed): why, in words."""


def errors(replies: bytes, batch: Batch) -> tuple[set[int], list[str]]:
    """(sequence numbers acknowledged, descriptions of the failures) in a run of replies."""
    acked: set[int] = set()
    failures: list[str] = []
    offset = 0
    while offset + _HEADER.size <= len(replies):
        length, kind, _, seq, _ = _HEADER.unpack_from(replies, offset)
        if length < _HEADER.size:
            break
        if kind == NLMSG_ERROR and batch.first <= seq <= batch.first + batch.messages:
            (code,) = struct.unpack_from("=i", replies, offset + _HEADER.size)
            acked.add(seq)
            if code:
                failures.append(failure(-code, seq, batch))
        offset += (length + 3) & ~3
    return acked, failures


def failure(code: int, seq: int, batch: Batch) -> str:
    if seq == batch.first and code == errno.ERESTART:
        return "the namespace's nftables generation moved since it was read (another commit)"
    what = batch.what.get(seq, "the batch")
    return f"{what}: {os.strerror(code)} ({errno.errorcode.get(code, code)})"


# ── sending (the IO of this module) ─────────────────────────────────────────────────────────────

SOL_NETLINK, NETLINK_CAP_ACK = 270, 10


class Writer:
    """Sends batches on one netfilter netlink socket, kept open: closing one cost ~13 ms here (the
    kernel's release of a netfilter socket), more than the whole batch. Opened again when the
    namespace at `netns_path` (/run/netns/NAME) is not the one it was opened in, so a namespace
    created again under the same name is never written through the old one's socket."""

    def __init__(self, opener: Callable[[], socket.socket], netns_path: str | None = None) -> None:
        def acked() -> socket.socket:
            sock = opener()
            sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # errors without a copy of the message
            return sock

        self._kept = KeptSocket(acked, netns_path, timeout=5)
        self._seq = 1

    def send(self, tx: Transaction, genid: int) -> None:
        """Encode `tx` (Unsupported: nothing was sent) and send it; Refused or OSError when not done."""
        batch = encode(tx, genid, self._seq)
        self._seq = (self._seq + batch.messages + 2) % (1 << 31) or 1
        try:
            sock, _ = self._kept.get()
            drain(sock)
            sock.send(batch.data)  # the batch is delivered whole or not at all
        except OSError as exc:
            self.close()
            raise Unsupported(f"netlink socket: {exc}") from exc  # nothing was sent: a script may go
        try:
            acknowledged(sock, batch)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        self._kept.close()

def drain(sock: socket.socket) -> None:
    """Drop replies still queued from an earlier batch (those after its first error)."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        while sock.recv(1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        sock.settimeout(timeout)


def acknowledged(sock: socket.socket, batch: Batch) -> None:
    """Read the batch's acknowledgements; Refused (with the kernel's reasons) when it was refused,
    which changed nothing. The kernel runs a batch inside send(), so the answer is queued when
    send returns; the socket's timeout is a safety net."""
    acked: set[int] = set()
    failures: list[str] = []
    while not failures and len(acked) < batch.messages:
        got, failed = errors(sock.recv(1 << 20), batch)
        acked |= got
        failures += failed
    if failures:
        raise Refused("; ".join(failures))

