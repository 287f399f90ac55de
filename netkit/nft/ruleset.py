"""The nftables Ruleset: one netkit table of one family, as a comparable value.

A table holds named sets and maps (`NamedSet`, with their elements) and chains (`Chain`, an ordered
tuple of rules). Rules are kept as text in one canonical spelling: the spelling `compile` writes and
the spelling `parse` prints back from the kernel's JSON, so a Ruleset compiled here and one read from
the kernel compare equal when the kernel holds what was compiled. The canonical forms are chosen to
be valid `nft -f` input as they stand, so `render` writes rules verbatim.

Elements are (key, value) text pairs in a set: element order means nothing to the kernel. A set read
or built in one go holds a frozenset; the Compiler's shared sets hold `Elements`, the same value kept
in chunks, so a set of 500,000 hairpin pairs with one pair changed is a new value for the price of
one chunk (the daemon's one-change sync at 50,000 services).
Sets and chains are tuples sorted by name, so equality does not depend on construction order.
Dynamic sets (ClientIP affinity) are declared here, but their elements are the kernel's runtime
state (clients seen recently), never part of a Ruleset.

A compiled Ruleset also carries `parts`: what each service port contributed (its chains, its own sets
and its elements of the shared sets), so that `plan` can compare 10,000 service ports part by part
(an identity or tuple comparison each) instead of hashing every one of ~130k elements. `parts` is an
index, not content: it takes no part in equality, a Ruleset read from the kernel has none, and it is
trusted only while the Ruleset still holds the very `sets` and `chains` tuples it was built with.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from netkit.change import Since
from netkit.nft.rule import readable

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

FAMILIES = ("ip", "ip6")


class Element(NamedTuple):
    """One set element (`value` None) or map element (`value` is a verdict such as `goto X`).

    A NamedTuple rather than a dataclass for speed only: a 10k-service table has ~130k elements and
    plan() hashes each of them; the C tuple hash is ~10× faster than a dataclass __hash__."""

    key: str
    value: str | None = None

    def text(self) -> str:
        return self.key if self.value is None else f"{self.key} : {self.value}"

    @property
    def target(self) -> str | None:
        """The chain a verdict-map element jumps or goes to, if any."""
        if self.value and self.value.split()[0] in ("goto", "jump"):
            return self.value.split()[1]
        return None


class Elements(AbstractSet[Element]):
    """An immutable set of elements kept as CHUNKS frozensets (by hash): equal to the frozenset of
    the same elements (and hashed like it), and `changed` makes the set with a few elements removed
    and added by rebuilding only their chunks. Set algebra with it gives plain frozensets."""

    CHUNKS = 256  # a power of two: a chunk of 500,000 elements holds ~2,000
    __slots__ = ("_chunks", "_hashed", "_len")

    def __init__(self, chunks: tuple[frozenset[Element], ...]) -> None:
        self._chunks = chunks
        self._len = sum(map(len, chunks))
        self._hashed: int | None = None

    @classmethod
    def of(cls, elements: Iterable[Element]) -> Elements:
        buckets: list[list[Element]] = [[] for _ in range(cls.CHUNKS)]
        mask = cls.CHUNKS - 1
        for e in elements:
            buckets[hash(e) & mask].append(e)
        return cls(tuple(frozenset(b) for b in buckets))

    def changed(self, removed: Iterable[Element], added: Iterable[Element]) -> Elements:
        """These elements without `removed` and with `added`; untouched chunks are shared."""
        mask = self.CHUNKS - 1
        chunks = list(self._chunks)
        edits: dict[int, tuple[set[Element], set[Element]]] = {}
        for e in removed:
            edits.setdefault(hash(e) & mask, (set(), set()))[0].add(e)
        for e in added:
            edits.setdefault(hash(e) & mask, (set(), set()))[1].add(e)
        for i, (gone, came) in edits.items():
            chunks[i] = (chunks[i] - gone) | came
        return Elements(tuple(chunks))

    def frozen(self) -> frozenset[Element]:
        return frozenset().union(*self._chunks)

    def __contains__(self, e: object) -> bool:
        return e in self._chunks[hash(e) & (self.CHUNKS - 1)]

    def __iter__(self) -> Iterator[Element]:
        return itertools.chain.from_iterable(self._chunks)

    def __len__(self) -> int:
        return self._len

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Elements):
            return self._len == other._len and self._chunks == other._chunks
        if isinstance(other, (set, frozenset)):
            return self._len == len(other) and all(c <= other for c in self._chunks)
        return NotImplemented

    def __hash__(self) -> int:
        if self._hashed is None:
            self._hashed = hash(self.frozen())  # as the equal frozenset's
        return self._hashed

    def __repr__(self) -> str:
        return f"Elements({set(self)!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> frozenset[Any]:
        return frozenset(it)

    def __le__(self, other: AbstractSet[Any]) -> bool:
        if isinstance(other, (set, frozenset)):
            return self._len <= len(other) and all(c <= other for c in self._chunks)
        return super().__le__(other)

    def __sub__(self, other: AbstractSet[Any]) -> frozenset[Element]:
        return self.frozen() - _plain(other)

    def __rsub__(self, other: AbstractSet[Any]) -> frozenset[Any]:
        return _plain(other) - self.frozen()

    def __or__(self, other: AbstractSet[Any]) -> frozenset[Any]:
        return self.frozen() | _plain(other)

    __ror__ = __or__

    def __and__(self, other: AbstractSet[Any]) -> frozenset[Element]:
        return self.frozen() & _plain(other)

    __rand__ = __and__


def _plain(s: AbstractSet[Any]) -> frozenset[Any]:
    return s.frozen() if isinstance(s, Elements) else frozenset(s)


@dataclass(frozen=True, slots=True)
class NamedSet:
    """A named set (`value_type` None) or map (`value_type` e.g. "verdict")."""

    name: str
    key_type: tuple[str, ...]
    value_type: str | None = None
    flags: tuple[str, ...] = ()
    timeout: int | None = None  # seconds, for dynamic sets
    size: int | None = None
    elements: AbstractSet[Element] = frozenset()
    # How the set is declared when its key has no `type` of its own (an integer map key): the
    # `typeof` expressions, e.g. "numgen random mod 1 : ip daddr . tcp dport". nft 1.0.6's JSON
    # listing does not show them, so a set read from JSON has None: not part of equality.
    typeof: str | None = field(default=None, compare=False)

    @property
    def is_map(self) -> bool:
        return self.value_type is not None

    @property
    def dynamic(self) -> bool:
        return "dynamic" in self.flags

    def definition(self) -> NamedSet:
        """The set without its elements: what must be recreated when it differs."""
        return replace(self, elements=frozenset())


@dataclass(frozen=True, slots=True)
class Hook:
    """The hook of a base chain: `type nat hook prerouting priority -100; policy accept;`."""

    type: str
    hook: str
    priority: int
    policy: str = "accept"


@dataclass(frozen=True, slots=True)
class Chain:
    name: str
    rules: tuple[str, ...] = ()
    hook: Hook | None = None

    def targets(self) -> frozenset[str]:
        """Chains this chain's rules jump or go to (read by rule.py; a rule it cannot read, a
        foreign one, by its words: whatever follows `jump` or `goto`)."""
        found: set[str] = set()
        for text in self.rules:
            read = readable(text)
            if read is not None:
                found |= read.chains()
            else:
                found.update(t for verb, t in itertools.pairwise(text.split()) if verb in ("jump", "goto"))
        return frozenset(found)

    def set_refs(self) -> frozenset[str]:
        """Named sets and maps this chain's rules use (a foreign rule's: every `@name` in it)."""
        found: set[str] = set()
        for text in self.rules:
            read = readable(text)
            if read is not None:
                found |= read.sets()
            else:
                found.update(w.lstrip("@").rstrip(",") for w in text.split() if w.startswith("@"))
        return frozenset(found)


SetElement = tuple[str, Element]  # (set name, element)


@dataclass(frozen=True, slots=True, eq=False)
class Part:
    """What one service port (or the fixed layer) contributes to a table.

    Compared by value. `digest` (see `Part.of`) is a 128-bit BLAKE2 hash of the whole content spelt as
    one string, so comparing two parts is one comparison of 16 bytes instead of a walk through nested
    tuples and frozensets (the string itself, kept, was 15 MB of a 10k-service compile)."""

    chains: tuple[Chain, ...] = ()
    sets: tuple[NamedSet, ...] = ()  # sets only this part uses (affinity sets, an own endpoint map)
    elements: tuple[SetElement, ...] = ()  # its elements of the shared (fixed) sets
    digest: bytes = b""

    @staticmethod
    def of(chains: Iterable[Chain], sets: Iterable[NamedSet], elements: Iterable[SetElement]) -> Part:
        """A Part with its digest: of every name, rule, set definition and element, joined with control
        characters that no name, rule or element contains (equal digests: equal parts, but for a
        2⁻¹²⁸ chance)."""
        chains, sets, elements = tuple(chains), tuple(sets), tuple(elements)
        words: list[str] = []
        for c in chains:
            words.append(f"\x01{c.name}\x02{c.hook!r}")
            words.extend(c.rules)
        for st in sets:
            words.append(f"\x01{st.name}\x02{st.key_type!r}{st.value_type!r}{st.flags!r}{st.timeout!r}{st.size!r}")
            words.extend(sorted(e.text() for e in st.elements))
        words.append("\x01")
        words.extend(f"{name}\x02{e.key}\x02{e.value}" for name, e in elements)
        return Part(chains, sets, elements, hashlib.blake2b("\x00".join(words).encode(), digest_size=16).digest())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Part):
            return NotImplemented
        if self.digest and other.digest:
            return self.digest == other.digest
        return (self.chains, self.sets, self.elements) == (other.chains, other.sets, other.elements)

    def __hash__(self) -> int:
        return hash(self.digest) if self.digest else hash((self.chains, self.sets, self.elements))


@dataclass(frozen=True, slots=True, eq=False)
class Parts:
    """The index of a compiled Ruleset: the fixed layer and each service port's Part, by label."""

    fixed: Part
    ports: dict[str, Part]
    sets: tuple[NamedSet, ...]  # the Ruleset's tuples this index describes (checked by identity)
    chains: tuple[Chain, ...]
    # Keys of one-value-per-key maps that more than one port claims (layout.ONE_PER_KEY): set →
    # key → every claim. Rare; `narrow` compares all claims of such a key, since a port that did not
    # change can win it when the winner changes or goes.
    contested: dict[str, dict[str, tuple[Element, ...]]] = field(default_factory=dict)

    def describes(self, rs: Ruleset) -> bool:
        return rs.sets is self.sets and rs.chains is self.chains


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Ruleset:
    family: str  # "ip" or "ip6"
    table: str = "netkit"
    sets: tuple[NamedSet, ...] = ()
    chains: tuple[Chain, ...] = field(default=())
    parts: Parts | None = field(default=None, compare=False, hash=False, repr=False)
    # From the Compiler: the labels of the ports whose Part can differ from its previous result.
    since: Since[frozenset[str]] | None = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not one of {FAMILIES}")

    @staticmethod
    def of(family: str, sets: Iterable[NamedSet], chains: Iterable[Chain], table: str = "netkit") -> Ruleset:
        """A Ruleset with sets and chains sorted by name (the only order that means nothing)."""
        return Ruleset(family, table, tuple(sorted(sets, key=lambda s: s.name)),
                       tuple(sorted(chains, key=lambda c: c.name)))

    def indexed(self) -> Parts | None:
        """The part index, if it still describes this Ruleset."""
        return self.parts if self.parts is not None and self.parts.describes(self) else None

    def chain_map(self) -> dict[str, Chain]:
        return {c.name: c for c in self.chains}

    def set_map(self) -> dict[str, NamedSet]:
        return {s.name: s for s in self.sets}

    @property
    def ip(self) -> str:
        """The payload keyword of this family's addresses (`ip saddr` / `ip6 saddr`)."""
        return self.family


def prefixes(networks: Iterable[IPNetwork]) -> list[str]:
    """Networks merged and sorted as the kernel keeps an interval set, spelled as nft prints them
    (a full-length prefix is a bare address)."""
    nets = list(networks)
    v4 = ipaddress.collapse_addresses(x for x in nets if isinstance(x, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(x for x in nets if isinstance(x, ipaddress.IPv6Network))
    merged: list[IPNetwork] = [*v4, *v6]
    merged.sort(key=lambda x: (x.version, x.network_address.packed, x.prefixlen))
    return [str(x.network_address) if x.prefixlen == x.max_prefixlen else str(x) for x in merged]


def anonymous_set(items: list[str]) -> str:
    """`{ a, b }`, or the bare item when there is one (how nft lists a one-element set)."""
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"
