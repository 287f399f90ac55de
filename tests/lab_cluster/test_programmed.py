"""When `scale` and `drain` may remove a terminating pod: every node's daemon has finished a sync that
read the published slice (netkit.lab.cluster.programmed). Pure; the daemon's side is pinned in
tests/daemon/test_e2e_programmed.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from netkit.lab.cluster import lifecycle, programmed
from netkit.lab.cluster.plan import Pod
from netkit.lab.cluster.programmed import Progress
from netkit.model import IPFamily
from netkit.runtime.metrics import Metrics

T = 1_800_000_000.0  # the trigger time: when the Pod was marked terminating


def test_the_gauges_are_read_from_a_daemons_page() -> None:
    m = Metrics("iptables", (IPFamily.IPV4,), process=False)
    m.family(programmed.LAST_QUEUED, IPFamily.IPV4).set(T + 0.25)
    m.plain(programmed.SNAPSHOT).set(T + 0.5)
    assert programmed.parse(m.render().decode()) == Progress(T + 0.25, T + 0.5)
    assert programmed.parse("") == Progress()


def test_a_sync_that_read_its_objects_before_the_change_arrived_has_not_programmed_it() -> None:
    """The race that refused a connection under load: the sync ended long after the slice was
    published (kube-proxy's last-sync timestamp T + 1.0), but it read its objects at T - 0.05."""
    assert not programmed.ready(Progress(last_queued=T + 0.01, snapshot=T - 0.05), T)


def test_a_sync_that_read_after_the_change_has_programmed_it_at_once() -> None:
    """No margin and no periodic sync to wait for: a daemon that synced within 50 ms is done."""
    assert programmed.ready(Progress(last_queued=T + 0.01, snapshot=T + 0.02), T)


def test_nothing_received_since_the_trigger_is_not_programmed() -> None:
    assert not programmed.ready(Progress(last_queued=T - 2.0, snapshot=T - 1.0), T)
    assert not programmed.ready(Progress(), T)  # no answer (a daemon restarting)
    assert not programmed.ready(Progress(last_queued=T + 0.01), T)  # no successful sync yet


def test_wait_polls_every_node_until_each_has_programmed_it() -> None:
    pages: dict[str, Iterator[Progress]] = {
        "ns-1": iter([Progress(T + 0.01, T - 0.05), Progress(T + 0.01, T - 0.05), Progress(T + 0.01, T + 1.0)]),
        "ns-2": iter([Progress(T + 0.02, T + 0.03)]),
    }
    asked: list[str] = []

    def scrape(netns: str) -> Progress:
        asked.append(netns)
        return next(pages[netns])

    assert programmed.wait({"node-1": "ns-1", "node-2": "ns-2"}, T, timeout=30, scrape=scrape) == []
    assert asked == ["ns-1", "ns-2", "ns-1", "ns-1"]  # a node that is done is not asked again


def test_wait_names_the_nodes_that_never_programmed_it() -> None:
    assert programmed.wait({"node-1": "ns-1"}, T, timeout=0, scrape=lambda _: Progress(T - 1, T - 1)) == ["node-1"]


def test_trigger_times_are_the_controllers_rfc3339() -> None:
    assert programmed.trigger_time("2027-01-15T08:00:00.250000Z") == 1_800_000_000.25
    assert programmed.trigger_time("") is None


class _SlicesNeverUpdated:
    """An API whose EndpointSlice still lists the pod as serving, with an old trigger time."""

    def list(self, resource: str) -> list[dict[str, object]]:
        assert resource == "endpointslices"
        return [{"metadata": {"namespace": "default", "annotations": {
                    "endpoints.kubernetes.io/last-change-trigger-time": "2020-01-01T00:00:00Z"}},
                 "endpoints": [{"targetRef": {"name": "web-1"}, "conditions": {"terminating": False}}]}]


def test_a_slice_never_published_as_terminating_is_waited_for_from_now_and_said(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Past the deadline the slice's trigger time is older than the change: using it would let every
    node count as done at once. The wait then runs from now, and the lab says why it waited."""
    pod = Pod("web-1", "default", "web", "node-1", 1, 11, "nkc-test-node-1")
    before = time.time()
    trigger = lifecycle.wait_published_terminating(_SlicesNeverUpdated(), (pod,), 0.1)  # type: ignore[arg-type]
    assert trigger is not None and trigger >= before
    assert "netkit: warning: lab cluster: the EndpointSlice controller had not published default/web-1" \
        in capsys.readouterr().err
