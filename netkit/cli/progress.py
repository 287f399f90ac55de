"""Progress for long work: one stderr line per phase with its counts and the time since the command
started (compile, plan, batches written, cleanup), like `terraform apply`'s "Still creating…".

Shown when stderr is a terminal, or with `-v`; silent otherwise (scripts read stdout and exit
statuses). A Ctrl-C that reaches Python (compile, diff, cleanup) is reported with what was done and
what was in progress; apply defers Ctrl-C to a safe point and says what the node holds itself."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO


class Progress:
    def __init__(self, enabled: bool, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self._out = out
        self._clock = clock
        self._start = clock()
        self.done: list[str] = []
        self.current: str | None = None

    @staticmethod
    def for_args(verbose: bool) -> Progress:
        return Progress(verbose or _isatty(sys.stderr))

    def elapsed(self) -> float:
        return self._clock() - self._start

    def say(self, message: str) -> None:
        if self.enabled:
            out = self._out or sys.stderr
            out.write(f"netkit: [{self.elapsed():6.1f}s] {message}\n")
            out.flush()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Callable[[str], None]]:
        """`with progress.phase("IPv4: compile") as done: …; done("7 service ports")` prints
        "IPv4: compile: 7 service ports" when the phase ends."""
        self.current = name
        detail: list[str] = []
        yield detail.append
        self.current = None
        self.done.append(name)
        self.say(f"{name}: {', '.join(detail)}" if detail else name)

    @contextlib.contextmanager
    def running(self) -> Iterator[Progress]:
        """Report an interruption with what was done, then let it end the command (exit 130)."""
        try:
            yield self
        except KeyboardInterrupt:
            done = "; ".join(self.done) or "nothing"
            doing = f"; interrupted during: {self.current}" if self.current else ""
            (self._out or sys.stderr).write(f"netkit: interrupted after {self.elapsed():.1f}s; done: {done}{doing}\n")
            raise


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False
