"""Values that describe a change between two rulesets, whatever wrote them: shared by every backend
(netkit.rules) and the nftables library (netkit.nft), which imports nothing from netkit.rules.

- `Since`: what a remembering compiler knows about its result — which of its parts can differ from
  the result before. A planner given that very result as `committed` compares only those.
- `comparable(committed, desired)`: the one rule every backend's planner follows to read them.
- `PlanStats`: how much a plan (or an nft transaction) writes and deletes, in its own objects.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PlanStats:
    """How much a plan writes, in the backend's own objects (chains for iptables; chains, sets and
    map elements for nftables; virtual servers, real servers, set entries and addresses for IPVS)."""

    written: int  # objects created or rewritten
    deleted: int  # objects removed
    text: str  # for people: "12 chains written, 1 deleted, 0 jumps added"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True, eq=False)
class Since(Generic[K]):
    """What a remembering compiler knows about its result: which of its parts (`changed`, in the
    backend's terms) can differ from the result of the compile before (`base`). A planner given
    that very `base` as `committed` compares only those; given anything else (a kernel dump), all.

    `base` is held weakly: each result holding the one before would keep every sync's ruleset alive."""

    base: weakref.ref[object]
    changed: K

    def applies_to(self, committed: object) -> bool:
        return committed is not None and self.base() is committed


class Remembering(Protocol[K]):
    """A ruleset that may carry a Since: from a remembering compiler, or from a kernel dump read
    against an earlier result (a dump that says which of its parts it found different)."""

    @property
    def since(self) -> Since[K] | None: ...


def comparable(committed: Remembering[K] | None, desired: Remembering[K],
               union: Callable[[K, K], K] | None = None) -> K | None:
    """What a planner must compare to turn `committed` into `desired`, in the backend's terms; None
    for everything. Every other part is the same object on both sides, so the plan is the same as
    a full comparison's, in a fraction of the time:
    - `desired` came from a compiler whose previous result is `committed`: what the compiler says;
    - `committed` is a dump read against that previous result (a full sync reading the kernel),
      given `union`: what either says, since every other part is the same in all three;
    - `committed` is a dump read against `desired` itself that found nothing different (`netkit
      diff` in sync): nothing."""
    since, read = desired.since, None if committed is None else committed.since
    if since is not None and since.applies_to(committed):
        return since.changed
    if union is not None and since is not None and read is not None and (base := since.base()) is not None \
            and read.applies_to(base):
        return union(since.changed, read.changed)
    if read is not None and read.applies_to(desired) and not read.changed:
        return read.changed
    return None
