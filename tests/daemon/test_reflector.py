"""The reflector against the test API server: list, watch, and every fault the reference names."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from urllib.parse import parse_qs

import pytest

from netkit.model.types import ObjectRef, Service
from netkit.sources.reflector import BackoffPolicy, EventType, Invalid, ReflectorEvent, Synced, Update
from netkit.testing.apiserver import TestApiServer
from netkit.testing.apistore import resource_for_kind

from .conftest import FAST, eventually, node, reflecting, run, service

SERVICES = resource_for_kind("Service")


def updates(events: list[ReflectorEvent], etype: EventType) -> list[str]:
    return [e.key.name for e in events if isinstance(e, Update) and e.type is etype]


def watch_queries(srv: TestApiServer, resource: str = "services") -> list[dict[str, list[str]]]:
    return [parse_qs(a.query) for a in srv.requests("watch", resource)]


def test_initial_list_is_paginated_and_delivered_before_synced() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            for i in range(7):
                srv.store.create(service(f"s{i}", f"10.96.0.{i + 1}"))
            async with reflecting(srv, options=replace(FAST, page_size=3)) as (r, events):
                assert updates(events, EventType.ADDED) == [f"s{i}" for i in range(7)]
                assert isinstance(events[-1], Synced) and r.synced
                lists = [parse_qs(a.query) for a in srv.requests("list", "services")]
                assert [q.get("limit") for q in lists] == [["3"]] * 3
                assert ["continue" in q for q in lists] == [False, True, True]
                assert r.stats.lists == 1

    run(scenario())


def test_watch_starts_from_the_list_version_with_bookmarks_and_a_random_timeout() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("a", "10.96.0.1"))
            list_version = str(srv.store.rv)
            async with reflecting(srv) as (_, events):
                await eventually(lambda: srv.open_watches == 1)
                q = watch_queries(srv)[0]
                assert q["resourceVersion"] == [list_version]
                assert q["allowWatchBookmarks"] == ["true"]
                assert 30 <= int(q["timeoutSeconds"][0]) < 60  # [min, 2·min)
                srv.store.create(service("b", "10.96.0.2"))
                await eventually(lambda: "b" in updates(events, EventType.ADDED))

    run(scenario())


def test_clean_end_resumes_from_the_tracked_version_without_relisting() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("a", "10.96.0.1"))
            async with reflecting(srv) as (r, events):
                srv.store.create(service("b", "10.96.0.2"))
                await eventually(lambda: "b" in updates(events, EventType.ADDED))
                version = r.resource_version
                srv.end_watches()
                await eventually(lambda: r.stats.watches == 2 and srv.open_watches == 1)
                assert watch_queries(srv)[1]["resourceVersion"] == [version]
                srv.store.create(service("c", "10.96.0.3"))
                await eventually(lambda: "c" in updates(events, EventType.ADDED))
                assert r.stats.lists == 1 and r.stats.failures == 0

    run(scenario())


def test_a_stream_ending_at_its_timeout_is_resumed() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv, \
                reflecting(srv, options=replace(FAST, min_watch_timeout=0.5)) as (r, events):
            await eventually(lambda: r.stats.watches >= 2)
            assert r.stats.lists == 1 and r.stats.failures == 0
            srv.store.create(service("late", "10.96.0.9"))
            await eventually(lambda: "late" in updates(events, EventType.ADDED))

    run(scenario())


def test_dropped_connection_backs_off_and_resumes_without_relisting() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv, reflecting(srv) as (r, events):
            await eventually(lambda: srv.open_watches == 1)
            srv.drop_connections()
            srv.store.create(service("during", "10.96.0.5"))
            await eventually(lambda: "during" in updates(events, EventType.ADDED))
            assert r.stats.failures >= 1 and r.stats.last_delay > 0
            assert r.stats.lists == 1

    run(scenario())


def test_server_errors_back_off_exponentially() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv, reflecting(srv) as (r, _events):
            await eventually(lambda: srv.open_watches == 1)
            srv.fail_next(3, 503)
            srv.end_watches()
            await eventually(lambda: srv.open_watches == 1 and r.stats.watches == 5)
            assert r.stats.failures == 3 and r.stats.lists == 1
            assert [a.code for a in srv.requests("watch", "services")][-4:] == [503, 503, 503, 200]

    run(scenario())


def test_a_silent_dead_stream_is_noticed_by_the_read_timeout() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            opts = replace(FAST, min_watch_timeout=0.5, read_timeout_margin=0.2)
            async with reflecting(srv, options=opts) as (r, events):
                await eventually(lambda: srv.open_watches == 1)
                srv.stall_watches()
                await eventually(lambda: r.stats.failures >= 1, what="the read timeout")
                srv.store.create(service("after", "10.96.0.7"))
                await eventually(lambda: "after" in updates(events, EventType.ADDED))
                assert r.stats.lists == 1

    run(scenario())


@pytest.mark.parametrize("compact, expired_as_event, relists", [
    (False, True, False),  # down and back: the history still covers the gap, resume without relisting
    (True, True, True),    # compacted while down: an ERROR event with code 410 -> relist
    (True, False, True),   # compacted while down: a plain HTTP 410 -> relist
])
def test_server_down_and_back_converges(compact: bool, expired_as_event: bool, relists: bool) -> None:
    async def scenario() -> None:
        async with TestApiServer(expired_as_event=expired_as_event) as srv:
            for name, ip in (("keep", "10.96.0.1"), ("gone", "10.96.0.2"), ("change", "10.96.0.3")):
                srv.store.create(service(name, ip))
            async with reflecting(srv) as (r, events):
                await eventually(lambda: srv.open_watches == 1)
                events.clear()
                await srv.stop()
                srv.store.delete(SERVICES, "default", "gone")
                srv.store.apply(service("change", "10.96.0.3", port=81))
                srv.store.create(service("new", "10.96.0.4"))
                if compact:
                    srv.compact()
                await srv.start()
                await eventually(lambda: "new" in updates(events, EventType.ADDED))
                assert updates(events, EventType.DELETED) == ["gone"]
                assert updates(events, EventType.MODIFIED) == ["change"]
                assert "keep" not in updates(events, EventType.ADDED)  # unchanged objects are not re-sent
                assert sorted(k.name for k in r.snapshot()) == ["change", "keep", "new"]
                assert r.stats.lists == (2 if relists else 1)
                assert r.stats.gone == (1 if relists else 0)
                assert r.stats.failures >= 1

    run(scenario())


def test_bookmarks_move_the_version_so_a_resume_after_compaction_needs_no_relist() -> None:
    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.05) as srv:
            srv.store.create(service("a", "10.96.0.1"))
            async with reflecting(srv) as (r, _):
                srv.store.create(node("node-a"))  # another resource moves the global version
                await eventually(lambda: r.resource_version == str(srv.store.rv), what="a bookmark")
                srv.compact()
                srv.end_watches()
                await eventually(lambda: r.stats.watches == 2 and srv.open_watches == 1)
                assert r.stats.lists == 1 and r.stats.gone == 0

    run(scenario())


def test_an_invalid_object_is_reported_and_its_last_good_version_kept() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("web", "10.96.0.1"))
            async with reflecting(srv) as (r, events):
                good = r.snapshot()[ObjectRef("default", "web")]
                srv.store.apply(service("web", "10.96.0.1", port=70000))
                await eventually(lambda: any(isinstance(e, Invalid) for e in events))
                bad = next(e for e in events if isinstance(e, Invalid))
                assert bad.problem.field == "spec.ports[0].port" and bad.key == ObjectRef("default", "web")
                assert r.snapshot()[ObjectRef("default", "web")] == good
                # a relist while it is still invalid keeps the good version too (no DELETED)
                srv.store.create(node("node-a"))  # moves the version past the reflector's
                srv.compact()
                srv.end_watches()
                await eventually(lambda: r.stats.lists == 2)
                assert r.snapshot()[ObjectRef("default", "web")] == good
                assert updates(events, EventType.DELETED) == []
                srv.store.apply(service("web", "10.96.0.1", port=8080))
                await eventually(lambda: updates(events, EventType.MODIFIED) == ["web"])
                fixed = r.snapshot()[ObjectRef("default", "web")][0]
                assert isinstance(fixed, Service) and fixed.ports[0].port == 8080

    run(scenario())


def test_an_invalid_new_object_is_left_out_and_the_rest_still_arrives() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            srv.store.create(service("bad", "not-an-ip"))
            srv.store.create(service("ok", "10.96.0.2"))
            async with reflecting(srv) as (r, events):
                assert [k.name for k in r.snapshot()] == ["ok"]
                assert [e.key.name for e in events if isinstance(e, Invalid)] == ["bad"]
                srv.store.delete(SERVICES, "default", "bad")
                await eventually(lambda: updates(events, EventType.DELETED) == ["bad"])

    run(scenario())


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    policy = BackoffPolicy(initial=0.8, cap=30.0, factor=2.0, jitter=1.0)
    rng = random.Random(7)
    for failures, base in ((1, 0.8), (2, 1.6), (3, 3.2), (6, 25.6), (7, 30.0), (50, 30.0)):
        for _ in range(20):
            assert base <= policy.delay(failures, rng) <= 2 * base
    assert BackoffPolicy(jitter=0.0).delay(3, rng) == pytest.approx(3.2)


def test_run_is_cancellable_and_the_constructor_does_no_io() -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            async with reflecting(srv) as (_r, _):
                await eventually(lambda: srv.open_watches == 1)
            await eventually(lambda: srv.open_watches == 0)
            before = len(srv.audit)
            from netkit.sources.kube import ApiSettings, KubeSource
            from netkit.sources.store import Store
            KubeSource(ApiSettings(master=srv.url), Store())
            await asyncio.sleep(0.05)
            assert len(srv.audit) == before

    run(scenario())
