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
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

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
