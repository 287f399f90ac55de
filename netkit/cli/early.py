"""`netkit diff` reads the kernel while it reads its input: the dumps (and the survey of what other
modes left) start in a thread first.

Reading what the kernel holds is mostly the kernel's tool at work in a child process
(`iptables-save`: 1–10 s at 10,000 services; `nft -j list table`), while decoding the manifests,
building the NodeState and compiling are this process's own work. Started first, the dump runs on
the other core meanwhile, and the command takes about the longer of the two rather than their sum
(bench/diff.py measures it against the bare dump). In iptables mode the nfacct counters that exist
(which the compiled rules count into) are looked up the same way, in a thread of their own. Only
read-only commands do this: `apply` reads the kernel right before it plans, as before.

A dump's error is raised where the dump is used, so an invalid input still fails with its own
message first. The thread is a daemon: a command that fails or is interrupted does not wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class EarlyDumps(Generic[K, R]):
    """`dumps[key]()` for each key (an IP family; "nfacct": the counters diff's rules count into),
    run one after the other in a thread from construction on."""

    def __init__(self, dumps: Mapping[K, Callable[[], R]]) -> None:
        self._dumps = dict(dumps)
        self._results: dict[K, R] = {}
        self._errors: dict[K, BaseException] = {}
        self._done = {f: threading.Event() for f in self._dumps}
        threading.Thread(target=self._run, name="netkit-dump", daemon=True).start()

    def _run(self) -> None:
        for key, dump in self._dumps.items():
            try:
                self._results[key] = dump()
            except BaseException as exc:  # re-raised in the caller's thread by `get`
                self._errors[key] = exc
            finally:
                self._done[key].set()

    def get(self, key: K) -> R:
        """The dump of `key`, once read (its error, if it failed)."""
        self._done[key].wait()
        if key in self._errors:
            raise self._errors.pop(key)
        return self._results.pop(key)
