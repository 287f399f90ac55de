"""The interface every dataplane backend offers, so commands and the daemon stay backend-agnostic.

A backend is generic in two types: its Ruleset `R` (what `compile` makes and `Kernel.dump` reads back;
nftables uses `Ruleset | None`, None meaning "no table yet") and its Plan `P` (what `plan` makes and
`Kernel.apply` writes). Every member exists on every backend; a backend that cannot do a thing says
so by raising `Unsupported` (a NetkitError, so the CLI shows one line), never by lacking the member.
tests/unit/test_backend_conformance.py runs every backend through every member.

Code that works with "whichever backend the config names" is written once, generic in R and P, and
handed to `netkit.rules.registry.with_backend(mode, fn)`, which calls it with the concrete backend:
the types of a compiled ruleset, its plan and its kernel then line up without a cast or an `Any`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from netkit.change import PlanStats as PlanStats  # re-exported: every backend's Plan has stats()
from netkit.change import Since as Since  # re-exported: what a remembering compiler knows
from netkit.config import Config
from netkit.errors import NetkitError
from netkit.model import IPFamily, NodeState
from netkit.rules.tracing import Outcome, Packet

JSONValue = None | bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"]


class Unsupported(NetkitError):
    """A backend cannot do what was asked (e.g. trace IPVS before its tracer exists)."""


@dataclass(frozen=True, slots=True)
class RuleCounts:
    """kube-proxy's iptables rule gauges after one plan (kubeproxy_sync_proxy_rules_iptables_total and
    _last): rules per table then, and rules the plan wrote per table."""

    total: Mapping[str, int]
    last: Mapping[str, int]


class Plan(Protocol):
    @property
    def empty(self) -> bool:
        """Nothing to write: the kernel already holds the desired ruleset."""

    def stats(self) -> PlanStats: ...


R = TypeVar("R")
P = TypeVar("P", bound=Plan)
P_contra = TypeVar("P_contra", bound=Plan, contravariant=True)
R_co = TypeVar("R_co", covariant=True)
T_co = TypeVar("T_co", covariant=True)


class ApplyInterrupted(Exception):  # noqa: N818 — what the caller asked for, not a failure
    """`stop` said so between two steps of an apply; `state` says what the kernel holds for traffic."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


class Kernel(Protocol[R, P_contra]):
    """The IO edge of a backend: read what is programmed, write a plan, remove everything netkit wrote.
    Constructing one does no IO; every method may raise KernelError (payload + tool stderr)."""

    def dump(self) -> R: ...

    def dump_reusing(self, committed: R) -> R:
        """`dump`, sharing with `committed` what is unchanged where the backend can (less memory on
        a periodic full sync of an unchanged kernel); otherwise the same as `dump`."""

    def apply(self, plan: P_contra, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        """Write `plan`. Where the backend writes in several steps, each one leaving a state a packet
        may meet, it asks `stop` between them (raising ApplyInterrupted when it says so) and tells
        `progress` what is written; a backend that writes in one step asks neither."""

    def cleanup(self) -> int | None:
        """Remove everything netkit wrote; returns how many objects went, when known."""

    def prefetch(self) -> bool:
        """Read now what the next `dump`/`dump_reusing` needs, where the backend can read it before
        knowing what it will be compared with (iptables-legacy's tables: `netkit diff` reads them
        while it decodes its input); False, reading nothing, where it cannot."""

    @property
    def writes(self) -> frozenset[str]:
        """What this edge writes, named by the kernel interface: "nftables", "ipvs",
        "iptables-legacy" or "iptables-nft" (an iptables backend configured "auto" is detected when
        asked); empty for a fake. netkit.rules.cleanup reads it to tell this edge's objects from
        what another mode left."""


class Compiler(Protocol[R_co]):
    """`compile` with a memory for one (config, family), for the daemon: its result equals
    `Backend.compile`'s; only the work differs (unchanged service ports are not compiled again)."""

    def compile(self, state: NodeState) -> R_co: ...


class Backend(Protocol[R, P]):
    @property
    def name(self) -> str: ...

    def compile(self, state: NodeState, config: Config, family: IPFamily) -> R:
        """Pure: the complete desired Ruleset of one IP family."""

    def compiler(self, config: Config, family: IPFamily) -> Compiler[R]:
        """A compiler that remembers unchanged service ports between calls (for the daemon)."""

    def render(self, ruleset: R) -> str:
        """The Ruleset as the kernel tool's input text."""

    def to_json(self, ruleset: R) -> JSONValue:
        """The Ruleset as a structured JSON value (`netkit compile -o json`)."""

    def plan(self, committed: R, desired: R) -> P:
        """Pure: the smallest change that turns `committed` into `desired`."""

    def render_plan(self, plan: P) -> str:
        """The plan as the kernel tool's input text (what `apply` would send)."""

    def describe_plan(self, plan: P) -> str:
        """The plan for people (`netkit diff`)."""

    def summarize(self, ruleset: R) -> Mapping[str, tuple[str, ...]]:
        """Service port ("ns/svc:port/proto") → endpoints ("IP:port") it DNATs to, read from a Ruleset
        (so a live dump can be summarised as well as a compiled one)."""

    def objects(self, ruleset: R, names: Mapping[str, str]) -> dict[str, set[str]]:
        """For the plan summary (netkit.rules.summary): each service port's own objects in `ruleset`,
        one comparable line each (a rule, a set entry, a virtual server); `names` (summary.addresses)
        names what the ruleset leaves unnamed."""

    def live_names(self, desired: R) -> Mapping[str, tuple[str, bool]]:
        """Where a dump keys a service port by something else than its name (an IPVS kernel keeps
        no comments): that key → (the service port, whether it is its cluster IP's), read from
        `desired`; empty when a dump names every service port."""

    def keep(self, live: R, desired: R, services: Collection[str]) -> R:
        """`desired` with the objects of `services` ("namespace/name", invalid input) taken from
        `live` as they are, so a plan neither removes nor changes them (netkit.rules.keep)."""

    def holds_rules(self, ruleset: R) -> bool:
        """Whether a dump holds anything netkit wrote."""

    def rule_counts(self, base: R, plan: P, desired: R, total: Mapping[str, int] | None) -> RuleCounts | None:
        """The daemon's rule gauges after `plan` (made from `base` to `desired`, and applied): the
        rules per table — `total`, the count before, changed by the plan, or counted in `desired`
        when None — and the rules it wrote. None in a mode without such gauges."""

    def foreign(self, live: R, desired: R) -> list[str]:
        """For `diff`: what someone else put where netkit writes (its own tables or chains), which
        `apply` removes — one line each; empty when the backend's planner never touches foreign objects."""

    def trace(self, ruleset: R, packet: Packet) -> list[Outcome]:
        """Pure: where `packet` goes through `ruleset` (see netkit.rules.tracing); may raise Unsupported."""

    def kernel(self, config: Config, family: IPFamily, netns: str | None) -> Kernel[R, P]: ...


class BackendUser(Protocol[T_co]):
    """Code written once for every backend: called with the concrete one (see registry.with_backend)."""

    def __call__(self, backend: Backend[R, P], /) -> T_co: ...
