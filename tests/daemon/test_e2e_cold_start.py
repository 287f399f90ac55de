"""A cold start never writes a state missing Services the full list holds: the daemon lists in pages
(limit/continue), and every state it hands to the kernel — the first included — holds every Service of
the list, also when the continue token expires mid-list and the list starts again in one request."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from netkit.model import NodeState
from netkit.runtime.daemon import Daemon
from netkit.testing.apiserver import TestApiServer
from netkit.testing.apistore import Store

from .conftest import EVENT_TIMEOUT, FAST, endpoint_slice, node, run, service
from .e2e import config, options, stop_daemon

SERVICES = 23  # with pages of 5: four full pages and a short one
PAGE = replace(FAST, page_size=5)


class PagedStore(Store):
    """The test API server's store, counting the pages it serves; with `expire_after` it forgets its
    history once that many continued pages were served, so the next continue token gets 410."""

    def __init__(self, expire_after: int | None) -> None:
        super().__init__()
        self.pages = 0
        self.expire_after = expire_after

    def list_page(self, *args: Any, **kwargs: Any) -> Any:
        self.pages += 1
        if self.expire_after is not None and self.pages > self.expire_after:
            self.expire_after = None
            self.compact()
        return super().list_page(*args, **kwargs)


def names(state: NodeState) -> set[str]:
    return {p.name.ref.name for p in state.ports}


@pytest.mark.parametrize("expire_after", [None, 2], ids=["pages", "continue-expired"])
def test_a_cold_start_writes_no_state_missing_a_listed_service(netns: str, tmp_path: Path,
                                                               expire_after: int | None) -> None:
    store = PagedStore(expire_after)
    for i in range(SERVICES):
        store.create(service(f"svc{i}", f"10.96.1.{i + 1}"))
        store.create(endpoint_slice(f"svc{i}-1", f"svc{i}", [f"10.244.1.{i + 1}"]))
    store.create(node("node-a"))
    listed = {f"svc{i}" for i in range(SERVICES)}
    written: list[set[str]] = []

    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.5, store=store) as srv:
            kubeconfig = srv.write_kubeconfig(tmp_path / "kubeconfig")
            opts = replace(options(netns, config("nft", mode="nftables"), kubeconfig=kubeconfig),
                           reflector_options=PAGE)
            daemon = Daemon.for_mode(opts)
            real = daemon.syncer.sync

            def recorded(state: NodeState, *, full: bool) -> Any:
                written.append(names(state))
                return real(state, full=full)

            daemon.syncer.sync = recorded  # type: ignore[method-assign]
            task = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(daemon.synced.wait(), EVENT_TIMEOUT)
            finally:
                await stop_daemon(task)
            assert store.pages > SERVICES // PAGE.page_size  # the Services came in pages
            assert store.expire_after is None  # and the continue token expired when asked

    run(scenario())
    assert written, "the daemon never synced"
    assert [sorted(listed - seen) for seen in written] == [[] for _ in written]
