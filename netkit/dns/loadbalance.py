"""CoreDNS's `loadbalance round_robin` (plugin/loadbalance), on netkit's replies; pure.

CoreDNS rewrites every NOERROR reply (not zone transfers) on its way out, section by section —
answer, authority and additional alike:

- a section of one record stays as it is;
- a section of only A or only AAAA records is shuffled;
- any other section is reordered CNAMEs first, then every other type, then the A/AAAA records
  (shuffled among themselves), then the MX records (shuffled among themselves); each group keeps
  its records' order otherwise.

`shuffle(reply, rng)` does that to a reply of the cluster view; `changes(reply)` says whether a
reply's order can differ from one query to the next (some section holds two addresses or two MX
records), which is what keeps such a reply out of the engine's reply cache. netkit's cluster
records have no MX; the rule is kept whole so the order of every section is CoreDNS's.

Upstream replies are passed on as bytes, so they are shuffled in place: `wire_run(section)` finds
the A (or AAAA) records of one section that can trade places without re-encoding — consecutive,
one type, one owner written as the same compression pointer, so each is the same number of bytes
and nothing can point into one — and `permute(data, runs, rng)` shuffles them. That is CoreDNS's
order whenever the upstream already put CNAMEs and other types first (as resolvers do); MX records
are left in place (other records point into their exchange names), and so is a section mixing A
and AAAA records.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from netkit.dns.resolver import Rcode, Record, Reply, RType

MX = RType.MX
ADDRESSES = frozenset({RType.A, RType.AAAA})


def round_robin(records: Sequence[Record], rng: random.Random) -> tuple[Record, ...]:
    """One section in CoreDNS's round_robin order (a new random order on every call)."""
    if len(records) <= 1:
        return tuple(records)
    first = records[0].rtype
    if first in ADDRESSES and all(r.rtype == first for r in records):
        out = list(records)
        rng.shuffle(out)
        return tuple(out)
    cnames = [r for r in records if r.rtype == RType.CNAME]
    addresses = [r for r in records if r.rtype in ADDRESSES]
    mx = [r for r in records if r.rtype == MX]
    rest = [r for r in records if r.rtype != RType.CNAME and r.rtype not in ADDRESSES and r.rtype != MX]
    rng.shuffle(addresses)
    rng.shuffle(mx)
    return (*cnames, *rest, *addresses, *mx)


@dataclass(frozen=True, slots=True)
class Run:
    """`count` records of `size` bytes each from offset `start`: they may come in any order."""

    start: int
    size: int
    count: int


@dataclass(frozen=True, slots=True)
class WireRecord:
    start: int
    owner: bytes  # the owner name as written (a pointer: 2 bytes)
    rtype: int
    end: int


def wire_run(section: Sequence[WireRecord]) -> Run | None:
    """The address records of one section of a reply that `permute` may shuffle, if any."""
    picked = [i for i, r in enumerate(section) if r.rtype in ADDRESSES]
    if len(picked) < 2 or picked[-1] - picked[0] != len(picked) - 1:
        return None
    first = section[picked[0]]
    size = first.end - first.start
    pointer = len(first.owner) == 2 and first.owner[0] & 0xC0 == 0xC0
    same = all(section[i].rtype == first.rtype and section[i].owner == first.owner
               and section[i].end - section[i].start == size for i in picked)
    return Run(first.start, size, len(picked)) if pointer and same else None


def permute(data: bytes | bytearray, runs: Sequence[Run], rng: random.Random, base: int = 0) -> bytes:
    """`data` with the records of every run in a new random order (`base`: where `data` starts in
    the reply the runs were found in)."""
    out = bytearray(data)
    for run in runs:
        start = run.start - base
        records = [bytes(out[start + i * run.size:start + (i + 1) * run.size]) for i in range(run.count)]
        rng.shuffle(records)
        out[start:start + run.size * run.count] = b"".join(records)
    return bytes(out)


def shuffle(reply: Reply, rng: random.Random) -> Reply:
    """Every section of a NOERROR reply in round_robin order; any other reply as it is."""
    if reply.rcode != Rcode.NOERROR:
        return reply
    return replace(reply, answer=round_robin(reply.answer, rng), authority=round_robin(reply.authority, rng),
                   additional=round_robin(reply.additional, rng))


def changes(reply: Reply) -> bool:
    """Whether `shuffle` can give this reply a different order on the next call."""
    if reply.rcode != Rcode.NOERROR:
        return False
    return any(_random_part(section) for section in (reply.answer, reply.authority, reply.additional))


def _random_part(records: Sequence[Record]) -> bool:
    return (sum(1 for r in records if r.rtype in ADDRESSES) > 1
            or sum(1 for r in records if r.rtype == MX) > 1)
