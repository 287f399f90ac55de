"""The syncer: NodeState → rules in the kernel, for every IP family.

- Partial sync (the usual case): plan against the ruleset committed last time, kept in memory, so
  only the chains that changed are written and the kernel is not read.
- Full sync (periodic, and after any failure): read the kernel back first, so drift — a deleted rule,
  a flushed table (the canary chain gone) — is repaired. Even then only what differs is written: with
  iptables-nft, rewriting every chain with --noflush takes minutes at 10k services.
- A failed apply leaves the previous rules in place (the kernel takes a batch whole or not at all);
  the committed state is forgotten so the next sync re-reads the kernel.
- Stale UDP conntrack entries are not the syncer's business: the daemon hands the UDP ports a sync
  changed to `netkit.runtime.conntrack.CleanupWorker`, which cleans them off the sync path.

`sync()` blocks (it runs tools); the daemon calls it in a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import IPFamily, NodeState
from netkit.rules.backend import Backend, Compiler, Kernel, P, R

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncResult:
    full: bool
    seconds: float
    changed: bool  # something was written
    written: int  # kernel objects written or deleted (chains; nft chains/sets/elements; IPVS servers…)
    error: str | None = None

    @property
    def chains_written(self) -> int:
        """The older name of `written` (iptables writes whole chains)."""
        return self.written


class SyncEngine(Protocol):
    """What the daemon needs of a Syncer, whatever its backend's types."""

    def sync(self, state: NodeState, *, full: bool) -> SyncResult: ...

    def cleanup(self) -> None: ...

    @property
    def committed(self) -> Mapping[IPFamily, object]:
        """The Ruleset last written per family (what the kernel holds, as far as the daemon knows)."""


class Syncer(Generic[R, P]):
    def __init__(self, config: Config, backend: Backend[R, P], families: Sequence[IPFamily], *,
                 netns: str | None = None, on_plan: Callable[[IPFamily, R, R, P], None] | None = None) -> None:
        self.config = config
        self.backend = backend
        self.on_plan = on_plan  # told every (family, base, desired, plan) a sync makes (the daemon's rule metrics)
        self.families = tuple(families)
        self.kernels: dict[IPFamily, Kernel[R, P]] = {f: backend.kernel(config, f, netns) for f in self.families}
        # Each remembers unchanged service ports between syncs, and tells the planner what can differ.
        self.compilers: dict[IPFamily, Compiler[R]] = {f: backend.compiler(config, f) for f in self.families}
        self.committed: dict[IPFamily, R] = {}

    def sync(self, state: NodeState, *, full: bool) -> SyncResult:
        start = time.perf_counter()
        written, changed = 0, False
        try:
            for family in self.families:
                n = self._sync_family(family, state, full)
                written += n
                changed = changed or n > 0
        except KernelError as exc:
            log.error("sync failed: %s", exc)
            return SyncResult(full, time.perf_counter() - start, changed, written, str(exc))
        return SyncResult(full, time.perf_counter() - start, changed, written)

    def _sync_family(self, family: IPFamily, state: NodeState, full: bool) -> int:
        kernel = self.kernels[family]
        desired = self.compilers[family].compile(state)
        if full or family not in self.committed:
            # Re-read the kernel; what equals what we committed is shared with it (less memory).
            base = kernel.dump_reusing(self.committed[family]) if family in self.committed else kernel.dump()
        else:
            base = self.committed[family]  # the planner compares only what the compiler says can differ
        plan = self.backend.plan(base, desired)
        if self.on_plan is not None:
            self.on_plan(family, base, desired, plan)
        if plan.empty:
            self.committed[family] = desired
            return 0
        try:
            kernel.apply(plan)
        except KernelError:
            self.committed.pop(family, None)
            raise
        self.committed[family] = desired
        stats = plan.stats()
        return max(stats.written + stats.deleted, 1)

    def cleanup(self) -> None:
        for kernel in self.kernels.values():
            kernel.cleanup()
