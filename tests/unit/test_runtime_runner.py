"""The bounded-frequency runner: coalescing, the minimum interval between runs, the periodic full run,
and retries after a failed or raising run. The loop's clock is virtual (`VirtualTimeLoop`): a sleep
moves it on instead of waiting, so the counts and gaps are exact however busy the machine is."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable

from netkit.runtime.runner import Runner


class _Skipping(selectors.DefaultSelector):
    """Polls without blocking; where the loop would block for `timeout`, moves its clock on instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if not events and timeout:
            self.loop.now += timeout
        elif not events and timeout is None:
            raise RuntimeError("nothing scheduled: the test would wait forever")
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose time() is virtual: it advances only by what the loop would have slept."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Skipping(self))

    def time(self) -> float:
        return self.now


class Recorder:
    def __init__(self, results: list[bool | Exception] | None = None, duration: float = 0.0) -> None:
        self.calls: list[tuple[float, bool]] = []
        self.results = list(results or [])
        self.duration = duration

    async def __call__(self, full: bool) -> bool:
        self.calls.append((asyncio.get_running_loop().time(), full))
        if self.duration:
            await asyncio.sleep(self.duration)
        result = self.results.pop(0) if self.results else True
        if isinstance(result, Exception):
            raise result
        return result


def scenario(body: Callable[[Runner, Recorder], Awaitable[None]], rec: Recorder, **kw: float) -> None:
    async def main() -> None:
        runner = Runner(rec, clock=asyncio.get_running_loop().time, **kw)
        task = asyncio.create_task(runner.run())
        try:
            await body(runner, rec)
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as loop_runner:
        loop_runner.run(asyncio.wait_for(main(), 10))  # 10 virtual seconds: ends a runaway loop


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
    assert len(rec.calls) >= 5, rec.calls  # 0.8 s of requests every 0.02 s
    assert min(gaps) >= 0.15 - 1e-9, gaps


def test_a_full_run_comes_every_max_interval_without_requests() -> None:
    rec = Recorder()

    async def body(runner: Runner, _: Recorder) -> None:
        runner.request()
        await asyncio.sleep(0.75)

    scenario(body, rec, min_interval=0.01, max_interval=0.2)
    assert [round(t, 6) for t, _ in rec.calls] == [0.0, 0.2, 0.4, 0.6], rec.calls
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
    assert all(g >= 0.1 - 1e-9 for g in gaps), gaps


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
