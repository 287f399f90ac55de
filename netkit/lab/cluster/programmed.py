"""Waiting until every node's daemon has programmed one change, from what its /metrics say.

`scale` and `drain` remove a pod only once no node sends it new connections: the pod is marked
terminating, the EndpointSlice controller publishes that (stamping the slice with
`endpoints.kubernetes.io/last-change-trigger-time`, the time of the Pod change), and every node must
have finished a sync that read the published slice. Two gauges of each node's daemon tell it:

- `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds` (kube-proxy's): when the daemon last
  received a change — set as it arrives, the change already in the daemon's objects;
- `netkit_sync_proxy_rules_last_snapshot_timestamp_seconds`: when the last *successful* sync read
  the objects it programmed.

A node has programmed the change once one scrape shows last queued ≥ the trigger time (the change,
or a later one, has arrived) and snapshot ≥ last queued (a finished sync read the objects after it).
Nothing here waits on a wall clock: a node that syncs within 50 ms is seen to within one 50 ms poll,
one that syncs a second later (its `minSyncPeriod`) a second later.

Why not kube-proxy's `..._last_timestamp_seconds` (when the last successful sync *ended*) against
the time the slice was published: the end of a sync says nothing about when it read its objects. A
sync that began just before the slice arrived and ended after it (a second, on a loaded machine)
looked like one that had programmed it, the pod was removed while the node still sent connections to
it, and they were refused until its next sync; and a node that synced at once, before the margin
allowed for that, was waited for until its next periodic sync (`syncPeriod`, 30 s). Its pending
change counts do not help: they say a sync has *started* with the change, not that one finished.

What this cannot tell: a change of another kind (a Node) that arrives after the trigger time while the
slice is still on its way counts as "a later change". The lab changes no Node while it scales (`drain`
cordons its node before it adds the replacements). `ready` is the decision (pure), `wait` the IO.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from netkit.lab.cluster import nodehttp

LAST_QUEUED = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
SNAPSHOT = "netkit_sync_proxy_rules_last_snapshot_timestamp_seconds"


@dataclass(frozen=True, slots=True)
class Progress:
    """A node daemon's sync progress (epoch seconds; None: not in its metrics, or no answer)."""

    last_queued: float | None = None
    snapshot: float | None = None


def parse(text: str) -> Progress:
    """A node's /metrics page → its progress."""
    return Progress(nodehttp.metric(text, LAST_QUEUED), nodehttp.metric(text, SNAPSHOT))


def ready(seen: Progress, trigger: float) -> bool:
    """Whether a node that answered `seen` has programmed the change triggered at `trigger`."""
    if seen.last_queued is None or seen.snapshot is None:
        return False
    return seen.last_queued >= trigger and seen.snapshot >= seen.last_queued


def trigger_time(text: str) -> float | None:
    """`endpoints.kubernetes.io/last-change-trigger-time` (RFC 3339) → epoch seconds."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def metrics(netns: str, metrics_port: int = 10249) -> Progress:
    try:
        return parse(nodehttp.get(netns, "127.0.0.1", metrics_port, "/metrics").body)
    except OSError:
        return Progress()


def wait(nodes: Mapping[str, str], trigger: float, timeout: float,
         scrape: Callable[[str], Progress] = metrics) -> list[str]:
    """Until every node (name → netns) has programmed the change triggered at `trigger`, or
    `timeout` seconds: the nodes that have not."""
    waiting = sorted(nodes)
    deadline = time.monotonic() + timeout
    while True:
        waiting = [name for name in waiting if not ready(scrape(nodes[name]), trigger)]
        if not waiting or time.monotonic() > deadline:
            return waiting
        time.sleep(0.05)
