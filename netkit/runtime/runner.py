"""A bounded-frequency runner (kube-proxy's BoundedFrequencyRunner, in asyncio).

`request()` asks for a run as soon as allowed; runs are at least `min_interval` apart (changes that
arrive meanwhile coalesce into the next run) and at most `max_interval` apart (the periodic full
sync). The function gets `full=True` on the periodic run and after a failure; it returns True on
success, and a failed run is retried after `retry_interval` even with no new request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Runner:
    def __init__(self, fn: Callable[[bool], Awaitable[bool]], *, min_interval: float, max_interval: float,
                 retry_interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.fn = fn
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.retry_interval = retry_interval if retry_interval is not None else max_interval
        self.clock = clock
        self._wake = asyncio.Event()
        self._last_run = float("-inf")
        self._last_full = float("-inf")
        self._failed = False
        self.runs = 0

    def request(self) -> None:
        self._wake.set()

    @property
    def requested(self) -> bool:
        """A run has been asked for and has not started yet."""
        return self._wake.is_set()

    async def run(self) -> None:
        while True:
            await self._wait_for_turn()
            now = self.clock()
            full = self._failed or now - self._last_full >= self.max_interval
            self._wake.clear()
            self._last_run = now
            try:
                ok = await self.fn(full)
            except Exception:  # the loop must survive anything a sync raises
                log.exception("sync raised")
                ok = False
            self.runs += 1
            self._failed = not ok
            if ok and full:
                self._last_full = now

    async def _wait_for_turn(self) -> None:
        deadline = (self._last_run + self.retry_interval) if self._failed else (self._last_full + self.max_interval)
        timeout = max(0.0, deadline - self.clock())
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            pass
        wait = self._last_run + self.min_interval - self.clock()
        if wait > 0:
            await asyncio.sleep(wait)
