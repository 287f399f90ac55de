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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netkit.config import Config
from netkit.errors import KernelError
from netkit.model import IPFamily, NodeState
from netkit.rules.backend import Backend

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncResult:
    full: bool
    seconds: float
    changed: bool  # something was written
    chains_written: int
    error: str | None = None


class Syncer:
    def __init__(self, config: Config, backend: Backend, families: Sequence[IPFamily], *,
                 netns: str | None = None) -> None:
        self.config = config
        self.backend = backend
        self.families = tuple(families)
        self.kernels = {f: backend.kernel(config, f, netns) for f in self.families}
        # A backend may offer a compiler that remembers unchanged service ports between syncs.
        make = getattr(backend, "compiler", None)
        self.compilers: dict[IPFamily, Any] = {f: make(config, f) if make else None for f in self.families}
        self.committed: dict[IPFamily, Any] = {}

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
        compiler = self.compilers[family]
        desired = compiler.compile(state) if compiler else self.backend.compile(state, self.config, family)
        base = self.committed.get(family)
        hint = None
        if full or base is None:
            # Re-read the kernel; chains equal to what we committed share its tuples (less memory).
            reusing = getattr(kernel, "dump_reusing", None)
            base = reusing(base) if base is not None and reusing is not None else kernel.dump()
        elif compiler is not None:
            hint = compiler.changed_since(base)  # which chains can differ from what we committed
        planner: Any = self.backend.plan  # a backend with a remembering compiler takes the hint
        plan = planner(base, desired, only=hint) if hint is not None else planner(base, desired)
        if getattr(plan, "empty", False):
            self.committed[family] = desired
            return 0
        try:
            kernel.apply(plan)
        except KernelError:
            self.committed.pop(family, None)
            raise
        self.committed[family] = desired
        return int(getattr(plan, "chains_written", 1) or 1)

    def cleanup(self) -> None:
        for kernel in self.kernels.values():
            kernel.cleanup()
