"""Values that describe a change between two rulesets, whatever wrote them: shared by every backend
(netkit.rules) and the nftables library (netkit.nft), which imports nothing from netkit.rules.

- `Since`: what a remembering compiler knows about its result — which of its parts can differ from
  the result before. A planner given that very result as `committed` compares only those.
- `PlanStats`: how much a plan (or an nft transaction) writes and deletes, in its own objects.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Generic, TypeVar

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
