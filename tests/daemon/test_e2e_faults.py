"""End to end under API faults: for each fault of the test API server the rules converge to the API's
state, and a sampler reading the live rules every 50 ms during the fault never sees the service's
DNAT emptied. Also a daemon restart: the new daemon writes nothing before its first complete list,
so the working rules stay while the API is unreachable."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from netkit.testing.apistore import resource_for_kind
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import run
from .e2e import (
    WEB,
    Running,
    config,
    options,
    running_daemon,
    sampling,
    start_daemon,
    stop_daemon,
    web_service,
    web_slice,
    with_ports,
)

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")

A, B, C = "10.244.1.11", "10.244.1.12", "10.244.2.11"
OTHER = "default/other:http/tcp"
SERVICES = resource_for_kind("Service")


def _slice_obj(ips: list[str]) -> dict[str, object]:
    import yaml

    doc: dict[str, object] = yaml.safe_load(web_slice(ips))
    return doc


async def _prepare(r: Running) -> None:
    assert r.kubectl is not None
    await r.kubectl.apply_text("create", web_service() + "---\n" + web_slice([A, B]) + "---\n"
                               + web_service("10.96.0.11", name="other")
                               + "---\n" + web_slice([C], name="other", slice_name="other-1"))
    await r.converge(lambda s: s.get(WEB) == with_ports([A, B]) and s.get(OTHER) == with_ports([C]),
                     what="the initial state")


async def _hold(seconds: float) -> None:
    await asyncio.sleep(seconds)  # the fault lasts this long while the sampler reads the kernel


@pytest.mark.parametrize("fault", ["clean-end", "dropped-connection"])
def test_stream_faults_converge_without_emptying(netns: str, tmp_path: Path, fault: str) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.srv is not None and r.kubectl is not None
            await _prepare(r)
            async with sampling(r) as sampler:
                for _ in range(3):  # repeatedly, with changes made right after each fault
                    (r.srv.end_watches if fault == "clean-end" else r.srv.drop_connections)()
                    await r.kubectl.apply_text("replace", web_slice([B, C]))
                    await r.converge(lambda s: s.get(WEB) == with_ports([B, C]), what="after the fault")
                    (r.srv.end_watches if fault == "clean-end" else r.srv.drop_connections)()
                    await r.kubectl.apply_text("replace", web_slice([A, B]))
                    await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="and back")
            assert sampler.samples >= 3
            assert sampler.emptied == []

    run(scenario())


def test_compaction_forces_a_relist_that_deletes_what_vanished(netns: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.srv is not None and r.kubectl is not None
            await _prepare(r)
            async with sampling(r) as sampler:
                r.srv.stall_watches()  # the changes below are not delivered to the open watches
                await r.kubectl("delete", "service", "other")
                await r.kubectl.apply_text("replace", web_slice([B, C]))
                r.srv.compact()  # ... and the version the daemon holds is compacted away
                await _hold(0.3)
                r.srv.drop_connections()  # resume from the old version → 410 → relist
                await r.converge(lambda s: s.get(WEB) == with_ports([B, C]) and OTHER not in s,
                                 what="the relisted state")
            assert sampler.emptied == []
            assert any(a.code == 200 and "watch" in a.query and a.resource == "services"
                       for a in r.srv.audit)
            lists = [a for a in r.srv.requests("list", "services")]
            assert len(lists) >= 2, "a relist after the 410"

    run(scenario())


def test_server_down_and_back(netns: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.srv is not None
            await _prepare(r)
            async with sampling(r) as sampler:
                await r.srv.stop()
                r.srv.store.delete(SERVICES, "default", "other")
                r.srv.store.apply(_slice_obj([C]))
                r.srv.compact()
                await _hold(1.0)  # the daemon retries against a refused port meanwhile
                await sampler.take(5)  # the outage lasts until the rules were read 5 times more
                assert (await r.services()).get(WEB) == with_ports([A, B]), "rules kept during the outage"
                await r.srv.start()
                await r.converge(lambda s: s.get(WEB) == with_ports([C]) and OTHER not in s,
                                 what="the state after the outage")
            assert sampler.emptied == []

    run(scenario())


def test_a_restart_keeps_the_rules_until_the_first_complete_list(netns: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.srv is not None and r.kubectl is not None
            await _prepare(r)
            opts = r.daemon.options
            assert r.task is not None
            await stop_daemon(r.task)  # SIGTERM-like stop: rules stay
            assert (await r.services()).get(WEB) == with_ports([A, B])
            await r.srv.stop()  # and the API is down when the new daemon starts
            r.srv.store.apply(_slice_obj([A, B, C]))
            async with sampling(r) as sampler:
                daemon, task = await start_daemon(opts)
                try:
                    await _hold(1.0)
                    await sampler.take(5)
                    assert daemon.runner.runs == 0, "no sync before the first complete list"
                    assert not daemon.store.all_synced
                    await r.srv.start()
                    await asyncio.wait_for(daemon.synced.wait(), EVENT_TIMEOUT)
                    await r.converge(lambda s: s.get(WEB) == with_ports([A, B, C]), what="after the restart")
                finally:
                    await stop_daemon(task)
            assert sampler.samples >= 5
            assert sampler.emptied == []

    run(scenario())


def test_restart_with_failing_lists_keeps_rules(netns: str, tmp_path: Path) -> None:
    """Lists that fail with 500s (an overloaded server) also delay the first write, never empty."""

    async def scenario() -> None:
        async with running_daemon(netns, tmp_path) as r:
            assert r.srv is not None
            await _prepare(r)
            assert r.task is not None
            opts = r.daemon.options
            await stop_daemon(r.task)
            r.srv.fail_next(6, 500)
            async with sampling(r) as sampler:
                daemon, task = await start_daemon(opts)
                try:
                    await asyncio.wait_for(daemon.synced.wait(), EVENT_TIMEOUT)
                    await r.converge(lambda s: s.get(WEB) == with_ports([A, B]), what="after the restart")
                finally:
                    await stop_daemon(task)
            assert sampler.emptied == []
            assert len([a for a in r.srv.audit if a.code == 500]) == 6

    run(scenario())


def test_config_is_fast() -> None:
    cfg = config()
    assert cfg.min_sync_period <= 0.2 and cfg.sync_period <= 5
    assert options("ns", cfg).healthz_address is None
