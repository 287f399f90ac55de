"""The bounded-frequency runner with short real intervals: coalescing, the minimum interval between
runs, the periodic full run, and retries after a failed or raising run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from netkit.runtime.runner import Runner


class Recorder:
    def __init__(self, results: list[bool | Exception] | None = None, duration: float = 0.0) -> None:
        self.calls: list[tuple[float, bool]] = []
        self.results = list(results or [])
        self.duration = duration

    async def __call__(self, full: bool) -> bool:
        self.calls.append((time.monotonic(), full))
        if self.duration:
            await asyncio.sleep(self.duration)
        result = self.results.pop(0) if self.results else True
        if isinstance(result, Exception):
            raise result
        return result


def scenario(body: Callable[[Runner, Recorder], Awaitable[None]], rec: Recorder, **kw: float) -> None:
    async def main() -> None:
        runner = Runner(rec, **kw)
        task = asyncio.create_task(runner.run())
        try:
            await body(runner, rec)
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    asyncio.run(asyncio.wait_for(main(), 10))


def test_the_first_run_is_full_and_a_burst_of_requests_coalesces() -> None:
    rec = Recorder()

    async def body(runner: Runner, _: Recorder) -> None:
        runner.request()
        await asyncio.sleep(0.05)
        for _ in range(20):  # all well inside the minimum interval after the first run
            runner.request()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.7)

    scenario(body, rec, min_interval=0.4, max_interval=30)
    assert rec.calls[0][1] is True
    assert len(rec.calls) == 2, rec.calls  # the initial run, then one run for the whole burst
    assert rec.calls[1][1] is False


def test_runs_are_at_least_min_interval_apart() -> None:
    rec = Recorder()

    async def body(runner: Runner, _: Recorder) -> None:
        for _ in range(40):
            runner.request()
            await asyncio.sleep(0.02)

    scenario(body, rec, min_interval=0.15, max_interval=30)
    gaps = [b[0] - a[0] for a, b in zip(rec.calls, rec.calls[1:], strict=False)]
    assert len(rec.calls) >= 4
    assert min(gaps) >= 0.15 - 0.01, gaps


def test_a_full_run_comes_every_max_interval_without_requests() -> None:
    rec = Recorder()

    async def body(runner: Runner, _: Recorder) -> None:
        runner.request()
        await asyncio.sleep(0.75)

    scenario(body, rec, min_interval=0.01, max_interval=0.2)
    assert 3 <= len(rec.calls) <= 5, rec.calls
    assert all(full for _, full in rec.calls)


def test_a_failed_run_is_retried_as_a_full_run() -> None:
    rec = Recorder([True, False, RuntimeError("boom"), True])

    async def body(runner: Runner, _: Recorder) -> None:
        runner.request()
        await asyncio.sleep(0.05)
        runner.request()  # this one fails, the retry raises, the next retry succeeds
        await asyncio.sleep(0.6)

    scenario(body, rec, min_interval=0.01, max_interval=30, retry_interval=0.1)
    assert [full for _, full in rec.calls] == [True, False, True, True]
    gaps = [b[0] - a[0] for a, b in zip(rec.calls[1:], rec.calls[2:], strict=False)]
    assert all(g >= 0.09 for g in gaps), gaps


def test_requests_during_a_run_cause_exactly_one_more_run() -> None:
    rec = Recorder(duration=0.1)

    async def body(runner: Runner, _: Recorder) -> None:
        runner.request()
        await asyncio.sleep(0.02)  # the first run is in progress
        runner.request()
        runner.request()
        await asyncio.sleep(0.5)

    scenario(body, rec, min_interval=0.01, max_interval=30)
    assert len(rec.calls) == 2, rec.calls
