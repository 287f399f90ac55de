"""`netkit diff` reads the kernel while it reads its input: the dumps (and the survey of what other
modes left) start in a thread first.

Reading what the kernel holds is mostly the kernel's tool at work in a child process
(`iptables-save`: 1–10 s at 10,000 services; `nft -j list table`), while decoding the manifests,
building the NodeState and compiling are this process's own work. Started first, the dump runs on
the other core meanwhile, and the command takes about the longer of the two rather than their sum
(bench/diff.py measures it against the bare dump). Only read-only commands do this: `apply` reads
the kernel right before it plans, as before.

A dump's error is raised where the dump is used, so an invalid input still fails with its own
message first. The thread is a daemon: a command that fails or is interrupted does not wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from netkit.model import IPFamily

R = TypeVar("R")


class EarlyDumps(Generic[R]):
    """`dumps[family]()` for each family, run one after the other in a thread from construction on."""

    def __init__(self, dumps: Mapping[IPFamily, Callable[[], R]]) -> None:
        self._dumps = dict(dumps)
        self._results: dict[IPFamily, R] = {}
        self._errors: dict[IPFamily, BaseException] = {}
        self._done = {f: threading.Event() for f in self._dumps}
        threading.Thread(target=self._run, name="netkit-dump", daemon=True).start()

    def _run(self) -> None:
        for family, dump in self._dumps.items():
            try:
                self._results[family] = dump()
            except BaseException as exc:  # re-raised in the caller's thread by `get`
                self._errors[family] = exc
            finally:
                self._done[family].set()

    def get(self, family: IPFamily) -> R:
        """The dump of `family`, once read (its error, if it failed)."""
        self._done[family].wait()
        if family in self._errors:
            raise self._errors.pop(family)
        return self._results.pop(family)
