"""The lab's kubelet (netkit/lab/cluster/kubelet.py) on a real container of netkit's image: a
liveness probe that fails `failureThreshold` times in a row gets the container replaced, a readiness
probe that never passes leaves the pod unready, and `stop` removes the container. The counting and
back-off themselves are checked without a container."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from netkit.lab.cluster import kubelet
from netkit.lab.cluster.deploy import documents, find
from netkit.lab.cluster.pod import Host, Probe, pod_spec, podman_run_argv
from netkit.lab.cluster.podman import Podman, host_for
from tests.conftest import ROOT, netns_name
from tests.image.build import build_image


@pytest.fixture(scope="session")
def image() -> str:
    return build_image()


def test_failures_in_a_row_reach_the_threshold_and_a_success_resets_them() -> None:
    t = kubelet.Threshold(3)
    assert [t.failed(ok) for ok in (False, False, True, False, False, False, False)] == [
        False, False, False, False, False, True, True]
    assert kubelet.Threshold(0).failed(False), "a threshold below 1 is 1, as kubelet's"


def test_the_backoff_doubles_to_its_cap_and_resets_after_a_long_run() -> None:
    waits, backoff = [], kubelet.BACKOFF_FIRST
    for _ in range(7):
        backoff = kubelet.next_backoff(backoff, ran=1.0)
        waits.append(backoff)
    assert waits == [0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert kubelet.next_backoff(5.0, ran=kubelet.BACKOFF_RESET_AFTER + 1) == kubelet.BACKOFF_FIRST


def test_args_alone_keep_the_images_entrypoint() -> None:
    """deploy/dns gives only `args` (CoreDNS's -conf): the image's entrypoint runs them."""
    dep = find(list(documents(ROOT / "deploy" / "dns")), "Deployment")
    spec = pod_spec(dep, "node-a", "netkit:test")
    assert spec.command == () and spec.args == ("-conf", "/etc/coredns/Corefile")
    assert spec.readiness is not None and spec.readiness.port == 8181, "the named port readiness-probe"
    argv = podman_run_argv(spec, "c", Host("/run/netns/x", {"coredns": "/d"}, "/sa"))
    assert "--entrypoint" not in argv and argv[-3:] == ["netkit:test", "-conf", "/etc/coredns/Corefile"]


def test_a_failing_liveness_probe_replaces_the_container(image: str, netns: str, tmp_path: Path) -> None:
    podman = Podman.find()
    dead = Probe("/livez", 10256, "127.0.0.1", period=0.5, timeout=0.5, failure_threshold=2)
    ds = find(list(documents(ROOT / "deploy")), "DaemonSet")
    spec = replace(pod_spec(ds, "node-a", image), command=("sleep", "600"), args=(), mounts=(),
                   service_account="", liveness=dead, readiness=dead)
    log = tmp_path / "c.log"
    host = host_for(spec, podman, netns, {}, str(tmp_path), log_path=str(log))
    name = netns_name("netkit-test")
    readiness: list[bool] = []

    async def scenario() -> None:
        pod = kubelet.PodContainer("a", name, podman, spec, host, on_change=lambda: None,
                                   on_ready=readiness.append, grace=1)
        pod.start()
        try:
            deadline = time.monotonic() + 120
            while not (pod.restarts >= 1 and pod.pid):
                assert time.monotonic() < deadline, "not restarted after its liveness probe failed"
                await asyncio.sleep(0.2)
            assert pod.last_exit == 137, "stopped: SIGTERM, which sleep as PID 1 ignores, then SIGKILL"
            assert pod.liveness_restarts == pod.restarts, "every restart was the probe's"
        finally:
            await pod.stop(grace=1)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 180))
    finally:
        podman.remove(name)
    assert "lab: liveness probe failed 2 times in a row: container stopped, to be started again" in log.read_text()
    assert readiness == [], "never ready"
    assert not podman.run("ps", "--all", "--quiet", "--filter", f"name=^{name}$").stdout.strip()
