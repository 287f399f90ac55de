"""What the lab's `scale` and `drain` read to know a node has programmed a change
(netkit.lab.cluster.programmed), against a real daemon whose syncs are held at a gate: a sync that read
its objects before a change arrived and ended after it has not programmed it, whatever its end time."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from pathlib import Path
from typing import Any

from netkit.lab.cluster import nodehttp, programmed

from .conftest import run
from .e2e import WEB, Running, running_daemon, web_service, web_slice, with_ports

A, B = "10.244.1.10", "10.244.1.11"


def page(r: Running) -> tuple[programmed.Progress, float]:
    """The daemon's metrics as the lab reads them, and kube-proxy's last-sync (end) timestamp."""
    text = r.daemon.metrics.render().decode()
    return programmed.parse(text), nodehttp.metric(text, nodehttp.SYNC_METRIC) or 0.0


def test_a_sync_that_read_before_the_change_does_not_count_however_late_it_ends(netns: str, tmp_path: Path) -> None:
    entered: queue.Queue[threading.Event] = queue.Queue()

    async def next_sync() -> threading.Event:
        return await asyncio.to_thread(entered.get, True, 20)

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path, health=True) as r:
            assert r.kubectl is not None
            await r.kubectl.apply_text("create", web_service() + "---\n" + web_slice([A]))
            await r.converge(lambda s: s.get(WEB) == with_ports([A]), what="A")
            real = r.daemon.syncer.sync

            def gated(*args: Any, **kwargs: Any) -> Any:  # called once the sync has read its objects
                gate = threading.Event()
                entered.put(gate)
                gate.wait(20)
                return real(*args, **kwargs)

            r.daemon.syncer.sync = gated  # type: ignore[method-assign]
            await r.kubectl.apply_text("replace", web_slice([A, B]))
            first = await next_sync()  # holds [A, B]
            trigger = time.time()
            await r.kubectl.apply_text("replace", web_slice([B]))  # A terminating: it must leave the rules
            while (page(r)[0].last_queued or 0) < trigger:
                await asyncio.sleep(0.02)  # the daemon has it, behind the held sync
            first.set()
            second = await next_sync()  # the first has ended, long after the change arrived
            seen, ended = page(r)
            assert ended > trigger and seen.last_queued is not None and ended > seen.last_queued
            assert (await r.services())[WEB] == with_ports([A, B])  # yet A still gets connections
            assert not programmed.ready(seen, trigger)
            r.daemon.syncer.sync = real  # type: ignore[method-assign]
            second.set()
            while not programmed.ready(page(r)[0], trigger):
                await asyncio.sleep(0.02)
            assert (await r.services())[WEB] == with_ports([B])

    try:
        run(scenario())
    finally:
        while not entered.empty():
            entered.get().set()
