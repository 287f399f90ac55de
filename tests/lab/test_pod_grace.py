"""The lab's kubelet part stops a pod's process as kubelet does: SIGTERM, then SIGKILL only after the
pod's terminationGracePeriodSeconds (30 s when unset), so a DNS pod's `lameduck 5s` completes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from netkit.lab.cluster.controlplane import Supervised, grace_period

# Exits 0 3.5 s after SIGTERM: longer than the lab's old fixed 3 s, shorter than the default grace.
DRAINS = ("import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(3.5), sys.exit(0)))\n"
          "print('ready', flush=True)\n"
          "time.sleep(600)\n")


def test_grace_period_is_the_pods_or_kubelets_default() -> None:
    assert grace_period({"spec": {"terminationGracePeriodSeconds": 5}}) == 5.0
    assert grace_period({"spec": {"terminationGracePeriodSeconds": 0}}) == 0.0
    assert grace_period({"spec": {}}) == 30.0
    assert grace_period({"spec": {"terminationGracePeriodSeconds": "5"}}) == 30.0  # not a number: the default


def test_a_draining_pod_is_stopped_after_its_drain_not_killed(netns: str, tmp_path: Path) -> None:
    log = tmp_path / "pod.log"

    async def scenario() -> int | None:
        sup = Supervised("dns-a", netns, [sys.executable, "-c", DRAINS], log, lambda: None,
                         grace=grace_period({"spec": {}}))
        sup.start()
        try:
            async with asyncio.timeout(120):  # an event wait: the handler is installed
                while not (log.exists() and "ready" in log.read_text()):
                    await asyncio.sleep(0.05)
        finally:
            await sup.stop()
        return sup.last_exit

    assert asyncio.run(scenario()) == 0  # SIGKILL would be -9
