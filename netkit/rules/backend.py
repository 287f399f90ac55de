"""The interface every dataplane backend offers, so commands and the daemon stay backend-agnostic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from netkit.config import Config
from netkit.model import IPFamily, NodeState


class Kernel(Protocol):
    """The IO edge of a backend: read what is programmed, write a plan, remove everything netkit wrote.
    Constructing one does no IO; every method may raise KernelError (payload + tool stderr)."""

    def dump(self) -> Any: ...

    def apply(self, plan: Any) -> None: ...

    def cleanup(self) -> int | None:
        """Remove everything netkit wrote; returns how many objects went, when known."""


class Backend(Protocol):
    name: str

    def compile(self, state: NodeState, config: Config, family: IPFamily) -> Any:
        """Pure: the complete desired Ruleset of one IP family."""

    def render(self, ruleset: Any) -> str:
        """The Ruleset as the kernel tool's input text."""

    def plan(self, committed: Any, desired: Any) -> Any:
        """Pure: the smallest change that turns `committed` into `desired`."""

    def render_plan(self, plan: Any) -> str:
        """The plan as the kernel tool's input text (what `apply` would send)."""

    def summarize(self, ruleset: Any) -> Mapping[str, tuple[str, ...]]:
        """Service port ("ns/svc:port/proto") → endpoints ("IP:port") it DNATs to, read from a Ruleset
        (so a live dump can be summarised as well as a compiled one)."""

    def kernel(self, config: Config, family: IPFamily, netns: str | None) -> Kernel: ...
